//! Prometheus metrics derived from the core's [`Status`].
//!
//! The core keeps the authoritative counters; the driver only mirrors them into gauges and
//! counters at publish time, so a scrape always matches `/statusz`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use tidemark_core::mirror::{ConditionType, Phase, Status};

type Labels = Vec<(String, String)>;

/// Every metric the mirror agent exports.
#[derive(Debug, Default, Clone)]
pub struct MirrorMetrics {
    watermark: Gauge,
    source_revision: Gauge,
    lag_revisions: Gauge,
    lag_seconds: Gauge<f64, AtomicU64>,
    applied_txns: Counter,
    applied_ops: Counter,
    applied_bytes: Counter,
    pruned_keys: Counter,
    residue_keys_deleted: Counter,
    forced_resyncs: Counter,
    scan_restarts: Counter,
    genesis_watch_pauses: Counter,
    late_writes_adopted: Counter,
    history_proofs: Counter,
    history_suspicions: Counter,
    history_windows: Counter,
    split_revisions: Counter,
    initial_sync_copied: Gauge,
    initial_sync_total: Gauge,
    lease_backed_keys: Gauge,
    epoch: Gauge,
    drift: Family<Labels, Gauge>,
    pass_duration: Gauge<f64, AtomicU64>,
    reconcile_passes: Counter,
    repaired_keys: Counter,
    watch_cancels_for_pacing: Counter,
    cutover_ready: Gauge,
    drain_target: Gauge,
    backoff_attempt: Family<Labels, Gauge>,
    condition: Family<Labels, Gauge>,
    phase: Family<Labels, Gauge>,
}

fn delta(c: &Counter, now: u64) {
    let have = c.get();
    if now > have {
        c.inc_by(now - have);
    }
}

const PHASES: [Phase; 9] = [
    Phase::Pending,
    Phase::Connecting,
    Phase::InitialSync,
    Phase::Syncing,
    Phase::Draining,
    Phase::Drained,
    Phase::Degraded,
    Phase::Paused,
    Phase::Failed,
];

impl MirrorMetrics {
    /// Registers every metric under `tidemark_mirror_`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tidemark_mirror");
        r.register(
            "watermark_revision",
            "Source revision the target is known to reflect (lastAppliedRevision)",
            self.watermark.clone(),
        );
        r.register(
            "source_revision",
            "Highest source revision observed",
            self.source_revision.clone(),
        );
        r.register(
            "lag_revisions",
            "Source revision minus watermark",
            self.lag_revisions.clone(),
        );
        r.register(
            "lag_seconds",
            "Replication lag in seconds",
            self.lag_seconds.clone(),
        );
        r.register(
            "applied_txns",
            "Target Txns committed",
            self.applied_txns.clone(),
        );
        r.register(
            "applied_ops",
            "Ops committed to the target",
            self.applied_ops.clone(),
        );
        r.register(
            "applied_bytes",
            "Bytes committed to the target",
            self.applied_bytes.clone(),
        );
        r.register(
            "pruned_keys",
            "Target keys deleted by prune sweeps",
            self.pruned_keys.clone(),
        );
        r.register(
            "residue_keys_deleted",
            "Target keys a resumed genesis deleted: pages of an earlier attempt past its durable cursor",
            self.residue_keys_deleted.clone(),
        );
        r.register(
            "forced_resyncs",
            "Forced resyncs after tail compaction",
            self.forced_resyncs.clone(),
        );
        r.register(
            "scan_restarts",
            "Genesis scan restarts",
            self.scan_restarts.clone(),
        );
        r.register(
            "genesis_watch_pauses",
            "Times a genesis stopped reading its watch at sync.watchBufferBytes until its scan was done",
            self.genesis_watch_pauses.clone(),
        );
        r.register(
            "own_late_writes_adopted",
            "Own timed-out target Txns found applied late and adopted",
            self.late_writes_adopted.clone(),
        );
        r.register(
            "source_history_proofs",
            "Source-history proofs passed (each connect and watch re-establishment)",
            self.history_proofs.clone(),
        );
        r.register(
            "source_history_suspicions",
            "Source watch revisions that went backwards and were re-proven",
            self.history_suspicions.clone(),
        );
        r.register(
            "source_history_windows",
            "Windows since the source-history anchor replayed by a new watch and found unchanged",
            self.history_windows.clone(),
        );
        r.register(
            "split_revisions",
            "Source revisions split across several target Txns",
            self.split_revisions.clone(),
        );
        r.register(
            "initial_sync_copied_keys",
            "Keys copied in the current genesis",
            self.initial_sync_copied.clone(),
        );
        r.register(
            "initial_sync_total_keys",
            "Estimated keys in the current genesis",
            self.initial_sync_total.clone(),
        );
        r.register(
            "lease_backed_keys",
            "Mirrored keys whose source is lease-backed",
            self.lease_backed_keys.clone(),
        );
        r.register("fence_epoch", "Fence epoch held", self.epoch.clone());
        r.register(
            "drift_keys",
            "Drift found by the last diff-and-repair pass, by kind (missing, divergent, orphan)",
            self.drift.clone(),
        );
        r.register(
            "reconcile_pass_duration_seconds",
            "Wall time of the last diff-and-repair pass (periodic or drain verification)",
            self.pass_duration.clone(),
        );
        r.register(
            "reconcile_passes",
            "Diff-and-repair passes completed",
            self.reconcile_passes.clone(),
        );
        r.register(
            "repaired_keys",
            "Target keys written or deleted by diff-and-repair passes",
            self.repaired_keys.clone(),
        );
        r.register(
            "watch_cancels_for_pacing",
            "Source watch pauses (stream kept open, its events dropped and read again later) because a paced repair queued more than ~3s of work",
            self.watch_cancels_for_pacing.clone(),
        );
        r.register(
            "cutover_ready",
            "1 once the drain verified the target and flipped the fence to Primary",
            self.cutover_ready.clone(),
        );
        r.register(
            "drain_target_revision",
            "Source revision the drain waits for (0 before a drain)",
            self.drain_target.clone(),
        );
        r.register(
            "backoff_attempt",
            "Current backoff attempt by curve (0 when not backing off)",
            self.backoff_attempt.clone(),
        );
        r.register(
            "condition",
            "1 when the condition is True, else 0",
            self.condition.clone(),
        );
        r.register(
            "phase",
            "1 for the current phase, else 0",
            self.phase.clone(),
        );
    }

    /// Copies `s` into the metrics.
    pub fn update(&self, s: &Status) {
        let g = |x: i64| x;
        self.watermark.set(g(s.last_applied_revision));
        self.source_revision.set(s.source_revision);
        self.lag_revisions.set(s.lag_revisions);
        self.lag_seconds.set(s.lag_seconds);
        delta(&self.applied_txns, s.applied_txns);
        delta(&self.applied_ops, s.applied_ops);
        delta(&self.applied_bytes, s.applied_bytes);
        delta(&self.pruned_keys, s.pruned_keys);
        delta(&self.residue_keys_deleted, s.residue_keys_deleted);
        delta(&self.forced_resyncs, s.forced_resync_count);
        delta(&self.scan_restarts, s.scan_restart_count);
        delta(&self.genesis_watch_pauses, s.genesis_watch_pauses);
        delta(&self.late_writes_adopted, s.own_late_writes_adopted);
        delta(&self.history_proofs, s.source_history_proofs);
        delta(&self.history_suspicions, s.source_history_suspicions);
        delta(&self.history_windows, s.source_history_windows);
        delta(&self.split_revisions, s.split_revision_count);
        let i = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        self.initial_sync_copied
            .set(i(s.initial_sync_copied_key_count));
        self.initial_sync_total
            .set(i(s.initial_sync_total_key_count));
        self.lease_backed_keys.set(i(s.lease_backed_key_count));
        self.epoch.set(i(s.epoch));
        let drift = s.last_drift.unwrap_or_default();
        for (kind, n) in [
            ("missing", drift.missing),
            ("divergent", drift.divergent),
            ("orphan", drift.orphan),
        ] {
            self.drift
                .get_or_create(&vec![("kind".to_string(), kind.to_string())])
                .set(i(n));
        }
        self.pass_duration.set(s.last_pass_duration_seconds);
        delta(&self.reconcile_passes, s.reconcile_passes);
        delta(&self.repaired_keys, s.repaired_keys);
        delta(&self.watch_cancels_for_pacing, s.watch_cancels_for_pacing);
        self.cutover_ready.set(i64::from(
            s.cutover.is_some() && s.condition(ConditionType::CutoverReady),
        ));
        self.drain_target.set(s.drain_target_revision.unwrap_or(0));
        for kind in ["transient", "throttled", "quota"] {
            let attempt = match &s.backoff {
                Some(b) if b.kind == kind => i64::from(b.attempt),
                _ => 0,
            };
            self.backoff_attempt
                .get_or_create(&vec![("kind".to_string(), kind.to_string())])
                .set(attempt);
        }
        for t in ConditionType::ALL {
            self.condition
                .get_or_create(&vec![("type".to_string(), t.name().to_string())])
                .set(i64::from(s.condition(t)));
        }
        for p in PHASES {
            self.phase
                .get_or_create(&vec![("phase".to_string(), format!("{p:?}"))])
                .set(i64::from(s.phase == p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_status_fields() {
        let m = MirrorMetrics::default();
        let mut reg = Registry::default();
        m.register(&mut reg);
        let mut s = Status {
            last_applied_revision: 42,
            applied_txns: 3,
            ..Default::default()
        };
        s.set_condition(
            tidemark_core::Instant(0),
            ConditionType::Available,
            true,
            "Up",
            "",
        );
        m.update(&s);
        m.update(&s);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(
            out.contains("tidemark_mirror_watermark_revision 42"),
            "{out}"
        );
        assert!(
            out.contains("tidemark_mirror_applied_txns_total 3"),
            "{out}"
        );
        assert!(
            out.contains("tidemark_mirror_condition{type=\"Available\"} 1"),
            "{out}"
        );
    }

    #[test]
    fn exports_drift_and_cutover() {
        let m = MirrorMetrics::default();
        let mut reg = Registry::default();
        m.register(&mut reg);
        let mut s = Status {
            reconcile_passes: 2,
            repaired_keys: 5,
            watch_cancels_for_pacing: 1,
            last_pass_duration_seconds: 1.5,
            drain_target_revision: Some(77),
            last_drift: Some(tidemark_core::mirror::Counts {
                missing: 3,
                divergent: 2,
                orphan: 1,
                ..Default::default()
            }),
            ..Default::default()
        };
        m.update(&s);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        for want in [
            "tidemark_mirror_drift_keys{kind=\"missing\"} 3",
            "tidemark_mirror_drift_keys{kind=\"divergent\"} 2",
            "tidemark_mirror_drift_keys{kind=\"orphan\"} 1",
            "tidemark_mirror_reconcile_pass_duration_seconds 1.5",
            "tidemark_mirror_reconcile_passes_total 2",
            "tidemark_mirror_repaired_keys_total 5",
            "tidemark_mirror_watch_cancels_for_pacing_total 1",
            "tidemark_mirror_cutover_ready 0",
            "tidemark_mirror_drain_target_revision 77",
        ] {
            assert!(out.contains(want), "missing {want} in {out}");
        }
        s.set_condition(
            tidemark_core::Instant(0),
            ConditionType::CutoverReady,
            true,
            "Drained",
            "",
        );
        s.cutover = Some(tidemark_core::mirror::Cutover {
            drain_target_revision: 77,
            drained_revision: 77,
            verified_time: tidemark_core::Instant(0),
            counts: Default::default(),
            leased_key_count: 0,
        });
        m.update(&s);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains("tidemark_mirror_cutover_ready 1"), "{out}");
    }
}
