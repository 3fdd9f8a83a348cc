//! Drift behind the mirror's back, reconciliation and drain, in hand-made schedules: the
//! runs end the way the scenario demands and the checks actually looked at something.

use tidemark_core::mirror::FailKind;
use tidemark_sim::runner::{run, Outcome};
use tidemark_sim::schedule::{Fault, ReconcileOptions, TimedFault};
use tidemark_sim::{ReplicatorKind, Schedule};

fn calm(seed: u64, delete_orphans: bool) -> Schedule {
    let mut s = Schedule::generate(seed, ReplicatorKind::Core);
    s.options.safety_ms = 40_000;
    s.options.junk_keys = 0;
    s.options.config_variant = 0;
    s.options.workload.ops_per_s = 10;
    s.options.drain_from_start = false;
    s.options.reconcile = Some(ReconcileOptions {
        interval_ms: 2_000,
        delete_orphans,
    });
    s.faults = [
        (10_000, Fault::DriftDivergent { pick: 3 }),
        (11_000, Fault::DriftDelete { pick: 7 }),
        (12_000, Fault::DriftOrphan { pick: 42 }),
    ]
    .into_iter()
    .map(|(at_ms, fault)| TimedFault { at_ms, fault })
    .collect();
    s
}

#[test]
fn drift_is_reported_and_repaired() {
    for delete_orphans in [false, true] {
        let s = calm(5, delete_orphans);
        let r = run(&s, false);
        assert!(r.passed(), "{:?}", r.violation);
        assert_eq!(r.outcome, Outcome::Converged, "{}", r.end);
        let c = &r.coverage;
        assert_eq!(c.get("drift.injected"), 3, "{c:?}");
        assert!(c.get("reconcile.drift.orphan") > 0, "{c:?}");
        assert!(c.get("reconcile.repaired") >= 2, "{c:?}");
    }
}

#[test]
fn drain_cuts_over_after_repairing_drift() {
    let mut s = calm(6, true);
    s.faults.push(TimedFault {
        at_ms: 20_000,
        fault: Fault::DrainNow,
    });
    let r = run(&s, false);
    assert!(r.passed(), "{:?}", r.violation);
    assert_eq!(r.outcome, Outcome::Drained, "{}", r.end);
    assert!(r.coverage.get("drain.flipped_primary") == 1);
}

#[test]
fn drain_refuses_orphans_without_delete_orphans() {
    let mut s = calm(7, false);
    s.faults.push(TimedFault {
        at_ms: 20_000,
        fault: Fault::DrainNow,
    });
    let r = run(&s, false);
    assert!(r.passed(), "{:?}", r.violation);
    assert_eq!(
        r.outcome,
        Outcome::Stopped(FailKind::DrainOrphans),
        "{}",
        r.end
    );
    assert_eq!(r.coverage.get("drain.flipped_primary"), 0);
}

#[test]
fn a_sibling_fence_stops_the_link_with_prefix_conflict() {
    let mut s = calm(8, true);
    s.faults.push(TimedFault {
        at_ms: 15_000,
        fault: Fault::SiblingFence,
    });
    let r = run(&s, false);
    assert!(r.passed(), "{:?}", r.violation);
    assert_eq!(
        r.outcome,
        Outcome::Stopped(FailKind::PrefixConflict),
        "{}",
        r.end
    );
}
