//! The commit chain: up to `depth` fenced Txns in flight, acted on in chain order. It
//! carries the tail, and the genesis scan of a source whose progress notifications are not
//! trusted; other scans write order-free pages (`pages.rs`).
//!
//! Every record carries a sequence number no earlier record of the link had, and each
//! Txn compares the fence's value with the record the Txn before it installs. A Txn can
//! therefore only apply directly on top of its predecessor, and at most once: etcd may
//! reorder concurrent requests (it promises no FIFO order for unary RPCs), and a late
//! duplicate may arrive after its chain was given up, but neither can apply anything out
//! of order. Order only costs speed: a Txn that arrives before its predecessor fails its
//! compare, and so does everything after it.
//!
//! Replies are buffered and acted on in chain order, so the rest of the machine sees the
//! same sequence of outcomes as with one Txn in flight. A failure with later Txns still in
//! flight is a break: nothing new is sent, the Txns already sent resolve (a success after
//! the failed one proves it applied), and the mirror resumes from the record the fence
//! holds, read again when any outcome stayed unknown. See docs/design.md, "Pipelined
//! commits".

use super::*;

/// The commit chain's own state, apart from the flows that feed it work.
#[derive(Debug, Clone)]
pub(super) struct Pipeline {
    /// Counts forced resyncs: a commit sent for a copy a resync replaced is not redone when
    /// it turns out not to have applied (its data and record vouch for the replaced copy).
    pub(super) copy_seq: u64,
    /// Fenced Txns in flight, in chain order, each with its reply once it came (replies are
    /// acted on in chain order).
    pub(super) chain: VecDeque<Link>,
    /// The bytes the fence holds as far as we know: what the next Txn compares.
    pub(super) fence_bytes: Vec<u8>,
    /// The record (and its bytes) the newest Txn in flight installs.
    pub(super) chain_tip: Option<(Checkpoint, Vec<u8>)>,
    /// The sequence number of the next record (unique per link; see `Checkpoint::seq`).
    pub(super) next_seq: u64,
    /// A fence read is resolving an unknown outcome: nothing else is written meanwhile.
    pub(super) resolving: bool,
    /// The chain broke with Txns still in flight: wait for them, then resume from the fence.
    pub(super) broken: Option<Break>,
    /// How many Txns may be in flight now (grows by one per applied Txn up to the limit
    /// derived from the commit round trip; back to one after a break).
    pub(super) depth: usize,
    /// The least time between two chained sends while one is in flight: zero until etcd
    /// reorders the chain, then grown at each reorder and worn down as Txns apply (see
    /// [`Pipeline::on_reorder`]).
    pub(super) gap: Duration,
    /// When the newest chained Txn was sent.
    pub(super) last_send: Option<Instant>,
    /// Smoothed commit round trip.
    pub(super) commit_rtt: Option<Duration>,
}

impl Pipeline {
    /// An empty chain of depth one, whose first record has sequence number 1.
    pub(super) fn new() -> Pipeline {
        Pipeline {
            chain: VecDeque::new(),
            fence_bytes: Vec::new(),
            chain_tip: None,
            next_seq: 1,
            resolving: false,
            broken: None,
            depth: 1,
            gap: Duration::ZERO,
            last_send: None,
            commit_rtt: None,
            copy_seq: 0,
        }
    }

    /// A chained Txn applied: the depth grows by one, never past `cap`, what the
    /// configuration and the round trip allow (a depth that was never used says nothing).
    /// The gap wears down by 1/GAP_BALANCE of itself (see [`Pipeline::on_reorder`]).
    pub(super) fn grow(&mut self, cap: usize) {
        self.depth = (self.depth + 1).min(cap);
        self.gap -= self.gap / GAP_BALANCE;
        if self.gap < GAP_FLOOR {
            self.gap = Duration::ZERO;
        }
    }

    /// A Txn reached etcd before its predecessor. etcd runs requests that arrive together
    /// in no useful order, but keeps the order of requests that arrive apart (README
    /// "Benchmarks", `tidemark-bench chain`), so the sends are spaced. Both costs are
    /// time: the first early Txn of a burst loses about one round trip `rtt` (the Txns
    /// behind it in flight were doomed with it, and go again in its shadow), while the gap
    /// is paid on every send. So each burst (the caller counts an early Txn whose
    /// predecessor was not early) adds `rtt / GAP_BALANCE`, and each applied Txn takes
    /// `gap / GAP_BALANCE` off: the gap settles where `p * rtt = gap`, for `p` bursts per
    /// applied Txn. That costs at most twice the best spacing, for any `p` that falls as
    /// the gap grows.
    /// The gap never exceeds the round trip (past it, one Txn at a time is the same) or
    /// MAX_GAP. The depth stays: across a long round trip it is what carries the rate.
    pub(super) fn on_reorder(&mut self, rtt: Duration) {
        let cap = rtt.min(MAX_GAP);
        self.gap = (self.gap + rtt / GAP_BALANCE).min(cap);
    }

    /// Whether a chained Txn may join those in flight at `now`, as far as the gap goes.
    pub(super) fn gap_allows(&self, now: Instant) -> bool {
        self.send_due().is_none_or(|t| t <= now)
    }

    /// When the gap lets the next chained Txn join those in flight.
    pub(super) fn send_due(&self) -> Option<Instant> {
        if self.chain.is_empty() || self.gap.is_zero() {
            return None;
        }
        self.last_send.map(|t| t + self.gap)
    }
}

/// One Txn of the chain and, once it came, its reply.
#[derive(Debug, Clone)]
pub(super) struct Link {
    pub(super) seq: u64,
    /// Bytes of its ops, for the in-flight budget.
    pub(super) wire: usize,
    /// A scan or tail write (others run alone).
    pub(super) chained: bool,
    pub(super) reply: Option<(Commit, Result<TxnReply, Failure>)>,
    /// It arrived before its predecessor, and waits to be sent again (with the reply that
    /// said so, which stands as its outcome if the chain breaks first).
    pub(super) queued: Option<(Box<Commit>, TxnReply)>,
    /// Its newest send is a re-send.
    pub(super) resent: bool,
}

/// Why the chain broke, acted on once every Txn in flight has resolved.
#[derive(Debug, Clone)]
pub(super) struct Break {
    /// Some Txn's outcome is unknown (a transport error): the fence must be read.
    pub(super) unknown: bool,
    /// The first failure, when it needs more than a retry (a throttle, a full target).
    pub(super) cause: Option<Failure>,
    /// The Txns that did not (or may not have) applied, in chain order: their work is
    /// sent again, on top of whatever the fence turns out to hold.
    pub(super) redo: Vec<Commit>,
    /// The fence as the newest failed compare saw it.
    pub(super) seen: Option<KeyValue>,
}

/// Times one Txn is sent again for arriving before its predecessor; past it, the chain
/// breaks (a predecessor that never applies would otherwise be waited for forever).
const MAX_RESENDS: u32 = 64;
/// The largest chain, whatever the round trip.
pub(super) const MAX_DEPTH: usize = 64;
/// The most the gap grows to, whatever the round trip.
const MAX_GAP: Duration = Duration::from_millis(16);
/// A gap this small is dropped.
const GAP_FLOOR: Duration = Duration::from_micros(50);
/// How fast the gap moves (see [`Pipeline::on_reorder`]): a burst of reorders adds the
/// round trip over this, and each applied Txn takes the gap over this off (about 90 applied
/// Txns halve it).
const GAP_BALANCE: u32 = 128;
/// The round trip assumed before one was measured.
const DEFAULT_RTT: Duration = Duration::from_millis(16);
/// What one Txn is assumed to cost the target: the depth that keeps a target busy across
/// a round trip is the round trip over this.
const TARGET_TXN_COST: Duration = Duration::from_millis(2);

impl Mirror {
    /// Whether any fenced write is in flight or being resolved.
    pub(super) fn committing(&self) -> bool {
        !self.pipeline.chain.is_empty() || self.pipeline.resolving || self.pages.in_flight() > 0
    }

    /// How many Txns may be in flight: the configured limit, the round trip's needs, and
    /// the slow start after a break.
    pub(super) fn depth_limit(&self) -> usize {
        self.depth_cap().min(self.pipeline.depth.max(1))
    }

    /// The configured limit and the round trip's needs: what the depth grows to.
    pub(super) fn depth_cap(&self) -> usize {
        let cap = (self.cfg.sync.max_txns_in_flight as usize).clamp(1, MAX_DEPTH);
        let by_rtt = self.pipeline.commit_rtt.map_or(cap, |rtt| {
            let n = rtt.as_micros() / TARGET_TXN_COST.as_micros().max(1);
            usize::try_from(n).unwrap_or(MAX_DEPTH).saturating_add(2)
        });
        cap.min(by_rtt)
    }

    /// Whether `work` may join the Txns in flight (only scan and tail writes are chained;
    /// writes that change what the fence means wait for an empty chain).
    pub(super) fn may_chain(&self, work: &Work) -> bool {
        self.pipeline.chain.is_empty() || (self.chainable(work) && self.chain_has_room())
    }

    /// Scan pages, and tail batches once genesis is done. A genesis's replay writes stay
    /// one at a time: its records take the anchor as of the newest event fed, not as of
    /// their own watermark, which only holds while nothing is written ahead of them.
    pub(super) fn chainable(&self, work: &Work) -> bool {
        match work {
            // Order-free pages bypass the chain (`pages.rs`).
            Work::Scan { .. } => !self.pages_commute(),
            Work::Tail(_) => self.life.stage == Stage::Tail,
            _ => false,
        }
    }

    /// Whether one more scan or tail Txn may join the chain now.
    pub(super) fn chain_has_room(&self) -> bool {
        let wire: usize = self.pipeline.chain.iter().map(|l| l.wire).sum();
        let budget = self
            .cfg
            .sync
            .txn_flush_bytes
            .saturating_mul(READ_AHEAD_PAGES);
        self.pipeline.broken.is_none()
            && !self.pipeline.resolving
            && self
                .pipeline
                .chain
                .iter()
                .all(|l| l.chained && l.queued.is_none())
            && self.pipeline.chain.len() < self.depth_limit()
            && (wire as u64) < budget
            && self.pipeline.gap_allows(self.cmds.now)
    }

    /// The record the next Txn builds on: the newest in flight, or the durable one.
    pub(super) fn tip(&self) -> Option<&Checkpoint> {
        self.pipeline
            .chain_tip
            .as_ref()
            .map(|(r, _)| r)
            .or(self.fence.record.as_ref())
    }

    /// The bytes the next Txn compares the fence with.
    pub(super) fn tip_bytes(&self) -> &[u8] {
        self.pipeline
            .chain_tip
            .as_ref()
            .map_or(self.pipeline.fence_bytes.as_slice(), |(_, b)| b.as_slice())
    }

    /// A Txn's reply came: buffer it, then act on the chain's head while its reply is in.
    pub(super) fn on_chain_reply(
        &mut self,
        now: Instant,
        c: Commit,
        reply: Result<TxnReply, Failure>,
    ) {
        if self.life.stage == Stage::Stopped {
            return;
        }
        let seq = c.record.seq;
        if !self.pipeline.chain.iter().any(|l| l.seq == seq) {
            // A Txn of a chain given up (a takeover, a park): its outcome is the fence's.
            return;
        }
        let early = matches!(&reply, Ok(t) if self.pipeline.broken.is_none()
            && c.resends < MAX_RESENDS
            && self.arrived_early(&c, t));
        let reply = match reply {
            Ok(t) if early => {
                // etcd ran it before its predecessor (concurrent requests are not ordered):
                // it did not apply, and it is sent again as it was, so the Txns after it,
                // built on its record, stay valid. Re-sends go in chain order, paced like
                // first sends (see `send_resends`).
                self.status.chain_reorders += 1;
                let Some(i) = self.pipeline.chain.iter().position(|l| l.seq == seq) else {
                    return;
                };
                // Only the first of a burst costs a round trip: the Txns behind it were
                // doomed with it, and go again in its shadow.
                let first = i == 0 || self.pipeline.chain[i - 1].queued.is_none();
                if first {
                    let rtt = self.pipeline.commit_rtt.unwrap_or(DEFAULT_RTT);
                    self.pipeline.on_reorder(rtt);
                }
                self.pipeline.chain[i].queued = Some((Box::new(c), t));
                self.send_resends(now);
                return;
            }
            other => other,
        };
        let Some(link) = self.pipeline.chain.iter_mut().find(|l| l.seq == seq) else {
            return;
        };
        if reply.is_ok() {
            let rtt = now.saturating_duration_since(c.sent);
            self.pipeline.commit_rtt = Some(match self.pipeline.commit_rtt {
                None => rtt,
                Some(old) => (old * 7 + rtt) / 8,
            });
        }
        link.reply = Some((c, reply));
        loop {
            if self.pipeline.broken.is_some() {
                // Nothing is sent again after a break: what waited did not apply.
                self.settle_queued();
            }
            if self
                .pipeline
                .chain
                .front()
                .is_none_or(|l| l.reply.is_none())
            {
                break;
            }
            let Some(Link {
                reply: Some((c, reply)),
                ..
            }) = self.pipeline.chain.pop_front()
            else {
                break;
            };
            // A later Txn applied, so this one did: it was the only way to its record.
            let later_applied = self
                .pipeline
                .chain
                .iter()
                .any(|l| matches!(&l.reply, Some((_, Ok(t))) if t.succeeded));
            if self.pipeline.chain.is_empty() {
                self.pipeline.chain_tip = None;
            }
            match reply {
                Ok(t) if t.succeeded => {
                    // Everything before it applied too, including Txns whose failure
                    // (an unknown outcome) already broke the chain.
                    let before = self
                        .pipeline
                        .broken
                        .as_mut()
                        .map(|b| std::mem::take(&mut b.redo))
                        .unwrap_or_default();
                    for earlier in before {
                        self.commit_applied(now, earlier, 0);
                    }
                    if self.pipeline.broken.is_none() {
                        let cap = self.depth_cap();
                        self.pipeline.grow(cap);
                    }
                    self.commit_applied(now, c, t.header_revision);
                }
                _ if later_applied => self.commit_applied(now, c, 0),
                reply if self.pipeline.broken.is_some() => {
                    // Dead (its predecessor never applied) or unknown: sent again later.
                    if let Some(b) = self.pipeline.broken.as_mut() {
                        match reply {
                            Err(f) => b.unknown |= unknown_outcome(&f),
                            Ok(t) => {
                                if let Some(kv) = t.reads.into_iter().next().flatten() {
                                    b.seen = Some(kv);
                                }
                            }
                        }
                        b.redo.push(c);
                    }
                }
                reply if self.pipeline.chain.is_empty() && !self.overtook(&c, &reply) => {
                    // Alone in flight: the one-Txn handling applies as it is.
                    match reply {
                        Ok(t) => self.on_commit(now, c, t),
                        Err(f) => self.on_commit_failed(now, c, f),
                    }
                }
                Ok(t) => {
                    let current = t.reads.into_iter().next().flatten();
                    let ours = current.as_ref().is_some_and(|kv| {
                        kv.value == self.pipeline.fence_bytes
                            || Checkpoint::decode(&kv.value).is_ok_and(|r| {
                                r.holder == self.fence.holder && r.epoch == c.record.epoch
                            })
                    });
                    if !ours {
                        // Someone else wrote the fence: decide now, as with one Txn.
                        self.abandon_chain();
                        return self.judge_fence(now, c, current);
                    }
                    // Arrived before its predecessor (or after a lost one).
                    self.status.chain_breaks += 1;
                    self.pipeline.broken = Some(Break {
                        unknown: false,
                        cause: None,
                        redo: vec![c],
                        seen: current,
                    });
                }
                Err(f) => {
                    if let Failure::Permanent { kind, message } = f {
                        self.abandon_chain();
                        let fk = if kind == PermanentKind::Unsupported {
                            FailKind::Unsupported
                        } else {
                            FailKind::Permanent
                        };
                        return self.fail(now, fk, message);
                    }
                    self.status.chain_breaks += 1;
                    self.pipeline.broken = Some(Break {
                        unknown: unknown_outcome(&f),
                        cause: Some(f),
                        redo: vec![c],
                        seen: None,
                    });
                }
            }
        }
        if self.pipeline.chain.is_empty() {
            if let Some(b) = self.pipeline.broken.take() {
                self.after_break(now, b);
            }
        }
    }

    /// Sends the Txns that arrived before their predecessor again, in chain order: one
    /// goes once every Txn before it has replied or was itself sent again (a re-send ahead
    /// of its predecessor's would only fail again), and the gap has passed since the last
    /// send.
    pub(super) fn send_resends(&mut self, now: Instant) {
        if self.life.stage == Stage::Stopped {
            return;
        }
        loop {
            let Some(i) = self.pipeline.chain.iter().position(|l| l.queued.is_some()) else {
                return;
            };
            let ready = self
                .pipeline
                .chain
                .iter()
                .take(i)
                .all(|l| l.reply.is_some() || l.resent);
            if !ready || !self.pipeline.gap_allows(now) {
                return;
            }
            let Some((mut c, _)) = self.pipeline.chain[i].queued.take() else {
                return;
            };
            self.pipeline.chain[i].resent = true;
            c.resends += 1;
            c.sent = now;
            self.pipeline.last_send = Some(now);
            let txn = self.fenced_txn(&c);
            self.issue(Job::Commit(c), Command::Txn(txn));
        }
    }

    /// The chain broke: the Txns waiting to be sent again did not apply, and their early
    /// replies stand as their outcomes.
    fn settle_queued(&mut self) {
        for l in self.pipeline.chain.iter_mut() {
            if let Some((c, t)) = l.queued.take() {
                l.reply = Some((*c, Ok(t)));
            }
        }
    }

    /// Forgets every Txn in flight: their replies are ignored from now on.
    pub(super) fn abandon_chain(&mut self) {
        self.pages.clear();
        self.pipeline.chain.clear();
        self.pipeline.chain_tip = None;
        self.pipeline.depth = 1;
    }

    /// Every Txn of a broken chain has resolved: find how far it got, then go on.
    fn after_break(&mut self, now: Instant, b: Break) {
        // A failure starts the depth over; a chain that only broke on order keeps half.
        self.pipeline.depth = if b.cause.is_none() {
            (self.pipeline.depth / 2).max(1)
        } else {
            1
        };
        if b.unknown {
            self.pipeline.resolving = true;
            let cmd = self.fence_read_cmd();
            self.issue(Job::ResolveChain(Box::new(b)), cmd);
            return;
        }
        match b.seen.clone() {
            Some(kv) if kv.value != self.pipeline.fence_bytes && !self.older_own(&kv.value) => {
                self.settle_break(now, b, Some(kv))
            }
            _ => self.redo_after_break(now, b),
        }
    }

    /// Whether a failed compare saw a record of ours older than the one the Txn builds on:
    /// its predecessor has not applied yet (it is still in flight).
    fn arrived_early(&self, c: &Commit, t: &TxnReply) -> bool {
        if t.succeeded {
            return false;
        }
        let Some(Some(kv)) = t.reads.first() else {
            return false;
        };
        let (Ok(cur), Ok(prev)) = (Checkpoint::decode(&kv.value), Checkpoint::decode(&c.prev))
        else {
            return false;
        };
        cur.holder == c.record.holder && cur.epoch == c.record.epoch && cur.seq < prev.seq
    }

    /// The Txn of a chained commit, as it was first sent.
    fn fenced_txn(&self, c: &Commit) -> TxnRequest {
        let ck = self.keys.checkpoint_key().to_vec();
        let mut success = c.work.ops().to_vec();
        success.push(TxnOp::Put {
            key: ck.clone(),
            value: c.bytes.clone(),
        });
        TxnRequest {
            compares: vec![Compare::value_is(ck.clone(), c.prev.clone())],
            success,
            failure: vec![TxnOp::Get { key: ck }],
        }
    }

    /// A record of ours, this epoch, no newer than the durable one: what a Txn that
    /// overtook its predecessor saw.
    fn older_own(&self, bytes: &[u8]) -> bool {
        let Some(r) = &self.fence.record else {
            return false;
        };
        Checkpoint::decode(bytes)
            .is_ok_and(|o| o.holder == r.holder && o.epoch == r.epoch && o.seq <= r.seq)
    }

    /// Whether a failed compare saw a record older than the one the Txn builds on: it
    /// reached the server before its predecessor applied.
    fn overtook(&self, c: &Commit, reply: &Result<TxnReply, Failure>) -> bool {
        reply.as_ref().is_ok_and(|t| self.arrived_early(c, t))
    }

    /// The fence read after a break with unknown outcomes.
    pub(super) fn on_resolve_chain(&mut self, now: Instant, b: Break, r: RangeReply) {
        self.pipeline.resolving = false;
        let current = r.kvs.into_iter().next();
        self.settle_break(now, b, current);
    }

    /// The fence holds `current`: the Txns of the break up to the one that wrote it applied
    /// (in order, each on its predecessor); the rest did not and are sent again.
    fn settle_break(&mut self, now: Instant, mut b: Break, current: Option<KeyValue>) {
        if let Some(kv) = &current {
            if kv.value == self.pipeline.fence_bytes {
                return self.redo_after_break(now, b);
            }
            if let Some(i) = b.redo.iter().position(|c| c.bytes == kv.value) {
                let rest = b.redo.split_off(i + 1);
                for c in std::mem::take(&mut b.redo) {
                    let rev = if c.bytes == kv.value {
                        kv.mod_revision
                    } else {
                        0
                    };
                    self.commit_applied(now, c, rev);
                }
                b.redo = rest;
                return self.redo_after_break(now, b);
            }
            if let Ok(rec) = Checkpoint::decode(&kv.value) {
                let mine = self.fence.record.as_ref().is_some_and(|r| {
                    r.holder == rec.holder && r.epoch == rec.epoch && rec.seq > r.seq
                });
                if mine {
                    // A Txn of an earlier chain, given up on, applied after all: its record
                    // is where we are, and it is resumed from like a restart.
                    self.pipeline.fence_bytes = kv.value.clone();
                    self.fence.rev = kv.mod_revision;
                    self.fence.rev_exact = true;
                    self.status.own_late_writes_adopted += 1;
                    self.status.last_applied_revision =
                        self.status.last_applied_revision.max(rec.watermark);
                    self.fence.record = Some(rec);
                    self.life.stage = Stage::Fencing;
                    return self.resume_from_record(now);
                }
            }
        }
        // Not ours: decide as a failed compare would.
        let Some(c) = b.redo.into_iter().next() else {
            return self.resume_from_record(now);
        };
        self.judge_fence(now, c, current);
    }

    /// Sends the work of the Txns that did not apply again, in order, after any backoff
    /// the failure asks for.
    fn redo_after_break(&mut self, now: Instant, b: Break) {
        let mut redo = b.redo.into_iter();
        let first = match b.cause {
            Some(Failure::NoSpace) => return self.park(now),
            Some(Failure::TooLarge { .. }) => redo.next(),
            _ => None,
        };
        // Writes for a copy a forced resync replaced are not redone (see `on_compacted`).
        for c in redo.rev().filter(|c| c.copy == self.pipeline.copy_seq) {
            self.work.push_front(c.work);
        }
        if let Some(c) = first.filter(|c| c.copy == self.pipeline.copy_seq) {
            // Pushes its halves in front of the rest.
            return self.shrink_or_fail(now, c);
        }
        match b.cause {
            Some(Failure::Throttled { message }) => {
                self.note_throttled(now, message);
                self.pacing.hold_until = Some(now + self.pacing.throttle.next_delay(&mut self.rng));
            }
            Some(_) => {
                self.pacing.hold_until = Some(now + self.pacing.backoff.next_delay(&mut self.rng))
            }
            None => {}
        }
        self.pump(now);
    }
}

/// The Txn may have applied: only the fence can tell.
fn unknown_outcome(f: &Failure) -> bool {
    matches!(f, Failure::Unknown { .. } | Failure::Transient { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_grows_per_burst_and_wears_down() {
        let mut p = Pipeline::new();
        let rtt = Duration::from_millis(64);
        let step = Duration::from_micros(500);
        p.on_reorder(rtt);
        assert_eq!(p.gap, step);
        p.on_reorder(rtt);
        assert_eq!(p.gap, step * 2);
        // Never past the round trip, nor past MAX_GAP.
        for _ in 0..400 {
            p.on_reorder(Duration::from_millis(3));
        }
        assert_eq!(p.gap, Duration::from_millis(3));
        for _ in 0..10 {
            p.on_reorder(Duration::from_secs(1));
        }
        assert_eq!(p.gap, MAX_GAP);
        // About 90 applied Txns halve it; it ends at zero.
        for _ in 0..88 {
            p.grow(16);
        }
        let half = MAX_GAP / 2;
        assert!(
            p.gap.abs_diff(half) < Duration::from_micros(100),
            "{:?}",
            p.gap
        );
        for _ in 0..2000 {
            p.grow(16);
        }
        assert_eq!(p.gap, Duration::ZERO);
        assert_eq!(p.depth, 16);
    }

    #[test]
    fn the_gap_settles_where_reorders_cost_what_the_spacing_does() {
        // A burst rate that falls steeply as the gap grows: `r(gap)` per applied Txn. The
        // gap settles near the crossing of `r(gap) * rtt` and `gap`.
        let rtt = Duration::from_millis(50);
        let r_of = |gap: Duration| 2.0 * (-2.0 * gap.as_secs_f64() * 1e3).exp();
        let mut p = Pipeline::new();
        let mut debt = 0.0;
        let mut sum = Duration::ZERO;
        for n in 0..20_000u64 {
            debt += r_of(p.gap);
            while debt >= 1.0 {
                debt -= 1.0;
                p.on_reorder(rtt);
            }
            p.grow(16);
            if n >= 10_000 {
                sum += p.gap;
            }
        }
        let mean = sum / 10_000;
        // Crossing: 2 * exp(-2g) * 50 = g (g in ms) is g ~ 1.85 ms.
        let g = mean.as_secs_f64() * 1e3;
        let lost = r_of(mean) * rtt.as_secs_f64() * 1e3;
        assert!((1.5..2.2).contains(&g), "gap {g} ms");
        assert!(
            (lost / g - 1.0).abs() < 0.5,
            "reorders cost {lost} ms, gap {g} ms"
        );
    }
}
