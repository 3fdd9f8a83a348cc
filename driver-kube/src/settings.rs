//! The inventory controller's settings and counters, shared by the controller (the queue)
//! and the reconciler (one Composition's work).

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tidemark_core::inventory::{
    Mode, Policy, RecorderConfig, RecoveryConfig, Scope, DEFAULT_SECRET_NAMESPACE,
};

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
    /// Most reconciles of different Compositions at once (one Composition never has two).
    /// A recovery may wait minutes for a deletion group's finalizers; the others go on.
    pub concurrency: u16,
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
            concurrency: 8,
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
