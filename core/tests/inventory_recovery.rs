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
    let resources = vec![
        cm("keep", &[], false),
        cm("eno-tombstoned", &[], false),
        cm("plain", &[], false),
        cm("early", &[(ANN_DELETION_GROUP, "-1")], false),
        cm("orphan", &[], false),
    ];
    snapshot(&default_lineage("ns", "syn"), "ns", T_OLD, resources)
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
    /// A run whose budget allows the whole snapshot (the budget has its own tests).
    fn new(mode: Mode) -> Run {
        Run::with(RecoveryConfig {
            mode,
            policy: Policy {
                max_deletion_fraction: 1.0,
                ..Policy::default()
            },
            ..RecoveryConfig::default()
        })
    }

    /// An applying run that waits up to `group_wait_secs` for a group, reading every 2 s.
    fn waiting(group_wait_secs: u64) -> Run {
        Run::with(RecoveryConfig {
            group_wait: std::time::Duration::from_secs(group_wait_secs),
            wait_poll: std::time::Duration::from_secs(2),
            policy: Policy {
                max_deletion_fraction: 1.0,
                ..Policy::default()
            },
            ..RecoveryConfig::default()
        })
    }

    fn with(cfg: RecoveryConfig) -> Run {
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
        self.through_selection_of(comp(), &default_lineage("ns", "syn"), secrets);
    }

    fn through_selection_of(&mut self, c: CompositionView, lineage: &str, secrets: Vec<Secret>) {
        self.get_comp(c.clone());
        self.expect(
            Command::ListCompositions { namespace: None },
            Ok(Reply::Compositions(vec![c])),
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
                label_selector: format!("{LABEL_LINEAGE}={lineage}"),
            },
            Ok(Reply::Secrets(secrets)),
        );
    }

    /// Before a delete: the Composition re-read, then the object read and deleted.
    fn deletes(&mut self, c: &CompositionView, rid: &ResourceId, uid: &str) {
        self.get_comp(c.clone());
        self.expect(Command::GetResource { id: rid.clone() }, object(uid, &[]));
        self.expect(
            Command::DeleteResource {
                id: rid.clone(),
                uid: uid.into(),
            },
            Ok(Reply::Deleted),
        );
    }

    /// Before a delete: the Composition re-read, and the object is already gone.
    fn absent(&mut self, c: &CompositionView, name: &str) {
        self.get_comp(c.clone());
        self.gone(&id(name));
    }

    /// A read of `rid` finds nothing.
    fn gone(&mut self, rid: &ResourceId) {
        self.expect(
            Command::GetResource { id: rid.clone() },
            Err(KubeError::NotFound),
        );
    }

    /// The decision write (after its Composition re-read), accepted; what was decided.
    fn decides(&mut self, c: &CompositionView, outcome: Outcome) -> recovery::Plan {
        self.get_comp(c.clone());
        self.patch(decision(outcome), "20", Ok(Reply::Composition(c.clone())));
        let (got, plan) = decided(self);
        assert_eq!(got, outcome);
        plan
    }

    /// Expects the machine to wait, and moves time to the end of that wait.
    fn sleeps(&mut self) -> std::time::Duration {
        match self.m.poll_output(self.now) {
            Output::Timeout(at) => {
                let d = std::time::Duration::from_nanos(at.as_nanos() - self.now.as_nanos());
                self.now = at;
                d
            }
            other => panic!("expected a wait, got {other:?}"),
        }
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
    // Eno's order: the lowest group first: early (-1), then the ConfigMaps without an
    // annotation, which Eno puts in the managed kinds' default group 100.
    r.deletes(&comp(), &id("early"), "ue");
    // Group -1 must be gone before group 100 starts.
    r.gone(&id("early"));
    r.get_comp(comp());
    r.expect(
        Command::GetResource { id: id("orphan") },
        object("uo", &[(ANN_DELETION_STRATEGY, "orphan")]),
    );
    r.absent(&comp(), "plain");
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
                    (id("early"), DeleteResult::Deleted),
                    (id("orphan"), DeleteResult::SkippedOrphan),
                    (id("plain"), DeleteResult::AlreadyAbsent),
                ]
            );
            let groups: Vec<Option<i64>> = plan.tombstones.iter().map(|t| t.group).collect();
            assert_eq!(groups, [Some(-1), Some(100), Some(100)]);
            assert_eq!(plan.waits.len(), 1);
            assert!(plan.waits[0].gave_up_on.is_empty());
            // Never a current identity (keep) nor an Eno tombstone (eno-tombstoned).
            assert!(plan
                .tombstones
                .iter()
                .all(|t| t.entry.name != "keep" && t.entry.name != "eno-tombstoned"));
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

fn terminating(uid: &str) -> Result<Reply, KubeError> {
    Ok(Reply::Object(ObjectView {
        uid: uid.into(),
        annotations: BTreeMap::new(),
        terminating: true,
    }))
}

/// A manifest of any kind, for snapshots beyond ConfigMaps.
fn res(
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
    group: Option<&str>,
) -> SliceResource {
    let mut meta = serde_json::json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = ns.into();
    }
    if let Some(g) = group {
        meta["annotations"] = serde_json::json!({ ANN_DELETION_GROUP: g });
    }
    SliceResource {
        manifest: serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": meta})
            .to_string(),
        deleted: false,
    }
}

/// A snapshot of `resources` recorded under `lineage` for namespace `ns` at `at`.
fn snapshot(lineage: &str, ns: &str, at: &str, resources: Vec<SliceResource>) -> Vec<Secret> {
    let slices = vec![SliceView {
        name: "old".into(),
        terminating: false,
        resources,
    }];
    let src = SnapshotSource {
        lineage: lineage.into(),
        composition_name: "comp-old".into(),
        composition_namespace: ns.into(),
        synthesizer_name: "syn".into(),
        synthesis_uuid: "o7".into(),
        synthesized: ts(at),
    };
    build_snapshot_secrets(
        &src,
        &entries_from_slices(&slices).unwrap(),
        "kube-system",
        DEFAULT_CHUNK_LIMIT,
    )
    .unwrap()
}

fn decided(r: &mut Run) -> (Outcome, recovery::Plan) {
    match r.stopped() {
        RecoveryOutcome::Decided { decision, plan, .. } => (decision.outcome, plan),
        o => panic!("{o:?}"),
    }
}

#[test]
fn the_next_group_waits_for_slow_finalizers_then_gives_up_after_the_wait() {
    let mut r = Run::waiting(10);
    r.through_selection(old_snapshot());
    r.deletes(&comp(), &id("early"), "ue");
    // A finalizer holds `early`: group 100 does not start; the machine waits and reads again.
    let mut waited = std::time::Duration::ZERO;
    for _ in 0..5 {
        r.expect(Command::GetResource { id: id("early") }, terminating("ue"));
        waited += r.sleeps();
    }
    assert_eq!(waited, std::time::Duration::from_secs(10));
    assert_eq!(r.m.status().waiting_group, Some(-1));
    // The wait is over: one last read, then the next group starts.
    r.expect(Command::GetResource { id: id("early") }, terminating("ue"));
    r.absent(&comp(), "orphan");
    r.absent(&comp(), "plain");
    let plan = r.decides(&comp(), Outcome::Applied(3));
    assert_eq!(plan.waits.len(), 1);
    assert_eq!(plan.waits[0].group, -1);
    assert_eq!(plan.waits[0].rounds, 6);
    assert_eq!(plan.waits[0].gave_up_on, [id("early")]);
}

#[test]
fn an_object_that_survives_its_delete_without_terminating_fails_the_recovery() {
    let mut r = Run::waiting(4);
    r.through_selection(old_snapshot());
    r.deletes(&comp(), &id("early"), "ue");
    // Same UID, no deletionTimestamp: the delete did not take. Group 100 never starts.
    for _ in 0..2 {
        r.expect(Command::GetResource { id: id("early") }, object("ue", &[]));
        r.sleeps();
    }
    r.expect(Command::GetResource { id: id("early") }, object("ue", &[]));
    match r.stopped() {
        RecoveryOutcome::Failed {
            detail, retryable, ..
        } => {
            assert!(retryable);
            assert!(detail.contains("without a deletionTimestamp"), "{detail}");
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_replaced_object_counts_as_gone() {
    let mut r = Run::new(Mode::Apply);
    r.through_selection(old_snapshot());
    r.deletes(&comp(), &id("early"), "ue");
    // Someone created a new `early`: not ours to wait for (nor to delete).
    r.expect(
        Command::GetResource { id: id("early") },
        object("new-uid", &[]),
    );
    r.get_comp(comp());
}

#[test]
fn over_budget_is_held_and_deletes_nothing_until_released() {
    // 3 deletions of a 5-entry snapshot: over half of it.
    let mut r = Run::with(RecoveryConfig::default());
    r.through_selection(old_snapshot());
    let held = Outcome::Held {
        tombstones: 3,
        deletions: 3,
        limit: 2,
    };
    r.get_comp(comp());
    r.patch(decision(held), "20", Ok(Reply::Composition(comp())));
    let (outcome, plan) = decided(&mut r);
    assert_eq!(outcome, held);
    assert!(plan.results.is_empty());

    // The controller leaves a held plan alone.
    let mut c = comp();
    c.annotations
        .insert(DECISION_ANNOTATION.into(), decision(held));
    let mut r = Run::with(RecoveryConfig::default());
    r.get_comp(c.clone());
    assert!(matches!(r.stopped(), RecoveryOutcome::AlreadyDecided(_)));

    // `recover --apply --allow-deletions 2` is not enough; 3 releases it.
    for (allow, released) in [(2, false), (3, true)] {
        let mut r = Run::with(RecoveryConfig {
            policy: Policy {
                allow_deletions: Some(allow),
                ..Policy::default()
            },
            ..RecoveryConfig::default()
        });
        r.through_selection_of(c.clone(), &default_lineage("ns", "syn"), old_snapshot());
        r.get_comp(c.clone());
        if !released {
            let again = Outcome::Held {
                tombstones: 3,
                deletions: 3,
                limit: 2,
            };
            r.patch(decision(again), "20", Ok(Reply::Composition(c.clone())));
            assert_eq!(decided(&mut r).0, again);
            continue;
        }
        r.gone(&id("early"));
        r.absent(&c, "orphan");
        r.absent(&c, "plain");
        r.get_comp(c.clone());
        r.patch(
            decision(Outcome::Applied(3)),
            "20",
            Ok(Reply::Composition(c.clone())),
        );
        assert_eq!(decided(&mut r).0, Outcome::Applied(3));
    }
}

#[test]
fn a_crd_is_planned_after_its_custom_resources_and_not_deleted() {
    let lineage = default_lineage("ns", "syn");
    let resources = || {
        let mut v = vec![cm("keep", &[], false), cm("eno-tombstoned", &[], false)];
        v.push(res(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.com",
            None,
        ));
        v.push(res(
            "example.com/v1",
            "Widget",
            Some("app"),
            "w1",
            Some("5"),
        ));
        v
    };
    let crd = ResourceId {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        kind: "CustomResourceDefinition".into(),
        namespace: None,
        name: "widgets.example.com".into(),
    };
    let w1 = ResourceId {
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        namespace: Some("app".into()),
        name: "w1".into(),
    };
    for deletable in [false, true] {
        let mut policy = Policy {
            max_deletion_fraction: 1.0,
            ..Policy::default()
        };
        if deletable {
            policy
                .deletable_protected
                .insert(Protection::CustomResourceDefinition);
        }
        let mut r = Run::with(RecoveryConfig {
            policy,
            ..RecoveryConfig::default()
        });
        r.through_selection(snapshot(&lineage, "ns", T_OLD, resources()));
        r.deletes(&comp(), &w1, "uw");
        // The CR's group (5) is gone before the CRD's default group (100) starts.
        r.gone(&w1);
        if deletable {
            r.deletes(&comp(), &crd, "uc");
        }
        let plan = r.decides(&comp(), Outcome::Applied(2));
        let want = if deletable {
            DeleteResult::Deleted
        } else {
            DeleteResult::Protected
        };
        assert_eq!(
            plan.results,
            [(w1.clone(), DeleteResult::Deleted), (crd.clone(), want)]
        );
        assert_eq!(plan.tombstones[1].group, Some(100));
    }
}

#[test]
fn a_lineage_override_into_another_namespace_deletes_nothing() {
    let victim = default_lineage("victim", "syn");
    let mut c = comp();
    c.annotations.insert(ANN_LINEAGE.into(), victim.clone());
    let stolen = || {
        snapshot(
            &victim,
            "victim",
            T_OLD,
            vec![cm("db", &[], false), cm("keep", &[], false)],
        )
    };

    // The victim's Composition is gone: the snapshot's namespace gives the override away.
    let mut r = Run::new(Mode::Apply);
    r.through_selection_of(c.clone(), &victim, stolen());
    let plan = r.decides(&c, Outcome::InventoryInvalid(Reason::LineageConflict));
    assert!(plan.results.is_empty() && plan.tombstones.is_empty());
    let Some(Selection::Invalid(i)) = &plan.selection else {
        panic!("{plan:?}")
    };
    assert!(i.detail.contains("\"victim\""), "{}", i.detail);

    // Another Composition lives in the victim's namespace: refused before any read.
    let mut bystander = comp();
    bystander.namespace = "victim".into();
    bystander.name = "other".into();
    bystander.uid = "u9".into();
    bystander.synthesizer_name = "unrelated".into();
    let mut r = Run::new(Mode::Apply);
    r.get_comp(c.clone());
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![c.clone(), bystander])),
    );
    r.get_comp(c.clone());
    r.patch(
        decision(Outcome::InventoryInvalid(Reason::LineageConflict)),
        "20",
        Ok(Reply::Composition(c.clone())),
    );
    assert!(decided(&mut r).1.results.is_empty());

    // An operator moving a Composition on purpose allows it explicitly.
    let mut r = Run::with(RecoveryConfig {
        policy: Policy {
            allow_cross_namespace_lineage: true,
            max_deletion_fraction: 1.0,
            ..Policy::default()
        },
        ..RecoveryConfig::default()
    });
    r.through_selection_of(c.clone(), &victim, stolen());
    r.absent(&c, "db");
}

#[test]
fn a_snapshot_dated_after_the_current_synthesis_is_refused() {
    let lineage = default_lineage("ns", "syn");
    let future = "2026-12-03T00:00:00Z";
    let mut r = Run::new(Mode::Apply);
    r.through_selection(snapshot(
        &lineage,
        "ns",
        future,
        vec![cm("plain", &[], false)],
    ));
    let plan = r.decides(&comp(), Outcome::InventoryInvalid(Reason::BadTimestamp));
    assert!(plan.results.is_empty());
    let Some(Selection::Invalid(i)) = &plan.selection else {
        panic!("{plan:?}")
    };
    assert!(
        i.detail.contains("2026-12-03T00:00:00.000000000Z"),
        "{}",
        i.detail
    );
    assert!(
        i.detail.contains("2026-12-02T14:03:04.123456789Z"),
        "{}",
        i.detail
    );
}
