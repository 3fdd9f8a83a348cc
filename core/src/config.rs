//! `MirrorConfig`: the EtcdMirror spec, as a config file or a custom resource carries it.
//!
//! Field names are the EtcdMirror API's (camelCase). Connection details (endpoints, TLS,
//! auth) are plain data here so one validated structure describes the whole link; the
//! driver acts on them, the core never does.

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
    /// Most fenced Txns in flight at once (scan and tail writes; each builds on the one
    /// before it). 1 sends one Txn per round trip. More helps a distant target, but etcd
    /// runs concurrent requests in no useful order and early Txns are sent again, which
    /// makes a nearby target slower: measured in README "Benchmarks".
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
    1
}
fn default_page_key_limit() -> u32 {
    // etcd 3.4/3.5 count the rest of the range on every limited read, so small pages make a
    // large scan quadratic; pages still shrink to fit `pageBytes`.
    10_000
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

/// Longest string the spec accepts anywhere (URLs, prefixes, file paths, names); the CRD's
/// `maxLength` on every string.
pub const MAX_STRING_LENGTH: usize = 4096;
/// Most endpoints per side; the CRD's `maxItems` of `endpointList`.
pub const MAX_ENDPOINTS: usize = 64;
/// Most `sync.excludePrefixes`; the CRD's `maxItems`.
pub const MAX_EXCLUDE_PREFIXES: usize = 1024;
/// Largest `sync.pageBytes`: a page is held in memory, and read ahead four times.
pub const MAX_PAGE_BYTES: u64 = 64 << 20;
/// Largest `sync.watchBufferBytes`: the buffer is held in memory during genesis.
pub const MAX_WATCH_BUFFER_BYTES: u64 = 1 << 30;

/// The default fence key suffix, placed after `target.prefix + destPrefix`.
pub const DEFAULT_CHECKPOINT_SUFFIX: &str = "\u{0}tidemark-checkpoint";

/// The oldest etcd `--max-request-bytes` default (1.5 MiB); a Txn budget above it would be
/// rejected by a default-configured target.
pub const ETCD_DEFAULT_MAX_REQUEST_BYTES: u64 = 1536 * 1024;

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

    /// Checks the whole config and returns every problem at once.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut p = Vec::new();
        long_strings(self, &mut p);
        let mut bad = |field: &str, problem: String| {
            p.push(ConfigProblem {
                field: field.into(),
                problem,
            })
        };
        for (side, ep) in [("source", &self.source), ("target", &self.target)] {
            validate_endpoint(side, ep, &mut bad);
        }
        if self.target.prefix.is_empty() && self.sync.dest_prefix.is_empty() {
            bad(
                "target.prefix",
                "is empty, so the mirror would own the whole target keyspace; set a prefix such as \"/mirror/\"".into(),
            );
        }
        if let Some(l) = &self.link {
            if l.is_empty() || l.len() > 253 {
                bad(
                    "link",
                    "must be 1 to 253 characters; omit it to derive one from the prefixes".into(),
                );
            }
        }
        if self.initial_sync.start_revision < 0 {
            bad(
                "initialSync.startRevision",
                "must be 0 (scan) or a positive source revision".into(),
            );
        }
        if self.initial_sync.start_revision > 0
            && self.initial_sync.mode == InitialSyncMode::RequireEmpty
        {
            bad(
                "initialSync.startRevision",
                "requires initialSync.mode Overwrite or OverwriteAndPrune: RequireEmpty always scans".into(),
            );
        }
        if self.initial_sync.abandon_watermark.is_some_and(|w| w < 1) {
            bad(
                "initialSync.abandonWatermark",
                "must be the positive fence watermark that SourceHistoryMismatch reported; omit it otherwise".into(),
            );
        }
        let s = &self.sync;
        if s.max_txn_ops < 2 {
            bad("sync.maxTxnOps", format!("is {}; it must be at least 2 (one op plus the fence put), and at most the target's --max-txn-ops (default 128)", s.max_txn_ops));
        }
        if s.max_txn_ops > 100_000 {
            bad(
                "sync.maxTxnOps",
                format!(
                    "is {}; etcd rejects Txns above its --max-txn-ops (default 128)",
                    s.max_txn_ops
                ),
            );
        }
        if s.txn_flush_bytes < 1024 || s.txn_flush_bytes > ETCD_DEFAULT_MAX_REQUEST_BYTES * 64 {
            bad("sync.txnFlushBytes", format!("is {}; use 1KiB..96MiB and keep it below the target's --max-request-bytes (default 1.5MiB)", s.txn_flush_bytes));
        }
        if s.max_txns_in_flight == 0 || s.max_txns_in_flight > 64 {
            bad(
                "sync.maxTxnsInFlight",
                format!("is {}; use 1..64", s.max_txns_in_flight),
            );
        }
        if s.page_key_limit == 0 || s.page_key_limit > 100_000 {
            bad(
                "sync.pageKeyLimit",
                format!("is {}; use 1..100000", s.page_key_limit),
            );
        }
        if s.page_bytes < 1024 || s.page_bytes > MAX_PAGE_BYTES {
            bad(
                "sync.pageBytes",
                format!(
                    "is {}; use 1024..{MAX_PAGE_BYTES} (64MiB): pages are held in memory",
                    s.page_bytes
                ),
            );
        }
        if s.watch_buffer_bytes < 64 * 1024 {
            bad(
                "sync.watchBufferBytes",
                format!(
                    "is {}; use at least 64KiB or genesis restarts forever on a busy source",
                    s.watch_buffer_bytes
                ),
            );
        }
        if s.watch_buffer_bytes > MAX_WATCH_BUFFER_BYTES {
            bad(
                "sync.watchBufferBytes",
                format!(
                    "is {}; use at most {MAX_WATCH_BUFFER_BYTES} (1GiB): the buffer is held in memory",
                    s.watch_buffer_bytes
                ),
            );
        }
        if s.exclude_prefixes.len() > MAX_EXCLUDE_PREFIXES {
            bad(
                "sync.excludePrefixes",
                format!(
                    "has {} entries; at most {MAX_EXCLUDE_PREFIXES} are accepted",
                    s.exclude_prefixes.len()
                ),
            );
        }
        if s.request_timeout < Duration::from_millis(100) {
            bad("sync.requestTimeout", "must be at least 100ms".into());
        }
        let b = &s.reconnect_backoff;
        if b.initial_delay.is_zero() {
            bad(
                "sync.reconnectBackoff.initialDelay",
                "must be positive, e.g. \"1s\"".into(),
            );
        }
        if b.max_delay < b.initial_delay {
            bad(
                "sync.reconnectBackoff.maxDelay",
                "must be at least initialDelay".into(),
            );
        }
        if s.progress_interval < Duration::from_secs(1) {
            bad("sync.progressInterval", "must be at least 1s".into());
        }
        if s.resync_loop_threshold == 0 {
            bad("sync.resyncLoopThreshold", "must be at least 1".into());
        }
        if s.quota_probe_interval < Duration::from_secs(1) {
            bad("sync.quotaProbeInterval", "must be at least 1s".into());
        }
        for (i, ex) in s.exclude_prefixes.iter().enumerate() {
            if ex.is_empty() {
                bad(
                    &format!("sync.excludePrefixes[{i}]"),
                    "is empty, which would exclude everything; remove it".into(),
                );
            }
        }
        if self.reconciliation.enabled && self.reconciliation.interval < Duration::from_secs(1) {
            bad(
                "reconciliation.interval",
                "must be at least 1s when reconciliation is enabled".into(),
            );
        }
        let base = self.target_base();
        let ck = self.checkpoint_key();
        if !ck.starts_with(&base) || ck.len() == base.len() {
            bad(
                "checkpoint.key",
                format!(
                    "must start with target.prefix + sync.destPrefix ({:?}) and be longer than it",
                    String::from_utf8_lossy(&base)
                ),
            );
        } else if !ck[base.len()..].contains(&0) {
            bad(
                "checkpoint.key",
                "must contain a \\0 byte after the target range base, so it can never collide with a mirrored key".into(),
            );
        }
        if self.source.endpoint_list == self.target.endpoint_list
            && !self.source.endpoint_list.is_empty()
            && ranges_overlap(self.source.prefix.as_bytes(), &base)
        {
            bad(
                "target.prefix",
                "source and target are the same endpoints and the ranges overlap (DirectionConflict): the mirror would copy its own writes".into(),
            );
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(p))
        }
    }
}

/// Checks one endpoint URL: `http://` or `https://`, a host, an optional numeric port and
/// nothing else. Returns the scheme, or the problem. The message never repeats a URL that
/// carries credentials, so a password cannot reach a log through it.
fn endpoint_url(full: &str) -> Result<&'static str, String> {
    if full.contains('@') {
        return Err(
            "contains credentials (user:password@); remove them from the URL and use \
                    auth.username with auth.passwordFile (or auth.secretRef)"
                .into(),
        );
    }
    let url = shown(full);
    let url = url.as_str();
    let (scheme, rest) = match full.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        _ => {
            return Err(format!(
                "{url:?} is not an http:// or https:// URL with a host and port"
            ))
        }
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"/?#\\".contains(&b))
    {
        return Err(format!(
            "{url:?} must be scheme://host:port with no path, query, fragment or whitespace"
        ));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err(format!("{url:?} has an unclosed IPv6 bracket"));
            };
            // Pure text parsing of the address (no lookup, no IO): the core stays IO-free.
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("{url:?} has an invalid IPv6 address"));
            }
            if !after.is_empty() {
                port_of(url, after.strip_prefix(':').unwrap_or(after))?;
            }
            return Ok(scheme);
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => {
                port_of(url, port)?;
                host
            }
            None => authority,
        },
    };
    if host.is_empty() || host.contains(':') {
        return Err(format!("{url:?} has no valid host"));
    }
    Ok(scheme)
}

fn port_of(url: &str, port: &str) -> Result<(), String> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("{url:?} has an invalid port (use 1..65535)")),
    }
}

/// A URL for a message: at most 100 characters of it.
fn shown(url: &str) -> String {
    match url.char_indices().nth(100) {
        Some((cut, _)) => format!("{}...", &url[..cut]),
        None => url.to_string(),
    }
}

/// Every string in the config, at its spec path, no longer than [`MAX_STRING_LENGTH`].
fn long_strings(c: &MirrorConfig, out: &mut Vec<ConfigProblem>) {
    fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<ConfigProblem>) {
        match v {
            serde_json::Value::String(s) if s.len() > MAX_STRING_LENGTH => {
                out.push(ConfigProblem {
                    field: path.to_string(),
                    problem: format!(
                        "is {} bytes long; at most {MAX_STRING_LENGTH} are accepted",
                        s.len()
                    ),
                });
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            serde_json::Value::Object(m) => {
                for (k, item) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(item, &p, out);
                }
            }
            _ => {}
        }
    }
    // A config of plain strings, numbers and lists always serialises; if it ever did not,
    // the other checks still run.
    if let Ok(v) = serde_json::to_value(c) {
        walk(&v, "", out);
    }
}

/// Two prefixes overlap when one is a prefix of the other.
pub fn ranges_overlap(a: &[u8], b: &[u8]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn validate_endpoint(side: &str, ep: &EndpointSpec, bad: &mut impl FnMut(&str, String)) {
    match (ep.endpoint_list.is_empty(), ep.service_ref.is_some()) {
        (true, false) => bad(
            &format!("{side}.endpointList"),
            "is empty; list at least one URL such as \"http://127.0.0.1:2379\" (or set serviceRef)"
                .into(),
        ),
        (false, true) => bad(
            &format!("{side}.serviceRef"),
            "set exactly one of endpointList or serviceRef".into(),
        ),
        _ => {}
    }
    if ep.endpoint_list.len() > MAX_ENDPOINTS {
        bad(
            &format!("{side}.endpointList"),
            format!(
                "has {} entries; at most {MAX_ENDPOINTS} are accepted",
                ep.endpoint_list.len()
            ),
        );
    }
    let mut schemes = std::collections::BTreeSet::new();
    for (i, url) in ep.endpoint_list.iter().enumerate() {
        match endpoint_url(url) {
            Ok(scheme) => {
                schemes.insert(scheme);
            }
            Err(problem) => bad(&format!("{side}.endpointList[{i}]"), problem),
        }
    }
    if schemes.len() > 1 {
        bad(
            &format!("{side}.endpointList"),
            "mixes http:// and https://; use one scheme".into(),
        );
    }
    let has_tls = ep.tls.is_some();
    if schemes.contains("https") && !has_tls {
        bad(
            &format!("{side}.tls"),
            "is required for https:// endpoints (set caFile, or `tls: {}` for the system roots)"
                .into(),
        );
    }
    if schemes.contains("http") && has_tls {
        bad(
            &format!("{side}.tls"),
            "is set but the endpoints are http://; use https:// URLs or remove tls".into(),
        );
    }
    if let Some(tls) = &ep.tls {
        if tls.insecure_skip_verify && !tls.insecure_skip_verify_acknowledge_risk {
            bad(
                &format!("{side}.tls.insecureSkipVerify"),
                "requires insecureSkipVerifyAcknowledgeRisk: true; prefer caFile".into(),
            );
        }
        if tls.insecure_skip_verify && (tls.ca_file.is_some() || tls.ca_bundle_ref.is_some()) {
            bad(
                &format!("{side}.tls.insecureSkipVerify"),
                "is set together with a CA (caFile or caBundleRef), which it would silently \
                 ignore; remove insecureSkipVerify to verify against the CA"
                    .into(),
            );
        }
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            bad(
                &format!("{side}.tls"),
                "certFile and keyFile must be set together".into(),
            );
        }
        for r in [&tls.secret_ref, &tls.ca_bundle_ref].into_iter().flatten() {
            if r.name.is_empty() {
                bad(
                    &format!("{side}.tls.secretRef.name"),
                    "must not be empty".into(),
                );
            }
        }
    }
    if let Some(auth) = &ep.auth {
        if schemes.contains("http") && !auth.plaintext_acknowledge_risk {
            bad(
                &format!("{side}.auth"),
                "sends the password over plain http://, readable by anyone on the path; use \
                 https:// endpoints with tls, or set auth.plaintextAcknowledgeRisk: true"
                    .into(),
            );
        }
        if auth.username.as_deref().unwrap_or("").is_empty() && auth.secret_ref.is_none() {
            bad(
                &format!("{side}.auth.username"),
                "is required when auth is set".into(),
            );
        }
        if auth.password_file.is_none() && auth.secret_ref.is_none() {
            bad(
                &format!("{side}.auth.passwordFile"),
                "is required when auth is set (or secretRef)".into(),
            );
        }
        if let Some(r) = &auth.secret_ref {
            if r.name.is_empty() {
                bad(
                    &format!("{side}.auth.secretRef.name"),
                    "must not be empty".into(),
                );
            }
        }
    }
    if let Some(s) = &ep.service_ref {
        if s.name.is_empty() {
            bad(
                &format!("{side}.serviceRef.name"),
                "must not be empty".into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> MirrorConfig {
        let mut c = MirrorConfig::new("/app/", "/mirror/");
        c.source.endpoint_list = vec!["http://127.0.0.1:2379".into()];
        c.target.endpoint_list = vec!["http://127.0.0.1:22379".into()];
        c
    }

    /// The fields `validate` names for `c`.
    fn refused(c: &MirrorConfig) -> Vec<String> {
        match c.validate() {
            Ok(()) => Vec::new(),
            Err(ConfigErrors(p)) => p.into_iter().map(|p| p.field).collect(),
        }
    }

    #[test]
    fn sizes_and_counts_are_bounded_as_in_the_crd() {
        let mut c = valid();
        c.source.prefix = "/".repeat(MAX_STRING_LENGTH + 1);
        c.sync.exclude_prefixes = vec!["x".into(); MAX_EXCLUDE_PREFIXES + 1];
        c.target.endpoint_list = vec!["http://127.0.0.1:22379".into(); MAX_ENDPOINTS + 1];
        c.sync.page_bytes = u64::MAX;
        c.sync.watch_buffer_bytes = u64::MAX;
        let f = refused(&c);
        for want in [
            "source.prefix",
            "sync.excludePrefixes",
            "target.endpointList",
            "sync.pageBytes",
            "sync.watchBufferBytes",
        ] {
            assert!(f.iter().any(|x| x == want), "{want} not refused: {f:?}");
        }
        let mut c = valid();
        c.sync.exclude_prefixes = vec!["x".into(); MAX_EXCLUDE_PREFIXES];
        c.source.prefix = "/".repeat(MAX_STRING_LENGTH);
        c.sync.page_bytes = MAX_PAGE_BYTES;
        c.sync.watch_buffer_bytes = MAX_WATCH_BUFFER_BYTES;
        assert_eq!(
            refused(&c),
            Vec::<String>::new(),
            "the limits themselves pass"
        );
        // A long string deep in a list is named by its index.
        let mut c = valid();
        c.sync.exclude_prefixes = vec!["a".into(), "b".repeat(MAX_STRING_LENGTH + 1)];
        assert_eq!(refused(&c), vec!["sync.excludePrefixes[1]".to_string()]);
    }

    #[test]
    fn endpoint_urls_are_checked_and_credentials_never_echoed() {
        for ok in [
            "http://127.0.0.1:2379",
            "https://etcd-0.etcd:2379/",
            "http://localhost",
            "http://[::1]:2379",
        ] {
            assert!(endpoint_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://user:hunter2@127.0.0.1:2379",
            "https://hunter2@h:2379",
            "ftp://user:hunter2@h",
        ] {
            let e = endpoint_url(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("auth.username"), "{e}");
        }
        for bad in [
            "http://h:2379/v3",
            "http://h:2379?x=1",
            "http://h:0",
            "http://h:99999",
            "http://:2379",
            "http://h 1:2379",
            "http://[::1:2379",
            "unix:///run/etcd.sock",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad}");
        }
        let huge = format!("http://{}", "h".repeat(100_000));
        let mut c = valid();
        c.source.endpoint_list = vec![format!("{huge}:x")];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.len() < 2000, "messages stay short: {} bytes", e.len());
    }

    #[test]
    fn auth_needs_tls_or_an_acknowledgement() {
        let mut c = valid();
        c.target.auth = Some(AuthSpec {
            username: Some("mirror".into()),
            password_file: Some("/run/pw".into()),
            ..AuthSpec::default()
        });
        assert_eq!(refused(&c), vec!["target.auth".to_string()]);
        c.target.auth.as_mut().unwrap().plaintext_acknowledge_risk = true;
        assert_eq!(refused(&c), Vec::<String>::new());
        c.target.auth.as_mut().unwrap().plaintext_acknowledge_risk = false;
        c.target.endpoint_list = vec!["https://t:2379".into()];
        c.target.tls = Some(TlsSpec::default());
        assert_eq!(refused(&c), Vec::<String>::new());
    }

    #[test]
    fn a_ca_with_insecure_skip_verify_is_refused() {
        let mut c = valid();
        c.target.endpoint_list = vec!["https://t:2379".into()];
        c.target.tls = Some(TlsSpec {
            ca_file: Some("/etc/ca.crt".into()),
            insecure_skip_verify: true,
            insecure_skip_verify_acknowledge_risk: true,
            ..TlsSpec::default()
        });
        assert_eq!(
            refused(&c),
            vec!["target.tls.insecureSkipVerify".to_string()]
        );
        c.target.tls.as_mut().unwrap().ca_file = None;
        assert_eq!(refused(&c), Vec::<String>::new());
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
    fn validate_reports_every_problem_with_field_names() {
        let mut c = valid();
        c.sync.max_txn_ops = 1;
        c.initial_sync.start_revision = 5;
        c.target.tls = Some(TlsSpec {
            insecure_skip_verify: true,
            ..Default::default()
        });
        c.checkpoint.key = Some("/elsewhere/x".into());
        let errs = c.validate().unwrap_err().0;
        let fields: Vec<_> = errs.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "sync.maxTxnOps",
            "initialSync.startRevision",
            "target.tls",
            "target.tls.insecureSkipVerify",
            "checkpoint.key",
        ] {
            assert!(fields.contains(&f), "missing {f} in {fields:?}");
        }
    }

    #[test]
    fn direction_conflict_on_same_cluster_overlap() {
        let mut c = valid();
        c.target.endpoint_list = c.source.endpoint_list.clone();
        c.target.prefix = "/app/sub/".into();
        let errs = c.validate().unwrap_err().0;
        assert!(errs.iter().any(|p| p.problem.contains("DirectionConflict")));
        c.target.prefix = "/other/".into();
        c.validate().unwrap();
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
