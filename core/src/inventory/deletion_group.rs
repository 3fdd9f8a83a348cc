//! Eno's deletion groups: which tombstones recovery deletes first, and which wait for which.
//!
//! Facts taken from Azure/eno (`internal/resource/resource.go`, `kind_ordering.go` and
//! `tree.go`), so that recovery deletes in the order Eno itself would:
//!
//! - `eno.azure.io/deletion-group` is parsed as a decimal integer (optional sign, nothing
//!   else). An unparseable value is ignored, and the resource has no deletion group.
//! - Managed kinds (Namespace, CustomResourceDefinition, ConfigMap, Secret, RBAC, ...) that
//!   carry no deletion-group annotation get the default group `100` (minus their readiness
//!   group `-100`), so they go after everything a synthesis usually annotates.
//! - During deletion a resource depends on every resource of the next lower group present,
//!   and is unblocked only when they are all deleted: the lowest group goes first.
//! - A resource without a deletion group depends on nothing and nothing depends on it.
//!
//! Recovery therefore deletes ungrouped tombstones first without waiting for them, then the
//! groups from lowest to highest, each only after the previous one is gone.

use super::entry::Entry;
use super::ANN_DELETION_GROUP;

/// Kinds Eno treats as infrastructure (matched on kind alone, whatever the API group).
pub const MANAGED_KINDS: [&str; 25] = [
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "EtcdCluster",
];

/// Eno's readiness group for managed kinds; their default deletion group is its negation.
pub const MANAGED_READINESS_GROUP: i64 = -100;

/// Parses an annotation value the way Go's `strconv.Atoi` does: an optional sign and
/// decimal digits, no spaces.
fn parse_group(v: &str) -> Option<i64> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The deletion group Eno would give this entry, or `None` when it has none (deleted at
/// once, never waited for).
pub fn effective_deletion_group(e: &Entry) -> Option<i64> {
    let annotated = e
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_DELETION_GROUP));
    match annotated {
        Some(v) => parse_group(v),
        None if MANAGED_KINDS.contains(&e.kind.as_str()) => Some(-MANAGED_READINESS_GROUP),
        None => None,
    }
}

/// Sort key of the deletion order: ungrouped first, then groups from lowest to highest.
fn order_key(g: Option<i64>) -> (bool, i64) {
    (g.is_some(), g.unwrap_or(0))
}

/// `entries` in the order recovery deletes them: ungrouped first, then by ascending
/// effective group; ties keep the inventory sort order.
pub fn deletion_order(entries: &[Entry]) -> Vec<Entry> {
    let mut out = entries.to_vec();
    out.sort_by(|a, b| {
        order_key(effective_deletion_group(a))
            .cmp(&order_key(effective_deletion_group(b)))
            .then_with(|| a.sort_cmp(b))
    });
    out
}

/// Eno's dependency edges during deletion, for entries with unique identities: entry `i`
/// depends on entry `j` when `j` is in the next lower group present. Pairs `(i, j)`,
/// sorted. Tests compare this with Eno's own fixtures.
pub fn deletion_dependencies(entries: &[Entry]) -> Vec<(usize, usize)> {
    let groups: Vec<Option<i64>> = entries.iter().map(effective_deletion_group).collect();
    let mut out = Vec::new();
    for (i, gi) in groups.iter().enumerate() {
        let Some(gi) = gi else { continue };
        let prev = groups.iter().flatten().filter(|g| *g < gi).max();
        if let Some(prev) = prev {
            for (j, gj) in groups.iter().enumerate() {
                if *gj == Some(*prev) {
                    out.push((i, j));
                }
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn entry(group: &str, kind: &str, name: &str, deletion_group: Option<&str>) -> Entry {
        Entry {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: Some("default".into()),
            name: name.into(),
            labels: None,
            annotations: deletion_group
                .map(|g| BTreeMap::from([(ANN_DELETION_GROUP.to_string(), g.to_string())])),
        }
    }

    fn names(entries: &[Entry], pairs: &[(usize, usize)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(i, j)| (entries[*i].name.clone(), entries[*j].name.clone()))
            .collect()
    }

    /// Eno `internal/resource/fixtures/tree-builder-deletion-groups.json`: only
    /// high-deletion-group (9) depends on low-deletion-group (3); the resource with only a
    /// readiness group and the one with neither are unordered.
    #[test]
    fn eno_fixture_deletion_groups() {
        let mut readiness_only = entry("test.group", "TestKind", "no-deletion-group", None);
        readiness_only.annotations = Some(BTreeMap::from([(
            crate::inventory::ANN_READINESS_GROUP.to_string(),
            "3".to_string(),
        )]));
        let e = vec![
            entry(
                "test.group",
                "TestKind",
                "no-deletion-or-readiness-group",
                None,
            ),
            readiness_only,
            entry("test.group", "TestKind", "high-deletion-group", Some("9")),
            entry("test.group", "TestKind", "low-deletion-group", Some("3")),
        ];
        assert_eq!(
            names(&e, &deletion_dependencies(&e)),
            [(
                "high-deletion-group".to_string(),
                "low-deletion-group".to_string()
            )]
        );
        let order: Vec<String> = deletion_order(&e).into_iter().map(|x| x.name).collect();
        assert_eq!(
            order,
            [
                "no-deletion-group",
                "no-deletion-or-readiness-group",
                "low-deletion-group",
                "high-deletion-group"
            ]
        );
    }

    /// Eno `fixtures/tree-builder-crd-and-cr-during-deletion.json`: a CR in group 1 and its
    /// CRD in group 2; the CRD waits for the CR (and the CR does not wait for its CRD).
    #[test]
    fn eno_fixture_crd_and_cr_during_deletion() {
        let e = vec![
            entry("test.group", "TestCRDKind", "test-cr", Some("1")),
            entry(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "test-crd",
                Some("2"),
            ),
        ];
        assert_eq!(
            names(&e, &deletion_dependencies(&e)),
            [("test-crd".to_string(), "test-cr".to_string())]
        );
    }

    #[test]
    fn managed_kinds_default_after_their_custom_resources() {
        let crd = entry(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "widgets.example.com",
            None,
        );
        let cr = entry("example.com", "Widget", "w", Some("5"));
        let plain = entry("example.com", "Widget", "unordered", None);
        assert_eq!(effective_deletion_group(&crd), Some(100));
        assert_eq!(effective_deletion_group(&cr), Some(5));
        assert_eq!(effective_deletion_group(&plain), None);
        let e = vec![crd.clone(), cr.clone(), plain.clone()];
        assert_eq!(deletion_order(&e), [plain, cr.clone(), crd.clone()]);
        assert_eq!(names(&e, &deletion_dependencies(&e)), [(crd.name, cr.name)]);
        // An explicit group on a managed kind wins over the default.
        let ns = entry("", "Namespace", "n", Some("-3"));
        assert_eq!(effective_deletion_group(&ns), Some(-3));
    }

    #[test]
    fn group_values_parse_as_eno_does() {
        for (v, want) in [
            ("7", Some(7)),
            ("+7", Some(7)),
            ("-7", Some(-7)),
            ("007", Some(7)),
            (" 7", None),
            ("7 ", None),
            ("x", None),
            ("", None),
            ("-", None),
            ("99999999999999999999", None),
        ] {
            let e = entry("", "Widget", "w", Some(v));
            assert_eq!(effective_deletion_group(&e), want, "{v:?}");
        }
        // An unparseable value on a managed kind is ignored, and no default applies.
        let cm = entry("", "ConfigMap", "c", Some("soon"));
        assert_eq!(effective_deletion_group(&cm), None);
    }
}
