//! The recovery machine: decides, for a Composition's current synthesis, whether history was
//! lost and which resources must go, before anything new is recorded.
//!
//! One [`Recovery`] handles one synthesis UUID of one Composition. Sequence:
//!
//! 1. GET the Composition; common eligibility (enabled, scope, opt-in, not deleting,
//!    synthesized current synthesis). A finished decision for this UUID => `AlreadyDecided`.
//! 2. If a previous synthesis exists and all its ResourceSlices are readable =>
//!    `NotNeeded` (Eno's own tombstones cover it).
//! 3. Otherwise: lineage checks over the Compositions of every namespace: another live
//!    Composition with the lineage, or an override naming another namespace's lineage
//!    (unless allowed), is `InventoryInvalid(LineageConflict)`. Read the current slices (all
//!    must be readable: they define what is still wanted); list the lineage's Secrets;
//!    [`select`](super::select::select_with_limit); [`plan_recovery`] (namespace and time
//!    checks, tombstones in Eno's deletion order, protection, budget).
//! 4. [`Mode::Apply`]: over budget => `Held`, nothing deleted. Otherwise, group by group
//!    (ungrouped first, then lowest group first), for each tombstone: protected => left in
//!    place; else re-read the Composition (same UID, same synthesis — a new synthesis could
//!    want the resource again), GET the object, skip it if it has
//!    `eno.azure.io/deletion-strategy: orphan`, else DELETE with a UID precondition. Before
//!    the next group starts, the objects of the group are read again every
//!    [`RecoveryConfig::wait_poll`] until all are gone, or until [`RecoveryConfig::group_wait`]
//!    has passed and those left are terminating (finalizers that never finish must not stop
//!    recovery forever); one left that is not even terminating fails the recovery (retried). Time enters
//!    through `poll_output`/`handle_input`: the wait is an `Output::Timeout`.
//!    [`Mode::Plan`]: no deletes, `Planned(n)` (or `Held`).
//! 5. Re-read the Composition and write the decision annotation with its resourceVersion as
//!    precondition (409 => re-read and retry, bounded). [`Mode::DryRun`] writes nothing.

use super::budget::{Hold, Policy};
use super::chunk::DEFAULT_CHUNK_LIMIT;
use super::decision::{Decision, Outcome, DECISION_ANNOTATION};
use super::eligibility::{check_common, current_decision, Ineligible, Scope};
use super::entry::{entries_from_slices, present_identities, Identity, ResourceId};
use super::kube::{Command, CommandId, Input, KubeError, Output, Reply};
use super::lineage::{check_lineage, lineage_of};
use super::plan::{plan_recovery, PlannedTombstone};
use super::recorder::ordered_slices;
use super::secret::Secret;
use super::select::{select_with_limit, Invalid, Reason, Selection};
use super::timestamp::Timestamp;
use super::view::{CompositionView, ObjectView, SliceView};
use super::*;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// What recovery may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Mode {
    /// Delete the tombstones and record `Applied(n)` (controller default, as Eno recovers
    /// automatically; also `recover --apply`).
    #[default]
    Apply,
    /// Record `Planned(n)` and delete nothing; recording waits for an operator.
    Plan,
    /// Compute and report only; write nothing (`recover` without flags).
    DryRun,
    /// Record `Skipped` without selecting anything (`recover --skip`).
    Skip,
}

/// Recovery settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryConfig {
    /// The feature switch.
    pub enabled: bool,
    /// Which Compositions are looked after.
    pub scope: Scope,
    /// Namespace of the inventory Secrets in the downstream cluster.
    pub secret_namespace: String,
    /// What recovery may do.
    pub mode: Mode,
    /// Chunk data limit used when validating chunks.
    pub chunk_limit: usize,
    /// How many 409s on the decision write before giving up.
    pub max_conflict_retries: u32,
    /// How long to wait for one reply.
    pub request_timeout: Duration,
    /// Namespace checks, protected kinds and the deletion budget.
    pub policy: Policy,
    /// Longest wait for a deletion group's objects to be gone (finalizers) before the next
    /// group starts anyway.
    pub group_wait: Duration,
    /// How often a waiting group's objects are read again.
    pub wait_poll: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            enabled: true,
            scope: Scope::default(),
            secret_namespace: DEFAULT_SECRET_NAMESPACE.into(),
            mode: Mode::Apply,
            chunk_limit: DEFAULT_CHUNK_LIMIT,
            max_conflict_retries: 5,
            request_timeout: Duration::from_secs(30),
            policy: Policy::default(),
            group_wait: Duration::from_secs(300),
            wait_poll: Duration::from_secs(2),
        }
    }
}

/// What happened to one tombstone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteResult {
    /// The delete was accepted.
    Deleted,
    /// It did not exist (any more).
    AlreadyAbsent,
    /// It was already terminating.
    AlreadyDeleting,
    /// It carries `eno.azure.io/deletion-strategy: orphan`: left in place.
    SkippedOrphan,
    /// A protected kind (see [`super::budget::Protection`]): planned, left in place.
    Protected,
}

/// How recovery waited for one deletion group before the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupWait {
    /// The group waited for.
    pub group: i64,
    /// Rounds of reads until all were gone or the wait ran out.
    pub rounds: u32,
    /// Objects still present (terminating) when the wait ran out; empty when all went.
    pub gave_up_on: Vec<ResourceId>,
}

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Plan {
    /// The lineage looked at.
    pub lineage: String,
    /// The selection, when one was made (not for `NotNeeded`/`Skipped`).
    pub selection: Option<Selection>,
    /// Tombstones in deletion order, each with its effective group and protection.
    pub tombstones: Vec<PlannedTombstone>,
    /// Set when the plan is over the deletion budget.
    pub hold: Option<Hold>,
    /// Per-tombstone results, in the order handled (Apply mode).
    pub results: Vec<(ResourceId, DeleteResult)>,
    /// The waits between deletion groups (Apply mode).
    pub waits: Vec<GroupWait>,
}

/// How a recovery ended.
// Produced once per recovery; boxing the plan would only complicate matching.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryOutcome {
    /// A decision was made; `written` is false in dry-run mode.
    Decided {
        decision: Decision,
        plan: Plan,
        written: bool,
    },
    /// A finished decision (or, in plan mode, a plan) for this synthesis already exists.
    AlreadyDecided(Decision),
    /// Nothing to do (not an error).
    NotEligible(Ineligible),
    /// The current synthesis's slices cannot all be read: what is wanted is unknown, so no
    /// decision is made (retried later).
    CurrentSlicesUnusable { detail: String },
    /// The Composition changed identity or synthesis under us; nothing more done.
    CompositionChanged { detail: String },
    /// An API error or timeout; no decision was written.
    Failed {
        detail: String,
        error: Option<KubeError>,
        retryable: bool,
    },
}

/// Progress, for logs and the admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RecoveryStatus {
    /// Lineage, once known.
    pub lineage: Option<String>,
    /// The synthesis being decided for.
    pub synthesis_uuid: Option<String>,
    /// The outcome once computed (before it is written).
    pub outcome: Option<String>,
    /// Tombstones computed.
    pub tombstones: usize,
    /// Deletes accepted.
    pub deleted: usize,
    /// Tombstones skipped (orphan, absent, terminating).
    pub skipped: usize,
    /// 409s seen on the decision write.
    pub conflicts: u32,
    /// The deletion group being waited for.
    pub waiting_group: Option<i64>,
    /// Rounds of reads spent waiting for groups.
    pub wait_rounds: u32,
    /// Composition reads.
    pub composition_reads: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    ReadComposition,
    PrevSlices,
    ListCompositions,
    CurrentSlices,
    ListSecrets,
    RecheckBeforeDelete,
    GetResource,
    Delete,
    WaitGet,
    RecheckBeforeDecision,
    WriteDecision,
}

/// The recovery state machine (see the module docs).
#[derive(Debug)]
pub struct Recovery {
    cfg: RecoveryConfig,
    namespace: String,
    name: String,
    wall_now: Timestamp,
    next_id: CommandId,
    queued: Option<(Step, Command)>,
    awaiting: Option<(CommandId, Step, Instant)>,
    stopped: Option<RecoveryOutcome>,
    comp: CompositionView,
    uuid: String,
    present: BTreeSet<Identity>,
    plan: Plan,
    next_delete: usize,
    current_object: Option<ObjectView>,
    /// Objects of the current deletion group that were deleted (or already terminating),
    /// with their UIDs: what the wait before the next group reads again.
    group_pending: Vec<(ResourceId, String)>,
    waiting: Option<Wait>,
    /// The latest time handed in.
    now: Instant,
    outcome: Option<Outcome>,
    attempts: u32,
    status: RecoveryStatus,
}

/// A wait for one deletion group's objects to be gone.
#[derive(Debug)]
struct Wait {
    group: i64,
    deadline: Instant,
    rounds: u32,
    /// Index into `group_pending` of the object being read.
    next: usize,
    /// Objects found still present in this round.
    still: Vec<(ResourceId, String)>,
    /// Those of them without a deletionTimestamp: a delete that did not take.
    lingering: Vec<ResourceId>,
    /// Set between rounds: the next round starts at this time.
    sleep_until: Option<Instant>,
}

impl Recovery {
    /// A recovery for `namespace/name`. `wall_now` is the driver's wall-clock time, written
    /// into the decision (core reads no clock). Command ids start at 1.
    pub fn new(cfg: RecoveryConfig, namespace: &str, name: &str, wall_now: Timestamp) -> Recovery {
        let mut r = Recovery {
            cfg,
            namespace: namespace.into(),
            name: name.into(),
            wall_now,
            next_id: 1,
            queued: None,
            awaiting: None,
            stopped: None,
            comp: CompositionView::default(),
            uuid: String::new(),
            present: BTreeSet::new(),
            plan: Plan::default(),
            next_delete: 0,
            current_object: None,
            group_pending: Vec::new(),
            waiting: None,
            now: Instant::default(),
            outcome: None,
            attempts: 0,
            status: RecoveryStatus::default(),
        };
        r.read_composition(Step::ReadComposition);
        r
    }

    /// Progress so far.
    pub fn status(&self) -> &RecoveryStatus {
        &self.status
    }

    /// Next thing to do. Drain until `Timeout` or `Stopped`.
    pub fn poll_output(&mut self, now: Instant) -> Output<RecoveryOutcome> {
        self.now = self.now.max(now);
        if let Some(o) = &self.stopped {
            return Output::Stopped(o.clone());
        }
        if let Some(at) = self.waiting.as_ref().and_then(|w| w.sleep_until) {
            if now < at {
                return Output::Timeout(at);
            }
            self.wait_round();
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
                self.stop(RecoveryOutcome::Failed {
                    detail: "no reply within the request timeout".into(),
                    error: None,
                    retryable: true,
                });
                self.poll_output(now)
            }
            None => {
                self.stop(RecoveryOutcome::Failed {
                    detail: "internal: nothing to do and nothing awaited".into(),
                    error: None,
                    retryable: false,
                });
                self.poll_output(now)
            }
        }
    }

    /// Feeds a reply. Replies to unknown or stale ids are ignored.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        self.now = self.now.max(now);
        let Input::Done { id, result } = input;
        match self.awaiting {
            Some((aid, step, _)) if aid == id && self.stopped.is_none() => {
                self.awaiting = None;
                self.dispatch(step, result);
            }
            _ => {}
        }
    }

    fn stop(&mut self, o: RecoveryOutcome) {
        self.queued = None;
        self.awaiting = None;
        self.stopped = Some(o);
    }

    fn fail(&mut self, context: &str, e: KubeError) {
        let retryable = e.is_retryable();
        self.stop(RecoveryOutcome::Failed {
            detail: format!("{context}: {e}"),
            error: Some(e),
            retryable,
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

    fn list_slices(&mut self, step: Step, names: Vec<String>) {
        self.queued = Some((
            step,
            Command::ListResourceSlices {
                namespace: self.comp.namespace.clone(),
                names,
            },
        ));
    }

    fn dispatch(&mut self, step: Step, result: Result<Reply, KubeError>) {
        match (step, result) {
            (Step::ReadComposition, Ok(Reply::Composition(c))) => self.on_composition(c),
            (Step::ReadComposition, Err(KubeError::NotFound)) => {
                self.stop(RecoveryOutcome::NotEligible(Ineligible::NotFound))
            }
            (Step::PrevSlices, Ok(Reply::Slices(s))) => self.on_prev_slices(s),
            (Step::ListCompositions, Ok(Reply::Compositions(all))) => self.on_compositions(&all),
            (Step::CurrentSlices, Ok(Reply::Slices(s))) => self.on_current_slices(s),
            (Step::ListSecrets, Ok(Reply::Secrets(s))) => self.on_secrets(&s),
            (Step::RecheckBeforeDelete, Ok(Reply::Composition(c))) => {
                if self.confirm(c) {
                    self.get_resource();
                }
            }
            (Step::GetResource, Ok(Reply::Object(o))) => self.on_object(o),
            (Step::GetResource, Err(KubeError::NotFound)) => {
                self.record_result(DeleteResult::AlreadyAbsent)
            }
            (Step::Delete, Ok(_)) => self.record_result(DeleteResult::Deleted),
            (Step::Delete, Err(KubeError::NotFound)) => {
                self.record_result(DeleteResult::AlreadyAbsent)
            }
            (Step::WaitGet, Ok(Reply::Object(o))) => self.on_wait_object(Some(o)),
            (Step::WaitGet, Err(KubeError::NotFound)) => self.on_wait_object(None),
            (Step::RecheckBeforeDecision, Ok(Reply::Composition(c))) => self.on_decision_recheck(c),
            (Step::WriteDecision, Ok(_)) => self.on_decision_written(),
            (Step::WriteDecision, Err(KubeError::Conflict(m))) => {
                self.status.conflicts += 1;
                self.attempts += 1;
                if self.attempts > self.cfg.max_conflict_retries {
                    self.stop(RecoveryOutcome::Failed {
                        detail: format!(
                            "decision write still conflicting after {} attempts",
                            self.attempts
                        ),
                        error: Some(KubeError::Conflict(m)),
                        retryable: true,
                    });
                } else {
                    self.read_composition(Step::RecheckBeforeDecision);
                }
            }
            (Step::RecheckBeforeDelete | Step::RecheckBeforeDecision, Err(KubeError::NotFound)) => {
                self.stop(RecoveryOutcome::CompositionChanged {
                    detail: "the Composition was deleted".into(),
                })
            }
            (step, Err(e)) => self.fail(&format!("{step:?}"), e),
            (step, Ok(r)) => self.stop(RecoveryOutcome::Failed {
                detail: format!("{step:?}: unexpected reply {r:?}"),
                error: None,
                retryable: false,
            }),
        }
    }

    fn on_composition(&mut self, c: CompositionView) {
        if let Err(why) = check_common(self.cfg.enabled, &self.cfg.scope, &c) {
            return self.stop(RecoveryOutcome::NotEligible(why));
        }
        let lineage = match lineage_of(&c) {
            Ok(l) => l,
            Err(e) => {
                return self.stop(RecoveryOutcome::NotEligible(Ineligible::BadLineage(
                    e.to_string(),
                )))
            }
        };
        let cur = c.current_synthesis.clone().unwrap_or_default();
        if let Some(d) = current_decision(&c) {
            // A plan waits for an operator; a held plan also for an explicit release.
            let pending_again = match d.outcome {
                Outcome::Planned(_) => self.cfg.mode == Mode::Plan,
                Outcome::Held { .. } => {
                    matches!(self.cfg.mode, Mode::Apply | Mode::Plan)
                        && self.cfg.policy.allow_deletions.is_none()
                }
                _ => false,
            };
            if self.cfg.mode != Mode::DryRun && (d.outcome.is_finished() || pending_again) {
                return self.stop(RecoveryOutcome::AlreadyDecided(d));
            }
        }
        self.uuid = cur.uuid.clone();
        self.status.synthesis_uuid = Some(cur.uuid.clone());
        self.status.lineage = Some(lineage.clone());
        self.plan.lineage = lineage;
        let prev = c.previous_synthesis.clone();
        self.comp = c;
        if self.cfg.mode == Mode::Skip {
            return self.decide(Outcome::Skipped);
        }
        match prev {
            Some(p) => self.list_slices(Step::PrevSlices, p.resource_slice_names),
            None => self.list_compositions(),
        }
    }

    fn list_compositions(&mut self) {
        self.queued = Some((
            Step::ListCompositions,
            // Every namespace, not only the watched one: an override may name the lineage of
            // any namespace.
            Command::ListCompositions { namespace: None },
        ));
    }

    fn on_prev_slices(&mut self, slices: Vec<SliceView>) {
        let names = self
            .comp
            .previous_synthesis
            .as_ref()
            .map(|p| p.resource_slice_names.clone())
            .unwrap_or_default();
        let readable = ordered_slices(&names, slices)
            .ok()
            .is_some_and(|s| entries_from_slices(&s).is_ok());
        if readable {
            self.decide(Outcome::NotNeeded)
        } else {
            self.list_compositions()
        }
    }

    fn on_compositions(&mut self, all: &[CompositionView]) {
        let conflict = check_lineage(
            &self.comp,
            all,
            self.cfg.policy.allow_cross_namespace_lineage,
        )
        .err()
        .map(|p| p.detail(&self.plan.lineage));
        if let Some(detail) = conflict {
            self.plan.selection = Some(Selection::Invalid(Invalid {
                reason: Reason::LineageConflict,
                detail,
            }));
            return self.decide(Outcome::InventoryInvalid(Reason::LineageConflict));
        }
        let names = self
            .comp
            .current_synthesis
            .as_ref()
            .map(|s| s.resource_slice_names.clone())
            .unwrap_or_default();
        self.list_slices(Step::CurrentSlices, names);
    }

    fn on_current_slices(&mut self, slices: Vec<SliceView>) {
        let names = self
            .comp
            .current_synthesis
            .as_ref()
            .map(|s| s.resource_slice_names.clone())
            .unwrap_or_default();
        let present = ordered_slices(&names, slices)
            .map_err(|e| e.to_string())
            .and_then(|s| present_identities(&s).map_err(|e| e.to_string()));
        match present {
            Ok(p) => {
                self.present = p;
                self.queued = Some((
                    Step::ListSecrets,
                    Command::ListSecrets {
                        namespace: self.cfg.secret_namespace.clone(),
                        label_selector: lineage_selector(&self.plan.lineage),
                    },
                ));
            }
            Err(detail) => self.stop(RecoveryOutcome::CurrentSlicesUnusable { detail }),
        }
    }

    fn on_secrets(&mut self, secrets: &[Secret]) {
        let selection = select_with_limit(secrets, &self.plan.lineage, self.cfg.chunk_limit);
        let p = plan_recovery(
            selection,
            Some(&self.comp),
            Some(&self.present),
            &self.cfg.policy,
        );
        let outcome = match (self.cfg.mode, p.apply_outcome()) {
            (Mode::Apply, o) => o,
            (_, Outcome::Applied(n)) => Outcome::Planned(n),
            (_, o) => o,
        };
        self.status.tombstones = p.tombstones.len();
        self.plan.selection = p.selection;
        self.plan.tombstones = p.tombstones;
        self.plan.hold = p.hold;
        if matches!(outcome, Outcome::Applied(n) if n > 0) {
            self.outcome = Some(outcome);
            self.status.outcome = Some(outcome.name().into());
            self.next_delete = 0;
            return self.next_tombstone();
        }
        self.decide(outcome);
    }

    /// Moves to the tombstone at `next_delete`: first the wait for the group just finished
    /// (when another group follows), then protected tombstones are passed over, and the
    /// next deletable one starts with a re-read of the Composition. After the last one the
    /// decision is written.
    fn next_tombstone(&mut self) {
        loop {
            let i = self.next_delete;
            let prev = i.checked_sub(1).map(|p| self.plan.tombstones[p].group);
            let cur = self.plan.tombstones.get(i).map(|t| t.group);
            if prev.is_some() && prev != cur {
                // A group ended. Eno waits only when a later group depends on it.
                if let (Some(Some(g)), Some(Some(_))) = (prev, cur) {
                    if !self.group_pending.is_empty() && self.waiting.is_none() {
                        return self.start_wait(g);
                    }
                }
                self.group_pending.clear();
            }
            let Some(t) = self.plan.tombstones.get(i) else {
                let n = self.plan.tombstones.len() as u64;
                return self.decide(Outcome::Applied(n));
            };
            if t.protected.is_none() {
                return self.read_composition(Step::RecheckBeforeDelete);
            }
            let id = t.id();
            self.status.skipped += 1;
            self.plan.results.push((id, DeleteResult::Protected));
            self.next_delete += 1;
        }
    }

    fn start_wait(&mut self, group: i64) {
        self.status.waiting_group = Some(group);
        self.waiting = Some(Wait {
            group,
            deadline: self.now + self.cfg.group_wait,
            rounds: 0,
            next: 0,
            still: Vec::new(),
            lingering: Vec::new(),
            sleep_until: None,
        });
        self.wait_round();
    }

    /// Reads every pending object of the group once, one GET at a time.
    fn wait_round(&mut self) {
        let Some(w) = self.waiting.as_mut() else {
            return;
        };
        w.rounds += 1;
        w.next = 0;
        w.still.clear();
        w.lingering.clear();
        w.sleep_until = None;
        self.status.wait_rounds += 1;
        self.wait_get();
    }

    fn wait_get(&mut self) {
        let Some(w) = self.waiting.as_ref() else {
            return;
        };
        if let Some((id, _)) = self.group_pending.get(w.next) {
            let id = id.clone();
            self.queued = Some((Step::WaitGet, Command::GetResource { id }));
        } else {
            self.end_wait_round();
        }
    }

    /// One pending object read during a wait: gone (`None`), replaced by a new object with
    /// another UID (the one deleted is gone too), or still there.
    fn on_wait_object(&mut self, o: Option<ObjectView>) {
        let Some(w) = self.waiting.as_mut() else {
            return;
        };
        if let (Some(o), Some((id, uid))) = (o, self.group_pending.get(w.next)) {
            if o.uid == *uid || uid.is_empty() {
                w.still.push((id.clone(), uid.clone()));
                if !o.terminating {
                    w.lingering.push(id.clone());
                }
            }
        }
        w.next += 1;
        self.wait_get();
    }

    fn end_wait_round(&mut self) {
        let Some(w) = self.waiting.as_mut() else {
            return;
        };
        let elapsed = self.now >= w.deadline;
        if !w.still.is_empty() && !elapsed {
            self.group_pending = std::mem::take(&mut w.still);
            w.sleep_until = Some((self.now + self.cfg.wait_poll).min(w.deadline));
            return;
        }
        // Only terminating objects (finalizers) may be left behind; one that is not even
        // terminating after its delete was accepted means the order cannot be trusted.
        if !w.lingering.is_empty() {
            let names: Vec<String> = w.lingering.iter().map(|id| format!("{id:?}")).collect();
            let detail = format!(
                "group {} was deleted, but after {:?} these still exist without a deletionTimestamp: {}; \
                 find what re-creates or protects them (an admission webhook, another controller); \
                 the next reconcile starts recovery again",
                w.group,
                self.cfg.group_wait,
                names.join(", ")
            );
            return self.stop(RecoveryOutcome::Failed {
                detail,
                error: None,
                retryable: true,
            });
        }
        self.plan.waits.push(GroupWait {
            group: w.group,
            rounds: w.rounds,
            gave_up_on: w.still.iter().map(|(id, _)| id.clone()).collect(),
        });
        self.waiting = None;
        self.status.waiting_group = None;
        self.group_pending.clear();
        self.next_tombstone();
    }

    /// Same UID, same current synthesis, still eligible. Stops and returns false otherwise.
    fn confirm(&mut self, c: CompositionView) -> bool {
        let detail = if c.uid != self.comp.uid {
            Some(format!("UID changed from {} to {}", self.comp.uid, c.uid))
        } else if c.current_synthesis.as_ref().map(|s| s.uuid.as_str()) != Some(self.uuid.as_str())
        {
            Some(format!("the current synthesis is no longer {}", self.uuid))
        } else if let Err(why) = check_common(self.cfg.enabled, &self.cfg.scope, &c) {
            Some(format!("no longer eligible: {why}"))
        } else if lineage_of(&c).ok().as_ref() != Some(&self.plan.lineage) {
            Some("the lineage changed".into())
        } else {
            None
        };
        match detail {
            Some(detail) => {
                self.stop(RecoveryOutcome::CompositionChanged { detail });
                false
            }
            None => {
                self.comp = c;
                true
            }
        }
    }

    fn get_resource(&mut self) {
        let id = self.plan.tombstones[self.next_delete].id();
        self.queued = Some((Step::GetResource, Command::GetResource { id }));
    }

    fn on_object(&mut self, o: ObjectView) {
        if o.annotations.get(ANN_DELETION_STRATEGY).map(String::as_str) == Some("orphan") {
            return self.record_result(DeleteResult::SkippedOrphan);
        }
        if o.terminating {
            self.current_object = Some(o);
            return self.record_result(DeleteResult::AlreadyDeleting);
        }
        let id = self.plan.tombstones[self.next_delete].id();
        self.queued = Some((
            Step::Delete,
            Command::DeleteResource {
                id,
                uid: o.uid.clone(),
            },
        ));
        self.current_object = Some(o);
    }

    fn record_result(&mut self, r: DeleteResult) {
        let id = self.plan.tombstones[self.next_delete].id();
        if r == DeleteResult::Deleted {
            self.status.deleted += 1;
        } else {
            self.status.skipped += 1;
        }
        let object = self.current_object.take();
        if matches!(r, DeleteResult::Deleted | DeleteResult::AlreadyDeleting) {
            let uid = object.map(|o| o.uid).unwrap_or_default();
            self.group_pending.push((id.clone(), uid));
        }
        self.plan.results.push((id, r));
        self.next_delete += 1;
        self.next_tombstone();
    }

    fn decision(&self) -> Option<Decision> {
        self.outcome.map(|o| Decision {
            synthesis_uuid: self.uuid.clone(),
            outcome: o,
            time: self.wall_now,
        })
    }

    fn decide(&mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
        self.status.outcome = Some(outcome.name().into());
        if self.cfg.mode == Mode::DryRun {
            let decision = self
                .decision()
                .unwrap_or_else(|| unreachable_decision(&self.uuid));
            let plan = std::mem::take(&mut self.plan);
            return self.stop(RecoveryOutcome::Decided {
                decision,
                plan,
                written: false,
            });
        }
        self.attempts = 0;
        self.read_composition(Step::RecheckBeforeDecision);
    }

    fn on_decision_recheck(&mut self, c: CompositionView) {
        let existing = current_decision(&c);
        if !self.confirm(c) {
            return;
        }
        // Someone (another controller replica, an operator) decided meanwhile: keep theirs.
        if let Some(d) = existing.filter(|d| d.outcome.is_finished()) {
            return self.stop(RecoveryOutcome::AlreadyDecided(d));
        }
        let value = self.decision().map(|d| d.to_json()).unwrap_or_default();
        self.queued = Some((
            Step::WriteDecision,
            Command::PatchCompositionAnnotation {
                namespace: self.comp.namespace.clone(),
                name: self.comp.name.clone(),
                key: DECISION_ANNOTATION.into(),
                value,
                resource_version: self.comp.resource_version.clone(),
            },
        ));
    }

    fn on_decision_written(&mut self) {
        let decision = self
            .decision()
            .unwrap_or_else(|| unreachable_decision(&self.uuid));
        let plan = std::mem::take(&mut self.plan);
        self.stop(RecoveryOutcome::Decided {
            decision,
            plan,
            written: true,
        });
    }
}

/// `decide` always sets the outcome first; this placeholder only keeps the code free of
/// panics if that ever changes.
fn unreachable_decision(uuid: &str) -> Decision {
    Decision {
        synthesis_uuid: uuid.to_string(),
        outcome: Outcome::InventoryNotFound,
        time: Timestamp::default(),
    }
}
