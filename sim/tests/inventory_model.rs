//! Property tests of the recorder against the model apiserver's Secret store
//! (`tidemark-model`: resourceVersion preconditions and 409s), with injected conflicts and two
//! recorders (older and newer synthesis) interleaved on it. After every step, selection never
//! yields a mixed snapshot. Each recorder sees its own Composition and slices (fixtures).
// Helpers outside #[test] fns unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use tidemark_core::inventory::*;
use tidemark_core::Instant;
use tidemark_model::apiserver::inventory::execute;
use tidemark_model::apiserver::{ApiServer, Gvr};

fn ts(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

fn comp(uuid: &str, t: &str, slice: &str) -> CompositionView {
    CompositionView {
        namespace: "ns".into(),
        name: "comp".into(),
        uid: "u1".into(),
        resource_version: "1".into(),
        synthesizer_name: "syn".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::from([
            (ANN_RECOVERY_ENABLED.to_string(), "true".to_string()),
            (
                DECISION_ANNOTATION.to_string(),
                Decision {
                    synthesis_uuid: uuid.into(),
                    outcome: Outcome::NotNeeded,
                    time: ts(t),
                }
                .to_json(),
            ),
        ]),
        current_synthesis: Some(SynthesisView {
            uuid: uuid.into(),
            synthesized: Some(ts(t)),
            ready: true,
            resource_slice_names: vec![slice.into()],
        }),
        previous_synthesis: None,
        deleting: false,
    }
}

fn slice(name: &str, n: usize, tag: &str) -> SliceView {
    SliceView {
        name: name.into(),
        terminating: false,
        resources: (0..n)
            .map(|i| SliceResource {
                manifest: format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{tag}-{i:03}","namespace":"app"}}}}"#
                ),
                deleted: false,
            })
            .collect(),
    }
}

/// The shared downstream Secret store: the model apiserver.
struct Store {
    api: ApiServer,
    /// Writes of the simulated concurrent writer, so each changes the Secret.
    concurrent: u64,
}

impl Default for Store {
    fn default() -> Store {
        Store {
            api: ApiServer::new(),
            concurrent: 0,
        }
    }
}

impl Store {
    fn exec(
        &mut self,
        comp: &CompositionView,
        slices: &[SliceView],
        cmd: Command,
    ) -> Result<Reply, KubeError> {
        match cmd {
            Command::GetComposition { .. } => Ok(Reply::Composition(comp.clone())),
            Command::ListCompositions { .. } => Ok(Reply::Compositions(vec![comp.clone()])),
            Command::ListResourceSlices { .. } => Ok(Reply::Slices(slices.to_vec())),
            cmd @ (Command::GetSecret { .. }
            | Command::ListSecrets { .. }
            | Command::CreateSecret(_)
            | Command::UpdateSecret(_)) => execute(&mut self.api, Instant::from_nanos(0), &cmd),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Another writer changes Secret `name` (if it exists), so a write based on the version
    /// read before conflicts.
    fn touch(&mut self, namespace: &str, name: &str) {
        let get = Command::GetSecret {
            namespace: namespace.into(),
            name: name.into(),
        };
        let Ok(Reply::Secret(mut s)) = execute(&mut self.api, Instant::from_nanos(0), &get) else {
            return;
        };
        self.concurrent += 1;
        s.annotations
            .insert("test/concurrent-writer".into(), self.concurrent.to_string());
        let put = Command::UpdateSecret(s);
        execute(&mut self.api, Instant::from_nanos(0), &put).unwrap();
    }

    fn all(&self) -> Vec<Secret> {
        self.api
            .all(&Gvr::secrets())
            .into_iter()
            .map(|v| Secret::from_kube_json(v).unwrap())
            .collect()
    }
}

struct Actor {
    m: Recorder,
    comp: CompositionView,
    slices: Vec<SliceView>,
    done: Option<RecordOutcome>,
}

impl Actor {
    fn new(uuid: &str, t: &str, n: usize, limit: usize) -> Actor {
        let cfg = RecorderConfig {
            chunk_limit: limit,
            max_conflict_retries: 50,
            ..RecorderConfig::default()
        };
        Actor {
            m: Recorder::new(cfg, "ns", "comp"),
            comp: comp(uuid, t, uuid),
            slices: vec![slice(uuid, n, uuid)],
            done: None,
        }
    }

    /// One command round trip; `inject` replaces the reply to a write with a 409 (and bumps
    /// the Secret's version, as a concurrent writer would).
    fn step(&mut self, store: &mut Store, inject: bool) {
        if self.done.is_some() {
            return;
        }
        let now = Instant::from_nanos(0);
        match self.m.poll_output(now) {
            Output::Command { id, cmd } => {
                let is_write = matches!(cmd, Command::CreateSecret(_) | Command::UpdateSecret(_));
                let result = if is_write && inject {
                    if let Command::UpdateSecret(s) = &cmd {
                        store.touch(&s.namespace, &s.name);
                    }
                    Err(KubeError::Conflict("injected".into()))
                } else {
                    store.exec(&self.comp, &self.slices, cmd)
                };
                self.m.handle_input(now, Input::Done { id, result });
            }
            Output::Stopped(o) => self.done = Some(o),
            Output::Timeout(_) => panic!("synchronous replies never time out"),
        }
    }
}

fn lineage() -> String {
    default_lineage("ns", "syn")
}

/// Selection is never a mix: it is None, Invalid, or exactly one of the two inventories.
fn check_not_mixed(store: &Store, a: &Actor, b: &Actor) -> Result<(), TestCaseError> {
    if let Selection::Selected(s) = select(&store.all(), &lineage()) {
        let want = if s.synthesis_uuid == "s-old" {
            &a.slices
        } else {
            &b.slices
        };
        prop_assert_eq!(&s.entries, &entries_from_slices(want).unwrap());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn single_recorder_with_conflicts_records_exactly(
        n in 0usize..40,
        faults in proptest::collection::vec(proptest::bool::weighted(0.3), 0..200),
    ) {
        let mut store = Store::default();
        let mut a = Actor::new("s1", "2026-12-02T14:00:00Z", n, 500);
        let mut b = Actor::new("unused", "2026-12-02T14:00:00Z", 0, 500);
        b.done = Some(RecordOutcome::NotEligible(Ineligible::Disabled));
        let mut i = 0;
        while a.done.is_none() {
            a.step(&mut store, faults.get(i).copied().unwrap_or(false));
            i += 1;
            prop_assert!(i < 10_000);
        }
        prop_assert!(matches!(a.done, Some(RecordOutcome::Recorded { .. })), "{:?}", a.done);
        match select(&store.all(), &lineage()) {
            Selection::Selected(s) => prop_assert_eq!(s.entries, entries_from_slices(&a.slices).unwrap()),
            other => prop_assert!(false, "{:?}", other),
        }
        // A second run changes nothing.
        let before = store.all();
        let mut again = Actor::new("s1", "2026-12-02T14:00:00Z", n, 500);
        while again.done.is_none() {
            again.step(&mut store, false);
        }
        prop_assert!(matches!(again.done, Some(RecordOutcome::Recorded { created: 0, updated: 0, .. })), "{:?}", again.done);
        prop_assert_eq!(store.all(), before);
    }

    #[test]
    fn interleaved_old_and_new_recorders_never_mix(
        na in 0usize..30, nb in 0usize..30,
        schedule in proptest::collection::vec(any::<bool>(), 0..400),
        faults in proptest::collection::vec(proptest::bool::weighted(0.2), 0..400),
        old_first in any::<bool>(),
    ) {
        let mut store = Store::default();
        let mut a = Actor::new("s-old", "2026-12-02T14:00:00Z", na, 400);
        let mut b = Actor::new("s-new", "2026-12-02T14:00:00.000000001Z", nb, 400);
        if old_first {
            // A completed older snapshot already exists.
            while a.done.is_none() {
                a.step(&mut store, false);
            }
            a = Actor::new("s-old", "2026-12-02T14:00:00Z", na, 400);
        }
        let mut i = 0;
        while a.done.is_none() || b.done.is_none() {
            let pick_a = schedule.get(i).copied().unwrap_or(i % 2 == 0);
            let inject = faults.get(i).copied().unwrap_or(false);
            if (pick_a && a.done.is_none()) || b.done.is_some() {
                a.step(&mut store, inject);
            } else {
                b.step(&mut store, inject);
            }
            check_not_mixed(&store, &a, &b)?;
            i += 1;
            prop_assert!(i < 20_000);
        }
        // The newer recorder always completes: nothing may block it but a newer snapshot.
        prop_assert!(matches!(b.done, Some(RecordOutcome::Recorded { .. })), "{:?}", b.done);
        // The older one either completed before being superseded, or refused to overwrite.
        prop_assert!(matches!(
            a.done,
            Some(RecordOutcome::Recorded { .. }) | Some(RecordOutcome::NewerSnapshot { .. })
        ), "{:?}", a.done);
        // The newest complete snapshot at the end: the newer one, unless the older recorder
        // wrote chunks beyond the newer's count (leftovers) — those are ignored by selection.
        match select(&store.all(), &lineage()) {
            Selection::Selected(s) => {
                prop_assert_eq!(s.synthesis_uuid, "s-new");
                prop_assert_eq!(s.entries, entries_from_slices(&b.slices).unwrap());
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

/// A whole cluster for the end-to-end flow: Compositions, slices, Secrets, downstream objects.
#[derive(Default)]
struct Cluster {
    comps: BTreeMap<String, CompositionView>,
    slices: BTreeMap<String, SliceView>,
    store: Store,
    objects: BTreeMap<ResourceId, ObjectView>,
    deleted: Vec<ResourceId>,
    /// The Compositions' resourceVersions.
    rv: u64,
}

impl Cluster {
    fn exec(&mut self, cmd: Command) -> Result<Reply, KubeError> {
        match cmd {
            Command::GetComposition { name, .. } => self
                .comps
                .get(&name)
                .cloned()
                .map(Reply::Composition)
                .ok_or(KubeError::NotFound),
            Command::ListCompositions { .. } => {
                Ok(Reply::Compositions(self.comps.values().cloned().collect()))
            }
            Command::ListResourceSlices { names, .. } => Ok(Reply::Slices(
                names
                    .iter()
                    .filter_map(|n| self.slices.get(n).cloned())
                    .collect(),
            )),
            Command::PatchCompositionAnnotation {
                name,
                key,
                value,
                resource_version,
                ..
            } => {
                self.rv += 1;
                let rv = format!("c{}", self.rv);
                let c = self.comps.get_mut(&name).ok_or(KubeError::NotFound)?;
                if c.resource_version != resource_version {
                    return Err(KubeError::Conflict("stale".into()));
                }
                c.annotations.insert(key, value);
                c.resource_version = rv;
                Ok(Reply::Composition(c.clone()))
            }
            Command::GetResource { id } => self
                .objects
                .get(&id)
                .cloned()
                .map(Reply::Object)
                .ok_or(KubeError::NotFound),
            Command::DeleteResource { id, uid } => match self.objects.get(&id) {
                Some(o) if o.uid != uid => Err(KubeError::Conflict("uid".into())),
                Some(_) => {
                    self.objects.remove(&id);
                    self.deleted.push(id);
                    Ok(Reply::Deleted)
                }
                None => Err(KubeError::NotFound),
            },
            other => {
                let comp = self.comps.values().next().cloned().unwrap_or_default();
                self.store.exec(&comp, &[], other)
            }
        }
    }

    /// Runs an inventory machine to its stop, every reply synchronous.
    fn run<M, S>(&mut self, mut m: M) -> S
    where
        M: tidemark_core::Machine<Input = Input, Output = Output<S>>,
    {
        let now = Instant::from_nanos(0);
        loop {
            match m.poll_output(now) {
                Output::Command { id, cmd } => {
                    let result = self.exec(cmd);
                    m.handle_input(now, Input::Done { id, result });
                }
                Output::Stopped(o) => return o,
                Output::Timeout(_) => panic!("synchronous"),
            }
        }
    }

    fn run_recorder(&mut self, name: &str) -> RecordOutcome {
        self.run(Recorder::new(RecorderConfig::default(), "ns", name))
    }

    fn run_recovery(&mut self, name: &str, mode: Mode) -> RecoveryOutcome {
        self.run_recovery_with(name, mode, Policy::default())
    }

    fn run_recovery_with(&mut self, name: &str, mode: Mode, policy: Policy) -> RecoveryOutcome {
        let cfg = RecoveryConfig {
            mode,
            policy,
            ..RecoveryConfig::default()
        };
        self.run(Recovery::new(cfg, "ns", name, ts("2026-12-02T16:00:00Z")))
    }
}

fn cm_id(name: &str) -> ResourceId {
    ResourceId {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("app".into()),
        name: name.into(),
    }
}

#[test]
fn recreated_composition_recovers_then_records() {
    let mut k = Cluster::default();
    // Old Composition "comp", synthesis s1 with 5 ConfigMaps, recorded after its decision.
    let mut old = comp("s1", "2026-12-02T14:00:00Z", "s1");
    old.annotations.remove(DECISION_ANNOTATION);
    k.slices.insert("s1".into(), slice("s1", 5, "cm"));
    k.comps.insert("comp".into(), old);
    assert!(matches!(
        k.run_recorder("comp"),
        RecordOutcome::NotEligible(Ineligible::DecisionPending)
    ));
    assert!(matches!(
        k.run_recovery("comp", Mode::Apply),
        RecoveryOutcome::Decided { written: true, .. }
    ));
    assert!(matches!(
        k.run_recorder("comp"),
        RecordOutcome::Recorded { entries: 5, .. }
    ));
    for i in 0..5 {
        let name = format!("cm-{i:03}");
        let ann = if i == 4 {
            BTreeMap::from([(ANN_DELETION_STRATEGY.to_string(), "orphan".to_string())])
        } else {
            BTreeMap::new()
        };
        k.objects.insert(
            cm_id(&name),
            ObjectView {
                uid: format!("uid-{i}"),
                annotations: ann,
                terminating: false,
            },
        );
    }

    // Deleted and re-created as "comp2"; its first synthesis lacks cm-002..cm-004.
    k.comps.remove("comp");
    let mut new = comp("n1", "2026-12-02T15:00:00Z", "n1");
    new.name = "comp2".into();
    new.uid = "u2".into();
    new.annotations.remove(DECISION_ANNOTATION);
    k.slices.insert("n1".into(), slice("n1", 2, "cm"));
    k.comps.insert("comp2".into(), new);

    // 3 deletions of a 5-entry snapshot are over the default budget (half): held.
    let held = Outcome::Held {
        tombstones: 3,
        deletions: 3,
        limit: 2,
    };
    match k.run_recovery("comp2", Mode::Apply) {
        RecoveryOutcome::Decided {
            decision,
            written: true,
            ..
        } => assert_eq!(decision.outcome, held),
        o => panic!("{o:?}"),
    }
    assert!(k.deleted.is_empty());
    assert!(matches!(
        k.run_recorder("comp2"),
        RecordOutcome::NotEligible(Ineligible::DecisionPending)
    ));
    // The operator releases it (`recover --apply --allow-deletions 3`).
    let release = Policy {
        allow_deletions: Some(3),
        ..Policy::default()
    };
    match k.run_recovery_with("comp2", Mode::Apply, release) {
        RecoveryOutcome::Decided {
            decision,
            written: true,
            ..
        } => assert_eq!(decision.outcome, Outcome::Applied(3)),
        o => panic!("{o:?}"),
    }
    // Exactly the two non-orphan tombstones went; the orphan and the wanted ones stay.
    assert_eq!(k.deleted, vec![cm_id("cm-002"), cm_id("cm-003")]);
    assert!(k.objects.contains_key(&cm_id("cm-004")));
    assert!(k.objects.contains_key(&cm_id("cm-000")));

    // Now recording proceeds and supersedes the old snapshot.
    assert!(matches!(
        k.run_recorder("comp2"),
        RecordOutcome::Recorded { entries: 2, .. }
    ));
    match select(&k.store.all(), &lineage()) {
        Selection::Selected(s) => assert_eq!(s.composition_name, "comp2"),
        o => panic!("{o:?}"),
    }
    // A second recovery pass is a no-op.
    assert!(matches!(
        k.run_recovery("comp2", Mode::Apply),
        RecoveryOutcome::AlreadyDecided(_)
    ));
}
