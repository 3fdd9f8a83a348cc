//! The checker and model against the reference test double: a correct replicator must pass.

use tidemark_sim::runner::{determinism_check, run};
use tidemark_sim::{ReplicatorKind, Schedule};

#[test]
fn reference_double_passes_seeds() {
    let mut failures = Vec::new();
    for seed in 0..15 {
        let s = Schedule::generate(seed, ReplicatorKind::Reference);
        let r = run(&s, false);
        if let Some(v) = &r.violation {
            failures.push(format!("seed {seed}: {} {}", v.invariant, v.detail));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn reference_double_is_deterministic() {
    let s = Schedule::generate(3, ReplicatorKind::Reference);
    determinism_check(&s).unwrap();
}
