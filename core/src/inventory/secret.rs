//! The inventory Secret as core sees it, and building the Secrets of one snapshot.
//!
//! A snapshot is the inventory of one synthesis, split into chunks; chunk `i` lives in the
//! Secret `<comp-name>-<lineage>-<i>` in the inventory namespace (`kube-system` by default).
//! Every chunk carries the full snapshot metadata as annotations, so selection can check
//! each group of chunks for completeness and consistency without any other state.

use super::chunk::{chunk_entries, secret_name, ChunkError};
use super::entry::Entry;
use super::entry::StringMapError;
use super::timestamp::Timestamp;
use super::view::meta_map;
use super::*;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A Kubernetes Secret reduced to what inventory reads and writes (no k8s-openapi in core).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct Secret {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`; empty for a Secret not yet created.
    #[serde(default)]
    pub uid: String,
    /// `metadata.resourceVersion`; `Some` on reads and on updates (the precondition).
    #[serde(default)]
    pub resource_version: Option<String>,
    /// `metadata.deletionTimestamp` is set: counts as absent for selection.
    #[serde(default)]
    pub terminating: bool,
    /// `type`, `Opaque` for inventory Secrets.
    #[serde(default)]
    pub secret_type: Option<String>,
    /// `metadata.labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// `data`, decoded (base64 on the wire and in this struct's JSON).
    #[serde(default, with = "b64_map")]
    pub data: BTreeMap<String, Vec<u8>>,
}

mod b64_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        m: &BTreeMap<String, Vec<u8>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let enc: BTreeMap<&String, String> =
            m.iter().map(|(k, v)| (k, STANDARD.encode(v))).collect();
        enc.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let enc = BTreeMap::<String, String>::deserialize(d)?;
        enc.into_iter()
            .map(|(k, v)| {
                STANDARD
                    .decode(v.as_bytes())
                    .map(|b| (k, b))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

/// Why Kubernetes JSON could not be read as a [`Secret`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No `metadata` at all.
    #[error("Secret without metadata")]
    WithoutMetadata,
    /// No `metadata.name`.
    #[error("Secret without metadata.name")]
    WithoutName,
    /// A `data` value that is not a string.
    #[error("Secret {name}: data[{key:?}] is not a string")]
    DataNotAString {
        /// The Secret.
        name: String,
        /// The `data` key.
        key: String,
    },
    /// A `data` value that is not base64.
    #[error("Secret {name}: data[{key:?}] is not base64: {why}")]
    DataNotBase64 {
        /// The Secret.
        name: String,
        /// The `data` key.
        key: String,
        /// The decoder's complaint.
        why: base64::DecodeError,
    },
    /// `data` is neither an object nor null.
    #[error("Secret {0}: data is not an object")]
    DataNotAnObject(String),
    /// Bad `metadata.labels` or `metadata.annotations`.
    #[error(transparent)]
    Metadata(#[from] StringMapError),
}

impl Secret {
    /// Maps a Secret as the API server (or `kubectl get -o json|yaml`) prints it: `data`
    /// values base64, `stringData` ignored (the server never returns it).
    pub fn from_kube_json(v: &Value) -> Result<Secret, SecretError> {
        let meta = v.get("metadata").ok_or(SecretError::WithoutMetadata)?;
        let st = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_string);
        let name = st("name").ok_or(SecretError::WithoutName)?;
        let mut data = BTreeMap::new();
        match v.get("data") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, val) in m {
                    let enc = val.as_str().ok_or_else(|| SecretError::DataNotAString {
                        name: name.clone(),
                        key: k.clone(),
                    })?;
                    let dec = STANDARD.decode(enc.as_bytes()).map_err(|why| {
                        SecretError::DataNotBase64 {
                            name: name.clone(),
                            key: k.clone(),
                            why,
                        }
                    })?;
                    data.insert(k.clone(), dec);
                }
            }
            Some(_) => return Err(SecretError::DataNotAnObject(name)),
        }
        Ok(Secret {
            namespace: st("namespace").unwrap_or_default(),
            uid: st("uid").unwrap_or_default(),
            resource_version: st("resourceVersion"),
            terminating: meta.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
            secret_type: v.get("type").and_then(Value::as_str).map(str::to_string),
            labels: meta_map(v, "labels")?,
            annotations: meta_map(v, "annotations")?,
            data,
            name,
        })
    }

    /// The Secret as Kubernetes JSON (`apiVersion: v1`, `kind: Secret`, base64 `data`), for
    /// drivers that send raw JSON and for writing fixtures.
    pub fn to_kube_json(&self) -> Value {
        let mut meta = serde_json::Map::new();
        meta.insert("name".into(), self.name.clone().into());
        meta.insert("namespace".into(), self.namespace.clone().into());
        if !self.uid.is_empty() {
            meta.insert("uid".into(), self.uid.clone().into());
        }
        if let Some(rv) = &self.resource_version {
            meta.insert("resourceVersion".into(), rv.clone().into());
        }
        meta.insert("labels".into(), serde_json::json!(self.labels));
        meta.insert("annotations".into(), serde_json::json!(self.annotations));
        let data: BTreeMap<&String, String> = self
            .data
            .iter()
            .map(|(k, v)| (k, STANDARD.encode(v)))
            .collect();
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": self.secret_type.clone().unwrap_or_else(|| SECRET_TYPE.to_string()),
            "data": data,
        })
    }

    /// `inventory.json`, if present.
    pub fn inventory_bytes(&self) -> Option<&[u8]> {
        self.data.get(DATA_KEY).map(Vec::as_slice)
    }

    /// True when `self` (as read) already holds exactly what `wanted` would write: same
    /// data, type, and the same values for every label and annotation `wanted` sets. Lets the
    /// recorder skip unchanged Secrets instead of rewriting them.
    pub fn holds(&self, wanted: &Secret) -> bool {
        self.data == wanted.data
            && self.secret_type.as_deref().unwrap_or(SECRET_TYPE)
                == wanted.secret_type.as_deref().unwrap_or(SECRET_TYPE)
            && wanted
                .labels
                .iter()
                .all(|(k, v)| self.labels.get(k) == Some(v))
            && wanted
                .annotations
                .iter()
                .all(|(k, v)| self.annotations.get(k) == Some(v))
    }
}

/// Where a snapshot comes from: the Composition and synthesis it records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSource {
    /// Lineage (label and name part).
    pub lineage: String,
    /// Composition name at recording time (name part and annotation).
    pub composition_name: String,
    /// Composition namespace (not the Secret's namespace).
    pub composition_namespace: String,
    /// `spec.synthesizer.name`.
    pub synthesizer_name: String,
    /// Synthesis UUID: chunks are grouped by it.
    pub synthesis_uuid: String,
    /// Synthesis time: snapshots are ordered by it.
    pub synthesized: Timestamp,
}

/// Lowercase hex SHA-256 of one chunk's `inventory.json` bytes.
pub fn chunk_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of all chunks' bytes concatenated in index order.
pub fn snapshot_sha256<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = SnapshotHasher::default();
    for c in chunks {
        h.update(c);
    }
    h.finish()
}

/// [`snapshot_sha256`] fed one chunk at a time, so selection can hash each chunk for both
/// hashes while its bytes are still in cache instead of reading the whole snapshot twice.
#[derive(Debug, Clone, Default)]
pub struct SnapshotHasher(Sha256);

impl SnapshotHasher {
    /// Appends the next chunk's bytes (chunks in index order).
    pub fn update(&mut self, chunk: &[u8]) {
        self.0.update(chunk);
    }

    /// The lowercase hex digest, as [`snapshot_sha256`] returns it.
    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// Builds the Secrets of one snapshot, in index order, without resource versions.
/// `entries` should be [`super::entry::normalize`]d (the recorder's input always is).
pub fn build_snapshot_secrets(
    src: &SnapshotSource,
    entries: &[Entry],
    secret_namespace: &str,
    limit: usize,
) -> Result<Vec<Secret>, ChunkError> {
    let chunks = chunk_entries(entries, limit)?;
    let snap = snapshot_sha256(chunks.iter().map(Vec::as_slice));
    let count = chunks.len();
    Ok(chunks
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            let mut ann = BTreeMap::new();
            let mut put = |k: &str, v: String| {
                ann.insert(k.to_string(), v);
            };
            put(ANN_FORMAT_VERSION, FORMAT_VERSION.into());
            put(ANN_COMPOSITION_NAME, src.composition_name.clone());
            put(ANN_COMPOSITION_NAMESPACE, src.composition_namespace.clone());
            put(ANN_SYNTHESIZER_NAME, src.synthesizer_name.clone());
            put(ANN_SYNTHESIS_UUID, src.synthesis_uuid.clone());
            put(ANN_SYNTHESIZED, src.synthesized.format_rfc3339_nanos());
            put(ANN_CHUNK_INDEX, i.to_string());
            put(ANN_CHUNK_COUNT, count.to_string());
            put(ANN_LINEAGE, src.lineage.clone());
            put(ANN_CHUNK_SHA256, chunk_sha256(&bytes));
            put(ANN_SNAPSHOT_SHA256, snap.clone());
            Secret {
                name: secret_name(&src.composition_name, &src.lineage, i),
                namespace: secret_namespace.to_string(),
                secret_type: Some(SECRET_TYPE.into()),
                labels: BTreeMap::from([(LABEL_LINEAGE.to_string(), src.lineage.clone())]),
                annotations: ann,
                data: BTreeMap::from([(DATA_KEY.to_string(), bytes)]),
                ..Secret::default()
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::chunk::decode_chunk;

    fn src() -> SnapshotSource {
        SnapshotSource {
            lineage: "0123456789abcdef0123456789abcdef".into(),
            composition_name: "comp".into(),
            composition_namespace: "ns".into(),
            synthesizer_name: "syn".into(),
            synthesis_uuid: "uuid-1".into(),
            synthesized: Timestamp::parse_rfc3339("2026-12-02T14:03:04.123456789Z").unwrap(),
        }
    }

    #[test]
    fn from_kube_json_messages_are_stable() {
        let e = |v: Value| Secret::from_kube_json(&v).unwrap_err().to_string();
        assert_eq!(e(serde_json::json!({})), "Secret without metadata");
        assert_eq!(
            e(serde_json::json!({"metadata": {}})),
            "Secret without metadata.name"
        );
        assert_eq!(
            e(serde_json::json!({"metadata": {"name": "s"}, "data": {"k": 1}})),
            "Secret s: data[\"k\"] is not a string"
        );
        let b64 = e(serde_json::json!({"metadata": {"name": "s"}, "data": {"k": "!"}}));
        assert!(
            b64.starts_with("Secret s: data[\"k\"] is not base64: "),
            "{b64}"
        );
        assert_eq!(
            e(serde_json::json!({"metadata": {"name": "s"}, "data": 5})),
            "Secret s: data is not an object"
        );
        assert_eq!(
            e(serde_json::json!({"metadata": {"name": "s", "labels": []}})),
            "metadata.labels is not an object"
        );
    }

    #[test]
    fn empty_snapshot_is_one_secret() {
        let s = build_snapshot_secrets(
            &src(),
            &[],
            "kube-system",
            crate::inventory::chunk::DEFAULT_CHUNK_LIMIT,
        )
        .unwrap();
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!(s.name, "comp-0123456789abcdef0123456789abcdef-0");
        assert_eq!(s.inventory_bytes(), Some(&b"[]"[..]));
        assert_eq!(
            s.annotations[ANN_SYNTHESIZED],
            "2026-12-02T14:03:04.123456789Z"
        );
        assert_eq!(s.annotations[ANN_CHUNK_COUNT], "1");
        assert_eq!(s.annotations[ANN_CHUNK_SHA256], chunk_sha256(b"[]"));
        assert_eq!(s.annotations[ANN_SNAPSHOT_SHA256], chunk_sha256(b"[]"));
        assert_eq!(s.labels[LABEL_LINEAGE], src().lineage);
        assert_eq!(s.annotations.len(), 11);
    }

    #[test]
    fn kube_json_round_trip_and_holds() {
        let e: Vec<Entry> = (0..50)
            .map(|i| Entry {
                group: "".into(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("ns".into()),
                name: format!("cm{i:03}"),
                labels: None,
                annotations: None,
            })
            .collect();
        let secrets = build_snapshot_secrets(&src(), &e, "kube-system", 1000).unwrap();
        assert!(secrets.len() > 1);
        let snap = snapshot_sha256(secrets.iter().map(|s| s.inventory_bytes().unwrap()));
        let mut back = Vec::new();
        for s in &secrets {
            assert_eq!(s.annotations[ANN_SNAPSHOT_SHA256], snap);
            let mut read = Secret::from_kube_json(&s.to_kube_json()).unwrap();
            assert_eq!(&read, s);
            read.resource_version = Some("5".into());
            read.annotations
                .insert("kubectl.kubernetes.io/x".into(), "y".into());
            assert!(read.holds(s));
            read.data.insert(DATA_KEY.into(), b"[]".to_vec());
            assert!(!read.holds(s));
            back.extend(decode_chunk(s.inventory_bytes().unwrap()).unwrap());
        }
        assert_eq!(back, e);
        // Our own JSON form is base64 too.
        let j = serde_json::to_value(&secrets[0]).unwrap();
        assert!(j["data"][DATA_KEY].as_str().unwrap().starts_with("W3"));
        let s2: Secret = serde_json::from_value(j).unwrap();
        assert_eq!(s2, secrets[0]);
    }
}
