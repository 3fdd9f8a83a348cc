//! What etcd walks for the keys a bounded scan returns, by key shape: prints figures,
//! asserts nothing. Every read is answered as etcd 3.4–3.6 answer a limited Range: the reply
//! counts every key in `[key, range_end)`, and that count is the walk under the index lock.
//! See docs/design.md, "Bounded scans".
//!
//! Run: `cargo bench -p tidemark-core --bench pager_walk [-- N]` (N keys per shape, default
//! 1,000,000). Per shape it prints keys walked per key returned, the reads made (and how many
//! found nothing), and the longest single walk. The first read that reaches a window's keys
//! walks its whole first run (no read finds the next key without walking up to it), so the
//! longest walk is the run's size, and 1.0 of the ratio is that read.

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included, Unbounded};
use tidemark_core::mirror::keys::Window;
use tidemark_core::mirror::pager::{Next, PageReply, Pager};

/// The scan's default page: `sync.pageBytes` (2 MiB) of 256-byte values is about 7,000 keys.
const LIMIT: u32 = 7_000;

struct Walk {
    ratio: f64,
    reads: u64,
    empty: u64,
    longest: u64,
}

fn walk(keys: &BTreeSet<Vec<u8>>, w: &Window) -> Walk {
    let mut p = Pager::default();
    let mut cursor = w.start.clone();
    let (mut reads, mut empty, mut longest, mut got) = (0u64, 0u64, 0u64, 0u64);
    loop {
        let bound = p.bound(w, &cursor);
        let end = if bound == [0] {
            Unbounded
        } else {
            Excluded(bound.clone())
        };
        let mut page: Vec<&Vec<u8>> = Vec::new();
        let mut count = 0u64;
        for k in keys.range::<Vec<u8>, _>((Included(cursor.clone()), end)) {
            if page.len() < LIMIT as usize {
                page.push(k);
            }
            count += 1;
        }
        reads += 1;
        empty += u64::from(count == 0);
        longest = longest.max(count);
        got += page.len() as u64;
        let reply = PageReply {
            first: page.first().map(|k| k.as_slice()),
            last: page.last().map(|k| k.as_slice()),
            returned: page.len(),
            more: count > u64::from(LIMIT),
            count: i64::try_from(count).expect("fewer than 2^63 keys"),
            limit: LIMIT,
        };
        match p.advance(w, &cursor, &bound, reply) {
            Next::Done => break,
            Next::From(c) => cursor = c,
        }
    }
    assert_eq!(got, keys.len() as u64, "the scan read every key once");
    Walk {
        ratio: p.walked as f64 / keys.len().max(1) as f64,
        reads,
        empty,
        longest,
    }
}

fn window(prefix: &[u8]) -> Window {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    Window {
        start: prefix.to_vec(),
        end,
    }
}

/// A name, the window's prefix, and the keys.
type Shape = (&'static str, &'static [u8], BTreeSet<Vec<u8>>);

/// A fixed xorshift stream, so every run measures the same keys.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() {
    let n: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let resources = [
        "apiregistration.k8s.io/apiservices",
        "configmaps",
        "events",
        "leases",
        "pods",
        "secrets",
        "services/endpoints",
    ];
    let shapes: Vec<Shape> = vec![
        (
            "decimal, zero-padded (bench)",
            b"/bench/",
            (0..n)
                .map(|i| format!("/bench/k{i:010}").into_bytes())
                .collect(),
        ),
        (
            "decimal, unpadded",
            b"/bench/",
            (0..n)
                .map(|i| format!("/bench/k{i}").into_bytes())
                .collect(),
        ),
        (
            "128-bit hex",
            b"/u/",
            (0..n)
                .map(|_| format!("/u/{:016x}{:016x}", rng.next(), rng.next()).into_bytes())
                .collect(),
        ),
        (
            "Kubernetes-like paths",
            b"/registry/",
            (0..n)
                .map(|i| {
                    let r = resources[(rng.next() % resources.len() as u64) as usize];
                    let (ns, obj) = (i % 300, rng.next() % 100_000);
                    format!("/registry/{r}/ns-{ns}/obj-{obj:x}-{i}").into_bytes()
                })
                .collect(),
        ),
        (
            "random binary",
            b"/b/",
            (0..n)
                .map(|_| {
                    let mut k = b"/b/".to_vec();
                    k.extend_from_slice(&rng.next().to_be_bytes());
                    k
                })
                .collect(),
        ),
    ];
    println!("{n} keys per shape, pages of {LIMIT} keys");
    println!(
        "{:<30} {:>16} {:>8} {:>8} {:>12}",
        "shape", "walked/returned", "reads", "empty", "longest walk"
    );
    for (name, prefix, keys) in &shapes {
        let w = walk(keys, &window(prefix));
        println!(
            "{name:<30} {:>16.3} {:>8} {:>8} {:>12}",
            w.ratio, w.reads, w.empty, w.longest
        );
    }
}
