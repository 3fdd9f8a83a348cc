//! The objects the operator writes for one EtcdMirror, checked without an apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use serde_json::{json, Value};
use tidemark_api::workload::{
    agent_name, agent_workload, spec_hash, AgentSettings, SPEC_HASH_ANNOTATION,
};
use tidemark_api::{EtcdMirror, EtcdMirrorSpec};

fn settings() -> AgentSettings {
    AgentSettings {
        image: "registry.example/tidemark/tidemark-mirror:1.2.3".into(),
        image_pull_policy: None,
        log_format: "json".into(),
    }
}

fn mirror(name: &str, spec: Value) -> EtcdMirror {
    let spec: EtcdMirrorSpec = serde_json::from_value(spec).unwrap();
    let mut m = EtcdMirror::new(name, spec);
    m.metadata.namespace = Some("dr".into());
    m.metadata.uid = Some("0b6c2f8e-uid".into());
    m
}

fn base() -> Value {
    json!({
        "source": {"endpointList": ["http://etcd-a:2379"], "prefix": "/app/"},
        "target": {"endpointList": ["http://etcd-b:2379"], "prefix": "/mirror/"}
    })
}

fn to_json<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

#[test]
fn names_fit_labels_and_stay_distinct() {
    assert_eq!(agent_name("main"), "tidemark-mirror-main");
    let a = agent_name(&"a".repeat(200));
    let b = agent_name(&format!("{}b", "a".repeat(199)));
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert_eq!(a, agent_name(&"a".repeat(200)), "deterministic");
    let w = agent_workload(&mirror(&"x".repeat(250), base()), &settings()).unwrap();
    let d = to_json(&w.deployment);
    for (k, v) in d["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap()
    {
        assert!(v.as_str().unwrap().len() <= 63, "label {k}={v}");
    }
}

#[test]
fn the_role_grants_only_what_the_spec_names() {
    // No Secret named: no Secret rule at all (an empty resourceNames grants every Secret).
    let w = agent_workload(&mirror("main", base()), &settings()).unwrap();
    let rules = to_json(&w.role)["rules"].clone();
    assert!(
        !rules
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "secrets"),
        "{rules}"
    );
    let mut spec = base();
    spec["source"]["endpointList"] = json!(["https://etcd-a:2379"]);
    spec["source"]["tls"] =
        json!({"secretRef": {"name": "src-tls"}, "caBundleRef": {"name": "ca"}});
    spec["target"]["auth"] =
        json!({"secretRef": {"name": "tgt-auth"}, "plaintextAcknowledgeRisk": true});
    let w = agent_workload(&mirror("main", spec), &settings()).unwrap();
    let rules = to_json(&w.role)["rules"].clone();
    let secrets = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0] == "secrets")
        .unwrap();
    assert_eq!(
        secrets["resourceNames"],
        json!(["ca", "src-tls", "tgt-auth"])
    );
    assert_eq!(secrets["verbs"], json!(["get"]));
    for r in rules.as_array().unwrap() {
        let verbs: Vec<&str> = r["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(!verbs.contains(&"*") && !verbs.contains(&"list") && !verbs.contains(&"delete"));
        if r["apiGroups"][0] != "events.k8s.io" {
            assert!(r["resourceNames"].is_array(), "unnamed rule {r}");
        }
    }
    let binding = to_json(&w.role_binding);
    assert_eq!(binding["roleRef"]["name"], "tidemark-mirror-main");
    assert_eq!(binding["subjects"][0]["name"], "tidemark-mirror-main");
}

#[test]
fn the_deployment_is_one_hardened_recreated_agent_owned_by_the_mirror() {
    let mut spec = base();
    spec["pod"] = json!({
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "nodeSelector": {"zone": "b"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "affinity": {"podAntiAffinity": {}},
        "priorityClassName": "mirror-critical"
    });
    let w = agent_workload(&mirror("main", spec), &settings()).unwrap();
    let d = to_json(&w.deployment);
    assert_eq!(d["metadata"]["name"], "tidemark-mirror-main");
    assert_eq!(d["metadata"]["namespace"], "dr");
    let owner = &d["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "EtcdMirror");
    assert_eq!(owner["uid"], "0b6c2f8e-uid");
    assert_eq!(owner["controller"], true);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "tidemark-mirror-main");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["nodeSelector"], json!({"zone": "b"}));
    assert_eq!(pod["tolerations"][0]["operator"], "Exists");
    assert_eq!(pod["affinity"], json!({"podAntiAffinity": {}}));
    assert_eq!(pod["priorityClassName"], "mirror-critical");
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        "registry.example/tidemark/tidemark-mirror:1.2.3"
    );
    assert_eq!(
        c["args"],
        json!([
            "run",
            "--resource",
            "dr/main",
            "--admin-addr",
            "0.0.0.0:9090",
            "--log-format",
            "json"
        ])
    );
    assert_eq!(c["resources"]["requests"]["memory"], "1Gi");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        c["env"][0],
        json!({"name": "TMPDIR", "value": "/var/run/tidemark"})
    );
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/var/run/tidemark");
    assert_eq!(pod["volumes"][0]["emptyDir"]["medium"], "Memory");
    let sel = d["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let labels = d["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (k, v) in sel {
        assert_eq!(labels.get(k), Some(v), "the selector matches the template");
    }
    // Without spec.pod: the defaults, and no scheduling fields.
    let w = agent_workload(&mirror("main", base()), &settings()).unwrap();
    let pod = to_json(&w.deployment)["spec"]["template"]["spec"].clone();
    assert_eq!(
        pod["containers"][0]["resources"],
        json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})
    );
    assert!(pod.get("nodeSelector").is_none() && pod.get("tolerations").is_none());
}

#[test]
fn a_mode_switch_keeps_the_pod_and_any_other_change_rolls_it() {
    let s = settings();
    let hash = |spec: Value| {
        let m = mirror("main", spec);
        let w = agent_workload(&m, &s).unwrap();
        let d = to_json(&w.deployment);
        let h = d["spec"]["template"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION].clone();
        assert_eq!(h, json!(spec_hash(&m.spec, &s)));
        h
    };
    let base_hash = hash(base());
    let mut drain = base();
    drain["mode"] = json!("Drain");
    assert_eq!(hash(drain), base_hash, "Drain is applied in place");
    let mut ops = base();
    ops["sync"] = json!({"maxTxnOps": 64});
    assert_ne!(hash(ops), base_hash);
    let mut pod = base();
    pod["pod"] = json!({"nodeSelector": {"zone": "a"}});
    assert_ne!(hash(pod), base_hash);
    let other = AgentSettings {
        image: "registry.example/tidemark/tidemark-mirror:1.2.4".into(),
        ..settings()
    };
    assert_ne!(
        spec_hash(&mirror("main", base()).spec, &other),
        spec_hash(&mirror("main", base()).spec, &s)
    );
}

#[test]
fn an_unstored_or_invalid_mirror_gets_no_agent() {
    let mut m = mirror("main", base());
    m.metadata.uid = None;
    assert!(agent_workload(&m, &settings())
        .unwrap_err()
        .to_string()
        .contains("uid"));
    let mut spec = base();
    spec["pod"] = json!({"priorityClassName": "Not A Name"});
    let err = agent_workload(&mirror("main", spec), &settings()).unwrap_err();
    assert!(err.to_string().contains("pod.priorityClassName"), "{err}");
}

#[test]
fn a_misspelt_spec_field_is_still_an_error() {
    let mut spec = base();
    spec["intialSync"] = json!({});
    let err = serde_json::from_value::<EtcdMirrorSpec>(spec).unwrap_err();
    assert!(err.to_string().contains("intialSync"), "{err}");
    let mut spec = base();
    spec["pod"] = json!({"nodeSelecter": {}});
    let err = serde_json::from_value::<EtcdMirrorSpec>(spec).unwrap_err();
    assert!(
        err.to_string()
            .contains("pod: unknown field `nodeSelecter`"),
        "{err}"
    );
    // And the pod survives a round trip.
    let mut spec = base();
    spec["pod"] = json!({"priorityClassName": "p"});
    let s: EtcdMirrorSpec = serde_json::from_value(spec.clone()).unwrap();
    assert_eq!(to_json(&s)["pod"], spec["pod"]);
}
