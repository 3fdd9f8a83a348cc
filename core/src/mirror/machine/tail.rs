//! The live tail: watch handling, revision grouping, compaction.

use super::*;

/// The source watch and what it has delivered, kept apart from the writes it feeds.
#[derive(Debug, Clone)]
pub(super) struct TailState {
    pub(super) watch: Option<u64>,
    pub(super) next_watch_id: u64,
    /// Every event up to this revision has been delivered on the current watch line.
    pub(super) delivered: i64,
    /// The watch stopped feeding for backpressure and must reopen once the queue drains.
    pub(super) watch_paused: bool,
    /// The watch whose events are dropped while it is paused. Its stream stays open only
    /// so that a source break (a restore needs a restart) still fails it and forces a new
    /// proof; a closed stream would leave the agent blind to a restore while it writes
    /// repairs or cuts over (see `mute_watch`).
    pub(super) muted: Option<u64>,
    /// A watch on an etcd #18089 server whose start is not yet re-verified (id, from,
    /// recheck sent); target writes of its events wait for the recheck.
    pub(super) watch_unverified: Option<(u64, i64, bool)>,
    pub(super) next_progress_request: Option<Instant>,
    pub(super) last_idle_advance: Option<Instant>,
    pub(super) lag_since: Option<Instant>,
    pub(super) consecutive_resyncs: u32,
    /// How many in-scope keys the source held at `delivered`, as `(delivered, count)`:
    /// set by a pass pinned at exactly `delivered`, then moved by every event the watch
    /// delivers (a create adds one, a delete takes one). Any other move of `delivered`
    /// forgets it. An untrusted drain uses it to prove the source unchanged since the
    /// watermark when the watermark itself is compacted (see `drain.rs`).
    pub(super) live: Option<(i64, i64)>,
}

impl TailState {
    /// No watch open yet; the first one gets id 1.
    pub(super) fn new() -> TailState {
        TailState {
            watch: None,
            next_watch_id: 1,
            delivered: 0,
            watch_paused: false,
            muted: None,
            watch_unverified: None,
            next_progress_request: None,
            last_idle_advance: None,
            lag_since: None,
            consecutive_resyncs: 0,
            live: None,
        }
    }
}

impl Mirror {
    pub(super) fn start_tail(&mut self, now: Instant) {
        if self.recon.next_reconcile.is_none() {
            // A resumed agent schedules its first pass too, not only one that just synced.
            self.arm_reconcile(now);
        }
        self.life.stage = Stage::Tail;
        self.status.phase = Phase::Syncing;
        self.status
            .set_condition(now, C::InitialSyncComplete, true, "Synced", "");
        // A genesis this process began but never recorded (its start lost to another
        // writer, whose record says the copy is done) would otherwise hold every event.
        self.gen = None;
        let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
        // A split revision in progress is re-delivered from its start; `feed_events`
        // skips the ops already applied.
        self.tail.delivered = w;
        self.tail.live = None;
        self.open_watch(now, w + 1);
    }

    pub(super) fn open_watch(&mut self, now: Instant, from: i64) {
        self.cancel_watch();
        let id = self.tail.next_watch_id;
        self.tail.next_watch_id += 1;
        self.tail.watch = Some(id);
        let from = self.watch_start(id, from - 1);
        let (job, cmd) = self.watch_open_step(id, from);
        self.issue(job, cmd);
        self.tail.next_progress_request = Some(now + self.cfg.sync.progress_interval);
    }

    /// The first step of opening watch `id` at `from`: a guard read pinned at `from - 1`.
    ///
    /// etcd before 3.4.33/3.5.15 drops the tombstone at exactly the compact revision (etcd
    /// #18089), so a watch started there silently misses that delete. A read pinned at
    /// `from - 1` fails with Compacted exactly when `from` is the compact revision (a watch
    /// below it would be refused outright), and that is treated as a compaction.
    pub(super) fn watch_open_step(&self, id: u64, from: i64) -> (Job, Command) {
        if from <= 1 {
            return (Job::WatchOpen(id), self.watch_cmd(id, from));
        }
        // One key, not the range: etcd refuses a compacted revision before it looks any
        // key up, and a range read would walk the whole source range for its count.
        let (key, _) = self.keys.source_range();
        let guard = Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end: Vec::new(),
            revision: from - 1,
            limit: 1,
            count_only: true,
            keys_only: false,
            sort: SortBy::Key,
        });
        (Job::WatchGuard { watch_id: id, from }, guard)
    }

    pub(super) fn watch_cmd(&self, id: u64, from: i64) -> Command {
        let (key, range_end) = self.keys.source_range();
        Command::Watch(WatchRequest {
            watch_id: id,
            key,
            range_end,
            start_revision: from,
        })
    }

    /// The guard read answered.
    pub(super) fn on_watch_guard(&mut self, now: Instant, id: u64, from: i64, ok: bool) {
        if self.tail.watch != Some(id) {
            return;
        }
        if ok {
            let cmd = self.watch_cmd(id, from);
            self.issue(Job::WatchOpen(id), cmd);
            if self.peers.drops_compact_tombstone {
                self.tail.watch_unverified = Some((id, from, false));
            }
        } else {
            self.status.watch_guard_compactions += 1;
            self.tail.watch = None;
            self.on_compacted(now, from);
        }
    }

    /// The recheck answered: release the held writes, or treat the start as compacted.
    pub(super) fn on_watch_recheck(&mut self, now: Instant, id: u64, from: i64, ok: bool) {
        if self.tail.watch != Some(id) {
            return;
        }
        self.tail.watch_unverified = None;
        if !ok {
            self.status.watch_guard_compactions += 1;
            self.cancel_watch();
            self.batcher.clear();
            self.work.retain(|w| !matches!(w, Work::Tail(_)));
            self.on_compacted(now, from);
        }
    }

    /// Moves the live key count from `delivered` to `to` across the events delivered in
    /// between (all of them past `delivered`; none for a trusted progress notification).
    fn count_live(&mut self, events: &[Event], to: i64) {
        let delivered = self.tail.delivered;
        let Some((at, n)) = self.tail.live.filter(|(at, _)| *at == delivered) else {
            self.tail.live = None;
            return;
        };
        let in_scope = events.iter().filter(|e| self.keys.in_scope(&e.kv.key));
        self.tail.live = Some((to.max(at), n + key_count_change(in_scope)));
    }

    pub(super) fn cancel_watch(&mut self) {
        self.tail.muted = None;
        if let Some(id) = self.tail.watch.take() {
            self.issue(Job::Fire, Command::CancelWatch { watch_id: id });
        }
    }

    /// Stops feeding the tail from its watch until the queue drains (backpressure, a paced
    /// pass), without closing the stream. Nothing else tells the agent that the source went
    /// away and came back: a restore from a backup needs a restart, which fails an open
    /// stream (and so forces a proof before the next write), while a closed one sees
    /// nothing, so a pass could read pages of two histories and cut over on them (simulator
    /// seed 798001376). What the muted stream delivers past its window is dropped; the
    /// tail reopens at `delivered + 1` once the queue drains, as after a cancel.
    pub(super) fn mute_watch(&mut self) {
        self.tail.watch_paused = true;
        self.tail.muted = self.tail.watch;
    }

    /// Whether the open watch is muted (its events are dropped, see `mute_watch`).
    pub(super) fn watch_muted(&self) -> bool {
        self.tail.muted.is_some() && self.tail.muted == self.tail.watch
    }

    pub(super) fn on_watch(&mut self, now: Instant, ev: WatchEvent) {
        // Once the watch has read past its start, repeat the guard read: if the start is
        // the compact revision now, the compaction may have raced the catch-up read.
        if let (Some((id, from, false)), Some(w)) = (self.tail.watch_unverified, self.tail.watch) {
            if id == w && matches!(ev, WatchEvent::Events { .. } | WatchEvent::Progress { .. }) {
                self.tail.watch_unverified = Some((id, from, true));
                let (_, cmd) = self.watch_open_step(id, from);
                self.issue(Job::WatchRecheck { watch_id: id, from }, cmd);
            }
        }
        if self.life.stage == Stage::Fencing {
            // Only the replay before the claim watches while fencing (history.rs).
            return self.on_connect_watch(now, ev);
        }
        match ev {
            WatchEvent::Events {
                header_revision,
                events,
            } => {
                self.observe_source_rev(now, header_revision);
                self.watch_revision(header_revision, true);
                self.status
                    .set_condition(now, C::SourceReachable, true, "Reachable", "");
                // A server must send revisions in order and never below 1; anything else
                // would corrupt the split/watermark bookkeeping, so the stream is reopened.
                let ordered = events
                    .windows(2)
                    .all(|p| p[0].kv.mod_revision <= p[1].kv.mod_revision)
                    && events.iter().all(|e| e.kv.mod_revision > 0);
                if !ordered {
                    self.tail.watch = None;
                    return self.watch_failed(
                        now,
                        "the source sent watch events out of revision order".into(),
                    );
                }
                // A new watch first replays the window since the anchor (history.rs).
                let Some(events) = self.replay_window(now, events) else {
                    return;
                };
                if self.watch_muted() {
                    return;
                }
                // Every event up to `delivered` was delivered (or a trusted progress
                // notification said so): one at or below it contradicts the stream, and
                // applying it could record a split behind the watermark.
                if let Some(first) = events
                    .first()
                    .filter(|e| e.kv.mod_revision <= self.tail.delivered)
                {
                    let why = format!(
                        "the source sent a watch event at revision {} after reporting everything up to {} delivered",
                        first.kv.mod_revision, self.tail.delivered
                    );
                    self.tail.watch = None;
                    return self.watch_failed(now, why);
                }
                if let Some(last) = events.last() {
                    let to = self.tail.delivered.max(last.kv.mod_revision);
                    self.count_live(&events, to);
                    self.tail.delivered = to;
                }
                if self.life.stage == Stage::Genesis {
                    let seen: Vec<(EventKind, &KeyValue)> = events
                        .iter()
                        .filter(|e| self.keys.in_scope(&e.kv.key))
                        .map(|e| (e.kind, &e.kv))
                        .collect();
                    self.history.genesis_delivered(&seen);
                }
                if let Some(n) = self.gen.as_mut().and_then(|g| g.live.as_mut()) {
                    // Keys in scope at `delivered`, for the untrusted probe (which counts the
                    // windows, as the base count did). Every event here is past the old
                    // `delivered` (checked above).
                    let keys = &self.keys;
                    *n += key_count_change(events.iter().filter(|e| keys.in_scope(&e.kv.key)));
                }
                let holding = self.gen.as_ref().is_some_and(|g| {
                    matches!(
                        g.step,
                        GenStep::R0
                            | GenStep::Scanning
                            | GenStep::Sweeping
                            | GenStep::Residue
                            | GenStep::Finishing
                    )
                });
                if holding {
                    let bytes: u64 = events
                        .iter()
                        .map(|e| (e.kv.key.len() + e.kv.value.len() + 32) as u64)
                        .sum();
                    let limit = self.cfg.sync.watch_buffer_bytes;
                    let Some(g) = &mut self.gen else { return };
                    g.held_bytes += bytes;
                    g.held.push_back(events);
                    if g.held_bytes > limit {
                        if g.step == GenStep::Scanning {
                            // A long scan of a busy source: stop holding the watch's
                            // events rather than grow or rescan. etcd keeps the history,
                            // and a new watch replays it from the base when the scan is
                            // done. The stream stays open (muted) so that a source
                            // restart still fails it and forces a proof before the next
                            // page is written (see `mute_watch`).
                            g.watch_paused = true;
                            self.status.genesis_watch_pauses += 1;
                            self.tail.muted = self.tail.watch;
                        } else {
                            self.restart_genesis(
                                now,
                                "the replay buffer overflowed sync.watchBufferBytes",
                            );
                        }
                    }
                    return;
                }
                self.feed_events(now, events);
                self.batcher.flush();
                // A stream waits for a proof made after it opened, and its first response
                // (up to a thousand revisions) usually lands before that proof. Pausing it
                // then would throw its events away (nothing unproven may be written, and a
                // new stream must be proven again): the next stream's first response would
                // do the same, forever, re-reading that history from the source each time.
                // So an unproven stream is held until its one point read answers.
                if self.life.stage == Stage::Tail
                    && self.history.verified
                    && self.batcher.queued_bytes() as u64 > self.cfg.sync.watch_buffer_bytes
                {
                    // Backpressure: stop feeding until the target catches up.
                    self.mute_watch();
                }
            }
            WatchEvent::Progress { revision } => {
                self.observe_source_rev(now, revision);
                self.watch_revision(revision, false);
                if !self.peers.progress_trusted {
                    return;
                }
                self.window_progress(now, revision);
                if self.life.stage == Stage::Stopped || self.watch_muted() {
                    return;
                }
                let to = self.tail.delivered.max(revision);
                self.count_live(&[], to);
                self.tail.delivered = to;
                let idle = self.life.stage == Stage::Tail
                    && self.recon.pass.is_none()
                    && self.work.is_empty()
                    && !self.committing()
                    && self.batcher.is_empty();
                let w = self.fence.record.as_ref().map_or(0, |r| r.watermark);
                let split = self
                    .fence
                    .record
                    .as_ref()
                    .is_some_and(|r| r.split.is_some());
                // A drain waits on this advance, so it is not rate-limited then.
                let due = self.drain.state.is_some()
                    || self
                        .tail
                        .last_idle_advance
                        .is_none_or(|t| now >= t + IDLE_ADVANCE_EVERY);
                if idle && !split && revision > w && due && !self.life.paused {
                    self.tail.last_idle_advance = Some(now);
                    self.work
                        .push_back(Work::Fence(FenceWhy::IdleAdvance { rev: revision }));
                }
            }
            WatchEvent::Cancelled {
                compact_revision,
                reason,
            } => {
                self.tail.watch = None;
                if compact_revision > 0 {
                    self.on_compacted(now, compact_revision);
                    return;
                }
                // A cancel without a compact revision carries the server's reason (for
                // example "permission denied"); retrying cannot fix a permanent one.
                match crate::classify::classify(crate::classify::Code::Unknown, &reason) {
                    Failure::Permanent { kind, message } => {
                        let fk = if kind == PermanentKind::Unsupported {
                            FailKind::Unsupported
                        } else {
                            FailKind::Permanent
                        };
                        self.fail(
                            now,
                            fk,
                            format!("the source cancelled the watch: {message}"),
                        );
                    }
                    _ => self.watch_failed(now, format!("watch cancelled by the server: {reason}")),
                }
            }
            WatchEvent::Failed { failure } => {
                self.tail.watch = None;
                match failure {
                    Failure::Compacted { rev } => self.on_compacted(now, rev),
                    Failure::Permanent { kind, message } => {
                        let fk = if kind == PermanentKind::Unsupported {
                            FailKind::Unsupported
                        } else {
                            FailKind::Permanent
                        };
                        self.fail(now, fk, message);
                    }
                    f => {
                        self.status.set_condition(
                            now,
                            C::SourceReachable,
                            false,
                            f.label(),
                            f.to_string(),
                        );
                        self.watch_failed(now, f.to_string());
                    }
                }
            }
        }
    }

    /// Reopens the watch after a backoff, continuing after what was delivered.
    pub(super) fn watch_failed(&mut self, now: Instant, why: String) {
        self.status.last_error = Some(why);
        // A broken stream may come back on another server: prove the history again.
        self.history.unverify();
        self.reopen_watch_later(now, self.tail.delivered);
    }

    /// Opens a new watch after a backoff, past `upto` (or replaying the window before it).
    pub(super) fn reopen_watch_later(&mut self, now: Instant, upto: i64) {
        let at = now + self.pacing.backoff.next_delay(&mut self.rng);
        let id = self.tail.next_watch_id;
        self.tail.next_watch_id += 1;
        self.tail.watch = Some(id);
        let from = self.watch_start(id, upto);
        self.status.backoff = Some(BackoffState {
            kind: "transient".into(),
            attempt: self.pacing.backoff.attempt(),
            until: at,
        });
        self.cmds
            .retry
            .retain(|r| !matches!(r.job, Job::WatchOpen(_) | Job::WatchGuard { .. }));
        let (job, cmd) = self.watch_open_step(id, from);
        self.cmds.retry.push(Retry { at, cmd, job });
    }

    pub(super) fn on_compacted(&mut self, now: Instant, compact_revision: i64) {
        if self.life.stage == Stage::Fencing {
            // Only the replay before the claim watches while fencing.
            if self.history.at_connect {
                self.connect_window_compacted(now, compact_revision);
            }
            return;
        }
        self.recon.pass = None;
        self.status.set_condition(
            now,
            C::Compacted,
            true,
            "Compacted",
            format!("the source compacted past the revision the mirror needed (compact revision {compact_revision})"),
        );
        if self.life.stage == Stage::Genesis {
            self.restart_genesis(now, "the source was compacted past R0 during the scan");
            return;
        }
        self.status.forced_resync_count += 1;
        self.tail.consecutive_resyncs += 1;
        if self.tail.consecutive_resyncs >= self.cfg.sync.resync_loop_threshold {
            self.status.set_condition(
                now,
                C::ResyncLoopDetected,
                true,
                "ResyncLoop",
                format!("{} forced resyncs in a row without live progress; the source compacts faster than the mirror copies — raise the source's compaction retention", self.tail.consecutive_resyncs),
            );
        }
        self.cancel_watch();
        self.batcher.clear();
        self.pipeline.copy_seq += 1;
        // The resync replaces the copy: queued copy work (tail batches, a pass's repairs,
        // an idle advance, a quota probe) would re-assert the promise it drops, with data it
        // may not vouch for; the resync's first write probes the quota instead. An in-flight
        // commit finishes first; if it did not apply, it is not redone (`copy_seq`).
        self.work.retain(|w| matches!(w, Work::Claim));
        self.begin_genesis(now, true);
    }

    pub(super) fn restart_genesis(&mut self, now: Instant, why: &str) {
        self.status.scan_restart_count += 1;
        self.status.last_error = Some(format!("genesis restarted: {why}"));
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.begin_genesis(now, true);
    }

    /// Groups a watch response by revision and feeds the batcher, dropping what the
    /// watermark already covers (etcd #20221) and ops a split already applied.
    pub(super) fn feed_events(&mut self, now: Instant, events: Vec<Event>) {
        let (w, split) = match &self.fence.record {
            Some(r) => (r.watermark, r.split),
            None => (0, None),
        };
        let floor = self
            .fence
            .record
            .as_ref()
            .and_then(|r| r.scan.as_ref())
            .map_or(w, |s| s.base.max(w));
        // The anchor moves with every revision fed (events arrive in revision order).
        let mut i = 0;
        while i < events.len() {
            let rev = events[i].kv.mod_revision;
            let n = events[i..].partition_point(|e| e.kv.mod_revision == rev);
            if rev > floor {
                let in_scope: Vec<(EventKind, &KeyValue)> = events[i..i + n]
                    .iter()
                    .filter(|e| self.keys.in_scope(&e.kv.key))
                    .map(|e| (e.kind, &e.kv))
                    .collect();
                self.history.fed(rev, &in_scope);
            }
            i += n;
        }
        let mut groups: Vec<RevGroup> = Vec::new();
        for e in events {
            let rev = e.kv.mod_revision;
            if rev <= floor {
                continue;
            }
            // Ops on excluded or out-of-scope keys are dropped before anything counts
            // them, so split offsets are stable across a resume.
            let op = self.op_for(&e);
            match groups.last_mut() {
                Some(g) if g.rev == rev => g.ops.extend(op),
                _ => groups.push(RevGroup {
                    rev,
                    skip: 0,
                    ops: op.into_iter().collect(),
                }),
            }
        }
        for mut g in groups {
            if let Some(s) = split {
                if s.rev == g.rev {
                    let done = s.done as usize;
                    g.skip = s.done;
                    g.ops = g.ops.split_off(done.min(g.ops.len()));
                }
            }
            if let Err(o) = self.batcher.push(g) {
                return self.fail(
                    now,
                    FailKind::TooLarge,
                    format!(
                        "source revision {} has {} ops, more than one target Txn holds, and oversizedRevision is Fail",
                        o.rev, o.ops
                    ),
                );
            }
        }
    }

    pub(super) fn op_for(&self, e: &Event) -> Option<TxnOp> {
        let key = self.keys.rewrite(&e.kv.key)?;
        Some(match e.kind {
            EventKind::Put => TxnOp::Put {
                key,
                value: e.kv.value.clone(),
            },
            EventKind::Delete => TxnOp::Delete {
                key,
                range_end: Vec::new(),
            },
        })
    }
}

/// How many keys these consecutive events add to a range: a put of version 1 creates a key,
/// a delete removes one (etcd sends deletes only for keys that exist).
fn key_count_change<'a>(events: impl Iterator<Item = &'a Event>) -> i64 {
    events
        .map(|e| match e.kind {
            EventKind::Put if e.kv.version == 1 => 1,
            EventKind::Put => 0,
            EventKind::Delete => -1,
        })
        .sum()
}
