//! The `tidemark-mirror` binary as a process: SIGKILL at any moment and a restart converge;
//! SIGTERM exits 0; the `checkpoint` and `check-config` subcommands; bad input.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;
use support::agent::{bin, config, converge, load, revision, Proc};
use support::{Etcd, Flags, V};
use tidemark_core::config::{AuthSpec, InitialSyncMode};
use tidemark_core::mirror::Checkpoint;

const SEC: Duration = Duration::from_secs(1);

async fn pair(v: V) -> Option<(Etcd, Etcd)> {
    let s = Etcd::start(v, Flags::default()).await?;
    let t = Etcd::start(v, Flags::default()).await?;
    Some((s, t))
}

fn num(v: &serde_json::Value, f: &str) -> i64 {
    v[f].as_i64().unwrap_or(0)
}

fn synced(v: &serde_json::Value, rev: i64) -> bool {
    v["phase"] == "Syncing" && num(v, "lastAppliedRevision") >= rev
}

async fn fence(tgt: &Etcd, c: &tidemark_core::config::MirrorConfig) -> Option<Checkpoint> {
    let mut t = tgt.client().await;
    let r = t.get(c.checkpoint_key(), None).await.unwrap();
    r.kvs()
        .first()
        .map(|kv| Checkpoint::decode(kv.value()).unwrap())
}

async fn kill_during_genesis(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 4000, 32).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.page_key_limit = 100;
    cfg.sync.max_txn_ops = 64;
    cfg.sync.max_ops_per_second = 2000;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    a.wait("genesis under way", 20 * SEC, |s| {
        num(s, "initialSyncCopiedKeyCount") >= 600
    })
    .await;
    a.kill();
    let ck = fence(&tgt, &cfg).await.expect("fence claimed");
    let scan = ck
        .scan
        .expect("killed mid-scan: the checkpoint carries the scan");
    assert!(!scan.cursor.is_empty(), "scan cursor recorded");
    // Keep writing while the agent is down.
    let mut c = src.client().await;
    c.delete("/app/k00010", None).await.unwrap();
    c.put("/app/k03999", "changed", None).await.unwrap();
    let mut b = Proc::start(&cfg, dir.path(), "b");
    let rev = revision(&src).await;
    b.wait("synced after restart", 30 * SEC, |s| synced(s, rev))
        .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(b.term().success(), "SIGTERM exits 0:\n{}", b.log());
}
both_versions!(
    sigkill_during_genesis_then_restart_converges,
    kill_during_genesis
);

async fn kill_during_tail(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 200, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    let url = src.url.clone();
    let writer = tokio::spawn(async move {
        let mut c = etcd_client::Client::connect([url.as_str()], None)
            .await
            .unwrap();
        for i in 0..600 {
            c.put(format!("/app/w{}", i % 97), format!("{i}"), None)
                .await
                .unwrap();
            if i % 5 == 0 {
                c.delete(format!("/app/k{:05}", i / 5), None).await.unwrap();
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.kill();
    let b = Proc::start(&cfg, dir.path(), "b");
    writer.await.unwrap();
    let rev = revision(&src).await;
    b.wait("caught up", 30 * SEC, |s| synced(s, rev)).await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
}
both_versions!(sigkill_during_tail_then_restart_converges, kill_during_tail);

async fn kill_during_prune(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 100, 16).await;
    load(&tgt, "/mirror/stale/", 3000, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.initial_sync.mode = InitialSyncMode::OverwriteAndPrune;
    cfg.sync.max_txn_ops = 64;
    cfg.sync.max_ops_per_second = 1000;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    a.wait("prune under way", 20 * SEC, |s| num(s, "prunedKeys") > 0)
        .await;
    a.kill();
    let ck = fence(&tgt, &cfg).await.expect("fence");
    assert!(
        ck.prune_pending,
        "killed mid-sweep: prune_pending is durable"
    );
    let b = Proc::start(&cfg, dir.path(), "b");
    let rev = revision(&src).await;
    b.wait("synced", 30 * SEC, |s| synced(s, rev)).await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert_eq!(
        fence(&tgt, &cfg).await.map(|c| c.prune_pending),
        Some(false)
    );
}
both_versions!(
    sigkill_during_prune_then_restart_converges,
    kill_during_prune
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_subcommand_and_config_errors() {
    let Some((src, tgt)) = pair(V::V35).await else {
        return;
    };
    load(&src, "/app/", 20, 8).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    let s = a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    assert!(s["conditions"]["Available"]["status"] == true);
    // The admin surface.
    let (code, metrics) = a.http("GET", "/metrics").unwrap();
    assert_eq!(code, 200);
    for m in [
        "tidemark_mirror_watermark_revision",
        "tidemark_mirror_source_revision",
        "tidemark_mirror_lag_revisions",
        "tidemark_mirror_lag_seconds",
        "tidemark_mirror_applied_txns_total",
        "tidemark_mirror_applied_ops_total",
        "tidemark_mirror_applied_bytes_total",
        "tidemark_mirror_forced_resyncs_total",
        "tidemark_mirror_backoff_attempt{kind=\"transient\"}",
        "tidemark_mirror_condition{type=\"Available\"} 1",
    ] {
        assert!(metrics.contains(m), "missing {m} in /metrics:\n{metrics}");
    }
    assert_eq!(a.http("GET", "/healthz").unwrap().0, 200);
    assert_eq!(a.http("GET", "/readyz").unwrap().0, 200);
    assert_eq!(a.post("/v1/pause").unwrap().0, 200);
    a.wait("paused", 10 * SEC, |s| s["phase"] == "Paused").await;
    assert_eq!(a.post("/v1/resume").unwrap().0, 200);
    a.wait("resumed", 10 * SEC, |s| s["phase"] == "Syncing")
        .await;
    assert!(a.term().success());
    let out = std::process::Command::new(bin())
        .args(["checkpoint", "-c"])
        .arg(dir.path().join("a.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["epoch"], 1);
    assert!(j["watermark"].as_i64().unwrap() >= rev);

    // Every problem listed at once, before anything connects.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        format!(
            "source: {{endpointList: [\"{u}\"], prefix: /app/}}\n\
             target: {{endpointList: [\"{u}\"], prefix: /app/sub/, auth: {{username: u, passwordFile: /nonexistent}}}}\n\
             sync: {{maxTxnOps: 1}}\n",
            u = src.url
        ),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["run", "-c"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "DirectionConflict",
        "target.auth.passwordFile",
        "sync.maxTxnOps",
    ] {
        assert!(err.contains(needle), "missing {needle} in:\n{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_permanent_and_writes_nothing() {
    let Some((src, tgt)) = pair(V::V34).await else {
        return;
    };
    let mut t = tgt.client().await;
    t.user_add("root", "right", None).await.unwrap();
    t.user_grant_role("root", "root").await.unwrap();
    t.auth_enable().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "wrong\n").unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.auth = Some(AuthSpec {
        username: Some("root".into()),
        password_file: Some(pw.display().to_string()),
        secret_ref: None,
    });
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let status = a.exit(20 * SEC);
    assert_eq!(status.code(), Some(1), "{}", a.log());
    assert!(a.log().contains("authentication failed"), "{}", a.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoints_keep_retrying_without_writes() {
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(&tgt, "/app/", &tgt, "/mirror/");
    cfg.source.endpoint_list = vec![format!("http://127.0.0.1:{port}")];
    let before = revision(&tgt).await;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let s = a
        .wait("source unreachable", 20 * SEC, |s| {
            s["conditions"]["SourceReachable"]["status"] == false
        })
        .await;
    assert_ne!(s["phase"], "Syncing");
    assert_eq!(revision(&tgt).await, before, "nothing written");
    assert!(a.term().success());
}
