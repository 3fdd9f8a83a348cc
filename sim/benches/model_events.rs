//! Model throughput: simulated events per wall-clock second on one core.
//! Prints numbers only; no timed assertions. `cargo bench -p tidemark-sim`.

use std::time::Instant;
use tidemark_sim::runner::run;
use tidemark_sim::{ReplicatorKind, Schedule};

fn main() {
    for (name, kind) in [
        ("core", ReplicatorKind::Core),
        ("reference double", ReplicatorKind::Reference),
    ] {
        for trace in [false, true] {
            let started = Instant::now();
            let (mut events, mut sim_ns) = (0u64, 0u64);
            for seed in 0..20 {
                let r = run(&Schedule::generate(seed, kind), trace);
                events += r.events;
                sim_ns += r.sim_ns;
            }
            let wall = started.elapsed().as_secs_f64();
            println!(
                "{name:<17} trace={trace:<5} seeds=20 events={events} wall={wall:.2}s events/s={:.0} sim/wall={:.0}x",
                events as f64 / wall,
                sim_ns as f64 / 1e9 / wall
            );
        }
    }
}
