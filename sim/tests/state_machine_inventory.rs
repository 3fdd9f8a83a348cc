//! State-machine test: the inventory recorder and selection against a reference model.
//!
//! Transitions: record a new synthesis (of the current Composition or of a re-created one with
//! the same synthesizer, so the lineage is shared), crash the recorder after `k` writes,
//! retry the current recording, and damage the stored Secrets (delete a chunk, flip a data
//! byte, break a chunk index, a chunk count or a timestamp). After every transition the real
//! `select` over the stored Secrets must equal the reference: the newest snapshot if it is
//! complete and undamaged, else `InventoryInvalid` (never an older snapshot, never a mix).
//! The recorder's outcome is checked too: recorded, blocked by a chunk whose timestamp is
//! unreadable, or cut short by the crash.
//!
//! The recorder runs against a small in-test Kubernetes store (Compositions, ResourceSlices
//! and Secrets with resourceVersions and 409s), so this test needs only `tidemark-core`.

// Panics are the test report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::inventory::chunk::{chunk_entries, secret_name};
use tidemark_core::inventory::decision::{Decision, Outcome, DECISION_ANNOTATION};
use tidemark_core::inventory::kube::{Command, Input, KubeError, Output, Reply};
use tidemark_core::inventory::*;
use tidemark_core::Instant;

const NS: &str = "apps";
const SECRET_NS: &str = "kube-system";
const CHUNK_LIMIT: usize = 400;
const COMPS: [&str; 2] = ["comp-a", "comp-b-recreated"];

fn lineage() -> String {
    default_lineage(NS, "syn")
}

fn time_of(n: u32) -> Timestamp {
    Timestamp::from_unix_nanos(1_790_000_000_000_000_000 + i128::from(n) * 1_000_000_007)
}

/// One resource: (kind, namespaced, name).
type Res = (u8, bool, u8);

fn entry(r: &Res) -> Entry {
    let (group, version, kind) = [
        ("", "v1", "ConfigMap"),
        ("apps", "v1", "Deployment"),
        ("", "v1", "Service"),
    ][usize::from(r.0 % 3)];
    Entry {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        namespace: r.1.then(|| "ns".to_string()),
        name: format!("res-{:02}", r.2 % 24),
        labels: None,
        annotations: None,
    }
}

/// The reference's own sort and dedupe (group, kind, namespace, name), first one wins.
fn reference_entries(res: &[Res]) -> Vec<Entry> {
    let mut v: Vec<Entry> = res.iter().map(entry).collect();
    v.sort_by(|a, b| {
        (&a.group, &a.kind, &a.namespace, &a.name, &a.version).cmp(&(
            &b.group,
            &b.kind,
            &b.namespace,
            &b.name,
            &b.version,
        ))
    });
    v.dedup_by(|later, first| later.identity() == first.identity());
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    Data,
    Index,
    Count,
    Time,
}

#[derive(Debug, Clone)]
struct RefChunk {
    uuid: String,
    index: usize,
    /// Every kind of damage done to this chunk since it was written.
    damage: BTreeSet<Damage>,
}

#[derive(Debug, Clone)]
struct RefSnap {
    comp: usize,
    time: u32,
    entries: Vec<Entry>,
    count: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Recorded,
    /// Stopped at chunk `i`: a Secret with an unreadable timestamp may be newer.
    Blocked(usize),
    Crashed,
}

/// What selection must return: `Ok((uuid, entries))`, or `Err(the reason, when the reference
/// knows it)`; `None` (outer) when there are no Secrets.
type Expected = Result<(String, Vec<Entry>), Option<Reason>>;

#[derive(Debug, Clone)]
struct RefState {
    next: u32,
    /// The current synthesis (uuid) and its Composition, once one exists.
    current: Option<String>,
    snaps: BTreeMap<String, RefSnap>,
    /// Live inventory Secrets by name.
    chunks: BTreeMap<String, RefChunk>,
    last: Option<Expect>,
}

#[derive(Debug, Clone)]
enum Transition {
    /// A new synthesis; `recreate` switches to the other Composition name (same lineage).
    Record {
        recreate: bool,
        resources: Vec<Res>,
        crash_after: Option<u8>,
    },
    /// The controller retries the current synthesis.
    Retry,
    Delete(String),
    Corrupt(String, Damage),
}

fn uuid_of(n: u32) -> String {
    format!("synthesis-{n:04}")
}

impl RefState {
    /// Writes chunks 0.. of `uuid` the way the recorder does, until a blocking chunk or the crash.
    fn write(&mut self, uuid: &str, crash_after: Option<u8>) -> Expect {
        let snap = self.snaps[uuid].clone();
        let mut writes = 0usize;
        for i in 0..snap.count {
            let name = secret_name(COMPS[snap.comp], &lineage(), i);
            if let Some(c) = self.chunks.get(&name) {
                if c.uuid == uuid && c.damage.is_empty() && c.index == i {
                    continue; // identical: skipped, not a write
                }
                if c.uuid != uuid && c.damage.contains(&Damage::Time) {
                    return Expect::Blocked(i);
                }
            }
            if crash_after.is_some_and(|k| writes >= usize::from(k)) {
                return Expect::Crashed;
            }
            writes += 1;
            self.chunks.insert(
                name,
                RefChunk {
                    uuid: uuid.to_string(),
                    index: i,
                    damage: BTreeSet::new(),
                },
            );
        }
        Expect::Recorded
    }

    /// What selection must return: `Ok((uuid, entries))`, `Err(expected reason if known)`, or
    /// `None` when there are no Secrets.
    fn expected(&self) -> Option<Expected> {
        if self.chunks.is_empty() {
            return None;
        }
        if self
            .chunks
            .values()
            .any(|c| c.damage.contains(&Damage::Time))
        {
            return Some(Err(Some(Reason::BadTimestamp)));
        }
        let newest = self
            .chunks
            .values()
            .map(|c| &c.uuid)
            .max_by_key(|u| self.snaps[*u].time)
            .unwrap();
        let snap = &self.snaps[newest];
        let group: Vec<&RefChunk> = self.chunks.values().filter(|c| &c.uuid == newest).collect();
        let damaged: Vec<&BTreeSet<Damage>> = group
            .iter()
            .map(|c| &c.damage)
            .filter(|d| !d.is_empty())
            .collect();
        let mut indices: Vec<usize> = group.iter().map(|c| c.index).collect();
        indices.sort_unstable();
        let complete = indices == (0..snap.count).collect::<Vec<_>>();
        match (complete, damaged.as_slice()) {
            (true, []) => Some(Ok((newest.clone(), snap.entries.clone()))),
            (false, []) => Some(Err(Some(Reason::MissingChunk))),
            (true, d) if d.iter().all(|d| d.len() == 1 && d.contains(&Damage::Data)) => {
                Some(Err(Some(Reason::HashMismatch)))
            }
            _ => Some(Err(None)),
        }
    }
}

struct InventoryModel;

impl ReferenceStateMachine for InventoryModel {
    type State = RefState;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<RefState> {
        Just(RefState {
            next: 1,
            current: None,
            snaps: BTreeMap::new(),
            chunks: BTreeMap::new(),
            last: None,
        })
        .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Transition> {
        let record = (
            any::<bool>(),
            proptest::collection::vec((any::<u8>(), any::<bool>(), any::<u8>()), 0..24),
            proptest::option::weighted(0.3, 0u8..4),
        )
            .prop_map(|(recreate, resources, crash_after)| Transition::Record {
                recreate,
                resources,
                crash_after,
            });
        if state.chunks.is_empty() {
            return prop_oneof![4 => record, 1 => Just(Transition::Retry)].boxed();
        }
        let names: Vec<String> = state.chunks.keys().cloned().collect();
        let damage = prop_oneof![
            Just(Damage::Data),
            Just(Damage::Index),
            Just(Damage::Count),
            Just(Damage::Time)
        ];
        prop_oneof![
            4 => record,
            2 => Just(Transition::Retry),
            2 => proptest::sample::select(names.clone()).prop_map(Transition::Delete),
            2 => (proptest::sample::select(names), damage).prop_map(|(n, d)| Transition::Corrupt(n, d)),
        ]
        .boxed()
    }

    fn preconditions(state: &RefState, t: &Transition) -> bool {
        match t {
            Transition::Delete(n) | Transition::Corrupt(n, _) => state.chunks.contains_key(n),
            _ => true,
        }
    }

    fn apply(mut state: RefState, t: &Transition) -> RefState {
        state.last = None;
        match t {
            Transition::Record {
                recreate,
                resources,
                crash_after,
            } => {
                let n = state.next;
                state.next += 1;
                let prev_comp = state.current.as_ref().map_or(0, |u| state.snaps[u].comp);
                let comp = if *recreate { 1 - prev_comp } else { prev_comp };
                let entries = reference_entries(resources);
                let count = chunk_entries(&entries, CHUNK_LIMIT).unwrap().len();
                let uuid = uuid_of(n);
                state.snaps.insert(
                    uuid.clone(),
                    RefSnap {
                        comp,
                        time: n,
                        entries,
                        count,
                    },
                );
                state.current = Some(uuid.clone());
                state.last = Some(state.write(&uuid, *crash_after));
            }
            Transition::Retry => {
                if let Some(u) = state.current.clone() {
                    state.last = Some(state.write(&u, None));
                }
            }
            Transition::Delete(n) => {
                state.chunks.remove(n);
            }
            Transition::Corrupt(n, d) => {
                if let Some(c) = state.chunks.get_mut(n) {
                    c.damage.insert(*d);
                }
            }
        }
        state
    }
}

/// A tiny Kubernetes: Compositions and ResourceSlices (Eno cluster) and Secrets (downstream).
#[derive(Debug, Default)]
struct Kube {
    rv: u64,
    comps: BTreeMap<String, CompositionView>,
    slices: BTreeMap<String, SliceView>,
    secrets: BTreeMap<String, Secret>,
}

impl Kube {
    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    fn exec(&mut self, cmd: &Command) -> Result<Reply, KubeError> {
        match cmd {
            Command::GetComposition { name, .. } => self
                .comps
                .get(name)
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
            Command::ListSecrets { label_selector, .. } => {
                let (k, v) = label_selector.split_once('=').unwrap();
                Ok(Reply::Secrets(
                    self.secrets
                        .values()
                        .filter(|s| s.labels.get(k).map(String::as_str) == Some(v))
                        .cloned()
                        .collect(),
                ))
            }
            Command::GetSecret { name, .. } => self
                .secrets
                .get(name)
                .cloned()
                .map(Reply::Secret)
                .ok_or(KubeError::NotFound),
            Command::CreateSecret(s) => {
                if self.secrets.contains_key(&s.name) {
                    return Err(KubeError::Conflict("already exists".into()));
                }
                let mut s = s.clone();
                s.resource_version = Some(self.bump());
                s.uid = format!("uid-{}", self.rv);
                self.secrets.insert(s.name.clone(), s.clone());
                Ok(Reply::Secret(s))
            }
            Command::UpdateSecret(s) => {
                let Some(cur) = self.secrets.get(&s.name) else {
                    return Err(KubeError::NotFound);
                };
                if cur.resource_version != s.resource_version {
                    return Err(KubeError::Conflict("stale resourceVersion".into()));
                }
                let mut s = s.clone();
                s.uid = cur.uid.clone();
                s.resource_version = Some(self.bump());
                self.secrets.insert(s.name.clone(), s.clone());
                Ok(Reply::Secret(s))
            }
            other => Err(KubeError::Other(format!(
                "not used by the recorder: {other:?}"
            ))),
        }
    }

    /// Publishes synthesis `n` of `comp` as the Composition's current, Ready synthesis with a
    /// finished recovery decision; a re-created Composition replaces the old one.
    fn synthesize(&mut self, comp: &str, n: u32, entries: &[Entry]) {
        let slice = format!("slice-{n}");
        let resources = entries
            .iter()
            .map(|e| {
                let api_version = e.resource_id().api_version();
                let mut meta = serde_json::json!({ "name": e.name });
                if let Some(ns) = &e.namespace {
                    meta["namespace"] = ns.clone().into();
                }
                tidemark_core::inventory::view::SliceResource {
                    manifest: serde_json::json!({"apiVersion": api_version, "kind": e.kind, "metadata": meta}).to_string(),
                    deleted: false,
                }
            })
            .collect();
        self.slices.insert(
            slice.clone(),
            SliceView {
                name: slice.clone(),
                terminating: false,
                resources,
            },
        );
        let uuid = uuid_of(n);
        let decision = Decision {
            synthesis_uuid: uuid.clone(),
            outcome: Outcome::NotNeeded,
            time: time_of(n),
        };
        let rv = self.bump();
        let uid = match self.comps.get(comp) {
            Some(c) => c.uid.clone(),
            None => format!("comp-uid-{n}"),
        };
        self.comps.retain(|name, _| name == comp);
        self.comps.insert(
            comp.to_string(),
            CompositionView {
                namespace: NS.into(),
                name: comp.into(),
                uid,
                resource_version: rv,
                synthesizer_name: "syn".into(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::from([
                    (ANN_RECOVERY_ENABLED.to_string(), "true".to_string()),
                    (DECISION_ANNOTATION.to_string(), decision.to_json()),
                ]),
                current_synthesis: Some(SynthesisView {
                    uuid,
                    synthesized: Some(time_of(n)),
                    ready: true,
                    resource_slice_names: vec![slice],
                }),
                previous_synthesis: None,
                deleting: false,
            },
        );
    }

    /// Runs one recording; `crash_after` stops the process before its (k+1)-th write.
    fn record(&mut self, comp: &str, crash_after: Option<u8>) -> Option<RecordOutcome> {
        let cfg = RecorderConfig {
            chunk_limit: CHUNK_LIMIT,
            secret_namespace: SECRET_NS.into(),
            ..RecorderConfig::default()
        };
        let mut r = Recorder::new(cfg, NS, comp);
        let now = Instant::from_nanos(1);
        let mut writes = 0u8;
        for _ in 0..10_000 {
            match r.poll_output(now) {
                Output::Command { id, cmd } => {
                    if matches!(cmd, Command::CreateSecret(_) | Command::UpdateSecret(_)) {
                        if crash_after.is_some_and(|k| writes >= k) {
                            return None;
                        }
                        writes += 1;
                    }
                    let result = self.exec(&cmd);
                    r.handle_input(now, Input::Done { id, result });
                }
                Output::Stopped(o) => return Some(o),
                Output::Timeout(t) => {
                    panic!("recorder waits until {t:?} with every reply delivered")
                }
            }
        }
        panic!("recorder did not finish");
    }
}

struct InventoryTest;

impl StateMachineTest for InventoryTest {
    type SystemUnderTest = Kube;
    type Reference = InventoryModel;

    fn init_test(_: &RefState) -> Kube {
        Kube::default()
    }

    fn apply(mut kube: Kube, state: &RefState, t: Transition) -> Kube {
        let outcome = match t {
            Transition::Record { crash_after, .. } => {
                let uuid = state.current.clone().unwrap();
                let snap = &state.snaps[&uuid];
                let comp = COMPS[snap.comp];
                kube.synthesize(comp, snap.time, &snap.entries);
                Some(kube.record(comp, crash_after))
            }
            Transition::Retry => state
                .current
                .as_ref()
                .map(|u| kube.record(COMPS[state.snaps[u].comp], None)),
            Transition::Delete(name) => {
                kube.secrets.remove(&name).expect("deleting a live chunk");
                None
            }
            Transition::Corrupt(name, d) => {
                let s = kube
                    .secrets
                    .get_mut(&name)
                    .expect("corrupting a live chunk");
                let ann = &mut s.annotations;
                // Each kind of damage is idempotent, so repeating it keeps the reference exact.
                match d {
                    Damage::Data => s.data.get_mut(DATA_KEY).unwrap().push(b' '),
                    Damage::Index => {
                        ann.insert(ANN_CHUNK_INDEX.into(), "9999".into());
                    }
                    Damage::Count => {
                        ann.insert(ANN_CHUNK_COUNT.into(), "10001".into());
                    }
                    Damage::Time => {
                        ann.insert(ANN_SYNTHESIZED.into(), "not-a-time".into());
                    }
                }
                None
            }
        };
        match (outcome, &state.last) {
            (None, None) => {}
            (Some(None), Some(Expect::Crashed)) => {}
            (
                Some(Some(RecordOutcome::Recorded { synthesis_uuid, .. })),
                Some(Expect::Recorded),
            ) => {
                assert_eq!(Some(&synthesis_uuid), state.current.as_ref());
            }
            (Some(Some(RecordOutcome::Blocked { secret, .. })), Some(Expect::Blocked(i))) => {
                let snap = &state.snaps[state.current.as_ref().unwrap()];
                assert_eq!(secret, secret_name(COMPS[snap.comp], &lineage(), *i));
            }
            (got, want) => panic!("recorder outcome {got:?}, reference expects {want:?}"),
        }
        kube
    }

    fn check_invariants(kube: &Kube, state: &RefState) {
        let secrets: Vec<Secret> = kube.secrets.values().cloned().collect();
        let got = select(&secrets, &lineage());
        match (state.expected(), &got) {
            (None, Selection::None) => {}
            (Some(Ok((uuid, entries))), Selection::Selected(s)) => {
                assert_eq!(s.synthesis_uuid, uuid, "selected another snapshot");
                assert_eq!(
                    &s.entries, &entries,
                    "selected entries differ from the recorded ones"
                );
                assert_eq!(s.secret_names.len(), state.snaps[&uuid].count);
            }
            (Some(Err(reason)), Selection::Invalid(i)) => {
                if let Some(r) = reason {
                    assert_eq!(i.reason, r, "{}", i.detail);
                }
            }
            (want, got) => panic!("selection {got:?}, reference expects {want:?}"),
        }
        if let Selection::Selected(s) = &got {
            // Tombstones against the snapshot's own resources: none.
            let present = s.entries.iter().map(Entry::identity).collect();
            assert!(tombstones(&s.entries, &present).is_empty());
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/state_machine_inventory.txt"),
        )),
        max_shrink_iters: 4096,
        .. ProptestConfig::default()
    })]

    #[test]
    fn inventory_recorder_and_selection(sequential 1..40 => InventoryTest);
}
