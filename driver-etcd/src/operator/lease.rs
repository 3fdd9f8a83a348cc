//! Leader election on a `coordination.k8s.io/v1` Lease, so that one operator replica acts at a
//! time (docs/design.md, "The operator").
//!
//! The algorithm is the one Kubernetes' own controllers use: every write of the Lease is a
//! replace guarded by the resourceVersion that was read, so two candidates cannot both take
//! it; a holder is presumed gone once its record has not changed for `leaseDurationSeconds`
//! *as measured by this process's monotonic clock* (never by comparing the holder's
//! timestamps with ours, so clock skew between nodes cannot hand the lease over early).
//!
//! Why not a crate: the maintained ones take the Lease with server-side-apply field
//! ownership conflicts, which our conformance apiserver does not model, so their safety
//! could not be tested here; optimistic concurrency on resourceVersion is what it does model.
//!
//! Losing the lease is not a safety event for the mirrors: every agent is fenced in its own
//! target, and the operator's writes are idempotent applies of one desired state. The lease
//! stops two operator versions from flipping Deployments back and forth.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::time::Instant;

/// Timing of the election, as Kubernetes' controllers default it.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace and name of the Lease.
    pub namespace: String,
    pub name: String,
    /// This candidate (pod name and a random suffix, so a restarted pod is a new holder).
    pub identity: String,
    /// How long a holder's silence makes the lease free.
    pub duration: Duration,
    /// A leader that could not renew for this long stops acting; shorter than `duration`,
    /// so it has stopped before anyone else may take over.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry: Duration,
}

impl LeaseConfig {
    /// The defaults of Kubernetes' controller managers: 15 s, 10 s, 2 s.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// Why an election step failed; all are retried, none is fatal on its own.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("the Lease changed while we wrote it (another candidate acted first)")]
    Conflict,
    #[error("Lease {namespace}/{name}: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease (took or renewed it).
    Held,
    /// Another candidate holds it and has renewed within the lease duration.
    HeldBy(String),
}

/// One candidate's view of the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The record last read, and when (our clock) it last changed.
    observed: Option<(LeaseSpec, Instant)>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    pub fn new(client: kube::Client, config: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn kube(&self, source: kube::Error) -> LeaseError {
        match &source {
            kube::Error::Api(s) if s.code == 409 => LeaseError::Conflict,
            _ => LeaseError::Kube {
                namespace: self.config.namespace.clone(),
                name: self.config.name.clone(),
                source,
            },
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.config.duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Takes the lease if it is free or ours, renews it if ours; one read and at most one
    /// guarded write.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let me = self.config.identity.clone();
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.kube(e))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let created = self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .map_err(|e| self.kube(e))?;
            self.observe(created.spec.unwrap_or_default());
            return Ok(Attempt::Held);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(spec.clone());
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == me;
        if !holder.is_empty() && !ours {
            // A holder's silence is timed from when *we* saw its record last change, with
            // the duration it asked for.
            let asked = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.duration, Duration::from_secs);
            let seen = self
                .observed
                .as_ref()
                .map_or_else(Instant::now, |(_, t)| *t);
            if seen.elapsed() < asked {
                return Ok(Attempt::HeldBy(holder));
            }
            tracing::info!(previous = %holder, "the leader lease expired; taking it");
        }
        let mut next = spec.clone();
        next.holder_identity = Some(me);
        next.lease_duration_seconds = Some(self.duration_secs());
        next.renew_time = Some(now());
        if !ours {
            next.acquire_time = Some(now());
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(next);
        // The resourceVersion read above makes this a compare-and-swap.
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.kube(e))?;
        self.observe(written.spec.unwrap_or_default());
        Ok(Attempt::Held)
    }

    fn observe(&mut self, spec: LeaseSpec) {
        match &self.observed {
            Some((old, _)) if *old == spec => {}
            _ => self.observed = Some((spec, Instant::now())),
        }
    }

    /// Gives the lease up, if we still hold it, so a standby takes over at once instead of
    /// after the lease duration.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.kube(e))?
        else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.kube(e))?;
        Ok(())
    }
}

/// Waits until this candidate holds the lease, or `stop` fires (then `None`).
pub async fn acquire(
    elector: &mut Elector,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<()> {
    let mut last_holder = String::new();
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(Attempt::Held) => return Some(()),
            Ok(Attempt::HeldBy(h)) => {
                if h != last_holder {
                    tracing::info!(leader = %h, "standing by: another operator holds the lease");
                    last_holder = h;
                }
            }
            Err(e) => tracing::debug!(error = %e, "lease attempt failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(elector.config.retry) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}

/// Renews the lease until a renewal has failed for `renew_deadline` (returns the last
/// error) or `stop` fires (returns `Ok`).
pub async fn hold(
    elector: &mut Elector,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(elector.config.retry) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        let attempt = tokio::time::timeout(
            elector.config.renew_deadline,
            elector.try_acquire_or_renew(),
        )
        .await;
        let why = match attempt {
            Ok(Ok(Attempt::Held)) => {
                renewed = Instant::now();
                continue;
            }
            Ok(Ok(Attempt::HeldBy(h))) => return Err(format!("{h} holds the leader lease now")),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "a renewal timed out".to_string(),
        };
        if renewed.elapsed() >= elector.config.renew_deadline {
            return Err(format!(
                "could not renew the leader lease for {:?}: {why}",
                elector.config.renew_deadline
            ));
        }
        tracing::warn!(error = %why, "renewing the leader lease failed; retrying");
    }
}
