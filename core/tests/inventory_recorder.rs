//! Scripted exchanges with the inventory recorder: every command it emits is asserted exactly.
// Helpers outside #[test] fns unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;
use tidemark_core::inventory::eligibility::Ineligible;
use tidemark_core::inventory::*;
use tidemark_core::Instant;

const T_OLD: &str = "2026-12-01T10:00:00Z";
const T_CUR: &str = "2026-12-02T14:03:04.123456789Z";
const T_NEW: &str = "2026-12-03T00:00:00Z";

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn manifest(kind: &str, name: &str) -> SliceResource {
    SliceResource {
        manifest: format!(
            r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"name":"{name}","namespace":"app"}}}}"#
        ),
        deleted: false,
    }
}

fn comp() -> CompositionView {
    let decision = Decision {
        synthesis_uuid: "s2".into(),
        outcome: Outcome::NotNeeded,
        time: ts(T_CUR),
    };
    CompositionView {
        namespace: "ns".into(),
        name: "comp".into(),
        uid: "u1".into(),
        resource_version: "10".into(),
        synthesizer_name: "syn".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::from([
            (ANN_RECOVERY_ENABLED.to_string(), "true".to_string()),
            (DECISION_ANNOTATION.to_string(), decision.to_json()),
        ]),
        current_synthesis: Some(SynthesisView {
            uuid: "s2".into(),
            synthesized: Some(ts(T_CUR)),
            ready: true,
            resource_slice_names: vec!["slice-a".into()],
        }),
        previous_synthesis: None,
        deleting: false,
    }
}

fn slices(n: usize) -> Vec<SliceView> {
    vec![SliceView {
        name: "slice-a".into(),
        terminating: false,
        resources: (0..n)
            .map(|i| manifest("ConfigMap", &format!("cm-{i:03}")))
            .collect(),
    }]
}

fn lineage() -> String {
    default_lineage("ns", "syn")
}

fn wanted(n: usize, limit: usize) -> Vec<Secret> {
    let entries = entries_from_slices(&slices(n)).unwrap();
    let src = SnapshotSource {
        lineage: lineage(),
        composition_name: "comp".into(),
        composition_namespace: "ns".into(),
        synthesizer_name: "syn".into(),
        synthesis_uuid: "s2".into(),
        synthesized: ts(T_CUR),
    };
    build_snapshot_secrets(&src, &entries, "kube-system", limit).unwrap()
}

/// The same Secret as the API server would return it (uid, resourceVersion set).
fn stored(mut s: Secret, rv: &str) -> Secret {
    s.uid = format!("uid-{}", s.name);
    s.resource_version = Some(rv.into());
    s
}

struct Run {
    m: Recorder,
    now: Instant,
}

impl Run {
    fn new(cfg: RecorderConfig) -> Run {
        Run {
            m: Recorder::new(cfg, "ns", "comp"),
            now: Instant::from_nanos(1_000),
        }
    }

    /// Asserts the next output is exactly `want` and answers it with `reply`.
    fn expect(&mut self, want: Command, reply: Result<Reply, KubeError>) {
        match self.m.poll_output(self.now) {
            Output::Command { id, cmd } => {
                assert_eq!(cmd, want);
                assert!(matches!(self.m.poll_output(self.now), Output::Timeout(_)));
                self.m
                    .handle_input(self.now, Input::Done { id, result: reply });
            }
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }

    fn stopped(&mut self) -> RecordOutcome {
        match self.m.poll_output(self.now) {
            Output::Stopped(o) => o,
            other => panic!("expected Stopped, got {other:?}"),
        }
    }

    fn get_comp(&mut self, c: CompositionView) {
        self.expect(
            Command::GetComposition {
                namespace: "ns".into(),
                name: "comp".into(),
            },
            Ok(Reply::Composition(c)),
        );
    }

    /// The preamble every eligible run goes through.
    fn preamble(&mut self, n: usize) {
        self.get_comp(comp());
        self.expect(
            Command::ListCompositions { namespace: None },
            Ok(Reply::Compositions(vec![comp()])),
        );
        self.expect(
            Command::ListResourceSlices {
                namespace: "ns".into(),
                names: vec!["slice-a".into()],
            },
            Ok(Reply::Slices(slices(n))),
        );
    }

    fn get_secret(&mut self, name: &str, reply: Result<Reply, KubeError>) {
        self.expect(
            Command::GetSecret {
                namespace: "kube-system".into(),
                name: name.into(),
            },
            reply,
        );
    }
}

#[test]
fn creates_absent_chunk_after_rechecking_the_composition() {
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(3);
    let w = wanted(3, DEFAULT_CHUNK_LIMIT);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].name, format!("comp-{}-0", lineage()));
    r.get_secret(&w[0].name, Err(KubeError::NotFound));
    r.get_comp(comp());
    r.expect(
        Command::CreateSecret(w[0].clone()),
        Ok(Reply::Secret(stored(w[0].clone(), "1"))),
    );
    match r.stopped() {
        RecordOutcome::Recorded {
            chunks: 1,
            entries: 3,
            created: 1,
            updated: 0,
            unchanged: 0,
            ..
        } => {}
        o => panic!("{o:?}"),
    }
    assert_eq!(r.m.status().composition_reads, 2);
}

#[test]
fn skips_identical_chunk_without_writing() {
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(3);
    let w = wanted(3, DEFAULT_CHUNK_LIMIT);
    let mut existing = stored(w[0].clone(), "7");
    existing
        .annotations
        .insert("unrelated/annotation".into(), "kept".into());
    r.get_secret(&w[0].name, Ok(Reply::Secret(existing)));
    assert!(matches!(
        r.stopped(),
        RecordOutcome::Recorded {
            unchanged: 1,
            created: 0,
            updated: 0,
            ..
        }
    ));
}

/// An older snapshot's chunk at our name, as written by Eno (second precision, no hashes).
fn older_chunk(name: &str, rv: &str) -> Secret {
    let mut s = Secret {
        name: name.into(),
        namespace: "kube-system".into(),
        uid: "uid-old".into(),
        resource_version: Some(rv.into()),
        secret_type: Some("Opaque".into()),
        labels: BTreeMap::from([(LABEL_LINEAGE.to_string(), lineage())]),
        ..Secret::default()
    };
    for (k, v) in [
        (ANN_FORMAT_VERSION, "1"),
        (ANN_COMPOSITION_NAME, "comp"),
        (ANN_COMPOSITION_NAMESPACE, "ns"),
        (ANN_SYNTHESIZER_NAME, "syn"),
        (ANN_SYNTHESIS_UUID, "s1"),
        (ANN_SYNTHESIZED, T_OLD),
        (ANN_CHUNK_INDEX, "0"),
        (ANN_CHUNK_COUNT, "1"),
        ("operator/note", "keep me"),
    ] {
        s.annotations.insert(k.into(), v.into());
    }
    s.data.insert(DATA_KEY.into(), b"[]".to_vec());
    s
}

fn as_update(w: &Secret, old: &Secret, rv: &str) -> Secret {
    let mut u = w.clone();
    u.resource_version = Some(rv.into());
    u.uid = old.uid.clone();
    u.annotations
        .insert("operator/note".into(), "keep me".into());
    u
}

#[test]
fn updates_older_chunk_with_resource_version_and_retries_on_409() {
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(2);
    let w = wanted(2, DEFAULT_CHUNK_LIMIT);
    let name = w[0].name.clone();
    r.get_secret(&name, Ok(Reply::Secret(older_chunk(&name, "5"))));
    r.get_comp(comp());
    r.expect(
        Command::UpdateSecret(as_update(&w[0], &older_chunk(&name, "5"), "5")),
        Err(KubeError::Conflict("the object has been modified".into())),
    );
    // 409 => re-read the Secret, re-check the Composition, update with the new version.
    r.get_secret(&name, Ok(Reply::Secret(older_chunk(&name, "6"))));
    r.get_comp(comp());
    r.expect(
        Command::UpdateSecret(as_update(&w[0], &older_chunk(&name, "6"), "6")),
        Ok(Reply::Secret(stored(w[0].clone(), "8"))),
    );
    assert!(matches!(
        r.stopped(),
        RecordOutcome::Recorded { updated: 1, .. }
    ));
    assert_eq!(r.m.status().conflicts, 1);
}

#[test]
fn conflicts_are_bounded() {
    let cfg = RecorderConfig {
        max_conflict_retries: 1,
        ..RecorderConfig::default()
    };
    let mut r = Run::new(cfg);
    r.preamble(1);
    let w = wanted(1, DEFAULT_CHUNK_LIMIT);
    for _ in 0..2 {
        r.get_secret(&w[0].name, Err(KubeError::NotFound));
        r.get_comp(comp());
        r.expect(
            Command::CreateSecret(w[0].clone()),
            Err(KubeError::Conflict("already exists".into())),
        );
    }
    assert!(matches!(
        r.stopped(),
        RecordOutcome::Failed {
            retryable: true,
            ..
        }
    ));
}

#[test]
fn composition_changed_between_check_and_write() {
    // A new synthesis appeared.
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    let w = wanted(1, DEFAULT_CHUNK_LIMIT);
    r.get_secret(&w[0].name, Err(KubeError::NotFound));
    let mut c = comp();
    c.current_synthesis.as_mut().unwrap().uuid = "s3".into();
    r.get_comp(c);
    assert!(matches!(
        r.stopped(),
        RecordOutcome::CompositionChanged { .. }
    ));

    // Deleted and re-created under the same name (new UID).
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    r.get_secret(&w[0].name, Err(KubeError::NotFound));
    let mut c = comp();
    c.uid = "u2".into();
    r.get_comp(c);
    assert!(matches!(
        r.stopped(),
        RecordOutcome::CompositionChanged { .. }
    ));

    // Opted out.
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    r.get_secret(&w[0].name, Err(KubeError::NotFound));
    let mut c = comp();
    c.annotations.remove(ANN_RECOVERY_ENABLED);
    r.get_comp(c);
    assert!(matches!(
        r.stopped(),
        RecordOutcome::CompositionChanged { .. }
    ));

    // Deleted.
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    r.get_secret(&w[0].name, Err(KubeError::NotFound));
    r.expect(
        Command::GetComposition {
            namespace: "ns".into(),
            name: "comp".into(),
        },
        Err(KubeError::NotFound),
    );
    assert!(matches!(
        r.stopped(),
        RecordOutcome::CompositionChanged { .. }
    ));
}

#[test]
fn never_overwrites_a_newer_snapshot() {
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    let w = wanted(1, DEFAULT_CHUNK_LIMIT);
    let mut newer = older_chunk(&w[0].name, "9");
    newer
        .annotations
        .insert(ANN_SYNTHESIZED.into(), T_NEW.into());
    newer
        .annotations
        .insert(ANN_SYNTHESIS_UUID.into(), "s9".into());
    r.get_secret(&w[0].name, Ok(Reply::Secret(newer.clone())));
    assert!(matches!(r.stopped(), RecordOutcome::NewerSnapshot { .. }));

    // Same instant, another UUID: ambiguous, not overwritten either.
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    newer
        .annotations
        .insert(ANN_SYNTHESIZED.into(), T_CUR.into());
    r.get_secret(&w[0].name, Ok(Reply::Secret(newer.clone())));
    assert!(matches!(r.stopped(), RecordOutcome::Blocked { .. }));

    // Foreign Secret (no lineage label) at our name.
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    newer.labels.clear();
    r.get_secret(&w[0].name, Ok(Reply::Secret(newer)));
    assert!(matches!(r.stopped(), RecordOutcome::Blocked { .. }));
}

#[test]
fn writes_every_chunk_and_leaves_leftovers_alone() {
    let cfg = RecorderConfig {
        chunk_limit: 400,
        ..RecorderConfig::default()
    };
    let mut r = Run::new(cfg);
    r.preamble(12);
    let w = wanted(12, 400);
    assert!(w.len() >= 3, "{}", w.len());
    for (i, s) in w.iter().enumerate() {
        if i == 1 {
            // Chunk 1 already identical (a retry after a crash): skipped.
            r.get_secret(&s.name, Ok(Reply::Secret(stored(s.clone(), "3"))));
            continue;
        }
        r.get_secret(&s.name, Err(KubeError::NotFound));
        r.get_comp(comp());
        r.expect(
            Command::CreateSecret(s.clone()),
            Ok(Reply::Secret(stored(s.clone(), "4"))),
        );
    }
    // No command for index w.len() (a leftover of a larger older snapshot stays).
    let n = w.len();
    match r.stopped() {
        RecordOutcome::Recorded {
            chunks,
            created,
            unchanged: 1,
            ..
        } => {
            assert_eq!(chunks, n);
            assert_eq!(created, n - 1);
        }
        o => panic!("{o:?}"),
    }
    // The written Secrets select back to the same inventory.
    let Selection::Selected(s) = select(&w, &lineage()) else {
        panic!()
    };
    assert_eq!(s.entries, entries_from_slices(&slices(12)).unwrap());
}

#[test]
fn eligibility_is_checked_first() {
    type Edit = Box<dyn Fn(&mut CompositionView)>;
    let cases: Vec<(Edit, Ineligible)> = vec![
        (
            Box::new(|c| {
                c.annotations.remove(DECISION_ANNOTATION);
            }),
            Ineligible::DecisionPending,
        ),
        (
            Box::new(|c| {
                let d = Decision {
                    synthesis_uuid: "s2".into(),
                    outcome: Outcome::Planned(2),
                    time: ts(T_CUR),
                };
                c.annotations
                    .insert(DECISION_ANNOTATION.into(), d.to_json());
            }),
            Ineligible::DecisionPending,
        ),
        (
            Box::new(|c| {
                let d = Decision {
                    synthesis_uuid: "s1".into(),
                    outcome: Outcome::NotNeeded,
                    time: ts(T_CUR),
                };
                c.annotations
                    .insert(DECISION_ANNOTATION.into(), d.to_json());
            }),
            Ineligible::DecisionPending,
        ),
        (
            Box::new(|c| c.current_synthesis.as_mut().unwrap().ready = false),
            Ineligible::NotReady,
        ),
        (
            Box::new(|c| {
                c.annotations
                    .insert(ANN_RECOVERY_ENABLED.into(), "false".into());
            }),
            Ineligible::NotOptedIn,
        ),
        (Box::new(|c| c.deleting = true), Ineligible::Deleting),
        (
            Box::new(|c| c.current_synthesis = None),
            Ineligible::NoCurrentSynthesis,
        ),
    ];
    for (edit, want) in cases {
        let mut r = Run::new(RecorderConfig::default());
        let mut c = comp();
        edit(&mut c);
        r.get_comp(c);
        assert_eq!(r.stopped(), RecordOutcome::NotEligible(want));
    }
    let mut r = Run::new(RecorderConfig {
        enabled: false,
        ..RecorderConfig::default()
    });
    r.get_comp(comp());
    assert_eq!(
        r.stopped(),
        RecordOutcome::NotEligible(Ineligible::Disabled)
    );
    let mut r = Run::new(RecorderConfig {
        scope: Scope {
            namespace: None,
            match_labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
        },
        ..RecorderConfig::default()
    });
    r.get_comp(comp());
    assert_eq!(
        r.stopped(),
        RecordOutcome::NotEligible(Ineligible::OutOfScope)
    );
}

#[test]
fn stops_on_unusable_slices_and_lineage_conflict() {
    for bad in ["missing", "terminating", "malformed"] {
        let mut r = Run::new(RecorderConfig::default());
        r.get_comp(comp());
        r.expect(
            Command::ListCompositions { namespace: None },
            Ok(Reply::Compositions(vec![comp()])),
        );
        let mut s = slices(2);
        match bad {
            "missing" => s.clear(),
            "terminating" => s[0].terminating = true,
            _ => s[0].resources[1].manifest = "{not json".into(),
        }
        r.expect(
            Command::ListResourceSlices {
                namespace: "ns".into(),
                names: vec!["slice-a".into()],
            },
            Ok(Reply::Slices(s)),
        );
        assert!(
            matches!(r.stopped(), RecordOutcome::SlicesUnusable { .. }),
            "{bad}"
        );
    }
    let mut r = Run::new(RecorderConfig::default());
    r.get_comp(comp());
    let mut twin = comp();
    twin.name = "comp-recreated".into();
    twin.uid = "u9".into();
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![comp(), twin])),
    );
    match r.stopped() {
        RecordOutcome::LineageConflict { others, .. } => {
            assert_eq!(others, ["ns/comp-recreated"])
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn an_override_naming_another_namespaces_lineage_records_nothing() {
    // Scoped to one namespace, the recorder still lists every namespace.
    let scoped = || RecorderConfig {
        scope: Scope {
            namespace: Some("ns".into()),
            ..Scope::default()
        },
        ..RecorderConfig::default()
    };
    let mut c = comp();
    c.annotations
        .insert(ANN_LINEAGE.into(), default_lineage("victim", "syn"));
    let mut bystander = comp();
    bystander.namespace = "victim".into();
    bystander.name = "other".into();
    bystander.uid = "u8".into();
    bystander.synthesizer_name = "unrelated".into();
    let mut r = Run::new(scoped());
    r.get_comp(c.clone());
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![c.clone(), bystander.clone()])),
    );
    match r.stopped() {
        RecordOutcome::LineageConflict { others, .. } => {
            assert!(others[0].contains("namespace victim"), "{others:?}")
        }
        o => panic!("{o:?}"),
    }
    let mut r = Run::new(RecorderConfig {
        allow_cross_namespace_lineage: true,
        ..scoped()
    });
    r.get_comp(c.clone());
    r.expect(
        Command::ListCompositions { namespace: None },
        Ok(Reply::Compositions(vec![c, bystander])),
    );
    assert!(matches!(
        r.m.poll_output(r.now),
        Output::Command {
            cmd: Command::ListResourceSlices { .. },
            ..
        }
    ));
}

#[test]
fn an_override_onto_a_lineage_recorded_for_another_namespace_records_nothing() {
    // The victim namespace has no live Composition: only its Secrets tell.
    let victim = default_lineage("victim", "syn");
    let mut c = comp();
    c.annotations.insert(ANN_LINEAGE.into(), victim.clone());
    let mut theirs = wanted(2, 1000);
    for s in &mut theirs {
        s.annotations
            .insert(ANN_COMPOSITION_NAMESPACE.into(), "victim".into());
    }
    for (secrets, refused) in [(theirs, true), (wanted(2, 1000), false)] {
        let mut r = Run::new(RecorderConfig::default());
        r.get_comp(c.clone());
        r.expect(
            Command::ListCompositions { namespace: None },
            Ok(Reply::Compositions(vec![c.clone()])),
        );
        r.expect(
            Command::ListSecrets {
                namespace: "kube-system".into(),
                label_selector: lineage_selector(&victim),
            },
            Ok(Reply::Secrets(secrets)),
        );
        if refused {
            match r.stopped() {
                RecordOutcome::LineageConflict { others, .. } => {
                    assert!(others[0].contains("\"victim\""), "{others:?}")
                }
                o => panic!("{o:?}"),
            }
        } else {
            assert!(matches!(
                r.m.poll_output(r.now),
                Output::Command {
                    cmd: Command::ListResourceSlices { .. },
                    ..
                }
            ));
        }
    }
}

#[test]
fn timeouts_and_stale_replies() {
    let mut r = Run::new(RecorderConfig {
        request_timeout: Duration::from_secs(5),
        ..RecorderConfig::default()
    });
    let Output::Command { id, .. } = r.m.poll_output(r.now) else {
        panic!()
    };
    // A reply for an unknown id is ignored.
    r.m.handle_input(
        r.now,
        Input::Done {
            id: id + 100,
            result: Err(KubeError::NotFound),
        },
    );
    let deadline = r.now + Duration::from_secs(5);
    assert_eq!(r.m.poll_output(r.now), Output::Timeout(deadline));
    assert!(matches!(
        r.m.poll_output(deadline),
        Output::Stopped(RecordOutcome::Failed {
            retryable: true,
            ..
        })
    ));
}

#[test]
fn too_large_entry_stops() {
    let cfg = RecorderConfig {
        chunk_limit: 50,
        ..RecorderConfig::default()
    };
    let mut r = Run::new(cfg);
    r.preamble(1);
    assert!(matches!(r.stopped(), RecordOutcome::TooLarge { .. }));
}

#[test]
fn identical_but_terminating_chunk_is_not_counted_as_recorded() {
    let mut r = Run::new(RecorderConfig::default());
    r.preamble(1);
    let w = wanted(1, DEFAULT_CHUNK_LIMIT);
    let mut existing = stored(w[0].clone(), "7");
    existing.terminating = true;
    r.get_secret(&w[0].name, Ok(Reply::Secret(existing)));
    assert!(matches!(
        r.stopped(),
        RecordOutcome::Failed {
            retryable: true,
            ..
        }
    ));
}
