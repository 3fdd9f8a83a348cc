//! Seed batches for CI. `SIM_SEEDS` (default 200) and `SIM_FIRST_SEED` (default 0) pick
//! the seeds; runs are shortened (safety phase capped at `SIM_SAFETY_MS`, default 10 s) so
//! 200 seeds finish well under a minute in a debug build. Longer batches:
//! `cargo run -p tidemark-sim --release -- run --seeds 2000` or `scripts/sim-soak.sh`.

use tidemark_sim::coverage::{Coverage, FaultCoverage};
use tidemark_sim::runner::run;
use tidemark_sim::{ReplicatorKind, Schedule};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A generated seed's schedule, shortened as the batch runs it.
fn shortened(seed: u64, kind: ReplicatorKind, cap: u64) -> Schedule {
    let mut s = Schedule::generate(seed, kind);
    s.options.safety_ms = s.options.safety_ms.min(cap);
    s.faults.retain(|f| f.at_ms < cap);
    s
}

/// Runs the batch; returns its failures, and "expected but never hit" fault kinds as one
/// more failure (issue R1: fault coverage is asserted, not only printed).
fn batch(kind: ReplicatorKind) -> Vec<String> {
    let (first, n, cap) = (
        env("SIM_FIRST_SEED", 0),
        env("SIM_SEEDS", 200),
        env("SIM_SAFETY_MS", 10_000),
    );
    let mut failures = Vec::new();
    let mut hits = Coverage::default();
    for seed in first..first + n {
        let r = run(&shortened(seed, kind, cap), false);
        hits.merge(&r.coverage);
        if let Some(v) = r.violation {
            failures.push(format!(
                "seed {seed}: [{}] {} (replay: tidemark-sim run --seeds 1 --seed {seed})",
                v.invariant, v.detail
            ));
        }
    }
    let judged = FaultCoverage::judge(&hits, n, |seed| Some(shortened(seed, kind, cap)));
    eprintln!("{kind:?} batch: {}", judged.summary(n));
    let missing = judged.missing();
    if !missing.is_empty() {
        failures.push(format!("fault kinds expected but never hit: {missing:?}"));
    }
    failures
}

#[test]
fn reference_double_seed_batch() {
    let f = batch(ReplicatorKind::Reference);
    assert!(f.is_empty(), "{} failures:\n{}", f.len(), f.join("\n"));
}

#[test]
fn core_seed_batch() {
    let f = batch(ReplicatorKind::Core);
    assert!(f.is_empty(), "{} failures:\n{}", f.len(), f.join("\n"));
}

#[test]
fn core_runs_are_deterministic() {
    for seed in [3, 17] {
        let mut s = Schedule::generate(seed, ReplicatorKind::Core);
        s.options.safety_ms = s.options.safety_ms.min(10_000);
        s.faults.retain(|f| f.at_ms < 10_000);
        tidemark_sim::runner::determinism_check(&s).unwrap();
    }
}
