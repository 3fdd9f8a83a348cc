//! Inventory scenarios on the model apiserver: the real recorder and recovery machines, many at
//! once, interleaved by a seeded scheduler with crashes (mid-write, between decision and
//! recording), injected 409s, re-syntheses and Composition re-creation between check and
//! write. Invariants, checked after every step:
//!
//! - selection never returns a mixed snapshot (its entries are exactly one synthesis's);
//! - tombstones never include an identity of the current synthesis, and no delete ever hits
//!   a resource the Composition's current synthesis wants, while that synthesis is current;
//! - after a quiet phase, the newest Ready synthesis is complete and selected.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tidemark_core::inventory::entry::normalize;
use tidemark_core::inventory::{
    default_lineage, entries_from_slices, lineage_selector, present_identities, select, tombstones,
    Command, Entry, Input, Mode, Output, RecordOutcome, Recorder, RecorderConfig, Recovery,
    RecoveryConfig, RecoveryOutcome, Reply, Secret, Selection, SliceView, Timestamp,
};
use tidemark_core::rng::Rng;
use tidemark_core::Instant;
use tidemark_model::apiserver::inventory::execute;
use tidemark_model::apiserver::{ApiServer, Fault, Gvr, Subresource};

const NS: &str = "shop";
const APP_NS: &str = "app";
const SECRET_NS: &str = "kube-system";
const SYNTH: &str = "web-synth";
const T0: u64 = 1_780_000_000_000_000_000;

// Few actors live at once; boxing would only add noise to every match.
#[allow(clippy::large_enum_variant)]
enum Machine {
    Recorder(Recorder),
    Recovery(Recovery),
}

struct Actor {
    machine: Machine,
    /// The Composition and synthesis current when the actor started.
    comp: String,
    started_uuid: String,
    pending: Option<(u64, Command)>,
}

struct World {
    api: ApiServer,
    rng: Rng,
    now: u64,
    seq: u64,
    /// The live Composition's name.
    live: String,
    /// Synthesis UUID => its entries.
    truth: BTreeMap<String, Vec<Entry>>,
    actors: Vec<Actor>,
    lineage: String,
    deletes: u64,
}

fn universe(i: u64) -> String {
    format!("cm-{i:02}")
}

impl World {
    fn new(seed: u64) -> World {
        let mut w = World {
            api: ApiServer::new(),
            rng: Rng::new(seed),
            now: T0,
            seq: 0,
            live: String::new(),
            truth: BTreeMap::new(),
            actors: Vec::new(),
            lineage: default_lineage(NS, SYNTH),
            deletes: 0,
        };
        w.recreate();
        w
    }

    fn at(&mut self) -> Instant {
        self.now += 1_000_000 + self.rng.below(5_000_000_000);
        Instant(self.now)
    }

    fn uuid(&mut self) -> String {
        self.seq += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.seq)
    }

    /// A new synthesis of the live Composition: a random subset of the universe (2..=10 of
    /// 12), split over 1-2 slices; downstream objects it wants are (re)created as Eno would.
    fn resynthesize(&mut self) {
        let now = self.at();
        let uuid = self.uuid();
        let mut wanted: Vec<String> = (0..12)
            .filter(|_| self.rng.below(3) > 0)
            .map(universe)
            .collect();
        if wanted.len() < 2 {
            wanted = vec![universe(0), universe(1)];
        }
        let nslices = 1 + self.rng.below(2) as usize;
        let mut slice_names = Vec::new();
        let mut views = Vec::new();
        for (si, part) in wanted.chunks(wanted.len().div_ceil(nslices)).enumerate() {
            let name = format!("{}-{}-{si}", self.live, &uuid[uuid.len() - 4..]);
            let resources: Vec<Value> = part
                .iter()
                .map(|n| {
                    json!({"manifest": json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": n, "namespace": APP_NS}}).to_string()})
                })
                .collect();
            let obj = self
                .api
                .create(
                    now,
                    &Gvr::resource_slices(),
                    NS,
                    json!({"metadata": {"name": name},
                           "spec": {"synthesisUUID": uuid, "resources": resources}}),
                )
                .expect("slice");
            views.push(SliceView::from_kube_json(&obj).expect("slice view"));
            slice_names.push(json!({"name": name}));
        }
        self.truth.insert(
            uuid.clone(),
            normalize(entries_from_slices(&views).expect("entries")),
        );
        for n in &wanted {
            let _ = self.api.create(
                now,
                &Gvr::new("", "v1", "configmaps"),
                APP_NS,
                json!({"metadata": {"name": n}}),
            );
        }
        let ts = Timestamp::from_unix_nanos(i128::from(now.as_nanos())).format_rfc3339_nanos();
        let mut comp = self
            .api
            .peek(&Gvr::compositions(), NS, &self.live)
            .cloned()
            .expect("live composition");
        let prev = comp.pointer("/status/currentSynthesis").cloned();
        comp["status"] = json!({
            "currentSynthesis": {"uuid": uuid, "synthesized": ts, "reconciled": ts, "ready": ts,
                                 "resourceSlices": slice_names},
            "previousSynthesis": prev,
        });
        self.api
            .update(
                now,
                &Gvr::compositions(),
                NS,
                &self.live.clone(),
                comp,
                Subresource::Status,
            )
            .expect("status");
    }

    /// Deletes the live Composition (and its slices) and creates a new one with the same
    /// synthesizer under a new name: recovery must find the history by lineage.
    fn recreate(&mut self) {
        let now = self.at();
        if !self.live.is_empty() {
            let live = self.live.clone();
            let _ = self
                .api
                .delete(now, &Gvr::compositions(), NS, &live, None, None);
            let (slices, _) = self
                .api
                .list(&Gvr::resource_slices(), Some(NS), None)
                .expect("list");
            for s in slices {
                let name = s["metadata"]["name"].as_str().unwrap_or("").to_string();
                let _ = self
                    .api
                    .delete(now, &Gvr::resource_slices(), NS, &name, None, None);
            }
        }
        self.seq += 1;
        self.live = format!("web-{}", self.seq);
        self.api
            .create(
                now,
                &Gvr::compositions(),
                NS,
                json!({"metadata": {"name": self.live,
                         "annotations": {"eno.azure.io/recovery-enabled": "true"}},
                       "spec": {"synthesizer": {"name": SYNTH}}}),
            )
            .expect("composition");
        self.resynthesize();
    }

    /// An environment change, not subject to injected faults.
    fn env(&mut self, f: fn(&mut World)) {
        let faults = self.api.take_faults();
        f(self);
        self.api.restore_faults(faults);
    }

    fn current_uuid(&self) -> Option<String> {
        self.api
            .peek(&Gvr::compositions(), NS, &self.live)?
            .pointer("/status/currentSynthesis/uuid")?
            .as_str()
            .map(str::to_string)
    }

    fn current_slices(&self) -> Vec<SliceView> {
        let Some(comp) = self.api.peek(&Gvr::compositions(), NS, &self.live) else {
            return Vec::new();
        };
        let names: Vec<String> = comp
            .pointer("/status/currentSynthesis/resourceSlices")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        names
            .iter()
            .filter_map(|n| self.api.peek(&Gvr::resource_slices(), NS, n))
            .map(|v| SliceView::from_kube_json(v).expect("slice"))
            .collect()
    }

    fn secrets(&self) -> Vec<Secret> {
        self.api
            .all(&Gvr::secrets())
            .into_iter()
            .map(|v| Secret::from_kube_json(v).expect("secret"))
            .collect()
    }

    fn spawn(&mut self, recovery: bool) {
        let scope_ns = Some(NS.to_string());
        let machine = if recovery {
            let mut cfg = RecoveryConfig {
                secret_namespace: SECRET_NS.into(),
                mode: Mode::Apply,
                request_timeout: Duration::from_secs(3600),
                ..RecoveryConfig::default()
            };
            cfg.scope.namespace = scope_ns;
            let ts = Timestamp::from_unix_nanos(i128::from(self.now));
            Machine::Recovery(Recovery::new(cfg, NS, &self.live, ts))
        } else {
            let mut cfg = RecorderConfig {
                secret_namespace: SECRET_NS.into(),
                request_timeout: Duration::from_secs(3600),
                ..RecorderConfig::default()
            };
            cfg.scope.namespace = scope_ns;
            Machine::Recorder(Recorder::new(cfg, NS, &self.live))
        };
        self.actors.push(Actor {
            machine,
            comp: self.live.clone(),
            started_uuid: self.current_uuid().unwrap_or_default(),
            pending: None,
        });
    }

    /// One step of actor `i`. Returns false when it stopped.
    fn step_actor(&mut self, i: usize, crash_after_execute: bool) -> bool {
        let now = Instant(self.now);
        if let Some((id, cmd)) = self.actors[i].pending.take() {
            if let Command::DeleteResource { id: rid, .. } = &cmd {
                self.check_delete(i, rid);
            }
            let result = execute(&mut self.api, now, &cmd);
            if matches!(
                (&cmd, &result),
                (Command::DeleteResource { .. }, Ok(Reply::Deleted))
            ) {
                self.deletes += 1;
            }
            if crash_after_execute {
                return false; // the write happened, the reply is lost with the process
            }
            let input = Input::Done { id, result };
            match &mut self.actors[i].machine {
                Machine::Recorder(m) => m.handle_input(now, input),
                Machine::Recovery(m) => m.handle_input(now, input),
            }
            return true;
        }
        let out = match &mut self.actors[i].machine {
            Machine::Recorder(m) => match m.poll_output(now) {
                Output::Command { id, cmd } => Some((id, cmd)),
                Output::Timeout(_) => panic!("recorder idle without a command"),
                Output::Stopped(_) => None,
            },
            Machine::Recovery(m) => match m.poll_output(now) {
                Output::Command { id, cmd } => Some((id, cmd)),
                Output::Timeout(_) => panic!("recovery idle without a command"),
                Output::Stopped(_) => None,
            },
        };
        match out {
            Some(p) => {
                self.actors[i].pending = Some(p);
                true
            }
            None => false,
        }
    }

    /// No delete may hit what the Composition's current synthesis wants while the synthesis
    /// the actor started on is still current.
    fn check_delete(&self, i: usize, rid: &tidemark_core::inventory::ResourceId) {
        let a = &self.actors[i];
        if a.comp != self.live || self.current_uuid().as_deref() != Some(&a.started_uuid) {
            return;
        }
        let present = present_identities(&self.current_slices()).expect("present");
        let ident = tidemark_core::inventory::Identity {
            group: rid.group.clone(),
            kind: rid.kind.clone(),
            namespace: rid.namespace.clone(),
            name: rid.name.clone(),
        };
        assert!(
            !present.contains(&ident),
            "delete of a currently wanted resource {rid:?}"
        );
    }

    fn check_invariants(&self) {
        let secrets = self.secrets();
        if let Selection::Selected(s) = select(&secrets, &self.lineage) {
            let truth = self
                .truth
                .get(&s.synthesis_uuid)
                .expect("selected a synthesis that existed");
            assert_eq!(
                &normalize(s.entries.clone()),
                truth,
                "mixed or wrong snapshot selected for {}",
                s.synthesis_uuid
            );
            let present = present_identities(&self.current_slices()).expect("present");
            let t = tombstones(&s.entries, &present);
            assert!(
                t.iter().all(|e| !present.contains(&e.identity())),
                "tombstone of a current identity"
            );
        }
    }

    /// Reconciles the live Composition as the controller does until steady.
    fn quiet(&mut self) {
        self.api.clear_faults();
        self.actors.clear();
        for _ in 0..4 {
            self.spawn(true);
            while self.step_actor(0, false) {}
            self.actors.clear();
            self.spawn(false);
            while self.step_actor(0, false) {}
            self.actors.clear();
        }
    }
}

fn lineage_secret_names(w: &World) -> Vec<String> {
    let (items, _) = w
        .api
        .clone()
        .list(
            &Gvr::secrets(),
            Some(SECRET_NS),
            Some(&lineage_selector(&w.lineage)),
        )
        .expect("list");
    items
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

fn run_seed(seed: u64) -> (u64, usize) {
    let mut w = World::new(seed);
    for _ in 0..600 {
        let roll = w.rng.below(100);
        match roll {
            0..=3 => w.env(World::resynthesize),
            4..=5 => w.env(World::recreate),
            6..=8 => {
                // A 409 on the next write to a random chunk or to the Composition.
                let target = if w.rng.below(2) == 0 {
                    ("secrets", format!("{}-{}-0", w.live, w.lineage))
                } else {
                    ("compositions", w.live.clone())
                };
                w.api
                    .inject_fault(Fault::conflict_next_write(target.0, &target.1));
            }
            9 if !w.actors.is_empty() => {
                // Crash between steps (e.g. between decision and recording).
                let i = w.rng.below(w.actors.len() as u64) as usize;
                w.actors.remove(i);
            }
            10..=17 if w.actors.len() < 4 => {
                let recovery = w.rng.below(2) == 0;
                w.spawn(recovery);
            }
            _ if !w.actors.is_empty() => {
                let i = w.rng.below(w.actors.len() as u64) as usize;
                let crash = w.actors[i].pending.is_some() && w.rng.below(40) == 0;
                let _ = w.at();
                if !w.step_actor(i, crash) {
                    w.actors.remove(i);
                }
            }
            _ => {}
        }
        w.check_invariants();
    }
    // Quiet phase: the newest Ready synthesis ends up complete and selected.
    w.quiet();
    w.check_invariants();
    let uuid = w.current_uuid().expect("live synthesis");
    match select(&w.secrets(), &w.lineage) {
        Selection::Selected(s) => {
            assert_eq!(
                s.synthesis_uuid, uuid,
                "seed {seed}: newest synthesis selected"
            );
            assert_eq!(&normalize(s.entries), &w.truth[&uuid]);
        }
        other => panic!("seed {seed}: after the quiet phase: {other:?}"),
    }
    (w.deletes, lineage_secret_names(&w).len())
}

#[test]
fn random_interleavings_keep_the_invariants() {
    let mut deletes = 0;
    for seed in 0..60 {
        let (d, _) = run_seed(seed);
        deletes += d;
    }
    eprintln!("60 seeds x 600 steps: {deletes} recovery deletes");
    // The scenarios must actually exercise recovery deletes.
    assert!(deletes > 0, "no recovery delete happened in any seed");
}

#[test]
fn two_recorders_at_once_converge() {
    let mut w = World::new(7);
    w.spawn(true);
    while w.step_actor(0, false) {}
    w.actors.clear();
    w.spawn(false);
    w.spawn(false);
    let mut live = [true, true];
    while live.iter().any(|l| *l) {
        for (i, l) in live.iter_mut().enumerate() {
            if *l {
                *l = w.step_actor(i, false);
                w.check_invariants();
            }
        }
    }
    let uuid = w.current_uuid().expect("uuid");
    assert!(
        matches!(select(&w.secrets(), &w.lineage), Selection::Selected(s) if s.synthesis_uuid == uuid)
    );
}

#[test]
fn crash_between_decision_and_recording_then_recovery_is_not_repeated() {
    let mut w = World::new(11);
    w.quiet();
    let before = w.current_uuid().expect("uuid");
    // Re-create: recovery decides (and deletes), then the process dies before recording.
    w.recreate();
    w.spawn(true);
    let outcome;
    loop {
        let now = Instant(w.now);
        if let Some((id, cmd)) = w.actors[0].pending.take() {
            let result = execute(&mut w.api, now, &cmd);
            if let Machine::Recovery(m) = &mut w.actors[0].machine {
                m.handle_input(now, Input::Done { id, result });
            }
            continue;
        }
        let Machine::Recovery(m) = &mut w.actors[0].machine else {
            unreachable!()
        };
        match m.poll_output(now) {
            Output::Command { id, cmd } => w.actors[0].pending = Some((id, cmd)),
            Output::Stopped(o) => {
                outcome = Some(o);
                break;
            }
            Output::Timeout(_) => unreachable!(),
        }
    }
    assert!(matches!(
        outcome,
        Some(RecoveryOutcome::Decided { written: true, .. })
    ));
    w.actors.clear(); // crash
    let deletes_before = w.deletes;
    // After restart the decision is found, not made again; recording proceeds.
    w.spawn(true);
    while w.step_actor(0, false) {}
    assert_eq!(w.deletes, deletes_before);
    w.actors.clear();
    w.spawn(false);
    let last;
    loop {
        let now = Instant(w.now);
        if w.actors[0].pending.is_some() {
            w.step_actor(0, false);
            continue;
        }
        let Machine::Recorder(m) = &mut w.actors[0].machine else {
            unreachable!()
        };
        match m.poll_output(now) {
            Output::Command { id, cmd } => w.actors[0].pending = Some((id, cmd)),
            Output::Stopped(o) => {
                last = Some(o);
                break;
            }
            Output::Timeout(_) => unreachable!(),
        }
    }
    assert!(
        matches!(last, Some(RecordOutcome::Recorded { .. })),
        "{last:?}"
    );
    let now_uuid = w.current_uuid().expect("uuid");
    assert_ne!(before, now_uuid);
    assert!(
        matches!(select(&w.secrets(), &w.lineage), Selection::Selected(s) if s.synthesis_uuid == now_uuid)
    );
}
