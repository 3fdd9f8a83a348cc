//! Process plumbing shared by the tidemark binaries (`tidemark-mirror`,
//! `tidemark-inventory`).
//!
//! Everything here is deliberately binary-agnostic: the drivers own their state
//! machines and only *report* into this crate (heartbeat, readiness, status JSON,
//! metrics) or *receive* from it (control requests, shutdown signals). Keeping that
//! boundary thin means both binaries expose the same operational surface:
//!
//! - [`logging`]: one `--log-format plain|json` switch, `RUST_LOG` overrides.
//! - [`admin`]: `/metrics`, `/healthz`, `/readyz`, `/statusz` and `POST /v1/<control>`.
//! - [`signals`]: SIGTERM/SIGINT as a future; a second signal forces exit.
//! - [`progress`]: a TTY-aware progress line (or periodic log lines) for long operations.

pub mod admin;
pub mod logging;
pub mod progress;
pub mod signals;

pub use admin::{
    Admin, AdminArgs, AdminConfig, AdminError, AdminHandle, AdminServer, ControlRequest,
};
pub use logging::{LogFormat, LoggingError};
pub use progress::Progress;
pub use signals::{Shutdown, ShutdownSignal};
