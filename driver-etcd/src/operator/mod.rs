//! `tidemark-mirror operator`: turns each EtcdMirror into a managed agent.
//!
//! For every EtcdMirror in the watched namespaces it keeps one agent Deployment (with its
//! ServiceAccount, Role and RoleBinding) as `tidemark_api::workload` builds them, applied with
//! server-side apply and owned by the EtcdMirror, so Kubernetes' garbage collector removes the
//! agent with it. Only the replica holding the leader Lease acts (`lease.rs`). The agents do
//! the mirroring and write the EtcdMirror's status; the operator never reads a Secret or
//! touches etcd. See docs/design.md, "The operator".

pub mod lease;
pub mod reconcile;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_api::workload::{AgentSettings, MANAGED_BY};
use tidemark_api::EtcdMirror;
use tidemark_runtime::AdminHandle;
use tokio::sync::watch;

pub use lease::{Elector, LeaseConfig};

/// Least time between two identical Events (same object, reason and note).
const EVENT_INTERVAL: Duration = Duration::from_secs(300);

/// How the operator runs.
#[derive(Debug, Clone)]
pub struct OperatorOptions {
    /// Namespaces to watch; empty watches all.
    pub namespaces: Vec<String>,
    /// What shapes every agent.
    pub settings: AgentSettings,
    /// The leader election.
    pub lease: LeaseConfig,
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The EtcdMirror CRD is not installed, or the operator may not list EtcdMirrors.
    #[error("cannot list EtcdMirrors{scope}: {source}; install the CRD (kubectl apply -f deploy/crd.yaml) and the operator's RBAC (deploy/rbac.yaml)")]
    Crd {
        scope: String,
        #[source]
        source: kube::Error,
    },
    /// The lease could not be renewed in time: another replica may act now.
    #[error("lost the leader lease ({0}); exiting so that a restart rejoins the election")]
    LeadershipLost(String),
}

#[derive(Debug, Default, Clone)]
struct Metrics {
    leader: Gauge,
    mirrors: Gauge,
    reconciles: Family<Vec<(String, String)>, Counter>,
}

/// What a reconcile found for one EtcdMirror (for `/statusz`).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MirrorState {
    #[serde(skip_serializing_if = "Option::is_none")]
    deployment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

#[derive(Debug, Default)]
struct Counts {
    applied: u64,
    failed: u64,
    invalid: u64,
}

/// What every reconcile shares.
pub struct Shared {
    client: kube::Client,
    settings: AgentSettings,
    recorder: Recorder,
    admin: AdminHandle,
    metrics: Metrics,
    state: Mutex<(BTreeMap<String, MirrorState>, Counts)>,
    /// (object uid, reason, note) -> when last published.
    published: Mutex<BTreeMap<(String, String, String), tokio::time::Instant>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these only leaves counters half-updated; keep serving.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Records the outcome of a reconcile of `key` and publishes the status.
    async fn note(
        &self,
        key: &str,
        problem: Option<String>,
        applied: Option<(String, String)>,
        count: impl FnOnce(&mut Counts),
    ) {
        let result = if problem.is_some() {
            "invalid"
        } else {
            "applied"
        };
        self.metrics
            .reconciles
            .get_or_create(&vec![("result".into(), result.into())])
            .inc();
        {
            let mut g = lock(&self.state);
            let entry = g.0.entry(key.to_string()).or_default();
            entry.problem = problem;
            if let Some((d, h)) = applied {
                entry.deployment = Some(d);
                entry.spec_hash = Some(h);
            }
            count(&mut g.1);
        }
        self.publish();
    }

    fn failed(&self, error: String) {
        self.metrics
            .reconciles
            .get_or_create(&vec![("result".into(), "failed".into())])
            .inc();
        lock(&self.state).1.failed += 1;
        self.admin.update_status(|s| s["lastError"] = json!(error));
    }

    fn forget(&self, key: &str) {
        lock(&self.state).0.remove(key);
        self.publish();
    }

    fn publish(&self) {
        let (mirrors, counts) = {
            let g = lock(&self.state);
            (
                serde_json::to_value(&g.0).unwrap_or_default(),
                json!({"applied": g.1.applied, "failed": g.1.failed, "invalid": g.1.invalid}),
            )
        };
        self.metrics
            .mirrors
            .set(mirrors.as_object().map_or(0, |m| m.len() as i64));
        self.admin.update_status(|s| {
            s["mirrors"] = mirrors;
            s["reconciles"] = counts;
        });
    }

    /// Publishes an Event on `m`, at most once per [`EVENT_INTERVAL`] for the same reason
    /// and note (kube-runtime's recorder folds repeats into one series as well).
    async fn event(&self, m: &EtcdMirror, warning: bool, reason: &str, note: String) {
        let uid = m.uid().unwrap_or_default();
        let key = (uid, reason.to_string(), note.clone());
        let now = tokio::time::Instant::now();
        {
            let mut published = lock(&self.published);
            published.retain(|_, t| now.duration_since(*t) < EVENT_INTERVAL);
            if published.contains_key(&key) {
                return;
            }
            published.insert(key, now);
        }
        let ev = reconcile::operator_event(warning, reason, note);
        if let Err(e) = self.recorder.publish(&ev, &m.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }
}

/// Checks that EtcdMirrors can be listed where the operator watches.
async fn check_crd(client: &kube::Client, namespaces: &[String]) -> Result<(), OperatorError> {
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|n| Some(n.as_str())).collect()
    };
    for ns in scopes {
        let api: Api<EtcdMirror> = match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        api.list(&ListParams::default().limit(1))
            .await
            .map_err(|source| OperatorError::Crd {
                scope: ns.map(|n| format!(" in namespace {n}")).unwrap_or_default(),
                source,
            })?;
    }
    Ok(())
}

/// Runs until `stop` fires (then releases the lease and returns `Ok`) or the lease is lost.
pub async fn run(
    client: kube::Client,
    opts: OperatorOptions,
    admin: AdminHandle,
    mut stop: watch::Receiver<bool>,
) -> Result<(), OperatorError> {
    let metrics = Metrics::default();
    admin.with_registry(|r| {
        r.register(
            "tidemark_operator_leader",
            "1 while this replica holds the leader lease and acts",
            metrics.leader.clone(),
        );
        r.register(
            "tidemark_operator_mirrors",
            "EtcdMirrors with a reconciled agent",
            metrics.mirrors.clone(),
        );
        r.register(
            "tidemark_operator_reconciles",
            "Reconciles by result (applied, invalid, failed)",
            metrics.reconciles.clone(),
        );
    });
    admin.set_status(json!({
        "role": "starting",
        "identity": opts.lease.identity,
        "lease": format!("{}/{}", opts.lease.namespace, opts.lease.name),
        "namespaces": if opts.namespaces.is_empty() { json!("all") } else { json!(opts.namespaces) },
        "agentImage": opts.settings.image,
        "mirrors": {},
    }));
    // Liveness for /healthz while the operator waits or acts.
    let beat = admin.clone();
    let heartbeat = tokio::spawn(async move {
        loop {
            beat.heartbeat();
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    let result = lead(client, opts, &admin, &metrics, &mut stop).await;
    heartbeat.abort();
    result
}

async fn lead(
    client: kube::Client,
    opts: OperatorOptions,
    admin: &AdminHandle,
    metrics: &Metrics,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), OperatorError> {
    check_crd(&client, &opts.namespaces).await?;
    admin.set_ready();
    admin.update_status(|s| s["role"] = json!("standby"));
    let mut elector = Elector::new(client.clone(), opts.lease.clone());
    if lease::acquire(&mut elector, stop).await.is_none() {
        return Ok(());
    }
    tracing::info!(identity = %opts.lease.identity, "holding the leader lease; reconciling");
    admin.update_status(|s| s["role"] = json!("leader"));
    metrics.leader.set(1);
    let shared = Arc::new(Shared {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "tidemark-operator".into(),
                instance: Some(opts.lease.identity.clone()),
            },
        ),
        client: client.clone(),
        settings: opts.settings.clone(),
        admin: admin.clone(),
        metrics: metrics.clone(),
        state: Mutex::new((BTreeMap::new(), Counts::default())),
        published: Mutex::new(BTreeMap::new()),
    });
    let (halt_tx, halt_rx) = watch::channel(false);
    let scopes: Vec<Option<String>> = if opts.namespaces.is_empty() {
        vec![None]
    } else {
        opts.namespaces.iter().cloned().map(Some).collect()
    };
    let owned =
        watcher::Config::default().labels(&format!("app.kubernetes.io/managed-by={MANAGED_BY}"));
    let controllers = scopes.into_iter().map(|ns| {
        let (mirrors, deployments): (Api<EtcdMirror>, Api<Deployment>) = match &ns {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        let mut halt = halt_rx.clone();
        Controller::new(mirrors, watcher::Config::default())
            .owns(deployments, owned.clone())
            .graceful_shutdown_on(async move {
                let _ = halt.wait_for(|h| *h).await;
            })
            .run(
                reconcile::reconcile,
                reconcile::error_policy,
                shared.clone(),
            )
            .for_each(|r| async move {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "controller stream");
                }
            })
    });
    let all = futures::future::join_all(controllers);
    tokio::pin!(all);
    let outcome = tokio::select! {
        r = lease::hold(&mut elector, stop) => r,
        _ = &mut all => Ok(()),
    };
    // Stop acting before anything else: after a lost lease another replica may act.
    let _ = halt_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), &mut all).await;
    metrics.leader.set(0);
    match outcome {
        Ok(()) => {
            admin.update_status(|s| s["role"] = json!("stopping"));
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "releasing the leader lease failed; a standby takes over when it expires");
            }
            Ok(())
        }
        Err(why) => Err(OperatorError::LeadershipLost(why)),
    }
}

/// `<pod name>-<8 random hex digits>`: unique per process, so a restarted pod never mistakes
/// its predecessor's lease for its own.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tidemark-operator".into());
    let suffix = getrandom::u32().unwrap_or(0);
    format!("{host}-{suffix:08x}")
}
