//! The state a binary reports into while it runs: heartbeat, readiness,
//! status JSON and its metrics registry.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::watch;

/// Cheap, cloneable handle through which the binary's loops report liveness,
/// readiness and status, and register metrics. All methods are non-blocking
/// (short std locks), so they may be called from sync code and hot loops.
#[derive(Clone)]
pub struct AdminHandle {
    inner: Arc<Inner>,
}

struct Inner {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last heartbeat.
    last_beat_ms: AtomicU64,
    /// `None` = ready; `Some(reason)` = not ready and why.
    not_ready: Mutex<Option<String>>,
    status: watch::Sender<Value>,
    registry: RwLock<Registry>,
}

impl fmt::Debug for AdminHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminHandle")
            .field("heartbeat_age", &self.heartbeat_age())
            .field("readiness", &self.readiness())
            .finish_non_exhaustive()
    }
}

impl AdminHandle {
    pub(crate) fn new(registry: Registry) -> Self {
        Self {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                last_beat_ms: AtomicU64::new(0),
                not_ready: Mutex::new(Some("starting".to_owned())),
                status: watch::Sender::new(Value::Null),
                registry: RwLock::new(registry),
            }),
        }
    }

    /// Records that the main loop is alive. Call it on every loop iteration (or
    /// from a timer the loop services): `/healthz` fails once the last beat is
    /// older than the configured staleness, which lets Kubernetes restart a
    /// wedged process while a merely slow one keeps running.
    pub fn heartbeat(&self) {
        let ms = u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.inner.last_beat_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last [`heartbeat`](Self::heartbeat) (or since start-up).
    pub fn heartbeat_age(&self) -> Duration {
        let last = Duration::from_millis(self.inner.last_beat_ms.load(Ordering::Relaxed));
        self.inner.epoch.elapsed().saturating_sub(last)
    }

    /// Marks the process ready to serve (`/readyz` answers 200).
    pub fn set_ready(&self) {
        *lock(&self.inner.not_ready) = None;
    }

    /// Marks the process not ready; `reason` is the `/readyz` 503 body, so make
    /// it useful to whoever reads `kubectl describe` ("waiting for fence", ...).
    /// Processes start not ready with reason `starting`.
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *lock(&self.inner.not_ready) = Some(reason.into());
    }

    /// `Ok(())` when ready, else the reason.
    pub fn readiness(&self) -> Result<(), String> {
        match &*lock(&self.inner.not_ready) {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }

    /// Replaces the JSON served on `/statusz` (typically the core's `Status`
    /// serialised after each step).
    pub fn set_status(&self, status: Value) {
        self.inner.status.send_replace(status);
    }

    /// Edits the `/statusz` JSON in place (e.g. to update one field).
    pub fn update_status(&self, edit: impl FnOnce(&mut Value)) {
        self.inner.status.send_modify(edit);
    }

    /// Current `/statusz` JSON.
    pub fn status(&self) -> Value {
        self.inner.status.borrow().clone()
    }

    /// A receiver that sees every status change (for in-process consumers).
    pub fn subscribe_status(&self) -> watch::Receiver<Value> {
        self.inner.status.subscribe()
    }

    /// Gives `f` the registry served on `/metrics`, e.g. to register the
    /// binary's gauges. Metrics are shared handles: keep a clone and update it;
    /// registration can happen at any time, before or after the server starts.
    pub fn with_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        let mut registry = self
            .inner
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut registry)
    }

    /// Renders the registry in the OpenMetrics text format.
    pub(crate) fn encode_metrics(&self) -> Result<String, fmt::Error> {
        let registry = self
            .inner
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

/// A panic elsewhere while holding the lock cannot leave an `Option<String>`
/// half-written, so a poisoned lock is still safe to use.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_starts_false_and_flips() {
        let h = AdminHandle::new(Registry::default());
        assert_eq!(h.readiness(), Err("starting".to_owned()));
        h.set_ready();
        assert_eq!(h.readiness(), Ok(()));
        h.set_not_ready("draining");
        assert_eq!(h.readiness(), Err("draining".to_owned()));
    }

    #[test]
    fn heartbeat_resets_age() {
        let h = AdminHandle::new(Registry::default());
        std::thread::sleep(Duration::from_millis(30));
        assert!(h.heartbeat_age() >= Duration::from_millis(30));
        h.heartbeat();
        assert!(h.heartbeat_age() < Duration::from_millis(30));
    }

    #[test]
    fn status_set_and_update() {
        let h = AdminHandle::new(Registry::default());
        assert_eq!(h.status(), Value::Null);
        h.set_status(serde_json::json!({"phase": "Syncing", "watermark": 7}));
        h.update_status(|v| v["watermark"] = 8.into());
        assert_eq!(
            h.status(),
            serde_json::json!({"phase": "Syncing", "watermark": 8})
        );
    }
}
