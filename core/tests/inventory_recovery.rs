//! Scripted exchanges with the recovery machine: every command it emits is asserted exactly.
// Helpers outside #[test] fns unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use tidemark_core::inventory::eligibility::Ineligible;
use tidemark_core::inventory::recovery::DeleteResult;
use tidemark_core::inventory::*;
use tidemark_core::Instant;

const T_OLD: &str = "2026-12-01T10:00:00Z";
const T_CUR: &str = "2026-12-02T14:03:04.123456789Z";
const T_NOW: &str = "2026-12-02T14:05:00.000000001Z";

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn cm(name: &str, ann: &[(&str, &str)], deleted: bool) -> SliceResource {
    let ann: BTreeMap<&str, &str> = ann.iter().copied().collect();
    SliceResource {
        manifest: serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "app", "annotations": ann}
        })
        .to_string(),
        deleted,
    }
}

/// The re-created Composition: new name and UID, same synthesizer, first synthesis.
fn comp() -> CompositionView {
    CompositionView {
        namespace: "ns".into(),
        name: "comp-new".into(),
        uid: "u2".into(),
        resource_version: "20".into(),
        synthesizer_name: "syn".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::from([(ANN_RECOVERY_ENABLED.to_string(), "true".to_string())]),
        current_synthesis: Some(SynthesisView {
            uuid: "n1".into(),
            synthesized: Some(ts(T_CUR)),
            ready: false,
            resource_slice_names: vec!["new-slice".into()],
        }),
        previous_synthesis: None,
        deleting: false,
    }
}

fn current_slices() -> Vec<SliceView> {
    vec![SliceView {
        name: "new-slice".into(),
        terminating: false,
        resources: vec![cm("keep", &[], false), cm("eno-tombstoned", &[], true)],
    }]
}

/// The old Composition's snapshot: keep, eno-tombstoned, crd-ish (group -1), orphan, plain.
fn old_snapshot() -> Vec<Secret> {
    let slices = vec![SliceView {
        name: "old".into(),
        terminating: false,
        resources: vec![
            cm("keep", &[], false),
            cm("eno-tombstoned", &[], false),
            cm("plain", &[], false),
            cm("early", &[(ANN_DELETION_GROUP, "-1")], false),
            cm("orphan", &[], false),
        ],
    }];
    let src = SnapshotSource {
        lineage: default_lineage("ns", "syn"),
        composition_name: "comp-old".into(),
        composition_namespace: "ns".into(),
        synthesizer_name: "syn".into(),
        synthesis_uuid: "o7".into(),
        synthesized: ts(T_OLD),
    };
    build_snapshot_secrets(
        &src,
        &entries_from_slices(&slices).unwrap(),
        "kube-system",
        DEFAULT_CHUNK_LIMIT,
    )
    .unwrap()
}

fn id(name: &str) -> ResourceId {
    ResourceId {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("app".into()),
        name: name.into(),
    }
}

fn decision(outcome: Outcome) -> String {
    Decision {
        synthesis_uuid: "n1".into(),
        outcome,
        time: ts(T_NOW),
    }
    .to_json()
}

struct Run {
    m: Recovery,
    now: Instant,
}

impl Run {
    fn new(mode: Mode) -> Run {
        let cfg = RecoveryConfig {
            mode,
            ..RecoveryConfig::default()
        };
        Run {
            m: Recovery::new(cfg, "ns", "comp-new", ts(T_NOW)),
            now: Instant::from_nanos(5),
        }
    }

    fn expect(&mut self, want: Command, reply: Result<Reply, KubeError>) {
        match self.m.poll_output(self.now) {
            Output::Command { id, cmd } => {
                assert_eq!(cmd, want);
                self.m
                    .handle_input(self.now, Input::Done { id, result: reply });
            }
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }

    fn stopped(&mut self) -> RecoveryOutcome {
        match self.m.poll_output(self.now) {
            Output::Stopped(o) => o,
            other => panic!("expected Stopped, got {other:?}"),
        }
    }

    fn get_comp(&mut self, c: CompositionView) {
        self.expect(
            Command::GetComposition {
                namespace: "ns".into(),
                name: "comp-new".into(),
            },
            Ok(Reply::Composition(c)),
        );
    }

    /// Composition read, conflict check, current slices, Secret listing.
    fn through_selection(&mut self, secrets: Vec<Secret>) {
        self.get_comp(comp());
        self.expect(
            Command::ListCompositions { namespace: None },
            Ok(Reply::Compositions(vec![comp()])),
        );
        self.expect(
            Command::ListResourceSlices {
                namespace: "ns".into(),
                names: vec!["new-slice".into()],
            },
            Ok(Reply::Slices(current_slices())),
        );
        self.expect(
            Command::ListSecrets {
                namespace: "kube-system".into(),
                label_selector: format!("{LABEL_LINEAGE}={}", default_lineage("ns", "syn")),
            },
            Ok(Reply::Secrets(secrets)),
        );
    }

    fn patch(&mut self, value: String, rv: &str, reply: Result<Reply, KubeError>) {
        self.expect(
            Command::PatchCompositionAnnotation {
                namespace: "ns".into(),
                name: "comp-new".into(),
                key: DECISION_ANNOTATION.into(),
                value,
                resource_version: rv.into(),
            },
            reply,
        );
    }
}

fn object(uid: &str, ann: &[(&str, &str)]) -> Result<Reply, KubeError> {
    Ok(Reply::Object(ObjectView {
        uid: uid.into(),
        annotations: ann
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        terminating: false,
    }))
}

#[test]
fn applies_tombstones_in_deletion_group_order_skipping_orphans() {
    let mut r = Run::new(Mode::Apply);
    r.through_selection(old_snapshot());
    // Eno's order: group 0 first (orphan, plain in name order), then early (group -1) last.
    r.get_comp(comp());
    r.expect(
        Command::GetResource { id: id("orphan") },
        object("uo", &[(ANN_DELETION_STRATEGY, "orphan")]),
    );
    r.get_comp(comp());
    r.expect(
        Command::GetResource { id: id("plain") },
        Err(KubeError::NotFound),
    );
    r.get_comp(comp());
    r.expect(Command::GetResource { id: id("early") }, object("ue", &[]));
    r.expect(
        Command::DeleteResource {
            id: id("early"),
            uid: "ue".into(),
        },
        Ok(Reply::Deleted),
    );
    r.get_comp(comp());
    r.patch(
        decision(Outcome::Applied(3)),
        "20",
        Ok(Reply::Composition(comp())),
    );
    match r.stopped() {
        RecoveryOutcome::Decided {
            decision,
            plan,
            written: true,
        } => {
            assert_eq!(decision.outcome, Outcome::Applied(3));
            assert_eq!(
                plan.results,
                vec![
                    (id("orphan"), DeleteResult::SkippedOrphan),
                    (id("plain"), DeleteResult::AlreadyAbsent),
                    (id("early"), DeleteResult::Deleted),
                ]
            );
            // Never a current identity (keep) nor an Eno tombstone (eno-tombstoned).
            assert!(plan
                .tombstones
                .iter()
                .all(|t| t.name != "keep" && t.name != "eno-tombstoned"));
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn plan_mode_deletes_nothing() {
    let mut r = Run::new(Mode::Plan);
    r.through_selection(old_snapshot());
    r.get_comp(comp());
    r.patch(
        decision(Outcome::Planned(3)),
        "20",
        Ok(Reply::Composition(comp())),
    );
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::Decided { written: true, decision, .. } if decision.outcome == Outcome::Planned(3)
    ));
}

#[test]
fn dry_run_writes_nothing() {
    let mut r = Run::new(Mode::DryRun);
    r.through_selection(old_snapshot());
    match r.stopped() {
        RecoveryOutcome::Decided {
            written: false,
            decision,
            plan,
        } => {
            assert_eq!(decision.outcome, Outcome::Planned(3));
            assert_eq!(plan.tombstones.len(), 3);
            assert!(matches!(plan.selection, Some(Selection::Selected(_))));
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn invalid_or_missing_inventory_records_no_tombstones() {
    let mut bad = old_snapshot();
    bad[0].data.insert(DATA_KEY.into(), b"[]".to_vec());
    let mut r = Run::new(Mode::Apply);
    r.through_selection(bad);
    r.get_comp(comp());
    r.patch(
        decision(Outcome::InventoryInvalid(Reason::HashMismatch)),
        "20",
        Ok(Reply::Composition(comp())),
    );
    match r.stopped() {
        RecoveryOutcome::Decided { plan, .. } => assert!(plan.tombstones.is_empty()),
        o => panic!("{o:?}"),
    }

    let mut r = Run::new(Mode::Apply);
    r.through_selection(vec![]);
    r.get_comp(comp());
    r.patch(
        decision(Outcome::InventoryNotFound),
        "20",
        Ok(Reply::Composition(comp())),
    );
    assert!(matches!(r.stopped(), RecoveryOutcome::Decided { .. }));
}

#[test]
fn not_needed_when_previous_slices_are_readable() {
    let mut c = comp();
    c.previous_synthesis = Some(SynthesisView {
        uuid: "n0".into(),
        synthesized: Some(ts(T_OLD)),
        ready: true,
        resource_slice_names: vec!["prev".into()],
    });
    let prev = vec![SliceView {
        name: "prev".into(),
        terminating: false,
        resources: vec![cm("keep", &[], false)],
    }];
    let mut r = Run::new(Mode::Apply);
    r.get_comp(c.clone());
    r.expect(
        Command::ListResourceSlices {
            namespace: "ns".into(),
            names: vec!["prev".into()],
        },
        Ok(Reply::Slices(prev)),
    );
    r.get_comp(c.clone());
    r.patch(
        decision(Outcome::NotNeeded),
        "20",
        Ok(Reply::Composition(c.clone())),
    );
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::Decided { written: true, .. }
    ));

    // Previous slice missing => selection runs.
    let mut r = Run::new(Mode::Plan);
    r.get_comp(c.clone());
    r.expect(
        Command::ListResourceSlices {
            namespace: "ns".into(),
            names: vec!["prev".into()],
        },
        Ok(Reply::Slices(vec![])),
    );
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![c])),
    );
}

#[test]
fn decision_write_retries_on_409_with_fresh_resource_version() {
    let mut r = Run::new(Mode::Apply);
    r.through_selection(vec![]);
    r.get_comp(comp());
    r.patch(
        decision(Outcome::InventoryNotFound),
        "20",
        Err(KubeError::Conflict("stale".into())),
    );
    let mut c = comp();
    c.resource_version = "21".into();
    r.get_comp(c);
    r.patch(
        decision(Outcome::InventoryNotFound),
        "21",
        Ok(Reply::Composition(comp())),
    );
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::Decided { written: true, .. }
    ));
    assert_eq!(r.m.status().conflicts, 1);
}

#[test]
fn composition_changed_before_a_delete_stops_everything() {
    let mut r = Run::new(Mode::Apply);
    r.through_selection(old_snapshot());
    let mut c = comp();
    c.current_synthesis.as_mut().unwrap().uuid = "n2".into();
    r.get_comp(c);
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::CompositionChanged { .. }
    ));
}

#[test]
fn existing_decisions_are_respected() {
    let mut c = comp();
    c.annotations
        .insert(DECISION_ANNOTATION.into(), decision(Outcome::Applied(1)));
    let mut r = Run::new(Mode::Apply);
    r.get_comp(c.clone());
    assert!(matches!(r.stopped(), RecoveryOutcome::AlreadyDecided(_)));

    // Planned + operator --apply => proceeds; Planned + plan mode => already decided.
    c.annotations
        .insert(DECISION_ANNOTATION.into(), decision(Outcome::Planned(3)));
    let mut r = Run::new(Mode::Plan);
    r.get_comp(c.clone());
    assert!(matches!(r.stopped(), RecoveryOutcome::AlreadyDecided(_)));
    let mut r = Run::new(Mode::Skip);
    r.get_comp(c.clone());
    r.get_comp(c.clone());
    r.patch(decision(Outcome::Skipped), "20", Ok(Reply::Composition(c)));
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::Decided { written: true, .. }
    ));

    // Another replica decided between our check and our write: keep theirs.
    let mut r = Run::new(Mode::Apply);
    r.through_selection(vec![]);
    let mut c = comp();
    c.annotations.insert(
        DECISION_ANNOTATION.into(),
        decision(Outcome::InventoryNotFound),
    );
    r.get_comp(c);
    assert!(matches!(r.stopped(), RecoveryOutcome::AlreadyDecided(_)));
}

#[test]
fn lineage_conflict_and_unusable_current_slices() {
    let mut r = Run::new(Mode::Apply);
    r.get_comp(comp());
    let mut twin = comp();
    twin.name = "comp-old".into();
    twin.uid = "u1".into();
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![comp(), twin])),
    );
    r.get_comp(comp());
    r.patch(
        decision(Outcome::InventoryInvalid(Reason::LineageConflict)),
        "20",
        Ok(Reply::Composition(comp())),
    );
    assert!(matches!(r.stopped(), RecoveryOutcome::Decided { .. }));

    let mut r = Run::new(Mode::Apply);
    r.get_comp(comp());
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![comp()])),
    );
    r.expect(
        Command::ListResourceSlices {
            namespace: "ns".into(),
            names: vec!["new-slice".into()],
        },
        Ok(Reply::Slices(vec![])),
    );
    assert!(matches!(
        r.stopped(),
        RecoveryOutcome::CurrentSlicesUnusable { .. }
    ));

    let mut r = Run::new(Mode::Apply);
    let mut c = comp();
    c.annotations.remove(ANN_RECOVERY_ENABLED);
    r.get_comp(c);
    assert_eq!(
        r.stopped(),
        RecoveryOutcome::NotEligible(Ineligible::NotOptedIn)
    );
}

#[test]
fn then_the_recorder_may_run() {
    // The decision written by recovery is what the recorder's eligibility needs.
    let mut c = comp();
    c.current_synthesis.as_mut().unwrap().ready = true;
    assert_eq!(
        eligibility::check_recording(true, &Scope::default(), &c),
        Err(Ineligible::DecisionPending)
    );
    c.annotations
        .insert(DECISION_ANNOTATION.into(), decision(Outcome::Applied(3)));
    assert_eq!(
        eligibility::check_recording(true, &Scope::default(), &c),
        Ok(())
    );
}
