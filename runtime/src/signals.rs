//! Shutdown on SIGTERM/SIGINT.
//!
//! The first signal resolves a future so the binary can finish or abandon
//! in-flight work and exit 0 (Kubernetes sends SIGTERM and waits
//! `terminationGracePeriodSeconds`; both drivers are safe to stop at any point
//! because state lives in the target). A second signal means the operator has run
//! out of patience: the process exits at once with the conventional `128 + signo`.

use std::fmt;
use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Which signal asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSignal {
    /// SIGTERM (service managers, Kubernetes).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

impl ShutdownSignal {
    /// Shell convention for "killed by this signal": 128 + signal number.
    pub fn exit_code(self) -> i32 {
        match self {
            ShutdownSignal::Terminate => 128 + 15,
            ShutdownSignal::Interrupt => 128 + 2,
        }
    }
}

impl fmt::Display for ShutdownSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShutdownSignal::Terminate => "SIGTERM",
            ShutdownSignal::Interrupt => "SIGINT",
        })
    }
}

/// Installed SIGTERM/SIGINT handlers.
///
/// Install early in `main` (inside the tokio runtime): from then on the signals
/// no longer kill the process by default, so nothing is lost between start-up
/// and the point where the binary starts waiting.
#[derive(Debug)]
pub struct Shutdown {
    term: Signal,
    int: Signal,
}

impl Shutdown {
    /// Registers the handlers. Fails only if the OS refuses signal registration;
    /// must be called from within a tokio runtime.
    pub fn install() -> io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the first SIGTERM or SIGINT. Afterwards a background task
    /// watches for a second signal and then exits the process immediately.
    pub async fn recv(mut self) -> ShutdownSignal {
        let first = next_signal(&mut self.term, &mut self.int).await;
        tracing::info!(signal = %first, "shutting down; send the signal again to force exit");
        tokio::spawn(async move {
            let second = next_signal(&mut self.term, &mut self.int).await;
            tracing::warn!(signal = %second, "second signal: forcing exit");
            std::process::exit(second.exit_code());
        });
        first
    }
}

/// Convenience for `Shutdown::install()?.recv().await`. Prefer
/// [`Shutdown::install`] at the top of `main` when start-up takes a while.
pub async fn shutdown_signal() -> io::Result<ShutdownSignal> {
    Ok(Shutdown::install()?.recv().await)
}

async fn next_signal(term: &mut Signal, int: &mut Signal) -> ShutdownSignal {
    tokio::select! {
        Some(()) = term.recv() => ShutdownSignal::Terminate,
        Some(()) = int.recv() => ShutdownSignal::Interrupt,
        // Both streams closed: no signal can arrive any more.
        else => std::future::pending().await,
    }
}
