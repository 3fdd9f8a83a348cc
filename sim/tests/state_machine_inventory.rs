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
//! The recorder runs against the model apiserver (`tidemark-model`, the one the simulator and
//! the Kubernetes conformance server use), through the simulator's command executor.

// Panics are the test report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::inventory::chunk::{chunk_entries, secret_name};
use tidemark_core::inventory::decision::{Decision, Outcome, DECISION_ANNOTATION};
use tidemark_core::inventory::kube::{Command, Input, KubeError, Output, Reply};
use tidemark_core::inventory::*;
use tidemark_core::Instant;
use tidemark_model::apiserver::inventory::execute;
use tidemark_model::apiserver::{ApiServer, Gvr, Subresource};

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

/// The cluster: the model apiserver (the simulator's), driven through the same command
/// executor the simulator's inventory scenarios use.
struct Kube {
    api: ApiServer,
}

impl Default for Kube {
    fn default() -> Kube {
        Kube {
            api: ApiServer::new(),
        }
    }
}

/// The one instant every step runs at: the recorder's waits are not under test here.
fn now() -> Instant {
    Instant::from_nanos(1_790_000_000_000_000_000)
}

impl Kube {
    fn exec(&mut self, cmd: &Command) -> Result<Reply, KubeError> {
        execute(&mut self.api, now(), cmd)
    }

    /// The stored inventory Secret `name`, as the recorder reads it.
    fn secret(&mut self, name: &str) -> Secret {
        let get = Command::GetSecret {
            namespace: SECRET_NS.into(),
            name: name.into(),
        };
        match self.exec(&get) {
            Ok(Reply::Secret(s)) => s,
            other => panic!("reading a live chunk {name}: {other:?}"),
        }
    }

    fn secrets(&self) -> Vec<Secret> {
        self.api
            .all(&Gvr::secrets())
            .into_iter()
            .map(|v| Secret::from_kube_json(v).expect("a stored Secret reads back"))
            .collect()
    }

    /// Publishes synthesis `n` of `comp` as the Composition's current, Ready synthesis with a
    /// finished recovery decision; a re-created Composition replaces the old one.
    fn synthesize(&mut self, comp: &str, n: u32, entries: &[Entry]) {
        let slice = format!("slice-{n}");
        let resources: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let api_version = e.resource_id().api_version();
                let mut meta = json!({ "name": e.name });
                if let Some(ns) = &e.namespace {
                    meta["namespace"] = ns.clone().into();
                }
                json!({"manifest": json!({"apiVersion": api_version, "kind": e.kind, "metadata": meta}).to_string()})
            })
            .collect();
        let uuid = uuid_of(n);
        let _ = self.api.create(
            now(),
            &Gvr::resource_slices(),
            NS,
            json!({"metadata": {"name": slice}, "spec": {"synthesisUUID": uuid, "resources": resources}}),
        );
        let decision = Decision {
            synthesis_uuid: uuid.clone(),
            outcome: Outcome::NotNeeded,
            time: time_of(n),
        };
        let comps = Gvr::compositions();
        let others: Vec<String> = self
            .api
            .all(&comps)
            .iter()
            .filter_map(|c| c["metadata"]["name"].as_str().map(str::to_string))
            .filter(|name| name != comp)
            .collect();
        for other in others {
            self.api
                .delete(now(), &comps, NS, &other, None, None)
                .expect("deleting the replaced Composition");
        }
        let annotations = json!({
            ANN_RECOVERY_ENABLED: "true",
            DECISION_ANNOTATION: decision.to_json(),
        });
        let mut obj = match self.api.peek(&comps, NS, comp).cloned() {
            Some(mut c) => {
                c["metadata"]["annotations"] = annotations;
                self.api
                    .update(now(), &comps, NS, comp, c, Subresource::Main)
                    .expect("updating the Composition")
            }
            None => self
                .api
                .create(
                    now(),
                    &comps,
                    NS,
                    json!({"metadata": {"name": comp, "annotations": annotations},
                           "spec": {"synthesizer": {"name": "syn"}}}),
                )
                .expect("creating the Composition"),
        };
        let at = time_of(n).format_rfc3339_nanos();
        obj["status"] = json!({"currentSynthesis": {"uuid": uuid, "synthesized": at, "ready": at,
                                                     "resourceSlices": [{"name": slice}]}});
        self.api
            .update(now(), &comps, NS, comp, obj, Subresource::Status)
            .expect("publishing the synthesis");
    }

    /// Runs one recording; `crash_after` stops the process before its (k+1)-th write.
    fn record(&mut self, comp: &str, crash_after: Option<u8>) -> Option<RecordOutcome> {
        let cfg = RecorderConfig {
            chunk_limit: CHUNK_LIMIT,
            secret_namespace: SECRET_NS.into(),
            ..RecorderConfig::default()
        };
        let mut r = Recorder::new(cfg, NS, comp);
        let now = now();
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
                kube.api
                    .delete(now(), &Gvr::secrets(), SECRET_NS, &name, None, None)
                    .expect("deleting a live chunk");
                None
            }
            Transition::Corrupt(name, d) => {
                let mut s = kube.secret(&name);
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
                let put = Command::UpdateSecret(s);
                assert!(
                    matches!(kube.exec(&put), Ok(Reply::Secret(_))),
                    "corrupting a live chunk"
                );
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
        let secrets = kube.secrets();
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
