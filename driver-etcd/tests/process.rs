//! The `tidemark-mirror` binary as a process: SIGKILL at any moment and a restart converge;
//! SIGTERM exits 0; the `checkpoint` and `check-config` subcommands; bad input.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;
use support::agent::{bin, config, converge, load, num, password_auth, revision, synced, Proc};
use support::{pair, Etcd, Flags, V};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::mirror::Checkpoint;

const SEC: Duration = Duration::from_secs(1);

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
    // Slow enough (about 13 s) that order-free pages (a source with trusted progress
    // notifications) see a cursor write (every 10 s at most) before the kill, with pages
    // past it in flight or applied: the restart resumes from the cursor and puts them again.
    cfg.sync.max_ops_per_second = 300;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    a.wait("genesis under way, its cursor recorded", 30 * SEC, |s| {
        num(s, "initialSyncCopiedKeyCount") >= 600
            && (s["progressTrusted"] == false || num(s, "scanCursorWrites") >= 1)
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

/// Issue P1: a kill -9 at any point of a pipelined genesis or tail resumes exactly. Sixteen
/// Txns in flight, small pages and Txns (many chain links per second), a writer that never
/// stops (puts, deletes, multi-key Txns), and the agent killed six times during the genesis
/// and six times in the tail, at spread-out moments. The last agent must converge to the
/// source exactly.
async fn kill_loop_pipelined(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 6000, 64).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.max_txns_in_flight = 16;
    cfg.sync.page_key_limit = 200;
    cfg.sync.max_txn_ops = 32;
    // Paced so the genesis spans several incarnations (about 3 s of copying in all).
    cfg.sync.max_ops_per_second = 2000;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let url = src.url.clone();
    let stop_w = stop.clone();
    let writer = tokio::spawn(async move {
        let mut c = etcd_client::Client::connect([url.as_str()], None)
            .await
            .unwrap();
        let mut i = 0u64;
        while !stop_w.load(std::sync::atomic::Ordering::Relaxed) {
            match i % 4 {
                0 | 1 => {
                    c.put(format!("/app/w{:03}", i % 211), format!("v{i}"), None)
                        .await
                        .unwrap();
                }
                2 => {
                    c.delete(format!("/app/k{:05}", (i * 7) % 6000), None)
                        .await
                        .unwrap();
                }
                _ => {
                    let ops: Vec<etcd_client::TxnOp> = (0..5)
                        .map(|j| {
                            etcd_client::TxnOp::put(
                                format!("/app/t{:03}", (i + j * 31) % 149),
                                format!("t{i}.{j}"),
                                None,
                            )
                        })
                        .collect();
                    c.txn(etcd_client::Txn::new().and_then(ops)).await.unwrap();
                }
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    // Phase one: kills while the genesis runs (it resumes from its durable cursor each time).
    let mut in_genesis = 0;
    for round in 0..6u64 {
        let mut a = Proc::start(&cfg, dir.path(), &format!("g{round}"));
        // Spread the kills over 0.3 to 1.2 s after the start (a fixed, uneven sequence).
        tokio::time::sleep(Duration::from_millis(300 + (round * 337) % 900)).await;
        a.kill();
        if fence(&tgt, &cfg).await.is_some_and(|ck| ck.scan.is_some()) {
            in_genesis += 1;
        }
    }
    assert!(
        in_genesis > 0,
        "no kill landed mid-genesis (retune the pacing or the kill times)"
    );
    // Let one agent finish the genesis, then phase two: kills in the tail, writer running.
    let mut a = Proc::start(&cfg, dir.path(), "finish");
    a.wait("genesis done", 60 * SEC, |s| s["phase"] == "Syncing")
        .await;
    a.kill();
    for round in 0..6u64 {
        let mut a = Proc::start(&cfg, dir.path(), &format!("t{round}"));
        tokio::time::sleep(Duration::from_millis(300 + (round * 337) % 900)).await;
        a.kill();
        let ck = fence(&tgt, &cfg).await.expect("fence claimed");
        assert!(ck.scan.is_none(), "a tail agent went back to a genesis");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let mut last = Proc::start(&cfg, dir.path(), "last");
    let rev = revision(&src).await;
    last.wait("synced after the kill loop", 60 * SEC, |s| synced(s, rev))
        .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(last.term().success(), "SIGTERM exits 0:\n{}", last.log());
}
both_versions!(
    sigkill_loop_in_a_pipelined_genesis_and_tail_resumes_exactly,
    kill_loop_pipelined
);

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
    let wrong = "canary-wrong-4be1d07";
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.auth = Some(password_auth(dir.path(), "root", wrong));
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let status = a.exit(20 * SEC);
    // Refused by the start checks, as a configuration problem: exit 2, nothing written.
    assert_eq!(status.code(), Some(2), "{}", a.log());
    assert!(a.log().contains("authentication failed"), "{}", a.log());
    assert!(a.log().contains("nothing was written"), "{}", a.log());
    assert!(!a.log().contains(wrong), "the password reached the log");
}

/// A password the agent uses for real never appears in its logs (at debug level), in
/// /statusz or in /metrics, on either listener, through a run that also sees errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_leaves_its_file() {
    let Some((src, tgt)) = pair(V::V35).await else {
        return;
    };
    let canary = "canary-pw-9d41f2c7e0";
    let mut t = tgt.client().await;
    t.user_add("root", canary, None).await.unwrap();
    t.user_grant_role("root", "root").await.unwrap();
    t.auth_enable().await.unwrap();
    load(&src, "/app/", 50, 8).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.auth = Some(password_auth(dir.path(), "root", canary));
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    a.wait("synced", 30 * SEC, |s| synced(s, rev)).await;
    // An error path too: the source goes away for a moment.
    assert_eq!(a.post("/v1/pause").unwrap().0, 200);
    assert_eq!(a.post("/v1/resume").unwrap().0, 200);
    let mut seen = Vec::new();
    for path in ["/statusz", "/metrics", "/"] {
        seen.push(a.http("GET", path).unwrap().1);
    }
    seen.push(a.control_request("GET", "/statusz").unwrap().1);
    assert!(a.term().success(), "{}", a.log());
    seen.push(a.log());
    assert!(
        seen[0].contains("Syncing") || seen[0].contains("phase"),
        "{}",
        seen[0]
    );
    for (i, text) in seen.iter().enumerate() {
        assert!(
            !text.contains(canary),
            "the password leaked into output {i}:\n{text}"
        );
    }
}

/// Every bad input is refused with exit code 2 and a message that names the field, and
/// nothing is written to either etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_exit_2_and_write_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let Some((src, tgt)) = pair(V::V35).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "hunter2-canary\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (s, t) = (&src.url, &tgt.url);
    let base = |extra_source: &str, extra_target: &str, rest: &str| {
        format!(
            "source: {{endpointList: [\"{s}\"], prefix: /app/{extra_source}}}\n\
             target: {{endpointList: [\"{t}\"], prefix: /mirror/{extra_target}}}\n{rest}"
        )
    };
    let mut bomb = String::from("x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n");
    for i in 1..9 {
        let refs = vec![format!("*x{}", i - 1); 10].join(",");
        bomb.push_str(&format!("x{i}: &x{i} [{refs}]\n"));
    }
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "long prefix",
            base(&"p".repeat(5000), "", ""),
            "source.prefix",
        ),
        (
            "many excludes",
            base("", "", &format!("sync: {{excludePrefixes: [{}]}}\n", vec!["x"; 1025].join(","))),
            "sync.excludePrefixes",
        ),
        (
            "huge pageBytes",
            base("", "", "sync: {pageBytes: 18446744073709551615}\n"),
            "sync.pageBytes",
        ),
        (
            "huge watchBufferBytes",
            base("", "", "sync: {watchBufferBytes: 18446744073709551615}\n"),
            "sync.watchBufferBytes",
        ),
        ("alias bomb", format!("{bomb}{}", base("", "", "")), "aliases"),
        (
            "credentials in a URL",
            format!(
                "source: {{endpointList: [\"http://root:hunter2-canary@{}\"], prefix: /app/}}\n\
                 target: {{endpointList: [\"{t}\"], prefix: /mirror/}}\n",
                s.trim_start_matches("http://")
            ),
            "source.endpointList[0]",
        ),
        (
            "password over http",
            base(
                "",
                &format!(", auth: {{username: root, passwordFile: {}}}", pw.display()),
                "",
            ),
            "target.auth",
        ),
        (
            "a CA with insecureSkipVerify",
            format!(
                "source: {{endpointList: [\"{s}\"], prefix: /app/}}\n\
                 target: {{endpointList: [\"https://127.0.0.1:1\"], prefix: /mirror/, \
                 tls: {{caFile: {}, insecureSkipVerify: true, insecureSkipVerifyAcknowledgeRisk: true}}}}\n",
                pw.display()
            ),
            "target.tls.insecureSkipVerify",
        ),
        (
            "a world-readable password file",
            base(
                "",
                &format!(
                    ", auth: {{username: root, passwordFile: {}, plaintextAcknowledgeRisk: true}}",
                    pw.display()
                ),
                "",
            ),
            "target.auth.passwordFile",
        ),
    ];
    let before = (revision(&src).await, revision(&tgt).await);
    for (name, text, field) in &cases {
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, text).unwrap();
        for cmd in ["check-config", "run"] {
            let out = std::process::Command::new(bin())
                .args([cmd, "--config"])
                .arg(&file)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} ({cmd}): {err}");
            assert!(
                err.contains(field),
                "{name} ({cmd}): {field} not named in:\n{err}"
            );
            assert!(
                !err.contains("hunter2-canary"),
                "{name} ({cmd}) echoed a secret: {err}"
            );
            assert!(
                err.len() < 4000,
                "{name} ({cmd}): a {} byte message",
                err.len()
            );
        }
    }
    let after = (revision(&src).await, revision(&tgt).await);
    assert_eq!(before, after, "a refused config wrote to etcd");
}

/// One cluster under two names: `check-config` cannot tell and says so; `run` compares
/// cluster IDs at connect and refuses the overlapping ranges without writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_mirror_is_refused_by_cluster_identity() {
    let Some(e) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let other_name = e.url.replace("127.0.0.1", "localhost");
    assert_ne!(other_name, e.url);
    let file = dir.path().join("self.yaml");
    std::fs::write(
        &file,
        format!(
            "source: {{endpointList: [\"{}\"], prefix: /app/}}\n\
             target: {{endpointList: [\"{other_name}\"], prefix: /app/mirror/}}\n",
            e.url
        ),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("not checked without connecting"),
        "{stdout}"
    );
    let before = revision(&e).await;
    let out = std::process::Command::new(bin())
        .args(["run", "--no-progress", "--config"])
        .arg(&file)
        .args([
            "--admin-addr",
            "127.0.0.1:0",
            "--control-addr",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The start checks compare cluster IDs before the mirror starts: exit 2.
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("DirectionConflict"), "{err}");
    assert_eq!(revision(&e).await, before, "nothing written");
    // Without the start checks, the core refuses it at connect, by cluster ID, too.
    let mut c = config(&e, "/app/", &e, "/app/mirror/");
    c.target.endpoint_list = vec![other_name.clone()];
    let mut a = support::agent::InProc::start(c, 7);
    match a.stopped(20 * SEC).await {
        (tidemark_core::mirror::StopReason::Failed { kind, .. }, _) => {
            assert_eq!(kind.name(), "DirectionConflict")
        }
        other => panic!("expected DirectionConflict, got {other:?}"),
    }
    assert_eq!(revision(&e).await, before, "nothing written");
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
