//! The mirror: continuous, fenced, one-way replication of a source key range.

pub mod backoff;
pub mod batcher;
pub mod checkpoint;
pub mod finding;
pub mod io;
pub mod keys;
mod machine;
pub mod pager;
mod point_map;
pub mod source_share;
pub mod status;
pub mod version;
pub mod walk;

pub use checkpoint::{Checkpoint, Role};
pub use finding::{AnchorDiff, AnchorField, HistoryFinding, Unconfirmed};
pub use io::{CommandId, Control, FailKind, Input, Output, StopReason};
pub use keys::KeySpace;
pub use machine::{Mirror, DRAIN_PROGRESSING, DRAIN_STALL_AFTER};
pub use status::{Condition, ConditionType, Counts, Cutover, Phase, Status};
