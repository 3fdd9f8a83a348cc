//! `tidemark-mirror preflight`: what will go wrong, found before it does.
//!
//! Every check reads, or sends a write that cannot apply: the permission and limit probes
//! are Txns whose compare can never hold (the fence key's version is never -1), so etcd
//! authorizes and size-checks every op of them and then runs the empty failure branch. A
//! Txn is refused as a whole when any op lacks permission or when it breaks
//! `--max-txn-ops` or `--max-request-bytes`, so the probe proves exactly what the mirror's
//! own Txns will need. Nothing here writes.
//!
//! `run` repeats the checks the core cannot make itself (permissions and limits) before
//! the mirror starts, with the same messages; the fence, RequireEmpty and source-history
//! checks are the core's own at connect, and preflight words them as the core does.

use crate::connect::{ClusterConn, ConnSettings};
use crate::error::DriverError;
use crate::paged::{PagedReader, PAGE_KEYS};
use crate::Executor;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tidemark_core::classify::{Failure, PermanentKind};
use tidemark_core::config::{
    InitialSyncMode, MirrorConfig, Mode, OversizedRevision, ETCD_DEFAULT_MAX_REQUEST_BYTES,
};
use tidemark_core::etcd::{
    Cluster, Command, Compare, CompareTarget, RangeReply, RangeRequest, Reply, SortBy, StatusReply,
    TxnOp, TxnRequest,
};
use tidemark_core::mirror::version::Version;
use tidemark_core::mirror::{Checkpoint, KeySpace, Role};

/// How bad a finding is; the process exit code is the worst one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Fine.
    Pass,
    /// The mirror runs, but something deserves attention.
    Warn,
    /// The mirror would fail, or refuse to start.
    Block,
}

impl Level {
    /// 0, 1 or 2.
    pub fn exit_code(self) -> u8 {
        match self {
            Level::Pass => 0,
            Level::Warn => 1,
            Level::Block => 2,
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// A stable name, e.g. `target.write`.
    pub check: String,
    pub level: Level,
    /// What was found, and for a warning or blocker, what to do.
    pub detail: String,
}

/// Every finding, in the order the checks ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
}

impl Report {
    fn add(&mut self, check: &str, level: Level, detail: impl Into<String>) {
        self.findings.push(Finding {
            check: check.to_string(),
            level,
            detail: detail.into(),
        });
    }

    /// The worst level found (`Pass` for an empty report).
    pub fn worst(&self) -> Level {
        self.findings
            .iter()
            .map(|f| f.level)
            .max()
            .unwrap_or(Level::Pass)
    }

    /// The blockers.
    pub fn blockers(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.level == Level::Block)
    }
}

/// Which checks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (`tidemark-mirror preflight`).
    Full,
    /// What `run` checks at start: permissions and limits only, and unreachable endpoints
    /// are not blockers (the agent retries them).
    Start,
}

/// Knobs of the full preflight.
#[derive(Debug, Clone)]
pub struct Options {
    /// Most source keys read (with values) to size the range and find its largest value.
    pub sample_keys: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sample_keys: 100_000,
        }
    }
}

/// etcd's default `--quota-backend-bytes` (2 GiB): the server does not report its quota.
const DEFAULT_QUOTA_BYTES: i64 = 2 << 30;

/// Runs the checks of `scope` for a validated config.
pub async fn check(c: &MirrorConfig, scope: Scope, opts: &Options) -> Result<Report, DriverError> {
    let mut r = Report::default();
    let exec = Executor::from_config(c)?;
    let ks = KeySpace::new(c);
    let mut probes = Vec::new();
    for (side, cluster, spec) in [
        ("source", Cluster::Source, &c.source),
        ("target", Cluster::Target, &c.target),
    ] {
        let settings = ConnSettings::from_spec(side, spec, exec.request_timeout())?;
        probes.push(endpoints(&mut r, side, cluster, &settings, scope).await);
    }
    let (Some(source), Some(target)) = (probes[0].clone(), probes[1].clone()) else {
        return Ok(r);
    };
    if source.cluster_id == target.cluster_id
        && tidemark_core::config::ranges_overlap(ks.source_prefix(), ks.target_base())
    {
        r.add(
            "direction",
            Level::Block,
            format!(
                "source and target are the same cluster ({:x}) and the ranges overlap \
                 (DirectionConflict): the mirror would copy its own writes",
                source.cluster_id
            ),
        );
    }
    let readable = read_source(&mut r, &exec, &ks).await;
    if write_target(&mut r, &exec, c, &ks).await {
        // Without write permission every probe is refused for that reason alone.
        limits(&mut r, &exec, c, &ks).await;
    }
    if scope == Scope::Start {
        return Ok(r);
    }
    let fence = fence(&mut r, &exec, c, &ks, &source).await;
    if fence.is_none() && c.initial_sync.mode == InitialSyncMode::RequireEmpty {
        require_empty(&mut r, &exec, &ks).await;
    }
    if readable {
        size(&mut r, &exec, c, &ks, &target, opts).await;
    }
    Ok(r)
}

/// Reachability, version and cluster identity of every endpoint of one side; the first
/// reachable endpoint's probe.
async fn endpoints(
    r: &mut Report,
    side: &str,
    cluster: Cluster,
    settings: &ConnSettings,
    scope: Scope,
) -> Option<StatusReply> {
    let mut first: Option<StatusReply> = None;
    let mut down = 0;
    for ep in &settings.endpoints {
        let mut one = settings.clone();
        one.endpoints = vec![ep.clone()];
        let conn = ClusterConn::new(cluster, one);
        let check = format!("{side}.endpoint {ep}");
        match conn.get().await {
            Ok(_) => {
                let Some(p) = conn.last_probe().await else {
                    continue;
                };
                let v = Version::parse(&p.version);
                let mut level = Level::Pass;
                let mut detail = format!(
                    "etcd {}, cluster {:x}, member {:x}",
                    p.version, p.cluster_id, p.member_id
                );
                if v.is_none_or(|v| v < Version::FLOOR) {
                    level = Level::Block;
                    detail.push_str("; tidemark needs etcd 3.4 or newer");
                }
                if p.is_learner {
                    level = level.max(Level::Warn);
                    detail.push_str(
                        "; a learner serves no linearizable reads or writes (LearnerEndpoint): \
                         list voting members first",
                    );
                }
                if cluster == Cluster::Source && v.is_some_and(|v| !v.progress_notify_trusted()) {
                    level = level.max(Level::Warn);
                    detail.push_str(
                        "; its watch progress notifications are not trusted (before 3.4.31 and \
                         3.5.13), so an idle range advances the watermark by reads: upgrade",
                    );
                }
                if let Some(f) = &first {
                    if f.cluster_id != p.cluster_id {
                        level = Level::Block;
                        detail.push_str(&format!(
                            "; this endpoint belongs to another cluster than the first ({:x}): \
                             list one cluster's members only",
                            f.cluster_id
                        ));
                    }
                }
                r.add(&check, level, detail);
                first.get_or_insert(p);
            }
            Err(f) => {
                down += 1;
                let level = match &f {
                    Failure::Permanent { .. } => Level::Block,
                    _ => Level::Warn,
                };
                r.add(&check, level, format!("unreachable: {f}"));
            }
        }
    }
    if first.is_none() {
        let level = match scope {
            Scope::Full => Level::Block,
            Scope::Start => Level::Warn,
        };
        r.add(
            &format!("{side}.reachable"),
            level,
            format!("none of the {down} {side} endpoints answered; nothing else was checked"),
        );
    }
    first
}

fn range(cluster: Cluster, (key, range_end): (Vec<u8>, Vec<u8>), limit: i64) -> Command {
    Command::Range(RangeRequest {
        cluster,
        key,
        range_end,
        revision: 0,
        limit,
        count_only: false,
        keys_only: false,
        sort: SortBy::Key,
    })
}

async fn run_range(exec: &Executor, cmd: Command) -> Result<RangeReply, Failure> {
    match exec.run(cmd).await? {
        Reply::Range(r) => Ok(r),
        other => Err(Failure::Transient {
            message: format!("unexpected reply to a range read: {other:?}"),
        }),
    }
}

/// A failure that says nothing about the check (the endpoint is a learner, a leader
/// election, a timeout): reported as a warning, never a blocker.
fn inconclusive(r: &mut Report, check: &str, what: &str, f: &Failure) {
    r.add(
        check,
        Level::Warn,
        format!("not proven: {what} failed with {f}; the agent retries such errors"),
    );
}

/// Whether a failure is definite (the server refused the request as such) rather than a
/// passing condition.
fn definite(f: &Failure) -> bool {
    matches!(f, Failure::Permanent { .. } | Failure::TooLarge { .. })
}

fn denied(f: &Failure) -> bool {
    matches!(
        f,
        Failure::Permanent {
            kind: PermanentKind::Auth,
            ..
        }
    )
}

async fn read_source(r: &mut Report, exec: &Executor, ks: &KeySpace) -> bool {
    let src = String::from_utf8_lossy(ks.source_prefix()).into_owned();
    // etcd authorizes a Range on its whole `[key, range_end)` before it looks at the
    // revision, and refuses a future revision before it walks a key. So a read of the whole
    // range at a revision no server has reached proves the permission without walking the
    // range under the index lock the source's writers take (a plain limited read walks
    // every key of it: about 170 ms of stalled writes per million keys, at every start).
    let mut cmd = range(Cluster::Source, ks.source_range(), 1);
    if let Command::Range(q) = &mut cmd {
        q.revision = i64::MAX;
    }
    match run_range(exec, cmd).await {
        Ok(_) | Err(Failure::FutureRevision) => {
            r.add(
                "source.read",
                Level::Pass,
                format!("read on {src:?} proven"),
            );
            true
        }
        Err(f) if denied(&f) => {
            r.add(
                "source.read",
                Level::Block,
                format!(
                    "the source user cannot read the range {src:?} ({f}); grant it: \
                     etcdctl role grant-permission ROLE --prefix=true read {src:?}"
                ),
            );
            false
        }
        Err(f) if definite(&f) => {
            r.add("source.read", Level::Block, format!("reading {src:?}: {f}"));
            false
        }
        Err(f) => {
            inconclusive(r, "source.read", &format!("reading {src:?}"), &f);
            false
        }
    }
}

/// A compare that never holds: no key has version -1.
fn never(ks: &KeySpace) -> Vec<Compare> {
    vec![Compare {
        key: ks.checkpoint_key().to_vec(),
        target: CompareTarget::Version,
        value: -1,
        bytes: Vec::new(),
    }]
}

async fn probe_txn(exec: &Executor, ks: &KeySpace, success: Vec<TxnOp>) -> Result<(), Failure> {
    let reply = exec
        .run(Command::Txn(TxnRequest {
            compares: never(ks),
            success,
            failure: Vec::new(),
        }))
        .await?;
    match reply {
        Reply::Txn(t) if !t.succeeded => Ok(()),
        other => Err(Failure::Permanent {
            kind: PermanentKind::Other,
            message: format!("a compare that cannot hold held: {other:?}"),
        }),
    }
}

/// Proves readwrite on the whole target range; true when proven.
async fn write_target(r: &mut Report, exec: &Executor, c: &MirrorConfig, ks: &KeySpace) -> bool {
    let (base, end) = ks.target_range();
    let shown = String::from_utf8_lossy(&base).into_owned();
    let ck = ks.checkpoint_key().to_vec();
    // What the mirror does in the range: put the fence (and keys), delete keys and ranges,
    // read the fence. etcd refuses a Txn whose ops touch one key twice, so the deletes
    // cover the range on both sides of the fence key.
    let ops = vec![
        TxnOp::Put {
            key: ck.clone(),
            value: Vec::new(),
        },
        TxnOp::Delete {
            key: base.clone(),
            range_end: ck.clone(),
        },
        TxnOp::Delete {
            key: [ck.as_slice(), &[0]].concat(),
            range_end: end,
        },
        TxnOp::Get { key: ck },
    ];
    match probe_txn(exec, ks, ops).await {
        Ok(()) => {
            r.add(
                "target.write",
                Level::Pass,
                format!("readwrite on {shown:?} proven by a Txn that cannot apply"),
            );
            return true;
        }
        Err(f) if denied(&f) => r.add(
            "target.write",
            Level::Block,
            format!(
                "the target user cannot write the range {shown:?} (fence key included) ({f}); \
                 grant it: etcdctl role grant-permission ROLE --prefix=true readwrite {shown:?}{}",
                if c.target.auth.is_none() {
                    " (or set target.auth)"
                } else {
                    ""
                }
            ),
        ),
        Err(f) if definite(&f) => r.add(
            "target.write",
            Level::Block,
            format!("probing {shown:?}: {f}"),
        ),
        Err(f) => inconclusive(r, "target.write", &format!("probing {shown:?}"), &f),
    }
    false
}

async fn limits(r: &mut Report, exec: &Executor, c: &MirrorConfig, ks: &KeySpace) {
    let n = c.sync.max_txn_ops as usize;
    let ops: Vec<TxnOp> = (0..n)
        .map(|i| TxnOp::Put {
            key: [ks.target_base(), format!("\u{0}preflight-{i}").as_bytes()].concat(),
            value: Vec::new(),
        })
        .collect();
    match probe_txn(exec, ks, ops).await {
        Ok(()) => r.add(
            "target.maxTxnOps",
            Level::Pass,
            format!("a Txn of sync.maxTxnOps ({n}) ops is accepted"),
        ),
        Err(f) if !definite(&f) => inconclusive(r, "target.maxTxnOps", "the probe", &f),
        Err(f) => r.add(
            "target.maxTxnOps",
            Level::Block,
            format!(
                "a Txn of sync.maxTxnOps ({n}) ops is refused ({f}); lower sync.maxTxnOps to \
                 the target's --max-txn-ops (default 128) or raise that flag"
            ),
        ),
    }
    let bytes = c.sync.txn_flush_bytes as usize;
    let ops = vec![TxnOp::Put {
        key: ks.checkpoint_key().to_vec(),
        value: vec![b'x'; bytes],
    }];
    match probe_txn(exec, ks, ops).await {
        Ok(()) => r.add(
            "target.requestBytes",
            Level::Pass,
            format!("a Txn of sync.txnFlushBytes ({bytes} bytes) is accepted"),
        ),
        Err(f) if !definite(&f) => inconclusive(r, "target.requestBytes", "the probe", &f),
        Err(f) => r.add(
            "target.requestBytes",
            Level::Block,
            format!(
                "a Txn of sync.txnFlushBytes ({bytes} bytes) is refused ({f}); lower \
                 sync.txnFlushBytes below the target's --max-request-bytes (default 1.5MiB) \
                 or raise that flag"
            ),
        ),
    }
}

async fn fence(
    r: &mut Report,
    exec: &Executor,
    c: &MirrorConfig,
    ks: &KeySpace,
    source: &StatusReply,
) -> Option<Checkpoint> {
    let key = ks.checkpoint_key().to_vec();
    let reply = match run_range(exec, range(Cluster::Target, (key, Vec::new()), 1)).await {
        Ok(reply) => reply,
        Err(f) => {
            r.add("fence", Level::Block, format!("reading the fence: {f}"));
            return None;
        }
    };
    let Some(kv) = reply.kvs.first() else {
        r.add(
            "fence",
            Level::Pass,
            format!(
                "absent: the first run copies the source (initialSync.mode {:?})",
                c.initial_sync.mode
            ),
        );
        return None;
    };
    let ck = match Checkpoint::decode(&kv.value) {
        Ok(ck) => ck,
        Err(e) => {
            r.add(
                "fence",
                Level::Block,
                format!(
                    "CheckpointInvalid: the checkpoint at the fence key cannot be used ({e}); \
                     nothing was written. Inspect it with `tidemark-mirror checkpoint`, then \
                     restore or delete it"
                ),
            );
            return None;
        }
    };
    let link = c.link_id();
    if ck.link != link {
        // Worded as the core's refusal at connect (PrefixConflict).
        r.add(
            "fence",
            Level::Block,
            format!(
                "PrefixConflict: the fence key holds the checkpoint of another link ({:?}); \
                 choose another target prefix or checkpoint.key (this config's link is {link:?})",
                ck.link
            ),
        );
    } else if ck.role == Role::Primary && c.mode == Mode::Sync {
        // Worded as the core's refusal at connect (FenceLost).
        r.add(
            "fence",
            Level::Block,
            format!(
                "FenceLost: the target was cut over (fence role Primary); a mirror must never \
                 write to it again (watermark {})",
                ck.watermark
            ),
        );
    } else {
        r.add(
            "fence",
            Level::Pass,
            format!(
                "this link's fence: epoch {}, role {:?}, watermark {}",
                ck.epoch, ck.role, ck.watermark
            ),
        );
    }
    let behind = source.header_revision < ck.watermark;
    if behind && c.initial_sync.abandon_watermark != Some(ck.watermark) {
        r.add(
            "source.history",
            Level::Block,
            format!(
                "the source is at revision {} but the fence watermark is {} \
                 (SourceHistoryMismatch): the source was restored or replaced. See the README \
                 on initialSync.abandonWatermark",
                source.header_revision, ck.watermark
            ),
        );
    } else if ck.watermark > 0 {
        r.add(
            "lag",
            Level::Pass,
            format!(
                "{} revisions behind the source (source {}, watermark {})",
                (source.header_revision - ck.watermark).max(0),
                source.header_revision,
                ck.watermark
            ),
        );
    }
    Some(ck)
}

async fn require_empty(r: &mut Report, exec: &Executor, ks: &KeySpace) {
    match run_range(exec, range(Cluster::Target, ks.target_range(), 2)).await {
        Ok(reply) => {
            let holders = reply
                .kvs
                .iter()
                .filter(|kv| !ks.is_checkpoint(&kv.key))
                .count();
            if holders > 0 || reply.count > reply.kvs.len() as i64 {
                r.add(
                    "target.empty",
                    Level::Block,
                    "initialSync.mode is RequireEmpty but the target range already holds keys; \
                     nothing was written. Empty the target range, or choose Overwrite or \
                     OverwriteAndPrune",
                );
            } else {
                r.add("target.empty", Level::Pass, "the target range is empty");
            }
        }
        Err(f) => r.add(
            "target.empty",
            Level::Block,
            format!("reading the target: {f}"),
        ),
    }
}

/// Sizes the source range from a sample and compares it with the target's room.
async fn size(
    r: &mut Report,
    exec: &Executor,
    c: &MirrorConfig,
    ks: &KeySpace,
    target: &StatusReply,
    opts: &Options,
) {
    let (mut keys, mut bytes, mut largest) = (0u64, 0u64, 0usize);
    // Keys (and bytes) still present per mod revision: a lower bound on what the largest
    // source revision put into the range.
    let mut revisions: BTreeMap<i64, (u64, usize)> = BTreeMap::new();
    // Bounded pages, one snapshot (`paged.rs`): sampling never walks the rest of the range.
    let mut reader = PagedReader::new(exec, Cluster::Source, ks.source_windows(), PAGE_KEYS);
    let sampling = |f: Failure| format!("sampling the range: {f}");
    while keys < opts.sample_keys {
        let page = match reader.next_page().await {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(f) => return r.add("source.size", Level::Warn, sampling(f)),
        };
        for kv in &page {
            keys += 1;
            let n = kv.key.len() + kv.value.len();
            bytes += n as u64;
            largest = largest.max(n);
            let r = revisions.entry(kv.mod_revision).or_insert((0, 0));
            *r = (r.0 + 1, r.1 + n);
        }
    }
    // What the sample did not read is counted, in spans of about one page each.
    let mut total = keys;
    loop {
        match reader.next_count().await {
            Ok(Some(n)) => total += n,
            Ok(None) => break,
            Err(f) => return r.add("source.size", Level::Warn, sampling(f)),
        }
    }
    let total = i64::try_from(total).unwrap_or(i64::MAX);
    let estimate = if keys == 0 {
        0
    } else {
        (bytes as f64 * total as f64 / keys as f64) as i64
    };
    let sampled = if (keys as i64) < total {
        format!("{keys} of {total} keys sampled")
    } else {
        format!("{total} keys read")
    };
    r.add(
        "source.size",
        Level::Pass,
        format!(
            "about {estimate} bytes in the range ({sampled}); largest key-value {largest} bytes"
        ),
    );
    let limit = (ETCD_DEFAULT_MAX_REQUEST_BYTES as usize).min(c.sync.txn_flush_bytes as usize);
    if largest > limit {
        r.add(
            "source.largestValue",
            Level::Warn,
            format!(
                "a key-value of {largest} bytes is above sync.txnFlushBytes or the default \
                 --max-request-bytes ({limit}); it goes in a Txn of its own, so the target's \
                 --max-request-bytes must exceed it"
            ),
        );
    }
    revision_size(r, c, &revisions);
    let room = DEFAULT_QUOTA_BYTES - target.db_size;
    let level = if estimate > room {
        Level::Warn
    } else {
        Level::Pass
    };
    r.add(
        "target.quota",
        level,
        format!(
            "the target database is {} bytes; with the range it needs about {} of etcd's \
             default 2GiB quota{}",
            target.db_size,
            target.db_size + estimate,
            if level == Level::Warn {
                ": raise the target's --quota-backend-bytes, or compact and defragment it"
            } else {
                ""
            }
        ),
    );
}

/// The largest source revision seen in the sample against what one Txn may carry: it is
/// split across Txns (the default) or, with `oversizedRevision: Fail`, stops the mirror.
fn revision_size(r: &mut Report, c: &MirrorConfig, revisions: &BTreeMap<i64, (u64, usize)>) {
    let Some((&rev, &(ops, bytes))) = revisions.iter().max_by_key(|(_, (ops, _))| *ops) else {
        return;
    };
    let max_ops = u64::from(c.sync.max_txn_ops.saturating_sub(1));
    let max_bytes = c.sync.txn_flush_bytes as usize;
    if ops <= max_ops && bytes <= max_bytes {
        r.add(
            "source.largestRevision",
            Level::Pass,
            format!(
                "revision {rev} wrote {ops} keys ({bytes} bytes) still present; one Txn holds it"
            ),
        );
        return;
    }
    let (level, what) = match c.sync.oversized_revision {
        OversizedRevision::Split => (
            Level::Warn,
            "it will be applied across several fenced Txns (oversizedRevision: Split), not \
             atomically",
        ),
        OversizedRevision::Fail => (
            Level::Block,
            "with oversizedRevision: Fail the mirror stops there; raise sync.maxTxnOps and \
             sync.txnFlushBytes (and the target's --max-txn-ops and --max-request-bytes), or \
             use Split",
        ),
    };
    r.add(
        "source.largestRevision",
        level,
        format!(
            "revision {rev} wrote at least {ops} keys ({bytes} bytes), more than one Txn of \
             sync.maxTxnOps ({}) and sync.txnFlushBytes ({max_bytes}) holds: {what}",
            c.sync.max_txn_ops
        ),
    );
}

/// Prints a report, one line per finding.
pub fn print(r: &Report) {
    for f in &r.findings {
        let tag = match f.level {
            Level::Pass => "ok   ",
            Level::Warn => "WARN ",
            Level::Block => "BLOCK",
        };
        println!("{tag} {:<28} {}", f.check, f.detail);
    }
}

/// How long a start-time check may take before `run` gives up on it and lets the agent's
/// own retries take over.
pub const START_BUDGET: Duration = Duration::from_secs(30);
