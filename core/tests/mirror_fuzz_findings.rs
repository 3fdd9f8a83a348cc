// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Scripted regressions for bugs the `mirror_core` fuzzer found (inputs kept in
//! `fuzz/regressions/mirror_core/`), each reduced to the exchange that shows it.

mod support;

use std::time::Duration;

use support::*;
use tidemark_core::classify::Failure;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Cluster, Command, KeyValue, RangeReply, Reply, SortBy, WatchEvent};
use tidemark_core::mirror::checkpoint::Scan;
use tidemark_core::mirror::{Checkpoint, CommandId, ConditionType, Control};

fn count_reply(rev: i64, count: i64) -> Reply {
    Reply::Range(RangeReply {
        header_revision: rev,
        kvs: vec![],
        more: false,
        count,
    })
}

/// A cold start of an `OverwriteAndPrune` mirror on an empty target (source at revision
/// 100 with `live` keys) through its R0 read: the probes, the empty fence read, the claim
/// (target revision 10) and R0. Returns the claim, whose record a later fence read may
/// have to show.
fn claim_pruning(h: &mut Harness, live: i64) -> Command {
    answer_probes(h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain()); // the fence read
    h.done(id, Ok(range(5, vec![], false)));
    let (id, claim) = one(h.drain());
    assert!(fence_of(&claim).prune_pending, "{claim:?}");
    h.done(id, Ok(txn_ok(10)));
    let (id, cmd) = one(h.drain());
    assert!(is_r0(&cmd), "{cmd:?}");
    h.done(id, Ok(count_reply(100, live)));
    claim
}

fn txns(cmds: &[(CommandId, Command)]) -> Vec<(CommandId, Command)> {
    cmds.iter()
        .filter(|(_, c)| matches!(c, Command::Txn(_)))
        .cloned()
        .collect()
}

/// A cold start on an empty target up to a completed scan: R0 is read at `r0` with
/// `r0_count` keys, the scan reads `page` (one page) at `page_rev`. Returns the watch id
/// (opened at `r0 + 1`) and what the core emits once the scan is recorded complete.
/// Target revisions: claim=10, start-genesis=11, scan chunks from 12.
fn genesis_until_scanned(
    h: &mut Harness,
    version: &str,
    r0: i64,
    r0_count: i64,
    page: Vec<KeyValue>,
    page_rev: i64,
) -> (u64, Vec<(CommandId, Command)>) {
    answer_probes(h, (version, 1, r0), (version, 2, 5));
    let (id, _) = one(h.drain()); // the fence read
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain()); // RequireEmpty look
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain()); // claim
    h.done(id, Ok(txn_ok(10)));
    let (id, _) = one(h.drain()); // R0
    h.done(id, Ok(count_reply(r0, r0_count)));
    let (id, cmd) = one(h.drain());
    let scan = fence_of(&cmd).scan.unwrap();
    assert_eq!(
        (scan.base, scan.smax, scan.base_count),
        (r0, Some(0), None),
        "a new scan records what the untrusted probe needs; it counts the range itself"
    );
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    let Command::Watch(w) = &cmds[0].1 else {
        panic!("{cmds:#?}")
    };
    assert_eq!(w.start_revision, r0 + 1);
    let watch_id = w.watch_id;
    h.done(cmds[0].0, Ok(Reply::WatchStarted));
    h.done(cmds[1].0, Ok(range(page_rev, page, false)));
    let mut rev = 12;
    let mut cmds = h.drain();
    loop {
        let mut scanned = false;
        let mut rest = Vec::new();
        for (id, cmd) in std::mem::take(&mut cmds) {
            match &cmd {
                Command::Range(r) if !r.count_only && r.sort == SortBy::Key => {
                    h.done(id, Ok(range(page_rev, vec![], false)));
                }
                Command::Txn(_) if fence_of(&cmd).scan.is_some_and(|s| !s.scanned) => {
                    h.done(id, Ok(txn_ok(rev)));
                    rev += 1;
                }
                Command::Txn(_) if !scanned => {
                    let s = fence_of(&cmd).scan.unwrap();
                    assert!(s.scanned);
                    assert!(s.rmax >= page_rev);
                    scanned = true;
                    h.done(id, Ok(txn_ok(rev)));
                    rev += 1;
                }
                _ => rest.push((id, cmd)),
            }
        }
        if scanned {
            rest.extend(h.drain());
            return (watch_id, rest);
        }
        cmds = h.drain();
        cmds.extend(rest);
    }
}

/// Fuzz input `target-ahead-after-genesis-retry`. An untrusted source (3.5.9): R0 = 100
/// with /app/a and /app/b; /app/b is deleted at 102, and the scan page, read at 105, no
/// longer lists it. No live key changed after 100, so the old probe ("highest mod revision
/// <= delivered") finished genesis at 100, although the source at 100 has /app/b and the
/// target does not. The probe now also compares the key count, so genesis waits for the
/// watch to deliver the delete and finishes at 102.
#[test]
fn untrusted_probe_does_not_finish_before_a_delete_the_scan_saw() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 41);
    let (w, cmds) =
        genesis_until_scanned(&mut h, "3.5.9", 100, 2, vec![kv(b"/app/a", b"1", 50)], 105);
    let probe = cmds.iter().find(|(_, c)| is_probe(c)).expect("a probe");
    // Nothing live changed after 100, but one key fewer than at 100: not proven.
    let cmds = h.answer_probe(probe.0, 105, &[kv(b"/app/a", b"", 50)]);
    assert!(txns(&cmds).is_empty(), "genesis finished early: {cmds:#?}");
    assert!(!h.m.status().condition(ConditionType::InitialSyncComplete));

    // The watch delivers the delete: replayed, then a new probe proves the range quiet.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 105,
            events: vec![del_ev(b"/app/b", 102)],
        },
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/b")]);
    h.done(id, Ok(txn_ok(20)));
    assert!(h.drain().is_empty());
    h.advance(Duration::from_secs(2));
    let (id, cmd) = one(h.drain());
    assert!(is_probe(&cmd), "{cmd:?}");
    let (id, cmd) = one(h.answer_probe(id, 105, &[kv(b"/app/a", b"", 50)]));
    let rec = fence_of(&cmd);
    assert!(data_ops(&cmd).is_empty());
    assert_eq!((rec.scan, rec.watermark), (None, 102));
    h.done(id, Ok(txn_ok(21)));
    h.drain();
    assert!(h.m.status().condition(ConditionType::InitialSyncComplete));
}

/// Found by the simulator (seed 792001030): the probe read the whole source prefix while
/// the live count it is compared with covers the mirrored windows only, so a key under an
/// excluded prefix kept the counts apart (and its mod revision above what the watch
/// delivered), and the genesis on an untrusted source never finished. The probe reads the
/// mirrored windows only.
#[test]
fn untrusted_probe_ignores_keys_under_an_excluded_prefix() {
    let mut c = config(InitialSyncMode::RequireEmpty);
    c.sync.exclude_prefixes = vec!["skip/".into()];
    let mut h = Harness::new(c, 46);
    let (_, cmds) =
        genesis_until_scanned(&mut h, "3.5.9", 100, 1, vec![kv(b"/app/a", b"1", 50)], 103);
    let probe = cmds.iter().find(|(_, c)| is_probe(c)).expect("a probe");
    // An excluded key written after what the watch delivered: not the mirror's business.
    let snapshot = [kv(b"/app/a", b"", 50), kv(b"/app/skip/x", b"", 104)];
    // The first probe learns the live count (a resync's record has none); the next one,
    // on the same quiet range, proves it.
    assert!(txns(&h.answer_probe(probe.0, 105, &snapshot)).is_empty());
    h.advance(Duration::from_secs(2));
    let (id, cmd) = one(h.drain());
    assert!(is_probe(&cmd), "{cmd:?}");
    let (id, cmd) = one(h.answer_probe(id, 105, &snapshot));
    let rec = fence_of(&cmd);
    assert_eq!((rec.scan, rec.watermark), (None, 100), "genesis finishes");
    h.done(id, Ok(txn_ok(30)));
    h.drain();
    assert!(h.m.status().condition(ConditionType::InitialSyncComplete));
}

/// The same proof against a key created and deleted after R0 that a page still read: the
/// count is back where it was, but the target holds the key, absent from the source at 100.
/// The highest mod revision the scan wrote (`smax`) keeps genesis waiting for the watch.
#[test]
fn untrusted_probe_does_not_finish_below_a_value_the_scan_wrote() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 42);
    let page = vec![kv(b"/app/a", b"1", 50), kv(b"/app/t", b"t", 103)];
    let (w, cmds) = genesis_until_scanned(&mut h, "3.5.9", 100, 1, page, 103);
    let probe = cmds.iter().find(|(_, c)| is_probe(c)).expect("a probe");
    // /app/t was deleted at 104: one key, the highest mod revision 50.
    let cmds = h.answer_probe(probe.0, 105, &[kv(b"/app/a", b"", 50)]);
    assert!(txns(&cmds).is_empty(), "genesis finished early: {cmds:#?}");

    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 105,
            events: vec![put_ev(b"/app/t", b"t", 103), del_ev(b"/app/t", 104)],
        },
    );
    // One Txn per revision (a Txn may not touch a key twice). Once 103 is applied the
    // watermark has passed every page (Rmax = 103): genesis finishes there, and the
    // delete follows in the tail.
    let (id, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/t", b"t")]);
    h.done(id, Ok(txn_ok(20)));
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert!(data_ops(&cmd).is_empty());
    assert_eq!((rec.scan, rec.watermark), (None, 103));
    h.done(id, Ok(txn_ok(21)));
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/t")]);
    assert_eq!(fence_of(&cmd).watermark, 104);
}

/// A resumed genesis (scan complete, the watch has delivered nothing) on a quiet range:
/// the durable `smax` and `base_count` let the probe finish at the base. A record from an
/// older build has neither, and then genesis waits for the watch instead of guessing.
#[test]
fn resumed_untrusted_genesis_proves_quiet_only_with_durable_smax_and_count() {
    for (smax, base_count, finishes) in [(Some(150), Some(1), true), (None, None, false)] {
        let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 43);
        answer_probes(&mut h, ("3.5.9", 1, 300), ("3.5.9", 2, 50));
        let (id, _) = one(h.drain());
        let found = Checkpoint {
            scan: Some(Scan {
                base: 200,
                cursor: vec![],
                scanned: true,
                rmax: 300,
                smax,
                base_count,
                residue_above: None,
            }),
            ..found_record(2, 0)
        };
        h.done(
            id,
            Ok(range(50, vec![kv(FENCE, &found.encode(), 49)], false)),
        );
        let (id, cmd) = one(h.drain());
        assert_eq!(fence_of(&cmd).scan, found.scan, "the claim keeps the scan");
        h.done(id, Ok(txn_ok(51)));
        let cmds = h.drain();
        let Command::Watch(wr) = &cmds[0].1 else {
            panic!("{cmds:#?}")
        };
        assert_eq!(wr.start_revision, 201);
        h.done(cmds[0].0, Ok(Reply::WatchStarted));
        let probe = cmds.iter().find(|(_, c)| is_probe(c)).expect("a probe");
        let cmds = h.answer_probe(probe.0, 300, &[kv(b"/app/a", b"", 150)]);
        if finishes {
            let (_, cmd) = one(cmds);
            let rec = fence_of(&cmd);
            assert_eq!((rec.scan, rec.watermark), (None, 200));
        } else {
            assert!(txns(&cmds).is_empty(), "{cmds:#?}");
        }
    }
}

/// Fuzz input `chaos-unreadable-record-untriaged` (a lying source): a trusted progress
/// notification at 500 moves the idle watermark to 500, then the stream sends events at
/// 101..103 (the last one larger than a Txn). They were applied, and the split of 103 was
/// recorded as `split.rev = 103 <= watermark = 500`, a record `Checkpoint::decode` rejects.
/// Events at or below what the stream already reported delivered are refused now: the
/// watch is reopened after it, and nothing is written for them.
#[test]
fn events_at_or_below_a_reported_progress_revision_are_refused() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 44);
    let w = cold_start(&mut h, "3.5.13");
    h.advance(Duration::from_secs(10));
    h.watch(w, WatchEvent::Progress { revision: 500 });
    // The idle advance is in flight when the events arrive.
    let (adv, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).watermark, 500);
    let events = (0..6)
        .map(|i| put_ev(format!("/app/k{i}").as_bytes(), b"v", 103))
        .collect();
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 510,
            events,
        },
    );
    h.done(adv, Ok(txn_ok(50)));
    let cmds = h.drain();
    assert!(txns(&cmds).is_empty(), "{cmds:#?}");
    assert!(h.m.status().last_error.is_some(), "the refusal is reported");
    // After the backoff, the stream reopens after what was reported.
    h.advance(Duration::from_secs(60));
    let cmds = h.drain();
    let reopened = cmds.iter().find_map(|(_, c)| match c {
        Command::Watch(wr) => Some(wr.start_revision),
        _ => None,
    });
    assert_eq!(reopened, Some(501), "{cmds:#?}");
    assert!(txns(&cmds).is_empty(), "{cmds:#?}");
}

/// Fuzz input `sweep-deletes-key-outside-window-from-bad-range-reply` (a misbehaving
/// server or proxy): the prune sweep deleted every key a target range reply listed. Keys
/// outside the window it asked for are ignored now.
#[test]
fn prune_sweep_ignores_keys_outside_the_window_it_asked_for() {
    let mut h = Harness::new(config(InitialSyncMode::OverwriteAndPrune), 45);
    claim_pruning(&mut h, 1);
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    h.done(cmds[0].0, Ok(Reply::WatchStarted));
    h.done(
        cmds[1].0,
        Ok(range(100, vec![kv(b"/app/a", b"1", 50)], false)),
    );
    // Scan chunks until the sweep's first page read of the target.
    let (id, cmd, rev) = until_sweep_read(&mut h, 12);
    let Command::Range(r) = cmd else {
        unreachable!("until_sweep_read returns a Range")
    };
    assert_eq!(r.key, b"/mirror/".to_vec());
    // Honest keys are inside [/mirror/, /mirror0); this reply also lists three outside.
    let stale = |k: &[u8]| kv(k, b"", 3);
    h.done(
        id,
        Ok(range(
            rev,
            vec![
                stale(b"/a/outside"),
                stale(b"/mirror/old"),
                stale(b"/mirror0"),
                stale(b"/other/x"),
            ],
            false,
        )),
    );
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/old")]);
}

/// Found while fuzzing the window filter above: a failed sweep page read was queued for a
/// retry and, the commit queue being empty, a second read of the same page was issued at
/// once. Both replies advanced the sweep, so one could skip the rest of a window and leave a
/// stale key under a settled watermark. Only the retry reads the page now.
#[test]
fn a_failed_sweep_read_is_retried_once_not_duplicated() {
    let mut h = Harness::new(config(InitialSyncMode::OverwriteAndPrune), 47);
    claim_pruning(&mut h, 0);
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    h.done(cmds[0].0, Ok(Reply::WatchStarted));
    h.done(cmds[1].0, Ok(range(100, vec![], false)));
    let (id, first, _) = until_sweep_read(&mut h, 12);
    h.done(
        id,
        Err(tidemark_core::classify::Failure::Transient {
            message: "etcdserver: no leader".into(),
        }),
    );
    let cmds = h.drain();
    assert!(cmds.is_empty(), "a second read of the page: {cmds:#?}");
    h.advance(Duration::from_secs(30));
    let (_, again) = one(h.drain());
    assert_eq!(again, first, "the retry reads the same page");
}

/// The same for a reconciliation pass deleting orphans: keys a target reply lists outside
/// the window asked for are neither counted nor deleted (nor written, on the source side).
#[test]
fn reconcile_pass_ignores_keys_outside_the_window_it_asked_for() {
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.reconciliation.enabled = true;
    cfg.reconciliation.interval = Duration::from_secs(60);
    cfg.reconciliation.delete_orphans = true;
    let mut h = Harness::new(cfg, 46);
    cold_start(&mut h, "3.5.13");
    h.m.handle_input(
        h.now,
        tidemark_core::mirror::Input::Control(Control::Reconcile),
    );
    // A server that lists keys outside what was asked on every page, besides the right
    // ones (the pass reads bounded pages, so it is asked many times).
    let ours_src = vec![kv(b"/app/a", b"1", 50)];
    let ours_tgt = vec![kv(b"/mirror/a", b"1", 13), kv(b"/mirror/z", b"x", 13)];
    let foreign_src = vec![kv(b"/apq/not-ours", b"x", 60)];
    let foreign_tgt = vec![kv(b"/a/outside", b"x", 13), kv(b"/other/x", b"x", 13)];
    let mut cmds = h.drain();
    let mut txns = Vec::new();
    for _ in 0..1000 {
        if cmds.is_empty() {
            break;
        }
        for (id, c) in std::mem::take(&mut cmds) {
            let Command::Range(r) = &c else {
                txns.push((id, c));
                continue;
            };
            let (rev, ours, foreign) = match r.cluster {
                Cluster::Source => (100, &ours_src, &foreign_src),
                Cluster::Target => (13, &ours_tgt, &foreign_tgt),
            };
            let Reply::Range(mut page) = serve_range(r, rev, ours) else {
                unreachable!()
            };
            page.kvs.extend(foreign.iter().cloned());
            h.done(id, Ok(Reply::Range(page)));
        }
        cmds = h.drain();
    }
    let (_, cmd) = one(txns);
    assert_eq!(data_ops(&cmd), vec![del(b"/mirror/z")]);
}

/// Answers genesis (empty scan pages, Txns landing from revision `rev`) until the prune
/// sweep issues its first keys-only page read of the target; returns that read and the next
/// revision a Txn would land at.
fn until_sweep_read(h: &mut Harness, mut rev: i64) -> (CommandId, Command, i64) {
    loop {
        let cmds = h.drain();
        assert!(!cmds.is_empty(), "the machine went quiet before the sweep");
        let mut found = None;
        for (id, cmd) in cmds {
            match &cmd {
                Command::Range(r) if r.keys_only => found = Some((id, cmd.clone())),
                Command::Range(_) => h.done(id, Ok(range(100, vec![], false))),
                Command::Txn(_) => {
                    h.done(id, Ok(txn_ok(rev)));
                    rev += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        if let Some((id, cmd)) = found {
            return (id, cmd, rev);
        }
    }
}

/// Simulator seed 811000139 (late applies, target timeouts): the Txn that started a
/// pruning genesis timed out, the fence read said it had not applied, its re-send timed
/// out too, and the first one had applied after all. The agent adopted that record, whose
/// prune floor was still unset (a floor is set when the record lands), so the next record
/// set the floor at its own, later revision: above the pages written in between, which
/// the prune then deleted. The adopted record's revision is the floor.
#[test]
fn a_late_genesis_start_that_is_adopted_sets_the_prune_floor_at_its_revision() {
    let mut h = Harness::new(config(InitialSyncMode::OverwriteAndPrune), 48);
    let claim = claim_pruning(&mut h, 1);
    // The genesis start times out; the fence still holds the claim.
    let (id, start) = one(h.drain());
    assert!(fence_of(&start).scan.is_some());
    h.done(
        id,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    let (id, cmd) = one(h.drain());
    assert!(matches!(cmd, Command::Range(_)), "a fence read: {cmd:?}");
    h.done(
        id,
        Ok(range(
            10,
            vec![kv(FENCE, &fence_of(&claim).encode(), 10)],
            false,
        )),
    );
    // Sent again after the back-off; meanwhile the first one applies, at revision 12.
    let mut again = h.drain();
    while again.is_empty() {
        h.advance(Duration::from_millis(100));
        again = h.drain();
    }
    let (id, _) = one(again);
    h.done(
        id,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    let (id, _) = one(h.drain());
    h.done(
        id,
        Ok(range(
            12,
            vec![kv(FENCE, &fence_of(&start).encode(), 12)],
            false,
        )),
    );
    assert_eq!(h.m.status().own_late_writes_adopted, 1);
    // Every record written on top of it carries the floor 12: the pages it starts have
    // higher revisions, and keys below it were not seen.
    let mut rev = 12;
    let mut records = 0;
    for _ in 0..200 {
        let cmds = h.drain();
        if cmds.is_empty() {
            h.advance(Duration::from_millis(100));
            continue;
        }
        for (id, cmd) in cmds {
            match &cmd {
                Command::Txn(t) => {
                    if t.success.iter().any(|op| op.key() == FENCE) {
                        let rec = fence_of(&cmd);
                        if rec.prune_pending {
                            records += 1;
                            assert_eq!(rec.prune_floor, 12, "{rec:?}");
                        }
                    }
                    rev += 1;
                    h.done(id, Ok(txn_ok(rev)));
                }
                Command::Watch(_) => h.done(id, Ok(Reply::WatchStarted)),
                Command::Range(r) if r.cluster == Cluster::Source => {
                    let kvs = if r.key == b"/app/".to_vec() && !r.count_only {
                        vec![kv(b"/app/a", b"1", 50)]
                    } else {
                        vec![]
                    };
                    h.done(id, Ok(range(100, kvs, false)))
                }
                Command::Range(_) => h.done(id, Ok(range(rev, vec![], false))),
                _ => h.done(id, Ok(Reply::Ok)),
            }
        }
        if records >= 1 {
            break;
        }
    }
    assert!(records >= 1, "no record with a prune pending was written");
}
