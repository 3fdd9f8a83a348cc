//! The mirror: continuous, fenced, one-way replication of a source key range.

pub mod io;
pub mod status;

pub use io::{CommandId, Control, FailKind, Input, Output, StopReason};
pub use status::{Condition, ConditionType, Counts, Cutover, Phase, Status};
