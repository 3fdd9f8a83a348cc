//! End to end: the controller records a Composition's inventory; the Composition is deleted
//! and re-created under a new name with the same synthesizer; its first synthesis lacks
//! resources of the old one; the controller decides, deletes exactly the missing ones (never
//! one marked `eno.azure.io/deletion-strategy: orphan`), then records the new snapshot.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::Env;
use k8s_openapi::api::core::v1::{ConfigMap, Secret as K8sSecret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;
use tidemark_core::inventory::{
    default_lineage, lineage_selector, select, Decision, Outcome, Secret, Selection,
    DECISION_ANNOTATION,
};
use tidemark_kube::controller::{Controller, ControllerConfig};
use tidemark_kube::eno::{Composition, ResourceSlice};
use tidemark_kube::exec::{Clusters, Executor};

fn manifest(ns: &str, name: &str) -> serde_json::Value {
    json!({"manifest": json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}}).to_string()})
}

async fn slice(api: &Api<ResourceSlice>, name: &str, uuid: &str, ns: &str, cms: &[String]) {
    let s: ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"synthesisUUID": uuid,
                 "resources": cms.iter().map(|c| manifest(ns, c)).collect::<Vec<_>>()}
    }))
    .unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
}

async fn composition(
    api: &Api<Composition>,
    name: &str,
    uuid: &str,
    synthesized: &str,
    slice: &str,
) {
    let c: Composition = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": name, "annotations": {"eno.azure.io/recovery-enabled": "true"}},
        "spec": {"synthesizer": {"name": "e2e-synth"}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &c).await.unwrap();
    let status = json!({"status": {"currentSynthesis": {
        "uuid": uuid, "observedCompositionGeneration": 1,
        "synthesized": synthesized, "reconciled": synthesized, "ready": synthesized,
        "resourceSlices": [{"name": slice}]}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn wait_for<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn lineage_secrets(api: &Api<K8sSecret>, lineage: &str) -> Vec<Secret> {
    api.list(&ListParams::default().labels(&lineage_selector(lineage)))
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| Secret::from_kube_json(&serde_json::to_value(s).unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn recreated_composition_recovers_then_records() {
    let env = Env::new().await;
    let ns = env.ns.clone();
    let secret_ns = if env.simulated() {
        "kube-system".to_string()
    } else {
        ns.clone()
    };
    let client = env.client.clone();
    let comps: Api<Composition> = Api::namespaced(client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<K8sSecret> = Api::namespaced(client.clone(), &secret_ns);

    // Downstream resources; `f` carries the orphan strategy.
    let names: Vec<String> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|n| env.name(&format!("cm-{n}")))
        .collect();
    for n in &names {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(n.clone());
        if n.ends_with("cm-f") {
            cm.metadata.annotations = Some(
                [(
                    "eno.azure.io/deletion-strategy".to_string(),
                    "orphan".to_string(),
                )]
                .into(),
            );
        }
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }

    // The controller, in its own task.
    let cfg = ControllerConfig {
        namespace: ns.clone(),
        secret_namespace: secret_ns.clone(),
        min_interval: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        ..ControllerConfig::default()
    };
    let exec = Executor::new(Clusters {
        eno: client.clone(),
        downstream: client.clone(),
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(Controller::new(cfg, exec).run(
        async move {
            let _ = stop_rx.await;
        },
        |_| {},
    ));

    // 1. The first Composition, with all six resources, is recorded.
    let lineage = default_lineage(&ns, "e2e-synth");
    let (c1, s1) = (env.name("comp-one"), env.name("slice-one"));
    slice(&slices, &s1, "uuid-one", &ns, &names).await;
    composition(&comps, &c1, "uuid-one", "2026-01-01T00:00:00Z", &s1).await;
    wait_for("the first snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-one")
    })
    .await;
    let c1_obj = comps.get(&c1).await.unwrap();
    let d1 = Decision::parse(c1_obj.annotation(DECISION_ANNOTATION).unwrap()).unwrap();
    assert_eq!(d1.outcome, Outcome::InventoryNotFound);

    // 2. Deleted, and re-created under a new name whose first synthesis lacks d, e, f.
    comps.delete(&c1, &DeleteParams::default()).await.unwrap();
    slices.delete(&s1, &DeleteParams::default()).await.unwrap();
    let (c2, s2) = (env.name("comp-two"), env.name("slice-two"));
    slice(&slices, &s2, "uuid-two", &ns, &names[..3]).await;
    composition(&comps, &c2, "uuid-two", "2026-01-02T00:00:00Z", &s2).await;

    // 3. Decided, exactly d and e deleted (f is orphaned), then the new snapshot recorded.
    wait_for("the new snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-two")
    })
    .await;
    let c2_obj = comps.get(&c2).await.unwrap();
    let d2 = Decision::parse(c2_obj.annotation(DECISION_ANNOTATION).unwrap()).unwrap();
    assert_eq!(d2.synthesis_uuid, "uuid-two");
    assert_eq!(d2.outcome, Outcome::Applied(3));
    for (i, n) in names.iter().enumerate() {
        let exists = cms.get_opt(n).await.unwrap().is_some();
        assert_eq!(exists, !(i == 3 || i == 4), "{n}");
    }
    let Selection::Selected(snap) = select(&lineage_secrets(&secrets, &lineage).await, &lineage)
    else {
        panic!("selected")
    };
    assert_eq!(snap.entries.len(), 3);
    assert_eq!(snap.composition_name, c2);

    // Events on both Compositions.
    if env.simulated() {
        let server = env.server.as_ref().unwrap();
        let reasons: Vec<(String, String)> = server.with_api(|api, _| {
            api.all(&tidemark_model::conformance::Gvr::new(
                "events.k8s.io",
                "v1",
                "events",
            ))
            .iter()
            .map(|e| {
                (
                    e["regarding"]["name"].as_str().unwrap_or("").to_string(),
                    e["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
        });
        assert!(
            reasons.contains(&(c1.clone(), "InventoryRecorded".into())),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&(c2.clone(), "Recovered".into())),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&(c2.clone(), "InventoryRecorded".into())),
            "{reasons:?}"
        );
    }

    let _ = stop_tx.send(());
    controller.await.unwrap();
    for n in [&names[0], &names[1], &names[2], &names[5]] {
        cms.delete(n, &DeleteParams::default()).await.unwrap();
    }
}

/// Compositions, ResourceSlices and ConfigMaps of the test namespace, and the inventory
/// Secrets.
fn apis(
    env: &Env,
) -> (
    Api<Composition>,
    Api<ResourceSlice>,
    Api<ConfigMap>,
    Api<K8sSecret>,
) {
    let c = &env.client;
    (
        Api::namespaced(c.clone(), &env.ns),
        Api::namespaced(c.clone(), &env.ns),
        Api::namespaced(c.clone(), &env.ns),
        Api::namespaced(c.clone(), &common::secret_namespace(env)),
    )
}

async fn create_configmaps(cms: &Api<ConfigMap>, names: &[String]) {
    for n in names {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(n.clone());
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
}

fn event_reasons(env: &Env) -> Vec<(String, String)> {
    let Some(server) = env.server.as_ref() else {
        return Vec::new();
    };
    server.with_api(|api, _| {
        api.all(&tidemark_model::conformance::Gvr::new(
            "events.k8s.io",
            "v1",
            "events",
        ))
        .iter()
        .map(|e| {
            (
                e["regarding"]["name"].as_str().unwrap_or("").to_string(),
                e["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
    })
}

fn start_controller(
    env: &Env,
    mode: tidemark_core::inventory::Mode,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<tidemark_kube::controller::ControllerStats>,
) {
    let cfg = ControllerConfig {
        namespace: env.ns.clone(),
        secret_namespace: common::secret_namespace(env),
        recovery_mode: mode,
        min_interval: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        ..ControllerConfig::default()
    };
    start_controller_with(env, cfg)
}

fn start_controller_with(
    env: &Env,
    cfg: ControllerConfig,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<tidemark_kube::controller::ControllerStats>,
) {
    let exec = Executor::new(Clusters {
        eno: env.client.clone(),
        downstream: env.client.clone(),
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let h = tokio::spawn(Controller::new(cfg, exec).run(
        async move {
            let _ = rx.await;
        },
        |_| {},
    ));
    (tx, h)
}

#[tokio::test]
async fn plan_mode_waits_for_the_operator() {
    use common::eno_objects;
    use tidemark_core::inventory::Mode;
    let env = Env::new().await;
    let ns = env.ns.clone();
    let (comps, slices, cms, secrets) = apis(&env);
    let synth = env.name("plan-synth");
    let lineage = default_lineage(&ns, &synth);
    let names: Vec<String> = ["x", "y"]
        .iter()
        .map(|n| env.name(&format!("cm-{n}")))
        .collect();
    create_configmaps(&cms, &names).await;
    let (stop, h) = start_controller(&env, Mode::Plan);

    let (c1, s1) = (env.name("p1"), env.name("p1-slice"));
    let all: Vec<_> = names
        .iter()
        .map(|n| eno_objects::manifest(&ns, n, &[]))
        .collect();
    eno_objects::slice(&slices, &s1, "uuid-p1", all.clone()).await;
    eno_objects::composition(&comps, &c1, &synth, "uuid-p1", "2026-03-01T00:00:00Z", &s1).await;
    wait_for("the first snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-p1")
    })
    .await;

    comps.delete(&c1, &DeleteParams::default()).await.unwrap();
    slices.delete(&s1, &DeleteParams::default()).await.unwrap();
    let (c2, s2) = (env.name("p2"), env.name("p2-slice"));
    eno_objects::slice(&slices, &s2, "uuid-p2", all[..1].to_vec()).await;
    eno_objects::composition(&comps, &c2, &synth, "uuid-p2", "2026-03-02T00:00:00Z", &s2).await;

    // Planned(1): nothing deleted, and recording waits.
    wait_for("the plan", || async {
        comps
            .get(&c2)
            .await
            .ok()
            .and_then(|c| c.annotation(DECISION_ANNOTATION).map(str::to_string))
            .and_then(|a| Decision::parse(&a).ok())
            .is_some_and(|d| d.outcome == Outcome::Planned(1))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cms.get_opt(&names[1]).await.unwrap().is_some());
    assert!(
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                     Selection::Selected(s) if s.synthesis_uuid == "uuid-p1")
    );

    // The operator applies; the running controller then records.
    let exec = Executor::new(Clusters {
        eno: env.client.clone(),
        downstream: env.client.clone(),
    });
    let cfg = ControllerConfig {
        namespace: ns.clone(),
        secret_namespace: common::secret_namespace(&env),
        ..ControllerConfig::default()
    };
    let out = tidemark_kube::ops::recover_once(&exec, &cfg, &ns, &c2, Mode::Apply).await;
    assert!(
        tidemark_kube::ops::recovery_succeeded(Mode::Apply, &out),
        "{out:?}"
    );
    assert!(cms.get_opt(&names[1]).await.unwrap().is_none());
    wait_for("the new snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-p2")
    })
    .await;
    if env.simulated() {
        assert!(event_reasons(&env).contains(&(c2.clone(), "RecoveryPlanned".into())));
    }
    let _ = stop.send(());
    h.await.unwrap();
    cms.delete(&names[0], &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn two_live_compositions_of_one_lineage_conflict() {
    use common::eno_objects;
    use tidemark_core::inventory::{Mode, Reason};
    let env = Env::new().await;
    let ns = env.ns.clone();
    let comps: Api<Composition> = Api::namespaced(env.client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &ns);
    let secrets: Api<K8sSecret> =
        Api::namespaced(env.client.clone(), &common::secret_namespace(&env));
    let synth = env.name("shared-synth");
    let lineage = default_lineage(&ns, &synth);
    let m = vec![eno_objects::manifest(&ns, &env.name("cm-z"), &[])];
    let pairs = [
        (env.name("twin-a"), "uuid-ta"),
        (env.name("twin-b"), "uuid-tb"),
    ];
    for (c, u) in &pairs {
        let s = format!("{c}-slice");
        eno_objects::slice(&slices, &s, u, m.clone()).await;
        eno_objects::composition(&comps, c, &synth, u, "2026-04-01T00:00:00Z", &s).await;
    }
    // Both exist before the controller looks. Started earlier, a slow run could decide and
    // record twin-a alone before twin-b exists: a different (sequential) scenario.
    let (stop, h) = start_controller(&env, Mode::Apply);
    for (c, _) in &pairs {
        wait_for("a LineageConflict decision", || async {
            comps
                .get(c)
                .await
                .ok()
                .and_then(|c| c.annotation(DECISION_ANNOTATION).map(str::to_string))
                .and_then(|a| Decision::parse(&a).ok())
                .is_some_and(|d| d.outcome == Outcome::InventoryInvalid(Reason::LineageConflict))
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        lineage_secrets(&secrets, &lineage).await.is_empty(),
        "nothing recorded"
    );
    if env.simulated() {
        let reasons = event_reasons(&env);
        for (c, _) in &pairs {
            assert!(
                reasons.contains(&(c.clone(), "LineageConflict".into())),
                "{reasons:?}"
            );
        }
    }
    let _ = stop.send(());
    h.await.unwrap();
    for (c, _) in &pairs {
        comps.delete(c, &DeleteParams::default()).await.unwrap();
        slices
            .delete(&format!("{c}-slice"), &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn hand_edited_history_is_invalid_and_deletes_nothing() {
    use common::eno_objects;
    use tidemark_core::inventory::{Mode, Reason};
    let env = Env::new().await;
    let ns = env.ns.clone();
    let (comps, slices, cms, secrets) = apis(&env);
    let synth = env.name("edited-synth");
    let lineage = default_lineage(&ns, &synth);
    let names: Vec<String> = ["p", "q"]
        .iter()
        .map(|n| env.name(&format!("cm-{n}")))
        .collect();
    create_configmaps(&cms, &names).await;
    let (stop, h) = start_controller(&env, Mode::Apply);
    let all: Vec<_> = names
        .iter()
        .map(|n| eno_objects::manifest(&ns, n, &[]))
        .collect();
    let (c1, s1) = (env.name("e1"), env.name("e1-slice"));
    eno_objects::slice(&slices, &s1, "uuid-e1", all.clone()).await;
    eno_objects::composition(&comps, &c1, &synth, "uuid-e1", "2026-06-01T00:00:00Z", &s1).await;
    wait_for("the first snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-e1")
    })
    .await;
    // Stop the controller so the edit is not repaired before the re-creation.
    let _ = stop.send(());
    h.await.unwrap();

    // Someone hand-edits the chunk: drop the entries.
    let mut chunk = secrets
        .list(&ListParams::default().labels(&lineage_selector(&lineage)))
        .await
        .unwrap()
        .items
        .remove(0);
    chunk.data = Some(
        [(
            "inventory.json".to_string(),
            k8s_openapi::ByteString(b"[]".to_vec()),
        )]
        .into(),
    );
    secrets
        .replace(
            chunk.metadata.name.as_deref().unwrap(),
            &PostParams::default(),
            &chunk,
        )
        .await
        .unwrap();

    comps.delete(&c1, &DeleteParams::default()).await.unwrap();
    slices.delete(&s1, &DeleteParams::default()).await.unwrap();
    let (c2, s2) = (env.name("e2"), env.name("e2-slice"));
    eno_objects::slice(&slices, &s2, "uuid-e2", all[..1].to_vec()).await;
    eno_objects::composition(&comps, &c2, &synth, "uuid-e2", "2026-06-02T00:00:00Z", &s2).await;
    let (stop, h) = start_controller(&env, Mode::Apply);

    // InventoryInvalid(HashMismatch): no tombstones from doubtful history, then recording.
    wait_for("the new snapshot", || async {
        matches!(select(&lineage_secrets(&secrets, &lineage).await, &lineage),
                 Selection::Selected(s) if s.synthesis_uuid == "uuid-e2")
    })
    .await;
    let d = Decision::parse(
        comps
            .get(&c2)
            .await
            .unwrap()
            .annotation(DECISION_ANNOTATION)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(d.outcome, Outcome::InventoryInvalid(Reason::HashMismatch));
    assert!(
        cms.get_opt(&names[1]).await.unwrap().is_some(),
        "nothing deleted"
    );
    if env.simulated() {
        assert!(event_reasons(&env).contains(&(c2.clone(), "InventoryInvalid".into())));
    }
    let _ = stop.send(());
    h.await.unwrap();
    for n in &names {
        cms.delete(n, &DeleteParams::default()).await.unwrap();
    }
}

#[tokio::test]
async fn a_plan_over_budget_is_held_with_an_event() {
    use common::eno_objects;
    use tidemark_core::inventory::Mode;
    let env = Env::new().await;
    let ns = env.ns.clone();
    let comps: Api<Composition> = Api::namespaced(env.client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    let synth = env.name("held-synth");
    let names: Vec<String> = ["h1", "h2", "h3"].iter().map(|n| env.name(n)).collect();
    create_configmaps(&cms, &names).await;
    let (stop, h) = start_controller(&env, Mode::Apply);
    let all: Vec<_> = names
        .iter()
        .map(|n| eno_objects::manifest(&ns, n, &[]))
        .collect();
    let (c1, s1) = (env.name("held-1"), env.name("held-1-slice"));
    eno_objects::slice(&slices, &s1, "uuid-h1", all.clone()).await;
    eno_objects::composition(&comps, &c1, &synth, "uuid-h1", "2026-05-01T00:00:00Z", &s1).await;
    let decided = |c: String| {
        let comps = comps.clone();
        async move {
            comps
                .get(&c)
                .await
                .ok()
                .and_then(|c| c.annotation(DECISION_ANNOTATION).map(str::to_string))
                .and_then(|a| Decision::parse(&a).ok())
                .map(|d| d.outcome)
        }
    };
    wait_for("the first decision", || async {
        decided(c1.clone()).await.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    comps.delete(&c1, &DeleteParams::default()).await.unwrap();
    slices.delete(&s1, &DeleteParams::default()).await.unwrap();

    // Re-created with one of three: two deletions are over half of the snapshot.
    let (c2, s2) = (env.name("held-2"), env.name("held-2-slice"));
    eno_objects::slice(&slices, &s2, "uuid-h2", all[..1].to_vec()).await;
    eno_objects::composition(&comps, &c2, &synth, "uuid-h2", "2026-05-02T00:00:00Z", &s2).await;
    let held = Outcome::Held {
        tombstones: 2,
        deletions: 2,
        limit: 1,
    };
    wait_for("the held plan", || async {
        decided(c2.clone()).await == Some(held)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in &names {
        assert!(cms.get_opt(n).await.unwrap().is_some(), "{n} kept");
    }
    if env.simulated() {
        assert!(
            event_reasons(&env).contains(&(c2.clone(), "RecoveryHeld".into())),
            "{:?}",
            event_reasons(&env)
        );
    }
    let _ = stop.send(());
    h.await.unwrap();
    for n in &names {
        cms.delete(n, &DeleteParams::default()).await.unwrap();
    }
}

/// Why the controller runs on kube-runtime's `Controller` rather than one serial loop: a
/// recovery waiting for a deletion group's finalizers must not stop every other Composition.
#[tokio::test]
async fn a_recovery_waiting_for_finalizers_does_not_block_other_compositions() {
    use common::eno_objects;
    use tidemark_core::inventory::{Mode, Policy};
    let env = Env::new().await;
    let ns = env.ns.clone();
    let (comps, slices, cms, secrets) = apis(&env);
    let (slow, later, keep) = (env.name("g1"), env.name("g2"), env.name("keep"));
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(slow.clone());
    cm.metadata.finalizers = Some(vec!["example.com/slow".into()]);
    cms.create(&PostParams::default(), &cm).await.unwrap();
    create_configmaps(&cms, std::slice::from_ref(&later)).await;
    let cfg = ControllerConfig {
        namespace: ns.clone(),
        secret_namespace: common::secret_namespace(&env),
        recovery_mode: Mode::Apply,
        min_interval: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        group_wait: Duration::from_secs(60),
        wait_poll: Duration::from_millis(100),
        policy: Policy {
            max_deletion_fraction: 1.0,
            ..Policy::default()
        },
        ..ControllerConfig::default()
    };
    let (stop, h) = start_controller_with(&env, cfg);
    let synth = env.name("slow-synth");
    let all = vec![
        eno_objects::manifest(&ns, &slow, &[("eno.azure.io/deletion-group", "1")]),
        eno_objects::manifest(&ns, &later, &[("eno.azure.io/deletion-group", "2")]),
        eno_objects::manifest(&ns, &keep, &[]),
    ];
    let (c1, s1) = (env.name("slow-1"), env.name("slow-1-slice"));
    eno_objects::slice(&slices, &s1, "uuid-s1", all.clone()).await;
    eno_objects::composition(&comps, &c1, &synth, "uuid-s1", "2026-07-01T00:00:00Z", &s1).await;
    let lineage = default_lineage(&ns, &synth);
    wait_for("the first snapshot", || async {
        !lineage_secrets(&secrets, &lineage).await.is_empty()
    })
    .await;
    comps.delete(&c1, &DeleteParams::default()).await.unwrap();
    slices.delete(&s1, &DeleteParams::default()).await.unwrap();
    let (c2, s2) = (env.name("slow-2"), env.name("slow-2-slice"));
    eno_objects::slice(&slices, &s2, "uuid-s2", all[2..].to_vec()).await;
    eno_objects::composition(&comps, &c2, &synth, "uuid-s2", "2026-07-02T00:00:00Z", &s2).await;
    let terminating = || async {
        cms.get_opt(&slow)
            .await
            .unwrap()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    };
    wait_for("group 1 terminating", terminating).await;

    // While slow-2's recovery waits for group 1, another Composition is recorded.
    let other_synth = env.name("other-synth");
    let (o, so) = (env.name("other"), env.name("other-slice"));
    let m = vec![eno_objects::manifest(&ns, &env.name("o-cm"), &[])];
    eno_objects::slice(&slices, &so, "uuid-o", m).await;
    eno_objects::composition(
        &comps,
        &o,
        &other_synth,
        "uuid-o",
        "2026-07-03T00:00:00Z",
        &so,
    )
    .await;
    let other_lineage = default_lineage(&ns, &other_synth);
    wait_for("the other Composition's snapshot", || async {
        !lineage_secrets(&secrets, &other_lineage).await.is_empty()
    })
    .await;
    assert!(terminating().await, "group 1 still held by its finalizer");
    assert!(
        cms.get_opt(&later).await.unwrap().is_some(),
        "group 2 waits for group 1"
    );

    // The finalizer finishes: group 2 goes, and the decision is written.
    let unfinalize = json!({"metadata": {"finalizers": null}});
    cms.patch(&slow, &PatchParams::default(), &Patch::Merge(&unfinalize))
        .await
        .unwrap();
    wait_for("group 2 deleted", || async {
        cms.get_opt(&later).await.unwrap().is_none()
    })
    .await;
    let _ = stop.send(());
    h.await.unwrap();
}
