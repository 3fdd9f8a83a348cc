//! Property checks behind tidemark's fuzz targets.
//!
//! Each module exposes `run(data: &[u8])`, which panics when a property is violated. The
//! libFuzzer binaries in `fuzz_targets/` only call these, so the same checks run on stable
//! Rust from `tests/regressions.rs` over the checked-in corpus and every crash input kept
//! under `regressions/<target>/`.

// Panics are how a fuzz target reports a violated property.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod batcher;
pub mod checkpoint;
pub mod config;
pub mod manifest;
pub mod mirror;
pub mod select;

/// A target's checks: panics when a property is violated.
pub type Check = fn(&[u8]);

/// Every target by name, for the regression runner.
pub const TARGETS: [(&str, Check); 6] = [
    ("checkpoint_decode", checkpoint::run),
    ("config_parse", config::run),
    ("batcher", batcher::run),
    ("inventory_select", select::run),
    ("manifest_parse", manifest::run),
    ("mirror_core", mirror::run),
];
