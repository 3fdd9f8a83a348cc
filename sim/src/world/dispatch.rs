//! The event queue's two ends: [`World::push`] schedules an event at a simulated instant,
//! and [`World::step`] does what a popped event means, handing it to the network, the
//! fault injector, an agent or the liveness checks. Kept apart from the loop in
//! `world.rs` so the loop reads as "pop, check the deadline, step".

use super::{Ev, World, LIVENESS_TICK, MS, SYNC_TICK};
use crate::invariants::Violation;
use crate::schedule::Fault;
use tidemark_core::etcd::WatchEvent;
use tidemark_core::mirror::Input;

impl World {
    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    pub(super) fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Wake { agent, gen } => {
                let a = &self.agents[agent as usize];
                if a.wake_gen == gen && a.alive() {
                    if self.last_wake == self.now {
                        self.spins += 1;
                    } else {
                        self.spins = 0;
                        self.last_wake = self.now;
                    }
                    if self.spins > 10_000 {
                        return self.violate(Violation {
                            invariant: "busy-loop".into(),
                            at_ns: self.now,
                            detail: format!(
                                "agent {agent} keeps asking to be woken at the same instant"
                            ),
                        });
                    }
                    self.drive(agent);
                }
            }
            Ev::Arrive {
                agent,
                inc,
                id,
                cmd,
                deadline_at,
                basis,
            } => self.arrive(agent, inc, id, cmd, deadline_at, basis),
            Ev::Reply {
                agent,
                inc,
                id,
                result,
            } => {
                let a = &mut self.agents[agent as usize];
                self.restores.on_reply(a, inc, id);
                if a.incarnation != inc || !a.alive() {
                    return;
                }
                a.in_flight.remove(&id);
                self.deliver(agent, Input::Done { id, result });
            }
            Ev::Watch {
                conn,
                watch_id,
                event,
                epoch,
            } => {
                let agent = (conn >> 32) as u32;
                let inc = conn as u32;
                let Some(a) = self.agents.get_mut(agent as usize) else {
                    return;
                };
                if a.incarnation != inc || !a.alive() || a.cancelled.contains(&watch_id) {
                    return;
                }
                if !matches!(event, WatchEvent::Failed { .. }) {
                    a.source_epoch = a.source_epoch.max(epoch);
                }
                let event = self.faulty_watch(event);
                self.deliver(agent, Input::Watch { watch_id, event });
            }
            Ev::Workload => {
                if self.quiet {
                    return;
                }
                let mut out = Vec::new();
                self.workload.step(self.now, &mut self.source, &mut out);
                self.route(out);
                let gap = self.workload.next_gap_ns();
                self.push(self.now + gap, Ev::Workload);
            }
            Ev::SyncTick => {
                // Also between the agents' own wake-ups: a core that forgets to wake itself
                // to report a stalled drain is caught here.
                for agent in 0..self.agents.len() as u32 {
                    self.check_drain(agent);
                }
                let mut out = Vec::new();
                self.source.expire_leases(self.now, &mut out);
                if !self.source.cond.leader_lost {
                    self.source.sync_tick(&mut out);
                }
                for m in self.source.take_marks() {
                    self.coverage.mark(m);
                }
                self.route(out);
                // etcd syncs unsynced watchers every 100 ms; when none are behind, a slower
                // tick only expires leases (1 s granularity is plenty for TTLs of seconds).
                let gap = if self.source.has_unsynced() {
                    SYNC_TICK
                } else {
                    10 * SYNC_TICK
                };
                self.push(self.now + gap, Ev::SyncTick);
            }
            Ev::ProgressTick => {
                let mut out = Vec::new();
                if !self.source.cond.leader_lost {
                    self.source.progress_tick(&mut out);
                }
                if !out.is_empty() {
                    self.coverage.mark("model.progress_periodic");
                }
                self.route(out);
                self.push(
                    self.now + self.opts.progress_notify_ms * MS,
                    Ev::ProgressTick,
                );
            }
            Ev::LivenessTick => {
                self.check_liveness();
                if self.end.is_none() {
                    self.push(self.now + LIVENESS_TICK, Ev::LivenessTick);
                }
            }
            Ev::Fault(i) => {
                if !self.quiet {
                    self.last_disturb_ns = self.now;
                    let f = self.faults[i].fault.clone();
                    self.coverage.mark(&format!("fault.{}", f.kind()));
                    self.apply_fault(f);
                }
            }
            Ev::Heal(h) => {
                self.last_disturb_ns = self.now;
                self.heal(h)
            }
            Ev::Storm { left_ms, every_ms } => {
                if !self.quiet {
                    self.apply_fault(Fault::CompactStorm {
                        ms: left_ms,
                        every_ms,
                    });
                }
            }
            Ev::Restart { agent, variant } => self.restart(agent, variant),
            Ev::Retire { agent } => {
                self.crash(agent);
            }
            Ev::Quiet => self.begin_quiet(),
        }
    }
}
