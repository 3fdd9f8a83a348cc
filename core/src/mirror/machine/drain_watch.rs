//! Saying why a drain does not finish.
//!
//! A drain ends in a cut-over or a failure, but it can also wait: on a full target, a pause,
//! an unreachable cluster, a source that compacts past every verification pass, or a bug.
//! An operator running a cut-over must not have to guess which, so while a drain is asked
//! for, `CutoverReady` is False with reason `Draining` as long as the drain shows progress,
//! and names what blocks it (and what to do) once it has shown none for [`DRAIN_STALL_AFTER`],
//! or at once when it goes round in a loop that progress cannot end (passes that cannot pin
//! the watermark, a resync loop). Progress is what the status shows moving
//! ([`Status::drain_progress`]).

use super::*;

/// How long a drain may show no progress before `CutoverReady` names what blocks it.
pub const DRAIN_STALL_AFTER: Duration = Duration::from_secs(60);

/// The `CutoverReady` reason while a drain moves.
pub const DRAIN_PROGRESSING: &str = "Draining";

/// The `CutoverReady` reason when a drain shows no progress and nothing known blocks it.
const STALLED: &str = "Stalled";

/// Verification rounds in a row that could not pin the watermark before the drain says the
/// source's compaction is what keeps it from finishing.
const UNPINNED_ROUNDS_BLOCK: u32 = 2;

/// What the status shows moving ([`Status::drain_progress`]).
type ProgressMark = [i64; 7];

/// What the drain watch remembers.
#[derive(Debug, Clone)]
pub(super) struct DrainWatch {
    /// When the drain last showed progress (or was asked for).
    since: Instant,
    mark: ProgressMark,
    /// Verification rounds in a row that compared against an unpinned source.
    pub(super) unpinned_rounds: u32,
}

impl Mirror {
    /// When the drain watch next needs to look, if it is not already reporting a block.
    pub(super) fn drain_watch_deadline(&self) -> Option<Instant> {
        let w = self.drain.watch.as_ref()?;
        let reported = self
            .status
            .conditions
            .get(&C::CutoverReady)
            .is_some_and(|c| c.reason != DRAIN_PROGRESSING);
        (!reported).then(|| w.since + DRAIN_STALL_AFTER)
    }

    /// Refreshes `CutoverReady` while a drain is asked for (called with every status refresh).
    pub(super) fn watch_drain(&mut self, now: Instant) {
        if !self.drain.requested || self.life.stage == Stage::Stopped {
            return;
        }
        let mark = self.status.drain_progress();
        let w = self.drain.watch.get_or_insert(DrainWatch {
            since: now,
            mark,
            unpinned_rounds: 0,
        });
        if w.mark != mark {
            w.mark = mark;
            w.since = now;
        }
        let idle = now.saturating_duration_since(w.since);
        let mut block = match self.drain_loop() {
            Some(block) => Some(block),
            None if idle >= DRAIN_STALL_AFTER => Some(self.drain_block()),
            None => None,
        };
        let was = self.status.conditions.get(&C::CutoverReady);
        let cleared = was.is_some_and(|c| c.reason != DRAIN_PROGRESSING && c.reason != STALLED);
        if cleared && block.as_ref().is_some_and(|(r, _)| r == STALLED) {
            // The known block (a pause, a full target, ...) went away: that is movement,
            // and the drain gets the bound again to show progress before it is Stalled.
            if let Some(w) = &mut self.drain.watch {
                w.since = now;
            }
            block = None;
        }
        let (reason, message) =
            block.unwrap_or_else(|| (DRAIN_PROGRESSING.to_string(), self.drain_stage().into()));
        self.status
            .set_condition(now, C::CutoverReady, false, &reason, message);
    }

    /// A loop the drain cannot leave by itself, even though it keeps reading.
    fn drain_loop(&self) -> Option<(String, String)> {
        let unpinned = self.drain.watch.as_ref().map_or(0, |w| w.unpinned_rounds);
        if unpinned >= UNPINNED_ROUNDS_BLOCK {
            return Some((
                "WatermarkCompacted".into(),
                format!(
                    "the drain cannot finish: {unpinned} verification passes in a row found the watermark compacted on the source before they could compare at it (a pass at the drain snapshot above it proves a clean copy but repairs nothing). Lengthen the source's compaction retention (or pause its automatic compaction) until the cut-over; the drain retries by itself"
                ),
            ));
        }
        if self.status.condition(C::ResyncLoopDetected) {
            return Some((
                "ResyncLoop".into(),
                "the drain cannot finish: the source compacts past the mirror faster than it can copy the range, so every resync starts over. Lengthen the source's compaction retention until the cut-over; the drain goes on by itself".into(),
            ));
        }
        None
    }

    /// What blocks a drain that has shown no progress for [`DRAIN_STALL_AFTER`], and what
    /// to do. The message does not count the seconds, so it does not change while it holds.
    fn drain_block(&self) -> (String, String) {
        let (reason, what) = if self.life.paused {
            (
                "Paused",
                "the agent is paused. Resume it (control `resume`) and the drain goes on".into(),
            )
        } else if self.life.stage == Stage::Parked || self.status.condition(C::TargetQuotaExhausted)
        {
            (
                "TargetQuotaExhausted",
                "the target's NOSPACE alarm refuses every write, the cut-over included. Free space on the target (compact and defragment it, or raise --quota-backend-bytes), then `etcdctl alarm disarm`; the drain resumes by itself".into(),
            )
        } else if self.status_false(C::SourceReachable) {
            (
                "SourceUnreachable",
                "the source cluster does not answer. Check its endpoints, network and credentials; the drain resumes when it answers".into(),
            )
        } else if self.status_false(C::TargetReachable) {
            (
                "TargetUnreachable",
                "the target cluster does not answer. Check its endpoints, network and credentials; the drain resumes when it answers".into(),
            )
        } else if self.status.condition(C::TargetThrottled) {
            (
                "TargetThrottled",
                "the target keeps refusing writes as too many requests. Lower the load on the target or raise its limits; the drain resumes when writes land".into(),
            )
        } else {
            (
                STALLED,
                format!(
                    "nothing the drain waits for is known to block it ({}). This is not expected: keep this status and the agent's log, then restart the agent (the drain starts over from the fence)",
                    self.drain_step()
                ),
            )
        };
        (
            reason.to_string(),
            format!(
                "the drain has made no progress for {} s or more: {what}",
                DRAIN_STALL_AFTER.as_secs()
            ),
        )
    }

    fn status_false(&self, c: C) -> bool {
        self.status.conditions.get(&c).is_some_and(|c| !c.status)
    }

    /// Where the drain is. The `Draining` message is this alone, so it changes with the
    /// step, not with every revision (the status has the watermark and the drain target).
    fn drain_stage(&self) -> &'static str {
        match self.life.stage {
            Stage::Connecting | Stage::Fencing => "connecting",
            Stage::Genesis => "initial sync",
            Stage::Parked => "parked",
            Stage::Stopped => "stopped",
            Stage::Tail if self.recon.pass.is_some() => "verifying",
            Stage::Tail => "catching up",
        }
    }

    /// Where the drain is, with the revisions, for a block's message.
    fn drain_step(&self) -> String {
        let w = self.status.last_applied_revision;
        let stage = self.drain_stage();
        match self.status.drain_target_revision {
            Some(t) => format!("{stage}: watermark {w}, drain target {t}"),
            None => format!("{stage}: watermark {w}, drain target not read yet"),
        }
    }
}
