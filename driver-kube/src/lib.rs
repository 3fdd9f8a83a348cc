//! tidemark-kube: the Kubernetes side of tidemark's inventory snapshots (issue K1).
//!
//! It reads Eno Compositions and ResourceSlices, executes the core's sans-IO inventory
//! commands with a real `kube::Client`, and ships a conformance apiserver so all of that is
//! testable without a cluster.

pub mod conformance;
pub mod controller;
pub mod drive;
pub mod eno;
pub mod exec;
pub mod inspect;
pub mod ops;
