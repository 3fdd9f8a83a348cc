//! Admin HTTP servers: read-only `/metrics`, `/healthz`, `/readyz`, `/statusz`, and
//! operator controls (`POST /v1/<name>`) on a separate listener.
//!
//! The two surfaces are split because they carry different risks. Probes and metrics are
//! read-only: the kubelet and Prometheus must reach them over the pod network, so
//! `--admin-addr` may be any address. Controls change what the process does: for the
//! mirror, `drain` ends replication and flips the fence to `Primary` (the cut-over). They
//! get their own listener (`--control-addr`, loopback by default, or `--control-socket`),
//! and a non-loopback control address is refused unless `--control-token-file` makes every
//! control carry a bearer token. The request checks are in `guard.rs`. A binary that
//! registers no controls starts no control listener.
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
mod guard;
mod handle;
mod routes;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use control::{ControlRequest, ControlResult};
pub use guard::{ControlAddr, TokenError};
pub use handle::AdminHandle;

use control::{valid_name, ControlTarget};
use guard::{Guard, HostRule, Peer, Token};

/// Default `--admin-addr`: loopback. Deployments that need kubelet probes set `0.0.0.0:9090`,
/// which is safe because this listener is read-only.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9090";

/// Default `--control-addr`: loopback only (reachable inside the pod, or with
/// `kubectl port-forward`), see the module docs for why.
pub const DEFAULT_CONTROL_ADDR: &str = "127.0.0.1:9091";

/// Command-line flags for the admin servers; `#[command(flatten)]` them into a binary's
/// clap arguments so every binary spells them the same way.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct AdminArgs {
    /// Listen address of the read-only admin server (/metrics, /healthz, /readyz,
    /// /statusz). It serves no controls, so it may face the pod network.
    #[arg(long = "admin-addr", value_name = "HOST:PORT", default_value = DEFAULT_ADMIN_ADDR)]
    pub admin_addr: String,
    /// Listen address of the control server (POST /v1/...; it also serves the read-only
    /// endpoints). A non-loopback address needs --control-token-file.
    #[arg(long = "control-addr", value_name = "HOST:PORT", default_value = DEFAULT_CONTROL_ADDR)]
    pub control_addr: String,
    /// Serve controls on this Unix socket (mode 0600) instead of --control-addr.
    #[arg(
        long = "control-socket",
        value_name = "PATH",
        conflicts_with = "control_addr"
    )]
    pub control_socket: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` on every control; the token is read from
    /// this file, which group and others must not be able to read.
    #[arg(long = "control-token-file", value_name = "FILE")]
    pub control_token_file: Option<PathBuf>,
}

impl AdminArgs {
    /// The server configuration for these flags, other settings at defaults.
    pub fn config(&self) -> AdminConfig {
        let listen = match &self.control_socket {
            Some(path) => ControlListen::Unix(path.clone()),
            None => ControlListen::Tcp(self.control_addr.clone()),
        };
        AdminConfig {
            addr: self.admin_addr.clone(),
            control: ControlConfig {
                listen,
                token_file: self.control_token_file.clone(),
            },
            ..AdminConfig::default()
        }
    }
}

/// Where controls are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlListen {
    /// `HOST:PORT`; port 0 picks a free port (tests).
    Tcp(String),
    /// A Unix socket path, created with mode 0600.
    Unix(PathBuf),
}

/// The control listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Where to listen.
    pub listen: ControlListen,
    /// Bearer token file; required for a non-loopback TCP address.
    pub token_file: Option<PathBuf>,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            listen: ControlListen::Tcp(DEFAULT_CONTROL_ADDR.to_owned()),
            token_file: None,
        }
    }
}

/// Admin server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `HOST:PORT` of the read-only listener; port 0 picks a free port (tests).
    pub addr: String,
    /// The control listener (started only when controls are registered).
    pub control: ControlConfig,
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
            control: ControlConfig::default(),
            heartbeat_staleness: Duration::from_secs(60),
            control_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the admin servers could not start. Messages name the flag the operator has to change.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The address does not parse or resolve.
    #[error("invalid {flag} {addr:?}: {reason} (expected HOST:PORT, e.g. 127.0.0.1:9090)")]
    BadAddress {
        flag: &'static str,
        addr: String,
        reason: String,
    },
    /// Something else already listens there.
    #[error(
        "{flag} {addr}: address already in use (another tidemark process?); \
         choose a free one with {flag}"
    )]
    AddrInUse {
        flag: &'static str,
        addr: String,
        source: io::Error,
    },
    /// Any other listen failure (permission denied, address not local, ...).
    #[error("{flag} {addr}: cannot listen: {source}")]
    Bind {
        flag: &'static str,
        addr: String,
        source: io::Error,
    },
    /// Controls would be reachable from the network without a token.
    #[error(
        "--control-addr {addr} is not a loopback address, and the controls ({controls}) cut \
         over, pause or stop this process; bind it to 127.0.0.1 or [::1], use \
         --control-socket, or require a bearer token with --control-token-file"
    )]
    RemoteControlRefused { addr: String, controls: String },
    /// The read-only and control listeners would share one address.
    #[error(
        "--admin-addr and --control-addr are both {addr}; give the control server its own port"
    )]
    SameAddress { addr: String },
    /// The bearer token file is unusable.
    #[error(transparent)]
    Token(#[from] TokenError),
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
    /// actions such as flipping a shared flag. `f` gets the JSON body.
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

    /// Binds the read-only listener and, when controls are registered, the control
    /// listener, and serves both in background tasks until [`AdminServer::shutdown`] (or
    /// until the `AdminServer` is dropped).
    pub async fn serve(self, config: &AdminConfig) -> Result<AdminServer, AdminError> {
        let addrs = resolve("--admin-addr", &config.addr).await?;
        let control = if self.controls.is_empty() {
            None
        } else {
            Some(self.bind_control(&config.control, &addrs).await?)
        };
        let listener = tokio::net::TcpListener::bind(&addrs[..])
            .await
            .map_err(|source| bind_error("--admin-addr", &config.addr, source))?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| bind_error("--admin-addr", &config.addr, source))?;
        let shared = Arc::new(routes::Shared {
            handle: self.handle,
            controls: self.controls,
            heartbeat_staleness: config.heartbeat_staleness,
            control_timeout: config.control_timeout,
        });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = vec![spawn_tcp(
            listener,
            routes::probes(shared.clone()),
            &stop_rx,
        )];
        tracing::info!(addr = %local_addr, "admin server listening (read-only)");
        let mut control_addr = None;
        if let Some((bound, guard)) = control {
            let router = routes::controls(shared, guard);
            match bound {
                Bound::Tcp(l) => {
                    let a = l
                        .local_addr()
                        .map_err(|source| bind_error("--control-addr", "", source))?;
                    control_addr = Some(ControlAddr::Tcp(a));
                    tasks.push(spawn_tcp(l, router, &stop_rx));
                }
                Bound::Unix(l, path) => {
                    control_addr = Some(ControlAddr::Unix(path));
                    let app = router.into_make_service_with_connect_info::<Peer>();
                    let mut stop = stop_rx.clone();
                    tasks.push(tokio::spawn(
                        axum::serve(l, app)
                            .with_graceful_shutdown(async move {
                                let _ = stop.wait_for(|s| *s).await;
                            })
                            .into_future(),
                    ));
                }
            }
            if let Some(a) = &control_addr {
                tracing::info!(addr = %a, "control server listening");
            }
        }
        Ok(AdminServer {
            local_addr,
            control_addr,
            stop: Some(stop_tx),
            tasks,
        })
    }

    /// Binds the control listener after checking that it is safe to expose.
    async fn bind_control(
        &self,
        config: &ControlConfig,
        admin: &[SocketAddr],
    ) -> Result<(Bound, Guard), AdminError> {
        let token = config.token_file.as_deref().map(Token::load).transpose()?;
        match &config.listen {
            ControlListen::Tcp(addr) => {
                let addrs = resolve("--control-addr", addr).await?;
                let loopback = addrs.iter().all(|a| a.ip().to_canonical().is_loopback());
                if !loopback && token.is_none() {
                    let controls: Vec<&str> = self.controls.keys().map(String::as_str).collect();
                    return Err(AdminError::RemoteControlRefused {
                        addr: addr.clone(),
                        controls: controls.join(", "),
                    });
                }
                if addrs.iter().any(|a| a.port() != 0 && admin.contains(a)) {
                    return Err(AdminError::SameAddress { addr: addr.clone() });
                }
                let l = tokio::net::TcpListener::bind(&addrs[..])
                    .await
                    .map_err(|source| bind_error("--control-addr", addr, source))?;
                let port = l
                    .local_addr()
                    .map_err(|source| bind_error("--control-addr", addr, source))?
                    .port();
                let host = if loopback {
                    HostRule::Loopback { port }
                } else {
                    tracing::warn!(
                        addr = %addr,
                        "controls are reachable from the network; every request needs the bearer token"
                    );
                    HostRule::Port { port }
                };
                Ok((Bound::Tcp(l), Guard { token, host }))
            }
            ControlListen::Unix(path) => {
                let l = bind_unix(path).await?;
                let guard = Guard {
                    token,
                    host: HostRule::Any,
                };
                Ok((Bound::Unix(l, path.clone()), guard))
            }
        }
    }
}

/// A bound control listener.
enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

fn spawn_tcp(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<io::Result<()>> {
    let mut stop = stop.clone();
    let app = router.into_make_service_with_connect_info::<Peer>();
    tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                // A dropped sender also means stop.
                let _ = stop.wait_for(|s| *s).await;
            })
            .into_future(),
    )
}

/// Binds a Unix socket with mode 0600. A leftover socket file that nobody answers on is
/// replaced; one that answers belongs to a running process and is left alone.
async fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, AdminError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let shown = path.display().to_string();
    let fail = |source| bind_error("--control-socket", &shown, source);
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(fail(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way; remove it or choose another path",
            )));
        }
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(fail(io::Error::from(io::ErrorKind::AddrInUse)));
        }
        std::fs::remove_file(path).map_err(fail)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

/// Parses `HOST:PORT`, resolving host names (`localhost:9090`).
async fn resolve(flag: &'static str, addr: &str) -> Result<Vec<SocketAddr>, AdminError> {
    let bad = |reason: String| AdminError::BadAddress {
        flag,
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

fn bind_error(flag: &'static str, addr: &str, source: io::Error) -> AdminError {
    let addr = addr.to_owned();
    if source.kind() == io::ErrorKind::AddrInUse {
        AdminError::AddrInUse { flag, addr, source }
    } else {
        AdminError::Bind { flag, addr, source }
    }
}

/// The running admin servers.
#[derive(Debug)]
pub struct AdminServer {
    local_addr: SocketAddr,
    control_addr: Option<ControlAddr>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    tasks: Vec<JoinHandle<io::Result<()>>>,
}

impl AdminServer {
    /// The bound read-only address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The control listener, when controls are registered.
    pub fn control_addr(&self) -> Option<&ControlAddr> {
        self.control_addr.as_ref()
    }

    /// Stops accepting, lets in-flight requests finish for up to 5 s, then
    /// aborts whatever is left (a stuck scraper must not delay process exit).
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut result = Ok(());
        for task in &mut self.tasks {
            match tokio::time::timeout_at(deadline, &mut *task).await {
                Ok(Ok(r)) => result = result.and(r),
                Ok(Err(join)) => result = result.and(Err(io::Error::other(join))),
                Err(_) => {
                    task.abort();
                    tracing::warn!("admin server did not stop within 5s; aborted");
                }
            }
        }
        if let Some(ControlAddr::Unix(path)) = &self.control_addr {
            let _ = std::fs::remove_file(path);
        }
        result
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
            "--control-socket",
            "/run/t.sock",
            "--control-token-file",
            "/etc/t",
        ])
        .unwrap();
        let c = cli.admin.config();
        assert_eq!(c.addr, "0.0.0.0:9191");
        assert_eq!(c.control.listen, ControlListen::Unix("/run/t.sock".into()));
        assert_eq!(c.control.token_file, Some(PathBuf::from("/etc/t")));
        // One control listener: a socket and an explicit TCP address conflict.
        assert!(Cli::try_parse_from([
            "x",
            "--control-addr",
            "127.0.0.1:1",
            "--control-socket",
            "/run/t.sock"
        ])
        .is_err());
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn duplicate_control_panics() {
        let mut admin = Admin::new("t", "0");
        admin.control_fn("pause", |_| Ok(Value::Null));
        admin.control_fn("pause", |_| Ok(Value::Null));
    }
}
