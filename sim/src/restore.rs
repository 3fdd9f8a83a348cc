//! The source restored from an older snapshot ([`crate::schedule::Fault::RestoreSource`]):
//! the histories the source went through and which one each agent's knowledge comes from.
//!
//! A fence record promises `target == rewrite(H@W)` for the history H its watermark came
//! from. After a restore the source holds a new history that shares only the revisions up to
//! the restore point, so the checker judges every target write against the history the
//! writer's knowledge came from:
//! - the source's *epoch* counts restores (0 = the original history); `past[e]` is the whole
//!   history of epoch `e`, frozen just before the restore that ended it;
//! - every source Range reply and watch event (but a failure) an agent receives carries the
//!   epoch of the store that produced it, and an agent's *basis* is the newest epoch it has
//!   received (a process started after a restore begins at the current epoch: all it can
//!   learn is current). A stale replica's answer ([`crate::schedule::FaultyMode`]) counts as
//!   the current history's: it is what the source side says now;
//! - a target Txn is judged against the history of its sender's basis when it was sent. A
//!   commit sent before its agent heard of the restore (in flight, or written from events
//!   received before) is judged against the old history it came from, never re-judged
//!   against the new one; a record written by an agent that has received anything of the
//!   new history must describe the new history, or it is a false promise. A Txn re-sent
//!   unchanged (a chain re-send after a reorder) is the commit first sent, and keeps the
//!   basis it was first sent with.
//!
//! The restart takes the source down for a while (every watch stream breaks, every request
//! fails with Unavailable), as a real restore does; nothing guarantees an agent notices:
//! one that talked to nobody meanwhile learns of it only from what the source says next.

use crate::agent::Agent;
use crate::model::Store;
use std::collections::BTreeMap;
use tidemark_core::etcd::RangeRequest;
use tidemark_core::mirror::{FailKind, StopReason};

/// The message of the failures a source restart causes.
pub const RESTART: &str = "rpc error: code = Unavailable desc = transport is closing";

/// The histories of the source and what the agents know of them.
#[derive(Debug, Default)]
pub struct Restores {
    /// Restores applied: the current history's epoch.
    pub epoch: u32,
    /// `past[e]`: the source as it was when history `e` ended.
    past: Vec<Store>,
    /// The revision each restore went back to: the histories share everything up to it.
    points: Vec<i64>,
    /// Source Range replies in flight since the first restore, and the epoch that answered.
    tags: BTreeMap<(u32, u32, u64), u32>,
}

impl Restores {
    /// The source restarted on a snapshot at revision `at`; `before` is the history it
    /// replaced.
    pub fn begin(&mut self, before: Store, at: i64) {
        self.past.push(before);
        self.points.push(at);
        self.epoch += 1;
    }

    /// Whether a source read after a restore is a history proof pinned at or below the last
    /// restore point, where the old and the new history agree: it cannot tell them apart.
    pub fn blind_proof(&self, r: &RangeRequest) -> bool {
        is_proof_read(r) && r.revision > 0 && self.points.last().is_some_and(|p| r.revision <= *p)
    }

    /// The history a writer with this basis must be judged against.
    pub fn store_for<'a>(&'a self, basis: u32, live: &'a Store) -> &'a Store {
        self.past.get(basis as usize).unwrap_or(live)
    }

    /// The source as it was just before the most recent restore (the stale replica of
    /// [`crate::schedule::FaultyMode::StaleHistoryProof`]).
    pub fn stale(&self) -> Option<&Store> {
        self.past.last()
    }

    /// A source Range reply answered by the current history is on its way to
    /// `(agent, incarnation, id)`.
    pub fn tag_reply(&mut self, key: (u32, u32, u64)) {
        if self.epoch > 0 {
            self.tags.insert(key, self.epoch);
        }
    }

    /// A reply to `(agent, inc, id)` comes back: if the process that asked still runs, what
    /// it tells of the source's history becomes the agent's basis.
    pub fn on_reply(&mut self, agent: &mut Agent, inc: u32, id: u64) {
        let tag = self.tags.remove(&(agent.index, inc, id));
        if let Some(e) = tag.filter(|_| agent.incarnation == inc && agent.alive()) {
            agent.source_epoch = agent.source_epoch.max(e);
        }
    }
}

/// Whether a command is the shape of the core's source-history proof read: one key, limit
/// 1, not a count.
pub fn is_proof_read(r: &RangeRequest) -> bool {
    r.range_end.is_empty() && r.limit == 1 && !r.count_only
}

/// Whether a stop is the core refusing a source whose history it cannot prove.
pub fn is_history_stop(reason: &StopReason) -> bool {
    matches!(
        reason,
        StopReason::Failed {
            kind: FailKind::SourceHistoryMismatch,
            ..
        }
    )
}
