//! tidemark-etcd: executes the mirror core's commands against real etcd clusters.
//!
//! The core (`tidemark-core`) decides everything; this crate only translates its
//! [`Command`](tidemark_core::etcd::Command)s into etcd-client calls, classifies every error
//! with core's `classify`, runs source watches as background tasks and drives the
//! `handle_input` / `poll_output` loop on a monotonic clock. `operator` runs one such agent per
//! EtcdMirror on Kubernetes.

pub mod agent;
pub mod config;
pub mod connect;
pub mod drain;
pub mod error;
pub mod events;
pub mod exec;
pub mod insecure;
pub mod metrics;
pub mod operator;
pub mod paged;
pub mod preflight;
pub mod probe;
pub mod resource;
pub mod verify;
pub mod watch;
pub mod wire;
mod yaml_budget;

pub use agent::{Agent, Core};
pub use connect::ClusterConn;
pub use error::{failure_from, DriverError};
pub use exec::Executor;
