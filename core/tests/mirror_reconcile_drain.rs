//! Scripted exchanges for the diff-and-repair pass and the drain cut-over.

// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::*;
use tidemark_core::classify::Failure;
use tidemark_core::config::{InitialSyncMode, Mode};
use tidemark_core::etcd::{Cluster, Command, KeyValue, Reply, SortBy, WatchEvent};
use tidemark_core::mirror::{
    Checkpoint, CommandId, ConditionType, Control, FailKind, Input, Phase, Role, StopReason,
    DRAIN_PROGRESSING, DRAIN_STALL_AFTER,
};

fn reconciling(delete_orphans: bool) -> Harness {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.reconciliation.enabled = true;
    cfg.reconciliation.interval = Duration::from_secs(60);
    cfg.reconciliation.delete_orphans = delete_orphans;
    Harness::new(cfg, 31)
}

/// Splits the two pass reads (source first, then target) out of a batch of commands.
fn pass_reads(cmds: &[(CommandId, Command)]) -> ((CommandId, i64), CommandId) {
    let mut src = None;
    let mut tgt = None;
    for (id, c) in cmds {
        if let Command::Range(r) = c {
            assert!(
                !r.count_only && !r.keys_only,
                "a pass compares values: {r:?}"
            );
            match r.cluster {
                Cluster::Source => src = Some((*id, r.revision)),
                Cluster::Target => tgt = Some(*id),
            }
        }
    }
    (
        src.expect("a source page read"),
        tgt.expect("a target page read"),
    )
}

fn tkv(key: &[u8], value: &[u8]) -> KeyValue {
    kv(key, value, 13)
}

#[test]
fn periodic_pass_counts_and_repairs_drift_without_moving_the_watermark() {
    let mut h = reconciling(false);
    let w = cold_start(&mut h, "3.5.13");
    // Not before the interval.
    h.advance(Duration::from_secs(30));
    assert!(h.drain().is_empty());
    h.advance(Duration::from_secs(31));
    let cmds = h.drain();
    let ((src, rev), tgt) = pass_reads(&cmds);
    assert_eq!(rev, 100, "the source is read pinned at the watermark");
    // A live event during the pass is held until the pass ends.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/n", b"new", 101)],
        },
    );
    h.serve_pass(
        src,
        tgt,
        PassFixture {
            src: (
                101,
                vec![
                    kv(b"/app/a", b"1", 50),
                    kv(b"/app/b", b"2", 60),
                    kv(b"/app/c", b"3", 70),
                ],
            ),
            tgt: (
                13,
                vec![
                    tkv(FENCE, b"fence"),
                    tkv(b"/mirror/a", b"1"),
                    tkv(b"/mirror/b", b"stale"),
                    tkv(b"/mirror/z", b"orphan"),
                ],
            ),
        },
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(
        data_ops(&cmd),
        vec![put(b"/mirror/b", b"2"), put(b"/mirror/c", b"3")]
    );
    assert_eq!(
        fence_of(&cmd).watermark,
        100,
        "repairs never move the watermark"
    );
    h.done(id, Ok(txn_ok(14)));
    let s = h.m.status().clone();
    let d = s.last_drift.expect("drift published");
    assert_eq!((d.missing, d.divergent, d.orphan, d.repaired), (1, 1, 1, 2));
    assert_eq!((d.source_key_count, d.target_key_count), (3, 3));
    assert!(s.condition(ConditionType::DriftDetected));
    assert!(
        !s.condition(ConditionType::InvariantsHeld),
        "an orphan was left in place"
    );
    assert_eq!(s.last_reconcile_time, Some(h.now));
    // The held event is applied right after the pass.
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/n", b"new")]);
    assert_eq!(fence_of(&cmd).watermark, 101);
}

#[test]
fn orphans_are_deleted_only_with_delete_orphans() {
    let mut h = reconciling(true);
    cold_start(&mut h, "3.5.13");
    h.m.handle_input(h.now, Input::Control(Control::Reconcile));
    let cmds = h.drain();
    let ((src, _), tgt) = pass_reads(&cmds);
    h.serve_pass(
        src,
        tgt,
        PassFixture {
            src: (100, vec![kv(b"/app/a", b"1", 50)]),
            tgt: (13, vec![tkv(b"/mirror/a", b"1"), tkv(b"/mirror/z", b"x")]),
        },
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/z")]);
    h.done(id, Ok(txn_ok(14)));
    assert!(h.m.status().condition(ConditionType::InvariantsHeld));
    assert_eq!(h.m.status().repaired_keys, 1);
}

#[test]
fn a_clean_pass_reports_no_drift_and_rearms() {
    let mut h = reconciling(false);
    cold_start(&mut h, "3.5.13");
    h.advance(Duration::from_secs(61));
    let cmds = h.drain();
    let ((src, _), tgt) = pass_reads(&cmds);
    h.serve_pass(
        src,
        tgt,
        PassFixture {
            src: (100, vec![kv(b"/app/a", b"1", 50)]),
            tgt: (13, vec![tkv(b"/mirror/a", b"1")]),
        },
    );
    assert!(h.drain().is_empty());
    h.pass_fixture = None;
    assert!(!h.m.status().condition(ConditionType::DriftDetected));
    assert!(
        h.m.status().condition(ConditionType::InvariantsHeld),
        "{:#?}",
        h.m.status()
    );
    // The next pass is a full interval after this one (progress requests aside).
    let reads = |cmds: Vec<(CommandId, Command)>| {
        cmds.into_iter()
            .filter(|(_, c)| matches!(c, Command::Range(_)))
            .count()
    };
    h.advance(Duration::from_secs(59));
    assert_eq!(reads(h.drain()), 0);
    h.advance(Duration::from_secs(2));
    assert_eq!(reads(h.drain()), 2);
}

#[test]
fn compacted_pin_falls_back_to_unpinned_and_skips_keys_in_flight() {
    let mut h = reconciling(true);
    cold_start(&mut h, "3.5.13");
    h.m.handle_input(h.now, Input::Control(Control::Reconcile));
    let cmds = h.drain();
    let ((src, _), tgt) = pass_reads(&cmds);
    h.done(src, Err(Failure::Compacted { rev: 0 }));
    let (src2, cmd) = one(h.drain());
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        (r.cluster, r.revision, r.sort),
        (Cluster::Source, 0, SortBy::Key)
    );
    // b changed after the watermark (in flight): not drift. z is absent from the latest
    // source, which cannot tell an orphan from a delete in flight: reported, not deleted.
    h.serve_pass(
        src2,
        tgt,
        PassFixture {
            src: (130, vec![kv(b"/app/a", b"1", 50), kv(b"/app/b", b"9", 120)]),
            tgt: (
                13,
                vec![
                    tkv(b"/mirror/a", b"1"),
                    tkv(b"/mirror/b", b"2"),
                    tkv(b"/mirror/z", b"x"),
                ],
            ),
        },
    );
    assert!(h.drain().is_empty(), "nothing to repair");
    let d = h.m.status().last_drift.unwrap();
    assert_eq!((d.divergent, d.orphan, d.repaired), (0, 1, 0));
    assert!(!h.m.status().condition(ConditionType::InvariantsHeld));
}

#[test]
fn a_foreign_fence_aborts_the_pass_with_prefix_conflict() {
    let mut h = reconciling(true);
    cold_start(&mut h, "3.5.13");
    h.m.handle_input(h.now, Input::Control(Control::Reconcile));
    let cmds = h.drain();
    let ((src, _), tgt) = pass_reads(&cmds);
    let mut other = Checkpoint::decode(&fence_bytes_for_test()).unwrap();
    other.link = "another-link".into();
    h.serve_pass(
        src,
        tgt,
        PassFixture {
            src: (100, vec![]),
            tgt: (
                13,
                vec![tkv(b"/mirror/sub/\0tidemark-checkpoint", &other.encode())],
            ),
        },
    );
    assert!(h.drain().is_empty(), "nothing is repaired or deleted");
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::PrefixConflict,
            ..
        })
    ));
    assert!(h.m.status().condition(ConditionType::PrefixConflict));
}

fn fence_bytes_for_test() -> Vec<u8> {
    let c = Checkpoint {
        v: 1,
        seq: 0,
        link: "x".into(),
        epoch: 1,
        holder: "0123456789abcdef0123456789abcdef".into(),
        role: Role::Mirror,
        watermark: 5,
        split: None,
        scan: None,
        prune_pending: false,
        prune_floor: 0,
        source_cluster: "1".into(),
        target_cluster: "2".into(),
        anchor: None,
    };
    c.encode()
}

fn draining() -> Harness {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.mode = Mode::Drain;
    Harness::new(cfg, 41)
}

/// Answers the drain's verification pass; returns the commands that follow.
fn verify(
    h: &mut Harness,
    cmds: Vec<(CommandId, Command)>,
    src: Vec<KeyValue>,
    tgt: Vec<KeyValue>,
) -> Vec<(CommandId, Command)> {
    verify_under(h, cmds, None, src, tgt)
}

/// [`verify`], with the source at `header` (above the watermark the pass is pinned at).
fn verify_under(
    h: &mut Harness,
    cmds: Vec<(CommandId, Command)>,
    header: Option<i64>,
    src: Vec<KeyValue>,
    tgt: Vec<KeyValue>,
) -> Vec<(CommandId, Command)> {
    let ((s, rev), t) = pass_reads(&cmds);
    assert_eq!(
        rev,
        h.m.status().last_applied_revision,
        "verification is pinned at the watermark"
    );
    h.serve_pass(
        s,
        t,
        PassFixture {
            src: (header.unwrap_or(rev), src),
            tgt: (13, tgt),
        },
    );
    let next = h.drain();
    h.pass_fixture = None;
    next
}

#[test]
fn drain_with_trusted_progress_verifies_then_flips_to_primary() {
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    // Trusted progress: the drain target is the source header revision.
    let (id, cmd) = one(cmds);
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert!(r.count_only);
    assert_eq!(h.m.status().phase, Phase::Draining);
    h.done(
        id,
        Ok(Reply::Range(tidemark_core::etcd::RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 2,
        })),
    );
    let cmds = h.drain();
    let next = verify(
        &mut h,
        cmds,
        vec![kv(b"/app/a", b"1", 50)],
        vec![tkv(b"/mirror/a", b"1")],
    );
    let (id, cmd) = one(next);
    let rec = fence_of(&cmd);
    assert_eq!((rec.role, rec.watermark), (Role::Primary, 100));
    assert!(data_ops(&cmd).is_empty());
    h.done(id, Ok(txn_ok(14)));
    let cmds = h.drain();
    assert!(
        cmds.iter()
            .all(|(_, c)| matches!(c, Command::CancelWatch { .. })),
        "{cmds:#?}"
    );
    assert_eq!(h.stopped(), Some(StopReason::Drained));
    let s = h.m.status();
    assert!(s.condition(ConditionType::CutoverReady));
    assert_eq!(s.phase, Phase::Drained);
    let c = s.cutover.clone().unwrap();
    assert_eq!(
        (
            c.drain_target_revision,
            c.drained_revision,
            c.counts.source_key_count
        ),
        (100, 100, 1)
    );
}

#[test]
fn drain_waits_for_the_watermark_then_repairs_divergent_values_before_cutover() {
    let mut h = draining();
    let (w, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(
        id,
        Ok(Reply::Range(tidemark_core::etcd::RangeReply {
            header_revision: 102,
            kvs: vec![],
            more: false,
            count: 2,
        })),
    );
    // Watermark 100 < 102: keep tailing.
    assert!(h
        .drain()
        .iter()
        .all(|(_, c)| !matches!(c, Command::Range(_))));
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![put_ev(b"/app/b", b"2", 102)],
        },
    );
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(14)));
    // Equal counts, one divergent value: the first round repairs it.
    let cmds = h.drain();
    let next = verify(
        &mut h,
        cmds,
        vec![kv(b"/app/a", b"1", 50), kv(b"/app/b", b"2", 102)],
        vec![tkv(b"/mirror/a", b"tampered"), tkv(b"/mirror/b", b"2")],
    );
    let (id, cmd) = one(next);
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/a", b"1")]);
    assert_eq!(
        fence_of(&cmd).role,
        Role::Mirror,
        "no cut-over before a clean round"
    );
    h.done(id, Ok(txn_ok(15)));
    assert!(!h.m.status().condition(ConditionType::CutoverReady));
    // The second round is clean: cut over.
    let cmds = h.drain();
    let next = verify(
        &mut h,
        cmds,
        vec![kv(b"/app/a", b"1", 50), kv(b"/app/b", b"2", 102)],
        vec![tkv(b"/mirror/a", b"1"), tkv(b"/mirror/b", b"2")],
    );
    let (id, cmd) = one(next);
    assert_eq!(fence_of(&cmd).role, Role::Primary);
    h.done(id, Ok(txn_ok(16)));
    h.drain();
    assert_eq!(h.stopped(), Some(StopReason::Drained));
    assert_eq!(h.m.status().cutover.as_ref().unwrap().drained_revision, 102);
}

#[test]
fn drain_on_untrusted_progress_targets_the_highest_mod_revision() {
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.4.23");
    // A pinned snapshot of the scan windows, in bounded keys-only pages (never a sort by
    // mod revision, which makes etcd read every value of the range in one request).
    let (id, cmd) = one(cmds);
    assert!(is_probe(&cmd), "{cmd:?}");
    let cmds = h.answer_probe(
        id,
        100,
        &[
            kv(b"/app/a", b"", 40),
            kv(b"/app/b", b"", 60),
            kv(b"/app/c", b"", 20),
        ],
    );
    assert_eq!(h.m.status().drain_target_revision, Some(60));
    // Watermark 100 >= 60: verify right away.
    let next = verify(&mut h, cmds, vec![], vec![]);
    let (_, cmd) = one(next);
    assert_eq!(fence_of(&cmd).role, Role::Primary);
}

#[test]
fn an_untrusted_drain_waits_for_deletes_between_the_watermark_and_its_snapshot() {
    // The drain target of an untrusted source is the snapshot's newest mod revision, which a
    // delete leaves no trace in: /app/b, live at the watermark (100), was deleted at 110 and
    // the watch has not delivered that yet. A round pinned at the watermark is clean, but
    // the snapshot at 120 counts one key fewer, so the cut-over waits for the delete.
    let mut h = draining();
    let (w, cmds) = cold_start_then(&mut h, "3.4.23");
    let (id, cmd) = one(cmds);
    assert!(is_probe(&cmd), "{cmd:?}");
    let cmds = h.answer_probe(id, 120, &[kv(b"/app/a", b"", 40), kv(b"/app/c", b"", 20)]);
    assert_eq!(h.m.status().drain_target_revision, Some(40));
    let at_watermark = vec![
        kv(b"/app/a", b"1", 40),
        kv(b"/app/b", b"2", 60),
        kv(b"/app/c", b"3", 20),
    ];
    let target = vec![
        tkv(b"/mirror/a", b"1"),
        tkv(b"/mirror/b", b"2"),
        tkv(b"/mirror/c", b"3"),
    ];
    let next = verify_under(&mut h, cmds, Some(120), at_watermark, target);
    assert_eq!(h.stopped(), None);
    let (id, cmd) = one(next);
    assert!(
        is_probe(&cmd),
        "no cut-over before the delete: the target is read again, got {cmd:?}"
    );
    // The watch delivers the delete; the mirror applies it, then takes a new snapshot.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 120,
            events: vec![del_ev(b"/app/b", 110)],
        },
    );
    let (tid, txn) = one(h.drain());
    assert_eq!(data_ops(&txn), vec![del(b"/mirror/b")]);
    h.done(tid, Ok(txn_ok(14)));
    assert!(h.drain().is_empty());
    // The new snapshot counts as many keys as the watermark (110) has: cut over.
    let cmds = h.answer_probe(id, 120, &[kv(b"/app/a", b"", 40), kv(b"/app/c", b"", 20)]);
    let next = verify_under(
        &mut h,
        cmds,
        Some(120),
        vec![kv(b"/app/a", b"1", 40), kv(b"/app/c", b"3", 20)],
        vec![tkv(b"/mirror/a", b"1"), tkv(b"/mirror/c", b"3")],
    );
    let (_, cmd) = one(next);
    assert_eq!(fence_of(&cmd).role, Role::Primary);
}

#[test]
fn untrusted_drain_target_ignores_writes_under_excluded_prefixes() {
    // Found by the simulator: the newest write under the source prefix was an excluded key,
    // which the watermark never covers, so the drain waited for it forever.
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.mode = Mode::Drain;
    cfg.sync.exclude_prefixes = vec!["skip/".into()];
    let mut h = Harness::new(cfg, 41);
    // Cold start on an empty source and target, answering whatever genesis asks, until the
    // drain reads its target.
    let first_window = |c: &Command| is_probe(c);
    let mut cmds = h.drain();
    let mut rev = 10;
    for _ in 0..500 {
        if cmds.iter().any(|(_, c)| first_window(c)) {
            break;
        }
        for (id, c) in std::mem::take(&mut cmds) {
            let reply = match &c {
                Command::Status { cluster } => match cluster {
                    Cluster::Source => status("3.4.23", 1, 100),
                    Cluster::Target => status("3.4.23", 2, 5),
                },
                Command::Range(r) if r.count_only => {
                    Reply::Range(tidemark_core::etcd::RangeReply {
                        header_revision: 100,
                        kvs: vec![],
                        more: false,
                        count: 0,
                    })
                }
                Command::Range(r) if r.cluster == Cluster::Target => range(5, vec![], false),
                Command::Range(_) => range(100, vec![], false),
                Command::Txn(_) => {
                    rev += 1;
                    txn_ok(rev)
                }
                Command::Watch(_) => Reply::WatchStarted,
                _ => continue,
            };
            h.done(id, Ok(reply));
        }
        cmds = h.drain();
    }
    assert!(h.m.status().condition(ConditionType::InitialSyncComplete));
    let cmds: Vec<_> = cmds
        .into_iter()
        .filter(|(_, c)| matches!(c, Command::Range(_)))
        .collect();
    // One snapshot of the scan windows [/app/, /app/skip/) and [/app/skip0, /app0): the
    // excluded write at 90 is never read.
    let (id, cmd) = one(cmds);
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(r.key.as_slice(), &b"/app/"[..]);
    let cmds = h.answer_probe(
        id,
        100,
        &[
            kv(b"/app/b", b"", 60),
            kv(b"/app/skip/x", b"", 90),
            kv(b"/app/z", b"", 70),
        ],
    );
    // The newest in-scope key is the target, not an excluded write above it.
    assert_eq!(h.m.status().drain_target_revision, Some(70));
    // Watermark 100 >= 70: verify (both windows empty, served page by page), then cut over.
    let next = verify(&mut h, cmds, vec![], vec![]);
    let (_, cmd) = one(next);
    assert_eq!(fence_of(&cmd).role, Role::Primary);
}

#[test]
fn drain_refuses_to_cut_over_with_orphans_left() {
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(
        id,
        Ok(Reply::Range(tidemark_core::etcd::RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 0,
        })),
    );
    let cmds = h.drain();
    // The fence read that confirms the verdict is answered from the same target: ours.
    let fence = tkv(FENCE, &h.applied_fence.clone());
    let next = verify(
        &mut h,
        cmds,
        vec![],
        vec![fence, tkv(b"/mirror/stray", b"x")],
    );
    assert!(next.is_empty());
    match h.stopped() {
        Some(StopReason::Failed { kind, message }) => {
            assert_eq!(kind, FailKind::DrainOrphans);
            assert!(message.contains("deleteOrphans"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!h.m.status().condition(ConditionType::CutoverReady));
}

#[test]
fn an_orphan_verdict_after_another_agent_took_the_fence_is_fence_lost() {
    // Found by the simulator (seed 500008972): the verification read the target while a
    // twin claimed the fence and wrote past the pinned revision; its key looked like an
    // orphan, and the agent told the operator to set deleteOrphans.
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(id, Ok(range(100, vec![], false)));
    let cmds = h.drain();
    let mut twin = Checkpoint::decode(&h.applied_fence).unwrap();
    twin.epoch += 1;
    twin.holder = "0123456789abcdef0123456789abcdef".into();
    twin.watermark = 130;
    let fence = tkv(FENCE, &twin.encode());
    let next = verify(&mut h, cmds, vec![], vec![fence, tkv(b"/mirror/new", b"x")]);
    assert!(next.is_empty(), "nothing is written: {next:?}");
    match h.stopped() {
        Some(StopReason::Failed { kind, message }) => {
            assert_eq!(kind, FailKind::FenceLost, "{message}");
            assert!(message.contains("epoch 2"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A verification round pinned at `pinned` whose source read finds it compacted, so it
/// compares against the latest source (at `latest`, without `/app/b`); returns what follows.
fn unpinned_round(
    h: &mut Harness,
    cmds: Vec<(CommandId, Command)>,
    pinned: i64,
    latest: i64,
) -> Vec<(CommandId, Command)> {
    let ((src, rev), tgt) = pass_reads(&cmds);
    assert_eq!(rev, pinned);
    h.done(src, Err(Failure::Compacted { rev: 0 }));
    let (src2, _) = one(h.drain());
    h.serve_pass(
        src2,
        tgt,
        PassFixture {
            src: (latest, vec![kv(b"/app/a", b"1", 50)]),
            tgt: (13, vec![tkv(b"/mirror/a", b"1"), tkv(b"/mirror/b", b"2")]),
        },
    );
    let cmds = h.drain();
    h.pass_fixture = None;
    cmds
}

#[test]
fn an_unpinned_drain_round_is_retried_instead_of_refusing_in_flight_deletes() {
    // Found by the simulator: a compaction past the watermark made the verification read
    // the latest source, where a key deleted after the watermark (still in the target, the
    // tail being held) looked like an orphan, and the drain failed permanently.
    let mut h = draining();
    let (w, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(
        id,
        Ok(Reply::Range(tidemark_core::etcd::RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 1,
        })),
    );
    let cmds = h.drain();
    // /app/b was deleted at 120, after the watermark: absent from the latest source.
    let cmds = unpinned_round(&mut h, cmds, 100, 130);
    assert_eq!(
        h.stopped(),
        None,
        "an unpinned round proves nothing; no verdict"
    );
    assert_eq!(
        cutover_not_ready(&h).0,
        DRAIN_PROGRESSING,
        "one unpinned round is not yet a loop"
    );
    // The drain starts over: it reads its target again.
    let (id, cmd) = one(cmds);
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert!(r.count_only, "{r:?}");
    // The source compacts past the watermark again before the next round can pin it: the
    // drain goes round in a loop that progress cannot end, and says so at once.
    h.done(id, Ok(range(130, vec![], false)));
    h.drain();
    h.watch(w, WatchEvent::Progress { revision: 130 });
    let (id, cmd) = one(h.drain());
    assert!(
        data_ops(&cmd).is_empty(),
        "the idle advance to the drain target"
    );
    h.done(id, Ok(txn_ok(15)));
    let cmds = h.drain();
    unpinned_round(&mut h, cmds, 130, 140);
    assert_eq!(h.stopped(), None);
    let (reason, message) = cutover_not_ready(&h);
    assert_eq!(reason, "WatermarkCompacted");
    assert!(message.contains("compaction retention"), "{message}");
}

#[test]
fn a_restarted_drain_that_already_cut_over_finishes_without_writing() {
    let mut h = draining();
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    let mut rec = Checkpoint::decode(&fence_bytes_for_test()).unwrap();
    rec.link = tidemark_core::config::MirrorConfig::new("/app/", "/mirror/").link_id();
    rec.role = Role::Primary;
    rec.watermark = 777;
    h.done(id, Ok(range(20, vec![kv(FENCE, &rec.encode(), 20)], false)));
    assert!(h.drain().is_empty());
    assert_eq!(h.stopped(), Some(StopReason::Drained));
    assert_eq!(h.m.status().cutover.as_ref().unwrap().drained_revision, 777);

    // The same fence stops a Sync-mode agent: a straggler never writes after cut-over.
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 42);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(20, vec![kv(FENCE, &rec.encode(), 20)], false)));
    assert!(h.drain().is_empty());
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::FenceLost,
            ..
        })
    ));
}

/// A pass whose 60 repairs pace at 10 ops/s (6 s, past the 3 s the watch may wait): the
/// watch is muted, not cancelled. Returns the commands after the pass reads were served.
fn paced_repair_pass(h: &mut Harness) -> (u64, Vec<(CommandId, Command)>) {
    let w = cold_start(h, "3.5.13");
    h.m.handle_input(h.now, Input::Control(Control::Reconcile));
    let cmds = h.drain();
    let ((src, _), tgt) = pass_reads(&cmds);
    let missing: Vec<KeyValue> = (0..60)
        .map(|i| kv(format!("/app/k{i:03}").as_bytes(), b"v", 50))
        .collect();
    h.serve_pass(
        src,
        tgt,
        PassFixture {
            src: (100, missing),
            tgt: (13, vec![]),
        },
    );
    let cmds = h.drain();
    assert!(
        !cmds
            .iter()
            .any(|(_, c)| matches!(c, Command::CancelWatch { .. })),
        "the stream stays open while the pass paces: {cmds:#?}"
    );
    assert_eq!(h.m.status().watch_cancels_for_pacing, 1);
    (w, cmds)
}

fn paced_config() -> tidemark_core::config::MirrorConfig {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.max_ops_per_second = 10;
    cfg
}

#[test]
fn a_long_paced_repair_mutes_the_watch_and_resumes_after_the_pass() {
    let mut h = Harness::new(paced_config(), 51);
    let (w, mut cmds) = paced_repair_pass(&mut h);
    // What the muted stream delivers is dropped: the tail reads it again after the pass.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![put_ev(b"/app/late", b"x", 101)],
        },
    );
    h.watch(w, WatchEvent::Progress { revision: 120 });
    let mut repaired = 0;
    let mut rev = 14;
    let mut reopened = None;
    let mut cancelled = false;
    for _ in 0..200 {
        for (id, c) in std::mem::take(&mut cmds) {
            match c {
                Command::Txn(_) => {
                    assert!(
                        !data_ops(&c).contains(&put(b"/mirror/late", b"x")),
                        "a muted event is never written"
                    );
                    repaired += data_ops(&c).len();
                    assert_eq!(fence_of(&c).watermark, 100, "no advance past a muted event");
                    h.done(id, Ok(txn_ok(rev)));
                    rev += 1;
                }
                Command::CancelWatch { watch_id } => {
                    assert_eq!(watch_id, w);
                    cancelled = true;
                }
                Command::Watch(wr) => reopened = Some(wr.start_revision),
                _ => {}
            }
        }
        if reopened.is_some() {
            break;
        }
        h.advance(Duration::from_millis(500));
        cmds = h.drain();
    }
    assert_eq!(repaired, 60);
    assert!(
        cancelled,
        "the muted stream is closed once the pass is done"
    );
    assert_eq!(
        reopened,
        Some(101),
        "the watch resumes after what was delivered before it was muted"
    );
}

/// Without the open stream nothing showed the agent that the source went away while a
/// pass paced its repairs (simulator seed 798001376: a restore during a drain). A muted
/// stream that breaks forgets the proof: the next repair waits for a point read, and one
/// that finds another history stops the mirror before it writes.
#[test]
fn a_break_of_the_muted_watch_proves_the_history_before_the_next_repair() {
    let mut h = Harness::new(paced_config(), 52);
    let (w, mut cmds) = paced_repair_pass(&mut h);
    // Every page was read; the proof is answered by hand. The repair sent before the
    // break lands.
    h.pass_fixture = None;
    h.auto_proof = false;
    let mut rev = 20;
    while cmds.iter().any(|(_, c)| matches!(c, Command::Txn(_))) {
        for (id, c) in std::mem::take(&mut cmds) {
            if matches!(c, Command::Txn(_)) {
                h.done(id, Ok(txn_ok(rev)));
                rev += 1;
            }
        }
        cmds = h.drain();
    }
    h.watch(
        w,
        WatchEvent::Failed {
            failure: Failure::Transient {
                message: "connection reset".into(),
            },
        },
    );
    let mut proof = None;
    let mut repaired_after_break = 0;
    for _ in 0..40 {
        for (id, c) in std::mem::take(&mut cmds) {
            match &c {
                c if is_history_proof(c) => proof = Some((id, c.clone())),
                Command::Txn(_) => {
                    repaired_after_break += data_ops(&c).len();
                    h.done(id, Ok(txn_ok(30)));
                }
                _ => {}
            }
        }
        if proof.is_some() {
            break;
        }
        h.advance(Duration::from_millis(500));
        cmds = h.drain();
    }
    let (id, cmd) = proof.expect("a proof before the next repair");
    assert_eq!(
        repaired_after_break, 0,
        "nothing is written between the break and the proof"
    );
    let Command::Range(r) = &cmd else {
        unreachable!()
    };
    assert_eq!(
        r.key,
        b"/app/b".to_vec(),
        "the anchor: the newest put copied"
    );
    // The source came back from a backup without that put.
    h.done(id, Ok(range(140, vec![], false)));
    let after = h.drain();
    assert!(
        !after.iter().any(|(_, c)| matches!(c, Command::Txn(_))),
        "{after:#?}"
    );
    assert!(matches!(
        h.stopped(),
        Some(StopReason::Failed {
            kind: FailKind::SourceHistoryMismatch,
            ..
        })
    ));
}

/// Answers a clean verification round of the one-key fixture (watch opens filtered out);
/// returns the cut-over Txn that follows.
fn verify_clean_then_cut_over(
    h: &mut Harness,
    cmds: Vec<(CommandId, Command)>,
) -> (CommandId, Command) {
    let cmds = cmds
        .into_iter()
        .filter(|(_, c)| !matches!(c, Command::Watch(_)))
        .collect();
    let next = verify(
        h,
        cmds,
        vec![kv(b"/app/a", b"1", 50)],
        vec![tkv(b"/mirror/a", b"1")],
    );
    let (id, cmd) = one(next);
    assert_eq!(fence_of(&cmd).role, Role::Primary);
    (id, cmd)
}

/// The cut-over Txn `id` lands: the agent stops Drained.
fn cut_over(h: &mut Harness, id: CommandId) {
    h.done(id, Ok(txn_ok(21)));
    h.drain();
    assert_eq!(h.stopped(), Some(StopReason::Drained));
}

#[test]
fn a_cutover_parked_on_nospace_is_verified_again_and_redone() {
    // Found by the simulator (seeds 76114364, 10222): the park dropped the queued cut-over,
    // and the drain waited for it forever.
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(
        id,
        Ok(Reply::Range(tidemark_core::etcd::RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: 1,
        })),
    );
    let cmds = h.drain();
    let (id, _) = verify_clean_then_cut_over(&mut h, cmds);
    h.done(id, Err(Failure::NoSpace));
    h.drain();
    assert!(h.m.status().condition(ConditionType::TargetQuotaExhausted));
    // The quota probe lands: the tail resumes and the drain starts over from its target.
    h.advance(Duration::from_secs(61));
    let (id, cmd) = one(h.drain());
    assert!(
        data_ops(&cmd).is_empty(),
        "the probe writes the fence alone"
    );
    assert_eq!(fence_of(&cmd).role, Role::Mirror);
    h.done(id, Ok(txn_ok(20)));
    let cmds = h.drain();
    // A new verification round, pinned at the watermark, then the cut-over again.
    let (id, _) = verify_clean_then_cut_over(&mut h, cmds);
    cut_over(&mut h, id);
}

/// The reason and message of `CutoverReady`, which must be False.
fn cutover_not_ready(h: &Harness) -> (String, String) {
    let c = h.m.status().conditions[&ConditionType::CutoverReady].clone();
    assert!(!c.status, "{c:?}");
    (c.reason, c.message)
}

/// The time the core last asked to be woken at.
fn last_timeout(h: &Harness) -> tidemark_core::Instant {
    h.log
        .iter()
        .rev()
        .find_map(|o| match o {
            tidemark_core::mirror::Output::Timeout(t) => Some(*t),
            _ => None,
        })
        .expect("the core waited")
}

#[test]
fn a_drain_blocked_by_a_full_target_says_so_within_the_stall_bound() {
    // R1: a drain that cannot finish says why, by itself, within DRAIN_STALL_AFTER.
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.mode = Mode::Drain;
    // The quota probe comes later than the stall bound: the core must wake itself to say it.
    cfg.sync.quota_probe_interval = Duration::from_secs(300);
    let mut h = Harness::new(cfg, 41);
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.done(id, Ok(range(100, vec![], false)));
    let cmds = h.drain();
    let (id, _) = verify_clean_then_cut_over(&mut h, cmds);
    assert_eq!(cutover_not_ready(&h).0, DRAIN_PROGRESSING);
    let parked_at = h.now;
    h.done(id, Err(Failure::NoSpace));
    h.drain();
    assert_eq!(
        cutover_not_ready(&h).0,
        DRAIN_PROGRESSING,
        "not yet stalled"
    );
    assert_eq!(
        last_timeout(&h),
        parked_at + DRAIN_STALL_AFTER,
        "the core wakes itself when the drain has stalled for the bound"
    );
    h.advance(DRAIN_STALL_AFTER - Duration::from_secs(1));
    assert!(h.drain().is_empty());
    assert_eq!(cutover_not_ready(&h).0, DRAIN_PROGRESSING);
    h.advance(Duration::from_secs(1));
    assert!(h.drain().is_empty(), "saying so writes nothing");
    let (reason, message) = cutover_not_ready(&h);
    assert_eq!(reason, "TargetQuotaExhausted");
    assert!(message.contains("etcdctl alarm disarm"), "{message}");
    assert_eq!(h.stopped(), None, "a full target is waited out, not failed");
    // Space comes back: the probe lands, the drain moves again and cuts over.
    h.advance(Duration::from_secs(300));
    let (id, cmd) = one(h.drain());
    assert!(data_ops(&cmd).is_empty(), "the quota probe");
    h.done(id, Ok(txn_ok(20)));
    let cmds = h.drain();
    assert_eq!(cutover_not_ready(&h).0, DRAIN_PROGRESSING);
    // A new verification round, pinned at the watermark, then the cut-over again.
    let (id, _) = verify_clean_then_cut_over(&mut h, cmds);
    cut_over(&mut h, id);
    assert!(h.m.status().condition(ConditionType::CutoverReady));
}

#[test]
fn a_paused_drain_says_so_and_a_sync_agent_never_sets_cutover_ready() {
    let mut h = draining();
    let (_, cmds) = cold_start_then(&mut h, "3.5.13");
    let (id, _) = one(cmds);
    h.m.handle_input(h.now, Input::Control(Control::Pause));
    h.done(id, Ok(range(100, vec![], false)));
    h.drain();
    h.advance(DRAIN_STALL_AFTER);
    h.drain();
    let (reason, message) = cutover_not_ready(&h);
    assert_eq!(reason, "Paused");
    assert!(message.contains("resume"), "{message}");
    h.m.handle_input(h.now, Input::Control(Control::Resume));
    let cmds = h.drain();
    assert_eq!(cutover_not_ready(&h).0, DRAIN_PROGRESSING);
    assert!(!cmds.is_empty(), "the drain goes on after the resume");

    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 42);
    cold_start(&mut h, "3.5.13");
    h.advance(DRAIN_STALL_AFTER * 3);
    h.drain();
    assert!(!h
        .m
        .status()
        .conditions
        .contains_key(&ConditionType::CutoverReady));
}
