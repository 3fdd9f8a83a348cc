//! The source-history proof.
//!
//! A checkpoint promises "the target equals the source at the watermark", but only for the
//! history the watermark came from. etcd derives the cluster ID from the member
//! configuration, so a source restored from an older snapshot at the same address keeps
//! its ID while its revisions start over, and resuming from the watermark would mix a
//! second history into the copy. So, before the first write after any connect or
//! reconnect, the mirror proves continuity with one point read:
//! - the source's revision is not below any revision this mirror saw it reach (the
//!   checkpoint's watermark included);
//! - the checkpoint's [`Anchor`] (an in-range put the mirror copied) reads back the same at
//!   its revision. If that revision is compacted, the key read now must still be that put;
//!   if it changed, nothing can prove or disprove the history, so the promise is not
//!   extended: the mirror resyncs from the source as it is now, with the condition saying
//!   so (reason `AnchorCompacted`).
//!
//! A linearizable source read that reports a lower revision than the source had reached
//! before the read was issued stops the mirror too, as does a watch that goes backwards
//! once a proof confirms it. See `docs/design.md` ("Source history").

mod proof;

use super::*;
use crate::mirror::checkpoint::{value_digest, Anchor};
use crate::mirror::finding::{HistoryFinding, Unconfirmed};

/// A window `(anchor, upto]` of the source's history that a new watch replays: it must
/// deliver exactly the in-scope events the mirror counted after the anchor (a restore from a
/// snapshot at or after the anchor, followed by new writes below the watermark, shows here
/// and nowhere else).
#[derive(Debug, Clone)]
pub(super) struct Window {
    pub(super) watch: u64,
    anchor: i64,
    pub(super) upto: i64,
    want: u32,
    want_sha: String,
    /// How many of the wanted events were chained from a record's key-only digest
    /// ([`Anchor::chain`]); the rest were chained with their values
    /// ([`Anchor::chain_value`]).
    plain: u32,
    seen: u32,
    sha: String,
    /// On a source whose progress notifications cannot be trusted, only an event past
    /// `upto` closes the window; if none comes by this time, nothing proves it.
    deadline: Option<Instant>,
}

/// The revision being fed, the anchor before it, and its in-scope events so far.
type Feeding = (i64, Option<Anchor>, Vec<(EventKind, Vec<u8>)>);

/// What this process knows about the source's history.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    /// The current proof round; replies to an older round are dropped.
    round: u64,
    /// Proven since the last (re)connect: target writes wait for this.
    pub(super) verified: bool,
    pub(super) proving: bool,
    /// Proving at connect, before the claim: the outcome decides whether to claim.
    pub(super) at_connect: bool,
    /// The highest revision the source is known to have reached: read headers, watch
    /// revisions and the checkpoint. A linearizable read issued later may not report less.
    floor: i64,
    /// The floor when each source read still in flight was issued, and the revision the
    /// read is pinned at (0: the newest).
    issued: BTreeMap<CommandId, (i64, i64)>,
    /// The highest header seen on the current watch stream.
    watch_header: i64,
    /// The compact revision that refused the pinned anchor read (0: not reported).
    compacted_at: Option<i64>,
    /// The pinned anchor read was refused as a future revision: the unpinned read that
    /// follows only learns the source's revision for the message.
    future: bool,
    /// The anchor as of the newest revision fed: the newest in-scope put (with the events
    /// fed after it counted in `after`), or one from a scan page.
    pub(super) candidate: Option<Anchor>,
    /// `candidate` as of the end of each fed revision not yet committed, so a write records
    /// the anchor as of its own watermark (not one ahead of it).
    marks: VecDeque<(i64, Option<Anchor>)>,
    /// The revision being fed and the anchor before it, so a put deleted in its own
    /// revision (it never held at a revision boundary) falls back to the anchor before.
    feeding: Option<Feeding>,
    /// The window of the source's history a new watch replays before its events count.
    pub(super) window: Option<Window>,
    /// While unproven: every in-scope event fed after `before_break` (puts too), counted
    /// and chained on from its digest (with values, after the anchor's own `after`
    /// events, the third field), so a replay can start at that anchor.
    since_break: Option<(u32, String, u32)>,
    /// The fact the current proof round reads back.
    asked: Option<Anchor>,
    /// During a genesis: its scan base, and the in-scope events its watches delivered after
    /// it (counted and chained), so a reopened genesis watch replays them all.
    pub(super) genesis_seen: Option<(i64, u32, String)>,
    /// The anchor's own revision is compacted: the next pinned read is at the watermark,
    /// where the put still holds unless the mirror saw the key deleted.
    at_watermark: bool,
    /// The newest put seen before the last break: a running agent proves against it when
    /// it is newer than the record's anchor, which narrows what a restore can hide.
    before_break: Option<Anchor>,
    /// A proof passed while events fed after the break waited unreplayed, with no watch
    /// to replay them (paused for backpressure): the tail resumes from the durable record
    /// before anything more is written, so every event it applies came through a window.
    pub(super) refeed: bool,
}

impl History {
    /// Forgets the proof: the next target write waits for a new one.
    pub(super) fn unverify(&mut self) {
        if self.verified {
            // The anchor as of the break. Events fed after it come from a stream not proven
            // yet, so another break before the proof keeps this one, and counts them all.
            self.before_break = self.candidate.clone();
            self.since_break = self
                .candidate
                .as_ref()
                .filter(|a| !a.scanned)
                .map(|a| (a.after, a.after_sha.clone(), a.after));
        }
        self.round += 1;
        self.verified = false;
        self.proving = false;
        self.compacted_at = None;
        self.future = false;
        self.at_watermark = false;
    }

    /// Offers a key-value a scan page read: the newest becomes the anchor, marked as
    /// scanned (the events between it and the scan were not seen).
    pub(super) fn offer_scanned(&mut self, kv: &KeyValue) {
        if kv.mod_revision > 0
            && self
                .candidate
                .as_ref()
                .is_none_or(|a| kv.mod_revision > a.rev)
        {
            self.candidate = Some(Anchor {
                scanned: true,
                ..Anchor::of(kv)
            });
        }
    }

    /// Feeds the in-scope events of revision `rev` in watch order (a revision may arrive in
    /// more than one call). The last put whose key survives the revision becomes the anchor;
    /// otherwise every event is counted after the current one.
    pub(super) fn fed(&mut self, rev: i64, events: &[(EventKind, &KeyValue)]) {
        if events.is_empty() {
            return;
        }
        // Each put's value digest, computed at most once: the chain since a break and the
        // new anchor both need it, and values can be large.
        let mut digests: Vec<Option<String>> = vec![None; events.len()];
        let mut digest_of = |i: usize| -> String {
            digests[i]
                .get_or_insert_with(|| value_digest(&events[i].1.value))
                .clone()
        };
        if let (Some((n, sha, _)), Some(b)) =
            (self.since_break.as_mut(), self.before_break.as_ref())
        {
            if rev > b.rev {
                for (i, (kind, kv)) in events.iter().enumerate() {
                    *n += 1;
                    let value_sha = (*kind == EventKind::Put).then(|| digest_of(i));
                    *sha = Anchor::chain_digested(sha, rev, *kind, &kv.key, value_sha.as_deref());
                }
            }
        }
        if self.feeding.as_ref().is_none_or(|(r, ..)| *r != rev) {
            self.feeding = Some((rev, self.candidate.clone(), Vec::new()));
        }
        let Some((_, before, seen)) = self.feeding.as_mut() else {
            return;
        };
        let start = seen.len();
        seen.extend(events.iter().map(|(k, kv)| (*k, kv.key.clone())));
        let survivor = events
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, (k, _))| *k == EventKind::Put)
            .find(|(i, (_, kv))| {
                !seen[start + i + 1..]
                    .iter()
                    .any(|(k, key)| *k == EventKind::Delete && *key == kv.key)
            })
            .map(|(i, (_, kv))| (i, *kv));
        let mut next = match survivor {
            Some((i, kv)) => Some(Anchor::with_digest(kv, digest_of(i))),
            None if self
                .candidate
                .as_ref()
                .is_some_and(|a| a.rev == rev && !a.scanned) =>
            {
                // The anchor came from this revision, which arrived in parts and has no
                // surviving put now: back to the anchor before it, with the whole revision
                // counted after it.
                let mut a = before.clone();
                if let Some(a) = a.as_mut() {
                    for (k, key) in seen.iter() {
                        count_after(a, rev, *k, key);
                    }
                }
                a
            }
            None => {
                let mut a = self.candidate.clone();
                if let Some(a) = a.as_mut() {
                    for (k, kv) in events {
                        count_after(a, rev, *k, &kv.key);
                    }
                }
                a
            }
        };
        if let Some(a) = next.as_mut().filter(|a| a.rev == rev) {
            // Events after the survivor in this revision: the anchor is read back at `rev`,
            // which holds them too.
            a.after = 0;
            a.after_sha.clear();
        }
        self.candidate = next;
        match self.marks.back_mut() {
            Some((r, a)) if *r == rev => *a = self.candidate.clone(),
            _ => self.marks.push_back((rev, self.candidate.clone())),
        }
    }

    /// The anchor as of watermark `w`: the newest mark at or below it.
    fn anchor_at(&self, w: i64) -> Option<Option<Anchor>> {
        self.marks
            .iter()
            .rev()
            .find(|(r, _)| *r <= w)
            .map(|(_, a)| a.clone())
    }

    /// A write up to `w` landed: marks older than the one that holds at `w` are done.
    pub(super) fn committed(&mut self, w: i64) {
        while self.marks.len() > 1 && self.marks.get(1).is_some_and(|(r, _)| *r <= w) {
            self.marks.pop_front();
        }
    }

    /// The tail resumes from the durable record: its anchor is where counting goes on.
    pub(super) fn resume(&mut self, anchor: Option<Anchor>) {
        self.candidate = anchor;
        self.marks.clear();
        self.feeding = None;
        self.before_break = None;
        self.since_break = None;
        self.refeed = false;
    }

    /// A new copy starts: puts seen for the copy it replaces vouch for nothing in it.
    pub(super) fn forget_anchors(&mut self) {
        self.resume(None);
    }

    /// A genesis watch delivered these events past the scan base (in-scope ones only).
    pub(super) fn genesis_delivered(&mut self, events: &[(EventKind, &KeyValue)]) {
        if let Some((base, n, sha)) = self.genesis_seen.as_mut() {
            for (kind, kv) in events {
                if kv.mod_revision > *base {
                    *n += 1;
                    *sha = Anchor::chain_value(sha, kv.mod_revision, *kind, &kv.key, &kv.value);
                }
            }
        }
    }

    /// The source reached at least `rev` (committed evidence: a watch event or notification).
    pub(super) fn reached(&mut self, rev: i64) {
        self.floor = self.floor.max(rev);
    }
}

/// Counts an in-scope event after anchor `a` (a later put would have become the anchor).
fn count_after(a: &mut Anchor, rev: i64, kind: EventKind, key: &[u8]) {
    if kind == EventKind::Delete && key == a.key.as_slice() {
        a.gone = true;
    }
    // A scanned anchor's window is not replayable, so its events are not counted.
    if !a.scanned {
        a.after += 1;
        a.after_sha = Anchor::chain(&a.after_sha, rev, kind, key);
    }
}

/// Whether fact `new` replaces `old`: a later put, or the same put now known deleted.
fn supersedes(new: &Anchor, old: &Anchor) -> bool {
    new.rev > old.rev || (new.rev == old.rev && new.key == old.key && new.gone && !old.gone)
}

/// The highest source revision a record shows the source had reached.
fn record_floor(rec: &Checkpoint) -> i64 {
    let split = rec.split.map_or(0, |s| s.rev);
    let scan = rec.scan.as_ref().map_or(0, |s| s.rmax.max(s.base));
    rec.watermark.max(split).max(scan)
}

/// Whether a record carries progress a different history would corrupt.
pub(super) fn has_progress(rec: &Checkpoint) -> bool {
    rec.watermark > 0 || rec.split.is_some() || rec.scan.is_some()
}
