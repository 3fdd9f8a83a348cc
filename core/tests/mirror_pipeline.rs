// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Scripted exchanges of the commit chain: several fenced Txns in flight, replies in any
//! order, Txns that overtake their predecessor, outcomes lost on the way.

mod support;

use std::time::Duration;

use support::*;
use tidemark_core::classify::Failure;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Command, Reply, TxnReply, WatchEvent};
use tidemark_core::mirror::{Checkpoint, CommandId, ConditionType, FailKind, StopReason};

/// A mirror past its initial sync that may keep `depth` Txns in flight, and its watch.
fn tailing(depth: u32, seed: u64) -> (Harness, u64) {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.max_txns_in_flight = depth;
    // One put fills half a Txn, so every revision may join the chain (a smaller one would
    // wait for the Txn in flight).
    cfg.sync.max_txn_ops = 3;
    let mut h = Harness::new(cfg, seed);
    let w = cold_start(&mut h, "3.5.13");
    (h, w)
}

/// Delivers one source revision that puts `key`, and returns the Txns this sends.
fn revision(h: &mut Harness, w: u64, rev: i64, key: &[u8]) -> Vec<(CommandId, Command)> {
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: rev,
            events: vec![put_ev(key, b"v", rev)],
        },
    );
    h.drain()
}

/// The failed compare of a Txn, with the fence the server holds.
fn compare_failed(fence: &[u8], rev: i64) -> Reply {
    Reply::Txn(TxnReply {
        succeeded: false,
        header_revision: rev,
        reads: vec![Some(kv(FENCE, fence, rev))],
    })
}

/// Two Txns in flight: revision 101 (a) and 102 (b), b built on a's record.
fn two_in_flight(h: &mut Harness, w: u64) -> ((CommandId, Command), (CommandId, Command)) {
    let a = one(revision(h, w, 101, b"/app/a"));
    // A commit round trip long enough for a second Txn to be worth sending.
    h.advance(Duration::from_millis(20));
    let b = one(revision(h, w, 102, b"/app/b"));
    assert_eq!(
        compare_bytes(&b.1),
        fence_of(&a.1).encode(),
        "b builds on a"
    );
    (a, b)
}

#[test]
fn replies_out_of_order_are_acted_on_in_chain_order() {
    let (mut h, w) = tailing(4, 31);
    let base = h.applied_fence.clone();
    let (a, b) = two_in_flight(&mut h, w);
    assert_eq!(compare_bytes(&a.1), base, "a builds on the durable record");
    assert_eq!(h.m.status().txns_in_flight, 2);
    h.done(b.0, Ok(txn_ok(31)));
    assert_eq!(
        h.m.status().last_applied_revision,
        100,
        "b's success waits for a's reply"
    );
    h.done(a.0, Ok(txn_ok(30)));
    assert_eq!(h.m.status().last_applied_revision, 102);
    assert_eq!(h.m.status().chain_breaks, 0);
    // The next Txn builds on b's record.
    let c = one(revision(&mut h, w, 103, b"/app/c"));
    assert_eq!(compare_bytes(&c.1), fence_of(&b.1).encode());
}

#[test]
fn a_lost_reply_is_proven_applied_by_a_later_success() {
    let (mut h, w) = tailing(4, 32);
    let (a, b) = two_in_flight(&mut h, w);
    h.done(b.0, Ok(txn_ok(31)));
    // a's reply is lost, but b could only apply on top of a.
    h.done(
        a.0,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    assert_eq!(h.m.status().last_applied_revision, 102);
    assert!(h.drain().is_empty(), "no fence read, nothing sent again");
}

#[test]
fn a_txn_that_arrived_before_its_predecessor_is_sent_again_as_it_was() {
    let (mut h, w) = tailing(4, 33);
    let base = h.applied_fence.clone();
    let (a, b) = two_in_flight(&mut h, w);
    // b reached the server first: its compare failed against the durable record.
    h.done(b.0, Ok(compare_failed(&base, 29)));
    assert_eq!(h.m.status().chain_reorders, 1);
    // It waits for a's reply: sent again before a has applied, it would fail again.
    assert!(h.drain().is_empty(), "b was sent again before a replied");
    h.done(a.0, Ok(txn_ok(30)));
    assert_eq!(h.m.status().last_applied_revision, 101);
    // Then the same Txn again, once the gap since the last send is over: the chain holds
    // (nothing after b needs rebuilding).
    h.advance(Duration::from_millis(1));
    let (b2, again) = one(h.drain());
    assert_eq!(again, b.1, "sent again unchanged");
    h.done(b2, Ok(txn_ok(31)));
    assert_eq!(h.m.status().last_applied_revision, 102);
    assert_eq!(h.m.status().chain_breaks, 0);
}

/// Replies come back in any order too: a Txn whose early reply came first is not sent
/// again ahead of its predecessor's re-send, which would only make it fail once more.
#[test]
fn txns_that_arrived_early_are_sent_again_in_chain_order() {
    let (mut h, w) = tailing(4, 35);
    // Grow the depth (each applied Txn adds one), and measure a 20 ms round trip.
    for rev in 101..113 {
        let (id, _) = one(revision(&mut h, w, rev, format!("/app/g{rev}").as_bytes()));
        h.advance(Duration::from_millis(20));
        h.done(id, Ok(txn_ok(20)));
    }
    let base = h.applied_fence.clone();
    let a = one(revision(&mut h, w, 113, b"/app/a"));
    h.advance(Duration::from_millis(20));
    let b = one(revision(&mut h, w, 114, b"/app/b"));
    h.advance(Duration::from_millis(20));
    let c = one(revision(&mut h, w, 115, b"/app/c"));
    assert_eq!(
        compare_bytes(&c.1),
        fence_of(&b.1).encode(),
        "c builds on b"
    );
    // c's early reply comes first, then b's; both saw the durable record.
    h.done(c.0, Ok(compare_failed(&base, 29)));
    h.done(b.0, Ok(compare_failed(&base, 29)));
    assert!(h.drain().is_empty(), "sent again before a replied");
    h.done(a.0, Ok(txn_ok(30)));
    h.advance(Duration::from_millis(20));
    let (b2, again_b) = one(h.drain());
    assert_eq!(again_b, b.1, "b goes first");
    // c goes once b was sent again and the gap has passed, not with it.
    h.advance(Duration::from_millis(20));
    let (c2, again_c) = one(h.drain());
    assert_eq!(again_c, c.1, "then c");
    h.done(b2, Ok(txn_ok(31)));
    h.done(c2, Ok(txn_ok(32)));
    assert_eq!(h.m.status().last_applied_revision, 115);
    assert_eq!(h.m.status().chain_breaks, 0);
    assert_eq!(h.m.status().chain_reorders, 2);
}

#[test]
fn a_failed_predecessor_breaks_the_chain_and_its_successors_are_rebuilt_on_the_fence() {
    let (mut h, w) = tailing(4, 38);
    let (a, b) = two_in_flight(&mut h, w);
    // a fails for good (the target refused it for now); b, built on a, cannot apply.
    h.done(
        a.0,
        Err(Failure::Throttled {
            message: "too many requests".into(),
        }),
    );
    let base = h.applied_fence.clone();
    h.done(b.0, Ok(compare_failed(&base, 29)));
    assert_eq!(h.m.status().chain_breaks, 1);
    assert_eq!(h.m.status().last_applied_revision, 100);
    // After the throttle's backoff: a's work, then b's, each on the record before it.
    let mut sent = Vec::new();
    for _ in 0..10 {
        h.advance(Duration::from_secs(10));
        for (id, cmd) in h.drain() {
            if matches!(cmd, Command::Txn(_)) {
                sent.push(cmd.clone());
                h.done(id, Ok(txn_ok(40 + sent.len() as i64)));
            }
        }
    }
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(data_ops(&sent[0]), data_ops(&a.1));
    assert_eq!(compare_bytes(&sent[0]), base);
    assert_eq!(data_ops(&sent[1]), data_ops(&b.1));
    assert_eq!(compare_bytes(&sent[1]), fence_of(&sent[0]).encode());
    assert_eq!(h.m.status().last_applied_revision, 102);
}

#[test]
fn unknown_outcomes_in_a_chain_are_settled_by_reading_the_fence() {
    let (mut h, w) = tailing(4, 34);
    let (a, b) = two_in_flight(&mut h, w);
    let lost = || {
        Err(Failure::Unknown {
            message: "connection reset".into(),
        })
    };
    h.done(a.0, lost());
    h.done(b.0, lost());
    // The fence says how far the chain got: a applied, b did not.
    let (id, read) = one(h.drain());
    let Command::Range(r) = &read else {
        panic!("{read:?}")
    };
    assert_eq!(r.key, FENCE);
    h.done(
        id,
        Ok(range(
            30,
            vec![kv(FENCE, &fence_of(&a.1).encode(), 30)],
            false,
        )),
    );
    assert_eq!(h.m.status().last_applied_revision, 101);
    // b is sent again after the backoff an unknown outcome earns.
    assert!(h.drain().is_empty());
    h.advance(Duration::from_secs(2));
    let (_, again) = one(h.drain());
    assert_eq!(data_ops(&again), data_ops(&b.1));
    assert_eq!(compare_bytes(&again), fence_of(&a.1).encode());
}

#[test]
fn another_holder_in_a_failed_compare_stops_the_chain_without_writing() {
    let (mut h, w) = tailing(4, 35);
    let (a, b) = two_in_flight(&mut h, w);
    let mut theirs: Checkpoint = fence_of(&a.1);
    theirs.epoch += 1;
    theirs.holder = "ffffffffffffffffffffffffffffffff".into();
    h.done(a.0, Ok(compare_failed(&theirs.encode(), 40)));
    match h.stopped() {
        Some(StopReason::Failed {
            kind: FailKind::FenceLost,
            ..
        }) => {}
        other => panic!("expected FenceLost, got {other:?}"),
    }
    // b's reply comes after the stop and changes nothing.
    h.done(b.0, Ok(compare_failed(&theirs.encode(), 40)));
    assert!(h.drain().is_empty());
}

#[test]
fn depth_one_keeps_one_txn_in_flight() {
    let (mut h, w) = tailing(1, 36);
    let a = one(revision(&mut h, w, 101, b"/app/a"));
    h.advance(Duration::from_millis(20));
    assert!(revision(&mut h, w, 102, b"/app/b").is_empty());
    h.done(a.0, Ok(txn_ok(30)));
    let (_, b) = one(h.drain());
    assert_eq!(compare_bytes(&b), fence_of(&a.1).encode());
}

#[test]
fn a_success_after_an_unknown_outcome_proves_the_unknown_one_applied() {
    let (mut h, w) = tailing(4, 37);
    let (a, b) = two_in_flight(&mut h, w);
    // a's reply is lost first (the chain breaks), then b's success arrives: a applied.
    h.done(
        a.0,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    h.done(b.0, Ok(txn_ok(31)));
    assert_eq!(h.m.status().last_applied_revision, 102);
    // Nothing is sent again: a fence read may settle it, but a's work is never redone
    // on top of b (that would write revision 101's values over 102's).
    for (id, cmd) in h.drain() {
        match &cmd {
            Command::Range(r) => {
                assert_eq!(r.key, FENCE);
                h.done(
                    id,
                    Ok(range(
                        31,
                        vec![kv(FENCE, &fence_of(&b.1).encode(), 31)],
                        false,
                    )),
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    for _ in 0..6 {
        h.advance(Duration::from_secs(10));
        for (_, cmd) in h.drain() {
            assert!(
                !matches!(&cmd, Command::Txn(_)) || data_ops(&cmd).is_empty(),
                "a's work was sent again: {cmd:?}"
            );
        }
    }
}

/// Sends one Txn per revision from `rev` on until the chain is full; returns them.
fn fill(h: &mut Harness, w: u64, rev: &mut i64) -> Vec<(CommandId, Command)> {
    let mut sent = Vec::new();
    loop {
        *rev += 1;
        let key = format!("/app/k{rev}");
        let cmds = revision(h, w, *rev, key.as_bytes());
        if cmds.is_empty() {
            return sent;
        }
        sent.extend(cmds);
    }
}

#[test]
fn a_reorder_spaces_the_sends_and_keeps_the_depth() {
    let (mut h, w) = tailing(16, 38);
    let mut rev = 100;
    // Grow the depth one applied Txn at a time, over a 20 ms round trip (room for 12).
    let mut sent = Vec::new();
    for _ in 0..7 {
        sent.extend(fill(&mut h, w, &mut rev));
        h.advance(Duration::from_millis(20));
        for (id, _) in std::mem::take(&mut sent) {
            h.done(id, Ok(txn_ok(30)));
        }
        // What waited for room goes out now.
        sent = h.drain();
    }
    sent.extend(fill(&mut h, w, &mut rev));
    let before = sent.len();
    assert!(before >= 8, "the depth grew to {before}");
    // The second Txn reached etcd first: its compare saw the record before its predecessor's.
    let durable = h.applied_fence.clone();
    h.done(sent[1].0, Ok(compare_failed(&durable, 40)));
    h.advance(Duration::from_millis(20));
    h.done(sent[0].0, Ok(txn_ok(41)));
    let (again, _) = one(h.drain());
    h.done(again, Ok(txn_ok(42)));
    for (id, _) in &sent[2..] {
        h.done(*id, Ok(txn_ok(43)));
    }
    assert_eq!(h.m.status().chain_reorders, 1);
    assert_eq!(h.m.status().chain_breaks, 0);
    // No longer back to back: with one Txn in flight, the next waits for the gap.
    let mut now_sent = h.drain();
    now_sent.extend(fill(&mut h, w, &mut rev));
    assert_eq!(now_sent.len(), 1, "one Txn goes at once, the rest wait");
    assert_eq!(h.m.status().txns_in_flight, 1);
    // One joins per gap (a fraction of the round trip), and the depth is kept: as many as
    // before fit.
    let gap = Duration::from_secs_f64(h.m.status().chain_send_gap_seconds);
    assert!(
        gap > Duration::from_micros(100) && gap < Duration::from_millis(20),
        "{gap:?}"
    );
    for step in 2..=before {
        h.advance(gap / 2);
        assert!(
            fill(&mut h, w, &mut rev).is_empty(),
            "step {step}: sent before the gap was over"
        );
        h.advance(gap - gap / 2 + Duration::from_micros(1));
        let mut cmds = h.drain();
        cmds.extend(fill(&mut h, w, &mut rev));
        assert_eq!(cmds.len(), 1, "step {step}: one Txn per gap");
        assert_eq!(h.m.status().txns_in_flight as usize, step);
    }
}

/// A target that keeps failing makes the agent stop reading the source (the client's
/// buffer is unbounded) and resume from the record later. With the stream closed for the
/// whole back-off nothing would show a source restart meanwhile, so the resume is a break:
/// its first write waits for the point read (and, for an anchor the watch delivered, the
/// window replay).
#[test]
fn a_watch_closed_for_target_failures_is_proven_again_before_the_next_write() {
    let (mut h, w) = tailing(1, 91);
    h.auto_proof = false;
    let mut cmds = revision(&mut h, w, 101, b"/app/c");
    let mut cancelled = false;
    for _ in 0..10 {
        for (id, c) in std::mem::take(&mut cmds) {
            match c {
                Command::Txn(_) => h.done(
                    id,
                    Err(Failure::Transient {
                        message: "etcdserver: request timed out".into(),
                    }),
                ),
                Command::CancelWatch { watch_id } => {
                    assert_eq!(watch_id, w);
                    cancelled = true;
                }
                // The outcome was unknown: the fence shows the Txn did not apply.
                Command::Range(r) if r.key == FENCE => {
                    let fence = h.applied_fence.clone();
                    h.done(id, Ok(range(20, vec![kv(FENCE, &fence, 13)], false)));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if cancelled {
            break;
        }
        h.advance(Duration::from_secs(2));
        cmds = h.drain();
    }
    assert!(cancelled, "three failures in a row close the source watch");
    let mut proof = None;
    let mut watch = None;
    for _ in 0..60 {
        h.advance(Duration::from_secs(1));
        for (id, c) in h.drain() {
            match &c {
                c if is_history_proof(c) => proof = Some((id, c.clone())),
                Command::Watch(wr) => watch = Some(wr.start_revision),
                Command::Txn(_) => panic!("a write before the proof: {c:?}"),
                _ => {}
            }
        }
        if proof.is_some() && watch.is_some() {
            break;
        }
    }
    let (id, cmd) = proof.expect("the resume proves the history first");
    let Command::Range(r) = &cmd else {
        unreachable!()
    };
    assert_eq!((r.key.as_slice(), r.revision), (&b"/app/b"[..], 60));
    assert_eq!(
        watch,
        Some(101),
        "the tail resumes from the record (watermark 100)"
    );
    // The source was restored without that put: the agent stops, writing nothing.
    h.done(id, Ok(range(150, vec![], false)));
    assert!(!h.drain().iter().any(|(_, c)| matches!(c, Command::Txn(_))));
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::SourceHistoryMismatch,
            ..
        })
    ));
}

/// Small Txns do not pile up in flight: one beside another buys no throughput, and etcd
/// reorders concurrent requests (each reorder costs the chain a re-send and half its
/// depth). A revision that fills less than half a Txn waits for the one in flight, and
/// what waited goes as one Txn when it lands.
#[test]
fn a_small_txn_waits_for_the_one_in_flight_and_what_waited_goes_as_one() {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.max_txns_in_flight = 16;
    cfg.sync.max_txn_ops = 128;
    let mut h = Harness::new(cfg, 92);
    let w = cold_start(&mut h, "3.5.13");
    let (a, cmd) = one(revision(&mut h, w, 101, b"/app/a"));
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/a", b"v")]);
    h.advance(Duration::from_millis(20));
    assert!(
        revision(&mut h, w, 102, b"/app/b").is_empty(),
        "b waits for a"
    );
    let c = revision(&mut h, w, 103, b"/app/c");
    assert!(c.is_empty(), "c too: {c:?}");
    h.done(a, Ok(txn_ok(20)));
    let (_, cmd) = one(h.drain());
    assert_eq!(
        data_ops(&cmd),
        vec![put(b"/mirror/b", b"v"), put(b"/mirror/c", b"v")],
        "one Txn for what waited"
    );
    assert_eq!(fence_of(&cmd).watermark, 103);
}

/// A tail that lags behind a distant target says which setting lifts it: each Txn holds
/// whole revisions and at most `sync.maxTxnOps` ops, so across a long round trip the Txn
/// count is the limit. Behind a near target the same lag names nothing to change.
#[test]
fn a_tail_lagging_behind_a_distant_target_names_the_setting_that_lifts_it() {
    let lag_message = |rtt: Duration, seed: u64| {
        let mut cfg = config(InitialSyncMode::RequireEmpty);
        cfg.sync.max_txns_in_flight = 1;
        cfg.sync.max_txn_ops = 3;
        cfg.sync.max_lag = Duration::from_secs(1);
        let mut h = Harness::new(cfg, seed);
        let w = cold_start(&mut h, "3.5.13");
        let mut rev = 100;
        let mut sent = fill(&mut h, w, &mut rev);
        // Two seconds of one Txn per round trip, with a revision always waiting behind it,
        // so the lag grows past sync.maxLag at any round trip.
        let mut spent = Duration::ZERO;
        while spent < Duration::from_secs(2) {
            fill(&mut h, w, &mut rev);
            h.advance(rtt);
            spent += rtt;
            for (id, _) in std::mem::take(&mut sent) {
                h.done(id, Ok(txn_ok(30)));
            }
            sent = h.drain();
        }
        let status = h.m.status();
        assert!(
            status.condition(ConditionType::ReplicationLagExceeded),
            "{rtt:?}: lag {} s",
            status.lag_seconds
        );
        status.conditions[&ConditionType::ReplicationLagExceeded]
            .message
            .clone()
    };
    let far = lag_message(Duration::from_millis(50), 71);
    assert!(far.contains("--max-txn-ops"), "{far}");
    assert!(far.contains("sync.maxTxnOps (3)"), "{far}");
    let near = lag_message(Duration::from_millis(2), 72);
    assert!(near.is_empty(), "{near}");
}
