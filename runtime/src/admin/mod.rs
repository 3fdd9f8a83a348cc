//! Admin HTTP server: `/metrics`, `/healthz`, `/readyz`, `/statusz` and
//! operator controls (`POST /v1/<name>`).
//!
//! The server has no authentication and no TLS. That is fine for read-only
//! endpoints, but controls change what the process does: for the mirror,
//! `drain` ends replication and flips the fence to `Primary` (the cut-over),
//! which nobody on the network should be able to trigger by accident or malice.
//! So when controls are registered the server only binds loopback addresses
//! (reachable from the host, or inside a pod via `kubectl exec`/`port-forward`)
//! unless the operator explicitly opts in with `--admin-allow-remote-control`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tidemark_runtime::{Admin, AdminConfig};
//! let mut admin = Admin::new("tidemark-mirror", "0.1.0");
//! let handle = admin.handle();
//! let mut drains = admin.control("drain", 4);
//! let server = admin.serve(&AdminConfig::default()).await?;
//! handle.set_ready();
//! # let _ = (&mut drains, server); Ok(()) }
//! ```

mod control;
mod handle;
mod routes;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub use control::{ControlRequest, ControlResult};
pub use handle::AdminHandle;

use control::{valid_name, ControlTarget};

/// Default `--admin-addr`: loopback, see the module docs for why.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9090";

/// Command-line flags for the admin server; `#[command(flatten)]` them into a
/// binary's clap arguments so both binaries spell them the same way.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct AdminArgs {
    /// Listen address of the admin HTTP server (metrics, health, status, controls).
    #[arg(long = "admin-addr", value_name = "HOST:PORT", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: String,
    /// Serve control endpoints (POST /v1/...) on a non-loopback --admin-addr.
    /// They are unauthenticated: put a network policy or proxy in front.
    #[arg(long = "admin-allow-remote-control")]
    pub admin_allow_remote_control: bool,
}

impl AdminArgs {
    /// The server configuration for these flags, other settings at defaults.
    pub fn config(&self) -> AdminConfig {
        AdminConfig {
            addr: self.admin_addr.clone(),
            allow_remote_control: self.admin_allow_remote_control,
            ..AdminConfig::default()
        }
    }
}

/// Admin server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `HOST:PORT` to listen on; port 0 picks a free port (tests).
    pub addr: String,
    /// Allow control endpoints on a non-loopback address.
    pub allow_remote_control: bool,
    /// `/healthz` fails when the last heartbeat is older than this. Pick it well
    /// above the longest legitimate gap between loop iterations (default 60 s).
    pub heartbeat_staleness: Duration,
    /// How long a control request waits for the binary's reply (default 10 s).
    pub control_timeout: Duration,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            addr: DEFAULT_ADMIN_ADDR.to_owned(),
            allow_remote_control: false,
            heartbeat_staleness: Duration::from_secs(60),
            control_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the admin server could not start. Messages name `--admin-addr` because
/// that is what the operator has to change.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address does not parse or resolve.
    #[error("invalid --admin-addr {addr:?}: {reason} (expected HOST:PORT, e.g. 127.0.0.1:9090)")]
    BadAddress { addr: String, reason: String },
    /// Something else already listens there.
    #[error(
        "--admin-addr {addr}: address already in use (another tidemark process?); \
         choose a free port with --admin-addr"
    )]
    AddrInUse { addr: String, source: io::Error },
    /// Any other listen failure (permission denied, address not local, ...).
    #[error("--admin-addr {addr}: cannot listen: {source}")]
    Bind { addr: String, source: io::Error },
    /// Controls would be reachable from the network without the opt-in flag.
    #[error(
        "--admin-addr {addr} is not a loopback address, and the admin server carries \
         unauthenticated control endpoints ({controls}); bind it to 127.0.0.1 or [::1], \
         or pass --admin-allow-remote-control"
    )]
    RemoteControlRefused { addr: String, controls: String },
}

/// Builder for the admin server: register controls, then [`serve`](Admin::serve).
#[derive(Debug)]
pub struct Admin {
    handle: AdminHandle,
    controls: BTreeMap<String, ControlTarget>,
}

impl Admin {
    /// Creates the admin state with a metrics registry that already holds
    /// `process_start_time_seconds` and `tidemark_build_info{binary,version}`
    /// (so dashboards can spot restarts and mixed versions without extra code).
    pub fn new(binary: &str, version: &str) -> Self {
        let mut registry = Registry::default();
        let start = Gauge::<f64, AtomicU64>::default();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        start.set(since_epoch.as_secs_f64());
        registry.register(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
            start,
        );
        registry.register(
            "tidemark_build",
            "Build information of the running tidemark binary",
            Info::new(vec![
                ("binary".to_owned(), binary.to_owned()),
                ("version".to_owned(), version.to_owned()),
            ]),
        );
        Self {
            handle: AdminHandle::new(registry),
            controls: BTreeMap::new(),
        }
    }

    /// The handle the binary keeps to report heartbeat, readiness, status and metrics.
    pub fn handle(&self) -> AdminHandle {
        self.handle.clone()
    }

    /// Registers `POST /v1/<name>`, delivered to the returned receiver. At most
    /// `capacity` requests queue up; beyond that callers get `429`.
    ///
    /// # Panics
    /// If `name` is not `[a-z0-9_-]+` or is already registered (programming errors).
    pub fn control(&mut self, name: &str, capacity: usize) -> mpsc::Receiver<ControlRequest> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.insert(name, ControlTarget::Channel(tx));
        rx
    }

    /// Registers `POST /v1/<name>` handled by `f` on the server task; for quick
    /// actions such as flipping a shared flag. `f` gets the JSON body (or `null`).
    ///
    /// # Panics
    /// As for [`control`](Admin::control).
    pub fn control_fn<F>(&mut self, name: &str, f: F)
    where
        F: Fn(Value) -> ControlResult + Send + Sync + 'static,
    {
        self.insert(name, ControlTarget::Callback(Arc::new(f)));
    }

    fn insert(&mut self, name: &str, target: ControlTarget) {
        assert!(
            valid_name(name),
            "control name {name:?} must match [a-z0-9_-]+"
        );
        let previous = self.controls.insert(name.to_owned(), target);
        assert!(previous.is_none(), "control {name:?} registered twice");
    }

    /// Binds `config.addr` and serves in a background task until
    /// [`AdminServer::shutdown`] (or until the `AdminServer` is dropped).
    pub async fn serve(self, config: &AdminConfig) -> Result<AdminServer, AdminError> {
        let addrs = resolve(&config.addr).await?;
        let loopback = addrs.iter().all(|a| a.ip().to_canonical().is_loopback());
        if !loopback && !self.controls.is_empty() && !config.allow_remote_control {
            let controls: Vec<&str> = self.controls.keys().map(String::as_str).collect();
            return Err(AdminError::RemoteControlRefused {
                addr: config.addr.clone(),
                controls: controls.join(", "),
            });
        }
        let listener = tokio::net::TcpListener::bind(&addrs[..])
            .await
            .map_err(|source| bind_error(&config.addr, source))?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| bind_error(&config.addr, source))?;
        if !loopback && !self.controls.is_empty() {
            tracing::warn!(
                addr = %local_addr,
                "admin control endpoints are reachable from the network (--admin-allow-remote-control)"
            );
        }
        let shared = Arc::new(routes::Shared {
            handle: self.handle,
            controls: self.controls,
            heartbeat_staleness: config.heartbeat_staleness,
            control_timeout: config.control_timeout,
        });
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(
            axum::serve(listener, routes::router(shared))
                .with_graceful_shutdown(async move {
                    // A dropped sender also means stop.
                    let _ = stop_rx.await;
                })
                .into_future(),
        );
        tracing::info!(addr = %local_addr, "admin server listening");
        Ok(AdminServer {
            local_addr,
            stop: Some(stop_tx),
            task,
        })
    }
}

/// Parses `HOST:PORT`, resolving host names (`localhost:9090`).
async fn resolve(addr: &str) -> Result<Vec<SocketAddr>, AdminError> {
    let bad = |reason: String| AdminError::BadAddress {
        addr: addr.to_owned(),
        reason,
    };
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    if !addr.contains(':') {
        return Err(bad("missing :PORT".to_owned()));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| bad(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("host resolves to no address".to_owned()));
    }
    Ok(addrs)
}

fn bind_error(addr: &str, source: io::Error) -> AdminError {
    let addr = addr.to_owned();
    if source.kind() == io::ErrorKind::AddrInUse {
        AdminError::AddrInUse { addr, source }
    } else {
        AdminError::Bind { addr, source }
    }
}

/// The running admin server.
#[derive(Debug)]
pub struct AdminServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl AdminServer {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets in-flight requests finish for up to 5 s, then
    /// aborts whatever is left (a stuck scraper must not delay process exit).
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(5), &mut self.task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(io::Error::other(join)),
            Err(_) => {
                self.task.abort();
                tracing::warn!("admin server did not stop within 5s; aborted");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_addresses_name_the_flag() {
        for addr in [
            "nonsense",
            "127.0.0.1",
            "127.0.0.1:notaport",
            "300.1.1.1:80",
        ] {
            let cfg = AdminConfig {
                addr: addr.to_owned(),
                ..AdminConfig::default()
            };
            let err = Admin::new("t", "0").serve(&cfg).await.unwrap_err();
            assert!(
                matches!(err, AdminError::BadAddress { .. }),
                "{addr}: {err:?}"
            );
            assert!(err.to_string().contains("--admin-addr"), "{err}");
        }
    }

    #[tokio::test]
    async fn address_in_use_is_reported() {
        let first = Admin::new("t", "0")
            .serve(&AdminConfig {
                addr: "127.0.0.1:0".to_owned(),
                ..AdminConfig::default()
            })
            .await
            .unwrap();
        let cfg = AdminConfig {
            addr: first.local_addr().to_string(),
            ..AdminConfig::default()
        };
        let err = Admin::new("t", "0").serve(&cfg).await.unwrap_err();
        assert!(matches!(err, AdminError::AddrInUse { .. }), "{err:?}");
        assert!(err.to_string().contains("--admin-addr"), "{err}");
        first.shutdown().await.unwrap();
    }

    #[test]
    fn args_default_to_loopback() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            admin: AdminArgs,
        }
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.admin.config(), AdminConfig::default());
        let cli = Cli::try_parse_from([
            "x",
            "--admin-addr",
            "0.0.0.0:9191",
            "--admin-allow-remote-control",
        ])
        .unwrap();
        assert_eq!(cli.admin.config().addr, "0.0.0.0:9191");
        assert!(cli.admin.config().allow_remote_control);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn duplicate_control_panics() {
        let mut admin = Admin::new("t", "0");
        admin.control_fn("pause", |_| Ok(Value::Null));
        admin.control_fn("pause", |_| Ok(Value::Null));
    }
}
