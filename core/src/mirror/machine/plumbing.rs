//! Command issue, timers and stopping.

use super::*;

impl Mirror {
    pub(super) fn issue(&mut self, job: Job, cmd: Command) -> CommandId {
        let id = self.next_id;
        self.next_id += 1;
        self.inflight.insert(id, job);
        self.note_issue(id, &cmd);
        self.out.push_back(Output::Command { id, cmd });
        id
    }

    pub(super) fn retry_later(&mut self, now: Instant, job: Job, cmd: Command, throttled: bool) {
        let delay = if throttled {
            self.throttle.next_delay(&mut self.rng)
        } else {
            self.backoff.next_delay(&mut self.rng)
        };
        let at = now + delay;
        self.status.backoff = Some(BackoffState {
            kind: if throttled { "throttled" } else { "transient" }.into(),
            attempt: if throttled {
                self.throttle.attempt()
            } else {
                self.backoff.attempt()
            },
            until: at,
        });
        self.retry.push(Retry { at, cmd, job });
    }

    pub(super) fn fire_timers(&mut self, now: Instant) {
        if self.retry.iter().any(|r| r.at <= now) {
            let (due, later): (Vec<Retry>, Vec<Retry>) = std::mem::take(&mut self.retry)
                .into_iter()
                .partition(|r| r.at <= now);
            self.retry = later;
            self.status.backoff = None;
            for r in due {
                self.issue(r.job, r.cmd);
            }
        }
        if self.hold_until.is_some_and(|t| t <= now) {
            self.hold_until = None;
            self.status.backoff = None;
        }
        if self.resume_at.is_some_and(|t| t <= now) {
            self.resume_at = None;
            self.status.backoff = None;
            self.resume_from_record(now);
        }
        if self.quota_probe_at.is_some_and(|t| t <= now) && !self.committing() {
            self.quota_probe_at = None;
            if self.record.is_some() {
                self.work.push_front(Work::Fence(FenceWhy::QuotaProbe));
            } else {
                // Parked before the claim landed: the claim itself is the probe.
                self.stage = Stage::Fencing;
                self.status.backoff = None;
                self.resume_from_record(now);
            }
        }
        if let (Some(t), Some(w)) = (self.next_progress_request, self.watch) {
            if t <= now {
                self.next_progress_request = Some(now + self.cfg.sync.progress_interval);
                self.issue(Job::Fire, Command::RequestProgress { watch_id: w });
            }
        }
        if self.window_deadline().is_some_and(|t| t <= now) {
            self.window_timed_out(now);
        }
        if let Some(g) = &mut self.gen {
            if g.probe_at.is_some_and(|t| t <= now) {
                g.probe_at = None;
                self.probe_untrusted();
            }
        }
    }

    pub(super) fn next_deadline(&self, now: Instant) -> Option<Instant> {
        [
            self.next_reconcile
                .filter(|t| *t > now && self.stage == Stage::Tail),
            self.retry.iter().map(|r| r.at).min(),
            self.hold_until,
            self.resume_at,
            self.quota_probe_at,
            self.watch.and(self.next_progress_request),
            self.gen.as_ref().and_then(|g| g.probe_at),
            self.pacer_deadline(),
            self.drain_watch_deadline(),
            self.window_deadline(),
        ]
        .into_iter()
        .flatten()
        // Everything due was fired by this poll; a due timer that is still blocked (paced
        // work while paused, a probe behind a commit) is re-checked on the next input, so
        // never ask to be woken in the past (that would spin the driver).
        .filter(|t| *t > now)
        .min()
    }

    pub(super) fn pacer_deadline(&self) -> Option<Instant> {
        if self.committing() || self.work.is_empty() || !self.pacer.enabled() {
            return None;
        }
        // ready_at ignores `now`'s relation to tat only when tat is in the future.
        Some(self.pacer.ready_at(Instant::ZERO))
    }

    pub(super) fn stop(&mut self, now: Instant, reason: StopReason) -> Output {
        if self.stage != Stage::Stopped {
            self.stage = Stage::Stopped;
            match &reason {
                StopReason::Failed { kind, message } => {
                    self.status.phase = Phase::Failed;
                    self.status.last_error = Some(format!("{}: {message}", kind.name()));
                    self.status.set_condition(
                        now,
                        C::Available,
                        false,
                        kind.name(),
                        message.clone(),
                    );
                }
                StopReason::Shutdown => {
                    self.status.set_condition(
                        now,
                        C::Available,
                        false,
                        "Shutdown",
                        "agent stopped",
                    );
                }
                StopReason::Drained => {}
            }
            // Commands not yet handed out are abandoned; nothing new is written.
            self.out.clear();
            self.retry.clear();
            self.stopped = Some(reason.clone());
        }
        Output::Stopped(reason)
    }

    pub(super) fn fail(&mut self, now: Instant, kind: FailKind, message: impl Into<String>) {
        let message = message.into();
        let cond = match kind {
            FailKind::EmptyTargetViolation => Some(C::EmptyTargetViolation),
            FailKind::PrefixConflict => Some(C::PrefixConflict),
            FailKind::DirectionConflict => Some(C::DirectionConflict),
            FailKind::SourceHistoryMismatch => Some(C::SourceHistoryMismatch),
            _ => None,
        };
        if let Some(c) = cond {
            self.status
                .set_condition(now, c, true, kind.name(), message.clone());
        }
        self.stop(now, StopReason::Failed { kind, message });
    }
}
