//! The simulator has teeth: each deliberately broken driver mode must be caught within a
//! bounded number of seeds. Run against the reference test double, so a verdict depends on
//! the checker alone, not on the state of the real core. Modes that only bite the real core
//! (`FaultyMode::needs_core`: a lie about the source-history proof) are tested with it, in
//! `restore.rs`.

use tidemark_sim::runner::run;
use tidemark_sim::schedule::{Fault, TimedFault};
use tidemark_sim::{FaultyMode, ReplicatorKind, Schedule};

/// Seeds tried per mode before the test gives up.
const BOUND: u64 = 12;

fn schedule(seed: u64, mode: FaultyMode) -> Schedule {
    let mut s = Schedule::generate(1000 + seed, ReplicatorKind::Reference);
    s.options.faulty = Some(mode);
    s.options.safety_ms = s.options.safety_ms.max(30_000);
    // Keep the world calm apart from what the mode needs, so the catch is the mode's doing.
    s.faults.clear();
    s.options.junk_keys = 0;
    match mode {
        FaultyMode::DropFenceCompare => s.faults.push(TimedFault {
            at_ms: 5_000,
            fault: Fault::Twin {
                for_ms: 15_000,
                config_variant: 0,
            },
        }),
        FaultyMode::ApplyTwiceAfterCrash => s.faults.push(TimedFault {
            at_ms: 8_000,
            fault: Fault::Crash {
                agent: 0,
                down_ms: 500,
            },
        }),
        FaultyMode::ReorderCommits | FaultyMode::DropWatchEvent | FaultyMode::StaleHistoryProof => {
        }
    }
    s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(10);
    s
}

fn caught_within_bound(mode: FaultyMode) -> (u64, String) {
    for seed in 0..BOUND {
        let r = run(&schedule(seed, mode), false);
        if let Some(v) = r.violation {
            return (seed, format!("[{}] {}", v.invariant, v.detail));
        }
    }
    panic!("{mode:?} was not caught within {BOUND} seeds");
}

#[test]
fn drop_fence_compare_is_caught() {
    let (seed, v) = caught_within_bound(FaultyMode::DropFenceCompare);
    eprintln!("DropFenceCompare caught at seed {seed}: {v}");
}

#[test]
fn reorder_commits_is_caught() {
    let (seed, v) = caught_within_bound(FaultyMode::ReorderCommits);
    eprintln!("ReorderCommits caught at seed {seed}: {v}");
}

#[test]
fn drop_watch_event_is_caught() {
    let (seed, v) = caught_within_bound(FaultyMode::DropWatchEvent);
    eprintln!("DropWatchEvent caught at seed {seed}: {v}");
}

#[test]
fn apply_twice_after_crash_is_caught() {
    let (seed, v) = caught_within_bound(FaultyMode::ApplyTwiceAfterCrash);
    eprintln!("ApplyTwiceAfterCrash caught at seed {seed}: {v}");
}

#[test]
fn the_same_schedules_pass_without_the_fault() {
    // Control: the calm schedules above pass when the driver is honest.
    for mode in FaultyMode::ALL.into_iter().filter(|m| !m.needs_core()) {
        for seed in 0..3 {
            let mut s = schedule(seed, mode);
            s.options.faulty = None;
            let r = run(&s, false);
            assert!(
                r.passed(),
                "{mode:?} seed {seed} control failed: {:?}",
                r.violation
            );
        }
    }
}
