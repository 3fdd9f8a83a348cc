//! The world's side of source restores (see [`crate::restore`]): the fault itself, the lying
//! stale replica of [`FaultyMode::StaleHistoryProof`], which stops it expects, and the
//! operator's way forward (`initialSync.abandonWatermark`).

use super::{Ev, HealKind, World, MS};
use crate::model::etcd::{fail, store_err};
use crate::oracle::Fence;
use crate::restore::{is_history_stop, is_proof_read, RESTART};
use crate::schedule::{FaultyMode, Side};
use tidemark_core::classify::{Code, Failure};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Cluster, RangeRequest, Reply};
use tidemark_core::mirror::StopReason;

/// Lease expiry granted to leases a restore brings back (etcd renews restored leases).
const RESTORED_LEASE_TTL: u64 = 10_000 * MS;

impl World {
    /// [`crate::schedule::Fault::RestoreSource`]: the source restarts on a snapshot
    /// `back` revisions old and is down for `down_ms`.
    pub(super) fn restore_source(&mut self, back: u32, overtake: bool, down_ms: u64) {
        let old_rev = self.source.store.rev();
        let at = (old_rev - i64::from(back)).max(1);
        if at >= old_rev {
            return self.coverage.mark("restore.noop");
        }
        let before = self.source.store.clone();
        let failure = fail(Code::Unavailable, RESTART);
        let mut out = Vec::new();
        let lease_expiry = self.now + RESTORED_LEASE_TTL;
        self.source.restore(at, lease_expiry, &failure, &mut out);
        self.restores.begin(before, at);
        self.route(out);
        self.coverage.mark("restore.applied");
        let wm = self.checker.fence.as_ref().map_or(0, |f| f.watermark);
        self.coverage.mark(if at < wm {
            "restore.below_watermark"
        } else {
            "restore.at_or_above_watermark"
        });
        // The restart: every request is refused until the source is back.
        let n = &mut self.net[super::ni(Side::Source)];
        n.partitioned_until = n.partitioned_until.max(self.now + down_ms * MS);
        self.push(
            self.now + down_ms * MS,
            Ev::Heal(HealKind::Partition(Side::Source)),
        );
        if overtake {
            // Applications write the new history past the old revision before any agent
            // can read it: a revision the agents saw no longer proves anything.
            let mut out = Vec::new();
            let mut steps = 0;
            while self.source.store.rev() <= old_rev && steps < 20 * i64::from(back) + 1_000 {
                self.workload.step(self.now, &mut self.source, &mut out);
                steps += 1;
            }
            self.route(out);
            if self.source.store.rev() > old_rev {
                self.coverage.mark("restore.overtaken");
            }
        }
    }

    /// Whether the driver lies about this request (the stale replica of
    /// [`FaultyMode::StaleHistoryProof`]).
    pub(super) fn stale_proof_applies(&self, r: &RangeRequest) -> bool {
        self.opts.faulty == Some(FaultyMode::StaleHistoryProof)
            && r.cluster == Cluster::Source
            && is_proof_read(r)
            && self.restores.stale().is_some()
            && !self.source.cond.leader_lost
    }

    /// The stale replica's answer: the keys as they were before the last restore, under
    /// a header that does not give it away (never below the live source's revision).
    pub(super) fn stale_proof(&mut self, r: &RangeRequest) -> Result<Reply, Failure> {
        self.coverage.mark("faulty.stale_history_proof");
        let live = self.source.store.rev();
        let stale = self.restores.stale().unwrap_or(&self.source.store);
        let mut reply = stale.range(r).map_err(store_err)?;
        reply.header_revision = reply.header_revision.max(live);
        Ok(Reply::Range(reply))
    }

    /// After a restore, refusing the source whose history cannot be proven is right.
    pub(super) fn history_stop_expected(&mut self, reason: &StopReason) -> bool {
        if self.restores.epoch == 0 || !is_history_stop(reason) {
            return false;
        }
        self.coverage.mark("restore.history_stop");
        true
    }

    /// The fence watermark the operator reads from the target.
    fn target_watermark(&self) -> Option<i64> {
        let kv = self.target.store.get(&self.checker.oracle.fence_key)?;
        Fence::parse(&kv.value).map(|f| f.watermark)
    }

    /// Whether an agent stopped refusing the source's history after a restore.
    fn history_stopped(&self) -> bool {
        self.restores.epoch > 0
            && self
                .agents
                .iter()
                .any(|a| a.stopped.as_ref().is_some_and(is_history_stop))
    }

    /// The operator's way forward after a history stop, as the stop message says: restart
    /// with `initialSync.abandonWatermark` naming the fence's watermark, copying the current
    /// source afresh (`OverwriteAndPrune`, so the old copy's keys go). Liveness then
    /// expects convergence to the new history.
    pub(super) fn operator_abandons(&mut self) {
        if !self.history_stopped() {
            return;
        }
        let Some(w) = self.target_watermark().filter(|w| *w >= 1) else {
            return;
        };
        let Some(a) = self.agents.first_mut() else {
            return;
        };
        a.config.initial_sync.abandon_watermark = Some(w);
        a.config.initial_sync.mode = InitialSyncMode::OverwriteAndPrune;
        self.abandoned = true;
        self.coverage.mark("restore.abandon_restart");
    }

    /// A history stop the operator cannot abandon by config: the checkpoint has progress
    /// (a scan or split) but watermark 0, and `abandonWatermark` must be at least 1.
    pub(super) fn history_expected_stop(&self) -> Option<String> {
        if !self.history_stopped() || self.target_watermark().is_some_and(|w| w >= 1) {
            return None;
        }
        Some("source history refused after a restore; watermark 0 cannot be abandoned".into())
    }

    /// Counts a convergence reached after the operator abandoned the old history.
    pub(super) fn mark_converged_history(&mut self) {
        if self.abandoned {
            self.coverage.mark("restore.converged_after_abandon");
        }
    }
}
