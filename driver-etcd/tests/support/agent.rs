//! Running the mirror in-process (an agent task) or as the real binary, and comparing the
//! target with the source key by key.
#![allow(dead_code)]

use super::Etcd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tidemark_core::config::MirrorConfig;
use tidemark_core::mirror::io::{Control, StopReason};
use tidemark_core::mirror::{Mirror, Status};
use tidemark_etcd::agent::{AgentOptions, StatusSink};
use tidemark_etcd::{Agent, Executor};
use tokio::sync::{mpsc, oneshot, watch};

/// A config for `source.prefix` -> `target.prefix` between two test servers, tuned so
/// retries and probes happen within test time.
pub fn config(src: &Etcd, sp: &str, tgt: &Etcd, tp: &str) -> MirrorConfig {
    let mut c = MirrorConfig::new(sp, tp);
    c.source.endpoint_list = vec![src.url.clone()];
    c.target.endpoint_list = vec![tgt.url.clone()];
    c.sync.request_timeout = Duration::from_secs(5);
    c.sync.reconnect_backoff.initial_delay = Duration::from_millis(100);
    c.sync.reconnect_backoff.max_delay = Duration::from_secs(1);
    c.sync.progress_interval = Duration::from_secs(1);
    c.sync.quota_probe_interval = Duration::from_secs(1);
    // Real etcd reorders concurrent Txns: the chain (and its resends) runs in every test.
    c.sync.max_txns_in_flight = 16;
    c
}

struct WatchSink(watch::Sender<Status>);

impl StatusSink for WatchSink {
    fn publish(&mut self, s: &Status, _: tidemark_core::Instant) {
        self.0.send_replace(s.clone());
    }
}

/// An agent running in this process.
pub struct InProc {
    pub status: watch::Receiver<Status>,
    pub ctl: mpsc::Sender<Control>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<(StopReason, Mirror)>>,
}

impl InProc {
    /// Starts an agent for `c` with a fixed seed.
    pub fn start(c: MirrorConfig, seed: u64) -> InProc {
        if std::env::var_os("TIDEMARK_TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_env("TIDEMARK_TEST_LOG"))
                .with_test_writer()
                .try_init();
        }
        tidemark_etcd::config::validate(&c).expect("valid config");
        let exec = Executor::from_config(&c).expect("executor");
        let mirror = Mirror::new(c, seed).expect("mirror");
        let (stx, srx) = watch::channel(mirror.status().clone());
        let (ctl, ctl_rx) = mpsc::channel(4);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let opts = AgentOptions {
            publish_interval: Duration::from_millis(20),
            shutdown_grace: Duration::from_secs(10),
            channel_capacity: 1024,
        };
        let agent = Agent::new(mirror, exec, opts);
        let task = tokio::spawn(async move {
            let mut sink = WatchSink(stx);
            agent
                .run(
                    ctl_rx,
                    async move {
                        let _ = stop_rx.await;
                    },
                    &mut sink,
                )
                .await
        });
        InProc {
            status: srx,
            ctl,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The latest published status.
    pub fn now(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Waits until `pred` holds on the published status; panics with the status after `t`.
    pub async fn wait(
        &mut self,
        what: &str,
        t: Duration,
        pred: impl Fn(&Status) -> bool,
    ) -> Status {
        let deadline = tokio::time::Instant::now() + t;
        loop {
            {
                let s = self.status.borrow_and_update();
                if pred(&s) {
                    return s.clone();
                }
            }
            match tokio::time::timeout_at(deadline, self.status.changed()).await {
                Ok(Ok(())) => {}
                // The agent dropped its status sender: it stopped, so the wait can never
                // succeed. Say why instead of spinning on a closed channel.
                Ok(Err(_)) => {
                    let status =
                        serde_json::to_string_pretty(&*self.status.borrow()).unwrap_or_default();
                    let reason = match self.task.take() {
                        Some(task) => {
                            match tokio::time::timeout(Duration::from_secs(5), task).await {
                                Ok(Ok((r, _))) => format!("{r:?}"),
                                Ok(Err(e)) => format!("agent task failed: {e}"),
                                Err(_) => "agent task did not finish".to_string(),
                            }
                        }
                        None => "agent already collected".to_string(),
                    };
                    panic!("agent stopped ({reason}) while waiting for {what}; status: {status}");
                }
                Err(_) => panic!(
                    "timed out after {t:?} waiting for {what}; status: {}",
                    serde_json::to_string_pretty(&*self.status.borrow()).unwrap_or_default()
                ),
            }
        }
    }

    /// Waits for the agent to stop on its own.
    pub async fn stopped(&mut self, t: Duration) -> (StopReason, Status) {
        let task = self.task.take().expect("running");
        let (r, m) = tokio::time::timeout(t, task)
            .await
            .unwrap_or_else(|_| panic!("agent did not stop within {t:?}; status {:?}", self.now()))
            .expect("agent task");
        (r, m.status().clone())
    }

    /// SIGTERM equivalent: graceful shutdown, returns the stop reason.
    pub async fn shutdown(mut self) -> StopReason {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.stopped(Duration::from_secs(20)).await.0
    }

    /// Hard stop: abort the task wherever it is (what a crash looks like to etcd).
    pub fn abort(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Source keys under `sp` (minus `excluded` source-relative prefixes) rewritten to `tp`,
/// against target keys under `tp` minus the fence (keys with a `\0`).
pub async fn diff(
    src: &Etcd,
    sp: &str,
    tgt: &Etcd,
    tp: &str,
    excluded: &[&str],
) -> (Vec<(Vec<u8>, Vec<u8>)>, Vec<(Vec<u8>, Vec<u8>)>) {
    let mut s = src.client().await;
    let mut t = tgt.client().await;
    let want: Vec<(Vec<u8>, Vec<u8>)> = super::dump(&mut s, sp.as_bytes())
        .await
        .into_iter()
        .filter(|(k, _)| {
            let rel = &k[sp.len()..];
            !excluded.iter().any(|e| rel.starts_with(e.as_bytes()))
        })
        .map(|(k, v)| {
            let mut nk = tp.as_bytes().to_vec();
            nk.extend_from_slice(&k[sp.len()..]);
            (nk, v)
        })
        .collect();
    let have: Vec<(Vec<u8>, Vec<u8>)> = super::dump(&mut t, tp.as_bytes())
        .await
        .into_iter()
        .filter(|(k, _)| !k.contains(&0))
        .collect();
    (want, have)
}

/// Waits until the target range equals the rewritten source range, key by key.
pub async fn converge(src: &Etcd, sp: &str, tgt: &Etcd, tp: &str, excluded: &[&str], t: Duration) {
    let t0 = Instant::now();
    loop {
        let (want, have) = diff(src, sp, tgt, tp, excluded).await;
        if want == have {
            return;
        }
        if t0.elapsed() > t {
            let show = |v: &[(Vec<u8>, Vec<u8>)]| {
                v.iter()
                    .take(20)
                    .map(|(k, _)| String::from_utf8_lossy(k).to_string())
                    .collect::<Vec<_>>()
            };
            let missing: Vec<_> = want.iter().filter(|x| !have.contains(x)).cloned().collect();
            let extra: Vec<_> = have.iter().filter(|x| !want.contains(x)).cloned().collect();
            panic!(
                "target != source after {t:?}: {} source keys, {} target keys; missing/different {:?}; extra/different {:?}",
                want.len(),
                have.len(),
                show(&missing),
                show(&extra)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Puts `n` keys `<prefix>k00000..` with `value_len`-byte values, 100 per Txn.
pub async fn load(e: &Etcd, prefix: &str, n: usize, value_len: usize) -> i64 {
    let mut c = e.client().await;
    let v = "v".repeat(value_len);
    let mut rev = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<_> = chunk
            .iter()
            .map(|i| etcd_client::TxnOp::put(format!("{prefix}k{i:05}"), v.clone(), None))
            .collect();
        let r = c
            .txn(etcd_client::Txn::new().and_then(ops))
            .await
            .expect("load txn");
        rev = r.header().map(|h| h.revision()).unwrap_or(0);
    }
    rev
}

/// The current source revision.
pub async fn revision(e: &Etcd) -> i64 {
    let mut c = e.client().await;
    c.get("\0", None)
        .await
        .expect("get")
        .header()
        .map(|h| h.revision())
        .unwrap_or(0)
}

/// A numeric `/statusz` field, 0 when absent.
pub fn num(v: &serde_json::Value, f: &str) -> i64 {
    v[f].as_i64().unwrap_or(0)
}

/// `/statusz` says Syncing with the watermark at or past `rev`.
pub fn synced(v: &serde_json::Value, rev: i64) -> bool {
    v["phase"] == "Syncing" && num(v, "lastAppliedRevision") >= rev
}

/// One raw HTTP/1.0 exchange over TCP: (status code, body), or `None` while nothing answers.
pub fn exchange(addr: &str, req: &str) -> Option<(u16, String)> {
    let s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    roundtrip(s, req)
}

/// Sends `req` and parses the reply: (status code, body).
fn roundtrip(mut s: impl std::io::Read + std::io::Write, req: &str) -> Option<(u16, String)> {
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// `auth` with the password in a 0600 file, over plain http (acknowledged, as in tests).
pub fn password_auth(dir: &Path, user: &str, password: &str) -> tidemark_core::config::AuthSpec {
    use std::os::unix::fs::PermissionsExt;
    let pw = dir.join(format!("{user}.pw"));
    std::fs::write(&pw, format!("{password}\n")).expect("password file");
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    tidemark_core::config::AuthSpec {
        username: Some(user.into()),
        password_file: Some(pw.display().to_string()),
        secret_ref: None,
        plaintext_acknowledge_risk: true,
    }
}

/// The agent binary built by cargo for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tidemark-mirror"))
}

/// The agent as a child process (for SIGKILL tests).
pub struct Proc {
    child: Option<Child>,
    /// The read-only listener (`--admin-addr`).
    pub admin: String,
    /// The control listener (`--control-socket`: a path, so no port can be taken by
    /// another test in between).
    pub control: PathBuf,
    pub log: PathBuf,
}

/// A free loopback `HOST:PORT` (bound and released; fine for tests).
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    format!("127.0.0.1:{port}")
}

impl Proc {
    /// Writes `c` as JSON into `dir` and starts `tidemark-mirror run`.
    pub fn start(c: &MirrorConfig, dir: &Path, tag: &str) -> Proc {
        Proc::start_with(c, dir, tag, &[])
    }

    /// As [`Proc::start`], with extra `run` flags.
    pub fn start_with(c: &MirrorConfig, dir: &Path, tag: &str, extra: &[&str]) -> Proc {
        let cfg = dir.join(format!("{tag}.json"));
        std::fs::write(&cfg, serde_json::to_vec_pretty(c).expect("config json"))
            .expect("write config");
        let admin = free_addr();
        let control = dir.join(format!("{tag}.sock"));
        let log = dir.join(format!("{tag}.log"));
        let f = std::fs::File::create(&log).expect("log");
        let child = std::process::Command::new(bin())
            .args([
                "run",
                "--no-progress",
                "--admin-addr",
                &admin,
                "--control-socket",
            ])
            .arg(&control)
            .arg("-c")
            .arg(&cfg)
            .args(extra)
            .env("RUST_LOG", "info,tidemark_etcd=debug")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("spawn tidemark-mirror");
        Proc {
            child: Some(child),
            admin,
            control,
            log,
        }
    }

    /// One HTTP/1.0 request to the read-only admin server: (status code, body).
    pub fn http(&self, method: &str, path: &str) -> Option<(u16, String)> {
        let req = format!("{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
        exchange(&self.admin, &req)
    }

    /// POST a control to the control listener, as `curl -H 'Content-Type: application/json'
    /// -d '{}'` would: (status code, body).
    pub fn post(&self, path: &str) -> Option<(u16, String)> {
        self.control_request("POST", path)
    }

    /// One request to the control socket (a JSON `{}` body for POST).
    pub fn control_request(&self, method: &str, path: &str) -> Option<(u16, String)> {
        let body = if method == "POST" { "{}" } else { "" };
        let req = format!(
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let s = std::os::unix::net::UnixStream::connect(&self.control).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        roundtrip(s, &req)
    }

    /// `/statusz` as JSON, or `None` while the server is not up.
    pub fn statusz(&self) -> Option<serde_json::Value> {
        let (_, body) = self.http("GET", "/statusz")?;
        serde_json::from_str(&body).ok()
    }

    /// Polls `/statusz` until `pred` holds.
    pub async fn wait(
        &self,
        what: &str,
        t: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            if let Some(v) = self.statusz() {
                if pred(&v) {
                    return v;
                }
            }
            if t0.elapsed() > t {
                panic!(
                    "timed out waiting for {what}; statusz {:?}\nlog:\n{}",
                    self.statusz(),
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then the exit status.
    pub fn term(&mut self) -> std::process::ExitStatus {
        let c = self.child.take().expect("running");
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        wait_exit(c, Duration::from_secs(20))
    }

    /// Waits for the process to exit on its own.
    pub fn exit(&mut self, t: Duration) -> std::process::ExitStatus {
        wait_exit(self.child.take().expect("running"), t)
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn wait_exit(mut c: Child, t: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return s;
        }
        if t0.elapsed() > t {
            let _ = c.kill();
            panic!("tidemark-mirror did not exit within {t:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
