//! `tidemark-inventory recover` as the real binary, outside the `default` namespace, on the
//! cases a privileged deleter must refuse or hold: a lineage override into another
//! namespace, a snapshot from the future, a plan over the deletion budget (released with
//! `--allow-deletions`), and a protected CRD. For each, offline `inspect` over the same
//! Secrets, Composition and slices reports the same decision.
//!
//! Several namespaces and cluster-scoped CRDs are needed, so these run against the
//! conformance server only.

mod common;

use common::eno_objects::{composition_with, manifest, slice};
use common::{kubeconfig_file, run_inventory, Env};
use k8s_openapi::api::core::v1::{ConfigMap, Secret as K8sSecret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};
use std::path::PathBuf;
use tidemark_core::inventory::{default_lineage, Decision, Outcome, DECISION_ANNOTATION};
use tidemark_kube::eno::{Composition, ResourceSlice};

const SECRET_NS: &str = "kube-system";
const T1: &str = "2026-12-01T10:00:00Z";
const T2: &str = "2026-12-02T10:00:00Z";

/// The binary with the server's kubeconfig, plus a place for `inspect`'s input files.
struct Cli {
    kc: String,
    client: kube::Client,
    dir: PathBuf,
}

impl Cli {
    fn new(env: &Env) -> Cli {
        let kc = kubeconfig_file(env).to_str().expect("utf-8").to_string();
        let dir = std::env::temp_dir().join(format!("tidemark-guards-{}", env.prefix));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Cli {
            kc,
            client: env.client.clone(),
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> (i32, Value) {
        let mut all = vec!["--kubeconfig", &self.kc, "--secret-namespace", SECRET_NS];
        all.extend_from_slice(args);
        run_inventory(&all)
    }

    fn recover(&self, comp: &str, extra: &[&str]) -> (i32, Value) {
        let mut args = vec!["recover", "--composition", comp];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// What `kubectl get -o json` would save: the Secrets, the Composition and its current
    /// slices; then `inspect` over them.
    async fn inspect(&self, ns: &str, comp: &str, extra: &[&str]) -> Value {
        let secrets: Api<K8sSecret> = Api::namespaced(self.client.clone(), SECRET_NS);
        let items = secrets
            .list(&Default::default())
            .await
            .expect("list secrets");
        let comps: Api<Composition> = Api::namespaced(self.client.clone(), ns);
        let c = comps.get(comp).await.expect("get composition");
        let c = serde_json::to_value(&c).expect("composition json");
        let slices: Api<ResourceSlice> = Api::namespaced(self.client.clone(), ns);
        let mut current = Vec::new();
        for r in c["status"]["currentSynthesis"]["resourceSlices"]
            .as_array()
            .expect("slices")
        {
            let name = r["name"].as_str().expect("slice name");
            current
                .push(serde_json::to_value(slices.get(name).await.expect("slice")).expect("json"));
        }
        let write = |file: &str, v: Value| {
            let p = self.dir.join(file);
            std::fs::write(&p, v.to_string()).expect("write");
            p.to_str().expect("utf-8").to_string()
        };
        let s = write(
            "secrets.json",
            json!({"kind": "List", "items": items.items}),
        );
        let c = write("composition.json", c);
        let cur = write("current.json", json!({"kind": "List", "items": current}));
        let mut args = vec![
            "inspect",
            "--secrets",
            &s,
            "--composition",
            &c,
            "--current",
            &cur,
        ];
        args.extend_from_slice(extra);
        let (code, v) = run_inventory(&args);
        assert_eq!(code, 0, "{v}");
        v
    }

    async fn decision(&self, ns: &str, comp: &str) -> Option<Decision> {
        let comps: Api<Composition> = Api::namespaced(self.client.clone(), ns);
        let c = comps.get(comp).await.expect("get composition");
        let raw = c.metadata.annotations?.get(DECISION_ANNOTATION)?.clone();
        Decision::parse(&raw).ok()
    }
}

/// The conformance server and the binary, or `None` (with a note) against a real cluster.
async fn conformance_env() -> Option<(Env, Cli)> {
    let env = Env::new().await;
    if !env.simulated() {
        eprintln!("skipped: needs the conformance server (own namespaces, cluster-scoped CRDs)");
        return None;
    }
    let cli = Cli::new(&env);
    Some((env, cli))
}

async fn configmaps(client: &kube::Client, ns: &str, names: &[String]) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for n in names {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(n.clone());
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create configmap");
    }
}

async fn existing(client: &kube::Client, ns: &str, names: &[String]) -> usize {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut n = 0;
    for name in names {
        if api.get_opt(name).await.expect("get").is_some() {
            n += 1;
        }
    }
    n
}

/// A Composition whose first synthesis is `resources`, recorded by `record`.
#[allow(clippy::too_many_arguments)]
async fn recorded(
    cli: &Cli,
    ns: &str,
    name: &str,
    synth: &str,
    uuid: &str,
    at: &str,
    resources: Vec<Value>,
) {
    recreated(cli, ns, name, synth, uuid, at, resources, None).await;
    let comps: Api<Composition> = Api::namespaced(cli.client.clone(), ns);
    let slices: Api<ResourceSlice> = Api::namespaced(cli.client.clone(), ns);
    let s = format!("{name}-slice");
    let (code, out) = cli.run(&["record", "--composition", &format!("{ns}/{name}")]);
    assert_eq!(code, 0, "{out}");
    assert!(out["record"]["outcome"]["Recorded"].is_object(), "{out}");
    comps
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete composition");
    slices
        .delete(&s, &DeleteParams::default())
        .await
        .expect("delete slice");
}

/// A re-created Composition (never synthesized before), optionally with a lineage override.
#[allow(clippy::too_many_arguments)]
async fn recreated(
    cli: &Cli,
    ns: &str,
    name: &str,
    synth: &str,
    uuid: &str,
    at: &str,
    resources: Vec<Value>,
    lineage: Option<&str>,
) {
    let comps: Api<Composition> = Api::namespaced(cli.client.clone(), ns);
    let slices: Api<ResourceSlice> = Api::namespaced(cli.client.clone(), ns);
    let s = format!("{name}-slice");
    slice(&slices, &s, uuid, resources).await;
    composition_with(&comps, name, synth, uuid, at, &s, lineage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_over_budget_in_another_namespace_is_held_then_released() {
    let Some((env, cli)) = conformance_env().await else {
        return;
    };
    let ns = "team-b";
    let synth = env.name("synth");
    let gone: Vec<String> = (0..101).map(|i| format!("gone-{i:03}")).collect();
    let kept: Vec<String> = (0..110).map(|i| format!("kept-{i:03}")).collect();
    configmaps(&env.client, ns, &gone).await;
    let all: Vec<Value> = gone
        .iter()
        .chain(&kept)
        .map(|n| manifest(ns, n, &[]))
        .collect();
    let uuid1 = "11111111-1111-4111-8111-111111111111";
    recorded(&cli, ns, "shop", &synth, uuid1, T1, all).await;
    let kept_m: Vec<Value> = kept.iter().map(|n| manifest(ns, n, &[])).collect();
    let uuid2 = "22222222-2222-4222-8222-222222222222";
    recreated(&cli, ns, "shop-v2", &synth, uuid2, T2, kept_m, None).await;
    let comp = format!("{ns}/shop-v2");

    // Dry run: the plan shows it would be held, in deletion order, with groups.
    let (code, out) = cli.recover(&comp, &[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["decision"]["outcome"], "Held", "{out}");
    assert_eq!(out["tombstones"].as_array().map(Vec::len), Some(101));
    assert_eq!(out["tombstones"][0]["deletionGroup"], 100);
    assert_eq!(out["held"]["limit"], 100);

    // --apply holds it: nothing deleted, the decision says Held, the exit status says so.
    let (code, out) = cli.recover(&comp, &["--apply"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["held"]["deletions"], 101, "{out}");
    assert!(out["held"]["release"]
        .as_str()
        .is_some_and(|r| r.ends_with("--allow-deletions 101")));
    assert_eq!(existing(&env.client, ns, &gone).await, 101);
    let held = Outcome::Held {
        tombstones: 101,
        deletions: 101,
        limit: 100,
    };
    assert_eq!(
        cli.decision(ns, "shop-v2").await.map(|d| d.outcome),
        Some(held)
    );
    let (code, _) = cli.recover(&comp, &["--apply"]);
    assert_eq!(code, 1, "held again without --allow-deletions");

    // Offline, the same Secrets give the same decision.
    let v = cli.inspect(ns, "shop-v2", &[]).await;
    assert_eq!(v["decision"], "Held", "{v}");
    assert_eq!(v["held"]["deletions"], 101);

    // Too small a release keeps it held; the count of the plan releases it.
    let (code, _) = cli.recover(&comp, &["--apply", "--allow-deletions", "100"]);
    assert_eq!(code, 1);
    assert_eq!(existing(&env.client, ns, &gone).await, 101);
    let (code, out) = cli.recover(&comp, &["--apply", "--allow-deletions", "101"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["decision"]["outcome"], "Applied");
    assert_eq!(existing(&env.client, ns, &gone).await, 0);
    // --allow-deletions without --apply is refused by the command line.
    let (code, _) = cli.recover(&comp, &["--allow-deletions", "5"]);
    assert_eq!(code, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_into_another_namespace_and_a_future_snapshot_delete_nothing() {
    let Some((env, cli)) = conformance_env().await else {
        return;
    };
    let (victim, attacker) = ("team-a", "team-z");
    let synth = env.name("synth");
    let precious = vec!["db".to_string(), "queue".to_string()];
    configmaps(&env.client, victim, &precious).await;
    let mut res: Vec<Value> = precious.iter().map(|n| manifest(victim, n, &[])).collect();
    res.push(manifest(victim, "app", &[]));
    let uuid1 = "33333333-3333-4333-8333-333333333333";
    recorded(&cli, victim, "web", &synth, uuid1, T2, res).await;

    // A user of team-z names team-a's lineage; team-a has no live Composition now.
    let lineage = default_lineage(victim, &synth);
    let uuid2 = "44444444-4444-4444-8444-444444444444";
    let mine = vec![manifest(attacker, "x", &[])];
    recreated(
        &cli,
        attacker,
        "evil",
        &synth,
        uuid2,
        T2,
        mine,
        Some(&lineage),
    )
    .await;
    let max = ["--max-deletion-fraction", "1"];
    let (code, out) = cli.recover(
        &format!("{attacker}/evil"),
        &[&["--apply"], &max[..]].concat(),
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["decision"]["outcome"], "InventoryInvalid", "{out}");
    assert_eq!(out["decision"]["reason"], "LineageConflict");
    assert!(out["results"].is_null(), "{out}");
    assert_eq!(existing(&env.client, victim, &precious).await, 2);
    let v = cli.inspect(attacker, "evil", &max).await;
    assert_eq!(
        (v["outcome"].as_str(), v["reason"].as_str()),
        (Some("invalid"), Some("LineageConflict")),
        "{v}"
    );

    // Nor may it record into team-a's lineage (its decision is finished, so recording runs).
    let (code, out) = cli.run(&["record", "--composition", &format!("{attacker}/evil")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out["record"]["outcome"]["LineageConflict"].is_object(),
        "{out}"
    );
    let secrets: Api<K8sSecret> = Api::namespaced(env.client.clone(), SECRET_NS);
    let selector = format!("eno.azure.io/inventory-lineage={lineage}");
    let theirs = secrets
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .expect("list");
    assert!(
        theirs.items.iter().all(|s| s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("eno.azure.io/inventory-composition-namespace"))
            .is_some_and(|ns| ns == victim)),
        "only team-a's Secrets in its lineage"
    );

    // team-z/evil stays: refused as foreign, it does not block team-a's own Composition.
    // team-a's own re-created Composition, synthesized before the snapshot: refused too.
    let uuid3 = "55555555-5555-4555-8555-555555555555";
    let app = vec![manifest(victim, "app", &[])];
    recreated(&cli, victim, "web-v2", &synth, uuid3, T1, app, None).await;
    let (code, out) = cli.recover(
        &format!("{victim}/web-v2"),
        &[&["--apply"], &max[..]].concat(),
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["decision"]["reason"], "BadTimestamp", "{out}");
    let detail = out["selection"]["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("2026-12-02T10:00:00") && detail.contains("2026-12-01T10:00:00"),
        "{detail}"
    );
    assert_eq!(existing(&env.client, victim, &precious).await, 2);
    let v = cli.inspect(victim, "web-v2", &max).await;
    assert_eq!(v["reason"], "BadTimestamp", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_is_planned_after_its_custom_resources_and_not_deleted() {
    let Some((env, cli)) = conformance_env().await else {
        return;
    };
    let ns = "team-c";
    let synth = env.name("synth");
    let crd_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let widget_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let crds: Api<DynamicObject> = Api::all_with(env.client.clone(), &crd_ar);
    let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &widget_ar);
    let mut crd = DynamicObject::new("widgets.example.com", &crd_ar);
    // A served CRD: discovery then knows the Widget kind, as on a real cluster.
    crd.data = json!({"spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{"name": "v1", "served": true, "storage": true}],
    }});
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("crd");
    let w = DynamicObject::new("w1", &widget_ar).within(ns);
    widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("widget");
    let res = vec![
        json!({"manifest": json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"}}).to_string()}),
        json!({"manifest": json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": ns,
                         "annotations": {"eno.azure.io/deletion-group": "5"}}}).to_string()}),
        manifest(ns, "keep", &[]),
    ];
    recorded(
        &cli,
        ns,
        "widgets",
        &synth,
        "66666666-6666-4666-8666-666666666666",
        T1,
        res,
    )
    .await;
    let keep = vec![manifest(ns, "keep", &[])];
    recreated(
        &cli,
        ns,
        "widgets-v2",
        &synth,
        "77777777-7777-4777-8777-777777777777",
        T2,
        keep,
        None,
    )
    .await;

    let max = ["--max-deletion-fraction", "1"];
    let (code, out) = cli.recover(
        &format!("{ns}/widgets-v2"),
        &[&["--apply"], &max[..]].concat(),
    );
    assert_eq!(code, 0, "{out}");
    let order: Vec<(&str, &Value)> = out["tombstones"]
        .as_array()
        .expect("tombstones")
        .iter()
        .map(|t| (t["kind"].as_str().unwrap_or(""), &t["deletionGroup"]))
        .collect();
    assert_eq!(
        order,
        [
            ("Widget", &json!(5)),
            ("CustomResourceDefinition", &json!(100))
        ]
    );
    assert_eq!(
        out["tombstones"][1]["protected"],
        "CustomResourceDefinition"
    );
    let results: Vec<(&str, &str)> = out["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or(""),
                r["result"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("Widget", "Deleted"),
            ("CustomResourceDefinition", "Protected")
        ]
    );
    assert!(widgets.get_opt("w1").await.expect("get").is_none());
    assert!(crds
        .get_opt("widgets.example.com")
        .await
        .expect("get")
        .is_some());
    let v = cli.inspect(ns, "widgets-v2", &max).await;
    assert_eq!(
        v["tombstones"][1]["protected"], "CustomResourceDefinition",
        "{v}"
    );
}
