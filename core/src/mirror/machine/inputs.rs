//! Routing of replies, watch events and operator controls.

use super::*;

impl Mirror {
    pub(super) fn on_control(&mut self, now: Instant, c: Control) {
        match c {
            Control::Shutdown => self.life.shutdown = true,
            Control::Pause => {
                self.life.paused = true;
                self.status.phase = Phase::Paused;
            }
            Control::Resume => self.life.paused = false,
            Control::Drain => self.drain.requested = true,
            Control::Reconcile => self.recon.reconcile_requested = true,
        }
        self.pump(now);
    }

    pub(super) fn on_done(&mut self, now: Instant, job: Job, result: Result<Reply, Failure>) {
        match (job, result) {
            (Job::Fire, _) => {}
            (Job::WatchOpen(id), Ok(_)) => self.on_watch_established(now, id),
            (Job::ProveHistory { round, pinned }, result) => {
                self.on_proof(now, round, pinned, result)
            }
            (Job::WatchOpen(_), Err(f)) => self.on_watch(now, WatchEvent::Failed { failure: f }),
            (Job::ProbeSource, Ok(Reply::Status(s))) => {
                self.peers.src = Some(s);
                self.after_probes(now);
            }
            (Job::ProbeTarget, Ok(Reply::Status(s))) => {
                self.peers.tgt = Some(s);
                self.after_probes(now);
            }
            (Job::ReadFence, Ok(Reply::Range(r))) => self.on_fence_read(now, r),
            (Job::CheckEmpty, Ok(Reply::Range(r))) => self.on_check_empty(now, r),
            (Job::Count { seq, .. }, _) if self.gen.as_ref().is_none_or(|g| g.seq != seq) => {}
            (Job::Count { of, .. }, Ok(Reply::Range(r))) => self.on_count_reply(of, r),
            (Job::Count { of, .. }, Err(Failure::Compacted { .. })) => {
                self.on_count_compacted(now, of)
            }
            // Progress only: not worth a retry.
            (
                Job::Count {
                    of: CountOf::Remaining,
                    ..
                },
                Err(_),
            ) => {
                if let Some(g) = self.gen.as_mut() {
                    g.counts.remove(&CountOf::Remaining);
                }
            }
            (
                Job::ReadR0(seq)
                | Job::ScanPage(seq)
                | Job::ProbeMaxModRevision(seq)
                | Job::SweepPage(seq),
                _,
            ) if self.gen.as_ref().is_none_or(|g| g.seq != seq) => {}
            (Job::ReadR0(_), Ok(Reply::Range(r))) => self.on_r0(now, r),
            (Job::ScanPage(_), Ok(Reply::Range(r))) => self.on_scan_page(now, r),
            (Job::ProbeMaxModRevision(_), Ok(Reply::Range(r))) => self.on_untrusted_probe(now, r),
            (Job::SweepPage(_), Ok(Reply::Range(r))) => self.on_sweep_page(now, r),
            (Job::PassSource(seq) | Job::PassTarget(seq), _)
                if self.recon.pass.as_ref().is_none_or(|p| p.seq != seq) => {}
            (Job::PassSource(_), Ok(Reply::Range(r))) => self.on_pass_page(now, true, r),
            (Job::PassTarget(_), Ok(Reply::Range(r))) => self.on_pass_page(now, false, r),
            (Job::PassSource(_), Err(Failure::Compacted { .. })) => self.on_pass_compacted(now),
            (Job::DrainTarget, Ok(Reply::Range(r))) => self.on_drain_target(now, r),
            (Job::ConfirmVerdict, Ok(Reply::Range(r))) => self.on_verdict_fence(now, r),
            (Job::WatchGuard { watch_id, from }, Ok(_)) => {
                self.on_watch_guard(now, watch_id, from, true)
            }
            (Job::WatchGuard { watch_id, from }, Err(Failure::Compacted { .. })) => {
                self.on_watch_guard(now, watch_id, from, false)
            }
            (Job::WatchRecheck { watch_id, from }, Ok(_)) => {
                self.on_watch_recheck(now, watch_id, from, true)
            }
            (Job::WatchRecheck { watch_id, from }, Err(Failure::Compacted { .. })) => {
                self.on_watch_recheck(now, watch_id, from, false)
            }
            (Job::Commit(c), Ok(Reply::Txn(t))) => self.on_chain_reply(now, *c, Ok(t)),
            (Job::Commit(c), Err(f)) => self.on_chain_reply(now, *c, Err(f)),
            (Job::Page { slot, base, sent }, Ok(Reply::Txn(t))) => {
                self.on_page_reply(now, slot, base, sent, Ok(t))
            }
            (Job::Page { slot, base, sent }, Err(f)) => {
                self.on_page_reply(now, slot, base, sent, Err(f))
            }
            (Job::ResolveUnknown(c), Ok(Reply::Range(r))) => self.on_resolve(now, *c, r),
            (Job::ResolveChain(b), Ok(Reply::Range(r))) => self.on_resolve_chain(now, *b, r),
            (job, Err(f)) => self.on_read_failed(now, job, f),
            (job, Ok(reply)) => {
                let msg = format!("unexpected reply {reply:?} for {job:?}");
                self.fail(now, FailKind::Permanent, msg);
            }
        }
    }

    /// A read failed: retry it with backoff, or stop on a permanent error.
    pub(super) fn on_read_failed(&mut self, now: Instant, job: Job, f: Failure) {
        self.note_reachability(now, &job, false, &f);
        // The proof's own failure retries below, under its round.
        let proof = matches!(job, Job::ProveHistory { .. });
        if job.reads_source()
            && !proof
            && matches!(f, Failure::Transient { .. } | Failure::Unknown { .. })
        {
            // A source connection broke: prove the history again before the next write.
            self.history.unverify();
        }
        if matches!(f, Failure::Compacted { .. }) {
            // A snapshot scan's revision was compacted under it: read a newer one.
            match job {
                Job::ProbeMaxModRevision(_) => {
                    if let Some(p) = self.gen.as_mut().and_then(|g| g.probe.as_mut()) {
                        p.restart();
                    }
                }
                Job::DrainTarget => {
                    if let Some(s) = self.drain.state.as_mut().and_then(|d| d.scan.as_mut()) {
                        s.restart();
                    }
                }
                _ => {}
            }
        }
        let cmd = match self.command_for(&job) {
            Some(c) => c,
            None => return,
        };
        match f {
            Failure::Permanent { kind, message } => {
                let fk = if kind == PermanentKind::Unsupported {
                    FailKind::Unsupported
                } else {
                    FailKind::Permanent
                };
                self.fail(now, fk, message);
            }
            Failure::Throttled { .. } => self.retry_later(now, job, cmd, true),
            _ => self.retry_later(now, job, cmd, false),
        }
    }

    pub(super) fn note_reachability(&mut self, now: Instant, job: &Job, ok: bool, f: &Failure) {
        let side = if job.reads_source() {
            C::SourceReachable
        } else {
            C::TargetReachable
        };
        if ok {
            self.status.set_condition(now, side, true, "Reachable", "");
        } else if !matches!(f, Failure::Permanent { .. }) {
            self.status
                .set_condition(now, side, false, f.label(), f.to_string());
        }
    }

    /// Rebuilds the command of a read job (the jobs are idempotent reads).
    pub(super) fn command_for(&mut self, job: &Job) -> Option<Command> {
        Some(match job {
            Job::ProbeSource => Command::Status {
                cluster: Cluster::Source,
            },
            Job::ProbeTarget => Command::Status {
                cluster: Cluster::Target,
            },
            Job::ReadFence => self.fence_read_cmd(),
            Job::CheckEmpty => self.check_empty_cmd(),
            Job::ReadR0(_) => self.r0_cmd(),
            Job::ScanPage(_) => self.scan_cmd()?,
            Job::ProbeMaxModRevision(_) => self.probe_cmd()?,
            Job::SweepPage(_) => self.sweep_cmd()?,
            Job::ResolveUnknown(_) | Job::ResolveChain(_) | Job::ConfirmVerdict => {
                self.fence_read_cmd()
            }
            Job::PassSource(_) | Job::PassTarget(_) => self.pass_command(job)?,
            Job::DrainTarget => self.drain_target_cmd()?,
            Job::WatchGuard { watch_id, from } | Job::WatchRecheck { watch_id, from } => {
                if self.tail.watch != Some(*watch_id) {
                    return None;
                }
                self.watch_open_step(*watch_id, *from).1
            }
            Job::ProveHistory { round, pinned } => {
                if !self.proof_is_current(*round) {
                    return None;
                }
                self.proof_cmd(*pinned)
            }
            Job::Count { of, .. } => self.count_cmd_of(*of)?,
            Job::Commit(_) | Job::Page { .. } | Job::WatchOpen(_) | Job::Fire => return None,
        })
    }
}
