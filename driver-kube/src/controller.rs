//! The inventory controller: kube-runtime's [`Controller`](kube::runtime::Controller)
//! watches Compositions and owns the queue (one reconcile per Composition at a time, up to
//! [`ControllerConfig::concurrency`] Compositions at once), the resync (every success
//! requeues after [`ControllerConfig::resync`]) and the per-Composition backoff (the error
//! policy). Each reconcile is [`Reconciler::reconcile`]: the recovery decision, then
//! recording. What kube-runtime has no notion of, the least time between two reconciles of
//! one Composition, is a requeue from the reconcile itself.

use crate::drive::wall_timestamp;
use crate::exec::Executor;
use crate::reconcile::lock;
pub use crate::reconcile::{Reconciled, Reconciler};
pub use crate::settings::{ControllerConfig, ControllerStats};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::{Action, Config as RuntimeConfig};
use kube::runtime::watcher;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_core::rng::Rng;

/// A reconcile that must be retried; the error policy backs it off.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RetryLater(String);

/// How long a graceful stop waits for running reconciles before it cancels them (a recovery
/// cancelled mid-way is redone from the start by the next process; nothing is lost).
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The controller: the reconciler plus per-Composition timing.
pub struct Controller {
    shared: Arc<Shared>,
}

struct Shared {
    reconciler: Reconciler,
    rng: Mutex<Rng>,
    /// When each Composition may next be reconciled, and its current failure streak.
    limits: Mutex<BTreeMap<(String, String), (tokio::time::Instant, u32)>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("reconciler", &self.shared.reconciler)
            .finish_non_exhaustive()
    }
}

fn composition_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::eno::GROUP, crate::eno::VERSION, "Composition"),
        "compositions",
    )
}

fn key_of(obj: &DynamicObject) -> (String, String) {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

impl Shared {
    fn cfg(&self) -> &ControllerConfig {
        self.reconciler.config()
    }

    fn jittered(&self, d: Duration) -> Duration {
        d.mul_f64(1.0 + self.cfg().jitter.max(0.0) * lock(&self.rng).unit())
    }

    /// Time left before `key` may be reconciled again, if any.
    fn too_soon(&self, key: &(String, String)) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        lock(&self.limits)
            .get(key)
            .map(|(at, _)| *at)
            .filter(|at| *at > now)
            .map(|at| at - now)
    }

    /// Records a reconcile's end: the next may start after `delay`; `streak` failures so far.
    fn note(&self, key: (String, String), delay: Duration, streak: u32) {
        let at = tokio::time::Instant::now() + delay;
        lock(&self.limits).insert(key, (at, streak));
    }

    async fn reconcile(&self, obj: &DynamicObject) -> Result<Action, RetryLater> {
        let key = key_of(obj);
        if let Some(wait) = self.too_soon(&key) {
            return Ok(Action::requeue(wait));
        }
        match self.reconciler.reconcile(&key.0, &key.1).await {
            Reconciled::Done => {
                self.note(key, self.jittered(self.cfg().min_interval), 0);
                Ok(Action::requeue(self.jittered(self.cfg().resync)))
            }
            Reconciled::Retry(why) => {
                self.reconciler.count(|s| s.failures += 1);
                tracing::info!(composition = %format!("{}/{}", key.0, key.1), why, "requeued");
                Err(RetryLater(why))
            }
        }
    }

    /// Exponential backoff per Composition, from `min_interval` up to `max_backoff`.
    fn backoff(&self, obj: &DynamicObject) -> Action {
        let key = key_of(obj);
        let streak = lock(&self.limits).get(&key).map_or(0, |l| l.1) + 1;
        let exp = self
            .cfg()
            .min_interval
            .saturating_mul(1u32 << streak.min(16));
        let delay = self.jittered(exp.min(self.cfg().max_backoff));
        self.note(key, delay, streak);
        Action::requeue(delay)
    }
}

impl Controller {
    /// A controller executing with `exec`; Events go to the Eno cluster.
    pub fn new(cfg: ControllerConfig, exec: Executor) -> Controller {
        let seed = wall_timestamp().unix_nanos as u64 ^ u64::from(std::process::id());
        Controller {
            shared: Arc::new(Shared {
                reconciler: Reconciler::new(cfg, exec),
                rng: Mutex::new(Rng::new(seed)),
                limits: Mutex::new(BTreeMap::new()),
            }),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ControllerStats {
        self.shared.reconciler.stats()
    }

    fn composition_api(&self) -> Api<DynamicObject> {
        let cfg = self.shared.cfg();
        Api::namespaced_with(
            self.shared.reconciler.exec().clusters().eno.clone(),
            &cfg.namespace,
            &composition_resource(),
        )
    }

    fn watch_config(&self) -> watcher::Config {
        match self.shared.cfg().label_selector() {
            Some(sel) => watcher::Config::default().labels(&sel),
            None => watcher::Config::default(),
        }
    }

    /// Watches and reconciles until `shutdown` resolves, then lets running reconciles end
    /// (for at most 30 s). `on_tick` sees the counters after every reconcile and
    /// every 10 s (heartbeat, status).
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        mut on_tick: impl FnMut(&ControllerStats),
    ) -> ControllerStats {
        let cfg = self.shared.cfg().clone();
        let runtime = kube::runtime::Controller::new_with(
            self.composition_api(),
            self.watch_config(),
            composition_resource(),
        )
        .with_config(RuntimeConfig::default().concurrency(cfg.concurrency));
        let store = runtime.store();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut stream = runtime
            .graceful_shutdown_on(async move {
                let _ = stop_rx.await;
            })
            .run(
                |obj, shared: Arc<Shared>| async move { shared.reconcile(&obj).await },
                |obj, _err, shared: Arc<Shared>| shared.backoff(&obj),
                self.shared.clone(),
            )
            .boxed();
        tokio::pin!(shutdown);
        let mut stop_tx = Some(stop_tx);
        let mut deadline: Option<tokio::time::Instant> = None;
        // Liveness for /healthz even when nothing changes.
        let mut heartbeat = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = &mut shutdown, if stop_tx.is_some() => {
                    if let Some(tx) = stop_tx.take() {
                        let _ = tx.send(());
                    }
                    deadline = Some(tokio::time::Instant::now() + STOP_GRACE);
                }
                _ = sleep_until_opt(deadline) => {
                    tracing::warn!("reconciles still running after the stop grace; cancelling them");
                    break;
                }
                item = stream.next() => match item {
                    None => break,
                    Some(Ok(_)) => {}
                    // Watch errors are retried by kube-runtime; a reconcile error was
                    // already logged and backed off.
                    Some(Err(e)) => tracing::debug!(error = %e, "controller stream"),
                },
                _ = heartbeat.tick() => {
                    // Forget the timing of Compositions that are gone.
                    let live: BTreeSet<(String, String)> =
                        store.state().iter().map(|o| key_of(o)).collect();
                    lock(&self.shared.limits).retain(|k, _| live.contains(k));
                    self.shared.reconciler.forget_except(&live);
                }
            }
            self.shared
                .reconciler
                .count(|s| s.compositions = store.state().len());
            on_tick(&self.shared.reconciler.stats());
        }
        self.shared.reconciler.stats()
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending::<()>().await,
    }
}
