//! Source watches as background tasks, one gRPC watch stream per core watch.
//!
//! One stream per watch keeps the mapping trivial: every response on a stream (including
//! progress notifications, which etcd 3.4/3.5 send with watch id -1) belongs to exactly one
//! core watch. Each task delivers `Input::Done{WatchStarted}` once the server confirmed the
//! watch, then every response as `Input::Watch`, in order, on the agent's input channel.

use crate::connect::{ClusterConn, MAX_DECODING_BYTES};
use crate::error::failure_from;
use crate::wire::{etcd_key, kv_from};
use etcd_client::{EventType, WatchOptions, WatchResponse, WatchStream};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tidemark_core::classify::{classify, Code, Failure};
use tidemark_core::etcd::{Event, EventKind, Reply, WatchEvent, WatchRequest};
use tidemark_core::mirror::io::{CommandId, Input};
use tokio::sync::mpsc;

enum Ctl {
    Progress,
}

struct Entry {
    /// Distinguishes a restarted watch with the same id from its predecessor.
    token: u64,
    ctl: mpsc::UnboundedSender<Ctl>,
    abort: tokio::task::AbortHandle,
}

#[derive(Default)]
struct Inner {
    next_token: u64,
    entries: BTreeMap<u64, Entry>,
}

/// The running watch tasks, by core watch id.
#[derive(Clone, Default)]
pub struct WatchRegistry {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for WatchRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.lock().entries.len();
        f.debug_struct("WatchRegistry").field("active", &n).finish()
    }
}

impl WatchRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Spawns the watch task for `req`; its completion and events go to `tx`.
    pub async fn start(
        &self,
        id: CommandId,
        req: WatchRequest,
        conn: Arc<ClusterConn>,
        create_timeout: Duration,
        tx: mpsc::Sender<Input>,
    ) {
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let mut inner = self.lock();
        inner.next_token += 1;
        let token = inner.next_token;
        let watch_id = req.watch_id;
        let reg = self.clone();
        let task = tokio::spawn(async move {
            run(id, req, conn, create_timeout, tx, ctl_rx).await;
            reg.finished(watch_id, token);
        });
        if let Some(old) = inner.entries.insert(
            watch_id,
            Entry {
                token,
                ctl: ctl_tx,
                abort: task.abort_handle(),
            },
        ) {
            old.abort.abort();
        }
    }

    fn finished(&self, watch_id: u64, token: u64) {
        let mut inner = self.lock();
        if inner
            .entries
            .get(&watch_id)
            .is_some_and(|e| e.token == token)
        {
            inner.entries.remove(&watch_id);
        }
    }

    /// Stops the task; dropping its stream cancels the watch on the server.
    pub fn cancel(&self, watch_id: u64) {
        if let Some(e) = self.lock().entries.remove(&watch_id) {
            e.abort.abort();
        }
    }

    /// Asks the server for a progress notification on this watch's stream.
    pub fn request_progress(&self, watch_id: u64) {
        if let Some(e) = self.lock().entries.get(&watch_id) {
            let _ = e.ctl.send(Ctl::Progress);
        }
    }

    /// Stops every watch.
    pub fn cancel_all(&self) {
        let mut inner = self.lock();
        for (_, e) in std::mem::take(&mut inner.entries) {
            e.abort.abort();
        }
    }

    /// How many watch tasks are running.
    pub fn active(&self) -> usize {
        self.lock().entries.len()
    }
}

/// Converts one watch response; `None` for the creation acknowledgement.
pub(crate) fn event_of(resp: &WatchResponse) -> Option<WatchEvent> {
    let header_revision = resp.header().map(|h| h.revision()).unwrap_or(0);
    if resp.canceled() {
        return Some(WatchEvent::Cancelled {
            compact_revision: resp.compact_revision(),
            reason: resp.cancel_reason().to_string(),
        });
    }
    if resp.compact_revision() > 0 {
        // etcd sets compact_revision on the cancel response; treat a bare one the same way.
        return Some(WatchEvent::Cancelled {
            compact_revision: resp.compact_revision(),
            reason: "required revision has been compacted".into(),
        });
    }
    if resp.events().is_empty() {
        if resp.created() {
            return None;
        }
        return Some(WatchEvent::Progress {
            revision: header_revision,
        });
    }
    let events = resp
        .events()
        .iter()
        .filter_map(|e| {
            let kv = e.kv()?;
            let kind = match e.event_type() {
                EventType::Put => EventKind::Put,
                EventType::Delete => EventKind::Delete,
            };
            let mut kv = kv_from(kv);
            if kind == EventKind::Delete {
                kv.value.clear();
            }
            Some(Event { kind, kv })
        })
        .collect();
    Some(WatchEvent::Events {
        header_revision,
        events,
    })
}

async fn open(
    conn: &ClusterConn,
    req: &WatchRequest,
) -> Result<(WatchStream, WatchResponse, u64), Failure> {
    let c = conn.get().await?;
    let mut opts = WatchOptions::new()
        .with_start_revision(req.start_revision)
        .with_progress_notify();
    if !req.range_end.is_empty() {
        opts = opts.with_range(req.range_end.clone());
    }
    let key = etcd_key(&req.key, &req.range_end);
    let result = async {
        let mut stream = c
            .client
            .watch_client()
            .max_decoding_message_size(MAX_DECODING_BYTES)
            .watch(key, Some(opts))
            .await
            .map_err(|e| failure_from(&e))?;
        loop {
            match stream.message().await.map_err(|e| failure_from(&e))? {
                Some(resp) if resp.created() || resp.canceled() => return Ok((stream, resp)),
                Some(_) => continue,
                None => {
                    return Err(classify(
                        Code::Unavailable,
                        "watch stream closed before the watch was created",
                    ))
                }
            }
        }
    }
    .await;
    if let Err(f) = &result {
        conn.report(c.generation, f).await;
    }
    result.map(|(s, r)| (s, r, c.generation))
}

async fn run(
    id: CommandId,
    req: WatchRequest,
    conn: Arc<ClusterConn>,
    create_timeout: Duration,
    tx: mpsc::Sender<Input>,
    mut ctl: mpsc::UnboundedReceiver<Ctl>,
) {
    let watch_id = req.watch_id;
    let opened = match tokio::time::timeout(create_timeout, open(&conn, &req)).await {
        Ok(r) => r,
        // Nothing was written; a watch that did not come up in time is simply retried.
        Err(_) => Err(classify(
            Code::Unavailable,
            &format!("watch creation timed out after {create_timeout:?}"),
        )),
    };
    let (mut stream, first, generation) = match opened {
        Ok(x) => x,
        Err(f) => {
            let _ = tx.send(Input::Done { id, result: Err(f) }).await;
            return;
        }
    };
    tracing::debug!(watch_id, start = req.start_revision, "watch created");
    if tx
        .send(Input::Done {
            id,
            result: Ok(Reply::WatchStarted),
        })
        .await
        .is_err()
    {
        return;
    }
    if let Some(ev) = event_of(&first) {
        let _ = tx
            .send(Input::Watch {
                watch_id,
                event: ev,
            })
            .await;
        return;
    }
    loop {
        tokio::select! {
            msg = stream.message() => {
                let event = match msg {
                    Ok(Some(resp)) => match event_of(&resp) {
                        Some(ev) => ev,
                        None => continue,
                    },
                    Ok(None) => WatchEvent::Failed {
                        failure: classify(Code::Unavailable, "watch stream closed by the server"),
                    },
                    Err(e) => {
                        let failure = failure_from(&e);
                        conn.report(generation, &failure).await;
                        WatchEvent::Failed { failure }
                    }
                };
                let terminal = matches!(event, WatchEvent::Cancelled { .. } | WatchEvent::Failed { .. });
                if tx.send(Input::Watch { watch_id, event }).await.is_err() || terminal {
                    return;
                }
            }
            c = ctl.recv() => match c {
                Some(Ctl::Progress) => {
                    if let Err(e) = stream.request_progress().await {
                        tracing::debug!(watch_id, error = %e, "progress request failed");
                    }
                }
                None => return,
            }
        }
    }
}
