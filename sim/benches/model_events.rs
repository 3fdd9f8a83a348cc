//! Model throughput: simulated events per second on one core (single-threaded).
//! Prints numbers only; no timed assertions. `cargo bench -p tidemark-sim`.
//! Besides wall time it reports process CPU time (Linux `/proc/self/stat`), which stays
//! meaningful on a machine shared with other jobs.

use std::time::Instant;
use tidemark_sim::runner::run;
use tidemark_sim::{ReplicatorKind, Schedule};

/// User + system CPU seconds of this process, if the platform tells us.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() {
    for (name, kind) in [
        ("core", ReplicatorKind::Core),
        ("reference double", ReplicatorKind::Reference),
    ] {
        for trace in [false, true] {
            let started = Instant::now();
            let cpu0 = cpu_seconds();
            let (mut events, mut sim_ns) = (0u64, 0u64);
            for seed in 0..20 {
                let r = run(&Schedule::generate(seed, kind), trace);
                events += r.events;
                sim_ns += r.sim_ns;
            }
            let wall = started.elapsed().as_secs_f64();
            let cpu = match (cpu0, cpu_seconds()) {
                (Some(a), Some(b)) if b > a => format!("{:.0}", events as f64 / (b - a)),
                _ => "n/a".into(),
            };
            println!(
                "{name:<17} trace={trace:<5} seeds=20 events={events} wall={wall:.2}s events/s(wall)={:.0} events/s(cpu)={cpu} sim/wall={:.0}x",
                events as f64 / wall,
                sim_ns as f64 / 1e9 / wall
            );
        }
    }
}
