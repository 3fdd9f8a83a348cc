//! Object helpers of the model apiserver: error shapes, name and Secret validation, and
//! metadata access on JSON objects.

use super::patch::obj_mut;
use super::{ApiError, Gvr, SECRET_DATA_LIMIT};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use tidemark_core::inventory::timestamp::Timestamp;
use tidemark_core::Instant;

pub(super) fn not_found(gvr: &Gvr, name: &str) -> ApiError {
    ApiError::NotFound {
        resource: gvr.resource.clone(),
        name: name.to_string(),
    }
}

pub(super) fn conflict(gvr: &Gvr, name: &str) -> ApiError {
    ApiError::Conflict {
        resource: gvr.resource.clone(),
        name: name.to_string(),
        message: "the object has been modified; please apply your changes to the latest version and try again".into(),
    }
}

pub(super) fn validate_name(kind: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            kind: kind.to_string(),
            name: name.to_string(),
            message: format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        })
    }
}

/// Folds stringData into data and enforces the 1 MiB decoded-size limit.
pub(super) fn normalize_secret(
    gvr: &Gvr,
    kind: &str,
    name: &str,
    obj: &mut Value,
) -> Result<(), ApiError> {
    if gvr.group.is_empty() && gvr.resource == "secrets" {
        let invalid = |message: String| ApiError::Invalid {
            kind: kind.to_string(),
            name: name.to_string(),
            message,
        };
        let o = obj_mut(obj);
        if let Some(sd) = o.remove("stringData") {
            let data = o.entry("data").or_insert_with(|| json!({}));
            if let (Some(d), Some(sd)) = (data.as_object_mut(), sd.as_object()) {
                for (k, v) in sd {
                    d.insert(
                        k.clone(),
                        json!(b64_encode(v.as_str().unwrap_or("").as_bytes())),
                    );
                }
            }
        }
        let mut total = 0usize;
        if let Some(data) = o.get("data").and_then(Value::as_object) {
            for (k, v) in data {
                let s = v.as_str().unwrap_or("");
                total += b64_decoded_len(s).ok_or_else(|| {
                    invalid(format!("data[{k}]: Invalid value: illegal base64 data"))
                })?;
            }
        }
        if total > SECRET_DATA_LIMIT {
            return Err(invalid(format!(
                "data: Too long: may not be more than {SECRET_DATA_LIMIT} bytes"
            )));
        }
        if o.get("type").is_none_or(Value::is_null) {
            o.insert("type".into(), json!("Opaque"));
        }
    }
    Ok(())
}

/// The decoded length of a Secret's `data` value, or `None` if it is not standard base64
/// (the apiserver rejects such a value).
pub(super) fn b64_decoded_len(s: &str) -> Option<usize> {
    B64.decode(s).ok().map(|v| v.len())
}

pub(super) fn b64_encode(data: &[u8]) -> String {
    B64.encode(data)
}

/// Whether anything outside metadata and status changed.
pub(super) fn spec_changed(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(a) != strip(b)
}

pub(super) fn strip_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

pub(super) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    let o = obj_mut(v);
    let m = o.entry("metadata").or_insert_with(|| json!({}));
    obj_mut(m)
}

/// A string field of metadata.
pub fn meta_str(v: &Value, field: &str) -> Option<String> {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// metadata.labels or metadata.annotations as a map (non-string values skipped).
pub fn string_map(v: &Value, field: &str) -> BTreeMap<String, String> {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Formats an [`Instant`] (nanoseconds since the Unix epoch) as RFC 3339 with second
/// precision, as metav1.Time serialises.
pub fn rfc3339(now: Instant) -> String {
    Timestamp::from_unix_nanos(i128::from(now.as_nanos())).format_rfc3339_secs()
}
