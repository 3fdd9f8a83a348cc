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
        FaultyMode::ReorderCommits
        | FaultyMode::DropWatchEvent
        | FaultyMode::StaleHistoryProof
        | FaultyMode::CompareChainStart => {}
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

/// The commit chain's compare is what keeps pipelined Txns in order: a driver that
/// compares the start of the chain instead lets a Txn that overtakes its predecessor apply
/// over a gap, and the checker must see the target leave the source. Real core only (the
/// reference double keeps one Txn in flight).
#[test]
fn compare_chain_start_is_caught_with_the_real_core() {
    let mut caught = None;
    let mut rewritten = 0;
    for seed in 0..BOUND {
        let mut s = Schedule::generate(2000 + seed, ReplicatorKind::Core);
        s.options.faulty = Some(FaultyMode::CompareChainStart);
        s.options.safety_ms = s.options.safety_ms.max(30_000);
        s.faults.clear();
        s.options.junk_keys = 0;
        s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(200);
        let r = run(&s, false);
        rewritten += r.coverage.get("faulty.chain_compare_rewritten");
        if let Some(v) = r.violation {
            caught = Some((seed, format!("[{}] {}", v.invariant, v.detail)));
            break;
        }
    }
    assert!(rewritten > 0, "the core never had two Txns in flight");
    let (seed, v) = caught.expect("CompareChainStart was not caught");
    eprintln!("CompareChainStart caught at seed {seed}: {v}");
}

#[test]
fn the_chain_schedules_pass_without_the_fault() {
    for seed in 0..2 {
        let mut s = Schedule::generate(2000 + seed, ReplicatorKind::Core);
        s.faults.clear();
        s.options.junk_keys = 0;
        s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(200);
        let r = run(&s, false);
        assert!(r.passed(), "seed {seed} control failed: {:?}", r.violation);
    }
}
