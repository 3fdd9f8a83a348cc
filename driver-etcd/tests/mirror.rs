//! The mirror on real etcd (E1): each test runs the agent against two real servers of one
//! version and ends by comparing target and source key by key.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;
use support::agent::{config, converge, diff, load, revision, InProc};
use support::{Etcd, Flags, V};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::mirror::io::{FailKind, StopReason};
use tidemark_core::mirror::{ConditionType, Phase};

const SEC: Duration = Duration::from_secs(1);

async fn pair(v: V, tflags: Flags) -> Option<(Etcd, Etcd)> {
    let s = Etcd::start(v, Flags::default()).await?;
    let t = Etcd::start(v, tflags).await?;
    Some((s, t))
}

fn syncing(s: &tidemark_core::mirror::Status) -> bool {
    s.phase == Phase::Syncing && s.condition(ConditionType::InitialSyncComplete)
}

async fn cold_start_and_live_tail(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 500, 64).await;
    let mut c = src.client().await;
    c.put("/elsewhere/x", "not mirrored", None).await.unwrap();
    let mut a = InProc::start(config(&src, "/app/", &tgt, "/mirror/"), 1);
    let rev = revision(&src).await;
    a.wait("initial sync", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev - 1
    })
    .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    let s = a.now();
    assert_eq!(s.initial_sync_copied_key_count, 500);

    // Live tail: one source revision, one target Txn.
    for i in 0..10 {
        let before = a.now();
        let r = c
            .put(format!("/app/live{i}"), "x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        let after = a
            .wait("live put applied", 10 * SEC, |s| {
                s.last_applied_revision >= r
            })
            .await;
        assert_eq!(
            after.applied_txns,
            before.applied_txns + 1,
            "one revision, one Txn"
        );
    }
    // A multi-key source Txn is one target Txn too, and deletes replicate.
    let before = a.now();
    let r = c
        .txn(etcd_client::Txn::new().and_then(vec![
            etcd_client::TxnOp::put("/app/t1", "a", None),
            etcd_client::TxnOp::put("/app/t2", "b", None),
            etcd_client::TxnOp::delete("/app/k00001", None),
        ]))
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let after = a
        .wait("txn applied", 10 * SEC, |s| s.last_applied_revision >= r)
        .await;
    assert_eq!(after.applied_txns, before.applied_txns + 1);
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert_eq!(a.shutdown().await, StopReason::Shutdown);
}
both_versions!(
    cold_start_then_one_revision_one_txn,
    cold_start_and_live_tail
);

/// `sync.sourceReadPercent`: a genesis that may keep the source busy a fifth of the time
/// waits between its reads, and still copies every key.
async fn source_share(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 3000, 256).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.page_key_limit = 200;
    cfg.sync.source_read_percent = 20;
    let mut a = InProc::start(cfg, 5);
    let rev = revision(&src).await;
    let s = a
        .wait("initial sync", 60 * SEC, |s| {
            syncing(s) && s.last_applied_revision >= rev
        })
        .await;
    assert_eq!(s.initial_sync_copied_key_count, 3000);
    assert!(
        s.source_read_wait_seconds > 0.0,
        "no read waited for the source's share: {s:?}"
    );
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    assert_eq!(a.shutdown().await, StopReason::Shutdown);
}
both_versions!(
    a_genesis_at_a_fifth_of_the_source_waits_and_copies_everything,
    source_share
);

async fn compaction_during_genesis(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 3000, 32).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    // Slow the scan down so writes and a compaction land in the middle of it.
    cfg.sync.page_key_limit = 100;
    cfg.sync.max_txn_ops = 64;
    cfg.sync.max_ops_per_second = 3000;
    let mut a = InProc::start(cfg, 2);
    a.wait("genesis started", 10 * SEC, |s| {
        s.initial_sync_copied_key_count > 0
    })
    .await;
    let mut c = src.client().await;
    for i in 0..200 {
        c.put(format!("/app/k{:05}", i * 7), format!("updated{i}"), None)
            .await
            .unwrap();
        if i % 50 == 0 {
            c.delete(format!("/app/k{:05}", 2999 - i), None)
                .await
                .unwrap();
        }
    }
    let rev = revision(&src).await;
    c.compact(rev, None).await.unwrap();
    c.put("/app/after-compaction", "x", None).await.unwrap();
    let rev = revision(&src).await;
    a.wait("synced after compaction", 30 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(
    compaction_during_genesis_converges,
    compaction_during_genesis
);

async fn restart_resume(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 300, 16).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg.clone(), 3);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    assert_eq!(a.shutdown().await, StopReason::Shutdown);
    let epoch1 = {
        let mut t = tgt.client().await;
        let fence = t.get(cfg.checkpoint_key(), None).await.unwrap();
        let ck = tidemark_core::mirror::Checkpoint::decode(fence.kvs()[0].value()).unwrap();
        assert!(ck.scan.is_none() && ck.split.is_none());
        ck.epoch
    };
    // Changes while the agent is down, including deletes (make-mirror loses these).
    let mut c = src.client().await;
    for i in 0..20 {
        c.delete(format!("/app/k{:05}", i), None).await.unwrap();
        c.put(format!("/app/new{i}"), "n", None).await.unwrap();
    }
    let rev = revision(&src).await;
    let mut b = InProc::start(cfg.clone(), 4);
    let s = b
        .wait("resumed", 20 * SEC, |s| {
            syncing(s) && s.last_applied_revision >= rev
        })
        .await;
    assert_eq!(s.initial_sync_copied_key_count, 0, "no rescan on resume");
    assert_eq!(s.epoch, epoch1 + 1, "a new process claims the next epoch");
    assert!(
        s.applied_ops <= 40 + 20,
        "only the missed revisions were applied: {}",
        s.applied_ops
    );
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    b.shutdown().await;
}
both_versions!(restart_resumes_without_rescan, restart_resume);

async fn two_agents(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 100, 16).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg.clone(), 5);
    let rev = revision(&src).await;
    a.wait("a synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    let mut b = InProc::start(cfg.clone(), 6);
    b.wait("b synced", 20 * SEC, |s| syncing(s) && s.epoch == 2)
        .await;
    // A learns at its next write that the fence moved on.
    let mut c = src.client().await;
    c.put("/app/after-b", "x", None).await.unwrap();
    let (reason, _) = a.stopped(20 * SEC).await;
    match reason {
        StopReason::Failed {
            kind: FailKind::FenceLost,
            ..
        } => {}
        other => panic!("agent A should lose the fence, got {other:?}"),
    }
    for i in 0..10 {
        c.put(format!("/app/b{i}"), "x", None).await.unwrap();
    }
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    b.shutdown().await;
}
both_versions!(two_agents_fence_decides, two_agents);

async fn delete_range_split(v: V) {
    let Some((src, tgt)) = pair(
        v,
        Flags {
            max_txn_ops: Some(128),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    load(&src, "/app/d/", 1000, 8).await;
    load(&src, "/app/keep/", 10, 8).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg, 7);
    let rev = revision(&src).await;
    a.wait("synced", 30 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    let mut c = src.client().await;
    let r = c
        .delete(
            "/app/d/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let s = a
        .wait("delete applied", 30 * SEC, |s| s.last_applied_revision >= r)
        .await;
    assert!(
        s.split_revision_count >= 1,
        "the 1000-key revision was split"
    );
    assert!(!s.condition(ConditionType::RevisionSplit), "split finished");
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(
    delete_range_of_1000_keys_splits_then_converges,
    delete_range_split
);

async fn too_large_value(v: V) {
    let Some((src, tgt)) = pair(
        v,
        Flags {
            max_request_bytes: Some(64 * 1024),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    load(&src, "/app/", 10, 8).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg, 8);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    let mut c = src.client().await;
    c.put("/app/secret-big-key", "x".repeat(200 * 1024), None)
        .await
        .unwrap();
    let (reason, _) = a.stopped(30 * SEC).await;
    match reason {
        StopReason::Failed {
            kind: FailKind::TooLarge,
            message,
        } => {
            assert!(
                !message.contains("secret-big-key"),
                "key must be redacted: {message}"
            );
            assert!(message.contains("/#"), "redacted key shown: {message}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // Everything before the big value is there; nothing after it was written.
    let (want, have) = diff(&src, "/app/", &tgt, "/mirror/", &[]).await;
    assert_eq!(want.len(), have.len() + 1);
    assert!(have.iter().all(|kv| want.contains(kv)));
}
both_versions!(
    value_over_max_request_bytes_is_permanent_and_redacted,
    too_large_value
);

async fn nospace(v: V) {
    let Some((src, mut tgt)) = pair(
        v,
        Flags {
            quota_backend_bytes: Some(1 << 20),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    load(&src, "/app/", 10, 8).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg, 9);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    let mut c = src.client().await;
    for i in 0..300 {
        c.put(format!("/app/big{i}"), "b".repeat(100 * 1024), None)
            .await
            .unwrap();
        if a.now().condition(ConditionType::TargetQuotaExhausted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.wait("quota exhausted", 30 * SEC, |s| {
        s.condition(ConditionType::TargetQuotaExhausted)
    })
    .await;
    // Operator fix: more quota, then disarm the alarm.
    tgt.restart_with(|args| {
        args.retain(|a| !a.starts_with("--quota-backend-bytes"));
        args.push(format!("--quota-backend-bytes={}", 64 << 20));
    })
    .await;
    let mut t = tgt.client().await;
    // `etcdctl alarm disarm`: deactivate every raised alarm for its member.
    let alarms = t
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert!(!alarms.alarms().is_empty(), "the NOSPACE alarm is raised");
    for m in alarms.alarms() {
        let mut o = etcd_client::AlarmOptions::new();
        o.with_member(m.member_id());
        t.alarm(etcd_client::AlarmAction::Deactivate, m.alarm(), Some(o))
            .await
            .unwrap();
    }
    let rev = revision(&src).await;
    a.wait("recovered", 30 * SEC, |s| {
        !s.condition(ConditionType::TargetQuotaExhausted) && s.last_applied_revision >= rev
    })
    .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(nospace_parks_then_recovers_after_disarm, nospace);

async fn corrupt_checkpoint(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 10, 8).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut t = tgt.client().await;
    t.put(cfg.checkpoint_key(), "{\"v\":1, garbage", None)
        .await
        .unwrap();
    let before = revision(&tgt).await;
    let mut a = InProc::start(cfg, 10);
    let (reason, _) = a.stopped(20 * SEC).await;
    match reason {
        StopReason::Failed {
            kind: FailKind::CheckpointInvalid,
            ..
        } => {}
        other => panic!("expected CheckpointInvalid, got {other:?}"),
    }
    assert_eq!(revision(&tgt).await, before, "fail closed: nothing written");
}
both_versions!(corrupt_checkpoint_fails_closed, corrupt_checkpoint);

async fn idle_watermark(v: V) {
    let Some(src) = Etcd::start(
        v,
        Flags {
            progress_notify_interval: Some("500ms"),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let Some(tgt) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 10, 8).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    let mut a = InProc::start(cfg, 11);
    let rev = revision(&src).await;
    let s = a
        .wait("synced", 20 * SEC, |s| {
            syncing(s) && s.last_applied_revision >= rev
        })
        .await;
    // The version floor: both servers are above 3.4.0; progress is trusted only from
    // 3.4.31 / 3.5.13 (Debian ships 3.4.23 and 3.5.16).
    assert!(s.source_version.starts_with(match v {
        V::V34 => "3.4.",
        V::V35 => "3.5.",
    }));
    assert_eq!(
        s.progress_trusted,
        v == V::V35,
        "progress trust for {}",
        s.source_version
    );
    // Writes outside the mirrored range move the source revision only.
    let mut c = src.client().await;
    for i in 0..5 {
        c.put(format!("/other/{i}"), "x", None).await.unwrap();
    }
    let busy = revision(&src).await;
    let in_scope = s.last_applied_revision;
    if v == V::V35 {
        a.wait("idle watermark advance", 20 * SEC, |s| {
            s.last_applied_revision >= busy
        })
        .await;
    } else {
        tokio::time::sleep(8 * SEC).await;
        assert_eq!(
            a.now().last_applied_revision,
            in_scope,
            "untrusted progress must not move the watermark"
        );
    }
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(
    idle_watermark_advances_only_with_trusted_progress,
    idle_watermark
);

async fn exclude_and_rewrite(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/a/", 50, 8).await;
    load(&src, "/app/skip/", 50, 8).await;
    load(&src, "/app/z/", 50, 8).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.sync.dest_prefix = "dst/".into();
    cfg.sync.exclude_prefixes = vec!["skip/".into()];
    let mut a = InProc::start(cfg, 12);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    let mut c = src.client().await;
    c.put("/app/skip/live", "x", None).await.unwrap();
    c.put("/app/a/live", "x", None).await.unwrap();
    c.delete(
        "/app/z/",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    converge(&src, "/app/", &tgt, "/mirror/dst/", &["skip/"], 10 * SEC).await;
    let mut t = tgt.client().await;
    let stray = t
        .get(
            "/mirror/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    assert!(
        stray
            .kvs()
            .iter()
            .all(|kv| kv.key().starts_with(b"/mirror/dst/")),
        "everything under destPrefix"
    );
    a.shutdown().await;
}
both_versions!(exclude_prefixes_and_prefix_rewrite, exclude_and_rewrite);

async fn leases(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    let mut c = src.client().await;
    let lease = c.lease_grant(600, None).await.unwrap().id();
    for i in 0..7 {
        c.put(
            format!("/app/leased{i}"),
            "x",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    }
    load(&src, "/app/plain/", 5, 8).await;
    let mut a = InProc::start(config(&src, "/app/", &tgt, "/mirror/"), 13);
    let rev = revision(&src).await;
    let s = a
        .wait("synced", 20 * SEC, |s| {
            syncing(s) && s.last_applied_revision >= rev
        })
        .await;
    assert_eq!(s.lease_backed_key_count, 7);
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(lease_backed_keys_are_counted, leases);

async fn require_empty(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 5, 8).await;
    let mut t = tgt.client().await;
    t.put("/mirror/someone-elses", "x", None).await.unwrap();
    let before = revision(&tgt).await;
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.initial_sync.mode = InitialSyncMode::RequireEmpty;
    let mut a = InProc::start(cfg, 14);
    let (reason, s) = a.stopped(20 * SEC).await;
    assert!(
        matches!(
            reason,
            StopReason::Failed {
                kind: FailKind::EmptyTargetViolation,
                ..
            }
        ),
        "{reason:?}"
    );
    assert!(s.condition(ConditionType::EmptyTargetViolation));
    assert_eq!(revision(&tgt).await, before, "no write");
}
both_versions!(require_empty_refuses_non_empty_target, require_empty);

async fn overwrite_and_prune(v: V) {
    let Some((src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 200, 8).await;
    load(&tgt, "/mirror/", 300, 4).await; // stale: overlapping and extra keys
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.initial_sync.mode = InitialSyncMode::OverwriteAndPrune;
    let mut a = InProc::start(cfg, 15);
    let rev = revision(&src).await;
    let s = a
        .wait("synced", 20 * SEC, |s| {
            syncing(s) && s.last_applied_revision >= rev
        })
        .await;
    assert_eq!(s.pruned_keys, 100);
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(overwrite_and_prune_removes_stale_keys, overwrite_and_prune);

async fn source_restart(v: V) {
    let Some((mut src, tgt)) = pair(v, Flags::default()).await else {
        return;
    };
    load(&src, "/app/", 100, 8).await;
    let mut a = InProc::start(config(&src, "/app/", &tgt, "/mirror/"), 16);
    let rev = revision(&src).await;
    a.wait("synced", 20 * SEC, |s| {
        syncing(s) && s.last_applied_revision >= rev
    })
    .await;
    // The source goes away under the watch and comes back on the same address.
    src.restart().await;
    let mut c = src.client().await;
    for i in 0..20 {
        c.put(format!("/app/after-restart{i}"), "x", None)
            .await
            .unwrap();
    }
    c.delete("/app/k00005", None).await.unwrap();
    let rev = revision(&src).await;
    a.wait("caught up after the source restart", 30 * SEC, |s| {
        s.last_applied_revision >= rev
    })
    .await;
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;
    a.shutdown().await;
}
both_versions!(source_restart_during_tail_reconnects, source_restart);
