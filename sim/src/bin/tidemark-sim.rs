//! `tidemark-sim`: run seed batches, replay saved schedules, shrink failures.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant as WallClock;
use tidemark_sim::coverage::{Coverage, FaultCoverage};
use tidemark_sim::runner::{
    determinism_check, run, run_verbose, shrink, Outcome, RunResult, SavedRun,
};
use tidemark_sim::schedule::Fault;
use tidemark_sim::{FaultyMode, ReplicatorKind, Schedule};

#[derive(Parser, Debug)]
#[command(
    name = "tidemark-sim",
    about = "Deterministic simulator for the tidemark mirror core"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    /// The real mirror core.
    Core,
    /// The simulator's reference test double (checks the checker).
    Reference,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Faulty {
    DropFenceCompare,
    ReorderCommits,
    DropWatchEvent,
    ApplyTwiceAfterCrash,
    StaleHistoryProof,
    CompareChainStart,
    UnfencedPages,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run generated seeds (or one schedule file) and print a summary.
    Run {
        /// How many seeds to run.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Run this schedule file (JSON or YAML) instead of generated seeds.
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// Save each failing run (shrunk) as a JSON file in this directory.
        #[arg(long)]
        save_failures: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Kind::Core)]
        replicator: Kind,
        /// Deliberately break the driver (teeth check).
        #[arg(long, value_enum)]
        faulty: Option<Faulty>,
        /// Also run every seed twice and compare trace hashes.
        #[arg(long)]
        determinism: bool,
        /// Stop at the first failure.
        #[arg(long)]
        fail_fast: bool,
        /// Shrink attempts per failure.
        #[arg(long, default_value_t = 200)]
        shrink_budget: usize,
        /// Shrink only the first this many failures of a batch (the rest are reported as is).
        #[arg(long, default_value_t = 3)]
        shrink_first: usize,
        /// Run only generated seeds whose schedule has a fault of this kind (coverage name,
        /// e.g. restore_source); repeatable, any of them will do.
        #[arg(long)]
        require_fault: Vec<String>,
        /// Remove faults of this kind from generated schedules; repeatable.
        #[arg(long)]
        drop_fault: Vec<String>,
    },
    /// Replay a saved run or schedule and check that it reproduces.
    Replay {
        file: PathBuf,
        /// Print every agent input and output.
        #[arg(long)]
        verbose: bool,
    },
    /// Minimise a failing schedule and print (or save) the result.
    Shrink {
        file: PathBuf,
        #[arg(long, default_value_t = 500)]
        budget: usize,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the generated schedule of one seed (JSON).
    Show {
        #[arg(long)]
        seed: u64,
        #[arg(long, value_enum, default_value_t = Kind::Core)]
        replicator: Kind,
    },
}

fn kind(k: Kind) -> ReplicatorKind {
    match k {
        Kind::Core => ReplicatorKind::Core,
        Kind::Reference => ReplicatorKind::Reference,
    }
}

fn faulty(f: Faulty) -> FaultyMode {
    match f {
        Faulty::DropFenceCompare => FaultyMode::DropFenceCompare,
        Faulty::ReorderCommits => FaultyMode::ReorderCommits,
        Faulty::DropWatchEvent => FaultyMode::DropWatchEvent,
        Faulty::ApplyTwiceAfterCrash => FaultyMode::ApplyTwiceAfterCrash,
        Faulty::StaleHistoryProof => FaultyMode::StaleHistoryProof,
        Faulty::CompareChainStart => FaultyMode::CompareChainStart,
        Faulty::UnfencedPages => FaultyMode::UnfencedPages,
    }
}

/// A generated seed's schedule as a batch runs it; None when `require` skips it.
fn batch_schedule(
    seed: u64,
    replicator: Kind,
    fm: Option<Faulty>,
    require: &[String],
    drop: &[String],
) -> Option<Schedule> {
    let mut sch = Schedule::generate(seed, kind(replicator));
    sch.options.faulty = fm.map(faulty);
    let wanted = require.is_empty()
        || sch
            .faults
            .iter()
            .any(|f| require.iter().any(|k| k == f.fault.kind()));
    sch.faults
        .retain(|f| !drop.iter().any(|k| k == f.fault.kind()));
    wanted.then_some(sch)
}

/// Reads a schedule file: either a bare schedule or a saved run.
fn load(path: &Path) -> Result<(Schedule, Option<String>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    if let Ok(saved) = serde_json::from_str::<SavedRun>(&text) {
        return Ok((saved.schedule, Some(saved.trace_hash)));
    }
    if let Ok(saved) = serde_yaml::from_str::<SavedRun>(&text) {
        return Ok((saved.schedule, Some(saved.trace_hash)));
    }
    let s = Schedule::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok((s, None))
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            seeds,
            seed,
            schedule,
            save_failures,
            replicator,
            faulty: fm,
            determinism,
            fail_fast,
            shrink_budget,
            shrink_first,
            require_fault,
            drop_fault,
        } => {
            let started = WallClock::now();
            let mut batch = Batch::default();
            let make = |s: u64| batch_schedule(s, replicator, fm, &require_fault, &drop_fault);
            let generated = schedule.is_none();
            let schedules: Box<dyn Iterator<Item = Schedule>> = match schedule {
                Some(p) => Box::new(std::iter::once(load(&p)?.0)),
                None => Box::new((seed..seed + seeds).filter_map(make)),
            };
            for sch in schedules {
                let r = if determinism {
                    match determinism_check(&sch) {
                        Ok(r) => r,
                        Err(v) => {
                            let mut r = run(&sch, false);
                            r.violation = Some(v);
                            r
                        }
                    }
                } else {
                    run(&sch, false)
                };
                batch.add(&sch, &r);
                if !r.passed() {
                    let budget = if batch.failed as usize <= shrink_first {
                        shrink_budget
                    } else {
                        0
                    };
                    report_failure(&sch, &r, save_failures.as_deref(), budget)?;
                    if fail_fast {
                        break;
                    }
                }
            }
            batch.print(started.elapsed().as_secs_f64());
            let mut uncovered = false;
            if generated {
                let judged = FaultCoverage::judge(&batch.coverage, batch.runs, make);
                println!("{}", judged.summary(batch.runs));
                uncovered = !judged.missing().is_empty();
            }
            if batch.failed > 0 || uncovered {
                std::process::exit(1);
            }
        }
        Cmd::Replay { file, verbose } => {
            let (sch, want) = load(&file)?;
            let r = run_verbose(&sch, true, verbose);
            println!("seed {} end: {}", r.seed, r.end);
            if let Some(v) = &r.violation {
                println!(
                    "violation [{}] at {} ms: {}",
                    v.invariant,
                    v.at_ns / 1_000_000,
                    v.detail
                );
            }
            println!("trace hash {}", r.trace_hash);
            if let Some(want) = want.filter(|w| !w.is_empty()) {
                if want != r.trace_hash {
                    bail!(
                        "trace hash differs from the saved run ({want}): the run did not reproduce"
                    );
                }
                println!("trace hash matches the saved run");
            }
            if !r.passed() {
                std::process::exit(1);
            }
        }
        Cmd::Shrink { file, budget, out } => {
            let (sch, _) = load(&file)?;
            let (small, r) = shrink(&sch, budget);
            let Some(v) = &r.violation else {
                bail!("the schedule does not fail; nothing to shrink");
            };
            println!(
                "shrunk from {} to {} faults, safety {} ms; violation [{}]: {}",
                sch.faults.len(),
                small.faults.len(),
                small.options.safety_ms,
                v.invariant,
                v.detail
            );
            let saved = SavedRun {
                trace_hash: run(&small, true).trace_hash,
                violation: r.violation.clone(),
                schedule: small,
            };
            let text = serde_json::to_string_pretty(&saved)?;
            match out {
                Some(p) => {
                    std::fs::write(&p, text)?;
                    println!(
                        "saved {}; replay: tidemark-sim replay {}",
                        p.display(),
                        p.display()
                    );
                }
                None => println!("{text}"),
            }
        }
        Cmd::Show { seed, replicator } => {
            println!("{}", Schedule::generate(seed, kind(replicator)).to_json());
        }
    }
    Ok(())
}

fn report_failure(sch: &Schedule, r: &RunResult, dir: Option<&Path>, budget: usize) -> Result<()> {
    let v = r
        .violation
        .as_ref()
        .expect("report_failure is called for failures");
    println!(
        "\nFAIL seed {}: [{}] at {} ms: {}",
        r.seed,
        v.invariant,
        v.at_ns / 1_000_000,
        v.detail
    );
    println!("options: {}", serde_json::to_string(&sch.options)?);
    let marks: Vec<String> = r
        .coverage
        .marks
        .iter()
        .filter(|(k, _)| {
            ["restore.", "faulty.", "agent.stop."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    if !marks.is_empty() {
        println!("marks: {}", marks.join(" "));
    }
    let (small, sr) = shrink(sch, budget);
    let faults: Vec<String> = small
        .faults
        .iter()
        .map(|f| format!("{}@{}ms", f.fault.kind(), f.at_ms))
        .collect();
    println!(
        "shrunk schedule ({} of {} faults, safety {} ms): [{}]",
        small.faults.len(),
        sch.faults.len(),
        small.options.safety_ms,
        faults.join(", ")
    );
    if let Some(sv) = &sr.violation {
        println!("shrunk violation [{}]: {}", sv.invariant, sv.detail);
    }
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("seed-{}-{}.json", r.seed, v.invariant));
        let saved = SavedRun {
            trace_hash: run(&small, true).trace_hash,
            violation: sr.violation.clone(),
            schedule: small,
        };
        std::fs::write(&path, serde_json::to_string_pretty(&saved)?)?;
        println!(
            "replay: cargo run -p tidemark-sim --release -- replay {}",
            path.display()
        );
    } else {
        let faulty = match sch.options.faulty {
            Some(FaultyMode::DropFenceCompare) => " --faulty drop-fence-compare",
            Some(FaultyMode::ReorderCommits) => " --faulty reorder-commits",
            Some(FaultyMode::DropWatchEvent) => " --faulty drop-watch-event",
            Some(FaultyMode::ApplyTwiceAfterCrash) => " --faulty apply-twice-after-crash",
            Some(FaultyMode::StaleHistoryProof) => " --faulty stale-history-proof",
            Some(FaultyMode::CompareChainStart) => " --faulty compare-chain-start",
            Some(FaultyMode::UnfencedPages) => " --faulty unfenced-pages",
            None => "",
        };
        println!(
            "replay: cargo run -p tidemark-sim --release -- run --seeds 1 --seed {}{}{faulty} (or add --save-failures DIR to keep the shrunk schedule)",
            r.seed,
            match sch.options.replicator {
                ReplicatorKind::Reference => " --replicator reference",
                ReplicatorKind::Core => "",
            }
        );
    }
    Ok(())
}

#[derive(Default)]
struct Batch {
    runs: u64,
    failed: u64,
    events: u64,
    sim_ns: u64,
    coverage: Coverage,
    ends: std::collections::BTreeMap<String, u64>,
    violations: std::collections::BTreeMap<String, u64>,
}

impl Batch {
    fn add(&mut self, _s: &Schedule, r: &RunResult) {
        self.runs += 1;
        self.events += r.events;
        self.sim_ns += r.sim_ns;
        self.coverage.merge(&r.coverage);
        let end = match r.outcome {
            Outcome::Converged => "converged".to_string(),
            Outcome::Drained => "drained".to_string(),
            Outcome::Stopped(kind) => format!("expected stop: {}", kind.name()),
            Outcome::Violation => "violation".to_string(),
        };
        *self.ends.entry(end).or_default() += 1;
        if let Some(v) = &r.violation {
            self.failed += 1;
            *self.violations.entry(v.invariant.clone()).or_default() += 1;
        }
    }

    fn print(&self, wall_s: f64) {
        let sim_s = self.sim_ns as f64 / 1e9;
        println!("\n== tidemark-sim summary ==");
        println!("seeds run:      {} ({} failed)", self.runs, self.failed);
        println!("events:         {}", self.events);
        println!(
            "simulated time: {:.1} s ({:.0}x wall time {:.2} s)",
            sim_s,
            sim_s / wall_s.max(1e-9),
            wall_s
        );
        println!(
            "events/s:       {:.0}",
            self.events as f64 / wall_s.max(1e-9)
        );
        for (k, n) in &self.ends {
            println!("end {k}: {n}");
        }
        for (k, n) in &self.violations {
            println!("violation {k}: {n}");
        }
        println!("coverage marks:");
        for kind in Fault::KINDS
            .iter()
            .chain(Fault::CONTROL_KINDS.iter())
            .chain(Fault::HISTORY_KINDS.iter())
        {
            let n = self.coverage.get(&format!("fault.{kind}"));
            println!(
                "  fault.{kind:<28} {n}{}",
                if n == 0 { "   <- never hit" } else { "" }
            );
        }
        for (k, n) in &self.coverage.marks {
            if !k.starts_with("fault.") {
                println!("  {k:<34} {n}");
            }
        }
    }
}
