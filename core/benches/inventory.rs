//! Inventory benchmarks: prints figures, asserts nothing about time.
//! Targets (issue K1): chunking 100k entries < 100 ms; selection over 1,000 Secrets < 20 ms.
//! Run: `cargo bench -p tidemark-core --bench inventory [-- [--runs N] [SECTION...]]`, where a
//! SECTION limits the run to the sections whose name contains it (`chunk`, `build`,
//! `select-mixed`, `select-one`, `parts`; so `select` runs both selections), which keeps setup
//! out of `perf record`; `--runs` overrides the repetitions.

// Benches measure wall time, which the core's determinism rules forbid inside core/src.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::Instant;
use tidemark_core::inventory::*;

fn entries(n: usize, tag: &str) -> Vec<Entry> {
    (0..n)
        .map(|i| Entry {
            group: if i % 3 == 0 {
                "apps".into()
            } else {
                String::new()
            },
            version: "v1".into(),
            kind: ["ConfigMap", "Deployment", "Service"][i % 3].into(),
            namespace: Some(format!("team-{}", i % 17)),
            name: format!("{tag}-resource-{i:07}"),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/name".to_string(),
                    format!("app-{}", i % 101),
                ),
                (
                    "app.kubernetes.io/part-of".to_string(),
                    "tidemark-bench".to_string(),
                ),
            ])),
            annotations: (i % 5 == 0).then(|| {
                BTreeMap::from([(
                    ANN_DELETION_GROUP.to_string(),
                    ((i % 3) as i64 - 1).to_string(),
                )])
            }),
        })
        .collect()
}

fn src(uuid: &str, secs: i64, comp: &str) -> SnapshotSource {
    SnapshotSource {
        lineage: default_lineage("ns", "syn"),
        composition_name: comp.into(),
        composition_namespace: "ns".into(),
        synthesizer_name: "syn".into(),
        synthesis_uuid: uuid.into(),
        synthesized: Timestamp::from_unix_secs(secs),
    }
}

/// Best and median of `runs` timings in milliseconds. The previous run's result is dropped
/// outside the timed region: freeing 30k entries is the caller's cost, not selection's, and
/// counting it made one run pay for the one before.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, f64, T) {
    let mut v = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        drop(last.take());
        let t = Instant::now();
        let r = f();
        v.push(t.elapsed().as_secs_f64() * 1e3);
        last = Some(r);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    (v[0], v[v.len() / 2], last.expect("runs > 0"))
}

/// Command line: `--runs N` and section filters; `cargo bench` itself passes `--bench`.
struct Args {
    runs: Option<usize>,
    sections: Vec<String>,
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            runs: None,
            sections: Vec::new(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(x) = it.next() {
            if x == "--runs" {
                let n = it.next().and_then(|n| n.parse().ok());
                a.runs = Some(n.expect("--runs takes a positive number"));
            } else if !x.starts_with("--") {
                a.sections.push(x);
            }
        }
        a
    }

    fn wants(&self, section: &str) -> bool {
        self.sections.is_empty() || self.sections.iter().any(|s| section.contains(s.as_str()))
    }

    fn runs(&self, default: usize) -> usize {
        self.runs.unwrap_or(default).max(1)
    }
}

fn main() {
    let args = Args::parse();
    if args.wants("chunk") || args.wants("build") {
        chunk_and_build(&args);
    }
    if args.wants("select-mixed") {
        select_mixed(&args);
    }
    if args.wants("select-one") || args.wants("parts") {
        select_one(&args);
    }
}

fn chunk_and_build(args: &Args) {
    let e = entries(100_000, "x");
    let (best, med, chunks) = time(args.runs(10), || {
        chunk_entries(&e, DEFAULT_CHUNK_LIMIT).expect("fits")
    });
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    println!(
        "chunk 100k entries ({:.1} MiB JSON, {} chunks): best {best:.2} ms, median {med:.2} ms (target < 100 ms)",
        bytes as f64 / 1048576.0,
        chunks.len()
    );
    let (best, med, secrets) = time(args.runs(10), || {
        build_snapshot_secrets(&src("u", 1, "comp"), &e, "kube-system", DEFAULT_CHUNK_LIMIT)
            .expect("fits")
    });
    println!(
        "build Secrets for 100k entries (chunk + 2 SHA-256 passes, {} Secrets): best {best:.2} ms, median {med:.2} ms",
        secrets.len()
    );
}

fn select_mixed(args: &Args) {
    // 1,000 Secrets: 10 snapshots (different Compositions of the lineage) of 100 chunks.
    let limit = 16 * 1024;
    let mut all = Vec::new();
    for s in 0..10 {
        let e = entries(10_000, &format!("s{s}"));
        let mut secrets = build_snapshot_secrets(
            &src(&format!("uuid-{s}"), 1000 + s, &format!("comp{s}")),
            &e,
            "kube-system",
            limit,
        )
        .expect("fits");
        secrets.truncate(100);
        all.extend(secrets);
    }
    // The newest group: a complete snapshot of ~90 chunks; older groups fill up to 1,000.
    let newest = entries(8_000, "new");
    let n = build_snapshot_secrets(
        &src("uuid-new", 5000, "compnew"),
        &newest,
        "kube-system",
        limit,
    )
    .expect("fits");
    let count = n.len();
    all.truncate(1000 - count);
    all.extend(n);
    all.reverse();
    let (best, med, sel) = time(args.runs(20), || {
        select_with_limit(&all, &default_lineage("ns", "syn"), limit)
    });
    let outcome = match &sel {
        Selection::Selected(s) => format!("selected {} entries", s.entries.len()),
        Selection::Invalid(i) => format!("invalid {}", i.reason),
        Selection::None => "none".into(),
    };
    println!(
        "select over {} Secrets (newest group {count} chunks, {outcome}): best {best:.2} ms, median {med:.2} ms (target < 20 ms)",
        all.len()
    );
}

fn select_one(args: &Args) {
    // Selection's limit, as in `select_mixed`; the chunks below are packed to 6 KiB.
    let limit = 16 * 1024;
    // Worst case: all 1,000 Secrets are one complete snapshot (1,000 chunks to hash and decode).
    // Find an entry count that packs into exactly 1,000 chunks of 6 KiB (monotone search).
    let build = |n: usize| {
        build_snapshot_secrets(
            &src("uuid-big", 9000, "big"),
            &entries(n, "big"),
            "kube-system",
            6 * 1024,
        )
        .expect("fits")
    };
    let (mut lo, mut hi) = (1usize, 200_000usize);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if build(mid).len() < 1000 {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let one = build(lo);
    let (best, med, sel) = time(args.runs(20), || {
        select_with_limit(&one, &default_lineage("ns", "syn"), limit)
    });
    let outcome = match &sel {
        Selection::Selected(s) => format!("selected {} entries", s.entries.len()),
        Selection::Invalid(i) => format!("invalid {}", i.reason),
        Selection::None => "none".into(),
    };
    println!(
        "select over {} Secrets of one snapshot ({outcome}): best {best:.2} ms, median {med:.2} ms (target < 20 ms)",
        one.len()
    );

    // Where the worst case goes: two SHA-256 passes and JSON decoding of every chunk.
    let datas: Vec<&[u8]> = one
        .iter()
        .map(|s| s.inventory_bytes().expect("data"))
        .collect();
    let total: usize = datas.iter().map(|d| d.len()).sum();
    let (best, _, _) = time(args.runs(20), || {
        datas
            .iter()
            .map(|d| secret::chunk_sha256(d).len())
            .sum::<usize>()
            + secret::snapshot_sha256(datas.iter().copied()).len()
    });
    println!(
        "  of which SHA-256 (2 x {:.1} MiB): best {best:.2} ms",
        total as f64 / 1048576.0
    );
    // The decoded chunks are returned, so freeing them stays outside the timing as above.
    let (best, _, _) = time(args.runs(20), || {
        datas
            .iter()
            .map(|d| decode_chunk(d).expect("valid"))
            .collect::<Vec<_>>()
    });
    println!("  of which JSON decode + validate: best {best:.2} ms");
}
