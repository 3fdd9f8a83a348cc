//! The recovery decision, stored on the Composition as `tidemark.dev/recovery-decision`.
//!
//! Recording a new synthesis supersedes the history recovery needs, so the decision for a
//! synthesis UUID is made (and persisted) first; the recorder waits for a finished one.
//! JSON: `{"synthesisUUID":"…","outcome":"Applied","tombstones":2,"time":"…"}`, plus
//! `"reason"` for `InventoryInvalid`. Operators read it with kubectl.

use super::select::Reason;
use super::timestamp::{Timestamp, TimestampError};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The Composition annotation holding the decision.
pub const DECISION_ANNOTATION: &str = "tidemark.dev/recovery-decision";

/// What recovery decided for one synthesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The previous synthesis and all its slices exist: Eno's own tombstones cover it.
    NotNeeded,
    /// `n` tombstones were computed and deleted (or found already gone / orphaned).
    Applied(u64),
    /// `n` tombstones were computed; plan-only mode waits for an operator (`recover --apply`
    /// or `recover --skip`). Not finished: recording waits.
    Planned(u64),
    /// The plan would delete more than the budget allows: nothing was deleted, and the plan
    /// waits for `recover --apply --allow-deletions N` (or `--skip`). Not finished.
    Held {
        /// Tombstones planned (protected ones included).
        tombstones: u64,
        /// Deletions the plan would make.
        deletions: u64,
        /// The most allowed without an operator.
        limit: u64,
    },
    /// An operator chose not to recover (`recover --skip`).
    Skipped,
    /// The lineage has no inventory.
    InventoryNotFound,
    /// The history is doubtful; no tombstones.
    InventoryInvalid(Reason),
}

impl Outcome {
    /// The JSON name of the outcome.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::NotNeeded => "NotNeeded",
            Outcome::Applied(_) => "Applied",
            Outcome::Planned(_) => "Planned",
            Outcome::Held { .. } => "Held",
            Outcome::Skipped => "Skipped",
            Outcome::InventoryNotFound => "InventoryNotFound",
            Outcome::InventoryInvalid(_) => "InventoryInvalid",
        }
    }

    /// The tombstone count the outcome carries (0 when none).
    pub fn tombstones(self) -> u64 {
        match self {
            Outcome::Applied(n) | Outcome::Planned(n) => n,
            Outcome::Held { tombstones, .. } => tombstones,
            _ => 0,
        }
    }

    /// Finished decisions let recording proceed; `Planned` and `Held` do not.
    pub fn is_finished(self) -> bool {
        !matches!(self, Outcome::Planned(_) | Outcome::Held { .. })
    }
}

/// A decision for one synthesis UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The current synthesis UUID it was made for.
    pub synthesis_uuid: String,
    /// The outcome.
    pub outcome: Outcome,
    /// Wall-clock time of the decision (given by the driver; core has no clock).
    pub time: Timestamp,
}

/// The annotation value is not a decision this version understands.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid recovery decision {value:?}: {why}")]
pub struct DecisionError {
    /// The annotation value.
    pub value: String,
    /// What is wrong.
    pub why: String,
}

/// Why a well-formed annotation JSON is still not a decision (the `why` of a
/// [`DecisionError`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
enum WireError {
    /// `time` is not an RFC 3339 timestamp.
    #[error(transparent)]
    Time(#[from] TimestampError),
    /// `deletions` or `limit` on an outcome other than `Held` (or on `Held` with a reason).
    #[error("outcome {0:?} with deletions or limit")]
    UnexpectedCounts(String),
    /// An unknown outcome, or a reason where none belongs (or none where one does).
    #[error("outcome {outcome:?} with reason {reason:?}")]
    UnexpectedReason {
        /// The outcome's name.
        outcome: String,
        /// The reason given.
        reason: Option<Reason>,
    },
    /// `synthesisUUID` is empty.
    #[error("empty synthesisUUID")]
    EmptySynthesisUuid,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(rename = "synthesisUUID")]
    synthesis_uuid: String,
    outcome: String,
    tombstones: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<Reason>,
    /// `Held` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletions: Option<u64>,
    /// `Held` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    time: String,
}

impl Decision {
    /// True when this decision lets recording of `synthesis_uuid` proceed.
    pub fn finishes(&self, synthesis_uuid: &str) -> bool {
        self.synthesis_uuid == synthesis_uuid && self.outcome.is_finished()
    }

    fn to_wire(&self) -> Wire {
        Wire {
            synthesis_uuid: self.synthesis_uuid.clone(),
            outcome: self.outcome.name().into(),
            tombstones: self.outcome.tombstones(),
            reason: match self.outcome {
                Outcome::InventoryInvalid(r) => Some(r),
                _ => None,
            },
            deletions: match self.outcome {
                Outcome::Held { deletions, .. } => Some(deletions),
                _ => None,
            },
            limit: match self.outcome {
                Outcome::Held { limit, .. } => Some(limit),
                _ => None,
            },
            time: self.time.format_rfc3339_nanos(),
        }
    }

    fn from_wire(w: Wire) -> Result<Decision, WireError> {
        let time = Timestamp::parse_rfc3339(&w.time)?;
        let outcome = match (w.outcome.as_str(), w.reason, w.deletions, w.limit) {
            ("Held", None, Some(deletions), Some(limit)) => Outcome::Held {
                tombstones: w.tombstones,
                deletions,
                limit,
            },
            (o, _, Some(_), _) | (o, _, _, Some(_)) => {
                return Err(WireError::UnexpectedCounts(o.to_string()))
            }
            ("NotNeeded", None, ..) => Outcome::NotNeeded,
            ("Applied", None, ..) => Outcome::Applied(w.tombstones),
            ("Planned", None, ..) => Outcome::Planned(w.tombstones),
            ("Skipped", None, ..) => Outcome::Skipped,
            ("InventoryNotFound", None, ..) => Outcome::InventoryNotFound,
            ("InventoryInvalid", Some(r), ..) => Outcome::InventoryInvalid(r),
            (o, reason, ..) => {
                return Err(WireError::UnexpectedReason {
                    outcome: o.to_string(),
                    reason,
                })
            }
        };
        if w.synthesis_uuid.is_empty() {
            return Err(WireError::EmptySynthesisUuid);
        }
        Ok(Decision {
            synthesis_uuid: w.synthesis_uuid,
            outcome,
            time,
        })
    }

    /// The annotation value (compact JSON, fields in a fixed order).
    pub fn to_json(&self) -> String {
        // Serialising a struct of strings and integers cannot fail.
        serde_json::to_string(&self.to_wire()).unwrap_or_default()
    }

    /// Parses an annotation value written by [`Decision::to_json`] (either time precision).
    pub fn parse(value: &str) -> Result<Decision, DecisionError> {
        let err = |why: String| DecisionError {
            value: value.to_string(),
            why,
        };
        let w: Wire = serde_json::from_str(value).map_err(|e| err(e.to_string()))?;
        Decision::from_wire(w).map_err(|e| err(e.to_string()))
    }
}

impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Decision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Decision::from_wire(Wire::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_outcome() {
        let t = Timestamp::parse_rfc3339("2026-12-02T14:03:04.5Z").unwrap();
        let mut all = vec![
            Outcome::NotNeeded,
            Outcome::Applied(3),
            Outcome::Planned(2),
            Outcome::Held {
                tombstones: 120,
                deletions: 101,
                limit: 100,
            },
            Outcome::Skipped,
            Outcome::InventoryNotFound,
        ];
        all.extend(Reason::ALL.iter().map(|r| Outcome::InventoryInvalid(*r)));
        for o in all {
            let d = Decision {
                synthesis_uuid: "u".into(),
                outcome: o,
                time: t,
            };
            assert_eq!(Decision::parse(&d.to_json()).unwrap(), d);
            assert_eq!(
                d.finishes("u"),
                !matches!(o, Outcome::Planned(_) | Outcome::Held { .. })
            );
            assert!(!d.finishes("other"));
        }
    }

    #[test]
    fn exact_json_and_rejects() {
        let d = Decision {
            synthesis_uuid: "u1".into(),
            outcome: Outcome::InventoryInvalid(Reason::HashMismatch),
            time: Timestamp::parse_rfc3339("2026-12-02T14:03:04Z").unwrap(),
        };
        assert_eq!(
            d.to_json(),
            r#"{"synthesisUUID":"u1","outcome":"InventoryInvalid","tombstones":0,"reason":"HashMismatch","time":"2026-12-02T14:03:04.000000000Z"}"#
        );
        for bad in [
            "",
            "{}",
            r#"{"synthesisUUID":"u","outcome":"Applied","tombstones":1,"time":"x"}"#,
            r#"{"synthesisUUID":"u","outcome":"InventoryInvalid","tombstones":0,"time":"2026-12-02T14:03:04Z"}"#,
            r#"{"synthesisUUID":"u","outcome":"Nope","tombstones":0,"time":"2026-12-02T14:03:04Z"}"#,
            r#"{"synthesisUUID":"u","outcome":"Held","tombstones":3,"time":"2026-12-02T14:03:04Z"}"#,
            r#"{"synthesisUUID":"u","outcome":"Applied","tombstones":3,"limit":1,"time":"2026-12-02T14:03:04Z"}"#,
            r#"{"synthesisUUID":"u","outcome":"InventoryInvalid","reason":"Bogus","tombstones":0,"time":"2026-12-02T14:03:04Z"}"#,
        ] {
            assert!(Decision::parse(bad).is_err(), "{bad}");
        }
        let ok = Decision::parse(
            r#"{"synthesisUUID":"u","outcome":"Applied","tombstones":1,"time":"2026-12-02T14:03:04Z"}"#,
        )
        .unwrap();
        assert_eq!(ok.outcome, Outcome::Applied(1));
    }

    #[test]
    fn wire_messages_are_stable() {
        let why = |v: &str| Decision::parse(v).unwrap_err().why;
        let t = r#""time":"2026-12-02T14:03:04Z""#;
        assert_eq!(
            why(&format!(
                r#"{{"synthesisUUID":"u","outcome":"Held","tombstones":3,{t}}}"#
            )),
            "outcome \"Held\" with reason None"
        );
        assert_eq!(
            why(&format!(
                r#"{{"synthesisUUID":"u","outcome":"Nope","reason":"HashMismatch","tombstones":0,{t}}}"#
            )),
            "outcome \"Nope\" with reason Some(HashMismatch)"
        );
        assert_eq!(
            why(&format!(
                r#"{{"synthesisUUID":"u","outcome":"Applied","tombstones":3,"limit":1,{t}}}"#
            )),
            "outcome \"Applied\" with deletions or limit"
        );
        assert_eq!(
            why(&format!(
                r#"{{"synthesisUUID":"","outcome":"Applied","tombstones":1,{t}}}"#
            )),
            "empty synthesisUUID"
        );
        let e = why(r#"{"synthesisUUID":"u","outcome":"Applied","tombstones":1,"time":"x"}"#);
        assert!(e.starts_with("invalid RFC 3339 timestamp \"x\""), "{e}");
    }
}
