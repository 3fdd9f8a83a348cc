//! Kubernetes Events on an EtcdMirror: which changes of the agent's status an operator sees
//! in `kubectl describe` and `kubectl get events`.
//!
//! [`derive`] is pure: it compares two statuses and names what happened, with reasons that are
//! API constants ([`reason`]). Publishing (deduplication into event series by kube-runtime's
//! recorder, and a per-reason rate limit) is the agent's job.

use tidemark_core::mirror::{ConditionType, Phase, Status};

/// Event reasons. A phase entered is reported under the phase's name; a failure under the
/// failure kind (`FenceLost`, `SourceHistoryMismatch`, ...); a condition that became true
/// under the condition's type.
pub mod reason {
    pub const INITIAL_SYNC: &str = "InitialSync";
    pub const SYNCING: &str = "Syncing";
    pub const DRAINING: &str = "Draining";
    pub const DRAINED: &str = "Drained";
    pub const DEGRADED: &str = "Degraded";
    pub const PAUSED: &str = "Paused";
    /// A failure whose kind is unknown (the kind is the reason otherwise).
    pub const FAILED: &str = "Failed";
    /// The fence moved to another holder: this agent stopped writing.
    pub const FENCE_LOST: &str = "FenceLost";
    pub const RESYNC_LOOP_DETECTED: &str = "ResyncLoopDetected";
    pub const TARGET_QUOTA_EXHAUSTED: &str = "TargetQuotaExhausted";
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    pub const CUTOVER_READY: &str = "CutoverReady";
    /// A drain shows no progress, or loops; the note names what blocks it.
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// The operator created the agent's Deployment.
    pub const AGENT_CREATED: &str = "AgentCreated";
    /// The spec changed (other than `mode`), and the operator rolled the agent pod.
    pub const AGENT_UPDATED: &str = "AgentUpdated";
    /// The operator cannot run an agent that would work for this spec; the note says why.
    pub const AGENT_SPEC_INVALID: &str = "AgentSpecInvalid";
}

/// The `action` of the operator's events.
pub const OPERATOR_ACTION: &str = "Reconcile";

/// The `action` every event of the agent carries (events.k8s.io requires one).
pub const ACTION: &str = "Mirror";

/// One event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorEvent {
    /// Warning rather than Normal.
    pub warning: bool,
    pub reason: String,
    /// Human-readable detail (events.k8s.io caps notes at 1 KiB; see [`MAX_NOTE`]).
    pub note: String,
}

/// Longest note events.k8s.io accepts.
pub const MAX_NOTE: usize = 1024;

/// `note` cut to [`MAX_NOTE`] bytes (at a character boundary, ending in "...").
pub fn truncate_note(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

fn event(warning: bool, reason: &str, note: impl Into<String>) -> MirrorEvent {
    MirrorEvent {
        warning,
        reason: reason.to_string(),
        note: truncate_note(note.into()),
    }
}

/// What changed from `prev` (none before the first status) to `next`, as events.
pub fn derive(prev: Option<&Status>, next: &Status) -> Vec<MirrorEvent> {
    let mut out = Vec::new();
    let prev_phase = prev.map(|p| p.phase);
    if prev_phase != Some(next.phase) {
        let from = prev_phase.map_or_else(|| "start".to_string(), |p| format!("{p:?}"));
        let note = format!(
            "{from} -> {:?} at watermark {} (source revision {})",
            next.phase, next.last_applied_revision, next.source_revision
        );
        let phase_event = match next.phase {
            Phase::InitialSync => Some(event(false, reason::INITIAL_SYNC, note)),
            Phase::Syncing => Some(event(false, reason::SYNCING, note)),
            Phase::Draining => Some(event(false, reason::DRAINING, note)),
            Phase::Drained => Some(event(false, reason::DRAINED, note)),
            Phase::Paused => Some(event(false, reason::PAUSED, note)),
            Phase::Degraded => Some(event(
                true,
                reason::DEGRADED,
                format!(
                    "{note}: {}",
                    next.last_error.as_deref().unwrap_or("retrying")
                ),
            )),
            Phase::Failed => {
                let c = next.conditions.get(&ConditionType::Available);
                let kind = c
                    .map(|c| c.reason.as_str())
                    .filter(|r| !r.is_empty())
                    .unwrap_or(reason::FAILED);
                let message = c.map(|c| c.message.as_str()).unwrap_or_default();
                Some(event(true, kind, format!("{note}: {message}")))
            }
            Phase::Pending | Phase::Connecting => None,
        };
        out.extend(phase_event);
    }
    // A drain that stopped moving: `CutoverReady` False with a reason other than the one
    // a progressing drain carries (see the core's drain watch).
    let blocked = |s: &Status| {
        s.conditions
            .get(&ConditionType::CutoverReady)
            .filter(|c| !c.status && !c.reason.is_empty() && c.reason != "Draining")
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    if let Some((why, message)) = blocked(next) {
        if prev.and_then(blocked).map(|b| b.0) != Some(why.clone()) {
            out.push(event(
                true,
                reason::DRAIN_BLOCKED,
                format!("{why}: {message}"),
            ));
        }
    }
    for (type_, warning) in [
        (ConditionType::ResyncLoopDetected, true),
        (ConditionType::TargetQuotaExhausted, true),
        (ConditionType::DriftDetected, true),
        (ConditionType::CutoverReady, false),
    ] {
        let was = prev.is_some_and(|p| p.condition(type_));
        if next.condition(type_) && !was {
            let message = next
                .conditions
                .get(&type_)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            out.push(event(warning, type_.name(), message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_core::Instant;

    fn status(phase: Phase) -> Status {
        Status {
            phase,
            ..Status::default()
        }
    }

    #[test]
    fn phases_entered_are_events_and_staying_is_not() {
        let s = status(Phase::Syncing);
        let e = derive(None, &s);
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].reason.as_str(), e[0].warning),
            (reason::SYNCING, false)
        );
        assert!(e[0].note.starts_with("start -> Syncing"), "{}", e[0].note);
        assert!(derive(Some(&s), &s).is_empty());
        assert!(derive(None, &status(Phase::Connecting)).is_empty());
        let d = derive(Some(&s), &status(Phase::Degraded));
        assert!(d[0].warning && d[0].reason == reason::DEGRADED);
    }

    #[test]
    fn a_failure_is_reported_under_its_kind() {
        let mut f = status(Phase::Failed);
        f.set_condition(
            Instant::ZERO,
            ConditionType::Available,
            false,
            "FenceLost",
            "another agent holds the fence (epoch 3)",
        );
        let e = derive(Some(&status(Phase::Syncing)), &f);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].reason, reason::FENCE_LOST);
        assert!(e[0].warning);
        assert!(e[0].note.contains("epoch 3"), "{}", e[0].note);
    }

    #[test]
    fn conditions_report_when_they_become_true() {
        let before = status(Phase::Syncing);
        let mut after = before.clone();
        after.set_condition(
            Instant::ZERO,
            ConditionType::DriftDetected,
            true,
            "Drift",
            "3 missing",
        );
        after.set_condition(
            Instant::ZERO,
            ConditionType::CutoverReady,
            true,
            "Verified",
            "drained at 42",
        );
        let e = derive(Some(&before), &after);
        let reasons: Vec<&str> = e.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, [reason::DRIFT_DETECTED, reason::CUTOVER_READY]);
        assert!(
            derive(Some(&after), &after).is_empty(),
            "no repeat while true"
        );
    }

    #[test]
    fn a_blocked_drain_is_a_warning_once_per_reason() {
        let mut draining = status(Phase::Draining);
        draining.set_condition(
            Instant::ZERO,
            ConditionType::CutoverReady,
            false,
            "Draining",
            "catching up",
        );
        assert!(derive(Some(&draining), &draining).is_empty());
        let mut full = draining.clone();
        full.set_condition(
            Instant::ZERO,
            ConditionType::CutoverReady,
            false,
            "TargetQuotaExhausted",
            "disarm NOSPACE on the target",
        );
        let e = derive(Some(&draining), &full);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].reason, reason::DRAIN_BLOCKED);
        assert!(e[0].warning);
        assert!(
            e[0].note.starts_with("TargetQuotaExhausted: disarm"),
            "{}",
            e[0].note
        );
        assert!(
            derive(Some(&full), &full).is_empty(),
            "not again for the same reason"
        );
    }

    #[test]
    fn notes_are_capped() {
        let mut f = status(Phase::Failed);
        f.set_condition(
            Instant::ZERO,
            ConditionType::Available,
            false,
            "X",
            "é".repeat(2000),
        );
        let e = derive(None, &f);
        assert!(e[0].note.len() <= MAX_NOTE);
    }
}
