//! Key counts of the source windows at one pinned revision, read in bounded spans.
//!
//! etcd answers a count-only Range by walking every key of the requested range under the
//! index read lock that the source's writers also take (docs/design.md, "Bounded scans").
//! One count of a million-key range stalls every writer of the source for the whole walk,
//! about 170 ms, and a five-million-key range for most of a second. A count here is a
//! chain of count-only reads of `[cursor, bound)`, each walking about one page of keys,
//! with the bound chosen by the same [`Pager`] the scans use. Every read is pinned at one
//! revision, so the sum is the count of one snapshot, and only the windows the mirror
//! copies are counted (excluded prefixes are not in scope).

use super::*;
use crate::mirror::keys::Window;
use crate::mirror::pager::Hints;
use crate::mirror::walk::Walk;

/// What a count is for; each genesis runs at most one count of each kind at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum CountOf {
    /// What a resumed scan has left (progress only).
    Remaining,
    /// The range at the delivered revision, for the untrusted quiet-range probe.
    Live,
}

/// One count in progress.
#[derive(Debug, Clone)]
pub(super) struct KeyCount {
    walk: Walk,
    /// The revision every read is pinned at.
    pub(super) rev: i64,
    /// Keys counted so far.
    pub(super) total: i64,
}

impl KeyCount {
    /// A count of `windows` at `rev`, from `from` on (keys before it are not counted).
    pub(super) fn new(windows: Vec<Window>, rev: i64, from: &[u8], hints: Hints) -> KeyCount {
        KeyCount {
            walk: Walk::new(windows, from, hints),
            rev,
            total: 0,
        }
    }

    /// The next read, or `None` once every window is counted.
    pub(super) fn cmd(&self) -> Option<Command> {
        // No limit: a count-only read returns no keys, and `count` is what it walked.
        self.walk.read(Cluster::Source, self.rev, 0, true, false)
    }

    /// Takes the reply to [`KeyCount::cmd`]; true once every window is counted. `limit`
    /// is the keys one read should walk.
    pub(super) fn on_reply(&mut self, r: &RangeReply, limit: u32) -> bool {
        let Some((w, from, bound)) = self.walk.page().map(|(w, f, b)| (w.clone(), f, b)) else {
            return true;
        };
        self.total += r.count.max(0);
        let next = self
            .walk
            .pager
            .advance_count(&w, &from, &bound, r.count, limit);
        self.walk.step(next)
    }

    /// What the count learned of where the windows' keys begin.
    pub(super) fn hints(&self) -> &Hints {
        self.walk.pager.hints()
    }

    /// Keys the server walked for this count so far.
    pub(super) fn walked(&self) -> u64 {
        self.walk.pager.walked
    }
}

impl Mirror {
    /// Starts a count of the source windows at `rev` for the current genesis, replacing any
    /// count of the same kind, and issues its first read.
    pub(super) fn start_count(&mut self, of: CountOf, rev: i64, from: &[u8]) {
        let windows = self.keys.source_windows();
        let hints = self.density.clone();
        let Some(g) = self.gen.as_mut() else { return };
        let count = KeyCount::new(windows, rev, from, hints);
        let seq = g.seq;
        let next = count.cmd();
        g.counts.insert(of, count);
        match next {
            Some(cmd) => {
                self.issue_bulk_read(Job::Count { seq, of }, cmd);
            }
            // Nothing in scope from `from` on: the count is 0.
            None => self.count_done(of),
        }
    }

    /// The read of a count of kind `of`, again (for a retry).
    pub(super) fn count_cmd_of(&self, of: CountOf) -> Option<Command> {
        self.gen.as_ref()?.counts.get(&of)?.cmd()
    }

    pub(super) fn on_count_reply(&mut self, of: CountOf, r: RangeReply) {
        let limit = self.cfg.sync.page_key_limit;
        let Some(count) = self.gen.as_mut().and_then(|g| g.counts.get_mut(&of)) else {
            return;
        };
        let before = count.walked();
        let done = count.on_reply(&r, limit);
        let walked = count.walked() - before;
        let next = if done { None } else { count.cmd() };
        self.status.note_source_walk(walked);
        match next {
            Some(cmd) => {
                let seq = self.life.gen_seq;
                self.issue_bulk_read(Job::Count { seq, of }, cmd);
            }
            None => self.count_done(of),
        }
    }

    /// A count finished: hand its total to what asked for it.
    fn count_done(&mut self, of: CountOf) {
        let Some(count) = self.gen.as_mut().and_then(|g| g.counts.remove(&of)) else {
            return;
        };
        let total = u64::try_from(count.total).unwrap_or(0);
        self.density.extend(count.hints().clone());
        match of {
            CountOf::Remaining => self.status.initial_sync_total_key_count = total,
            CountOf::Live => {
                let delivered = self.tail.delivered;
                if let Some(g) = self.gen.as_mut().filter(|_| delivered == count.rev) {
                    g.live = Some(count.total);
                }
            }
        }
    }

    /// A count's revision was compacted under it.
    pub(super) fn on_count_compacted(&mut self, now: Instant, of: CountOf) {
        if let Some(g) = self.gen.as_mut() {
            g.counts.remove(&of);
        }
        match of {
            // Progress only.
            CountOf::Remaining => {}
            // The count cannot be had at the delivered revision any more: copy afresh.
            CountOf::Live => {
                self.restart_genesis(now, "the revision to count the range at was compacted")
            }
        }
    }
}
