//! Running from an `EtcdMirror` custom resource (`tidemark-mirror run --resource NS/NAME`).
//!
//! The spec is read once at start, resolved to the same file-based config the standalone agent
//! runs, and validated by the same checks. Status goes back through the status subresource
//! from a background task: the agent loop publishes synchronously and must never wait on the
//! apiserver. That task also re-reads the object, so a deleted EtcdMirror stops the agent and
//! a spec update that only switches `mode` to `Drain` starts the drain without a restart.

use crate::agent::Clock;
use crate::config::Overrides;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;
use std::time::Duration;
use tidemark_api::{
    EtcdMirror, EtcdMirrorSpec, EtcdMirrorStatus, Published, Resolved, ResourceRef, StatusWriter,
    WallClock, WriteError,
};
use tidemark_core::config::{ConfigErrors, MirrorConfig, Mode};
use tidemark_core::mirror::io::Control;
use tidemark_core::mirror::{Phase, Status};
use tidemark_core::Instant;
use tokio::sync::{mpsc, oneshot, watch};

/// Why `--resource` could not produce a runnable config.
#[derive(Debug, thiserror::Error)]
pub enum ResourceError {
    /// No usable kubeconfig or in-cluster config.
    #[error("kubernetes client config: {0}")]
    Kubeconfig(String),
    /// The object or a Secret it names could not be read.
    #[error(transparent)]
    Resolve(#[from] tidemark_api::ResolveError),
    /// The spec fails the agent's validation.
    #[error("EtcdMirror {resource}: {source}")]
    Invalid {
        resource: ResourceRef,
        #[source]
        source: ConfigErrors,
    },
}

/// A client from `kubeconfig` (or `$KUBECONFIG`/`~/.kube/config` when only a context is
/// named), else the in-cluster service account.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<kube::Client, ResourceError> {
    let err = |e: &dyn std::fmt::Display| ResourceError::Kubeconfig(e.to_string());
    let opts = KubeConfigOptions {
        context,
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(p) => {
            let kc = Kubeconfig::read_from(p).map_err(|e| err(&e))?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| err(&e))?
        }
        None if opts.context.is_some() => kube::Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| err(&e))?,
        None => kube::Config::infer().await.map_err(|e| err(&e))?,
    };
    kube::Client::try_from(config).map_err(|e| err(&e))
}

/// Reads and resolves the EtcdMirror (Secrets become files under `dir`), applies command-line
/// overrides and runs the file path's validation, all before anything connects to etcd.
pub async fn load(
    client: kube::Client,
    r: &ResourceRef,
    dir: &Path,
    overrides: &Overrides,
) -> Result<Resolved, ResourceError> {
    let mut resolved = tidemark_api::resolve(client, r, dir).await?;
    overrides.apply(&mut resolved.config);
    crate::config::validate(&resolved.config).map_err(|source| ResourceError::Invalid {
        resource: r.clone(),
        source,
    })?;
    Ok(resolved)
}

/// The agent side of the status publisher: hands the newest status to the background task.
#[derive(Debug, Clone)]
pub struct StatusFeed(watch::Sender<Option<(Status, Instant)>>);

impl StatusFeed {
    /// Offers `status` (taken at core time `now`); only the newest offer is kept.
    pub fn offer(&self, status: &Status, now: Instant) {
        self.0.send_replace(Some((status.clone(), now)));
    }
}

/// How the publisher ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Stopped by [`Publisher::finish`]; the final status was written (or was unchanged).
    Finished,
    /// The EtcdMirror was deleted (or re-created under a new UID); nothing more was written.
    Deleted,
}

/// The background status task for one EtcdMirror.
#[derive(Debug)]
pub struct Publisher {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Task>,
}

/// Starts publishing the status of `resolved` at most every `min_interval` (phase changes at
/// once). Operator-visible events (deletion, a drain request, a spec change that needs a
/// restart) become `controls`.
pub fn spawn(
    client: kube::Client,
    r: ResourceRef,
    resolved: &Resolved,
    min_interval: Duration,
    controls: mpsc::Sender<Control>,
) -> (StatusFeed, Publisher) {
    let api: Api<EtcdMirror> = Api::namespaced(client, &r.namespace);
    let (tx, rx) = watch::channel(None);
    let (stop, stop_rx) = oneshot::channel();
    let task = Task {
        writer: StatusWriter::new(api.clone(), r.name.clone(), min_interval),
        api,
        resource: r,
        generation: resolved.generation,
        uid: resolved.uid.clone(),
        spec: resolved.object.spec.clone(),
        ignored_generation: 0,
        clock: Clock::start(),
        wall: None,
        written_phase: None,
        latest: None,
        pending: false,
        failing: false,
        deleted: false,
        controls,
        min_interval,
    };
    let task = tokio::spawn(task.run(rx, stop_rx));
    (
        StatusFeed(tx),
        Publisher {
            stop: Some(stop),
            task,
        },
    )
}

impl Publisher {
    /// Stops the task and writes the newest offered status ignoring the rate limit (the
    /// drained or failed status must not be lost to it). The agent offers its final status
    /// as it stops, so call this after the agent returns.
    pub async fn finish(mut self) -> Result<Ended, WriteError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let Ok(mut task) = self.task.await else {
            // The task panicked; nothing sensible is left to write with.
            return Ok(Ended::Finished);
        };
        if task.deleted {
            return Ok(Ended::Deleted);
        }
        let Some(st) = task.api_status() else {
            return Ok(Ended::Finished);
        };
        match task.writer.publish_now(task.clock.now(), &st).await {
            Ok(_) => Ok(Ended::Finished),
            Err(WriteError::NotFound(_)) => Ok(Ended::Deleted),
            Err(e) => Err(e),
        }
    }
}

#[derive(Debug)]
struct Task {
    writer: StatusWriter,
    api: Api<EtcdMirror>,
    resource: ResourceRef,
    /// The generation acted upon: `observedGeneration`.
    generation: i64,
    uid: String,
    spec: EtcdMirrorSpec,
    /// The newest generation this process will not apply (it asked for a restart).
    ignored_generation: i64,
    /// Drives the writer's rate limit.
    clock: Clock,
    /// Anchored at the first status, mapping agent instants to wall time.
    wall: Option<WallClock>,
    written_phase: Option<Phase>,
    latest: Option<(Status, Instant)>,
    /// A status is waiting for the rate limit or a retry.
    pending: bool,
    /// The last write failed (warned once until a write succeeds).
    failing: bool,
    deleted: bool,
    controls: mpsc::Sender<Control>,
    min_interval: Duration,
}

impl Task {
    async fn run(
        mut self,
        mut rx: watch::Receiver<Option<(Status, Instant)>>,
        mut stop: oneshot::Receiver<()>,
    ) -> Task {
        let mut poll = tokio::time::interval(self.min_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.deleted {
            tokio::select! {
                biased;
                _ = &mut stop => {
                    self.latest = rx.borrow_and_update().clone();
                    break;
                }
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.latest = rx.borrow_and_update().clone();
                    self.write().await;
                }
                _ = tokio::time::sleep(self.retry_delay()), if self.pending => self.write().await,
                _ = poll.tick() => self.check_object().await,
            }
        }
        self
    }

    /// Soon for a rate-limited status; a full interval after a failed write.
    fn retry_delay(&self) -> Duration {
        if self.failing {
            self.min_interval
        } else {
            Duration::from_millis(250)
        }
    }

    fn api_status(&mut self) -> Option<EtcdMirrorStatus> {
        let (s, now) = self.latest.as_ref()?;
        let wall = *self
            .wall
            .get_or_insert_with(|| WallClock::anchored(*now, Timestamp::now()));
        Some(EtcdMirrorStatus::from_core(s, Some(self.generation), |t| {
            wall.time(t)
        }))
    }

    /// Writes the newest status: a phase change at once, anything else rate-limited.
    async fn write(&mut self) {
        let Some(st) = self.api_status() else {
            return;
        };
        let phase = self.latest.as_ref().map(|(s, _)| s.phase);
        let now = self.clock.now();
        let r = if phase != self.written_phase {
            self.writer.publish_now(now, &st).await
        } else {
            self.writer.publish(now, &st).await
        };
        match r {
            Ok(Published::Written) => {
                self.written_phase = phase;
                self.pending = false;
                self.failing = false;
            }
            Ok(Published::Unchanged) => self.pending = false,
            Ok(Published::RateLimited) => self.pending = true,
            Err(WriteError::NotFound(_)) => self.gone("its status subresource returned 404").await,
            Err(e) => {
                if self.failing {
                    tracing::debug!(resource = %self.resource, error = %e, "status write failed again");
                } else {
                    tracing::warn!(resource = %self.resource, error = %e, "status write failed; retrying");
                }
                self.failing = true;
                self.pending = true;
            }
        }
    }

    /// Notices deletion and spec updates that status writes alone would not (an idle mirror
    /// writes nothing).
    async fn check_object(&mut self) {
        let o = match self.api.get_opt(&self.resource.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return self.gone("it no longer exists").await,
            Err(e) => {
                tracing::debug!(resource = %self.resource, error = %e, "re-reading the EtcdMirror failed");
                return;
            }
        };
        if o.metadata.uid.as_deref().unwrap_or_default() != self.uid {
            return self.gone("it was re-created under a new UID").await;
        }
        let generation = o.metadata.generation.unwrap_or(0);
        if generation <= self.generation.max(self.ignored_generation) {
            return;
        }
        if o.spec.config == self.spec.config {
            // Only `spec.pod` changed: the operator rolls the pod for that; this agent has
            // nothing to apply.
            tracing::debug!(resource = %self.resource, generation, "only spec.pod changed");
            self.generation = generation;
            self.spec = o.spec;
            self.write().await;
        } else if drain_only(&self.spec.config, &o.spec.config) {
            tracing::info!(resource = %self.resource, generation, "spec switched mode to Drain; draining");
            self.generation = generation;
            self.spec = o.spec;
            let _ = self.controls.send(Control::Drain).await;
            // observedGeneration moved: publish it.
            self.write().await;
        } else {
            tracing::warn!(
                resource = %self.resource,
                generation,
                running = self.generation,
                "the EtcdMirror spec changed; stopping so that a restart applies it"
            );
            // Warn once per generation; observedGeneration stays what is running.
            self.ignored_generation = generation;
            let _ = self.controls.send(Control::Shutdown).await;
        }
    }

    async fn gone(&mut self, why: &str) {
        tracing::warn!(resource = %self.resource, "EtcdMirror was deleted ({why}); stopping the mirror");
        self.deleted = true;
        let _ = self.controls.send(Control::Shutdown).await;
    }
}

/// Whether `new` differs from `old` only by `mode` switching to `Drain`.
fn drain_only(old: &MirrorConfig, new: &MirrorConfig) -> bool {
    if new.mode != Mode::Drain || old.mode == Mode::Drain {
        return false;
    }
    let mut same = new.clone();
    same.mode = old.mode;
    &same == old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mode_switch_to_drain_is_applied_in_place() {
        let old = MirrorConfig::new("/a/", "/b/");
        let mut drain = old.clone();
        drain.mode = Mode::Drain;
        assert!(drain_only(&old, &drain));
        assert!(!drain_only(&drain, &drain));
        assert!(!drain_only(&drain, &old));
        let mut more = drain.clone();
        more.sync.max_txn_ops = 7;
        assert!(!drain_only(&old, &more));
    }
}
