// Test code: a panic with the failing value is the report we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `sync.sourceReadPercent` (docs/design.md, "Bounded scans"): a genesis's bulk source
//! reads wait between them so that they keep the source busy for at most that share of
//! the time, where a read's busy time is its latency less the round trip that the point
//! reads show. These scripts answer each read after a chosen latency and check when the
//! next read goes out.

mod support;

use std::time::Duration;
use support::*;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::etcd::{Cluster, Command, KeyValue, RangeRequest};
use tidemark_core::mirror::CommandId;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn source() -> Vec<KeyValue> {
    (0..400)
        .map(|i| kv(format!("/app/k{i:04}").as_bytes(), b"v", 50))
        .collect()
}

fn scan_page(cmds: &[(CommandId, Command)]) -> Option<(CommandId, RangeRequest)> {
    cmds.iter().find_map(|(id, c)| match c {
        Command::Range(r) if r.cluster == Cluster::Source && !r.count_only => {
            Some((*id, r.clone()))
        }
        _ => None,
    })
}

/// A genesis at `percent`, past its start record, with the R0 read answered after `rtt`;
/// returns the harness and the commands after the start record.
fn scanning(percent: u32, rtt: Duration) -> (Harness, Vec<(CommandId, Command)>) {
    let mut c = config(InitialSyncMode::RequireEmpty);
    c.sync.page_key_limit = 20;
    c.sync.source_read_percent = percent;
    let mut h = Harness::new(c, 7);
    // The watch guard is a point read too: it is answered with the pages, after their
    // latency, so that only the R0 read sets the round trip.
    h.auto_guard = false;
    claim_on_empty_target(&mut h, "3.5.16");
    let (id, cmd) = one(h.drain());
    assert!(is_r0(&cmd), "{cmd:?}");
    h.advance(rtt);
    h.done(id, Ok(range(100, vec![], false)));
    let (id, cmd) = one(h.drain());
    assert!(fence_of(&cmd).scan.is_some(), "{cmd:?}");
    h.done(id, Ok(txn_ok(11)));
    let cmds = h.drain();
    (h, cmds)
}

/// Answers scan pages after `latency` each until one that found keys is answered; returns
/// what the core sent right after that answer.
fn to_first_full_page(
    h: &mut Harness,
    mut cmds: Vec<(CommandId, Command)>,
    latency: Duration,
) -> Vec<(CommandId, Command)> {
    let kvs = source();
    for _ in 0..1000 {
        let Some((id, r)) = scan_page(&cmds) else {
            // Waiting out the share: the next page comes at the core's deadline.
            h.advance(ms(1));
            cmds = h.drain();
            continue;
        };
        h.advance(latency);
        for (gid, _) in cmds.iter().filter(|(_, c)| is_watch_guard(c)) {
            h.done(*gid, Ok(range(100, vec![], false)));
        }
        let reply = serve_range(&r, 100, &kvs);
        let found = matches!(&reply, tidemark_core::etcd::Reply::Range(rr) if !rr.kvs.is_empty());
        h.done(id, Ok(reply));
        cmds = h.drain();
        if found {
            return cmds;
        }
    }
    panic!("the scan never found the keys");
}

#[test]
fn each_page_waits_out_its_share_of_the_source_less_the_round_trip() {
    // 25%: a page that kept the source busy for 8 ms (10 ms less the 2 ms round trip)
    // is followed by 24 ms without a bulk read.
    let (mut h, cmds) = scanning(25, ms(2));
    let cmds = to_first_full_page(&mut h, cmds, ms(10));
    assert!(scan_page(&cmds).is_none(), "a page right after: {cmds:#?}");
    h.advance(ms(23));
    let cmds = h.drain();
    assert!(scan_page(&cmds).is_none(), "a page 23 ms after: {cmds:#?}");
    h.advance(ms(1));
    let cmds = h.drain();
    assert!(scan_page(&cmds).is_some(), "no page 24 ms after: {cmds:#?}");
    let waited = h.m.status().source_read_wait_seconds;
    assert!(waited >= 0.024, "{waited}");
}

#[test]
fn at_100_percent_the_next_page_goes_at_once() {
    let (mut h, cmds) = scanning(100, ms(2));
    let cmds = to_first_full_page(&mut h, cmds, ms(10));
    assert!(scan_page(&cmds).is_some(), "{cmds:#?}");
    assert_eq!(h.m.status().source_read_wait_seconds, 0.0);
}

#[test]
fn a_page_no_slower_than_the_round_trip_waits_for_nothing() {
    // A distant source: the pages' latency is the round trip, not the source's work.
    let (mut h, cmds) = scanning(25, ms(50));
    let cmds = to_first_full_page(&mut h, cmds, ms(50));
    assert!(scan_page(&cmds).is_some(), "{cmds:#?}");
}
