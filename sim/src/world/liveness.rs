//! How a run may end well, and the checks on how agents stop: the quiet phase and its
//! supervisor, convergence, the stops a scenario expects, a drain's bounded silence, and
//! the verdict on a completed drain (invariant (a) of the drain). Safety is checked on
//! every commit elsewhere; this module decides when the run is done.

use super::{ni, End, Ev, Net, World, MS};
use crate::invariants::Violation;
use crate::oracle::Fence;
use crate::schedule::{ReplicatorKind, Side};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::mirror::{Control, FailKind, StopReason};

impl World {
    /// Whether the operator asked for a drain (now or by config).
    fn drain_requested(&self) -> bool {
        self.drain_requested_at.is_some() || self.opts.drain_from_start
    }

    pub(super) fn begin_quiet(&mut self) {
        self.quiet = true;
        for s in [Side::Source, Side::Target] {
            self.net[ni(s)] = Net::default();
        }
        for c in [&mut self.source, &mut self.target] {
            c.cond = Default::default();
        }
        if self.faulty.held.is_some() {
            self.release_held();
        }
        // Paused agents are resumed: the operator does not leave a link paused forever.
        if self.paused_any {
            self.control_all(Control::Resume);
        }
        // A supervisor keeps one agent running: restart agent 0 if nothing runs or is due.
        let running = self
            .agents
            .iter()
            .any(|a| a.alive() || a.restart_at.is_some());
        if !running {
            if let Some((kind, reason)) = self.expected_stop() {
                self.end = Some(End::ExpectedStop { kind, reason });
                return;
            }
            self.coverage.mark("supervisor.restart_in_quiet");
            self.operator_abandons();
            self.restart(0, None);
        }
        self.push(self.now, Ev::LivenessTick);
    }

    /// When the scenario makes a permanent stop the right answer.
    fn expected_stop(&self) -> Option<(FailKind, String)> {
        let all_stopped = self
            .agents
            .iter()
            .all(|a| !a.alive() && a.restart_at.is_none());
        let refused = self.agents.iter().any(|a| {
            matches!(
                a.stopped,
                Some(StopReason::Failed {
                    kind: FailKind::EmptyTargetViolation,
                    ..
                })
            )
        });
        if all_stopped
            && refused
            && self.opts.junk_keys > 0
            && self.opts.initial_mode == InitialSyncMode::RequireEmpty
        {
            return Some((
                FailKind::EmptyTargetViolation,
                "RequireEmpty refused a non-empty target".into(),
            ));
        }
        let stopped_with = |kind: FailKind| {
            self.agents.iter().any(
                |a| matches!(&a.stopped, Some(StopReason::Failed { kind: k, .. }) if *k == kind),
            )
        };
        if all_stopped && stopped_with(FailKind::PrefixConflict) && self.sibling_present() {
            return Some((
                FailKind::PrefixConflict,
                "another link's fence in the target range".into(),
            ));
        }
        let refused_orphans = self.agents.iter().any(|a| {
            matches!(
                &a.stopped,
                Some(StopReason::Failed {
                    kind: FailKind::DrainOrphans,
                    ..
                })
            )
        });
        if all_stopped && refused_orphans && self.live_orphans() {
            return Some((
                FailKind::DrainOrphans,
                "drain refused: orphans and no deleteOrphans".into(),
            ));
        }
        if all_stopped {
            return self
                .history_expected_stop()
                .map(|r| (FailKind::SourceHistoryMismatch, r));
        }
        None
    }

    /// Whether another link's fence is in the target range now.
    fn sibling_present(&self) -> bool {
        self.checker
            .drift
            .sibling
            .as_ref()
            .is_some_and(|(k, _)| self.target.store.get(k).is_some())
    }

    /// Whether injected orphans are still in the target.
    fn live_orphans(&self) -> bool {
        self.checker
            .drift
            .orphans
            .iter()
            .any(|k| self.target.store.get(k).is_some())
    }

    pub(super) fn check_liveness(&mut self) {
        if let Some((kind, reason)) = self.expected_stop() {
            self.end = Some(End::ExpectedStop { kind, reason });
            return;
        }
        if self.drain_requested() {
            // A requested drain must complete; a converged mirror is not enough.
            if let Some(revision) = self.drained {
                self.end = Some(End::Drained {
                    at_ns: self.now,
                    revision,
                });
            }
        } else {
            // Drift is repaired only by a reconciling agent, orphans only with deleteOrphans
            // (agent 0 is the one the supervisor keeps running).
            let rc = self.agents.first().map(|a| a.config.reconciliation.clone());
            let keep_drift = !rc.as_ref().is_some_and(|r| r.enabled);
            let keep_orphans = !rc.as_ref().is_some_and(|r| r.enabled && r.delete_orphans);
            match self.checker.converged(
                self.now,
                &self.source.store,
                &self.target.store,
                keep_orphans,
                keep_drift,
            ) {
                Ok(true) => {
                    self.end = Some(End::Converged { at_ns: self.now });
                    self.mark_converged_history();
                }
                Ok(false) => {}
                Err(v) => self.violate(v),
            }
        }
        // A supervisor restarts a stopped process (Kubernetes would), with a delay.
        if self.end.is_none()
            && !self
                .agents
                .iter()
                .any(|a| a.alive() || a.restart_at.is_some())
        {
            self.coverage.mark("supervisor.restart_in_quiet");
            self.operator_abandons();
            self.agents[0].restart_at = Some(self.now + 5_000 * MS);
            self.push(
                self.now + 5_000 * MS,
                Ev::Restart {
                    agent: 0,
                    variant: None,
                },
            );
        }
    }

    /// Checks the drain's bounded silence for a running core agent in a drain.
    pub(super) fn check_drain(&mut self, agent: u32) {
        if self.opts.replicator != ReplicatorKind::Core || !self.drain_requested() {
            return;
        }
        let a = &self.agents[agent as usize];
        if !a.alive() {
            return;
        }
        let Some(st) = a.replicator.as_ref().map(|r| r.status()) else {
            return;
        };
        match self.drain_watch.check((agent, a.incarnation), self.now, st) {
            Ok(Some(reason)) => self.coverage.mark(&format!("drain.blocked.{reason}")),
            Ok(None) => {}
            Err(v) => self.violate(v),
        }
    }

    pub(super) fn on_stopped(&mut self, agent: u32, reason: StopReason) {
        self.harvest(agent);
        let a = &mut self.agents[agent as usize];
        a.stopped = Some(reason.clone());
        let holder = a.holder.clone();
        let name = match &reason {
            StopReason::Failed { kind, .. } => kind.name(),
            StopReason::Drained => "Drained",
            StopReason::Shutdown => "Shutdown",
        };
        self.coverage.mark(&format!("agent.stop.{name}"));
        let fence = Fence::parse(
            self.target
                .store
                .get(&self.checker.oracle.fence_key)
                .map(|kv| kv.value.as_slice())
                .unwrap_or_default(),
        );
        if self.opts.faulty.is_some() {
            return;
        }
        match reason {
            StopReason::Failed {
                kind: FailKind::FenceLost,
                message,
            } => {
                if fence.as_ref().is_some_and(|f| f.holder == holder) {
                    self.violate(Violation {
                        invariant: "spurious-fence-lost".into(),
                        at_ns: self.now,
                        detail: format!("agent {agent} stopped with FenceLost ({message}) but the fence is still its own"),
                    });
                }
            }
            StopReason::Failed {
                kind: FailKind::PrefixConflict,
                message,
            } if self.sibling_present() => {
                self.coverage.mark("drift.prefix_conflict_stop");
                let _ = message;
            }
            StopReason::Failed {
                kind: FailKind::SourceHistoryMismatch,
                message,
            } => {
                // A stop on the source's history must name what disproves it; a finding
                // that only leaves the history unproven resyncs instead of stopping.
                let finding = self.agents[agent as usize]
                    .replicator
                    .as_ref()
                    .and_then(|r| r.status().source_history_finding.clone());
                match finding {
                    Some(f) if f.disproves() => {
                        self.coverage.mark(&format!("history.stop.{}", f.name()))
                    }
                    other => self.violate(Violation {
                        invariant: "history-stop-without-proof".into(),
                        at_ns: self.now,
                        detail: format!(
                            "agent {agent} stopped on the source's history with finding {other:?}: {message}"
                        ),
                    }),
                }
            }
            StopReason::Failed {
                kind: FailKind::DrainOrphans,
                message,
            } => {
                let delete = self.agents[agent as usize]
                    .config
                    .reconciliation
                    .delete_orphans;
                if delete || !self.live_orphans() {
                    self.violate(Violation {
                        invariant: "unexpected-stop".into(),
                        at_ns: self.now,
                        detail: format!(
                            "agent {agent} (deleteOrphans {delete}, injected orphans present {}) refused the drain: {message}",
                            self.live_orphans()
                        ),
                    });
                } else {
                    self.coverage.mark("drain.refused_orphans");
                }
            }
            StopReason::Failed {
                kind: FailKind::DrainDrift,
                message,
            } => {
                let drift_since_drain = match (self.last_drift_ns, self.drain_start()) {
                    (Some(d), Some(r)) => d >= r,
                    _ => false,
                };
                if drift_since_drain {
                    self.coverage.mark("drain.gave_up_on_drift");
                } else {
                    self.violate(Violation {
                        invariant: "unexpected-stop".into(),
                        at_ns: self.now,
                        detail: format!(
                            "agent {agent}: {message} (no drift was injected during the drain)"
                        ),
                    });
                }
            }
            StopReason::Failed {
                kind: FailKind::EmptyTargetViolation,
                message,
            } => {
                let expected = self.opts.initial_mode == InitialSyncMode::RequireEmpty
                    && self.checker.has_foreign();
                if !expected {
                    self.violate(Violation {
                        invariant: "unexpected-stop".into(),
                        at_ns: self.now,
                        detail: format!(
                            "agent {agent} refused a target that holds no foreign key: {message}"
                        ),
                    });
                }
            }
            StopReason::Failed { .. } if self.history_stop_expected(&reason) => {}
            StopReason::Failed { kind, message } => self.violate(Violation {
                invariant: "unexpected-stop".into(),
                at_ns: self.now,
                detail: format!(
                    "agent {agent} stopped permanently: {} {message}",
                    kind.name()
                ),
            }),
            StopReason::Drained => self.on_drained(agent),
            StopReason::Shutdown => {}
        }
    }

    /// When the current drain began (the request, or the start for `mode: Drain`).
    fn drain_start(&self) -> Option<u64> {
        if self.opts.drain_from_start {
            Some(0)
        } else {
            self.drain_requested_at
        }
    }

    /// A drain completed: the cut-over must rest on an exact copy (invariant (a) of the
    /// drain): the fence is Primary at the drained revision and the target equals
    /// `rewrite(source@drained)`, except drift injected after the verification began.
    fn on_drained(&mut self, agent: u32) {
        self.coverage.mark("drain.completed");
        let Some(cut) = self.agents[agent as usize]
            .replicator
            .as_ref()
            .and_then(|r| r.status().cutover.clone())
        else {
            return self.violate(Violation {
                invariant: "a-drain".into(),
                at_ns: self.now,
                detail: format!("agent {agent} stopped Drained without a cut-over record"),
            });
        };
        let d = cut.drained_revision;
        if let Some(first) = self.drained {
            if first != d {
                self.violate(Violation {
                    invariant: "a-drain".into(),
                    at_ns: self.now,
                    detail: format!(
                        "agent {agent} reports drained revision {d}, the cut-over was at {first}"
                    ),
                });
            }
            return;
        }
        self.drained = Some(d);
        let fence = self.checker.fence.clone();
        let ok_fence = self.checker.primary_at.is_some()
            && fence
                .as_ref()
                .is_some_and(|f| f.role == "Primary" && f.watermark == d && f.settled());
        if !ok_fence {
            return self.violate(Violation {
                invariant: "a-drain".into(),
                at_ns: self.now,
                detail: format!("agent {agent} stopped Drained at {d} but the fence is {fence:?}"),
            });
        }
        let since = self.flip_since;
        if let Some((k, t)) = self.checker.drift.sibling.clone() {
            if t < since && self.target.store.get(&k).is_some() {
                return self.violate(Violation {
                    invariant: "a-drain".into(),
                    at_ns: self.now,
                    detail: "cut over although another link's fence was in the target range before the verification".into(),
                });
            }
        }
        let drift = self.checker.drift.clone();
        let late = |k: &[u8]| {
            drift.keys.get(k).is_some_and(|t| *t >= since)
                || drift.sibling.as_ref().is_some_and(|(s, _)| s == k)
        };
        let source = self
            .restores
            .store_for(self.checker.primary_epoch, &self.source.store);
        if let Err(mut v) =
            self.checker
                .check_equal_with(self.now, d, source, &self.target.store, late)
        {
            v.invariant = "a-drain".into();
            v.detail = format!("cut-over at {d}: {}", v.detail);
            self.violate(v);
        }
    }
}
