//! Recovery against the model apiserver on simulated time, with slow finalizers: every
//! downstream object carries a finalizer that a seeded "controller" removes some seconds
//! after the delete (and, in some seeds, never). The real recorder and recovery machines run;
//! time moves only when the machine asks to wait or a request takes its (seeded) latency.
//!
//! Checked on every delete: Eno's order (ungrouped first, then lowest group first) and that
//! a group starts only when every object of the lower groups is gone, or terminating for
//! longer than the configured wait. The other cases a privileged deleter must refuse or
//! hold (another namespace's lineage, a future snapshot, a plan over budget, a protected
//! CRD) run through the same world.

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tidemark_core::inventory::{
    default_lineage, effective_deletion_group, entries_from_slices, Command, Entry, Input, Output,
    Policy, Protection, RecordOutcome, Recorder, RecorderConfig, Recovery, RecoveryConfig,
    RecoveryOutcome, ResourceId, SliceView, Timestamp,
};
use tidemark_core::inventory::{Outcome, Reason};
use tidemark_core::rng::Rng;
use tidemark_core::{Instant, Machine};
use tidemark_model::apiserver::inventory::{execute, gvr_of};
use tidemark_model::apiserver::{ApiServer, Gvr, Patch, Subresource};

const SYNTH: &str = "syn";
const T0: u64 = 1_780_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;
const FINALIZER: &str = "example.com/slow";

struct World {
    api: ApiServer,
    rng: Rng,
    now: u64,
    seq: u64,
    /// Finalizer removals due, by object.
    due: BTreeMap<ResourceId, u64>,
    /// Objects whose finalizer is never removed.
    stuck: BTreeSet<ResourceId>,
    /// Effective deletion group of every snapshot entry (the order under test).
    groups: BTreeMap<ResourceId, Option<i64>>,
    /// Deletes accepted so far, with their time.
    deleted: Vec<(ResourceId, u64)>,
    /// How long the machine was told to wait for groups.
    group_wait: u64,
    /// Waits the machine asked for.
    sleeps: u64,
}

fn widget(ns: &str, name: &str, group: Option<&str>) -> Value {
    let mut meta = json!({"name": name, "namespace": ns});
    if let Some(g) = group {
        meta["annotations"] = json!({"eno.azure.io/deletion-group": g});
    }
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta})
}

fn crd() -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"}})
}

fn configmap(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}})
}

fn id_of(manifest: &Value) -> ResourceId {
    let (group, version) = match manifest["apiVersion"]
        .as_str()
        .unwrap_or("")
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), "v1".to_string()),
    };
    ResourceId {
        group,
        version,
        kind: manifest["kind"].as_str().unwrap_or("").into(),
        namespace: manifest["metadata"]["namespace"]
            .as_str()
            .map(str::to_string),
        name: manifest["metadata"]["name"].as_str().unwrap_or("").into(),
    }
}

impl World {
    fn new(seed: u64) -> World {
        World {
            api: ApiServer::new(),
            rng: Rng::new(seed),
            now: T0,
            seq: 0,
            due: BTreeMap::new(),
            stuck: BTreeSet::new(),
            groups: BTreeMap::new(),
            deleted: Vec::new(),
            group_wait: 0,
            sleeps: 0,
        }
    }

    fn at(&self) -> Instant {
        Instant(self.now)
    }

    /// Creates the downstream objects of `manifests`, each with the slow finalizer.
    fn downstream(&mut self, manifests: &[Value]) {
        for m in manifests {
            let mut obj = m.clone();
            obj["metadata"]["finalizers"] = json!([FINALIZER]);
            let id = id_of(m);
            let ns = id.namespace.clone().unwrap_or_default();
            self.api
                .create(self.at(), &gvr_of(&id), &ns, obj)
                .expect("downstream object");
        }
    }

    fn exists(&self, id: &ResourceId) -> Option<bool> {
        let ns = id.namespace.clone().unwrap_or_default();
        self.api
            .peek(&gvr_of(id), &ns, &id.name)
            .map(|o| o.pointer("/metadata/deletionTimestamp").is_some())
    }

    /// A Composition `ns/name` whose current synthesis (Ready, at `at`) is `manifests`.
    fn composition(
        &mut self,
        ns: &str,
        name: &str,
        at: u64,
        manifests: &[Value],
        lineage: Option<&str>,
    ) {
        self.seq += 1;
        let uuid = format!("00000000-0000-4000-8000-{:012x}", self.seq);
        let slice = format!("{name}-{}", self.seq);
        let resources: Vec<Value> = manifests
            .iter()
            .map(|m| json!({"manifest": m.to_string()}))
            .collect();
        self.api
            .create(
                self.at(),
                &Gvr::resource_slices(),
                ns,
                json!({"metadata": {"name": slice}, "spec": {"synthesisUUID": uuid, "resources": resources}}),
            )
            .expect("slice");
        let mut ann = json!({"eno.azure.io/recovery-enabled": "true"});
        if let Some(l) = lineage {
            ann["eno.azure.io/inventory-lineage"] = json!(l);
        }
        self.api
            .create(
                self.at(),
                &Gvr::compositions(),
                ns,
                json!({"metadata": {"name": name, "annotations": ann}, "spec": {"synthesizer": {"name": SYNTH}}}),
            )
            .expect("composition");
        let ts = Timestamp::from_unix_nanos(i128::from(at)).format_rfc3339_nanos();
        let status = json!({"status": {"currentSynthesis": {"uuid": uuid, "synthesized": ts,
            "reconciled": ts, "ready": ts, "resourceSlices": [{"name": slice}]}}});
        self.api
            .patch(
                self.at(),
                &Gvr::compositions(),
                ns,
                name,
                &Patch::Merge(status),
                Subresource::Status,
            )
            .expect("status");
    }

    fn delete_composition(&mut self, ns: &str, name: &str) {
        self.api
            .delete(self.at(), &Gvr::compositions(), ns, name, None, None)
            .expect("delete composition");
    }

    /// Moves time to `t`, removing every finalizer that is due by then.
    fn tick_to(&mut self, t: u64) {
        self.now = self.now.max(t);
        let due: Vec<ResourceId> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= self.now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.due.remove(&id);
            let ns = id.namespace.clone().unwrap_or_default();
            let gvr = gvr_of(&id);
            if let Some(mut obj) = self.api.peek(&gvr, &ns, &id.name).cloned() {
                obj["metadata"]["finalizers"] = json!([]);
                self.api
                    .update(self.at(), &gvr, &ns, &id.name, obj, Subresource::Main)
                    .expect("finalizer removed");
            }
        }
    }

    /// Eno's order and the group wait, checked before `id` is deleted.
    fn check_delete(&self, id: &ResourceId) {
        let group = self.groups.get(id).copied().flatten();
        for (earlier, when) in &self.deleted {
            let Some(g) = self.groups.get(earlier).copied().flatten() else {
                continue;
            };
            let Some(mine) = group else {
                panic!("ungrouped {id:?} deleted after grouped {earlier:?}");
            };
            assert!(
                g <= mine,
                "group {mine} ({id:?}) deleted before group {g} ({earlier:?})"
            );
            if g == mine {
                continue;
            }
            // The lower group's objects are gone, or the wait for them has run out.
            let last_of_group = self
                .deleted
                .iter()
                .filter(|(x, _)| self.groups.get(x).copied().flatten() == Some(g))
                .map(|(_, w)| *w)
                .max()
                .unwrap_or(*when);
            let waited = self.now >= last_of_group + self.group_wait;
            assert!(
                self.exists(earlier).is_none() || waited,
                "{id:?} (group {mine}) deleted while {earlier:?} (group {g}) still exists"
            );
        }
    }

    fn drive<M, O>(&mut self, m: &mut M) -> O
    where
        M: Machine<Input = Input, Output = Output<O>>,
    {
        loop {
            match m.poll_output(self.at()) {
                Output::Command { id, cmd } => {
                    if let Command::DeleteResource { id: rid, .. } = &cmd {
                        self.check_delete(rid);
                    }
                    let now = self.at();
                    let result = execute(&mut self.api, now, &cmd);
                    if let (Command::DeleteResource { id: rid, .. }, Ok(_)) = (&cmd, &result) {
                        self.deleted.push((rid.clone(), self.now));
                        if !self.stuck.contains(rid) {
                            let delay = self.rng.below(6 * SEC);
                            self.due.insert(rid.clone(), self.now + delay);
                        }
                    }
                    let latency = 1_000_000 + self.rng.below(30_000_000);
                    self.tick_to(self.now + latency);
                    m.handle_input(self.at(), Input::Done { id, result });
                }
                Output::Timeout(t) => {
                    self.sleeps += 1;
                    self.tick_to(t.as_nanos());
                }
                Output::Stopped(o) => return o,
            }
        }
    }

    fn recovery_config(&mut self, policy: Policy) -> RecoveryConfig {
        self.group_wait = 20 * SEC;
        RecoveryConfig {
            policy,
            group_wait: Duration::from_nanos(self.group_wait),
            wait_poll: Duration::from_secs(1),
            ..RecoveryConfig::default()
        }
    }

    fn recover(&mut self, ns: &str, name: &str, policy: Policy) -> RecoveryOutcome {
        let cfg = self.recovery_config(policy);
        let wall = Timestamp::from_unix_nanos(i128::from(self.now));
        let mut m = Recovery::new(cfg, ns, name, wall);
        self.drive(&mut m)
    }

    /// Decides (nothing to recover yet) and records `ns/name`.
    fn record(&mut self, ns: &str, name: &str) {
        let out = self.recover(ns, name, Policy::default());
        assert!(matches!(out, RecoveryOutcome::Decided { .. }), "{out:?}");
        let mut r = Recorder::new(RecorderConfig::default(), ns, name);
        let out = self.drive(&mut r);
        assert!(matches!(out, RecordOutcome::Recorded { .. }), "{out:?}");
    }

    /// The old synthesis `old` of `ns/web` recorded, its Composition deleted, and `ns/web-2`
    /// created with `new`, synthesized `later` seconds after the old one.
    fn recreated(&mut self, ns: &str, old: &[Value], new: &[Value], later: i64) {
        self.composition(ns, "web", T0, old, None);
        self.record(ns, "web");
        self.delete_composition(ns, "web");
        let at = (T0 as i128 + i128::from(later) * SEC as i128) as u64;
        self.composition(ns, "web-2", at, new, None);
    }

    /// Entries of `manifests` and their effective groups, for the checks.
    fn learn_groups(&mut self, manifests: &[Value]) {
        let slices = vec![SliceView {
            name: "s".into(),
            terminating: false,
            resources: manifests
                .iter()
                .map(|m| tidemark_core::inventory::SliceResource {
                    manifest: m.to_string(),
                    deleted: false,
                })
                .collect(),
        }];
        let entries: Vec<Entry> = entries_from_slices(&slices).expect("entries");
        for e in entries {
            self.groups
                .insert(e.resource_id(), effective_deletion_group(&e));
        }
    }
}

fn decided(out: RecoveryOutcome) -> (Outcome, tidemark_core::inventory::recovery::Plan) {
    match out {
        RecoveryOutcome::Decided { decision, plan, .. } => (decision.outcome, plan),
        o => panic!("{o:?}"),
    }
}

/// A budget that allows the whole snapshot, and CRDs deletable: the order under test.
fn open() -> Policy {
    Policy {
        max_deletion_fraction: 1.0,
        deletable_protected: BTreeSet::from([Protection::CustomResourceDefinition]),
        ..Policy::default()
    }
}

#[test]
fn groups_wait_for_slow_finalizers_in_enos_order() {
    let ns = "shop";
    let old = vec![
        widget(ns, "free", None),
        widget(ns, "w1a", Some("1")),
        widget(ns, "w1b", Some("1")),
        widget(ns, "w2", Some("2")),
        widget(ns, "w3", Some("3")),
        crd(),
        configmap(ns, "keep"),
    ];
    let new = vec![configmap(ns, "keep")];
    let mut sleeps = 0;
    let mut gave_up = 0;
    for seed in 0..40 {
        let mut w = World::new(seed);
        // Every fourth seed has one finalizer that never finishes.
        if seed % 4 == 3 {
            let victim = [1, 2, 3, 4][w.rng.below(4) as usize];
            w.stuck.insert(id_of(&old[victim]));
        }
        w.learn_groups(&old);
        w.downstream(&old);
        w.recreated(ns, &old, &new, 60);
        let (outcome, plan) = decided(w.recover(ns, "web-2", open()));
        assert_eq!(outcome, Outcome::Applied(6), "seed {seed}");
        // The CRD's default group (100) puts it after all its custom resources.
        let order: Vec<String> = plan
            .tombstones
            .iter()
            .map(|t| t.entry.name.clone())
            .collect();
        assert_eq!(
            order,
            ["free", "w1a", "w1b", "w2", "w3", "widgets.example.com"],
            "seed {seed}"
        );
        assert_eq!(w.deleted.len(), 6, "seed {seed}");
        gave_up += plan
            .waits
            .iter()
            .filter(|x| !x.gave_up_on.is_empty())
            .count();
        sleeps += w.sleeps;
        // Only a stuck object can still be there; everything else went.
        w.tick_to(w.now + 10 * SEC);
        for (id, _) in &w.deleted {
            assert!(
                w.exists(id).is_none() || w.stuck.contains(id),
                "seed {seed}: {id:?} left behind"
            );
        }
    }
    assert!(
        sleeps > 40,
        "the machines waited for finalizers ({sleeps} waits)"
    );
    assert!(gave_up > 0, "some seeds exercised the end of the wait");
}

#[test]
fn a_crd_tombstone_is_planned_and_not_deleted() {
    let ns = "shop";
    let old = vec![widget(ns, "w", Some("1")), crd(), configmap(ns, "keep")];
    let mut w = World::new(1);
    w.learn_groups(&old);
    w.downstream(&old);
    w.recreated(ns, &old, &[configmap(ns, "keep")], 60);
    let policy = Policy {
        max_deletion_fraction: 1.0,
        ..Policy::default()
    };
    let (outcome, plan) = decided(w.recover(ns, "web-2", policy));
    assert_eq!(outcome, Outcome::Applied(2));
    assert_eq!(
        plan.tombstones[1].protected,
        Some(Protection::CustomResourceDefinition)
    );
    assert_eq!(
        w.exists(&id_of(&crd())),
        Some(false),
        "the CRD stays, not terminating"
    );
    assert_eq!(w.deleted.len(), 1);
}

#[test]
fn a_lineage_override_into_another_namespace_deletes_nothing() {
    let victim = "team-a";
    let old = vec![widget(victim, "db", None), configmap(victim, "keep")];
    let mut w = World::new(2);
    w.downstream(&old);
    w.composition(victim, "web", T0, &old, None);
    w.record(victim, "web");
    w.delete_composition(victim, "web");
    let lineage = default_lineage(victim, SYNTH);
    w.composition(
        "team-z",
        "evil",
        T0 + 60 * SEC,
        &[configmap("team-z", "x")],
        Some(&lineage),
    );
    let (outcome, _) = decided(w.recover("team-z", "evil", open()));
    assert_eq!(outcome, Outcome::InventoryInvalid(Reason::LineageConflict));
    assert!(w.deleted.is_empty());
}

#[test]
fn a_future_dated_snapshot_is_refused() {
    let ns = "shop";
    let old = vec![widget(ns, "db", None), configmap(ns, "keep")];
    let mut w = World::new(3);
    w.downstream(&old);
    // The re-created Composition's synthesis is older than the recorded one.
    w.recreated(ns, &old, &[configmap(ns, "keep")], -60);
    let (outcome, _) = decided(w.recover(ns, "web-2", open()));
    assert_eq!(outcome, Outcome::InventoryInvalid(Reason::BadTimestamp));
    assert!(w.deleted.is_empty());
}

#[test]
fn a_plan_over_budget_is_held_then_released() {
    let ns = "shop";
    let gone: Vec<Value> = (0..101)
        .map(|i| widget(ns, &format!("g{i:03}"), None))
        .collect();
    let kept: Vec<Value> = (0..110)
        .map(|i| configmap(ns, &format!("k{i:03}")))
        .collect();
    let old: Vec<Value> = gone.iter().chain(&kept).cloned().collect();
    let mut w = World::new(4);
    w.downstream(&gone);
    w.recreated(ns, &old, &kept, 60);
    let (outcome, plan) = decided(w.recover(ns, "web-2", Policy::default()));
    assert_eq!(
        outcome,
        Outcome::Held {
            tombstones: 101,
            deletions: 101,
            limit: 100
        }
    );
    assert!(plan.results.is_empty() && w.deleted.is_empty());
    // The controller leaves it held.
    assert!(matches!(
        w.recover(ns, "web-2", Policy::default()),
        RecoveryOutcome::AlreadyDecided(_)
    ));
    let release = Policy {
        allow_deletions: Some(101),
        ..Policy::default()
    };
    let (outcome, _) = decided(w.recover(ns, "web-2", release));
    assert_eq!(outcome, Outcome::Applied(101));
    assert_eq!(w.deleted.len(), 101);
}
