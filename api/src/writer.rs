//! Writes `EtcdMirror.status` through the status subresource, rate-limited on the caller's
//! clock, so the agent can publish as often as it likes without flooding the apiserver.

use crate::{EtcdMirror, EtcdMirrorStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};
use std::time::Duration;
use tidemark_core::Instant;

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The EtcdMirror no longer exists; the agent should stop.
    #[error("EtcdMirror {0} not found")]
    NotFound(String),
    /// Any other apiserver or transport error; worth retrying at the next publish.
    #[error("patching status of EtcdMirror {name}: {source}")]
    Kube {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The status did not serialise (cannot happen for the derived types).
    #[error("serialising status: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What [`StatusWriter::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The status was patched.
    Written,
    /// Identical to the last written status; nothing sent.
    Unchanged,
    /// Too soon after the last write; publish again later.
    RateLimited,
}

/// Optional status fields, sent as explicit `null` when unset so a merge patch clears a
/// value from an earlier write (a cleared `lastError`, a finished `backoff`).
pub const CLEARABLE_FIELDS: &[&str] = &[
    "observedGeneration",
    "drainTargetRevision",
    "lastError",
    "backoff",
    "lastCounts",
    "lastReconcileTime",
    "lastDrift",
    "cutover",
];

/// Patches one EtcdMirror's status at most every `min_interval` of caller time.
#[derive(Debug)]
pub struct StatusWriter {
    api: Api<EtcdMirror>,
    name: String,
    min_interval: Duration,
    last_write: Option<Instant>,
    last_sent: Option<Value>,
    params: PatchParams,
}

impl StatusWriter {
    /// A writer for `name` in the namespace of `api` (use `Api::namespaced`).
    pub fn new(api: Api<EtcdMirror>, name: impl Into<String>, min_interval: Duration) -> Self {
        StatusWriter {
            api,
            name: name.into(),
            min_interval,
            last_write: None,
            last_sent: None,
            params: PatchParams::default(),
        }
    }

    /// Whether a write at `now` would pass the rate limit.
    pub fn due(&self, now: Instant) -> bool {
        match self.last_write {
            None => true,
            Some(last) => now >= last.saturating_add(self.min_interval),
        }
    }

    /// Writes `status` unless it is unchanged or the last write was less than
    /// `min_interval` ago. A rate-limited status is not queued: publish the newest one again.
    pub async fn publish(
        &mut self,
        now: Instant,
        status: &EtcdMirrorStatus,
    ) -> Result<Published, WriteError> {
        self.write(now, status, false).await
    }

    /// Writes `status` now, ignoring the rate limit (final statuses: drained, failed).
    pub async fn publish_now(
        &mut self,
        now: Instant,
        status: &EtcdMirrorStatus,
    ) -> Result<Published, WriteError> {
        self.write(now, status, true).await
    }

    async fn write(
        &mut self,
        now: Instant,
        status: &EtcdMirrorStatus,
        force: bool,
    ) -> Result<Published, WriteError> {
        let body = status_patch_body(status)?;
        if self.last_sent.as_ref() == Some(&body) {
            return Ok(Published::Unchanged);
        }
        if !force && !self.due(now) {
            return Ok(Published::RateLimited);
        }
        let patch = json!({ "status": body });
        match self
            .api
            .patch_status(&self.name, &self.params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.last_write = Some(now);
                self.last_sent = Some(body);
                Ok(Published::Written)
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                Err(WriteError::NotFound(self.name.clone()))
            }
            Err(source) => Err(WriteError::Kube {
                name: self.name.clone(),
                source,
            }),
        }
    }
}

/// The status as a merge-patch body: unset optional fields become `null`.
pub fn status_patch_body(status: &EtcdMirrorStatus) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(status)?;
    if let Value::Object(m) = &mut v {
        for f in CLEARABLE_FIELDS {
            m.entry(*f).or_insert(Value::Null);
        }
    }
    Ok(v)
}

/// `NAMESPACE/NAME`, as `tidemark-mirror run --resource` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRef {
    pub namespace: String,
    pub name: String,
}

/// A `--resource` value that is not `NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not NAMESPACE/NAME (for example \"etcd-system/main-mirror\")")]
pub struct BadResourceRef(pub String);

impl std::str::FromStr for ResourceRef {
    type Err = BadResourceRef;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(ResourceRef {
                    namespace: ns.into(),
                    name: name.into(),
                })
            }
            _ => Err(BadResourceRef(s.into())),
        }
    }
}

impl std::fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design
    use super::*;
    use crate::status::{Backoff, Counts, Cutover};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn clearable_fields_are_exactly_the_optional_ones() {
        let t = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let full = EtcdMirrorStatus {
            observed_generation: Some(1),
            drain_target_revision: Some(1),
            last_error: Some("x".into()),
            backoff: Some(Backoff {
                kind: "transient".into(),
                attempt: 1,
                until: t.clone(),
            }),
            last_counts: Some(Counts::default()),
            last_reconcile_time: Some(t.clone()),
            last_drift: Some(Counts::default()),
            cutover: Some(Cutover {
                drain_target_revision: 1,
                drained_revision: 1,
                verified_time: t,
                counts: Counts::default(),
                leased_key_count: 0,
            }),
            ..Default::default()
        };
        let full = serde_json::to_value(full).unwrap();
        let empty = serde_json::to_value(EtcdMirrorStatus::default()).unwrap();
        let mut optional: Vec<_> = full
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| !empty.as_object().unwrap().contains_key(*k))
            .cloned()
            .collect();
        let mut expected: Vec<_> = CLEARABLE_FIELDS.iter().map(|s| s.to_string()).collect();
        optional.sort();
        expected.sort();
        assert_eq!(optional, expected);
        let body = status_patch_body(&EtcdMirrorStatus::default()).unwrap();
        assert_eq!(body["lastError"], Value::Null);
        assert!(body.as_object().unwrap().contains_key("cutover"));
    }

    #[test]
    fn resource_ref_parses_namespace_and_name() {
        let r: ResourceRef = "etcd-system/main".parse().unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str()),
            ("etcd-system", "main")
        );
        assert_eq!(r.to_string(), "etcd-system/main");
        for bad in ["main", "/main", "ns/", "a/b/c", ""] {
            assert!(bad.parse::<ResourceRef>().is_err(), "{bad}");
        }
    }
}
