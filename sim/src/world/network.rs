//! The network between the agents and the clusters: latency, partitions and request
//! timeouts; sending a command, its arrival at the cluster and the reply travelling back;
//! and watch streams, whose messages keep their order per stream.

use super::commit::is_page;
use super::{ni, Ev, World, LATE};
use crate::model::etcd::{fail, msg, ConnId};
use crate::model::WatchOut;
use crate::schedule::{FaultyMode, Side};
use tidemark_core::classify::Code;
use tidemark_core::etcd::{Cluster, Command, Reply, TxnOp, WatchEvent};

/// One side's network conditions, set by faults and cleared when they heal.
#[derive(Debug, Clone, Default)]
pub(super) struct Net {
    pub(super) partitioned_until: u64,
    pub(super) timeouts_until: u64,
    pub(super) timeout_pct: u32,
    pub(super) slow_until: u64,
    pub(super) slow_factor: u64,
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

impl World {
    fn latency(&mut self, side: Side) -> u64 {
        let (lo, hi) = self.opts.latency_us;
        let mut l = (lo + self.rng.below(hi - lo + 1)) * 1_000;
        let n = &self.net[ni(side)];
        if n.slow_until > self.now {
            l *= n.slow_factor.max(1);
        }
        l
    }

    /// The driver: sends one command over the network.
    pub(super) fn send(&mut self, agent: u32, id: u64, cmd: Command) {
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
    pub(super) fn arrive(
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

    fn stream_time(&mut self, conn: ConnId, watch_id: u64, at: u64) -> u64 {
        let e = self.watch_clock.entry((conn, watch_id)).or_insert(0);
        *e = (*e).max(at);
        *e
    }

    /// Schedules what the clusters sent on watch streams.
    pub(super) fn route(&mut self, out: Vec<WatchOut>) {
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

fn side_name(s: Side) -> &'static str {
    match s {
        Side::Source => "source",
        Side::Target => "target",
    }
}
