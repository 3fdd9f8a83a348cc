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

use super::*;
use crate::mirror::checkpoint::Anchor;

/// What this process knows about the source's history.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    /// The current proof round; replies to an older round are dropped.
    round: u64,
    /// Proven since the last (re)connect: target writes wait for this.
    pub(super) verified: bool,
    proving: bool,
    /// Proving at connect, before the claim: the outcome decides whether to claim.
    at_connect: bool,
    /// The highest revision the source is known to have reached: read headers, watch
    /// revisions and the checkpoint. A linearizable read issued later may not report less.
    floor: i64,
    /// The floor when each source read still in flight was issued.
    issued: BTreeMap<CommandId, i64>,
    /// The highest header seen on the current watch stream.
    watch_header: i64,
    /// The compact revision that refused the pinned anchor read (0: not reported).
    compacted_at: Option<i64>,
    /// The pinned anchor read was refused as a future revision: the unpinned read that
    /// follows only learns the source's revision for the message.
    future: bool,
    /// The newest in-range put seen: the anchor the next data write records.
    pub(super) candidate: Option<Anchor>,
    /// The anchor's own revision is compacted: the next pinned read is at the watermark,
    /// where the put still holds unless the mirror saw the key deleted.
    at_watermark: bool,
    /// The newest put seen before the last break: a running agent proves against it when
    /// it is newer than the record's anchor, which narrows what a restore can hide.
    before_break: Option<Anchor>,
}

impl History {
    /// Forgets the proof: the next target write waits for a new one.
    pub(super) fn unverify(&mut self) {
        self.round += 1;
        self.verified = false;
        self.proving = false;
        self.compacted_at = None;
        self.future = false;
        self.at_watermark = false;
        self.before_break = self.candidate.clone();
    }

    /// Offers a key-value the source reported; the newest in-range put becomes the next anchor.
    pub(super) fn offer(&mut self, kv: &KeyValue) {
        if self
            .candidate
            .as_ref()
            // `>=`: a later write of the same revision is what the revision holds.
            .is_none_or(|a| kv.mod_revision >= a.rev)
            && kv.mod_revision > 0
        {
            self.candidate = Some(Anchor::of(kv));
        }
    }

    /// The mirror saw `key` deleted at `rev`: if it is the anchor's key, its put no longer
    /// holds after `rev`, and never held at a revision boundary if deleted in its own.
    pub(super) fn deleted(&mut self, key: &[u8], rev: i64) {
        match self.candidate.as_mut().filter(|a| a.key == key) {
            Some(a) if a.rev == rev => self.candidate = None,
            Some(a) => a.gone = true,
            None => {}
        }
    }

    /// A new copy starts: puts seen for the copy it replaces vouch for nothing in it.
    pub(super) fn forget_anchors(&mut self) {
        self.candidate = None;
        self.before_break = None;
    }

    /// The source reached at least `rev` (committed evidence: a watch event or notification).
    pub(super) fn reached(&mut self, rev: i64) {
        self.floor = self.floor.max(rev);
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

impl Mirror {
    /// Notes the floor a source read is issued under (see [`History::floor`]).
    pub(super) fn note_issue(&mut self, id: CommandId, cmd: &Command) {
        if let Command::Range(r) = cmd {
            if r.cluster == Cluster::Source {
                self.history.issued.insert(id, self.history.floor);
            }
        }
    }

    /// Checks a completed source read against the floor it was issued under. Returns false
    /// (and stops the mirror) when the source went back in time.
    pub(super) fn check_source_reply(
        &mut self,
        now: Instant,
        id: CommandId,
        result: &Result<Reply, Failure>,
    ) -> bool {
        let Some(floor) = self.history.issued.remove(&id) else {
            return true;
        };
        let Ok(Reply::Range(r)) = result else {
            return true;
        };
        if r.header_revision < floor {
            let w = self.proof_record().map_or(0, |c| c.watermark);
            let what = format!(
                "the source answered at revision {}, below revision {floor} that it had already reached (checkpoint watermark {w})",
                r.header_revision
            );
            self.history_failed(now, FailKind::SourceHistoryMismatch, what);
            return false;
        }
        self.history.floor = self.history.floor.max(r.header_revision);
        true
    }

    /// A watch reported a revision; one below what its stream reported before is suspect
    /// (a lagging member can do it legitimately after a reconnect), so a proof decides.
    pub(super) fn watch_revision(&mut self, rev: i64, header: bool) {
        let backwards = if header {
            rev < self.history.watch_header
        } else {
            rev < self.delivered
        };
        if backwards {
            self.status.source_history_suspicions += 1;
            self.history.unverify();
        }
        if header {
            self.history.watch_header = self.history.watch_header.max(rev);
        }
        self.history.reached(rev);
    }

    /// A new watch stream was established: events from it wait for a proof made after it.
    pub(super) fn on_watch_established(&mut self, watch_id: u64) {
        if self.watch == Some(watch_id) {
            self.history.watch_header = 0;
            self.history.unverify();
        }
    }

    /// The record a proof is about: the one found at connect, or the durable one.
    fn proof_record(&self) -> Option<&Checkpoint> {
        if self.history.at_connect {
            self.found.as_ref()
        } else {
            self.record.as_ref()
        }
    }

    /// At connect, after the fence read: prove the found record's history, then go on.
    pub(super) fn prove_at_connect(&mut self, now: Instant) {
        match self.found.as_ref().filter(|c| has_progress(c)) {
            Some(c) => {
                self.history.floor = self.history.floor.max(record_floor(c));
                self.history.unverify();
                self.history.at_connect = true;
                self.issue_proof(true);
            }
            None => {
                self.history.verified = true;
                self.after_fence_proven(now);
            }
        }
    }

    /// Issues a proof unless one is under way or the history is proven.
    pub(super) fn maybe_prove(&mut self) {
        let running = matches!(self.stage, Stage::Genesis | Stage::Tail | Stage::Parked);
        if running && !self.history.verified && !self.history.proving {
            if let Some(f) = self.record.as_ref().map(record_floor) {
                self.history.reached(f);
            }
            self.issue_proof(true);
        }
    }

    fn issue_proof(&mut self, pinned: bool) {
        self.history.proving = true;
        let job = Job::ProveHistory {
            round: self.history.round,
            pinned,
        };
        let cmd = self.proof_cmd(pinned);
        self.issue(job, cmd);
    }

    /// The fact a proof reads back: the record's anchor, or in a running agent the newest
    /// put it saw before the break, when that is newer.
    fn proof_anchor(&self) -> Option<Anchor> {
        let recorded = self.proof_record().and_then(|c| c.anchor.clone());
        if self.history.at_connect {
            return recorded;
        }
        match (recorded, &self.history.before_break) {
            (Some(a), Some(b)) if supersedes(b, &a) => Some(b.clone()),
            (None, Some(b)) => Some(b.clone()),
            (a, _) => a,
        }
    }

    /// One point read: the anchor key (at its revision when `pinned`), or with no anchor
    /// the first key of the source range, for the header revision alone.
    pub(super) fn proof_cmd(&self, pinned: bool) -> Command {
        let anchor = self.proof_anchor();
        let w = self.proof_record().map_or(0, |c| c.watermark);
        let (key, revision, keys_only) = match &anchor {
            Some(a) if pinned && self.history.at_watermark => (a.key.clone(), w, false),
            Some(a) => (a.key.clone(), if pinned { a.rev } else { 0 }, false),
            None => (self.keys.source_range().0, 0, true),
        };
        Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end: Vec::new(),
            revision,
            limit: 1,
            count_only: false,
            keys_only,
            sort: SortBy::Key,
        })
    }

    /// Whether a proof job still belongs to the current round.
    pub(super) fn proof_is_current(&self, round: u64) -> bool {
        round == self.history.round && self.history.proving
    }

    /// The answer to a proof read (its header was already checked against the floor).
    pub(super) fn on_proof(
        &mut self,
        now: Instant,
        round: u64,
        pinned: bool,
        result: Result<Reply, Failure>,
    ) {
        if !self.proof_is_current(round) {
            return;
        }
        let Some(rec) = self.proof_record().cloned() else {
            return;
        };
        let w = rec.watermark;
        let anchor = self.proof_anchor();
        let r = match result {
            Ok(Reply::Range(r)) => r,
            Err(Failure::Compacted { rev }) if pinned && anchor.is_some() => {
                self.history.compacted_at = Some(rev);
                let a = anchor.as_ref().map_or(0, |a| a.rev);
                let live = anchor.as_ref().is_some_and(|a| !a.gone);
                if !self.history.at_watermark && live && w > a {
                    // No put to the key followed the anchor's up to the watermark (it would
                    // be the anchor), and no delete did: it must still hold there.
                    self.history.at_watermark = true;
                    return self.issue_proof(true);
                }
                // The key as it is now may still be that put.
                return self.issue_proof(false);
            }
            Err(Failure::FutureRevision) if pinned && anchor.is_some() => {
                // The source never reached the anchor's revision. Read the key as it is
                // now, only to name the source's revision in the message.
                self.history.future = true;
                return self.issue_proof(false);
            }
            Err(Failure::FutureRevision) => {
                let a = anchor.as_ref().map_or(0, |a| a.rev);
                let what = format!(
                    "the source has not reached revision {a}, where this mirror copied the checkpoint's anchor (checkpoint watermark {w})"
                );
                return self.history_failed(now, FailKind::SourceHistoryMismatch, what);
            }
            Err(f) => {
                let job = Job::ProveHistory { round, pinned };
                return self.on_read_failed(now, job, f);
            }
            Ok(other) => {
                let msg = format!("unexpected reply {other:?} to the source-history read");
                return self.fail(now, FailKind::Permanent, msg);
            }
        };
        let Some(a) = &anchor else {
            let msg = format!(
                "the checkpoint has no anchor yet (written by an older build, or nothing in range was copied), so only the revision was checked: source revision {} is not below watermark {w}",
                r.header_revision
            );
            return self.history_proven(now, "RevisionOnly", msg);
        };
        let kv = r.kvs.first();
        let key = self.keys.redact(&a.key);
        if pinned && self.history.at_watermark && kv.is_none() {
            // Absent at the watermark: a delete this mirror did not record (a record from
            // before the delete was seen) fits as well as another history. Only a different
            // put there is proof; otherwise fall back to the key as it is now.
            return self.issue_proof(false);
        }
        if pinned {
            let read_at = if self.history.at_watermark { w } else { a.rev };
            return match a.mismatch(kv) {
                None => self.history_proven(now, "Proven", String::new()),
                Some(diff) => {
                    let what = format!(
                        "at source revision {read_at} the key {key} should hold the put this mirror copied at revision {}, but {diff} (checkpoint watermark {w}, source revision {})",
                        a.rev, r.header_revision
                    );
                    self.history_failed(now, FailKind::SourceHistoryMismatch, what)
                }
            };
        }
        let h = r.header_revision;
        if self.history.future {
            let what = format!(
                "the source is at revision {h}, below revision {} where this mirror copied the checkpoint's anchor (checkpoint watermark {w})",
                a.rev
            );
            return self.history_failed(now, FailKind::SourceHistoryMismatch, what);
        }
        let compacted = match self.history.compacted_at {
            Some(c) if c > 0 => format!("compacted (compact revision {c})"),
            _ => "compacted".to_string(),
        };
        match kv {
            Some(kv) if kv.mod_revision == a.rev => match a.mismatch(Some(kv)) {
                None => self.history_proven(now, "Proven", String::new()),
                Some(diff) => {
                    let what = format!(
                        "the key {key} was last written at source revision {}, as when this mirror copied it, but {diff} (checkpoint watermark {w}, source revision {h})",
                        a.rev
                    );
                    self.history_failed(now, FailKind::SourceHistoryMismatch, what)
                }
            },
            _ => {
                let what = format!(
                    "the checkpoint's anchor at source revision {} is {compacted} and the key {key} changed since, so the source cannot be proven to be the history the target copy came from (checkpoint watermark {w}, source revision {h})",
                    a.rev
                );
                // Nothing proves or disproves the history. Stopping would turn every
                // restart after compaction into an outage; resuming would extend a promise
                // nobody can check. So the checkpoint's promise is dropped, not extended:
                // the copy is rebuilt from the source as it is now (a forced resync, the
                // compaction recovery), and the condition says so.
                self.resync_unprovable(now, h, what)
            }
        }
    }

    /// The history cannot be proven: declare a forced resync instead of resuming. At
    /// connect the claim itself carries the resync (`scan` set, a prune owed), so no
    /// record re-asserts the unproven watermark; a running agent recovers as from a
    /// compaction.
    fn resync_unprovable(&mut self, now: Instant, source_rev: i64, what: String) {
        let message = format!(
            "{what}. The checkpoint's promise is not extended: the target is resynced from the source at revision {source_rev} (keys the source no longer has are pruned)"
        );
        let at_connect = self.history.at_connect;
        if at_connect {
            if let Some(found) = self.found.as_mut() {
                found.scan = Some(Scan {
                    base: source_rev,
                    cursor: Vec::new(),
                    scanned: false,
                    rmax: source_rev,
                    smax: Some(0),
                    base_count: None,
                });
                found.split = None;
                found.prune_pending = true;
                found.prune_floor = 0;
                found.anchor = None;
            }
            self.history.forget_anchors();
            self.status.forced_resync_count += 1;
        }
        self.history_proven(now, "AnchorCompacted", message);
        if !at_connect {
            let c = self.history.compacted_at.unwrap_or(0);
            self.on_compacted(now, c);
        }
    }

    fn history_proven(&mut self, now: Instant, reason: &str, message: String) {
        self.history.verified = true;
        self.history.proving = false;
        self.status.source_history_proofs += 1;
        self.status
            .set_condition(now, C::SourceHistoryMismatch, false, reason, message);
        if std::mem::take(&mut self.history.at_connect) {
            self.after_fence_proven(now);
        }
    }

    /// The proof failed. At connect, a matching `initialSync.abandonWatermark` abandons the
    /// checkpoint; otherwise the mirror stops without writing.
    fn history_failed(&mut self, now: Instant, kind: FailKind, what: String) {
        let w = self.proof_record().map_or(0, |c| c.watermark);
        if self.history.at_connect && self.cfg.initial_sync.abandon_watermark == Some(w) {
            return self.abandon_checkpoint(now, what);
        }
        let message = if w > 0 {
            format!(
                "{what}. Nothing was written: the target keeps its keys and the checkpoint keeps watermark {w}. Either bring back the source this copy came from, or copy the current source afresh by setting initialSync.abandonWatermark: {w} (run --abandon-watermark {w})"
            )
        } else {
            // abandonWatermark names a promise; an unfinished initial copy made none.
            format!(
                "{what}. Nothing was written. The checkpoint records an initial copy that never finished (watermark 0): either bring back the source it was copying, or delete the checkpoint key to copy the current source afresh"
            )
        };
        self.fail(now, kind, message);
    }

    /// The operator named this watermark: drop the checkpoint's progress and copy the
    /// current source afresh with the configured initial-sync mode.
    fn abandon_checkpoint(&mut self, now: Instant, what: String) {
        let Some(found) = self.found.as_mut() else {
            return;
        };
        let w = found.watermark;
        found.watermark = 0;
        found.split = None;
        found.scan = None;
        found.anchor = None;
        found.prune_pending = false;
        found.prune_floor = 0;
        self.status.last_applied_revision = 0;
        self.status.set_condition(
            now,
            C::SourceHistoryMismatch,
            true,
            "Abandoned",
            format!("{what}; initialSync.abandonWatermark {w} names this checkpoint, so it is abandoned and the current source is copied afresh"),
        );
        // The new history starts from nothing known.
        self.history = History {
            round: self.history.round + 1,
            verified: true,
            ..History::default()
        };
        self.after_fence_proven(now);
    }

    /// The anchor a data write records: the newest in-range put seen, when newer.
    pub(super) fn anchor_for(&self, rec: &Checkpoint) -> Option<Anchor> {
        match (&self.history.candidate, &rec.anchor) {
            (Some(c), Some(a)) if supersedes(c, a) => Some(c.clone()),
            (Some(c), None) => Some(c.clone()),
            (_, a) => a.clone(),
        }
    }
}
