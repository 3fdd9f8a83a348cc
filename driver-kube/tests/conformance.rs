//! Conformance of the test apiserver (or a real cluster) for the semantics the inventory
//! driver relies on, exercised through a real `kube::Client`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::{api_err, Env};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use tidemark_kube::eno::{Composition, ResourceSlice};
use tidemark_model::conformance::{Fault, Gvr};

fn secret(name: &str, labels: &[(&str, &str)], bytes: usize) -> Secret {
    let mut s = Secret {
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    s.metadata.name = Some(name.into());
    s.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    s.data = Some(BTreeMap::from([(
        "inventory.json".to_string(),
        ByteString(vec![b'x'; bytes]),
    )]));
    s
}

#[tokio::test]
async fn secret_crud_resource_version_and_errors() {
    let env = Env::new().await;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("crud");
    let created = api
        .create(&PostParams::default(), &secret(&name, &[], 3))
        .await
        .unwrap();
    let rv1 = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());

    // 409 AlreadyExists on create.
    let e = api
        .create(&PostParams::default(), &secret(&name, &[], 3))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e), (409, "AlreadyExists".into()));

    // 404 NotFound on get.
    let e = api.get(&env.name("missing")).await.unwrap_err();
    assert_eq!(api_err(&e), (404, "NotFound".into()));
    assert!(api.get_opt(&env.name("missing")).await.unwrap().is_none());

    // Update with the read resourceVersion succeeds and moves it.
    let mut next = created.clone();
    next.data = Some(BTreeMap::from([("k".into(), ByteString(b"v2".to_vec()))]));
    let updated = api
        .replace(&name, &PostParams::default(), &next)
        .await
        .unwrap();
    let rv2 = updated.metadata.resource_version.clone().unwrap();
    assert_ne!(rv1, rv2);
    assert_eq!(updated.metadata.uid, created.metadata.uid);

    // 409 Conflict on a stale resourceVersion.
    let e = api
        .replace(&name, &PostParams::default(), &next)
        .await
        .unwrap_err();
    assert_eq!(api_err(&e), (409, "Conflict".into()));

    // Merge patch of annotations with a stale resourceVersion precondition: 409.
    let stale = json!({"metadata": {"resourceVersion": rv1, "annotations": {"a": "b"}}});
    let e = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&stale))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e).0, 409);
    let fresh = json!({"metadata": {"resourceVersion": rv2, "annotations": {"a": "b"}}});
    let patched = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&fresh))
        .await
        .unwrap();
    assert_eq!(patched.metadata.annotations.unwrap()["a"], "b");

    // Delete without finalizers removes at once.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    assert_eq!(api_err(&api.get(&name).await.unwrap_err()).0, 404);
    let e = api
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_err(&e).0, 404);
}

#[tokio::test]
async fn secret_data_over_one_mib_is_invalid() {
    let env = Env::new().await;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let ok = env.name("limit-ok");
    api.create(&PostParams::default(), &secret(&ok, &[], 1024 * 1024))
        .await
        .unwrap();
    let e = api
        .create(
            &PostParams::default(),
            &secret(&env.name("limit-big"), &[], 1024 * 1024 + 1),
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(&e), (422, "Invalid".into()));
    api.delete(&ok, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn list_with_label_selectors() {
    let env = Env::new().await;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let run = env.prefix.clone();
    let objs = [
        ("a", vec![("run", run.as_str()), ("tier", "web")]),
        ("b", vec![("run", run.as_str()), ("tier", "db")]),
        ("c", vec![("run", run.as_str())]),
    ];
    for (n, labels) in &objs {
        api.create(&PostParams::default(), &secret(&env.name(n), labels, 1))
            .await
            .unwrap();
    }
    let names = |list: Vec<Secret>| -> Vec<String> {
        let mut v: Vec<String> = list
            .into_iter()
            .map(|s| {
                s.metadata
                    .name
                    .unwrap()
                    .rsplit('-')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        v.sort();
        v
    };
    for (sel, want) in [
        (format!("run={run},tier=web"), vec!["a"]),
        (format!("run={run},tier!=web"), vec!["b", "c"]),
        (format!("run={run},tier"), vec!["a", "b"]),
        (format!("run={run},!tier"), vec!["c"]),
        (format!("run={run},tier in (db,web)"), vec!["a", "b"]),
        (format!("run={run},tier notin (db)"), vec!["a", "c"]),
    ] {
        let got = api.list(&ListParams::default().labels(&sel)).await.unwrap();
        assert_eq!(names(got.items), want, "{sel}");
    }
    let e = api
        .list(&ListParams::default().labels("tier in web"))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e).0, 400);
    for (n, _) in &objs {
        api.delete(&env.name(n), &DeleteParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn finalizers_make_objects_terminating() {
    let env = Env::new().await;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("fin");
    let mut s = secret(&name, &[], 1);
    s.metadata.finalizers = Some(vec!["tidemark.dev/test".into()]);
    api.create(&PostParams::default(), &s).await.unwrap();
    let r = api.delete(&name, &DeleteParams::default()).await.unwrap();
    let terminating = r.left().expect("terminating object returned");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let still = api.get(&name).await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    // Creating over a terminating object still conflicts.
    let e = api
        .create(&PostParams::default(), &secret(&name, &[], 1))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e).0, 409);
    // Removing the finalizer lets it go.
    let p = json!({"metadata": {"finalizers": null}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert!(api.get_opt(&name).await.unwrap().is_none());
}

fn composition(name: &str, synthesizer: &str) -> Composition {
    serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"synthesizer": {"name": synthesizer}}
    }))
    .unwrap()
}

#[tokio::test]
async fn compositions_generation_status_and_annotations() {
    let env = Env::new().await;
    let api: Api<Composition> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("comp");
    let c = api
        .create(&PostParams::default(), &composition(&name, "syn"))
        .await
        .unwrap();
    assert_eq!(c.metadata.generation, Some(1));

    // Status goes through /status and does not bump generation.
    let status = json!({"status": {"currentSynthesis": {
        "uuid": "u1", "synthesized": "2026-01-01T00:00:00Z", "ready": "2026-01-01T00:00:01Z",
        "resourceSlices": [{"name": "s1"}]}}});
    let c = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(c.current().unwrap().uuid, "u1");
    assert_eq!(c.metadata.generation, Some(1));

    // Annotation patch with a resourceVersion precondition, then a stale one.
    let rv = c.metadata.resource_version.clone().unwrap();
    let p = json!({"metadata": {"resourceVersion": rv, "annotations": {"tidemark.dev/x": "1"}}});
    let c2 = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(c2.annotation("tidemark.dev/x"), Some("1"));
    assert_eq!(c2.metadata.generation, Some(1));
    let e = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e), (409, "Conflict".into()));

    // A spec change bumps generation and keeps status.
    let mut c3 = c2.clone();
    c3.spec.synthesizer.name = "syn2".into();
    let c3 = api
        .replace(&name, &PostParams::default(), &c3)
        .await
        .unwrap();
    assert_eq!(c3.metadata.generation, Some(2));
    assert_eq!(c3.current().unwrap().uuid, "u1");

    let listed = api
        .list(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    assert!(listed
        .items
        .iter()
        .any(|i| i.metadata.name.as_deref() == Some(&*name)));
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn resource_slices_round_trip() {
    let env = Env::new().await;
    let api: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("slice");
    let s: ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"synthesisUUID": "u1", "resources": [
            {"manifest": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"}}"},
            {"manifest": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"b\",\"namespace\":\"ns\"}}", "deleted": true}
        ]}
    }))
    .unwrap();
    api.create(&PostParams::default(), &s).await.unwrap();
    let got = api.get(&name).await.unwrap();
    assert_eq!(got.spec.synthesis_uuid, "u1");
    assert_eq!(got.spec.resources.len(), 2);
    assert!(got.spec.resources[1].deleted);
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn injected_faults_and_terminating_marks() {
    let env = Env::new().await;
    let Some(server) = &env.server else {
        return; // fault injection needs the conformance server
    };
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("fault");
    server.inject_fault(Fault::conflict_next_write("secrets", &name));
    let e = api
        .create(&PostParams::default(), &secret(&name, &[], 1))
        .await
        .unwrap_err();
    assert_eq!(api_err(&e), (409, "Conflict".into()));
    api.create(&PostParams::default(), &secret(&name, &[], 1))
        .await
        .unwrap();
    server
        .mark_terminating(&Gvr::secrets(), &env.ns, &name)
        .unwrap();
    let got = api.get(&name).await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
}

#[tokio::test]
async fn watch_sees_changes() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let env = Env::new().await;
    let api: Api<Composition> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("watched");
    let mut stream = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    // Initial sync.
    loop {
        match stream.next().await.unwrap().unwrap() {
            watcher::Event::InitDone => break,
            _ => continue,
        }
    }
    api.create(&PostParams::default(), &composition(&name, "syn"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let watcher::Event::Apply(c) = stream.next().await.unwrap().unwrap() {
                if c.metadata.name.as_deref() == Some(&*name) {
                    return c;
                }
            }
        }
    })
    .await
    .expect("watch delivers the new Composition");
    assert_eq!(seen.spec.synthesizer.name, "syn");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn json_patch_as_kube_sends_it() {
    let env = Env::new().await;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let name = env.name("jsonpatch");
    let created = api
        .create(&PostParams::default(), &secret(&name, &[], 1))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let path = format!("/api/v1/namespaces/{}/secrets/{name}", env.ns);
    let send = |ops: serde_json::Value| {
        let req = http::Request::builder()
            .method("PATCH")
            .uri(path.clone())
            .header("content-type", "application/json-patch+json")
            .body(serde_json::to_vec(&ops).unwrap())
            .unwrap();
        env.client.request::<Secret>(req)
    };
    // A `test` on metadata.resourceVersion is a precondition.
    let patched = send(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}
    ]))
    .await
    .unwrap();
    assert_eq!(patched.metadata.annotations.unwrap()["k"], "v");
    let e = send(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/annotations/k2", "value": "v2"}
    ]))
    .await
    .unwrap_err();
    assert!(api_err(&e).0 >= 400, "stale test op rejected");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// The executor honours the contract the core's machines rely on (kube.rs in core).
#[tokio::test]
async fn executor_command_contract() {
    use tidemark_core::inventory::{Command, KubeError, Reply, ResourceId};
    use tidemark_kube::exec::{Clusters, Executor};
    let env = Env::new().await;
    let ns = env.ns.clone();
    let exec = Executor::new(Clusters {
        eno: env.client.clone(),
        downstream: env.client.clone(),
    });
    let comps: Api<Composition> = Api::namespaced(env.client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &ns);

    // Missing Composition => NotFound.
    let r = exec
        .execute(&Command::GetComposition {
            namespace: ns.clone(),
            name: env.name("absent"),
        })
        .await;
    assert_eq!(r, Err(KubeError::NotFound));

    // Composition read, then an annotation patch with a stale resourceVersion => Conflict.
    let name = env.name("exec-comp");
    let c = api_create_comp(&comps, &name).await;
    let Ok(Reply::Composition(view)) = exec
        .execute(&Command::GetComposition {
            namespace: ns.clone(),
            name: name.clone(),
        })
        .await
    else {
        panic!("composition view")
    };
    assert_eq!(view.synthesizer_name, "syn");
    assert_eq!(view.uid, c.metadata.uid.clone().unwrap());
    let patch = |rv: &str| Command::PatchCompositionAnnotation {
        namespace: ns.clone(),
        name: name.clone(),
        key: "tidemark.dev/recovery-decision".into(),
        value: "{}".into(),
        resource_version: rv.to_string(),
    };
    assert!(matches!(
        exec.execute(&patch(&view.resource_version)).await,
        Ok(Reply::Composition(_))
    ));
    assert!(matches!(
        exec.execute(&patch(&view.resource_version)).await,
        Err(KubeError::Conflict(_))
    ));

    // Slices: the ones that exist, missing ones simply absent.
    let sname = env.name("exec-slice");
    let s: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": sname}, "spec": {"resources": []}
    }))
    .unwrap();
    slices.create(&PostParams::default(), &s).await.unwrap();
    let Ok(Reply::Slices(found)) = exec
        .execute(&Command::ListResourceSlices {
            namespace: ns.clone(),
            names: vec![sname.clone(), env.name("no-such-slice")],
        })
        .await
    else {
        panic!("slices")
    };
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, sname);

    // Secrets: create, create again => Conflict, stale update => Conflict.
    let wanted = tidemark_core::inventory::Secret {
        name: env.name("exec-secret"),
        namespace: ns.clone(),
        uid: String::new(),
        resource_version: None,
        terminating: false,
        secret_type: Some("Opaque".into()),
        labels: [(
            "eno.azure.io/inventory-lineage".to_string(),
            env.prefix.clone(),
        )]
        .into(),
        annotations: Default::default(),
        data: [("inventory.json".to_string(), b"[]".to_vec())].into(),
    };
    let Ok(Reply::Secret(stored)) = exec.execute(&Command::CreateSecret(wanted.clone())).await
    else {
        panic!("created")
    };
    assert_eq!(stored.data, wanted.data);
    assert!(matches!(
        exec.execute(&Command::CreateSecret(wanted.clone())).await,
        Err(KubeError::Conflict(_))
    ));
    let mut upd = stored.clone();
    upd.data.insert("inventory.json".into(), b"[ ]".to_vec());
    assert!(matches!(
        exec.execute(&Command::UpdateSecret(upd.clone())).await,
        Ok(Reply::Secret(_))
    ));
    assert!(matches!(
        exec.execute(&Command::UpdateSecret(upd)).await,
        Err(KubeError::Conflict(_))
    ));
    let Ok(Reply::Secrets(listed)) = exec
        .execute(&Command::ListSecrets {
            namespace: ns.clone(),
            label_selector: format!("eno.azure.io/inventory-lineage={}", env.prefix),
        })
        .await
    else {
        panic!("listed")
    };
    assert_eq!(listed.len(), 1);

    // Downstream delete with a UID precondition: wrong UID => Conflict, right one => Deleted,
    // then NotFound.
    let id = ResourceId {
        group: String::new(),
        version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some(ns.clone()),
        name: wanted.name.clone(),
    };
    let Ok(Reply::Object(obj)) = exec.execute(&Command::GetResource { id: id.clone() }).await
    else {
        panic!("object")
    };
    let wrong = Command::DeleteResource {
        id: id.clone(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
    };
    assert!(matches!(
        exec.execute(&wrong).await,
        Err(KubeError::Conflict(_))
    ));
    let right = Command::DeleteResource {
        id: id.clone(),
        uid: obj.uid.clone(),
    };
    assert_eq!(exec.execute(&right).await, Ok(Reply::Deleted));
    assert_eq!(exec.execute(&right).await, Err(KubeError::NotFound));

    comps.delete(&name, &DeleteParams::default()).await.unwrap();
    slices
        .delete(&sname, &DeleteParams::default())
        .await
        .unwrap();
}

async fn api_create_comp(api: &Api<Composition>, name: &str) -> Composition {
    api.create(&PostParams::default(), &composition(name, "syn"))
        .await
        .unwrap()
}
