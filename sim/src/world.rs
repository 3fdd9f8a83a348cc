//! The simulated world: two model clusters, the network, the agents and the event queue.
//!
//! One discrete-event loop on simulated time. Every command an agent emits travels to its
//! cluster with a drawn latency, runs against the model at arrival, and its reply travels
//! back. Replies to different commands may overtake each other; everything on one watch
//! stream (its start reply, events, progress, cancellation) keeps its order, as one gRPC
//! stream does. A crash discards every reply and event still travelling to the process, but
//! requests already on the wire still reach the server.

use crate::agent::{config_for, Agent};
use crate::coverage::Coverage;
use crate::drain_watch::DrainWatch;
use crate::invariants::{Checker, Violation};
use crate::model::etcd::ConnId;
use crate::model::{EtcdCluster, Mutation};
use crate::oracle::Oracle;
use crate::restore::Restores;
use crate::schedule::{Options, Schedule, Side};
use crate::trace::Trace;
use crate::workload::Workload;
use std::collections::BTreeMap;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{Command, Reply, WatchEvent};
use tidemark_core::rng::Rng;

mod agents;
mod commit;
mod dispatch;
mod faults;
mod faulty;
mod history;
mod liveness;
mod network;

use faults::HealKind;
use faulty::Faulty;
use network::Net;

const MS: u64 = 1_000_000;
const SYNC_TICK: u64 = 100 * MS;
const LIVENESS_TICK: u64 = 1_000 * MS;

/// `Ev::Arrive::deadline_at` of a request that arrives after its deadline reply was sent.
const LATE: u64 = u64::MAX;

#[derive(Debug, Clone)]
enum Ev {
    Wake {
        agent: u32,
        gen: u64,
    },
    Arrive {
        agent: u32,
        inc: u32,
        id: u64,
        cmd: Command,
        /// Set when the driver's deadline fires first: the reply is replaced by it
        /// ([`LATE`]: the deadline reply was already sent, the request applies silently).
        deadline_at: Option<u64>,
        /// The sender's source history when it sent the request (see [`crate::restore`]).
        basis: u32,
    },
    Reply {
        agent: u32,
        inc: u32,
        id: u64,
        result: Result<Reply, Failure>,
    },
    Watch {
        conn: ConnId,
        watch_id: u64,
        event: WatchEvent,
        /// The source history that produced it.
        epoch: u32,
    },
    Workload,
    SyncTick,
    ProgressTick,
    LivenessTick,
    Fault(usize),
    Heal(HealKind),
    /// The next compaction of a compaction storm.
    Storm {
        left_ms: u64,
        every_ms: u64,
    },
    Restart {
        agent: u32,
        variant: Option<u32>,
    },
    Retire {
        agent: u32,
    },
    Quiet,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Converged after the quiet phase began.
    Converged {
        at_ns: u64,
    },
    /// A requested drain completed (and was checked) and the quiet phase began.
    Drained {
        at_ns: u64,
        revision: i64,
    },
    /// Every agent stopped for a reason the scenario expects (e.g. RequireEmpty refusal).
    ExpectedStop {
        kind: tidemark_core::mirror::FailKind,
        reason: String,
    },
    Violation(Violation),
}

/// The whole simulated world of one run.
#[derive(Debug)]
pub struct World {
    pub opts: Options,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    pub source: EtcdCluster,
    pub target: EtcdCluster,
    pub agents: Vec<Agent>,
    rng: Rng,
    workload: Workload,
    pub checker: Checker,
    faults: Vec<crate::schedule::TimedFault>,
    net: [Net; 2],
    watch_clock: BTreeMap<(ConnId, u64), u64>,
    pub trace: Trace,
    pub coverage: Coverage,
    /// Events popped from the queue.
    pub events: u64,
    quiet: bool,
    end: Option<End>,
    faulty: Faulty,
    /// Per agent: the core cannot be built (the reason), e.g. the Mirror is missing.
    pub build_error: Option<String>,
    spins: u32,
    last_wake: u64,
    /// Print every input and output to stderr (debugging a replay).
    pub verbose: bool,
    /// When the operator asked for a drain (`DrainNow`).
    drain_requested_at: Option<u64>,
    /// The drained revision of the first completed drain.
    pub drained: Option<i64>,
    /// The start of the verification pass the cut-over rests on (drift injected later
    /// may legitimately be missed by it).
    flip_since: u64,
    /// The last fault, heal or agent start/stop: a pass counted only if none happened
    /// while it ran (and the source was idle) must report exactly the injected drift.
    last_disturb_ns: u64,
    /// The last drift injection.
    last_drift_ns: Option<u64>,
    /// (time, target revision) after every target change, to read the target as of a
    /// pass start.
    target_revs: Vec<(u64, i64)>,
    /// A pause was ever requested.
    paused_any: bool,
    /// Source restores: the histories and what each agent knows of them.
    pub restores: Restores,
    /// Each process's holder nonce, by (agent, incarnation): an unfenced write (a genesis
    /// page) is judged by who sent it, even after that process died.
    holders: BTreeMap<(u32, u32), String>,
    /// The operator restarted the link abandoning its checkpoint after a restore.
    abandoned: bool,
    /// Drains that show no progress must say why (see [`crate::drain_watch`]).
    drain_watch: DrainWatch,
}

fn ni(s: Side) -> usize {
    match s {
        Side::Source => 0,
        Side::Target => 1,
    }
}

impl World {
    /// Builds the world of a schedule; nothing runs until [`World::run`].
    pub fn new(schedule: &Schedule, trace: bool) -> World {
        let o = schedule.options.clone();
        let cfg = config_for(&o, o.config_variant);
        let oracle = Oracle::new(&cfg);
        let mut w = World {
            source: EtcdCluster::new("source", &o.source_version, 0x50),
            target: EtcdCluster::new("target", &o.target_version, 0x7a),
            agents: Vec::new(),
            rng: Rng::new(o.seed ^ 0x0e7_0e7),
            workload: Workload::new(o.workload.clone(), "/app/", o.seed),
            checker: Checker::new(oracle),
            faults: schedule.faults.clone(),
            net: [Net::default(), Net::default()],
            watch_clock: BTreeMap::new(),
            trace: Trace::new(trace),
            coverage: Coverage::default(),
            events: 0,
            quiet: false,
            end: None,
            faulty: Faulty::default(),
            build_error: None,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            spins: 0,
            last_wake: u64::MAX,
            verbose: false,
            drain_requested_at: None,
            drained: None,
            flip_since: 0,
            last_disturb_ns: 0,
            last_drift_ns: None,
            target_revs: Vec::new(),
            paused_any: false,
            restores: Restores::default(),
            holders: BTreeMap::new(),
            abandoned: false,
            drain_watch: DrainWatch::default(),
            opts: o,
        };
        let mut out = Vec::new();
        w.workload.preload(&mut w.source, &mut out);
        // Foreign keys in the target range before the agent starts.
        let base = w.checker.oracle.target_base.clone();
        for i in 0..w.opts.junk_keys {
            let mut k = base.clone();
            k.extend_from_slice(format!("k/junk{i:03}").as_bytes());
            w.target.write(
                &[Mutation::Put {
                    key: k.clone(),
                    value: b"foreign".to_vec(),
                    lease: 0,
                }],
                &mut out,
            );
            w.checker.foreign_write(&k);
        }
        w.push(
            0,
            Ev::Restart {
                agent: 0,
                variant: None,
            },
        );
        w.push(1, Ev::Workload);
        w.push(SYNC_TICK, Ev::SyncTick);
        w.push(w.opts.progress_notify_ms * MS, Ev::ProgressTick);
        w.push(w.opts.safety_ms * MS, Ev::Quiet);
        for (i, f) in w.faults.clone().iter().enumerate() {
            w.push(f.at_ms * MS, Ev::Fault(i));
        }
        w
    }

    fn violate(&mut self, v: Violation) {
        if self.end.is_none() {
            self.end = Some(End::Violation(v));
        }
    }

    /// Runs to the end: convergence, an expected stop, or the first violation.
    pub fn run(&mut self) -> End {
        let deadline = (self.opts.safety_ms + self.opts.liveness_ms) * MS;
        while self.end.is_none() {
            let Some(((t, _), ev)) = self.queue.pop_first() else {
                self.violate(Violation {
                    invariant: "liveness".into(),
                    at_ns: self.now,
                    detail: "nothing left to happen and the mirror has not converged".into(),
                });
                break;
            };
            if t > deadline {
                let f = self.checker.fence.clone();
                let detail = format!(
                    "no convergence {} ms into the quiet phase: fence {:?}, source rev {}, last in-scope rev {}, agents {}",
                    self.opts.liveness_ms,
                    f,
                    self.source.store.rev(),
                    self.checker.last_in_scope(&self.source.store),
                    self.agent_summary()
                );
                self.violate(Violation {
                    invariant: "liveness".into(),
                    at_ns: t,
                    detail,
                });
                break;
            }
            self.now = t;
            self.events += 1;
            self.step(ev);
        }
        for a in 0..self.agents.len() {
            self.harvest(a as u32);
        }
        for m in self.source.take_marks() {
            self.coverage.mark(m);
        }
        self.end.clone().expect("loop exits only with an end")
    }

    /// The simulated time now, nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    fn agent_summary(&self) -> String {
        let parts: Vec<String> = self
            .agents
            .iter()
            .map(|a| {
                let st = a.replicator.as_ref().map(|r| r.status());
                format!(
                    "#{}.{} {} phase {:?} wm {} err {:?}",
                    a.index,
                    a.incarnation,
                    match &a.stopped {
                        Some(s) => format!("stopped({s:?})"),
                        None if a.replicator.is_some() => "running".into(),
                        None => "down".into(),
                    },
                    st.map(|s| s.phase),
                    st.map_or(0, |s| s.last_applied_revision),
                    st.and_then(|s| s.last_error.clone())
                )
            })
            .collect();
        parts.join("; ")
    }
}
