//! tidemark-model: models of the outside world, used only by tests and the simulator.
//!
//! - [`etcd`]: a model etcd cluster over an MVCC store, the simulator's source and target;
//! - [`apiserver`]: a model Kubernetes apiserver, pure and deterministic;
//! - `conformance` (feature `conformance`, on by default): that model apiserver served over HTTP with
//!   Kubernetes' REST paths, so a real `kube::Client` (or kubectl) can be tested without a
//!   cluster.
//!
//! No production crate depends on this one; the drivers take it as a dev-dependency.

pub mod apiserver;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod etcd;
