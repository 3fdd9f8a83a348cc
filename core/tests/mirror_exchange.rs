// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Scripted exchanges: hand-written inputs in, exact commands out.
//!
//! Each test plays the driver by hand, so every command the core emits is asserted.

mod support;

use std::time::Duration;

use support::*;
use tidemark_core::classify::{Failure, PermanentKind};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{
    Cluster, Command, CompareTarget, Event, RangeReply, Reply, TxnOp, TxnReply, WatchEvent,
    WatchRequest,
};
use tidemark_core::mirror::{
    Checkpoint, ConditionType, Control, FailKind, Input, Output, Phase, StopReason,
};

#[test]
fn cold_start_then_one_revision_is_one_txn() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 7);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![
                put_ev(b"/app/c", b"3", 101),
                del_ev(b"/app/a", 101),
                put_ev(b"/app/d", b"4", 102),
            ],
        },
    );
    let cmds = h.drain();
    // maxTxnOps = 4 leaves 3 data slots: rev 101 (2 ops) and rev 102 (1 op) fit together.
    let (id, cmd) = one(cmds);
    assert_eq!(
        compare_bytes(&cmd),
        h.applied_fence,
        "builds on the last record applied"
    );
    assert_eq!(
        data_ops(&cmd),
        vec![
            put(b"/mirror/c", b"3"),
            del(b"/mirror/a"),
            put(b"/mirror/d", b"4")
        ]
    );
    assert_eq!(fence_of(&cmd).watermark, 102);
    h.done(id, Ok(txn_ok(14)));
    assert_eq!(h.m.status().last_applied_revision, 102);

    // A revision that does not fit beside the pending one is never split.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 104,
            events: vec![
                put_ev(b"/app/e", b"5", 103),
                put_ev(b"/app/f", b"6", 104),
                put_ev(b"/app/g", b"7", 104),
                put_ev(b"/app/h", b"8", 104),
            ],
        },
    );
    let cmds = h.drain();
    let (id, cmd) = one(cmds);
    assert_eq!(fence_of(&cmd).watermark, 103);
    h.done(id, Ok(txn_ok(15)));
    let (id, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd).len(), 3);
    assert_eq!(fence_of(&cmd).watermark, 104);
    h.done(id, Ok(txn_ok(16)));

    // Replayed old events (etcd #20221) are dropped.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 104,
            events: vec![put_ev(b"/app/zz", b"old", 104)],
        },
    );
    assert!(h.drain().is_empty());
}

#[test]
fn excluded_and_foreign_keys_are_not_written() {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.exclude_prefixes = vec!["tmp/".into()];
    let mut h = Harness::new(cfg, 1);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![
                put_ev(b"/app/tmp/x", b"1", 101),
                put_ev(b"/app/ok", b"2", 102),
            ],
        },
    );
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/ok", b"2")]);
}

#[test]
fn compaction_during_scan_restarts_genesis_with_prune() {
    let mut h = Harness::new(config(InitialSyncMode::Overwrite), 3);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    // Overwrite: no emptiness check; claim directly.
    let (id, cmd) = one(h.drain());
    assert!(!fence_of(&cmd).prune_pending);
    h.done(id, Ok(txn_ok(10)));
    let (id, _) = one(h.drain());
    h.done(
        id,
        Ok(Reply::Range(RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 5,
        })),
    );
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    let Command::Watch(wr) = &cmds[0].1 else {
        panic!()
    };
    let w = wr.watch_id;
    // The source compacts past R0 before the first page returns: the watch is cancelled.
    h.watch(
        w,
        WatchEvent::Cancelled {
            compact_revision: 150,
            reason: "compacted".into(),
        },
    );
    h.done(
        cmds[1].0,
        Ok(range(160, vec![kv(b"/app/a", b"1", 155)], true)),
    );
    let cmds = h.drain();
    // Genesis starts over: a new R0 read (the stale page is discarded with its attempt).
    assert!(
        cmds.iter()
            .any(|(_, c)| matches!(c, Command::Range(r) if r.count_only)),
        "{cmds:#?}"
    );
    assert_eq!(h.m.status().scan_restart_count, 1);
    assert!(h.m.status().condition(ConditionType::Compacted));
    let r0 = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Range(r) if r.count_only))
        .unwrap()
        .0;
    h.done(
        r0,
        Ok(Reply::Range(RangeReply {
            header_revision: 170,
            kvs: vec![],
            more: false,
            count: 1,
        })),
    );
    let cmds = h.drain();
    let (_, cmd) = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Txn(_)))
        .cloned()
        .unwrap();
    let rec = fence_of(&cmd);
    assert_eq!(rec.scan.unwrap().base, 170);
    assert!(rec.prune_pending, "a restarted genesis owes a prune");
}

#[test]
fn compaction_in_tail_forces_resync_with_prune_and_latches_loop() {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.resync_loop_threshold = 1;
    let mut h = Harness::new(cfg, 5);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Cancelled {
            compact_revision: 500,
            reason: "".into(),
        },
    );
    let cmds = h.drain();
    assert!(
        cmds.iter()
            .any(|(_, c)| *c == Command::CancelWatch { watch_id: w })
            || cmds.iter().all(|(_, c)| !matches!(c, Command::Watch(_)))
    );
    let (id, cmd) = cmds
        .into_iter()
        .find(|(_, c)| matches!(c, Command::Range(r) if r.count_only))
        .unwrap();
    let _ = cmd;
    assert_eq!(h.m.status().forced_resync_count, 1);
    assert!(h.m.status().condition(ConditionType::ResyncLoopDetected));
    h.done(
        id,
        Ok(Reply::Range(RangeReply {
            header_revision: 600,
            kvs: vec![],
            more: false,
            count: 1,
        })),
    );
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert!(rec.prune_pending);
    assert_eq!(rec.scan.as_ref().unwrap().base, 600);
    assert_eq!(
        rec.watermark, 100,
        "the watermark is kept; scan != null suspends the invariant"
    );
    h.done(id, Ok(txn_ok(20)));
    let cmds = h.drain();
    let Command::Watch(wr) = &cmds[0].1 else {
        panic!("{cmds:#?}")
    };
    assert_eq!(wr.start_revision, 601);
    let w2 = wr.watch_id;
    h.done(
        cmds[1].0,
        Ok(range(600, vec![kv(b"/app/a", b"9", 550)], false)),
    );
    // The page was bounded: the scan reads on (answered empty) while the keys are written.
    // A page: fenced by the revision of the write that started this genesis.
    let (id, cmd) = scan_on_to_txn(&mut h);
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/a", b"9")]);
    assert!(is_page(&cmd));
    assert_eq!(compare_of(&cmd), (CompareTarget::ModRevision, 20));
    h.done(id, Ok(txn_ok(21)));
    // The rest of the range is empty: one cursor-only Txn records the scan complete.
    let (id, cmd) = scan_on_to_txn(&mut h);
    assert!(data_ops(&cmd).is_empty() && fence_of(&cmd).scan.is_some_and(|s| s.scanned));
    assert_eq!(
        fence_of(&cmd).prune_floor,
        20,
        "the floor is the revision of the write that started this genesis"
    );
    h.done(id, Ok(txn_ok(21)));
    // Mark and sweep: bounded keys-only target pages; keys below the floor were not seen.
    let target = vec![
        kv(b"/mirror/a", b"", 21),
        kv(b"/mirror/b", b"", 12),
        kv(FENCE, b"", 21),
    ];
    let mut deleted = false;
    let mut next = h.drain();
    loop {
        let (id, cmd) = one(std::mem::take(&mut next));
        match &cmd {
            Command::Range(r) => {
                assert_eq!((r.cluster, r.keys_only), (Cluster::Target, true));
                h.done(id, Ok(serve_range(r, 21, &target)));
            }
            Command::Txn(_) if !data_ops(&cmd).is_empty() => {
                assert!(!deleted, "one delete");
                assert_eq!(data_ops(&cmd), vec![del(b"/mirror/b")]);
                deleted = true;
                h.done(id, Ok(txn_ok(22)));
            }
            _ => {
                let rec = fence_of(&cmd);
                assert!(rec.scan.is_none() && !rec.prune_pending);
                assert_eq!(rec.watermark, 600);
                h.done(id, Ok(txn_ok(23)));
                break;
            }
        }
        next = h.drain();
    }
    assert!(deleted, "the unseen key below the floor was swept");
    // Only a live apply clears the loop latch.
    assert!(h.m.status().condition(ConditionType::ResyncLoopDetected));
    h.watch(
        w2,
        WatchEvent::Events {
            header_revision: 601,
            events: vec![put_ev(b"/app/n", b"1", 601)],
        },
    );
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(24)));
    assert!(!h.m.status().condition(ConditionType::ResyncLoopDetected));
    assert_eq!(h.m.status().pruned_keys, 1);
}

#[test]
fn fence_lost_to_another_holder_stops_without_writing() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 9);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, cmd) = one(h.drain());
    let mut theirs = fence_of(&cmd);
    theirs.epoch += 1;
    theirs.holder = "ffffffffffffffffffffffffffffffff".into();
    h.done(
        id,
        Ok(Reply::Txn(TxnReply {
            succeeded: false,
            header_revision: 20,
            reads: vec![Some(kv(FENCE, &theirs.encode(), 19))],
        })),
    );
    assert!(h.drain().is_empty());
    match h.stopped() {
        Some(StopReason::Failed {
            kind: FailKind::FenceLost,
            ..
        }) => {}
        other => panic!("expected FenceLost, got {other:?}"),
    }
    // Nothing more is ever emitted.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![put_ev(b"/app/d", b"4", 102)],
        },
    );
    assert!(h.drain().is_empty());
}

#[test]
fn lost_commit_reply_is_adopted_after_rereading_the_fence() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 11);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, cmd) = one(h.drain());
    let written = fence_of(&cmd).encode();
    h.done(
        id,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    // The core re-reads the fence instead of guessing.
    let (id, cmd) = one(h.drain());
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(r.key, FENCE);
    h.done(id, Ok(range(30, vec![kv(FENCE, &written, 30)], false)));
    assert_eq!(h.m.status().last_applied_revision, 101);
    // The next write is fenced on the adopted revision.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![put_ev(b"/app/d", b"4", 102)],
        },
    );
    let (_, cmd) = one(h.drain());
    assert_eq!(compare_bytes(&cmd), written, "builds on the adopted record");
}

#[test]
fn unapplied_commit_is_retried_after_backoff() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 12);
    let (_, first) = timed_out_and_written_off(&mut h);
    assert!(h.drain().is_empty(), "waits for the backoff");
    h.advance(Duration::from_secs(2));
    let (_, again) = one(h.drain());
    assert_same_but_seq(&first, &again);
}

/// Cold start, then the Txn of revision 101 times out and the fence read finds the fence
/// unchanged (mod revision 13), so the agent takes it as not applied. Returns the watch and
/// that Txn.
fn timed_out_and_written_off(h: &mut Harness) -> (u64, Command) {
    let w = cold_start(h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, first) = one(h.drain());
    h.done(
        id,
        Err(Failure::Unknown {
            message: "deadline".into(),
        }),
    );
    let (id, _) = one(h.drain());
    let mut old = fence_of(&first);
    old.watermark = 100;
    h.done(id, Ok(range(13, vec![kv(FENCE, &old.encode(), 13)], false)));
    (w, first)
}

#[test]
fn corrupt_checkpoint_fails_closed() {
    let mut h = Harness::new(config(InitialSyncMode::Overwrite), 13);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(
        id,
        Ok(range(5, vec![kv(FENCE, b"{\"v\":1,\"link\":", 4)], false)),
    );
    assert!(h.drain().is_empty(), "no write after a corrupt checkpoint");
    match h.stopped() {
        Some(StopReason::Failed {
            kind: FailKind::CheckpointInvalid,
            message,
        }) => {
            assert!(message.contains("nothing was written"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn require_empty_refuses_a_non_empty_target() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 14);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![kv(b"/mirror/x", b"", 3)], false)));
    assert!(h.drain().is_empty());
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::EmptyTargetViolation,
            ..
        })
    ));
    assert!(h.m.status().condition(ConditionType::EmptyTargetViolation));
}

#[test]
fn nospace_parks_cancels_the_watch_and_resumes_from_the_watermark() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 15);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, _) = one(h.drain());
    h.done(id, Err(Failure::NoSpace));
    let cmds = h.drain();
    assert_eq!(
        cmds.iter().map(|c| c.1.clone()).collect::<Vec<_>>(),
        vec![Command::CancelWatch { watch_id: w }]
    );
    assert!(h.m.status().condition(ConditionType::TargetQuotaExhausted));
    assert_eq!(h.m.status().phase, Phase::Degraded);
    // Nothing until the probe interval (1 minute by default).
    h.advance(Duration::from_secs(30));
    assert!(h.drain().is_empty());
    h.advance(Duration::from_secs(31));
    let (id, cmd) = one(h.drain());
    assert!(
        data_ops(&cmd).is_empty(),
        "the probe writes the fence alone"
    );
    assert_eq!(fence_of(&cmd).watermark, 100);
    h.done(id, Err(Failure::NoSpace));
    h.drain();
    h.advance(Duration::from_secs(61));
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(40)));
    assert!(!h.m.status().condition(ConditionType::TargetQuotaExhausted));
    // Resumes from the watermark: a new watch at 101, so revision 101 is re-delivered.
    let (_, cmd) = one(h.drain());
    let Command::Watch(wr) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(wr.start_revision, 101);
}

/// Found by the real-etcd NOSPACE test under CI load: a commit timed out, the fence read
/// said it had not applied, the retry hit NOSPACE, and the server then applied the timed-out
/// Txn after all. The quota probe's compare failed on our own record, which the agent took
/// for another holder's, and it stopped. Its own record must be adopted instead.
#[test]
fn own_write_applied_after_it_was_written_off_is_adopted() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 17);
    let (w, first) = timed_out_and_written_off(&mut h);
    h.advance(Duration::from_secs(2));
    let (id, again) = one(h.drain());
    assert_same_but_seq(&first, &again);
    h.done(id, Err(Failure::NoSpace));
    let cmds = h.drain();
    assert_eq!(
        cmds.iter().map(|c| c.1.clone()).collect::<Vec<_>>(),
        vec![Command::CancelWatch { watch_id: w }]
    );
    h.advance(Duration::from_secs(61));
    let (id, probe) = one(h.drain());
    assert_eq!(fence_of(&probe).watermark, 100);
    // Meanwhile the first Txn was applied, at revision 20.
    h.done(
        id,
        Ok(Reply::Txn(TxnReply {
            succeeded: false,
            header_revision: 20,
            reads: vec![Some(kv(FENCE, &fence_of(&first).encode(), 20))],
        })),
    );
    assert_eq!(h.stopped(), None, "our own record is not another holder's");
    assert_eq!(h.m.status().last_applied_revision, 101);
    assert_eq!(h.m.status().own_late_writes_adopted, 1);
    assert!(h.m.status().condition(ConditionType::TargetQuotaExhausted));
    // Still parked: the next probe writes the adopted record, compared at its revision.
    assert!(h.drain().is_empty());
    h.advance(Duration::from_secs(61));
    let (id, probe) = one(h.drain());
    assert_eq!(fence_of(&probe).watermark, 101);
    assert_eq!(
        compare_bytes(&probe),
        fence_of(&first).encode(),
        "builds on the adopted record"
    );
    h.done(id, Ok(txn_ok(21)));
    // Resumes after the adopted watermark: revision 101 is not applied twice.
    let (_, cmd) = one(h.drain());
    let Command::Watch(wr) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(wr.start_revision, 102);
}

#[test]
fn oversized_revision_is_split_with_progress_in_the_checkpoint() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 16);
    let w = cold_start(&mut h, "3.5.13");
    let events: Vec<Event> = (0..7)
        .map(|i| del_ev(format!("/app/k{i}").as_bytes(), 101))
        .collect();
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events,
        },
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd).len(), 3);
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.watermark, rec.split.map(|s| (s.rev, s.done))),
        (100, Some((101, 3)))
    );
    h.done(id, Ok(txn_ok(14)));
    assert!(h.m.status().condition(ConditionType::RevisionSplit));
    let (id, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).split.map(|s| s.done), Some(6));
    h.done(id, Ok(txn_ok(15)));
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!((rec.watermark, rec.split), (101, None));
    h.done(id, Ok(txn_ok(16)));
    assert!(!h.m.status().condition(ConditionType::RevisionSplit));
}

#[test]
fn split_resumes_exactly_after_restart() {
    // A new process finds split = {101, done 3}: it watches from 101 and skips 3 ops.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 17);
    answer_probes(&mut h, ("3.5.13", 1, 101), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    let found = Checkpoint {
        split: Some(tidemark_core::mirror::checkpoint::Split { rev: 101, done: 3 }),
        ..found_record(4, 100)
    };
    h.done(
        id,
        Ok(range(15, vec![kv(FENCE, &found.encode(), 15)], false)),
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(compare_of(&cmd), (CompareTarget::ModRevision, 15));
    let rec = fence_of(&cmd);
    assert_eq!(rec.epoch, 5, "a new process always claims epoch + 1");
    assert_ne!(rec.holder, found.holder);
    h.done(id, Ok(txn_ok(16)));
    let (_, cmd) = one(h.drain());
    let Command::Watch(wr) = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(wr.start_revision, 101);
    let events: Vec<Event> = (0..5)
        .map(|i| del_ev(format!("/app/k{i}").as_bytes(), 101))
        .collect();
    h.watch(
        wr.watch_id,
        WatchEvent::Events {
            header_revision: 101,
            events,
        },
    );
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/k3"), del(b"/mirror/k4")]);
    let rec = fence_of(&cmd);
    assert_eq!((rec.watermark, rec.split), (101, None));
}

#[test]
fn version_floor_and_progress_trust() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 18);
    answer_probes(&mut h, ("3.3.27", 1, 100), ("3.5.13", 2, 5));
    h.drain();
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::Unsupported,
            ..
        })
    ));

    // 3.4.23: progress notifications never move the watermark.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 19);
    let w = cold_start(&mut h, "3.4.23");
    assert!(!h.m.status().progress_trusted);
    h.advance(Duration::from_secs(10));
    h.watch(w, WatchEvent::Progress { revision: 500 });
    assert!(h.drain().is_empty());
    assert_eq!(h.m.status().last_applied_revision, 100);

    // 3.5.13: an idle prefix's watermark advances with a fence-only write.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 20);
    let w = cold_start(&mut h, "3.5.13");
    h.advance(Duration::from_secs(10));
    h.watch(w, WatchEvent::Progress { revision: 500 });
    let (id, cmd) = one(h.drain());
    assert!(data_ops(&cmd).is_empty());
    assert_eq!(fence_of(&cmd).watermark, 500);
    h.done(id, Ok(txn_ok(50)));
    assert_eq!(h.m.status().last_applied_revision, 500);
}

#[test]
fn direction_conflict_writes_nothing() {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.target.prefix = "/app/mirror/".into();
    let mut h = Harness::new(cfg, 21);
    answer_probes(&mut h, ("3.5.13", 7, 100), ("3.5.13", 7, 100));
    assert!(h.drain().is_empty());
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::DirectionConflict,
            ..
        })
    ));
}

#[test]
fn permanent_auth_error_stops_with_its_message() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 22);
    let cmds = h.drain();
    h.done(
        cmds[0].0,
        Err(Failure::Permanent {
            kind: PermanentKind::Auth,
            message: "etcdserver: authentication failed".into(),
        }),
    );
    h.drain();
    match h.stopped() {
        Some(StopReason::Failed {
            kind: FailKind::Permanent,
            message,
        }) => assert!(message.contains("authentication")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn graceful_shutdown_waits_for_the_inflight_commit() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 23);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, _) = one(h.drain());
    h.m.handle_input(h.now, Input::Control(Control::Shutdown));
    assert!(
        matches!(h.m.poll_output(h.now), Output::Timeout(_)),
        "still committing"
    );
    h.done(id, Ok(txn_ok(14)));
    assert_eq!(
        h.m.poll_output(h.now),
        Output::Stopped(StopReason::Shutdown)
    );
}

#[test]
fn same_seed_same_inputs_same_outputs() {
    fn run(seed: u64) -> String {
        let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), seed);
        let w = cold_start(&mut h, "3.5.13");
        h.watch(
            w,
            WatchEvent::Events {
                header_revision: 101,
                events: vec![put_ev(b"/app/c", b"3", 101)],
            },
        );
        let (id, _) = one(h.drain());
        h.done(
            id,
            Err(Failure::Transient {
                message: "unavailable".into(),
            }),
        );
        let (id, _) = one(h.drain());
        h.done(id, Ok(range(13, vec![], false)));
        h.advance(Duration::from_secs(5));
        h.drain();
        serde_json::to_string(&(&h.log, h.m.status())).unwrap()
    }
    assert_eq!(run(99), run(99));
    assert_ne!(
        run(99),
        run(100),
        "the holder nonce and jitter depend on the seed"
    );
}

/// Reads the first page of three keys (page limit 3) on a source of `version` and returns
/// the Txn that writes it, checking that the next page's read goes out with it.
fn first_scan_txn(version: &str) -> Command {
    let mut cfg = config(InitialSyncMode::Overwrite);
    cfg.sync.page_key_limit = 3;
    let mut h = Harness::new(cfg, 24);
    answer_probes(&mut h, (version, 1, 100), (version, 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(10)));
    let (id, _) = one(h.drain());
    h.done(
        id,
        Ok(Reply::Range(RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 6,
        })),
    );
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    let page = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Range(_)))
        .unwrap()
        .0;
    h.done(
        page,
        Ok(range(
            100,
            vec![
                kv(b"/app/a", b"1", 5),
                kv(b"/app/b", b"2", 5),
                kv(b"/app/c", b"3", 5),
            ],
            true,
        )),
    );
    let cmds = h.drain();
    // The first chunk's Txn and the next page's read go out together.
    let txn = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Txn(_)))
        .expect("a scan txn")
        .clone();
    let read = cmds
        .iter()
        .find(|(_, c)| matches!(c, Command::Range(_)))
        .expect("a prefetch read")
        .clone();
    let Command::Range(r) = &read.1 else {
        unreachable!()
    };
    assert_eq!(
        r.key,
        b"/app/c\0".to_vec(),
        "the next page starts after the last key read"
    );
    txn.1
}

#[test]
fn scan_prefetches_the_next_page_and_writes_pages_under_the_fence_revision() {
    // Trusted progress: the page only compares the fence's mod revision (the scan start's);
    // the cursor moves later, by a fence write of its own.
    let txn = first_scan_txn("3.5.13");
    assert!(is_page(&txn));
    assert_eq!(compare_of(&txn), (CompareTarget::ModRevision, 11));
    assert_eq!(data_ops(&txn).len(), 3);
}

#[test]
fn on_an_untrusted_source_each_page_records_its_cursor() {
    // The quiet-range proof needs `smax` to cover every value written, so pages chain.
    let txn = first_scan_txn("3.5.12");
    assert!(!is_page(&txn));
    let scan = fence_of(&txn).scan.unwrap();
    assert_eq!((scan.base, scan.scanned), (100, false));
    assert_eq!(
        scan.cursor,
        b"/app/c\0".to_vec(),
        "the durable cursor follows the last key written"
    );
}

#[test]
fn a_restart_mid_scan_resumes_at_the_durable_cursor_without_rescanning() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 25);
    answer_probes(&mut h, ("3.5.13", 1, 300), ("3.5.13", 2, 50));
    let (id, _) = one(h.drain());
    let found = Checkpoint {
        scan: Some(tidemark_core::mirror::checkpoint::Scan {
            base: 200,
            cursor: b"/app/m\0".to_vec(),
            scanned: false,
            rmax: 200,
            smax: None,
            base_count: None,
            residue_above: None,
        }),
        ..found_record(2, 0)
    };
    h.done(
        id,
        Ok(range(50, vec![kv(FENCE, &found.encode(), 49)], false)),
    );
    // No RequireEmpty check on a resumed genesis (the target holds our own partial copy).
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    let scan = rec.scan.clone().unwrap();
    assert_eq!((rec.epoch, scan.cursor), (3, b"/app/m\0".to_vec()));
    assert_eq!(
        (scan.residue_above, rec.v),
        (Some(49), 5),
        "pages of the dead attempt may have applied after its record (revision 49)"
    );
    h.done(id, Ok(txn_ok(51)));
    h.auto_count = false;
    let cmds = h.drain();
    // First the progress count and the residue sweep: the target past the durable cursor.
    assert_eq!(cmds.len(), 2, "{cmds:#?}");
    let (count_id, count_cmd) = cmds[0].clone();
    let (sweep_id, Command::Range(sweep)) = cmds[1].clone() else {
        panic!("{cmds:#?}")
    };
    assert_eq!(sweep.cluster, Cluster::Target);
    assert!(
        sweep.keys_only && sweep.key == b"/mirror/m\0".to_vec(),
        "{sweep:?}"
    );
    // /mirror/n was put after the record the claim found: a dead attempt's page. /mirror/o
    // is older than that record, so no page of the scan wrote it (a key of the target's
    // own, under Overwrite): it stays.
    h.done(
        sweep_id,
        Ok(range(
            51,
            vec![kv(b"/mirror/n", b"", 50), kv(b"/mirror/o", b"", 40)],
            false,
        )),
    );
    // Serve the rest of the sweep (empty spans) and land its writes, until the scan starts.
    let mut txns = Vec::new();
    let mut rev = 51;
    let mut cmds = h.drain();
    while cmds.iter().any(|(_, c)| {
        matches!(c, Command::Txn(_))
            || matches!(c, Command::Range(r) if r.cluster == Cluster::Target)
    }) {
        for (id, c) in cmds {
            rev += 1;
            match &c {
                Command::Txn(_) => {
                    txns.push(c.clone());
                    h.done(id, Ok(txn_ok(rev)));
                }
                _ => h.done(id, Ok(range(rev, vec![], false))),
            }
        }
        cmds = h.drain();
    }
    assert_eq!(
        txns.len(),
        2,
        "one delete, then the write that clears the mark: {txns:#?}"
    );
    assert_eq!(data_ops(&txns[0]), vec![del(b"/mirror/n")]);
    assert_eq!(fence_of(&txns[0]).scan.unwrap().residue_above, Some(49));
    let rec = fence_of(&txns[1]);
    assert_eq!(
        (rec.scan.clone().unwrap().residue_above, rec.v),
        (None, 4),
        "the mark goes once the sweep is done, and the record is readable by older builds"
    );
    assert!(data_ops(&txns[1]).is_empty());
    cmds.insert(0, (count_id, count_cmd));
    // A count of what is left (progress only), the watch from the original R0, then the
    // next page from the durable cursor.
    assert_eq!(cmds.len(), 3, "{cmds:#?}");
    let Command::Range(count) = &cmds[0].1 else {
        panic!("{cmds:#?}")
    };
    // Bounded and pinned at the scan's base: it walks one span of the snapshot the scan
    // reads, never the rest of the range.
    assert!(count.count_only && count.key == b"/app/m\0".to_vec());
    assert_eq!((count.revision, count.limit), (200, 0));
    assert!(
        count.range_end.as_slice() > b"/app/m\0".as_slice()
            && count.range_end.as_slice() < b"/app0".as_slice(),
        "{count:?}"
    );
    h.done(cmds[0].0, Ok(range(300, vec![], false)));
    let Command::Watch(w) = &cmds[1].1 else {
        panic!("{cmds:#?}")
    };
    assert_eq!(
        w.start_revision, 201,
        "events since the original R0 are replayed"
    );
    let Command::Range(r) = &cmds[2].1 else {
        panic!("{cmds:#?}")
    };
    assert_eq!(
        r.key,
        b"/app/m\0".to_vec(),
        "the scan continues where it stopped"
    );
    assert!(!r.count_only);
}

#[test]
fn a_watch_starting_at_the_compact_revision_is_treated_as_compacted() {
    // etcd #18089: before 3.4.33/3.5.15 a watch from exactly the compact revision misses the
    // delete at that revision. The core reads pinned at from-1 first; Compacted there means
    // from == compact revision.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 26);
    let w = cold_start(&mut h, "3.5.13");
    h.watch(
        w,
        WatchEvent::Failed {
            failure: Failure::Transient {
                message: "leader lost".into(),
            },
        },
    );
    assert!(h.drain().is_empty(), "waits for the backoff");
    h.auto_guard = false;
    h.advance(Duration::from_secs(2));
    let (id, cmd) = one(h.drain());
    assert!(is_watch_guard(&cmd), "{cmd:?}");
    let Command::Range(r) = &cmd else {
        unreachable!()
    };
    assert_eq!(
        r.revision, 100,
        "pinned at the revision before the watch start (101)"
    );
    h.done(id, Err(Failure::Compacted { rev: 0 }));
    let cmds = h.drain();
    assert!(
        cmds.iter().all(|(_, c)| !matches!(c, Command::Watch(_))),
        "no watch is opened at a compact revision: {cmds:#?}"
    );
    assert!(
        cmds.iter()
            .any(|(_, c)| matches!(c, Command::Range(r) if r.count_only && r.revision == 0)),
        "a forced resync starts"
    );
    assert_eq!(h.m.status().watch_guard_compactions, 1);
    assert_eq!(h.m.status().forced_resync_count, 1);
}

#[test]
fn the_epoch_floor_raises_the_claimed_epoch() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 27);
    h.m.set_epoch_floor(7);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    let (_, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).epoch, 7);
}

#[test]
fn on_an_affected_server_events_wait_for_the_post_watch_recheck() {
    // The guard read can race a compaction; on etcd < 3.5.15 the start is read again once
    // the watch delivered something, and nothing from it is written until that passes.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 28);
    let w = cold_start(&mut h, "3.5.13");
    h.auto_guard = false;
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, cmd) = one(h.drain());
    assert!(is_watch_guard(&cmd), "a recheck, not a write: {cmd:?}");
    h.done(id, Err(Failure::Compacted { rev: 0 }));
    let cmds = h.drain();
    assert!(
        cmds.iter().all(|(_, c)| !matches!(c, Command::Txn(_))),
        "the held event is never written: {cmds:#?}"
    );
    assert_eq!(h.m.status().forced_resync_count, 1);

    // A passing recheck releases the write; a fixed server (3.5.15) needs no recheck.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 29);
    let w = cold_start(&mut h, "3.5.13");
    h.auto_guard = false;
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(101, vec![], false)));
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/c", b"3")]);

    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 30);
    let w = cold_start(&mut h, "3.5.15");
    h.auto_guard = false;
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/c", b"3", 101)],
        },
    );
    let (_, cmd) = one(h.drain());
    assert!(matches!(cmd, Command::Txn(_)));
}

/// Answers bounded scan pages (source reads of keys) as empty until a Txn is emitted.
fn scan_on_to_txn(h: &mut Harness) -> (u64, Command) {
    let mut txn = None;
    for _ in 0..200 {
        for (id, cmd) in h.drain() {
            match &cmd {
                Command::Range(r) if r.cluster == Cluster::Source && !r.count_only => {
                    h.done(id, Ok(range(600, vec![], false)));
                }
                Command::Txn(_) if txn.is_none() => txn = Some((id, cmd)),
                other => panic!("unexpected command while scanning: {other:?}"),
            }
        }
        if let Some(t) = txn {
            return t;
        }
    }
    panic!("the scan never wrote");
}

/// Answers every Txn as applied (at target revisions from `*rev` on) and every read as
/// empty at source revision `src`, until the core asks for a watch or goes quiet. Returns
/// the data ops written and the watch asked for.
fn drive(h: &mut Harness, rev: &mut i64, src: i64) -> (Vec<TxnOp>, Option<WatchRequest>) {
    let mut written = Vec::new();
    // Bounded pages cross the rest of the key space in a few hundred empty reads.
    for _ in 0..10_000 {
        let cmds = h.drain();
        if cmds.is_empty() {
            break;
        }
        for (id, cmd) in cmds {
            match &cmd {
                Command::Txn(_) => {
                    written.extend(data_ops(&cmd));
                    h.done(id, Ok(txn_ok(*rev)));
                    *rev += 1;
                }
                Command::Range(_) => h.done(id, Ok(range(src, vec![], false))),
                Command::Watch(w) => {
                    h.done(id, Ok(Reply::WatchStarted));
                    return (written, Some(w.clone()));
                }
                _ => {}
            }
        }
    }
    (written, None)
}

/// A genesis (watch buffer 64 KiB) whose watch delivers 100 KiB at revision 101 while its
/// first scan page is in flight. Returns the harness, the watch, the watch-and-page
/// commands (the page unanswered) and the big value.
fn genesis_over_its_watch_buffer(
    seed: u64,
) -> (
    Harness,
    u64,
    Vec<(tidemark_core::mirror::CommandId, Command)>,
    Vec<u8>,
) {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.watch_buffer_bytes = 64 * 1024;
    let mut h = Harness::new(cfg, seed);
    claim_on_empty_target(&mut h, "3.5.13");
    let (id, cmd) = one(h.drain());
    assert!(is_r0(&cmd), "{cmd:?}");
    h.done(id, Ok(range(100, vec![], false)));
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    let Command::Watch(w) = &cmds[0].1 else {
        panic!("{cmds:#?}")
    };
    let w1 = w.watch_id;
    h.done(cmds[0].0, Ok(Reply::WatchStarted));
    let big = vec![b'v'; 100 * 1024];
    h.watch(
        w1,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/x", &big, 101)],
        },
    );
    (h, w1, cmds, big)
}

#[test]
fn a_scan_whose_held_events_overflow_pauses_its_watch_and_replays_it_after_the_scan() {
    // The events a genesis holds while it scans are capped by sync.watchBufferBytes. Past
    // the cap the watch stops (it used to restart the genesis, which on a large, busy
    // source restarted it forever) and opens again from the base once the scan is done:
    // what was held is written once, the replay is checked against it, and what follows
    // is written after it.
    let (mut h, w1, cmds, big) = genesis_over_its_watch_buffer(7);
    let paused = h.drain();
    assert!(
        !paused
            .iter()
            .any(|(_, c)| matches!(c, Command::CancelWatch { .. })),
        "the stream stays open, muted, so a source restart still breaks it: {paused:#?}"
    );
    assert!(
        !paused.iter().any(|(_, c)| is_r0(c)),
        "no rescan: {paused:#?}"
    );
    assert_eq!(h.m.status().scan_restart_count, 0);
    assert_eq!(h.m.status().genesis_watch_pauses, 1);
    // What the muted stream delivers is not taken (the new watch reads it again).
    h.watch(
        w1,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![put_ev(b"/app/late", b"1", 102)],
        },
    );

    // The page ends the scan; the watch opens again at the base.
    h.done(
        cmds[1].0,
        Ok(range(102, vec![kv(b"/app/a", b"1", 50)], false)),
    );
    let mut rev = 12;
    let (mut written, reopened) = drive(&mut h, &mut rev, 102);
    let w2 = reopened.expect("the watch opens again after the scan");
    assert_eq!(w2.start_revision, 101, "it replays from the base");
    assert!(w2.watch_id != w1);
    h.watch(
        w2.watch_id,
        WatchEvent::Events {
            header_revision: 103,
            events: vec![
                put_ev(b"/app/x", &big, 101),
                put_ev(b"/app/late", b"1", 102),
                put_ev(b"/app/y", b"2", 103),
            ],
        },
    );
    h.watch(w2.watch_id, WatchEvent::Progress { revision: 103 });
    let (more, _) = drive(&mut h, &mut rev, 103);
    written.extend(more);
    let times = |k: &[u8]| {
        written
            .iter()
            .filter(|op| matches!(op, TxnOp::Put { key, .. } if key == k))
            .count()
    };
    for k in [
        &b"/mirror/a"[..],
        b"/mirror/x",
        b"/mirror/late",
        b"/mirror/y",
    ] {
        assert_eq!(times(k), 1, "{}: {written:#?}", String::from_utf8_lossy(k));
    }
    let pos = |k: &[u8]| written.iter().position(|op| op.key() == k).unwrap();
    assert!(pos(b"/mirror/x") < pos(b"/mirror/late"));
    assert!(pos(b"/mirror/late") < pos(b"/mirror/y"));
    assert!(h.m.status().condition(ConditionType::InitialSyncComplete));
    assert_eq!(h.m.status().scan_restart_count, 0);
}

#[test]
fn a_break_of_the_muted_genesis_watch_proves_the_history_before_the_next_page() {
    // The paused genesis keeps its stream open: a source restart (a restore from a backup
    // needs one) fails it, and the next page waits for a new proof, as the tail does.
    let (mut h, w1, cmds, _) = genesis_over_its_watch_buffer(8);
    assert!(h.drain().is_empty());
    assert_eq!(h.m.status().genesis_watch_pauses, 1);
    h.auto_proof = false;
    h.watch(
        w1,
        WatchEvent::Failed {
            failure: Failure::Transient {
                message: "connection reset".into(),
            },
        },
    );
    h.done(
        cmds[1].0,
        Ok(range(102, vec![kv(b"/app/a", b"1", 50)], false)),
    );
    let mut proof = false;
    for _ in 0..50 {
        for (id, c) in h.drain() {
            assert!(
                proof || !matches!(c, Command::Txn(_)),
                "a page written before the proof: {c:?}"
            );
            if is_history_proof(&c) {
                proof = true;
            } else if let Command::Range(_) = &c {
                h.done(id, Ok(range(102, vec![], false)));
            }
        }
        if proof {
            break;
        }
        h.advance(Duration::from_millis(200));
    }
    assert!(proof, "the break forces a proof before the next write");
}
