//! The agent processes: starting, crashing and restarting them, feeding them inputs and
//! polling their outputs, and what the world reads off their status (coverage counters,
//! condition edges, finished reconciliation passes and invariant (c) on their drift counts).

use super::{Ev, World};
use crate::agent::{config_for, Agent};
use crate::invariants::Violation;
use crate::oracle::Fence;
use crate::replicator::build;
use crate::schedule::FaultyMode;
use std::collections::BTreeSet;
use tidemark_core::etcd::TxnOp;
use tidemark_core::mirror::{ConditionType, Control, Input, Output};
use tidemark_core::Instant;

/// Commands one agent may emit at one instant before the run is declared a busy loop.
const MAX_OUTPUTS_PER_DRIVE: usize = 100_000;

impl World {
    /// Kills an agent process. Returns whether it was running.
    pub(super) fn crash(&mut self, agent: u32) -> bool {
        let Some(a) = self.agents.get(agent as usize) else {
            return false;
        };
        if a.replicator.is_none() {
            return false;
        }
        self.harvest(agent);
        // Replies to the crashed process never come: its chain ends here.
        self.faulty.chains.remove(&agent);
        let a = &mut self.agents[agent as usize];
        let old = a.conn();
        a.replicator = None;
        a.stopped = None;
        a.incarnation += 1;
        a.cancelled.clear();
        a.in_flight.clear();
        a.wake_gen += 1;
        self.source.drop_conn(old);
        self.target.drop_conn(old);
        self.coverage.mark("agent.crash");
        if self.opts.faulty == Some(FaultyMode::ApplyTwiceAfterCrash) && !self.faulty.replayed {
            if let Some((inc, req)) = self.faulty.last_commit.get(&agent).cloned() {
                let wm = req
                    .success
                    .iter()
                    .find_map(|op| match op {
                        TxnOp::Put { key, value } if *key == self.checker.oracle.fence_key => {
                            Fence::parse(value)
                        }
                        _ => None,
                    })
                    .map_or(0, |f| f.watermark);
                self.faulty.replay = Some((agent, inc, req, wm));
            }
        }
        true
    }

    /// Folds an agent's status counters into the coverage marks.
    pub(super) fn harvest(&mut self, agent: u32) {
        let Some(r) = self.agents[agent as usize].replicator.as_ref() else {
            return;
        };
        let s = r.status();
        self.coverage
            .add("core.forced_resync", s.forced_resync_count);
        self.coverage.add("core.scan_restart", s.scan_restart_count);
        self.coverage
            .add("core.genesis_watch_pause", s.genesis_watch_pauses);
        self.coverage
            .add("core.own_late_write_adopted", s.own_late_writes_adopted);
        self.coverage
            .add("core.split_revision", s.split_revision_count);
        self.coverage.add("core.pruned_keys", s.pruned_keys);
        self.coverage
            .add("core.residue_keys_deleted", s.residue_keys_deleted);
        self.coverage.add("core.applied_txns", s.applied_txns);
        self.coverage.add(
            "core.source_read_wait_ms",
            (s.source_read_wait_seconds * 1000.0) as u64,
        );
    }

    pub(super) fn restart(&mut self, agent: u32, variant: Option<u32>) {
        while self.agents.len() <= agent as usize {
            let idx = self.agents.len() as u32;
            self.agents.push(Agent {
                index: idx,
                incarnation: 0,
                replicator: None,
                config: config_for(&self.opts, self.opts.config_variant),
                holder: String::new(),
                cancelled: BTreeSet::new(),
                wake_gen: 0,
                stopped: None,
                restart_at: None,
                retire_at: None,
                in_flight: BTreeSet::new(),
                raised: BTreeSet::new(),
                passes_seen: 0,
                last_pass_start: None,
                source_epoch: 0,
                sent_records: Default::default(),
            });
        }
        if self.agents[agent as usize].stopped.is_some() {
            // A stopped process is restarted as a new incarnation.
            self.crash(agent);
        }
        self.last_disturb_ns = self.now;
        if self.agents[agent as usize].replicator.is_some() {
            // Already running (a supervisor restart raced a fault restart).
            self.agents[agent as usize].restart_at = None;
            return;
        }
        if let Some(v) = variant {
            self.agents[agent as usize].config = config_for(&self.opts, v);
            self.coverage
                .mark(&format!("agent.config_variant.{}", v % 6));
        }
        let seed = self.rng.next_u64();
        let cfg = self.agents[agent as usize].config.clone();
        match build(self.opts.replicator, cfg, seed) {
            Ok(r) => {
                let a = &mut self.agents[agent as usize];
                a.replicator = Some(r);
                a.stopped = None;
                a.restart_at = None;
                a.holder.clear();
                a.raised.clear();
                a.passes_seen = 0;
                a.last_pass_start = None;
                // A new process can only learn the source's current history.
                a.source_epoch = self.restores.epoch;
                a.sent_records.clear();
                self.trace.record(self.now, agent, "start", &seed);
                self.coverage.mark("agent.start");
                if self.drain_requested_at.is_some() {
                    // The operator's drain request stands for every later process.
                    self.deliver(agent, Input::Control(Control::Drain));
                } else {
                    self.drive(agent);
                }
            }
            Err(e) => {
                self.build_error = Some(e.clone());
                self.violate(Violation {
                    invariant: "setup".into(),
                    at_ns: self.now,
                    detail: format!("cannot start an agent: {e}"),
                });
            }
        }
    }

    pub(super) fn deliver(&mut self, agent: u32, input: Input) {
        let now = Instant(self.now);
        if self.verbose {
            eprintln!(
                "{:>12.3}ms a{agent} <- {}",
                self.now as f64 / 1e6,
                brief(&input)
            );
        }
        self.trace.record(self.now, agent, "in", &input);
        if let Input::Done { id, .. } = &input {
            if let Some((_, ids)) = self.faulty.chains.get_mut(&agent) {
                ids.remove(id);
            }
        }
        if let Some(r) = self.agents[agent as usize].replicator.as_mut() {
            r.handle_input(now, input);
        }
        self.drive(agent);
    }

    pub(super) fn drive(&mut self, agent: u32) {
        let now = Instant(self.now);
        for _ in 0..MAX_OUTPUTS_PER_DRIVE {
            let a = &mut self.agents[agent as usize];
            if a.stopped.is_some() {
                return;
            }
            let Some(r) = a.replicator.as_mut() else {
                return;
            };
            let out = r.poll_output(now);
            if a.holder.is_empty() {
                a.holder = r.status().holder.clone();
                self.holders
                    .insert((agent, a.incarnation), a.holder.clone());
            }
            self.trace.record(self.now, agent, "out", &out);
            if self.verbose && !matches!(out, Output::Timeout(t) if t.0 > self.now) {
                eprintln!(
                    "{:>12.3}ms a{agent} -> {}",
                    self.now as f64 / 1e6,
                    brief(&out)
                );
            }
            match out {
                Output::Command { id, cmd } => self.send(agent, id, cmd),
                Output::Timeout(t) => {
                    let a = &mut self.agents[agent as usize];
                    a.wake_gen += 1;
                    let gen = a.wake_gen;
                    self.push(t.0.max(self.now), Ev::Wake { agent, gen });
                    self.sample_conditions(agent);
                    self.observe_passes(agent);
                    self.check_drain(agent);
                    return;
                }
                Output::Stopped(reason) => {
                    self.sample_conditions(agent);
                    self.observe_passes(agent);
                    self.on_stopped(agent, reason);
                    return;
                }
            }
        }
        self.violate(Violation {
            invariant: "busy-loop".into(),
            at_ns: self.now,
            detail: format!(
                "agent {agent} emitted {MAX_OUTPUTS_PER_DRIVE} commands without yielding"
            ),
        });
    }

    /// Counts each rising edge of a noteworthy condition.
    fn sample_conditions(&mut self, agent: u32) {
        let a = &mut self.agents[agent as usize];
        let Some(r) = a.replicator.as_ref() else {
            return;
        };
        for (t, c) in &r.status().conditions {
            if matches!(
                t,
                ConditionType::Available
                    | ConditionType::SourceReachable
                    | ConditionType::TargetReachable
                    | ConditionType::InvariantsHeld
                    | ConditionType::InitialSyncComplete
            ) {
                continue;
            }
            let was = a.raised.contains(t);
            if c.status && !was {
                a.raised.insert(*t);
                self.coverage.mark_condition(t.name());
            } else if !c.status && was {
                a.raised.remove(t);
            }
        }
    }

    /// Counts finished reconciliation passes and checks invariant (c): a pinned pass that
    /// ran with nothing else going on (no fault, heal, drift or agent start, one agent,
    /// the source idle since the watermark) reports exactly the drift in the target.
    fn observe_passes(&mut self, agent: u32) {
        let a = &self.agents[agent as usize];
        let Some(st) = a.replicator.as_ref().map(|r| r.status()) else {
            return;
        };
        if st.reconcile_passes <= a.passes_seen {
            return;
        }
        let passes = st.reconcile_passes - a.passes_seen;
        let counts = st.last_drift.unwrap_or_default();
        let dur_ns = (st.last_pass_duration_seconds * 1e9).round() as u64;
        let start = self.now.saturating_sub(dur_ns);
        let pinned_at = st
            .conditions
            .get(&ConditionType::DriftDetected)
            .and_then(|c| parse_pinned(&c.message));
        let a = &mut self.agents[agent as usize];
        a.passes_seen += passes;
        a.last_pass_start = Some(start);
        self.coverage.add("reconcile.passes", passes);
        self.coverage.add("reconcile.drift.missing", counts.missing);
        self.coverage
            .add("reconcile.drift.divergent", counts.divergent);
        self.coverage.add("reconcile.drift.orphan", counts.orphan);
        self.coverage.add("reconcile.repaired", counts.repaired);
        let Some((w, true)) = pinned_at else {
            return self.coverage.mark("reconcile.unpinned");
        };
        let alone = self.agents.iter().filter(|a| a.alive()).count() == 1;
        let idle = self.checker.last_in_scope(&self.source.store) <= w;
        let current = self.agents[agent as usize].source_epoch == self.restores.epoch;
        if passes != 1
            || !alone
            || !idle
            || !current
            || self.last_disturb_ns >= start
            || self.opts.faulty.is_some()
        {
            return;
        }
        let rev = self
            .target_revs
            .iter()
            .rev()
            .find(|(t, _)| *t <= start)
            .map_or(0, |(_, r)| *r);
        let (missing, divergent, orphan) =
            self.checker
                .expected_drift(w, &self.source.store, &self.target.store, rev);
        self.coverage.mark("reconcile.drift_checked");
        if missing + divergent + orphan > 0 {
            self.coverage.mark("reconcile.drift_checked_nonzero");
        }
        if (counts.missing, counts.divergent, counts.orphan) != (missing, divergent, orphan) {
            self.violate(Violation {
                invariant: "c-drift-count".into(),
                at_ns: self.now,
                detail: format!(
                    "agent {agent}: a pass pinned at {w} on an idle source reported missing {}, divergent {}, orphan {}; the injected drift is missing {missing}, divergent {divergent}, orphan {orphan}",
                    counts.missing, counts.divergent, counts.orphan
                ),
            });
        }
    }
}

/// The pinned revision and flag from the DriftDetected message:
/// `... (pinned at {at}: {pinned})`.
fn parse_pinned(message: &str) -> Option<(i64, bool)> {
    let rest = message.rsplit_once("(pinned at ")?.1;
    let (at, pinned) = rest.split_once(": ")?;
    let pinned = pinned.trim_end_matches(')');
    Some((at.parse().ok()?, pinned == "true"))
}

/// A one-line summary of an input or output for verbose traces (values elided).
fn brief<T: serde::Serialize>(x: &T) -> String {
    let mut v = serde_json::to_value(x).unwrap_or_default();
    elide(&mut v);
    let s = v.to_string();
    if s.len() > 400 && std::env::var_os("TIDEMARK_SIM_FULL_VALUES").is_none() {
        format!("{}...", s.chars().take(400).collect::<String>())
    } else {
        s
    }
}

fn elide(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "value" {
                    if let serde_json::Value::String(s) = x {
                        if s.len() > 24 && std::env::var_os("TIDEMARK_SIM_FULL_VALUES").is_none() {
                            *x = serde_json::Value::String(format!("<{} b64 chars>", s.len()));
                        }
                    }
                } else {
                    elide(x);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(elide),
        _ => {}
    }
}
