//! Replays every checked-in input through the same checks the fuzz targets run, on stable
//! Rust and without libFuzzer: the seed corpus (`corpus/<target>/`) and every crash the
//! fuzzers found (`regressions/<target>/`, one file per crash, named after what it caught).
//!
//! `cargo test` in `fuzz/` runs it; `scripts/fuzz-smoke.sh` runs it before fuzzing.

// Panics are the test report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Mutex;

/// The open-bug test flips a process-wide tolerance; the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

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
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(replay("corpus") > 0, "no seed corpus found");
}

#[test]
fn every_crash_found_stays_fixed() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    replay("regressions");
}

/// Inputs under `open-bugs/<target>/` reproduce bugs not fixed yet (in code this crate may
/// not change). Each must still fail when its tolerance is off; when one stops failing, the
/// bug is fixed: move the file to `regressions/` and drop the tolerance.
#[test]
fn open_bugs_still_reproduce() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use std::sync::atomic::Ordering;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("open-bugs");
    let m = &tidemark_fuzz::mirror::TOLERATE_PAST_DEADLINE_SPIN;
    let r = &tidemark_fuzz::mirror::AVOID_RESTART_AFTER_SCAN;
    let d = &tidemark_fuzz::mirror::TOLERATE_SPLIT_DURING_SCAN;
    let b = &tidemark_fuzz::mirror::TOLERATE_CHAOS_UNREADABLE_RECORD;
    let u = &tidemark_fuzz::mirror::AVOID_UNTRUSTED_GENESIS;
    let w = &tidemark_fuzz::mirror::AVOID_SWEEP_TXN_FAILURE;
    let o = &tidemark_fuzz::mirror::TOLERATE_CHAOS_SWEEP_OUTSIDE_WINDOW;
    for flag in [m, r, d, b, u, w, o] {
        flag.store(false, Ordering::Relaxed);
    }
    for (target, run) in tidemark_fuzz::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for f in entries {
            let f = f.unwrap().path();
            let data = std::fs::read(&f).unwrap();
            let failed = std::panic::catch_unwind(|| run(&data)).is_err();
            assert!(
                failed,
                "{} no longer fails: the bug is fixed; move it to regressions/{target}/ and remove its tolerance",
                f.display()
            );
        }
    }
    for flag in [m, r, d, b, u, w, o] {
        flag.store(true, Ordering::Relaxed);
    }
}
