//! `mirror_core`: the mirror state machine driven by an arbitrary sequence of inputs.
//!
//! The harness plays both etcd clusters with the model etcd's MVCC [`Store`] and its Txn
//! (`tidemark-model`, the same model the simulator runs; watches are delivered here, as the
//! fuzzer chooses) and lets the fuzzer choose, step by step: which
//! issued command completes and how (success, transient error, throttling, NOSPACE, too
//! large, unknown outcome applied or not), source writes, deletes, multi-key revisions and
//! compactions, watch deliveries, progress notifications and stream failures, operator
//! controls, time advances, and agent crashes (with in-flight writes applied or not).
//!
//! In *chaos* mode the fuzzer may also answer with arbitrary replies and failures of any
//! kind; there only safety-by-construction is checked. Properties:
//! - nothing panics, and `poll_output` always reaches `Timeout`/`Stopped` (no livelock);
//! - every `Command::Txn` carries exactly one compare, on the fence key (`ModRevision`,
//!   `CreateRevision == 0`, or the value of a record), ends its success branch with a Put of
//!   the fence key whose value is a valid checkpoint of this agent, touches the fence
//!   nowhere else, writes only inside the mirrored target window, and its failure branch
//!   only reads; a genesis page (a `ModRevision` compare) instead only puts window keys;
//! - the core never writes to the source;
//! - in honest mode (the model never lies), whenever the fence says `watermark = W` with no
//!   split and no scan, the target window equals the source range at `W`, rewritten (in
//!   `Overwrite` mode, pre-existing target keys may remain); and keys outside the window
//!   (excluded prefix, other prefixes) are never touched.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
use tidemark_core::classify::{classify, Code, Failure, PermanentKind};
use tidemark_core::config::{InitialSyncMode, MirrorConfig, OversizedRevision};
use tidemark_core::etcd::*;
use tidemark_core::mirror::checkpoint::Checkpoint;
use tidemark_core::mirror::{Control, Input, Mirror, Output};
use tidemark_core::Instant;
use tidemark_model::etcd::store::in_range;
use tidemark_model::etcd::{apply_txn, check_txn, store_err, Mutation, Store};

const SRC_PREFIX: &str = "/s/";
const TGT_PREFIX: &str = "/t/";
const EXCLUDE: &str = "x/";
/// `TIDEMARK_FUZZ_TRACE=1` prints every step and output (for `examples/replay.rs`).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TIDEMARK_FUZZ_TRACE").is_some())
}

const MAX_OUTPUTS_PER_DRAIN: usize = 20_000;
const VERSIONS: [&str; 6] = ["3.5.13", "3.5.9", "3.4.31", "3.4.20", "3.6.1", "3.3.27"];

#[derive(Debug, Arbitrary)]
struct Plan {
    chaos: bool,
    mode: u8,
    max_txn_ops: u8,
    page_keys: u8,
    paced: bool,
    split_fail: bool,
    reconcile: bool,
    source_version: u8,
    target_version: u8,
    preexisting: Vec<(u8, u8)>,
    steps: Vec<Step>,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Reply {
        pick: u8,
        how: How,
    },
    ReplyAll,
    SourcePut {
        key: u8,
        value: u8,
    },
    SourceDelete {
        key: u8,
    },
    SourceDeletePrefix {
        key: u8,
    },
    SourceTxn {
        keys: Vec<(u8, u8)>,
    },
    Compact {
        back: u8,
    },
    Deliver {
        revs: u8,
    },
    Progress,
    WatchFail,
    Control(u8),
    Advance {
        millis: u16,
    },
    AdvanceToDeadline,
    Restart {
        apply_inflight: bool,
    },
    /// Chaos only.
    Garbage {
        pick: u8,
        reply: GarbageReply,
    },
    /// Chaos only.
    GarbageWatch {
        event: GarbageEvent,
    },
}

#[derive(Debug, Arbitrary, Clone, Copy)]
enum How {
    Ok,
    Transient,
    Throttled,
    NoSpace,
    TooLarge,
    UnknownApplied,
    UnknownNotApplied,
}

#[derive(Debug, Arbitrary)]
enum GarbageReply {
    Status {
        version: String,
        rev: i16,
        learner: bool,
        cluster: u8,
    },
    Range {
        kvs: Vec<(u8, Vec<u8>, i16, i16)>,
        more: bool,
        count: i16,
        rev: i16,
    },
    Txn {
        succeeded: bool,
        rev: i16,
        reads: Vec<Option<(u8, Vec<u8>, i16)>>,
    },
    WatchStarted,
    Ok,
    Fail(u8, String),
    Compacted(i16),
}

#[derive(Debug, Arbitrary)]
enum GarbageEvent {
    Events {
        header: i16,
        events: Vec<(bool, u8, u8, i16)>,
    },
    Progress(i16),
    Cancelled(i16),
}

fn src_key(i: u8) -> Vec<u8> {
    match i % 12 {
        0..=6 => format!("{SRC_PREFIX}k{}", i % 7).into_bytes(),
        7 | 8 => format!("{SRC_PREFIX}{EXCLUDE}{}", i % 2).into_bytes(),
        9 => b"/r/outside".to_vec(),
        10 => format!("{SRC_PREFIX}\u{0}tidemark-checkpoint").into_bytes(),
        _ => format!("{SRC_PREFIX}k{}/deep", i % 3).into_bytes(),
    }
}

fn err(code: Code, msg: &str) -> Failure {
    classify(code, msg)
}

fn put(key: Vec<u8>, value: Vec<u8>) -> Mutation {
    Mutation::Put {
        key,
        value,
        lease: 0,
    }
}

fn del(key: Vec<u8>, end: Vec<u8>) -> Mutation {
    Mutation::DeleteRange { key, end }
}

/// Every live key-value of `store` at `rev`, in key order.
fn live_at(store: &Store, rev: i64) -> BTreeMap<Vec<u8>, KeyValue> {
    store
        .range_at(b"", &[0], rev)
        .into_iter()
        .map(|kv| (kv.key.clone(), kv.clone()))
        .collect()
}

/// The live value of `key` now.
fn value_of<'a>(store: &'a Store, key: &[u8]) -> Option<&'a Vec<u8>> {
    store.get(key).map(|kv| &kv.value)
}

#[derive(Debug)]
struct Watch {
    key: Vec<u8>,
    end: Vec<u8>,
    next: i64,
}

struct World {
    chaos: bool,
    cfg: MirrorConfig,
    fence: Vec<u8>,
    source: Store,
    target: Store,
    foreign: BTreeMap<Vec<u8>, Vec<u8>>,
    untouchable: BTreeMap<Vec<u8>, Vec<u8>>,
    versions: (String, String),
    mirror: Mirror,
    incarnation: u64,
    now: Instant,
    deadline: Option<Instant>,
    pending: Vec<(u64, Command)>,
    watches: BTreeMap<u64, Watch>,
    stopped: bool,
}

impl World {
    fn drain(&mut self) {
        let mut spins = 0;
        for _ in 0..MAX_OUTPUTS_PER_DRAIN {
            let out = self.mirror.poll_output(self.now);
            if tracing() {
                eprintln!("  {:?} <- {out:?}", self.now);
            }
            match out {
                Output::Command { id, cmd } => {
                    if tracing() {
                        if let Command::Txn(t) = &cmd {
                            if let Some(TxnOp::Put { value, .. }) = t.success.last() {
                                eprintln!("    record {}", String::from_utf8_lossy(value));
                            }
                        }
                    }
                    self.check_command(&cmd);
                    self.pending.push((id, cmd));
                }
                Output::Timeout(t) => {
                    // A deadline at or before `now` makes a driver poll again at once; it
                    // must not come back forever (a busy loop).
                    if t <= self.now {
                        spins += 1;
                        if spins < 100 {
                            continue;
                        }
                        assert!(
                            false,
                            "poll_output keeps returning a past deadline {t:?} at {:?} (a driver would busy-loop)",
                            self.now
                        );
                    }
                    self.deadline = (t.as_nanos() != u64::MAX).then_some(t);
                    return;
                }
                Output::Stopped(_) => {
                    self.stopped = true;
                    self.deadline = None;
                    return;
                }
            }
        }
        panic!("poll_output issued {MAX_OUTPUTS_PER_DRAIN} outputs without a Timeout (livelock)");
    }

    fn in_window(&self, key: &[u8]) -> bool {
        let base = TGT_PREFIX.as_bytes();
        key.starts_with(base) && !key[base.len()..].starts_with(EXCLUDE.as_bytes())
    }

    fn check_command(&self, cmd: &Command) {
        let Command::Txn(t) = cmd else {
            if let Command::Range(r) = cmd {
                assert!(r.limit >= 0, "negative range limit");
            }
            return;
        };
        assert_eq!(
            t.compares.len(),
            1,
            "a Txn without exactly one compare: {t:?}"
        );
        let c = &t.compares[0];
        assert_eq!(c.key, self.fence, "the compare is not on the fence key");
        match c.target {
            // A chaos server can report any header revision; the core takes it as the fence's
            // mod revision and the compare then simply fails, which is safe.
            CompareTarget::ModRevision => assert!(
                c.value > 0 || self.chaos,
                "ModRevision compare on {}",
                c.value
            ),
            CompareTarget::CreateRevision => assert_eq!(c.value, 0, "CreateRevision compare not 0"),
            CompareTarget::Version => panic!("fence compared by Version"),
            // The record a pipelined Txn builds on: always one this link wrote.
            CompareTarget::Value => assert!(
                Checkpoint::decode(&c.bytes).is_ok() || self.chaos,
                "Value compare against bytes that are not a checkpoint"
            ),
        }
        let page = c.target == CompareTarget::ModRevision
            && !t.success.iter().any(|op| op.key() == self.fence.as_slice());
        if page {
            // A genesis page (docs/design.md, "Pipelined commits"): fenced by the fence's
            // mod revision, it only puts keys of the window and leaves the fence alone.
            for op in &t.success {
                let TxnOp::Put { key, .. } = op else {
                    panic!("a page Txn does more than put: {op:?}");
                };
                assert!(
                    self.in_window(key),
                    "page write outside the window: {:?}",
                    String::from_utf8_lossy(key)
                );
            }
            for op in &t.failure {
                assert!(
                    matches!(op, TxnOp::Get { .. }),
                    "the failure branch writes: {op:?}"
                );
            }
            return;
        }
        let Some(TxnOp::Put { key, value }) = t.success.last() else {
            panic!("success branch does not end with a Put: {t:?}");
        };
        assert_eq!(
            *key, self.fence,
            "success branch does not end with the fence Put"
        );
        let rec = match Checkpoint::decode(value) {
            Ok(rec) => rec,
            Err(e) => panic!("the mirror wrote a checkpoint it cannot read: {e}"),
        };
        assert_eq!(
            rec.holder,
            self.mirror.status().holder,
            "fence written with another holder"
        );
        assert_eq!(
            rec.link,
            self.cfg.link_id(),
            "fence written for another link"
        );
        for op in &t.success[..t.success.len() - 1] {
            assert_ne!(
                op.key(),
                self.fence.as_slice(),
                "the fence is touched before its Put"
            );
            match op {
                TxnOp::Put { key, .. } => {
                    assert!(
                        self.in_window(key),
                        "write outside the window: {:?}",
                        String::from_utf8_lossy(key)
                    )
                }
                TxnOp::Delete { key, range_end } => {
                    assert!(
                        self.in_window(key),
                        "delete outside the window: {:?}",
                        String::from_utf8_lossy(key)
                    );
                    if !range_end.is_empty() {
                        let excl = [TGT_PREFIX.as_bytes(), EXCLUDE.as_bytes()].concat();
                        let end_ok = range_end.as_slice()
                            <= prefix_end(TGT_PREFIX.as_bytes()).as_slice()
                            && range_end.as_slice() != [0u8];
                        assert!(end_ok, "range delete past the window");
                        assert!(
                            !(key.as_slice() <= excl.as_slice()
                                && range_end.as_slice() > excl.as_slice()),
                            "range delete covers the excluded prefix"
                        );
                        assert!(
                            range_end.as_slice() <= self.fence.as_slice()
                                || key.as_slice() > self.fence.as_slice(),
                            "range delete covers the fence"
                        );
                    }
                }
                TxnOp::Get { .. } => {}
            }
        }
        for op in &t.failure {
            assert!(
                matches!(op, TxnOp::Get { .. }),
                "the failure branch writes: {op:?}"
            );
        }
    }

    fn store(&mut self, cluster: Cluster) -> &mut Store {
        match cluster {
            Cluster::Source => &mut self.source,
            Cluster::Target => &mut self.target,
        }
    }

    /// Runs a command against the model.
    fn execute(&mut self, cmd: &Command) -> Result<Reply, Failure> {
        match cmd {
            Command::Status { cluster } => {
                let (version, id) = match cluster {
                    Cluster::Source => (self.versions.0.clone(), 1),
                    Cluster::Target => (self.versions.1.clone(), 2),
                };
                let s = self.store(*cluster);
                Ok(Reply::Status(StatusReply {
                    version,
                    header_revision: s.rev(),
                    cluster_id: id,
                    member_id: id * 10,
                    is_learner: false,
                    db_size: s.live_bytes(),
                }))
            }
            Command::Range(r) => self
                .store(r.cluster)
                .range(r)
                .map(Reply::Range)
                .map_err(store_err),
            Command::Txn(t) => {
                check_txn(t)?;
                Ok(Reply::Txn(apply_txn(&mut self.target, t)))
            }
            Command::Watch(w) => {
                let next = if w.start_revision > 0 {
                    w.start_revision
                } else {
                    self.source.rev() + 1
                };
                self.watches.insert(
                    w.watch_id,
                    Watch {
                        key: w.key.clone(),
                        end: w.range_end.clone(),
                        next,
                    },
                );
                Ok(Reply::WatchStarted)
            }
            Command::CancelWatch { watch_id } => {
                self.watches.remove(watch_id);
                Ok(Reply::Ok)
            }
            Command::RequestProgress { .. } => Ok(Reply::Ok),
        }
    }

    fn input(&mut self, input: Input) {
        if tracing() {
            eprintln!("  {:?} -> {input:?}", self.now);
        }
        if !self.stopped {
            self.mirror.handle_input(self.now, input);
        }
        self.drain();
    }

    fn reply(&mut self, pick: u8, how: How) {
        if self.pending.is_empty() {
            return;
        }
        let (id, cmd) = self.pending.remove(usize::from(pick) % self.pending.len());
        let is_write = matches!(cmd, Command::Txn(_));
        let result = match how {
            How::Ok => self.execute(&cmd),
            How::Transient => Err(err(Code::Unavailable, "etcdserver: no leader")),
            How::Throttled => Err(err(
                Code::ResourceExhausted,
                "etcdserver: too many requests",
            )),
            How::NoSpace if is_write => Err(err(
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
            )),
            How::TooLarge if is_write => Err(err(
                Code::InvalidArgument,
                "etcdserver: request is too large",
            )),
            How::UnknownApplied => {
                let _ = self.execute(&cmd);
                Err(err(Code::DeadlineExceeded, "context deadline exceeded"))
            }
            How::UnknownNotApplied => Err(err(Code::DeadlineExceeded, "context deadline exceeded")),
            How::NoSpace | How::TooLarge => self.execute(&cmd),
        };
        self.input(Input::Done { id, result });
    }

    fn deliver(&mut self, revs: u8) {
        let ids: Vec<u64> = self.watches.keys().copied().collect();
        for id in ids {
            let w = &self.watches[&id];
            if w.next < self.source.compact_rev() {
                self.watches.remove(&id);
                self.input(Input::Watch {
                    watch_id: id,
                    event: WatchEvent::Cancelled {
                        compact_revision: self.source.compact_rev(),
                        reason: "etcdserver: mvcc: required revision has been compacted".into(),
                    },
                });
                continue;
            }
            let upto = (w.next + i64::from(revs % 8) + 1).min(self.source.rev() + 1);
            let events: Vec<Event> = (w.next..upto)
                .flat_map(|rev| self.source.events_at(rev))
                .filter(|e| in_range(&e.kv.key, &w.key, &w.end))
                .cloned()
                .collect();
            if let Some(w) = self.watches.get_mut(&id) {
                w.next = w.next.max(upto);
            }
            if !events.is_empty() {
                let header_revision = self.source.rev();
                self.input(Input::Watch {
                    watch_id: id,
                    event: WatchEvent::Events {
                        header_revision,
                        events,
                    },
                });
            }
        }
    }

    fn progress(&mut self) {
        let synced: Vec<u64> = self
            .watches
            .iter()
            .filter(|(_, w)| w.next > self.source.rev())
            .map(|(id, _)| *id)
            .collect();
        for id in synced {
            let revision = self.source.rev();
            self.input(Input::Watch {
                watch_id: id,
                event: WatchEvent::Progress { revision },
            });
        }
    }

    fn restart(&mut self, apply_inflight: bool) {
        let pending = std::mem::take(&mut self.pending);
        if apply_inflight {
            for (_, cmd) in &pending {
                if let Command::Txn(t) = cmd {
                    if check_txn(t).is_ok() {
                        apply_txn(&mut self.target, t);
                    }
                }
            }
        }
        self.watches.clear();
        self.incarnation += 1;
        self.mirror =
            Mirror::new(self.cfg.clone(), 0x5eed ^ self.incarnation).expect("config is valid");
        self.stopped = false;
        self.deadline = None;
        self.drain();
    }

    /// The watermark invariant (honest mode only).
    fn check_invariant(&self) {
        for (k, v) in &self.untouchable {
            assert_eq!(
                value_of(&self.target, k),
                Some(v),
                "a key outside the window was modified"
            );
        }
        let Some(fence) = self.target.get(&self.fence) else {
            return;
        };
        let rec = match Checkpoint::decode(&fence.value) {
            Ok(rec) => rec,
            Err(e) => panic!("the fence holds an unreadable record: {e}"),
        };
        // Watermark 0 promises nothing: the claim before genesis (as in the sim's checker).
        if !rec.is_consistent() || rec.watermark == 0 {
            return;
        }
        let w = rec.watermark;
        assert!(
            w <= self.source.rev(),
            "watermark {w} ahead of the source {}",
            self.source.rev()
        );
        if let Err(why) = self.target_matches_source_at(w) {
            panic!("{why}");
        }
    }

    /// Whether the target window equals the source range at `w`, rewritten (in `Overwrite`
    /// mode, keys that were in the target before the mirror started may remain).
    fn target_matches_source_at(&self, w: i64) -> Result<(), String> {
        let mut expect: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for (k, kv) in live_at(&self.source, w) {
            let Some(rel) = k.strip_prefix(SRC_PREFIX.as_bytes()) else {
                continue;
            };
            if rel.starts_with(EXCLUDE.as_bytes()) {
                continue;
            }
            let tk = [TGT_PREFIX.as_bytes(), rel].concat();
            if tk == self.fence {
                continue;
            }
            expect.insert(tk, kv.value);
        }
        let overwrite = self.cfg.initial_sync.mode == InitialSyncMode::Overwrite;
        for (k, kv) in &live_at(&self.target, self.target.rev()) {
            if !self.in_window(k) || *k == self.fence {
                continue;
            }
            match expect.get(k) {
                Some(v) if *v == kv.value => {}
                Some(v) => {
                    return Err(format!(
                        "target {:?} is {:?}, the source at {w} has {:?}",
                        String::from_utf8_lossy(k),
                        kv.value,
                        v
                    ))
                }
                None if overwrite && self.foreign.get(k) == Some(&kv.value) => {}
                None => {
                    return Err(format!(
                        "target has {:?}, absent from the source at {w}",
                        String::from_utf8_lossy(k)
                    ))
                }
            }
        }
        for k in expect.keys() {
            if self.target.get(k).is_none() {
                return Err(format!(
                    "target lacks {:?} at watermark {w}",
                    String::from_utf8_lossy(k)
                ));
            }
        }
        Ok(())
    }
}

/// The source's server version: some trust progress notifications, some do not.
fn source_version(plan: &Plan) -> String {
    VERSIONS[usize::from(plan.source_version) % VERSIONS.len()].into()
}

fn config(plan: &Plan) -> MirrorConfig {
    let mut cfg = MirrorConfig::new(SRC_PREFIX, TGT_PREFIX);
    cfg.source.endpoint_list = vec!["http://source:2379".into()];
    cfg.target.endpoint_list = vec!["http://target:2379".into()];
    cfg.initial_sync.mode = match plan.mode % 3 {
        0 => InitialSyncMode::RequireEmpty,
        1 => InitialSyncMode::Overwrite,
        _ => InitialSyncMode::OverwriteAndPrune,
    };
    cfg.sync.exclude_prefixes = vec![EXCLUDE.into()];
    cfg.sync.max_txn_ops = 2 + u32::from(plan.max_txn_ops % 6);
    cfg.sync.txn_flush_bytes = 1024;
    cfg.sync.page_key_limit = 1 + u32::from(plan.page_keys % 4);
    cfg.sync.page_bytes = 1024;
    cfg.sync.watch_buffer_bytes = 64 * 1024;
    cfg.sync.max_ops_per_second = if plan.paced { 20 } else { 0 };
    if plan.split_fail {
        cfg.sync.oversized_revision = OversizedRevision::Fail;
    }
    cfg.reconciliation.enabled = plan.reconcile;
    cfg
}

pub fn run(data: &[u8]) {
    let Ok(plan) = Plan::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cfg = config(&plan);
    let mirror = match Mirror::new(cfg.clone(), 0x5eed) {
        Ok(m) => m,
        Err(e) => panic!("the harness config is invalid: {e}"),
    };
    let mut target = Store::new();
    let mut foreign = BTreeMap::new();
    let untouchable = BTreeMap::from([
        (
            format!("{TGT_PREFIX}{EXCLUDE}keep").into_bytes(),
            b"keep".to_vec(),
        ),
        (b"/u/other".to_vec(), b"other".to_vec()),
    ]);
    let mut muts: Vec<Mutation> = untouchable
        .iter()
        .map(|(k, v)| put(k.clone(), v.clone()))
        .collect();
    if cfg.initial_sync.mode != InitialSyncMode::RequireEmpty || plan.chaos {
        for (k, v) in plan.preexisting.iter().take(4) {
            let key = format!("{TGT_PREFIX}k{}", k % 9).into_bytes();
            foreign.insert(key.clone(), vec![*v]);
            muts.push(put(key, vec![*v]));
        }
    }
    target.write(&muts);
    let fence = cfg.checkpoint_key();
    let mut w = World {
        chaos: plan.chaos,
        fence,
        source: Store::new(),
        target,
        foreign,
        untouchable,
        versions: (
            source_version(&plan),
            VERSIONS[usize::from(plan.target_version) % VERSIONS.len()].into(),
        ),
        mirror,
        incarnation: 0,
        now: Instant::from_nanos(1_000_000_000),
        deadline: None,
        pending: Vec::new(),
        watches: BTreeMap::new(),
        stopped: false,
        cfg,
    };
    w.drain();
    if tracing() {
        eprintln!("config: {:?}", w.cfg);
    }
    for step in plan.steps.iter().take(400) {
        if tracing() {
            eprintln!(
                "step {step:?} (pending {:?})",
                w.pending.iter().map(|p| p.0).collect::<Vec<_>>()
            );
        }
        match step {
            Step::Reply { pick, how } => w.reply(*pick, *how),
            Step::ReplyAll => {
                for _ in 0..64 {
                    if w.pending.is_empty() {
                        break;
                    }
                    w.reply(0, How::Ok);
                }
            }
            Step::SourcePut { key, value } => {
                w.source.write(&[put(src_key(*key), vec![*value])]);
            }
            Step::SourceDelete { key } => {
                w.source.write(&[del(src_key(*key), Vec::new())]);
            }
            Step::SourceDeletePrefix { key } => {
                let k = src_key(*key);
                let p = k[..k.len().min(4)].to_vec();
                w.source.write(&[del(p.clone(), prefix_end(&p))]);
            }
            Step::SourceTxn { keys } => {
                let mut seen = std::collections::BTreeSet::new();
                let muts: Vec<Mutation> = keys
                    .iter()
                    .take(12)
                    .filter(|(k, _)| seen.insert(src_key(*k)))
                    .map(|(k, v)| {
                        if v.is_multiple_of(5) {
                            del(src_key(*k), Vec::new())
                        } else {
                            put(src_key(*k), vec![*v; usize::from(*v % 16) * 40])
                        }
                    })
                    .collect();
                w.source.write(&muts);
            }
            Step::Compact { back } => {
                // At or below the compact revision, or below revision 1, etcd refuses the
                // compaction; so does the model, and nothing changes.
                let _ = w.source.compact(w.source.rev() - i64::from(back % 8));
            }
            Step::Deliver { revs } => w.deliver(*revs),
            Step::Progress => w.progress(),
            Step::WatchFail => {
                if let Some((&id, _)) = w.watches.iter().next_back() {
                    w.watches.remove(&id);
                    w.input(Input::Watch {
                        watch_id: id,
                        event: WatchEvent::Failed {
                            failure: err(Code::Unavailable, "etcdserver: no leader"),
                        },
                    });
                }
            }
            Step::Control(c) => {
                let c = match c % 5 {
                    0 => Control::Drain,
                    1 => Control::Reconcile,
                    2 => Control::Pause,
                    3 => Control::Resume,
                    _ => Control::Shutdown,
                };
                w.input(Input::Control(c));
            }
            Step::Advance { millis } => {
                w.now = w.now + std::time::Duration::from_millis(u64::from(*millis));
                w.drain();
            }
            Step::AdvanceToDeadline => {
                if let Some(t) = w.deadline {
                    w.now = w.now.max(t);
                }
                w.drain();
            }
            Step::Restart { apply_inflight } => w.restart(*apply_inflight),
            Step::Garbage { pick, reply } if w.chaos => {
                if !w.pending.is_empty() {
                    let (id, _) = w.pending.remove(usize::from(*pick) % w.pending.len());
                    let result = garbage_reply(&w, reply);
                    w.input(Input::Done { id, result });
                }
            }
            Step::GarbageWatch { event } if w.chaos => {
                if let Some(&id) = w.watches.keys().next_back() {
                    let event = garbage_event(event);
                    w.input(Input::Watch {
                        watch_id: id,
                        event,
                    });
                }
            }
            Step::Garbage { .. } | Step::GarbageWatch { .. } => {}
        }
        if !w.chaos {
            w.check_invariant();
        }
    }
}

fn garbage_kv(k: u8, value: &[u8], rev: i16) -> KeyValue {
    KeyValue {
        key: if k.is_multiple_of(4) {
            b"/t/\0tidemark-checkpoint".to_vec()
        } else {
            src_key(k)
        },
        value: value.iter().take(64).copied().collect(),
        create_revision: i64::from(rev) / 2,
        mod_revision: i64::from(rev),
        version: 1,
        lease: i64::from(k % 2),
    }
}

fn garbage_reply(w: &World, r: &GarbageReply) -> Result<Reply, Failure> {
    Ok(match r {
        GarbageReply::Status {
            version,
            rev,
            learner,
            cluster,
        } => Reply::Status(StatusReply {
            version: if version.is_empty() {
                w.versions.0.clone()
            } else {
                version.clone()
            },
            header_revision: i64::from(*rev),
            cluster_id: u64::from(cluster % 3),
            member_id: 1,
            is_learner: *learner,
            db_size: 0,
        }),
        GarbageReply::Range {
            kvs,
            more,
            count,
            rev,
        } => Reply::Range(RangeReply {
            header_revision: i64::from(*rev),
            kvs: kvs
                .iter()
                .take(8)
                .map(|(k, v, _, m)| garbage_kv(*k, v, *m))
                .collect(),
            more: *more,
            count: i64::from(*count),
        }),
        GarbageReply::Txn {
            succeeded,
            rev,
            reads,
        } => Reply::Txn(TxnReply {
            succeeded: *succeeded,
            header_revision: i64::from(*rev),
            reads: reads
                .iter()
                .take(4)
                .map(|r| r.as_ref().map(|(k, v, m)| garbage_kv(*k, v, *m)))
                .collect(),
        }),
        GarbageReply::WatchStarted => Reply::WatchStarted,
        GarbageReply::Ok => Reply::Ok,
        GarbageReply::Fail(kind, message) => {
            return Err(match kind % 8 {
                0 => Failure::Transient {
                    message: message.clone(),
                },
                1 => Failure::Throttled {
                    message: message.clone(),
                },
                2 => Failure::FutureRevision,
                3 => Failure::NoSpace,
                4 => Failure::TooLarge { key_redacted: None },
                5 => Failure::Permanent {
                    kind: PermanentKind::Other,
                    message: message.clone(),
                },
                6 => Failure::Unknown {
                    message: message.clone(),
                },
                _ => classify(Code::from_i32(i32::from(*kind)), message),
            })
        }
        GarbageReply::Compacted(rev) => {
            return Err(Failure::Compacted {
                rev: i64::from(*rev),
            })
        }
    })
}

fn garbage_event(e: &GarbageEvent) -> WatchEvent {
    match e {
        GarbageEvent::Events { header, events } => WatchEvent::Events {
            header_revision: i64::from(*header),
            events: events
                .iter()
                .take(16)
                .map(|(put, k, v, rev)| Event {
                    kind: if *put {
                        EventKind::Put
                    } else {
                        EventKind::Delete
                    },
                    kv: garbage_kv(k | 1, &[*v], *rev),
                })
                .collect(),
        },
        GarbageEvent::Progress(r) => WatchEvent::Progress {
            revision: i64::from(*r),
        },
        GarbageEvent::Cancelled(r) => WatchEvent::Cancelled {
            compact_revision: i64::from(*r),
            reason: "garbage".into(),
        },
    }
}
