//! The recovery machine (being built).
use serde::{Deserialize, Serialize};

/// Recovery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    Apply,
    Plan,
    DryRun,
    Skip,
}
/// Config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryConfig;
/// Outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryOutcome {}
/// Status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryStatus;
/// Machine.
#[derive(Debug)]
pub struct Recovery;
