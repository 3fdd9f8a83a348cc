//! The hand-checked fixtures `tidemark-inventory inspect` uses: each file's outcome is fixed.
// Helpers outside #[test] fns unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use tidemark_core::inventory::view::list_items;
use tidemark_core::inventory::*;

const LINEAGE: &str = "6d8b8d8a3ccfb7396b4c5589b05bc28d";

/// Fixture text, embedded at compile time (core's tests do no file IO).
fn text(name: &str) -> &'static str {
    match name {
        "valid.yaml" => include_str!("fixtures/inventory/valid.yaml"),
        "current-slices.yaml" => include_str!("fixtures/inventory/current-slices.yaml"),
        "missing-chunk.yaml" => include_str!("fixtures/inventory/missing-chunk.yaml"),
        "duplicate-chunk.yaml" => include_str!("fixtures/inventory/duplicate-chunk.yaml"),
        "mixed-snapshot.yaml" => include_str!("fixtures/inventory/mixed-snapshot.yaml"),
        "malformed-chunk.yaml" => include_str!("fixtures/inventory/malformed-chunk.yaml"),
        "hash-mismatch.yaml" => include_str!("fixtures/inventory/hash-mismatch.yaml"),
        "ambiguous-timestamp.yaml" => include_str!("fixtures/inventory/ambiguous-timestamp.yaml"),
        "bad-timestamp.yaml" => include_str!("fixtures/inventory/bad-timestamp.yaml"),
        "name-mismatch.yaml" => include_str!("fixtures/inventory/name-mismatch.yaml"),
        "unsupported-format.yaml" => include_str!("fixtures/inventory/unsupported-format.yaml"),
        "too-large.yaml" => include_str!("fixtures/inventory/too-large.yaml"),
        "lineage-conflict.yaml" => include_str!("fixtures/inventory/lineage-conflict.yaml"),
        other => panic!("no fixture {other}"),
    }
}

fn load(name: &str) -> serde_json::Value {
    let y: serde_yaml::Value = serde_yaml::from_str(text(name)).unwrap();
    serde_json::to_value(y).unwrap()
}

fn secrets(name: &str) -> Vec<Secret> {
    list_items(&load(name))
        .into_iter()
        .map(|v| Secret::from_kube_json(v).unwrap())
        .collect()
}

#[test]
fn lineage_matches_the_fixtures() {
    assert_eq!(default_lineage("shop", "web-synth"), LINEAGE);
}

#[test]
fn valid_selects_newest_and_computes_tombstones() {
    let s = secrets("valid.yaml");
    let sel = select(&s, LINEAGE);
    let Selection::Selected(snap) = &sel else {
        panic!("{sel:?}")
    };
    assert_eq!(snap.synthesis_uuid, "b2c5e8a1-6f3d-4c1a-9e7b-2d4f6a8c0e13");
    assert_eq!(snap.entries.len(), 9);
    assert_eq!(snap.secret_names.len(), 2);

    let slices: Vec<SliceView> = list_items(&load("current-slices.yaml"))
        .into_iter()
        .map(|v| SliceView::from_kube_json(v).unwrap())
        .collect();
    let present = present_identities(&slices).unwrap();
    let t = tombstones(&snap.entries, &present);
    let names: Vec<(String, String)> = t.iter().map(|e| (e.kind.clone(), e.name.clone())).collect();
    assert_eq!(
        names,
        [
            ("ConfigMap".into(), "web-legacy".into()),
            ("Secret".into(), "web-old-creds".into()),
            (
                "CustomResourceDefinition".into(),
                "widgets.example.com".into()
            ),
            ("PodDisruptionBudget".into(), "web".into()),
        ]
    );
    let j = sel.inspect_json(Some(&t));
    assert_eq!(j["outcome"], "selected");
    assert_eq!(j["chunks"], 2);
    assert_eq!(j["entries"], 9);
    assert_eq!(j["compositionName"], "web");
    assert_eq!(j["synthesized"], "2026-12-02T14:03:04.123456789Z");
    assert_eq!(
        j["tombstones"][2],
        serde_json::json!({"group":"apiextensions.k8s.io","version":"v1","kind":"CustomResourceDefinition","name":"widgets.example.com"})
    );
    // Eno's deletion order, lowest group first: the CRD (annotated -1), web-legacy (2),
    // then the Secret and the PodDisruptionBudget in the managed kinds' default group 100.
    let order: Vec<(String, Option<i64>)> = deletion_order(&t)
        .into_iter()
        .map(|e| (e.name.clone(), effective_deletion_group(&e)))
        .collect();
    assert_eq!(
        order,
        [
            ("widgets.example.com".to_string(), Some(-1)),
            ("web-legacy".to_string(), Some(2)),
            ("web-old-creds".to_string(), Some(100)),
            ("web".to_string(), Some(100)),
        ]
    );
}

#[test]
fn every_reason_has_a_fixture() {
    let cases = [
        ("missing-chunk.yaml", Reason::MissingChunk),
        ("duplicate-chunk.yaml", Reason::DuplicateChunk),
        ("mixed-snapshot.yaml", Reason::MixedSnapshot),
        ("malformed-chunk.yaml", Reason::MalformedChunk),
        ("hash-mismatch.yaml", Reason::HashMismatch),
        ("ambiguous-timestamp.yaml", Reason::AmbiguousTimestamp),
        ("bad-timestamp.yaml", Reason::BadTimestamp),
        ("name-mismatch.yaml", Reason::NameMismatch),
        ("unsupported-format.yaml", Reason::UnsupportedFormat),
        ("too-large.yaml", Reason::TooLarge),
        ("lineage-conflict.yaml", Reason::LineageConflict),
    ];
    assert_eq!(cases.len(), Reason::ALL.len());
    for (file, want) in cases {
        let sel = select(&secrets(file), LINEAGE);
        match &sel {
            Selection::Invalid(i) => assert_eq!(i.reason, want, "{file}: {}", i.detail),
            other => panic!("{file}: {other:?}"),
        }
        let j = sel.inspect_json(None);
        assert_eq!(j["outcome"], "invalid");
        assert_eq!(j["reason"], want.name());
        // The index comment at the top names the expected reason.
        let text = text(file);
        assert!(text.starts_with('#'), "{file}");
        assert!(text.contains(&format!("reason {}.", want.name())), "{file}");
    }
}
