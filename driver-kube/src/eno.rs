//! The Eno API types tidemark reads (`eno.azure.io/v1`), with Eno's exact JSON field names.
//!
//! Field names follow Azure/eno `api/v1/composition.go` (Composition, CompositionSpec,
//! SynthesizerRef, CompositionStatus, Synthesis, ResourceSliceRef) and
//! `api/v1/resourceslice.go` (ResourceSlice, ResourceSliceSpec, Manifest). Only the fields
//! tidemark needs are typed; unknown fields are kept in `extra` maps so that an update or a
//! round trip never drops data Eno owns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Eno's API group.
pub const GROUP: &str = "eno.azure.io";
/// Eno's API version.
pub const VERSION: &str = "v1";

/// An Eno Composition: a set of resources produced by one synthesizer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: CompositionSpec,
    /// `status`, written by Eno.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CompositionStatus>,
}

/// `Composition.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompositionSpec {
    /// `spec.synthesizer`.
    #[serde(default)]
    pub synthesizer: SynthesizerRef,
    /// Bindings, synthesisEnv and anything else, untouched.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `spec.synthesizer` (Eno's SynthesizerRef).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SynthesizerRef {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// Other fields, untouched.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `Composition.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositionStatus {
    /// `currentSynthesis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_synthesis: Option<Synthesis>,
    /// `previousSynthesis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_synthesis: Option<Synthesis>,
    /// simplified, pendingResynthesis, inputRevisions, ..., untouched.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One synthesis (Eno's `Synthesis`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Synthesis {
    /// `uuid`.
    #[serde(default)]
    pub uuid: String,
    /// `observedCompositionGeneration`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_composition_generation: i64,
    /// `synthesized`: when the ResourceSlices were written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthesized: Option<String>,
    /// `reconciled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled: Option<String>,
    /// `ready`: when the reconciled resources became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// `resourceSlices[].name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_slices: Vec<ResourceSliceRef>,
    /// podCreation, attempts, results, inputRevisions, deferred, ..., untouched.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `resourceSlices[]` entry (Eno's `ResourceSliceRef`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSliceRef {
    /// `name`.
    #[serde(default)]
    pub name: String,
}

/// An Eno ResourceSlice: one part of a synthesis's manifests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceSlice {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: ResourceSliceSpec,
    /// `status`, untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// `ResourceSlice.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSliceSpec {
    /// `synthesisUUID`.
    #[serde(
        default,
        rename = "synthesisUUID",
        skip_serializing_if = "String::is_empty"
    )]
    pub synthesis_uuid: String,
    /// `resources`.
    #[serde(default)]
    pub resources: Vec<Manifest>,
}

/// `spec.resources[]` (Eno's `Manifest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The resource as a JSON string.
    #[serde(default)]
    pub manifest: String,
    /// True for a tombstone: a resource that should no longer exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

macro_rules! eno_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("eno.azure.io/v1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

eno_resource!(Composition, "Composition", "compositions");
eno_resource!(ResourceSlice, "ResourceSlice", "resourceslices");

impl Composition {
    /// The current synthesis, if any.
    pub fn current(&self) -> Option<&Synthesis> {
        self.status.as_ref()?.current_synthesis.as_ref()
    }

    /// The previous synthesis, if any.
    pub fn previous(&self) -> Option<&Synthesis> {
        self.status.as_ref()?.previous_synthesis.as_ref()
    }

    /// An annotation value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eno_json_round_trips() {
        let js = serde_json::json!({
            "apiVersion": "eno.azure.io/v1", "kind": "Composition",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"synthesizer": {"name": "s"}, "bindings": [{"key": "k"}]},
            "status": {
                "simplified": {"status": "Ready"},
                "currentSynthesis": {
                    "uuid": "u", "observedCompositionGeneration": 3,
                    "synthesized": "2026-01-01T00:00:00Z", "ready": "2026-01-01T00:00:05Z",
                    "resourceSlices": [{"name": "s1"}], "attempts": 1
                }
            }
        });
        let c: Composition = serde_json::from_value(js).unwrap();
        assert_eq!(c.spec.synthesizer.name, "s");
        let cur = c.current().unwrap();
        assert_eq!(cur.resource_slices[0].name, "s1");
        assert_eq!(cur.observed_composition_generation, 3);
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["spec"]["bindings"][0]["key"], "k");
        assert_eq!(back["status"]["currentSynthesis"]["attempts"], 1);
        assert_eq!(back["status"]["simplified"]["status"], "Ready");

        let s: ResourceSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s1"},
            "spec": {"synthesisUUID": "u", "resources": [{"manifest": "{}", "deleted": true}]}
        }))
        .unwrap();
        assert_eq!(s.spec.synthesis_uuid, "u");
        assert!(s.spec.resources[0].deleted);
    }
}
