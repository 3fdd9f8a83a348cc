//! Offline `inspect`: selection and tombstones over `kubectl get -o yaml|json` output, for
//! operators who want to know what recovery would do without touching a cluster. It plans
//! with the same core function as the controller ([`plan_recovery`]), so the same Secrets,
//! Composition and limits give the same outcome.

use serde_json::Value;
use tidemark_core::inventory::{
    lineage_of, plan_recovery, present_identities, select, CompositionView, Policy, Secret,
    Selection, SliceView,
};

/// Input that cannot be used for a decision.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Neither JSON nor YAML.
    #[error("{path}: neither JSON nor YAML: {why}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// An object of the expected kind is unusable (not even Kubernetes-shaped).
    #[error("{path}: {why}")]
    Object {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// Several lineages and no `--lineage`.
    #[error("the Secrets hold several lineages ({0}); choose one with --lineage")]
    SeveralLineages(String),
}

/// Flattens `kubectl` output: a `List` (JSON or YAML), a single object, a JSON array, or
/// multi-document YAML (each document itself possibly a `List`).
pub fn parse_objects(text: &str, path: &str) -> Result<Vec<Value>, InspectError> {
    fn flatten(v: Value, out: &mut Vec<Value>) {
        match v {
            Value::Null => {}
            Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
            Value::Object(ref m) if m.get("items").is_some_and(Value::is_array) => {
                if let Some(Value::Array(items)) = v.get("items").cloned() {
                    items.into_iter().for_each(|i| flatten(i, out));
                }
            }
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    match serde_json::from_str::<Value>(text) {
        Ok(v) => flatten(v, &mut out),
        Err(json_err) => {
            for doc in serde_yaml::Deserializer::from_str(text) {
                let v = <Value as serde::Deserialize>::deserialize(doc).map_err(|e| {
                    InspectError::Parse {
                        path: path.to_string(),
                        why: format!("JSON: {json_err}; YAML: {e}"),
                    }
                })?;
                flatten(v, &mut out);
            }
        }
    }
    Ok(out)
}

fn kind_is(v: &Value, kind: &str) -> bool {
    v.get("kind")
        .and_then(Value::as_str)
        .is_none_or(|k| k == kind)
}

/// Reads the Secrets of a `--secrets` file (objects of other kinds are ignored).
pub fn secrets_from(text: &str, path: &str) -> Result<Vec<Secret>, InspectError> {
    parse_objects(text, path)?
        .iter()
        .filter(|v| kind_is(v, "Secret"))
        .map(|v| {
            Secret::from_kube_json(v).map_err(|why| InspectError::Object {
                path: path.to_string(),
                why: why.to_string(),
            })
        })
        .collect()
}

/// Reads the ResourceSlices of a `--current` file (objects of other kinds are ignored).
pub fn slices_from(text: &str, path: &str) -> Result<Vec<SliceView>, InspectError> {
    parse_objects(text, path)?
        .iter()
        .filter(|v| kind_is(v, "ResourceSlice"))
        .map(|v| {
            SliceView::from_kube_json(v).map_err(|why| InspectError::Object {
                path: path.to_string(),
                why: why.to_string(),
            })
        })
        .collect()
}

/// Reads the one Composition of a `--composition` file.
pub fn composition_from(text: &str, path: &str) -> Result<CompositionView, InspectError> {
    let objects = parse_objects(text, path)?;
    let comps: Vec<&Value> = objects
        .iter()
        .filter(|v| kind_is(v, "Composition"))
        .collect();
    let [one] = comps.as_slice() else {
        return Err(InspectError::Object {
            path: path.to_string(),
            why: format!(
                "expected exactly one Composition, found {}; save it with kubectl get composition NAME -n NS -o yaml",
                comps.len()
            ),
        });
    };
    CompositionView::from_kube_json(one).map_err(|why| InspectError::Object {
        path: path.to_string(),
        why: why.to_string(),
    })
}

/// The lineage to select: the given one, the Composition's, or the only one the live
/// Secrets carry.
pub fn choose_lineage(
    secrets: &[Secret],
    given: Option<&str>,
    comp: Option<&CompositionView>,
) -> Result<Option<String>, InspectError> {
    if let Some(l) = given {
        return Ok(Some(l.to_string()));
    }
    if let Some(c) = comp {
        return lineage_of(c).map(Some).map_err(|e| InspectError::Object {
            path: "--composition".into(),
            why: e.to_string(),
        });
    }
    // Live Secrets only: terminating ones are as good as gone.
    let found = tidemark_core::inventory::select::lineages_in(secrets);
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        _ => Err(InspectError::SeveralLineages(found.join(", "))),
    }
}

/// The decision `inspect` prints: the selection (refused by the namespace and time checks
/// when `comp` is given) and, when `current` is given, the tombstones in deletion order with
/// their groups and protections, a held plan, and the decision recovery would record.
pub fn inspect(
    secrets: &[Secret],
    current: Option<&[SliceView]>,
    lineage: Option<&str>,
    current_path: &str,
    comp: Option<&CompositionView>,
    policy: &Policy,
) -> Result<Value, InspectError> {
    let selection = match choose_lineage(secrets, lineage, comp)? {
        Some(l) => select(secrets, &l),
        None => Selection::None,
    };
    let present = match current {
        Some(slices) => Some(
            present_identities(slices).map_err(|e| InspectError::Object {
                path: current_path.to_string(),
                why: format!("slice {} resource {}: {}", e.slice, e.index, e.why),
            })?,
        ),
        None => None,
    };
    let plan = plan_recovery(selection, comp, present.as_ref(), policy);
    let mut out = plan.inspect_json(present.is_some());
    if comp.is_none() {
        if let Some(o) = out.as_object_mut() {
            o.insert(
                "unchecked".into(),
                serde_json::json!("namespace and time: pass --composition to check them"),
            );
        }
    }
    Ok(out)
}

/// Key order of `inspect` output: the order operators read it in (serde_json's maps sort).
const KEY_ORDER: [&str; 20] = [
    "outcome",
    "decision",
    "reason",
    "lineage",
    "synthesisUUID",
    "synthesized",
    "compositionName",
    "chunks",
    "entries",
    "detail",
    "held",
    "unchecked",
    "tombstones",
    "group",
    "version",
    "kind",
    "namespace",
    "name",
    "deletionGroup",
    "protected",
];

/// Compact JSON with known keys in [`KEY_ORDER`] and any others after them, sorted.
pub fn to_ordered_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by_key(|k| {
                (
                    KEY_ORDER
                        .iter()
                        .position(|o| o == k)
                        .unwrap_or(KEY_ORDER.len()),
                    (*k).clone(),
                )
            });
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), to_ordered_json(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(to_ordered_json).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_shapes() {
        let list_json = r#"{"apiVersion":"v1","kind":"List","items":[{"kind":"Secret","metadata":{"name":"a"}},{"kind":"Secret","metadata":{"name":"b"}}]}"#;
        assert_eq!(parse_objects(list_json, "f").unwrap().len(), 2);
        let list_yaml =
            "apiVersion: v1\nkind: List\nitems:\n- kind: Secret\n  metadata:\n    name: a\n";
        assert_eq!(parse_objects(list_yaml, "f").unwrap().len(), 1);
        let multi =
            "kind: Secret\nmetadata:\n  name: a\n---\nkind: Secret\nmetadata:\n  name: b\n---\n";
        assert_eq!(parse_objects(multi, "f").unwrap().len(), 2);
        assert!(parse_objects("{ nope: [", "f").is_err());
        assert!(secrets_from("", "f").unwrap().is_empty());
    }

    #[test]
    fn ordered_output() {
        let v = serde_json::json!({"entries": 1, "outcome": "selected", "zzz": [{"name": "n", "group": ""}]});
        assert_eq!(
            to_ordered_json(&v),
            r#"{"outcome":"selected","entries":1,"zzz":[{"group":"","name":"n"}]}"#
        );
    }
}
