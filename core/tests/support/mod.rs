//! A hand-driven "driver" for scripted mirror exchanges, shared by the exchange tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tidemark_core::classify::Failure;
use tidemark_core::config::{InitialSyncMode, MirrorConfig};
use tidemark_core::etcd::{
    Cluster, Command, CompareTarget, Event, EventKind, KeyValue, RangeReply, RangeRequest, Reply,
    SortBy, StatusReply, TxnOp, TxnReply, WatchEvent,
};
use tidemark_core::mirror::{
    Checkpoint, CommandId, ConditionType, Input, Mirror, Output, Role, StopReason,
};
use tidemark_core::Instant;

pub const FENCE: &[u8] = b"/mirror/\0tidemark-checkpoint";

pub fn config(mode: InitialSyncMode) -> MirrorConfig {
    let mut c = MirrorConfig::new("/app/", "/mirror/");
    c.source.endpoint_list = vec!["http://127.0.0.1:2379".into()];
    c.target.endpoint_list = vec!["http://127.0.0.1:22379".into()];
    c.initial_sync.mode = mode;
    c.sync.max_txn_ops = 4;
    // The scripted exchanges follow one Txn at a time; chains have their own tests
    // (`mirror_pipeline.rs`) and run in the simulator at the default depth.
    c.sync.max_txns_in_flight = 1;
    c
}

pub struct Harness {
    pub m: Mirror,
    pub now: Instant,
    pub log: Vec<Output>,
    /// Answer the etcd #18089 watch guard reads as "not compacted", so scripts see the
    /// watch where the guard was. Tests of the guard itself turn this off.
    pub auto_guard: bool,
    /// Answer the source-history proof reads from what the script told the core (the
    /// highest source revision and every key-value sent), so scripts see no proof. Tests of
    /// the proof itself turn this off.
    pub auto_proof: bool,
    /// The highest source revision the script reported, and every source key-value sent.
    pub source_seen: i64,
    pub source_kvs: std::collections::BTreeMap<(Vec<u8>, i64), KeyValue>,
    /// Ids of the commands sent to the source, so only their replies count above.
    source_ids: std::collections::BTreeSet<CommandId>,
    /// The fence bytes each Txn in flight puts, and the last ones a reply said applied.
    txn_fences: std::collections::BTreeMap<CommandId, Vec<u8>>,
    pub applied_fence: Vec<u8>,
    /// The ranges a reconciliation pass reads, served page by page as etcd would (bounded
    /// reads need many pages): every value-reading page read is answered from these while
    /// set. See [`Harness::serve_pass`].
    pub pass_fixture: Option<PassFixture>,
    ranges: std::collections::BTreeMap<CommandId, RangeRequest>,
    /// Answer every bounded count read as a source holding the keys the script's R0 reply
    /// counted, all in the span at the window's start. Tests of the counts themselves turn
    /// this off.
    pub auto_count: bool,
    /// Keys the script's last R0 reply counted.
    pending_count: Option<i64>,
}

/// What a pass reads from each side: the header revision and the key-values.
#[derive(Debug, Clone)]
pub struct PassFixture {
    pub src: (i64, Vec<KeyValue>),
    pub tgt: (i64, Vec<KeyValue>),
}

/// The reply etcd gives `r` over `kvs`: the keys in `[key, range_end)` in key order, up
/// to `limit`, with `more` and the full `count`.
pub fn serve_range(r: &RangeRequest, rev: i64, kvs: &[KeyValue]) -> Reply {
    let mut inside: Vec<KeyValue> = kvs
        .iter()
        .filter(|kv| {
            kv.key >= r.key
                && (r.range_end == [0]
                    || (!r.range_end.is_empty() && kv.key < r.range_end)
                    || (r.range_end.is_empty() && kv.key == r.key))
        })
        .cloned()
        .collect();
    inside.sort_by(|a, b| a.key.cmp(&b.key));
    let count = inside.len() as i64;
    let limit = if r.limit > 0 {
        r.limit as usize
    } else {
        usize::MAX
    };
    let more = inside.len() > limit;
    inside.truncate(limit);
    Reply::Range(RangeReply {
        header_revision: rev,
        kvs: inside,
        more,
        count,
    })
}

/// The point read of the source-history proof (one key, no range end).
pub fn is_history_proof(c: &Command) -> bool {
    matches!(c, Command::Range(r) if r.cluster == Cluster::Source && r.range_end.is_empty() && r.limit == 1 && !r.count_only)
}

/// A page of a snapshot probe: a keys-only source read of a range, bounded, with a limit.
pub fn is_probe(c: &Command) -> bool {
    matches!(c, Command::Range(r) if r.cluster == Cluster::Source && r.keys_only && !r.count_only && !r.range_end.is_empty() && r.limit > 1)
}

/// R0: the one-key, count-only read of the source's current revision.
pub fn is_r0(c: &Command) -> bool {
    matches!(c, Command::Range(r) if r.cluster == Cluster::Source && r.count_only && r.revision == 0 && r.limit == 1 && r.range_end.is_empty())
}

/// One bounded read of a key count: count-only, a range, pinned, no limit.
pub fn is_bounded_count(c: &Command) -> bool {
    matches!(c, Command::Range(r) if r.cluster == Cluster::Source && r.count_only && r.revision > 0 && r.limit == 0 && !r.range_end.is_empty())
}

/// The pinned, count-only read the core makes before opening a watch.
pub fn is_watch_guard(c: &Command) -> bool {
    matches!(c, Command::Range(r) if r.cluster == Cluster::Source && r.count_only && r.revision > 0 && r.limit == 1)
}

impl Harness {
    pub fn new(cfg: MirrorConfig, seed: u64) -> Self {
        Harness {
            m: Mirror::new(cfg, seed).unwrap(),
            now: Instant(1_000_000_000),
            log: Vec::new(),
            auto_guard: true,
            auto_proof: true,
            source_seen: 0,
            source_kvs: Default::default(),
            source_ids: Default::default(),
            txn_fences: Default::default(),
            applied_fence: Vec::new(),
            pass_fixture: None,
            ranges: Default::default(),
            auto_count: true,
            pending_count: None,
        }
    }

    /// Polls until the core waits; returns the commands it emitted.
    pub fn drain(&mut self) -> Vec<(CommandId, Command)> {
        let mut cmds = Vec::new();
        let mut guard_slots = std::collections::VecDeque::new();
        loop {
            let o = self.m.poll_output(self.now);
            self.log.push(o.clone());
            if let Output::Command { id, cmd } = &o {
                let to_source = match cmd {
                    Command::Status { cluster } => *cluster == Cluster::Source,
                    Command::Range(r) => r.cluster == Cluster::Source,
                    _ => false,
                };
                if to_source {
                    self.source_ids.insert(*id);
                }
                if let Command::Txn(t) = cmd {
                    if let Some(TxnOp::Put { key, value }) = t.success.last() {
                        if key == FENCE {
                            self.txn_fences.insert(*id, value.clone());
                        }
                    }
                }
            }
            match o {
                Output::Command { id, cmd } if self.auto_guard && is_watch_guard(&cmd) => {
                    let Command::Range(r) = &cmd else {
                        unreachable!()
                    };
                    // An honest source: never below what the script already reported.
                    let rev = self.source_seen.max(r.revision);
                    guard_slots.push_back(cmds.len());
                    self.done(id, Ok(range(rev, vec![], false)));
                }
                Output::Command {
                    id,
                    cmd: cmd @ Command::Watch(_),
                } if !guard_slots.is_empty() => {
                    let at = guard_slots.pop_front().unwrap();
                    cmds.insert(at, (id, cmd));
                }
                Output::Command { id, cmd } if self.auto_count && is_bounded_count(&cmd) => {
                    let Command::Range(r) = &cmd else {
                        unreachable!()
                    };
                    // The whole count in a count's first span (at the window's start).
                    let count = if r.key == b"/app/" {
                        self.pending_count.unwrap_or(0)
                    } else {
                        0
                    };
                    self.done(
                        id,
                        Ok(Reply::Range(RangeReply {
                            header_revision: self.source_seen.max(r.revision),
                            kvs: vec![],
                            more: false,
                            count,
                        })),
                    );
                }
                Output::Command { id, cmd } if self.auto_proof && is_history_proof(&cmd) => {
                    let reply = self.proof_answer(&cmd);
                    self.done(id, Ok(reply));
                }
                Output::Command {
                    id,
                    cmd: Command::Range(r),
                } if self.pass_fixture.is_some() && !r.count_only && !r.keys_only => {
                    self.ranges.insert(id, r);
                    self.serve(id);
                }
                Output::Command { id, cmd } => {
                    if let Command::Range(r) = &cmd {
                        self.ranges.insert(id, r.clone());
                    }
                    cmds.push((id, cmd))
                }
                Output::Timeout(_) | Output::Stopped(_) => return cmds,
            }
        }
    }

    /// Answers the pass reads `src` and `tgt` (already drained) from `fixture`, and every
    /// page read after them while the fixture is set.
    pub fn serve_pass(&mut self, src: CommandId, tgt: CommandId, fixture: PassFixture) {
        self.pass_fixture = Some(fixture);
        self.serve(src);
        self.serve(tgt);
    }

    /// Answers one drained range read from the pass fixture.
    pub fn serve(&mut self, id: CommandId) {
        let r = self.ranges.remove(&id).expect("a range read the core sent");
        let f = self.pass_fixture.as_ref().expect("a pass fixture");
        let (rev, kvs) = match r.cluster {
            Cluster::Source => &f.src,
            Cluster::Target => &f.tgt,
        };
        let reply = serve_range(&r, *rev, kvs);
        self.done(id, Ok(reply));
    }

    /// Answers the snapshot probe read `id` (the untrusted-progress probe or the drain's
    /// target read: pinned, keys-only, bounded pages) from `snapshot`, and every page of it
    /// that follows; returns whatever else the core sent meanwhile.
    pub fn answer_probe(
        &mut self,
        id: CommandId,
        rev: i64,
        snapshot: &[KeyValue],
    ) -> Vec<(CommandId, Command)> {
        let mut next = vec![(id, Command::Range(self.ranges[&id].clone()))];
        let mut rest = Vec::new();
        for _ in 0..10_000 {
            let mut served = false;
            for (id, cmd) in std::mem::take(&mut next) {
                match &cmd {
                    Command::Range(r) if is_probe(&cmd) => {
                        served = true;
                        self.ranges.remove(&id);
                        self.done(id, Ok(serve_range(r, rev, snapshot)));
                    }
                    _ => rest.push((id, cmd)),
                }
            }
            if !served {
                return rest;
            }
            next = self.drain();
        }
        panic!("the probe never finished");
    }

    /// What an honest source answers to a proof read, from what the script sent.
    pub fn proof_answer(&self, cmd: &Command) -> Reply {
        let Command::Range(r) = cmd else {
            unreachable!()
        };
        let kvs = if r.keys_only {
            vec![]
        } else {
            self.source_kvs
                .range((r.key.clone(), 0)..=(r.key.clone(), r.revision.max(0)))
                .next_back()
                .map(|(_, kv)| kv.clone())
                .into_iter()
                .collect()
        };
        range(self.source_seen.max(1), kvs, false)
    }

    fn note_source(&mut self, header: i64, kvs: &[KeyValue]) {
        self.source_seen = self.source_seen.max(header);
        for kv in kvs {
            self.source_kvs
                .insert((kv.key.clone(), kv.mod_revision), kv.clone());
        }
    }

    pub fn done(&mut self, id: CommandId, r: Result<Reply, Failure>) {
        if let (Some(req), Ok(Reply::Range(rr))) = (self.ranges.get(&id), &r) {
            if is_r0(&Command::Range(req.clone())) {
                self.pending_count = Some(rr.count);
            }
        }
        if self.source_ids.remove(&id) {
            match &r {
                Ok(Reply::Status(st)) => self.note_source(st.header_revision, &[]),
                Ok(Reply::Range(rr)) => self.note_source(rr.header_revision, &rr.kvs),
                _ => {}
            }
        }
        if let Some(f) = self.txn_fences.remove(&id) {
            if matches!(&r, Ok(Reply::Txn(t)) if t.succeeded) {
                self.applied_fence = f;
            }
        }
        self.m.handle_input(self.now, Input::Done { id, result: r });
    }

    pub fn watch(&mut self, watch_id: u64, ev: WatchEvent) {
        match &ev {
            WatchEvent::Events {
                header_revision,
                events,
            } => {
                let kvs: Vec<KeyValue> = events.iter().map(|e| e.kv.clone()).collect();
                self.note_source(*header_revision, &kvs);
            }
            WatchEvent::Progress { revision } => self.note_source(*revision, &[]),
            _ => {}
        }
        self.m.handle_input(
            self.now,
            Input::Watch {
                watch_id,
                event: ev,
            },
        );
    }

    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
    }

    pub fn stopped(&mut self) -> Option<StopReason> {
        match self.m.poll_output(self.now) {
            Output::Stopped(r) => Some(r),
            _ => None,
        }
    }
}

pub fn status(version: &str, cluster: u64, rev: i64) -> Reply {
    Reply::Status(StatusReply {
        version: version.into(),
        header_revision: rev,
        cluster_id: cluster,
        member_id: 1,
        is_learner: false,
        db_size: 0,
    })
}

pub fn range(rev: i64, kvs: Vec<KeyValue>, more: bool) -> Reply {
    let count = kvs.len() as i64;
    Reply::Range(RangeReply {
        header_revision: rev,
        kvs,
        more,
        count,
    })
}

pub fn kv(key: &[u8], value: &[u8], rev: i64) -> KeyValue {
    KeyValue {
        key: key.to_vec(),
        value: value.to_vec(),
        create_revision: rev,
        mod_revision: rev,
        version: 1,
        lease: 0,
    }
}

pub fn txn_ok(rev: i64) -> Reply {
    Reply::Txn(TxnReply {
        succeeded: true,
        header_revision: rev,
        reads: vec![],
    })
}

pub fn put_ev(key: &[u8], value: &[u8], rev: i64) -> Event {
    Event {
        kind: EventKind::Put,
        kv: kv(key, value, rev),
    }
}

pub fn del_ev(key: &[u8], rev: i64) -> Event {
    Event {
        kind: EventKind::Delete,
        kv: KeyValue {
            key: key.to_vec(),
            mod_revision: rev,
            ..Default::default()
        },
    }
}

/// The fence record a Txn writes (its last success op).
pub fn fence_of(cmd: &Command) -> Checkpoint {
    let Command::Txn(t) = cmd else {
        panic!("not a txn: {cmd:?}")
    };
    match t.success.last() {
        Some(TxnOp::Put { key, value }) if key == FENCE => Checkpoint::decode(value).unwrap(),
        other => panic!("last op is not the fence put: {other:?}"),
    }
}

pub fn data_ops(cmd: &Command) -> Vec<TxnOp> {
    let Command::Txn(t) = cmd else {
        panic!("not a txn: {cmd:?}")
    };
    if is_page(cmd) {
        return t.success.clone();
    }
    t.success[..t.success.len() - 1].to_vec()
}

/// Whether a Txn is an order-free genesis page: it compares the fence's mod revision and
/// does not write the fence.
pub fn is_page(cmd: &Command) -> bool {
    let Command::Txn(t) = cmd else {
        return false;
    };
    !t.success
        .iter()
        .any(|op| matches!(op, TxnOp::Put { key, .. } if key == FENCE))
        && t.compares.len() == 1
        && t.compares[0].target == CompareTarget::ModRevision
}

pub fn compare_of(cmd: &Command) -> (CompareTarget, i64) {
    let Command::Txn(t) = cmd else {
        panic!("not a txn: {cmd:?}")
    };
    assert_eq!(
        t.compares.len(),
        1,
        "every target write is fenced by exactly one compare"
    );
    assert_eq!(t.compares[0].key, FENCE);
    assert_eq!(
        t.failure,
        vec![TxnOp::Get {
            key: FENCE.to_vec()
        }]
    );
    let c = &t.compares[0];
    match c.target {
        // A chained write compares the record it builds on: report that record's sequence.
        CompareTarget::Value => (
            c.target,
            Checkpoint::decode(&c.bytes)
                .map(|r| r.seq as i64)
                .expect("a Value compare is against a checkpoint"),
        ),
        _ => (c.target, c.value),
    }
}

/// The bytes a chained Txn compares the fence with (the record it builds on).
pub fn compare_bytes(cmd: &Command) -> Vec<u8> {
    let Command::Txn(t) = cmd else {
        panic!("not a txn: {cmd:?}")
    };
    assert_eq!(t.compares[0].target, CompareTarget::Value, "{cmd:?}");
    t.compares[0].bytes.clone()
}

/// Two Txns that do the same thing: same compare, same data, same record but for the
/// sequence number (every write carries a new one).
pub fn assert_same_but_seq(a: &Command, b: &Command) {
    let (Command::Txn(x), Command::Txn(y)) = (a, b) else {
        panic!("not txns: {a:?} {b:?}")
    };
    assert_eq!(x.compares, y.compares);
    assert_eq!(data_ops(a), data_ops(b));
    let (mut ra, mut rb) = (fence_of(a), fence_of(b));
    assert!(rb.seq > ra.seq, "a new write gets a new sequence number");
    ra.seq = 0;
    rb.seq = 0;
    assert_eq!(ra, rb);
}

pub fn put(k: &[u8], v: &[u8]) -> TxnOp {
    TxnOp::Put {
        key: k.to_vec(),
        value: v.to_vec(),
    }
}

/// A single-key delete, as the batcher emits it.
pub fn del(k: &[u8]) -> TxnOp {
    TxnOp::Delete {
        key: k.to_vec(),
        range_end: vec![],
    }
}

pub fn one(cmds: Vec<(CommandId, Command)>) -> (CommandId, Command) {
    assert_eq!(cmds.len(), 1, "expected exactly one command, got {cmds:#?}");
    cmds.into_iter().next().unwrap()
}

/// Drives a cold start on an empty target up to the steady state. Returns the watch id.
/// Target revisions: claim=10, start-genesis=11, scan chunk=12, finish=13.
pub fn cold_start(h: &mut Harness, version: &str) -> u64 {
    let (w, rest) = cold_start_then(h, version);
    assert!(rest.is_empty(), "{rest:#?}");
    w
}

/// Drives a cold start on an empty target through the claim (target revision 10), up to
/// the genesis's R0 read.
pub fn claim_on_empty_target(h: &mut Harness, version: &str) {
    let cmds = h.drain();
    assert_eq!(cmds.len(), 2);
    assert_eq!(
        cmds[0].1,
        Command::Status {
            cluster: Cluster::Source
        }
    );
    assert_eq!(
        cmds[1].1,
        Command::Status {
            cluster: Cluster::Target
        }
    );
    h.done(cmds[0].0, Ok(status(version, 1, 100)));
    h.done(cmds[1].0, Ok(status(version, 2, 5)));

    let (id, cmd) = one(h.drain());
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        (r.cluster, r.key.as_slice(), r.range_end.is_empty()),
        (Cluster::Target, FENCE, true)
    );
    h.done(id, Ok(range(5, vec![], false)));

    // RequireEmpty: a keys-only look at the target range before any write.
    let (id, cmd) = one(h.drain());
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        (r.cluster, r.keys_only, r.limit),
        (Cluster::Target, true, 2)
    );
    assert_eq!(r.key, b"/mirror/".to_vec());
    h.done(id, Ok(range(5, vec![], false)));

    // Claim: create the fence at epoch 1.
    let (id, cmd) = one(h.drain());
    assert_eq!(compare_of(&cmd), (CompareTarget::CreateRevision, 0));
    let rec = fence_of(&cmd);
    assert_eq!((rec.epoch, rec.watermark, rec.role), (1, 0, Role::Mirror));
    assert!(data_ops(&cmd).is_empty());
    h.done(id, Ok(txn_ok(10)));
}

/// Like [`cold_start`], returning whatever the core emits right after the initial sync.
pub fn cold_start_then(h: &mut Harness, version: &str) -> (u64, Vec<(CommandId, Command)>) {
    claim_on_empty_target(h, version);

    // R0: a one-key, count-only read, for the source's current revision alone (a genesis
    // records no count at its base).
    let (id, cmd) = one(h.drain());
    assert!(is_r0(&cmd), "{cmd:?}");
    h.done(
        id,
        Ok(Reply::Range(RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 2,
        })),
    );

    // Record scan = {base: 100}.
    let (id, cmd) = one(h.drain());
    assert_eq!(
        compare_of(&cmd),
        (CompareTarget::Value, 1),
        "builds on the claim"
    );
    let rec = fence_of(&cmd);
    assert_eq!(rec.scan.as_ref().unwrap().base, 100);
    h.done(id, Ok(txn_ok(11)));

    // Watch at R0+1 *before* the scan, then an unpinned page.
    let cmds = h.drain();
    assert_eq!(cmds.len(), 2, "{cmds:#?}");
    let Command::Watch(w) = &cmds[0].1 else {
        panic!("{:?}", cmds[0].1)
    };
    assert_eq!(w.start_revision, 101);
    let watch_id = w.watch_id;
    h.done(cmds[0].0, Ok(Reply::WatchStarted));
    let Command::Range(r) = &cmds[1].1 else {
        panic!("{:?}", cmds[1].1)
    };
    assert_eq!(
        (r.cluster, r.revision, r.sort),
        (Cluster::Source, 0, SortBy::Key)
    );
    h.done(
        cmds[1].0,
        Ok(range(
            100,
            vec![kv(b"/app/a", b"1", 50), kv(b"/app/b", b"2", 60)],
            false,
        )),
    );

    // One Txn with both keys: a page, fenced by the mod revision of the scan start (a
    // source with trusted progress notifications), or chained on it. Any further window
    // is read ahead (answered empty here); a cursor write records that the scan is
    // complete.
    let mut cmds = h.drain();
    let mut first = true;
    let trusted = h.m.status().progress_trusted;
    loop {
        let mut scanned = false;
        for (id, cmd) in std::mem::take(&mut cmds) {
            match &cmd {
                Command::Range(r) => {
                    assert_eq!(r.cluster, Cluster::Source);
                    h.done(id, Ok(range(100, vec![], false)));
                }
                Command::Txn(_) => {
                    if first {
                        let want = if trusted {
                            (CompareTarget::ModRevision, 11)
                        } else {
                            (CompareTarget::Value, 2)
                        };
                        assert_eq!(compare_of(&cmd), want, "builds on the scan start");
                        assert_eq!(is_page(&cmd), trusted);
                        assert_eq!(
                            data_ops(&cmd),
                            vec![put(b"/mirror/a", b"1"), put(b"/mirror/b", b"2")]
                        );
                        first = false;
                    } else {
                        assert!(data_ops(&cmd).is_empty());
                    }
                    if !is_page(&cmd) {
                        scanned |= fence_of(&cmd).scan.unwrap().scanned;
                    }
                    h.done(id, Ok(txn_ok(12)));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if scanned {
            break;
        }
        cmds = h.drain();
    }

    // The watch is proven past every page (Rmax = R0 = 100): finish.
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert!(rec.scan.is_none() && rec.split.is_none());
    assert_eq!(rec.watermark, 100);
    h.done(id, Ok(txn_ok(13)));
    let rest = h.drain();
    assert!(h.m.status().condition(ConditionType::InitialSyncComplete));
    (watch_id, rest)
}

/// Answers the two version probes every start begins with: (version, cluster id, revision)
/// for the source, then the target.
pub fn answer_probes(h: &mut Harness, src: (&str, u64, i64), tgt: (&str, u64, i64)) {
    let cmds = h.drain();
    assert_eq!(cmds.len(), 2, "{cmds:#?}");
    h.done(cmds[0].0, Ok(status(src.0, src.1, src.2)));
    h.done(cmds[1].0, Ok(status(tgt.0, tgt.1, tgt.2)));
}

/// A record another incarnation of the `/app/` -> `/mirror/` link left behind (a foreign
/// holder at `epoch`, watermark `watermark`, clusters "1" and "2"); tests set `split`/`scan`
/// on top of it.
pub fn found_record(epoch: u64, watermark: i64) -> Checkpoint {
    Checkpoint {
        v: 1,
        seq: 0,
        link: MirrorConfig::new("/app/", "/mirror/").link_id(),
        epoch,
        holder: "0123456789abcdef0123456789abcdef".into(),
        role: Role::Mirror,
        watermark,
        split: None,
        scan: None,
        prune_pending: false,
        prune_floor: 0,
        source_cluster: "1".into(),
        target_cluster: "2".into(),
        anchor: None,
    }
}
