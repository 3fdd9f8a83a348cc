//! The inventory controller: watches Compositions, and for each one runs the core's recovery
//! decision first and then the recorder, executing their commands with kube.
//!
//! Reconciles are serial (so never two at once for one Composition) and rate limited per
//! Composition with jitter; failures back off exponentially. Kubernetes Events on the
//! Composition report recordings, invalid inventories and lineage conflicts, once per
//! synthesis and reason.

use crate::drive::{drive, wall_timestamp, Clock};
use crate::exec::Executor;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Event, EventType, Recorder as EventRecorder, Reporter};
use kube::runtime::watcher;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;
use tidemark_core::inventory::{
    Mode, Outcome, Policy, Reason, RecordOutcome, Recorder, RecorderConfig, Recovery,
    RecoveryConfig, RecoveryOutcome, Scope, DEFAULT_SECRET_NAMESPACE,
};
use tidemark_core::rng::Rng;

/// Controller settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Namespace of the Compositions watched.
    pub namespace: String,
    /// Equality label selector (`k=v,k2=v2`) restricting the Compositions watched.
    pub match_labels: BTreeMap<String, String>,
    /// Namespace of the inventory Secrets in the downstream cluster.
    pub secret_namespace: String,
    /// `Apply` (default, as Eno recovers automatically) or `Plan`.
    pub recovery_mode: Mode,
    /// Least time between two reconciles of one Composition.
    pub min_interval: Duration,
    /// Relative jitter added to every delay (0.2 = up to +20 %).
    pub jitter: f64,
    /// Cap of the failure backoff.
    pub max_backoff: Duration,
    /// Every Composition is reconciled again after this long even without changes.
    pub resync: Duration,
    /// Bound of one Kubernetes request.
    pub request_timeout: Duration,
    /// Namespace checks, protected kinds and the deletion budget of recovery.
    pub policy: Policy,
    /// Longest wait for one deletion group's objects to be gone before the next starts.
    pub group_wait: Duration,
    /// How often a waiting group's objects are read again.
    pub wait_poll: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace: "default".into(),
            match_labels: BTreeMap::new(),
            secret_namespace: DEFAULT_SECRET_NAMESPACE.into(),
            recovery_mode: Mode::Apply,
            min_interval: Duration::from_secs(1),
            jitter: 0.2,
            max_backoff: Duration::from_secs(300),
            resync: Duration::from_secs(600),
            request_timeout: Duration::from_secs(30),
            policy: Policy::default(),
            group_wait: Duration::from_secs(300),
            wait_poll: Duration::from_secs(2),
        }
    }
}

impl ControllerConfig {
    /// The label selector string for the watch, if any.
    pub fn label_selector(&self) -> Option<String> {
        (!self.match_labels.is_empty()).then(|| {
            self.match_labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }

    fn scope(&self) -> Scope {
        Scope {
            namespace: Some(self.namespace.clone()),
            match_labels: self.match_labels.clone(),
        }
    }

    /// Recovery settings derived from this configuration.
    pub fn recovery(&self, mode: Mode) -> RecoveryConfig {
        RecoveryConfig {
            enabled: true,
            scope: self.scope(),
            secret_namespace: self.secret_namespace.clone(),
            mode,
            request_timeout: self.request_timeout,
            policy: self.policy.clone(),
            group_wait: self.group_wait,
            wait_poll: self.wait_poll,
            ..RecoveryConfig::default()
        }
    }

    /// Recorder settings derived from this configuration.
    pub fn recorder(&self) -> RecorderConfig {
        RecorderConfig {
            enabled: true,
            scope: self.scope(),
            secret_namespace: self.secret_namespace.clone(),
            request_timeout: self.request_timeout,
            allow_cross_namespace_lineage: self.policy.allow_cross_namespace_lineage,
            ..RecorderConfig::default()
        }
    }
}

/// Counters for `/statusz`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStats {
    /// Reconciles run.
    pub reconciles: u64,
    /// Recovery decisions written.
    pub decisions: u64,
    /// Snapshots recorded (with at least one Secret written).
    pub recorded: u64,
    /// Reconciles that failed and were requeued.
    pub failures: u64,
    /// Compositions known from the watch.
    pub compositions: usize,
}

/// What one reconcile concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Nothing more until the Composition changes.
    Done,
    /// Try again after a backoff.
    Retry(String),
}

/// The controller. Holds per-Composition rate-limit state and the event memo.
pub struct Controller {
    cfg: ControllerConfig,
    exec: Executor,
    events: EventRecorder,
    clock: Clock,
    rng: Rng,
    /// When each Composition may next be reconciled, and its current failure streak.
    limits: BTreeMap<(String, String), (tokio::time::Instant, u32)>,
    /// (namespace, name, synthesis UUID, reason) of events already published.
    emitted: BTreeSet<(String, String, String, String)>,
    stats: ControllerStats,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn composition_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::eno::GROUP, crate::eno::VERSION, "Composition"),
        "compositions",
    )
}

impl Controller {
    /// A controller executing with `exec`; Events go to the Eno cluster.
    pub fn new(cfg: ControllerConfig, exec: Executor) -> Controller {
        let reporter = Reporter {
            controller: "tidemark-inventory".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = EventRecorder::new(exec.clusters().eno.clone(), reporter);
        let seed = wall_timestamp().unix_nanos as u64 ^ u64::from(std::process::id());
        Controller {
            cfg,
            exec,
            events,
            clock: Clock::new(),
            rng: Rng::new(seed),
            limits: BTreeMap::new(),
            emitted: BTreeSet::new(),
            stats: ControllerStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &ControllerStats {
        &self.stats
    }

    fn jittered(&mut self, d: Duration) -> Duration {
        d.mul_f64(1.0 + self.cfg.jitter.max(0.0) * self.rng.unit())
    }

    /// Watches and reconciles until `shutdown` resolves. `on_tick` sees the counters after
    /// every reconcile and on every watch event (heartbeat, status).
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
        mut on_tick: impl FnMut(&ControllerStats),
    ) -> ControllerStats {
        let mut stream = watcher::watcher(self.composition_api(), self.watch_config()).boxed();
        tokio::pin!(shutdown);
        let mut queue: BTreeMap<(String, String), tokio::time::Instant> = BTreeMap::new();
        let mut known: BTreeSet<(String, String)> = BTreeSet::new();
        let mut resync = tokio::time::interval(self.cfg.resync);
        resync.tick().await;
        // Liveness for /healthz even when nothing changes.
        let mut heartbeat = tokio::time::interval(Duration::from_secs(10));
        loop {
            let next_due = queue.values().min().copied();
            tokio::select! {
                _ = &mut shutdown => break,
                ev = stream.next() => {
                    match ev {
                        Some(Ok(ev)) => {
                            let (objs, deleted) = match ev {
                                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (vec![o], false),
                                watcher::Event::Delete(o) => (vec![o], true),
                                watcher::Event::Init | watcher::Event::InitDone => (vec![], false),
                            };
                            for o in objs {
                                let key = (
                                    o.metadata.namespace.clone().unwrap_or_default(),
                                    o.metadata.name.clone().unwrap_or_default(),
                                );
                                if deleted {
                                    known.remove(&key);
                                    queue.remove(&key);
                                    self.limits.remove(&key);
                                } else {
                                    known.insert(key.clone());
                                    let at = self.not_before(&key);
                                    queue.entry(key).or_insert(at);
                                }
                            }
                            self.stats.compositions = known.len();
                        }
                        Some(Err(e)) => tracing::warn!(error = %e, "composition watch error; retrying"),
                        None => {
                            tracing::warn!("composition watch ended; restarting");
                            stream = watcher::watcher(self.composition_api(), self.watch_config()).boxed();
                        }
                    }
                    on_tick(&self.stats);
                }
                _ = heartbeat.tick() => on_tick(&self.stats),
                _ = resync.tick() => {
                    for key in &known {
                        let at = self.not_before(key);
                        queue.entry(key.clone()).or_insert(at);
                    }
                }
                _ = sleep_until_opt(next_due) => {
                    let now = tokio::time::Instant::now();
                    let Some(key) = queue.iter().filter(|(_, at)| **at <= now).min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) else { continue };
                    queue.remove(&key);
                    let result = self.reconcile(&key.0, &key.1).await;
                    let streak = match &result {
                        Reconciled::Done => 0,
                        Reconciled::Retry(why) => {
                            self.stats.failures += 1;
                            tracing::info!(composition = %format!("{}/{}", key.0, key.1), why, "requeued");
                            self.limits.get(&key).map_or(0, |l| l.1) + 1
                        }
                    };
                    let delay = if streak == 0 {
                        self.jittered(self.cfg.min_interval)
                    } else {
                        let exp = self.cfg.min_interval.saturating_mul(1u32 << streak.min(16));
                        let d = exp.min(self.cfg.max_backoff);
                        self.jittered(d)
                    };
                    let at = tokio::time::Instant::now() + delay;
                    self.limits.insert(key.clone(), (at, streak));
                    if streak > 0 {
                        queue.insert(key, at);
                    }
                    on_tick(&self.stats);
                }
            }
        }
        self.stats
    }

    fn composition_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.exec.clusters().eno.clone(),
            &self.cfg.namespace,
            &composition_resource(),
        )
    }

    fn watch_config(&self) -> watcher::Config {
        match self.cfg.label_selector() {
            Some(sel) => watcher::Config::default().labels(&sel),
            None => watcher::Config::default(),
        }
    }

    fn not_before(&self, key: &(String, String)) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        self.limits.get(key).map_or(now, |(at, _)| (*at).max(now))
    }

    /// One reconcile of `namespace/name`: the recovery decision for the current synthesis
    /// (if not made yet), then recording.
    pub async fn reconcile(&mut self, namespace: &str, name: &str) -> Reconciled {
        self.stats.reconciles += 1;
        let t = self.cfg.request_timeout;
        let mut recovery = Recovery::new(
            self.cfg.recovery(self.cfg.recovery_mode),
            namespace,
            name,
            wall_timestamp(),
        );
        let outcome = drive(&mut recovery, &self.exec, &self.clock, t).await;
        let uuid = recovery.status().synthesis_uuid.clone().unwrap_or_default();
        match outcome {
            RecoveryOutcome::Decided {
                decision,
                plan,
                written,
            } => {
                if written {
                    self.stats.decisions += 1;
                }
                tracing::info!(
                    composition = %format!("{namespace}/{name}"),
                    synthesis = %decision.synthesis_uuid,
                    outcome = decision.outcome.name(),
                    tombstones = decision.outcome.tombstones(),
                    "recovery decision"
                );
                match decision.outcome {
                    Outcome::InventoryInvalid(Reason::LineageConflict) => {
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Warning,
                            "LineageConflict",
                            format!(
                                "another live Composition shares inventory lineage {}; nothing recovered or recorded",
                                plan.lineage
                            ),
                        )
                        .await;
                    }
                    Outcome::InventoryInvalid(reason) => {
                        let detail = match &plan.selection {
                            Some(tidemark_core::inventory::Selection::Invalid(i)) => {
                                i.detail.clone()
                            }
                            _ => String::new(),
                        };
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Warning,
                            "InventoryInvalid",
                            format!("{reason}: {detail}; no tombstones derived"),
                        )
                        .await;
                    }
                    Outcome::Applied(n) if n > 0 => {
                        let deleted = plan.results.len();
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Normal,
                            "Recovered",
                            format!(
                                "{n} tombstones from lineage {} handled ({deleted} results)",
                                plan.lineage
                            ),
                        )
                        .await;
                    }
                    Outcome::Held {
                        deletions, limit, ..
                    } => {
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Warning,
                            "RecoveryHeld",
                            format!(
                                "recovery would delete {deletions} resources, more than the limit of {limit}; nothing deleted. \
                                 Check `tidemark-inventory recover --composition {namespace}/{name}`, then release it with \
                                 `--apply --allow-deletions {deletions}` or record nothing with `--skip`"
                            ),
                        )
                        .await;
                        return Reconciled::Done;
                    }
                    Outcome::Planned(n) => {
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Normal,
                            "RecoveryPlanned",
                            format!("{n} tombstones planned; run `tidemark-inventory recover --composition {namespace}/{name} --apply` or `--skip`"),
                        )
                        .await;
                        return Reconciled::Done;
                    }
                    _ => {}
                }
            }
            RecoveryOutcome::AlreadyDecided(_) => {}
            RecoveryOutcome::NotEligible(why) => {
                tracing::debug!(composition = %format!("{namespace}/{name}"), %why, "not eligible");
                return Reconciled::Done;
            }
            RecoveryOutcome::CurrentSlicesUnusable { detail } => {
                return Reconciled::Retry(format!("current slices unusable: {detail}"))
            }
            RecoveryOutcome::CompositionChanged { detail } => {
                return Reconciled::Retry(format!("composition changed: {detail}"))
            }
            RecoveryOutcome::Failed { detail, .. } => {
                return Reconciled::Retry(format!("recovery failed: {detail}"))
            }
        }

        let mut recorder = Recorder::new(self.cfg.recorder(), namespace, name);
        let outcome = drive(&mut recorder, &self.exec, &self.clock, t).await;
        let uuid = recorder.status().synthesis_uuid.clone().unwrap_or(uuid);
        match outcome {
            RecordOutcome::Recorded {
                lineage,
                synthesis_uuid,
                chunks,
                entries,
                created,
                updated,
                unchanged,
            } => {
                tracing::info!(
                    composition = %format!("{namespace}/{name}"),
                    %lineage, synthesis = %synthesis_uuid, chunks, entries, created, updated, unchanged,
                    "inventory recorded"
                );
                if created + updated > 0 {
                    self.stats.recorded += 1;
                }
                self.publish(
                    namespace,
                    name,
                    &synthesis_uuid,
                    EventType::Normal,
                    "InventoryRecorded",
                    format!("synthesis {synthesis_uuid}: {entries} entries in {chunks} Secret(s) of lineage {lineage}"),
                )
                .await;
                Reconciled::Done
            }
            RecordOutcome::LineageConflict { lineage, others } => {
                self.publish(
                    namespace,
                    name,
                    &uuid,
                    EventType::Warning,
                    "LineageConflict",
                    format!(
                        "inventory lineage {lineage} is shared with {}; nothing recorded",
                        others.join(", ")
                    ),
                )
                .await;
                Reconciled::Done
            }
            RecordOutcome::NotEligible(why) => {
                tracing::debug!(composition = %format!("{namespace}/{name}"), %why, "not recording");
                Reconciled::Done
            }
            RecordOutcome::SlicesUnusable { detail } => {
                Reconciled::Retry(format!("slices unusable: {detail}"))
            }
            RecordOutcome::CompositionChanged { detail } => {
                Reconciled::Retry(format!("composition changed: {detail}"))
            }
            RecordOutcome::Failed {
                detail, retryable, ..
            } => {
                if retryable {
                    Reconciled::Retry(format!("recording failed: {detail}"))
                } else {
                    tracing::warn!(composition = %format!("{namespace}/{name}"), detail, "recording failed");
                    Reconciled::Done
                }
            }
            RecordOutcome::TooLarge { detail }
            | RecordOutcome::NewerSnapshot { detail, .. }
            | RecordOutcome::Blocked { detail, .. } => {
                tracing::warn!(composition = %format!("{namespace}/{name}"), detail, "not recorded");
                Reconciled::Done
            }
        }
    }

    /// Publishes an Event on the Composition once per (synthesis, reason).
    async fn publish(
        &mut self,
        namespace: &str,
        name: &str,
        uuid: &str,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let key = (
            namespace.to_string(),
            name.to_string(),
            uuid.to_string(),
            reason.to_string(),
        );
        if !self.emitted.insert(key) {
            return;
        }
        let reference = ObjectReference {
            api_version: Some("eno.azure.io/v1".into()),
            kind: Some("Composition".into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        };
        let mut note = note;
        note.truncate(1000);
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.events.publish(&ev, &reference).await {
            tracing::warn!(error = %e, reason, "publishing event failed");
        }
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending::<()>().await,
    }
}
