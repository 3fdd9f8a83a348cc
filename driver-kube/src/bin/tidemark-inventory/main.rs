//! `tidemark-inventory`: records Eno Composition inventories as Secrets in the downstream
//! cluster and recovers lost history from them.

mod cli;
mod run;

use clap::Parser;
use cli::Cli;
use run::run;
use std::process::ExitCode;
use tidemark_runtime::logging;

/// jemalloc with one arena (.cargo/config.toml), as in `tidemark-mirror`: glibc malloc's
/// per-thread arenas hold freed memory (docs/design.md, "Memory").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.global.log_format, "info") {
        eprintln!("tidemark-inventory: {e}");
        return ExitCode::from(2);
    }
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark-inventory: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
