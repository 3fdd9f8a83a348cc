//! `tidemark-mirror`: the standalone mirror agent.
//!
//! `run` replicates a source etcd key range into a target etcd cluster with a fenced
//! checkpoint stored in the target; `checkpoint` prints that checkpoint; `check-config`
//! validates a config without connecting.

mod cli;
mod run;
mod tools;

use clap::Parser;
use cli::{load, Cli, Cmd};
use std::process::ExitCode;

/// jemalloc with one arena (.cargo/config.toml): glibc malloc's per-thread arenas held a
/// 1M-key genesis at 87 MiB peak RSS, this at 43 MiB (docs/design.md, "Memory").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tidemark-mirror: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async move {
        match cli.cmd {
            Cmd::Run(a) => run::run(a).await,
            Cmd::Checkpoint(a) => tools::checkpoint(a).await,
            Cmd::Verify(a) => tools::verify(a).await,
            Cmd::Crd => {
                print!("{}", tidemark_api::crd_yaml());
                Ok(ExitCode::SUCCESS)
            }
            Cmd::Drain(a) => tools::drain(a).await,
            Cmd::Preflight(a) => tools::preflight(a).await,
            Cmd::Operator(a) => run::operator(a).await,
            Cmd::CheckConfig(a) => {
                let c = load(&a)?;
                println!(
                    "config OK: link {}, {} -> {}",
                    c.link_id(),
                    c.source.prefix,
                    String::from_utf8_lossy(&c.target_base())
                );
                for w in tidemark_etcd::config::warnings(&c) {
                    println!("warning: {w}");
                }
                println!(
                    "not checked without connecting: whether source and target are one cluster \
                     under two names (localhost and 127.0.0.1, say); `run` compares cluster IDs \
                     at connect and refuses overlapping ranges (DirectionConflict)"
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark-mirror: {e:#}");
            ExitCode::from(2)
        }
    }
}
