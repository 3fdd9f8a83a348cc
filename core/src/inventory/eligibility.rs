//! Who may be recorded or recovered: feature switch, scope and opt-in.

use super::decision::{Decision, DECISION_ANNOTATION};
use super::view::CompositionView;
use super::ANN_RECOVERY_ENABLED;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Which Compositions the controller looks after: one namespace (or all) and an optional
/// equality label selector. The driver's watch uses the same scope; core re-checks it on
/// every Composition read so a label change between check and write is noticed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Scope {
    /// Only Compositions in this namespace; `None` = all namespaces.
    pub namespace: Option<String>,
    /// Every label here must be present with this value.
    pub match_labels: BTreeMap<String, String>,
}

impl Scope {
    /// True when `comp` is in scope.
    pub fn contains(&self, comp: &CompositionView) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == comp.namespace)
            && self
                .match_labels
                .iter()
                .all(|(k, v)| comp.labels.get(k) == Some(v))
    }
}

/// Why a Composition is not (or no longer) eligible. Not an error: the controller just
/// leaves it alone until it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ineligible {
    /// The feature is switched off.
    Disabled,
    /// The Composition does not exist (any more).
    NotFound,
    /// Outside the namespace / label selector.
    OutOfScope,
    /// No `eno.azure.io/recovery-enabled: "true"`.
    NotOptedIn,
    /// The Composition is being deleted.
    Deleting,
    /// No current synthesis yet.
    NoCurrentSynthesis,
    /// The current synthesis has no `synthesized` time.
    NotSynthesized,
    /// The current synthesis is not Ready (recording only).
    NotReady,
    /// No finished recovery decision for the current synthesis UUID (recording only).
    DecisionPending,
    /// The lineage override annotation is invalid.
    BadLineage(String),
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::BadLineage(why) => write!(f, "BadLineage: {why}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// The decision annotation for the current synthesis, if present and parseable.
pub fn current_decision(comp: &CompositionView) -> Option<Decision> {
    let raw = comp.annotations.get(DECISION_ANNOTATION)?;
    let d = Decision::parse(raw).ok()?;
    let cur = comp.current_synthesis.as_ref()?;
    (d.synthesis_uuid == cur.uuid).then_some(d)
}

/// Checks shared by recording and recovery: enabled, exists, in scope, opted in, not
/// deleting, and a synthesized current synthesis.
pub fn check_common(
    enabled: bool,
    scope: &Scope,
    comp: &CompositionView,
) -> Result<(), Ineligible> {
    if !enabled {
        return Err(Ineligible::Disabled);
    }
    if !scope.contains(comp) {
        return Err(Ineligible::OutOfScope);
    }
    if comp
        .annotations
        .get(ANN_RECOVERY_ENABLED)
        .map(String::as_str)
        != Some("true")
    {
        return Err(Ineligible::NotOptedIn);
    }
    if comp.deleting {
        return Err(Ineligible::Deleting);
    }
    let cur = comp
        .current_synthesis
        .as_ref()
        .ok_or(Ineligible::NoCurrentSynthesis)?;
    if cur.synthesized.is_none() {
        return Err(Ineligible::NotSynthesized);
    }
    Ok(())
}

/// Recording eligibility: the common checks, a Ready current synthesis, and a finished
/// recovery decision for its UUID (README "Inventory snapshots": the recovery decision comes first, recording follows).
pub fn check_recording(
    enabled: bool,
    scope: &Scope,
    comp: &CompositionView,
) -> Result<(), Ineligible> {
    check_common(enabled, scope, comp)?;
    let cur = comp
        .current_synthesis
        .as_ref()
        .ok_or(Ineligible::NoCurrentSynthesis)?;
    if !cur.ready {
        return Err(Ineligible::NotReady);
    }
    match current_decision(comp) {
        Some(d) if d.outcome.is_finished() => Ok(()),
        _ => Err(Ineligible::DecisionPending),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::decision::Outcome;
    use crate::inventory::timestamp::Timestamp;
    use crate::inventory::view::SynthesisView;

    fn comp() -> CompositionView {
        CompositionView {
            namespace: "ns".into(),
            name: "c".into(),
            labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
            annotations: BTreeMap::from([(ANN_RECOVERY_ENABLED.to_string(), "true".to_string())]),
            current_synthesis: Some(SynthesisView {
                uuid: "u".into(),
                synthesized: Some(Timestamp::from_unix_secs(1)),
                ready: true,
                resource_slice_names: vec![],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn scope_and_decisions() {
        let c = comp();
        let scope = |ns: Option<&str>, l: &[(&str, &str)]| Scope {
            namespace: ns.map(str::to_string),
            match_labels: l
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        assert!(scope(None, &[]).contains(&c));
        assert!(scope(Some("ns"), &[("team", "a")]).contains(&c));
        assert!(!scope(Some("other"), &[]).contains(&c));
        assert!(!scope(None, &[("team", "b")]).contains(&c));
        assert_eq!(check_common(true, &Scope::default(), &c), Ok(()));
        assert_eq!(
            check_recording(true, &Scope::default(), &c),
            Err(Ineligible::DecisionPending)
        );
        let mut d = c.clone();
        d.annotations
            .insert(DECISION_ANNOTATION.into(), "garbage".into());
        assert_eq!(current_decision(&d), None);
        let dec = Decision {
            synthesis_uuid: "u".into(),
            outcome: Outcome::InventoryNotFound,
            time: Timestamp::from_unix_secs(2),
        };
        d.annotations
            .insert(DECISION_ANNOTATION.into(), dec.to_json());
        assert_eq!(current_decision(&d), Some(dec));
        assert_eq!(check_recording(true, &Scope::default(), &d), Ok(()));
        let mut e = c;
        e.annotations
            .insert(ANN_RECOVERY_ENABLED.into(), "True".into());
        assert_eq!(
            check_common(true, &Scope::default(), &e),
            Err(Ineligible::NotOptedIn)
        );
    }
}
