//! Replays every checked-in input through the same checks the fuzz targets run, on stable
//! Rust and without libFuzzer: the seed corpus (`corpus/<target>/`) and every crash the
//! fuzzers found (`regressions/<target>/`, one file per crash, named after what it caught).
//!
//! `cargo test` in `fuzz/` runs it, and `scripts/test.sh` (the CI test command) runs that;
//! `scripts/fuzz-smoke.sh` also replays the kept crashes through the libFuzzer binaries.

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
/// not change). Each passes with the default tolerances (so fuzzing goes past it) and fails when
/// its own tolerance (or all of them) is turned off. When none of the tolerances makes it fail any more, the bug
/// is fixed: move the file to `regressions/` and drop the tolerance.
#[test]
fn open_bugs_still_reproduce() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tidemark_fuzz::mirror as m;
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let flags: [(&str, &AtomicBool); 8] = [
        (
            "TOLERATE_TARGET_AHEAD_AFTER_GENESIS",
            &m::TOLERATE_TARGET_AHEAD_AFTER_GENESIS,
        ),
        (
            "TOLERATE_PAST_DEADLINE_SPIN",
            &m::TOLERATE_PAST_DEADLINE_SPIN,
        ),
        ("AVOID_RESTART_AFTER_SCAN", &m::AVOID_RESTART_AFTER_SCAN),
        ("TOLERATE_SPLIT_DURING_SCAN", &m::TOLERATE_SPLIT_DURING_SCAN),
        (
            "TOLERATE_CHAOS_UNREADABLE_RECORD",
            &m::TOLERATE_CHAOS_UNREADABLE_RECORD,
        ),
        ("AVOID_UNTRUSTED_GENESIS", &m::AVOID_UNTRUSTED_GENESIS),
        ("AVOID_SWEEP_TXN_FAILURE", &m::AVOID_SWEEP_TXN_FAILURE),
        (
            "TOLERATE_CHAOS_SWEEP_OUTSIDE_WINDOW",
            &m::TOLERATE_CHAOS_SWEEP_OUTSIDE_WINDOW,
        ),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("open-bugs");
    for (target, run) in tidemark_fuzz::TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for f in entries {
            let f = f.unwrap().path();
            let data = std::fs::read(&f).unwrap();
            let fails = || std::panic::catch_unwind(|| run(&data)).is_err();
            assert!(
                !fails(),
                "{} fails even with every tolerance on",
                f.display()
            );
            let mut caught_by = None;
            for (name, flag) in flags {
                let was = flag.load(Ordering::Relaxed);
                flag.store(false, Ordering::Relaxed);
                let failed = fails();
                flag.store(was, Ordering::Relaxed);
                if failed {
                    caught_by = Some(name);
                    break;
                }
            }
            if caught_by.is_none() {
                // Some inputs need two tolerances off (e.g. an avoidance and a tolerance).
                let saved: Vec<bool> = flags
                    .iter()
                    .map(|(_, f)| f.load(Ordering::Relaxed))
                    .collect();
                for (_, flag) in flags {
                    flag.store(false, Ordering::Relaxed);
                }
                if fails() {
                    caught_by = Some("all tolerances");
                }
                for ((_, flag), was) in flags.iter().zip(saved) {
                    flag.store(was, Ordering::Relaxed);
                }
            }
            assert!(
                caught_by.is_some(),
                "{} no longer fails with any tolerance off: the bug is fixed; move it to \
                 regressions/{target}/ and remove its tolerance",
                f.display()
            );
        }
    }
}
