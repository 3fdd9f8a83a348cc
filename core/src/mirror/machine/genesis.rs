//! Genesis by the reflector pattern: R0, watch, scan, replay, sweep, finish.

use super::*;

impl Mirror {
    pub(super) fn after_claim(&mut self, now: Instant) {
        self.status.set_condition(
            now,
            C::Available,
            true,
            "FenceHeld",
            "this agent holds the fence",
        );
        self.resume_from_record(now);
    }

    /// Drops every volatile thing and continues from what the target durably holds.
    pub(super) fn resume_from_record(&mut self, now: Instant) {
        // Pages in flight may still apply, under the revision the resumed scan writes at
        // too: same scan, same base, and the replay comes after the next fence write.
        self.pages.clear();
        self.recon.pass = None;
        self.cancel_watch();
        self.work.clear();
        self.batcher.clear();
        self.tail.watch_paused = false;
        self.cmds.retry.clear();
        // A proof read waiting out its backoff was among the retries: unless one is in
        // flight, the round must be asked again, or no write would ever be proven.
        if !self
            .cmds
            .inflight
            .values()
            .any(|j| matches!(j, Job::ProveHistory { .. }))
        {
            self.history.proving = false;
        }
        self.drain_retries_dropped();
        let Some(rec) = self.fence.record.clone() else {
            // Never claimed (a failed claim): start over from reading the fence.
            self.history.resume(None);
            self.life.stage = Stage::Fencing;
            let cmd = self.fence_read_cmd();
            self.issue(Job::ReadFence, cmd);
            return;
        };
        if self.life.stage == Stage::Parked {
            // Still parked: the quota probe decides.
            return;
        }
        // Counting the events after the anchor goes on from what the target holds.
        self.history.resume(rec.anchor.clone());
        if let Some(scan) = rec.scan.clone() {
            self.start_genesis_from(now, scan, rec.prune_pending);
        } else if rec.watermark == 0 && rec.split.is_none() {
            self.begin_genesis(now, rec.prune_pending);
        } else if rec.prune_pending {
            // A prune owed outside a scan can only come from an older record: redo genesis.
            self.begin_genesis(now, true);
        } else {
            self.start_tail(now);
        }
    }

    pub(super) fn new_gen(&mut self, step: GenStep, prune: bool) -> Genesis {
        self.life.gen_seq += 1;
        Genesis {
            seq: self.life.gen_seq,
            final_w: 0,
            step,
            prune,
            rmax: 0,
            smax: None,
            live: None,
            window: 0,
            // Start small (values may be large) and double while pages stay under budget.
            page_limit: self.cfg.sync.page_key_limit.min(1000),
            read_cursor: Vec::new(),
            reading: false,
            read_done: false,
            held: VecDeque::new(),
            held_bytes: 0,
            watch_paused: false,
            scan_pager: Pager::default(),
            sweep_cursor: Vec::new(),
            sweep_window: 0,
            sweep_pager: Pager::default(),
            stalled_since: None,
            probe_at: None,
            probe: None,
            leased: 0,
            counts: BTreeMap::new(),
            progress_counted: false,
        }
    }

    /// A new genesis: read R0, then record `scan = {base: R0}` in the fence.
    pub(super) fn begin_genesis(&mut self, now: Instant, prune: bool) {
        // Pages of an earlier attempt cannot apply after the start record below.
        self.pages.clear();
        self.life.stage = Stage::Genesis;
        self.status.phase = Phase::InitialSync;
        self.status
            .set_condition(now, C::InitialSyncComplete, false, "Scanning", "");
        let g = self.new_gen(GenStep::R0, prune);
        self.gen = Some(g);
        self.history.forget_anchors();
        let cmd = self.r0_cmd();
        self.issue(Job::ReadR0(self.life.gen_seq), cmd);
    }

    /// R0: one key's read, for the source's current revision alone. A count of the range
    /// would walk every key under the source's index lock (see `count`).
    pub(super) fn r0_cmd(&self) -> Command {
        let (key, _) = self.keys.source_range();
        Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end: Vec::new(),
            revision: 0,
            limit: 1,
            count_only: true,
            keys_only: false,
            sort: SortBy::Key,
        })
    }

    pub(super) fn on_r0(&mut self, now: Instant, r: RangeReply) {
        if r.header_revision < 1 {
            // Not a revision any etcd serves; never record it as a scan base.
            let cmd = self.r0_cmd();
            self.status.last_error = Some(format!(
                "source reported header revision {}",
                r.header_revision
            ));
            let seq = self.life.gen_seq;
            return self.retry_later(now, Job::ReadR0(seq), cmd, false);
        }
        self.observe_source_rev(now, r.header_revision);
        self.status.initial_sync_total_key_count = 0;
        self.status.initial_sync_copied_key_count = 0;
        let Some(g) = &mut self.gen else { return };
        g.step = GenStep::Scanning;
        // No count at the base: the scan's first page finds where the keys begin, and the
        // progress count starts after it (see `count`). An untrusted source's probe counts
        // the range itself when it needs to.
        let why = FenceWhy::StartGenesis {
            seq: g.seq,
            base: r.header_revision,
            prune: g.prune,
            count: None,
        };
        self.work.push_back(Work::Fence(why));
    }

    /// Genesis resumed from a record whose scan is in progress.
    pub(super) fn start_genesis_from(&mut self, now: Instant, scan: Scan, prune: bool) {
        self.life.stage = Stage::Genesis;
        self.status.phase = Phase::InitialSync;
        self.status
            .set_condition(now, C::InitialSyncComplete, false, "Scanning", "");
        let g = self.new_gen(GenStep::Scanning, prune);
        self.gen = Some(g);
        if let Some(g) = &mut self.gen {
            g.progress_counted = true;
        }
        if !scan.scanned {
            // Progress for a resumed scan: what is left from the durable cursor, in the
            // snapshot the scan reads.
            self.status.initial_sync_copied_key_count = 0;
            self.start_count(CountOf::Remaining, scan.base, &scan.cursor);
            if scan.residue_above.is_some() {
                return self.begin_residue_sweep(now, &scan.cursor);
            }
        }
        self.begin_scan(now);
    }

    /// A claim resumed this scan over pages an earlier attempt may have left past the
    /// durable cursor (`scan.residue_above`): delete them before the scan reads, then clear
    /// the mark. The resumed scan puts again every key the source still has there; one it
    /// no longer has (deleted since, or never written in a restored history) would
    /// otherwise stay in the target. The mod revision alone decides what is deleted: the
    /// cursor only bounds the walk (see `on_sweep_page`).
    fn begin_residue_sweep(&mut self, now: Instant, cursor: &[u8]) {
        let windows = self.keys.target_windows();
        let from = cursor
            .strip_prefix(self.keys.source_prefix())
            .map(|rel| [self.keys.target_base(), rel].concat())
            .unwrap_or_default();
        let Some(g) = &mut self.gen else { return };
        g.step = GenStep::Residue;
        g.sweep_window = windows
            .iter()
            .position(|w| before_end(&from, &w.end))
            .unwrap_or(windows.len());
        g.sweep_cursor = from;
        g.sweep_pager.reset();
        self.next_sweep_page(now);
    }

    /// Opens the watch at base+1 and starts (or continues) paging.
    pub(super) fn begin_scan(&mut self, now: Instant) {
        let Some(scan) = self.fence.record.as_ref().and_then(|r| r.scan.clone()) else {
            return;
        };
        self.tail.delivered = scan.base;
        self.tail.live = None;
        self.history.genesis_seen = Some((scan.base, 0, String::new()));
        self.open_watch(now, scan.base + 1);
        let windows = self.keys.source_windows();
        if let Some(g) = &mut self.gen {
            g.step = GenStep::Scanning;
            // Start each window where the count (or an earlier read) found its keys.
            g.scan_pager = Pager::with_hints(self.density.clone());
            g.rmax = scan.base.max(scan.rmax);
            g.smax = scan.smax;
            // The watch replays from base + 1, so the count it maintains starts at base.
            g.live = scan.base_count;
            g.window = windows
                .iter()
                .position(|w| before_end(&scan.cursor, &w.end))
                .unwrap_or(windows.len());
            g.read_cursor = scan.cursor.clone();
        }
        if scan.scanned {
            self.scan_complete(now);
        } else {
            self.maybe_read_page(now);
        }
    }

    pub(super) fn scan_cmd(&self) -> Option<Command> {
        let g = self.gen.as_ref()?;
        let windows = self.keys.source_windows();
        let w = windows.get(g.window)?;
        let (key, range_end) = g.scan_pager.page(w, &g.read_cursor);
        Some(Command::Range(RangeRequest {
            cluster: Cluster::Source,
            key,
            range_end,
            revision: 0,
            limit: i64::from(g.page_limit),
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }))
    }

    /// Reads the next page while earlier pages are still being written, so the target
    /// never waits for a source read. What is read ahead is capped in bytes (pages vary
    /// from a few keys to `pageKeyLimit`), which bounds a genesis's memory.
    pub(super) fn maybe_read_page(&mut self, now: Instant) {
        let queued: u64 = self
            .work
            .iter()
            .map(|w| match w {
                Work::Scan { bytes, ops, .. } => {
                    debug_assert_eq!(*bytes, scan_bytes(ops), "a scan chunk's cached size");
                    *bytes
                }
                _ => 0,
            })
            .sum();
        let cap = self.cfg.sync.page_bytes.saturating_mul(READ_AHEAD_PAGES);
        let Some(g) = &mut self.gen else { return };
        if g.reading || g.read_done || g.step != GenStep::Scanning {
            return;
        }
        if queued >= cap {
            g.stalled_since.get_or_insert(now);
            return;
        }
        if let Some(t) = g.stalled_since.take() {
            self.status.reader_stall_seconds += now.saturating_duration_since(t).as_secs_f64();
        }
        match self.scan_cmd() {
            Some(cmd) => {
                if let Some(g) = &mut self.gen {
                    g.reading = true;
                }
                self.issue_bulk_read(Job::ScanPage(self.life.gen_seq), cmd);
            }
            None => {
                // Past the last window: record that the scan is complete.
                let Some(g) = &mut self.gen else { return };
                g.read_done = true;
                let (seq, cursor) = (g.seq, g.read_cursor.clone());
                self.work.push_back(Work::Scan {
                    seq,
                    ops: Vec::new(),
                    cursor_after: cursor,
                    scanned: true,
                    leased: 0,
                    bytes: 0,
                });
            }
        }
    }

    pub(super) fn on_scan_page(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        let windows = self.keys.source_windows();
        let page_bytes: u64 = r
            .kvs
            .iter()
            .map(|kv| (kv.key.len() + kv.value.len()) as u64)
            .sum();
        let budget = self.cfg.sync.page_bytes;
        let max_limit = self.cfg.sync.page_key_limit;
        let page_smax = r.kvs.iter().map(|kv| kv.mod_revision).max().unwrap_or(0);
        let Some(g) = &mut self.gen else { return };
        g.reading = false;
        g.rmax = g.rmax.max(r.header_revision);
        g.smax = g.smax.map(|s| s.max(page_smax));
        let last_key = r.kvs.last().map(|kv| kv.key.clone());
        let Some(w) = windows.get(g.window) else {
            return;
        };
        let reply = PageReply::of(&r.kvs, r.more, r.count, false, g.page_limit);
        self.status.note_source_read(r.count, r.kvs.len());
        // Adapt the page to the byte budget (the pager aims each bound at the limit).
        if page_bytes > budget {
            g.page_limit = (g.page_limit / 2).max(1);
        } else if page_bytes < budget / 2 && r.kvs.len() * 2 >= g.page_limit as usize {
            g.page_limit = g.page_limit.saturating_mul(2).min(max_limit);
        }
        let (cursor_after, scanned) = match g.scan_pager.advance_page(w, &g.read_cursor, reply) {
            pager::Next::From(c) => (c, false),
            pager::Next::Done => {
                g.window += 1;
                self.density.extend(g.scan_pager.hints().clone());
                g.scan_pager.reset();
                match windows.get(g.window) {
                    Some(w) => (w.start.clone(), false),
                    None => (last_key.clone().map(next_key).unwrap_or_default(), true),
                }
            }
        };
        let mut ops = Vec::with_capacity(r.kvs.len());
        let mut leased_keys = Vec::with_capacity(r.kvs.len());
        for kv in r.kvs {
            if let Some(t) = self.keys.rewrite(&kv.key) {
                self.history.offer_scanned(&kv);
                leased_keys.push((kv.key.clone(), kv.lease != 0));
                ops.push(TxnOp::Put {
                    key: t,
                    value: kv.value,
                });
            }
        }
        let chunks = batcher::chunk_ops(ops, self.limits);
        let Some(g) = &mut self.gen else { return };
        g.read_cursor = cursor_after.clone();
        g.read_done = scanned;
        if !g.progress_counted && (scanned || !g.scan_pager.hints().is_empty()) {
            // The page found where the keys begin: count them for progress, from there.
            g.progress_counted = true;
            self.density.extend(g.scan_pager.hints().clone());
            if let Some(base) = self.fence.record.as_ref().and_then(|r| r.scan.as_ref()) {
                let base = base.base;
                self.start_count(CountOf::Remaining, base, &[]);
            }
        }
        let Some(g) = &mut self.gen else { return };
        if chunks.is_empty() {
            if !scanned {
                // Nothing to write: the durable cursor moves with the next page that has
                // keys (a bounded scan reads many empty spans between key clusters, and a
                // fenced Txn for each would cost the target a write per span).
                return self.maybe_read_page(now);
            }
            let seq = g.seq;
            self.work.push_back(Work::Scan {
                seq,
                ops: Vec::new(),
                cursor_after,
                scanned,
                leased: 0,
                bytes: 0,
            });
            return self.maybe_read_page(now);
        }
        let seq = g.seq;
        let n = chunks.len();
        let mut idx = 0;
        for (i, chunk) in chunks.into_iter().enumerate() {
            let leased = leased_keys[idx..idx + chunk.len()]
                .iter()
                .filter(|(_, l)| *l)
                .count() as u64;
            idx += chunk.len();
            let (c, s) = if i + 1 == n {
                (cursor_after.clone(), scanned)
            } else {
                (next_key(leased_keys[idx - 1].0.clone()), false)
            };
            self.work.push_back(Work::Scan {
                seq,
                bytes: scan_bytes(&chunk),
                ops: chunk,
                cursor_after: c,
                scanned: s,
                leased,
            });
        }
        self.maybe_read_page(now);
    }

    pub(super) fn scan_complete(&mut self, now: Instant) {
        let Some(g) = &mut self.gen else { return };
        g.step = GenStep::Replaying;
        let held: Vec<Vec<Event>> = g.held.drain(..).collect();
        g.held_bytes = 0;
        let paused = std::mem::take(&mut g.watch_paused);
        for events in held {
            self.feed_events(now, events);
        }
        if paused {
            // What the paused watch delivered is fed above; a new one replays it from the
            // base (checked against what was counted, never fed twice) and goes on past it.
            let from = self.tail.delivered + 1;
            self.open_watch(now, from);
        }
        self.batcher.flush();
        while let Some(b) = self.batcher.pop() {
            self.work.push_back(Work::Tail(b));
        }
    }

    /// Called when no target work is queued or in flight.
    pub(super) fn after_queue_drained(&mut self, now: Instant) {
        let Some(g) = &self.gen else { return };
        match g.step {
            GenStep::Replaying => {
                if !self.batcher.is_empty() {
                    // One batch at a time, so the queue never runs ahead of a proof (a
                    // prune sweep must not interleave with queued replay writes).
                    self.batcher.flush();
                    if let Some(b) = self.batcher.pop() {
                        self.work.push_back(Work::Tail(b));
                    }
                    return self.pump(now);
                }
                if self.tail.delivered >= g.rmax {
                    self.replay_proven(now, self.tail.delivered);
                } else if self.peers.progress_trusted {
                    // Ask for a progress notification soon: it proves the watch past Rmax.
                    let soon = now + Duration::from_secs(1);
                    if self.tail.watch.is_some()
                        && self.tail.next_progress_request.is_some_and(|t| t > soon)
                    {
                        self.tail.next_progress_request = Some(soon);
                    }
                } else if g.probe_at.is_none() && g.probe.is_none() {
                    self.probe_untrusted();
                }
            }
            // One sweep page at a time: a failed read waiting for its retry counts too (two
            // reads of one page would advance the cursor twice).
            GenStep::Sweeping | GenStep::Residue
                if !self
                    .cmds
                    .inflight
                    .values()
                    .chain(self.cmds.retry.iter().map(|r| &r.job))
                    .any(|j| matches!(j, Job::SweepPage(_))) =>
            {
                self.next_sweep_page(now);
            }
            _ => {}
        }
    }

    /// The next page of the untrusted-progress probe in progress.
    pub(super) fn probe_cmd(&self) -> Option<Command> {
        let g = self.gen.as_ref()?;
        g.probe.as_ref()?.cmd(self.cfg.sync.page_key_limit)
    }

    /// Starts the probe: one snapshot of the mirrored windows, the keys the live count
    /// counts (an excluded key would keep the two apart forever).
    pub(super) fn probe_untrusted(&mut self) {
        let windows = self.keys.source_windows();
        let Some(g) = &mut self.gen else { return };
        g.probe = Some(ModScan::new(windows));
        if let Some(cmd) = self.probe_cmd() {
            self.issue(Job::ProbeMaxModRevision(self.life.gen_seq), cmd);
        }
    }

    /// Untrusted progress: proves the range quiet since what the watch delivered (`D`), so
    /// the target (scanned values plus events up to `D`) equals the source at `D`:
    /// - every key live now has `mod_revision <= D` (the probe), so each was live at `D`
    ///   with the same value;
    /// - as many keys are live now as at `D` (the probe's count against the R0 count plus
    ///   the delivered creations and deletions), so no key live at `D` was deleted since.
    ///   Deletes are invisible to the probe: a key deleted after `D` but before its page was
    ///   read is missing from the target while the source at `D` has it;
    /// - no scanned value has a mod revision above `D` (a key created and deleted after
    ///   `D` but read by a page would be in the target, absent from the source at `D`).
    ///
    /// Without all three, genesis waits for the watch to deliver past Rmax (or re-probes).
    ///
    /// The probe is one snapshot at revision `H` read in bounded pages; it proves nothing
    /// about `D` unless `H >= D`.
    pub(super) fn on_untrusted_probe(&mut self, now: Instant, r: RangeReply) {
        self.observe_source_rev(now, r.header_revision);
        self.status.note_source_read(r.count, r.kvs.len());
        let limit = self.cfg.sync.page_key_limit;
        let committing = self.committing();
        let Some(g) = &mut self.gen else { return };
        if g.step != GenStep::Replaying {
            g.probe = None;
            return;
        }
        let Some(probe) = g.probe.as_mut() else {
            return;
        };
        if !probe.on_page(r, limit) {
            if let Some(cmd) = self.probe_cmd() {
                self.issue(Job::ProbeMaxModRevision(self.life.gen_seq), cmd);
            }
            return;
        }
        let Some(ModScan {
            at, max_mod, count, ..
        }) = g.probe.take()
        else {
            return;
        };
        let d = self.tail.delivered;
        if g.live.is_none() && !g.counts.contains_key(&CountOf::Live) {
            // A genesis whose record has no count at its base (a resync the claim declared)
            // never knows how many keys are live: count them at what was delivered.
            self.start_count(CountOf::Live, d, &[]);
        }
        let Some(g) = &mut self.gen else { return };
        if max_mod <= d
            && at >= d
            && g.live == Some(count)
            && g.smax.is_some_and(|s| s <= d)
            && self.work.is_empty()
            && !committing
            && self.batcher.is_empty()
        {
            g.rmax = self.tail.delivered;
            self.replay_proven(now, self.tail.delivered);
        } else {
            g.probe_at = Some(now + UNTRUSTED_PROBE_EVERY);
        }
    }

    /// Everything up to `applied` is in the target and the watch is proven past every
    /// page, so genesis can finish at `applied`; events after it wait in order.
    pub(super) fn replay_proven(&mut self, now: Instant, applied: i64) {
        let base = self
            .fence
            .record
            .as_ref()
            .and_then(|r| r.scan.as_ref())
            .map_or(0, |s| s.base);
        let Some(g) = &mut self.gen else { return };
        g.final_w = base.max(applied);
        if g.prune {
            g.step = GenStep::Sweeping;
            g.sweep_cursor = Vec::new();
            g.sweep_window = 0;
            self.next_sweep_page(now);
        } else {
            g.step = GenStep::Finishing;
            let why = FenceWhy::FinishGenesis {
                seq: g.seq,
                watermark: g.final_w,
            };
            self.work.push_back(Work::Fence(why));
        }
    }

    pub(super) fn sweep_cmd(&self) -> Option<Command> {
        let g = self.gen.as_ref()?;
        let windows = self.keys.target_windows();
        let w = windows.get(g.sweep_window)?;
        let (key, range_end) = g.sweep_pager.page(w, &g.sweep_cursor);
        Some(Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key,
            range_end,
            revision: 0,
            limit: i64::from(self.cfg.sync.page_key_limit),
            count_only: false,
            keys_only: true,
            sort: SortBy::Key,
        }))
    }

    pub(super) fn next_sweep_page(&mut self, now: Instant) {
        match self.sweep_cmd() {
            Some(cmd) => {
                self.issue(Job::SweepPage(self.life.gen_seq), cmd);
            }
            None => {
                if let Some(g) = &mut self.gen {
                    let why = if g.step == GenStep::Residue {
                        FenceWhy::ResidueSwept { seq: g.seq }
                    } else {
                        g.step = GenStep::Finishing;
                        FenceWhy::FinishGenesis {
                            seq: g.seq,
                            watermark: g.final_w,
                        }
                    };
                    self.work.push_back(Work::Fence(why));
                }
                self.pump(now);
            }
        }
    }

    pub(super) fn on_sweep_page(&mut self, now: Instant, mut r: RangeReply) {
        let floor = self.fence.record.as_ref().map_or(0, |c| c.prune_floor);
        // A residue sweep deletes what is newer than the mark; a prune, what is older than
        // the floor (everything this genesis put is above it).
        let residue_above = self
            .gen
            .as_ref()
            .filter(|g| g.step == GenStep::Residue)
            .and_then(|_| self.fence.record.as_ref()?.scan.as_ref()?.residue_above);
        let window = self
            .gen
            .as_ref()
            .and_then(|g| self.keys.target_windows().get(g.sweep_window).cloned());
        let listed = keep_inside(&mut r.kvs, window.as_ref());
        let mut ops = Vec::new();
        for kv in &r.kvs {
            let stale = match residue_above {
                Some(above) => kv.mod_revision > above,
                None => kv.mod_revision < floor,
            };
            if self.keys.is_checkpoint(&kv.key) || !stale {
                continue;
            }
            if kv.key.contains(&0) {
                // keys_only: re-check by reading it would cost a round trip; a key with a
                // NUL under the target base is never ours to delete blindly.
                return self.fail(
                    now,
                    FailKind::PrefixConflict,
                    format!(
                        "the target range holds a key with a NUL byte ({}) that may be another link's fence; refusing to prune",
                        crate::mirror::keys::redact(self.keys.target_base(), &kv.key)
                    ),
                );
            }
            ops.push(TxnOp::Delete {
                key: kv.key.clone(),
                range_end: Vec::new(),
            });
        }
        let limit = self.cfg.sync.page_key_limit;
        let Some(g) = &mut self.gen else { return };
        let Some(w) = window else { return };
        let reply = PageReply::of(&r.kvs, r.more, r.count, listed, limit);
        match g.sweep_pager.advance_page(&w, &g.sweep_cursor, reply) {
            pager::Next::From(c) => g.sweep_cursor = c,
            pager::Next::Done => {
                g.sweep_window += 1;
                g.sweep_cursor = Vec::new();
                g.sweep_pager.reset();
            }
        }
        for chunk in batcher::chunk_ops(ops, self.limits) {
            self.work.push_back(Work::Sweep { ops: chunk });
        }
    }

    pub(super) fn genesis_done(&mut self, now: Instant) {
        self.arm_reconcile(now);
        let leased = self.gen.as_ref().map_or(0, |g| g.leased);
        self.status.lease_backed_key_count = leased;
        self.status.set_condition(
            now,
            C::InitialSyncComplete,
            true,
            "Synced",
            "initial copy complete",
        );
        let held: Vec<Vec<Event>> = self
            .gen
            .take()
            .map(|g| g.held.into_iter().collect())
            .unwrap_or_default();
        self.life.stage = Stage::Tail;
        self.status.phase = Phase::Syncing;
        for events in held {
            self.feed_events(now, events);
        }
        self.batcher.flush();
        if self.tail.next_progress_request.is_none() {
            self.tail.next_progress_request = Some(now + self.cfg.sync.progress_interval);
        }
    }
}

/// Drops the key-values of a page that lie outside `window` (a misbehaving server or proxy
/// listed them): nothing outside the window being read may be counted, repaired or deleted.
/// Returns whether the reply listed any key at all, so that a page of outside keys only is
/// read again instead of being taken for the end of the window.
pub(super) fn keep_inside(
    kvs: &mut Vec<KeyValue>,
    window: Option<&crate::mirror::keys::Window>,
) -> bool {
    let listed = !kvs.is_empty();
    kvs.retain(|kv| window.is_some_and(|w| w.contains(&kv.key)));
    listed
}
