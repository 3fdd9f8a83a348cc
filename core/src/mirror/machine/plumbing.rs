//! Command issue, timers and stopping.

use super::*;

/// Where the agent is in its life, and what the operator asked of it.
#[derive(Debug, Clone)]
pub(super) struct Lifecycle {
    pub(super) stage: Stage,
    /// Set once, when the agent stops; nothing is issued after it.
    pub(super) stopped: Option<StopReason>,
    /// Shutdown was asked for: the agent stops once no commit is in flight.
    pub(super) shutdown: bool,
    /// Paused by the operator: no new writes start.
    pub(super) paused: bool,
    /// The first `poll_output` began the connect sequence (the version probes).
    pub(super) started: bool,
    /// Genesis attempts begun, so that replies to a superseded attempt are ignored.
    pub(super) gen_seq: u64,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            stage: Stage::Connecting,
            stopped: None,
            shutdown: false,
            paused: false,
            started: false,
            gen_seq: 0,
        }
    }
}

/// The commands issued and not yet answered, and the outputs not yet polled.
#[derive(Debug, Clone)]
pub(super) struct Commands {
    pub(super) next_id: CommandId,
    pub(super) out: VecDeque<Output>,
    pub(super) inflight: BTreeMap<CommandId, Job>,
    /// Reads (and watch reopens) waiting out a backoff, in the order they failed.
    pub(super) retry: Vec<Retry>,
    /// The time of the input or poll being handled: when a command issued now goes out.
    pub(super) now: Instant,
    /// When each source read whose latency paces the bulk reads was issued.
    pub(super) timed: BTreeMap<CommandId, (Instant, ReadCost)>,
    /// Bulk source reads waiting for the source's share (`sync.sourceReadPercent`), in
    /// the order they were asked for.
    pub(super) deferred: VecDeque<Deferred>,
}

/// What a source read's latency says about the source (see `source_share.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadCost {
    /// One key, no walk: about the round trip.
    Point,
    /// A page or a count: source work, paced by `sync.sourceReadPercent`.
    Bulk,
}

/// A bulk source read held back by `sync.sourceReadPercent`; its command is built when
/// it goes (`command_for`).
#[derive(Debug, Clone)]
pub(super) struct Deferred {
    job: Job,
    since: Instant,
}

impl Job {
    /// How the job's latency is used to pace bulk source reads.
    fn read_cost(&self) -> Option<ReadCost> {
        match self {
            Job::ScanPage(_) | Job::Count { .. } => Some(ReadCost::Bulk),
            Job::ReadR0(_) | Job::WatchGuard { .. } | Job::WatchRecheck { .. } => {
                Some(ReadCost::Point)
            }
            _ => None,
        }
    }
}

impl Commands {
    /// Nothing issued yet; the first command gets id 1.
    pub(super) fn new() -> Commands {
        Commands {
            next_id: 1,
            out: VecDeque::new(),
            inflight: BTreeMap::new(),
            retry: Vec::new(),
            now: Instant::ZERO,
            timed: BTreeMap::new(),
            deferred: VecDeque::new(),
        }
    }
}

/// How fast the machine may act again after failures, throttles and full targets.
#[derive(Debug, Clone)]
pub(super) struct Pacing {
    pub(super) backoff: Backoff,
    pub(super) throttle: Backoff,
    pub(super) pacer: Pacer,
    pub(super) failures_in_row: u32,
    /// Target work waits until this time (backoff after a failed write).
    pub(super) hold_until: Option<Instant>,
    pub(super) quota_probe_at: Option<Instant>,
    pub(super) resume_at: Option<Instant>,
    /// The source's share of bulk reads (`sync.sourceReadPercent`).
    pub(super) share: SourceShare,
}

impl Mirror {
    pub(super) fn issue(&mut self, job: Job, cmd: Command) -> CommandId {
        let id = self.cmds.next_id;
        self.cmds.next_id += 1;
        if let Some(cost) = job.read_cost() {
            self.cmds.timed.insert(id, (self.cmds.now, cost));
        }
        self.cmds.inflight.insert(id, job);
        self.note_issue(id, &cmd);
        self.cmds.out.push_back(Output::Command { id, cmd });
        id
    }

    /// Issues a bulk source read (a scan page, a count read) now, or once the source's
    /// share allows it (`sync.sourceReadPercent`; see `source_share.rs`).
    pub(super) fn issue_bulk_read(&mut self, job: Job, cmd: Command) {
        let now = self.cmds.now;
        if self.cmds.deferred.is_empty() && self.pacing.share.ready(now) {
            self.issue(job, cmd);
        } else {
            self.cmds.deferred.push_back(Deferred { job, since: now });
        }
    }

    /// Takes the latency of a completed source read into the pacing of bulk reads.
    pub(super) fn note_read_latency(&mut self, now: Instant, id: CommandId, ok: bool) {
        let Some((sent, cost)) = self.cmds.timed.remove(&id) else {
            return;
        };
        if !ok {
            // A failure's latency is the network's or a timeout's, not the source's work.
            return;
        }
        let latency = now.saturating_duration_since(sent);
        match cost {
            ReadCost::Point => self.pacing.share.note_point_read(latency),
            ReadCost::Bulk => self.pacing.share.note_bulk_read(now, latency),
        }
    }

    /// Issues the bulk reads whose wait is over, each as its scan or count would make it
    /// now; those of a superseded genesis (or a finished count) are dropped.
    fn issue_deferred_reads(&mut self, now: Instant) {
        while self.pacing.share.ready(now) {
            let Some(d) = self.cmds.deferred.pop_front() else {
                return;
            };
            let seq = match d.job {
                Job::ScanPage(seq) | Job::Count { seq, .. } => seq,
                // Only scan pages and count reads are held back.
                _ => continue,
            };
            if self.gen.as_ref().is_none_or(|g| g.seq != seq) {
                continue;
            }
            let Some(cmd) = self.command_for(&d.job) else {
                continue;
            };
            self.status.source_read_wait_seconds +=
                now.saturating_duration_since(d.since).as_secs_f64();
            self.issue(d.job, cmd);
        }
    }

    pub(super) fn retry_later(&mut self, now: Instant, job: Job, cmd: Command, throttled: bool) {
        let delay = if throttled {
            self.pacing.throttle.next_delay(&mut self.rng)
        } else {
            self.pacing.backoff.next_delay(&mut self.rng)
        };
        let at = now + delay;
        self.status.backoff = Some(BackoffState {
            kind: if throttled { "throttled" } else { "transient" }.into(),
            attempt: if throttled {
                self.pacing.throttle.attempt()
            } else {
                self.pacing.backoff.attempt()
            },
            until: at,
        });
        self.cmds.retry.push(Retry { at, cmd, job });
    }

    pub(super) fn fire_timers(&mut self, now: Instant) {
        if self.cmds.retry.iter().any(|r| r.at <= now) {
            let (due, later): (Vec<Retry>, Vec<Retry>) = std::mem::take(&mut self.cmds.retry)
                .into_iter()
                .partition(|r| r.at <= now);
            self.cmds.retry = later;
            self.status.backoff = None;
            for r in due {
                if matches!(r.job, Job::ProveHistory { round, .. } if !self.proof_is_current(round))
                {
                    // A retry of a round that passed or was replaced: its answer would be
                    // ignored, so it would only cost the source a read.
                    continue;
                }
                self.issue(r.job, r.cmd);
            }
        }
        self.issue_deferred_reads(now);
        if self.pacing.hold_until.is_some_and(|t| t <= now) {
            self.pacing.hold_until = None;
            self.status.backoff = None;
        }
        if self.pacing.resume_at.is_some_and(|t| t <= now) {
            self.pacing.resume_at = None;
            self.status.backoff = None;
            self.resume_from_record(now);
        }
        if self.pacing.quota_probe_at.is_some_and(|t| t <= now) && !self.committing() {
            self.pacing.quota_probe_at = None;
            if self.fence.record.is_some() {
                self.work.push_front(Work::Fence(FenceWhy::QuotaProbe));
            } else {
                // Parked before the claim landed: the claim itself is the probe.
                self.life.stage = Stage::Fencing;
                self.status.backoff = None;
                self.resume_from_record(now);
            }
        }
        if let (Some(t), Some(w)) = (self.tail.next_progress_request, self.tail.watch) {
            if t <= now {
                self.tail.next_progress_request = Some(now + self.cfg.sync.progress_interval);
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
            self.recon
                .next_reconcile
                .filter(|t| *t > now && self.life.stage == Stage::Tail),
            self.cmds.retry.iter().map(|r| r.at).min(),
            self.pacing.hold_until,
            self.pacing.resume_at,
            self.pacing.quota_probe_at,
            self.tail.watch.and(self.tail.next_progress_request),
            self.gen.as_ref().and_then(|g| g.probe_at),
            self.pacer_deadline(),
            // The gap only matters to work that waits for it: new work, or a re-send.
            self.pipeline.send_due().filter(|_| {
                !self.work.is_empty() || self.pipeline.chain.iter().any(|l| l.queued.is_some())
            }),
            (!self.cmds.deferred.is_empty())
                .then(|| self.pacing.share.wait_until(now))
                .flatten(),
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
        if self.committing() || self.work.is_empty() || !self.pacing.pacer.enabled() {
            return None;
        }
        // ready_at ignores `now`'s relation to tat only when tat is in the future.
        Some(self.pacing.pacer.ready_at(Instant::ZERO))
    }

    pub(super) fn stop(&mut self, now: Instant, reason: StopReason) -> Output {
        if self.life.stage != Stage::Stopped {
            self.life.stage = Stage::Stopped;
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
            self.cmds.out.clear();
            self.cmds.retry.clear();
            self.life.stopped = Some(reason.clone());
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
