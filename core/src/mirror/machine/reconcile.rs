//! The diff-and-repair pass: periodic reconciliation and drain verification.
//!
//! The pass merges source and target pages in key order. The source side is read pinned at
//! the watermark W, so keys still in flight are not reported as drift. If W has been
//! compacted, the pass falls back to unpinned reads. While a pass runs, the tail is held:
//! its batches wait in the batcher, so the target stays at "source@W plus drift". Repairs go
//! through the fenced path and do not move the watermark.

use super::*;

/// Why a pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PassPurpose {
    Periodic,
    /// Drain verification, round n (a round that repaired anything is followed by another).
    DrainVerify(u32),
    /// Drain verification on a source whose progress cannot be trusted, after the
    /// watermark was compacted: compares against the drain target's snapshot revision
    /// instead, which is above the watermark, so it repairs nothing (see `drain.rs`)...
    DrainSnapshot(i64),
    /// ...unless the source is proven unchanged between the watermark and that snapshot:
    /// then the snapshot stands for the watermark, and the pass is verification round n.
    DrainProven(i64, u32),
}

impl PassPurpose {
    /// Whether the pass writes repairs: only one pinned at the watermark (or at a snapshot
    /// proven equal to it) may, since the target must stay "source@W plus drift" for the
    /// tail.
    fn repairs(self) -> bool {
        !matches!(self, PassPurpose::DrainSnapshot(_))
    }
}

/// One side of the merge.
#[derive(Debug, Clone, Default)]
pub(super) struct PassSide {
    buf: VecDeque<KeyValue>,
    /// The next key to read in the current window; empty = the window's start.
    cursor: Vec<u8>,
    /// Bounds each page's walk (see `pager`).
    pager: Pager,
    done: bool,
    reading: bool,
}

impl PassSide {
    /// A side whose pages start each window where `hints` say its keys begin.
    fn with_hints(hints: pager::Hints) -> PassSide {
        PassSide {
            pager: Pager::with_hints(hints),
            ..PassSide::default()
        }
    }
}

/// A pass in progress.
#[derive(Debug, Clone)]
pub(super) struct Pass {
    pub(super) seq: u64,
    pub(super) purpose: PassPurpose,
    /// The source revision the pass compares against (the watermark at its start).
    pub(super) at: i64,
    pub(super) pinned: bool,
    window: usize,
    src: PassSide,
    tgt: PassSide,
    pub(super) counts: Counts,
    repairs: Vec<TxnOp>,
    /// Every window is merged; only queued repairs remain.
    pub(super) merged: bool,
    pub(super) delete_orphans: bool,
    /// Orphans found but left in place.
    pub(super) orphans_left: u64,
    leased: u64,
    started: Instant,
}

/// The diff-and-repair pass in progress and when the next one is due.
#[derive(Debug, Clone, Default)]
pub(super) struct Reconciliation {
    pub(super) pass: Option<Pass>,
    pub(super) pass_seq: u64,
    pub(super) next_reconcile: Option<Instant>,
    pub(super) reconcile_requested: bool,
}

/// Why the merge of a pass cannot go on.
#[derive(Debug, thiserror::Error)]
pub(super) enum MergeError {
    /// A fence of another link inside the target range (`at` is the redacted key).
    #[error("the target range holds the fence of another link ({link:?}) at {at}; two links write one range. Reconciliation aborted, nothing repaired")]
    ForeignFence { link: String, at: String },
}

/// How much queued repair pacing makes the pass stop reading the source watch.
const PACING_WATCH_CANCEL: Duration = Duration::from_secs(3);

impl Mirror {
    /// Whether the steady state allows a pass or a drain step to start now.
    pub(super) fn quiescent(&self) -> bool {
        self.life.stage == Stage::Tail
            && self.gen.is_none()
            && self.recon.pass.is_none()
            && self.work.is_empty()
            && !self.committing()
            && !self.life.paused
            && self.pacing.hold_until.is_none()
            && self.pacing.resume_at.is_none()
            && self
                .fence
                .record
                .as_ref()
                .is_some_and(|r| r.split.is_none())
    }

    /// Starts a pass pinned at the current watermark (or at the drain snapshot it names).
    pub(super) fn start_pass(&mut self, now: Instant, purpose: PassPurpose) {
        let at = match purpose {
            PassPurpose::DrainSnapshot(at) | PassPurpose::DrainProven(at, _) => at,
            _ => self.fence.record.as_ref().map_or(0, |r| r.watermark),
        };
        self.recon.pass_seq += 1;
        self.recon.pass = Some(Pass {
            seq: self.recon.pass_seq,
            purpose,
            at,
            pinned: at > 0,
            window: 0,
            src: PassSide::with_hints(self.density.clone()),
            tgt: PassSide::default(),
            counts: Counts::default(),
            repairs: Vec::new(),
            merged: false,
            delete_orphans: self.cfg.reconciliation.delete_orphans,
            orphans_left: 0,
            leased: 0,
            started: now,
        });
        self.pass_step(now);
    }

    fn pass_read(&self, source: bool) -> Option<Command> {
        let p = self.recon.pass.as_ref()?;
        let windows = if source {
            self.keys.source_windows()
        } else {
            self.keys.target_windows()
        };
        let w = windows.get(p.window)?;
        let side = if source { &p.src } else { &p.tgt };
        let (key, range_end) = side.pager.page(w, &side.cursor);
        Some(Command::Range(RangeRequest {
            cluster: if source {
                Cluster::Source
            } else {
                Cluster::Target
            },
            key,
            range_end,
            revision: if source && p.pinned { p.at } else { 0 },
            limit: i64::from(self.cfg.sync.page_key_limit),
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }))
    }

    pub(super) fn pass_command(&self, job: &Job) -> Option<Command> {
        match job {
            Job::PassSource(_) => self.pass_read(true),
            Job::PassTarget(_) => self.pass_read(false),
            _ => None,
        }
    }

    /// A page of one side arrived.
    pub(super) fn on_pass_page(&mut self, now: Instant, source: bool, mut r: RangeReply) {
        if source {
            self.observe_source_rev(now, r.header_revision);
        }
        let window = self.recon.pass.as_ref().and_then(|p| {
            let windows = if source {
                self.keys.source_windows()
            } else {
                self.keys.target_windows()
            };
            windows.get(p.window).cloned()
        });
        let listed = super::genesis::keep_inside(&mut r.kvs, window.as_ref());
        if source {
            self.status.note_source_read(r.count, r.kvs.len());
        }
        let limit = self.cfg.sync.page_key_limit;
        let Some(p) = &mut self.recon.pass else {
            return;
        };
        let Some(w) = window else { return };
        let side = if source { &mut p.src } else { &mut p.tgt };
        side.reading = false;
        let reply = PageReply::of(&r.kvs, r.more, r.count, listed, limit);
        match side.pager.advance_page(&w, &side.cursor, reply) {
            pager::Next::From(c) => side.cursor = c,
            pager::Next::Done => side.done = true,
        }
        side.buf.extend(r.kvs);
        self.pass_step(now);
    }

    /// The pinned revision was compacted: fall back to unpinned reads for the rest.
    pub(super) fn on_pass_compacted(&mut self, now: Instant) {
        let Some(p) = &mut self.recon.pass else {
            return;
        };
        p.pinned = false;
        p.src.reading = false;
        self.status.last_error = Some(format!(
            "reconciliation: revision {} was compacted; comparing against the latest source instead (keys changed since are not repaired)",
            p.at
        ));
        self.pass_step(now);
    }

    /// Merges what both sides have buffered; asks for more when a side runs dry.
    fn pass_step(&mut self, now: Instant) {
        loop {
            let Some(p) = &mut self.recon.pass else {
                return;
            };
            if p.merged {
                return;
            }
            let need_src = p.src.buf.is_empty() && !p.src.done;
            let need_tgt = p.tgt.buf.is_empty() && !p.tgt.done;
            if need_src || need_tgt {
                let seq = p.seq;
                let (src_reading, tgt_reading) = (p.src.reading, p.tgt.reading);
                if need_src && !src_reading {
                    if let Some(cmd) = self.pass_read(true) {
                        self.issue(Job::PassSource(seq), cmd);
                    }
                }
                if need_tgt && !tgt_reading {
                    if let Some(cmd) = self.pass_read(false) {
                        self.issue(Job::PassTarget(seq), cmd);
                    }
                }
                let Some(p) = &mut self.recon.pass else {
                    return;
                };
                p.src.reading |= need_src;
                p.tgt.reading |= need_tgt;
                return;
            }
            if p.src.buf.is_empty() && p.tgt.buf.is_empty() {
                // Both sides of this window are exhausted.
                p.window += 1;
                // What this window taught the source side serves the next pass too.
                self.density.extend(p.src.pager.hints().clone());
                p.src = PassSide::with_hints(self.density.clone());
                p.tgt = PassSide::default();
                if p.window >= self.keys.source_windows().len() {
                    p.merged = true;
                    self.flush_repairs();
                    return self.pump(now);
                }
                continue;
            }
            if let Err(e) = self.merge_one() {
                return self.fail(now, FailKind::PrefixConflict, e.to_string());
            }
            self.flush_repairs_if_full(now);
        }
    }

    /// Consumes the smallest key from the fronts of both sides.
    fn merge_one(&mut self) -> Result<(), MergeError> {
        let keys = &self.keys;
        let link = &self.fence.link;
        let Some(p) = &mut self.recon.pass else {
            return Ok(());
        };
        let s_key = p.src.buf.front().and_then(|kv| keys.rewrite(&kv.key));
        if p.src.buf.front().is_some() && s_key.is_none() {
            // Out of scope (cannot happen inside a window, but never write it).
            p.src.buf.pop_front();
            return Ok(());
        }
        let t_key = p.tgt.buf.front().map(|kv| kv.key.clone());
        if let Some(t) = &t_key {
            if keys.is_checkpoint(t) {
                p.tgt.buf.pop_front();
                return Ok(());
            }
            if t.contains(&0) {
                if let Some(kv) = p.tgt.buf.front() {
                    if let Ok(c) = Checkpoint::decode(&kv.value) {
                        if &c.link != link {
                            return Err(MergeError::ForeignFence {
                                link: c.link,
                                at: crate::mirror::keys::redact(keys.target_base(), t),
                            });
                        }
                    }
                }
            }
        }
        let order = match (&s_key, &t_key) {
            (Some(s), Some(t)) => s.cmp(t),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => return Ok(()),
        };
        let in_flight = |kv: &KeyValue, p: &Pass| !p.pinned && kv.mod_revision > p.at;
        let repair = p.purpose.repairs();
        match order {
            std::cmp::Ordering::Equal => {
                let s = p.src.buf.pop_front().expect("s_key was Some");
                let t = p.tgt.buf.pop_front().expect("t_key was Some");
                p.counts.source_key_count += 1;
                p.counts.target_key_count += 1;
                p.leased += u64::from(s.lease != 0);
                if s.value != t.value && !in_flight(&s, p) {
                    p.counts.divergent += 1;
                    if repair {
                        p.repairs.push(TxnOp::Put {
                            key: t.key,
                            value: s.value,
                        });
                    }
                }
            }
            std::cmp::Ordering::Less => {
                let s = p.src.buf.pop_front().expect("s_key was Some");
                p.counts.source_key_count += 1;
                p.leased += u64::from(s.lease != 0);
                if !in_flight(&s, p) {
                    p.counts.missing += 1;
                    if repair {
                        let key = s_key.expect("checked above");
                        p.repairs.push(TxnOp::Put {
                            key,
                            value: s.value,
                        });
                    }
                }
            }
            std::cmp::Ordering::Greater => {
                let t = p.tgt.buf.pop_front().expect("t_key was Some");
                p.counts.target_key_count += 1;
                p.counts.orphan += 1;
                // Unpinned, a target key absent from the latest source may be a delete in
                // flight; only a pinned pass can call it an orphan with certainty.
                if p.delete_orphans && p.pinned && repair {
                    p.repairs.push(TxnOp::Delete {
                        key: t.key,
                        range_end: Vec::new(),
                    });
                } else {
                    p.orphans_left += 1;
                }
            }
        }
        Ok(())
    }

    fn flush_repairs_if_full(&mut self, now: Instant) {
        let full = self
            .recon
            .pass
            .as_ref()
            .is_some_and(|p| p.repairs.len() >= self.limits.max_ops);
        if full {
            self.flush_repairs();
        }
        // A long paced repair must not let the source watch buffer grow without bound.
        let queued: u64 = self.work.iter().map(|w| w.ops().len() as u64).sum();
        let pacing = self.pacing.pacer.queued(now) + self.pacing.pacer.cost(queued);
        if self.pacing.pacer.enabled()
            && pacing > PACING_WATCH_CANCEL
            && self.tail.watch.is_some()
            && !self.watch_muted()
        {
            self.mute_watch();
            self.status.watch_cancels_for_pacing += 1;
        }
    }

    fn flush_repairs(&mut self) {
        let Some(p) = &mut self.recon.pass else {
            return;
        };
        let ops = std::mem::take(&mut p.repairs);
        for chunk in batcher::chunk_ops(ops, self.limits) {
            self.work.push_back(Work::Repair { ops: chunk });
        }
    }

    /// Called when the work queue is empty: a merged pass whose repairs all landed ends.
    pub(super) fn maybe_finish_pass(&mut self, now: Instant) {
        if self.committing() || !self.work.is_empty() {
            return;
        }
        let Some(p) = &self.recon.pass else { return };
        if !p.merged {
            return;
        }
        let p = self.recon.pass.take().expect("checked Some just above");
        let mut counts = p.counts;
        let drift = counts.missing + counts.divergent + counts.orphan;
        counts.repaired = if p.purpose.repairs() {
            drift - p.orphans_left
        } else {
            0
        };
        // Counts, time and drift are published together.
        self.status.last_counts = Some(counts);
        self.status.last_drift = Some(counts);
        self.status.last_reconcile_time = Some(now);
        self.status.lease_backed_key_count = p.leased;
        self.status.last_pass_duration_seconds =
            now.saturating_duration_since(p.started).as_secs_f64();
        self.status.reconcile_passes += 1;
        self.status.set_condition(
            now,
            C::DriftDetected,
            drift > 0,
            if drift > 0 { "DriftFound" } else { "NoDrift" },
            format!(
                "missing {}, divergent {}, orphan {} (pinned at {}: {})",
                counts.missing, counts.divergent, counts.orphan, p.at, p.pinned
            ),
        );
        if p.pinned && p.at == self.tail.delivered {
            // Every key the pass read was in scope at `delivered`: the count the watch
            // moves on from here.
            let keys = i64::try_from(counts.source_key_count).unwrap_or(i64::MAX);
            self.tail.live = Some((p.at, keys));
        }
        let held = p.pinned && counts.repaired == drift;
        self.status.set_condition(
            now,
            C::InvariantsHeld,
            held,
            if held { "Verified" } else { "Unverified" },
            if held {
                String::new()
            } else if !p.purpose.repairs() {
                format!(
                    "the drain compared the target with the source snapshot at revision {} and found drift it does not repair there (the watermark is below it)",
                    p.at
                )
            } else if p.orphans_left > 0 {
                format!(
                    "{} orphan keys left in the target (reconciliation.deleteOrphans is false)",
                    p.orphans_left
                )
            } else {
                "the pass could not pin the watermark (compacted)".to_string()
            },
        );
        self.arm_reconcile(now);
        match p.purpose {
            PassPurpose::Periodic => {}
            PassPurpose::DrainVerify(round) => {
                self.after_drain_verify(now, round, counts, p.orphans_left, p.pinned)
            }
            PassPurpose::DrainProven(_, round) if p.pinned => {
                self.after_drain_verify(now, round, counts, p.orphans_left, true)
            }
            // A proven snapshot compacted under the pass proves nothing either.
            PassPurpose::DrainSnapshot(_) | PassPurpose::DrainProven(..) => {
                self.after_drain_snapshot(now, counts, p.pinned)
            }
        }
    }

    /// Every counts-producing pass pushes the next periodic pass a full interval out.
    pub(super) fn arm_reconcile(&mut self, now: Instant) {
        self.recon.next_reconcile = self
            .cfg
            .reconciliation
            .enabled
            .then(|| now + self.cfg.reconciliation.interval);
    }
}
