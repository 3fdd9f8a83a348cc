//! Safety invariants, checked on every target write, and the liveness (convergence) test.
//!
//! The target only changes through applied Txns, and `source@W` is immutable for a fixed W,
//! so checking at every applied target write is checking at every step.
//!
//! Invariants (docs/design.md "The fence record"):
//! - **(a) watermark**: whenever the fence has `split == null && scan == null`, the target
//!   range (fence excluded) equals `rewrite(source@watermark)`, keys and values.
//! - **(b) fencing**: every applied target write carries a fence put, and no commit lands
//!   from a holder that lost the fence. A holder is *lost* once the fence was written by a
//!   different holder after it (takeover by a twin or a restarted process), until it claims
//!   the fence again (a claim compares the mod revision it read, so it acquires afresh).
//! - **(c) monotonic watermark**: per link, the watermark of every fence written is at least
//!   the highest *settled* watermark written before. A resync declares its reset with
//!   `scan != null`: while a scan runs the watermark is not compared (the record may keep or
//!   reset it), but the next settled watermark must again be at least the previous settled
//!   one, because a resync starts from the current source revision. This is stricter than
//!   "within one epoch line" and holds across epochs: a new process resumes from the record.
//! - **(d) range**: every written key (and every deleted range) lies inside
//!   `[target.prefix + destPrefix, prefix_end(..))`.
//! - **(e) RequireEmpty**: an agent configured `RequireEmpty` never writes a data key while
//!   the target range holds a key the mirror did not write (a foreign key).
//!
//! Drift (issue C2): keys an outside writer changes inside the mirrored range after the
//! initial sync are tracked in [`Drift`]. (a) skips a drifted key until the mirror writes it
//! again (a repair or an ordinary tail write takes it back). Further invariants:
//! - **(b) after cut-over**: once a fence with role `Primary` landed, no mirror write lands.
//! - **orphans**: an injected orphan is deleted only by an agent with `deleteOrphans` (or by
//!   an `OverwriteAndPrune` genesis sweep).
//! - **sibling fence**: another link's fence in the range is never written or deleted.
//!
//! The drain (a) and pass-count (c) invariants are checked by the world, which sees the
//! agents' status.
//!
//! Source restores (see `crate::restore`): "`source@W`" is read in the history the writer's
//! knowledge came from, its *basis* ([`Issuer::epoch`]); the world passes that history's
//! store. A record written from the new history is judged against the new history (a record
//! that mixes the two is a false promise and breaks (a)); a commit written from the old one
//! (in flight when the source was restored) against the old one, and records written before
//! a restore are never judged again. (c) compares watermarks within one history: abandoning
//! a checkpoint after a restore (`initialSync.abandonWatermark`) starts the new history's
//! watermarks from 0.

use crate::model::store::in_range;
use crate::model::Store;
use crate::oracle::{Fence, Oracle};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::TxnOp;
use tidemark_core::mirror::Checkpoint;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Short stable name, e.g. "a-watermark".
    pub invariant: String,
    /// Simulated time, nanoseconds.
    pub at_ns: u64,
    pub detail: String,
}

/// Who issued a target write.
#[derive(Debug, Clone)]
pub struct Issuer {
    pub agent: u32,
    pub incarnation: u32,
    pub mode: InitialSyncMode,
    /// `reconciliation.deleteOrphans` of the issuing agent.
    pub delete_orphans: bool,
    /// The source history the issuer's knowledge came from when it sent the write (the
    /// number of source restores before the newest source data it had received).
    pub epoch: u32,
    /// `initialSync.abandonWatermark` of the issuing agent.
    pub abandon: Option<i64>,
    /// The issuing process's holder nonce (empty when not yet known).
    pub holder: String,
    /// The Txn is a claim: its fence compare is on the mod (or create) revision the agent
    /// just read, not on the value of a record it installed. A claim acquires the fence
    /// afresh, so a holder that lost it may hold it again (a process whose claim's outcome
    /// was unknown reads the fence and claims again with the same holder nonce).
    pub claim: bool,
}

/// Drift injected into the target range behind the mirror's back.
#[derive(Debug, Clone, Default)]
pub struct Drift {
    /// Drifted target keys the mirror has not written since, with the injection time.
    pub keys: BTreeMap<Vec<u8>, u64>,
    /// Every key ever drifted (a pass's expected counts are read from these).
    pub ever: BTreeSet<Vec<u8>>,
    /// Keys injected as orphans (their source key never exists).
    pub orphans: BTreeSet<Vec<u8>>,
    /// Another link's fence key in the range, and when it appeared.
    pub sibling: Option<(Vec<u8>, u64)>,
    /// Drifted keys the mirror later wrote (repairs, tail writes, genesis).
    pub taken_back: u64,
}

impl Drift {
    /// Whether (a) ignores this target key for now.
    pub fn skipped(&self, k: &[u8]) -> bool {
        self.keys.contains_key(k) || self.sibling.as_ref().is_some_and(|(s, _)| s == k)
    }

    /// Injected orphans still in the target untouched by the mirror.
    pub fn live_orphans(&self) -> usize {
        self.orphans
            .iter()
            .filter(|k| self.keys.contains_key(*k))
            .count()
    }
}

/// The checker's memory of the link.
#[derive(Debug, Clone)]
pub struct Checker {
    pub oracle: Oracle,
    lost: BTreeSet<String>,
    pub fence: Option<Fence>,
    /// The highest settled watermark written, per source history.
    settled: BTreeMap<u32, i64>,
    foreign: BTreeSet<Vec<u8>>,
    /// Full-range comparisons done (invariant (a)).
    pub deep_checks: u64,
    /// Incremental checks of invariant (a).
    pub incremental_checks: u64,
    /// The history and watermark of the last passed (a) check; None before the first (full)
    /// one, and a check in another history starts over with a full one.
    checked: Option<(u32, i64)>,
    /// Target keys written since that check (they may now differ).
    dirty: BTreeSet<Vec<u8>>,
    /// Drift injected behind the mirror.
    pub drift: Drift,
    /// When the fence flipped to `Primary` (cut-over), if it did.
    pub primary_at: Option<u64>,
    /// The source history the cut-over commit was written from.
    pub primary_epoch: u32,
}

fn v(invariant: &str, at_ns: u64, detail: String) -> Violation {
    Violation {
        invariant: invariant.into(),
        at_ns,
        detail,
    }
}

fn show(k: &[u8]) -> String {
    let s = String::from_utf8_lossy(k);
    if s.len() > 80 {
        format!("{}...", s.chars().take(80).collect::<String>())
    } else {
        s.into_owned()
    }
}

impl Checker {
    /// A checker for one link.
    pub fn new(oracle: Oracle) -> Checker {
        Checker {
            oracle,
            lost: BTreeSet::new(),
            fence: None,
            settled: BTreeMap::new(),
            foreign: BTreeSet::new(),
            deep_checks: 0,
            incremental_checks: 0,
            checked: None,
            dirty: BTreeSet::new(),
            drift: Drift::default(),
            primary_at: None,
            primary_epoch: 0,
        }
    }

    /// Records a drift write (put or delete) of one target key at `now`.
    pub fn drift_write(&mut self, key: &[u8], now: u64, orphan: bool) {
        self.drift.keys.insert(key.to_vec(), now);
        self.drift.ever.insert(key.to_vec());
        if orphan {
            self.drift.orphans.insert(key.to_vec());
        }
    }

    /// The drift a pass pinned at `w` must report, given the target as of `target_rev`:
    /// (missing, divergent, orphan). Every key never drifted equals `source@w` by (a).
    pub fn expected_drift(
        &self,
        w: i64,
        source: &Store,
        target: &Store,
        target_rev: i64,
    ) -> (u64, u64, u64) {
        let (mut missing, mut divergent, mut orphan) = (0, 0, 0);
        for k in &self.drift.ever {
            let expected = self
                .unrewrite(k)
                .and_then(|sk| source.get_at(&sk, w))
                .map(|kv| &kv.value);
            let actual = target.get_at(k, target_rev).map(|kv| &kv.value);
            match (expected, actual) {
                (Some(_), None) => missing += 1,
                (None, Some(_)) => orphan += 1,
                (Some(e), Some(a)) if e != a => divergent += 1,
                _ => {}
            }
        }
        (missing, divergent, orphan)
    }

    /// Records a key written into the target by someone other than the mirror.
    pub fn foreign_write(&mut self, key: &[u8]) {
        if self.oracle.in_target_range(key) {
            self.foreign.insert(key.to_vec());
        }
    }

    /// Whether the target range holds keys the mirror did not write.
    pub fn has_foreign(&self) -> bool {
        !self.foreign.is_empty()
    }

    /// Checks one applied target Txn (the branch that ran wrote something). Call after the
    /// store applied it.
    pub fn on_commit(
        &mut self,
        now: u64,
        who: &Issuer,
        ops: &[TxnOp],
        source: &Store,
        target: &Store,
    ) -> Result<(), Violation> {
        let o = &self.oracle;
        let (base, end) = o.target_range();
        // (d) range.
        for op in ops {
            match op {
                TxnOp::Put { key, .. } if !o.in_target_range(key) => {
                    return Err(v(
                        "d-range",
                        now,
                        format!("put outside the target range: {}", show(key)),
                    ));
                }
                TxnOp::Delete { key, range_end } => {
                    let ok = if range_end.is_empty() {
                        o.in_target_range(key)
                    } else {
                        key.as_slice() >= base.as_slice()
                            && range_end.as_slice() != [0]
                            && (end == [0] || range_end.as_slice() <= end.as_slice())
                    };
                    if !ok {
                        return Err(v(
                            "d-range",
                            now,
                            format!(
                                "delete outside the target range: [{}, {})",
                                show(key),
                                show(range_end)
                            ),
                        ));
                    }
                }
                _ => {}
            }
        }
        // (b) nothing lands after the cut-over.
        if let Some(at) = self.primary_at {
            return Err(v(
                "b-after-cutover",
                now,
                format!(
                    "agent {} (inc {}) wrote the target after the fence flipped to Primary at {} ms",
                    who.agent,
                    who.incarnation,
                    at / 1_000_000
                ),
            ));
        }
        // Another link's fence and injected orphans. A resync's mark-and-sweep prune (the
        // fence says a scan or a prune is under way) cannot tell an orphan from a key the
        // source deleted during the gap, so it may delete one in any mode.
        let sweeping = ops.iter().any(|op| match op {
            TxnOp::Put { key, value } if *key == o.fence_key => {
                Fence::parse(value).is_some_and(|f| f.prune_pending || f.scan_base.is_some())
            }
            _ => false,
        });
        for op in ops {
            let (key, range_end) = match op {
                TxnOp::Put { key, .. } => (key, &Vec::new()),
                TxnOp::Delete { key, range_end } => (key, range_end),
                TxnOp::Get { .. } => continue,
            };
            let hits = |k: &[u8]| {
                if range_end.is_empty() {
                    k == key.as_slice()
                } else {
                    in_range(k, key, range_end)
                }
            };
            if let Some((s, _)) = &self.drift.sibling {
                if hits(s) {
                    return Err(v(
                        "sibling-fence-touched",
                        now,
                        format!(
                            "agent {} wrote or deleted another link's fence {}",
                            who.agent,
                            show(s)
                        ),
                    ));
                }
            }
            let prune_allowed =
                who.delete_orphans || who.mode == InitialSyncMode::OverwriteAndPrune || sweeping;
            if matches!(op, TxnOp::Delete { .. }) && !prune_allowed {
                if let Some(k) = self
                    .drift
                    .orphans
                    .iter()
                    .find(|k| self.drift.keys.contains_key(*k) && hits(k))
                {
                    return Err(v(
                        "orphan-deleted",
                        now,
                        format!(
                            "agent {} deleted the orphan {} without deleteOrphans",
                            who.agent,
                            show(k)
                        ),
                    ));
                }
            }
        }
        // (b) fenced.
        let fence_bytes = ops.iter().rev().find_map(|op| match op {
            TxnOp::Put { key, value } if *key == o.fence_key => Some(value.clone()),
            _ => None,
        });
        let Some(fence_bytes) = fence_bytes else {
            return self.on_unfenced(now, who, ops, source, target);
        };
        let Some(f) = Fence::parse(&fence_bytes) else {
            return Err(v("b-fence", now, "fence record does not parse".into()));
        };
        if let Err(e) = Checkpoint::decode(&fence_bytes) {
            return Err(v(
                "b-fence",
                now,
                format!("fence record the core cannot read back: {e}"),
            ));
        }
        if who.claim {
            self.lost.remove(&f.holder);
        }
        if self.lost.contains(&f.holder) {
            return Err(v(
                "b-lost-holder",
                now,
                format!(
                    "commit from holder {} (agent {} inc {}) that lost the fence; fence now epoch {} watermark {}",
                    f.holder, who.agent, who.incarnation, f.epoch, f.watermark
                ),
            ));
        }
        if let Some(prev) = &self.fence {
            if prev.holder != f.holder {
                self.lost.insert(prev.holder.clone());
            }
        }
        // (c) monotonic watermark, within the writer's source history. An agent told to
        // abandon the checkpoint holding exactly this watermark starts over from 0.
        let abandoning = who.abandon.is_some()
            && self.fence.as_ref().map(|p| p.watermark) == who.abandon
            && f.watermark < who.abandon.unwrap_or(0);
        if abandoning {
            self.settled.insert(who.epoch, 0);
        }
        let settled = self.settled.get(&who.epoch).copied().unwrap_or(0);
        if f.scan_base.is_none() && f.watermark < settled {
            return Err(v(
                "c-watermark-regressed",
                now,
                format!(
                    "fence watermark {} below the settled watermark {settled} (holder {}, split {:?}, source history {})",
                    f.watermark, f.holder, f.split, who.epoch
                ),
            ));
        }
        if f.settled() {
            let s = self.settled.entry(who.epoch).or_default();
            *s = (*s).max(f.watermark);
        }
        self.data_written(now, who, ops)?;
        if f.role == "Primary" && self.primary_at.is_none() {
            self.primary_at = Some(now);
            self.primary_epoch = who.epoch;
        }
        self.fence = Some(f.clone());
        for e in target.events_at(target.rev()) {
            self.dirty.insert(e.kv.key.clone());
        }
        // (a) watermark invariant. Watermark 0 promises nothing: no revision was mirrored.
        if f.settled() && f.watermark > 0 {
            self.check_incremental(now, who.epoch, f.watermark, source, target)?;
        }
        Ok(())
    }

    /// A write without a fence put: a genesis page, which compares the fence's mod revision
    /// instead (see docs/design.md, "Pipelined commits"). It is the issuer's only if the
    /// fence is, so it must not come from a holder that lost the fence; and it must leave
    /// a settled fence's promise true.
    fn on_unfenced(
        &mut self,
        now: u64,
        who: &Issuer,
        ops: &[TxnOp],
        source: &Store,
        target: &Store,
    ) -> Result<(), Violation> {
        let Some(f) = self.fence.clone() else {
            return Err(v(
                "b-fence",
                now,
                format!(
                    "agent {} wrote data into a target without a fence",
                    who.agent
                ),
            ));
        };
        if !who.holder.is_empty() && (self.lost.contains(&who.holder) || who.holder != f.holder) {
            return Err(v(
                "b-lost-holder",
                now,
                format!(
                    "unfenced write from holder {} (agent {} inc {}) while holder {} holds the fence (epoch {} watermark {})",
                    who.holder, who.agent, who.incarnation, f.holder, f.epoch, f.watermark
                ),
            ));
        }
        self.data_written(now, who, ops)?;
        for e in target.events_at(target.rev()) {
            self.dirty.insert(e.kv.key.clone());
        }
        if f.settled() && f.watermark > 0 {
            self.check_incremental(now, who.epoch, f.watermark, source, target)?;
        }
        Ok(())
    }

    /// What a write does to the data keys: (e), foreign keys and drift.
    fn data_written(&mut self, now: u64, who: &Issuer, ops: &[TxnOp]) -> Result<(), Violation> {
        let o = &self.oracle;
        // (e) RequireEmpty.
        let data_ops = ops
            .iter()
            .any(|op| op.key() != o.fence_key.as_slice() && !matches!(op, TxnOp::Get { .. }));
        if who.mode == InitialSyncMode::RequireEmpty && data_ops && !self.foreign.is_empty() {
            let k = self.foreign.iter().next().cloned().unwrap_or_default();
            return Err(v(
                "e-require-empty",
                now,
                format!(
                    "RequireEmpty agent {} wrote into a target holding foreign key {}",
                    who.agent,
                    show(&k)
                ),
            ));
        }
        for op in ops {
            match op {
                TxnOp::Put { key, .. } => {
                    self.foreign.remove(key);
                    if self.drift.keys.remove(key).is_some() {
                        self.drift.taken_back += 1;
                    }
                }
                TxnOp::Delete { key, range_end } => {
                    self.foreign.retain(|k| !in_range(k, key, range_end));
                    let before = self.drift.keys.len();
                    if range_end.is_empty() {
                        self.drift.keys.remove(key);
                    } else {
                        self.drift.keys.retain(|k, _| !in_range(k, key, range_end));
                    }
                    self.drift.taken_back += (before - self.drift.keys.len()) as u64;
                }
                TxnOp::Get { .. } => {}
            }
        }
        Ok(())
    }

    /// Invariant (a) at `w` in source history `epoch`, looking only at keys that may have
    /// changed since the last passed check: target keys written since, and keys the source
    /// changed between the two watermarks (in either direction). Equivalent to
    /// [`Checker::check_equal`] because every other key was equal at the last check and has
    /// not moved on either side. A check in another history than the last is a full one.
    fn check_incremental(
        &mut self,
        now: u64,
        epoch: u32,
        w: i64,
        source: &Store,
        target: &Store,
    ) -> Result<(), Violation> {
        let prev = match self.checked {
            Some((e, prev)) if e == epoch => prev,
            _ => {
                self.checked = None;
                self.check_equal(now, w, source, target)?;
                self.checked = Some((epoch, w));
                self.dirty.clear();
                return Ok(());
            }
        };
        if w > source.rev() {
            return Err(v(
                "a-watermark",
                now,
                format!(
                    "watermark {w} is ahead of the source revision {}",
                    source.rev()
                ),
            ));
        }
        self.incremental_checks += 1;
        let (lo, hi) = (prev.min(w), prev.max(w));
        for r in lo + 1..=hi {
            for e in source.events_at(r) {
                if let Some(k) = self.oracle.rewrite(&e.kv.key) {
                    self.dirty.insert(k);
                }
            }
        }
        let dirty = std::mem::take(&mut self.dirty);
        for k in &dirty {
            if *k == self.oracle.fence_key || self.drift.skipped(k) {
                continue;
            }
            let expected = self
                .unrewrite(k)
                .and_then(|sk| source.get_at(&sk, w))
                .map(|kv| &kv.value);
            let actual = target.get(k).map(|kv| &kv.value);
            if expected != actual {
                let detail = match (expected, actual) {
                    (Some(_), None) => format!("at watermark {w}: target is missing {} (present in source@{w})", show(k)),
                    (None, Some(_)) => format!("at watermark {w}: target has {} which source@{w} does not", show(k)),
                    (Some(e), Some(a)) => format!(
                        "at watermark {w}: target {} has a value of {} bytes, source@{w} has {} bytes",
                        show(k),
                        a.len(),
                        e.len()
                    ),
                    (None, None) => unreachable!("equal"),
                };
                self.dirty = dirty;
                return Err(v("a-watermark", now, detail));
            }
        }
        self.checked = Some((epoch, w));
        Ok(())
    }

    /// The source key a target key mirrors, if any (the inverse of the rewrite).
    fn unrewrite(&self, target_key: &[u8]) -> Option<Vec<u8>> {
        let rel = target_key.strip_prefix(self.oracle.target_base.as_slice())?;
        if self.oracle.excludes.iter().any(|e| rel.starts_with(e)) {
            return None;
        }
        let mut k = self.oracle.source_prefix.clone();
        k.extend_from_slice(rel);
        Some(k)
    }

    /// Invariant (a) at watermark `w`, skipping drifted keys.
    pub fn check_equal(
        &mut self,
        now: u64,
        w: i64,
        source: &Store,
        target: &Store,
    ) -> Result<(), Violation> {
        let drift = self.drift.clone();
        self.check_equal_with(now, w, source, target, |k| drift.skipped(k))
    }

    /// Target (fence and keys `skip` names excluded) equals `rewrite(source@w)`.
    pub fn check_equal_with(
        &mut self,
        now: u64,
        w: i64,
        source: &Store,
        target: &Store,
        skip: impl Fn(&[u8]) -> bool,
    ) -> Result<(), Violation> {
        self.deep_checks += 1;
        if w > source.rev() {
            return Err(v(
                "a-watermark",
                now,
                format!(
                    "watermark {w} is ahead of the source revision {}",
                    source.rev()
                ),
            ));
        }
        let o = &self.oracle;
        let (sk, se) = o.source_range();
        let (tk, te) = o.target_range();
        let src = source.range_at(&sk, &se, w);
        let tgt = target.range_at(&tk, &te, target.rev());
        let mut expected = src
            .iter()
            .filter_map(|kv| o.rewrite(&kv.key).map(|k| (k, &kv.value)))
            .filter(|(k, _)| !skip(k))
            .peekable();
        let mut actual = tgt
            .iter()
            .filter(|kv| kv.key != o.fence_key && !skip(&kv.key))
            .peekable();
        loop {
            match (expected.peek(), actual.peek()) {
                (None, None) => return Ok(()),
                (Some((ek, ev)), Some(a)) if *ek == a.key => {
                    if **ev != a.value {
                        return Err(v(
                            "a-watermark",
                            now,
                            format!(
                                "at watermark {w}: target {} has a value of {} bytes, source@{w} has {} bytes",
                                show(ek),
                                a.value.len(),
                                ev.len()
                            ),
                        ));
                    }
                    expected.next();
                    actual.next();
                }
                (Some((ek, _)), None) => {
                    return Err(v(
                        "a-watermark",
                        now,
                        format!(
                            "at watermark {w}: target is missing {} (present in source@{w})",
                            show(ek)
                        ),
                    ));
                }
                (Some((ek, _)), Some(a)) if ek.as_slice() < a.key.as_slice() => {
                    return Err(v(
                        "a-watermark",
                        now,
                        format!(
                            "at watermark {w}: target is missing {} (present in source@{w})",
                            show(ek)
                        ),
                    ));
                }
                (_, Some(a)) => {
                    return Err(v(
                        "a-watermark",
                        now,
                        format!(
                            "at watermark {w}: target has {} which source@{w} does not",
                            show(&a.key)
                        ),
                    ));
                }
            }
        }
    }

    /// Liveness: the fence is settled, its watermark covers the last in-scope source
    /// revision, and the target equals the rewritten latest source: every drifted key is
    /// repaired, except injected orphans when `keep_orphans` (no `deleteOrphans`) and any
    /// drifted key when `keep_drift` (nothing reconciles). `Ok(false)` = not yet.
    pub fn converged(
        &mut self,
        now: u64,
        source: &Store,
        target: &Store,
        keep_orphans: bool,
        keep_drift: bool,
    ) -> Result<bool, Violation> {
        let Some(f) = self.fence.clone() else {
            return Ok(false);
        };
        if self.drift.sibling.is_some() {
            return Ok(false);
        }
        if !f.settled() {
            return Ok(false);
        }
        let o = self.oracle.clone();
        let last = source.last_rev_matching(source.rev(), |k| o.rewrite(k).is_some());
        if f.watermark < last {
            return Ok(false);
        }
        // Live target must equal the latest source too (it equals source@W by (a)).
        let orphans = self.drift.orphans.clone();
        let drifted = self.drift.keys.clone();
        let skip = |k: &[u8]| {
            (keep_orphans && orphans.contains(k)) || (keep_drift && drifted.contains_key(k))
        };
        match self.check_equal_with(now, source.rev(), source, target, skip) {
            Ok(()) => Ok(true),
            Err(_) => Ok(false),
        }
    }

    /// The last in-scope revision (liveness target), for reports.
    pub fn last_in_scope(&self, source: &Store) -> i64 {
        let o = &self.oracle;
        source.last_rev_matching(source.rev(), |k| o.rewrite(k).is_some())
    }
}
