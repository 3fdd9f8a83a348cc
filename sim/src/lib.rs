//! tidemark-sim: a deterministic simulator in the style of TigerBeetle's VOPR.
//!
//! It runs the real mirror core (or, to validate the checker, a test double) against model
//! etcd clusters, a lossy network, crashing and duplicated agents and a seeded fault
//! schedule, checks the safety invariants on every target write, and then demands
//! convergence in a quiet liveness phase. Same schedule, same trace hash.

pub mod agent;
pub mod coverage;
pub mod drain_watch;
pub mod invariants;
pub mod oracle;
pub mod reference;
pub mod replicator;
pub mod restore;
pub mod runner;
pub mod schedule;
pub mod trace;
pub mod workload;
pub mod world;

/// The model etcd cluster and its MVCC store, which live in `tidemark-model` (the model
/// apiserver is there too: `tidemark_model::apiserver`).
pub mod model {
    pub use tidemark_model::etcd::{self, store, EtcdCluster, Mutation, Store, WatchOut};
}

pub use runner::{run, Outcome, RunResult, SavedRun};
pub use schedule::{FaultyMode, ReplicatorKind, Schedule};
