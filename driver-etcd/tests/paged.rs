//! The driver's own range reads against real etcd 3.4 and 3.5: bounded, pinned pages
//! (`paged.rs`), the streaming `verify` comparison built on them, and the preflight's read
//! probe, which must prove permission without walking the range.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;
use support::{Etcd, Flags, V};
use tidemark_core::classify::Failure;
use tidemark_core::config::MirrorConfig;
use tidemark_core::etcd::{prefix_end, Cluster, Command, RangeRequest, Reply, SortBy};
use tidemark_core::mirror::KeySpace;
use tidemark_etcd::paged::PagedReader;
use tidemark_etcd::verify::compare;

const T: Duration = Duration::from_secs(10);

/// Puts `n` keys `PREFIX<i>` (zero-padded, so they share a long prefix) in Txns of 100.
async fn put_many(e: &Etcd, prefix: &str, n: usize) {
    let mut c = e.client().await;
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<etcd_client::TxnOp> = chunk
            .iter()
            .map(|i| etcd_client::TxnOp::put(format!("{prefix}{i:012}"), format!("v{i}"), None))
            .collect();
        c.txn(etcd_client::Txn::new().and_then(ops)).await.unwrap();
    }
}

async fn reads_are_bounded(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let x = support::executor(&e, &e, T);
    let n = 20_000;
    put_many(&e, "/app/objects/default/", n).await;
    put_many(&e, "/apq/", 10).await; // outside the window
    let ks = KeySpace::new(&MirrorConfig::new("/app/", "/dr/"));

    let mut r = PagedReader::new(&x, Cluster::Source, ks.source_windows(), 500);
    let mut keys = Vec::new();
    let mut pages = 0;
    while let Some(page) = r.next_page().await.unwrap() {
        pages += 1;
        assert!(page.len() <= 500, "a page returned {} keys", page.len());
        keys.extend(page.into_iter().map(|kv| kv.key));
    }
    assert!(r.done());
    assert_eq!(keys.len(), n, "every key once");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order");
    assert!(keys.iter().all(|k| k.starts_with(b"/app/")));
    let (walked, returned) = r.walked();
    assert_eq!(returned, n as u64);
    // An open-ended pager walks the rest of the range on every page: about n * pages / 2
    // (here some 400k). Bounded pages walk a few pages' worth each; the first read that
    // reaches the keys walks them all once.
    assert!(
        walked < 5 * n as u64,
        "walked {walked} keys for {n} in {pages} pages"
    );

    // Pinned: a key written after the first page is not seen, a count agrees.
    let mut r = PagedReader::new(&x, Cluster::Source, ks.source_windows(), 500);
    let first = r.next_page().await.unwrap().unwrap();
    let pinned = r.revision();
    assert!(pinned > 0);
    put_many(&e, "/app/zz-late/", 5).await;
    let mut counted = first.len() as u64;
    while let Some(c) = r.next_count().await.unwrap() {
        counted += c;
    }
    assert_eq!(
        counted, n as u64,
        "the count reads the snapshot of the first page"
    );
}
both_versions!(
    paged_reads_are_bounded_pinned_and_complete,
    reads_are_bounded
);

async fn verify_compares(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let x = support::executor(&e, &e, T);
    let ks = KeySpace::new(&MirrorConfig::new("/app/", "/dr/"));
    put_many(&e, "/app/k/", 3_000).await;
    put_many(&e, "/dr/k/", 3_000).await;
    let c = compare(&x, &ks).await.unwrap();
    assert!(c.equal(), "{c:?}");
    assert_eq!((c.source_keys, c.target_keys), (3_000, 3_000));

    let mut cl = e.client().await;
    cl.delete("/dr/k/000000000007", None).await.unwrap();
    cl.put("/dr/k/000000001500", "other", None).await.unwrap();
    cl.put("/dr/k/zz-orphan", "x", None).await.unwrap();
    cl.put("/dr/k/000000000007x", "x", None).await.unwrap();
    let c = compare(&x, &ks).await.unwrap();
    assert_eq!((c.missing, c.divergent, c.orphan), (1, 1, 2), "{c:?}");
    assert_eq!((c.source_keys, c.target_keys), (3_000, 3_001));
    assert_eq!(c.examples.len(), 4);
    assert!(!c.equal());
}
both_versions!(verify_streams_and_finds_each_difference, verify_compares);

/// A one-key read of the whole of `/app/` at `revision`.
fn app_range(revision: i64) -> Command {
    Command::Range(RangeRequest {
        cluster: Cluster::Source,
        key: b"/app/".to_vec(),
        range_end: prefix_end(b"/app/"),
        revision,
        limit: 1,
        count_only: false,
        keys_only: false,
        sort: SortBy::Key,
    })
}

/// The read probe the preflight (and every agent start) makes: the whole range at a
/// revision no server has reached. etcd authorizes it and refuses the revision before it
/// walks a key, so it proves the permission without touching the range.
async fn read_probe(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let x = support::executor(&e, &e, T);
    put_many(&e, "/app/", 100).await;
    let r = x.run(app_range(i64::MAX)).await;
    assert!(
        matches!(r, Err(Failure::FutureRevision)),
        "a future revision is refused as such: {r:?}"
    );
    // The same read at the current revision succeeds (so the probe above is refused for
    // its revision alone).
    let r = x.run(app_range(0)).await;
    assert!(
        matches!(r, Ok(Reply::Range(ref p)) if p.count == 100),
        "{r:?}"
    );
}
both_versions!(read_probe_at_a_future_revision, read_probe);
