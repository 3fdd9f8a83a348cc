//! `tidemark-inventory record` and `recover` (dry run, then `--apply`) run as the real binary
//! against the conformance server (namespace `shop`, not `default`) or a real cluster, on a
//! re-created Composition.

mod common;

use common::eno_objects::{composition, manifest, slice};
use common::{kubeconfig_file, run_inventory as run, secret_namespace, Env};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use tidemark_kube::eno::{Composition, ResourceSlice};

// The binary blocks this thread while the server keeps serving on another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_then_recover_dry_run_then_apply() {
    let env = Env::new().await;
    // Outside `default`: `record` and `recover` take their scope from --composition.
    let ns = if env.simulated() {
        "shop".to_string()
    } else {
        env.ns.clone()
    };
    let kc = kubeconfig_file(&env);
    let kc = kc.to_str().expect("utf-8 path").to_string();
    let sns = secret_namespace(&env);
    let comps: Api<Composition> = Api::namespaced(env.client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    let synth = env.name("synth");

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
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create configmap");
    }
    let group = |n: &str| -> Vec<(&str, &str)> {
        if n.ends_with("cm-d") {
            vec![("eno.azure.io/deletion-group", "1")]
        } else if n.ends_with("cm-e") {
            vec![("eno.azure.io/deletion-group", "-1")]
        } else {
            vec![]
        }
    };
    let all: Vec<Value> = names.iter().map(|n| manifest(&ns, n, &group(n))).collect();
    let (c1, s1) = (env.name("web"), env.name("web-slice"));
    slice(
        &slices,
        &s1,
        "11111111-1111-4111-8111-111111111111",
        all.clone(),
    )
    .await;
    composition(
        &comps,
        &c1,
        &synth,
        "11111111-1111-4111-8111-111111111111",
        "2026-12-01T10:00:00Z",
        &s1,
    )
    .await;

    let base = ["--kubeconfig", &kc, "--secret-namespace", &sns];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .chain(extra.iter())
            .map(|s| s.to_string())
            .collect()
    };

    // One-shot record of the first Composition: decision first, then the snapshot.
    let c1_ref = format!("{ns}/{c1}");
    let a = with(&["record", "--composition", &c1_ref]);
    let (code, out) = run(&a);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["recovery"]["decision"]["outcome"], "InventoryNotFound");
    assert_eq!(out["record"]["outcome"]["Recorded"]["entries"], 6, "{out}");

    // Re-created under a new name; the first synthesis lacks d, e and f.
    comps
        .delete(&c1, &DeleteParams::default())
        .await
        .expect("delete");
    slices
        .delete(&s1, &DeleteParams::default())
        .await
        .expect("delete");
    let (c2, s2) = (env.name("web-v2"), env.name("web-v2-slice"));
    slice(
        &slices,
        &s2,
        "22222222-2222-4222-8222-222222222222",
        all[..3].to_vec(),
    )
    .await;
    composition(
        &comps,
        &c2,
        &synth,
        "22222222-2222-4222-8222-222222222222",
        "2026-12-02T09:30:00.250Z",
        &s2,
    )
    .await;
    let c2_ref = format!("{ns}/{c2}");

    // Dry run (the default): the plan, nothing deleted, nothing written.
    let a = with(&["recover", "--composition", &c2_ref]);
    let (code, out) = run(&a);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["mode"], "dry-run");
    assert_eq!(out["written"], false);
    assert_eq!(out["selection"]["outcome"], "selected");
    assert_eq!(
        out["selection"]["synthesisUUID"],
        "11111111-1111-4111-8111-111111111111"
    );
    assert_eq!(out["tombstones"].as_array().map(Vec::len), Some(3), "{out}");
    assert!(out.get("results").is_none());
    for n in &names {
        assert!(
            cms.get_opt(n).await.expect("get").is_some(),
            "{n} untouched"
        );
    }

    // Apply: d and e deleted, f skipped as orphan, each reported.
    let a = with(&["recover", "--composition", &c2_ref, "--apply"]);
    let (code, out) = run(&a);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["written"], true);
    assert_eq!(out["decision"]["outcome"], "Applied");
    let results = out["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    for r in results {
        let name = r["name"].as_str().unwrap_or("");
        let want = if name.ends_with("cm-f") {
            "SkippedOrphan"
        } else {
            "Deleted"
        };
        assert_eq!(r["result"], want, "{r}");
    }
    for (i, n) in names.iter().enumerate() {
        let exists = cms.get_opt(n).await.expect("get").is_some();
        assert_eq!(exists, !(i == 3 || i == 4), "{n}");
    }

    // Recording now proceeds; the decision is not made twice.
    let a = with(&["record", "--composition", &c2_ref]);
    let (code, out) = run(&a);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["recovery"]["result"], "AlreadyDecided");
    assert_eq!(out["record"]["outcome"]["Recorded"]["entries"], 3, "{out}");

    // A bad reference is unusable input.
    let a = with(&["recover", "--composition", "no-slash"]);
    let (code, _) = run(&a);
    assert_eq!(code, 2);

    for n in [&names[0], &names[1], &names[2], &names[5]] {
        cms.delete(n, &DeleteParams::default())
            .await
            .expect("cleanup");
    }
    if env.simulated() {
        let _ = std::fs::remove_file(&kc);
    }
}
