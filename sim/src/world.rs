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
use crate::invariants::{Checker, Issuer, Violation};
use crate::model::etcd::{fail, msg, ConnId};
use crate::model::{EtcdCluster, Mutation, WatchOut};
use crate::oracle::{Fence, Oracle};
use crate::replicator::build;
use crate::restore::Restores;
use crate::schedule::{Fault, FaultyMode, Options, ReplicatorKind, Schedule, Side};
use crate::trace::Trace;
use crate::workload::Workload;
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::classify::{Code, Failure};
use tidemark_core::config::InitialSyncMode;
use tidemark_core::config::DEFAULT_CHECKPOINT_SUFFIX;
use tidemark_core::etcd::{Cluster, Command, Reply, TxnOp, TxnReply, TxnRequest, WatchEvent};
use tidemark_core::mirror::checkpoint::VERSION as CHECKPOINT_VERSION;
use tidemark_core::mirror::{
    Checkpoint, ConditionType, Control, FailKind, Input, Output, Role, StopReason,
};
use tidemark_core::rng::Rng;
use tidemark_core::Instant;

mod history;

const MS: u64 = 1_000_000;
const SYNC_TICK: u64 = 100 * MS;
const LIVENESS_TICK: u64 = 1_000 * MS;
/// Commands one agent may emit at one instant before the run is declared a busy loop.
const MAX_OUTPUTS_PER_DRIVE: usize = 100_000;

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

#[derive(Debug, Clone, Copy)]
enum HealKind {
    Partition(Side),
    LeaderLoss(Side),
    Throttle,
    Timeouts(Side),
    NoSpace,
    Latency(Side),
    /// The operator resumes the paused agents.
    Resume,
}

#[derive(Debug, Clone, Default)]
struct Net {
    partitioned_until: u64,
    timeouts_until: u64,
    timeout_pct: u32,
    slow_until: u64,
    slow_factor: u64,
}

/// State of a faulty-driver mode.
#[derive(Debug, Default)]
struct Faulty {
    /// ReorderCommits: the held commit (agent, inc, id, request, watermark).
    held: Option<(u32, u32, u64, TxnRequest, i64)>,
    reordered: bool,
    dropped_event: bool,
    /// Last successful commit per agent (for ApplyTwiceAfterCrash).
    last_commit: BTreeMap<u32, (u32, TxnRequest)>,
    /// A crashed agent's commit waiting to be applied again.
    replay: Option<(u32, u32, TxnRequest, i64)>,
    replayed: bool,
    /// CompareChainStart: per agent, the bytes the first Txn in flight compared and the
    /// ids of its Txns in flight.
    chains: BTreeMap<u32, (Vec<u8>, BTreeSet<u64>)>,
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

fn side_of(c: Cluster) -> Side {
    match c {
        Cluster::Source => Side::Source,
        Cluster::Target => Side::Target,
    }
}

fn cluster_of(cmd: &Command) -> Cluster {
    match cmd {
        Command::Status { cluster } => *cluster,
        Command::Range(r) => r.cluster,
        Command::Txn(_) => Cluster::Target,
        Command::Watch(_) | Command::CancelWatch { .. } | Command::RequestProgress { .. } => {
            Cluster::Source
        }
    }
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

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn latency(&mut self, side: Side) -> u64 {
        let (lo, hi) = self.opts.latency_us;
        let mut l = (lo + self.rng.below(hi - lo + 1)) * 1_000;
        let n = &self.net[ni(side)];
        if n.slow_until > self.now {
            l *= n.slow_factor.max(1);
        }
        l
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

    fn step(&mut self, ev: Ev) {
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

    fn heal(&mut self, h: HealKind) {
        match h {
            HealKind::Partition(s) => self.net[ni(s)].partitioned_until = 0,
            HealKind::LeaderLoss(Side::Source) => self.source.cond.leader_lost = false,
            HealKind::LeaderLoss(Side::Target) => self.target.cond.leader_lost = false,
            HealKind::Throttle => self.target.cond.throttled = false,
            HealKind::Timeouts(s) => self.net[ni(s)].timeouts_until = 0,
            HealKind::NoSpace => self.target.cond.no_space_alarm = false,
            HealKind::Latency(s) => self.net[ni(s)].slow_until = 0,
            HealKind::Resume => self.control_all(Control::Resume),
        }
    }

    fn cluster(&mut self, s: Side) -> &mut EtcdCluster {
        match s {
            Side::Source => &mut self.source,
            Side::Target => &mut self.target,
        }
    }

    fn apply_fault(&mut self, f: Fault) {
        let now = self.now;
        match f {
            Fault::Crash { agent, down_ms } => {
                let agent = agent.min(self.agents.len().saturating_sub(1) as u32);
                if self.crash(agent) {
                    self.push(
                        now + down_ms * MS,
                        Ev::Restart {
                            agent,
                            variant: None,
                        },
                    );
                }
            }
            Fault::Twin {
                for_ms,
                config_variant,
            } => {
                if self.agents.iter().filter(|a| a.alive()).count() >= 3 {
                    return;
                }
                let idx = self.agents.len() as u32;
                self.restart(idx, Some(config_variant));
                self.agents[idx as usize].retire_at = Some(now + for_ms * MS);
                self.push(now + for_ms * MS, Ev::Retire { agent: idx });
            }
            Fault::RestartWithConfig {
                agent,
                config_variant,
            } => {
                let agent = agent.min(self.agents.len().saturating_sub(1) as u32);
                if self.crash(agent) {
                    self.restart(agent, Some(config_variant));
                }
            }
            Fault::Partition { side, ms } => {
                self.net[ni(side)].partitioned_until = now + ms * MS;
                let failure = fail(Code::Unavailable, msg::UNAVAILABLE);
                if side == Side::Source {
                    let conns: Vec<ConnId> = self.agents.iter().map(|a| a.conn()).collect();
                    let mut out = Vec::new();
                    for c in conns {
                        self.source.break_conn(c, &failure, &mut out);
                    }
                    self.route(out);
                }
                self.push(now + ms * MS, Ev::Heal(HealKind::Partition(side)));
            }
            Fault::LeaderLoss { side, ms } => {
                let mut out = Vec::new();
                let failure = fail(Code::Unavailable, msg::NO_LEADER);
                let c = self.cluster(side);
                c.cond.leader_lost = true;
                c.break_all_watches(&failure, &mut out);
                self.route(out);
                self.push(now + ms * MS, Ev::Heal(HealKind::LeaderLoss(side)));
            }
            Fault::Throttle { ms } => {
                self.target.cond.throttled = true;
                self.push(now + ms * MS, Ev::Heal(HealKind::Throttle));
            }
            Fault::Timeouts { side, ms, percent } => {
                self.net[ni(side)].timeouts_until = now + ms * MS;
                self.net[ni(side)].timeout_pct = percent;
                self.push(now + ms * MS, Ev::Heal(HealKind::Timeouts(side)));
            }
            Fault::NoSpace { ms } => {
                self.target.cond.no_space_alarm = true;
                self.push(now + ms * MS, Ev::Heal(HealKind::NoSpace));
            }
            Fault::LatencySpike { side, ms, factor } => {
                self.net[ni(side)].slow_until = now + ms * MS;
                self.net[ni(side)].slow_factor = u64::from(factor);
                self.push(now + ms * MS, Ev::Heal(HealKind::Latency(side)));
            }
            Fault::Compact { behind } => {
                let rev = self.source.store.rev() - i64::from(behind);
                if rev > self.source.store.compact_rev() && self.source.compact(rev).is_ok() {
                    self.coverage.mark("model.compacted");
                }
            }
            Fault::CompactStorm { ms, every_ms } => {
                let rev = self.source.store.rev();
                if rev > self.source.store.compact_rev() && self.source.compact(rev).is_ok() {
                    self.coverage.mark("model.compacted");
                }
                if ms > every_ms {
                    self.push(
                        now + every_ms.max(1) * MS,
                        Ev::Storm {
                            left_ms: ms - every_ms,
                            every_ms,
                        },
                    );
                }
            }
            Fault::DriftDivergent { pick } => self.drift_existing(pick, false),
            Fault::DriftDelete { pick } => self.drift_existing(pick, true),
            Fault::DriftOrphan { pick } => {
                if !self.drift_allowed() {
                    return self.coverage.mark("drift.skipped");
                }
                let mut k = self.checker.oracle.target_base.clone();
                k.extend_from_slice(format!("zz-orphan/{pick:03}").as_bytes());
                self.drift_put(k, format!("orphan-{pick}").into_bytes(), true);
            }
            Fault::SiblingFence => {
                if !self.drift_allowed() || self.checker.drift.sibling.is_some() {
                    return self.coverage.mark("drift.skipped");
                }
                let mut k = self.checker.oracle.target_base.clone();
                k.extend_from_slice(b"sib/");
                k.extend_from_slice(DEFAULT_CHECKPOINT_SUFFIX.as_bytes());
                let value = Checkpoint {
                    v: CHECKPOINT_VERSION,
                    seq: 0,
                    link: "sibling-link".into(),
                    epoch: 1,
                    holder: "5151515151515151aaaaaaaaaaaaaaaa".into(),
                    role: Role::Mirror,
                    watermark: 1,
                    split: None,
                    scan: None,
                    prune_pending: false,
                    prune_floor: 0,
                    source_cluster: "sibling-source".into(),
                    target_cluster: "sibling-target".into(),
                    anchor: None,
                }
                .encode();
                let mut out = Vec::new();
                self.target.write(
                    &[Mutation::Put {
                        key: k.clone(),
                        value,
                        lease: 0,
                    }],
                    &mut out,
                );
                self.route(out);
                self.target_revs.push((now, self.target.store.rev()));
                self.checker.drift.sibling = Some((k, now));
                self.last_drift_ns = Some(now);
                self.coverage.mark("drift.sibling_fence");
            }
            Fault::DrainNow => {
                if self.drain_requested_at.is_none() {
                    self.drain_requested_at = Some(now);
                }
                self.control_all(Control::Drain);
            }
            Fault::ReconcileNow => self.control_all(Control::Reconcile),
            Fault::RestoreSource {
                back,
                overtake,
                down_ms,
            } => self.restore_source(back, overtake, down_ms),
            Fault::Pause { ms } => {
                self.paused_any = true;
                self.control_all(Control::Pause);
                self.push(now + ms * MS, Ev::Heal(HealKind::Resume));
            }
            Fault::WatchReset => {
                let failure = fail(
                    Code::Unavailable,
                    "rpc error: code = Unavailable desc = transport is closing",
                );
                let mut out = Vec::new();
                self.source.break_all_watches(&failure, &mut out);
                self.route(out);
            }
        }
    }

    /// Whether drift may be injected now: the initial sync is done (drift into a target
    /// being copied is what `initialSync.mode` is about) and no cut-over happened.
    fn drift_allowed(&self) -> bool {
        self.checker.primary_at.is_none()
            && self
                .checker
                .fence
                .as_ref()
                .is_some_and(|f| f.settled() && f.watermark > 0)
    }

    /// Overwrites (or deletes) one mirrored target key behind the mirror's back.
    fn drift_existing(&mut self, pick: u64, delete: bool) {
        if !self.drift_allowed() {
            return self.coverage.mark("drift.skipped");
        }
        let (base, end) = self.checker.oracle.target_range();
        let keys: Vec<Vec<u8>> = self
            .target
            .store
            .range_at(&base, &end, self.target.store.rev())
            .into_iter()
            .map(|kv| kv.key.clone())
            .filter(|k| {
                *k != self.checker.oracle.fence_key
                    && !self.checker.drift.orphans.contains(k)
                    && !self.checker.drift.skipped(k)
            })
            .collect();
        if keys.is_empty() {
            return self.coverage.mark("drift.skipped");
        }
        let k = keys[(pick % keys.len() as u64) as usize].clone();
        if delete {
            let m = Mutation::DeleteRange {
                key: k.clone(),
                end: Vec::new(),
            };
            self.drift_write(k, m, false);
        } else {
            self.drift_put(k, format!("drift-{}", pick % 1000).into_bytes(), false);
        }
    }

    fn drift_put(&mut self, key: Vec<u8>, value: Vec<u8>, orphan: bool) {
        let m = Mutation::Put {
            key: key.clone(),
            value,
            lease: 0,
        };
        self.drift_write(key, m, orphan);
    }

    /// Someone else's write `m` of `key`, straight into the target.
    fn drift_write(&mut self, key: Vec<u8>, m: Mutation, orphan: bool) {
        let mut out = Vec::new();
        self.target.write(&[m], &mut out);
        self.route(out);
        self.target_revs.push((self.now, self.target.store.rev()));
        self.checker.drift_write(&key, self.now, orphan);
        self.last_drift_ns = Some(self.now);
        self.coverage.mark("drift.injected");
    }

    /// An operator request to every running agent.
    fn control_all(&mut self, c: Control) {
        for a in 0..self.agents.len() as u32 {
            if self.agents[a as usize].alive() {
                self.deliver(a, Input::Control(c));
            }
        }
    }

    /// Whether the operator asked for a drain (now or by config).
    fn drain_requested(&self) -> bool {
        self.drain_requested_at.is_some() || self.opts.drain_from_start
    }

    fn begin_quiet(&mut self) {
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
            if self.expected_stop().is_some() {
                let reason = self.expected_stop().unwrap_or_default();
                self.end = Some(End::ExpectedStop { reason });
                return;
            }
            self.coverage.mark("supervisor.restart_in_quiet");
            self.operator_abandons();
            self.restart(0, None);
        }
        self.push(self.now, Ev::LivenessTick);
    }

    /// When the scenario makes a permanent stop the right answer.
    fn expected_stop(&self) -> Option<String> {
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
            return Some("RequireEmpty refused a non-empty target".into());
        }
        let stopped_with = |kind: FailKind| {
            self.agents.iter().any(
                |a| matches!(&a.stopped, Some(StopReason::Failed { kind: k, .. }) if *k == kind),
            )
        };
        if all_stopped && stopped_with(FailKind::PrefixConflict) && self.sibling_present() {
            return Some("PrefixConflict: another link's fence in the target range".into());
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
            return Some("drain refused: orphans and no deleteOrphans".into());
        }
        if all_stopped {
            return self.history_expected_stop();
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

    fn check_liveness(&mut self) {
        if let Some(reason) = self.expected_stop() {
            self.end = Some(End::ExpectedStop { reason });
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

    /// Kills an agent process. Returns whether it was running.
    fn crash(&mut self, agent: u32) -> bool {
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
    fn harvest(&mut self, agent: u32) {
        let Some(r) = self.agents[agent as usize].replicator.as_ref() else {
            return;
        };
        let s = r.status();
        self.coverage
            .add("core.forced_resync", s.forced_resync_count);
        self.coverage.add("core.scan_restart", s.scan_restart_count);
        self.coverage
            .add("core.own_late_write_adopted", s.own_late_writes_adopted);
        self.coverage
            .add("core.split_revision", s.split_revision_count);
        self.coverage.add("core.pruned_keys", s.pruned_keys);
        self.coverage.add("core.applied_txns", s.applied_txns);
    }

    fn restart(&mut self, agent: u32, variant: Option<u32>) {
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

    fn deliver(&mut self, agent: u32, input: Input) {
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

    fn drive(&mut self, agent: u32) {
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

    /// Checks the drain's bounded silence for a running core agent in a drain.
    fn check_drain(&mut self, agent: u32) {
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

    fn on_stopped(&mut self, agent: u32, reason: StopReason) {
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

    /// The driver: sends one command over the network.
    fn send(&mut self, agent: u32, id: u64, cmd: Command) {
        let cluster = cluster_of(&cmd);
        let side = side_of(cluster);
        let inc = self.agents[agent as usize].incarnation;
        self.agents[agent as usize].in_flight.insert(id);
        let lat = self.latency(side);
        match &cmd {
            Command::CancelWatch { watch_id } => {
                self.agents[agent as usize].cancelled.insert(*watch_id);
            }
            Command::Watch(w) => {
                self.agents[agent as usize].cancelled.remove(&w.watch_id);
            }
            _ => {}
        }
        let is_unary = matches!(
            cmd,
            Command::Status { .. } | Command::Range(_) | Command::Txn(_)
        );
        if self.net[ni(side)].partitioned_until > self.now {
            self.coverage.mark("net.refused");
            let result = Err(fail(Code::Unavailable, msg::UNAVAILABLE));
            self.push(
                self.now + 2 * lat,
                Ev::Reply {
                    agent,
                    inc,
                    id,
                    result,
                },
            );
            return;
        }
        let mut cmd = cmd;
        if let Command::Txn(t) = &mut cmd {
            // Before the network decides the request's fate: a page that arrives late goes
            // without its compare too.
            if self.opts.faulty == Some(FaultyMode::UnfencedPages)
                && is_page(t, &self.checker.oracle.fence_key)
            {
                t.compares.clear();
                self.coverage.mark("faulty.page_compare_dropped");
            }
        }
        let mut deadline_at = None;
        let n = &self.net[ni(side)];
        if is_unary && n.timeouts_until > self.now && self.rng.below(100) < u64::from(n.timeout_pct)
        {
            let timeout = self.agents[agent as usize]
                .config
                .sync
                .request_timeout
                .as_nanos() as u64;
            let applied = self.rng.below(2) == 0;
            let at = self.now + timeout;
            if applied && self.opts.late_applies {
                // The driver gives up first; the request reaches the server afterwards (a
                // queue in front of raft) and applies, with nobody left to hear the reply.
                self.coverage.mark("net.deadline_applied_late");
                self.reply_deadline(at, agent, inc, id);
                // Up to three timeouts late: past the fence read, the retry's backoff and,
                // often, a different next write (a NOSPACE park, a resync).
                let arrive_at = at + 1 + self.rng.below(3 * timeout.max(1));
                let basis = self.txn_basis(agent, &cmd);
                self.push(
                    arrive_at,
                    Ev::Arrive {
                        agent,
                        inc,
                        id,
                        cmd,
                        deadline_at: Some(LATE),
                        basis,
                    },
                );
                return;
            }
            if applied {
                self.coverage.mark("net.deadline_applied");
                deadline_at = Some(at);
            } else {
                self.coverage.mark("net.deadline_not_applied");
                self.reply_deadline(at, agent, inc, id);
                return;
            }
        }
        if let Command::Txn(t) = &mut cmd {
            if self.opts.faulty == Some(FaultyMode::DropFenceCompare) && !t.compares.is_empty() {
                t.compares.clear();
                self.coverage.mark("faulty.fence_compare_dropped");
            }
            if self.opts.faulty == Some(FaultyMode::CompareChainStart) {
                self.compare_chain_start(agent, id, t);
            }
        }
        let basis = self.txn_basis(agent, &cmd);
        self.push(
            self.now + lat,
            Ev::Arrive {
                agent,
                inc,
                id,
                cmd,
                deadline_at,
                basis,
            },
        );
    }

    /// The source history a command is judged against: the agent's basis now, or, for a
    /// Txn that installs a record this incarnation already sent, the basis it was first
    /// sent with. The core re-sends a Txn unchanged when it reached the server before its
    /// predecessor (docs/design.md, "Pipelined commits"); whether the first copy applied
    /// depends only on arrival order, so both copies are one commit, built from what the
    /// agent knew when it first sent it.
    fn txn_basis(&mut self, agent: u32, cmd: &Command) -> u32 {
        let fence_key = &self.checker.oracle.fence_key;
        let a = &mut self.agents[agent as usize];
        let Command::Txn(t) = cmd else {
            return a.source_epoch;
        };
        let record = t.success.iter().find_map(|op| match op {
            TxnOp::Put { key, value } if key == fence_key => Some(value.clone()),
            _ => None,
        });
        let Some(record) = record else {
            return a.source_epoch;
        };
        if let Some((_, b)) = a.sent_records.iter().find(|(r, _)| *r == record) {
            return *b;
        }
        a.sent_records.push_back((record, a.source_epoch));
        // More than the deepest chain (64 Txns in flight).
        if a.sent_records.len() > 256 {
            a.sent_records.pop_front();
        }
        a.source_epoch
    }

    /// The driver's deadline fires at `at` for request `id`.
    fn reply_deadline(&mut self, at: u64, agent: u32, inc: u32, id: u64) {
        let result = Err(fail(Code::DeadlineExceeded, msg::DEADLINE));
        self.push(
            at,
            Ev::Reply {
                agent,
                inc,
                id,
                result,
            },
        );
    }

    /// A request reaches its cluster.
    fn arrive(
        &mut self,
        agent: u32,
        inc: u32,
        id: u64,
        cmd: Command,
        deadline_at: Option<u64>,
        basis: u32,
    ) {
        let cluster = cluster_of(&cmd);
        let side = side_of(cluster);
        let conn = (u64::from(agent) << 32) | u64::from(inc);
        let lat = self.latency(side);
        let late = deadline_at == Some(LATE);
        if late
            && (self.net[ni(side)].partitioned_until > self.now || !matches!(cmd, Command::Txn(_)))
        {
            // Lost on the way after all; its deadline reply is already delivered.
            return;
        }
        if self.net[ni(side)].partitioned_until > self.now {
            self.coverage.mark("net.refused");
            let result = Err(fail(Code::Unavailable, msg::UNAVAILABLE));
            self.push(
                self.now + lat,
                Ev::Reply {
                    agent,
                    inc,
                    id,
                    result,
                },
            );
            return;
        }
        // A watch request from a crashed process never opens a stream.
        if matches!(cmd, Command::Watch(_)) && self.agents[agent as usize].incarnation != inc {
            return;
        }
        let mut out = Vec::new();
        let result = match &cmd {
            Command::Txn(t) => {
                if let Some(r) = self.faulty_txn(agent, inc, id, t) {
                    r
                } else {
                    self.apply_txn(agent, inc, t, basis, &mut out)
                }
            }
            Command::Range(r) if self.stale_proof_applies(r) => self.stale_proof(r),
            _ => {
                if let Command::Range(r) = &cmd {
                    if r.cluster == Cluster::Source && self.restores.blind_proof(r) {
                        self.coverage.mark("restore.proof_in_shared_history");
                    }
                }
                let c = match cluster {
                    Cluster::Source => &mut self.source,
                    Cluster::Target => &mut self.target,
                };
                c.execute(conn, &cmd, &mut out)
            }
        };
        if let Err(f) = &result {
            self.coverage
                .mark(&format!("model.err.{}.{}", side_name(side), f.label()));
        }
        if late {
            self.coverage.mark("net.late_apply_arrived");
            if matches!(&cmd, Command::Txn(t) if is_page(t, &self.checker.oracle.fence_key)) {
                self.coverage.mark("page.late_apply_arrived");
            }
            self.route(out);
            return;
        }
        let result = if deadline_at.is_some() {
            Err(fail(Code::DeadlineExceeded, msg::DEADLINE))
        } else {
            result
        };
        if cluster == Cluster::Source && matches!(result, Ok(Reply::Range(_))) {
            self.restores.tag_reply((agent, inc, id));
        }
        let reply_at = deadline_at.unwrap_or(self.now + lat);
        match &cmd {
            Command::Watch(w) => {
                // The start reply travels on the stream, before its first events.
                let at = self.stream_time(conn, w.watch_id, reply_at);
                self.push(
                    at,
                    Ev::Reply {
                        agent,
                        inc,
                        id,
                        result,
                    },
                );
            }
            Command::RequestProgress { watch_id } | Command::CancelWatch { watch_id } => {
                let at = self.stream_time(conn, *watch_id, reply_at);
                self.push(
                    at,
                    Ev::Reply {
                        agent,
                        inc,
                        id,
                        result,
                    },
                );
            }
            _ => self.push(
                reply_at,
                Ev::Reply {
                    agent,
                    inc,
                    id,
                    result,
                },
            ),
        }
        self.route(out);
    }

    fn apply_txn(
        &mut self,
        agent: u32,
        inc: u32,
        t: &TxnRequest,
        basis: u32,
        out: &mut Vec<WatchOut>,
    ) -> Result<Reply, Failure> {
        if self.target.cond.leader_lost {
            return Err(fail(Code::Unavailable, msg::NO_LEADER));
        }
        let before = self.target.store.rev();
        let r = self.target.txn(t, out)?;
        if !r.succeeded {
            self.coverage.mark("model.txn_compare_failed");
        }
        if is_page(t, &self.checker.oracle.fence_key) {
            self.coverage.mark(if r.succeeded {
                "page.applied"
            } else {
                "page.compare_failed"
            });
        }
        if self.target.store.rev() != before {
            let ops = if r.succeeded { &t.success } else { &t.failure };
            let cfg = &self.agents[agent as usize].config;
            let who = Issuer {
                agent,
                incarnation: inc,
                mode: cfg.initial_sync.mode,
                delete_orphans: cfg.reconciliation.delete_orphans,
                epoch: basis,
                abandon: cfg.initial_sync.abandon_watermark,
                holder: self.holders.get(&(agent, inc)).cloned().unwrap_or_default(),
                claim: is_claim(t, &self.checker.oracle.fence_key),
            };
            if basis < self.restores.epoch {
                self.coverage.mark("restore.commit_judged_in_old_history");
            }
            let was_primary = self.checker.primary_at.is_some();
            if r.succeeded {
                self.faulty.last_commit.insert(agent, (inc, t.clone()));
            }
            let source = self.restores.store_for(basis, &self.source.store);
            if let Err(v) = self
                .checker
                .on_commit(self.now, &who, ops, source, &self.target.store)
            {
                self.violate(v);
            }
            self.target_revs.push((self.now, self.target.store.rev()));
            if !was_primary && self.checker.primary_at.is_some() {
                self.flip_since = self.agents[agent as usize].last_pass_start.unwrap_or(0);
                self.coverage.mark("drain.flipped_primary");
            }
            self.after_commit();
        }
        Ok(Reply::Txn(r))
    }

    fn after_commit(&mut self) {
        if self.quiet && self.end.is_none() {
            self.check_liveness();
        }
        // ApplyTwiceAfterCrash: once the restarted process has moved the watermark past the
        // crashed one's last commit, the driver "retries" that commit unfenced.
        if let Some((agent, inc, req, wm)) = self.faulty.replay.clone() {
            let moved = self
                .checker
                .fence
                .as_ref()
                .is_some_and(|f| f.settled() && f.watermark > wm);
            if moved {
                self.faulty.replay = None;
                self.faulty.replayed = true;
                self.coverage.mark("faulty.applied_twice");
                let mut t = req;
                t.compares.clear();
                let mut out = Vec::new();
                let basis = self.restores.epoch;
                let _ = self.apply_txn(agent, inc, &t, basis, &mut out);
                self.route(out);
            }
        }
    }

    /// CompareChainStart: a Txn sent behind others of its agent compares what the first
    /// of them compared.
    fn compare_chain_start(&mut self, agent: u32, id: u64, t: &mut TxnRequest) {
        let Some(c) = t
            .compares
            .iter_mut()
            .find(|c| c.target == tidemark_core::etcd::CompareTarget::Value)
        else {
            return;
        };
        let (base, ids) = self.faulty.chains.entry(agent).or_default();
        if ids.is_empty() {
            *base = c.bytes.clone();
        } else if c.bytes != *base {
            c.bytes = base.clone();
            self.coverage.mark("faulty.chain_compare_rewritten");
        }
        ids.insert(id);
    }

    /// ReorderCommits: returns a canned reply when the driver interferes with this Txn.
    fn faulty_txn(
        &mut self,
        agent: u32,
        inc: u32,
        id: u64,
        t: &TxnRequest,
    ) -> Option<Result<Reply, Failure>> {
        if self.opts.faulty != Some(FaultyMode::ReorderCommits) || self.faulty.reordered {
            return None;
        }
        let fence_key = self.checker.oracle.fence_key.clone();
        let wm = t.success.iter().find_map(|op| match op {
            TxnOp::Put { key, value } if *key == fence_key => Fence::parse(value),
            _ => None,
        })?;
        if !wm.settled() {
            return None;
        }
        match self.faulty.held.take() {
            None => {
                if self.checker.fence.as_ref().is_none_or(|f| !f.settled()) {
                    return None;
                }
                self.faulty.held = Some((agent, inc, id, t.clone(), wm.watermark));
                self.coverage.mark("faulty.held_commit");
                Some(Ok(Reply::Txn(TxnReply {
                    succeeded: true,
                    header_revision: self.target.store.rev() + 1,
                    reads: vec![],
                })))
            }
            Some((ha, hi, _hid, held, hwm)) => {
                if wm.watermark <= hwm || ha != agent {
                    self.faulty.held = Some((ha, hi, _hid, held, hwm));
                    self.release_held();
                    return None;
                }
                self.faulty.reordered = true;
                self.coverage.mark("faulty.reordered");
                let mut t2 = t.clone();
                t2.compares.clear();
                let mut out = Vec::new();
                let basis = self.restores.epoch;
                let r = self.apply_txn(agent, inc, &t2, basis, &mut out);
                let mut t1 = held;
                t1.compares.clear();
                let _ = self.apply_txn(ha, hi, &t1, basis, &mut out);
                self.route(out);
                Some(r)
            }
        }
    }

    fn release_held(&mut self) {
        if let Some((a, i, _id, mut t, _)) = self.faulty.held.take() {
            t.compares.clear();
            let mut out = Vec::new();
            let basis = self.restores.epoch;
            let _ = self.apply_txn(a, i, &t, basis, &mut out);
            self.route(out);
        }
    }

    /// DropWatchEvent: drops one event of one response once the tail is settled.
    fn faulty_watch(&mut self, event: WatchEvent) -> WatchEvent {
        if self.opts.faulty != Some(FaultyMode::DropWatchEvent) || self.faulty.dropped_event {
            return event;
        }
        match event {
            WatchEvent::Events {
                header_revision,
                mut events,
            } if self
                .checker
                .fence
                .as_ref()
                .is_some_and(|f| f.settled() && f.watermark > 0) =>
            {
                let o = &self.checker.oracle;
                if let Some(i) = events.iter().position(|e| o.rewrite(&e.kv.key).is_some()) {
                    events.remove(i);
                    self.faulty.dropped_event = true;
                    self.coverage.mark("faulty.dropped_event");
                }
                WatchEvent::Events {
                    header_revision,
                    events,
                }
            }
            e => e,
        }
    }

    fn stream_time(&mut self, conn: ConnId, watch_id: u64, at: u64) -> u64 {
        let e = self.watch_clock.entry((conn, watch_id)).or_insert(0);
        *e = (*e).max(at);
        *e
    }

    /// Schedules what the clusters sent on watch streams.
    fn route(&mut self, out: Vec<WatchOut>) {
        for o in out {
            match &o.event {
                WatchEvent::Cancelled { .. } => {
                    self.coverage.mark("model.watch_cancelled_compacted")
                }
                WatchEvent::Progress { .. } => self.coverage.mark("model.progress"),
                WatchEvent::Failed { .. } => self.coverage.mark("model.watch_failed"),
                WatchEvent::Events { events, .. } if events.len() > 127 => {
                    self.coverage.mark("model.big_watch_response")
                }
                WatchEvent::Events { .. } => {}
            }
            let lat = self.latency(Side::Source);
            let at = self.stream_time(o.conn, o.watch_id, self.now + lat);
            self.push(
                at,
                Ev::Watch {
                    conn: o.conn,
                    watch_id: o.watch_id,
                    event: o.event,
                    epoch: self.restores.epoch,
                },
            );
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

fn side_name(s: Side) -> &'static str {
    match s {
        Side::Source => "source",
        Side::Target => "target",
    }
}

/// Whether a Txn is a claim: it compares the fence key's mod or create revision (what the
/// agent read), not the value of a record it installed before.
fn is_claim(t: &TxnRequest, fence_key: &[u8]) -> bool {
    let on_fence: Vec<_> = t.compares.iter().filter(|c| c.key == fence_key).collect();
    !on_fence.is_empty()
        && on_fence.iter().all(|c| {
            matches!(
                c.target,
                tidemark_core::etcd::CompareTarget::ModRevision
                    | tidemark_core::etcd::CompareTarget::CreateRevision
            )
        })
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

/// Whether a target Txn is a genesis page: it writes data but not the fence.
fn is_page(t: &TxnRequest, fence_key: &[u8]) -> bool {
    !t.success.is_empty()
        && !t
            .success
            .iter()
            .any(|op| matches!(op, TxnOp::Put { key, .. } if key.as_slice() == fence_key))
}
