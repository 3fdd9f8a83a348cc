//! The mirror state machine.
//!
//! One agent process runs one [`Mirror`]. It claims the fence in the target, copies the
//! source range by the reflector pattern (watch first, then an unpinned scan, then replay),
//! and then tails the watch, writing whole source revisions as fenced target Txns. Every
//! decision lives here; the driver only runs the commands this emits.
//!
//! Internally the machine is a set of small flows (connect, fence, genesis, tail, park)
//! that all end in one commit pipeline: at most one fenced Txn is in flight at a time, so
//! the fence's mod revision is always known and a lost reply can be resolved by re-reading
//! the fence.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::classify::{Failure, PermanentKind};
use crate::config::{ranges_overlap, InitialSyncMode, MirrorConfig, Mode, OversizedRevision};
use crate::etcd::{
    Cluster, Command, Compare, CompareTarget, Event, EventKind, KeyValue, RangeReply, RangeRequest,
    Reply, SortBy, StatusReply, TxnOp, TxnReply, TxnRequest, WatchEvent, WatchRequest,
};
use crate::mirror::backoff::{Backoff, Pacer};
use crate::mirror::batcher::{self, Batch, Batcher, Limits, RevGroup};
use crate::mirror::checkpoint::{Checkpoint, Role, Scan, Split, VERSION};
use crate::mirror::io::{CommandId, Control, FailKind, Input, Output, StopReason};
use crate::mirror::keys::{before_end, KeySpace};
use crate::mirror::status::{BackoffState, ConditionType as C, Phase, Status};
use crate::mirror::version::Version;
use crate::rng::Rng;
use crate::time::Instant;

/// Minimum spacing of fence-only writes that advance an idle watermark.
const IDLE_ADVANCE_EVERY: Duration = Duration::from_secs(5);
/// Consecutive failed target writes before the source watch is cancelled.
const WATCH_CANCEL_AFTER_FAILURES: u32 = 3;
/// How long to wait before re-probing an untrusted source for genesis completion.
const UNTRUSTED_PROBE_EVERY: Duration = Duration::from_secs(1);
/// Bound on fence re-reads and re-claims in a row before giving up as FenceLost.
const MAX_TAKEOVERS: u32 = 3;

/// What a command in flight was for, so its reply is routed to the right flow.
#[derive(Debug, Clone)]
enum Job {
    ProbeSource,
    ProbeTarget,
    ReadFence,
    CheckEmpty,
    /// Genesis reads carry their attempt number; replies to a superseded attempt are dropped.
    ReadR0(u64),
    ScanPage(u64),
    ProbeMaxModRevision(u64),
    SweepPage(u64),
    Commit(Box<Commit>),
    /// Re-reading the fence after a commit whose outcome is unknown.
    ResolveUnknown(Box<Commit>),
    WatchOpen,
    Fire,
}

/// A fenced write in flight: what it does and the record it installs.
#[derive(Debug, Clone)]
struct Commit {
    work: Work,
    record: Checkpoint,
    bytes: Vec<u8>,
}

/// One unit of target work.
#[derive(Debug, Clone)]
enum Work {
    /// Claim or re-claim the fence (new epoch); `then` says what follows.
    Claim,
    /// A chunk of scanned keys.
    Scan {
        seq: u64,
        ops: Vec<TxnOp>,
        cursor_after: Vec<u8>,
        scanned: bool,
        leased: u64,
    },
    /// A batch of watch events.
    Tail(Batch),
    /// Deletes of keys the mark-and-sweep found unseen.
    Sweep { ops: Vec<TxnOp> },
    /// The fence alone: genesis start/finish, idle advance, quota probe.
    Fence(FenceWhy),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FenceWhy {
    /// Record `scan = {base}` for genesis attempt `seq`.
    StartGenesis {
        seq: u64,
        base: i64,
        prune: bool,
    },
    /// Clear `scan` and set the watermark proven for genesis attempt `seq`.
    FinishGenesis {
        seq: u64,
        watermark: i64,
    },
    /// Move an idle watermark to a trusted progress revision (everything up to it applied).
    IdleAdvance {
        rev: i64,
    },
    QuotaProbe,
}

impl Work {
    fn ops(&self) -> &[TxnOp] {
        match self {
            Work::Scan { ops, .. } | Work::Sweep { ops } => ops,
            Work::Tail(b) => &b.ops,
            Work::Claim | Work::Fence(_) => &[],
        }
    }
}

/// Where genesis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GenStep {
    /// Reading the source count / header (R0).
    R0,
    /// Paging through the source.
    Scanning,
    /// Scan done; applying buffered and live events until the watch is proven past Rmax.
    Replaying,
    /// Deleting unseen target keys (events are held while this runs).
    Sweeping,
    /// Writing the final record.
    Finishing,
}

#[derive(Debug, Clone)]
struct Genesis {
    /// Attempt number, so completions of a superseded attempt are not counted.
    seq: u64,
    step: GenStep,
    /// The watermark proven when replay caught up.
    final_w: i64,
    prune: bool,
    /// Highest header revision any scan page was read at.
    rmax: i64,
    window: usize,
    page_limit: u32,
    /// Scan chunks of the current page not yet committed.
    page_chunks: usize,
    page_more: bool,
    /// Events held while scanning or sweeping, with their byte size.
    held: VecDeque<Vec<Event>>,
    held_bytes: u64,
    sweep_cursor: Vec<u8>,
    sweep_window: usize,
    probe_at: Option<Instant>,
    leased: u64,
}

/// Which flow the machine is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Connecting,
    Fencing,
    Genesis,
    Tail,
    Parked,
    Stopped,
}

/// A command to re-issue at a later time (backoff).
#[derive(Debug, Clone)]
struct Retry {
    at: Instant,
    cmd: Command,
    job: Job,
}

/// The mirror state machine. See the module docs.
#[derive(Debug, Clone)]
pub struct Mirror {
    cfg: MirrorConfig,
    keys: KeySpace,
    rng: Rng,
    limits: Limits,
    holder: String,
    link: String,
    status: Status,
    stage: Stage,

    next_id: CommandId,
    out: VecDeque<Output>,
    inflight: BTreeMap<CommandId, Job>,
    retry: Option<Retry>,
    /// Target work waits until this time (backoff after a failed write).
    hold_until: Option<Instant>,
    stopped: Option<StopReason>,
    gen_seq: u64,

    src: Option<StatusReply>,
    tgt: Option<StatusReply>,
    progress_trusted: bool,

    /// Mod revision of the fence as we last wrote or read it; 0 = absent.
    fence_rev: i64,
    /// The record at `fence_rev` (what the target holds), once claimed.
    record: Option<Checkpoint>,
    /// The record read at startup, before our claim.
    found: Option<Checkpoint>,
    takeovers: u32,

    watch: Option<u64>,
    next_watch_id: u64,
    /// Every event up to this revision has been delivered on the current watch line.
    delivered: i64,
    /// The watch was cancelled for backpressure and must reopen once the queue drains.
    watch_paused: bool,

    gen: Option<Genesis>,
    batcher: Batcher,
    work: VecDeque<Work>,
    committing: bool,

    backoff: Backoff,
    throttle: Backoff,
    pacer: Pacer,
    failures_in_row: u32,
    next_progress_request: Option<Instant>,
    last_idle_advance: Option<Instant>,
    quota_probe_at: Option<Instant>,
    resume_at: Option<Instant>,
    lag_since: Option<Instant>,
    consecutive_resyncs: u32,
    shutdown: bool,
    paused: bool,
    started: bool,
}

impl Mirror {
    /// A mirror for `config`. `seed` fixes all randomness (jitter, holder nonce): the
    /// driver seeds it from the OS, the simulator from its run seed.
    pub fn new(config: MirrorConfig, seed: u64) -> Result<Mirror, crate::config::ConfigErrors> {
        config.validate()?;
        if config.mode == Mode::Drain {
            return Err(crate::config::ConfigErrors(vec![
                crate::config::ConfigProblem {
                    field: "mode".into(),
                    problem: "Drain is not supported by this build yet; use Sync".into(),
                },
            ]));
        }
        let mut rng = Rng::new(seed);
        let holder = rng.nonce_hex();
        let keys = KeySpace::new(&config);
        let link = config.link_id();
        let s = &config.sync;
        let limits = Limits::from_config(s.max_txn_ops, s.txn_flush_bytes);
        let allow_split = s.oversized_revision == OversizedRevision::Split;
        let b = &s.reconnect_backoff;
        let status = Status {
            link: link.clone(),
            holder: holder.clone(),
            ..Status::default()
        };
        Ok(Mirror {
            limits,
            holder,
            link,
            status,
            stage: Stage::Connecting,
            next_id: 1,
            out: VecDeque::new(),
            inflight: BTreeMap::new(),
            retry: None,
            hold_until: None,
            stopped: None,
            gen_seq: 0,
            src: None,
            tgt: None,
            progress_trusted: false,
            fence_rev: 0,
            record: None,
            found: None,
            takeovers: 0,
            watch: None,
            next_watch_id: 1,
            delivered: 0,
            watch_paused: false,
            gen: None,
            batcher: Batcher::new(limits, allow_split),
            work: VecDeque::new(),
            committing: false,
            backoff: Backoff::new(b.initial_delay, b.max_delay),
            throttle: Backoff::throttled(b.initial_delay, b.max_delay),
            pacer: Pacer::new(s.max_ops_per_second),
            failures_in_row: 0,
            next_progress_request: None,
            last_idle_advance: None,
            quota_probe_at: None,
            resume_at: None,
            lag_since: None,
            consecutive_resyncs: 0,
            shutdown: false,
            paused: false,
            started: false,
            keys,
            rng,
            cfg: config,
        })
    }

    /// The published status.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The key space (rewrite rules) of this link.
    pub fn keys(&self) -> &KeySpace {
        &self.keys
    }

    /// Feeds one input.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        if self.stage == Stage::Stopped {
            return;
        }
        match input {
            Input::Done { id, result } => {
                let Some(job) = self.inflight.remove(&id) else {
                    return;
                };
                self.on_done(now, job, result);
            }
            Input::Watch { watch_id, event } => {
                if self.watch == Some(watch_id) {
                    self.on_watch(now, event);
                }
            }
            Input::Control(c) => self.on_control(now, c),
        }
        self.pump(now);
        self.refresh_status(now);
    }

    /// The next output. Drain until `Timeout` or `Stopped`.
    pub fn poll_output(&mut self, now: Instant) -> Output {
        if !self.started {
            self.started = true;
            self.status.phase = Phase::Connecting;
            self.issue(
                Job::ProbeSource,
                Command::Status {
                    cluster: Cluster::Source,
                },
            );
            self.issue(
                Job::ProbeTarget,
                Command::Status {
                    cluster: Cluster::Target,
                },
            );
        }
        self.fire_timers(now);
        self.pump(now);
        self.refresh_status(now);
        if let Some(o) = self.out.pop_front() {
            return o;
        }
        if let Some(r) = &self.stopped {
            return Output::Stopped(r.clone());
        }
        if self.shutdown && !self.committing {
            return self.stop(now, StopReason::Shutdown);
        }
        Output::Timeout(self.next_deadline().unwrap_or(Instant(u64::MAX)))
    }

    // ----- plumbing ---------------------------------------------------------------------

    fn issue(&mut self, job: Job, cmd: Command) -> CommandId {
        let id = self.next_id;
        self.next_id += 1;
        self.inflight.insert(id, job);
        self.out.push_back(Output::Command { id, cmd });
        id
    }

    fn retry_later(&mut self, now: Instant, job: Job, cmd: Command, throttled: bool) {
        let delay = if throttled {
            self.throttle.next_delay(&mut self.rng)
        } else {
            self.backoff.next_delay(&mut self.rng)
        };
        let at = now + delay;
        self.status.backoff = Some(BackoffState {
            kind: if throttled { "throttled" } else { "transient" }.into(),
            attempt: if throttled {
                self.throttle.attempt()
            } else {
                self.backoff.attempt()
            },
            until: at,
        });
        self.retry = Some(Retry { at, cmd, job });
    }

    fn fire_timers(&mut self, now: Instant) {
        if let Some(r) = &self.retry {
            if r.at <= now {
                let r = self.retry.take().expect("checked Some just above");
                self.status.backoff = None;
                self.issue(r.job, r.cmd);
            }
        }
        if self.hold_until.is_some_and(|t| t <= now) {
            self.hold_until = None;
            self.status.backoff = None;
        }
        if self.resume_at.is_some_and(|t| t <= now) {
            self.resume_at = None;
            self.status.backoff = None;
            self.resume_from_record(now);
        }
        if self.quota_probe_at.is_some_and(|t| t <= now) && !self.committing {
            self.quota_probe_at = None;
            self.work.push_front(Work::Fence(FenceWhy::QuotaProbe));
        }
        if let (Some(t), Some(w)) = (self.next_progress_request, self.watch) {
            if t <= now {
                self.next_progress_request = Some(now + self.cfg.sync.progress_interval);
                self.issue(Job::Fire, Command::RequestProgress { watch_id: w });
            }
        }
        if let Some(g) = &mut self.gen {
            if g.probe_at.is_some_and(|t| t <= now) {
                g.probe_at = None;
                self.probe_untrusted();
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        [
            self.retry.as_ref().map(|r| r.at),
            self.hold_until,
            self.resume_at,
            self.quota_probe_at,
            self.watch.and(self.next_progress_request),
            self.gen.as_ref().and_then(|g| g.probe_at),
            self.pacer_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn pacer_deadline(&self) -> Option<Instant> {
        if self.committing || self.work.is_empty() || !self.pacer.enabled() {
            return None;
        }
        // ready_at ignores `now`'s relation to tat only when tat is in the future.
        Some(self.pacer.ready_at(Instant::ZERO))
    }

    fn stop(&mut self, now: Instant, reason: StopReason) -> Output {
        if self.stage != Stage::Stopped {
            self.stage = Stage::Stopped;
            match &reason {
                StopReason::Failed { kind, message } => {
                    self.status.phase = Phase::Failed;
                    self.status.last_error = Some(format!("{}: {message}", kind.name()));
                    self.status.set_condition(
                        now,
                        C::Available,
                        false,
                        kind.name(),
                        message.clone(),
                    );
                }
                StopReason::Shutdown => {
                    self.status.set_condition(
                        now,
                        C::Available,
                        false,
                        "Shutdown",
                        "agent stopped",
                    );
                }
                StopReason::Drained => {}
            }
            // Commands not yet handed out are abandoned; nothing new is written.
            self.out.clear();
            self.retry = None;
            self.stopped = Some(reason.clone());
        }
        Output::Stopped(reason)
    }

    fn fail(&mut self, now: Instant, kind: FailKind, message: impl Into<String>) {
        let message = message.into();
        let cond = match kind {
            FailKind::EmptyTargetViolation => Some(C::EmptyTargetViolation),
            FailKind::PrefixConflict => Some(C::PrefixConflict),
            FailKind::DirectionConflict => Some(C::DirectionConflict),
            _ => None,
        };
        if let Some(c) = cond {
            self.status
                .set_condition(now, c, true, kind.name(), message.clone());
        }
        self.stop(now, StopReason::Failed { kind, message });
    }

    // ----- inputs -----------------------------------------------------------------------

    fn on_control(&mut self, now: Instant, c: Control) {
        match c {
            Control::Shutdown => self.shutdown = true,
            Control::Pause => {
                self.paused = true;
                self.status.phase = Phase::Paused;
            }
            Control::Resume => self.paused = false,
            Control::Drain | Control::Reconcile => {
                self.status.last_error = Some(format!(
                    "{c:?} is not supported by this build yet (issue C2)"
                ));
            }
        }
        let _ = now;
    }

    fn on_done(&mut self, now: Instant, job: Job, result: Result<Reply, Failure>) {
        match (job, result) {
            (Job::Fire, _) | (Job::WatchOpen, Ok(_)) => {}
            (Job::WatchOpen, Err(f)) => self.on_watch(now, WatchEvent::Failed { failure: f }),
            (Job::ProbeSource, Ok(Reply::Status(s))) => {
                self.src = Some(s);
                self.after_probes(now);
            }
            (Job::ProbeTarget, Ok(Reply::Status(s))) => {
                self.tgt = Some(s);
                self.after_probes(now);
            }
            (Job::ReadFence, Ok(Reply::Range(r))) => self.on_fence_read(now, r),
            (Job::CheckEmpty, Ok(Reply::Range(r))) => self.on_check_empty(now, r),
            (
                Job::ReadR0(seq)
                | Job::ScanPage(seq)
                | Job::ProbeMaxModRevision(seq)
                | Job::SweepPage(seq),
                _,
            ) if self.gen.as_ref().is_none_or(|g| g.seq != seq) => {}
            (Job::ReadR0(_), Ok(Reply::Range(r))) => self.on_r0(now, r),
            (Job::ScanPage(_), Ok(Reply::Range(r))) => self.on_scan_page(now, r),
            (Job::ProbeMaxModRevision(_), Ok(Reply::Range(r))) => self.on_untrusted_probe(now, r),
            (Job::SweepPage(_), Ok(Reply::Range(r))) => self.on_sweep_page(now, r),
            (Job::Commit(c), Ok(Reply::Txn(t))) => self.on_commit(now, *c, t),
            (Job::Commit(c), Err(f)) => self.on_commit_failed(now, *c, f),
            (Job::ResolveUnknown(c), Ok(Reply::Range(r))) => self.on_resolve(now, *c, r),
            (job, Err(f)) => self.on_read_failed(now, job, f),
            (job, Ok(reply)) => {
                let msg = format!("unexpected reply {reply:?} for {job:?}");
                self.fail(now, FailKind::Permanent, msg);
            }
        }
    }

    /// A read failed: retry it with backoff, or stop on a permanent error.
    fn on_read_failed(&mut self, now: Instant, job: Job, f: Failure) {
        self.note_reachability(now, &job, false, &f);
        let cmd = match self.command_for(&job) {
            Some(c) => c,
            None => return,
        };
        match f {
            Failure::Permanent { kind, message } => {
                let fk = if kind == PermanentKind::Unsupported {
                    FailKind::Unsupported
                } else {
                    FailKind::Permanent
                };
                self.fail(now, fk, message);
            }
            Failure::Throttled { .. } => self.retry_later(now, job, cmd, true),
            _ => self.retry_later(now, job, cmd, false),
        }
    }

    fn note_reachability(&mut self, now: Instant, job: &Job, ok: bool, f: &Failure) {
        let side = match job {
            Job::ProbeSource | Job::ReadR0(_) | Job::ScanPage(_) | Job::ProbeMaxModRevision(_) => {
                C::SourceReachable
            }
            _ => C::TargetReachable,
        };
        if ok {
            self.status.set_condition(now, side, true, "Reachable", "");
        } else if !matches!(f, Failure::Permanent { .. }) {
            self.status
                .set_condition(now, side, false, f.label(), f.to_string());
        }
    }

    /// Rebuilds the command of a read job (the jobs are idempotent reads).
    fn command_for(&mut self, job: &Job) -> Option<Command> {
        Some(match job {
            Job::ProbeSource => Command::Status {
                cluster: Cluster::Source,
            },
            Job::ProbeTarget => Command::Status {
                cluster: Cluster::Target,
            },
            Job::ReadFence => self.fence_read_cmd(),
            Job::CheckEmpty => self.check_empty_cmd(),
            Job::ReadR0(_) => self.r0_cmd(),
            Job::ScanPage(_) => self.scan_cmd()?,
            Job::ProbeMaxModRevision(_) => self.max_mod_cmd(),
            Job::SweepPage(_) => self.sweep_cmd()?,
            Job::ResolveUnknown(_) => self.fence_read_cmd(),
            Job::Commit(_) | Job::WatchOpen | Job::Fire => return None,
        })
    }

    // ----- connect ----------------------------------------------------------------------

    fn after_probes(&mut self, now: Instant) {
        let (Some(src), Some(tgt)) = (self.src.clone(), self.tgt.clone()) else {
            return;
        };
        self.status.source_version = src.version.clone();
        self.status.target_version = tgt.version.clone();
        self.status.source_cluster_id = src.cluster_id;
        self.status.target_cluster_id = tgt.cluster_id;
        self.status
            .set_condition(now, C::SourceReachable, true, "Reachable", "");
        self.status
            .set_condition(now, C::TargetReachable, true, "Reachable", "");
        self.observe_source_rev(now, src.header_revision);
        for (side, s) in [("source", &src), ("target", &tgt)] {
            match Version::parse(&s.version) {
                Some(v) if v >= Version::FLOOR => {}
                _ => {
                    let msg = format!(
                        "{side} etcd version {:?} is below the supported floor {}; upgrade the {side} cluster",
                        s.version,
                        Version::FLOOR
                    );
                    return self.fail(now, FailKind::Unsupported, msg);
                }
            }
        }
        self.progress_trusted =
            Version::parse(&src.version).is_some_and(|v| v.progress_notify_trusted());
        self.status.progress_trusted = self.progress_trusted;
        let learner = src.is_learner || tgt.is_learner;
        self.status.set_condition(
            now,
            C::LearnerEndpoint,
            learner,
            if learner { "LearnerEndpoint" } else { "Voter" },
            if learner {
                "an endpoint is a learner member; point the endpoints at voting members"
            } else {
                ""
            },
        );
        if src.cluster_id == tgt.cluster_id
            && ranges_overlap(self.keys.source_prefix(), self.keys.target_base())
        {
            return self.fail(
                now,
                FailKind::DirectionConflict,
                "source and target are the same cluster and the source range overlaps the target range; the mirror would copy its own writes",
            );
        }
        self.status
            .set_condition(now, C::DirectionConflict, false, "Distinct", "");
        self.stage = Stage::Fencing;
        let cmd = self.fence_read_cmd();
        self.issue(Job::ReadFence, cmd);
    }

    fn fence_read_cmd(&self) -> Command {
        Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key: self.keys.checkpoint_key().to_vec(),
            range_end: Vec::new(),
            revision: 0,
            limit: 0,
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        })
    }

    fn on_fence_read(&mut self, now: Instant, r: RangeReply) {
        let found = match r.kvs.first() {
            None => None,
            Some(kv) => match Checkpoint::decode(&kv.value) {
                Ok(c) => {
                    self.fence_rev = kv.mod_revision;
                    Some(c)
                }
                Err(e) => {
                    return self.fail(
                        now,
                        FailKind::CheckpointInvalid,
                        format!("the checkpoint at the fence key cannot be used ({e}); nothing was written. Inspect it with `tidemark-mirror checkpoint`, then restore or delete it"),
                    )
                }
            },
        };
        if let Some(c) = &found {
            if c.link != self.link {
                return self.fail(
                    now,
                    FailKind::PrefixConflict,
                    format!("the fence key holds the checkpoint of another link ({:?}); choose another target prefix or checkpoint.key", c.link),
                );
            }
            if c.role == Role::Primary {
                return self.fail(
                    now,
                    FailKind::FenceLost,
                    "the target was cut over (fence role Primary); a mirror must never write to it again",
                );
            }
            self.status.last_applied_revision = c.watermark;
        }
        self.found = found;
        let needs_genesis = match &self.found {
            None => true,
            Some(c) => c.scan.is_some() || (c.watermark == 0 && c.split.is_none()),
        };
        let fresh = self.found.as_ref().is_none_or(|c| c.scan.is_none());
        if needs_genesis
            && fresh
            && self.cfg.initial_sync.start_revision == 0
            && self.cfg.initial_sync.mode == InitialSyncMode::RequireEmpty
        {
            let cmd = self.check_empty_cmd();
            self.issue(Job::CheckEmpty, cmd);
        } else {
            self.claim(now);
        }
    }

    fn check_empty_cmd(&self) -> Command {
        let (key, range_end) = self.keys.target_range();
        Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key,
            range_end,
            revision: 0,
            limit: 2,
            count_only: false,
            keys_only: true,
            sort: SortBy::Key,
        })
    }

    fn on_check_empty(&mut self, now: Instant, r: RangeReply) {
        let foreign = r
            .kvs
            .iter()
            .filter(|kv| !self.keys.is_checkpoint(&kv.key))
            .count();
        if foreign > 0 || r.count > r.kvs.len() as i64 {
            return self.fail(
                now,
                FailKind::EmptyTargetViolation,
                "initialSync.mode is RequireEmpty but the target range already holds keys; nothing was written. Empty the target range, or choose Overwrite or OverwriteAndPrune",
            );
        }
        self.status
            .set_condition(now, C::EmptyTargetViolation, false, "Empty", "");
        self.claim(now);
    }

    /// Claims the fence at a new epoch, carrying the found record's progress forward.
    fn claim(&mut self, now: Instant) {
        let _ = now;
        let base = self.found.clone();
        let epoch = base.as_ref().map_or(0, |c| c.epoch) + 1;
        let src_id = self.src.as_ref().map_or(0, |s| s.cluster_id);
        let tgt_id = self.tgt.as_ref().map_or(0, |s| s.cluster_id);
        let mut rec = base.unwrap_or(Checkpoint {
            v: VERSION,
            link: self.link.clone(),
            epoch: 0,
            holder: String::new(),
            role: Role::Mirror,
            watermark: 0,
            split: None,
            scan: None,
            prune_pending: false,
            prune_floor: 0,
            source_cluster: format!("{src_id:x}"),
            target_cluster: format!("{tgt_id:x}"),
        });
        rec.epoch = epoch;
        rec.holder = self.holder.clone();
        rec.source_cluster = format!("{src_id:x}");
        rec.target_cluster = format!("{tgt_id:x}");
        let fresh_genesis = rec.scan.is_none() && rec.watermark == 0 && rec.split.is_none();
        if fresh_genesis && self.cfg.initial_sync.start_revision > 0 {
            rec.watermark = self.cfg.initial_sync.start_revision - 1;
            rec.prune_pending = false;
        } else if fresh_genesis {
            rec.prune_pending = self.cfg.initial_sync.mode == InitialSyncMode::OverwriteAndPrune;
            rec.prune_floor = 0;
        }
        self.status.epoch = epoch;
        self.status.role = "Mirror".into();
        self.submit_direct(Work::Claim, rec);
    }

    // ----- commit pipeline --------------------------------------------------------------

    /// Starts the next unit of target work if nothing is in flight.
    fn pump(&mut self, now: Instant) {
        if self.stage == Stage::Stopped || self.committing || self.shutdown {
            return;
        }
        if self.stage == Stage::Tail {
            while let Some(b) = self.batcher.pop() {
                self.work.push_back(Work::Tail(b));
            }
            if self.watch_paused && self.work.is_empty() && self.batcher.is_empty() {
                self.watch_paused = false;
                let from = self.delivered + 1;
                self.open_watch(now, from);
            }
        }
        if self.paused && !matches!(self.work.front(), Some(Work::Fence(FenceWhy::QuotaProbe))) {
            return;
        }
        if self.hold_until.is_some() || self.resume_at.is_some() {
            return;
        }
        if self.stage == Stage::Parked
            && !matches!(self.work.front(), Some(Work::Fence(FenceWhy::QuotaProbe)))
        {
            return;
        }
        let Some(front) = self.work.front() else {
            self.after_queue_drained(now);
            return;
        };
        let n = front.ops().len() as u64;
        if self.pacer.enabled() && n > 0 && self.pacer.ready_at(now) > now {
            return;
        }
        let work = self.work.pop_front().expect("front() was Some just above");
        self.pacer.consume(now, n);
        let Some(rec) = self.next_record(&work) else {
            return;
        };
        self.submit_direct(work, rec);
    }

    /// Sends one fenced Txn.
    fn submit_direct(&mut self, work: Work, record: Checkpoint) {
        let bytes = record.encode();
        let ck = self.keys.checkpoint_key().to_vec();
        let compare = if self.fence_rev == 0 {
            Compare {
                key: ck.clone(),
                target: CompareTarget::CreateRevision,
                value: 0,
            }
        } else {
            Compare {
                key: ck.clone(),
                target: CompareTarget::ModRevision,
                value: self.fence_rev,
            }
        };
        let mut success = work.ops().to_vec();
        success.push(TxnOp::Put {
            key: ck.clone(),
            value: bytes.clone(),
        });
        let txn = TxnRequest {
            compares: vec![compare],
            success,
            failure: vec![TxnOp::Get { key: ck }],
        };
        self.committing = true;
        self.issue(
            Job::Commit(Box::new(Commit {
                work,
                record,
                bytes,
            })),
            Command::Txn(txn),
        );
    }

    /// The record a unit of work installs, derived from the durable one.
    fn next_record(&self, work: &Work) -> Option<Checkpoint> {
        let mut rec = self.record.clone()?;
        match work {
            Work::Claim => {}
            Work::Scan {
                cursor_after,
                scanned,
                ..
            } => {
                if let Some(s) = &mut rec.scan {
                    s.cursor = cursor_after.clone();
                    s.scanned = *scanned;
                }
            }
            Work::Tail(b) => match (b.split, b.watermark_after()) {
                (Some(p), None) => {
                    rec.split = Some(Split {
                        rev: p.rev,
                        done: p.done_after,
                    })
                }
                (_, Some(w)) => {
                    rec.split = None;
                    rec.watermark = rec.watermark.max(w);
                }
                (None, None) => {}
            },
            Work::Sweep { .. } => {}
            Work::Fence(FenceWhy::StartGenesis { base, prune, .. }) => {
                rec.scan = Some(Scan {
                    base: *base,
                    cursor: Vec::new(),
                    scanned: false,
                });
                rec.split = None;
                rec.prune_pending = *prune;
                rec.prune_floor = 0;
            }
            Work::Fence(FenceWhy::FinishGenesis { watermark, .. }) => {
                rec.scan = None;
                rec.split = None;
                rec.prune_pending = false;
                rec.watermark = rec.watermark.max(*watermark);
            }
            Work::Fence(FenceWhy::IdleAdvance { rev }) => {
                rec.watermark = rec.watermark.max(*rev);
            }
            Work::Fence(FenceWhy::QuotaProbe) => {}
        }
        Some(rec)
    }

    fn on_commit(&mut self, now: Instant, c: Commit, t: TxnReply) {
        if t.succeeded {
            return self.commit_applied(now, c, t.header_revision);
        }
        // Compare failed: the Get in the failure branch tells us who holds the fence.
        let current = t.reads.into_iter().next().flatten();
        self.judge_fence(now, c, current);
    }

    /// Our write is in the target at `rev`.
    fn commit_applied(&mut self, now: Instant, c: Commit, rev: i64) {
        self.committing = false;
        self.fence_rev = rev;
        self.failures_in_row = 0;
        self.takeovers = 0;
        self.backoff.reset();
        self.throttle.reset();
        self.status.backoff = None;
        self.status
            .set_condition(now, C::TargetReachable, true, "Reachable", "");
        self.status
            .set_condition(now, C::TargetThrottled, false, "NotThrottled", "");
        let ops = c.work.ops().len() as u64;
        self.status.applied_txns += 1;
        self.status.applied_ops += ops;
        self.status.applied_bytes +=
            c.work.ops().iter().map(TxnOp::wire_size).sum::<usize>() as u64;
        let mut rec = c.record;
        if rec.prune_pending && rec.prune_floor == 0 {
            // The first write of a pruning genesis: everything written from now on has a
            // higher mod revision, so anything below this was not seen.
            rec.prune_floor = rev;
        }
        self.status.last_applied_revision = rec.watermark;
        self.record = Some(rec);
        match c.work {
            Work::Claim => self.after_claim(now),
            Work::Scan {
                seq,
                ops,
                scanned,
                leased,
                ..
            } => {
                self.status.initial_sync_copied_key_count += ops.len() as u64;
                if let Some(g) = self.gen.as_mut().filter(|g| g.seq == seq) {
                    g.leased += leased;
                    g.page_chunks = g.page_chunks.saturating_sub(1);
                    if g.page_chunks == 0 {
                        if scanned {
                            self.scan_complete(now);
                        } else {
                            self.next_scan_page();
                        }
                    }
                }
            }
            Work::Tail(b) => {
                if let Some(p) = b.split {
                    if !p.last {
                        self.status.split_revision_count += u64::from(p.done_before == 0);
                    }
                }
                let live = self.stage == Stage::Tail;
                if live {
                    self.consecutive_resyncs = 0;
                    self.status.set_condition(
                        now,
                        C::ResyncLoopDetected,
                        false,
                        "LiveProgress",
                        "",
                    );
                }
                let splitting = self.record.as_ref().is_some_and(|r| r.split.is_some());
                self.status.set_condition(
                    now,
                    C::RevisionSplit,
                    splitting,
                    if splitting { "RevisionSplit" } else { "Atomic" },
                    if splitting {
                        "a source revision larger than one target Txn is being applied in parts"
                    } else {
                        ""
                    },
                );
            }
            Work::Sweep { ops } => {
                self.status.pruned_keys += ops.len() as u64;
            }
            Work::Fence(FenceWhy::StartGenesis { seq, .. }) => {
                if self.gen.as_ref().is_some_and(|g| g.seq == seq) {
                    self.begin_scan(now);
                }
            }
            Work::Fence(FenceWhy::FinishGenesis { seq, .. }) => {
                if self.gen.as_ref().is_some_and(|g| g.seq == seq) {
                    self.genesis_done(now);
                }
            }
            Work::Fence(FenceWhy::IdleAdvance { .. }) => {}
            Work::Fence(FenceWhy::QuotaProbe) => {
                self.status.set_condition(
                    now,
                    C::TargetQuotaExhausted,
                    false,
                    "QuotaAvailable",
                    "",
                );
                self.stage = Stage::Fencing;
                self.resume_from_record(now);
            }
        }
    }

    fn on_commit_failed(&mut self, now: Instant, c: Commit, f: Failure) {
        match f {
            Failure::Unknown { .. } | Failure::Transient { .. } => {
                // The write may have applied. Only the fence can tell.
                let cmd = self.fence_read_cmd();
                self.issue(Job::ResolveUnknown(Box::new(c)), cmd);
            }
            Failure::Throttled { message } => {
                self.status.set_condition(
                    now,
                    C::TargetThrottled,
                    true,
                    "TooManyRequests",
                    message,
                );
                self.requeue_after_failure(now, c, true);
            }
            Failure::NoSpace => self.park(now, c),
            Failure::TooLarge { .. } => self.shrink_or_fail(now, c),
            Failure::Permanent { kind, message } => {
                let fk = if kind == PermanentKind::Unsupported {
                    FailKind::Unsupported
                } else {
                    FailKind::Permanent
                };
                self.committing = false;
                self.fail(now, fk, message);
            }
            Failure::Compacted { .. } | Failure::FutureRevision => {
                self.requeue_after_failure(now, c, false);
            }
        }
    }

    fn on_resolve(&mut self, now: Instant, c: Commit, r: RangeReply) {
        let current = r.kvs.into_iter().next();
        match &current {
            Some(kv) if kv.value == c.bytes => {
                let rev = kv.mod_revision;
                self.commit_applied(now, c, rev);
            }
            Some(kv) if kv.mod_revision == self.fence_rev => {
                self.requeue_after_failure(now, c, false)
            }
            None if self.fence_rev == 0 => self.requeue_after_failure(now, c, false),
            _ => self.judge_fence(now, c, current),
        }
    }

    /// The fence is not what we expected: adopt our own lost write, take over from a
    /// lower epoch of our own link, or stop.
    fn judge_fence(&mut self, now: Instant, c: Commit, current: Option<KeyValue>) {
        self.committing = false;
        let Some(kv) = current else {
            return self.fail(
                now,
                FailKind::FenceLost,
                "the checkpoint was deleted from the target while this agent held it; restart the agent to re-claim deliberately",
            );
        };
        if kv.value == c.bytes {
            self.committing = true;
            return self.commit_applied(now, c, kv.mod_revision);
        }
        let theirs = match Checkpoint::decode(&kv.value) {
            Ok(t) => t,
            Err(e) => {
                return self.fail(
                    now,
                    FailKind::CheckpointInvalid,
                    format!(
                        "the checkpoint was overwritten with bytes that are not a checkpoint ({e})"
                    ),
                );
            }
        };
        if theirs.link != self.link {
            return self.fail(
                now,
                FailKind::PrefixConflict,
                format!("another link ({:?}) wrote the fence key", theirs.link),
            );
        }
        if theirs.role == Role::Primary {
            return self.fail(
                now,
                FailKind::FenceLost,
                "the target was cut over (fence role Primary)",
            );
        }
        if theirs.epoch < c.record.epoch && self.takeovers < MAX_TAKEOVERS {
            // A stale writer of our own link at a lower epoch: take over again.
            self.takeovers += 1;
            self.fence_rev = kv.mod_revision;
            let mut rec = theirs;
            rec.epoch = c.record.epoch + 1;
            rec.holder = self.holder.clone();
            self.status.epoch = rec.epoch;
            self.found = Some(rec.clone());
            self.record = None;
            self.work.clear();
            self.batcher.clear();
            self.cancel_watch();
            self.gen = None;
            self.submit_direct(Work::Claim, rec);
            return;
        }
        self.fail(
            now,
            FailKind::FenceLost,
            format!(
                "another agent holds the fence (epoch {}, holder {}); this agent (epoch {}) stops without writing",
                theirs.epoch, theirs.holder, c.record.epoch
            ),
        );
    }

    fn requeue_after_failure(&mut self, now: Instant, c: Commit, throttled: bool) {
        self.committing = false;
        self.failures_in_row += 1;
        let delay = if throttled {
            self.throttle.next_delay(&mut self.rng)
        } else {
            self.backoff.next_delay(&mut self.rng)
        };
        let at = now + delay;
        self.status.backoff = Some(BackoffState {
            kind: if throttled { "throttled" } else { "transient" }.into(),
            attempt: self.failures_in_row,
            until: at,
        });
        if self.failures_in_row >= WATCH_CANCEL_AFTER_FAILURES && self.watch.is_some() {
            // The source watch's client buffer is unbounded: stop reading and resume from
            // the durable record once the target is writable again.
            self.cancel_watch();
            self.work.clear();
            self.batcher.clear();
            self.resume_at = Some(at);
            return;
        }
        if matches!(c.work, Work::Claim) {
            // A claim is re-derived from a fresh fence read.
            self.resume_at = Some(at);
            return;
        }
        self.work.push_front(c.work);
        self.hold_until = Some(at);
    }

    fn shrink_or_fail(&mut self, now: Instant, c: Commit) {
        self.committing = false;
        let redacted = c
            .work
            .ops()
            .iter()
            .max_by_key(|o| o.wire_size())
            .map(|o| crate::mirror::keys::redact(self.keys.target_base(), o.key()));
        let too_large = |me: &mut Mirror| {
            let k = redacted.clone().unwrap_or_else(|| "<fence>".into());
            me.fail(now, FailKind::TooLarge, format!("a single key ({k}) does not fit in one target request; raise the target's --max-request-bytes or exclude the key"));
        };
        match c.work {
            Work::Tail(b) => {
                let multi_rev = b.revs.len() > 1;
                if !multi_rev && self.cfg.sync.oversized_revision == OversizedRevision::Fail {
                    let rev = b.revs.first().map_or(0, |r| r.0);
                    return self.fail(now, FailKind::TooLarge, format!("source revision {rev} does not fit in one target Txn and oversizedRevision is Fail"));
                }
                match batcher::shrink(b) {
                    Some(parts) => {
                        for p in parts.into_iter().rev() {
                            self.work.push_front(Work::Tail(p));
                        }
                    }
                    None => too_large(self),
                }
            }
            Work::Scan {
                seq,
                mut ops,
                cursor_after,
                scanned,
                leased,
            } => {
                if ops.len() <= 1 {
                    return too_large(self);
                }
                let second = ops.split_off(ops.len() / 2);
                let mid_cursor = ops
                    .last()
                    .and_then(|o| self.keys.unrewrite(o.key()))
                    .map(next_key)
                    .unwrap_or_default();
                if let Some(g) = self.gen.as_mut().filter(|g| g.seq == seq) {
                    g.page_chunks += 1;
                }
                self.work.push_front(Work::Scan {
                    seq,
                    ops: second,
                    cursor_after,
                    scanned,
                    leased: 0,
                });
                self.work.push_front(Work::Scan {
                    seq,
                    ops,
                    cursor_after: mid_cursor,
                    scanned: false,
                    leased,
                });
            }
            Work::Sweep { mut ops } => {
                if ops.len() <= 1 {
                    return too_large(self);
                }
                let second = ops.split_off(ops.len() / 2);
                self.work.push_front(Work::Sweep { ops: second });
                self.work.push_front(Work::Sweep { ops });
            }
            Work::Claim | Work::Fence(_) => too_large(self),
        }
    }

    fn park(&mut self, now: Instant, c: Commit) {
        self.committing = false;
        self.stage = Stage::Parked;
        self.status.phase = Phase::Degraded;
        self.status.set_condition(
            now,
            C::TargetQuotaExhausted,
            true,
            "NoSpace",
            "the target's database space is exhausted (NOSPACE alarm); compact/defragment the target or raise --quota-backend-bytes, then `etcdctl alarm disarm`",
        );
        let _ = c;
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.gen = None;
        let at = now + self.cfg.sync.quota_probe_interval;
        self.quota_probe_at = Some(at);
        self.status.backoff = Some(BackoffState {
            kind: "quota".into(),
            attempt: 0,
            until: at,
        });
    }

    // ----- after the claim: resume from the durable record ------------------------------

    fn after_claim(&mut self, now: Instant) {
        self.status.set_condition(
            now,
            C::Available,
            true,
            "FenceHeld",
            "this agent holds the fence",
        );
        self.resume_from_record(now);
    }

    /// Drops every volatile thing and continues from what the target durably holds.
    fn resume_from_record(&mut self, now: Instant) {
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.watch_paused = false;
        self.retry = None;
        let Some(rec) = self.record.clone() else {
            // Never claimed (a failed claim): start over from reading the fence.
            self.stage = Stage::Fencing;
            let cmd = self.fence_read_cmd();
            self.issue(Job::ReadFence, cmd);
            return;
        };
        if self.stage == Stage::Parked {
            // Still parked: the quota probe decides.
            return;
        }
        if let Some(scan) = rec.scan.clone() {
            self.start_genesis_from(now, scan, rec.prune_pending);
        } else if rec.watermark == 0 && rec.split.is_none() {
            self.begin_genesis(now, rec.prune_pending);
        } else if rec.prune_pending {
            // A prune owed outside a scan can only come from an older record: redo genesis.
            self.begin_genesis(now, true);
        } else {
            self.start_tail(now);
        }
    }

    fn new_gen(&mut self, step: GenStep, prune: bool) -> Genesis {
        self.gen_seq += 1;
        Genesis {
            seq: self.gen_seq,
            final_w: 0,
            step,
            prune,
            rmax: 0,
            window: 0,
            page_limit: self.cfg.sync.page_key_limit.min(256),
            page_chunks: 0,
            page_more: false,
            held: VecDeque::new(),
            held_bytes: 0,
            sweep_cursor: Vec::new(),
            sweep_window: 0,
            probe_at: None,
            leased: 0,
        }
    }

    /// A new genesis: read R0, then record `scan = {base: R0}` in the fence.
    fn begin_genesis(&mut self, now: Instant, prune: bool) {
        self.stage = Stage::Genesis;
        self.status.phase = Phase::InitialSync;
        self.status
            .set_condition(now, C::InitialSyncComplete, false, "Scanning", "");
        let g = self.new_gen(GenStep::R0, prune);
        self.gen = Some(g);
        let cmd = self.r0_cmd();
        self.issue(Job::ReadR0(self.gen_seq), cmd);
    }

    fn r0_cmd(&self) -> Command {
        let (key, range_end) = self.keys.source_range();
        Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end,
            revision: 0,
            limit: 0,
            count_only: true,
            keys_only: false,
            sort: SortBy::Key,
        })
    }

    fn on_r0(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        self.status.initial_sync_total_key_count = u64::try_from(r.count).unwrap_or(0);
        self.status.initial_sync_copied_key_count = 0;
        let Some(g) = &mut self.gen else { return };
        g.step = GenStep::Scanning;
        let why = FenceWhy::StartGenesis {
            seq: g.seq,
            base: r.header_revision,
            prune: g.prune,
        };
        self.work.push_back(Work::Fence(why));
    }

    /// Genesis resumed from a record whose scan is in progress.
    fn start_genesis_from(&mut self, now: Instant, scan: Scan, prune: bool) {
        self.stage = Stage::Genesis;
        self.status.phase = Phase::InitialSync;
        self.status
            .set_condition(now, C::InitialSyncComplete, false, "Scanning", "");
        let g = self.new_gen(GenStep::Scanning, prune);
        self.gen = Some(g);
        let _ = scan;
        self.begin_scan(now);
    }

    /// Opens the watch at base+1 and starts (or continues) paging.
    fn begin_scan(&mut self, now: Instant) {
        let Some(scan) = self.record.as_ref().and_then(|r| r.scan.clone()) else {
            return;
        };
        self.delivered = scan.base;
        self.open_watch(now, scan.base + 1);
        let windows = self.keys.source_windows();
        if let Some(g) = &mut self.gen {
            g.step = GenStep::Scanning;
            g.rmax = scan.base;
            g.window = windows
                .iter()
                .position(|w| before_end(&scan.cursor, &w.end))
                .unwrap_or(windows.len());
        }
        if scan.scanned {
            self.scan_complete(now);
        } else {
            self.next_scan_page();
        }
    }

    fn scan_cmd(&self) -> Option<Command> {
        let g = self.gen.as_ref()?;
        let windows = self.keys.source_windows();
        let w = windows.get(g.window)?;
        let cursor = self
            .record
            .as_ref()
            .and_then(|r| r.scan.as_ref())
            .map(|s| s.cursor.clone())
            .unwrap_or_default();
        let key = if cursor > w.start {
            cursor
        } else {
            w.start.clone()
        };
        Some(Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end: w.end.clone(),
            revision: 0,
            limit: i64::from(g.page_limit),
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }))
    }

    fn next_scan_page(&mut self) {
        match self.scan_cmd() {
            Some(cmd) => {
                self.issue(Job::ScanPage(self.gen_seq), cmd);
            }
            None => {
                // Past the last window: record that the scan is complete.
                let cursor = self
                    .record
                    .as_ref()
                    .and_then(|r| r.scan.as_ref())
                    .map(|s| s.cursor.clone())
                    .unwrap_or_default();
                if let Some(g) = &mut self.gen {
                    g.page_chunks = 1;
                }
                let seq = self.gen_seq;
                self.work.push_back(Work::Scan {
                    seq,
                    ops: Vec::new(),
                    cursor_after: cursor,
                    scanned: true,
                    leased: 0,
                });
            }
        }
    }

    fn on_scan_page(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        let windows = self.keys.source_windows();
        let page_bytes: u64 = r
            .kvs
            .iter()
            .map(|kv| (kv.key.len() + kv.value.len()) as u64)
            .sum();
        let budget = self.cfg.sync.page_bytes;
        let max_limit = self.cfg.sync.page_key_limit;
        let Some(g) = &mut self.gen else { return };
        g.rmax = g.rmax.max(r.header_revision);
        // Adapt the page to the byte budget.
        if page_bytes > budget {
            g.page_limit = (g.page_limit / 2).max(1);
        } else if page_bytes < budget / 2 && r.more {
            g.page_limit = g.page_limit.saturating_mul(2).min(max_limit);
        }
        let last_key = r.kvs.last().map(|kv| kv.key.clone());
        let (cursor_after, scanned) = match (&last_key, r.more) {
            (Some(k), true) => (next_key(k.clone()), false),
            _ => {
                g.window += 1;
                match windows.get(g.window) {
                    Some(w) => (w.start.clone(), false),
                    None => (last_key.clone().map(next_key).unwrap_or_default(), true),
                }
            }
        };
        let mut ops = Vec::with_capacity(r.kvs.len());
        let mut leased_keys = Vec::with_capacity(r.kvs.len());
        for kv in r.kvs {
            if let Some(t) = self.keys.rewrite(&kv.key) {
                leased_keys.push((kv.key.clone(), kv.lease != 0));
                ops.push(TxnOp::Put {
                    key: t,
                    value: kv.value,
                });
            }
        }
        let chunks = batcher::chunk_ops(ops, self.limits);
        let Some(g) = &mut self.gen else { return };
        g.page_more = !scanned;
        if chunks.is_empty() {
            g.page_chunks = 1;
            let seq = g.seq;
            self.work.push_back(Work::Scan {
                seq,
                ops: Vec::new(),
                cursor_after,
                scanned,
                leased: 0,
            });
            return;
        }
        g.page_chunks = chunks.len();
        let seq = g.seq;
        let n = chunks.len();
        let mut idx = 0;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let leased = leased_keys[idx..idx + chunk.len()]
                .iter()
                .filter(|(_, l)| *l)
                .count() as u64;
            idx += chunk.len();
            let (c, s) = if i + 1 == n {
                (cursor_after.clone(), scanned)
            } else {
                (next_key(leased_keys[idx - 1].0.clone()), false)
            };
            self.work.push_back(Work::Scan {
                seq,
                ops: chunk,
                cursor_after: c,
                scanned: s,
                leased,
            });
        }
    }

    fn scan_complete(&mut self, now: Instant) {
        let Some(g) = &mut self.gen else { return };
        g.step = GenStep::Replaying;
        let held: Vec<Vec<Event>> = g.held.drain(..).collect();
        g.held_bytes = 0;
        for events in held {
            self.feed_events(now, events);
        }
        self.batcher.flush();
        while let Some(b) = self.batcher.pop() {
            self.work.push_back(Work::Tail(b));
        }
    }

    /// Called when no target work is queued or in flight.
    fn after_queue_drained(&mut self, now: Instant) {
        let Some(g) = &self.gen else { return };
        match g.step {
            GenStep::Replaying => {
                if !self.batcher.is_empty() {
                    self.batcher.flush();
                    while let Some(b) = self.batcher.pop() {
                        self.work.push_back(Work::Tail(b));
                    }
                    return self.pump(now);
                }
                if self.delivered >= g.rmax {
                    self.replay_proven(now);
                } else if self.progress_trusted {
                    if let Some(w) = self.watch {
                        if self
                            .next_progress_request
                            .is_some_and(|t| t > now + Duration::from_secs(1))
                        {
                            self.next_progress_request = Some(now + Duration::from_secs(1));
                        }
                        let _ = w;
                    }
                } else if g.probe_at.is_none()
                    && !self
                        .inflight
                        .values()
                        .any(|j| matches!(j, Job::ProbeMaxModRevision(_)))
                {
                    self.probe_untrusted();
                }
            }
            GenStep::Sweeping
                if !self
                    .inflight
                    .values()
                    .any(|j| matches!(j, Job::SweepPage(_))) =>
            {
                self.next_sweep_page(now);
            }
            _ => {}
        }
    }

    fn max_mod_cmd(&self) -> Command {
        let (key, range_end) = self.keys.source_range();
        Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end,
            revision: 0,
            limit: 1,
            count_only: false,
            keys_only: true,
            sort: SortBy::ModRevisionDescending,
        })
    }

    fn probe_untrusted(&mut self) {
        let cmd = self.max_mod_cmd();
        self.issue(Job::ProbeMaxModRevision(self.gen_seq), cmd);
    }

    /// Untrusted progress: no live key in scope changed after what the watch delivered,
    /// so the scanned values are the values at `delivered`.
    fn on_untrusted_probe(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        let max_mod = r.kvs.first().map_or(0, |kv| kv.mod_revision);
        let Some(g) = &mut self.gen else { return };
        if g.step != GenStep::Replaying {
            return;
        }
        if max_mod <= self.delivered
            && self.work.is_empty()
            && !self.committing
            && self.batcher.is_empty()
        {
            g.rmax = self.delivered;
            self.replay_proven(now);
        } else {
            g.probe_at = Some(now + UNTRUSTED_PROBE_EVERY);
        }
    }

    fn replay_proven(&mut self, now: Instant) {
        let base = self
            .record
            .as_ref()
            .and_then(|r| r.scan.as_ref())
            .map_or(0, |s| s.base);
        let delivered = self.delivered;
        let Some(g) = &mut self.gen else { return };
        // Everything up to `delivered` is applied (the queue is empty), so this is the
        // watermark; events arriving from now on are held until the record says so.
        g.final_w = base.max(delivered);
        if g.prune {
            g.step = GenStep::Sweeping;
            g.sweep_cursor = Vec::new();
            g.sweep_window = 0;
            self.next_sweep_page(now);
        } else {
            g.step = GenStep::Finishing;
            let why = FenceWhy::FinishGenesis {
                seq: g.seq,
                watermark: g.final_w,
            };
            self.work.push_back(Work::Fence(why));
        }
    }

    fn sweep_cmd(&self) -> Option<Command> {
        let g = self.gen.as_ref()?;
        let windows = self.keys.target_windows();
        let w = windows.get(g.sweep_window)?;
        let key = if g.sweep_cursor > w.start {
            g.sweep_cursor.clone()
        } else {
            w.start.clone()
        };
        Some(Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key,
            range_end: w.end.clone(),
            revision: 0,
            limit: i64::from(self.cfg.sync.page_key_limit),
            count_only: false,
            keys_only: true,
            sort: SortBy::Key,
        }))
    }

    fn next_sweep_page(&mut self, now: Instant) {
        match self.sweep_cmd() {
            Some(cmd) => {
                self.issue(Job::SweepPage(self.gen_seq), cmd);
            }
            None => {
                if let Some(g) = &mut self.gen {
                    g.step = GenStep::Finishing;
                    let why = FenceWhy::FinishGenesis {
                        seq: g.seq,
                        watermark: g.final_w,
                    };
                    self.work.push_back(Work::Fence(why));
                }
                self.pump(now);
            }
        }
    }

    fn on_sweep_page(&mut self, now: Instant, r: RangeReply) {
        let floor = self.record.as_ref().map_or(0, |c| c.prune_floor);
        let windows_len = self.keys.target_windows().len();
        let mut ops = Vec::new();
        for kv in &r.kvs {
            if self.keys.is_checkpoint(&kv.key) || kv.mod_revision >= floor {
                continue;
            }
            if kv.key.contains(&0) {
                // keys_only: re-check by reading it would cost a round trip; a key with a
                // NUL under the target base is never ours to delete blindly.
                return self.fail(
                    now,
                    FailKind::PrefixConflict,
                    format!(
                        "the target range holds a key with a NUL byte ({}) that may be another link's fence; refusing to prune",
                        crate::mirror::keys::redact(self.keys.target_base(), &kv.key)
                    ),
                );
            }
            ops.push(TxnOp::Delete {
                key: kv.key.clone(),
                range_end: Vec::new(),
            });
        }
        let Some(g) = &mut self.gen else { return };
        match (r.kvs.last(), r.more) {
            (Some(k), true) => g.sweep_cursor = next_key(k.key.clone()),
            _ => {
                g.sweep_window += 1;
                g.sweep_cursor = Vec::new();
            }
        }
        let _ = windows_len;
        for chunk in batcher::chunk_ops(ops, self.limits) {
            self.work.push_back(Work::Sweep { ops: chunk });
        }
    }

    fn genesis_done(&mut self, now: Instant) {
        let leased = self.gen.as_ref().map_or(0, |g| g.leased);
        self.status.lease_backed_key_count = leased;
        self.status.set_condition(
            now,
            C::InitialSyncComplete,
            true,
            "Synced",
            "initial copy complete",
        );
        let held: Vec<Vec<Event>> = self
            .gen
            .take()
            .map(|g| g.held.into_iter().collect())
            .unwrap_or_default();
        self.stage = Stage::Tail;
        self.status.phase = Phase::Syncing;
        for events in held {
            self.feed_events(now, events);
        }
        self.batcher.flush();
        if self.next_progress_request.is_none() {
            self.next_progress_request = Some(now + self.cfg.sync.progress_interval);
        }
    }

    // ----- tail -------------------------------------------------------------------------

    fn start_tail(&mut self, now: Instant) {
        self.stage = Stage::Tail;
        self.status.phase = Phase::Syncing;
        self.status
            .set_condition(now, C::InitialSyncComplete, true, "Synced", "");
        let w = self.record.as_ref().map_or(0, |r| r.watermark);
        // A split revision in progress is re-delivered from its start; `feed_events`
        // skips the ops already applied.
        let from = w + 1;
        self.delivered = w;
        self.open_watch(now, from);
    }

    fn open_watch(&mut self, now: Instant, from: i64) {
        self.cancel_watch();
        let id = self.next_watch_id;
        self.next_watch_id += 1;
        self.watch = Some(id);
        let (key, range_end) = self.keys.source_range();
        self.issue(
            Job::WatchOpen,
            Command::Watch(WatchRequest {
                watch_id: id,
                key,
                range_end,
                start_revision: from,
            }),
        );
        self.next_progress_request = Some(now + self.cfg.sync.progress_interval);
    }

    fn cancel_watch(&mut self) {
        if let Some(id) = self.watch.take() {
            self.issue(Job::Fire, Command::CancelWatch { watch_id: id });
        }
    }

    fn on_watch(&mut self, now: Instant, ev: WatchEvent) {
        match ev {
            WatchEvent::Events {
                header_revision,
                events,
            } => {
                self.observe_source_rev(now, header_revision);
                self.status
                    .set_condition(now, C::SourceReachable, true, "Reachable", "");
                if let Some(last) = events.last() {
                    self.delivered = self.delivered.max(last.kv.mod_revision);
                }
                let holding = self.gen.as_ref().is_some_and(|g| {
                    matches!(
                        g.step,
                        GenStep::R0 | GenStep::Scanning | GenStep::Sweeping | GenStep::Finishing
                    )
                });
                if holding {
                    let bytes: u64 = events
                        .iter()
                        .map(|e| (e.kv.key.len() + e.kv.value.len() + 32) as u64)
                        .sum();
                    let limit = self.cfg.sync.watch_buffer_bytes;
                    let Some(g) = &mut self.gen else { return };
                    g.held_bytes += bytes;
                    g.held.push_back(events);
                    if g.held_bytes > limit {
                        self.restart_genesis(
                            now,
                            "the replay buffer overflowed sync.watchBufferBytes",
                        );
                    }
                    return;
                }
                self.feed_events(now, events);
                self.batcher.flush();
                if self.stage == Stage::Tail
                    && self.batcher.queued_bytes() as u64 > self.cfg.sync.watch_buffer_bytes
                {
                    // Backpressure: stop reading until the target catches up.
                    self.cancel_watch();
                    self.watch_paused = true;
                }
            }
            WatchEvent::Progress { revision } => {
                self.observe_source_rev(now, revision);
                if !self.progress_trusted {
                    return;
                }
                self.delivered = self.delivered.max(revision);
                let idle = self.stage == Stage::Tail
                    && self.work.is_empty()
                    && !self.committing
                    && self.batcher.is_empty();
                let w = self.record.as_ref().map_or(0, |r| r.watermark);
                let split = self.record.as_ref().is_some_and(|r| r.split.is_some());
                let due = self
                    .last_idle_advance
                    .is_none_or(|t| now >= t + IDLE_ADVANCE_EVERY);
                if idle && !split && revision > w && due && !self.paused {
                    self.last_idle_advance = Some(now);
                    self.work
                        .push_back(Work::Fence(FenceWhy::IdleAdvance { rev: revision }));
                }
            }
            WatchEvent::Cancelled {
                compact_revision,
                reason,
            } => {
                self.watch = None;
                if compact_revision > 0 {
                    self.on_compacted(now, compact_revision);
                } else {
                    self.watch_failed(now, format!("watch cancelled by the server: {reason}"));
                }
            }
            WatchEvent::Failed { failure } => {
                self.watch = None;
                match failure {
                    Failure::Compacted { rev } => self.on_compacted(now, rev),
                    Failure::Permanent { kind, message } => {
                        let fk = if kind == PermanentKind::Unsupported {
                            FailKind::Unsupported
                        } else {
                            FailKind::Permanent
                        };
                        self.fail(now, fk, message);
                    }
                    f => {
                        self.status.set_condition(
                            now,
                            C::SourceReachable,
                            false,
                            f.label(),
                            f.to_string(),
                        );
                        self.watch_failed(now, f.to_string());
                    }
                }
            }
        }
    }

    /// Reopens the watch after a backoff, continuing after what was delivered.
    fn watch_failed(&mut self, now: Instant, why: String) {
        self.status.last_error = Some(why);
        let delay = self.backoff.next_delay(&mut self.rng);
        let at = now + delay;
        let from = self.delivered + 1;
        let id = self.next_watch_id;
        self.next_watch_id += 1;
        self.watch = Some(id);
        let (key, range_end) = self.keys.source_range();
        self.status.backoff = Some(BackoffState {
            kind: "transient".into(),
            attempt: self.backoff.attempt(),
            until: at,
        });
        self.retry = Some(Retry {
            at,
            cmd: Command::Watch(WatchRequest {
                watch_id: id,
                key,
                range_end,
                start_revision: from,
            }),
            job: Job::WatchOpen,
        });
    }

    fn on_compacted(&mut self, now: Instant, compact_revision: i64) {
        self.status.set_condition(
            now,
            C::Compacted,
            true,
            "Compacted",
            format!("the source compacted past the revision the mirror needed (compact revision {compact_revision})"),
        );
        if self.stage == Stage::Genesis {
            self.restart_genesis(now, "the source was compacted past R0 during the scan");
            return;
        }
        self.status.forced_resync_count += 1;
        self.consecutive_resyncs += 1;
        if self.consecutive_resyncs >= self.cfg.sync.resync_loop_threshold {
            self.status.set_condition(
                now,
                C::ResyncLoopDetected,
                true,
                "ResyncLoop",
                format!("{} forced resyncs in a row without live progress; the source compacts faster than the mirror copies — raise the source's compaction retention", self.consecutive_resyncs),
            );
        }
        self.cancel_watch();
        self.batcher.clear();
        self.work.retain(|w| !matches!(w, Work::Tail(_)));
        if self.committing {
            // The in-flight commit finishes first; its Tail completion is harmless.
        }
        self.begin_genesis(now, true);
    }

    fn restart_genesis(&mut self, now: Instant, why: &str) {
        self.status.scan_restart_count += 1;
        self.status.last_error = Some(format!("genesis restarted: {why}"));
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.begin_genesis(now, true);
    }

    /// Groups a watch response by revision and feeds the batcher, dropping what the
    /// watermark already covers (etcd #20221) and ops a split already applied.
    fn feed_events(&mut self, now: Instant, events: Vec<Event>) {
        let (w, split) = match &self.record {
            Some(r) => (r.watermark, r.split),
            None => (0, None),
        };
        let floor = self
            .record
            .as_ref()
            .and_then(|r| r.scan.as_ref())
            .map_or(w, |s| s.base.max(w));
        let mut groups: Vec<RevGroup> = Vec::new();
        for e in events {
            let rev = e.kv.mod_revision;
            if rev <= floor {
                continue;
            }
            // Ops on excluded or out-of-scope keys are dropped before anything counts
            // them, so split offsets are stable across a resume.
            let op = self.op_for(&e);
            match groups.last_mut() {
                Some(g) if g.rev == rev => g.ops.extend(op),
                _ => groups.push(RevGroup {
                    rev,
                    skip: 0,
                    ops: op.into_iter().collect(),
                }),
            }
        }
        for mut g in groups {
            if let Some(s) = split {
                if s.rev == g.rev {
                    let done = s.done as usize;
                    g.skip = s.done;
                    g.ops = g.ops.split_off(done.min(g.ops.len()));
                }
            }
            if let Err(o) = self.batcher.push(g) {
                return self.fail(
                    now,
                    FailKind::TooLarge,
                    format!(
                        "source revision {} has {} ops, more than one target Txn holds, and oversizedRevision is Fail",
                        o.rev, o.ops
                    ),
                );
            }
        }
    }

    fn op_for(&self, e: &Event) -> Option<TxnOp> {
        let key = self.keys.rewrite(&e.kv.key)?;
        Some(match e.kind {
            EventKind::Put => TxnOp::Put {
                key,
                value: e.kv.value.clone(),
            },
            EventKind::Delete => TxnOp::Delete {
                key,
                range_end: Vec::new(),
            },
        })
    }

    // ----- status -----------------------------------------------------------------------

    fn observe_source_rev(&mut self, now: Instant, rev: i64) {
        if rev > self.status.source_revision {
            self.status.source_revision = rev;
        }
        let _ = now;
    }

    fn refresh_status(&mut self, now: Instant) {
        let w = self
            .record
            .as_ref()
            .map_or(self.status.last_applied_revision, |r| r.watermark);
        self.status.last_applied_revision = w;
        let lag = (self.status.source_revision - w).max(0);
        // Lag in revisions counts every revision of the source cluster, including other
        // prefixes; lag in time starts when the watch delivered something not yet applied.
        self.status.lag_revisions = lag;
        let behind = self.delivered > w || !self.batcher.is_empty() || !self.work.is_empty();
        match (behind, self.lag_since) {
            (true, None) => self.lag_since = Some(now),
            (false, Some(_)) => self.lag_since = None,
            _ => {}
        }
        self.status.lag_seconds = self
            .lag_since
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        if self.stage != Stage::Stopped {
            let lagging = self.status.lag_seconds > self.cfg.sync.max_lag.as_secs_f64();
            self.status.set_condition(
                now,
                C::ReplicationLagExceeded,
                lagging,
                if lagging {
                    "LagExceeded"
                } else {
                    "WithinBound"
                },
                "",
            );
            if self.stage == Stage::Tail && !self.paused {
                self.status.phase = if self.status.backoff.is_some() {
                    Phase::Degraded
                } else {
                    Phase::Syncing
                };
            }
            if self.paused {
                self.status.phase = Phase::Paused;
            }
        }
    }
}

/// The smallest key after `k`.
fn next_key(mut k: Vec<u8>) -> Vec<u8> {
    k.push(0);
    k
}
