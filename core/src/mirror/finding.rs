//! What a source-history proof found, as data.
//!
//! The sentence an operator reads is this type's `Display`; status, the simulator and the
//! tests read the fields. A new finding is a new variant, so no caller has to parse text
//! (see docs/design.md, "Source history").

use crate::etcd::EventKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One field of the checkpoint's anchor that the key read back does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "field")]
pub enum AnchorField {
    /// The read returned another key than the anchor's.
    Key,
    ModRevision {
        got: i64,
        want: i64,
    },
    CreateRevision {
        got: i64,
        want: i64,
    },
    Version {
        got: i64,
        want: i64,
    },
    /// The value's digest differs (the value itself is never reported).
    Value,
}

/// How the key read back differs from the anchor the mirror recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "fields")]
pub enum AnchorDiff {
    /// The key does not exist at the revision read.
    Missing,
    /// The key exists and these fields differ (never empty).
    Differs(Vec<AnchorField>),
}

impl AnchorDiff {
    /// Whether this field differs.
    pub fn has(&self, field: AnchorField) -> bool {
        matches!(self, AnchorDiff::Differs(f) if f.contains(&field))
    }
}

impl fmt::Display for AnchorField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnchorField::Key => f.write_str("another key came back"),
            AnchorField::ModRevision { got, want } => {
                write!(f, "mod revision {got}, expected {want}")
            }
            AnchorField::CreateRevision { got, want } => {
                write!(f, "create revision {got}, expected {want}")
            }
            AnchorField::Version { got, want } => write!(f, "version {got}, expected {want}"),
            AnchorField::Value => f.write_str("its value differs"),
        }
    }
}

impl fmt::Display for AnchorDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnchorDiff::Missing => f.write_str("the key does not exist there"),
            AnchorDiff::Differs(fields) => {
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{field}")?;
                }
                Ok(())
            }
        }
    }
}

/// Why a replayed window since the anchor proves nothing either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "why", rename_all_fields = "camelCase")]
pub enum Unconfirmed {
    /// Fewer events came back, and this etcd drops a delete at the compact revision from
    /// watches (etcd #18089): the missing one may be that tombstone.
    TombstoneDropped,
    /// No event past the window came within `waited_seconds`, and this etcd's progress
    /// notifications cannot be trusted to say the window is complete.
    NoProgress { waited_seconds: u64 },
}

/// A fact about the source's history that a proof established. `watermark` is always the
/// checkpoint's; `key` is redacted as configured; revisions are source revisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "finding", rename_all_fields = "camelCase")]
pub enum HistoryFinding {
    /// The source refused, as a future revision, a revision it had already reached.
    RefusedReachedRevision {
        refused: i64,
        reached: i64,
        watermark: i64,
    },
    /// A read was answered at a revision below one the source had already reached.
    AnsweredBelowReached {
        answered: i64,
        reached: i64,
        watermark: i64,
    },
    /// The source refused the anchor's revision and its own revision is not known.
    AnchorNotReached { anchor: i64, watermark: i64 },
    /// The source is at revision `source`, below the anchor's revision.
    SourceBelowAnchor {
        source: i64,
        anchor: i64,
        watermark: i64,
    },
    /// Read pinned at `read_at`, the anchor key is not the put the mirror copied.
    AnchorDiffers {
        key: String,
        read_at: i64,
        anchor: i64,
        diff: AnchorDiff,
        watermark: i64,
        source: i64,
    },
    /// The anchor's revision is compacted; the key's last write is at the anchor's revision
    /// but is not the put the mirror copied.
    AnchorRewritten {
        key: String,
        anchor: i64,
        diff: AnchorDiff,
        watermark: i64,
        source: i64,
    },
    /// The anchor's revision is compacted and the key changed since: nothing proves or
    /// disproves the history, so the copy is resynced.
    AnchorCompacted {
        key: String,
        anchor: i64,
        compact: Option<i64>,
        watermark: i64,
        source: i64,
    },
    /// At connect, the history after the anchor is compacted, so the window up to the
    /// watermark cannot be replayed; the copy is resynced.
    WindowCompacted {
        anchor: i64,
        compact: i64,
        watermark: i64,
    },
    /// Replaying the window found an event the mirror never applied there.
    WindowExtraEvent {
        key: String,
        from: i64,
        kind: EventKind,
        at: i64,
        applied: u32,
        upto: i64,
    },
    /// Replaying the window found other events than the mirror applied (`found == applied`:
    /// the same number, different content).
    WindowMismatch {
        from: i64,
        upto: i64,
        found: u32,
        applied: u32,
    },
    /// Replaying the window neither proved nor disproved it; the copy is resynced.
    WindowUnconfirmed {
        from: i64,
        upto: i64,
        found: u32,
        applied: u32,
        why: Unconfirmed,
    },
}

impl fmt::Display for HistoryFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use HistoryFinding as H;
        match self {
            H::RefusedReachedRevision { refused, reached, watermark } => write!(
                f,
                "the source refused revision {refused} as a future revision, though it had already reached revision {reached} (checkpoint watermark {watermark})"
            ),
            H::AnsweredBelowReached { answered, reached, watermark } => write!(
                f,
                "the source answered at revision {answered}, below revision {reached} that it had already reached (checkpoint watermark {watermark})"
            ),
            H::AnchorNotReached { anchor, watermark } => write!(
                f,
                "the source has not reached revision {anchor}, where this mirror copied the checkpoint's anchor (checkpoint watermark {watermark})"
            ),
            H::SourceBelowAnchor { source, anchor, watermark } => write!(
                f,
                "the source is at revision {source}, below revision {anchor} where this mirror copied the checkpoint's anchor (checkpoint watermark {watermark})"
            ),
            H::AnchorDiffers { key, read_at, anchor, diff, watermark, source } => write!(
                f,
                "at source revision {read_at} the key {key} should hold the put this mirror copied at revision {anchor}, but {diff} (checkpoint watermark {watermark}, source revision {source})"
            ),
            H::AnchorRewritten { key, anchor, diff, watermark, source } => write!(
                f,
                "the key {key} was last written at source revision {anchor}, as when this mirror copied it, but {diff} (checkpoint watermark {watermark}, source revision {source})"
            ),
            H::AnchorCompacted { key, anchor, compact, watermark, source } => {
                let compacted = match compact {
                    Some(c) if *c > 0 => format!("compacted (compact revision {c})"),
                    _ => "compacted".to_string(),
                };
                write!(
                    f,
                    "the checkpoint's anchor at source revision {anchor} is {compacted} and the key {key} changed since, so the source cannot be proven to be the history the target copy came from (checkpoint watermark {watermark}, source revision {source})"
                )
            }
            H::WindowCompacted { anchor, compact, watermark } => write!(
                f,
                "the source's history after the checkpoint's anchor (revision {anchor}) is compacted (compact revision {compact}), so the events up to watermark {watermark} cannot be replayed"
            ),
            H::WindowExtraEvent { key, from, kind, at, applied, upto } => write!(
                f,
                "replaying the source from revision {from} found {} at revision {at} for key {key}, which this mirror never saw there: after the anchor it applied {applied} in-range event(s) up to revision {upto}",
                if *kind == EventKind::Put { "a put" } else { "a delete" },
            ),
            H::WindowMismatch { from, upto, found, applied } => write!(
                f,
                "replaying the source from revision {from} to {upto} found {found} in-range event(s) where this mirror applied {applied}{}",
                if found == applied { ", and they differ" } else { "" }
            ),
            H::WindowUnconfirmed { from, upto, found, applied, why: Unconfirmed::TombstoneDropped } => write!(
                f,
                "replaying the source from revision {from} to {upto} found {found} in-range event(s) where this mirror applied {applied}, and this etcd version drops a delete at the compact revision from watches (etcd #18089), so the window cannot be proven"
            ),
            H::WindowUnconfirmed { from, upto, found, applied, why: Unconfirmed::NoProgress { waited_seconds } } => write!(
                f,
                "replaying the source from revision {from} to {upto} found {found} of the {applied} in-range event(s) this mirror applied, and no event past revision {upto} came within {waited_seconds} s; this etcd version's progress notifications cannot be trusted (before 3.4.31/3.5.13), so nothing proves the window complete"
            ),
        }
    }
}

impl HistoryFinding {
    /// The variant's stable name (coverage labels, metrics).
    pub fn name(&self) -> &'static str {
        match self {
            HistoryFinding::RefusedReachedRevision { .. } => "RefusedReachedRevision",
            HistoryFinding::AnsweredBelowReached { .. } => "AnsweredBelowReached",
            HistoryFinding::AnchorNotReached { .. } => "AnchorNotReached",
            HistoryFinding::SourceBelowAnchor { .. } => "SourceBelowAnchor",
            HistoryFinding::AnchorDiffers { .. } => "AnchorDiffers",
            HistoryFinding::AnchorRewritten { .. } => "AnchorRewritten",
            HistoryFinding::AnchorCompacted { .. } => "AnchorCompacted",
            HistoryFinding::WindowCompacted { .. } => "WindowCompacted",
            HistoryFinding::WindowExtraEvent { .. } => "WindowExtraEvent",
            HistoryFinding::WindowMismatch { .. } => "WindowMismatch",
            HistoryFinding::WindowUnconfirmed { .. } => "WindowUnconfirmed",
        }
    }

    /// Whether the finding proves another history (the mirror stops), rather than leaving
    /// the history unproven (the copy is resynced).
    pub fn disproves(&self) -> bool {
        !matches!(
            self,
            HistoryFinding::AnchorCompacted { .. }
                | HistoryFinding::WindowCompacted { .. }
                | HistoryFinding::WindowUnconfirmed { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_the_finding_as_named_fields() {
        let f = HistoryFinding::AnchorDiffers {
            key: "/app/#3".into(),
            read_at: 90,
            anchor: 90,
            diff: AnchorDiff::Differs(vec![
                AnchorField::CreateRevision { got: 12, want: 80 },
                AnchorField::Value,
            ]),
            watermark: 100,
            source: 500,
        };
        let json = serde_json::to_value(&f).expect("a finding serializes");
        assert_eq!(
            json,
            serde_json::json!({
                "finding": "AnchorDiffers",
                "key": "/app/#3",
                "readAt": 90,
                "anchor": 90,
                "diff": {"kind": "Differs", "fields": [
                    {"field": "CreateRevision", "got": 12, "want": 80},
                    {"field": "Value"}
                ]},
                "watermark": 100,
                "source": 500
            })
        );
        let back: HistoryFinding = serde_json::from_value(json).expect("and reads back");
        assert_eq!(back, f);
        let w = HistoryFinding::WindowUnconfirmed {
            from: 91,
            upto: 100,
            found: 0,
            applied: 1,
            why: Unconfirmed::NoProgress { waited_seconds: 30 },
        };
        assert_eq!(
            serde_json::to_value(&w).expect("serializes")["why"],
            serde_json::json!({"why": "NoProgress", "waitedSeconds": 30})
        );
    }

    #[test]
    fn the_sentence_lists_every_difference() {
        let d = AnchorDiff::Differs(vec![
            AnchorField::Key,
            AnchorField::Version { got: 1, want: 3 },
        ]);
        assert_eq!(
            d.to_string(),
            "another key came back, version 1, expected 3"
        );
        assert_eq!(
            AnchorDiff::Missing.to_string(),
            "the key does not exist there"
        );
    }
}
