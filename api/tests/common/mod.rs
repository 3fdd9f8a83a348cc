//! The EtcdMirror specs every rule is tested with, shared by the interpreter test and the
//! real-cluster test.
#![allow(dead_code)] // each test binary uses a different part

use serde_json::{json, Value};

pub fn base() -> Value {
    json!({
        "source": {"endpointList": ["http://127.0.0.1:2379"], "prefix": "/app/"},
        "target": {"endpointList": ["http://127.0.0.1:22379"], "prefix": "/mirror/"}
    })
}

pub fn with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base();
    edit(&mut v);
    v
}

pub fn object(spec: &Value) -> Value {
    json!({
        "apiVersion": "tidemark.dev/v1alpha1",
        "kind": "EtcdMirror",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": spec,
    })
}

pub struct Case {
    pub name: &'static str,
    pub spec: Value,
    /// For an update: the stored object.
    pub old: Option<Value>,
    /// The rule expected to reject it, or None when it is valid.
    pub rejected_by: Option<&'static str>,
}

pub fn case(name: &'static str, rejected_by: Option<&'static str>, spec: Value) -> Case {
    Case {
        name,
        spec,
        old: None,
        rejected_by,
    }
}

pub fn update(
    name: &'static str,
    rejected_by: Option<&'static str>,
    old: Value,
    new: Value,
) -> Case {
    Case {
        name,
        spec: new,
        old: Some(old),
        rejected_by,
    }
}

pub fn cases() -> Vec<Case> {
    let nul = "\u{0}";
    vec![
        // Valid objects.
        case("minimal", None, base()),
        case(
            "pod with resources, scheduling and a priority class",
            None,
            with(|v| {
                v["pod"] = json!({
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                    "nodeSelector": {"topology.kubernetes.io/zone": "eu-west-1a"},
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etcd", "effect": "NoSchedule"},
                                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["infra"]}]}]}}},
                    "priorityClassName": "system-cluster-critical"
                })
            }),
        ),
        case(
            "pod toleration with an unknown operator",
            Some("pod-toleration-operator"),
            with(|v| v["pod"] = json!({"tolerations": [{"key": "k", "operator": "In"}]})),
        ),
        case(
            "pod toleration Exists with a value",
            Some("pod-toleration-exists-without-value"),
            with(|v| {
                v["pod"] =
                    json!({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]})
            }),
        ),
        case(
            "pod priority class with capitals",
            Some("pod-priority-class-name"),
            with(|v| v["pod"] = json!({"priorityClassName": "High-Priority"})),
        ),
        case(
            "service ref instead of endpoints",
            None,
            with(|v| {
                v["source"] =
                    json!({"serviceRef": {"name": "etcd", "port": 2379}, "prefix": "/app/"})
            }),
        ),
        case(
            "https with tls from a Secret",
            None,
            with(|v| {
                v["source"]["endpointList"] = json!(["https://etcd-0:2379", "https://etcd-1:2379"]);
                v["source"]["tls"] = json!({"secretRef": {"name": "etcd-client"}, "caBundleRef": {"name": "etcd-ca"}});
            }),
        ),
        case(
            "https with empty tls (system roots)",
            None,
            with(|v| {
                v["target"]["endpointList"] = json!(["https://t:2379"]);
                v["target"]["tls"] = json!({});
            }),
        ),
        case(
            "insecureSkipVerify acknowledged",
            None,
            with(|v| {
                v["source"]["endpointList"] = json!(["https://s:2379"]);
                v["source"]["tls"] =
                    json!({"insecureSkipVerify": true, "insecureSkipVerifyAcknowledgeRisk": true});
            }),
        ),
        case(
            "auth from a Secret over https",
            None,
            with(|v| {
                v["target"]["endpointList"] = json!(["https://t:2379"]);
                v["target"]["tls"] = json!({});
                v["target"]["auth"] = json!({"secretRef": {"name": "etcd-auth"}});
            }),
        ),
        case(
            "auth over http, acknowledged",
            None,
            with(|v| {
                v["target"]["auth"] =
                    json!({"secretRef": {"name": "etcd-auth"}, "plaintextAcknowledgeRisk": true})
            }),
        ),
        case(
            "startRevision with Overwrite",
            None,
            with(|v| v["initialSync"] = json!({"mode": "Overwrite", "startRevision": 100})),
        ),
        case(
            "startRevision with OverwriteAndPrune",
            None,
            with(|v| v["initialSync"] = json!({"mode": "OverwriteAndPrune", "startRevision": 1})),
        ),
        case(
            "abandonWatermark with OverwriteAndPrune",
            None,
            with(|v| {
                v["initialSync"] = json!({"mode": "OverwriteAndPrune", "abandonWatermark": 21})
            }),
        ),
        case(
            "abandonWatermark with the default mode",
            None,
            with(|v| v["initialSync"] = json!({"abandonWatermark": 1})),
        ),
        case(
            "explicit checkpoint key under the range",
            None,
            with(|v| v["checkpoint"] = json!({"key": format!("/mirror/{nul}fence")})),
        ),
        case(
            "checkpoint key under target prefix + destPrefix",
            None,
            with(|v| {
                v["sync"] = json!({"destPrefix": "d/"});
                v["checkpoint"] = json!({"key": format!("/mirror/d/{nul}k")});
            }),
        ),
        case(
            "empty target prefix with a destPrefix",
            None,
            with(|v| {
                v["target"]["prefix"] = json!("");
                v["sync"] = json!({"destPrefix": "copy/"});
            }),
        ),
        // Invalid objects, each with the rule that catches it.
        case(
            "both endpointList and serviceRef",
            Some("exactly-one-endpoint"),
            with(|v| v["source"]["serviceRef"] = json!({"name": "etcd"})),
        ),
        case(
            "neither endpointList nor serviceRef",
            Some("exactly-one-endpoint"),
            with(|v| v["target"] = json!({"prefix": "/mirror/"})),
        ),
        case(
            "empty endpointList",
            Some("exactly-one-endpoint"),
            with(|v| v["target"]["endpointList"] = json!([])),
        ),
        case(
            "endpoint without a scheme",
            Some("endpoint-url-form"),
            with(|v| v["source"]["endpointList"] = json!(["127.0.0.1:2379"])),
        ),
        case(
            "endpoint with another scheme",
            Some("endpoint-url-form"),
            with(|v| v["source"]["endpointList"] = json!(["unix://etcd.sock"])),
        ),
        case(
            "endpoint without a host",
            Some("endpoint-url-form"),
            with(|v| v["target"]["endpointList"] = json!(["http://"])),
        ),
        case(
            "https without tls",
            Some("scheme-matches-tls"),
            with(|v| v["source"]["endpointList"] = json!(["https://s:2379"])),
        ),
        case(
            "tls with http",
            Some("scheme-matches-tls"),
            with(|v| v["target"]["tls"] = json!({"secretRef": {"name": "c"}})),
        ),
        case(
            "mixed schemes with tls",
            Some("scheme-matches-tls"),
            with(|v| {
                v["source"]["endpointList"] = json!(["https://a:2379", "http://b:2379"]);
                v["source"]["tls"] = json!({});
            }),
        ),
        case(
            "mixed schemes without tls",
            Some("scheme-matches-tls"),
            with(|v| v["source"]["endpointList"] = json!(["http://a:2379", "https://b:2379"])),
        ),
        case(
            "insecureSkipVerify without acknowledgement",
            Some("insecure-skip-verify-acknowledged"),
            with(|v| {
                v["target"]["endpointList"] = json!(["https://t:2379"]);
                v["target"]["tls"] = json!({"insecureSkipVerify": true});
            }),
        ),
        case(
            "auth over plain http",
            Some("auth-needs-tls"),
            with(|v| v["target"]["auth"] = json!({"secretRef": {"name": "etcd-auth"}})),
        ),
        case(
            "credentials in an endpoint URL",
            Some("endpoint-without-credentials"),
            with(|v| v["source"]["endpointList"] = json!(["http://root:pw@s:2379"])),
        ),
        case(
            "a CA with insecureSkipVerify",
            Some("ca-with-insecure-skip-verify"),
            with(|v| {
                v["target"]["endpointList"] = json!(["https://t:2379"]);
                v["target"]["tls"] = json!({"caBundleRef": {"name": "ca"}, "insecureSkipVerify": true, "insecureSkipVerifyAcknowledgeRisk": true});
            }),
        ),
        case(
            "empty tls.secretRef.name",
            Some("ref-name-not-empty"),
            with(|v| {
                v["source"]["endpointList"] = json!(["https://s:2379"]);
                v["source"]["tls"] = json!({"secretRef": {"name": ""}});
            }),
        ),
        case(
            "empty tls.caBundleRef.name",
            Some("ref-name-not-empty"),
            with(|v| {
                v["target"]["endpointList"] = json!(["https://t:2379"]);
                v["target"]["tls"] = json!({"caBundleRef": {"name": ""}});
            }),
        ),
        case(
            "empty auth.secretRef.name",
            Some("ref-name-not-empty"),
            with(|v| {
                v["source"]["auth"] =
                    json!({"secretRef": {"name": ""}, "plaintextAcknowledgeRisk": true})
            }),
        ),
        case(
            "empty serviceRef.name",
            Some("ref-name-not-empty"),
            with(|v| v["target"] = json!({"serviceRef": {"name": ""}, "prefix": "/mirror/"})),
        ),
        case(
            "startRevision with RequireEmpty",
            Some("start-revision-needs-overwrite"),
            with(|v| v["initialSync"] = json!({"mode": "RequireEmpty", "startRevision": 5})),
        ),
        case(
            "startRevision with the default mode",
            Some("start-revision-needs-overwrite"),
            with(|v| v["initialSync"] = json!({"startRevision": 5})),
        ),
        case(
            "negative startRevision",
            Some("start-revision-not-negative"),
            with(|v| v["initialSync"] = json!({"mode": "Overwrite", "startRevision": -1})),
        ),
        case(
            "zero abandonWatermark",
            Some("abandon-watermark-positive"),
            with(|v| v["initialSync"] = json!({"mode": "Overwrite", "abandonWatermark": 0})),
        ),
        case(
            "negative abandonWatermark",
            Some("abandon-watermark-positive"),
            with(|v| v["initialSync"] = json!({"abandonWatermark": -5})),
        ),
        case(
            "checkpoint key outside the range",
            Some("checkpoint-key-under-target-range"),
            with(|v| v["checkpoint"] = json!({"key": format!("/elsewhere/{nul}x")})),
        ),
        case(
            "checkpoint key equal to the range base",
            Some("checkpoint-key-under-target-range"),
            with(|v| v["checkpoint"] = json!({"key": "/mirror/"})),
        ),
        case(
            "checkpoint key without a NUL",
            Some("checkpoint-key-under-target-range"),
            with(|v| v["checkpoint"] = json!({"key": "/mirror/fence"})),
        ),
        case(
            "checkpoint key missing the destPrefix",
            Some("checkpoint-key-under-target-range"),
            with(|v| {
                v["sync"] = json!({"destPrefix": "d/"});
                v["checkpoint"] = json!({"key": format!("/mirror/{nul}k")});
            }),
        ),
        case(
            "whole target keyspace",
            Some("target-range-not-whole-keyspace"),
            with(|v| v["target"]["prefix"] = json!("")),
        ),
        // Updates. Transition rules only the apiserver can check: the agent sees one object.
        update(
            "update of mutable fields",
            None,
            base(),
            with(|v| {
                v["mode"] = json!("Drain");
                v["sync"] = json!({"maxTxnOps": 64});
                v["reconciliation"] = json!({"enabled": true});
            }),
        ),
        update(
            "update keeping the defaults explicit",
            None,
            base(),
            with(|v| {
                v["sync"] = json!({"destPrefix": "", "excludePrefixes": []});
            }),
        ),
        update(
            "source.prefix changed",
            Some("immutable-source-prefix"),
            base(),
            with(|v| v["source"]["prefix"] = json!("/other/")),
        ),
        update(
            "target.prefix changed",
            Some("immutable-target-prefix"),
            base(),
            with(|v| v["target"]["prefix"] = json!("/mirror2/")),
        ),
        update(
            "destPrefix added",
            Some("immutable-dest-prefix"),
            base(),
            with(|v| v["sync"] = json!({"destPrefix": "d/"})),
        ),
        update(
            "excludePrefixes changed",
            Some("immutable-exclude-prefixes"),
            with(|v| v["sync"] = json!({"excludePrefixes": ["tmp/"]})),
            with(|v| v["sync"] = json!({"excludePrefixes": ["tmp/", "cache/"]})),
        ),
        update(
            "excludePrefixes removed",
            Some("immutable-exclude-prefixes"),
            with(|v| v["sync"] = json!({"excludePrefixes": ["tmp/"]})),
            base(),
        ),
        update(
            "checkpoint.key changed",
            Some("immutable-checkpoint-key"),
            with(|v| v["checkpoint"] = json!({"key": format!("/mirror/{nul}a")})),
            with(|v| v["checkpoint"] = json!({"key": format!("/mirror/{nul}b")})),
        ),
        update(
            "checkpoint.key removed",
            Some("immutable-checkpoint-key"),
            with(|v| v["checkpoint"] = json!({"key": format!("/mirror/{nul}a")})),
            base(),
        ),
    ]
}
