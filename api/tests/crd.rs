//! The generated CRD: freshness of `deploy/crd.yaml`, and every CEL rule evaluated (with the
//! kube-cel interpreter, which walks the schema like the apiserver) against valid and invalid
//! objects, next to `MirrorConfig::validate()` on the same objects so the two cannot drift.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use kube_cel::{
    compile_schema, estimate_rule_cost, CompiledSchema, ErrorKind, Validator, WarningKind,
};
use serde_json::Value;
use std::collections::BTreeSet;
use tidemark_api::rules::rules;
use tidemark_api::EtcdMirrorSpec;

mod common;
use common::{cases, object};

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
         cargo run -q -p tidemark-etcd --bin tidemark-mirror -- crd > deploy/crd.yaml"
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

/// What the agent (`MirrorConfig::validate`) and the operator (`AgentPod::validate`) say.
fn agent_verdict(spec: &Value) -> Result<(), String> {
    let s: EtcdMirrorSpec = serde_json::from_value(spec.clone()).map_err(|e| e.to_string())?;
    s.config.validate().map_err(|e| e.to_string())?;
    match s.pod.map(|p| p.validate()).unwrap_or_default().as_slice() {
        [] => Ok(()),
        problems => Err(format!("{problems:?}")),
    }
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
        // Rejections must come from validate(), not from parsing.
        serde_json::from_value::<EtcdMirrorSpec>(c.spec.clone())
            .unwrap_or_else(|e| panic!("{}: does not parse as a spec: {e}", c.name));
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
