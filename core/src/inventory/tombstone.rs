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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(kind: &str, name: &str) -> Entry {
        Entry {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: Some("ns".into()),
            name: name.into(),
            labels: None,
            annotations: None,
        }
    }

    #[test]
    fn present_is_never_a_tombstone() {
        let sel = vec![e("A", "a"), e("A", "b"), e("B", "a")];
        let present = BTreeSet::from([e("A", "a").identity()]);
        let t = tombstones(&sel, &present);
        assert_eq!(t.len(), 2);
        // Version does not matter for identity.
        let mut v2 = e("B", "a");
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
