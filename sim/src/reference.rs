//! `RefReplicator`: a TEST DOUBLE, not a product. A deliberately simple, slow, fenced
//! replicator that speaks the core contract, so the model, the checker and the teeth can be
//! tested independently of the real mirror core.
//!
//! It keeps one command in flight, reads whole ranges without paging, applies one source
//! revision per target Txn (splitting a revision over 100 ops with `split` set), and on any
//! trouble cancels its watch, waits a second and starts over from the fence.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tidemark_core::classify::Failure;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{
    Cluster, Command, Compare, CompareTarget, EventKind, RangeRequest, Reply, SortBy, TxnOp,
    TxnRequest, WatchEvent, WatchRequest,
};
use tidemark_core::mirror::checkpoint::{Checkpoint, Role, Scan, Split};
use tidemark_core::mirror::{FailKind, Input, KeySpace, Output, Phase, Status, StopReason};
use tidemark_core::rng::Rng;
use tidemark_core::{Instant, Machine, MirrorConfig};

const CHUNK: usize = 100;
const RETRY_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Pending {
    ReadFence,
    CountR0,
    CheckEmpty,
    ScanSource,
    ReadTarget,
    Write,
    Watch,
    /// A pinned read at the watermark before watching from W+1 (etcd 18089 guard).
    CheckCompact(i64),
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase2 {
    Start,
    Genesis,
    Pruning,
    Settling,
    Tail,
}

/// The test double (see the module docs).
#[derive(Debug)]
pub struct RefReplicator {
    cfg: MirrorConfig,
    keys: KeySpace,
    holder: String,
    status: Status,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    out: VecDeque<Command>,
    wake: Option<Instant>,
    stopped: Option<StopReason>,
    phase: Phase2,
    /// Fence mod revision we compare against (0 = absent).
    fence_mod: i64,
    fence: Option<Checkpoint>,
    claimed: bool,
    r0: i64,
    expected: BTreeSet<Vec<u8>>,
    queue: VecDeque<(Vec<TxnOp>, Checkpoint)>,
    writing: Option<Checkpoint>,
    watch_id: u64,
    watch_seq: u64,
    resync: bool,
    /// A compaction cancelled the tail: the next resume must resync.
    force_genesis: bool,
}

impl RefReplicator {
    /// A double for `cfg`; `seed` fixes its holder nonce.
    pub fn new(cfg: MirrorConfig, seed: u64) -> Self {
        let holder = Rng::new(seed).nonce_hex();
        let keys = KeySpace::new(&cfg);
        let mut status = Status {
            holder: holder.clone(),
            link: cfg.link_id(),
            ..Default::default()
        };
        status.phase = Phase::Connecting;
        let mut r = RefReplicator {
            cfg,
            keys,
            holder,
            status,
            next_id: 0,
            pending: BTreeMap::new(),
            out: VecDeque::new(),
            wake: None,
            stopped: None,
            phase: Phase2::Start,
            fence_mod: 0,
            fence: None,
            claimed: false,
            r0: 0,
            expected: BTreeSet::new(),
            queue: VecDeque::new(),
            writing: None,
            watch_id: 0,
            watch_seq: 0,
            resync: false,
            force_genesis: false,
        };
        r.send(
            Command::Range(r.single(Cluster::Target, r.keys.checkpoint_key().to_vec())),
            Pending::ReadFence,
        );
        r
    }

    fn single(&self, cluster: Cluster, key: Vec<u8>) -> RangeRequest {
        RangeRequest {
            cluster,
            key,
            range_end: vec![],
            revision: 0,
            limit: 0,
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }
    }

    fn send(&mut self, cmd: Command, p: Pending) {
        self.next_id += 1;
        self.pending.insert(self.next_id, p);
        self.out.push_back(cmd);
    }

    fn stop(&mut self, kind: FailKind, message: &str) {
        self.status.phase = Phase::Failed;
        self.stopped = Some(StopReason::Failed {
            kind,
            message: message.into(),
        });
    }

    /// Gives up on the current attempt: cancel the watch, retry from the fence later.
    fn restart(&mut self, now: Instant) {
        if self.watch_id > 0 {
            let id = self.watch_id;
            self.send(Command::CancelWatch { watch_id: id }, Pending::Ignore);
        }
        self.watch_id = 0;
        self.queue.clear();
        self.writing = None;
        self.phase = Phase2::Start;
        self.wake = Some(Instant(now.0 + RETRY_NS));
    }

    fn fence_record(&self, watermark: i64, scan: Option<Scan>, split: Option<Split>) -> Checkpoint {
        let epoch = self.fence.as_ref().map_or(1, |f| f.epoch);
        Checkpoint {
            v: 1,
            seq: 0,
            link: self.cfg.link_id(),
            epoch,
            holder: self.holder.clone(),
            role: Role::Mirror,
            watermark,
            split,
            scan,
            prune_pending: false,
            prune_floor: 0,
            source_cluster: String::new(),
            target_cluster: String::new(),
            anchor: None,
        }
    }

    fn push_txn(&mut self, ops: Vec<TxnOp>, ck: Checkpoint) {
        self.queue.push_back((ops, ck));
    }

    fn pump_writes(&mut self) {
        if self.writing.is_some() {
            return;
        }
        let Some((mut ops, ck)) = self.queue.pop_front() else {
            return;
        };
        let fk = self.keys.checkpoint_key().to_vec();
        let compare = if self.fence_mod == 0 {
            Compare::revision(fk.clone(), CompareTarget::CreateRevision, 0)
        } else {
            Compare::revision(fk.clone(), CompareTarget::ModRevision, self.fence_mod)
        };
        ops.push(TxnOp::Put {
            key: fk.clone(),
            value: ck.encode(),
        });
        self.writing = Some(ck);
        self.send(
            Command::Txn(TxnRequest {
                compares: vec![compare],
                success: ops,
                failure: vec![TxnOp::Get { key: fk }],
            }),
            Pending::Write,
        );
    }

    fn begin_genesis(&mut self) {
        self.phase = Phase2::Genesis;
        self.status.phase = Phase::InitialSync;
        let (k, e) = self.keys.source_range();
        self.send(
            Command::Range(RangeRequest {
                cluster: Cluster::Source,
                key: k,
                range_end: e,
                revision: 0,
                limit: 1,
                count_only: true,
                keys_only: false,
                sort: SortBy::Key,
            }),
            Pending::CountR0,
        );
    }

    fn on_fence(&mut self, now: Instant, kv: Option<tidemark_core::etcd::KeyValue>) {
        let existing = match &kv {
            Some(kv) => match Checkpoint::decode(&kv.value) {
                Ok(c) => Some(c),
                Err(e) => return self.stop(FailKind::CheckpointInvalid, &e.to_string()),
            },
            None => None,
        };
        if let Some(c) = &existing {
            if c.link != self.cfg.link_id() {
                return self.stop(FailKind::PrefixConflict, "another link's fence");
            }
            if self.claimed && c.holder != self.holder {
                return self.stop(FailKind::FenceLost, "another holder owns the fence");
            }
        }
        self.fence_mod = kv.as_ref().map_or(0, |k| k.mod_revision);
        let ours = existing.as_ref().is_some_and(|c| c.holder == self.holder);
        self.fence = existing.clone();
        if !ours {
            // Claim: epoch + 1, same state as the record we take over.
            let mut ck = match &existing {
                Some(c) => c.clone(),
                None => self.fence_record(0, None, None),
            };
            ck.epoch = existing.as_ref().map_or(1, |c| c.epoch + 1);
            ck.holder = self.holder.clone();
            self.fence = Some(ck.clone());
            self.claimed = true;
            self.status.epoch = ck.epoch;
            self.push_txn(vec![], ck);
            self.pump_writes();
            return;
        }
        self.resume(now);
    }

    fn resume(&mut self, _now: Instant) {
        let f = self.fence.clone().expect("fence known after claim");
        if self.force_genesis {
            self.force_genesis = false;
            self.resync = true;
            self.begin_genesis();
        } else if f.is_consistent() && f.watermark > 0 {
            // A watch from W+1 == compact revision can miss a delete at W+1 on etcd < 3.5.15
            // (etcd 18089); a read pinned at W fails exactly when W < compact revision.
            let (k, e) = self.keys.source_range();
            self.send(
                Command::Range(RangeRequest {
                    cluster: Cluster::Source,
                    key: k,
                    range_end: e,
                    revision: f.watermark,
                    limit: 1,
                    count_only: true,
                    keys_only: false,
                    sort: SortBy::Key,
                }),
                Pending::CheckCompact(f.watermark),
            );
        } else {
            self.resync = f.watermark > 0 || f.scan.is_some() || f.split.is_some();
            self.begin_genesis();
        }
    }

    fn open_watch(&mut self, from: i64) {
        self.phase = Phase2::Tail;
        self.status.phase = Phase::Syncing;
        self.watch_seq += 1;
        self.watch_id = self.watch_seq;
        let (k, e) = self.keys.source_range();
        let id = self.watch_id;
        self.send(
            Command::Watch(WatchRequest {
                watch_id: id,
                key: k,
                range_end: e,
                start_revision: from,
            }),
            Pending::Watch,
        );
    }

    fn on_done(&mut self, now: Instant, p: Pending, result: Result<Reply, Failure>) {
        let reply = match result {
            Ok(r) => r,
            Err(Failure::Compacted { .. }) if matches!(p, Pending::CheckCompact(_)) => {
                self.status.forced_resync_count += 1;
                self.resync = true;
                return self.begin_genesis();
            }
            Err(_) => {
                if matches!(p, Pending::Ignore) {
                    return;
                }
                if matches!(p, Pending::Write) {
                    // Outcome may be unknown: re-read the fence before anything else.
                    self.writing = None;
                }
                return self.restart(now);
            }
        };
        match (p, reply) {
            (Pending::ReadFence, Reply::Range(r)) => self.on_fence(now, r.kvs.into_iter().next()),
            (Pending::CountR0, Reply::Range(r)) => {
                self.r0 = r.header_revision;
                if self.cfg.initial_sync.mode == InitialSyncMode::RequireEmpty && !self.resync {
                    let (k, e) = self.keys.target_range();
                    self.send(
                        Command::Range(RangeRequest {
                            cluster: Cluster::Target,
                            key: k,
                            range_end: e,
                            revision: 0,
                            limit: 0,
                            count_only: false,
                            keys_only: true,
                            sort: SortBy::Key,
                        }),
                        Pending::CheckEmpty,
                    );
                } else {
                    self.scan();
                }
            }
            (Pending::CheckEmpty, Reply::Range(r)) => {
                if r.kvs.iter().any(|kv| !self.keys.is_checkpoint(&kv.key)) {
                    self.stop(FailKind::EmptyTargetViolation, "target range is not empty");
                } else {
                    self.scan();
                }
            }
            (Pending::ScanSource, Reply::Range(r)) => {
                self.expected.clear();
                let scan = Scan {
                    base: self.r0,
                    cursor: vec![],
                    scanned: false,
                    rmax: self.r0,
                    smax: None,
                    base_count: None,
                    residue_above: None,
                };
                let w = self.fence.as_ref().map_or(0, |f| f.watermark);
                let mut ops: Vec<TxnOp> = Vec::new();
                for kv in r.kvs {
                    if let Some(t) = self.keys.rewrite(&kv.key) {
                        self.expected.insert(t.clone());
                        let bytes: usize = ops.iter().map(TxnOp::wire_size).sum();
                        if !ops.is_empty() && bytes + kv.value.len() > 512 * 1024 {
                            let ck = self.fence_record(w, Some(scan.clone()), None);
                            self.push_txn(std::mem::take(&mut ops), ck);
                        }
                        ops.push(TxnOp::Put {
                            key: t,
                            value: kv.value,
                        });
                        if ops.len() == CHUNK {
                            let ck = self.fence_record(w, Some(scan.clone()), None);
                            self.push_txn(std::mem::take(&mut ops), ck);
                        }
                    }
                }
                let ck = self.fence_record(w, Some(scan), None);
                self.push_txn(ops, ck);
                self.pump_writes();
            }
            (Pending::ReadTarget, Reply::Range(r)) => {
                let w = self.fence.as_ref().map_or(0, |f| f.watermark);
                let scan = Scan {
                    base: self.r0,
                    cursor: vec![],
                    scanned: true,
                    rmax: self.r0,
                    smax: None,
                    base_count: None,
                    residue_above: None,
                };
                let mut ops = Vec::new();
                for kv in r.kvs {
                    if !self.keys.is_checkpoint(&kv.key) && !self.expected.contains(&kv.key) {
                        ops.push(TxnOp::Delete {
                            key: kv.key,
                            range_end: vec![],
                        });
                        if ops.len() == CHUNK {
                            let ck = self.fence_record(w, Some(scan.clone()), None);
                            self.push_txn(std::mem::take(&mut ops), ck);
                        }
                    }
                }
                let ck = self.fence_record(w, Some(scan), None);
                self.push_txn(ops, ck);
                let settled = self.fence_record(self.r0, None, None);
                self.push_txn(vec![], settled);
                self.phase = Phase2::Settling;
                self.pump_writes();
            }
            (Pending::Write, Reply::Txn(t)) => {
                let Some(ck) = self.writing.take() else {
                    // A reply for a write abandoned by a restart: the fence re-read decides.
                    return;
                };
                if !t.succeeded {
                    let cur = t.reads.into_iter().next().flatten();
                    if let Some(kv) = &cur {
                        if kv.value == ck.encode() {
                            // Our own commit whose reply was lost: adopt it.
                            self.fence_mod = kv.mod_revision;
                            self.fence = Some(ck);
                            return self.after_write();
                        }
                    }
                    return self.stop(FailKind::FenceLost, "fence compare failed");
                }
                self.fence_mod = t.header_revision;
                self.status.last_applied_revision = ck.watermark;
                self.status.applied_txns += 1;
                self.fence = Some(ck);
                self.after_write();
            }
            (Pending::CheckCompact(w), Reply::Range(_)) => self.open_watch(w + 1),
            (Pending::Watch, _) | (Pending::Ignore, _) => {}
            _ => self.restart(now),
        }
    }

    fn scan(&mut self) {
        let (k, e) = self.keys.source_range();
        self.send(
            Command::Range(RangeRequest {
                cluster: Cluster::Source,
                key: k,
                range_end: e,
                revision: self.r0,
                limit: 0,
                count_only: false,
                keys_only: false,
                sort: SortBy::Key,
            }),
            Pending::ScanSource,
        );
    }

    fn after_write(&mut self) {
        if !self.queue.is_empty() {
            return self.pump_writes();
        }
        match self.phase {
            Phase2::Start => {
                let now = Instant(0);
                self.resume(now);
            }
            Phase2::Genesis => {
                let prune = self.resync || self.cfg.initial_sync.mode != InitialSyncMode::Overwrite;
                if prune {
                    self.phase = Phase2::Pruning;
                    let (k, e) = self.keys.target_range();
                    self.send(
                        Command::Range(RangeRequest {
                            cluster: Cluster::Target,
                            key: k,
                            range_end: e,
                            revision: 0,
                            limit: 0,
                            count_only: false,
                            keys_only: true,
                            sort: SortBy::Key,
                        }),
                        Pending::ReadTarget,
                    );
                } else {
                    let settled = self.fence_record(self.r0, None, None);
                    self.push_txn(vec![], settled);
                    self.phase = Phase2::Settling;
                    self.pump_writes();
                }
            }
            Phase2::Pruning => {}
            Phase2::Settling => {
                self.status.phase = Phase::Syncing;
                self.open_watch(self.r0 + 1);
            }
            Phase2::Tail => {}
        }
    }

    fn on_events(&mut self, events: Vec<tidemark_core::etcd::Event>) {
        let w = self.fence.as_ref().map_or(0, |f| f.watermark);
        let mut by_rev: BTreeMap<i64, Vec<TxnOp>> = BTreeMap::new();
        for e in events {
            if e.kv.mod_revision <= w {
                continue;
            }
            let ops = by_rev.entry(e.kv.mod_revision).or_default();
            if let Some(t) = self.keys.rewrite(&e.kv.key) {
                ops.push(match e.kind {
                    EventKind::Put => TxnOp::Put {
                        key: t,
                        value: e.kv.value,
                    },
                    EventKind::Delete => TxnOp::Delete {
                        key: t,
                        range_end: vec![],
                    },
                });
            }
        }
        for (rev, ops) in by_rev {
            if ops.is_empty() {
                continue;
            }
            let chunks: Vec<Vec<TxnOp>> = ops.chunks(CHUNK).map(|c| c.to_vec()).collect();
            let n = chunks.len();
            let before = self
                .queue
                .iter()
                .map(|(_, c)| c.watermark)
                .chain(self.writing.as_ref().map(|c| c.watermark))
                .fold(w, i64::max);
            for (i, c) in chunks.into_iter().enumerate() {
                let ck = if i + 1 == n {
                    self.fence_record(rev, None, None)
                } else {
                    self.fence_record(
                        before,
                        None,
                        Some(Split {
                            rev,
                            done: ((i + 1) * CHUNK) as u32,
                        }),
                    )
                };
                self.push_txn(c, ck);
            }
        }
        self.pump_writes();
    }
}

impl Machine for RefReplicator {
    type Input = Input;
    type Output = Output;
    type Status = Status;
    fn handle_input(&mut self, now: Instant, input: Input) {
        if self.stopped.is_some() {
            return;
        }
        match input {
            Input::Done { id, result } => {
                if let Some(p) = self.pending.remove(&id) {
                    self.on_done(now, p, result);
                }
            }
            Input::Watch { watch_id, event } => {
                if watch_id != self.watch_id || self.phase != Phase2::Tail {
                    return;
                }
                match event {
                    WatchEvent::Events { events, .. } => self.on_events(events),
                    WatchEvent::Progress { .. } => {}
                    WatchEvent::Cancelled { .. } => {
                        self.status.forced_resync_count += 1;
                        self.watch_id = 0;
                        self.queue.clear();
                        self.force_genesis = true;
                        // Wait for the write in flight, then resync from a fresh R0.
                        self.phase = Phase2::Start;
                        if self.writing.is_none() {
                            self.resume(now);
                        }
                    }
                    WatchEvent::Failed { .. } => {
                        self.watch_id = 0;
                        self.restart(now);
                    }
                }
            }
            Input::Control(_) => {}
        }
    }

    fn poll_output(&mut self, now: Instant) -> Output {
        if let Some(s) = &self.stopped {
            return Output::Stopped(s.clone());
        }
        if let Some(t) = self.wake {
            if t <= now && self.pending.values().all(|p| matches!(p, Pending::Ignore)) {
                self.wake = None;
                let fk = self.keys.checkpoint_key().to_vec();
                self.send(
                    Command::Range(self.single(Cluster::Target, fk)),
                    Pending::ReadFence,
                );
            }
        }
        if let Some(cmd) = self.out.pop_front() {
            let id = self.next_id - self.out.len() as u64;
            return Output::Command { id, cmd };
        }
        match self.wake {
            // Waiting for replies before the retry: look again shortly.
            Some(t) if t <= now => Output::Timeout(Instant(now.0 + 10_000_000)),
            Some(t) => Output::Timeout(t),
            None => Output::Timeout(Instant(now.0 + 3_600_000_000_000)),
        }
    }

    fn status(&self) -> &Status {
        &self.status
    }
}
