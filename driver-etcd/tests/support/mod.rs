//! Real-etcd test harness: starts etcd processes on free loopback ports in temp dirs and
//! stops them on drop.
//!
//! Binaries: `TIDEMARK_ETCD_34` (default `/usr/bin/etcd`) and `TIDEMARK_ETCD_35` (default
//! `$TIDEMARK_CACHE|~/.cache/tidemark/etcd-3.5/root/usr/bin/etcd`), as installed by
//! `scripts/install-etcd.sh`. A missing binary skips the test loudly, unless `CI` is set,
//! where it fails.
#![allow(dead_code)]

pub mod agent;
pub mod pod;
pub mod throttle;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark_core::etcd::Cluster;
use tidemark_etcd::connect::{ClusterConn, ConnSettings};
use tidemark_etcd::Executor;

/// Which etcd minor release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V {
    V34,
    V35,
}

impl V {
    pub fn env(self) -> &'static str {
        match self {
            V::V34 => "TIDEMARK_ETCD_34",
            V::V35 => "TIDEMARK_ETCD_35",
        }
    }

    fn default_path(self) -> PathBuf {
        match self {
            V::V34 => PathBuf::from("/usr/bin/etcd"),
            V::V35 => {
                let root = std::env::var("TIDEMARK_CACHE")
                    .map(PathBuf::from)
                    .unwrap_or_else(|_| {
                        PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                            .join(".cache/tidemark")
                    });
                root.join("etcd-3.5/root/usr/bin/etcd")
            }
        }
    }
}

/// The etcd binary for `v`, or `None` (test skipped) when absent outside CI.
pub fn etcd_bin(v: V) -> Option<PathBuf> {
    let p = std::env::var(v.env())
        .map(PathBuf::from)
        .unwrap_or_else(|_| v.default_path());
    if p.is_file() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|c| !c.is_empty() && c != "false" && c != "0");
    if ci {
        panic!(
            "etcd binary for {v:?} not found at {} (set {} or run scripts/install-etcd.sh); CI requires it",
            p.display(),
            v.env()
        );
    }
    eprintln!(
        "\n!!!!! SKIPPING: etcd {v:?} not found at {} — run scripts/install-etcd.sh (or set {}) !!!!!\n",
        p.display(),
        v.env()
    );
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind loopback")
        .local_addr()
        .expect("local addr")
        .port()
}

/// One single-member etcd on loopback.
pub struct Etcd {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub version: V,
    bin: PathBuf,
    args: Vec<String>,
    tls_client: Option<tidemark_core::config::TlsSpec>,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Etcd({:?} at {})", self.version, self.url)
    }
}

/// A source and a target server of version `v` with default flags; `None` when the binary
/// is absent (skip).
pub async fn pair(v: V) -> Option<(Etcd, Etcd)> {
    let s = Etcd::start(v, Flags::default()).await?;
    let t = Etcd::start(v, Flags::default()).await?;
    Some((s, t))
}

/// Per-test server flags.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    pub max_txn_ops: Option<u32>,
    pub max_request_bytes: Option<u64>,
    pub quota_backend_bytes: Option<u64>,
    pub progress_notify_interval: Option<&'static str>,
    /// Serve clients over TLS with these server flags; the health check connects with
    /// `tls_client`.
    pub tls_server: Vec<String>,
    pub tls_client: Option<tidemark_core::config::TlsSpec>,
}

impl Etcd {
    /// Starts etcd `v` with `flags`; `None` when the binary is absent (skip).
    pub async fn start(v: V, flags: Flags) -> Option<Etcd> {
        let bin = etcd_bin(v)?;
        let mut dir = tempfile::tempdir().expect("tempdir");
        for attempt in 0..3 {
            let cport = free_port();
            let pport = free_port();
            let scheme = if flags.tls_server.is_empty() {
                "http"
            } else {
                "https"
            };
            let url = format!("{scheme}://127.0.0.1:{cport}");
            let peer = format!("http://127.0.0.1:{pport}");
            let mut args: Vec<String> = vec![
                "--name=t".into(),
                format!("--data-dir={}", dir.path().join("data").display()),
                format!("--listen-client-urls={url}"),
                format!("--advertise-client-urls={url}"),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster=t={peer}"),
                "--log-level=warn".into(),
                "--logger=zap".into(),
            ];
            if let Some(n) = flags.max_txn_ops {
                args.push(format!("--max-txn-ops={n}"));
            }
            if let Some(n) = flags.max_request_bytes {
                args.push(format!("--max-request-bytes={n}"));
            }
            if let Some(n) = flags.quota_backend_bytes {
                args.push(format!("--quota-backend-bytes={n}"));
            }
            if let Some(i) = flags.progress_notify_interval {
                args.push(format!("--experimental-watch-progress-notify-interval={i}"));
            }
            args.extend(flags.tls_server.iter().cloned());
            let mut e = Etcd {
                tls_client: flags.tls_client.clone(),
                child: None,
                dir,
                url,
                version: v,
                bin: bin.clone(),
                args,
            };
            e.spawn();
            if e.wait_healthy(Duration::from_secs(15)).await {
                return Some(e);
            }
            eprintln!(
                "etcd did not come up (attempt {attempt}); log:\n{}",
                e.log()
            );
            e.kill();
            dir = e.take_dir();
        }
        panic!("etcd {v:?} failed to start three times");
    }

    fn take_dir(mut self) -> tempfile::TempDir {
        self.kill();
        let _ = std::fs::remove_dir_all(self.dir.path().join("data"));
        let d = tempfile::tempdir().expect("tempdir");
        std::mem::replace(&mut self.dir, d)
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("etcd.log")).expect("log file");
        let log2 = log.try_clone().expect("log clone");
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        self.child = Some(cmd.spawn().expect("spawn etcd"));
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    async fn wait_healthy(&self, within: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < within {
            if self.tls_client.is_some() {
                let conn = ClusterConn::new(Cluster::Source, self.settings());
                if conn.get().await.is_ok() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            if let Ok(mut c) = etcd_client::Client::connect([self.url.as_str()], None).await {
                // With auth enabled the read is refused, which still proves it was served.
                let served = match c.get("health", None).await {
                    Ok(_) => true,
                    Err(e) => {
                        let e = e.to_string();
                        e.contains("user name is empty") || e.contains("permission denied")
                    }
                };
                if c.status().await.is_ok() && served {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Stops the process (SIGKILL), keeping the data dir.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts the same member on the same data dir and ports.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_healthy(Duration::from_secs(15)).await,
            "etcd restart failed:\n{}",
            self.log()
        );
    }

    /// The member's data dir.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The value of the member's `--<name>=<value>` flag.
    pub fn flag(&self, name: &str) -> Option<String> {
        let p = format!("--{name}=");
        self.args
            .iter()
            .find_map(|a| a.strip_prefix(p.as_str()))
            .map(str::to_string)
    }

    /// The etcd binary this member runs.
    pub fn bin(&self) -> &std::path::Path {
        &self.bin
    }

    /// Stops the member and removes its data dir. [`Etcd::restart`] then starts it with the
    /// same flags (name, client and peer URLs, `--initial-cluster`, cluster token), so the
    /// fresh cluster gets the same cluster ID; or restore a snapshot into
    /// [`Etcd::data_dir`] first.
    pub fn wipe(&mut self) {
        self.kill();
        let data = self.data_dir();
        if data.exists() {
            std::fs::remove_dir_all(&data).expect("remove the data dir");
        }
    }

    /// Restarts with TLS server flags edited and `client` as the health check's TLS settings
    /// (certificate rotation).
    pub async fn restart_with_tls(
        &mut self,
        edit: impl FnOnce(&mut Vec<String>),
        client: tidemark_core::config::TlsSpec,
    ) {
        self.tls_client = Some(client);
        self.restart_with(edit).await;
    }

    /// Restarts with edited flags (e.g. a larger quota), same data dir and ports.
    pub async fn restart_with(&mut self, edit: impl FnOnce(&mut Vec<String>)) {
        edit(&mut self.args);
        self.restart().await;
    }

    /// A plain etcd-client for test setup and checks.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.url.as_str()], None)
            .await
            .expect("connect")
    }

    /// Connection settings for the driver.
    pub fn settings(&self) -> ConnSettings {
        match &self.tls_client {
            Some(t) => {
                let spec = tidemark_core::config::EndpointSpec {
                    endpoint_list: vec![self.url.clone()],
                    tls: Some(t.clone()),
                    ..Default::default()
                };
                ConnSettings::from_spec("test", &spec, Duration::from_secs(5)).expect("tls files")
            }
            None => ConnSettings::plain(vec![self.url.clone()], Duration::from_secs(5)),
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An executor with `source` and `target`.
pub fn executor(source: &Etcd, target: &Etcd, timeout: Duration) -> Executor {
    Executor::new(
        Arc::new(ClusterConn::new(Cluster::Source, source.settings())),
        Arc::new(ClusterConn::new(Cluster::Target, target.settings())),
        timeout,
    )
}

/// Every key-value under `prefix` (key, value), in key order.
pub async fn dump(c: &mut etcd_client::Client, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let resp = c
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("dump");
    resp.kvs()
        .iter()
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
        .collect()
}

/// The longest any one real-server test may run. Every wait inside a test has its own,
/// shorter deadline; this backstop turns a hang nobody foresaw into a failure that names
/// the test, instead of a CI run that never ends.
pub const TEST_BUDGET: Duration = Duration::from_secs(300);

/// Runs a test body under [`TEST_BUDGET`].
pub async fn bounded<F: std::future::Future<Output = ()>>(body: F) {
    if tokio::time::timeout(TEST_BUDGET, body).await.is_err() {
        panic!("test exceeded its {TEST_BUDGET:?} budget (a hang); see the output above");
    }
}

/// Generates `<name>_34` and `<name>_35` tokio tests calling `body(V)`.
#[macro_export]
macro_rules! both_versions {
    ($name:ident, $body:path) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v34() {
                $crate::support::bounded($body($crate::support::V::V34)).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v35() {
                $crate::support::bounded($body($crate::support::V::V35)).await
            }
        }
    };
}
