//! One reconcile of one Composition: the core's recovery decision for its current synthesis
//! first, then the recorder, both executed with kube; Kubernetes Events on the Composition
//! report recordings, held plans, invalid inventories and lineage conflicts, once per
//! synthesis and reason.

use crate::drive::{drive, wall_timestamp, Clock};
use crate::exec::Executor;
use crate::settings::{ControllerConfig, ControllerStats};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder as EventRecorder, Reporter};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use tidemark_core::inventory::{
    Outcome, Reason, RecordOutcome, Recorder, Recovery, RecoveryOutcome,
};

/// What one reconcile concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Nothing more until the Composition changes (or the resync).
    Done,
    /// Try again after a backoff.
    Retry(String),
}

/// A poisoned lock only means another reconcile panicked; the data (counters, a memo) is
/// still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs reconciles; shared by every concurrent reconcile of the controller.
pub struct Reconciler {
    cfg: ControllerConfig,
    exec: Executor,
    events: EventRecorder,
    clock: Clock,
    /// (namespace, name, synthesis UUID, reason) of events already published.
    emitted: Mutex<BTreeSet<(String, String, String, String)>>,
    stats: Mutex<ControllerStats>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// Reconciles with `exec`; Events go to the Eno cluster.
    pub fn new(cfg: ControllerConfig, exec: Executor) -> Reconciler {
        let reporter = Reporter {
            controller: "tidemark-inventory".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = EventRecorder::new(exec.clusters().eno.clone(), reporter);
        Reconciler {
            cfg,
            exec,
            events,
            clock: Clock::start(),
            emitted: Mutex::new(BTreeSet::new()),
            stats: Mutex::new(ControllerStats::default()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ControllerConfig {
        &self.cfg
    }

    /// The executor (for the watch's client).
    pub fn exec(&self) -> &Executor {
        &self.exec
    }

    /// Counters so far.
    pub fn stats(&self) -> ControllerStats {
        lock(&self.stats).clone()
    }

    /// Forgets the Events published for Compositions not in `live` (deleted ones), so the
    /// memo does not grow with every Composition ever seen.
    pub fn forget_except(&self, live: &BTreeSet<(String, String)>) {
        lock(&self.emitted).retain(|(ns, name, _, _)| live.contains(&(ns.clone(), name.clone())));
    }

    /// Updates the counters.
    pub fn count(&self, f: impl FnOnce(&mut ControllerStats)) {
        f(&mut lock(&self.stats));
    }

    /// One reconcile of `namespace/name`: the recovery decision for the current synthesis
    /// (if not made yet), then recording.
    pub async fn reconcile(&self, namespace: &str, name: &str) -> Reconciled {
        self.count(|s| s.reconciles += 1);
        let t = self.cfg.request_timeout;
        let mut recovery = Recovery::new(
            self.cfg.recovery(self.cfg.recovery_mode),
            namespace,
            name,
            wall_timestamp(),
        );
        let outcome = drive(&mut recovery, &self.exec, &self.clock, t).await;
        let uuid = recovery.status().synthesis_uuid.clone().unwrap_or_default();
        match outcome {
            RecoveryOutcome::Decided {
                decision,
                plan,
                written,
            } => {
                if written {
                    self.count(|s| s.decisions += 1);
                }
                tracing::info!(
                    composition = %format!("{namespace}/{name}"),
                    synthesis = %decision.synthesis_uuid,
                    outcome = decision.outcome.name(),
                    tombstones = decision.outcome.tombstones(),
                    "recovery decision"
                );
                match decision.outcome {
                    Outcome::InventoryInvalid(Reason::LineageConflict) => {
                        self.lineage_conflict(
 namespace,
 name,
 &uuid,
                            format!(
                                "another live Composition shares inventory lineage {}; nothing recovered or recorded",
                                plan.lineage
                            ),
                        )
                        .await;
                    }
                    Outcome::InventoryInvalid(reason) => {
                        let detail = match &plan.selection {
                            Some(tidemark_core::inventory::Selection::Invalid(i)) => {
                                i.detail.clone()
                            }
                            _ => String::new(),
                        };
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Warning,
                            "InventoryInvalid",
                            format!("{reason}: {detail}; no tombstones derived"),
                        )
                        .await;
                    }
                    Outcome::Applied(n) if n > 0 => {
                        let deleted = plan.results.len();
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Normal,
                            "Recovered",
                            format!(
                                "{n} tombstones from lineage {} handled ({deleted} results)",
                                plan.lineage
                            ),
                        )
                        .await;
                    }
                    Outcome::Held {
                        deletions, limit, ..
                    } => {
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Warning,
                            "RecoveryHeld",
                            format!(
                                "recovery would delete {deletions} resources, more than the limit of {limit}; nothing deleted. \
                                 Check `tidemark-inventory recover --composition {namespace}/{name}`, then release it with \
                                 `--apply --allow-deletions {deletions}` or record nothing with `--skip`"
                            ),
                        )
                        .await;
                        return Reconciled::Done;
                    }
                    Outcome::Planned(n) => {
                        self.publish(
                            namespace,
                            name,
                            &uuid,
                            EventType::Normal,
                            "RecoveryPlanned",
                            format!("{n} tombstones planned; run `tidemark-inventory recover --composition {namespace}/{name} --apply` or `--skip`"),
                        )
                        .await;
                        return Reconciled::Done;
                    }
                    _ => {}
                }
            }
            RecoveryOutcome::AlreadyDecided(_) => {}
            RecoveryOutcome::NotEligible(why) => {
                tracing::debug!(composition = %format!("{namespace}/{name}"), %why, "not eligible");
                return Reconciled::Done;
            }
            RecoveryOutcome::CurrentSlicesUnusable { detail } => {
                return Reconciled::Retry(format!("current slices unusable: {detail}"))
            }
            RecoveryOutcome::CompositionChanged { detail } => {
                return Reconciled::Retry(format!("composition changed: {detail}"))
            }
            RecoveryOutcome::Failed { detail, .. } => {
                return Reconciled::Retry(format!("recovery failed: {detail}"))
            }
        }

        let mut recorder = Recorder::new(self.cfg.recorder(), namespace, name);
        let outcome = drive(&mut recorder, &self.exec, &self.clock, t).await;
        let uuid = recorder.status().synthesis_uuid.clone().unwrap_or(uuid);
        match outcome {
            RecordOutcome::Recorded {
                lineage,
                synthesis_uuid,
                chunks,
                entries,
                created,
                updated,
                unchanged,
            } => {
                tracing::info!(
                    composition = %format!("{namespace}/{name}"),
                    %lineage, synthesis = %synthesis_uuid, chunks, entries, created, updated, unchanged,
                    "inventory recorded"
                );
                if created + updated > 0 {
                    self.count(|s| s.recorded += 1);
                }
                self.publish(
                    namespace,
                    name,
                    &synthesis_uuid,
                    EventType::Normal,
                    "InventoryRecorded",
                    format!("synthesis {synthesis_uuid}: {entries} entries in {chunks} Secret(s) of lineage {lineage}"),
                )
                .await;
                Reconciled::Done
            }
            RecordOutcome::LineageConflict { lineage, others } => {
                self.lineage_conflict(
                    namespace,
                    name,
                    &uuid,
                    format!(
                        "inventory lineage {lineage} is shared with {}; nothing recorded",
                        others.join(", ")
                    ),
                )
                .await;
                Reconciled::Done
            }
            RecordOutcome::NotEligible(why) => {
                tracing::debug!(composition = %format!("{namespace}/{name}"), %why, "not recording");
                Reconciled::Done
            }
            RecordOutcome::SlicesUnusable { detail } => {
                Reconciled::Retry(format!("slices unusable: {detail}"))
            }
            RecordOutcome::CompositionChanged { detail } => {
                Reconciled::Retry(format!("composition changed: {detail}"))
            }
            RecordOutcome::Failed {
                detail, retryable, ..
            } => {
                if retryable {
                    Reconciled::Retry(format!("recording failed: {detail}"))
                } else {
                    tracing::warn!(composition = %format!("{namespace}/{name}"), detail, "recording failed");
                    Reconciled::Done
                }
            }
            RecordOutcome::TooLarge { detail }
            | RecordOutcome::NewerSnapshot { detail, .. }
            | RecordOutcome::Blocked { detail, .. } => {
                tracing::warn!(composition = %format!("{namespace}/{name}"), detail, "not recorded");
                Reconciled::Done
            }
        }
    }

    /// A Warning Event: the lineage is shared, nothing recovered or recorded.
    async fn lineage_conflict(&self, namespace: &str, name: &str, uuid: &str, note: String) {
        self.publish(
            namespace,
            name,
            uuid,
            EventType::Warning,
            "LineageConflict",
            note,
        )
        .await
    }

    /// Publishes an Event on the Composition once per (synthesis, reason).
    async fn publish(
        &self,
        namespace: &str,
        name: &str,
        uuid: &str,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let key = (
            namespace.to_string(),
            name.to_string(),
            uuid.to_string(),
            reason.to_string(),
        );
        if !lock(&self.emitted).insert(key) {
            return;
        }
        let reference = ObjectReference {
            api_version: Some("eno.azure.io/v1".into()),
            kind: Some("Composition".into()),
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        };
        let mut note = note;
        note.truncate(1000);
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.events.publish(&ev, &reference).await {
            tracing::warn!(error = %e, reason, "publishing event failed");
        }
    }
}
