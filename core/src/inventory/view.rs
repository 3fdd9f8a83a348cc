//! Core-side views of the Kubernetes objects inventory reads.
//!
//! Core does not depend on k8s-openapi; the kube driver (and `inspect`, and the simulator)
//! map API objects into these small structs, either by hand or with the `from_kube_json`
//! helpers here, which read the JSON Kubernetes serves.
//!
//! Eno field names were checked against Azure/eno `api/v1` (composition.go,
//! resourceslice.go): Composition `spec.synthesizer.name`, `status.currentSynthesis` /
//! `status.previousSynthesis` with `uuid`, `synthesized` (metav1.Time), `ready`
//! (metav1.Time, set once Ready), `resourceSlices: [{name}]`; ResourceSlice
//! `spec.resources[]{manifest, deleted}`.

use super::timestamp::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What inventory needs to know about an Eno Composition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompositionView {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: a re-created Composition is a different one.
    pub uid: String,
    /// `metadata.resourceVersion`, the precondition for the decision annotation.
    pub resource_version: String,
    /// `spec.synthesizer.name`, part of the default lineage.
    pub synthesizer_name: String,
    /// `metadata.labels`, for the scope's label selector.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations` (opt-in, lineage override, recovery decision).
    pub annotations: BTreeMap<String, String>,
    /// `status.currentSynthesis`.
    pub current_synthesis: Option<SynthesisView>,
    /// `status.previousSynthesis`.
    pub previous_synthesis: Option<SynthesisView>,
    /// `metadata.deletionTimestamp` is set: the Composition is going away.
    pub deleting: bool,
}

/// One of a Composition's syntheses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SynthesisView {
    /// `uuid`.
    pub uuid: String,
    /// `synthesized`: when the synthesizer produced the slices.
    pub synthesized: Option<Timestamp>,
    /// `ready` is set: every resource of the synthesis became ready.
    pub ready: bool,
    /// `resourceSlices[].name`, in order.
    pub resource_slice_names: Vec<String>,
}

/// What inventory needs to know about an Eno ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SliceView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// `spec.resources`.
    pub resources: Vec<SliceResource>,
}

/// One element of `ResourceSlice.spec.resources`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SliceResource {
    /// The object as a JSON string.
    pub manifest: String,
    /// An Eno tombstone: the resource should no longer exist.
    pub deleted: bool,
}

/// A downstream object as recovery sees it just before deleting it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObjectView {
    /// `metadata.uid`, used as the delete precondition.
    pub uid: String,
    /// `metadata.annotations` (for `eno.azure.io/deletion-strategy: orphan`).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
}

fn s(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str().map(str::to_string)
}

fn present(v: &Value, path: &[&str]) -> bool {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(n) => cur = n,
            None => return false,
        }
    }
    !cur.is_null()
}

/// `metadata.labels` / `metadata.annotations` as a map; non-string values are an error.
pub(crate) fn meta_map(v: &Value, key: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    match v.get("metadata").and_then(|m| m.get(key)) {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, val) in m {
                let sv = val
                    .as_str()
                    .ok_or_else(|| format!("metadata.{key}[{k:?}] is not a string"))?;
                out.insert(k.clone(), sv.to_string());
            }
        }
        Some(_) => return Err(format!("metadata.{key} is not an object")),
    }
    Ok(out)
}

impl SynthesisView {
    /// Maps Eno's `Synthesis` JSON.
    pub fn from_kube_json(v: &Value) -> Result<SynthesisView, String> {
        let synthesized = match v.get("synthesized") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(
                Timestamp::parse_rfc3339(t).map_err(|e| format!("synthesis.synthesized: {e}"))?,
            ),
            Some(_) => return Err("synthesis.synthesized is not a string".into()),
        };
        let mut names = Vec::new();
        if let Some(refs) = v.get("resourceSlices").filter(|r| !r.is_null()) {
            let arr = refs
                .as_array()
                .ok_or("synthesis.resourceSlices is not a list")?;
            for r in arr {
                names.push(s(r, &["name"]).ok_or("resourceSlices[] without a name")?);
            }
        }
        Ok(SynthesisView {
            uuid: s(v, &["uuid"]).unwrap_or_default(),
            synthesized,
            // `ready` is a metav1.Time in current Eno; older versions used a bool.
            ready: match v.get("ready") {
                Some(Value::Bool(b)) => *b,
                Some(Value::Null) | None => false,
                Some(_) => true,
            },
            resource_slice_names: names,
        })
    }
}

impl CompositionView {
    /// Maps an `eno.azure.io/v1` Composition as the API server serves it.
    pub fn from_kube_json(v: &Value) -> Result<CompositionView, String> {
        let syn = |key: &str| -> Result<Option<SynthesisView>, String> {
            match v.get("status").and_then(|st| st.get(key)) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => SynthesisView::from_kube_json(x).map(Some),
            }
        };
        Ok(CompositionView {
            namespace: s(v, &["metadata", "namespace"]).unwrap_or_default(),
            name: s(v, &["metadata", "name"]).ok_or("Composition without metadata.name")?,
            uid: s(v, &["metadata", "uid"]).unwrap_or_default(),
            resource_version: s(v, &["metadata", "resourceVersion"]).unwrap_or_default(),
            synthesizer_name: s(v, &["spec", "synthesizer", "name"]).unwrap_or_default(),
            labels: meta_map(v, "labels")?,
            annotations: meta_map(v, "annotations")?,
            current_synthesis: syn("currentSynthesis")?,
            previous_synthesis: syn("previousSynthesis")?,
            deleting: present(v, &["metadata", "deletionTimestamp"]),
        })
    }
}

impl SliceView {
    /// Maps an `eno.azure.io/v1` ResourceSlice as the API server serves it.
    pub fn from_kube_json(v: &Value) -> Result<SliceView, String> {
        let name = s(v, &["metadata", "name"]).ok_or("ResourceSlice without metadata.name")?;
        let mut resources = Vec::new();
        if let Some(list) = v
            .get("spec")
            .and_then(|sp| sp.get("resources"))
            .filter(|r| !r.is_null())
        {
            let arr = list
                .as_array()
                .ok_or_else(|| format!("slice {name}: spec.resources is not a list"))?;
            for r in arr {
                resources.push(SliceResource {
                    manifest: s(r, &["manifest"]).unwrap_or_default(),
                    deleted: r.get("deleted").and_then(Value::as_bool).unwrap_or(false),
                });
            }
        }
        Ok(SliceView {
            terminating: present(v, &["metadata", "deletionTimestamp"]),
            name,
            resources,
        })
    }
}

impl ObjectView {
    /// Maps any Kubernetes object's metadata.
    pub fn from_kube_json(v: &Value) -> Result<ObjectView, String> {
        Ok(ObjectView {
            uid: s(v, &["metadata", "uid"]).unwrap_or_default(),
            annotations: meta_map(v, "annotations")?,
            terminating: present(v, &["metadata", "deletionTimestamp"]),
        })
    }
}

/// The objects of a `kind: List` / `*List` document, or the document itself when it is a
/// single object. Lets `inspect` accept `kubectl get -o json|yaml` output in every form.
pub fn list_items(v: &Value) -> Vec<&Value> {
    match v.get("items").and_then(Value::as_array) {
        Some(items) => items.iter().collect(),
        None if v.is_null() => Vec::new(),
        None => vec![v],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_eno_composition() {
        let v = json!({
            "apiVersion": "eno.azure.io/v1", "kind": "Composition",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                          "annotations": {"eno.azure.io/recovery-enabled": "true"}},
            "spec": {"synthesizer": {"name": "syn"}},
            "status": {
                "currentSynthesis": {"uuid": "x", "synthesized": "2026-12-02T14:03:04Z",
                    "ready": "2026-12-02T14:04:00Z", "resourceSlices": [{"name": "s1"}, {"name": "s2"}]},
                "previousSynthesis": {"uuid": "w", "resourceSlices": [{"name": "s0"}]}
            }
        });
        let c = CompositionView::from_kube_json(&v).unwrap();
        assert_eq!(c.synthesizer_name, "syn");
        let cur = c.current_synthesis.unwrap();
        assert!(cur.ready);
        assert_eq!(cur.resource_slice_names, ["s1", "s2"]);
        assert!(cur.synthesized.is_some());
        let prev = c.previous_synthesis.unwrap();
        assert!(!prev.ready && prev.synthesized.is_none());
        assert!(!c.deleting);
    }

    #[test]
    fn maps_slice_and_lists() {
        let v = json!({"kind": "ResourceSliceList", "items": [
            {"metadata": {"name": "s1", "deletionTimestamp": "2026-12-02T14:03:04Z"},
             "spec": {"resources": [{"manifest": "{}"}, {"manifest": "{}", "deleted": true}]}}
        ]});
        let items = list_items(&v);
        assert_eq!(items.len(), 1);
        let sl = SliceView::from_kube_json(items[0]).unwrap();
        assert!(sl.terminating);
        assert_eq!(sl.resources.len(), 2);
        assert!(sl.resources[1].deleted);
        assert_eq!(list_items(&json!({"kind": "Secret"})).len(), 1);
    }
}
