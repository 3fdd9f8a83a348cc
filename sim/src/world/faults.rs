//! What each scheduled fault does to the world: partitions, leader loss, throttling,
//! timeouts, latency spikes, compactions, agent crashes and twins, operator controls, and
//! drift injected straight into the target; plus healing each timed fault when it ends.
//! The network and the clusters only read the conditions set here.

use super::{ni, Ev, World, MS};
use crate::model::etcd::{fail, msg, ConnId};
use crate::model::{EtcdCluster, Mutation};
use crate::schedule::{Fault, Side};
use tidemark_core::classify::Code;
use tidemark_core::config::DEFAULT_CHECKPOINT_SUFFIX;
use tidemark_core::mirror::checkpoint::VERSION as CHECKPOINT_VERSION;
use tidemark_core::mirror::{Checkpoint, Control, Input, Role};

/// The end of a timed fault, scheduled as [`Ev::Heal`] when the fault begins.
#[derive(Debug, Clone, Copy)]
pub(super) enum HealKind {
    Partition(Side),
    LeaderLoss(Side),
    Throttle,
    Timeouts(Side),
    NoSpace,
    Latency(Side),
    /// The operator resumes the paused agents.
    Resume,
}

impl World {
    pub(super) fn heal(&mut self, h: HealKind) {
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

    pub(super) fn apply_fault(&mut self, f: Fault) {
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
    pub(super) fn control_all(&mut self, c: Control) {
        for a in 0..self.agents.len() as u32 {
            if self.agents[a as usize].alive() {
                self.deliver(a, Input::Control(c));
            }
        }
    }
}
