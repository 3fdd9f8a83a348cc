//! Drain and cut-over.
//!
//! The drain target is the source header revision when progress notifications are trusted,
//! and otherwise the highest mod revision in scope (one snapshot of the scan windows, read in
//! bounded pages, so a write under an excluded prefix, which the watermark never covers, is
//! not a target). Once the
//! watermark reaches it, a full pinned diff-and-repair pass verifies the target. A round that had to repair anything is
//! followed by another round, so the cut-over is always backed by a clean pass. Then the fence
//! flips to `Primary`, which makes every later mirror write fail its compare, and the agent
//! stops. A verdict that stops the drain (orphans, drift that does not go away) stands only
//! after a fence read shows the fence still ours: the target is read unpinned, so what an
//! agent that took the fence meanwhile wrote would look like drift.

use super::*;

/// Verification rounds allowed before a drain gives up.
const MAX_VERIFY_ROUNDS: u32 = 3;

/// Whether a drain is asked for, and how far it is.
#[derive(Debug, Clone)]
pub(super) struct Draining {
    pub(super) state: Option<DrainState>,
    pub(super) requested: bool,
    /// Whether a drain that was asked for moves (see `drain_watch.rs`).
    pub(super) watch: Option<DrainWatch>,
}

/// Drain progress.
#[derive(Debug, Clone)]
pub(super) struct DrainState {
    /// None until the target read returns.
    pub(super) target: Option<i64>,
    pub(super) reading: bool,
    /// Untrusted progress: the snapshot of the scan windows being read for their newest
    /// mod revision.
    pub(super) scan: Option<ModScan>,
    /// Untrusted progress: the revision that snapshot was read at and its key count. Every
    /// key in it is at or below the target, so once the watermark reaches the target the
    /// source at the watermark and at the snapshot differ only by deletes, which the count
    /// shows (see [`Mirror::after_drain_verify`]).
    snapshot: Option<(i64, i64)>,
    pub(super) counts: Counts,
    pub(super) leased: u64,
    pub(super) verified_at: Option<Instant>,
    /// A verdict that stops the drain, waiting for the fence read that confirms the target
    /// the verification read was still ours.
    verdict: Option<(FailKind, String)>,
}

impl DrainState {
    /// The drain target is read again from the first window.
    fn forget_target(&mut self) {
        self.target = None;
        self.reading = false;
        self.scan = None;
        self.snapshot = None;
    }
}

impl Mirror {
    /// The pending retries were dropped (see `resume_from_record`): a drain target read
    /// waiting out its backoff was among them. Unless one is in flight, the drain reads
    /// its target again from the first window, or it would wait for that read forever.
    pub(super) fn drain_retries_dropped(&mut self) {
        let in_flight = self
            .cmds
            .inflight
            .values()
            .any(|j| matches!(j, Job::DrainTarget));
        if let Some(d) = self
            .drain
            .state
            .as_mut()
            .filter(|d| d.reading && !in_flight)
        {
            d.forget_target();
        }
    }

    /// Starts background work the steady state allows: drain steps, then periodic passes.
    pub(super) fn maybe_start_background(&mut self, now: Instant) {
        if !self.quiescent() {
            return;
        }
        if self.drain.requested && self.drain.state.is_none() {
            self.drain.state = Some(DrainState {
                target: None,
                reading: false,
                scan: None,
                snapshot: None,
                counts: Counts::default(),
                leased: 0,
                verified_at: None,
                verdict: None,
            });
            self.status.phase = Phase::Draining;
        }
        // A queued or in-flight cut-over keeps the agent from being quiescent; one that was
        // dropped (a park on NOSPACE, a takeover) is redone from a fresh verification.
        if let Some(d) = &self.drain.state {
            if d.verdict.is_some() {
                return;
            }
            match d.target {
                None if !d.reading => self.read_drain_target(),
                None => {}
                Some(t) => {
                    let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
                    if w >= t && self.batcher.is_empty() {
                        self.start_pass(now, PassPurpose::DrainVerify(1));
                    } else if self.peers.progress_trusted && self.tail.watch.is_some() {
                        // Ask for progress often so an idle prefix reaches the target.
                        let soon = now + Duration::from_secs(1);
                        if self.tail.next_progress_request.is_none_or(|t| t > soon) {
                            self.tail.next_progress_request = Some(soon);
                        }
                    }
                }
            }
            return;
        }
        let due = self.recon.next_reconcile.is_some_and(|t| now >= t);
        if self.recon.reconcile_requested || due {
            self.recon.reconcile_requested = false;
            self.start_pass(now, PassPurpose::Periodic);
        }
    }

    pub(super) fn drain_target_cmd(&self) -> Option<Command> {
        if self.peers.progress_trusted {
            return Some(self.r0_cmd());
        }
        let scan = self.drain.state.as_ref()?.scan.as_ref()?;
        scan.cmd(self.cfg.sync.page_key_limit)
    }

    fn read_drain_target(&mut self) {
        let windows = self.keys.source_windows();
        if let Some(d) = &mut self.drain.state {
            d.reading = true;
            d.scan = Some(ModScan::new(windows));
        }
        if let Some(cmd) = self.drain_target_cmd() {
            self.issue(Job::DrainTarget, cmd);
        }
    }

    pub(super) fn on_drain_target(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        let target = if self.peers.progress_trusted {
            r.header_revision
        } else {
            self.status.note_source_read(r.count, r.kvs.len());
            let limit = self.cfg.sync.page_key_limit;
            let Some(scan) = self.drain.state.as_mut().and_then(|d| d.scan.as_mut()) else {
                return;
            };
            if !scan.on_page(r, limit) {
                if let Some(cmd) = self.drain_target_cmd() {
                    self.issue(Job::DrainTarget, cmd);
                }
                return;
            }
            let (at, count, max_mod) = (scan.at, scan.count, scan.max_mod);
            if let Some(d) = &mut self.drain.state {
                d.snapshot = Some((at, count));
            }
            max_mod
        };
        if let Some(d) = &mut self.drain.state {
            d.reading = false;
            d.target = Some(target);
        }
        self.status.drain_target_revision = Some(target);
    }

    /// A verification round pinned at the watermark ended.
    ///
    /// On a source whose progress cannot be trusted the drain target is the snapshot's
    /// newest mod revision, so the watermark can reach it while deletes above it are still
    /// in flight, and an idle range never moves the watermark past a compaction. The drain
    /// snapshot (revision H, key count) closes both: with every key at H at or below the
    /// watermark, the source at H is the source at the watermark less the deletes in
    /// between, so equal counts prove they are the same; and a compacted watermark is
    /// verified at H instead, by a pass that repairs nothing, unless the live key count the
    /// watch keeps proves the source unchanged since the watermark: then H stands for the
    /// watermark and the pass is a full verification round.
    pub(super) fn after_drain_verify(
        &mut self,
        now: Instant,
        round: u32,
        counts: Counts,
        orphans_left: u64,
        pinned: bool,
    ) {
        let drift = counts.missing + counts.divergent + counts.orphan;
        if let Some(w) = &mut self.drain.watch {
            w.unpinned_rounds = if pinned { 0 } else { w.unpinned_rounds + 1 };
        }
        let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
        let snapshot = self.drain.state.as_ref().and_then(|d| d.snapshot);
        if !pinned {
            // The watermark was compacted, so the round compared against the latest source:
            // a delete still in flight looks like an orphan and nothing is proven.
            if let Some((at, keys)) = snapshot.filter(|(at, _)| *at >= w) {
                let purpose = if self.unchanged_since_watermark(at, keys) {
                    PassPurpose::DrainProven(at, round)
                } else {
                    PassPurpose::DrainSnapshot(at)
                };
                return self.start_pass(now, purpose);
            }
            // Read the drain target again and verify once the watermark reaches it.
            if let Some(d) = &mut self.drain.state {
                d.forget_target();
            }
            return;
        }
        if let Some((_, keys)) = snapshot.filter(|(at, _)| *at > w) {
            if drift == 0 && u64::try_from(keys).ok() != Some(counts.source_key_count) {
                // Deletes between the watermark and the snapshot have not been applied
                // yet: wait for the watch, then read the target again.
                if let Some(d) = &mut self.drain.state {
                    d.forget_target();
                }
                return;
            }
        }
        if orphans_left > 0 {
            return self.confirm_verdict(FailKind::DrainOrphans, format!(
                "drain verification found {orphans_left} target keys the source does not have; cut-over needs an exact copy. Set reconciliation.deleteOrphans: true (or remove them) and drain again"
            ));
        }
        if drift == 0 && pinned {
            return self.queue_cutover(now, counts);
        }
        if round >= MAX_VERIFY_ROUNDS {
            return self.confirm_verdict(FailKind::DrainDrift, format!(
                "drain verification still found drift after {round} rounds (last: missing {}, divergent {}, orphan {}); something else writes the target range",
                counts.missing, counts.divergent, counts.orphan
            ));
        }
        // Repairs landed; confirm with a clean round before cutting over.
        self.start_pass(now, PassPurpose::DrainVerify(round + 1));
    }

    /// Whether the source in scope at snapshot revision `at` (holding `keys` keys, none
    /// newer than the watermark: the drain target is their newest mod revision) is the
    /// source at the watermark. Every in-scope event delivered is applied (the batcher is
    /// empty, nothing is being written), so the source at `delivered` is the source at the
    /// watermark; the snapshot differs from it only by deletes, and a live count at
    /// `delivered` equal to the snapshot's rules those out.
    fn unchanged_since_watermark(&self, at: i64, keys: i64) -> bool {
        let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
        let target = self.drain.state.as_ref().and_then(|d| d.target);
        self.tail
            .live
            .is_some_and(|(d, n)| d == self.tail.delivered && d >= w && d <= at && n == keys)
            && target.is_some_and(|t| t <= w)
            && self.batcher.is_empty()
            && !self.committing()
            && self.work.is_empty()
    }

    /// A clean verification round: flip the fence to Primary.
    fn queue_cutover(&mut self, now: Instant, counts: Counts) {
        let leased = self.status.lease_backed_key_count;
        if let Some(d) = &mut self.drain.state {
            d.counts = counts;
            d.leased = leased;
            d.verified_at = Some(now);
        }
        self.work.push_back(Work::Fence(FenceWhy::Cutover));
    }

    /// A verification round at the drain snapshot ended (the watermark was compacted). A
    /// clean round proves the target equals the source there; anything else proves
    /// nothing, so the target is read again.
    pub(super) fn after_drain_snapshot(&mut self, now: Instant, counts: Counts, pinned: bool) {
        let drift = counts.missing + counts.divergent + counts.orphan;
        let clean = pinned && drift == 0;
        // Drift here cannot be repaired until a pass pins the watermark: the round counts
        // as one that could not compare at it.
        if let Some(w) = &mut self.drain.watch {
            w.unpinned_rounds = if clean { 0 } else { w.unpinned_rounds + 1 };
        }
        if clean {
            return self.queue_cutover(now, counts);
        }
        if let Some(d) = &mut self.drain.state {
            d.forget_target();
        }
    }

    /// A verification reads the target unpinned: if another agent took the fence meanwhile,
    /// what it wrote looks like drift of ours. So a verdict that would stop the drain waits
    /// for a fence read; it stands only if the fence is still the record we wrote.
    fn confirm_verdict(&mut self, kind: FailKind, message: String) {
        if let Some(d) = &mut self.drain.state {
            d.verdict = Some((kind, message));
        }
        let cmd = self.fence_read_cmd();
        self.issue(Job::ConfirmVerdict, cmd);
    }

    pub(super) fn on_verdict_fence(&mut self, now: Instant, r: RangeReply) {
        let Some((kind, message)) = self.drain.state.as_mut().and_then(|d| d.verdict.take()) else {
            return;
        };
        // Our holder nonce, not our last mod revision: a write of ours may land meanwhile.
        let fence = r
            .kvs
            .iter()
            .find(|kv| self.keys.is_checkpoint(&kv.key))
            .and_then(|kv| Checkpoint::decode(&kv.value).ok());
        if fence
            .as_ref()
            .is_some_and(|c| c.holder == self.fence.holder)
        {
            return self.fail(now, kind, message);
        }
        let now_holds = fence.map_or_else(
            || "nobody".to_string(),
            |c| format!("epoch {} ({})", c.epoch, c.holder),
        );
        self.fail(
            now,
            FailKind::FenceLost,
            format!(
                "another agent took the fence while the drain verified the target (it is now held by {now_holds}); this agent's verdict does not stand and it writes nothing more"
            ),
        );
    }

    /// The fence is now Primary: publish the cut-over record and stop.
    pub(super) fn cutover_done(&mut self, now: Instant) {
        self.cancel_watch();
        let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
        let d = self.drain.state.take();
        let cutover = Cutover {
            drain_target_revision: d.as_ref().and_then(|d| d.target).unwrap_or(w),
            drained_revision: w,
            verified_time: d.as_ref().and_then(|d| d.verified_at).unwrap_or(now),
            counts: d.as_ref().map(|d| d.counts).unwrap_or_default(),
            leased_key_count: d.as_ref().map_or(0, |d| d.leased),
        };
        self.publish_cutover(now, cutover);
    }

    /// Publishes a cut-over (fresh, or found already done at startup) and stops.
    pub(super) fn publish_cutover(&mut self, now: Instant, cutover: Cutover) {
        self.status.cutover = Some(cutover);
        self.status.role = "Primary".into();
        self.status.phase = Phase::Drained;
        self.status.set_condition(
            now,
            C::CutoverReady,
            true,
            "Drained",
            "the target is verified equal to the source at the drained revision and the fence is Primary",
        );
        self.stop(now, StopReason::Drained);
        self.status.phase = Phase::Drained;
    }
}
