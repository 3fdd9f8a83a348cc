//! Inventory entries: the identity and deletion metadata of one resource of a synthesis.
//!
//! The JSON shape is the one Eno writes into `inventory.json` (lower-case keys `group`,
//! `version`, `kind`, `namespace`, `name`, `labels`, `annotations`), so Secrets written by
//! Eno and by tidemark are interchangeable. Entries hold identities, not specs: a whole
//! synthesis fits comfortably in a 1 MiB Secret.

use super::view::SliceView;
use super::{ANN_DELETION_GROUP, ANN_READINESS_GROUP};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

/// `apiVersion` of Eno's Patch pseudo-resource; Patches are not inventory, their targets are.
pub const PATCH_API_VERSION: &str = "eno.azure.io/v1";
/// `kind` of Eno's Patch pseudo-resource.
pub const PATCH_KIND: &str = "Patch";

/// One resource of a recorded synthesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// API group, `""` for the core group.
    #[serde(default)]
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Namespace; `None` for cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
    /// The resource's labels, `None` when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Only `eno.azure.io/readiness-group` and `eno.azure.io/deletion-group`; `None` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// What makes two entries "the same resource": group, kind, namespace, name (not version,
/// since one object is served under several versions). Ordered in the inventory sort order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// API group, `""` for core.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace, `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// Everything a driver needs to address one object (GET/DELETE), and the tombstone shape
/// `inspect` prints: `{"group","version","kind","namespace"?,"name"}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceId {
    /// API group, `""` for core.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace; omitted for cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ResourceId {
    /// `apiVersion` as Kubernetes writes it (`v1` for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl Entry {
    /// The dedupe/compare key.
    pub fn identity(&self) -> Identity {
        Identity {
            group: self.group.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// The address of the object, for GET/DELETE and for printing tombstones.
    pub fn resource_id(&self) -> ResourceId {
        ResourceId {
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// Checks what a chunk read back from a Secret must satisfy to be trusted: non-empty
    /// version, kind and name, and a non-empty namespace when one is given.
    pub fn validate(&self) -> Result<(), EntryError> {
        if self.version.is_empty() {
            return Err(EntryError::EmptyVersion(self.name.clone()));
        }
        if self.kind.is_empty() {
            return Err(EntryError::EmptyKind(self.name.clone()));
        }
        if self.name.is_empty() {
            return Err(EntryError::EmptyName(self.kind.clone()));
        }
        if self.namespace.as_deref() == Some("") {
            return Err(EntryError::EmptyNamespace(self.name.clone()));
        }
        Ok(())
    }

    /// Total order used for sorting: group, kind, namespace, name, version, then the rest so
    /// the order is total even for (invalid) duplicate identities.
    pub fn sort_cmp(&self, other: &Entry) -> Ordering {
        (
            &self.group,
            &self.kind,
            &self.namespace,
            &self.name,
            &self.version,
        )
            .cmp(&(
                &other.group,
                &other.kind,
                &other.namespace,
                &other.name,
                &other.version,
            ))
            .then_with(|| self.labels.cmp(&other.labels))
            .then_with(|| self.annotations.cmp(&other.annotations))
    }
}

/// Why an entry read back from a Secret is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EntryError {
    /// The entry (named) has no version.
    #[error("entry {0:?} has an empty version")]
    EmptyVersion(String),
    /// The entry (named) has no kind.
    #[error("entry {0:?} has an empty kind")]
    EmptyKind(String),
    /// An entry of this kind has no name.
    #[error("a {0} entry has an empty name")]
    EmptyName(String),
    /// The entry (named) has `namespace: ""` rather than none.
    #[error("entry {0:?} has an empty namespace")]
    EmptyNamespace(String),
}

/// Why an `apiVersion` is not `version` or `group/version`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApiVersionError {
    /// `/v1`.
    #[error("apiVersion {0:?} has an empty group")]
    EmptyGroup(String),
    /// Empty, `apps/`, or more than one `/`.
    #[error("apiVersion {0:?} is not group/version")]
    NotGroupVersion(String),
}

/// Why a `labels`/`annotations`-style map of a Kubernetes object is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StringMapError {
    /// A value that is not a string.
    #[error("{what}[{key:?}] is not a string")]
    NotAString {
        /// The map, e.g. `metadata.labels`.
        what: String,
        /// The key whose value is not a string.
        key: String,
    },
    /// The map is something other than an object.
    #[error("{0} is not an object")]
    NotAnObject(String),
}

/// Why one manifest could not be parsed (the `why` of a [`ManifestError`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ParseManifestError {
    /// Not JSON at all; carries serde_json's message.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error("manifest is not a JSON object")]
    NotAnObject,
    /// A required field (`apiVersion`, `kind`, `metadata`, `metadata.name`) is missing.
    #[error("missing {0}")]
    Missing(&'static str),
    /// An Eno Patch with no `patch` field.
    #[error("Patch without a patch field")]
    PatchWithoutPatch,
    /// An Eno Patch whose `patch` lacks `apiVersion` or `kind`.
    #[error("Patch without {0}")]
    PatchWithout(&'static str),
    /// A bad `apiVersion` (the object's or the patch target's).
    #[error(transparent)]
    ApiVersion(#[from] ApiVersionError),
    /// Bad `metadata.labels` or `metadata.annotations`.
    #[error(transparent)]
    Map(#[from] StringMapError),
}

/// Why a manifest from a ResourceSlice could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("slice {slice:?} resource #{index}: {why}")]
pub struct ManifestError {
    /// The slice holding the manifest.
    pub slice: String,
    /// Index in `spec.resources`.
    pub index: usize,
    /// What was wrong.
    pub why: String,
}

/// A manifest reduced to what inventory needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParsedManifest {
    /// An ordinary resource.
    Resource(Entry),
    /// An Eno Patch; carries the identity of the object it patches.
    Patch(Identity),
}

/// Splits `apiVersion` into (group, version): `v1` => ("", "v1"), `apps/v1` => ("apps", "v1").
pub fn split_api_version(api_version: &str) -> Result<(String, String), ApiVersionError> {
    let (group, version) = match api_version.split_once('/') {
        None => ("", api_version),
        Some((g, v)) => {
            if g.is_empty() {
                return Err(ApiVersionError::EmptyGroup(api_version.to_string()));
            }
            (g, v)
        }
    };
    if version.is_empty() || version.contains('/') {
        return Err(ApiVersionError::NotGroupVersion(api_version.to_string()));
    }
    Ok((group.to_string(), version.to_string()))
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A map of strings at `v`, named `what` in messages; absent or null is empty.
pub(crate) fn string_map(
    v: Option<&Value>,
    what: &str,
) -> Result<BTreeMap<String, String>, StringMapError> {
    let mut out = BTreeMap::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, val) in m {
                let s = val.as_str().ok_or_else(|| StringMapError::NotAString {
                    what: what.to_string(),
                    key: k.clone(),
                })?;
                out.insert(k.clone(), s.to_string());
            }
        }
        Some(_) => return Err(StringMapError::NotAnObject(what.to_string())),
    }
    Ok(out)
}

/// Parses one manifest (a JSON Kubernetes object, as Eno stores in
/// `ResourceSlice.spec.resources[].manifest`). YAML manifests must be converted to JSON by the
/// driver first (core has no YAML parser).
pub fn parse_manifest(manifest: &str) -> Result<ParsedManifest, ParseManifestError> {
    use ParseManifestError::{Missing, PatchWithout};
    let v: Value =
        serde_json::from_str(manifest).map_err(|e| ParseManifestError::NotJson(e.to_string()))?;
    if !v.is_object() {
        return Err(ParseManifestError::NotAnObject);
    }
    let api_version = str_field(&v, "apiVersion").ok_or(Missing("apiVersion"))?;
    let kind = str_field(&v, "kind")
        .filter(|k| !k.is_empty())
        .ok_or(Missing("kind"))?;
    let meta = v.get("metadata").ok_or(Missing("metadata"))?;
    let name = str_field(meta, "name")
        .filter(|n| !n.is_empty())
        .ok_or(Missing("metadata.name"))?;
    let namespace = str_field(meta, "namespace")
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    if api_version == PATCH_API_VERSION && kind == PATCH_KIND {
        // Eno's Patch: metadata names the target; `patch.apiVersion`/`patch.kind` its type.
        let patch = v
            .get("patch")
            .ok_or(ParseManifestError::PatchWithoutPatch)?;
        let tav = str_field(patch, "apiVersion").ok_or(PatchWithout("patch.apiVersion"))?;
        let tkind = str_field(patch, "kind")
            .filter(|k| !k.is_empty())
            .ok_or(PatchWithout("patch.kind"))?;
        let (group, _) = split_api_version(tav)?;
        return Ok(ParsedManifest::Patch(Identity {
            group,
            kind: tkind.to_string(),
            namespace,
            name: name.to_string(),
        }));
    }
    let (group, version) = split_api_version(api_version)?;
    let labels = string_map(meta.get("labels"), "metadata.labels")?;
    let all_annotations = string_map(meta.get("annotations"), "metadata.annotations")?;
    let kept: BTreeMap<String, String> = all_annotations
        .into_iter()
        .filter(|(k, _)| k == ANN_READINESS_GROUP || k == ANN_DELETION_GROUP)
        .collect();
    Ok(ParsedManifest::Resource(Entry {
        group,
        version,
        kind: kind.to_string(),
        namespace,
        name: name.to_string(),
        labels: (!labels.is_empty()).then_some(labels),
        annotations: (!kept.is_empty()).then_some(kept),
    }))
}

/// Sorts entries (group, kind, namespace, name, version) and keeps the first of each
/// identity, so the same synthesis always yields the same bytes.
pub fn normalize(mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by(Entry::sort_cmp);
    entries.dedup_by(|later, first| later.identity() == first.identity());
    entries
}

/// The inventory of a synthesis: every live (non-tombstone, non-Patch) resource of its
/// slices, deduped and sorted. Any unparseable manifest (live or tombstone) is an error:
/// a malformed slice stops recording.
pub fn entries_from_slices(slices: &[SliceView]) -> Result<Vec<Entry>, ManifestError> {
    let mut out = Vec::new();
    for slice in slices {
        for (index, res) in slice.resources.iter().enumerate() {
            let parsed = parse_manifest(&res.manifest).map_err(|why| ManifestError {
                slice: slice.name.clone(),
                index,
                why: why.to_string(),
            })?;
            if let (ParsedManifest::Resource(e), false) = (parsed, res.deleted) {
                out.push(e);
            }
        }
    }
    Ok(normalize(out))
}

/// Identities the current synthesis still mentions: live manifests, Eno tombstones (already
/// handled by Eno) and Patch targets. None of these may ever become a tombstone of ours.
pub fn present_identities(slices: &[SliceView]) -> Result<BTreeSet<Identity>, ManifestError> {
    let mut out = BTreeSet::new();
    for slice in slices {
        for (index, res) in slice.resources.iter().enumerate() {
            let parsed = parse_manifest(&res.manifest).map_err(|why| ManifestError {
                slice: slice.name.clone(),
                index,
                why: why.to_string(),
            })?;
            out.insert(match parsed {
                ParsedManifest::Resource(e) => e.identity(),
                ParsedManifest::Patch(id) => id,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::view::SliceResource;

    fn slice(name: &str, res: &[(&str, bool)]) -> SliceView {
        SliceView {
            name: name.into(),
            terminating: false,
            resources: res
                .iter()
                .map(|(m, d)| SliceResource {
                    manifest: m.to_string(),
                    deleted: *d,
                })
                .collect(),
        }
    }

    const CM: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"app":"x"},"annotations":{"eno.azure.io/deletion-group":"2","other":"dropped"}}}"#;
    const DEP: &str =
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"ns"}}"#;
    const CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"x.example.com"}}"#;
    const PATCH: &str = r#"{"apiVersion":"eno.azure.io/v1","kind":"Patch","metadata":{"name":"p","namespace":"ns"},"patch":{"apiVersion":"apps/v1","kind":"Deployment","ops":[]}}"#;

    #[test]
    fn builds_sorted_deduped_entries() {
        let s = slice(
            "s1",
            &[
                (DEP, false),
                (CM, false),
                (CRD, false),
                (CM, false),
                (PATCH, false),
            ],
        );
        let tomb = slice("s2", &[(DEP.replace("\"d\"", "\"gone\"").as_str(), true)]);
        let e = entries_from_slices(&[s.clone(), tomb.clone()]).unwrap();
        let names: Vec<_> = e
            .iter()
            .map(|e| (e.group.as_str(), e.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("", "a"),
                ("apiextensions.k8s.io", "x.example.com"),
                ("apps", "d")
            ]
        );
        let cm = &e[0];
        assert_eq!(cm.version, "v1");
        assert_eq!(cm.namespace.as_deref(), Some("ns"));
        assert_eq!(cm.annotations.as_ref().unwrap().len(), 1);
        assert_eq!(crate::inventory::effective_deletion_group(cm), Some(2));
        assert_eq!(e[1].namespace, None);
        assert_eq!(
            serde_json::to_string(cm).unwrap(),
            r#"{"group":"","version":"v1","kind":"ConfigMap","namespace":"ns","name":"a","labels":{"app":"x"},"annotations":{"eno.azure.io/deletion-group":"2"}}"#
        );
        let present = present_identities(&[s, tomb]).unwrap();
        assert_eq!(present.len(), 5); // a, crd, d, the Patch target p, the tombstone gone
        assert!(present.iter().any(|i| i.name == "gone"));
    }

    #[test]
    fn malformed_manifest_is_an_error() {
        for bad in [
            "not json",
            "[]",
            r#"{"kind":"X","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"X","metadata":{}}"#,
            r#"{"apiVersion":"/v1","kind":"X","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","labels":{"a":1}}}"#,
            r#"{"apiVersion":"eno.azure.io/v1","kind":"Patch","metadata":{"name":"a"}}"#,
        ] {
            let err = entries_from_slices(&[slice("s", &[(bad, false)])]).unwrap_err();
            assert_eq!(err.index, 0, "{bad}");
        }
        // Tombstones must parse too: they count as present.
        assert!(entries_from_slices(&[slice("s", &[("junk", true)])]).is_err());
    }

    #[test]
    fn api_version_split() {
        assert_eq!(split_api_version("v1").unwrap(), ("".into(), "v1".into()));
        assert_eq!(
            split_api_version("apps/v1").unwrap(),
            ("apps".into(), "v1".into())
        );
        assert!(split_api_version("").is_err());
        assert!(split_api_version("a/b/c").is_err());
    }

    #[test]
    fn reads_eno_entries_with_omitted_fields() {
        let e: Entry =
            serde_json::from_str(r#"{"version":"v1","kind":"Namespace","name":"n"}"#).unwrap();
        assert_eq!(e.group, "");
        assert!(e.validate().is_ok());
        let bad: Entry =
            serde_json::from_str(r#"{"group":"","version":"","kind":"X","name":"n"}"#).unwrap();
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "entry \"n\" has an empty version"
        );
    }

    #[test]
    fn manifest_messages_are_stable() {
        let patch = |p: &str| {
            format!(
                r#"{{"apiVersion":"eno.azure.io/v1","kind":"Patch","metadata":{{"name":"a"}}{p}}}"#
            )
        };
        for (bad, want) in [
            ("[]".to_string(), "manifest is not a JSON object"),
            (
                r#"{"kind":"X","metadata":{"name":"a"}}"#.into(),
                "missing apiVersion",
            ),
            (
                r#"{"apiVersion":"v1","metadata":{"name":"a"}}"#.into(),
                "missing kind",
            ),
            (
                r#"{"apiVersion":"v1","kind":"X"}"#.into(),
                "missing metadata",
            ),
            (
                r#"{"apiVersion":"v1","kind":"X","metadata":{}}"#.into(),
                "missing metadata.name",
            ),
            (
                r#"{"apiVersion":"/v1","kind":"X","metadata":{"name":"a"}}"#.into(),
                "apiVersion \"/v1\" has an empty group",
            ),
            (
                r#"{"apiVersion":"a/b/c","kind":"X","metadata":{"name":"a"}}"#.into(),
                "apiVersion \"a/b/c\" is not group/version",
            ),
            (
                r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","labels":{"l":1}}}"#.into(),
                "metadata.labels[\"l\"] is not a string",
            ),
            (
                r#"{"apiVersion":"v1","kind":"X","metadata":{"name":"a","annotations":[]}}"#.into(),
                "metadata.annotations is not an object",
            ),
            (patch(""), "Patch without a patch field"),
            (patch(r#","patch":{}"#), "Patch without patch.apiVersion"),
            (
                patch(r#","patch":{"apiVersion":"v1"}"#),
                "Patch without patch.kind",
            ),
        ] {
            assert_eq!(parse_manifest(&bad).unwrap_err().to_string(), want, "{bad}");
        }
        let e = parse_manifest("junk").unwrap_err().to_string();
        assert!(e.starts_with("not JSON: "), "{e}");
    }
}
