//! The mirror's inputs and outputs (str0m-style `handle_input` / `poll_output`).

use crate::classify::Failure;
use crate::etcd::{Command, Reply, WatchEvent};
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// Names one command so its completion can be matched.
pub type CommandId = u64;

/// Everything that can happen to the mirror.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// A command finished; `Err` is already classified with [`crate::classify::classify`].
    Done {
        id: CommandId,
        result: Result<Reply, Failure>,
    },
    /// A source watch delivered something.
    Watch { watch_id: u64, event: WatchEvent },
    /// An operator asked for something.
    Control(Control),
}

/// Operator requests (admin endpoints, `mode: Drain`, SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Start a drain now (as `mode: Drain`).
    Drain,
    /// Run a reconciliation pass as soon as the steady state allows.
    Reconcile,
    /// Stop issuing writes until `Resume`; the watermark stays where it is.
    Pause,
    Resume,
    /// Graceful stop: let the in-flight command finish, issue nothing new, then stop.
    Shutdown,
}

/// What the mirror wants next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// Run this command and report its completion as `Input::Done { id, .. }`.
    Command { id: CommandId, cmd: Command },
    /// Nothing to do until this time or the next input.
    Timeout(Instant),
    /// Terminal; no more outputs will come.
    Stopped(StopReason),
}

/// Why the mirror stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// Drain completed and the fence is now `Primary`.
    Drained,
    /// Graceful shutdown was requested and nothing is in flight.
    Shutdown,
    /// A permanent error; an operator must act before restarting.
    Failed { kind: FailKind, message: String },
}

/// Permanent failure classes, each with a fix an operator can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailKind {
    /// Another agent (or a newer epoch, or a cut-over) owns the fence.
    FenceLost,
    /// The checkpoint bytes are not a checkpoint this version understands.
    CheckpointInvalid,
    /// RequireEmpty found keys in the target range.
    EmptyTargetViolation,
    /// The target range holds another link's fence.
    PrefixConflict,
    /// Source and target are the same cluster with overlapping ranges.
    DirectionConflict,
    /// The server is too old or otherwise unsuitable.
    Unsupported,
    /// A single key or revision does not fit in a target request.
    TooLarge,
    /// The server refused in a way retries cannot fix (auth, invalid request).
    Permanent,
    /// The source is not the history the checkpoint's watermark came from (a restore from
    /// an older snapshot, or another cluster behind the same address and cluster ID).
    SourceHistoryMismatch,
    /// A drain found target keys the source does not have and may not delete them
    /// (`reconciliation.deleteOrphans` is false): cut-over needs an exact copy.
    DrainOrphans,
    /// A drain still found drift after its last verification round: something else
    /// writes the target range.
    DrainDrift,
}

impl FailKind {
    /// The API name of the failure, also the condition reason.
    pub fn name(self) -> &'static str {
        match self {
            FailKind::FenceLost => "FenceLost",
            FailKind::CheckpointInvalid => "CheckpointInvalid",
            FailKind::EmptyTargetViolation => "EmptyTargetViolation",
            FailKind::PrefixConflict => "PrefixConflict",
            FailKind::DirectionConflict => "DirectionConflict",
            FailKind::Unsupported => "Unsupported",
            FailKind::TooLarge => "TooLarge",
            FailKind::Permanent => "Permanent",
            FailKind::SourceHistoryMismatch => "SourceHistoryMismatch",
            FailKind::DrainOrphans => "DrainOrphans",
            FailKind::DrainDrift => "DrainDrift",
        }
    }
}
