//! Operator-facing failure scenarios on real etcd 3.4 and 3.5, with the real binary:
//! SIGKILL in the middle of a split revision; compaction during a drain; deletes made while
//! the agent is down, then compaction past its watermark (where a plain watch-based copy is
//! left with stale keys); and a Sync agent meeting a target that has cut over.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use std::time::Duration;
use support::agent::{config, converge, load, num, revision, synced, Proc};
use support::throttle::Throttle;
use support::{pair, Etcd, V};
use tidemark_core::mirror::{Checkpoint, Role};

const SEC: Duration = Duration::from_secs(1);

async fn fence(tgt: &Etcd, c: &tidemark_core::config::MirrorConfig) -> Checkpoint {
    let r = tgt
        .client()
        .await
        .get(c.checkpoint_key(), None)
        .await
        .unwrap();
    Checkpoint::decode(r.kvs()[0].value()).unwrap()
}

/// One source revision of 600 puts, split into paced 8-op Txns; SIGKILL while the fence
/// records the split; a new agent finishes it from the recorded progress.
async fn kill_mid_split(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/big/", 600, 8).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.max_txn_ops = 8;
    cfg.sync.max_txns_in_flight = 1;
    cfg.sync.max_ops_per_second = 200;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    // One revision of 600 deletes (a put Txn is capped by the source's --max-txn-ops).
    let mut c = src.client().await;
    let big = c
        .delete(
            "/app/big/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let deadline = tokio::time::Instant::now() + 20 * SEC;
    let split = loop {
        let ck = fence(&tgt, &cfg).await;
        if let Some(s) = ck.split {
            if s.done > 0 {
                break s;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no split recorded: {:?}\n{}",
            ck,
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(split.rev, big);
    a.kill();
    let ck = fence(&tgt, &cfg).await;
    assert!(
        ck.watermark < big,
        "the watermark never claims a split revision"
    );
    let mut b = Proc::start(&cfg, dir.path(), "b");
    let s = b.wait("split finished", 60 * SEC, |s| synced(s, big)).await;
    assert!(
        num(&s, "epoch") > ck.epoch as i64,
        "the new agent claimed the fence from the killed one"
    );
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(fence(&tgt, &cfg).await.split.is_none());
    assert!(b.term().success(), "{}", b.log());
}
both_versions!(
    sigkill_in_the_middle_of_a_split_revision_resumes_it,
    kill_mid_split
);

/// A drain with a paced backlog, and the source compacted to its head while the drain
/// catches up: the drain still cuts over with a target equal to the source.
async fn compaction_during_drain(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 200, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.max_ops_per_second = 300;
    cfg.sync.max_txn_ops = 16;
    let a = Proc::start_with(&cfg, dir.path(), "a", &["--drain-linger", "30s"]);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    load(&src, "/app/burst/", 900, 16).await;
    assert_eq!(a.post("/v1/drain").unwrap().0, 200);
    a.wait("draining", 10 * SEC, |s| s["phase"] == "Draining")
        .await;
    let mut c = src.client().await;
    let head = revision(&src).await;
    c.compact(head, None).await.unwrap();
    let s = a
        .wait("cut over", 90 * SEC, |s| {
            s["conditions"]["CutoverReady"]["status"] == true || s["phase"] == "Failed"
        })
        .await;
    assert_eq!(s["phase"], "Drained", "{s}\n{}", a.log());
    assert!(num(&s["cutover"], "drainedRevision") >= head, "{s}");
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert_eq!(fence(&tgt, &cfg).await.role, Role::Primary);
}
both_versions!(
    compaction_during_a_drain_still_cuts_over,
    compaction_during_drain
);

/// Keys deleted while no agent runs, then the source compacted past the watermark: the
/// deletes can no longer be watched. The agent recovers from the compaction by copying the
/// range again with a prune, so the deleted keys do not survive in the target.
async fn deletes_while_down_then_compaction(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 300, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    assert!(a.term().success(), "{}", a.log());
    let watermark = fence(&tgt, &cfg).await.watermark;
    let mut c = src.client().await;
    for i in (0..300).step_by(3) {
        c.delete(format!("/app/k{i:05}"), None).await.unwrap();
    }
    c.put("/app/new-while-down", "x", None).await.unwrap();
    let head = revision(&src).await;
    c.compact(head, None).await.unwrap();
    assert!(head > watermark);
    let mut b = Proc::start(&cfg, dir.path(), "b");
    let s = b.wait("recovered", 60 * SEC, |s| synced(s, head)).await;
    assert!(num(&s, "forcedResyncCount") >= 1, "{s}");
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    let stale = tgt
        .client()
        .await
        .get("/mirror/k00000", None)
        .await
        .unwrap();
    assert!(stale.kvs().is_empty(), "a key deleted while down survived");
    assert!(b.term().success(), "{}", b.log());
}
both_versions!(
    deletes_while_down_then_compaction_leave_no_stale_keys,
    deletes_while_down_then_compaction
);

/// After a cut-over the target is primary: a Sync agent started against it refuses, says
/// why, and writes nothing.
async fn sync_meets_primary(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 50, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = Proc::start_with(&cfg, dir.path(), "a", &["--drain-linger", "0s"]);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| synced(s, rev)).await;
    assert_eq!(a.post("/v1/drain").unwrap().0, 200);
    assert!(a.exit(60 * SEC).success(), "{}", a.log());
    assert_eq!(fence(&tgt, &cfg).await.role, Role::Primary);
    load(&src, "/app/later/", 10, 16).await;
    let before = revision(&tgt).await;
    let mut b = Proc::start(&cfg, dir.path(), "b");
    let st = b.exit(30 * SEC);
    assert_eq!(st.code(), Some(1), "{}", b.log());
    assert!(b.log().contains("Primary"), "{}", b.log());
    assert_eq!(
        revision(&tgt).await,
        before,
        "a Sync agent wrote to a primary"
    );
}
both_versions!(
    a_sync_agent_refuses_a_target_that_cut_over,
    sync_meets_primary
);

/// A learner member of `tgt`'s cluster, as a raw etcd process; killed on drop.
struct Learner {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Learner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn add_learner(v: V, tgt: &Etcd) -> Learner {
    let peer = format!("http://{}", support::agent::free_addr());
    let url = format!("http://{}", support::agent::free_addr());
    tgt.client()
        .await
        .member_add(
            [peer.as_str()],
            Some(etcd_client::MemberAddOptions::new().with_is_learner()),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let leader_peer = tgt.flag("initial-advertise-peer-urls").unwrap();
    let log = std::fs::File::create(dir.path().join("learner.log")).unwrap();
    let child = std::process::Command::new(support::etcd_bin(v).unwrap())
        .args([
            "--name=l".to_string(),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=t={leader_peer},l={peer}"),
            "--initial-cluster-state=existing".to_string(),
            "--log-level=warn".to_string(),
        ])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let learner = Learner {
        child,
        url,
        _dir: dir,
    };
    let deadline = tokio::time::Instant::now() + 20 * SEC;
    loop {
        if let Ok(mut c) = etcd_client::Client::connect([learner.url.as_str()], None).await {
            if c.status().await.is_ok_and(|s| s.is_learner()) {
                return learner;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the learner did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A learner listed as the target's only endpoint: LearnerEndpoint says so, and nothing is
/// written. With a voter after it in the list, the agent moves on and mirrors.
async fn learner_endpoint(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    let learner = add_learner(v, &tgt).await;
    load(&src, "/app/", 30, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.endpoint_list = vec![learner.url.clone()];
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let s = a
        .wait("LearnerEndpoint", 30 * SEC, |s| {
            s["conditions"]["LearnerEndpoint"]["status"] == true
        })
        .await;
    assert!(
        s["conditions"]["LearnerEndpoint"]["message"]
            .as_str()
            .unwrap()
            .contains("voting members"),
        "{s}"
    );
    assert_ne!(s["phase"], "Syncing", "{s}");
    assert!(a.term().success(), "{}", a.log());
    let kvs = tgt
        .client()
        .await
        .get(
            "/mirror/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert!(kvs.kvs().is_empty(), "nothing written through a learner");

    cfg.target.endpoint_list = vec![learner.url.clone(), tgt.url.clone()];
    let mut b = Proc::start(&cfg, dir.path(), "b");
    let rev = revision(&src).await;
    b.wait("synced past the learner", 30 * SEC, |s| synced(s, rev))
        .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(b.term().success(), "{}", b.log());
}
both_versions!(a_learner_endpoint_is_reported_and_skipped, learner_endpoint);

/// Target throttling. While the target answers Txns with etcd's "too many requests" (a fault
/// proxy in front of the real server: a real one sends it only when its apply lags its commit
/// by 5,000 entries), TargetThrottled is True and nothing is lost; once it stops, the
/// condition clears and the target converges.
async fn target_throttled(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    let proxy = Throttle::start(tgt.url.trim_start_matches("http://")).await;
    load(&src, "/app/", 30, 16).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.endpoint_list = vec![proxy.url.clone()];
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    a.wait("synced through the proxy", 30 * SEC, |s| synced(s, rev))
        .await;
    proxy.set(true);
    load(&src, "/app/more/", 20, 16).await;
    let s = a
        .wait("TargetThrottled", 30 * SEC, |s| {
            s["conditions"]["TargetThrottled"]["status"] == true
        })
        .await;
    assert!(proxy.refused() > 0, "{s}");
    proxy.set(false);
    let rev = revision(&src).await;
    a.wait("synced once the throttling stops", 60 * SEC, |s| {
        synced(s, rev) && s["conditions"]["TargetThrottled"]["status"] != true
    })
    .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(a.term().success(), "{}", a.log());
}
both_versions!(target_throttling_is_reported_then_clears, target_throttled);

/// A source written faster, during the scan, than `sync.watchBufferBytes` holds: the
/// genesis stops reading its watch instead of starting over, replays it from the base once
/// the scan is done, and converges.
async fn busy_source_during_a_long_scan(v: V) {
    let Some((src, tgt)) = pair(v).await else {
        return;
    };
    load(&src, "/app/", 10_000, 64).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.watch_buffer_bytes = 64 * 1024;
    // A paced scan (about 5 s) leaves the writer below time to fill the buffer.
    cfg.sync.max_ops_per_second = 2_000;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let mut c = src.client().await;
    let big = "w".repeat(1024);
    let mut paused = false;
    for i in 0..3_000 {
        c.put(format!("/app/w/{i:05}"), big.clone(), None)
            .await
            .unwrap();
        if i % 20 == 19 {
            let s = a.statusz().unwrap_or_default();
            if num(&s, "genesisWatchPauses") >= 1 {
                paused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(paused, "the writer never filled the buffer: {}", a.log());
    let head = revision(&src).await;
    let s = a.wait("synced", 60 * SEC, |s| synced(s, head)).await;
    assert_eq!(num(&s, "scanRestartCount"), 0, "{s}");
    assert_eq!(num(&s, "genesisWatchPauses"), 1, "{s}");
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert!(a.term().success(), "{}", a.log());
}
both_versions!(
    a_busy_source_pauses_the_genesis_watch_and_converges,
    busy_source_during_a_long_scan
);
