// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Scripted exchanges of order-free genesis pages (docs/design.md, "Pipelined commits"):
//! page Txns compare the fence's mod revision and put only their keys, so they apply in
//! any order; the durable cursor moves by a fence write of its own, sent with every page
//! known applied.

mod support;

use std::time::Duration;

use support::*;
use tidemark_core::classify::Failure;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Cluster, Command, CompareTarget, KeyValue, RangeReply, Reply, TxnReply};
use tidemark_core::mirror::checkpoint::Scan;
use tidemark_core::mirror::{Checkpoint, CommandId, FailKind, StopReason};

/// Eight source keys `/app/a` .. `/app/h`, read at revision 100.
fn eight_keys() -> Vec<KeyValue> {
    (b'a'..=b'h')
        .map(|c| kv(&[b'/', b'a', b'p', b'p', b'/', c], &[c], 50))
        .collect()
}

/// A mirror that may keep 16 Txns in flight, two keys per Txn, over a 20 ms round trip.
fn cfg() -> tidemark_core::config::MirrorConfig {
    let mut c = config(InitialSyncMode::Overwrite);
    c.sync.max_txns_in_flight = 16;
    c.sync.max_txn_ops = 3;
    c.sync.page_key_limit = 8;
    c
}

fn pages_of(cmds: &[(CommandId, Command)]) -> Vec<(CommandId, Command)> {
    cmds.iter().filter(|(_, c)| is_page(c)).cloned().collect()
}

fn fence_writes_of(cmds: &[(CommandId, Command)]) -> Vec<(CommandId, Command)> {
    cmds.iter()
        .filter(|(_, c)| matches!(c, Command::Txn(_)) && !is_page(c))
        .cloned()
        .collect()
}

/// Answers every source read in `cmds` (and the reads they lead to) from `kvs` at `rev`;
/// returns the other commands: page Txns, fence writes, watches.
fn serve_source(
    h: &mut Harness,
    mut cmds: Vec<(CommandId, Command)>,
    rev: i64,
    kvs: &[KeyValue],
) -> Vec<(CommandId, Command)> {
    let mut rest = Vec::new();
    while !cmds.is_empty() {
        for (id, c) in std::mem::take(&mut cmds) {
            match &c {
                Command::Range(r) if r.count_only => h.done(id, Ok(range(rev, vec![], false))),
                Command::Range(r) => h.done(id, Ok(serve_range(r, rev, kvs))),
                _ => rest.push((id, c)),
            }
        }
        cmds = h.drain();
    }
    rest
}

/// A fresh genesis up to its first source page, answered with `kvs` (the whole range):
/// returns the page Txns it sends. Target revisions: claim 10, scan start 11.
fn fresh_genesis(seed: u64, kvs: Vec<KeyValue>) -> (Harness, Vec<(CommandId, Command)>) {
    let mut h = Harness::new(cfg(), seed);
    answer_probes(&mut h, ("3.5.13", 1, 100), ("3.5.13", 2, 5));
    let (id, _) = one(h.drain());
    h.done(id, Ok(range(5, vec![], false)));
    let (id, _) = one(h.drain());
    h.advance(Duration::from_millis(20));
    h.done(id, Ok(txn_ok(10)));
    let (id, _) = one(h.drain());
    h.done(
        id,
        Ok(Reply::Range(RangeReply {
            header_revision: 100,
            kvs: vec![],
            more: false,
            count: kvs.len() as i64,
        })),
    );
    let (id, _) = one(h.drain());
    h.advance(Duration::from_millis(20));
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    let pages = pages_of(&serve_source(&mut h, cmds, 100, &kvs));
    (h, pages)
}

/// The fence a failed compare shows.
fn fence_moved(fence: &[u8], rev: i64) -> Reply {
    Reply::Txn(TxnReply {
        succeeded: false,
        header_revision: rev,
        reads: vec![Some(kv(FENCE, fence, rev))],
    })
}

#[test]
fn pages_replied_out_of_order_all_apply_and_one_fence_write_records_them() {
    let (mut h, mut pending) = fresh_genesis(41, eight_keys());
    assert!(pending.len() > 1, "several pages in flight: {pending:#?}");
    assert_eq!(h.m.status().txns_in_flight, pending.len() as u64);
    for (_, p) in &pending {
        assert_eq!(compare_of(p), (CompareTarget::ModRevision, 11));
        assert_eq!(data_ops(p).len(), 2);
    }
    let mut written = Vec::new();
    let mut cursor_write = None;
    // Newest first: each reply is acted on at once, and the next page goes out.
    while let Some((id, p)) = pending.pop() {
        written.extend(data_ops(&p));
        h.done(id, Ok(txn_ok(12)));
        let cmds = h.drain();
        assert!(
            cursor_write.is_none(),
            "the cursor moved before every page applied"
        );
        pending.extend(pages_of(&cmds));
        if let Some(w) = fence_writes_of(&cmds).into_iter().next() {
            cursor_write = Some(w);
        }
    }
    assert_eq!(written.len(), 8, "every key once: {written:#?}");
    assert_eq!(h.m.status().chain_reorders + h.m.status().chain_breaks, 0);
    let (id, w) = cursor_write.expect("a cursor write once all pages applied");
    assert!(data_ops(&w).is_empty());
    let rec = fence_of(&w);
    let scan = rec.scan.unwrap();
    assert!(scan.scanned, "the last page ended the scan");
    assert_eq!(scan.smax, None, "pages past a cursor cannot be bounded");
    assert_eq!(
        compare_bytes(&w),
        h.applied_fence,
        "builds on the scan start"
    );
    h.done(id, Ok(txn_ok(13)));
    assert_eq!(h.m.status().scan_cursor_writes, 1);
    // Replay proven at R0 = 100: the final record.
    let (_, fin) = one(fence_writes_of(&h.drain()));
    assert!(fence_of(&fin).scan.is_none());
    assert_eq!(fence_of(&fin).watermark, 100);
}

#[test]
fn an_unknown_page_is_sent_again_and_the_cursor_waits_for_it() {
    let (mut h, mut pending) = fresh_genesis(42, eight_keys());
    let (lost_id, lost) = pending.remove(0);
    h.done(
        lost_id,
        Err(Failure::Unknown {
            message: "context deadline exceeded".into(),
        }),
    );
    assert_eq!(h.m.status().page_resends, 1);
    let mut copy_applied = false;
    let mut cursor_write = None;
    for _ in 0..40 {
        let Some((id, p)) = pending.pop() else {
            // Everything sent is answered: the backoff holds the copy.
            h.advance(Duration::from_secs(5));
            pending.extend(pages_of(&h.drain()));
            continue;
        };
        if p == lost {
            // The copy of the lost page: the same Txn, under the same fence revision (the
            // original, if it was only late, puts the same values and can apply no later
            // than the next fence write).
            copy_applied = true;
        }
        h.done(id, Ok(txn_ok(12)));
        let cmds = h.drain();
        pending.extend(pages_of(&cmds));
        if let Some(w) = fence_writes_of(&cmds).into_iter().next() {
            assert!(
                copy_applied && pending.is_empty(),
                "the cursor never passes a page not known applied"
            );
            cursor_write = Some(w);
            break;
        }
    }
    let (id, w) = cursor_write.expect("the cursor write after the copy applied");
    let scan = fence_of(&w).scan.unwrap();
    assert!(scan.scanned);
    assert_eq!(scan.cursor, b"/app/h\0".to_vec());
    // The fence write changes the fence's mod revision: no copy of a page compared at 11
    // can apply after it.
    h.done(id, Ok(txn_ok(20)));
    assert_eq!(h.m.status().page_resends, 1);
}

#[test]
fn a_page_failing_on_another_agents_fence_stops_without_writing_more() {
    let (mut h, mut pending) = fresh_genesis(43, eight_keys());
    let (id, _) = pending.pop().unwrap();
    let theirs = Checkpoint {
        holder: "ffffffffffffffffffffffffffffffff".into(),
        ..found_record(5, 0)
    };
    h.done(id, Ok(fence_moved(&theirs.encode(), 30)));
    assert!(h.drain().is_empty());
    match h.stopped() {
        Some(StopReason::Failed { kind, .. }) => assert_eq!(kind, FailKind::FenceLost),
        other => panic!("{other:?}"),
    }
    // The other pages' replies change nothing.
    for (id, _) in pending {
        h.done(id, Ok(txn_ok(31)));
    }
    assert!(h.drain().is_empty());
}

/// Serves a resumed scan's residue sweep over a target that holds nothing past the
/// cursor, lands the write that clears the mark at `rev`, and returns the other commands.
fn land_empty_residue_sweep(
    h: &mut Harness,
    mut cmds: Vec<(CommandId, Command)>,
    rev: i64,
) -> Vec<(CommandId, Command)> {
    loop {
        let mut next = Vec::new();
        let mut cleared = false;
        for (id, c) in cmds {
            match &c {
                Command::Range(r) if r.cluster == Cluster::Target => {
                    assert!(r.key.as_slice() >= b"/mirror/m\0".as_slice(), "{r:?}");
                    h.done(id, Ok(range(rev - 1, vec![], false)));
                }
                Command::Txn(_) => {
                    assert!(data_ops(&c).is_empty(), "nothing to delete: {c:?}");
                    assert_eq!(fence_of(&c).scan.unwrap().residue_above, None);
                    h.done(id, Ok(txn_ok(rev)));
                    cleared = true;
                }
                _ => next.push((id, c)),
            }
        }
        next.extend(h.drain());
        if cleared {
            return next;
        }
        cmds = next;
    }
}

/// A genesis resumed from a record whose durable cursor is `/app/m\0`, the previous
/// process (epoch 1) having died with pages past it in flight: claim at epoch 2 (target
/// revision 51), count, watch and the scan from the cursor, served from `source` at 310.
/// Returns the harness, the page Txns and the record resumed from.
fn resumed_genesis(
    seed: u64,
    source: &[KeyValue],
) -> (Harness, Vec<(CommandId, Command)>, Checkpoint) {
    let mut h = Harness::new(cfg(), seed);
    answer_probes(&mut h, ("3.5.13", 1, 300), ("3.5.13", 2, 50));
    let (id, _) = one(h.drain());
    let found = Checkpoint {
        scan: Some(Scan {
            base: 200,
            cursor: b"/app/m\0".to_vec(),
            scanned: false,
            rmax: 210,
            smax: None,
            base_count: None,
            residue_above: None,
        }),
        ..found_record(1, 0)
    };
    h.done(
        id,
        Ok(range(50, vec![kv(FENCE, &found.encode(), 49)], false)),
    );
    let (id, claim) = one(h.drain());
    assert_eq!(compare_of(&claim), (CompareTarget::ModRevision, 49));
    assert_eq!(fence_of(&claim).scan.unwrap().residue_above, Some(49));
    h.advance(Duration::from_millis(20));
    h.done(id, Ok(txn_ok(50)));
    // The residue sweep: the target past the cursor holds nothing newer than the record
    // found, so the only write is the one that clears the mark (at 51).
    let cmds = h.drain();
    let cmds = land_empty_residue_sweep(&mut h, cmds, 51);
    for (_, c) in &cmds {
        match c {
            Command::Range(r) if !r.count_only => {
                assert_eq!(r.key, b"/app/m\0".to_vec(), "from the durable cursor")
            }
            Command::Watch(w) => assert_eq!(w.start_revision, 201, "replays from R0 + 1"),
            _ => {}
        }
    }
    let rest = serve_source(&mut h, cmds, 310, source);
    (h, pages_of(&rest), found)
}

#[test]
fn a_resumed_scan_puts_again_the_pages_past_the_durable_cursor() {
    // The dead process's pages for /app/n and /app/o may or may not have applied (a crash
    // leaves no trace of them in the record). The resumed scan reads them again at a newer
    // revision and puts them again; the watch replays every event since R0, so whichever
    // value the target holds before the replay, it ends at the source's.
    let source = [
        kv(b"/app/b", b"b", 150),
        kv(b"/app/n", b"n2", 305),
        kv(b"/app/o", b"o2", 250),
    ];
    let (mut h, pages, _) = resumed_genesis(44, &source);
    let mut put_again = Vec::new();
    let mut rest = Vec::new();
    for (id, page) in pages {
        assert_eq!(
            compare_of(&page),
            (CompareTarget::ModRevision, 51),
            "under the claim's revision: anything the dead process sent compared another"
        );
        put_again.extend(data_ops(&page));
        h.done(id, Ok(txn_ok(52)));
        rest.extend(h.drain());
    }
    assert_eq!(
        put_again,
        vec![put(b"/mirror/n", b"n2"), put(b"/mirror/o", b"o2")],
        "only what is past the durable cursor, at the values read now"
    );
    let (id, w) = one(fence_writes_of(&rest));
    let scan = fence_of(&w).scan.unwrap();
    assert_eq!(
        (scan.base, scan.scanned, scan.rmax, scan.smax),
        (200, true, 310, None),
        "the base stays: the replay from 201 covers the pages of both processes"
    );
    assert_eq!(fence_of(&w).epoch, 2);
    h.done(id, Ok(txn_ok(53)));
}

#[test]
fn a_stale_twin_writing_the_fence_under_pages_in_flight_is_taken_over() {
    let source: Vec<KeyValue> = (b'n'..=b's')
        .map(|c| kv(&[b'/', b'a', b'p', b'p', b'/', c], &[c], 250))
        .collect();
    let (mut h, mut pending, found) = resumed_genesis(45, &source);
    assert!(pending.len() > 1, "{pending:#?}");
    // The twin (epoch 1, the record we resumed from) wrote the fence again after our claim.
    let twin = Checkpoint {
        v: 4,
        seq: 7,
        ..found.clone()
    };
    let (id, _) = pending.remove(1);
    h.done(id, Ok(fence_moved(&twin.encode(), 60)));
    let cmds = h.drain();
    assert!(
        cmds.iter()
            .any(|(_, c)| matches!(c, Command::CancelWatch { .. })),
        "the genesis is started over under the new claim"
    );
    let (id, claim) = one(fence_writes_of(&cmds));
    assert_eq!(
        compare_of(&claim),
        (CompareTarget::ModRevision, 60),
        "a claim over what the twin wrote"
    );
    assert_eq!(fence_of(&claim).epoch, 3);
    // Pages of the superseded claim are dropped whatever they answer.
    for (id, _) in pending {
        h.done(id, Ok(txn_ok(61)));
    }
    assert_eq!(h.m.status().initial_sync_copied_key_count, 0);
    assert_eq!(fence_of(&claim).scan.unwrap().residue_above, Some(60));
    h.done(id, Ok(txn_ok(62)));
    // The scan resumes from the durable cursor once the residue sweep cleared its mark
    // (at 63), under that write's revision.
    let cmds = h.drain();
    let cmds = land_empty_residue_sweep(&mut h, cmds, 63);
    let pages = pages_of(&serve_source(&mut h, cmds, 320, &source));
    assert!(!pages.is_empty());
    for (_, p) in &pages {
        assert_eq!(compare_of(p), (CompareTarget::ModRevision, 63));
    }
}

#[test]
fn a_cursor_write_mid_scan_drains_the_pages_and_later_pages_compare_its_revision() {
    let keys: Vec<KeyValue> = (b'a'..=b'p')
        .map(|c| kv(&[b'/', b'a', b'p', b'p', b'/', c], &[c], 50))
        .collect();
    let (mut h, mut pending) = fresh_genesis(46, keys);
    assert!(pending.len() >= 2, "{pending:#?}");
    // Past the time bound: the cursor must be recorded before more pages go out.
    h.advance(Duration::from_secs(11));
    let mut cursor_write = None;
    while let Some((id, _)) = pending.pop() {
        h.done(id, Ok(txn_ok(12)));
        let cmds = h.drain();
        assert!(
            pages_of(&cmds).is_empty(),
            "no new page while the cursor write waits"
        );
        if let Some(w) = fence_writes_of(&cmds).into_iter().next() {
            assert!(pending.is_empty(), "sent only once every page resolved");
            cursor_write = Some(w);
        }
    }
    let (id, w) = cursor_write.expect("a cursor write mid-scan");
    let scan = fence_of(&w).scan.unwrap();
    assert!(!scan.scanned, "pages are left");
    assert!(!scan.cursor.is_empty());
    h.done(id, Ok(txn_ok(20)));
    assert_eq!(h.m.status().scan_cursor_writes, 1);
    let next = pages_of(&h.drain());
    assert!(!next.is_empty(), "the scan goes on");
    for (_, p) in &next {
        assert_eq!(
            compare_of(p),
            (CompareTarget::ModRevision, 20),
            "under the cursor write's revision: no page sent before it can apply after it"
        );
    }
}
