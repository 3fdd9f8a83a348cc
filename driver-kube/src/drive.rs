//! Runs the core's sans-IO inventory machines to completion against real clusters.

use crate::exec::Executor;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tidemark_core::inventory::{Input, KubeError, Output, Timestamp};
use tidemark_core::Machine;

pub use tidemark_runtime::Clock;

/// Wall-clock time for values the core writes into objects (decision time).
pub fn wall_timestamp() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::from_unix_nanos(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// Executes the machine's commands one at a time until it stops. Each request is bounded by
/// `request_timeout`; a timed-out request is answered with a transient error.
pub async fn drive<M, O>(
    machine: &mut M,
    exec: &Executor,
    clock: &Clock,
    request_timeout: Duration,
) -> O
where
    M: Machine<Input = Input, Output = Output<O>>,
{
    loop {
        match machine.poll_output(clock.now()) {
            Output::Command { id, cmd } => {
                tracing::debug!(id, ?cmd, "kube command");
                let result = match tokio::time::timeout(request_timeout, exec.execute(&cmd)).await {
                    Ok(r) => r,
                    Err(_) => Err(KubeError::Transient(format!(
                        "no reply within {request_timeout:?}"
                    ))),
                };
                if let Err(e) = &result {
                    tracing::debug!(id, error = %e, "kube command failed");
                }
                machine.handle_input(clock.now(), Input::Done { id, result });
            }
            Output::Timeout(at) => tokio::time::sleep_until(clock.to_tokio(at)).await,
            Output::Stopped(outcome) => return outcome,
        }
    }
}
