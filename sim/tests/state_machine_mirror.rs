//! State-machine test: the mirror core against the simulator's model etcd, checked against a
//! reference model of "target == source at the watermark".
//!
//! The reference keeps every revision of the source range (a map per revision). Transitions:
//! source puts, deletes, prefix deletes and multi-key Txns; compaction; driver steps (run the
//! in-flight commands against the model clusters, deliver watch traffic and progress
//! notifications, advance time to the core's deadline); transient and unknown-outcome
//! failures of the next commands; a crash and restart of the agent (its in-flight Txns
//! applied or lost); and a quiet settle phase. Invariants after every transition:
//! - the model source is at the reference's revision;
//! - whenever the fence says `watermark = W` with no split and no scan, the target range
//!   equals the reference's source range at `W`, rewritten (excluded and out-of-range keys
//!   never appear, and target keys outside the window are never touched);
//! - the agent never stops;
//! - after a settle, the target equals the current source (liveness).

// Panics are the test report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::{BTreeMap, VecDeque};
use tidemark_core::classify::{classify, Code};
use tidemark_core::config::MirrorConfig;
use tidemark_core::etcd::{prefix_end, Cluster, Command, TxnOp};
use tidemark_core::mirror::checkpoint::Checkpoint;
use tidemark_core::mirror::{Input, Mirror, Output};
use tidemark_core::Instant;
use tidemark_sim::model::etcd::{EtcdCluster, WatchOut};
use tidemark_sim::model::store::Mutation;

const SRC: &str = "/s/";
const TGT: &str = "/t/";
const EXCLUDE: &str = "x/";

/// Fixed in core (etcd #18089 watch guard); kept as a switch. Was: when the source is
/// compacted at exactly the revision an agent resumes its watch from, and that revision is a
/// delete, etcd has dropped the tombstone, the watch never delivers the delete, and the core
/// later moves the watermark past it (progress notification), so the target keeps a key the
/// source deleted. Until core checks the compact revision on resume, the random transitions
/// never compact onto a revision holding a delete. Now `false`.
const AVOID_OPEN_BUG_DELETE_AT_COMPACT_REVISION: bool = false;

/// Open bug (see `open_bug_sweep_delete_lost_on_transient_failure`): when a prune-sweep Txn
/// fails transiently (not applied), the sweep continues after the keys it meant to delete
/// instead of retrying them, genesis completes, and the target keeps a stale key under a
/// settled watermark. Until fixed, injected failures skip Txns that delete. Set to `false`
/// once fixed.
const AVOID_OPEN_BUG_SWEEP_TXN_FAILURE: bool = false;

/// Fixed in core (splits allowed during replay); kept as a switch. Was: a source
/// revision with more ops than one Txn holds, arriving while genesis replays, is split, and
/// the mirror writes a fence record with both `split` and `scan` set, which
/// `Checkpoint::decode` rejects, so the next agent start fails with `CheckpointInvalid`.
/// Until fixed, source Txns stay within `maxTxnOps - 1` ops. Now `false`.
const AVOID_OPEN_BUG_SPLIT_DURING_GENESIS: bool = false;

fn key(i: u8) -> Vec<u8> {
    match i % 10 {
        0..=5 => format!("{SRC}k{}", i % 6).into_bytes(),
        6 => format!("{SRC}k{}/sub", i % 2).into_bytes(),
        7 | 8 => format!("{SRC}{EXCLUDE}{}", i % 2).into_bytes(),
        _ => b"/r/outside".to_vec(),
    }
}

fn in_range(k: &[u8], from: &[u8], end: &[u8]) -> bool {
    k >= from && (end.is_empty() || k < end)
}

/// Source-side writes, as the reference and the model both apply them.
#[derive(Debug, Clone)]
enum Write {
    Put(u8, u8),
    Delete(u8),
    /// Deletes every key under the first 4 bytes of `key(i)`.
    DeletePrefix(u8),
    /// Several puts/deletes of distinct keys in one revision.
    Txn(Vec<(u8, Option<u8>)>),
}

impl Write {
    fn mutations(&self) -> Vec<Mutation> {
        let put = |k: u8, v: u8| Mutation::Put {
            key: key(k),
            value: vec![v; 1 + usize::from(v % 4) * 30],
            lease: 0,
        };
        let del = |k: u8| Mutation::DeleteRange {
            key: key(k),
            end: Vec::new(),
        };
        match self {
            Write::Put(k, v) => vec![put(*k, *v)],
            Write::Delete(k) => vec![del(*k)],
            Write::DeletePrefix(k) => {
                let p = key(*k)[..4].to_vec();
                vec![Mutation::DeleteRange {
                    end: prefix_end(&p),
                    key: p,
                }]
            }
            Write::Txn(ops) => {
                let mut seen = std::collections::BTreeSet::new();
                ops.iter()
                    .filter(|(k, _)| seen.insert(key(*k)))
                    .map(|(k, v)| match v {
                        Some(v) => put(*k, *v),
                        None => del(*k),
                    })
                    .collect()
            }
        }
    }
}

#[derive(Debug, Clone)]
struct RefState {
    max_txn_ops: u32,
    /// `OverwriteAndPrune` over a target holding a stale key and an excluded key; otherwise
    /// `RequireEmpty` over an empty target range.
    prune: bool,
    /// `revs[i]` is the source at revision `i + 1` (revision 1 is empty).
    revs: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
    compacted: i64,
    /// Set by a settle: the target must now equal the current source.
    settled: bool,
}

impl RefState {
    fn rev(&self) -> i64 {
        self.revs.len() as i64
    }

    fn apply_write(&mut self, w: &Write) {
        let mut next = self.revs.last().cloned().unwrap_or_default();
        let mut changed = false;
        for m in w.mutations() {
            match m {
                Mutation::Put { key, value, .. } => {
                    next.insert(key, value);
                    changed = true;
                }
                Mutation::DeleteRange { key, end } => {
                    let gone: Vec<Vec<u8>> = next
                        .keys()
                        .filter(|k| {
                            if end.is_empty() {
                                **k == key
                            } else {
                                in_range(k, &key, &end)
                            }
                        })
                        .cloned()
                        .collect();
                    for g in gone {
                        next.remove(&g);
                        changed = true;
                    }
                }
            }
        }
        if changed {
            self.revs.push(next);
        }
    }

    /// Whether source revision `rev` deleted a key.
    fn has_delete_at(&self, rev: i64) -> bool {
        let i = usize::try_from(rev - 1).unwrap();
        i > 0
            && self.revs[i - 1]
                .keys()
                .any(|k| !self.revs[i].contains_key(k))
    }

    /// The target window the source at `rev` must produce.
    fn expected_target(&self, rev: i64) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let at = &self.revs[usize::try_from(rev.max(1) - 1).unwrap()];
        at.iter()
            .filter_map(|(k, v)| {
                let rel = k.strip_prefix(SRC.as_bytes())?;
                if rel.starts_with(EXCLUDE.as_bytes()) {
                    return None;
                }
                Some(([TGT.as_bytes(), rel].concat(), v.clone()))
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
enum Transition {
    Write(Write),
    Compact(u8),
    Step(u8),
    /// The next `n` commands fail: transiently, or (for Txns) with an unknown outcome,
    /// applied or not.
    Fail {
        n: u8,
        unknown: bool,
        applied: bool,
    },
    Crash {
        apply_inflight: bool,
    },
    Settle,
}

struct MirrorModel;

fn write_strategy(max_txn_ops: u32) -> BoxedStrategy<Write> {
    // Until the open bug below is fixed, no source revision needs a split.
    let most = if AVOID_OPEN_BUG_SPLIT_DURING_GENESIS {
        (max_txn_ops as usize).clamp(2, 12)
    } else {
        12
    };
    prop_oneof![
        4 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Write::Put(k, v)),
        2 => any::<u8>().prop_map(Write::Delete),
        // A prefix delete removes up to 8 in-scope keys in one revision.
        if most > 9 { 1 } else { 0 } => any::<u8>().prop_map(Write::DeletePrefix),
        2 => proptest::collection::vec((any::<u8>(), proptest::option::of(any::<u8>())), 1..most)
            .prop_map(Write::Txn),
    ]
    .boxed()
}

impl ReferenceStateMachine for MirrorModel {
    type State = RefState;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<RefState> {
        (prop_oneof![Just(3u32), Just(8), Just(128)], any::<bool>())
            .prop_map(|(max_txn_ops, prune)| RefState {
                max_txn_ops,
                prune,
                revs: vec![BTreeMap::new()],
                compacted: 0,
                settled: false,
            })
            .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Transition> {
        prop_oneof![
            6 => write_strategy(state.max_txn_ops).prop_map(Transition::Write),
            6 => (1u8..12).prop_map(Transition::Step),
            1 => (0u8..6).prop_map(Transition::Compact),
            1 => (1u8..4, any::<bool>(), any::<bool>()).prop_map(|(n, unknown, applied)| Transition::Fail { n, unknown, applied }),
            1 => any::<bool>().prop_map(|apply_inflight| Transition::Crash { apply_inflight }),
            1 => Just(Transition::Settle),
        ]
        .boxed()
    }

    fn apply(mut state: RefState, t: &Transition) -> RefState {
        state.settled = false;
        match t {
            Transition::Write(w) => state.apply_write(w),
            Transition::Compact(back) => {
                let mut to = state.rev() - i64::from(*back);
                if AVOID_OPEN_BUG_DELETE_AT_COMPACT_REVISION {
                    while to > state.compacted && state.has_delete_at(to) {
                        to -= 1;
                    }
                }
                if to > state.compacted {
                    state.compacted = to;
                }
            }
            Transition::Settle => state.settled = true,
            Transition::Step(_) | Transition::Fail { .. } | Transition::Crash { .. } => {}
        }
        state
    }
}

/// The agent, the two model clusters, and the driver between them.
struct Harness {
    cfg: MirrorConfig,
    source: EtcdCluster,
    target: EtcdCluster,
    mirror: Mirror,
    conn: u64,
    now: Instant,
    deadline: Option<Instant>,
    inflight: VecDeque<(u64, Command)>,
    watch_out: VecDeque<WatchOut>,
    fail: Option<(u8, bool, bool)>,
    avoid_sweep_failures: bool,
    steps: u64,
}

impl Harness {
    fn new(max_txn_ops: u32, prune: bool) -> Harness {
        let mut cfg = MirrorConfig::new(SRC, TGT);
        cfg.source.endpoint_list = vec!["http://source:2379".into()];
        cfg.target.endpoint_list = vec!["http://target:2379".into()];
        cfg.sync.exclude_prefixes = vec![EXCLUDE.into()];
        cfg.sync.max_txn_ops = max_txn_ops;
        // Chains of Txns in flight (not the default), with failures injected among them.
        cfg.sync.max_txns_in_flight = 16;
        cfg.sync.page_key_limit = 2;
        cfg.sync.page_bytes = 1024;
        if prune {
            cfg.initial_sync.mode = tidemark_core::config::InitialSyncMode::OverwriteAndPrune;
        }
        let mut target = EtcdCluster::new("target", "3.5.13", 2);
        let mut out = Vec::new();
        // Keys outside the mirrored window that the mirror must never touch.
        let put = |k: &[u8], v: &[u8]| Mutation::Put {
            key: k.to_vec(),
            value: v.to_vec(),
            lease: 0,
        };
        // Keys outside the mirrored window the mirror must never touch; with prune, also an
        // excluded key inside the target range and a stale key the sweep must delete.
        let mut seed = vec![put(b"/u/other", b"other")];
        if prune {
            seed.push(put(format!("{TGT}{EXCLUDE}keep").as_bytes(), b"keep"));
            seed.push(put(format!("{TGT}k1").as_bytes(), b"stale"));
            seed.push(put(format!("{TGT}k9").as_bytes(), b"stale"));
        }
        target.write(&seed, &mut out);
        let mirror = Mirror::new(cfg.clone(), 1).expect("valid config");
        let mut h = Harness {
            cfg,
            source: EtcdCluster::new("source", "3.5.13", 1),
            target,
            mirror,
            conn: 1,
            now: Instant::from_nanos(1_000_000_000),
            deadline: None,
            inflight: VecDeque::new(),
            watch_out: VecDeque::new(),
            fail: None,
            avoid_sweep_failures: AVOID_OPEN_BUG_SWEEP_TXN_FAILURE,
            steps: 0,
        };
        h.pump();
        h
    }

    fn pump(&mut self) {
        for _ in 0..100_000 {
            match self.mirror.poll_output(self.now) {
                Output::Command { id, cmd } => self.inflight.push_back((id, cmd)),
                Output::Timeout(t) => {
                    self.deadline = (t.as_nanos() != u64::MAX).then_some(t);
                    return;
                }
                Output::Stopped(r) => panic!(
                    "the agent stopped: {r:?}\nstatus: {:#?}",
                    self.mirror.status()
                ),
            }
        }
        panic!("poll_output never returned a Timeout");
    }

    fn input(&mut self, input: Input) {
        self.mirror.handle_input(self.now, input);
        self.pump();
    }

    fn keep_watch_out(&mut self, out: Vec<WatchOut>) {
        let conn = self.conn;
        self.watch_out
            .extend(out.into_iter().filter(|o| o.conn == conn));
    }

    /// One driver round: every in-flight command completes, watch traffic is delivered,
    /// then time moves (to the core's deadline when it is idle).
    fn step(&mut self) {
        self.steps += 1;
        let batch: Vec<(u64, Command)> = self.inflight.drain(..).collect();
        for (id, cmd) in batch {
            let mut out = Vec::new();
            let cluster = match &cmd {
                Command::Status { cluster } => *cluster,
                Command::Range(r) => r.cluster,
                Command::Txn(_) => Cluster::Target,
                Command::Watch(_)
                | Command::CancelWatch { .. }
                | Command::RequestProgress { .. } => Cluster::Source,
            };
            let deletes = matches!(&cmd, Command::Txn(t) if t.success.iter().any(|op| matches!(op, TxnOp::Delete { .. })));
            let fail = if deletes && self.avoid_sweep_failures {
                None
            } else {
                self.fail.take()
            };
            let result = match fail {
                Some((n, unknown, applied)) => {
                    if n > 1 {
                        self.fail = Some((n - 1, unknown, applied));
                    }
                    if unknown && matches!(cmd, Command::Txn(_)) {
                        if applied {
                            let _ = self.target.execute(self.conn, &cmd, &mut out);
                        }
                        Err(classify(
                            Code::DeadlineExceeded,
                            "context deadline exceeded",
                        ))
                    } else {
                        Err(classify(Code::Unavailable, "etcdserver: no leader"))
                    }
                }
                None => match cluster {
                    Cluster::Source => self.source.execute(self.conn, &cmd, &mut out),
                    Cluster::Target => self.target.execute(self.conn, &cmd, &mut out),
                },
            };
            if cluster == Cluster::Source {
                self.keep_watch_out(out);
            }
            if std::env::var_os("TIDEMARK_SM_TRACE").is_some() {
                eprintln!("{id} {cmd:?}\n  => {result:?}");
            }
            self.input(Input::Done { id, result });
        }
        let mut out = Vec::new();
        self.source.sync_tick(&mut out);
        if self.steps.is_multiple_of(4) {
            self.source.progress_tick(&mut out);
        }
        self.keep_watch_out(out);
        while let Some(o) = self.watch_out.pop_front() {
            self.input(Input::Watch {
                watch_id: o.watch_id,
                event: o.event,
            });
        }
        if self.inflight.is_empty() {
            if let Some(t) = self.deadline {
                self.now = self.now.max(t);
            }
        }
        self.now = self.now + std::time::Duration::from_millis(10);
        self.pump();
    }

    fn crash(&mut self, apply_inflight: bool, seed: u64) {
        let mut out = Vec::new();
        for (_, cmd) in self.inflight.drain(..) {
            if apply_inflight && matches!(cmd, Command::Txn(_)) {
                let _ = self.target.execute(self.conn, &cmd, &mut out);
            }
        }
        self.source.drop_conn(self.conn);
        self.target.drop_conn(self.conn);
        self.watch_out.clear();
        self.fail = None;
        self.conn += 1;
        self.mirror = Mirror::new(self.cfg.clone(), seed).expect("valid config");
        self.deadline = None;
        self.pump();
    }

    /// The target's mirrored window (fence and keys outside the window excluded).
    fn target_window(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let fence = self.cfg.checkpoint_key();
        let end = prefix_end(TGT.as_bytes());
        self.target
            .store
            .range_at(TGT.as_bytes(), &end, self.target.store.rev())
            .into_iter()
            .filter(|kv| kv.key != fence && !kv.key[TGT.len()..].starts_with(EXCLUDE.as_bytes()))
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect()
    }

    fn fence(&self) -> Option<Checkpoint> {
        let kv = self.target.store.get(&self.cfg.checkpoint_key())?;
        Some(Checkpoint::decode(&kv.value).expect("the fence holds a valid checkpoint"))
    }
}

struct MirrorTest;

impl StateMachineTest for MirrorTest {
    type SystemUnderTest = Harness;
    type Reference = MirrorModel;

    fn init_test(r: &RefState) -> Harness {
        Harness::new(r.max_txn_ops, r.prune)
    }

    fn apply(mut h: Harness, r: &RefState, t: Transition) -> Harness {
        match t {
            Transition::Write(w) => {
                let mut out = Vec::new();
                h.source.write(&w.mutations(), &mut out);
                h.keep_watch_out(out);
            }
            Transition::Compact(_) => {
                if r.compacted > h.source.store.compact_rev() {
                    h.source
                        .compact(r.compacted)
                        .expect("compaction within the store");
                }
            }
            Transition::Step(n) => {
                for _ in 0..n {
                    h.step();
                }
            }
            Transition::Fail {
                n,
                unknown,
                applied,
            } => h.fail = Some((n, unknown, applied)),
            Transition::Crash { apply_inflight } => {
                let seed = h.conn + 1;
                h.crash(apply_inflight, seed);
            }
            Transition::Settle => {
                h.fail = None;
                let want = r.expected_target(r.rev());
                let mut rounds = 0;
                while rounds < 400
                    && !(h.inflight.is_empty()
                        && h.target_window() == want
                        && h.fence().is_some_and(|f| f.is_consistent()))
                {
                    h.step();
                    rounds += 1;
                }
            }
        }
        h
    }

    fn check_invariants(h: &Harness, r: &RefState) {
        assert_eq!(
            h.source.store.rev(),
            r.rev(),
            "model source and reference disagree on the revision"
        );
        let mut outside = vec![(b"/u/other".to_vec(), b"other".to_vec())];
        if r.prune {
            outside.push((format!("{TGT}{EXCLUDE}keep").into_bytes(), b"keep".to_vec()));
        }
        for (k, v) in outside {
            assert_eq!(
                h.target.store.get(&k).map(|kv| kv.value.clone()),
                Some(v),
                "a target key outside the window was modified"
            );
        }
        if let Some(f) = h.fence() {
            // Watermark 0 promises nothing (the claim before genesis), as in the sim's checker.
            if f.is_consistent() && f.watermark > 0 {
                assert!(
                    f.watermark <= r.rev(),
                    "watermark {} ahead of the source {}",
                    f.watermark,
                    r.rev()
                );
                let want = r.expected_target(f.watermark);
                let got = h.target_window();
                assert_eq!(
                    got,
                    want,
                    "target != source at watermark {} (source rev {})",
                    f.watermark,
                    r.rev()
                );
            }
        }
        if r.settled {
            assert_eq!(
                h.target_window(),
                r.expected_target(r.rev()),
                "no convergence after a quiet phase; status: {:#?}",
                h.mirror.status()
            );
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 8192,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/state_machine_mirror.txt"),
        )),
        .. ProptestConfig::default()
    })]

    #[test]
    fn mirror_target_equals_source_at_watermark(sequential 1..80 => MirrorTest);
}

/// Regression (was an open bug until core's etcd #18089 watch guard): an agent resuming its
/// watch at exactly the compact revision, which holds a delete, must not lose the delete.
#[test]
fn delete_at_compact_revision_is_not_lost() {
    let mut r = <MirrorModel as ReferenceStateMachine>::init_state()
        .new_tree(&mut proptest::test_runner::TestRunner::deterministic())
        .unwrap()
        .current();
    r.max_txn_ops = 3;
    r.prune = false;
    let mut h = Harness::new(3, false);
    let steps = [
        Transition::Step(1),
        Transition::Write(Write::Txn(vec![(1, Some(0))])),
        Transition::Step(7),
        // Deletes /s/k1 at revision 3.
        Transition::Write(Write::DeletePrefix(60)),
        Transition::Crash {
            apply_inflight: false,
        },
    ];
    for t in steps {
        r = MirrorModel::apply(r, &t);
        h = MirrorTest::apply(h, &r, t);
    }
    // Compact at exactly revision 3 (the delete), which the new agent resumes from.
    h.source.compact(3).unwrap();
    for _ in 0..6 {
        h.step();
    }
    for _ in 0..300 {
        h.step();
        MirrorTest::check_invariants(&h, &r);
    }
    assert_eq!(
        h.target_window(),
        r.expected_target(r.rev()),
        "no convergence"
    );
}

/// Regression (was an open bug until core stopped adopting an unchanged fence as its own
/// write): a prune-sweep Txn that fails without applying must be retried, not skipped.
#[test]
fn sweep_delete_is_retried_after_a_transient_failure() {
    let mut h = Harness::new(3, true);
    let sweep_at = |h: &Harness| {
        h.inflight.iter().position(|(_, c)| matches!(c, Command::Txn(t) if t.success.iter().any(|op| matches!(op, TxnOp::Delete { .. }))))
    };
    // Step to the sweep (a bounded number of commands: claim, reads, proofs, and the
    // scan's bounded pages, many of them empty spans). The progress count's reads may be
    // in flight beside it: the sweep goes first, so that it is the command that fails.
    for _ in 0..400 {
        if let Some(i) = sweep_at(&h) {
            let sweep = h.inflight.remove(i).expect("found just above");
            h.inflight.push_front(sweep);
            break;
        }
        h.step();
    }
    // The next command is the sweep Txn deleting the stale /t/k1; it fails, not applied.
    assert!(
        matches!(h.inflight.front(), Some((_, Command::Txn(t))) if t.success.iter().any(|op| matches!(op, TxnOp::Delete { .. }))),
        "the scenario no longer reaches the sweep Txn: {:?}",
        h.inflight
    );
    h.fail = Some((1, false, false));
    h.avoid_sweep_failures = false;
    for _ in 0..6 {
        h.step();
    }
    for _ in 0..200 {
        h.step();
    }
    let f = h.fence().unwrap();
    assert!(f.is_consistent(), "genesis settles: {f:?}");
    assert!(
        h.target_window().is_empty(),
        "the stale keys are swept after the retry: {:?}",
        h.target_window()
    );
}

/// Regression (was an open bug until core allowed splits during replay): a source revision
/// larger than one Txn arriving while genesis replays must leave a readable fence record.
#[test]
fn split_during_genesis_keeps_the_checkpoint_readable() {
    let mut h = Harness::new(3, true);
    for _ in 0..5 {
        h.step();
    }
    let mut out = Vec::new();
    let w1 = Write::Txn(vec![(80, Some(0)), (236, Some(0))]);
    let w2 = Write::Txn(vec![(156, None), (70, Some(0)), (11, Some(0))]);
    h.source.write(&w1.mutations(), &mut out);
    h.source.write(&w2.mutations(), &mut out);
    h.keep_watch_out(out);
    for _ in 0..300 {
        h.step();
        if let Some(kv) = h.target.store.get(&h.cfg.checkpoint_key()) {
            if let Err(e) = Checkpoint::decode(&kv.value) {
                panic!("the mirror wrote an unreadable checkpoint: {e}");
            }
        }
    }
    let mut want = BTreeMap::new();
    for (k, v) in h
        .source
        .store
        .range_at(
            SRC.as_bytes(),
            &prefix_end(SRC.as_bytes()),
            h.source.store.rev(),
        )
        .into_iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
    {
        let rel = &k[SRC.len()..];
        if !rel.starts_with(EXCLUDE.as_bytes()) {
            want.insert([TGT.as_bytes(), rel].concat(), v);
        }
    }
    assert_eq!(h.target_window(), want, "no convergence");
}
