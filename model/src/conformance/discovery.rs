//! API discovery, as `kubectl` and kube's discovery client read it: `/api`, `/apis`,
//! `/api/v1` and `/apis/{group}/{version}`, in the unaggregated form every client falls
//! back to. The resources are the built-in kinds the project's tests and manifests use, plus
//! every CustomResourceDefinition stored in the model (so a CRD applied by `kubectl` makes
//! its kind known, as on a real apiserver).

use crate::apiserver::{ApiServer, Gvr};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One served resource.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    pub(crate) status: bool,
    /// `additionalPrinterColumns` of a CRD version (for `kubectl get` tables).
    pub(crate) columns: Vec<Value>,
}

/// A built-in kind: (group, version, plural, kind, namespaced, short names).
type BuiltIn = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
);

/// The built-in kinds the project's tests and manifests use.
const BUILT_IN: &[BuiltIn] = &[
    ("", "v1", "namespaces", "Namespace", false, &["ns"]),
    ("", "v1", "secrets", "Secret", true, &[]),
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"]),
    ("", "v1", "services", "Service", true, &["svc"]),
    ("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"]),
    ("", "v1", "events", "Event", true, &["ev"]),
    ("", "v1", "pods", "Pod", true, &["po"]),
    ("apps", "v1", "deployments", "Deployment", true, &["deploy"]),
    ("events.k8s.io", "v1", "events", "Event", true, &["ev"]),
    ("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
    ),
];

fn crds() -> Gvr {
    Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

/// Every served resource: the built-ins, then each stored CRD's served versions.
pub(crate) fn resources(api: &ApiServer) -> Vec<Resource> {
    let mut out: Vec<Resource> = BUILT_IN
        .iter()
        .map(|(g, v, plural, kind, namespaced, short)| Resource {
            group: g.to_string(),
            version: v.to_string(),
            plural: plural.to_string(),
            singular: kind.to_lowercase(),
            kind: kind.to_string(),
            namespaced: *namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            status: false,
            columns: if g.is_empty() && *plural == "events" {
                // What `kubectl get events` shows first.
                ["Type", "Reason", "Message"]
                    .iter()
                    .map(|c| json!({"name": c, "type": "string", "jsonPath": format!(".{}", c.to_lowercase())}))
                    .collect()
            } else {
                Vec::new()
            },
        })
        .collect();
    for crd in api.all(&crds()) {
        let spec = &crd["spec"];
        let names = &spec["names"];
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        for v in spec["versions"].as_array().into_iter().flatten() {
            if v["served"] == false {
                continue;
            }
            out.push(Resource {
                group: s(&spec["group"]),
                version: s(&v["name"]),
                plural: s(&names["plural"]),
                singular: names["singular"]
                    .as_str()
                    .map_or_else(|| s(&names["kind"]).to_lowercase(), str::to_string),
                kind: s(&names["kind"]),
                namespaced: spec["scope"] != "Cluster",
                short_names: names["shortNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                status: v.pointer("/subresources/status").is_some(),
                columns: v["additionalPrinterColumns"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// The resource a path's group, version and plural name, if served.
pub(crate) fn find(api: &ApiServer, gvr: &Gvr) -> Option<Resource> {
    resources(api)
        .into_iter()
        .find(|r| r.group == gvr.group && r.version == gvr.version && r.plural == gvr.resource)
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The discovery document at `path`, or `None` when `path` is not a discovery path.
pub(crate) fn document(api: &ApiServer, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let all = resources(api);
    match segs.as_slice() {
        ["api"] => Some(json!({"kind": "APIVersions", "versions": ["v1"]})),

        ["apis"] => {
            let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for r in all.iter().filter(|r| !r.group.is_empty()) {
                let versions = groups.entry(&r.group).or_default();
                if !versions.contains(&r.version.as_str()) {
                    versions.push(&r.version);
                }
            }
            let groups: Vec<Value> = groups
                .into_iter()
                .map(|(g, vs)| {
                    let versions: Vec<Value> = vs
                        .iter()
                        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                        .collect();
                    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        ["api", v] => Some(list(&all, "", v)),
        ["apis", g, v] => Some(list(&all, g, v)),
        _ => None,
    }
}

fn list(all: &[Resource], group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for r in all
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        resources.push(json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
            "shortNames": r.short_names,
        }));
        if r.status {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

/// `kubectl get`'s server-side table: name, the CRD's printer columns (simple `.a.b` paths),
/// and age.
pub(crate) fn table(r: &Resource, items: &[Value], now_secs: i64) -> Value {
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name"})];
    let mut paths = Vec::new();
    for c in &r.columns {
        let path = c["jsonPath"].as_str().unwrap_or_default().to_string();
        if path == ".metadata.creationTimestamp" {
            continue;
        }
        defs.push(json!({"name": c["name"], "type": c["type"]}));
        paths.push(path);
    }
    defs.push(json!({"name": "Age", "type": "string"}));
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            for p in &paths {
                let pointer = p.replace('.', "/");
                cells.push(o.pointer(&pointer).cloned().unwrap_or(Value::Null));
            }
            cells.push(json!(age(o, now_secs)));
            json!({
                "cells": cells,
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": o["metadata"],
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// `5s`, `3m`, `2h`, `4d`, from `metadata.creationTimestamp` (RFC 3339, UTC).
fn age(o: &Value, now_secs: i64) -> String {
    let Some(created) = o["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(|t| tidemark_core::inventory::timestamp::Timestamp::parse_rfc3339(t).ok())
    else {
        return "<unknown>".into();
    };
    let created = i64::try_from(created.unix_nanos / 1_000_000_000).unwrap_or(0);
    let s = (now_secs - created).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
