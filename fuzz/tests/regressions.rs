//! Replays every checked-in input through the same checks the fuzz targets run, on stable
//! Rust and without libFuzzer: the seed corpus (`corpus/<target>/`) and every crash the
//! fuzzers found (`regressions/<target>/`, one file per crash, named after what it caught).
//!
//! `cargo test` in `fuzz/` runs it, and `scripts/test.sh` (the CI test command) runs that;
//! `scripts/fuzz-smoke.sh` also replays the kept crashes through the libFuzzer binaries.

// Panics are the test report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn replay(dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut n = 0;
    for (target, run) in tidemark_fuzz::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            if f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let data = std::fs::read(&f).unwrap();
            eprintln!("{target}: {}", f.display());
            run(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn seed_corpus_passes() {
    assert!(replay("corpus") > 0, "no seed corpus found");
}

#[test]
fn every_crash_found_stays_fixed() {
    replay("regressions");
}
