//! Lineage: the key that links a Composition's snapshots across re-creation.
//!
//! A re-created Composition has a new name and UID but usually the same namespace and
//! synthesizer, so the lineage is derived from those two. An operator can pin it with the
//! `eno.azure.io/inventory-lineage` annotation (e.g. when moving a Composition to another
//! synthesizer). Two live Compositions with one lineage would overwrite and tombstone each
//! other's inventory, so that is refused for both ([`lineage_conflicts`]).

use super::view::CompositionView;
use super::ANN_LINEAGE;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use thiserror::Error;

/// Length of a derived lineage: 16 bytes of SHA-256 in lowercase hex.
pub const LINEAGE_LEN: usize = 32;
/// Longest accepted override: it must fit a label value (63 characters).
pub const MAX_LINEAGE_LEN: usize = 63;

/// An override annotation that cannot be used as a label value and name part.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("lineage override {value:?} on {namespace}/{name} is invalid: {why}")]
pub struct LineageError {
    /// Composition namespace.
    pub namespace: String,
    /// Composition name.
    pub name: String,
    /// The annotation value.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// `hex(sha256(namespace + "/" + synthesizer_name))[:32]`.
pub fn default_lineage(namespace: &str, synthesizer_name: &str) -> String {
    let mut h = Sha256::new();
    h.update(namespace.as_bytes());
    h.update(b"/");
    h.update(synthesizer_name.as_bytes());
    let mut out = hex::encode(h.finalize());
    out.truncate(LINEAGE_LEN);
    out
}

/// Checks an override: 1..=63 characters of `[a-z0-9-]`, starting and ending alphanumeric,
/// so it is a valid label value and keeps Secret names DNS-1123 subdomains.
pub fn validate_lineage(value: &str) -> Result<(), &'static str> {
    if value.is_empty() || value.len() > MAX_LINEAGE_LEN {
        return Err("must be 1 to 63 characters");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("only lowercase letters, digits and '-' are allowed");
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// The lineage of a Composition: the override annotation when present, else the default.
pub fn lineage_of(comp: &CompositionView) -> Result<String, LineageError> {
    match comp.annotations.get(ANN_LINEAGE) {
        Some(v) => {
            validate_lineage(v).map_err(|why| LineageError {
                namespace: comp.namespace.clone(),
                name: comp.name.clone(),
                value: v.clone(),
                why,
            })?;
            Ok(v.clone())
        }
        None => Ok(default_lineage(&comp.namespace, &comp.synthesizer_name)),
    }
}

/// Other live (not deleting) Compositions that resolve to the same lineage as `comp`, as
/// sorted `namespace/name` strings. Non-empty => `LineageConflict`: record and recover
/// nothing for any of them. `comp` itself (same namespace, name and UID) is ignored.
pub fn lineage_conflicts(comp: &CompositionView, all: &[CompositionView]) -> Vec<String> {
    let Ok(mine) = lineage_of(comp) else {
        return Vec::new();
    };
    let mut out: Vec<String> = all
        .iter()
        .filter(|o| !o.deleting)
        .filter(|o| !(o.namespace == comp.namespace && o.name == comp.name && o.uid == comp.uid))
        .filter(|o| lineage_of(o).is_ok_and(|l| l == mine))
        .map(|o| format!("{}/{}", o.namespace, o.name))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// When `comp`'s lineage override names the default lineage of another namespace (one of
/// the namespaces in `all`), a sentence saying so. A user who may create a Composition in
/// one namespace must not be able to point recovery at another namespace's inventory.
pub fn foreign_lineage(comp: &CompositionView, all: &[CompositionView]) -> Option<String> {
    let value = comp.annotations.get(ANN_LINEAGE)?;
    let synthesizers: BTreeSet<&str> = all
        .iter()
        .chain([comp])
        .map(|c| c.synthesizer_name.as_str())
        .collect();
    let namespaces: BTreeSet<&str> = all
        .iter()
        .map(|c| c.namespace.as_str())
        .filter(|ns| *ns != comp.namespace)
        .collect();
    namespaces.iter().find_map(|ns| {
        synthesizers
            .iter()
            .find(|s| default_lineage(ns, s) == *value)
            .map(|s| {
                format!(
                    "the lineage override {value} on {}/{} is the lineage of synthesizer {s} in namespace {ns}",
                    comp.namespace, comp.name
                )
            })
    })
}

/// Why a Composition may not use its lineage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineageProblem {
    /// Other live Compositions (`namespace/name`, sorted) resolve to the same lineage.
    Shared(Vec<String>),
    /// The override names another namespace's lineage (the sentence says which).
    Foreign(String),
}

impl LineageProblem {
    /// A sentence for the decision detail and Events.
    pub fn detail(&self, lineage: &str) -> String {
        match self {
            LineageProblem::Shared(others) => format!(
                "lineage {lineage} is also used by live Compositions {}",
                others.join(", ")
            ),
            LineageProblem::Foreign(d) => format!(
                "{d}; start the controller with --allow-cross-namespace-lineage if that is intended"
            ),
        }
    }
}

/// The lineage check recovery and recording make before they read or write a lineage, over
/// the Compositions of every namespace. Unless `allow_cross_namespace`, a Composition whose
/// override is foreign ([`foreign_lineage`]) is refused, and for that reason it does not count
/// as sharing the lineage with the others: it never reads or writes it, and anyone who may
/// create a Composition must not be able to block another namespace's recovery by naming
/// its lineage.
pub fn check_lineage(
    comp: &CompositionView,
    all: &[CompositionView],
    allow_cross_namespace: bool,
) -> Result<(), LineageProblem> {
    if !allow_cross_namespace {
        if let Some(d) = foreign_lineage(comp, all) {
            return Err(LineageProblem::Foreign(d));
        }
    }
    let candidates: Vec<CompositionView> = all
        .iter()
        .filter(|o| allow_cross_namespace || foreign_lineage(o, all).is_none())
        .cloned()
        .collect();
    let shared = lineage_conflicts(comp, &candidates);
    if shared.is_empty() {
        Ok(())
    } else {
        Err(LineageProblem::Shared(shared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comp(ns: &str, name: &str, uid: &str, syn: &str) -> CompositionView {
        CompositionView {
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
            synthesizer_name: syn.into(),
            ..Default::default()
        }
    }

    #[test]
    fn default_is_hash_prefix() {
        let l = default_lineage("ns", "syn");
        assert_eq!(l.len(), 32);
        let full = hex::encode(Sha256::digest(b"ns/syn"));
        assert_eq!(l, full[..32]);
        assert_ne!(l, default_lineage("ns", "syn2"));
        assert!(validate_lineage(&l).is_ok());
    }

    #[test]
    fn override_and_validation() {
        let mut c = comp("ns", "a", "u", "syn");
        c.annotations.insert(ANN_LINEAGE.into(), "pinned-1".into());
        assert_eq!(lineage_of(&c).unwrap(), "pinned-1");
        for bad in ["", "Caps", "-x", "x-", "a_b", &"a".repeat(64)] {
            c.annotations.insert(ANN_LINEAGE.into(), bad.to_string());
            assert!(lineage_of(&c).is_err(), "{bad}");
        }
    }

    #[test]
    fn conflicts_between_live_compositions() {
        let a = comp("ns", "a", "u1", "syn");
        let b = comp("ns", "b", "u2", "syn");
        let other = comp("ns", "c", "u3", "other");
        let mut gone = comp("ns", "old", "u0", "syn");
        gone.deleting = true;
        let all = vec![a.clone(), b.clone(), other.clone(), gone];
        assert_eq!(lineage_conflicts(&a, &all), ["ns/b"]);
        assert_eq!(lineage_conflicts(&b, &all), ["ns/a"]);
        assert!(lineage_conflicts(&other, &all).is_empty());
        // An override can create a conflict across synthesizers and namespaces.
        let mut pinned = comp("other-ns", "p", "u9", "x");
        pinned
            .annotations
            .insert(ANN_LINEAGE.into(), default_lineage("ns", "syn"));
        assert_eq!(
            lineage_conflicts(&a, &[a.clone(), pinned.clone()]),
            ["other-ns/p"]
        );
        // The override is another namespace's lineage: foreign, even with `a` gone.
        assert!(foreign_lineage(&pinned, &[a.clone(), pinned.clone()])
            .is_some_and(|d| d.contains("namespace ns")));
        assert_eq!(
            foreign_lineage(&pinned, std::slice::from_ref(&pinned)),
            None
        );
        assert_eq!(foreign_lineage(&a, std::slice::from_ref(&a)), None);
        let mut own = comp("ns", "o", "u8", "syn");
        own.annotations
            .insert(ANN_LINEAGE.into(), default_lineage("ns", "syn"));
        assert_eq!(foreign_lineage(&own, &[a.clone(), pinned.clone()]), None);

        // `pinned` is refused as foreign, and so does not block `a` (unless moves are allowed).
        let all = [a.clone(), pinned.clone()];
        assert!(matches!(
            check_lineage(&pinned, &all, false),
            Err(LineageProblem::Foreign(_))
        ));
        assert_eq!(check_lineage(&a, &all, false), Ok(()));
        assert_eq!(
            check_lineage(&a, &all, true),
            Err(LineageProblem::Shared(vec!["other-ns/p".into()]))
        );
        assert_eq!(
            check_lineage(&pinned, &all, true),
            Err(LineageProblem::Shared(vec!["ns/a".into()]))
        );
    }
}
