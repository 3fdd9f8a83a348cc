//! REST routing and wire formats of the conformance server.

use super::{wall_now, Shared};
use crate::apiserver::{ApiError, ApiServer, EventType, Gvr, Patch, Subresource};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// What a request path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    gvr: Gvr,
    /// `None` for an all-namespaces list or a cluster-scoped collection.
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let t = |res: &str, ns: Option<&str>, name: Option<&str>, status: bool| Target {
        gvr: Gvr::new(group, version, res),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        status,
    };
    Some(match rest {
        ["namespaces", ns, res] => t(res, Some(ns), None, false),
        ["namespaces", ns, res, name] => t(res, Some(ns), Some(name), false),
        ["namespaces", ns, res, name, "status"] => t(res, Some(ns), Some(name), true),
        [res] => t(res, None, None, false),
        [res, name] => t(res, None, Some(name), false),
        [res, name, "status"] => t(res, None, Some(name), true),
        _ => return None,
    })
}

fn audit_record(method: &Method, t: &Target, watch: bool) -> super::AuditRecord {
    let collection = t.name.is_none();
    let verb = match *method {
        Method::GET if collection && watch => "watch",
        Method::GET if collection => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "unknown",
    };
    let mut resource = t.gvr.resource.clone();
    if t.status {
        resource.push_str("/status");
    }
    super::AuditRecord {
        user: None,
        verb: verb.to_string(),
        group: t.gvr.group.clone(),
        resource,
        namespace: t.namespace.clone(),
        name: t.name.clone(),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn error_response(e: &ApiError, group: &str) -> Response {
    json_response(e.code(), &e.status(group))
}

fn parse_body(body: &Bytes, content_type: &str) -> Result<Value, ApiError> {
    if content_type.contains("yaml") {
        serde_yaml::from_slice(body).map_err(|e| ApiError::BadRequest(e.to_string()))
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(e.to_string()))
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() == "/version" {
        return json_response(
            200,
            &json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0-tidemark-conformance"}),
        );
    }
    if method == Method::GET && uri.path() == "/openapi/v2" {
        // No schemas are published: an empty OpenAPI v2 document (the empty protobuf
        // message), so kubectl's client-side validation finds no type to check against and
        // leaves validation to the server, which stores what it is given.
        return Response::builder()
            .status(StatusCode::OK)
            .header(
                header::CONTENT_TYPE,
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )
            .body(Body::empty())
            .unwrap_or_else(|_| Response::new(Body::empty()));
    }
    if method == Method::GET {
        let doc = super::discovery::document(&shared.lock(), uri.path());
        if let Some(doc) = doc {
            return json_response(200, &doc);
        }
    }
    let Some(target) = parse_path(uri.path()) else {
        return error_response(
            &ApiError::NotFound {
                resource: String::new(),
                name: uri.path().to_string(),
            },
            "",
        );
    };
    let q = query(&uri);
    let mut record = audit_record(&method, &target, is_true(q.get("watch")));
    record.user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    shared.record(record);
    let group = target.gvr.group.clone();
    if method == Method::GET && target.name.is_none() && is_true(q.get("watch")) {
        return watch(shared, target, q).await;
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let dry_run = q.get("dryRun").is_some_and(|v| v == "All");
    let now = wall_now();
    let result = {
        let mut guard = shared.lock();
        let mut scratch;
        let api: &mut ApiServer = if dry_run {
            scratch = guard.clone();
            &mut scratch
        } else {
            &mut guard
        };
        let r = dispatch(api, now, &method, &target, &q, &content_type, &body);
        let rv = guard.resource_version();
        drop(guard);
        shared.changes.send_replace(rv);
        r
    };
    let wants_table = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"));
    match result {
        Ok((code, v)) if wants_table && method == Method::GET => {
            let items = match v["items"].as_array() {
                Some(items) => items.clone(),
                None => vec![v],
            };
            let resource = super::discovery::find(&shared.lock(), &target.gvr);
            let table = match resource {
                Some(r) => super::discovery::table(&r, &items, wall_secs()),
                None => return json_response(code, &json!({"items": items})),
            };
            json_response(code, &table)
        }
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e, &group),
    }
}

fn wall_secs() -> i64 {
    i64::try_from(wall_now().0 / 1_000_000_000).unwrap_or(0)
}

/// An events.k8s.io/v1 Event in the core/v1 shape.
fn core_event(e: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": e["metadata"],
        "involvedObject": e["regarding"],
        "reason": e["reason"],
        "message": e["note"],
        "type": e["type"],
        "source": {"component": e["reportingController"]},
        "reportingComponent": e["reportingController"],
        "reportingInstance": e["reportingInstance"],
        "eventTime": e["eventTime"],
        "count": e.pointer("/series/count").cloned().unwrap_or(json!(1)),
    })
}

/// A parsed `fieldSelector`: the `metadata.name` and `metadata.namespace` equalities, the
/// fields every resource supports on a real apiserver. Anything else is refused, as there.
#[derive(Debug, Default, Clone)]
struct FieldSelector(Vec<(&'static str, bool, String)>);

impl FieldSelector {
    fn parse(s: Option<&String>) -> Result<FieldSelector, ApiError> {
        let mut out = Vec::new();
        for term in s
            .map(String::as_str)
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
        {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::BadRequest(format!(
                    "invalid field selector term {term:?}"
                )));
            };
            let field = match field.trim() {
                "metadata.name" => "name",
                "metadata.namespace" => "namespace",
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "field label not supported: {other}"
                    )))
                }
            };
            out.push((field, eq, value.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let have = obj
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("");
            (have == value) == *eq
        })
    }
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| v == "true" || v == "1")
}

fn dispatch(
    api: &mut ApiServer,
    now: tidemark_core::Instant,
    method: &Method,
    t: &Target,
    q: &BTreeMap<String, String>,
    content_type: &str,
    body: &Bytes,
) -> Result<(u16, Value), ApiError> {
    let ns = t.namespace.as_deref().unwrap_or("");
    let sub = if t.status {
        Subresource::Status
    } else {
        Subresource::Main
    };
    match (method, &t.name) {
        (&Method::GET, None) => {
            let fields = FieldSelector::parse(q.get("fieldSelector"))?;
            let (mut items, rv) = api.list(
                &t.gvr,
                t.namespace.as_deref(),
                q.get("labelSelector").map(String::as_str),
            )?;
            if t.gvr == Gvr::new("", "v1", "events") {
                // One store behind both event APIs, as on a real apiserver: `kubectl get
                // events` also shows what was recorded through events.k8s.io.
                let newer = Gvr::new("events.k8s.io", "v1", "events");
                let (more, _) = api.list(&newer, t.namespace.as_deref(), None)?;
                items.extend(more.iter().map(core_event));
            }
            items.retain(|o| fields.matches(o));
            Ok((200, api.list_object(&t.gvr, items, rv)))
        }
        (&Method::POST, None) => {
            let obj = parse_body(body, content_type)?;
            Ok((201, api.create(now, &t.gvr, ns, obj)?))
        }
        (&Method::GET, Some(name)) => Ok((200, api.get(&t.gvr, ns, name)?)),
        (&Method::PUT, Some(name)) => {
            let obj = parse_body(body, content_type)?;
            Ok((200, api.update(now, &t.gvr, ns, name, obj, sub)?))
        }
        (&Method::PATCH, Some(name)) => {
            let p = parse_body(body, content_type)?;
            let patch =
                if content_type.starts_with("application/json-patch+json") {
                    Patch::Json(p.as_array().cloned().ok_or_else(|| {
                        ApiError::BadRequest("json patch must be an array".into())
                    })?)
                } else {
                    Patch::Merge(p.clone())
                };
            let apply = content_type.starts_with("application/apply-patch");
            if apply && !t.status {
                return api.apply(now, &t.gvr, ns, name, p);
            }
            Ok((200, api.patch(now, &t.gvr, ns, name, &patch, sub)?))
        }
        (&Method::DELETE, Some(name)) => {
            let opts: Value = if body.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(body).unwrap_or(json!({}))
            };
            let rv = opts
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str);
            let uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
            let before = api.peek(&t.gvr, ns, name).cloned();
            match api.delete(now, &t.gvr, ns, name, rv, uid)? {
                Some(terminating) => Ok((200, terminating)),
                None => {
                    let uid = before
                        .as_ref()
                        .and_then(|o| o.pointer("/metadata/uid"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    Ok((
                        200,
                        json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success",
                            "details": {"name": name, "group": t.gvr.group,
                                        "kind": t.gvr.resource, "uid": uid}
                        }),
                    ))
                }
            }
        }
        _ => Err(ApiError::MethodNotAllowed(format!(
            "method {method} not supported here"
        ))),
    }
}

/// Streams watch events as newline-delimited JSON until `timeoutSeconds` (default 290 s).
async fn watch(shared: Arc<Shared>, t: Target, q: BTreeMap<String, String>) -> Response {
    let selector = q.get("labelSelector").cloned();
    let fields = match FieldSelector::parse(q.get("fieldSelector")) {
        Ok(f) => f,
        Err(e) => return error_response(&e, &t.gvr.group),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(290);
    let bookmarks = is_true(q.get("allowWatchBookmarks"));
    let start = q.get("resourceVersion").cloned().unwrap_or_default();
    let mut rx = shared.changes.subscribe();
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let group = t.gvr.group.clone();
    // Validate the selector before answering 200.
    if let Err(e) = shared
        .lock()
        .events_since(&t.gvr, None, selector.as_deref(), u64::MAX - 1)
    {
        return error_response(&e, &group);
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut after: u64 = match start.parse::<u64>() {
            Ok(rv) if rv > 0 => rv,
            _ => {
                // "" or "0": synthetic ADDED for everything that exists, then changes.
                let (items, rv) = {
                    let mut api = shared.lock();
                    let (items, rv) =
                        match api.list(&t.gvr, t.namespace.as_deref(), selector.as_deref()) {
                            Ok(x) => x,
                            Err(_) => (Vec::new(), api.resource_version()),
                        };
                    (items, rv)
                };
                for obj in items.into_iter().filter(|o| fields.matches(o)) {
                    let line = json!({"type": "ADDED", "object": obj}).to_string() + "\n";
                    if tx.send(Ok(Bytes::from(line))).await.is_err() {
                        return;
                    }
                }
                rv
            }
        };
        loop {
            let batch = shared.lock().events_since(
                &t.gvr,
                t.namespace.as_deref(),
                selector.as_deref(),
                after,
            );
            let lines: Vec<String> = match batch {
                Ok(evs) => {
                    let mut lines = Vec::new();
                    for e in evs {
                        after = after.max(e.rv);
                        if !fields.matches(&e.object) {
                            continue;
                        }
                        let ty = match e.kind {
                            EventType::Added => "ADDED",
                            EventType::Modified => "MODIFIED",
                            EventType::Deleted => "DELETED",
                        };
                        lines.push(json!({"type": ty, "object": e.object}).to_string() + "\n");
                    }
                    lines
                }
                Err(_) => {
                    let gone = json!({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "message": "too old resource version",
                        "reason": "Expired", "code": 410}});
                    let _ = tx.send(Ok(Bytes::from(gone.to_string() + "\n"))).await;
                    return;
                }
            };
            for line in lines {
                if tx.send(Ok(Bytes::from(line))).await.is_err() {
                    return;
                }
            }
            rx.borrow_and_update();
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tokio::time::sleep(Duration::from_secs(5)), if bookmarks => {
                    let (kind, api_version) = bookmark_kind(&t.gvr);
                    let bm = json!({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": after.to_string()}}});
                    if tx.send(Ok(Bytes::from(bm.to_string() + "\n"))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn bookmark_kind(gvr: &Gvr) -> (String, String) {
    let kind = ApiServer::new()
        .list_object(gvr, Vec::new(), 0)
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|k| k.strip_suffix("List"))
        .unwrap_or("")
        .to_string();
    (kind, gvr.api_version())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let t = parse_path("/api/v1/namespaces/kube-system/secrets/x").unwrap();
        assert_eq!(t.gvr, Gvr::secrets());
        assert_eq!(t.namespace.as_deref(), Some("kube-system"));
        assert_eq!(t.name.as_deref(), Some("x"));
        let t =
            parse_path("/apis/tidemark.dev/v1alpha1/namespaces/ns/etcdmirrors/m/status").unwrap();
        assert!(t.status);
        assert_eq!(t.gvr, Gvr::etcd_mirrors());
        let t = parse_path("/apis/eno.azure.io/v1/compositions").unwrap();
        assert_eq!(t.namespace, None);
        assert!(parse_path("/healthz").is_none());
    }

    #[test]
    fn decoding() {
        assert_eq!(percent_decode("a%3Db%2Cc+in+%28x%29"), "a=b,c in (x)");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
