//! Every manifest under deploy/ parses, has the expected kinds, and the example EtcdMirror is
//! valid both to the CRD's CEL rules and to the agent.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tidemark_api::EtcdMirror;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every YAML document in deploy/, by file name.
fn documents() -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| {
                Value::deserialize(d)
                    .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()))
            })
            .filter(|v| !v.is_null())
            .collect();
        out.insert(
            path.file_name().unwrap().to_string_lossy().into_owned(),
            docs,
        );
    }
    out
}

fn kinds(docs: &[Value]) -> Vec<(String, String)> {
    docs.iter()
        .map(|d| {
            (
                d["apiVersion"].as_str().unwrap_or("").to_string(),
                d["kind"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn manifests_have_the_expected_kinds() {
    let docs = documents();
    let want: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::from([
        (
            "crd.yaml",
            vec![("apiextensions.k8s.io/v1", "CustomResourceDefinition")],
        ),
        (
            "rbac.yaml",
            vec![
                ("v1", "ServiceAccount"),
                ("rbac.authorization.k8s.io/v1", "Role"),
                ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ],
        ),
        ("deployment.yaml", vec![("apps/v1", "Deployment")]),
        (
            "networkpolicy.yaml",
            vec![("networking.k8s.io/v1", "NetworkPolicy")],
        ),
        (
            "etcdmirror.yaml",
            vec![("tidemark.dev/v1alpha1", "EtcdMirror")],
        ),
    ]);
    let have: BTreeMap<&str, Vec<(String, String)>> =
        docs.iter().map(|(f, d)| (f.as_str(), kinds(d))).collect();
    let want: BTreeMap<&str, Vec<(String, String)>> = want
        .into_iter()
        .map(|(f, k)| {
            (
                f,
                k.into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(have, want);
    for (file, ds) in &docs {
        for d in ds {
            assert!(
                d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty()),
                "{file}: a document without metadata.name"
            );
        }
    }
}

#[test]
fn deployment_recreates_and_probes_the_admin_port() {
    let d = &documents()["deployment.yaml"][0];
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..3], ["run", "--resource", "tidemark/main"]);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], c["ports"][0]["name"]);
    let sa = d["spec"]["template"]["spec"]["serviceAccountName"].as_str();
    let rbac = &documents()["rbac.yaml"];
    assert_eq!(sa, rbac[0]["metadata"]["name"].as_str());
    // The resource the agent reads is the example's.
    let m = &documents()["etcdmirror.yaml"][0];
    assert_eq!(
        args[2],
        format!(
            "{}/{}",
            m["metadata"]["namespace"].as_str().unwrap(),
            m["metadata"]["name"].as_str().unwrap()
        )
    );
}

/// Every grant is one verb the agent uses, limited to the objects the example names (the
/// deploy test in driver-etcd checks the agent's real requests against these rules).
#[test]
fn rbac_is_least_privilege() {
    let role = &documents()["rbac.yaml"][1];
    let mut grants: Vec<(String, String, String, String)> = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        // Events are created under generated names, so that rule cannot name them.
        let events = rule["resources"][0] == "events";
        let any = vec![Value::String("*".into())];
        let names = match rule["resourceNames"].as_array() {
            Some(n) => n,
            None if events => &any,
            None => panic!("every rule but the Events one is limited by resourceNames"),
        };
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    for n in names {
                        grants.push((
                            g.as_str().unwrap().into(),
                            r.as_str().unwrap().into(),
                            v.as_str().unwrap().into(),
                            n.as_str().unwrap().into(),
                        ));
                    }
                }
            }
        }
    }
    grants.sort();
    let m = &documents()["etcdmirror.yaml"][0];
    let mirror = m["metadata"]["name"].as_str().unwrap();
    let secret = |side: &str| {
        m["spec"][side]["tls"]["secretRef"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut want: Vec<(String, String, String, String)> = vec![
        (
            "tidemark.dev".into(),
            "etcdmirrors".into(),
            "get".into(),
            mirror.into(),
        ),
        (
            "tidemark.dev".into(),
            "etcdmirrors/status".into(),
            "patch".into(),
            mirror.into(),
        ),
        ("".into(), "secrets".into(), "get".into(), secret("source")),
        ("".into(), "secrets".into(), "get".into(), secret("target")),
        (
            "events.k8s.io".into(),
            "events".into(),
            "create".into(),
            "*".into(),
        ),
        (
            "events.k8s.io".into(),
            "events".into(),
            "patch".into(),
            "*".into(),
        ),
    ];
    want.sort();
    assert_eq!(grants, want);
}

#[test]
fn network_policy_admits_only_the_admin_port() {
    let np = &documents()["networkpolicy.yaml"][0];
    let d = &documents()["deployment.yaml"][0];
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
    );
    let ingress = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0]["ports"].as_array().unwrap().len(), 1);
    assert_eq!(
        ingress[0]["ports"][0]["port"],
        c["ports"][0]["containerPort"]
    );
    assert_eq!(c["ports"].as_array().unwrap().len(), 1, "one port: admin");
}

#[test]
fn example_etcdmirror_is_valid() {
    let doc = documents()["etcdmirror.yaml"][0].clone();
    let m: EtcdMirror = serde_json::from_value(doc.clone()).expect("typed EtcdMirror");
    m.spec.validate().expect("the agent accepts the example");
    let crd = serde_json::to_value(tidemark_api::crd()).unwrap();
    let schema = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema")
        .unwrap();
    kube_cel::Validator::new()
        .validate(schema, &doc, None)
        .expect("the CRD rules accept the example");
}

#[test]
fn checked_in_crd_reads_back_as_the_generated_one() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let text = std::fs::read_to_string(deploy_dir().join("crd.yaml")).unwrap();
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).unwrap();
    assert_eq!(crd, tidemark_api::crd());
}
