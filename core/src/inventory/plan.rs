//! The recovery plan: from a selection to the tombstones, in deletion order, with what each
//! may have done to it. One pure function, so the controller, `recover` and the offline
//! `inspect` reach the same outcome for the same Secrets.
//!
//! A selected snapshot is refused (`InventoryInvalid`) when it was recorded for another
//! namespace than the Composition's (`LineageConflict`, unless
//! [`Policy::allow_cross_namespace_lineage`]) or when its synthesis is dated after the
//! Composition's current synthesis (`BadTimestamp`): such a snapshot cannot describe what
//! this Composition had before.

use super::budget::{Hold, Policy, Protection};
use super::decision::Outcome;
use super::deletion_group::{deletion_order, effective_deletion_group};
use super::entry::{Entry, Identity, ResourceId};
use super::select::{Invalid, Reason, Selection, Snapshot};
use super::tombstone::tombstones;
use super::view::CompositionView;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// One tombstone as recovery will treat it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedTombstone {
    /// The inventory entry.
    pub entry: Entry,
    /// Eno's effective deletion group; `None` = deleted at once, never waited for.
    pub group: Option<i64>,
    /// Planned but never deleted, for this reason.
    pub protected: Option<Protection>,
}

impl PlannedTombstone {
    /// `{"group","version","kind","namespace"?,"name","deletionGroup","protected"?}`: the
    /// shape `inspect` and `recover` print.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self.entry.resource_id()).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            m.insert("deletionGroup".into(), json!(self.group));
            if let Some(p) = self.protected {
                m.insert("protected".into(), json!(p.name()));
            }
        }
        v
    }

    /// The object's address.
    pub fn id(&self) -> ResourceId {
        self.entry.resource_id()
    }
}

/// Tombstones as `inspect` and `recover` print them, in the given (deletion) order.
pub fn tombstones_json(tombstones: &[PlannedTombstone]) -> Value {
    Value::Array(tombstones.iter().map(PlannedTombstone::to_json).collect())
}

/// What recovery would do with a selection.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RecoveryPlan {
    /// The selection, `Invalid` when a check refused the selected snapshot.
    pub selection: Option<Selection>,
    /// Tombstones in deletion order.
    pub tombstones: Vec<PlannedTombstone>,
    /// Set when the deletions are over budget: nothing may be deleted.
    pub hold: Option<Hold>,
}

/// The checks a selected snapshot must pass for `comp` (see the module docs).
pub fn check_snapshot(
    comp: &CompositionView,
    snap: &Snapshot,
    allow_cross_namespace_lineage: bool,
) -> Result<(), Invalid> {
    if snap.composition_namespace != comp.namespace && !allow_cross_namespace_lineage {
        return Err(Invalid {
            reason: Reason::LineageConflict,
            detail: format!(
                "snapshot {} of lineage {} was recorded for namespace {:?}, not {:?} of {}/{}; \
                 start the controller with --allow-cross-namespace-lineage if the move is intended",
                snap.synthesis_uuid,
                snap.lineage,
                snap.composition_namespace,
                comp.namespace,
                comp.namespace,
                comp.name
            ),
        });
    }
    let current = comp.current_synthesis.as_ref().and_then(|s| s.synthesized);
    if let Some(cur) = current.filter(|cur| snap.synthesized > *cur) {
        return Err(Invalid {
            reason: Reason::BadTimestamp,
            detail: format!(
                "snapshot {} is dated {}, after the current synthesis of {}/{} ({}); a snapshot \
                 from the future cannot be the history of this synthesis",
                snap.synthesis_uuid,
                snap.synthesized.format_rfc3339_nanos(),
                comp.namespace,
                comp.name,
                cur.format_rfc3339_nanos()
            ),
        });
    }
    Ok(())
}

/// Plans recovery. `comp` is the Composition recovered for (`None` offline without one:
/// the namespace and time checks are then skipped); `present` the identities the current
/// synthesis mentions (`None`: no tombstones are derived).
pub fn plan_recovery(
    selection: Selection,
    comp: Option<&CompositionView>,
    present: Option<&BTreeSet<Identity>>,
    policy: &Policy,
) -> RecoveryPlan {
    let selection = match (selection, comp) {
        (Selection::Selected(s), Some(c)) => {
            match check_snapshot(c, &s, policy.allow_cross_namespace_lineage) {
                Ok(()) => Selection::Selected(s),
                Err(i) => Selection::Invalid(i),
            }
        }
        (other, _) => other,
    };
    let (tombstones, hold) = match (&selection, present) {
        (Selection::Selected(s), Some(present)) => {
            let planned: Vec<PlannedTombstone> = deletion_order(&tombstones(&s.entries, present))
                .into_iter()
                .map(|entry| PlannedTombstone {
                    group: effective_deletion_group(&entry),
                    protected: policy.protection(&entry),
                    entry,
                })
                .collect();
            let deletions = planned.iter().filter(|t| t.protected.is_none()).count() as u64;
            (planned, policy.hold(deletions, s.entries.len()))
        }
        _ => (Vec::new(), None),
    };
    RecoveryPlan {
        selection: Some(selection),
        tombstones,
        hold,
    }
}

impl RecoveryPlan {
    /// The decision recovery would record in apply mode.
    pub fn apply_outcome(&self) -> Outcome {
        match (&self.selection, self.hold) {
            (None | Some(Selection::None), _) => Outcome::InventoryNotFound,
            (Some(Selection::Invalid(i)), _) => Outcome::InventoryInvalid(i.reason),
            (Some(Selection::Selected(_)), Some(h)) => Outcome::Held {
                tombstones: self.tombstones.len() as u64,
                deletions: h.deletions,
                limit: h.limit,
            },
            (Some(Selection::Selected(_)), None) => Outcome::Applied(self.tombstones.len() as u64),
        }
    }

    /// The selection's `inspect` object plus `"tombstones"` (when derived), `"held"` and
    /// the `"decision"` recovery would record when applying.
    pub fn inspect_json(&self, with_tombstones: bool) -> Value {
        let mut v = self
            .selection
            .as_ref()
            .unwrap_or(&Selection::None)
            .inspect_json(None);
        if let Some(obj) = v.as_object_mut() {
            if with_tombstones {
                obj.insert("tombstones".into(), tombstones_json(&self.tombstones));
                if let Some(h) = self.hold {
                    obj.insert("held".into(), json!(h));
                }
                obj.insert("decision".into(), json!(self.apply_outcome().name()));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::timestamp::Timestamp;
    use crate::inventory::view::SynthesisView;

    fn e(kind: &str, ns: Option<&str>, name: &str) -> Entry {
        Entry {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            name: name.into(),
            labels: None,
            annotations: None,
        }
    }

    fn snap(ns: &str, at: i64, entries: Vec<Entry>) -> Snapshot {
        Snapshot {
            lineage: "l".into(),
            synthesis_uuid: "old".into(),
            synthesized: Timestamp::from_unix_secs(at),
            composition_name: "web".into(),
            composition_namespace: ns.into(),
            synthesizer_name: "syn".into(),
            secret_names: vec![],
            entries,
        }
    }

    fn comp(ns: &str, at: i64) -> CompositionView {
        CompositionView {
            namespace: ns.into(),
            name: "web-2".into(),
            current_synthesis: Some(SynthesisView {
                uuid: "new".into(),
                synthesized: Some(Timestamp::from_unix_secs(at)),
                ready: true,
                resource_slice_names: vec![],
            }),
            ..Default::default()
        }
    }

    fn reason(p: &RecoveryPlan) -> Option<Reason> {
        match &p.selection {
            Some(Selection::Invalid(i)) => Some(i.reason),
            _ => None,
        }
    }

    #[test]
    fn another_namespace_snapshot_is_a_lineage_conflict() {
        let entries = vec![e("Widget", Some("a"), "w")];
        let none = BTreeSet::new();
        let p = plan_recovery(
            Selection::Selected(snap("a", 1, entries.clone())),
            Some(&comp("b", 2)),
            Some(&none),
            &Policy::default(),
        );
        assert_eq!(reason(&p), Some(Reason::LineageConflict));
        assert!(p.tombstones.is_empty());
        assert_eq!(
            p.apply_outcome(),
            Outcome::InventoryInvalid(Reason::LineageConflict)
        );
        let allow = Policy {
            allow_cross_namespace_lineage: true,
            max_deletion_fraction: 1.0,
            ..Policy::default()
        };
        let p = plan_recovery(
            Selection::Selected(snap("a", 1, entries)),
            Some(&comp("b", 2)),
            Some(&none),
            &allow,
        );
        assert_eq!(p.apply_outcome(), Outcome::Applied(1));
    }

    #[test]
    fn future_snapshot_is_a_bad_timestamp_naming_both_times() {
        let p = plan_recovery(
            Selection::Selected(snap("a", 200, vec![e("Widget", Some("a"), "w")])),
            Some(&comp("a", 100)),
            Some(&BTreeSet::new()),
            &Policy::default(),
        );
        assert_eq!(reason(&p), Some(Reason::BadTimestamp));
        let Some(Selection::Invalid(i)) = &p.selection else {
            panic!("{p:?}")
        };
        assert!(i.detail.contains("1970-01-01T00:03:20"), "{}", i.detail);
        assert!(i.detail.contains("1970-01-01T00:01:40"), "{}", i.detail);
        // Same instant is not from the future.
        let p = plan_recovery(
            Selection::Selected(snap("a", 100, vec![])),
            Some(&comp("a", 100)),
            Some(&BTreeSet::new()),
            &Policy::default(),
        );
        assert_eq!(p.apply_outcome(), Outcome::Applied(0));
    }

    #[test]
    fn protected_tombstones_are_planned_last_and_not_counted() {
        let entries = vec![
            e("CustomResourceDefinition", None, "widgets.example.com"),
            e("Widget", Some("a"), "w1"),
            e("Namespace", None, "a"),
            e("Widget", Some("kube-system"), "w2"),
        ];
        let mut all = entries.clone();
        all.extend((0..10).map(|i| e("Kept", Some("a"), &format!("k{i}"))));
        let present: BTreeSet<Identity> = all[4..].iter().map(Entry::identity).collect();
        let p = plan_recovery(
            Selection::Selected(snap("a", 1, all)),
            Some(&comp("a", 2)),
            Some(&present),
            &Policy::default(),
        );
        let names: Vec<(&str, Option<i64>, Option<Protection>)> = p
            .tombstones
            .iter()
            .map(|t| (t.entry.name.as_str(), t.group, t.protected))
            .collect();
        assert_eq!(
            names,
            [
                ("w1", None, None),
                ("w2", None, Some(Protection::KubeSystem)),
                (
                    "widgets.example.com",
                    Some(100),
                    Some(Protection::CustomResourceDefinition)
                ),
                ("a", Some(100), Some(Protection::Namespace)),
            ]
        );
        assert_eq!(p.hold, None);
        assert_eq!(p.apply_outcome(), Outcome::Applied(4));
        let j = p.inspect_json(true);
        assert_eq!(j["tombstones"][2]["protected"], "CustomResourceDefinition");
        assert_eq!(j["tombstones"][2]["deletionGroup"], 100);
        assert_eq!(j["tombstones"][0]["deletionGroup"], Value::Null);
        assert_eq!(j["decision"], "Applied");
    }

    #[test]
    fn over_budget_is_held_until_released() {
        let all: Vec<Entry> = (0..300)
            .map(|i| e("Widget", Some("a"), &format!("w{i:03}")))
            .collect();
        let present: BTreeSet<Identity> = all[101..].iter().map(Entry::identity).collect();
        let run = |policy: &Policy| {
            plan_recovery(
                Selection::Selected(snap("a", 1, all.clone())),
                Some(&comp("a", 2)),
                Some(&present),
                policy,
            )
        };
        let held = run(&Policy::default());
        assert_eq!(
            held.apply_outcome(),
            Outcome::Held {
                tombstones: 101,
                deletions: 101,
                limit: 100
            }
        );
        assert_eq!(held.inspect_json(true)["held"]["limit"], 100);
        let released = run(&Policy {
            allow_deletions: Some(101),
            ..Policy::default()
        });
        assert_eq!(released.apply_outcome(), Outcome::Applied(101));
    }
}
