//! Every manifest under deploy/ parses and has the expected kinds, the operator holds every
//! permission it grants its agents and nothing broad, and the example EtcdMirror is valid both
//! to the CRD's CEL rules and to the agent.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tidemark_api::EtcdMirror;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every YAML document in deploy/ (what `kubectl apply -f deploy/` applies), by file name.
fn documents() -> BTreeMap<String, Vec<Value>> {
    documents_under("")
}

/// Every YAML document in a directory under deploy/, by file name.
fn documents_under(sub: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir().join(sub)).unwrap() {
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
        ("namespace.yaml", vec![("v1", "Namespace")]),
        (
            "operator.yaml",
            vec![("v1", "ServiceAccount"), ("apps/v1", "Deployment")],
        ),
        (
            "rbac.yaml",
            vec![
                ("rbac.authorization.k8s.io/v1", "ClusterRole"),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
                ("rbac.authorization.k8s.io/v1", "Role"),
                ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ],
        ),
        (
            "networkpolicy.yaml",
            vec![("networking.k8s.io/v1", "NetworkPolicy")],
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
    // `kubectl apply -f deploy/` goes in file-name order: the namespace before its objects.
    let names: Vec<&String> = docs.keys().collect();
    let ns = names.iter().position(|f| *f == "namespace.yaml").unwrap();
    for f in ["networkpolicy.yaml", "operator.yaml", "rbac.yaml"] {
        assert!(names.iter().position(|x| *x == f).unwrap() > ns, "{f}");
    }
}

fn operator_deployment() -> Value {
    documents()["operator.yaml"]
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap()
        .clone()
}

#[test]
fn the_operator_probes_its_admin_port_and_runs_its_own_image_for_agents() {
    let d = operator_deployment();
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["args"][0], "operator");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], c["ports"][0]["name"]);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let env = c["env"].as_array().unwrap();
    let agent_image = env
        .iter()
        .find(|e| e["name"] == "TIDEMARK_AGENT_IMAGE")
        .unwrap();
    assert_eq!(
        agent_image["value"], c["image"],
        "agents run the operator's image"
    );
    let pod_ns = env.iter().find(|e| e["name"] == "POD_NAMESPACE").unwrap();
    assert_eq!(
        pod_ns["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    let sa = pod["serviceAccountName"].as_str();
    let binding = documents()["rbac.yaml"]
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap()
        .clone();
    assert_eq!(sa, binding["subjects"][0]["name"].as_str());
    assert_eq!(
        d["metadata"]["namespace"],
        binding["subjects"][0]["namespace"]
    );
}

/// Does `rule` (RBAC's matching) allow `verb` on `group/resource` named `name`?
fn allows(rule: &Value, group: &str, resource: &str, verb: &str, name: Option<&str>) -> bool {
    let has = |k: &str, v: &str| {
        rule[k]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == v || x == "*"))
    };
    let names = rule["resourceNames"].as_array();
    has("apiGroups", group)
        && has("resources", resource)
        && has("verbs", verb)
        && names.is_none_or(|n| name.is_some_and(|name| n.iter().any(|x| x == name)))
}

/// Kubernetes lets the operator write only Roles whose rules it holds itself; every Role it
/// writes must therefore be covered by its ClusterRole. And the ClusterRole holds nothing
/// broad: no wildcard, no delete, no Secret listing.
#[test]
fn the_operator_holds_what_it_grants_and_nothing_broad() {
    let cluster_role = documents()["rbac.yaml"][0].clone();
    let rules = cluster_role["rules"].as_array().unwrap();
    let m: EtcdMirror =
        serde_json::from_value(documents_under("examples")["etcdmirror.yaml"][0].clone()).unwrap();
    let granted =
        tidemark_api::workload::role_rules(m.metadata.name.as_deref().unwrap(), &m.spec.config);
    for g in serde_json::to_value(&granted).unwrap().as_array().unwrap() {
        let names: Vec<Option<&str>> = match g["resourceNames"].as_array() {
            Some(n) => n.iter().map(|x| x.as_str()).collect(),
            None => vec![None],
        };
        for group in g["apiGroups"].as_array().unwrap() {
            for res in g["resources"].as_array().unwrap() {
                for verb in g["verbs"].as_array().unwrap() {
                    for name in &names {
                        let (group, res, verb) = (
                            group.as_str().unwrap(),
                            res.as_str().unwrap(),
                            verb.as_str().unwrap(),
                        );
                        assert!(
                            rules.iter().any(|r| allows(r, group, res, verb, *name)),
                            "the operator grants {verb} {group}/{res} {name:?} without holding it"
                        );
                    }
                }
            }
        }
    }
    for r in rules {
        let text = r.to_string();
        assert!(!text.contains('*'), "a wildcard: {text}");
        assert!(
            !text.contains("delete"),
            "the garbage collector deletes: {text}"
        );
        if r["resources"][0] == "secrets" {
            assert_eq!(r["verbs"], serde_json::json!(["get"]), "{text}");
        }
    }
}

#[test]
fn network_policy_admits_only_the_admin_port() {
    let np = &documents()["networkpolicy.yaml"][0];
    let d = operator_deployment();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
    );
    assert_eq!(np["metadata"]["namespace"], d["metadata"]["namespace"]);
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
    let doc = documents_under("examples")["etcdmirror.yaml"][0].clone();
    let m: EtcdMirror = serde_json::from_value(doc.clone()).expect("typed EtcdMirror");
    m.spec.validate().expect("the agent accepts the example");
    assert!(m.spec.pod.as_ref().is_none_or(|p| p.validate().is_empty()));
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
