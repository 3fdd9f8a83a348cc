//! Genesis pages that commute: the scan's writes need no order among themselves.
//!
//! Pages of one genesis touch disjoint keys, and whatever the target holds of them is
//! overwritten by the watch replay from `scan.base + 1` before any record promises a
//! watermark. So a page Txn does not rewrite the fence: it compares the fence's mod
//! revision with the revision at which our last fence write applied (`Pages::base`) and
//! puts the page's keys. Pages then apply in any order, and etcd's lack of order among
//! concurrent requests costs nothing. Any fence write (ours or anyone's) changes the mod
//! revision, so no page, late or not, applies after one.
//!
//! The durable cursor moves by a fence write of its own (`FenceWhy::ScanAdvance`), sent
//! when every page since the last one is known applied: every `ADVANCE_PAGES` pages,
//! `ADVANCE_BYTES` bytes or `ADVANCE_EVERY`, at the end of the scan, and before any other
//! write. A page whose outcome is unknown is sent again under the same revision until it
//! is known applied (a copy applying twice puts the same values, and cannot apply after
//! the next fence write); the cursor never passes a page that is not.
//!
//! Only a source with trusted progress notifications gets this: the quiet-range proof of
//! an untrusted one needs `scan.smax` to cover every value the target holds, which pages
//! past the durable cursor break (a crash leaves them applied but unrecorded). There the
//! pages stay in the commit chain, with the cursor in each Txn. See docs/design.md,
//! "Pipelined commits".

use super::*;

/// Pages between cursor writes. A cursor write drains the pages in flight and costs about
/// two round trips; at 16 in flight over a 50 ms round trip (about 12 applied pages per
/// round trip on this machine) that is about 2% of the pages' time.
const ADVANCE_PAGES: u32 = 1024;
/// Bytes of page ops between cursor writes (bounds what a crash scans again).
const ADVANCE_BYTES: u64 = 64 << 20;
/// The longest the durable cursor stands still while pages apply.
const ADVANCE_EVERY: Duration = Duration::from_secs(10);

/// Where one page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    /// Waiting to be sent (again).
    Queued,
    InFlight,
    /// Known applied; its ops are dropped (only the cursor after it is kept).
    Applied,
}

/// One page sent since the durable cursor.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) id: u64,
    /// A `Work::Scan`.
    pub(super) work: Work,
    pub(super) state: SlotState,
    /// Bytes of its ops, for the in-flight budget.
    pub(super) wire: usize,
}

/// The pages since the durable cursor, in cursor order.
#[derive(Debug, Clone, Default)]
pub(super) struct Pages {
    pub(super) slots: VecDeque<Slot>,
    next_id: u64,
    /// The fence's mod revision every page in `slots` compares.
    pub(super) base: i64,
    /// Page bytes since the last cursor write, and when the first of them was sent.
    bytes: u64,
    since: Option<Instant>,
}

impl Pages {
    /// Pages not yet known applied (sent, or waiting to be sent again).
    pub(super) fn unresolved(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state != SlotState::Applied)
            .count()
    }

    pub(super) fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::InFlight)
            .count()
    }

    fn wire_in_flight(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.state == SlotState::InFlight)
            .map(|s| s.wire as u64)
            .sum()
    }

    /// Forgets every page: replies to them are ignored from now on. Any of them may still
    /// apply until the next fence write, which the next genesis step always makes first.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.bytes = 0;
        self.since = None;
    }
}

impl Mirror {
    /// Whether genesis pages bypass the chain (see the module docs).
    pub(super) fn pages_commute(&self) -> bool {
        self.peers.progress_trusted
    }

    /// Whether `work` is a page Txn of the order-free kind.
    pub(super) fn is_page(&self, work: &Work) -> bool {
        matches!(work, Work::Scan { .. }) && self.pages_commute()
    }

    /// Whether the pages since the durable cursor must be recorded before anything else is
    /// sent (a bound reached, the scan's end among them, or other work waiting): no new
    /// page goes out, and the cursor write follows once every page is known applied.
    fn advance_due(&self, now: Instant) -> bool {
        let p = &self.pages;
        let Some(last) = p.slots.back() else {
            return false;
        };
        let scanned = matches!(last.work, Work::Scan { scanned: true, .. });
        let other = self.work.front().is_some_and(|w| !self.is_page(w));
        scanned
            || other
            || p.slots.len() >= ADVANCE_PAGES as usize
            || p.bytes >= ADVANCE_BYTES
            || p.since
                .is_some_and(|t| now.saturating_duration_since(t) >= ADVANCE_EVERY)
    }

    /// Whether one more page may be in flight.
    fn page_room(&self) -> bool {
        let budget = self
            .cfg
            .sync
            .txn_flush_bytes
            .saturating_mul(READ_AHEAD_PAGES);
        self.pages.in_flight() < self.depth_limit() && self.pages.wire_in_flight() < budget
    }

    /// The page side of `pump_one`: `Some(sent)` when it decided, `None` to go on with the
    /// ordinary queue (a cursor write, or no page work).
    pub(super) fn pump_page(&mut self, now: Instant) -> Option<bool> {
        if !self.pages_commute() || !self.pipeline.chain.is_empty() {
            // A fence write in flight: pages wait for its revision.
            return None;
        }
        if let Some(i) = self
            .pages
            .slots
            .iter()
            .position(|s| s.state == SlotState::Queued)
        {
            // A page to send again goes before anything new (the cursor waits for it).
            if !self.page_room() || !self.paced(now, &self.pages.slots[i].work) {
                return Some(false);
            }
            self.send_slot(now, i);
            return Some(true);
        }
        if self.advance_due(now) {
            if self.pages.unresolved() > 0 {
                // Drain: the pages in flight resolve first.
                return Some(false);
            }
            if !matches!(self.work.front(), Some(Work::Fence(FenceWhy::ScanAdvance))) {
                self.work.push_front(Work::Fence(FenceWhy::ScanAdvance));
            }
            return None;
        }
        let front = self.work.front()?;
        if !self.is_page(front) {
            // Other work waits for every page to resolve (then for the cursor write).
            return (!self.pages.slots.is_empty()).then_some(false);
        }
        if front.ops().is_empty() {
            // The end-of-scan marker: nothing to write, only the cursor to record.
            if self.pages.slots.is_empty() {
                // No page since the last cursor write: the ordinary cursor write does it.
                return None;
            }
            let work = self.work.pop_front()?;
            self.push_slot(work, SlotState::Applied);
            return Some(true);
        }
        if self.pages.slots.is_empty() {
            if !self.fence.rev_exact || self.fence.rev <= 0 {
                // Pages compare the fence's exact mod revision; write the fence to learn it.
                self.work.push_front(Work::Fence(FenceWhy::ScanAdvance));
                return None;
            }
            self.pages.base = self.fence.rev;
        }
        if !self.page_room() || !self.paced(now, front) {
            return Some(false);
        }
        let work = self.work.pop_front()?;
        let i = self.push_slot(work, SlotState::Queued);
        self.send_slot(now, i);
        Some(true)
    }

    /// Whether the pacer lets `work` go now.
    fn paced(&self, now: Instant, work: &Work) -> bool {
        let n = work.ops().len() as u64;
        !(self.pacing.pacer.enabled() && n > 0 && self.pacing.pacer.ready_at(now) > now)
    }

    fn push_slot(&mut self, work: Work, state: SlotState) -> usize {
        let wire = work.ops().iter().map(TxnOp::wire_size).sum();
        let p = &mut self.pages;
        p.next_id += 1;
        p.bytes += wire as u64;
        p.slots.push_back(Slot {
            id: p.next_id,
            work,
            state,
            wire,
        });
        p.slots.len() - 1
    }

    /// Sends slot `i`: its puts, if the fence still has the revision of our last write.
    fn send_slot(&mut self, now: Instant, i: usize) {
        let ck = self.keys.checkpoint_key().to_vec();
        let base = self.pages.base;
        let Some(slot) = self.pages.slots.get_mut(i) else {
            return;
        };
        slot.state = SlotState::InFlight;
        let id = slot.id;
        let ops = slot.work.ops().to_vec();
        self.pacing.pacer.consume(now, ops.len() as u64);
        self.pages.since.get_or_insert(now);
        let txn = TxnRequest {
            compares: vec![Compare::revision(
                ck.clone(),
                CompareTarget::ModRevision,
                base,
            )],
            success: ops,
            failure: vec![TxnOp::Get { key: ck }],
        };
        self.issue(
            Job::Page {
                slot: id,
                base,
                sent: now,
            },
            Command::Txn(txn),
        );
    }

    /// A page Txn's reply.
    pub(super) fn on_page_reply(
        &mut self,
        now: Instant,
        slot: u64,
        base: i64,
        sent: Instant,
        reply: Result<TxnReply, Failure>,
    ) {
        if self.life.stage == Stage::Stopped || base != self.pages.base {
            return;
        }
        let Some(i) = self.pages.slots.iter().position(|s| s.id == slot) else {
            // A page given up (a takeover, a park, a resume): its fate is the fence's.
            return;
        };
        match reply {
            Ok(t) if t.succeeded => {
                let rtt = now.saturating_duration_since(sent);
                self.pipeline.commit_rtt = Some(match self.pipeline.commit_rtt {
                    None => rtt,
                    Some(old) => (old * 7 + rtt) / 8,
                });
                // Pages commute, so the depth grows by one per page however the tail fared.
                self.pipeline.depth = (self.pipeline.depth + 1).min(self.depth_cap());
                self.page_applied(now, i);
            }
            Ok(t) => {
                // The fence moved: nothing of ours writes it while pages are in flight.
                self.pages.clear();
                let current = t.reads.into_iter().next().flatten();
                self.judge_page_fence(now, current);
            }
            Err(f) => self.page_failed(now, i, f),
        }
    }

    fn page_applied(&mut self, now: Instant, i: usize) {
        let Some(slot) = self.pages.slots.get_mut(i) else {
            return;
        };
        slot.state = SlotState::Applied;
        let (n, leased, seq) = match &mut slot.work {
            Work::Scan {
                ops, leased, seq, ..
            } => (std::mem::take(ops).len() as u64, *leased, *seq),
            _ => (0, 0, 0),
        };
        let wire = slot.wire as u64;
        self.pacing.failures_in_row = 0;
        self.pacing.backoff.reset();
        self.pacing.throttle.reset();
        self.status.backoff = None;
        self.status
            .set_condition(now, C::TargetReachable, true, "Reachable", "");
        self.status
            .set_condition(now, C::TargetThrottled, false, "NotThrottled", "");
        self.status.applied_txns += 1;
        self.status.applied_ops += n;
        self.status.applied_bytes += wire;
        self.status.initial_sync_copied_key_count += n;
        if let Some(g) = self.gen.as_mut().filter(|g| g.seq == seq) {
            g.leased += leased;
        }
        self.maybe_read_page(now);
    }

    /// A page Txn failed without a compare result.
    fn page_failed(&mut self, now: Instant, i: usize, f: Failure) {
        match f {
            Failure::Unknown { .. }
            | Failure::Transient { .. }
            | Failure::Throttled { .. }
            | Failure::Compacted { .. }
            | Failure::FutureRevision => {
                // It may apply later, under the same revision, as may its copy: both put the
                // same values, and neither can apply after the next fence write.
                let throttled = matches!(f, Failure::Throttled { .. });
                if let Failure::Throttled { message } = f {
                    self.note_throttled(now, message);
                }
                if let Some(s) = self.pages.slots.get_mut(i) {
                    s.state = SlotState::Queued;
                }
                self.status.page_resends += 1;
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
                if self.pacing.failures_in_row >= WATCH_CANCEL_AFTER_FAILURES
                    && self.tail.watch.is_some()
                {
                    // As for any write (see `requeue_after_failure`): stop reading and
                    // resume from the durable record once the target is writable again,
                    // and prove the history again first.
                    self.cancel_watch();
                    self.history.unverify();
                    self.work.clear();
                    self.batcher.clear();
                    self.pages.clear();
                    self.pacing.resume_at = Some(at);
                    return;
                }
                self.pacing.hold_until = Some(self.pacing.hold_until.map_or(at, |h| h.max(at)));
            }
            // Everything in flight is dropped: unparking resumes from the durable record.
            Failure::NoSpace => {
                self.pages.clear();
                self.park(now);
            }
            Failure::TooLarge { .. } => {
                let Some(slot) = self.pages.slots.remove(i) else {
                    return;
                };
                match split_scan(&self.keys, slot.work) {
                    Some((a, b)) => {
                        // The halves take its place, so the cursor still moves in order.
                        for (k, work) in [(i, a), (i + 1, b)] {
                            let wire = work.ops().iter().map(TxnOp::wire_size).sum();
                            self.pages.next_id += 1;
                            let id = self.pages.next_id;
                            self.pages.slots.insert(
                                k,
                                Slot {
                                    id,
                                    work,
                                    state: SlotState::Queued,
                                    wire,
                                },
                            );
                        }
                    }
                    None => {
                        self.pages.clear();
                        self.fail(now, FailKind::TooLarge, "a single key does not fit in one target request; raise the target's --max-request-bytes or exclude the key");
                    }
                }
            }
            Failure::Permanent { kind, message } => {
                self.pages.clear();
                let fk = if kind == PermanentKind::Unsupported {
                    FailKind::Unsupported
                } else {
                    FailKind::Permanent
                };
                self.fail(now, fk, message);
            }
        }
    }

    /// A page's compare failed: the fence holds `current`, which we did not write while
    /// pages were in flight. Judged as any failed compare is.
    fn judge_page_fence(&mut self, now: Instant, current: Option<KeyValue>) {
        let Some(record) = self.fence.record.clone() else {
            return self.resume_from_record(now);
        };
        if let Some(kv) = current
            .as_ref()
            .filter(|kv| kv.value == self.pipeline.fence_bytes)
        {
            // Our own record, rewritten at a new revision (by someone who copied it): pages
            // cannot tell what happened to the target meanwhile, so start over from it.
            self.fence.rev = kv.mod_revision;
            self.fence.rev_exact = true;
            self.life.stage = Stage::Fencing;
            return self.resume_from_record(now);
        }
        // The durable record stands for the page: a takeover claims over its epoch, and no
        // bytes of it equal what the fence holds now.
        let c = Commit {
            work: Work::Fence(FenceWhy::ScanAdvance),
            record,
            bytes: self.pipeline.fence_bytes.clone(),
            prev: self.pipeline.fence_bytes.clone(),
            sent: now,
            resends: 0,
            copy: self.pipeline.copy_seq,
        };
        self.judge_fence(now, c, current);
    }

    /// The cursor write applied: the pages it covers are durable.
    pub(super) fn pages_recorded(&mut self) {
        self.status.scan_cursor_writes += 1;
        self.pages.clear();
    }

    /// The record of a cursor write: the cursor after the last page since the previous one.
    pub(super) fn advance_record(&self, rec: &mut Checkpoint) {
        let Some(s) = rec.scan.as_mut() else { return };
        if let Some(Slot {
            work:
                Work::Scan {
                    cursor_after,
                    scanned,
                    ..
                },
            ..
        }) = self.pages.slots.back()
        {
            s.cursor = cursor_after.clone();
            s.scanned = *scanned;
        }
        let rmax = self.gen.as_ref().map_or(0, |g| g.rmax);
        s.rmax = s.rmax.max(rmax);
    }
}

/// Splits a too-large scan chunk in two, each with the cursor after its own last key.
pub(super) fn split_scan(keys: &KeySpace, work: Work) -> Option<(Work, Work)> {
    let Work::Scan {
        seq,
        mut ops,
        cursor_after,
        scanned,
        leased,
        bytes,
    } = work
    else {
        return None;
    };
    if ops.len() <= 1 {
        return None;
    }
    let second = ops.split_off(ops.len() / 2);
    let second_bytes = scan_bytes(&second);
    let mid_cursor = ops
        .last()
        .and_then(|o| keys.unrewrite(o.key()))
        .map(next_key)
        .unwrap_or_default();
    Some((
        Work::Scan {
            seq,
            ops,
            cursor_after: mid_cursor,
            scanned: false,
            leased,
            bytes: bytes.saturating_sub(second_bytes),
        },
        Work::Scan {
            seq,
            ops: second,
            cursor_after,
            scanned,
            leased: 0,
            bytes: second_bytes,
        },
    ))
}
