//! The source restored from an older snapshot, against the real core: an honest driver
//! ends with the core refusing the new history (SourceHistoryMismatch), then, after the
//! operator abandons the checkpoint, converging to the new history; a driver whose stale
//! replica answers the history proof lets the core mix the two histories, and the checker
//! catches the false promise.

use tidemark_core::config::InitialSyncMode;
use tidemark_sim::runner::{run, Outcome, RunResult};
use tidemark_sim::schedule::{Fault, TimedFault};
use tidemark_sim::{FaultyMode, ReplicatorKind, Schedule};

/// A calm link on a busy source with in-scope puts and deletes only, restored at 20 s.
fn scripted(seed: u64, back: u32, overtake: bool) -> Schedule {
    let mut s = Schedule::generate(seed, ReplicatorKind::Core);
    let o = &mut s.options;
    o.safety_ms = 40_000;
    o.junk_keys = 0;
    o.config_variant = 0;
    o.initial_mode = InitialSyncMode::Overwrite;
    o.reconcile = None;
    o.drain_from_start = false;
    o.late_applies = false;
    o.progress_notify_ms = 2_000;
    o.latency_us = (500, 3_000);
    let w = &mut o.workload;
    w.ops_per_s = 40;
    w.keys = 50;
    w.preload = 20;
    (w.w_put, w.w_delete) = (20, 3);
    (w.w_txn, w.w_bulk, w.w_delete_range, w.w_large) = (0, 0, 0, 0);
    (w.w_lease, w.w_out_of_scope, w.w_excluded) = (0, 0, 0);
    w.bulk_keys = 0;
    s.faults = vec![TimedFault {
        at_ms: 20_000,
        fault: Fault::RestoreSource {
            back,
            overtake,
            down_ms: 3_000,
        },
    }];
    s
}

fn describe(r: &RunResult) -> String {
    format!(
        "end {}; violation {:?}; coverage {:?}",
        r.end, r.violation, r.coverage
    )
}

#[test]
fn honest_core_refuses_the_new_history_then_converges_after_abandoning() {
    // Restored 300 revisions back (far below the watermark), and the new history written
    // past the old revision before the core can look: the revision floor cannot tell, the
    // anchor can.
    for (seed, overtake) in [(11, true), (12, false)] {
        let r = run(&scripted(seed, 300, overtake), false);
        assert!(r.passed(), "seed {seed}: {}", describe(&r));
        let c = &r.coverage;
        assert_eq!(c.get("restore.applied"), 1, "{}", describe(&r));
        assert_eq!(c.get("restore.below_watermark"), 1, "{}", describe(&r));
        assert_eq!(c.get("restore.overtaken"), u64::from(overtake));
        assert!(
            c.get("agent.stop.SourceHistoryMismatch") >= 1,
            "seed {seed}: {}",
            describe(&r)
        );
        assert!(c.get("restore.abandon_restart") >= 1, "{}", describe(&r));
        assert_eq!(r.outcome, Outcome::Converged, "{}", describe(&r));
        assert_eq!(c.get("restore.converged_after_abandon"), 1);
    }
}

#[test]
fn a_stale_history_proof_is_caught_as_a_false_promise() {
    // Seed 16 has a source with untrusted progress notifications (3.5.12), 11 a trusted one.
    // Seeds whose window replay refuses the new history anyway (the core stops before the
    // lie matters) do not test the checker.
    for seed in [11, 16] {
        let mut s = scripted(seed, 300, true);
        s.options.faulty = Some(FaultyMode::StaleHistoryProof);
        let r = run(&s, false);
        let v = r
            .violation
            .as_ref()
            .unwrap_or_else(|| panic!("seed {seed}: not caught: {}", describe(&r)));
        assert_eq!(v.invariant, "a-watermark", "{}", describe(&r));
        assert!(r.coverage.get("faulty.stale_history_proof") >= 1);
        eprintln!("seed {seed}: {}", describe(&r));
        assert_eq!(r.coverage.get("agent.stop.SourceHistoryMismatch"), 0);
    }
}

#[test]
fn the_stale_proof_is_harmless_without_a_restore() {
    // Control: the lie needs a history to lie about.
    let mut s = scripted(11, 300, true);
    s.faults.clear();
    s.options.faulty = Some(FaultyMode::StaleHistoryProof);
    let r = run(&s, false);
    assert!(r.passed(), "{}", describe(&r));
    assert_eq!(r.outcome, Outcome::Converged, "{}", describe(&r));
    assert_eq!(r.coverage.get("faulty.stale_history_proof"), 0);
}
