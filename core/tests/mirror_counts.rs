// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Key counts of the source (docs/design.md, "Bounded scans"): etcd walks every key of a
//! count-only Range under the index lock its writers take, so the core never asks for the
//! count of the whole range in one read. These scripts serve the reads from a key set and
//! check what each read walked.

mod support;

use support::*;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Cluster, Command, KeyValue, RangeReply, Reply};

/// 2,000 mirrored keys and 300 under the excluded `skip/`.
fn source() -> Vec<KeyValue> {
    let mut kvs: Vec<KeyValue> = (0..2000)
        .map(|i| kv(format!("/app/k{i:04}").as_bytes(), b"v", 50))
        .collect();
    kvs.extend((0..300).map(|i| kv(format!("/app/skip/x{i:03}").as_bytes(), b"v", 50)));
    kvs
}

/// A harness driven past the claim on an empty target, up to its R0 read (answered).
fn at_r0(limit: u32) -> Harness {
    let mut c = config(InitialSyncMode::RequireEmpty);
    c.sync.exclude_prefixes = vec!["skip/".into()];
    c.sync.page_key_limit = limit;
    let mut h = Harness::new(c, 3);
    h.auto_count = false;
    claim_on_empty_target(&mut h, "3.5.16");
    let (id, cmd) = one(h.drain());
    assert!(is_r0(&cmd), "{cmd:?}");
    // The core takes only the revision from it.
    h.done(id, Ok(range(100, vec![], false)));
    h
}

#[test]
fn genesis_counts_its_keys_in_bounded_spans_that_start_where_the_scan_found_them() {
    let limit = 100;
    let mut h = at_r0(limit);
    let kvs = source();
    // No count before the scan: the genesis start records no base count.
    let (id, cmd) = one(h.drain());
    let rec = fence_of(&cmd);
    let scan = rec.scan.expect("the genesis start records the scan");
    assert_eq!((scan.base, scan.base_count), (100, None));
    h.done(id, Ok(txn_ok(11)));
    // The watch and the scan pages, up to the first that finds keys.
    let mut cmds = h.drain();
    for _ in 0..1000 {
        if cmds.iter().any(|(_, c)| is_bounded_count(c)) {
            break;
        }
        let pages: Vec<_> = cmds
            .iter()
            .filter_map(|(id, c)| match c {
                Command::Range(r) if r.cluster == Cluster::Source && !r.count_only => {
                    Some((*id, r.clone()))
                }
                _ => None,
            })
            .collect();
        assert!(!pages.is_empty(), "{cmds:#?}");
        for (id, r) in pages {
            h.done(id, Ok(serve_range(&r, 100, &kvs)));
        }
        cmds = h.drain();
    }
    // The progress count follows, in bounded spans pinned at the base.
    let mut walks = Vec::new();
    while let Some((id, r)) = cmds.iter().find_map(|(id, c)| match c {
        Command::Range(r) if is_bounded_count(c) => Some((*id, r.clone())),
        _ => None,
    }) {
        assert_eq!(r.revision, 100, "every span is pinned at the base");
        let Reply::Range(reply) = serve_range(&r, 100, &kvs) else {
            unreachable!()
        };
        walks.push((r.key.clone(), r.range_end.clone(), reply.count));
        h.done(
            id,
            Ok(Reply::Range(RangeReply {
                kvs: vec![],
                ..reply
            })),
        );
        cmds = h.drain();
        assert!(walks.len() < 1000, "the count never ended");
    }
    assert!(!walks.is_empty(), "no progress count");
    assert_eq!(h.m.status().initial_sync_total_key_count, 2000);
    assert_eq!(
        walks.iter().map(|w| w.2).sum::<i64>(),
        2000,
        "the spans are disjoint and skip the excluded keys: {walks:?}"
    );
    assert!(
        walks
            .iter()
            .all(|(k, e, _)| !(k.as_slice() < b"/app/skip0".as_slice()
                && e.as_slice() > b"/app/skip/".as_slice())),
        "no span reaches into the excluded prefix: {walks:?}"
    );
    // The first span ends just past where the scan found the keys, instead of walking
    // the whole run of keys (2,000 here) as a first read that knows nothing does.
    let first_hit = walks.iter().find(|w| w.2 > 0).unwrap().2;
    assert!(first_hit <= i64::from(limit), "{first_hit}: {walks:?}");
}
