//! Publishes an EtcdMirror's Kubernetes Events (`tidemark_api::events` decides which) from
//! a background task, so that a slow or failing apiserver never holds up the mirror.
//!
//! kube-runtime's recorder folds a repeated event into one series (a count and a last-seen
//! time) instead of a new object; on top of it, each reason is published at most once per
//! [`MIN_INTERVAL`], so a flapping mirror cannot flood the apiserver.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::BTreeMap;
use std::time::Duration;
use tidemark_api::events::{derive, MirrorEvent, ACTION};
use tidemark_api::ResourceRef;
use tidemark_core::mirror::Status;
use tokio::sync::mpsc;

/// Least time between two publications of one reason.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);

/// Events waiting for the task; beyond this the newest are dropped (and counted).
const QUEUE: usize = 64;

/// The agent's side: turns status changes into queued events.
#[derive(Debug)]
pub struct EventFeed {
    prev: Option<Status>,
    tx: mpsc::Sender<MirrorEvent>,
    dropped: u64,
}

impl EventFeed {
    /// Queues the events between the previous offer and `s`; never waits.
    pub fn offer(&mut self, s: &Status) {
        if self.prev.as_ref() == Some(s) {
            return;
        }
        for e in derive(self.prev.as_ref(), s) {
            if self.tx.try_send(e).is_err() {
                self.dropped += 1;
                tracing::debug!(dropped = self.dropped, "event queue full; event dropped");
            }
        }
        self.prev = Some(s.clone());
    }
}

/// The publishing task.
#[derive(Debug)]
pub struct EventTask(tokio::task::JoinHandle<()>);

impl EventTask {
    /// Publishes what is queued (for at most 5 s), then stops. Drop the [`EventFeed`] first.
    pub async fn finish(self) {
        if tokio::time::timeout(Duration::from_secs(5), self.0)
            .await
            .is_err()
        {
            tracing::warn!("events still unpublished after 5s at shutdown; dropped");
        }
    }
}

/// Starts publishing events regarding the EtcdMirror `r` (with `uid`).
pub fn spawn(client: kube::Client, r: &ResourceRef, uid: &str) -> (EventFeed, EventTask) {
    let (tx, mut rx) = mpsc::channel::<MirrorEvent>(QUEUE);
    let reporter = Reporter {
        controller: "tidemark-mirror".into(),
        instance: std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()),
    };
    let recorder = Recorder::new(client, reporter);
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("tidemark.dev/v1alpha1".into()),
        kind: Some("EtcdMirror".into()),
        name: Some(r.name.clone()),
        namespace: Some(r.namespace.clone()),
        uid: Some(uid.to_string()),
        ..Default::default()
    };
    let task = tokio::spawn(async move {
        let mut last: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        let mut failing = false;
        while let Some(e) = rx.recv().await {
            let now = tokio::time::Instant::now();
            if last
                .get(&e.reason)
                .is_some_and(|t| now.duration_since(*t) < MIN_INTERVAL)
            {
                tracing::debug!(reason = %e.reason, "event rate-limited");
                continue;
            }
            last.insert(e.reason.clone(), now);
            let ev = Event {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason,
                note: Some(e.note),
                action: ACTION.into(),
                secondary: None,
            };
            match recorder.publish(&ev, &reference).await {
                Ok(()) => failing = false,
                Err(err) if !failing => {
                    failing = true;
                    tracing::warn!(error = %err, "publishing an event failed (events.k8s.io create/patch allowed?)");
                }
                Err(err) => tracing::debug!(error = %err, "publishing an event failed again"),
            }
        }
    });
    (
        EventFeed {
            prev: None,
            tx,
            dropped: 0,
        },
        EventTask(task),
    )
}
