//! Seed batches for CI. `SIM_SEEDS` (default 200) and `SIM_FIRST_SEED` (default 0) pick
//! the seeds; runs are shortened (safety phase capped at `SIM_SAFETY_MS`, default 10 s) so
//! 200 seeds finish well under a minute in a debug build. Longer batches:
//! `cargo run -p tidemark-sim --release -- run --seeds 2000` or `scripts/sim-soak.sh`.

use tidemark_sim::runner::run;
use tidemark_sim::{ReplicatorKind, Schedule};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn batch(kind: ReplicatorKind) -> Vec<String> {
    let (first, n, cap) = (
        env("SIM_FIRST_SEED", 0),
        env("SIM_SEEDS", 200),
        env("SIM_SAFETY_MS", 10_000),
    );
    let mut failures = Vec::new();
    for seed in first..first + n {
        let mut s = Schedule::generate(seed, kind);
        s.options.safety_ms = s.options.safety_ms.min(cap);
        s.faults.retain(|f| f.at_ms < cap);
        let r = run(&s, false);
        if let Some(v) = r.violation {
            failures.push(format!(
                "seed {seed}: [{}] {} (replay: tidemark-sim run --seeds 1 --seed {seed})",
                v.invariant, v.detail
            ));
        }
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
