//! The drain's bounded-silence invariant (issue R1): a drain that was asked for either
//! cuts over, fails, or, once it has shown no progress for the core's bound, says what
//! blocks it. "Says" means `CutoverReady` False with a reason other than `Draining`; the
//! simulator judges progress by what the status shows moving, as an operator would.

use crate::invariants::Violation;
use std::collections::BTreeMap;
use tidemark_core::mirror::{ConditionType, Status, DRAIN_PROGRESSING, DRAIN_STALL_AFTER};

/// Time the simulator allows past the core's bound (its own samples lag the core's).
const SLACK_NS: u64 = 5_000_000_000;

/// Per agent incarnation: the last mark seen and when it was first seen.
#[derive(Debug, Default)]
pub struct DrainWatch {
    seen: BTreeMap<(u32, u32), ([i64; 7], u64)>,
    /// The reason each incarnation last reported for a blocked drain (rising edges count).
    reported: BTreeMap<(u32, u32), String>,
}

impl DrainWatch {
    /// Looks at a running agent in a drain at `now_ns`. Returns the reason the agent newly
    /// reports for a blocked drain (for coverage), or the violation.
    pub fn check(
        &mut self,
        agent: (u32, u32),
        now_ns: u64,
        status: &Status,
    ) -> Result<Option<String>, Violation> {
        let m = status.drain_progress();
        let since = match self.seen.get(&agent) {
            Some((old, since)) if *old == m => *since,
            _ => {
                self.seen.insert(agent, (m, now_ns));
                now_ns
            }
        };
        let cond = status.conditions.get(&ConditionType::CutoverReady);
        let blocked = cond.filter(|c| !c.status && c.reason != DRAIN_PROGRESSING);
        if let Some(c) = blocked {
            if self.reported.get(&agent) != Some(&c.reason) {
                self.reported.insert(agent, c.reason.clone());
                return Ok(Some(c.reason.clone()));
            }
            return Ok(None);
        }
        self.reported.remove(&agent);
        let bound = u64::try_from(DRAIN_STALL_AFTER.as_nanos()).unwrap_or(u64::MAX) + SLACK_NS;
        if now_ns.saturating_sub(since) > bound {
            return Err(Violation {
                invariant: "drain-silent".into(),
                at_ns: now_ns,
                detail: format!(
                    "agent {}.{} has been in a drain for {} ms with no progress and CutoverReady says {:?} (phase {:?}, watermark {}, drain target {:?}, last error {:?})",
                    agent.0,
                    agent.1,
                    (now_ns - since) / 1_000_000,
                    cond.map(|c| (&c.reason, &c.message)),
                    status.phase,
                    status.last_applied_revision,
                    status.drain_target_revision,
                    status.last_error
                ),
            });
        }
        Ok(None)
    }
}
