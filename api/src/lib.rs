//! The `EtcdMirror` custom resource (`tidemark.dev/v1alpha1`).
//!
//! The spec *is* [`MirrorConfig`], the config-file shape, so a config file and a custom resource
//! cannot drift apart. The CRD schema is generated from those types and then extended with the
//! CEL rules of [`rules`], so the apiserver refuses the same mistakes the agent would.

pub mod events;
pub mod pod;
pub mod resolve;
pub mod rules;
pub mod status;
pub mod workload;
pub mod writer;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tidemark_core::config::MirrorConfig;

pub use pod::AgentPod;
pub use resolve::{resolve, ResolveError, Resolved};
pub use status::{Condition, EtcdMirrorStatus, WallClock};
pub use writer::{Published, ResourceRef, StatusWriter, WriteError};

/// The EtcdMirror spec: the config-file shape of tidemark-mirror ([`MirrorConfig`], its
/// fields at the top level) plus `pod`, which only the operator reads.
// Each `printcolumn(...)` repeats the same keys; clippy reads them as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Debug, Clone, PartialEq)]
#[kube(
    doc = "A one-way, fenced, checkpointed mirror of an etcd key range into another etcd cluster.",
    group = "tidemark.dev",
    version = "v1alpha1",
    kind = "EtcdMirror",
    plural = "etcdmirrors",
    shortname = "etm",
    namespaced,
    status = "EtcdMirrorStatus",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Watermark",
        type_ = "integer",
        json_path = ".status.lastAppliedRevision",
        description = "Source revision the target is known to reflect"
    ),
    printcolumn(
        name = "Lag",
        type_ = "integer",
        json_path = ".status.lagRevisions",
        description = "Source revisions not yet applied"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct EtcdMirrorSpec {
    /// What the agent mirrors, and how.
    pub config: MirrorConfig,
    /// How the operator runs the agent pod; `None` takes the operator's defaults.
    pub pod: Option<AgentPod>,
}

/// The spec's one field that is not a [`MirrorConfig`] field.
const POD_FIELD: &str = "pod";

impl Serialize for EtcdMirrorSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut v = serde_json::to_value(&self.config).map_err(S::Error::custom)?;
        if let (Some(pod), Some(m)) = (&self.pod, v.as_object_mut()) {
            m.insert(
                POD_FIELD.into(),
                serde_json::to_value(pod).map_err(S::Error::custom)?,
            );
        }
        v.serialize(s)
    }
}

// By hand, not `#[serde(flatten)]`: flatten would silently drop unknown fields, and a
// misspelt field must stay an error (`MirrorConfig` denies unknown fields).
impl<'de> Deserialize<'de> for EtcdMirrorSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut v = serde_json::Value::deserialize(d)?;
        let pod = match v.as_object_mut().and_then(|m| m.remove(POD_FIELD)) {
            None | Some(serde_json::Value::Null) => None,
            Some(p) => {
                Some(serde_json::from_value(p).map_err(|e| D::Error::custom(format!("pod: {e}")))?)
            }
        };
        let config = serde_json::from_value(v).map_err(D::Error::custom)?;
        Ok(EtcdMirrorSpec { config, pod })
    }
}

impl JsonSchema for EtcdMirrorSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EtcdMirrorSpec".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut schema = MirrorConfig::json_schema(g);
        let pod = g.subschema_for::<AgentPod>();
        if let Some(props) = schema
            .get_mut("properties")
            .and_then(serde_json::Value::as_object_mut)
        {
            props.insert(POD_FIELD.into(), pod.to_value());
        }
        schema
    }
}

impl std::ops::Deref for EtcdMirrorSpec {
    type Target = MirrorConfig;
    fn deref(&self) -> &MirrorConfig {
        &self.config
    }
}

impl From<MirrorConfig> for EtcdMirrorSpec {
    fn from(config: MirrorConfig) -> Self {
        EtcdMirrorSpec { config, pod: None }
    }
}

/// The CRD as installed: the derived schema plus the CEL validation rules and size bounds.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = EtcdMirror::crd();
    for v in &mut crd.spec.versions {
        if let Some(schema) = v
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            // Round-trip through JSON: the rules are written against the schema's JSON form.
            let mut json = serde_json::to_value(&*schema).expect("JSONSchemaProps serialises");
            if let Some(spec) = json.pointer_mut("/properties/spec") {
                rules::inject(spec);
            }
            *schema = serde_json::from_value(json).expect("the injected schema stays valid");
        }
    }
    crd
}

/// The CRD as YAML, exactly as checked in at `deploy/crd.yaml`.
pub fn crd_yaml() -> String {
    // Sorted keys throughout, so the text does not depend on whether some crate in the build
    // turned on serde_json's `preserve_order`.
    let value = sorted(serde_json::to_value(crd()).expect("a CRD serialises to JSON"));
    let body = serde_yaml::to_string(&value).expect("a CRD serialises to YAML");
    format!(
        "# Generated from the tidemark-api types; do not edit.\n\
         # Regenerate: cargo run -p tidemark-api --example crd > deploy/crd.yaml\n{body}"
    )
}

pub(crate) fn sorted(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            let mut entries: Vec<_> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}
