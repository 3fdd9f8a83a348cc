//! The mirror state machine.
//!
//! One agent process runs one [`Mirror`]. It claims the fence in the target, copies the
//! source range by the reflector pattern (watch first, then an unpinned scan, then replay),
//! and then tails the watch, writing whole source revisions as fenced target Txns. Every
//! decision lives here; the driver only runs the commands this emits.
//!
//! Internally the machine is a set of small flows (connect, fence, genesis, tail, park)
//! that all end in one commit pipeline. Tail Txns are pipelined: each compares the fence's
//! value with the record the Txn before it installs, so whatever order they reach the
//! server in, they apply as a chain or not at all (see `pipeline.rs`). Genesis pages need
//! no order: they compare the fence's mod revision and apply in any order, and fence writes
//! of their own record the cursor (see `pages.rs`). Writes that change what the fence means
//! run alone, and a lost reply is resolved by re-reading the fence.

mod commit;
mod connect;
mod count;
mod drain;
mod drain_watch;
mod genesis;
mod history;
mod inputs;
mod modscan;
mod pages;
mod pipeline;
mod plumbing;
mod reconcile;
mod report;
mod tail;

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
use crate::mirror::pager::{self, PageReply, Pager};
use crate::mirror::source_share::SourceShare;
use crate::mirror::status::{BackoffState, ConditionType as C, Counts, Cutover, Phase, Status};
use crate::mirror::version::Version;
use crate::rng::Rng;
use crate::time::Instant;
use connect::{Fence, Peers};
use count::{CountOf, KeyCount};
use drain::Draining;
use drain_watch::DrainWatch;
pub use drain_watch::{DRAIN_PROGRESSING, DRAIN_STALL_AFTER};
use history::History;
use modscan::ModScan;
use pages::Pages;
use pipeline::{Break, Link, Pipeline};
use plumbing::{Commands, Lifecycle, Pacing};
use reconcile::{PassPurpose, Reconciliation};
use tail::TailState;

/// Minimum spacing of fence-only writes that advance an idle watermark.
const IDLE_ADVANCE_EVERY: Duration = Duration::from_secs(5);
/// Consecutive failed target writes before the source watch is cancelled.
const WATCH_CANCEL_AFTER_FAILURES: u32 = 3;
/// How long to wait before re-probing an untrusted source for genesis completion.
const UNTRUSTED_PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a replayed window waits for an event past its end on a source whose progress
/// notifications cannot be trusted, before it counts as unprovable (a forced resync).
const UNTRUSTED_WINDOW_WAIT: Duration = Duration::from_secs(30);
/// Bound on fence re-reads and re-claims in a row before giving up as FenceLost.
const MAX_TAKEOVERS: u32 = 3;
/// Scan chunks queued before the next page is read (prefetch depth).
/// Scan pages read ahead of the writes, in multiples of `sync.pageBytes` (the memory cap of
/// a genesis: what is queued for the target plus one page in flight).
const READ_AHEAD_PAGES: u64 = 4;

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
    /// A genesis page Txn (see `pages.rs`): its slot, and the fence revision it compared.
    Page {
        slot: u64,
        base: i64,
        sent: Instant,
    },
    /// Re-reading the fence after a commit whose outcome is unknown.
    ResolveUnknown(Box<Commit>),
    /// Re-reading the fence after a broken chain left some outcome unknown.
    ResolveChain(Box<Break>),
    /// Opening watch `id`.
    WatchOpen(u64),
    /// The source-history read of proof round `round` (see `history.rs`).
    ProveHistory {
        round: u64,
        pinned: bool,
    },
    /// The etcd #18089 guard read before opening a watch.
    WatchGuard {
        watch_id: u64,
        from: i64,
    },
    /// The same read repeated after the watch delivered something (closes the race of a
    /// compaction landing between the guard and the watch's catch-up read).
    WatchRecheck {
        watch_id: u64,
        from: i64,
    },
    /// Reconciliation reads, tagged by pass.
    PassSource(u64),
    PassTarget(u64),
    DrainTarget,
    /// The fence read again before a drain verdict stops the agent (see `drain.rs`).
    ConfirmVerdict,
    /// A read of a bounded key count of genesis attempt `seq` (see `count`).
    Count {
        seq: u64,
        of: CountOf,
    },
    Fire,
}

impl Job {
    /// Whether the job talks to the source cluster.
    fn reads_source(&self) -> bool {
        matches!(
            self,
            Job::ProbeSource
                | Job::ReadR0(_)
                | Job::ScanPage(_)
                | Job::ProbeMaxModRevision(_)
                | Job::PassSource(_)
                | Job::DrainTarget
                | Job::WatchGuard { .. }
                | Job::WatchRecheck { .. }
                | Job::ProveHistory { .. }
                | Job::Count { .. }
        )
    }
}

/// A fenced write in flight: what it does and the record it installs.
#[derive(Debug, Clone)]
struct Commit {
    work: Work,
    record: Checkpoint,
    bytes: Vec<u8>,
    /// The record it builds on (what its compare expects); empty for a claim.
    prev: Vec<u8>,
    /// When it was sent (for the commit round trip).
    sent: Instant,
    /// Times it was sent again after arriving before its predecessor.
    resends: u32,
    /// The copy it belongs to ([`Pipeline::copy_seq`] when it was sent).
    copy: u64,
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
        /// The wire size of `ops`, so the read-ahead check adds up chunks, not keys.
        bytes: u64,
    },
    /// A batch of watch events.
    Tail(Batch),
    /// Deletes of keys the mark-and-sweep found unseen.
    Sweep { ops: Vec<TxnOp> },
    /// Reconciliation repairs: puts of missing/divergent keys, deletes of orphans.
    Repair { ops: Vec<TxnOp> },
    /// The fence alone: genesis start/finish, idle advance, quota probe, cut-over.
    Fence(FenceWhy),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FenceWhy {
    /// Record `scan = {base}` for genesis attempt `seq`.
    StartGenesis {
        seq: u64,
        base: i64,
        prune: bool,
        /// Keys in the source range at `base`, when the server reported a sane count.
        count: Option<i64>,
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
    /// Move the scan cursor over the genesis pages applied since the last one (written
    /// with no page in flight; see `pages.rs`).
    ScanAdvance,
    /// Clear `scan.residue_above` once genesis attempt `seq` deleted what an earlier
    /// attempt's pages left past the cursor; its scan starts when this lands.
    ResidueSwept {
        seq: u64,
    },
    /// Flip the role to Primary: the cut-over.
    Cutover,
}

/// The wire size of a scan chunk's ops (`Work::Scan::bytes`).
fn scan_bytes(ops: &[TxnOp]) -> u64 {
    ops.iter().map(|o| o.wire_size() as u64).sum()
}

impl Work {
    fn ops(&self) -> &[TxnOp] {
        match self {
            Work::Scan { ops, .. } | Work::Sweep { ops } | Work::Repair { ops } => ops,
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
    /// A resumed scan deleting the keys an earlier attempt's pages put past the durable
    /// cursor after its last fence write (`scan.residue_above`), before the scan reads.
    Residue,
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
    /// Highest mod revision of any key-value a scan page held (`None`: unknown, resumed
    /// from an older record).
    smax: Option<i64>,
    /// Keys in the source range at `delivered`: the R0 count plus creations minus deletions
    /// the watch delivered (`None`: unknown).
    live: Option<i64>,
    /// The window the next page read is in.
    window: usize,
    page_limit: u32,
    /// Where the next page read starts (ahead of the durable cursor while prefetching).
    read_cursor: Vec<u8>,
    reading: bool,
    /// Every window has been read; the last chunk queued carries `scanned`.
    read_done: bool,
    /// Events held while scanning or sweeping, with their byte size.
    held: VecDeque<Vec<Event>>,
    held_bytes: u64,
    /// The scan's watch was cancelled when `held` reached `sync.watchBufferBytes`; it opens
    /// again, replaying from the base, once the scan is done (see `scan_complete`).
    watch_paused: bool,
    /// The density of the scan's pages (bounded reads; see `pager`).
    scan_pager: Pager,
    sweep_cursor: Vec<u8>,
    sweep_window: usize,
    sweep_pager: Pager,
    /// When the scan reader last stopped for the read-ahead cap (the writer is behind).
    stalled_since: Option<Instant>,
    probe_at: Option<Instant>,
    /// The untrusted-progress probe in progress.
    probe: Option<ModScan>,
    leased: u64,
    /// Key counts in progress, at most one of each kind.
    counts: BTreeMap<CountOf, KeyCount>,
    /// Whether the progress count was started (after the first page that found keys).
    progress_counted: bool,
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
    status: Status,
    /// Where the agent is in its life, and what the operator asked of it (see `plumbing.rs`).
    life: Lifecycle,
    /// Where each source window's keys begin, as the last paged read found them: a new
    /// paged read starts there instead of walking the first run of keys at once (see
    /// `pager::Hint`).
    density: pager::Hints,

    /// Commands in flight and outputs to poll (see `plumbing.rs`).
    cmds: Commands,

    /// What the version probes found (see `connect.rs`).
    peers: Peers,
    /// The fence and our record in it (see `connect.rs`).
    fence: Fence,
    /// The source watch (see `tail.rs`).
    tail: TailState,
    /// Backoff, throttling and pacing of retries and writes (see `plumbing.rs`).
    pacing: Pacing,
    /// Reconciliation passes (see `reconcile.rs`).
    recon: Reconciliation,
    /// The drain (see `drain.rs`).
    drain: Draining,

    gen: Option<Genesis>,
    batcher: Batcher,
    work: VecDeque<Work>,
    /// The fenced Txns in flight and what they build on. See `pipeline.rs`.
    pipeline: Pipeline,
    /// Genesis pages sent since the durable cursor (see `pages.rs`).
    pages: Pages,

    history: History,
}

impl Mirror {
    /// A mirror for `config`. `seed` fixes all randomness (jitter, holder nonce): the
    /// driver seeds it from the OS, the simulator from its run seed.
    pub fn new(config: MirrorConfig, seed: u64) -> Result<Mirror, crate::config::ConfigErrors> {
        config.validate()?;
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
            status,
            life: Lifecycle::default(),
            density: Default::default(),
            cmds: Commands::new(),
            peers: Peers::default(),
            fence: Fence {
                holder,
                link,
                ..Fence::default()
            },
            tail: TailState::new(),
            pacing: Pacing {
                backoff: Backoff::new(b.initial_delay, b.max_delay),
                throttle: Backoff::throttled(b.initial_delay, b.max_delay),
                pacer: Pacer::new(s.max_ops_per_second),
                failures_in_row: 0,
                hold_until: None,
                quota_probe_at: None,
                resume_at: None,
                share: SourceShare::new(s.source_read_percent),
            },
            recon: Reconciliation::default(),
            drain: Draining {
                state: None,
                requested: config.mode == Mode::Drain,
                watch: None,
            },
            gen: None,
            batcher: Batcher::new(limits, allow_split),
            work: VecDeque::new(),
            pipeline: Pipeline::new(),
            pages: Pages::default(),
            history: History::default(),
            keys,
            rng,
            cfg: config,
        })
    }

    /// Claims at least this epoch. Under Kubernetes the EtcdMirror's `metadata.generation`
    /// is the floor, so an agent running an older spec can never out-rank a newer one.
    pub fn set_epoch_floor(&mut self, floor: u64) {
        self.fence.epoch_floor = floor;
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
        if self.life.stage == Stage::Stopped {
            return;
        }
        self.cmds.now = now;
        match input {
            Input::Done { id, result } => {
                self.note_read_latency(now, id, result.is_ok());
                let Some(job) = self.cmds.inflight.remove(&id) else {
                    return;
                };
                if self.check_source_reply(now, id, &job, &result) {
                    self.on_done(now, job, result);
                }
            }
            Input::Watch { watch_id, event } => {
                if self.tail.watch == Some(watch_id) {
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
        self.cmds.now = now;
        if !self.life.started {
            self.life.started = true;
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
        if let Some(o) = self.cmds.out.pop_front() {
            return o;
        }
        if let Some(r) = &self.life.stopped {
            return Output::Stopped(r.clone());
        }
        if self.life.shutdown && !self.committing() {
            return self.stop(now, StopReason::Shutdown);
        }
        Output::Timeout(self.next_deadline(now).unwrap_or(Instant(u64::MAX)))
    }
}

impl crate::contract::Machine for Mirror {
    type Input = Input;
    type Output = Output;
    type Status = Status;
    fn handle_input(&mut self, now: Instant, input: Input) {
        Mirror::handle_input(self, now, input)
    }
    fn poll_output(&mut self, now: Instant) -> Output {
        Mirror::poll_output(self, now)
    }
    fn status(&self) -> &Status {
        Mirror::status(self)
    }
}

/// The smallest key after `k`.
fn next_key(mut k: Vec<u8>) -> Vec<u8> {
    k.push(0);
    k
}
