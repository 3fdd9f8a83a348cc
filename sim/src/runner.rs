//! Running schedules: one run, seed batches, the determinism self-check, and shrinking.

use crate::coverage::Coverage;
use crate::invariants::Violation;
use crate::schedule::{ReplicatorKind, Schedule};
use crate::world::{End, World};
use serde::{Deserialize, Serialize};
use tidemark_core::mirror::FailKind;

/// What one run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub seed: u64,
    /// None when the run passed.
    pub violation: Option<Violation>,
    /// How it ended, for tests and tallies.
    pub outcome: Outcome,
    /// How it ended, human-readable.
    pub end: String,
    pub events: u64,
    pub sim_ns: u64,
    pub trace_hash: String,
    pub coverage: Coverage,
}

impl RunResult {
    /// Whether no invariant broke.
    pub fn passed(&self) -> bool {
        self.violation.is_none()
    }
}

/// How a run ended, so that tests and batch tallies tell ends apart by kind, never by the
/// text of `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Converged,
    Drained,
    /// Every agent stopped with the failure the scenario expects.
    Stopped(FailKind),
    Violation,
}

/// A failing run saved to a file: the schedule to replay and what it broke.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedRun {
    pub schedule: Schedule,
    pub violation: Option<Violation>,
    /// The trace hash when saved; a replay must reproduce it.
    pub trace_hash: String,
}

/// Runs one schedule to its end.
pub fn run(schedule: &Schedule, trace: bool) -> RunResult {
    run_verbose(schedule, trace, false)
}

/// As [`run`], printing every agent input and output to stderr when `verbose`.
pub fn run_verbose(schedule: &Schedule, trace: bool, verbose: bool) -> RunResult {
    let mut w = World::new(schedule, trace);
    w.verbose = verbose;
    let end = w.run();
    let (violation, outcome, end) = match end {
        End::Violation(v) => (Some(v), Outcome::Violation, "violation".to_string()),
        End::Converged { at_ns } => (
            None,
            Outcome::Converged,
            format!("converged at {} ms", at_ns / 1_000_000),
        ),
        End::Drained { at_ns, revision } => (
            None,
            Outcome::Drained,
            format!("drained at revision {revision}, {} ms", at_ns / 1_000_000),
        ),
        End::ExpectedStop { kind, reason } => (
            None,
            Outcome::Stopped(kind),
            format!("expected stop: {}: {reason}", kind.name()),
        ),
    };
    let mut coverage = w.coverage.clone();
    coverage.add("checker.deep_checks", w.checker.deep_checks);
    coverage.add("checker.incremental_checks", w.checker.incremental_checks);
    coverage.add("drift.taken_back", w.checker.drift.taken_back);
    RunResult {
        seed: schedule.options.seed,
        violation,
        outcome,
        end,
        events: w.events,
        sim_ns: w.now_ns(),
        trace_hash: w.trace.hash(),
        coverage,
    }
}

/// Runs a schedule twice with tracing and compares the hashes.
pub fn determinism_check(schedule: &Schedule) -> Result<RunResult, Violation> {
    let a = run(schedule, true);
    let b = run(schedule, true);
    if a.trace_hash != b.trace_hash || a.events != b.events {
        return Err(Violation {
            invariant: "determinism".into(),
            at_ns: 0,
            detail: format!(
                "same schedule, different traces: {} ({} events) vs {} ({} events)",
                a.trace_hash, a.events, b.trace_hash, b.events
            ),
        });
    }
    Ok(a)
}

/// Generates and runs seeds `first..first + n`; calls `each` after every run.
pub fn run_seeds(
    first: u64,
    n: u64,
    kind: ReplicatorKind,
    mut each: impl FnMut(&Schedule, &RunResult),
) {
    for seed in first..first + n {
        let s = Schedule::generate(seed, kind);
        let r = run(&s, false);
        each(&s, &r);
    }
}

/// Minimises a failing schedule: drops faults (halves, then one at a time), shortens the
/// safety phase and lowers the workload, keeping each change only if the run still breaks
/// the same invariant. Returns the smallest failing schedule found and its result.
pub fn shrink(schedule: &Schedule, budget: usize) -> (Schedule, RunResult) {
    let first = run(schedule, false);
    let Some(target) = first.violation.as_ref().map(|v| v.invariant.clone()) else {
        return (schedule.clone(), first);
    };
    let mut best = schedule.clone();
    let mut best_r = first;
    let mut tries = 0usize;
    let still_fails = |s: &Schedule, tries: &mut usize| -> Option<RunResult> {
        *tries += 1;
        let r = run(s, false);
        match &r.violation {
            Some(v) if v.invariant == target => Some(r),
            _ => None,
        }
    };
    let mut progress = true;
    while progress && tries < budget {
        progress = false;
        // Chunks of faults, largest first.
        let mut chunk = best.faults.len().div_ceil(2).max(1);
        while chunk >= 1 && tries < budget && !best.faults.is_empty() {
            let mut i = 0;
            while i < best.faults.len() && tries < budget {
                let mut cand = best.clone();
                let end = (i + chunk).min(cand.faults.len());
                cand.faults.drain(i..end);
                if let Some(r) = still_fails(&cand, &mut tries) {
                    best = cand;
                    best_r = r;
                    progress = true;
                } else {
                    i += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
        // Shorter safety phase (faults past the end are dropped).
        if tries < budget && best.options.safety_ms > 2_000 {
            let mut cand = best.clone();
            cand.options.safety_ms /= 2;
            let lim = cand.options.safety_ms;
            cand.faults.retain(|f| f.at_ms < lim);
            if let Some(r) = still_fails(&cand, &mut tries) {
                best = cand;
                best_r = r;
                progress = true;
            }
        }
        // Calmer workload.
        if tries < budget && best.options.workload.ops_per_s > 1 {
            let mut cand = best.clone();
            cand.options.workload.ops_per_s /= 2;
            if let Some(r) = still_fails(&cand, &mut tries) {
                best = cand;
                best_r = r;
                progress = true;
            }
        }
    }
    (best, best_r)
}
