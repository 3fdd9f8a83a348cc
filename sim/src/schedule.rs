//! Run options and fault schedules: drawn from a seed (swarm-style), or read from a file.
//!
//! A [`Schedule`] is everything a run depends on besides the code: the seed (which also
//! drives the workload, latencies and agent nonces), the expanded options, and the explicit
//! list of timed faults. Saving it and running it again reproduces the run byte for byte.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tidemark_core::config::InitialSyncMode;
use tidemark_core::rng::Rng;

/// Which replicator the agents run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ReplicatorKind {
    /// The real `tidemark_core::mirror::Mirror`.
    #[default]
    Core,
    /// The simulator's own test double ([`crate::reference`]); validates the checker.
    Reference,
}

/// Deliberate driver bugs that the checker must catch (the simulator's "teeth").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FaultyMode {
    /// Strip the fence compare from every target Txn.
    DropFenceCompare,
    /// Ack one commit without applying it, then apply it after the next one.
    ReorderCommits,
    /// Drop one event from one watch response.
    DropWatchEvent,
    /// After a crash, apply the crashed agent's last commit once more.
    ApplyTwiceAfterCrash,
    /// A lying stale replica: the source-history proof read (a single-key source Range,
    /// empty `range_end`, `limit: 1`, not `count_only`) is answered from a copy of the source
    /// taken just before the most recent [`Fault::RestoreSource`], so a proof that should
    /// fail passes. Needs the real core and a restore fault to bite.
    StaleHistoryProof,
    /// A chain-breaking driver: every fenced Txn sent while others of its agent are in
    /// flight compares the record the first of them compared (the start of the chain),
    /// not the record its predecessor installs. Needs the real core (it pipelines).
    CompareChainStart,
    /// An unfenced-page driver: every genesis page Txn (a Txn that does not write the
    /// fence) is sent without its compare of the fence's mod revision, so a page that
    /// arrives late applies after a takeover, a cursor write or the end of the genesis.
    /// Needs the real core (it writes order-free pages) and late applies to bite.
    UnfencedPages,
}

impl FaultyMode {
    /// Every mode.
    pub const ALL: [FaultyMode; 7] = [
        FaultyMode::DropFenceCompare,
        FaultyMode::ReorderCommits,
        FaultyMode::DropWatchEvent,
        FaultyMode::ApplyTwiceAfterCrash,
        FaultyMode::StaleHistoryProof,
        FaultyMode::CompareChainStart,
        FaultyMode::UnfencedPages,
    ];

    /// The coverage mark the simulator sets when the mode actually broke something, so a
    /// teeth test can tell "caught" from "never acted".
    pub fn acted_mark(self) -> &'static str {
        match self {
            FaultyMode::DropFenceCompare => "faulty.fence_compare_dropped",
            FaultyMode::ReorderCommits => "faulty.reordered",
            FaultyMode::DropWatchEvent => "faulty.dropped_event",
            FaultyMode::ApplyTwiceAfterCrash => "faulty.applied_twice",
            FaultyMode::StaleHistoryProof => "faulty.stale_history_proof",
            FaultyMode::CompareChainStart => "faulty.chain_compare_rewritten",
            FaultyMode::UnfencedPages => "faulty.page_compare_dropped",
        }
    }

    /// Whether the mode only shows against the real core (the reference double makes no
    /// source-history proof, so a lie about one changes nothing).
    pub fn needs_core(self) -> bool {
        matches!(
            self,
            FaultyMode::StaleHistoryProof
                | FaultyMode::CompareChainStart
                | FaultyMode::UnfencedPages
        )
    }
}

/// Which cluster a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Side {
    Source,
    Target,
}

/// One fault; durations are simulated milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Fault {
    /// Kill an agent (everything in flight is lost); a fresh core starts after `down_ms`.
    Crash { agent: u32, down_ms: u64 },
    /// Start a second agent on the same link, running until `for_ms` elapses (then crashed).
    Twin { for_ms: u64, config_variant: u32 },
    /// Crash the agent and restart it at once with a changed config (same link).
    RestartWithConfig { agent: u32, config_variant: u32 },
    /// Agent <-> cluster traffic fails with Unavailable; watches break.
    Partition { side: Side, ms: u64 },
    /// The cluster has no leader: requests fail, require-leader watches break.
    LeaderLoss { side: Side, ms: u64 },
    /// A share of target Txns fail with "too many requests".
    Throttle { ms: u64 },
    /// A share of requests time out; writes may or may not have applied.
    Timeouts { side: Side, ms: u64, percent: u32 },
    /// The target's NOSPACE alarm is raised for `ms`.
    NoSpace { ms: u64 },
    /// Latency multiplied for `ms`.
    LatencySpike { side: Side, ms: u64, factor: u32 },
    /// Compact the source, to `behind` revisions before the current one (0 = aggressive).
    Compact { behind: u32 },
    /// The watch stream of every agent breaks once (transient).
    WatchReset,
    /// Aggressive compactions every `every_ms` for `ms`: drives repeated forced resyncs
    /// (the `ResyncLoopDetected` path).
    CompactStorm { ms: u64, every_ms: u64 },
    /// Drift: someone overwrites a mirrored target key (picked by `pick`) directly.
    DriftDivergent { pick: u64 },
    /// Drift: someone deletes a mirrored target key (picked by `pick`) directly.
    DriftDelete { pick: u64 },
    /// Drift: someone creates a target key in the mirrored range that the source never has.
    DriftOrphan { pick: u64 },
    /// Another link's fence appears inside this link's target range (overlapping links).
    SiblingFence,
    /// The operator asks for a drain (`Control::Drain`, then `mode: Drain` for every
    /// process started later).
    DrainNow,
    /// The operator asks for a reconciliation pass now.
    ReconcileNow,
    /// The operator pauses every running agent for `ms`.
    Pause { ms: u64 },
    /// The source is restored from an older snapshot and restarted: same cluster and member
    /// IDs, MVCC state and revision rewound to `back` revisions before the current one
    /// (compact revision at most that), every watch stream broken and every request refused
    /// for `down_ms`. The workload goes on writing the new history; with `overtake` it first
    /// writes until the new history is past the old revision, before any agent can see it.
    RestoreSource {
        back: u32,
        overtake: bool,
        down_ms: u64,
    },
}

impl Fault {
    /// The coverage name of this fault kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Crash { .. } => "crash",
            Fault::Twin { .. } => "twin",
            Fault::RestartWithConfig { .. } => "restart_with_config",
            Fault::Partition { .. } => "partition",
            Fault::LeaderLoss { .. } => "leader_loss",
            Fault::Throttle { .. } => "throttle",
            Fault::Timeouts { .. } => "timeouts",
            Fault::NoSpace { .. } => "no_space",
            Fault::LatencySpike { .. } => "latency_spike",
            Fault::Compact { behind: 0 } => "compact_aggressive",
            Fault::Compact { .. } => "compact",
            Fault::WatchReset => "watch_reset",
            Fault::CompactStorm { .. } => "compact_storm",
            Fault::DriftDivergent { .. } => "drift_divergent",
            Fault::DriftDelete { .. } => "drift_delete",
            Fault::DriftOrphan { .. } => "drift_orphan",
            Fault::SiblingFence => "sibling_fence",
            Fault::DrainNow => "drain",
            Fault::ReconcileNow => "reconcile_now",
            Fault::Pause { .. } => "pause",
            Fault::RestoreSource { .. } => "restore_source",
        }
    }

    /// Every fault kind name: the first swarm's, the controls', the history's.
    pub fn all_kinds() -> impl Iterator<Item = &'static str> {
        Fault::KINDS
            .into_iter()
            .chain(Fault::CONTROL_KINDS)
            .chain(Fault::HISTORY_KINDS)
    }

    /// Whether the fault edits the target range behind the mirror's back.
    pub fn is_drift(&self) -> bool {
        matches!(
            self,
            Fault::DriftDivergent { .. }
                | Fault::DriftDelete { .. }
                | Fault::DriftOrphan { .. }
                | Fault::SiblingFence
        )
    }

    /// The kinds drawn by the second swarm (drift and operator controls), for coverage.
    pub const CONTROL_KINDS: [&'static str; 7] = [
        "drift_divergent",
        "drift_delete",
        "drift_orphan",
        "sibling_fence",
        "drain",
        "reconcile_now",
        "pause",
    ];

    /// The kinds drawn by the third swarm (the source's history), for coverage.
    pub const HISTORY_KINDS: [&'static str; 1] = ["restore_source"];

    /// Every fault kind name, for coverage tables.
    pub const KINDS: [&'static str; 13] = [
        "crash",
        "twin",
        "restart_with_config",
        "partition",
        "leader_loss",
        "throttle",
        "timeouts",
        "no_space",
        "latency_spike",
        "compact",
        "compact_aggressive",
        "watch_reset",
        "compact_storm",
    ];
}

/// A fault at a simulated time (milliseconds from the start).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimedFault {
    pub at_ms: u64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// The source workload's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadOptions {
    /// Mean source operations per simulated second.
    pub ops_per_s: u32,
    /// Distinct in-scope keys the workload touches.
    pub keys: u32,
    /// Keys written before the first agent starts.
    pub preload: u32,
    /// Relative weights of the operation kinds.
    pub w_put: u32,
    pub w_delete: u32,
    pub w_txn: u32,
    pub w_bulk: u32,
    pub w_delete_range: u32,
    pub w_large: u32,
    pub w_lease: u32,
    pub w_out_of_scope: u32,
    pub w_excluded: u32,
    /// Largest multi-op Txn (etcd's limit is 128).
    pub max_txn_ops: u32,
    /// Keys created by one bulk load, deleted later by one DeleteRange (<= 1000).
    pub bulk_keys: u32,
}

/// Everything about a run except the fault list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    pub seed: u64,
    pub replicator: ReplicatorKind,
    /// Length of the safety phase (workload and faults), simulated ms.
    pub safety_ms: u64,
    /// Bound on the quiet liveness phase, simulated ms.
    pub liveness_ms: u64,
    pub source_version: String,
    pub target_version: String,
    pub initial_mode: InitialSyncMode,
    pub dest_prefix: String,
    pub exclude_prefixes: Vec<String>,
    /// Foreign keys placed in the target range before the agent starts.
    pub junk_keys: u32,
    /// Config variant of the first agent (see [`crate::agent::config_for`]).
    pub config_variant: u32,
    pub workload: WorkloadOptions,
    /// One-way network latency range, microseconds.
    pub latency_us: (u64, u64),
    /// Server-side periodic progress notification interval, ms.
    pub progress_notify_ms: u64,
    /// Swarm draw: faults per simulated minute, by kind (informational after expansion).
    pub fault_rates: BTreeMap<String, f64>,
    /// A deliberately broken driver, for teeth tests.
    pub faulty: Option<FaultyMode>,
    /// Periodic reconciliation for every agent (overrides the config variant's); None keeps
    /// each variant's own setting.
    #[serde(default)]
    pub reconcile: Option<ReconcileOptions>,
    /// Every agent runs with `mode: Drain` from the start.
    #[serde(default)]
    pub drain_from_start: bool,
    /// Some writes that time out reach the server only after the driver gave up (queued,
    /// not yet proposed), so the agent's fence read cannot see them and they apply later.
    #[serde(default)]
    pub late_applies: bool,
}

/// The reconciliation settings of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconcileOptions {
    pub interval_ms: u64,
    pub delete_orphans: bool,
}

/// A complete, replayable run description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub options: Options,
    pub faults: Vec<TimedFault>,
}

const VERSIONS: [&str; 7] = [
    "3.4.30", "3.4.31", "3.5.12", "3.5.13", "3.5.17", "3.5.21", "3.6.4",
];

fn pick<'a, T>(rng: &mut Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.below(xs.len() as u64) as usize]
}

fn chance(rng: &mut Rng, p: f64) -> bool {
    rng.unit() < p
}

impl Schedule {
    /// Draws options and faults from `seed`, swarm-style: the seed first decides which
    /// fault kinds are enabled and how often they strike, then draws the faults.
    pub fn generate(seed: u64, replicator: ReplicatorKind) -> Schedule {
        let mut rng = Rng::new(seed ^ 0x5c4e_d01e);
        let initial_mode = match rng.below(4) {
            0 => InitialSyncMode::Overwrite,
            1 => InitialSyncMode::OverwriteAndPrune,
            _ => InitialSyncMode::RequireEmpty,
        };
        let junk_keys = match initial_mode {
            InitialSyncMode::OverwriteAndPrune if chance(&mut rng, 0.5) => 1 + rng.below(20) as u32,
            InitialSyncMode::RequireEmpty if chance(&mut rng, 0.05) => 1 + rng.below(3) as u32,
            _ => 0,
        };
        let heavy = chance(&mut rng, 0.2);
        let workload = WorkloadOptions {
            ops_per_s: [2, 10, 40, 150][rng.below(4) as usize],
            keys: [10, 50, 200, 600][rng.below(4) as usize],
            preload: [0, 20, 300][rng.below(3) as usize],
            w_put: 20,
            w_delete: 1 + rng.below(8) as u32,
            w_txn: rng.below(6) as u32,
            w_bulk: if heavy { 1 } else { 0 },
            w_delete_range: rng.below(4) as u32,
            w_large: if chance(&mut rng, 0.15) { 1 } else { 0 },
            w_lease: rng.below(4) as u32,
            w_out_of_scope: rng.below(6) as u32,
            w_excluded: rng.below(3) as u32,
            max_txn_ops: if heavy { 128 } else { 16 },
            bulk_keys: if heavy {
                200 + rng.below(801) as u32
            } else {
                0
            },
        };
        let safety_ms = 20_000 + rng.below(100_000);
        let mut options = Options {
            seed,
            replicator,
            safety_ms,
            liveness_ms: 900_000,
            source_version: pick(&mut rng, &VERSIONS).to_string(),
            target_version: pick(&mut rng, &VERSIONS).to_string(),
            initial_mode,
            dest_prefix: if chance(&mut rng, 0.5) {
                String::new()
            } else {
                "east/".into()
            },
            exclude_prefixes: if chance(&mut rng, 0.5) {
                vec!["skip/".into()]
            } else {
                vec![]
            },
            junk_keys,
            config_variant: rng.below(6) as u32,
            workload,
            latency_us: {
                let lo = 100 + rng.below(2_000);
                (lo, lo + rng.below(20_000))
            },
            progress_notify_ms: [2_000, 10_000, 60_000, 600_000][rng.below(4) as usize],
            fault_rates: BTreeMap::new(),
            faulty: None,
            reconcile: None,
            drain_from_start: false,
            late_applies: false,
        };
        // Swarm: each kind enabled with probability 1/2, at a rate of 0.2..4 per minute.
        for kind in Fault::KINDS {
            if chance(&mut rng, 0.5) {
                let rate = 0.2 + rng.unit() * 3.8;
                options
                    .fault_rates
                    .insert(kind.to_string(), (rate * 100.0).round() / 100.0);
            }
        }
        let mut faults = draw_faults(&mut rng, &options);
        // A second swarm with its own stream, so the draws above (and older seeds' shapes)
        // do not move: reconciliation, drift behind the mirror's back, operator controls.
        // The reference double implements neither reconciliation nor drain.
        if replicator == ReplicatorKind::Core {
            let mut rng2 = Rng::new(seed ^ 0xd21f_7c0d);
            draw_controls(&mut rng2, &mut options, &mut faults);
            // A third stream, for the same reason.
            let mut rng3 = Rng::new(seed ^ 0x1a7e_a991);
            options.late_applies = chance(&mut rng3, 0.5);
            // A fourth: the source restored from an older snapshot. Seeds that draw none
            // keep their schedule (and trace) unchanged.
            let mut rng4 = Rng::new(seed ^ 0x4e57_02ed);
            draw_restores(&mut rng4, &mut options, &mut faults);
        }
        faults.sort_by(|a, b| {
            a.at_ms
                .cmp(&b.at_ms)
                .then_with(|| a.fault.kind().cmp(b.fault.kind()))
        });
        Schedule { options, faults }
    }

    /// Parses a schedule from JSON or YAML (YAML is a superset; JSON is tried first for
    /// clearer errors).
    pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
        match serde_json::from_str(text) {
            Ok(s) => Ok(s),
            Err(json) => serde_yaml::from_str(text).map_err(|yaml| ScheduleError::Parse {
                json: json.to_string(),
                yaml: yaml.to_string(),
            }),
        }
    }

    /// Pretty JSON, the format failures are saved in.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a schedule always serialises")
    }
}

/// A schedule file that is neither valid JSON nor valid YAML.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule is not valid JSON ({json}) nor YAML ({yaml})")]
    Parse { json: String, yaml: String },
}

fn draw_faults(rng: &mut Rng, o: &Options) -> Vec<TimedFault> {
    let mut out = Vec::new();
    let side = |rng: &mut Rng| {
        if rng.below(2) == 0 {
            Side::Source
        } else {
            Side::Target
        }
    };
    for (kind, rate) in &o.fault_rates {
        let mean_gap_ms = (60_000.0 / rate) as u64;
        let mut t = rng.below(mean_gap_ms.max(1));
        while t < o.safety_ms {
            let f = match kind.as_str() {
                "crash" => Fault::Crash {
                    agent: 0,
                    down_ms: rng.below(5_000),
                },
                "twin" => Fault::Twin {
                    for_ms: 1_000 + rng.below(20_000),
                    config_variant: rng.below(6) as u32,
                },
                "restart_with_config" => Fault::RestartWithConfig {
                    agent: 0,
                    config_variant: rng.below(6) as u32,
                },
                "partition" => Fault::Partition {
                    side: side(rng),
                    ms: 100 + rng.below(15_000),
                },
                "leader_loss" => Fault::LeaderLoss {
                    side: side(rng),
                    ms: 100 + rng.below(8_000),
                },
                "throttle" => Fault::Throttle {
                    ms: 100 + rng.below(10_000),
                },
                "timeouts" => Fault::Timeouts {
                    side: side(rng),
                    ms: 500 + rng.below(10_000),
                    percent: 10 + rng.below(60) as u32,
                },
                "no_space" => Fault::NoSpace {
                    ms: 1_000 + rng.below(90_000),
                },
                "latency_spike" => Fault::LatencySpike {
                    side: side(rng),
                    ms: 100 + rng.below(5_000),
                    factor: 2 + rng.below(50) as u32,
                },
                "compact" => Fault::Compact {
                    behind: 1 + rng.below(300) as u32,
                },
                "compact_aggressive" => Fault::Compact { behind: 0 },
                "compact_storm" => Fault::CompactStorm {
                    ms: 5_000 + rng.below(40_000),
                    every_ms: 50 + rng.below(1_000),
                },
                _ => Fault::WatchReset,
            };
            out.push(TimedFault { at_ms: t, fault: f });
            t += 1 + rng.below(2 * mean_gap_ms.max(1));
        }
    }
    out.sort_by(|a, b| {
        a.at_ms
            .cmp(&b.at_ms)
            .then_with(|| a.fault.kind().cmp(b.fault.kind()))
    });
    out
}

/// Reconciliation settings, drift faults and operator controls (drain, reconcile now,
/// pause), swarm-style.
fn draw_controls(rng: &mut Rng, o: &mut Options, out: &mut Vec<TimedFault>) {
    if chance(rng, 0.5) {
        o.reconcile = Some(ReconcileOptions {
            interval_ms: [2_000, 5_000, 15_000][rng.below(3) as usize],
            delete_orphans: chance(rng, 0.5),
        });
    }
    let drain = if chance(rng, 0.3) {
        if chance(rng, 0.2) {
            o.drain_from_start = true;
        } else {
            out.push(TimedFault {
                at_ms: rng.below(o.safety_ms),
                fault: Fault::DrainNow,
            });
        }
        true
    } else {
        false
    };
    let mut kinds: Vec<&str> = vec!["reconcile_now", "pause"];
    // Drift is only injected where something repairs it: reconciliation or a drain.
    if o.reconcile.is_some() || drain {
        kinds.extend(["drift_divergent", "drift_delete", "drift_orphan"]);
        if chance(rng, 0.1) {
            out.push(TimedFault {
                at_ms: rng.below(o.safety_ms),
                fault: Fault::SiblingFence,
            });
        }
    }
    for kind in kinds {
        if !chance(rng, 0.5) {
            continue;
        }
        let rate = 0.5 + rng.unit() * 3.5;
        o.fault_rates
            .insert(kind.to_string(), (rate * 100.0).round() / 100.0);
        let mean_gap_ms = (60_000.0 / rate) as u64;
        let mut t = rng.below(mean_gap_ms.max(1));
        while t < o.safety_ms {
            let fault = match kind {
                "drift_divergent" => Fault::DriftDivergent {
                    pick: rng.next_u64(),
                },
                "drift_delete" => Fault::DriftDelete {
                    pick: rng.next_u64(),
                },
                "drift_orphan" => Fault::DriftOrphan {
                    pick: rng.below(1_000),
                },
                "reconcile_now" => Fault::ReconcileNow,
                _ => Fault::Pause {
                    ms: 100 + rng.below(5_000),
                },
            };
            out.push(TimedFault { at_ms: t, fault });
            t += 1 + rng.below(2 * mean_gap_ms.max(1));
        }
    }
}

/// Source restores from an older snapshot: on a modest share of seeds, one or two, at a
/// restore point from just behind the current revision (often at or above the mirror's
/// watermark) to hundreds of revisions back (below it).
fn draw_restores(rng: &mut Rng, o: &mut Options, out: &mut Vec<TimedFault>) {
    if !chance(rng, 0.12) {
        return;
    }
    let n = if chance(rng, 0.3) { 2 } else { 1 };
    o.fault_rates.insert(
        "restore_source".to_string(),
        (n as f64 * 60_000.0 / o.safety_ms as f64 * 100.0).round() / 100.0,
    );
    for _ in 0..n {
        let at_ms = o.safety_ms / 5 + rng.below(o.safety_ms - o.safety_ms / 5);
        let back = match rng.below(10) {
            0..=2 => 1 + rng.below(3),
            3..=6 => 3 + rng.below(40),
            _ => 40 + rng.below(600),
        } as u32;
        let overtake = chance(rng, 0.5);
        // A restore takes seconds: long enough for every broken watch to be reported.
        let down_ms = 2_000 + rng.below(8_000);
        out.push(TimedFault {
            at_ms,
            fault: Fault::RestoreSource {
                back,
                overtake,
                down_ms,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_deterministic_and_round_trips() {
        let a = Schedule::generate(7, ReplicatorKind::Core);
        let b = Schedule::generate(7, ReplicatorKind::Core);
        assert_eq!(a, b);
        let back = Schedule::parse(&a.to_json()).unwrap();
        assert_eq!(back, a);
        let yaml = serde_yaml::to_string(&a).unwrap();
        assert_eq!(Schedule::parse(&yaml).unwrap(), a);
    }

    #[test]
    fn restores_are_drawn_from_their_own_stream() {
        // Seeds that draw no restore keep exactly the schedule they had before the restore
        // fault existed; seeds that draw one only gain faults of that kind.
        let mut with = 0;
        for seed in 0..200 {
            let s = Schedule::generate(seed, ReplicatorKind::Core);
            let restores = s
                .faults
                .iter()
                .filter(|f| matches!(f.fault, Fault::RestoreSource { .. }))
                .count();
            if restores > 0 {
                with += 1;
                assert!(s.options.fault_rates.contains_key("restore_source"));
            }
        }
        assert!(
            (5..=60).contains(&with),
            "{with} of 200 seeds restore the source"
        );
        let r = Schedule::generate(3, ReplicatorKind::Reference);
        assert!(r
            .faults
            .iter()
            .all(|f| !matches!(f.fault, Fault::RestoreSource { .. })));
    }

    #[test]
    fn swarm_varies_enabled_faults() {
        let kinds: std::collections::BTreeSet<Vec<String>> = (0..20)
            .map(|s| {
                Schedule::generate(s, ReplicatorKind::Core)
                    .options
                    .fault_rates
                    .keys()
                    .cloned()
                    .collect()
            })
            .collect();
        assert!(kinds.len() > 5);
    }
}
