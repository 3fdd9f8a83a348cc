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

use super::entry::{string_map, StringMapError};
use super::timestamp::{Timestamp, TimestampError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use thiserror::Error;

/// Why Kubernetes JSON could not be read as a Composition, synthesis, slice or object view.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    /// `synthesized` is a string but not an RFC 3339 time.
    #[error("synthesis.synthesized: {0}")]
    Synthesized(TimestampError),
    /// `synthesized` is neither a string nor null.
    #[error("synthesis.synthesized is not a string")]
    SynthesizedNotAString,
    /// `resourceSlices` is neither a list nor null.
    #[error("synthesis.resourceSlices is not a list")]
    ResourceSlicesNotAList,
    /// An element of `resourceSlices` has no `name`.
    #[error("resourceSlices[] without a name")]
    ResourceSliceWithoutName,
    /// A Composition with no `metadata.name`.
    #[error("Composition without metadata.name")]
    CompositionWithoutName,
    /// A ResourceSlice with no `metadata.name`.
    #[error("ResourceSlice without metadata.name")]
    SliceWithoutName,
    /// The named slice's `spec.resources` is neither a list nor null.
    #[error("slice {0}: spec.resources is not a list")]
    ResourcesNotAList(String),
    /// Bad `metadata.labels` or `metadata.annotations`.
    #[error(transparent)]
    Metadata(#[from] StringMapError),
}

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
pub(crate) fn meta_map(v: &Value, key: &str) -> Result<BTreeMap<String, String>, StringMapError> {
    string_map(
        v.get("metadata").and_then(|m| m.get(key)),
        &format!("metadata.{key}"),
    )
}

impl SynthesisView {
    /// Maps Eno's `Synthesis` JSON.
    pub fn from_kube_json(v: &Value) -> Result<SynthesisView, ViewError> {
        let synthesized = match v.get("synthesized") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => {
                Some(Timestamp::parse_rfc3339(t).map_err(ViewError::Synthesized)?)
            }
            Some(_) => return Err(ViewError::SynthesizedNotAString),
        };
        let mut names = Vec::new();
        if let Some(refs) = v.get("resourceSlices").filter(|r| !r.is_null()) {
            let arr = refs.as_array().ok_or(ViewError::ResourceSlicesNotAList)?;
            for r in arr {
                names.push(s(r, &["name"]).ok_or(ViewError::ResourceSliceWithoutName)?);
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
    pub fn from_kube_json(v: &Value) -> Result<CompositionView, ViewError> {
        let syn = |key: &str| -> Result<Option<SynthesisView>, ViewError> {
            match v.get("status").and_then(|st| st.get(key)) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => SynthesisView::from_kube_json(x).map(Some),
            }
        };
        Ok(CompositionView {
            namespace: s(v, &["metadata", "namespace"]).unwrap_or_default(),
            name: s(v, &["metadata", "name"]).ok_or(ViewError::CompositionWithoutName)?,
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
    pub fn from_kube_json(v: &Value) -> Result<SliceView, ViewError> {
        let name = s(v, &["metadata", "name"]).ok_or(ViewError::SliceWithoutName)?;
        let mut resources = Vec::new();
        if let Some(list) = v
            .get("spec")
            .and_then(|sp| sp.get("resources"))
            .filter(|r| !r.is_null())
        {
            let arr = list
                .as_array()
                .ok_or_else(|| ViewError::ResourcesNotAList(name.clone()))?;
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
    pub fn from_kube_json(v: &Value) -> Result<ObjectView, ViewError> {
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

    #[test]
    fn messages_are_stable() {
        let syn = |v| SynthesisView::from_kube_json(&v).unwrap_err().to_string();
        assert_eq!(
            syn(json!({"synthesized": 5})),
            "synthesis.synthesized is not a string"
        );
        assert_eq!(
            syn(json!({"resourceSlices": 5})),
            "synthesis.resourceSlices is not a list"
        );
        assert_eq!(
            syn(json!({"resourceSlices": [{}]})),
            "resourceSlices[] without a name"
        );
        let e = syn(json!({"synthesized": "x"}));
        assert!(
            e.starts_with("synthesis.synthesized: invalid RFC 3339 timestamp \"x\": "),
            "{e}"
        );
        let comp = |v| CompositionView::from_kube_json(&v).unwrap_err().to_string();
        assert_eq!(comp(json!({})), "Composition without metadata.name");
        assert_eq!(
            comp(json!({"metadata": {"name": "c", "labels": {"a": 1}}})),
            "metadata.labels[\"a\"] is not a string"
        );
        assert_eq!(
            comp(
                json!({"metadata": {"name": "c"}, "status": {"currentSynthesis": {"synthesized": 5}}})
            ),
            "synthesis.synthesized is not a string"
        );
        let slice = |v| SliceView::from_kube_json(&v).unwrap_err().to_string();
        assert_eq!(slice(json!({})), "ResourceSlice without metadata.name");
        assert_eq!(
            slice(json!({"metadata": {"name": "s"}, "spec": {"resources": 5}})),
            "slice s: spec.resources is not a list"
        );
        assert_eq!(
            ObjectView::from_kube_json(&json!({"metadata": {"annotations": "x"}}))
                .unwrap_err()
                .to_string(),
            "metadata.annotations is not an object"
        );
    }
}
