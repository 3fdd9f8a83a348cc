//! The abstract Kubernetes operations the inventory machines ask the kube driver to run,
//! and the replies they expect. One vocabulary for the real driver and the simulator.

use super::entry::ResourceId;
use super::secret::Secret;
use super::view::{CompositionView, ObjectView, SliceView};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Names one command so its completion can be matched.
pub type CommandId = u64;

/// One Kubernetes operation. Composition/ResourceSlice operations go to the Eno (control
/// plane) cluster; Secret and resource operations to the downstream cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// GET a Composition => [`Reply::Composition`] or [`KubeError::NotFound`].
    GetComposition { namespace: String, name: String },
    /// LIST Compositions (all namespaces when `None`) => [`Reply::Compositions`]; used to
    /// detect lineage conflicts.
    ListCompositions { namespace: Option<String> },
    /// GET these ResourceSlices => [`Reply::Slices`] with the ones that exist (missing ones
    /// simply absent); any other failure is an `Err` for the whole command.
    ListResourceSlices {
        namespace: String,
        names: Vec<String>,
    },
    /// LIST Secrets with a label selector (`key=value`) => [`Reply::Secrets`].
    ListSecrets {
        namespace: String,
        label_selector: String,
    },
    /// GET a Secret => [`Reply::Secret`] or [`KubeError::NotFound`].
    GetSecret { namespace: String, name: String },
    /// CREATE => [`Reply::Secret`] (as stored); exists => [`KubeError::Conflict`].
    CreateSecret(Secret),
    /// UPDATE (PUT) with `resource_version` as precondition => [`Reply::Secret`]; stale =>
    /// [`KubeError::Conflict`].
    UpdateSecret(Secret),
    /// Set one annotation with a resourceVersion precondition (e.g. a JSON merge patch that
    /// includes `metadata.resourceVersion`) => [`Reply::Composition`] (as stored); stale =>
    /// [`KubeError::Conflict`].
    PatchCompositionAnnotation {
        namespace: String,
        name: String,
        key: String,
        value: String,
        resource_version: String,
    },
    /// GET a downstream object's metadata => [`Reply::Object`] or [`KubeError::NotFound`].
    GetResource { id: ResourceId },
    /// DELETE a downstream object (background propagation) with a UID precondition =>
    /// [`Reply::Deleted`]; gone => `NotFound`; UID changed => `Conflict`.
    DeleteResource { id: ResourceId, uid: String },
}

/// Successful results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// One Composition.
    Composition(CompositionView),
    /// A list of Compositions.
    Compositions(Vec<CompositionView>),
    /// The ResourceSlices that exist among those asked for.
    Slices(Vec<SliceView>),
    /// A list of Secrets.
    Secrets(Vec<Secret>),
    /// One Secret (read, created or updated).
    Secret(Secret),
    /// One downstream object's metadata.
    Object(ObjectView),
    /// The delete was accepted.
    Deleted,
}

/// Kubernetes API errors, classified by the driver from the HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum KubeError {
    /// 404.
    #[error("not found")]
    NotFound,
    /// 409: stale resourceVersion, already exists, or a failed UID precondition.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 422 (or 400): the server rejected the object, e.g. Secret data over 1 MiB.
    #[error("invalid: {0}")]
    Invalid(String),
    /// 410.
    #[error("gone: {0}")]
    Gone(String),
    /// 429, 5xx, timeouts, connection errors: retry later.
    #[error("transient: {0}")]
    Transient(String),
    /// 401/403.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl KubeError {
    /// Classifies an HTTP status code and message.
    pub fn from_status(code: u16, message: &str) -> KubeError {
        let m = message.to_string();
        match code {
            404 => KubeError::NotFound,
            409 => KubeError::Conflict(m),
            400 | 422 => KubeError::Invalid(m),
            410 => KubeError::Gone(m),
            401 | 403 => KubeError::Forbidden(m),
            408 | 429 | 500..=599 => KubeError::Transient(m),
            _ => KubeError::Other(format!("HTTP {code}: {m}")),
        }
    }

    /// Worth retrying the whole reconcile later (with backoff).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            KubeError::Transient(_) | KubeError::Conflict(_) | KubeError::Gone(_)
        )
    }
}

/// Everything that can happen to an inventory machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A command finished.
    Done {
        id: CommandId,
        result: Result<Reply, KubeError>,
    },
}

/// What an inventory machine wants next; `S` is its terminal outcome.
// Outputs are moved once per poll; boxing would only add an allocation per command.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output<S> {
    /// Run this command and report `Input::Done { id, .. }`.
    Command { id: CommandId, cmd: Command },
    /// Waiting for a reply; if none arrives by this time the machine gives up (poll again then).
    Timeout(Instant),
    /// Terminal; polling again returns the same.
    Stopped(S),
}

/// Both inventory machines keep core's one contract, so one driver loop (the kube driver's,
/// the simulator's) runs either; the trait calls are their inherent ones.
macro_rules! inventory_machine {
    ($machine:ty, $outcome:ty, $status:ty) => {
        impl crate::contract::Machine for $machine {
            type Input = Input;
            type Output = Output<$outcome>;
            type Status = $status;
            fn handle_input(&mut self, now: Instant, input: Input) {
                <$machine>::handle_input(self, now, input)
            }
            fn poll_output(&mut self, now: Instant) -> Self::Output {
                <$machine>::poll_output(self, now)
            }
            fn status(&self) -> &Self::Status {
                <$machine>::status(self)
            }
        }
    };
}

inventory_machine!(
    super::recorder::Recorder,
    super::recorder::RecordOutcome,
    super::recorder::RecorderStatus
);
inventory_machine!(
    super::recovery::Recovery,
    super::recovery::RecoveryOutcome,
    super::recovery::RecoveryStatus
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_http_status() {
        assert_eq!(KubeError::from_status(404, "x"), KubeError::NotFound);
        assert!(matches!(
            KubeError::from_status(409, "x"),
            KubeError::Conflict(_)
        ));
        assert!(matches!(
            KubeError::from_status(422, "x"),
            KubeError::Invalid(_)
        ));
        assert!(matches!(
            KubeError::from_status(410, "x"),
            KubeError::Gone(_)
        ));
        assert!(matches!(
            KubeError::from_status(403, "x"),
            KubeError::Forbidden(_)
        ));
        assert!(KubeError::from_status(503, "x").is_retryable());
        assert!(KubeError::from_status(429, "x").is_retryable());
        assert!(!KubeError::from_status(422, "x").is_retryable());
        assert!(matches!(
            KubeError::from_status(418, "x"),
            KubeError::Other(_)
        ));
    }
}
