//! A Txn applied to the target and judged: the checker sees every commit that changed the
//! target with who sent it and the source history it was built from. After each commit
//! the quiet phase checks liveness and ApplyTwiceAfterCrash replays its held commit.

use super::World;
use crate::invariants::Issuer;
use crate::model::etcd::{fail, msg};
use crate::model::WatchOut;
use tidemark_core::classify::{Code, Failure};
use tidemark_core::etcd::{Reply, TxnOp, TxnRequest};

impl World {
    pub(super) fn apply_txn(
        &mut self,
        agent: u32,
        inc: u32,
        t: &TxnRequest,
        basis: u32,
        out: &mut Vec<WatchOut>,
    ) -> Result<Reply, Failure> {
        if self.target.cond.leader_lost {
            return Err(fail(Code::Unavailable, msg::NO_LEADER));
        }
        let before = self.target.store.rev();
        let r = self.target.txn(t, out)?;
        if !r.succeeded {
            self.coverage.mark("model.txn_compare_failed");
        }
        if is_page(t, &self.checker.oracle.fence_key) {
            self.coverage.mark(if r.succeeded {
                "page.applied"
            } else {
                "page.compare_failed"
            });
        }
        if self.target.store.rev() != before {
            let ops = if r.succeeded { &t.success } else { &t.failure };
            let cfg = &self.agents[agent as usize].config;
            let who = Issuer {
                agent,
                incarnation: inc,
                mode: cfg.initial_sync.mode,
                delete_orphans: cfg.reconciliation.delete_orphans,
                epoch: basis,
                abandon: cfg.initial_sync.abandon_watermark,
                holder: self.holders.get(&(agent, inc)).cloned().unwrap_or_default(),
                claim: is_claim(t, &self.checker.oracle.fence_key),
            };
            if basis < self.restores.epoch {
                self.coverage.mark("restore.commit_judged_in_old_history");
            }
            let was_primary = self.checker.primary_at.is_some();
            if r.succeeded {
                self.faulty.last_commit.insert(agent, (inc, t.clone()));
            }
            let source = self.restores.store_for(basis, &self.source.store);
            if let Err(v) = self
                .checker
                .on_commit(self.now, &who, ops, source, &self.target.store)
            {
                self.violate(v);
            }
            self.target_revs.push((self.now, self.target.store.rev()));
            if !was_primary && self.checker.primary_at.is_some() {
                self.flip_since = self.agents[agent as usize].last_pass_start.unwrap_or(0);
                self.coverage.mark("drain.flipped_primary");
            }
            self.after_commit();
        }
        Ok(Reply::Txn(r))
    }

    fn after_commit(&mut self) {
        if self.quiet && self.end.is_none() {
            self.check_liveness();
        }
        // ApplyTwiceAfterCrash: once the restarted process has moved the watermark past the
        // crashed one's last commit, the driver "retries" that commit unfenced.
        if let Some((agent, inc, req, wm)) = self.faulty.replay.clone() {
            let moved = self
                .checker
                .fence
                .as_ref()
                .is_some_and(|f| f.settled() && f.watermark > wm);
            if moved {
                self.faulty.replay = None;
                self.faulty.replayed = true;
                self.coverage.mark("faulty.applied_twice");
                let mut t = req;
                t.compares.clear();
                let mut out = Vec::new();
                let basis = self.restores.epoch;
                let _ = self.apply_txn(agent, inc, &t, basis, &mut out);
                self.route(out);
            }
        }
    }
}

/// Whether a Txn is a claim: it compares the fence key's mod or create revision (what the
/// agent read), not the value of a record it installed before.
fn is_claim(t: &TxnRequest, fence_key: &[u8]) -> bool {
    let on_fence: Vec<_> = t.compares.iter().filter(|c| c.key == fence_key).collect();
    !on_fence.is_empty()
        && on_fence.iter().all(|c| {
            matches!(
                c.target,
                tidemark_core::etcd::CompareTarget::ModRevision
                    | tidemark_core::etcd::CompareTarget::CreateRevision
            )
        })
}

/// Whether a target Txn is a genesis page: it writes data but not the fence.
pub(super) fn is_page(t: &TxnRequest, fence_key: &[u8]) -> bool {
    !t.success.is_empty()
        && !t
            .success
            .iter()
            .any(|op| matches!(op, TxnOp::Put { key, .. } if key.as_slice() == fence_key))
}
