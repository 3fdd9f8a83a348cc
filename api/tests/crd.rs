//! The generated CRD: freshness of `deploy/crd.yaml`, and every CEL rule evaluated (with the
//! kube-cel interpreter, which walks the schema like the apiserver) against valid and invalid
//! objects, next to `MirrorConfig::validate()` on the same objects so the two cannot drift.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use kube_cel::{
    compile_schema, estimate_rule_cost, CompiledSchema, ErrorKind, Validator, WarningKind,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use tidemark_api::rules::rules;
use tidemark_core::config::MirrorConfig;

fn deploy_path(file: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("deploy")
        .join(file)
}

#[test]
fn checked_in_crd_is_fresh() {
    let want = tidemark_api::crd_yaml();
    let have = std::fs::read_to_string(deploy_path("crd.yaml")).unwrap_or_default();
    assert!(
        have == want,
        "deploy/crd.yaml is stale; regenerate it with\n  \
         cargo run -p tidemark-api --example crd > deploy/crd.yaml\n\
         (or `tidemark-mirror crd > deploy/crd.yaml` once that subcommand exists)"
    );
}

fn root_schema() -> Value {
    let crd = serde_json::to_value(tidemark_api::crd()).unwrap();
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .unwrap()
        .clone()
}

#[test]
fn crd_names_columns_and_status_subresource() {
    let crd = serde_json::to_value(tidemark_api::crd()).unwrap();
    assert_eq!(crd["metadata"]["name"], "etcdmirrors.tidemark.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert!(v["subresources"]["status"].is_object());
    let cols: Vec<_> = v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
        .collect();
    assert_eq!(
        cols,
        [
            ("Phase", ".status.phase"),
            ("Watermark", ".status.lastAppliedRevision"),
            ("Lag", ".status.lagRevisions"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    let schema = root_schema();
    let compiled = compile_schema(&schema);
    assert!(
        !compiled.has_errors(),
        "rules do not compile: {:?}",
        compiled.compilation_errors()
    );
}

fn node<'a>(mut c: &'a CompiledSchema, path: &[&str]) -> &'a CompiledSchema {
    c = &c.properties["spec"];
    for p in path {
        c = &c.properties[*p];
    }
    c
}

/// The apiserver refuses CRDs whose rules may cost too much; every rule must be bounded.
#[test]
fn rules_have_bounded_cost() {
    let compiled = compile_schema(&root_schema());
    for r in rules() {
        let warnings = estimate_rule_cost(&r.rule, node(&compiled, &r.node));
        let bad: Vec<_> = warnings
            .iter()
            .filter(|w| {
                matches!(
                    w.kind,
                    WarningKind::CostExceeded | WarningKind::MissingBounds
                )
            })
            .collect();
        assert!(bad.is_empty(), "rule {} ({}): {bad:?}", r.id, r.rule);
    }
}

fn base() -> Value {
    json!({
        "source": {"endpointList": ["http://127.0.0.1:2379"], "prefix": "/app/"},
        "target": {"endpointList": ["http://127.0.0.1:22379"], "prefix": "/mirror/"}
    })
}

fn with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base();
    edit(&mut v);
    v
}

fn object(spec: &Value) -> Value {
    json!({
        "apiVersion": "tidemark.dev/v1alpha1",
        "kind": "EtcdMirror",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": spec,
    })
}

/// The ids of the rules the CRD rejects `spec` (updated from `old`) with.
fn crd_verdict(schema: &Value, spec: &Value, old: Option<&Value>) -> BTreeSet<&'static str> {
    let all = rules();
    let old = old.map(object);
    match Validator::new().validate(schema, &object(spec), old.as_ref()) {
        Ok(()) => BTreeSet::new(),
        Err(errs) => errs
            .iter()
            .map(|e| {
                assert_eq!(
                    e.kind,
                    ErrorKind::ValidationFailure,
                    "a rule errored instead of evaluating to false: {e:?}"
                );
                all.iter()
                    .find(|r| r.rule == e.rule && r.message == e.message)
                    .map(|r| r.id)
                    .unwrap_or_else(|| panic!("not one of our rules failed: {e:?}"))
            })
            .collect(),
    }
}

fn agent_verdict(spec: &Value) -> Result<(), String> {
    let c: MirrorConfig = serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
    c.validate().map_err(|e| e.to_string())
}

struct Case {
    name: &'static str,
    spec: Value,
    /// For an update: the stored object.
    old: Option<Value>,
    /// The rule expected to reject it, or None when it is valid.
    rejected_by: Option<&'static str>,
}

fn case(name: &'static str, rejected_by: Option<&'static str>, spec: Value) -> Case {
    Case {
        name,
        spec,
        old: None,
        rejected_by,
    }
}

fn update(name: &'static str, rejected_by: Option<&'static str>, old: Value, new: Value) -> Case {
    Case {
        name,
        spec: new,
        old: Some(old),
        rejected_by,
    }
}

fn cases() -> Vec<Case> {
    let nul = "\u{0}";
    vec![
        // Valid objects.
        case("minimal", None, base()),
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
            "auth from a Secret",
            None,
            with(|v| v["target"]["auth"] = json!({"secretRef": {"name": "etcd-auth"}})),
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
            with(|v| v["source"]["auth"] = json!({"secretRef": {"name": ""}})),
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

/// The schema without `default`s: the rules must not depend on the apiserver having defaulted
/// the object (objects stored before a default existed are not re-defaulted).
fn strip_defaults(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("default");
            m.values_mut().for_each(strip_defaults);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}

#[test]
fn every_rule_accepts_and_rejects_what_validate_does() {
    let mut bare = root_schema();
    strip_defaults(&mut bare);
    let schema = root_schema();
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    for c in cases() {
        let crd = crd_verdict(&schema, &c.spec, c.old.as_ref());
        let undefaulted = crd_verdict(&bare, &c.spec, c.old.as_ref());
        if undefaulted != crd {
            failures.push(format!(
                "{}: without schema defaults rejected by {undefaulted:?}, with them by {crd:?}",
                c.name
            ));
        }
        let agent = agent_verdict(&c.spec);
        let want: BTreeSet<_> = c.rejected_by.into_iter().collect();
        if crd != want {
            failures.push(format!(
                "{}: CRD rejected by {crd:?}, expected {want:?}",
                c.name
            ));
        }
        seen.extend(crd.iter().copied());
        let transition_only = c
            .rejected_by
            .is_some_and(|id| rules().iter().any(|r| r.id == id && r.is_transition()));
        if transition_only {
            // The agent cannot see the old object: the new one alone must be valid to it, and
            // the old one must have been valid too (the update is what is refused).
            if let Err(e) = &agent {
                failures.push(format!(
                    "{}: transition-only, but validate() rejects: {e}",
                    c.name
                ));
            }
        } else if agent.is_ok() != want.is_empty() {
            failures.push(format!(
                "{}: CRD {} but validate() {}",
                c.name,
                if want.is_empty() {
                    "accepts"
                } else {
                    "rejects"
                },
                match &agent {
                    Ok(()) => "accepts".to_string(),
                    Err(e) => format!("rejects: {e}"),
                }
            ));
        }
        if let Some(old) = &c.old {
            if let Err(e) = agent_verdict(old) {
                failures.push(format!("{}: the stored object is invalid: {e}", c.name));
            }
            if !crd_verdict(&schema, old, None).is_empty() {
                failures.push(format!("{}: the stored object fails the CRD", c.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let all: BTreeSet<_> = rules().iter().map(|r| r.id).collect();
    let untested: Vec<_> = all.difference(&seen).collect();
    assert!(
        untested.is_empty(),
        "rules never seen rejecting: {untested:?}"
    );
}

/// A transition rule must not fire on create, and immutable fields may be re-sent unchanged.
#[test]
fn transition_rules_pass_unchanged_updates() {
    let schema = root_schema();
    for c in cases().into_iter().filter(|c| c.rejected_by.is_none()) {
        assert!(
            crd_verdict(&schema, &c.spec, Some(&c.spec)).is_empty(),
            "{}: an unchanged update is refused",
            c.name
        );
    }
}
