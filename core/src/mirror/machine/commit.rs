//! The commit pipeline: what goes into the next fenced Txn, and what an outcome means
//! (the chain of Txns in flight is in `pipeline.rs`).

use super::*;

impl Mirror {
    /// Sends target work while the chain has room.
    pub(super) fn pump(&mut self, now: Instant) {
        self.send_resends(now);
        while self.pump_one(now) {}
    }

    /// Sends the next unit of target work if it may go now; true when it was sent.
    fn pump_one(&mut self, now: Instant) -> bool {
        if self.life.stage == Stage::Stopped
            || self.life.shutdown
            || self.pipeline.resolving
            || self.pipeline.broken.is_some()
        {
            return false;
        }
        let replaying = self
            .gen
            .as_ref()
            .is_some_and(|g| g.step == GenStep::Replaying);
        // A reconciliation pass holds the tail so the target stays at source@W + drift.
        if (self.life.stage == Stage::Tail && self.recon.pass.is_none()) || replaying {
            // Popped only when the queue is empty and the chain has room, so batches cut by
            // watch responses that arrived while the chain was full merge into one Txn. A
            // Txn joins others in flight only when the backlog fills half of one (as
            // Nagle's algorithm keeps at most one small segment in flight): small Txns side
            // by side buy no throughput, and etcd reorders concurrent requests, each
            // reorder costing the chain a re-send and half its depth (493 reorders in 1,843
            // Txns of a 20k keys/s tail across 50 ms; docs/design.md, "Pipelined commits").
            let room = self.pipeline.chain.is_empty()
                || (self.chain_has_room() && self.batcher.fills_half_a_txn());
            if self.work.is_empty() && room {
                if let Some(b) = self.batcher.pop() {
                    self.work.push_back(Work::Tail(b));
                }
            }
            if self.tail.watch_paused && self.work.is_empty() && self.batcher.is_empty() {
                self.tail.watch_paused = false;
                let from = self.tail.delivered + 1;
                self.open_watch(now, from);
            }
        }
        let chain_busy = !self.pipeline.chain.is_empty() || !self.pages.slots.is_empty();
        if self.life.paused && !matches!(self.work.front(), Some(Work::Fence(FenceWhy::QuotaProbe)))
        {
            return false;
        }
        if self.pacing.hold_until.is_some() || self.pacing.resume_at.is_some() {
            return false;
        }
        if self.life.stage == Stage::Parked
            && !matches!(self.work.front(), Some(Work::Fence(FenceWhy::QuotaProbe)))
        {
            return false;
        }
        if !self.history.verified {
            // Proven once per (re)connect; nothing of the source is written before.
            self.maybe_prove();
        } else if !self.window_pending() {
            if let Some(sent) = self.pump_page(now) {
                return sent;
            }
        }
        if self.history.refeed && self.history.verified && self.life.stage == Stage::Tail {
            // Fed events no window replayed: drop them and resume from the record once the
            // chain has landed (see `History::refeed`).
            if chain_busy {
                return false;
            }
            self.history.refeed = false;
            self.status.last_error = Some(
                "resuming from the checkpoint: events fed before a source break were not replayed"
                    .into(),
            );
            self.resume_from_record(now);
            return false;
        }
        let Some(front) = self.work.front() else {
            if !chain_busy {
                self.after_queue_drained(now);
                self.maybe_finish_pass(now);
                self.maybe_start_background(now);
            }
            return false;
        };
        if !self.may_chain(front) {
            return false;
        }
        if self
            .tail
            .watch_unverified
            .is_some_and(|(id, ..)| self.tail.watch == Some(id))
            && matches!(front, Work::Tail(_))
        {
            // Events of a watch whose start is not re-verified yet (etcd #18089) wait.
            return false;
        }
        if (!self.history.verified || self.window_pending()) && !matches!(front, Work::Claim) {
            return false;
        }
        let n = front.ops().len() as u64;
        if self.pacing.pacer.enabled() && n > 0 && self.pacing.pacer.ready_at(now) > now {
            return false;
        }
        let work = self.work.pop_front().expect("front() was Some just above");
        self.pacing.pacer.consume(now, n);
        let Some(rec) = self.next_record(&work) else {
            return false;
        };
        self.submit_direct(now, work, rec);
        !self.pipeline.chain.is_empty()
    }

    /// Sends one fenced Txn, unless its record would not decode: a record the next start
    /// cannot read is never written (a server that reported inconsistent revisions is the
    /// only known way to get there), so the agent stops instead.
    pub(super) fn submit_direct(&mut self, now: Instant, work: Work, mut record: Checkpoint) {
        record.seq = self.pipeline.next_seq;
        if let Err(e) = record.check() {
            return self.fail(
                now,
                FailKind::CheckpointInvalid,
                format!(
                    "refusing to write a checkpoint that could not be read back ({e}); the servers reported inconsistent revisions, nothing was written"
                ),
            );
        }
        self.pipeline.next_seq += 1;
        let bytes = record.encode();
        let ck = self.keys.checkpoint_key().to_vec();
        let compare = if matches!(work, Work::Claim) {
            // A claim builds on what the fence read found (or on its absence).
            if self.fence.rev == 0 {
                Compare::revision(ck.clone(), CompareTarget::CreateRevision, 0)
            } else {
                Compare::revision(ck.clone(), CompareTarget::ModRevision, self.fence.rev)
            }
        } else {
            // Exactly the record the previous Txn installs (see `pipeline.rs`).
            Compare::value_is(ck.clone(), self.tip_bytes().to_vec())
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
        self.pipeline.chain.push_back(Link {
            seq: record.seq,
            wire: work.ops().iter().map(TxnOp::wire_size).sum(),
            chained: self.chainable(&work),
            reply: None,
            queued: None,
            resent: false,
        });
        self.pipeline.chain_tip = Some((record.clone(), bytes.clone()));
        self.pipeline.last_send = Some(now);
        let prev = match &txn.compares[0] {
            c if c.target == CompareTarget::Value => c.bytes.clone(),
            _ => Vec::new(),
        };
        self.issue(
            Job::Commit(Box::new(Commit {
                work,
                record,
                bytes,
                prev,
                sent: now,
                resends: 0,
                copy: self.pipeline.copy_seq,
            })),
            Command::Txn(txn),
        );
    }

    /// The record a unit of work installs, derived from the durable one.
    pub(super) fn next_record(&self, work: &Work) -> Option<Checkpoint> {
        let mut rec = self.tip()?.clone();
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
                    // Pages read so far (including any read ahead) bound what is durable.
                    let rmax = self.gen.as_ref().map_or(0, |g| g.rmax);
                    s.rmax = s.rmax.max(rmax);
                    // Unknown stays unknown: an older record's pages are not known.
                    let smax = self.gen.as_ref().and_then(|g| g.smax);
                    s.smax = s.smax.zip(smax).map(|(a, b)| a.max(b));
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
            Work::Sweep { .. } | Work::Repair { .. } => {}
            Work::Fence(FenceWhy::Cutover) => rec.role = Role::Primary,
            Work::Fence(FenceWhy::StartGenesis {
                base, prune, count, ..
            }) => {
                rec.start_scan(*base, *prune, *count);
            }
            Work::Fence(FenceWhy::FinishGenesis { watermark, .. }) => {
                // A split in progress stays recorded: its revision is only partly applied.
                rec.scan = None;
                rec.prune_pending = false;
                rec.watermark = rec.watermark.max(*watermark);
            }
            Work::Fence(FenceWhy::IdleAdvance { rev }) => {
                rec.watermark = rec.watermark.max(*rev);
            }
            Work::Fence(FenceWhy::QuotaProbe) => {}
            Work::Fence(FenceWhy::ScanAdvance) => self.advance_record(&mut rec),
            Work::Fence(FenceWhy::ResidueSwept { .. }) => rec.set_residue_above(None),
        }
        rec.settle_version();
        if self.pages_commute() {
            if let Some(s) = rec.scan.as_mut() {
                // Pages past the durable cursor may have applied, with values newer than
                // any recorded: the record cannot bound them (see `pages.rs`).
                s.smax = None;
            }
        }
        if !matches!(
            work,
            Work::Claim
                | Work::Fence(
                    FenceWhy::QuotaProbe
                        | FenceWhy::StartGenesis { .. }
                        | FenceWhy::ResidueSwept { .. }
                )
        ) {
            // Only writes made under a proven history record a newer anchor, as of the
            // watermark they install.
            rec.anchor = self.anchor_for(&rec);
        }
        Some(rec)
    }

    pub(super) fn on_commit(&mut self, now: Instant, c: Commit, t: TxnReply) {
        if t.succeeded {
            return self.commit_applied(now, c, t.header_revision);
        }
        // Compare failed: the Get in the failure branch tells us who holds the fence.
        let current = t.reads.into_iter().next().flatten();
        self.judge_fence(now, c, current);
    }

    /// Our write is in the target at `rev`.
    /// `rev` is 0 when only a later Txn's success proved this one applied.
    pub(super) fn commit_applied(&mut self, now: Instant, c: Commit, rev: i64) {
        if rev > 0 {
            self.fence.rev = rev;
        }
        self.fence.rev_exact = rev > 0;
        self.pipeline.fence_bytes = c.bytes.clone();
        self.pacing.failures_in_row = 0;
        self.fence.takeovers = 0;
        self.pacing.backoff.reset();
        self.pacing.throttle.reset();
        self.status.backoff = None;
        self.status
            .set_condition(now, C::TargetReachable, true, "Reachable", "");
        self.status
            .set_condition(now, C::TargetThrottled, false, "NotThrottled", "");
        if self.status.condition(C::TargetQuotaExhausted) {
            // Any landed write proves the quota is available again.
            self.status
                .set_condition(now, C::TargetQuotaExhausted, false, "QuotaAvailable", "");
        }
        let ops = c.work.ops().len() as u64;
        self.status.applied_txns += 1;
        self.status.applied_ops += ops;
        self.status.applied_bytes +=
            c.work.ops().iter().map(TxnOp::wire_size).sum::<usize>() as u64;
        let mut rec = c.record;
        set_prune_floor(&mut rec, rev);
        self.status.last_applied_revision = rec.watermark;
        self.history.committed(rec.watermark);
        self.fence.record = Some(rec);
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
                    if scanned {
                        self.scan_complete(now);
                    } else {
                        self.maybe_read_page(now);
                    }
                }
            }
            Work::Tail(b) => {
                if let Some(p) = b.split {
                    if !p.last {
                        self.status.split_revision_count += u64::from(p.done_before == 0);
                    }
                }
                // Under a steady stream the queue may never drain; genesis can still finish
                // once the applied watermark itself passes every page's revision.
                let proven = self.fence.record.as_ref().and_then(|r| {
                    let g = self.gen.as_ref()?;
                    (g.step == GenStep::Replaying
                        && self.work.is_empty()
                        && r.split.is_none()
                        && r.watermark >= g.rmax)
                        .then_some(r.watermark)
                });
                if let Some(w) = proven {
                    self.replay_proven(now, w);
                }
                let live = self.life.stage == Stage::Tail;
                if live {
                    self.tail.consecutive_resyncs = 0;
                    self.status.set_condition(
                        now,
                        C::ResyncLoopDetected,
                        false,
                        "LiveProgress",
                        "",
                    );
                }
                let splitting = self
                    .fence
                    .record
                    .as_ref()
                    .is_some_and(|r| r.split.is_some());
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
                let n = ops.len() as u64;
                if self
                    .gen
                    .as_ref()
                    .is_some_and(|g| g.step == GenStep::Residue)
                {
                    self.status.residue_keys_deleted += n;
                } else {
                    self.status.pruned_keys += n;
                }
            }
            Work::Repair { ops } => {
                self.status.repaired_keys += ops.len() as u64;
            }
            Work::Fence(FenceWhy::Cutover) => self.cutover_done(now),
            Work::Fence(FenceWhy::StartGenesis { seq, .. } | FenceWhy::ResidueSwept { seq }) => {
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
            Work::Fence(FenceWhy::ScanAdvance) => {
                self.pages_recorded();
                let scanned = self
                    .fence
                    .record
                    .as_ref()
                    .and_then(|r| r.scan.as_ref())
                    .is_some_and(|s| s.scanned);
                if scanned {
                    if self
                        .gen
                        .as_ref()
                        .is_some_and(|g| g.step == GenStep::Scanning)
                    {
                        self.scan_complete(now);
                    }
                } else {
                    self.maybe_read_page(now);
                }
            }
            Work::Fence(FenceWhy::QuotaProbe) => {
                self.status.set_condition(
                    now,
                    C::TargetQuotaExhausted,
                    false,
                    "QuotaAvailable",
                    "",
                );
                self.life.stage = Stage::Fencing;
                // A park can outlast a restore of the source: prove the history again.
                self.history.unverify();
                self.resume_from_record(now);
            }
        }
    }

    pub(super) fn on_commit_failed(&mut self, now: Instant, c: Commit, f: Failure) {
        match f {
            Failure::Unknown { .. } | Failure::Transient { .. } => {
                // The write may have applied. Only the fence can tell.
                self.pipeline.resolving = true;
                let cmd = self.fence_read_cmd();
                self.issue(Job::ResolveUnknown(Box::new(c)), cmd);
            }
            Failure::Throttled { message } => {
                self.note_throttled(now, message);
                self.requeue_after_failure(now, c, true);
            }
            // The failed work is dropped: unparking resumes from the durable record.
            Failure::NoSpace => self.park(now),
            Failure::TooLarge { .. } => self.shrink_or_fail(now, c),
            Failure::Permanent { kind, message } => {
                let fk = if kind == PermanentKind::Unsupported {
                    FailKind::Unsupported
                } else {
                    FailKind::Permanent
                };
                self.fail(now, fk, message);
            }
            Failure::Compacted { .. } | Failure::FutureRevision => {
                self.requeue_after_failure(now, c, false);
            }
        }
    }

    pub(super) fn on_resolve(&mut self, now: Instant, c: Commit, r: RangeReply) {
        self.pipeline.resolving = false;
        let current = r.kvs.into_iter().next();
        match &current {
            // Every commit rewrites the fence with a record of a new sequence number, so
            // the fence unchanged means it did not apply.
            Some(kv)
                if kv.value == self.pipeline.fence_bytes || kv.mod_revision == self.fence.rev =>
            {
                self.requeue_after_failure(now, c, false)
            }
            Some(kv) if kv.value == c.bytes => {
                let rev = kv.mod_revision;
                self.commit_applied(now, c, rev);
            }
            None if self.fence.rev == 0 => self.requeue_after_failure(now, c, false),
            _ => self.judge_fence(now, c, current),
        }
    }

    /// The fence is not what we expected: adopt our own lost write, take over from a
    /// lower epoch of our own link, or stop.
    pub(super) fn judge_fence(&mut self, now: Instant, c: Commit, current: Option<KeyValue>) {
        let Some(kv) = current else {
            return self.fail(
                now,
                FailKind::FenceLost,
                "the checkpoint was deleted from the target while this agent held it; restart the agent to re-claim deliberately",
            );
        };
        if kv.value == c.bytes {
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
        if theirs.link != self.fence.link {
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
        if theirs.holder == self.fence.holder && theirs.epoch == c.record.epoch {
            // Our own incarnation wrote this record, in a Txn we had written off: a write
            // that timed out can still be applied by the server after our fence read said
            // it had not (it was queued, not yet proposed). Its data and its record landed
            // together under the fence compare, so the target is consistent at that record,
            // and no later write of ours can have landed over it. Adopt it and carry on from
            // it, as a restart would; everything in flight was built on the older record.
            self.pipeline.fence_bytes = kv.value.clone();
            return self.adopt_own_late_write(now, kv.mod_revision, theirs);
        }
        if theirs.epoch < c.record.epoch && self.fence.takeovers < MAX_TAKEOVERS {
            // A stale writer of our own link at a lower epoch: take over again.
            self.fence.takeovers += 1;
            self.abandon_chain();
            self.fence.rev = kv.mod_revision;
            self.pipeline.next_seq = self.pipeline.next_seq.max(theirs.seq + 1);
            // The claim goes above every epoch this process held.
            self.fence.epoch_floor = self.fence.epoch_floor.max(c.record.epoch + 1);
            self.fence.found = Some(theirs);
            self.fence.record = None;
            self.work.clear();
            self.batcher.clear();
            self.cancel_watch();
            self.gen = None;
            self.life.stage = Stage::Fencing;
            // The stale writer's record carries progress this process never proved (a
            // source restored meanwhile, or a resync this process had decided on, would
            // otherwise be re-asserted by the claim): prove it as at connect, then claim.
            return self.prove_at_connect(now);
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

    /// See [`Self::judge_fence`]: one of our writes landed after we had written it off.
    fn adopt_own_late_write(&mut self, now: Instant, fence_rev: i64, mut rec: Checkpoint) {
        // A late write can be the one that started a pruning genesis (sent, written off
        // by a fence read, re-sent, and then applied after all): its revision is the floor,
        // as if it had landed in time. Left unset, the next record would set a floor above
        // the pages written meanwhile, and the prune would delete them.
        set_prune_floor(&mut rec, fence_rev);
        self.fence.rev = fence_rev;
        self.fence.rev_exact = true;
        self.status.own_late_writes_adopted += 1;
        self.status.last_applied_revision = self.status.last_applied_revision.max(rec.watermark);
        self.fence.record = Some(rec);
        if self.life.stage == Stage::Parked {
            // Still out of quota as far as we know: the next probe decides, now against the
            // adopted record's revision.
            self.park(now);
        } else {
            self.life.stage = Stage::Fencing;
            self.resume_from_record(now);
        }
    }

    /// The target asked us to slow down (`TargetThrottled`).
    pub(super) fn note_throttled(&mut self, now: Instant, message: String) {
        self.status
            .set_condition(now, C::TargetThrottled, true, "TooManyRequests", message);
    }

    pub(super) fn requeue_after_failure(&mut self, now: Instant, c: Commit, throttled: bool) {
        self.pacing.failures_in_row += 1;
        let delay = if throttled {
            self.pacing.throttle.next_delay(&mut self.rng)
        } else {
            self.pacing.backoff.next_delay(&mut self.rng)
        };
        let at = now + delay;
        self.status.backoff = Some(BackoffState {
            kind: if throttled { "throttled" } else { "transient" }.into(),
            attempt: self.pacing.failures_in_row,
            until: at,
        });
        if self.pacing.failures_in_row >= WATCH_CANCEL_AFTER_FAILURES && self.tail.watch.is_some() {
            // The source watch's client buffer is unbounded: stop reading and resume from
            // the durable record once the target is writable again. With the stream closed
            // nothing shows a source restart meanwhile: that is a break, proven again
            // (point read and window) before the next write.
            self.cancel_watch();
            self.history.unverify();
            self.work.clear();
            self.batcher.clear();
            self.pacing.resume_at = Some(at);
            return;
        }
        if matches!(c.work, Work::Claim) {
            // A claim is re-derived from a fresh fence read.
            self.pacing.resume_at = Some(at);
            return;
        }
        if c.copy != self.pipeline.copy_seq {
            // A forced resync replaced the copy this write was for: it would re-assert the
            // promise the resync dropped (see `on_compacted`).
            self.pacing.hold_until = Some(at);
            return;
        }
        self.work.push_front(c.work);
        self.pacing.hold_until = Some(at);
    }

    pub(super) fn shrink_or_fail(&mut self, now: Instant, c: Commit) {
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
            work @ Work::Scan { .. } => match pages::split_scan(&self.keys, work) {
                Some((a, b)) => {
                    self.work.push_front(b);
                    self.work.push_front(a);
                }
                None => too_large(self),
            },
            Work::Sweep { mut ops } => {
                if ops.len() <= 1 {
                    return too_large(self);
                }
                let second = ops.split_off(ops.len() / 2);
                self.work.push_front(Work::Sweep { ops: second });
                self.work.push_front(Work::Sweep { ops });
            }
            Work::Repair { mut ops } => {
                if ops.len() <= 1 {
                    return too_large(self);
                }
                let second = ops.split_off(ops.len() / 2);
                self.work.push_front(Work::Repair { ops: second });
                self.work.push_front(Work::Repair { ops });
            }
            Work::Claim | Work::Fence(_) => too_large(self),
        }
    }

    pub(super) fn park(&mut self, now: Instant) {
        self.pages.clear();
        // The quota probe rewrites the record: it waits for a proof made after the park, so
        // a park that outlasts a restore of the source never re-asserts the old promise.
        self.history.unverify();
        self.recon.pass = None;
        self.life.stage = Stage::Parked;
        self.status.phase = Phase::Degraded;
        self.status.set_condition(
            now,
            C::TargetQuotaExhausted,
            true,
            "NoSpace",
            "the target's database space is exhausted (NOSPACE alarm); compact/defragment the target or raise --quota-backend-bytes, then `etcdctl alarm disarm`",
        );
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.gen = None;
        let at = now + self.cfg.sync.quota_probe_interval;
        self.pacing.quota_probe_at = Some(at);
        self.status.backoff = Some(BackoffState {
            kind: "quota".into(),
            attempt: 0,
            until: at,
        });
    }
}

/// The first record of a pruning genesis to land, at target revision `rev`, sets the prune
/// floor: everything the genesis writes from then on has a higher mod revision, so a key
/// below the floor was not seen (`0` means a later Txn proved it landed, revision unknown;
/// such a record follows one already landed, so the floor is set by then).
fn set_prune_floor(rec: &mut Checkpoint, rev: i64) {
    if rec.prune_pending && rec.prune_floor == 0 {
        rec.prune_floor = rev;
    }
}
