//! Tombstones: what a selected snapshot had that the current synthesis no longer mentions.

use super::entry::{normalize, Entry, Identity};
use std::collections::BTreeSet;

/// Entries of the selected snapshot whose identity is not in `present` (see
/// [`super::entry::present_identities`]: current manifests, Eno tombstones and Patch
/// targets). Sorted and deduped; by construction never contains a present identity.
pub fn tombstones(selected: &[Entry], present: &BTreeSet<Identity>) -> Vec<Entry> {
    normalize(
        selected
            .iter()
            .filter(|e| !present.contains(&e.identity()))
            .cloned()
            .collect(),
    )
}

/// The order recovery deletes in, following Eno's `eno.azure.io/deletion-group`: the
/// highest group first and negative groups last, as Eno's own resource tree deletes
/// (Azure/eno `internal/resource/tree_test.go`, `TestTreeDeletionGroups`). An absent or
/// unparseable annotation counts as group 0; ties keep the inventory sort order. Deletes are
/// issued in this order; waiting for finalizers between groups is left to each resource.
pub fn deletion_order(tombstones: &[Entry]) -> Vec<Entry> {
    let mut out = tombstones.to_vec();
    out.sort_by(|a, b| {
        b.deletion_group()
            .cmp(&a.deletion_group())
            .then_with(|| a.sort_cmp(b))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::ANN_DELETION_GROUP;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn e(kind: &str, name: &str, group: Option<&str>) -> Entry {
        Entry {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: Some("ns".into()),
            name: name.into(),
            labels: None,
            annotations: group
                .map(|g| BTreeMap::from([(ANN_DELETION_GROUP.to_string(), g.to_string())])),
        }
    }

    #[test]
    fn order_by_deletion_group() {
        let t = vec![
            e("A", "plain", None),
            e("A", "late", Some("3")),
            e("A", "early", Some("-1")),
            e("A", "junk", Some("x")),
        ];
        let names: Vec<_> = deletion_order(&t).into_iter().map(|e| e.name).collect();
        // Highest group first, negative last; "junk" and "plain" are group 0.
        assert_eq!(names, ["late", "junk", "plain", "early"]);
    }

    #[test]
    fn present_is_never_a_tombstone() {
        let sel = vec![e("A", "a", None), e("A", "b", None), e("B", "a", None)];
        let present = BTreeSet::from([e("A", "a", None).identity()]);
        let t = tombstones(&sel, &present);
        assert_eq!(t.len(), 2);
        // Version does not matter for identity.
        let mut v2 = e("B", "a", None);
        v2.version = "v2".into();
        let t = tombstones(&sel, &BTreeSet::from([v2.identity()]));
        assert!(t.iter().all(|x| x.kind != "B"));
    }

    proptest! {
        #[test]
        fn tombstones_disjoint_from_current(
            sel in proptest::collection::vec((0u8..4, 0u8..20, 0u8..3), 0..60),
            cur in proptest::collection::vec((0u8..4, 0u8..20, 0u8..3), 0..60),
        ) {
            let mk = |(k, n, ns): (u8, u8, u8)| Entry {
                group: if k % 2 == 0 { String::new() } else { "apps".into() },
                version: format!("v{}", n % 2 + 1),
                kind: format!("K{k}"),
                namespace: (ns > 0).then(|| format!("ns{ns}")),
                name: format!("n{n}"),
                labels: None,
                annotations: None,
            };
            let sel: Vec<Entry> = sel.into_iter().map(mk).collect();
            let present: BTreeSet<Identity> = cur.into_iter().map(mk).map(|e| e.identity()).collect();
            let t = tombstones(&sel, &present);
            for x in &t {
                prop_assert!(!present.contains(&x.identity()));
            }
            // Complete: every selected identity is present or tombstoned.
            let tids: BTreeSet<Identity> = t.iter().map(Entry::identity).collect();
            for s in &sel {
                prop_assert!(present.contains(&s.identity()) || tids.contains(&s.identity()));
            }
            let mut sorted = t.clone();
            sorted.sort_by(Entry::sort_cmp);
            prop_assert_eq!(sorted, t);
        }
    }
}
