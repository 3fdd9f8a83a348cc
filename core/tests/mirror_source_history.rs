// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The source-history proof, scripted: a source restored from an older snapshot (same
//! cluster ID, rewound revision) is refused before anything is written, and the explicit
//! way forward (`initialSync.abandonWatermark`) copies it afresh.

mod support;

use std::time::Duration;
use support::*;
use tidemark_core::classify::Failure;
use tidemark_core::config::{InitialSyncMode, MirrorConfig};
use tidemark_core::etcd::{
    Cluster, Command, EventKind, KeyValue, RangeRequest, Reply, WatchEvent, WatchRequest,
};
use tidemark_core::mirror::checkpoint::{Anchor, VERSION};
use tidemark_core::mirror::{
    AnchorDiff, AnchorField, Checkpoint, ConditionType, FailKind, HistoryFinding, Output,
    StopReason, Unconfirmed,
};

/// The put the previous incarnation copied last: `/app/k` = "v" at revision 90.
fn anchor_kv() -> KeyValue {
    KeyValue {
        key: b"/app/k".to_vec(),
        value: b"v".to_vec(),
        create_revision: 80,
        mod_revision: 90,
        version: 3,
        lease: 0,
    }
}

/// A record at watermark 100 whose anchor is [`anchor_kv`].
fn anchored(watermark: i64) -> Checkpoint {
    Checkpoint {
        v: VERSION,
        seq: 0,
        anchor: Some(Anchor::of(&anchor_kv())),
        ..found_record(4, watermark)
    }
}

/// Starts an agent with proofs answered by hand, up to the fence read answered with `rec`.
fn start(mode: InitialSyncMode, abandon: Option<i64>, rec: &Checkpoint, src_rev: i64) -> Harness {
    let mut cfg = config(mode);
    cfg.initial_sync.abandon_watermark = abandon;
    start_with(cfg, rec, src_rev)
}

fn start_with(cfg: MirrorConfig, rec: &Checkpoint, src_rev: i64) -> Harness {
    start_on("3.5.13", cfg, rec, src_rev)
}

/// As [`start_with`], on a source of etcd `version`.
fn start_on(version: &str, cfg: MirrorConfig, rec: &Checkpoint, src_rev: i64) -> Harness {
    let mut h = Harness::new(cfg, 31);
    h.auto_proof = false;
    answer_probes(&mut h, (version, 1, src_rev), ("3.5.13", 2, 15));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(15, vec![kv(FENCE, &rec.encode(), 15)], false)));
    h
}

/// The one command must be the proof read; returns its id and request.
fn proof(h: &mut Harness) -> (u64, RangeRequest) {
    let (id, cmd) = one(h.drain());
    match cmd {
        Command::Range(r) if is_history_proof(&Command::Range(r.clone())) => (id, r),
        other => panic!("expected the source-history read, got {other:?}"),
    }
}

/// The mirror stopped on a source-history mismatch: what the proof found, and the
/// operator's sentence.
fn failed(h: &mut Harness) -> (HistoryFinding, String) {
    match h.stopped() {
        Some(StopReason::Failed {
            kind: FailKind::SourceHistoryMismatch,
            message,
        }) => (finding(h), message),
        other => panic!("expected a source-history stop, got {other:?}"),
    }
}

/// What the `SourceHistoryMismatch` condition reports, as data.
fn finding(h: &Harness) -> HistoryFinding {
    h.m.status()
        .source_history_finding
        .clone()
        .expect("the status carries the finding")
}

/// No Txn of any kind was ever emitted (not even the claim).
fn wrote_nothing(h: &Harness) -> bool {
    txns(h) == 0
}

#[test]
fn a_source_below_the_watermark_is_refused_before_the_claim() {
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 21);
    let (id, r) = proof(&mut h);
    assert_eq!(
        (r.cluster, r.key.as_slice(), r.revision),
        (Cluster::Source, &b"/app/k"[..], 90),
        "the anchor is read pinned at its own revision"
    );
    // The restored source is at revision 21 and never had revision 90.
    h.done(id, Ok(range(21, vec![], false)));
    let (found, msg) = failed(&mut h);
    assert_eq!(
        found,
        HistoryFinding::AnsweredBelowReached {
            answered: 21,
            reached: 100,
            watermark: 100
        }
    );
    // The one check of the operator's sentence: it names the finding and the way forward.
    assert!(
        msg.starts_with(&found.to_string())
            && msg.ends_with("initialSync.abandonWatermark: 100 (run --abandon-watermark 100)"),
        "{msg}"
    );
    assert!(wrote_nothing(&h));
    assert!(h.m.status().condition(ConditionType::SourceHistoryMismatch));
}

#[test]
fn a_snapshot_newer_than_the_anchor_but_older_than_the_watermark_is_refused() {
    // Restored from a snapshot at revision 95: the anchor's put (90) is in it, but the
    // revisions 96..=100 the target copied are not.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 95);
    proof_passes(&mut h, 95);
    assert_eq!(
        failed(&mut h).0,
        HistoryFinding::AnsweredBelowReached {
            answered: 95,
            reached: 100,
            watermark: 100
        }
    );
    assert!(wrote_nothing(&h));
}

#[test]
fn a_source_past_the_watermark_with_another_history_is_refused() {
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 500);
    let (id, _) = proof(&mut h);
    // Revision 90 of the new history wrote /app/k with another value and create revision.
    let other = KeyValue {
        value: b"w".to_vec(),
        create_revision: 12,
        version: 1,
        ..anchor_kv()
    };
    h.done(id, Ok(range(500, vec![other], false)));
    let (found, msg) = failed(&mut h);
    let HistoryFinding::AnchorDiffers { key, diff, .. } = &found else {
        panic!("{found:?}")
    };
    assert_eq!(
        diff,
        &AnchorDiff::Differs(vec![
            AnchorField::CreateRevision { got: 12, want: 80 },
            AnchorField::Version { got: 1, want: 3 },
            AnchorField::Value
        ])
    );
    // The key is redacted in the finding, and so in the message and the status.
    assert_ne!(key, "/app/k");
    assert!(!msg.contains("/app/k"), "{msg}");
    assert!(wrote_nothing(&h));
}

#[test]
fn the_same_history_resumes_and_later_writes_record_a_newer_anchor() {
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 120);
    proof_passes(&mut h, 120);
    pass_replay(&mut h, 120);
    // The claim keeps the watermark and the anchor, and writes the current record version.
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.v, rec.watermark, rec.anchor.clone()),
        (VERSION, 100, anchored(100).anchor)
    );
    h.done(id, Ok(txn_ok(16)));
    let (wid, cmd) = one(h.drain());
    let Command::Watch(w) = cmd else {
        panic!("{cmd:?}")
    };
    // The watch first replays the window since the anchor (90): the record counted no
    // events after it, so an event past the watermark closes the window.
    assert_eq!(w.start_revision, 91);
    // The watch is established: its events wait for a proof made after it.
    h.done(wid, Ok(Reply::WatchStarted));
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 121,
            events: vec![put_ev(b"/app/n", b"1", 121)],
        },
    );
    proof_passes(&mut h, 121);
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/n", b"1")]);
    let rec = fence_of(&cmd);
    assert_eq!(rec.watermark, 121);
    let a = rec.anchor.unwrap();
    assert_eq!((a.key.as_slice(), a.rev), (&b"/app/n"[..], 121));
    assert!(!h.m.status().condition(ConditionType::SourceHistoryMismatch));
}

#[test]
fn a_compacted_anchor_is_proven_by_the_unchanged_key_or_reported_when_it_changed() {
    // Unchanged since: the key read now is still the anchor's put.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 250 }));
    // The put still holds at the watermark (no later put or delete of the key was seen).
    let (id, r) = proof(&mut h);
    assert_eq!(
        r.revision, 100,
        "the fallback reads the key at the watermark"
    );
    h.done(id, Err(Failure::Compacted { rev: 250 }));
    let (id, r) = proof(&mut h);
    assert_eq!(r.revision, 0, "then the key as it is now");
    h.done(id, Ok(range(300, vec![anchor_kv()], false)));
    // The put is proven, but the window after it (91..=100) is compacted too: nothing
    // replays it, so the claim declares a resync rather than re-asserting watermark 100.
    compacted_replay(&mut h, 250);

    // Changed since: nothing proves or disproves the history. A stop here would make every
    // restart after compaction an outage, and resuming would extend an unchecked promise,
    // so the claim itself declares a forced resync from the source as it is now.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 250 }));
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 250 }));
    let (id, _) = proof(&mut h);
    let later = KeyValue {
        mod_revision: 260,
        version: 4,
        value: b"z".to_vec(),
        ..anchor_kv()
    };
    h.done(id, Ok(range(300, vec![later], false)));
    let (claim, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    let scan = rec.scan.as_ref().expect("the claim declares the resync");
    assert_eq!(
        (scan.base, rec.prune_pending, rec.split),
        (300, true, None),
        "a resync from the source's current revision, with the prune owed"
    );
    let c = &h.m.status().conditions[&ConditionType::SourceHistoryMismatch];
    assert_eq!((c.status, c.reason.as_str()), (false, "AnchorCompacted"));
    assert!(
        matches!(
            finding(&h),
            HistoryFinding::AnchorCompacted {
                anchor: 90,
                compact: Some(250),
                watermark: 100,
                source: 300,
                ..
            }
        ),
        "{:?}",
        finding(&h)
    );
    assert_eq!(h.m.status().forced_resync_count, 1);
    // Once claimed, the copy is rebuilt: the watch replays from the declared base and
    // the scan pages the range.
    h.done(claim, Ok(txn_ok(2)));
    let cmds = h.drain();
    let watch_from: Vec<i64> = cmds
        .iter()
        .filter_map(|(_, c)| match c {
            Command::Watch(w) => Some(w.start_revision),
            _ => None,
        })
        .collect();
    assert_eq!(watch_from, vec![301], "{cmds:?}");
    assert!(
        cmds.iter().any(|(_, c)| matches!(c, Command::Range(r)
            if r.cluster == Cluster::Source && !r.count_only && r.limit > 1)),
        "a scan page is read: {cmds:?}"
    );
}

#[test]
fn a_future_anchor_revision_is_a_mismatch() {
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 100);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::FutureRevision));
    // Only to name the source's revision: the key as it is now.
    let (id, r) = proof(&mut h);
    assert_eq!(r.revision, 0);
    h.done(id, Ok(range(60, vec![], false)));
    assert_eq!(
        failed(&mut h).0,
        HistoryFinding::AnsweredBelowReached {
            answered: 60,
            reached: 100,
            watermark: 100
        }
    );
    assert!(wrote_nothing(&h));
}

#[test]
fn abandon_watermark_copies_the_new_source_afresh_only_when_the_proof_fails() {
    // The proof fails and the operator named this watermark: a fresh genesis.
    let mut h = start(
        InitialSyncMode::OverwriteAndPrune,
        Some(100),
        &anchored(100),
        21,
    );
    let (id, _) = proof(&mut h);
    h.done(id, Ok(range(21, vec![], false)));
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.watermark, rec.anchor, rec.prune_pending, rec.epoch),
        (0, None, true, 5)
    );
    assert!(h.m.status().condition(ConditionType::SourceHistoryMismatch));
    h.done(id, Ok(txn_ok(16)));
    // Genesis reads R0 from the new source: its low revision is no longer a violation.
    let (id, cmd) = one(h.drain());
    let Command::Range(r) = &cmd else {
        panic!("{cmd:?}")
    };
    assert!(r.count_only && r.cluster == Cluster::Source);
    h.done(id, Ok(range(21, vec![], false)));
    let (_, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).scan.unwrap().base, 21);

    // A stale abandonWatermark never acts on a proven history.
    let mut h = start(
        InitialSyncMode::OverwriteAndPrune,
        Some(100),
        &anchored(100),
        120,
    );
    proof_passes(&mut h, 120);
    pass_replay(&mut h, 120);
    let (_, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).watermark, 100);

    // And one naming another watermark does not either.
    let mut h = start(
        InitialSyncMode::OverwriteAndPrune,
        Some(99),
        &anchored(100),
        21,
    );
    let (id, _) = proof(&mut h);
    h.done(id, Ok(range(21, vec![], false)));
    failed(&mut h);
    assert!(wrote_nothing(&h));
}

#[test]
fn a_record_without_an_anchor_is_checked_by_revision_and_upgraded() {
    let v1 = found_record(4, 100);
    let mut h = start(InitialSyncMode::RequireEmpty, None, &v1, 100);
    let (id, r) = proof(&mut h);
    assert!(r.keys_only && r.revision == 0);
    h.done(id, Ok(range(100, vec![], false)));
    let (_, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!((rec.v, rec.watermark), (VERSION, 100));
    let c = &h.m.status().conditions[&ConditionType::SourceHistoryMismatch];
    assert_eq!((c.status, c.reason.as_str()), (false, "RevisionOnly"));

    // The same record against a source that went back below it.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &v1, 100);
    let (id, _) = proof(&mut h);
    h.done(id, Ok(range(40, vec![], false)));
    failed(&mut h);
}

/// A cold-synced agent (watermark 100) whose watch just broke; proofs answered by hand.
fn synced_then_watch_broken(seed: u64) -> Harness {
    synced_then_watch_broken_with(config(InitialSyncMode::RequireEmpty), seed)
}

fn synced_then_watch_broken_with(cfg: MirrorConfig, seed: u64) -> Harness {
    let mut h = Harness::new(cfg, seed);
    let w = cold_start(&mut h, "3.5.13");
    h.auto_proof = false;
    h.watch(
        w,
        WatchEvent::Failed {
            failure: Failure::Transient {
                message: "connection reset".into(),
            },
        },
    );
    h
}

/// After a break: the proof passes (answered by the old source), and the watch reopens and
/// is established. Returns the new watch's id.
fn reopened_after_honest_proof(h: &mut Harness) -> u64 {
    let (id, r) = proof(h);
    let honest = h.proof_answer(&Command::Range(r));
    h.done(id, Ok(honest));
    // The watch reopens after its backoff.
    h.advance(std::time::Duration::from_secs(60));
    let cmds = h.drain();
    let (wid, w2) = cmds
        .iter()
        .find_map(|(id, c)| match c {
            Command::Watch(w) => Some((*id, w.watch_id)),
            _ => None,
        })
        .expect("the watch reopens");
    h.done(wid, Ok(Reply::WatchStarted));
    w2
}

#[test]
fn a_restore_while_tailing_stops_before_the_new_history_is_written() {
    // The source process is replaced: the watch breaks, and the agent reopens it.
    let mut h = synced_then_watch_broken(33);
    // The proof is issued at once (the history is unproven after a break).
    let (id, r) = proof(&mut h);
    assert_eq!(r.cluster, Cluster::Source);
    // Restored from a snapshot taken at revision 70: the anchor (/app/b at 60) is there,
    // but the source is below the watermark 100 it had reached.
    let mut anchor_kv = kv(b"/app/b", b"2", 60);
    anchor_kv.create_revision = 60;
    h.done(id, Ok(range(70, vec![anchor_kv], false)));
    assert_eq!(
        failed(&mut h).0,
        HistoryFinding::AnsweredBelowReached {
            answered: 70,
            reached: 100,
            watermark: 100
        }
    );
}

#[test]
fn a_new_watch_whose_first_response_overflows_the_buffer_is_held_until_its_proof() {
    // Found by the simulator (seeds 740000777, 740000823): a stream's first response (up to
    // a thousand revisions) lands before the proof made after it opened. Pausing it then for
    // backpressure threw its events away, and the next stream did the same, forever.
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.watch_buffer_bytes = 64 * 1024;
    let mut h = synced_then_watch_broken_with(cfg, 35);
    let w2 = reopened_after_honest_proof(&mut h);
    let big = vec![b'v'; 200 * 1024];
    h.watch(
        w2,
        WatchEvent::Events {
            header_revision: 400,
            events: vec![put_ev(b"/app/x", &big, 101)],
        },
    );
    let cmds = h.drain();
    assert!(
        !cmds
            .iter()
            .any(|(_, c)| matches!(c, Command::CancelWatch { watch_id } if *watch_id == w2)),
        "an unproven stream is not paused: {cmds:#?}"
    );
    let (id, r) = cmds
        .into_iter()
        .find(|(_, c)| is_history_proof(c))
        .expect("a proof after the new watch");
    let honest = h.proof_answer(&r);
    h.done(id, Ok(honest));
    let cmds = h.drain();
    assert!(
        cmds.iter().any(|(_, c)| matches!(c, Command::Txn(t)
            if t.success.iter().any(|op| op.key() == b"/mirror/x"))),
        "the held event is written once proven, not read again: {cmds:#?}"
    );
}

#[test]
fn events_from_a_new_watch_wait_for_the_proof_and_are_never_written_on_a_mismatch() {
    let mut h = synced_then_watch_broken(34);
    // The proof is answered by the old source, honestly: it passes. The watch reopens on the
    // new source and is established there.
    let w2 = reopened_after_honest_proof(&mut h);
    h.watch(
        w2,
        WatchEvent::Events {
            header_revision: 400,
            events: vec![put_ev(b"/app/x", b"new", 101)],
        },
    );
    // No Txn yet: the events wait for a proof made after the watch was established.
    let cmds = h.drain();
    assert!(
        !cmds.iter().any(|(_, c)| matches!(c, Command::Txn(_))),
        "{cmds:#?}"
    );
    let (id, _) = cmds
        .into_iter()
        .find(|(_, c)| is_history_proof(c))
        .expect("a proof after the new watch");
    // The new history answers below what the old one reached.
    h.done(id, Ok(range(99, vec![], false)));
    failed(&mut h);
    let txns_after_cold_start = h
        .log
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Command {
                    cmd: Command::Txn(t),
                    ..
                } if t.success.iter().any(|op| op.key() == b"/mirror/x")
            )
        })
        .count();
    assert_eq!(
        txns_after_cold_start, 0,
        "the new history's event was never written"
    );
}

#[test]
fn an_anchor_read_ahead_of_the_watermark_that_the_source_never_reached_is_a_mismatch() {
    // Version 2 records took anchors from reads that ran ahead of the watermark (events
    // not yet applied), so the source may pass the floor and still miss the anchor. (A
    // version 3 record carries the anchor as of its watermark, and decoding refuses one
    // ahead of it.)
    let mut rec = anchored(100);
    rec.v = 2;
    let ahead = KeyValue {
        mod_revision: 105,
        ..anchor_kv()
    };
    rec.anchor = Some(Anchor::of(&ahead));
    let mut h = start(InitialSyncMode::RequireEmpty, None, &rec, 102);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::FutureRevision));
    let (id, _) = proof(&mut h);
    h.done(id, Ok(range(102, vec![], false)));
    assert_eq!(
        failed(&mut h).0,
        HistoryFinding::SourceBelowAnchor {
            source: 102,
            anchor: 105,
            watermark: 100
        }
    );
    assert!(wrote_nothing(&h));
}

#[test]
fn a_compacted_anchor_is_read_back_at_the_watermark() {
    // The restored history compacted past the anchor (90) but not past the watermark (100),
    // and wrote the key there with another value: refused.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 95 }));
    let (id, r) = proof(&mut h);
    assert_eq!((r.key.as_slice(), r.revision), (&b"/app/k"[..], 100));
    let other = KeyValue {
        mod_revision: 97,
        version: 1,
        create_revision: 97,
        ..anchor_kv()
    };
    h.done(id, Ok(range(300, vec![other], false)));
    let (found, _) = failed(&mut h);
    let HistoryFinding::AnchorDiffers { read_at, diff, .. } = &found else {
        panic!("{found:?}")
    };
    assert_eq!(*read_at, 100, "read back at the watermark");
    assert!(
        diff.has(AnchorField::ModRevision { got: 97, want: 90 }),
        "{diff:?}"
    );
    assert!(wrote_nothing(&h));

    // The same history: the put is still there at the watermark.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 95 }));
    proof_passes(&mut h, 300);
    // The window 91..=100 is partly compacted (95): no replay, so a resync.
    compacted_replay(&mut h, 95);

    // Absent at the watermark proves nothing (a delete the record did not note fits as
    // well): the key as it is now decides.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 95 }));
    let (id, _) = proof(&mut h);
    h.done(id, Ok(range(300, vec![], false)));
    let (_, r) = proof(&mut h);
    assert_eq!(r.revision, 0);

    // A key the mirror saw deleted is not read at the watermark (it is absent there).
    let mut rec = anchored(100);
    rec.anchor.as_mut().unwrap().gone = true;
    let mut h = start(InitialSyncMode::RequireEmpty, None, &rec, 300);
    let (id, _) = proof(&mut h);
    h.done(id, Err(Failure::Compacted { rev: 95 }));
    let (_, r) = proof(&mut h);
    assert_eq!(r.revision, 0);
}

#[test]
fn a_delete_of_the_anchor_key_is_recorded() {
    let mut h = Harness::new(config(InitialSyncMode::RequireEmpty), 35);
    let w = cold_start(&mut h, "3.5.13");
    // The cold start's newest put is /app/b at 60; a delete of it is applied.
    h.watch(
        w,
        WatchEvent::Events {
            header_revision: 101,
            events: vec![del_ev(b"/app/b", 101)],
        },
    );
    let (_, cmd) = one(h.drain());
    let a = fence_of(&cmd).anchor.unwrap();
    assert_eq!(
        (a.key.as_slice(), a.rev, a.gone),
        (&b"/app/b"[..], 60, true)
    );
}

/// A record at watermark 100 whose anchor (the put at 90) is followed by `deletes`, counted
/// as the mirror counts them.
fn anchored_with(deletes: &[(&[u8], i64)]) -> Checkpoint {
    let mut rec = anchored(100);
    let a = rec.anchor.as_mut().unwrap();
    for (key, rev) in deletes {
        a.after += 1;
        a.after_sha = Anchor::chain(&a.after_sha, *rev, EventKind::Delete, key);
    }
    rec
}

/// The proof read comes and the source answers with the anchor's put, unchanged.
fn proof_passes(h: &mut Harness, src_rev: i64) {
    let (id, _) = proof(h);
    h.done(id, Ok(range(src_rev, vec![anchor_kv()], false)));
}

/// The Txns the agent sent, of any kind.
fn txns(h: &Harness) -> usize {
    h.log
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Command {
                    cmd: Command::Txn(_),
                    ..
                }
            )
        })
        .count()
}

/// The one command emitted, besides cancelling a replay watch that did its job.
fn one(cmds: Vec<(u64, Command)>) -> (u64, Command) {
    support::one(
        cmds.into_iter()
            .filter(|(_, c)| !matches!(c, Command::CancelWatch { .. }))
            .collect(),
    )
}

/// The replay before the claim: the watch from the anchor's next revision (91) is opened
/// and established. Returns it.
fn connect_replay(h: &mut Harness) -> WatchRequest {
    let (wid, cmd) = one(h.drain());
    let Command::Watch(w) = cmd else {
        panic!("expected the replay watch, got {cmd:?}")
    };
    assert_eq!(
        w.start_revision, 91,
        "the window since the anchor is replayed"
    );
    h.done(wid, Ok(Reply::WatchStarted));
    w
}

/// The replay before the claim finds nothing in the window: progress closes it.
fn pass_replay(h: &mut Harness, rev: i64) {
    let w = connect_replay(h);
    h.watch(w.watch_id, WatchEvent::Progress { revision: rev });
}

/// The replay before the claim finds its start compacted: the claim declares a resync.
fn compacted_replay(h: &mut Harness, compact_revision: i64) {
    let w = connect_replay(h);
    h.watch(
        w.watch_id,
        WatchEvent::Cancelled {
            compact_revision,
            reason: String::new(),
        },
    );
    let (_, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.watermark, rec.scan.is_some(), rec.prune_pending),
        (100, true, true),
        "claimed with the resync declared"
    );
}

/// Claims after a passing point proof and returns the first watch the tail opens.
fn claim_and_watch(h: &mut Harness, src_rev: i64) -> (u64, WatchRequest) {
    proof_passes(h, src_rev);
    pass_replay(h, src_rev);
    let (id, _) = one(h.drain());
    h.done(id, Ok(txn_ok(16)));
    let (wid, cmd) = one(h.drain());
    let Command::Watch(w) = cmd else {
        panic!("{cmd:?}")
    };
    h.done(wid, Ok(Reply::WatchStarted));
    // The proof made after the watch was established passes too.
    proof_passes(h, src_rev);
    (wid, w)
}

#[test]
fn a_put_below_the_watermark_that_the_mirror_never_saw_is_a_mismatch() {
    // Restored from a snapshot at 95, above the anchor (90): the point read cannot tell the
    // histories apart. The new history put /app/z at 97, below the old watermark (100).
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 120);
    proof_passes(&mut h, 120);
    // Before the claim, which would re-assert the promise, the window is replayed.
    let w = connect_replay(&mut h);
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 120,
            events: vec![put_ev(b"/app/z", b"new", 97)],
        },
    );
    let (found, _) = failed(&mut h);
    assert!(
        matches!(
            found,
            HistoryFinding::WindowExtraEvent {
                from: 91,
                kind: EventKind::Put,
                at: 97,
                applied: 0,
                upto: 100,
                ..
            }
        ),
        "{found:?}"
    );
    assert!(wrote_nothing(&h));

    // A running agent's new watch replays the window the same way.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 120);
    let (_, w) = claim_and_watch(&mut h, 120);
    assert_eq!(w.start_revision, 91);
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 120,
            events: vec![put_ev(b"/app/z", b"new", 97)],
        },
    );
    failed(&mut h);
    assert_eq!(txns(&h), 1, "only the claim");
}

#[test]
fn the_window_must_hold_exactly_the_deletes_the_mirror_applied() {
    let rec = anchored_with(&[(b"/app/d", 95)]);
    // The same history: the delete comes back (an excluded key's event does not count),
    // then an event past the watermark closes the window.
    let mut cfg = config(InitialSyncMode::RequireEmpty);
    cfg.sync.exclude_prefixes = vec!["skip/".into()];
    let mut h = start_with(cfg, &rec, 120);
    proof_passes(&mut h, 120);
    let same = vec![
        del_ev(b"/app/d", 95),
        put_ev(b"/app/skip/x", b"1", 96),
        put_ev(b"/app/n", b"1", 121),
    ];
    let w = connect_replay(&mut h);
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 121,
            events: same.clone(),
        },
    );
    let (id, cmd) = one(h.drain());
    assert_eq!(fence_of(&cmd).watermark, 100, "claimed");
    h.done(id, Ok(txn_ok(16)));
    // The tail's own watch replays it again, then copies what follows.
    let (wid, cmd) = one(h.drain());
    let Command::Watch(w) = cmd else {
        panic!("{cmd:?}")
    };
    h.done(wid, Ok(Reply::WatchStarted));
    proof_passes(&mut h, 121);
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 121,
            events: same,
        },
    );
    let (_, cmd) = one(h.drain());
    assert_eq!(data_ops(&cmd), vec![put(b"/mirror/n", b"1")]);
    assert_eq!(h.m.status().source_history_windows, 2);

    // Another history deleted another key there: same count, another digest.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &rec, 120);
    proof_passes(&mut h, 120);
    let w = connect_replay(&mut h);
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 121,
            events: vec![del_ev(b"/app/e", 95), put_ev(b"/app/n", b"1", 121)],
        },
    );
    assert!(
        matches!(
            failed(&mut h).0,
            HistoryFinding::WindowMismatch {
                found: 1,
                applied: 1,
                ..
            }
        ),
        "{:?}",
        finding(&h)
    );
    assert!(wrote_nothing(&h));

    // And one that never deleted it: a progress notification past the watermark closes
    // the window with an event missing.
    let cfg = config(InitialSyncMode::RequireEmpty);
    let mut h = start_on("3.5.15", cfg.clone(), &rec, 120);
    proof_passes(&mut h, 120);
    pass_replay(&mut h, 120);
    assert!(
        matches!(
            failed(&mut h).0,
            HistoryFinding::WindowMismatch {
                found: 0,
                applied: 1,
                ..
            }
        ),
        "{:?}",
        finding(&h)
    );
    assert!(wrote_nothing(&h));

    // The same on an etcd that drops a delete at the compact revision from watches (etcd
    // #18089, before 3.5.15): the missing delete may be that tombstone, so nothing proves
    // the window and the claim declares a resync instead.
    let mut h = start_on("3.5.13", cfg, &rec, 120);
    proof_passes(&mut h, 120);
    pass_replay(&mut h, 120);
    let (_, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.scan.is_some(), rec.prune_pending),
        (true, true),
        "claimed with the resync declared"
    );
    let c = &h.m.status().conditions[&ConditionType::SourceHistoryMismatch];
    assert_eq!((c.status, c.reason.as_str()), (false, "AnchorCompacted"));
    assert!(
        matches!(
            finding(&h),
            HistoryFinding::WindowUnconfirmed {
                found: 0,
                applied: 1,
                why: Unconfirmed::TombstoneDropped,
                ..
            }
        ),
        "{:?}",
        finding(&h)
    );
}

#[test]
fn a_running_agent_counts_what_it_applies_and_replays_it_after_a_break() {
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 100);
    let (wid, w) = claim_and_watch(&mut h, 100);
    assert_eq!(w.start_revision, 91);
    // Past the (empty) window: a put at 101 and a delete at 102.
    h.watch(
        w.watch_id,
        WatchEvent::Events {
            header_revision: 102,
            events: vec![put_ev(b"/app/p", b"1", 101), del_ev(b"/app/q", 102)],
        },
    );
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(rec.watermark, 102);
    let a = rec.anchor.clone().unwrap();
    assert_eq!(
        (a.key.as_slice(), a.rev, a.after, a.after_sha.clone()),
        (
            &b"/app/p"[..],
            101,
            1,
            Anchor::chain("", 102, EventKind::Delete, b"/app/q")
        ),
        "the anchor is the put, with the delete after it counted"
    );
    h.done(id, Ok(txn_ok(17)));
    let _ = wid;
    // The stream breaks: the new watch replays from the anchor's next revision.
    h.watch(
        w.watch_id,
        WatchEvent::Failed {
            failure: Failure::Transient {
                message: "connection reset".into(),
            },
        },
    );
    h.advance(Duration::from_secs(60));
    let cmds = h.drain();
    let Some(w2) = cmds.iter().find_map(|(_, c)| match c {
        Command::Watch(w) => Some(w.clone()),
        _ => None,
    }) else {
        panic!("{cmds:?}")
    };
    assert_eq!(w2.start_revision, 102);
}

#[test]
fn a_compacted_window_is_resynced() {
    // At connect: the claim declares the resync instead of re-asserting the watermark.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    proof_passes(&mut h, 300);
    let w = connect_replay(&mut h);
    h.watch(
        w.watch_id,
        WatchEvent::Cancelled {
            compact_revision: 250,
            reason: String::new(),
        },
    );
    let (_, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    assert_eq!(
        (rec.scan.map(|s| s.base), rec.prune_pending, rec.anchor),
        (Some(300), true, None)
    );
    let c = &h.m.status().conditions[&ConditionType::SourceHistoryMismatch];
    assert_eq!((c.status, c.reason.as_str()), (false, "AnchorCompacted"));
    assert!(
        matches!(
            finding(&h),
            HistoryFinding::WindowCompacted {
                anchor: 90,
                compact: 250,
                watermark: 100
            }
        ),
        "{:?}",
        finding(&h)
    );

    // In the tail: a forced resync, as after any compaction.
    let mut h = start(InitialSyncMode::RequireEmpty, None, &anchored(100), 300);
    let (_, w) = claim_and_watch(&mut h, 300);
    assert_eq!(w.start_revision, 91);
    h.watch(
        w.watch_id,
        WatchEvent::Cancelled {
            compact_revision: 250,
            reason: String::new(),
        },
    );
    assert_eq!(h.m.status().forced_resync_count, 1);
    assert!(h.m.status().condition(ConditionType::Compacted));
    assert!(h.stopped().is_none());
}
