//! tidemark-kube: the Kubernetes side of tidemark's inventory snapshots (issue K1).
//!
//! It reads Eno Compositions and ResourceSlices and executes the core's sans-IO inventory
//! commands with a real `kube::Client`. Its tests run against the conformance apiserver of
//! `tidemark-model` (a dev-dependency), so all of that is testable without a cluster.

pub mod controller;
pub mod drive;
pub mod eno;
pub mod exec;
pub mod inspect;
pub mod ops;
pub mod reconcile;
pub mod settings;
