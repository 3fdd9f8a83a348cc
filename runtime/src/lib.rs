//! Process plumbing shared by the tidemark binaries (`tidemark-mirror`,
//! `tidemark-inventory`).
//!
//! Everything here is deliberately binary-agnostic: the drivers own their state
//! machines and only *report* into this crate (heartbeat, readiness, status JSON,
//! metrics) or *receive* from it (control requests, shutdown signals). Keeping that
//! boundary thin means both binaries expose the same operational surface:
//!
//! - [`logging`]: one `--log-format plain|json` switch, `RUST_LOG` overrides.
//! - [`admin`]: read-only `/metrics`, `/healthz`, `/readyz`, `/statusz`, and
//!   `POST /v1/<control>` on a separate, guarded control listener.
//! - [`signals`]: SIGTERM/SIGINT as a future; a second signal forces exit.
//! - [`progress`]: a TTY-aware progress line (or periodic log lines) for long operations.
//! - [`clock`]: the one clock both drivers feed the core's time from.
//!
//! A binary's `main`, in outline:
//!
//! ```no_run
//! use clap::Parser;
//! use serde_json::json;
//! use tidemark_runtime::{logging, Admin, AdminArgs, LogFormat, Shutdown};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[arg(long, value_enum, default_value_t = LogFormat::Plain)]
//!     log_format: LogFormat,
//!     #[command(flatten)]
//!     admin: AdminArgs,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let cli = Cli::parse();
//!     logging::init(cli.log_format, "info")?;
//!     let shutdown = Shutdown::install()?;
//!
//!     let mut admin = Admin::new("tidemark-mirror", env!("CARGO_PKG_VERSION"));
//!     let handle = admin.handle();
//!     let lag = prometheus_client::metrics::gauge::Gauge::<i64>::default();
//!     handle.with_registry(|r| r.register("tidemark_mirror_lag_revisions", "Lag", lag.clone()));
//!     let mut drain = admin.control("drain", 4);
//!     let server = admin.serve(&cli.admin.config()).await?;
//!
//!     handle.set_ready();
//!     let stop = shutdown.recv();
//!     tokio::pin!(stop);
//!     let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
//!     loop {
//!         tokio::select! {
//!             signal = &mut stop => {
//!                 tracing::info!(%signal, "stopping");
//!                 break;
//!             }
//!             Some(req) = drain.recv() => req.accept(json!({"draining": true})),
//!             _ = tick.tick() => {
//!                 handle.heartbeat();
//!                 lag.set(0);
//!                 handle.set_status(json!({"phase": "Syncing"}));
//!             }
//!         }
//!     }
//!     handle.set_not_ready("shutting down");
//!     server.shutdown().await?;
//!     Ok(())
//! }
//! ```

pub mod admin;
pub mod clock;
pub mod logging;
pub mod progress;
pub mod signals;

pub use admin::{
    Admin, AdminArgs, AdminConfig, AdminError, AdminHandle, AdminServer, ControlAddr,
    ControlConfig, ControlListen, ControlRequest,
};
pub use clock::Clock;
pub use logging::{LogFormat, LoggingError};
pub use progress::Progress;
pub use signals::{shutdown_signal, Shutdown, ShutdownSignal};
