//! The two model clusters the harness plays and how they answer the core's commands.

use super::*;

pub(super) fn src_key(i: u8) -> Vec<u8> {
    match i % 12 {
        0..=6 => format!("{SRC_PREFIX}k{}", i % 7).into_bytes(),
        7 | 8 => format!("{SRC_PREFIX}{EXCLUDE}{}", i % 2).into_bytes(),
        9 => b"/r/outside".to_vec(),
        10 => format!("{SRC_PREFIX}\u{0}tidemark-checkpoint").into_bytes(),
        _ => format!("{SRC_PREFIX}k{}/deep", i % 3).into_bytes(),
    }
}

pub(super) fn err(code: Code, msg: &str) -> Failure {
    classify(code, msg)
}

pub(super) fn put(key: Vec<u8>, value: Vec<u8>) -> Mutation {
    Mutation::Put {
        key,
        value,
        lease: 0,
    }
}

pub(super) fn del(key: Vec<u8>, end: Vec<u8>) -> Mutation {
    Mutation::DeleteRange { key, end }
}

/// Every live key-value of `store` at `rev`, in key order.
pub(super) fn live_at(store: &Store, rev: i64) -> BTreeMap<Vec<u8>, KeyValue> {
    store
        .range_at(b"", &[0], rev)
        .into_iter()
        .map(|kv| (kv.key.clone(), kv.clone()))
        .collect()
}

/// The live value of `key` now.
pub(super) fn value_of<'a>(store: &'a Store, key: &[u8]) -> Option<&'a Vec<u8>> {
    store.get(key).map(|kv| &kv.value)
}

#[derive(Debug)]
pub(super) struct Watch {
    pub(super) key: Vec<u8>,
    pub(super) end: Vec<u8>,
    pub(super) next: i64,
}

pub(super) struct World {
    pub(super) chaos: bool,
    pub(super) cfg: MirrorConfig,
    pub(super) fence: Vec<u8>,
    pub(super) source: Store,
    pub(super) target: Store,
    pub(super) foreign: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(super) untouchable: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(super) versions: (String, String),
    pub(super) mirror: Mirror,
    pub(super) incarnation: u64,
    pub(super) now: Instant,
    pub(super) deadline: Option<Instant>,
    pub(super) pending: Vec<(u64, Command)>,
    pub(super) watches: BTreeMap<u64, Watch>,
    pub(super) stopped: bool,
}

impl World {
    pub(super) fn drain(&mut self) {
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
                        panic!(
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

    pub(super) fn in_window(&self, key: &[u8]) -> bool {
        let base = TGT_PREFIX.as_bytes();
        key.starts_with(base) && !key[base.len()..].starts_with(EXCLUDE.as_bytes())
    }

    pub(super) fn check_command(&self, cmd: &Command) {
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

    pub(super) fn store(&mut self, cluster: Cluster) -> &mut Store {
        match cluster {
            Cluster::Source => &mut self.source,
            Cluster::Target => &mut self.target,
        }
    }

    /// Runs a command against the model.
    pub(super) fn execute(&mut self, cmd: &Command) -> Result<Reply, Failure> {
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

    pub(super) fn input(&mut self, input: Input) {
        if tracing() {
            eprintln!("  {:?} -> {input:?}", self.now);
        }
        if !self.stopped {
            self.mirror.handle_input(self.now, input);
        }
        self.drain();
    }

    pub(super) fn reply(&mut self, pick: u8, how: How) {
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

    pub(super) fn deliver(&mut self, revs: u8) {
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

    pub(super) fn progress(&mut self) {
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

    pub(super) fn restart(&mut self, apply_inflight: bool) {
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
    pub(super) fn check_invariant(&self) {
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
    pub(super) fn target_matches_source_at(&self, w: i64) -> Result<(), String> {
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
