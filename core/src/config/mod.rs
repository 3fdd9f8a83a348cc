//! `MirrorConfig`: the EtcdMirror spec, as a config file or a custom resource carries it.
//!
//! Field names are the EtcdMirror API's (camelCase). Connection details (endpoints, TLS,
//! auth) are plain data here so one validated structure describes the whole link; the
//! driver acts on them, the core never does.

mod endpoint;
mod limits;
mod validate;

pub use limits::{
    DEFAULT_CHECKPOINT_SUFFIX, ETCD_DEFAULT_MAX_REQUEST_BYTES, MAX_ENDPOINTS, MAX_EXCLUDE_PREFIXES,
    MAX_PAGE_BYTES, MAX_STRING_LENGTH, MAX_WATCH_BUFFER_BYTES,
};
pub use validate::ranges_overlap;

use crate::duration;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What the agent is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Mode {
    /// Replicate continuously.
    #[default]
    Sync,
    /// Replicate until caught up, verify, flip the fence to Primary, stop.
    Drain,
}

/// How genesis treats a target range that already holds keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum InitialSyncMode {
    /// Refuse unless the target range holds nothing but our fence.
    #[default]
    RequireEmpty,
    /// Write every source key over whatever is there; leave other target keys alone.
    Overwrite,
    /// Overwrite, then delete target keys the source does not have.
    OverwriteAndPrune,
}

/// What to do with one source revision too large for a single target Txn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum OversizedRevision {
    /// Split it across several fenced Txns, recording progress in the checkpoint.
    #[default]
    Split,
    /// Stop with a permanent error (the strict, never-non-atomic behaviour).
    Fail,
}

/// A reference to a Kubernetes Service fronting etcd (EtcdMirror API).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceRef {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default)]
    pub port: u16,
}

/// A reference to a Kubernetes Secret holding credentials.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
}

/// TLS settings for one endpoint set. Files are for the config file; `secretRef` and
/// `caBundleRef` are for the custom resource.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_ref: Option<SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
    #[serde(default)]
    pub insecure_skip_verify_acknowledge_risk: bool,
}

/// Username/password auth.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A file holding the password (never the password itself in a config file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Send the password over plain `http://` anyway. Anyone on the path can read it, so
    /// without this acknowledgement auth requires `https://` endpoints.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plaintext_acknowledge_risk: bool,
}

/// One side of the link.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_list: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_ref: Option<ServiceRef>,
    /// Key prefix of the range on this side. Empty means the whole keyspace.
    #[serde(default)]
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,
}

/// `initialSync`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitialSyncSpec {
    #[serde(default)]
    pub mode: InitialSyncMode,
    /// >0 skips the scan and watches from this source revision (not with RequireEmpty).
    #[serde(default)]
    pub start_revision: i64,
    /// The way forward after `SourceHistoryMismatch`: the fence watermark the agent
    /// reported. Only when the history proof fails and the checkpoint's watermark equals
    /// this value does the agent abandon the checkpoint and copy the current source afresh
    /// with `mode`; a proven history ignores it, so a stale value never acts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandon_watermark: Option<i64>,
}

/// `sync.reconnectBackoff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackoffSpec {
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_1s", with = "duration")]
    pub initial_delay: Duration,
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_30s", with = "duration")]
    pub max_delay: Duration,
}

impl Default for BackoffSpec {
    fn default() -> Self {
        BackoffSpec {
            initial_delay: d_1s(),
            max_delay: d_30s(),
        }
    }
}

/// `sync`: batching, paging, pacing and retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncSpec {
    /// Inserted between `target.prefix` and the source-relative key.
    #[serde(default)]
    pub dest_prefix: String,
    /// Source-relative prefixes that are not mirrored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_prefixes: Vec<String>,
    /// Ops per target Txn including the fence put; must not exceed the target's
    /// `--max-txn-ops` (etcd default 128).
    #[cfg_attr(feature = "schema", schemars(range(min = 2, max = 100_000)))]
    #[serde(default = "default_max_txn_ops")]
    pub max_txn_ops: u32,
    /// Flush a batch before its payload exceeds this many bytes.
    #[cfg_attr(feature = "schema", schemars(range(min = 1024, max = 100_663_296)))]
    #[serde(default = "default_txn_flush_bytes")]
    pub txn_flush_bytes: u64,
    /// Most fenced Txns in flight at once (genesis pages and tail writes), and the target
    /// connections they take turns on (at most 16). 1 sends one Txn per round trip.
    /// Genesis pages commute; tail writes chain, and since etcd runs requests that arrive
    /// together in no useful order, chained sends are spaced apart once a Txn arrives before
    /// its predecessor (docs/design.md, "Pipelined commits").
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 64)))]
    #[serde(default = "default_max_txns_in_flight")]
    pub max_txns_in_flight: u32,
    /// Upper bound on keys per scan page; pages adapt below it by bytes.
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 100_000)))]
    #[serde(default = "default_page_key_limit")]
    pub page_key_limit: u32,
    /// Target bytes per scan page.
    #[cfg_attr(feature = "schema", schemars(range(min = 1024, max = 67_108_864)))]
    #[serde(default = "default_page_bytes")]
    pub page_bytes: u64,
    /// Bound on watch events buffered during genesis; overflow restarts genesis.
    #[cfg_attr(feature = "schema", schemars(range(min = 65_536, max = 1_073_741_824)))]
    #[serde(default = "default_watch_buffer_bytes")]
    pub watch_buffer_bytes: u64,
    /// Target ops per second; 0 means unpaced.
    #[serde(default)]
    pub max_ops_per_second: u32,
    /// Percent of the source's time that a genesis's reads (scan pages, key counts) may
    /// keep it busy: after each read the mirror waits in proportion to the read's time
    /// less the round trip. 100 reads back to back. See docs/design.md, "Bounded scans".
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 100)))]
    #[serde(default = "default_source_read_percent")]
    pub source_read_percent: u32,
    /// Deadline for each unary RPC (never the watch).
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_10s", with = "duration")]
    pub request_timeout: Duration,
    #[serde(default)]
    pub reconnect_backoff: BackoffSpec,
    #[serde(default)]
    pub oversized_revision: OversizedRevision,
    /// How often to ask the source for a watch progress notification.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_45s", with = "duration")]
    pub progress_interval: Duration,
    /// Consecutive forced resyncs without live progress before `ResyncLoopDetected`.
    #[serde(default = "default_resync_loop_threshold")]
    pub resync_loop_threshold: u32,
    /// How often to probe a target parked on NOSPACE.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_1m", with = "duration")]
    pub quota_probe_interval: Duration,
    /// Lag (seconds) above which `ReplicationLagExceeded` is raised.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_1m", with = "duration")]
    pub max_lag: Duration,
}

impl Default for SyncSpec {
    fn default() -> Self {
        SyncSpec {
            dest_prefix: String::new(),
            exclude_prefixes: Vec::new(),
            max_txn_ops: default_max_txn_ops(),
            txn_flush_bytes: default_txn_flush_bytes(),
            max_txns_in_flight: default_max_txns_in_flight(),
            page_key_limit: default_page_key_limit(),
            page_bytes: default_page_bytes(),
            watch_buffer_bytes: default_watch_buffer_bytes(),
            max_ops_per_second: 0,
            source_read_percent: default_source_read_percent(),
            request_timeout: d_10s(),
            reconnect_backoff: BackoffSpec::default(),
            oversized_revision: OversizedRevision::default(),
            progress_interval: d_45s(),
            resync_loop_threshold: default_resync_loop_threshold(),
            quota_probe_interval: d_1m(),
            max_lag: d_1m(),
        }
    }
}

/// `checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Full target key of the fence. Default: `target.prefix + destPrefix + "\0tidemark-checkpoint"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `reconciliation`: the periodic diff-and-repair pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReconciliationSpec {
    #[serde(default)]
    pub enabled: bool,
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    #[serde(default = "d_10m", with = "duration")]
    pub interval: Duration,
    /// Delete target keys the source does not have (otherwise only report them).
    #[serde(default)]
    pub delete_orphans: bool,
}

impl Default for ReconciliationSpec {
    fn default() -> Self {
        ReconciliationSpec {
            enabled: false,
            interval: d_10m(),
            delete_orphans: false,
        }
    }
}

/// The whole EtcdMirror spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorConfig {
    /// Identity of this link (the EtcdMirror's UID). Default: derived from the prefixes,
    /// so a restarted agent with the same config is the same link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default)]
    pub mode: Mode,
    pub source: EndpointSpec,
    pub target: EndpointSpec,
    #[serde(default)]
    pub initial_sync: InitialSyncSpec,
    #[serde(default)]
    pub sync: SyncSpec,
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    #[serde(default)]
    pub reconciliation: ReconciliationSpec,
}

fn d_1s() -> Duration {
    Duration::from_secs(1)
}
fn d_10s() -> Duration {
    Duration::from_secs(10)
}
fn d_30s() -> Duration {
    Duration::from_secs(30)
}
fn d_45s() -> Duration {
    Duration::from_secs(45)
}
fn d_1m() -> Duration {
    Duration::from_secs(60)
}
fn d_10m() -> Duration {
    Duration::from_secs(600)
}
fn default_max_txn_ops() -> u32 {
    128
}
fn default_txn_flush_bytes() -> u64 {
    1 << 20
}
fn default_max_txns_in_flight() -> u32 {
    16
}
fn default_page_key_limit() -> u32 {
    // Also the keys one bounded count read walks under the source's index lock; scan
    // pages still shrink to fit `pageBytes`.
    10_000
}
fn default_source_read_percent() -> u32 {
    100
}
fn default_page_bytes() -> u64 {
    2 << 20
}
fn default_watch_buffer_bytes() -> u64 {
    32 << 20
}
fn default_resync_loop_threshold() -> u32 {
    3
}

/// One validation problem: the field path, what is wrong, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigProblem {
    pub field: String,
    pub problem: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// Every problem found in a config, so an operator fixes them in one go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid mirror configuration:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigProblem>);

impl MirrorConfig {
    /// A config for `source.prefix` -> `target.prefix` with every other field defaulted.
    pub fn new(source_prefix: &str, target_prefix: &str) -> Self {
        MirrorConfig {
            link: None,
            mode: Mode::Sync,
            source: EndpointSpec {
                prefix: source_prefix.into(),
                ..Default::default()
            },
            target: EndpointSpec {
                prefix: target_prefix.into(),
                ..Default::default()
            },
            initial_sync: InitialSyncSpec::default(),
            sync: SyncSpec::default(),
            checkpoint: CheckpointSpec::default(),
            reconciliation: ReconciliationSpec::default(),
        }
    }

    /// The target key range base: `target.prefix + destPrefix`.
    pub fn target_base(&self) -> Vec<u8> {
        let mut k = self.target.prefix.as_bytes().to_vec();
        k.extend_from_slice(self.sync.dest_prefix.as_bytes());
        k
    }

    /// The full fence key.
    pub fn checkpoint_key(&self) -> Vec<u8> {
        match &self.checkpoint.key {
            Some(k) => k.as_bytes().to_vec(),
            None => {
                let mut k = self.target_base();
                k.extend_from_slice(DEFAULT_CHECKPOINT_SUFFIX.as_bytes());
                k
            }
        }
    }

    /// The link identity: `link`, or a stable digest of the range definition.
    pub fn link_id(&self) -> String {
        if let Some(l) = &self.link {
            return l.clone();
        }
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            &self.source.prefix,
            &self.target.prefix,
            &self.sync.dest_prefix,
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        format!("prefix-{}", &hex::encode(h.finalize())[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config that validates: two endpoints, disjoint prefixes.
    pub(super) fn valid() -> MirrorConfig {
        let mut c = MirrorConfig::new("/app/", "/mirror/");
        c.source.endpoint_list = vec!["http://127.0.0.1:2379".into()];
        c.target.endpoint_list = vec!["http://127.0.0.1:22379".into()];
        c
    }

    /// The fields `validate` names for `c`.
    pub(super) fn refused(c: &MirrorConfig) -> Vec<String> {
        match c.validate() {
            Ok(()) => Vec::new(),
            Err(ConfigErrors(p)) => p.into_iter().map(|p| p.field).collect(),
        }
    }

    #[test]
    fn minimal_yaml_shape_parses_with_defaults() {
        let c: MirrorConfig = serde_json::from_str(
            r#"{"source":{"endpointList":["http://127.0.0.1:2379"],"prefix":"/app/"},
                "target":{"endpointList":["http://127.0.0.1:22379"],"prefix":"/mirror/"},
                "initialSync":{"mode":"RequireEmpty"},
                "sync":{"reconnectBackoff":{"initialDelay":"2s"}}}"#,
        )
        .unwrap();
        assert_eq!(c.sync.max_txn_ops, 128);
        assert_eq!(c.sync.txn_flush_bytes, 1 << 20);
        assert_eq!(
            c.sync.reconnect_backoff.initial_delay,
            Duration::from_secs(2)
        );
        assert_eq!(c.sync.reconnect_backoff.max_delay, Duration::from_secs(30));
        assert_eq!(c.sync.progress_interval, Duration::from_secs(45));
        assert_eq!(
            c.checkpoint_key(),
            b"/mirror/\0tidemark-checkpoint".to_vec()
        );
        c.validate().unwrap();
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let e = serde_json::from_str::<MirrorConfig>(
            r#"{"source":{"prefix":"/a/","endpointList":["http://x:1"]},"target":{"prefix":"/b/","endpointList":["http://y:1"]},"sync":{"maxTxnOp":5}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("maxTxnOp"), "{e}");
    }

    #[test]
    fn link_id_is_stable_and_prefix_sensitive() {
        let a = valid();
        let mut b = valid();
        assert_eq!(a.link_id(), b.link_id());
        b.sync.dest_prefix = "x/".into();
        assert_ne!(a.link_id(), b.link_id());
    }
}
