//! The faulty-driver modes ([`FaultyMode`]), a deliberately broken driver that shows the
//! checker has teeth: their state, holding back and reordering commits, rewriting a chained
//! compare and dropping a watch event. Kept apart so the honest paths read plainly; the
//! modes that strip a compare on the wire act in `network.rs`, the replay of
//! ApplyTwiceAfterCrash in `commit.rs`.

use super::World;
use crate::oracle::Fence;
use crate::schedule::FaultyMode;
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{Reply, TxnOp, TxnReply, TxnRequest, WatchEvent};

/// State of a faulty-driver mode.
#[derive(Debug, Default)]
pub(super) struct Faulty {
    /// ReorderCommits: the held commit (agent, inc, id, request, watermark).
    pub(super) held: Option<(u32, u32, u64, TxnRequest, i64)>,
    reordered: bool,
    dropped_event: bool,
    /// Last successful commit per agent (for ApplyTwiceAfterCrash).
    pub(super) last_commit: BTreeMap<u32, (u32, TxnRequest)>,
    /// A crashed agent's commit waiting to be applied again.
    pub(super) replay: Option<(u32, u32, TxnRequest, i64)>,
    pub(super) replayed: bool,
    /// CompareChainStart: per agent, the bytes the first Txn in flight compared and the
    /// ids of its Txns in flight.
    pub(super) chains: BTreeMap<u32, (Vec<u8>, BTreeSet<u64>)>,
}

impl World {
    /// CompareChainStart: a Txn sent behind others of its agent compares what the first
    /// of them compared.
    pub(super) fn compare_chain_start(&mut self, agent: u32, id: u64, t: &mut TxnRequest) {
        let Some(c) = t
            .compares
            .iter_mut()
            .find(|c| c.target == tidemark_core::etcd::CompareTarget::Value)
        else {
            return;
        };
        let (base, ids) = self.faulty.chains.entry(agent).or_default();
        if ids.is_empty() {
            *base = c.bytes.clone();
        } else if c.bytes != *base {
            c.bytes = base.clone();
            self.coverage.mark("faulty.chain_compare_rewritten");
        }
        ids.insert(id);
    }

    /// ReorderCommits: returns a canned reply when the driver interferes with this Txn.
    pub(super) fn faulty_txn(
        &mut self,
        agent: u32,
        inc: u32,
        id: u64,
        t: &TxnRequest,
    ) -> Option<Result<Reply, Failure>> {
        if self.opts.faulty != Some(FaultyMode::ReorderCommits) || self.faulty.reordered {
            return None;
        }
        let fence_key = self.checker.oracle.fence_key.clone();
        let wm = t.success.iter().find_map(|op| match op {
            TxnOp::Put { key, value } if *key == fence_key => Fence::parse(value),
            _ => None,
        })?;
        if !wm.settled() {
            return None;
        }
        match self.faulty.held.take() {
            None => {
                if self.checker.fence.as_ref().is_none_or(|f| !f.settled()) {
                    return None;
                }
                self.faulty.held = Some((agent, inc, id, t.clone(), wm.watermark));
                self.coverage.mark("faulty.held_commit");
                Some(Ok(Reply::Txn(TxnReply {
                    succeeded: true,
                    header_revision: self.target.store.rev() + 1,
                    reads: vec![],
                })))
            }
            Some((ha, hi, _hid, held, hwm)) => {
                if wm.watermark <= hwm || ha != agent {
                    self.faulty.held = Some((ha, hi, _hid, held, hwm));
                    self.release_held();
                    return None;
                }
                self.faulty.reordered = true;
                self.coverage.mark("faulty.reordered");
                let mut t2 = t.clone();
                t2.compares.clear();
                let mut out = Vec::new();
                let basis = self.restores.epoch;
                let r = self.apply_txn(agent, inc, &t2, basis, &mut out);
                let mut t1 = held;
                t1.compares.clear();
                let _ = self.apply_txn(ha, hi, &t1, basis, &mut out);
                self.route(out);
                Some(r)
            }
        }
    }

    pub(super) fn release_held(&mut self) {
        if let Some((a, i, _id, mut t, _)) = self.faulty.held.take() {
            t.compares.clear();
            let mut out = Vec::new();
            let basis = self.restores.epoch;
            let _ = self.apply_txn(a, i, &t, basis, &mut out);
            self.route(out);
        }
    }

    /// DropWatchEvent: drops one event of one response once the tail is settled.
    pub(super) fn faulty_watch(&mut self, event: WatchEvent) -> WatchEvent {
        if self.opts.faulty != Some(FaultyMode::DropWatchEvent) || self.faulty.dropped_event {
            return event;
        }
        match event {
            WatchEvent::Events {
                header_revision,
                mut events,
            } if self
                .checker
                .fence
                .as_ref()
                .is_some_and(|f| f.settled() && f.watermark > 0) =>
            {
                let o = &self.checker.oracle;
                if let Some(i) = events.iter().position(|e| o.rewrite(&e.kv.key).is_some()) {
                    events.remove(i);
                    self.faulty.dropped_event = true;
                    self.coverage.mark("faulty.dropped_event");
                }
                WatchEvent::Events {
                    header_revision,
                    events,
                }
            }
            e => e,
        }
    }
}
