//! The two patch formats the drivers send: JSON merge patch (RFC 7386) and JSON Patch
//! (RFC 6902, with JSON Pointer paths, RFC 6901).

use serde_json::{json, Map, Value};

/// RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            let t = obj_mut(target);
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    if path.is_empty() {
        return Err("cannot operate on the whole document".into());
    }
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid path {path}"))?;
    Ok((parent.to_string(), unescape(last)))
}

fn pointer_mut<'a>(doc: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    if path.is_empty() {
        return Some(doc);
    }
    let mut cur = doc;
    for raw in path.strip_prefix('/')?.split('/') {
        let t = unescape(raw);
        cur = match cur {
            Value::Object(m) => m.get_mut(&t)?,
            Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn add_at(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let (parent, last) = split_pointer(path)?;
    match pointer_mut(doc, &parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if i > a.len() {
                return Err(format!("index out of range in {path}"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("missing parent for {path}")),
    }
}

fn remove_at(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    match pointer_mut(doc, &parent) {
        Some(Value::Object(m)) => m.remove(&last).ok_or_else(|| format!("missing {path}")),
        Some(Value::Array(a)) => {
            let i: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if i >= a.len() {
                return Err(format!("index out of range in {path}"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("missing parent for {path}")),
    }
}

/// RFC 6902 JSON patch: add, remove, replace, move, copy, test.
pub fn json_patch(doc: &Value, ops: &[Value]) -> Result<Value, String> {
    let mut out = doc.clone();
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or("operation without path")?;
        let value = || op.get("value").cloned().ok_or("operation without value");
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or("operation without from")
        };
        match kind {
            "add" => add_at(&mut out, path, value()?)?,
            "remove" => {
                remove_at(&mut out, path)?;
            }
            "replace" => {
                let slot = pointer_mut(&mut out, path).ok_or(format!("missing {path}"))?;
                *slot = value()?;
            }
            "move" => {
                let v = remove_at(&mut out, from()?)?;
                add_at(&mut out, path, v)?;
            }
            "copy" => {
                let v = out.pointer(from()?).cloned().ok_or("missing from")?;
                add_at(&mut out, path, v)?;
            }
            "test" => {
                if out.pointer(path) != Some(&value()?) {
                    return Err(format!("test failed at {path}"));
                }
            }
            other => return Err(format!("unknown op {other:?}")),
        }
    }
    Ok(out)
}

/// `v` as an object, made one if it is not.
pub(super) fn obj_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}
