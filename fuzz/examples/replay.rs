//! Replays one input through a target's checks on stable Rust, without libFuzzer:
//! `cargo run --example replay -- <target> <file>...` (in `fuzz/`). `TIDEMARK_FUZZ_TRACE=1`
//! prints a step trace (mirror_core); `TIDEMARK_FUZZ_STRICT=1` turns every open-bug
//! tolerance off.

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(target) = args.next() else {
        eprintln!("usage: replay <target> <file>...");
        std::process::exit(2);
    };
    let Some((_, run)) = tidemark_fuzz::TARGETS.iter().find(|(n, _)| *n == target) else {
        eprintln!("unknown target {target}");
        std::process::exit(2);
    };
    if std::env::var_os("TIDEMARK_FUZZ_STRICT").is_some() {
        // Turn off every open-bug tolerance: does an input still reproduce its bug?
        use std::sync::atomic::Ordering::Relaxed;
        use tidemark_fuzz::mirror as m;
        for flag in [
            &m::TOLERATE_PAST_DEADLINE_SPIN,
            &m::AVOID_RESTART_AFTER_SCAN,
            &m::TOLERATE_SPLIT_DURING_SCAN,
            &m::TOLERATE_CHAOS_UNREADABLE_RECORD,
            &m::AVOID_UNTRUSTED_GENESIS,
            &m::AVOID_SWEEP_TXN_FAILURE,
            &m::TOLERATE_CHAOS_SWEEP_OUTSIDE_WINDOW,
            &m::TOLERATE_TARGET_AHEAD_AFTER_GENESIS,
        ] {
            flag.store(false, Relaxed);
        }
    }
    for f in args {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        eprintln!("{target}: {f}");
        run(&data);
    }
}
