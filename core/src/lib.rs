//! tidemark-core: deterministic, sans-IO state machines for tidemark.
//!
//! Nothing here reads a clock, the OS RNG, the network or the filesystem. Time enters as
//! [`Instant`] arguments, randomness from a caller-seeded [`rng::Rng`], and every effect
//! leaves as a command for a driver (real etcd/Kubernetes) or the simulator to run.

pub mod bytes_b64;
pub mod classify;
pub mod config;
pub mod contract;
pub mod duration;
pub mod etcd;
pub mod inventory;
pub mod mirror;
pub mod rng;
pub mod time;

pub use classify::{classify, Code, Failure};
pub use config::MirrorConfig;
pub use contract::Machine;
pub use time::Instant;
