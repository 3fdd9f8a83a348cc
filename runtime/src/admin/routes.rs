//! HTTP handlers of the admin server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use super::control::{ControlTarget, DispatchError};
use super::guard::{Guard, Peer};
use super::AdminHandle;

/// Content type of the OpenMetrics text format produced by `prometheus-client`
/// (Prometheus negotiates it natively; `info` metrics need it).
pub(crate) const METRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) handle: AdminHandle,
    pub(crate) controls: BTreeMap<String, ControlTarget>,
    pub(crate) heartbeat_staleness: Duration,
    pub(crate) control_timeout: Duration,
}

/// The read-only listener: probes, metrics and status. No route here changes anything.
pub(crate) fn probes(shared: Arc<Shared>) -> Router {
    read_only()
        .route("/", get(index_read_only))
        .fallback(not_found)
        .with_state(shared)
}

/// The control listener: the read-only routes plus `POST /v1/<name>` behind `guard`.
pub(crate) fn controls(shared: Arc<Shared>, guard: Guard) -> Router {
    let guarded = Arc::new(Guarded { shared, guard });
    let controls = Router::new()
        .route("/v1/{name}", post(control))
        .with_state(guarded.clone());
    read_only()
        .route("/", get(index))
        .fallback(not_found)
        .with_state(guarded.shared.clone())
        .merge(controls)
}

fn read_only() -> Router<Arc<Shared>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/statusz", get(statusz))
}

/// State of the control route.
#[derive(Debug)]
pub(crate) struct Guarded {
    shared: Arc<Shared>,
    guard: Guard,
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, TEXT)], body.into()).into_response()
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"null".to_vec());
    bytes.push(b'\n');
    (status, [(header::CONTENT_TYPE, JSON)], bytes).into_response()
}

fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({ "error": message.into() }))
}

const INDEX: &str = "GET  /metrics   OpenMetrics text\nGET  /healthz   liveness\n\
     GET  /readyz    readiness\nGET  /statusz   status JSON\n";

async fn index_read_only(State(s): State<Arc<Shared>>) -> Response {
    let mut body = String::from(INDEX);
    if !s.controls.is_empty() {
        body.push_str("(controls are served on the control listener, see --control-addr)\n");
    }
    text(StatusCode::OK, body)
}

async fn index(State(s): State<Arc<Shared>>) -> Response {
    let mut body = String::from(INDEX);
    for name in s.controls.keys() {
        body.push_str(&format!("POST /v1/{name}\n"));
    }
    text(StatusCode::OK, body)
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    match s.handle.encode_metrics() {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
            body,
        )
            .into_response(),
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "metrics encoding failed\n",
        ),
    }
}

async fn healthz(State(s): State<Arc<Shared>>) -> Response {
    let age = s.handle.heartbeat_age();
    if age <= s.heartbeat_staleness {
        text(StatusCode::OK, "ok\n")
    } else {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "main loop stalled: last heartbeat {:.1}s ago (limit {:.1}s)\n",
                age.as_secs_f64(),
                s.heartbeat_staleness.as_secs_f64()
            ),
        )
    }
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    match s.handle.readiness() {
        Ok(()) => text(StatusCode::OK, "ok\n"),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn statusz(State(s): State<Arc<Shared>>) -> Response {
    json_response(StatusCode::OK, &s.handle.status())
}

async fn control(
    State(g): State<Arc<Guarded>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err((status, why)) = g.guard.check(&headers) {
        tracing::warn!(control = %name, %peer, status = status.as_u16(), reason = %why, "admin control refused");
        return json_error(status, why);
    }
    let s = &g.shared;
    let Some(target) = s.controls.get(&name) else {
        let known: Vec<&str> = s.controls.keys().map(String::as_str).collect();
        return json_error(
            StatusCode::NOT_FOUND,
            format!("unknown control {name:?}; known: {}", known.join(", ")),
        );
    };
    let args: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                format!("body is not JSON ({e}); send a JSON body such as {{}}"),
            )
        }
    };
    tracing::info!(control = %name, %peer, %args, "admin control request");
    match tokio::time::timeout(s.control_timeout, target.dispatch(&name, args)).await {
        Ok(Ok(Ok(body))) => json_response(StatusCode::OK, &body),
        Ok(Ok(Err(reason))) => json_error(StatusCode::CONFLICT, reason),
        Ok(Err(DispatchError::Busy)) => json_error(
            StatusCode::TOO_MANY_REQUESTS,
            "control queue full; retry shortly",
        ),
        Ok(Err(DispatchError::Closed)) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the process no longer accepts this control (shutting down?)",
        ),
        Ok(Err(DispatchError::NoReply)) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the process dropped the request without replying",
        ),
        Err(_) => json_error(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "no reply within {:.0}s; the request may still be processed",
                s.control_timeout.as_secs_f64()
            ),
        ),
    }
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found; GET / lists the endpoints\n",
    )
}
