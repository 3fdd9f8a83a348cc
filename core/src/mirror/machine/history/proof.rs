//! The proof rounds and replay windows: what the machine does with the facts [`History`]
//! keeps (see the parent module for what is proven and why).

use super::*;

impl Mirror {
    /// Notes the floor a source read is issued under (see [`History::floor`]).
    pub(in crate::mirror::machine) fn note_issue(&mut self, id: CommandId, cmd: &Command) {
        if let Command::Range(r) = cmd {
            if r.cluster == Cluster::Source {
                self.history
                    .issued
                    .insert(id, (self.history.floor, r.revision));
            }
        }
    }

    /// Checks a completed source read against the floor it was issued under. Returns false
    /// (and stops the mirror) when the source went back in time.
    pub(in crate::mirror::machine) fn check_source_reply(
        &mut self,
        now: Instant,
        id: CommandId,
        job: &Job,
        result: &Result<Reply, Failure>,
    ) -> bool {
        let Some((floor, pinned)) = self.history.issued.remove(&id) else {
            return true;
        };
        if matches!(result, Err(Failure::FutureRevision))
            && pinned > 0
            && pinned <= floor
            && !matches!(job, Job::ProveHistory { .. })
        {
            // The source refuses a revision it had already reached: it went back in time.
            // (A proof read answers this itself, with the source's revision in the message.)
            let w = self.proof_record().map_or(0, |c| c.watermark);
            let what = HistoryFinding::RefusedReachedRevision {
                refused: pinned,
                reached: floor,
                watermark: w,
            };
            self.history_failed(now, what);
            return false;
        }
        let Ok(Reply::Range(r)) = result else {
            return true;
        };
        if r.header_revision < floor {
            let w = self.proof_record().map_or(0, |c| c.watermark);
            let what = HistoryFinding::AnsweredBelowReached {
                answered: r.header_revision,
                reached: floor,
                watermark: w,
            };
            self.history_failed(now, what);
            return false;
        }
        self.history.floor = self.history.floor.max(r.header_revision);
        true
    }

    /// A watch reported a revision; one below what its stream reported before is suspect
    /// (a lagging member can do it legitimately after a reconnect), so a proof decides.
    pub(in crate::mirror::machine) fn watch_revision(&mut self, rev: i64, header: bool) {
        let backwards = if header {
            rev < self.history.watch_header
        } else {
            rev < self.tail.delivered
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
    pub(in crate::mirror::machine) fn on_watch_established(&mut self, now: Instant, watch_id: u64) {
        if self.tail.watch != Some(watch_id) {
            return;
        }
        if !self.peers.progress_trusted {
            // No notification can close the window this stream replays: it has until the
            // deadline to deliver an event past it.
            if let Some(w) = self.history.window.as_mut().filter(|w| w.watch == watch_id) {
                w.deadline = Some(now + UNTRUSTED_WINDOW_WAIT);
            }
        }
        // The replay before the claim is itself part of the connect proof.
        if self.life.stage != Stage::Fencing {
            self.history.watch_header = 0;
            self.history.unverify();
        }
    }

    /// When an untrusted window gives up waiting for an event past its end.
    pub(in crate::mirror::machine) fn window_deadline(&self) -> Option<Instant> {
        self.history
            .window
            .as_ref()
            .filter(|_| self.window_pending())
            .and_then(|w| w.deadline)
    }

    /// An untrusted window's deadline passed with no event past its end: the source may
    /// hold events in the window that the stream has not delivered, and no notification
    /// can say it does not. The promise is not extended (see docs/design.md, "Source
    /// history").
    pub(in crate::mirror::machine) fn window_timed_out(&mut self, now: Instant) {
        let Some(win) = self.history.window.clone() else {
            return;
        };
        let what = HistoryFinding::WindowUnconfirmed {
            from: win.anchor + 1,
            upto: win.upto,
            found: win.seen,
            applied: win.want,
            why: Unconfirmed::NoProgress {
                waited_seconds: UNTRUSTED_WINDOW_WAIT.as_secs(),
            },
        };
        self.window_unprovable(now, what);
    }

    /// The record a proof is about: the one found at connect, or the durable one.
    fn proof_record(&self) -> Option<&Checkpoint> {
        if self.history.at_connect {
            self.fence.found.as_ref()
        } else {
            self.fence.record.as_ref()
        }
    }

    /// At connect, after the fence read: prove the found record's history, then go on.
    pub(in crate::mirror::machine) fn prove_at_connect(&mut self, now: Instant) {
        match self.fence.found.as_ref().filter(|c| has_progress(c)) {
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
    pub(in crate::mirror::machine) fn maybe_prove(&mut self) {
        let running = matches!(
            self.life.stage,
            Stage::Genesis | Stage::Tail | Stage::Parked
        );
        if running && !self.history.verified && !self.history.proving {
            if let Some(f) = self.fence.record.as_ref().map(record_floor) {
                self.history.reached(f);
            }
            self.issue_proof(true);
        }
    }

    fn issue_proof(&mut self, pinned: bool) {
        if !self.history.proving {
            // A round reads one fact, even if the anchor moves before its answer (a resume,
            // a retry of a failed read).
            self.history.asked = self.proof_anchor();
        }
        self.history.proving = true;
        let job = Job::ProveHistory {
            round: self.history.round,
            pinned,
        };
        let cmd = self.proof_cmd(pinned);
        self.issue(job, cmd);
    }

    /// The fact a proof reads back: the record's anchor at connect; in a running agent the
    /// anchor as of the last break (the newest put fed, at or after the record's).
    fn proof_anchor(&self) -> Option<Anchor> {
        let recorded = self.proof_record().and_then(|c| c.anchor.clone());
        if self.history.at_connect {
            return recorded;
        }
        match (recorded, &self.history.before_break) {
            (Some(a), Some(b)) if supersedes(&a, b) => Some(a),
            (a, b) => b.clone().or(a),
        }
    }

    /// One point read: the anchor key (at its revision when `pinned`), or with no anchor
    /// the first key of the source range, for the header revision alone.
    pub(in crate::mirror::machine) fn proof_cmd(&self, pinned: bool) -> Command {
        let anchor = self.history.asked.clone();
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
    pub(in crate::mirror::machine) fn proof_is_current(&self, round: u64) -> bool {
        round == self.history.round && self.history.proving
    }

    /// The answer to a proof read (its header was already checked against the floor).
    pub(in crate::mirror::machine) fn on_proof(
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
        let anchor = self.history.asked.clone();
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
                let what = HistoryFinding::AnchorNotReached {
                    anchor: anchor.as_ref().map_or(0, |a| a.rev),
                    watermark: w,
                };
                return self.history_failed(now, what);
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
            return self.history_proven(now, "RevisionOnly", msg, None);
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
                None => self.history_proven(now, "Proven", String::new(), None),
                Some(diff) => {
                    let what = HistoryFinding::AnchorDiffers {
                        key,
                        read_at,
                        anchor: a.rev,
                        diff,
                        watermark: w,
                        source: r.header_revision,
                    };
                    self.history_failed(now, what)
                }
            };
        }
        let h = r.header_revision;
        if self.history.future {
            let what = HistoryFinding::SourceBelowAnchor {
                source: h,
                anchor: a.rev,
                watermark: w,
            };
            return self.history_failed(now, what);
        }
        match kv {
            Some(kv) if kv.mod_revision == a.rev => match a.mismatch(Some(kv)) {
                None => self.history_proven(now, "Proven", String::new(), None),
                Some(diff) => {
                    let what = HistoryFinding::AnchorRewritten {
                        key,
                        anchor: a.rev,
                        diff,
                        watermark: w,
                        source: h,
                    };
                    self.history_failed(now, what)
                }
            },
            _ => {
                let what = HistoryFinding::AnchorCompacted {
                    key,
                    anchor: a.rev,
                    compact: self.history.compacted_at,
                    watermark: w,
                    source: h,
                };
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
    fn resync_unprovable(&mut self, now: Instant, source_rev: i64, what: HistoryFinding) {
        let message = format!(
            "{what}. The checkpoint's promise is not extended: the target is resynced from the source at revision {source_rev} (keys the source no longer has are pruned)"
        );
        if self.history.at_connect {
            if let Some(found) = self.fence.found.as_mut() {
                found.start_scan(source_rev, true, None);
            }
            self.history.forget_anchors();
            self.status.forced_resync_count += 1;
            // The claim declares the resync: no window is left to replay.
            self.history.window = None;
            self.history.at_connect = false;
            self.history_proven(now, "AnchorCompacted", message, Some(what));
            return self.after_fence_proven(now);
        }
        self.history_proven(now, "AnchorCompacted", message, Some(what));
        let c = self.history.compacted_at.unwrap_or(0);
        self.on_compacted(now, c);
    }

    /// `finding` is what the condition reports when the history is not proven but the copy
    /// goes on (a resync).
    fn history_proven(
        &mut self,
        now: Instant,
        reason: &str,
        message: String,
        finding: Option<HistoryFinding>,
    ) {
        let unreplayed = self
            .history
            .since_break
            .as_ref()
            .is_some_and(|(n, _, plain)| n > plain);
        if self.life.stage == Stage::Tail && unreplayed && self.tail.watch.is_none() {
            // The point read proves the anchor only. Events fed after it came from a stream
            // that is gone (it broke while paused), and no new watch will replay them
            // before they are written (docs/design.md, "Source history", rule 5).
            self.history.refeed = true;
        }
        self.history.verified = true;
        self.history.since_break = None;
        self.history.proving = false;
        self.status.source_history_proofs += 1;
        // While the resync an unprovable history caused runs, its proofs check the revision
        // only; the condition keeps saying why the copy is being rebuilt.
        let resyncing = self.life.stage == Stage::Genesis
            && reason == "RevisionOnly"
            && self
                .status
                .conditions
                .get(&C::SourceHistoryMismatch)
                .is_some_and(|c| c.reason == "AnchorCompacted");
        if !resyncing {
            self.status
                .set_condition(now, C::SourceHistoryMismatch, false, reason, message);
            self.status.source_history_finding = finding;
        }
        if self.history.at_connect {
            self.replay_before_claim(now);
        }
    }

    /// At connect, after the point read: a found record whose window since the anchor can
    /// be replayed is replayed before the claim, which would otherwise re-assert its
    /// promise; then the claim goes on.
    fn replay_before_claim(&mut self, now: Instant) {
        let replayable = self.fence.found.as_ref().is_some_and(|c| {
            c.scan.is_none() && c.replayable_anchor().is_some_and(|a| a.rev < c.watermark)
        });
        if !replayable {
            self.history.at_connect = false;
            return self.after_fence_proven(now);
        }
        let w = self.fence.found.as_ref().map_or(0, |c| c.watermark);
        self.open_watch(now, w + 1);
        if !self.window_pending() {
            self.history.at_connect = false;
            self.cancel_watch();
            self.after_fence_proven(now);
        }
    }

    /// The connect-time replay watch reported something (stage `Fencing`).
    pub(in crate::mirror::machine) fn on_connect_watch(&mut self, now: Instant, ev: WatchEvent) {
        match ev {
            WatchEvent::Events {
                header_revision,
                events,
            } => {
                self.observe_source_rev(now, header_revision);
                self.watch_revision(header_revision, true);
                if self.replay_window(now, events).is_some() {
                    self.connect_window_closed(now);
                }
            }
            WatchEvent::Progress { revision } => {
                self.watch_revision(revision, false);
                self.window_progress(now, revision);
                if self.history.window.is_none() {
                    self.connect_window_closed(now);
                }
            }
            WatchEvent::Cancelled {
                compact_revision, ..
            } if compact_revision > 0 => self.on_compacted(now, compact_revision),
            WatchEvent::Cancelled { reason, .. } => self.connect_window_retry(now, reason),
            WatchEvent::Failed { failure } => self.connect_window_retry(now, failure.to_string()),
        }
    }

    fn connect_window_closed(&mut self, now: Instant) {
        if self.life.stage != Stage::Fencing || !self.history.at_connect {
            return;
        }
        self.history.at_connect = false;
        self.cancel_watch();
        self.after_fence_proven(now);
    }

    /// The replay watch broke before it passed the window: open it again after a backoff.
    fn connect_window_retry(&mut self, now: Instant, why: String) {
        self.status.last_error = Some(why);
        let w = self.fence.found.as_ref().map_or(0, |c| c.watermark);
        self.reopen_watch_later(now, w);
    }

    /// A replayed window neither proves nor disproves the history: no promise is extended.
    fn window_unprovable(&mut self, now: Instant, what: HistoryFinding) {
        self.cancel_watch();
        self.history.window = None;
        let h = self.history.floor;
        self.resync_unprovable(now, h, what);
    }

    /// The window's start is compacted at connect: nothing proves it, so no promise is
    /// extended (see [`Mirror::resync_unprovable`]).
    pub(in crate::mirror::machine) fn connect_window_compacted(
        &mut self,
        now: Instant,
        compact_revision: i64,
    ) {
        let (anchor, watermark) = self.fence.found.as_ref().map_or((0, 0), |c| {
            (c.anchor.as_ref().map_or(0, |a| a.rev), c.watermark)
        });
        let what = HistoryFinding::WindowCompacted {
            anchor,
            compact: compact_revision,
            watermark,
        };
        self.window_unprovable(now, what);
    }

    /// The proof failed. At connect, a matching `initialSync.abandonWatermark` abandons the
    /// checkpoint; otherwise the mirror stops without writing.
    fn history_failed(&mut self, now: Instant, what: HistoryFinding) {
        let w = self.proof_record().map_or(0, |c| c.watermark);
        // At start only: the window replay runs before the claim too, so a restart after a
        // running agent stopped here reaches this point with the record found.
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
        self.status.source_history_finding = Some(what);
        self.fail(now, FailKind::SourceHistoryMismatch, message);
    }

    /// The operator named this watermark: drop the checkpoint's progress and copy the
    /// current source afresh with the configured initial-sync mode.
    fn abandon_checkpoint(&mut self, now: Instant, what: HistoryFinding) {
        // The replay watch, if it found the mismatch, has done its job.
        self.cancel_watch();
        let Some(found) = self.fence.found.as_mut() else {
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
        self.status.source_history_finding = Some(what);
        // The new history starts from nothing known.
        self.history = History {
            round: self.history.round + 1,
            verified: true,
            ..History::default()
        };
        self.after_fence_proven(now);
    }

    /// The anchor a write records, as of its own watermark: during a scan the newest seen
    /// (the record promises nothing yet), in the tail the anchor as of the watermark. Never
    /// one the record could not carry (newer than a settled watermark).
    pub(in crate::mirror::machine) fn anchor_for(&self, rec: &Checkpoint) -> Option<Anchor> {
        let fits = |a: &Anchor| rec.scan.is_some() || a.rev <= rec.watermark;
        let fresh = if self.life.stage == Stage::Genesis {
            Some(self.history.candidate.clone())
        } else {
            self.history.anchor_at(rec.watermark)
        };
        match fresh {
            Some(Some(a)) if fits(&a) => Some(a),
            Some(None) if self.life.stage != Stage::Genesis => None,
            _ => rec.anchor.clone().filter(fits),
        }
    }

    /// Where a tail watch opening after everything up to `upto` was fed starts: right after
    /// it, or, to prove the window since the anchor, at the anchor's next revision. An event
    /// past the window closes it, and so does a trusted progress notification; on a source
    /// whose notifications cannot be trusted a quiet window times out as unprovable.
    pub(in crate::mirror::machine) fn watch_start(&mut self, watch: u64, upto: i64) -> i64 {
        self.history.window = None;
        if self.life.stage == Stage::Genesis {
            // A genesis promises nothing until it finishes, but what it applies must come
            // from one history: a reopened watch replays everything delivered since the base.
            let Some((base, n, sha)) = self.history.genesis_seen.clone() else {
                return upto + 1;
            };
            if base >= upto {
                return upto + 1;
            }
            self.history.window = Some(Window {
                watch,
                anchor: base,
                upto,
                want: n,
                want_sha: sha,
                plain: 0,
                seen: 0,
                sha: String::new(),
                deadline: None,
            });
            return base + 1;
        }
        let connecting = self.life.stage == Stage::Fencing && self.history.at_connect;
        // On a source whose progress notifications cannot be trusted the window is replayed
        // too: only an event past it closes it, and a quiet one times out as unprovable.
        if !(self.life.stage == Stage::Tail || connecting) {
            return upto + 1;
        }
        let unproven = !connecting && !self.history.verified && self.history.before_break.is_some();
        let anchor = if connecting {
            self.fence
                .found
                .as_ref()
                .and_then(Checkpoint::replayable_anchor)
        } else if unproven {
            // Everything fed since the last proven point is replayed, puts included.
            self.history.before_break.as_ref()
        } else {
            self.history.candidate.as_ref()
        };
        let Some(a) = anchor.filter(|a| !a.scanned && a.rev < upto) else {
            return upto + 1;
        };
        let (want, want_sha, plain) = match (&self.history.since_break, unproven) {
            (Some((n, sha, plain)), true) => (*n, sha.clone(), *plain),
            _ => (a.after, a.after_sha.clone(), a.after),
        };
        let a = a.rev;
        self.history.window = Some(Window {
            watch,
            anchor: a,
            upto,
            want,
            want_sha,
            plain,
            seen: 0,
            sha: String::new(),
            deadline: None,
        });
        a + 1
    }

    /// Whether the current watch is still replaying its window: nothing is written then.
    pub(in crate::mirror::machine) fn window_pending(&self) -> bool {
        self.history
            .window
            .as_ref()
            .is_some_and(|w| self.tail.watch == Some(w.watch))
    }

    /// Takes the part of a watch response inside the replayed window. Returns the events
    /// after it (`None`: nothing is left, or the history failed).
    pub(in crate::mirror::machine) fn replay_window(
        &mut self,
        now: Instant,
        mut events: Vec<Event>,
    ) -> Option<Vec<Event>> {
        if !self.window_pending() {
            return Some(events);
        }
        let mut win = self.history.window.take()?;
        let cut = events.partition_point(|e| e.kv.mod_revision <= win.upto);
        let rest = events.split_off(cut);
        for e in events.iter().filter(|e| self.keys.in_scope(&e.kv.key)) {
            win.sha = if win.seen < win.plain {
                Anchor::chain(&win.sha, e.kv.mod_revision, e.kind, &e.kv.key)
            } else {
                Anchor::chain_value(&win.sha, e.kv.mod_revision, e.kind, &e.kv.key, &e.kv.value)
            };
            win.seen += 1;
            if win.seen > win.want {
                let what = HistoryFinding::WindowExtraEvent {
                    key: self.keys.redact(&e.kv.key),
                    from: win.anchor + 1,
                    kind: e.kind,
                    at: e.kv.mod_revision,
                    applied: win.want,
                    upto: win.upto,
                };
                self.history_failed(now, what);
                return None;
            }
        }
        if rest.is_empty() {
            self.history.window = Some(win);
            return None;
        }
        self.close_window(now, win).then_some(rest)
    }

    /// The watch reported everything up to `rev` delivered (a trusted progress notification).
    pub(in crate::mirror::machine) fn window_progress(&mut self, now: Instant, rev: i64) {
        if self.peers.progress_trusted
            && self.window_pending()
            && self.history.window.as_ref().is_some_and(|w| rev >= w.upto)
        {
            if let Some(win) = self.history.window.take() {
                self.close_window(now, win);
            }
        }
    }

    /// The replay passed the window: it must have held exactly the counted events.
    fn close_window(&mut self, now: Instant, win: Window) -> bool {
        if win.seen == win.want && win.sha == win.want_sha {
            self.status.source_history_windows += 1;
            return true;
        }
        if win.seen < win.want && self.peers.drops_compact_tombstone {
            // This etcd drops a delete at exactly the compact revision from a watch (etcd
            // #18089), so a missing event may be that tombstone: nothing proves the window.
            let what = HistoryFinding::WindowUnconfirmed {
                from: win.anchor + 1,
                upto: win.upto,
                found: win.seen,
                applied: win.want,
                why: Unconfirmed::TombstoneDropped,
            };
            self.window_unprovable(now, what);
            return false;
        }
        let what = HistoryFinding::WindowMismatch {
            from: win.anchor + 1,
            upto: win.upto,
            found: win.seen,
            applied: win.want,
        };
        self.history_failed(now, what);
        false
    }
}
