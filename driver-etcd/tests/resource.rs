//! `tidemark-mirror run --resource NS/NAME` as a real process: the spec comes from an
//! EtcdMirror on the conformance apiserver, the mirror runs between two real etcd 3.5 servers,
//! and the EtcdMirror's status (read back through the apiserver) tells what happened.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use support::agent::{bin, config, converge, load, revision};
use support::{Etcd, Flags, V};
use tidemark_api::status::Phase;
use tidemark_api::{EtcdMirror, EtcdMirrorSpec, EtcdMirrorStatus};
use tidemark_core::config::MirrorConfig;
use tidemark_model::conformance::ConformanceServer;

const SEC: Duration = Duration::from_secs(1);
const NS: &str = "ns";

/// The agent started with `run --resource NS/NAME --kubeconfig ...`.
struct Agent {
    child: Option<Child>,
    log: PathBuf,
}

impl Agent {
    fn start(dir: &Path, kubeconfig: &Path, name: &str) -> Agent {
        Agent::start_in(dir, kubeconfig, name, &std::env::temp_dir())
    }

    /// As [`Agent::start`], with `TMPDIR` (where Secret material goes) set to `tmp`.
    fn start_in(dir: &Path, kubeconfig: &Path, name: &str, tmp: &Path) -> Agent {
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(bin())
            .args(["run", "--no-progress", "--admin-addr", &admin, "--resource"])
            .arg(format!("{NS}/{name}"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("RUST_LOG", "debug")
            .env("TMPDIR", tmp)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        Agent {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit on its own.
    async fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let t0 = std::time::Instant::now();
        let c = self.child.as_mut().unwrap();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                self.child = None;
                return s;
            }
            assert!(
                t0.elapsed() < within,
                "tidemark-mirror did not exit within {within:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then the exit status.
    async fn term(&mut self) -> std::process::ExitStatus {
        let pid = self.child.as_ref().unwrap().id();
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        self.exit(20 * SEC).await
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn apiserver(dir: &Path) -> (ConformanceServer, Api<EtcdMirror>, PathBuf) {
    let server = ConformanceServer::start().await.unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    let api = Api::namespaced(server.client().unwrap(), NS);
    (server, api, kubeconfig)
}

async fn create(api: &Api<EtcdMirror>, name: &str, c: MirrorConfig) -> EtcdMirror {
    api.create(
        &PostParams::default(),
        &EtcdMirror::new(name, EtcdMirrorSpec::from(c)),
    )
    .await
    .unwrap()
}

/// Records every distinct status the apiserver holds for `name` (polled faster than the
/// agent's fastest publish cadence), until the returned sender is dropped.
fn record(api: Api<EtcdMirror>, name: &str) -> tokio::sync::watch::Receiver<Vec<EtcdMirrorStatus>> {
    let (tx, rx) = tokio::sync::watch::channel(Vec::<EtcdMirrorStatus>::new());
    let name = name.to_string();
    tokio::spawn(async move {
        while !tx.is_closed() {
            if let Ok(Some(o)) = api.get_opt(&name).await {
                if let Some(s) = o.status {
                    tx.send_if_modified(|v| {
                        if v.last() == Some(&s) {
                            return false;
                        }
                        v.push(s);
                        true
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    rx
}

async fn wait_status(
    seen: &mut tokio::sync::watch::Receiver<Vec<EtcdMirrorStatus>>,
    agent: &Agent,
    what: &str,
    within: Duration,
    pred: impl Fn(&EtcdMirrorStatus) -> bool,
) -> EtcdMirrorStatus {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(s) = seen.borrow_and_update().last().filter(|s| pred(s)) {
            return s.clone();
        }
        if tokio::time::timeout_at(deadline, seen.changed())
            .await
            .is_err()
        {
            panic!(
                "timed out after {within:?} waiting for {what}; last status {:#?}\nlog:\n{}",
                seen.borrow().last(),
                agent.log()
            );
        }
    }
}

fn condition(s: &EtcdMirrorStatus, t: &str) -> (String, Option<i64>) {
    let c = s
        .condition(t)
        .unwrap_or_else(|| panic!("no condition {t} in {s:#?}"));
    (c.status.clone(), c.observed_generation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdmirror_goes_through_initial_sync_syncing_draining_and_drained() {
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, api, kubeconfig) = apiserver(dir.path()).await;
    load(&src, "/app/", 2000, 64).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    // Paced so that genesis and the drain's catch-up each last a few publish intervals.
    cfg.sync.max_ops_per_second = 500;
    let created = create(&api, "m", cfg).await;
    assert_eq!(created.metadata.generation, Some(1));
    let mut seen = record(api.clone(), "m");
    let mut agent = Agent::start(dir.path(), &kubeconfig, "m");

    let rev = revision(&src).await;
    let s = wait_status(&mut seen, &agent, "Syncing", 60 * SEC, |s| {
        s.phase == Phase::Syncing && s.last_applied_revision >= rev
    })
    .await;
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(
        condition(&s, "InitialSyncComplete"),
        ("True".into(), Some(1))
    );
    assert_eq!(s.initial_sync_copied_key_count, 2000);
    assert_eq!(s.role, "Mirror");

    // A backlog for the drain to catch up on (5 s at 500 ops/s, longer than the agent's 2 s
    // spec poll), then the drain through a spec update.
    load(&src, "/app/burst/", 2500, 64).await;
    let patched = api
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "Drain"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    let source_rev = revision(&src).await;

    let s = wait_status(&mut seen, &agent, "Drained", 60 * SEC, |s| {
        s.phase == Phase::Drained
    })
    .await;
    let phases: Vec<Phase> = seen.borrow().iter().map(|s| s.phase).collect();
    eprintln!("phases seen on the apiserver: {phases:?}");
    let mut want = [
        Phase::InitialSync,
        Phase::Syncing,
        Phase::Draining,
        Phase::Drained,
    ]
    .into_iter()
    .peekable();
    for p in &phases {
        if want.peek() == Some(p) {
            want.next();
        }
    }
    assert!(
        want.peek().is_none(),
        "phases seen on the apiserver: {phases:?}"
    );

    assert_eq!(
        s.observed_generation,
        Some(2),
        "the drain acted on generation 2"
    );
    assert_eq!(
        condition(&s, "InitialSyncComplete"),
        ("True".into(), Some(2))
    );
    assert_eq!(condition(&s, "CutoverReady"), ("True".into(), Some(2)));
    assert_eq!(s.last_applied_revision, source_rev);
    assert_eq!(s.source_revision, source_rev);
    assert_eq!(s.lag_revisions, 0);
    assert_eq!(s.role, "Primary");
    assert!(s.epoch >= 1);
    let cut = s.cutover.clone().expect("cutover published");
    assert_eq!(cut.drained_revision, source_rev);
    assert_eq!(cut.drain_target_revision, source_rev);
    assert_eq!(cut.counts.source_key_count, 4500);
    assert_eq!(cut.counts.target_key_count, 4500);
    assert_eq!(
        (cut.counts.missing, cut.counts.divergent, cut.counts.orphan),
        (0, 0, 0)
    );
    assert!(s.applied_ops >= 4500, "{s:#?}");
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;

    let o = api.get("m").await.unwrap();
    assert_eq!(o.metadata.generation, Some(2));
    assert_eq!(o.status.unwrap().observed_generation, o.metadata.generation);
    // Drained stops the mirror; SIGTERM ends the post-drain linger.
    let st = agent.term().await;
    assert!(st.success(), "{st:?}\n{}", agent.log());

    // The way there, as Events regarding the EtcdMirror (`kubectl get events`).
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(api.clone().into_client(), NS);
    let list = events.list(&Default::default()).await.unwrap();
    let mut reasons = Vec::new();
    for e in &list.items {
        let regarding = e.regarding.as_ref().unwrap();
        assert_eq!(regarding.kind.as_deref(), Some("EtcdMirror"));
        assert_eq!(regarding.name.as_deref(), Some("m"));
        assert_eq!(regarding.uid, created.metadata.uid);
        assert_eq!(e.reporting_controller.as_deref(), Some("tidemark-mirror"));
        reasons.push(e.reason.clone().unwrap_or_default());
    }
    for want in [
        "InitialSync",
        "Syncing",
        "Draining",
        "CutoverReady",
        "Drained",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event: {reasons:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_etcdmirror_stops_the_agent() {
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, api, kubeconfig) = apiserver(dir.path()).await;
    load(&src, "/app/", 50, 8).await;
    create(&api, "gone", config(&src, "/app/", &tgt, "/mirror/")).await;
    let mut seen = record(api.clone(), "gone");
    let mut agent = Agent::start(dir.path(), &kubeconfig, "gone");
    wait_status(&mut seen, &agent, "Syncing", 30 * SEC, |s| {
        s.phase == Phase::Syncing
    })
    .await;
    api.delete("gone", &DeleteParams::default()).await.unwrap();
    let st = agent.exit(20 * SEC).await;
    assert!(st.success(), "{st:?}\n{}", agent.log());
    assert!(
        agent.log().contains("EtcdMirror was deleted"),
        "{}",
        agent.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_spec_is_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, api, kubeconfig) = apiserver(dir.path()).await;
    // Nothing listens on these ports: a connection attempt would retry, not exit.
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let mut c = MirrorConfig::new("/app/", "/mirror/");
    c.source.endpoint_list = vec![format!("https://127.0.0.1:{}", free())];
    c.target.endpoint_list = vec![format!("http://127.0.0.1:{}", free())];
    // The conformance server does not run the CRD's CEL rules, so it stores this spec the
    // way a cluster without the CRD rules (or an older CRD) would.
    create(&api, "bad", c).await;
    let mut agent = Agent::start(dir.path(), &kubeconfig, "bad");
    let st = agent.exit(20 * SEC).await;
    let log = agent.log();
    assert_eq!(st.code(), Some(2), "{log}");
    for needle in ["EtcdMirror ns/bad", "source.tls", "https://"] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
    assert!(!log.contains("starting mirror"), "{log}");

    // A missing resource is an error too, not a silent wait.
    let mut agent = Agent::start(dir.path(), &kubeconfig, "absent");
    let st = agent.exit(20 * SEC).await;
    assert_eq!(st.code(), Some(2), "{}", agent.log());
    assert!(
        agent.log().contains("ns/absent not found"),
        "{}",
        agent.log()
    );
}

/// The password of an `auth.secretRef` never reaches the EtcdMirror (spec or status), the
/// agent's log, or a file that outlives the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_password_stays_out_of_status_and_logs() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let canary = "canary-secret-3c9e51a2";
    let mut t = tgt.client().await;
    t.user_add("root", canary, None).await.unwrap();
    t.user_grant_role("root", "root").await.unwrap();
    t.auth_enable().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (server, api, kubeconfig) = apiserver(dir.path()).await;
    let secrets: Api<Secret> = Api::namespaced(server.client().unwrap(), NS);
    let mut secret = Secret::default();
    secret.metadata.name = Some("target-auth".into());
    secret.data = Some(
        [
            ("username".to_string(), ByteString(b"root".to_vec())),
            (
                "password".to_string(),
                ByteString(canary.as_bytes().to_vec()),
            ),
        ]
        .into(),
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    load(&src, "/app/", 50, 16).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.auth = Some(tidemark_core::config::AuthSpec {
        secret_ref: Some(tidemark_core::config::SecretRef {
            name: "target-auth".into(),
        }),
        plaintext_acknowledge_risk: true,
        ..Default::default()
    });
    create(&api, "s", cfg).await;
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut seen = record(api.clone(), "s");
    let mut agent = Agent::start_in(dir.path(), &kubeconfig, "s", &tmp);
    let rev = revision(&src).await;
    wait_status(&mut seen, &agent, "Syncing", 60 * SEC, |s| {
        s.phase == Phase::Syncing && s.last_applied_revision >= rev
    })
    .await;
    let object = serde_json::to_string(&api.get("s").await.unwrap()).unwrap();
    assert!(object.contains("lastAppliedRevision"), "{object}");
    assert!(
        !object.contains(canary),
        "the password reached the EtcdMirror: {object}"
    );
    assert!(agent.term().await.success(), "{}", agent.log());
    assert!(agent.log().contains("spec read from the EtcdMirror"));
    assert!(
        !agent.log().contains(canary),
        "the password reached the log"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "the Secret material outlived the agent"
    );
}

/// `preflight --resource` reads the spec (and its Secrets) as `run --resource` does and
/// checks it against the live clusters, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_reads_the_etcdmirror() {
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, api, kubeconfig) = apiserver(dir.path()).await;
    load(&src, "/app/", 20, 16).await;
    create(&api, "p", config(&src, "/app/", &tgt, "/mirror/")).await;
    let before = revision(&tgt).await;
    let out = std::process::Command::new(bin())
        .args(["preflight", "--output", "json", "--resource"])
        .arg(format!("{NS}/p"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["result"], "pass", "{j}");
    let checks: Vec<&str> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect();
    for c in [
        "source.read",
        "target.write",
        "fence",
        "target.empty",
        "source.size",
    ] {
        assert!(checks.contains(&c), "{c} missing: {j}");
    }
    assert_eq!(
        revision(&tgt).await,
        before,
        "preflight wrote to the target"
    );
}
