//! The agent loop: drives a sans-IO core on real time and real etcd.
//!
//! Drain `poll_output` until `Timeout`/`Stopped`, spawn every command as its own task, feed
//! every completion and watch event back through one channel into `handle_input`, and sleep
//! until the timeout instant or the next input. Core time is nanoseconds since the agent
//! started, from tokio's monotonic clock.

use crate::exec::Executor;
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;
use tidemark_core::etcd::Command;
use tidemark_core::mirror::io::{Control, Input, Output, StopReason};
use tidemark_core::mirror::Status;
use tidemark_core::{Instant, Machine};
use tokio::sync::mpsc;

/// What the loop runs: anything that keeps core's contract ([`Machine`], docs/design.md, "The
/// core contract") with the mirror's inputs, outputs and status, so the loop runs the mirror
/// and test doubles alike.
pub trait Core: Machine<Input = Input, Output = Output, Status = Status> + Send {}

impl<T: Machine<Input = Input, Output = Output, Status = Status> + Send> Core for T {}

/// Receives the core's status as it changes (admin endpoints, metrics, terminal progress).
pub trait StatusSink: Send {
    /// Called at most every [`AgentOptions::publish_interval`] and once at stop.
    fn publish(&mut self, status: &Status, now: Instant);
}

/// A sink that ignores everything.
#[derive(Debug, Default)]
pub struct NoSink;

impl StatusSink for NoSink {
    fn publish(&mut self, _: &Status, _: Instant) {}
}

/// Loop tuning.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// How often status is pushed to the sink.
    pub publish_interval: Duration,
    /// After a shutdown request, how long to wait for the core to stop before abandoning
    /// whatever is in flight.
    pub shutdown_grace: Duration,
    /// Capacity of the input channel; a full channel back-pressures watch streams.
    pub channel_capacity: usize,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            publish_interval: Duration::from_millis(200),
            shutdown_grace: Duration::from_secs(30),
            channel_capacity: 1024,
        }
    }
}

/// The drivers' clock (one for both binaries).
pub use tidemark_runtime::Clock;

/// Drives one core against one executor.
#[derive(Debug)]
pub struct Agent<C: Core> {
    core: C,
    exec: Executor,
    clock: Clock,
    opts: AgentOptions,
}

impl<C: Core> Agent<C> {
    /// A new agent; the clock starts now.
    pub fn new(core: C, exec: Executor, opts: AgentOptions) -> Self {
        Agent {
            core,
            exec,
            clock: Clock::start(),
            opts,
        }
    }

    /// The core's current status.
    pub fn status(&self) -> &Status {
        self.core.status()
    }

    /// Runs until the core stops. `controls` carries operator requests; `shutdown`
    /// resolving sends `Control::Shutdown` (SIGTERM). Returns the stop reason and the core.
    pub async fn run(
        mut self,
        mut controls: mpsc::Receiver<Control>,
        shutdown: impl Future<Output = ()>,
        sink: &mut dyn StatusSink,
    ) -> (StopReason, C) {
        let (tx, mut rx) = mpsc::channel::<Input>(self.opts.channel_capacity);
        let mut tasks = tokio::task::JoinSet::new();
        // Watches the core cancelled: anything still queued for them is dropped, so the
        // core never hears from a watch after it cancelled it.
        let mut cancelled: BTreeSet<u64> = BTreeSet::new();
        let mut last_publish: Option<tokio::time::Instant> = None;
        let mut shutdown_deadline: Option<tokio::time::Instant> = None;
        let mut controls_open = true;
        tokio::pin!(shutdown);
        let mut shutdown_fired = false;

        let reason = 'outer: loop {
            // 1. Drain outputs.
            let deadline = loop {
                let now = self.clock.now();
                match self.core.poll_output(now) {
                    Output::Command { id, cmd } => {
                        tracing::trace!(id, cmd = cmd.label(), "command");
                        match &cmd {
                            Command::CancelWatch { watch_id } => {
                                cancelled.insert(*watch_id);
                            }
                            Command::Watch(w) => {
                                cancelled.remove(&w.watch_id);
                            }
                            _ => {}
                        }
                        let exec = self.exec.clone();
                        let tx = tx.clone();
                        tasks.spawn(async move { exec.dispatch(id, cmd, tx).await });
                    }
                    Output::Timeout(t) => break t,
                    Output::Stopped(r) => break 'outer r,
                }
            };
            // Reap finished command tasks so the set does not grow.
            while tasks.try_join_next().is_some() {}

            // 2. Publish status (rate-limited).
            let tnow = tokio::time::Instant::now();
            if last_publish.is_none_or(|l| tnow.duration_since(l) >= self.opts.publish_interval) {
                sink.publish(self.core.status(), self.clock.now());
                last_publish = Some(tnow);
            }

            // 3. Wait for the next input, the core's deadline, or an operator.
            let mut wake = self.clock.to_tokio(deadline);
            if let Some(l) = last_publish {
                wake = wake.min(l + self.opts.publish_interval);
            }
            if let Some(d) = shutdown_deadline {
                if tnow >= d {
                    tracing::warn!("shutdown grace period elapsed; abandoning in-flight commands");
                    break StopReason::Shutdown;
                }
                wake = wake.min(d);
            }
            tokio::select! {
                biased;
                _ = &mut shutdown, if !shutdown_fired => {
                    shutdown_fired = true;
                    tracing::info!("shutdown requested");
                    shutdown_deadline = Some(tokio::time::Instant::now() + self.opts.shutdown_grace);
                    self.core.handle_input(self.clock.now(), Input::Control(Control::Shutdown));
                }
                c = controls.recv(), if controls_open => match c {
                    Some(c) => {
                        tracing::info!(control = ?c, "operator control");
                        self.core.handle_input(self.clock.now(), Input::Control(c));
                    }
                    None => controls_open = false,
                },
                input = rx.recv() => {
                    // `tx` lives in this scope, so the channel never closes here.
                    if let Some(input) = input {
                        self.feed(input, &cancelled);
                        // Take whatever else is ready before polling again.
                        for _ in 0..256 {
                            match rx.try_recv() {
                                Ok(i) => self.feed(i, &cancelled),
                                Err(_) => break,
                            }
                        }
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        };
        sink.publish(self.core.status(), self.clock.now());
        self.exec.cancel_all_watches();
        tasks.abort_all();
        (reason, self.core)
    }

    fn feed(&mut self, input: Input, cancelled: &BTreeSet<u64>) {
        if let Input::Watch { watch_id, .. } = &input {
            if cancelled.contains(watch_id) {
                return;
            }
        }
        self.core.handle_input(self.clock.now(), input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::{ClusterConn, ConnSettings};
    use std::sync::{Arc, Mutex};
    use tidemark_core::classify::Failure;
    use tidemark_core::etcd::{Cluster, Reply};

    /// A scripted core: waits 50ms, asks for one command, records what comes back, and
    /// stops when told to shut down.
    #[derive(Debug, Default)]
    struct Script {
        seen: Arc<Mutex<Vec<Input>>>,
        issued: u32,
        wake_at: Option<Instant>,
        stop: bool,
        status: Status,
    }

    impl Machine for Script {
        type Input = Input;
        type Output = Output;
        type Status = Status;
        fn handle_input(&mut self, _now: Instant, input: Input) {
            if matches!(input, Input::Control(Control::Shutdown)) {
                self.stop = true;
            }
            self.seen.lock().expect("lock").push(input);
        }
        fn poll_output(&mut self, now: Instant) -> Output {
            if self.stop {
                return Output::Stopped(StopReason::Shutdown);
            }
            let wake = *self.wake_at.get_or_insert(now + Duration::from_millis(50));
            if now < wake {
                return Output::Timeout(wake);
            }
            match self.issued {
                0 => {
                    self.issued = 1;
                    Output::Command {
                        id: 1,
                        cmd: Command::CancelWatch { watch_id: 9 },
                    }
                }
                1 => {
                    self.issued = 2;
                    Output::Command {
                        id: 2,
                        cmd: Command::Status {
                            cluster: Cluster::Source,
                        },
                    }
                }
                _ => Output::Timeout(now + Duration::from_secs(3600)),
            }
        }
        fn status(&self) -> &Status {
            &self.status
        }
    }

    fn unreachable_executor() -> Executor {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let s = ConnSettings::plain(
            vec![format!("http://127.0.0.1:{port}")],
            Duration::from_secs(1),
        );
        let c = Arc::new(ClusterConn::new(Cluster::Source, s));
        Executor::new(c.clone(), c, Duration::from_secs(1))
    }

    #[tokio::test]
    async fn honours_timeouts_feeds_completions_and_shuts_down() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let core = Script {
            seen: seen.clone(),
            ..Default::default()
        };
        let agent = Agent::new(core, unreachable_executor(), AgentOptions::default());
        let (_ctl_tx, ctl_rx) = mpsc::channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let t0 = std::time::Instant::now();
        let waiter = {
            let seen = seen.clone();
            async move {
                // Shut down once both completions are in.
                loop {
                    if seen.lock().expect("lock").len() >= 2 {
                        let _ = stop_tx.send(());
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        let mut sink = NoSink;
        let run = agent.run(
            ctl_rx,
            async move {
                let _ = stop_rx.await;
            },
            &mut sink,
        );
        let ((reason, _), ()) = tokio::join!(run, waiter);
        assert_eq!(reason, StopReason::Shutdown);
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "timeout honoured"
        );
        let seen = seen.lock().expect("lock");
        assert!(matches!(
            seen[0],
            Input::Done {
                id: 1,
                result: Ok(Reply::Ok)
            }
        ));
        assert!(matches!(
            seen[1],
            Input::Done {
                id: 2,
                result: Err(Failure::Transient { .. })
            }
        ));
        assert!(matches!(seen[2], Input::Control(Control::Shutdown)));
    }
}
