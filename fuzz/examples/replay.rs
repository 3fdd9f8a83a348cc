//! Replays one input through a target's checks on stable Rust, without libFuzzer:
//! `cargo run --example replay -- <target> <file>...` (in `fuzz/`). `TIDEMARK_FUZZ_TRACE=1`
//! prints a step trace (mirror_core).

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
    for f in args {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        eprintln!("{target}: {f}");
        run(&data);
    }
}
