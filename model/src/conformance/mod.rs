//! A conformance test server: the model apiserver ([`crate::apiserver`]) served over HTTP/1.1
//! with the REST paths, query parameters and `kind: Status` error bodies of Kubernetes, so a real
//! `kube::Client` can be tested without a cluster. One model backs both the simulator and
//! these tests.
//!
//! Served: `/api/v1/...` and `/apis/{group}/{version}/...` for any resource, namespaced
//! (`namespaces/{ns}/{resource}[/{name}[/status]]`) or cluster-scoped; GET/LIST (with
//! `labelSelector`), watch (`?watch=true`), POST, PUT, PATCH (merge, JSON, strategic merge
//! treated as merge, server-side apply approximated as a merge that may create), DELETE with
//! preconditions, and `dryRun=All`. Faults are injected through [`ConformanceServer::with_api`].
//!
//! For the real `kubectl` (and kube's discovery client) it also serves discovery (`/api`,
//! `/apis`, `/api/v1`, `/apis/{group}/{version}`: built-in kinds plus every stored CRD, which
//! is reported `Established`), an empty OpenAPI v2 document (so client-side validation defers
//! to the server), server-side tables with a CRD's printer columns, and core/v1 Events as a
//! view of events.k8s.io Events. `cargo run -p tidemark-model --example apiserver -- FILE`
//! runs it as a process and writes a kubeconfig to FILE.

mod discovery;
mod http;

use crate::apiserver::ApiServer;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};
use tidemark_core::Instant;
use tokio::sync::{oneshot, watch};

pub use crate::apiserver::{ApiError, Fault, Gvr, Op, Patch, Subresource};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the listener failed.
    #[error("binding 127.0.0.1:0: {0}")]
    Bind(#[from] std::io::Error),
    /// The kube client could not be built for the server's address.
    #[error("building a kube client: {0}")]
    Client(#[from] kube::Error),
    /// The server URL did not parse (cannot happen for a socket address).
    #[error("server url: {0}")]
    Url(String),
}

pub(crate) struct Shared {
    api: Mutex<ApiServer>,
    changes: watch::Sender<u64>,
    audit: Mutex<Vec<AuditRecord>>,
}

/// One request as Kubernetes authorization sees it (the attributes an RBAC rule matches),
/// so tests can check that a manifest's Role grants exactly what a binary uses.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditRecord {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// Resource, with `/status` for the status subresource (`etcdmirrors/status`).
    pub resource: String,
    /// `None` for cluster-scoped and all-namespaces requests.
    pub namespace: Option<String>,
    /// `None` for collection requests.
    pub name: Option<String>,
    /// The bearer token the request carried: the "user" a test gave a client through
    /// [`ConformanceServer::kubeconfig_yaml_for`]. The server authorizes nothing; tests
    /// check each user's requests against its RBAC rules.
    pub user: Option<String>,
}

impl Shared {
    fn record(&self, r: AuditRecord) {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    fn lock(&self) -> MutexGuard<'_, ApiServer> {
        // A panic while holding the lock leaves a usable model: every operation is atomic.
        self.api.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Wall-clock time as the model's [`Instant`] (nanoseconds since the Unix epoch).
pub fn wall_now() -> Instant {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Instant(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A running conformance server on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub struct ConformanceServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl ConformanceServer {
    /// Starts a server with an empty model on an ephemeral port.
    pub async fn start() -> Result<ConformanceServer, ServerError> {
        ConformanceServer::start_with(ApiServer::new()).await
    }

    /// Starts a server over a prepared model.
    pub async fn start_with(api: ApiServer) -> Result<ConformanceServer, ServerError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (changes, _) = watch::channel(api.resource_version());
        let shared = Arc::new(Shared {
            api: Mutex::new(api),
            changes,
            audit: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let app = http::router(shared.clone());
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "conformance server stopped");
            }
        });
        Ok(ConformanceServer {
            addr,
            shared,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client configuration pointing at this server, default namespace `default`.
    pub fn config(&self) -> Result<kube::Config, ServerError> {
        let uri = self
            .url()
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| ServerError::Url(e.to_string()))?;
        Ok(kube::Config::new(uri))
    }

    /// A real `kube::Client` talking to this server.
    pub fn client(&self) -> Result<kube::Client, ServerError> {
        Ok(kube::Client::try_from(self.config()?)?)
    }

    /// A kubeconfig file body for this server (for the binary's `--kubeconfig`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: conformance\n  cluster:\n    server: {}\ncontexts:\n- name: conformance\n  context:\n    cluster: conformance\n    user: nobody\n    namespace: default\nusers:\n- name: nobody\n  user: {{}}\ncurrent-context: conformance\n",
            self.url()
        )
    }

    /// A kubeconfig whose requests carry `user` as their bearer token (see
    /// [`AuditRecord::user`]).
    pub fn kubeconfig_yaml_for(&self, user: &str) -> String {
        self.kubeconfig_yaml().replace(
            "- name: nobody\n  user: {}\n",
            &format!("- name: nobody\n  user:\n    token: {user}\n"),
        )
    }

    /// Runs `f` on the model directly (seed objects, inject faults, inspect state) with the
    /// current wall time; watchers are woken afterwards.
    pub fn with_api<R>(&self, f: impl FnOnce(&mut ApiServer, Instant) -> R) -> R {
        let (r, rv) = {
            let mut api = self.shared.lock();
            let r = f(&mut api, wall_now());
            (r, api.resource_version())
        };
        self.shared.changes.send_replace(rv);
        r
    }

    /// Every API request served so far, in arrival order.
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.shared
            .audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The next request matching the fault fails with its error.
    pub fn inject_fault(&self, fault: Fault) {
        self.with_api(|api, _| api.inject_fault(fault));
    }

    /// Makes an object terminating (adds a finalizer if needed, sets deletionTimestamp).
    pub fn mark_terminating(&self, gvr: &Gvr, namespace: &str, name: &str) -> Result<(), ApiError> {
        self.with_api(|api, now| api.mark_terminating(now, gvr, namespace, name).map(|_| ()))
    }
}

impl Drop for ConformanceServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
