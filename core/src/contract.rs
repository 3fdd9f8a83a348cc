//! The one contract every state machine in core keeps (docs/design.md, "The core contract").
//!
//! Drivers and the simulator are written against this trait, not against a machine: the etcd
//! driver's loop and the simulator run the mirror (and their test doubles) through it, the
//! kube driver runs both inventory machines through it. Time enters only as `now`.

use crate::time::Instant;

/// A sans-IO state machine: inputs in, outputs out, time passed in by the caller.
pub trait Machine {
    /// What the driver feeds in: completions of commands, watch traffic, controls.
    type Input;
    /// What the driver drains: commands to run, the next wake-up, or the terminal stop.
    type Output;
    /// What the machine publishes for people (status endpoints, metrics, conditions).
    type Status;

    /// Feeds one input at `now`.
    fn handle_input(&mut self, now: Instant, input: Self::Input);
    /// The next output at `now`; a driver drains it until it says to wait or stop.
    fn poll_output(&mut self, now: Instant) -> Self::Output;
    /// The published status.
    fn status(&self) -> &Self::Status;
}
