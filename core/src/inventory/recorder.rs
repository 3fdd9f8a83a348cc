//! The recorder: writes the inventory of a Composition's current Ready synthesis as Secrets.
//!
//! One [`Recorder`] is one reconcile of one Composition (the driver runs one at a time per
//! Composition and requeues with its rate limiter). Sans-IO: it emits [`Command`]s and
//! consumes [`Input::Done`] replies. Sequence:
//!
//! 1. GET the Composition; check eligibility (enabled, scope, opt-in, Ready, finished
//!    recovery decision for the current UUID) and its lineage.
//! 2. LIST Compositions of every namespace: another live one with the same lineage, or an
//!    override naming another namespace's lineage (unless allowed), => `LineageConflict`.
//!    With an override (unless allowed), also LIST the lineage's Secrets: any recorded for
//!    another namespace => `LineageConflict`.
//! 3. Read *all* the synthesis's ResourceSlices; stop on a missing, terminating or malformed one.
//! 4. For each chunk `i`: GET the Secret; identical => skip; a newer snapshot's chunk (or a
//!    Secret that is not ours) => stop, never overwrite; otherwise re-read the Composition
//!    (same UID, same synthesis UUID, still eligible) and create, or update with the read
//!    resourceVersion. 409 => re-read the Secret and retry, at most `max_conflict_retries`.
//!
//! Leftover chunks `>= count` of a larger older snapshot are left alone; selection ignores
//! them because they belong to an older UUID.

use super::chunk::DEFAULT_CHUNK_LIMIT;
use super::eligibility::{check_recording, Ineligible, Scope};
use super::entry::entries_from_slices;
use super::kube::{Command, CommandId, Input, KubeError, Output, Reply};
use super::lineage::{check_lineage, lineage_of, LineageProblem};
use super::secret::{build_snapshot_secrets, Secret, SnapshotSource};
use super::timestamp::Timestamp;
use super::view::{CompositionView, SliceView};
use super::*;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Recorder settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecorderConfig {
    /// The feature switch; off => every Composition is `NotEligible(Disabled)`.
    pub enabled: bool,
    /// Which Compositions are looked after.
    pub scope: Scope,
    /// Namespace of the inventory Secrets in the downstream cluster.
    pub secret_namespace: String,
    /// Chunk data limit (bytes); the Secret limit by default.
    pub chunk_limit: usize,
    /// How many 409s per chunk before giving up (the reconcile is retried later).
    pub max_conflict_retries: u32,
    /// How long to wait for one reply before stopping with a retryable failure.
    pub request_timeout: Duration,
    /// Record under an override that names another namespace's lineage (see
    /// [`super::budget::Policy::allow_cross_namespace_lineage`]).
    pub allow_cross_namespace_lineage: bool,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            enabled: true,
            scope: Scope::default(),
            secret_namespace: DEFAULT_SECRET_NAMESPACE.into(),
            chunk_limit: DEFAULT_CHUNK_LIMIT,
            max_conflict_retries: 5,
            request_timeout: Duration::from_secs(30),
            allow_cross_namespace_lineage: false,
        }
    }
}

/// How a recording ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordOutcome {
    /// Every chunk now holds this snapshot.
    Recorded {
        lineage: String,
        synthesis_uuid: String,
        chunks: usize,
        entries: usize,
        created: usize,
        updated: usize,
        unchanged: usize,
    },
    /// Nothing to do for now (not an error).
    NotEligible(Ineligible),
    /// Other live Compositions (`namespace/name`) share the lineage, or (a sentence) the
    /// lineage override names another namespace's lineage: nothing recorded.
    LineageConflict {
        lineage: String,
        others: Vec<String>,
    },
    /// A slice is missing, terminating, or holds a malformed manifest.
    SlicesUnusable { detail: String },
    /// One entry does not fit in a chunk.
    TooLarge { detail: String },
    /// Between check and write the Composition was deleted, re-created, re-synthesized or
    /// became ineligible: nothing more written.
    CompositionChanged { detail: String },
    /// A chunk Secret holds a newer snapshot: we never overwrite it.
    NewerSnapshot { secret: String, detail: String },
    /// A Secret at our name that we must not touch (other lineage, unreadable timestamp,
    /// another UUID at the same instant).
    Blocked { secret: String, detail: String },
    /// An API error or timeout; `retryable` says whether requeueing may help.
    Failed {
        detail: String,
        error: Option<KubeError>,
        retryable: bool,
    },
}

/// Where the recorder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RecorderPhase {
    /// Reading and checking the Composition.
    #[default]
    Checking,
    /// Looking for lineage conflicts.
    CheckingLineage,
    /// Reading the ResourceSlices.
    ReadingSlices,
    /// Writing chunks.
    Writing,
    /// Stopped.
    Done,
}

/// Progress counters, for logs and the admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RecorderStatus {
    /// Phase.
    pub phase: RecorderPhase,
    /// Lineage, once known.
    pub lineage: Option<String>,
    /// Synthesis UUID being recorded, once known.
    pub synthesis_uuid: Option<String>,
    /// Chunks in the snapshot.
    pub chunks: usize,
    /// Index of the chunk being handled.
    pub chunk_index: usize,
    /// Secrets created.
    pub created: usize,
    /// Secrets updated.
    pub updated: usize,
    /// Secrets already identical.
    pub unchanged: usize,
    /// 409s seen.
    pub conflicts: u32,
    /// Composition reads (initial + one before every write).
    pub composition_reads: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    ReadComposition,
    ListCompositions,
    ListLineageSecrets,
    ReadSlices,
    ReadSecret,
    Recheck,
    Write,
}

/// The recorder state machine (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    cfg: RecorderConfig,
    namespace: String,
    name: String,
    next_id: CommandId,
    queued: Option<(Step, Command)>,
    awaiting: Option<(CommandId, Step, Instant)>,
    stopped: Option<RecordOutcome>,
    comp: CompositionView,
    lineage: String,
    uuid: String,
    entries: usize,
    wanted: Vec<Secret>,
    idx: usize,
    attempts: u32,
    pending_write: Option<Command>,
    write_is_create: bool,
    status: RecorderStatus,
}

impl Recorder {
    /// A recorder for the Composition `namespace/name`. Command ids start at 1.
    pub fn new(cfg: RecorderConfig, namespace: &str, name: &str) -> Recorder {
        let mut r = Recorder {
            cfg,
            namespace: namespace.into(),
            name: name.into(),
            next_id: 1,
            queued: None,
            awaiting: None,
            stopped: None,
            comp: CompositionView::default(),
            lineage: String::new(),
            uuid: String::new(),
            entries: 0,
            wanted: Vec::new(),
            idx: 0,
            attempts: 0,
            pending_write: None,
            write_is_create: false,
            status: RecorderStatus::default(),
        };
        r.read_composition(Step::ReadComposition);
        r
    }

    /// Progress so far.
    pub fn status(&self) -> &RecorderStatus {
        &self.status
    }

    /// The snapshot Secrets being written (empty until the slices were read).
    pub fn wanted_secrets(&self) -> &[Secret] {
        &self.wanted
    }

    /// Next thing to do. Drain until `Timeout` or `Stopped`.
    pub fn poll_output(&mut self, now: Instant) -> Output<RecordOutcome> {
        if let Some(o) = &self.stopped {
            return Output::Stopped(o.clone());
        }
        if let Some((step, cmd)) = self.queued.take() {
            let id = self.next_id;
            self.next_id += 1;
            self.awaiting = Some((id, step, now + self.cfg.request_timeout));
            return Output::Command { id, cmd };
        }
        match self.awaiting {
            Some((_, _, deadline)) if now < deadline => Output::Timeout(deadline),
            Some(_) => {
                self.stop(RecordOutcome::Failed {
                    detail: "no reply within the request timeout".into(),
                    error: None,
                    retryable: true,
                });
                self.poll_output(now)
            }
            None => {
                self.stop(RecordOutcome::Failed {
                    detail: "internal: nothing to do and nothing awaited".into(),
                    error: None,
                    retryable: false,
                });
                self.poll_output(now)
            }
        }
    }

    /// Feeds a reply. Replies to unknown or stale ids are ignored.
    pub fn handle_input(&mut self, _now: Instant, input: Input) {
        let Input::Done { id, result } = input;
        match self.awaiting {
            Some((aid, step, _)) if aid == id && self.stopped.is_none() => {
                self.awaiting = None;
                self.dispatch(step, result);
            }
            _ => {}
        }
    }

    fn stop(&mut self, o: RecordOutcome) {
        self.status.phase = RecorderPhase::Done;
        self.queued = None;
        self.awaiting = None;
        self.stopped = Some(o);
    }

    fn fail(&mut self, context: &str, e: KubeError) {
        let retryable = e.is_retryable();
        self.stop(RecordOutcome::Failed {
            detail: format!("{context}: {e}"),
            error: Some(e),
            retryable,
        });
    }

    fn unexpected(&mut self, context: &str, r: &Reply) {
        self.stop(RecordOutcome::Failed {
            detail: format!("{context}: unexpected reply {r:?}"),
            error: None,
            retryable: false,
        });
    }

    fn read_composition(&mut self, step: Step) {
        self.status.composition_reads += 1;
        self.queued = Some((
            step,
            Command::GetComposition {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            },
        ));
    }

    fn dispatch(&mut self, step: Step, result: Result<Reply, KubeError>) {
        match (step, result) {
            (Step::ReadComposition, Ok(Reply::Composition(c))) => self.on_composition(c),
            (Step::ReadComposition, Err(KubeError::NotFound)) => {
                self.stop(RecordOutcome::NotEligible(Ineligible::NotFound))
            }
            (Step::ListCompositions, Ok(Reply::Compositions(all))) => self.on_compositions(&all),
            (Step::ListLineageSecrets, Ok(Reply::Secrets(secrets))) => {
                self.on_lineage_secrets(&secrets)
            }
            (Step::ReadSlices, Ok(Reply::Slices(slices))) => self.on_slices(slices),
            (Step::ReadSecret, Ok(Reply::Secret(s))) => self.on_secret(Some(s)),
            (Step::ReadSecret, Err(KubeError::NotFound)) => self.on_secret(None),
            (Step::Recheck, Ok(Reply::Composition(c))) => self.on_recheck(c),
            (Step::Recheck, Err(KubeError::NotFound)) => {
                self.stop(RecordOutcome::CompositionChanged {
                    detail: "the Composition was deleted".into(),
                })
            }
            (Step::Write, Ok(_)) => self.on_written(),
            (Step::Write, Err(KubeError::Conflict(m))) => self.on_conflict(m),
            (step, Err(e)) => self.fail(&format!("{step:?}"), e),
            (step, Ok(r)) => self.unexpected(&format!("{step:?}"), &r),
        }
    }

    fn on_composition(&mut self, c: CompositionView) {
        if let Err(why) = check_recording(self.cfg.enabled, &self.cfg.scope, &c) {
            return self.stop(RecordOutcome::NotEligible(why));
        }
        let lineage = match lineage_of(&c) {
            Ok(l) => l,
            Err(e) => {
                return self.stop(RecordOutcome::NotEligible(Ineligible::BadLineage(
                    e.to_string(),
                )))
            }
        };
        self.uuid = c
            .current_synthesis
            .as_ref()
            .map(|s| s.uuid.clone())
            .unwrap_or_default();
        self.status.lineage = Some(lineage.clone());
        self.status.synthesis_uuid = Some(self.uuid.clone());
        self.status.phase = RecorderPhase::CheckingLineage;
        self.lineage = lineage;
        self.comp = c;
        self.queued = Some((
            Step::ListCompositions,
            Command::ListCompositions { namespace: None },
        ));
    }

    fn on_compositions(&mut self, all: &[CompositionView]) {
        let problem = check_lineage(&self.comp, all, self.cfg.allow_cross_namespace_lineage);
        if let Err(p) = problem {
            let others = match p {
                LineageProblem::Shared(others) => others,
                LineageProblem::Foreign(detail) => vec![detail],
            };
            return self.stop(RecordOutcome::LineageConflict {
                lineage: self.lineage.clone(),
                others,
            });
        }
        // An override may name the lineage of a namespace with no live Composition to give it
        // away; its Secrets still say whose it is.
        if self.comp.annotations.contains_key(ANN_LINEAGE)
            && !self.cfg.allow_cross_namespace_lineage
        {
            self.queued = Some((
                Step::ListLineageSecrets,
                Command::ListSecrets {
                    namespace: self.cfg.secret_namespace.clone(),
                    label_selector: lineage_selector(&self.lineage),
                },
            ));
            return;
        }
        self.read_slices();
    }

    /// Refuses to write into a lineage whose Secrets were recorded for another namespace.
    fn on_lineage_secrets(&mut self, secrets: &[Secret]) {
        let foreign = secrets
            .iter()
            .filter(|s| !s.terminating)
            .filter_map(|s| s.annotations.get(ANN_COMPOSITION_NAMESPACE))
            .filter(|ns| **ns != self.comp.namespace)
            .min();
        if let Some(ns) = foreign {
            let detail = format!(
                "the lineage override {} on {}/{} names a lineage recorded for namespace {ns:?}; \
                 start the controller with --allow-cross-namespace-lineage if that is intended",
                self.lineage, self.comp.namespace, self.comp.name
            );
            return self.stop(RecordOutcome::LineageConflict {
                lineage: self.lineage.clone(),
                others: vec![detail],
            });
        }
        self.read_slices();
    }

    fn read_slices(&mut self) {
        self.status.phase = RecorderPhase::ReadingSlices;
        let names = self
            .comp
            .current_synthesis
            .as_ref()
            .map(|s| s.resource_slice_names.clone())
            .unwrap_or_default();
        self.queued = Some((
            Step::ReadSlices,
            Command::ListResourceSlices {
                namespace: self.comp.namespace.clone(),
                names,
            },
        ));
    }

    fn on_slices(&mut self, slices: Vec<SliceView>) {
        let Some(cur) = self.comp.current_synthesis.clone() else {
            return self.stop(RecordOutcome::NotEligible(Ineligible::NoCurrentSynthesis));
        };
        let ordered = match ordered_slices(&cur.resource_slice_names, slices) {
            Ok(o) => o,
            Err(e) => {
                return self.stop(RecordOutcome::SlicesUnusable {
                    detail: e.to_string(),
                })
            }
        };
        let entries = match entries_from_slices(&ordered) {
            Ok(e) => e,
            Err(e) => {
                return self.stop(RecordOutcome::SlicesUnusable {
                    detail: e.to_string(),
                })
            }
        };
        let Some(synthesized) = cur.synthesized else {
            return self.stop(RecordOutcome::NotEligible(Ineligible::NotSynthesized));
        };
        let src = SnapshotSource {
            lineage: self.lineage.clone(),
            composition_name: self.comp.name.clone(),
            composition_namespace: self.comp.namespace.clone(),
            synthesizer_name: self.comp.synthesizer_name.clone(),
            synthesis_uuid: cur.uuid.clone(),
            synthesized,
        };
        match build_snapshot_secrets(
            &src,
            &entries,
            &self.cfg.secret_namespace,
            self.cfg.chunk_limit,
        ) {
            Ok(w) => {
                self.entries = entries.len();
                self.status.chunks = w.len();
                self.status.phase = RecorderPhase::Writing;
                self.wanted = w;
                self.idx = 0;
                self.read_secret();
            }
            Err(e) => self.stop(RecordOutcome::TooLarge {
                detail: e.to_string(),
            }),
        }
    }

    fn read_secret(&mut self) {
        if self.idx >= self.wanted.len() {
            return self.stop(RecordOutcome::Recorded {
                lineage: self.lineage.clone(),
                synthesis_uuid: self.uuid.clone(),
                chunks: self.wanted.len(),
                entries: self.entries,
                created: self.status.created,
                updated: self.status.updated,
                unchanged: self.status.unchanged,
            });
        }
        self.status.chunk_index = self.idx;
        let w = &self.wanted[self.idx];
        self.queued = Some((
            Step::ReadSecret,
            Command::GetSecret {
                namespace: w.namespace.clone(),
                name: w.name.clone(),
            },
        ));
    }

    fn advance(&mut self) {
        self.idx += 1;
        self.attempts = 0;
        self.read_secret();
    }

    fn on_secret(&mut self, existing: Option<Secret>) {
        let wanted = self.wanted[self.idx].clone();
        let Some(existing) = existing else {
            self.pending_write = Some(Command::CreateSecret(wanted));
            return self.read_composition(Step::Recheck);
        };
        let blocked = |detail: String| RecordOutcome::Blocked {
            secret: existing.name.clone(),
            detail,
        };
        if existing.terminating {
            return self.stop(RecordOutcome::Failed {
                detail: format!("Secret {} is being deleted; retry later", existing.name),
                error: None,
                retryable: true,
            });
        }
        // Terminating Secrets were checked first: an identical one is about to disappear.
        if existing.holds(&wanted) {
            self.status.unchanged += 1;
            return self.advance();
        }
        if existing.labels.get(LABEL_LINEAGE) != Some(&self.lineage) {
            return self.stop(blocked(format!(
                "it is not labelled {LABEL_LINEAGE}={}; not overwriting a foreign Secret",
                self.lineage
            )));
        }
        let same_uuid = existing.annotations.get(ANN_SYNTHESIS_UUID) == Some(&self.uuid);
        if !same_uuid {
            let theirs = existing
                .annotations
                .get(ANN_SYNTHESIZED)
                .map(|t| Timestamp::parse_rfc3339(t));
            let ours = wanted
                .annotations
                .get(ANN_SYNTHESIZED)
                .and_then(|t| Timestamp::parse_rfc3339(t).ok());
            match (theirs, ours) {
                (Some(Ok(t)), Some(o)) if t > o => {
                    return self.stop(RecordOutcome::NewerSnapshot {
                        secret: existing.name.clone(),
                        detail: format!("it holds synthesis {t}, newer than ours ({o})"),
                    })
                }
                (Some(Ok(t)), Some(o)) if t == o => {
                    return self.stop(blocked(format!(
                        "it holds another synthesis at our instant {t}; refusing to pick one"
                    )))
                }
                (Some(Ok(_)), Some(_)) => {}
                _ => {
                    return self.stop(blocked(
                        "its synthesized timestamp is missing or unreadable, so it may be newer"
                            .into(),
                    ))
                }
            }
        }
        let Some(rv) = existing.resource_version.clone() else {
            return self.stop(RecordOutcome::Failed {
                detail: format!(
                    "Secret {} was read without a resourceVersion",
                    existing.name
                ),
                error: None,
                retryable: false,
            });
        };
        let mut update = wanted;
        update.resource_version = Some(rv);
        update.uid = existing.uid.clone();
        // Keep labels/annotations others put on the Secret; ours overwrite theirs.
        let mut labels = existing.labels.clone();
        labels.extend(update.labels);
        update.labels = labels;
        let mut ann: BTreeMap<String, String> = existing
            .annotations
            .into_iter()
            .filter(|(k, _)| !k.starts_with("eno.azure.io/inventory-"))
            .collect();
        ann.extend(update.annotations);
        update.annotations = ann;
        self.pending_write = Some(Command::UpdateSecret(update));
        self.read_composition(Step::Recheck);
    }

    fn on_recheck(&mut self, c: CompositionView) {
        let detail = if c.uid != self.comp.uid {
            Some(format!("UID changed from {} to {}", self.comp.uid, c.uid))
        } else if c.current_synthesis.as_ref().map(|s| s.uuid.as_str()) != Some(self.uuid.as_str())
        {
            Some(format!(
                "the current synthesis is no longer {} (now {:?})",
                self.uuid,
                c.current_synthesis.as_ref().map(|s| s.uuid.clone())
            ))
        } else if let Err(why) = check_recording(self.cfg.enabled, &self.cfg.scope, &c) {
            Some(format!("no longer eligible: {why}"))
        } else if lineage_of(&c).ok().as_ref() != Some(&self.lineage) {
            Some("the lineage changed".into())
        } else {
            None
        };
        if let Some(detail) = detail {
            return self.stop(RecordOutcome::CompositionChanged { detail });
        }
        self.comp = c;
        match self.pending_write.take() {
            Some(cmd) => {
                self.write_is_create = matches!(cmd, Command::CreateSecret(_));
                self.queued = Some((Step::Write, cmd));
            }
            None => self.stop(RecordOutcome::Failed {
                detail: "internal: recheck without a pending write".into(),
                error: None,
                retryable: false,
            }),
        }
    }

    fn on_written(&mut self) {
        if self.write_is_create {
            self.status.created += 1;
        } else {
            self.status.updated += 1;
        }
        self.advance();
    }

    fn on_conflict(&mut self, message: String) {
        self.status.conflicts += 1;
        self.attempts += 1;
        if self.attempts > self.cfg.max_conflict_retries {
            return self.stop(RecordOutcome::Failed {
                detail: format!(
                    "chunk {}: still conflicting after {} attempts",
                    self.idx, self.attempts
                ),
                error: Some(KubeError::Conflict(message)),
                retryable: true,
            });
        }
        self.read_secret();
    }
}

/// Why the slices a synthesis names cannot be read: one is missing or going away.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SliceOrderError {
    /// The named slice was not listed.
    #[error("ResourceSlice {0} is missing")]
    Missing(String),
    /// The named slice has a deletion timestamp.
    #[error("ResourceSlice {0} is terminating")]
    Terminating(String),
}

/// The slices named by the synthesis, in its order; missing or terminating ones are errors.
pub(crate) fn ordered_slices(
    names: &[String],
    slices: Vec<SliceView>,
) -> Result<Vec<SliceView>, SliceOrderError> {
    let mut by_name: BTreeMap<String, SliceView> =
        slices.into_iter().map(|s| (s.name.clone(), s)).collect();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        match by_name.remove(n) {
            None => return Err(SliceOrderError::Missing(n.clone())),
            Some(s) if s.terminating => return Err(SliceOrderError::Terminating(n.clone())),
            Some(s) => out.push(s),
        }
    }
    Ok(out)
}
