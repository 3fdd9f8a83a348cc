//! The same rule cases against a real apiserver, when one is configured: set
//! `TIDEMARK_KUBE_TEST_NAMESPACE` to an existing namespace of the cluster in the current
//! kubeconfig. The CRD is server-side applied (and left installed); objects are created with
//! `dryRun=All` where possible and deleted otherwise. Without the variable the test passes
//! without doing anything, saying so on stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use std::time::Duration;
use tidemark_api::EtcdMirror;

mod common;
use common::{cases, object};

async fn install_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = tidemark_api::crd();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("tidemark-api-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("the apiserver accepts the CRD (schema, CEL compilation and cost)");
    for _ in 0..60 {
        let got = crds.get(&crd.name_any()).await.unwrap();
        let established = got
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the CRD did not become Established");
}

fn mirror(name: &str, spec: &serde_json::Value) -> EtcdMirror {
    let mut o = object(spec);
    o["metadata"]["name"] = name.into();
    o["metadata"].as_object_mut().unwrap().remove("namespace");
    serde_json::from_value(o).unwrap()
}

#[tokio::test]
async fn rules_hold_on_a_real_apiserver() {
    let Ok(ns) = std::env::var("TIDEMARK_KUBE_TEST_NAMESPACE") else {
        eprintln!("skipped: set TIDEMARK_KUBE_TEST_NAMESPACE to run against a real cluster");
        return;
    };
    let client = kube::Client::try_default().await.unwrap();
    install_crd(&client).await;
    let api: Api<EtcdMirror> = Api::namespaced(client, &ns);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut failures = Vec::new();
    for (i, c) in cases().into_iter().enumerate() {
        let name = format!("tidemark-rule-case-{i}");
        let outcome = match &c.old {
            None => api.create(&dry, &mirror(&name, &c.spec)).await.map(|_| ()),
            Some(old) => {
                let stored = api
                    .create(&PostParams::default(), &mirror(&name, old))
                    .await
                    .unwrap_or_else(|e| panic!("{}: storing the old object: {e}", c.name));
                let mut next = mirror(&name, &c.spec);
                next.metadata.resource_version = stored.metadata.resource_version.clone();
                let r = api.replace(&name, &dry, &next).await.map(|_| ());
                api.delete(&name, &DeleteParams::default()).await.unwrap();
                r
            }
        };
        match (c.rejected_by, outcome) {
            (None, Ok(())) => {}
            (Some(_), Err(kube::Error::Api(e))) if e.code == 422 => {}
            (want, got) => failures.push(format!("{}: expected {want:?}, got {got:?}", c.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
