//! The simulator has teeth: each deliberately broken driver mode, wrapped around the real
//! core (the code we ship), must be caught by the invariants within a bounded number of
//! seeds, and the same schedules must pass with an honest driver. The modes that do not
//! need the core are also run around the reference test double, so a verdict there depends
//! on the checker alone.

use tidemark_sim::runner::{run, shrink, RunResult};
use tidemark_sim::schedule::{Fault, TimedFault};
use tidemark_sim::{FaultyMode, ReplicatorKind, Schedule};

/// Seeds tried per mode before the test gives up.
const BOUND: u64 = 12;

/// A calm schedule with only what `mode` needs to bite.
fn schedule(seed: u64, mode: FaultyMode, kind: ReplicatorKind) -> Schedule {
    let mut s = Schedule::generate(1000 + seed, kind);
    s.options.faulty = Some(mode);
    s.options.safety_ms = s.options.safety_ms.max(30_000);
    // Keep the world calm apart from what the mode needs, so the catch is the mode's doing:
    // no drift or drain to end the run early, no reconciliation to repair what it broke.
    s.faults.clear();
    s.options.junk_keys = 0;
    s.options.reconcile = None;
    s.options.drain_from_start = false;
    s.options.late_applies = false;
    if s.options.config_variant % 6 == 5 {
        // The variant that reconciles (see `agent::config_for`).
        s.options.config_variant = 0;
    }
    s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(10);
    let fault = match mode {
        FaultyMode::DropFenceCompare => Some(TimedFault {
            at_ms: 5_000,
            fault: Fault::Twin {
                for_ms: 15_000,
                config_variant: 0,
            },
        }),
        FaultyMode::ApplyTwiceAfterCrash => Some(TimedFault {
            at_ms: 8_000,
            fault: Fault::Crash {
                agent: 0,
                down_ms: 500,
            },
        }),
        FaultyMode::StaleHistoryProof => Some(TimedFault {
            // Far below the watermark, and the new history past the old revision before the
            // core can look: only the proof can tell, and the stale replica answers it.
            at_ms: 20_000,
            fault: Fault::RestoreSource {
                back: 300,
                overtake: true,
                down_ms: 3_000,
            },
        }),
        FaultyMode::CompareChainStart => {
            // Enough writes that the core keeps several Txns in flight.
            s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(200);
            None
        }
        FaultyMode::UnfencedPages => {
            // Pages that time out and reach the target late, while the source moves on: a
            // source with trusted progress (pages commute only there), a preloaded range
            // and tiny pages, so the genesis writes many of them.
            s.options.late_applies = true;
            s.options.source_version = "3.5.17".into();
            s.options.config_variant = 1;
            s.options.workload.preload = s.options.workload.preload.max(100);
            s.options.workload.ops_per_s = s.options.workload.ops_per_s.max(200);
            s.options.safety_ms = s.options.safety_ms.max(60_000);
            // A crash in the middle of the genesis: the restarted process claims the fence
            // while pages of the dead one are still on their way. Without it the catch hung
            // on a genesis restart (a replay buffer overflow), which a paused watch avoids.
            s.faults.push(TimedFault {
                at_ms: 3_000,
                fault: Fault::Crash {
                    agent: 0,
                    down_ms: 300,
                },
            });
            Some(TimedFault {
                at_ms: 50,
                fault: Fault::Timeouts {
                    side: tidemark_sim::schedule::Side::Target,
                    ms: 60_000,
                    percent: 5,
                },
            })
        }
        FaultyMode::ReorderCommits | FaultyMode::DropWatchEvent => None,
    };
    s.faults.extend(fault);
    s.faults.sort_by_key(|f| f.at_ms);
    s
}

/// Runs `mode` on seeds `0..BOUND` until the checker catches it; panics if it never does.
fn caught_within_bound(mode: FaultyMode, kind: ReplicatorKind) -> (u64, String) {
    let mut acted = 0;
    for seed in 0..BOUND {
        let r: RunResult = run(&schedule(seed, mode, kind), false);
        acted += r.coverage.get(mode.acted_mark());
        if let Some(v) = r.violation {
            assert!(
                r.coverage.get(mode.acted_mark()) > 0,
                "{mode:?} on {kind:?} seed {seed}: caught [{}] but the mode never acted: {}",
                v.invariant,
                v.detail
            );
            eprintln!(
                "{mode:?} on {kind:?} caught at seed {seed}: [{}] {}",
                v.invariant, v.detail
            );
            return (seed, v.invariant);
        }
    }
    panic!("{mode:?} on {kind:?} was not caught within {BOUND} seeds (it acted {acted} times)");
}

#[test]
fn drop_fence_compare_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::DropFenceCompare, ReplicatorKind::Core);
}

#[test]
fn reorder_commits_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::ReorderCommits, ReplicatorKind::Core);
}

#[test]
fn drop_watch_event_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::DropWatchEvent, ReplicatorKind::Core);
}

#[test]
fn apply_twice_after_crash_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::ApplyTwiceAfterCrash, ReplicatorKind::Core);
}

#[test]
fn stale_history_proof_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::StaleHistoryProof, ReplicatorKind::Core);
}

/// The commit chain's compare is what keeps pipelined Txns in order: a driver that
/// compares the start of the chain instead lets a Txn that overtakes its predecessor apply
/// over a gap, and the checker must see the target leave the source.
#[test]
fn compare_chain_start_is_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::CompareChainStart, ReplicatorKind::Core);
}

#[test]
fn the_modes_that_need_no_core_are_caught_with_the_reference_double() {
    for mode in FaultyMode::ALL.into_iter().filter(|m| !m.needs_core()) {
        caught_within_bound(mode, ReplicatorKind::Reference);
    }
}

#[test]
fn the_same_schedules_pass_without_the_fault() {
    // Control: the calm schedules above pass when the driver is honest, on both replicators.
    for kind in [ReplicatorKind::Core, ReplicatorKind::Reference] {
        for mode in FaultyMode::ALL
            .into_iter()
            .filter(|m| kind == ReplicatorKind::Core || !m.needs_core())
        {
            for seed in 0..2 {
                let mut s = schedule(seed, mode, kind);
                s.options.faulty = None;
                let r = run(&s, false);
                assert!(
                    r.passed(),
                    "{mode:?} on {kind:?} seed {seed} control failed: {:?}",
                    r.violation
                );
            }
        }
    }
}

/// The shrinker keeps what a failure needs and drops the rest: ApplyTwiceAfterCrash needs
/// its one crash, and network noise added around it is not needed.
#[test]
fn the_shrinker_reduces_a_caught_mode_to_the_one_fault_it_needs() {
    let mut s = schedule(0, FaultyMode::ApplyTwiceAfterCrash, ReplicatorKind::Core);
    let needed = s.faults.clone();
    let safety = s.options.safety_ms;
    let noise = [77, 78, 79]
        .into_iter()
        .flat_map(|seed| Schedule::generate(seed, ReplicatorKind::Core).faults)
        .filter(|f| {
            f.at_ms < safety
                && matches!(
                    f.fault,
                    Fault::Partition { .. }
                        | Fault::LatencySpike { .. }
                        | Fault::Timeouts { .. }
                        | Fault::LeaderLoss { .. }
                        | Fault::Throttle { .. }
                        | Fault::WatchReset
                )
        });
    s.faults.extend(noise);
    s.faults.sort_by_key(|f| f.at_ms);
    assert!(s.faults.len() >= 10, "noise: {:?}", s.faults);
    let want = run(&s, false)
        .violation
        .map(|v| v.invariant)
        .expect("the noisy schedule fails");
    let (small, r) = shrink(&s, 200);
    assert_eq!(
        small.faults,
        needed,
        "shrunk from {} faults",
        s.faults.len()
    );
    assert_eq!(r.violation.map(|v| v.invariant), Some(want.clone()));
    assert_eq!(
        run(&small, false).violation.map(|v| v.invariant),
        Some(want),
        "the shrunk schedule still fails the same way"
    );
}

/// Genesis pages commute only because each compares the fence's mod revision: a driver
/// that drops that compare lets a page that arrives late apply after the fence moved on
/// (a cursor write, the end of the genesis, another holder's claim), and the checker must
/// see stale values in the target.
#[test]
fn unfenced_pages_are_caught_with_the_real_core() {
    caught_within_bound(FaultyMode::UnfencedPages, ReplicatorKind::Core);
}
