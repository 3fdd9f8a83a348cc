//! What the mirror reports: phase, watermark, lag, counters and conditions, named as in the
//! EtcdMirror status so `/statusz` and the custom resource read the same.

use crate::mirror::finding::HistoryFinding;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The mirror's lifecycle phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Phase {
    #[default]
    Pending,
    Connecting,
    InitialSync,
    Syncing,
    Draining,
    Drained,
    Degraded,
    Paused,
    Failed,
}

/// The frozen condition vocabulary of the EtcdMirror API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ConditionType {
    Available,
    SourceReachable,
    TargetReachable,
    TargetThrottled,
    TargetQuotaExhausted,
    InitialSyncComplete,
    Compacted,
    ResyncLoopDetected,
    ReplicationLagExceeded,
    DriftDetected,
    EmptyTargetViolation,
    CutoverReady,
    InvariantsHeld,
    LearnerEndpoint,
    PrefixConflict,
    DirectionConflict,
    RevisionSplit,
    /// True when the source is not (or cannot be proven to be) the history the
    /// checkpoint came from; the agent then stops without writing.
    SourceHistoryMismatch,
}

impl ConditionType {
    /// Every condition type, in a fixed order.
    pub const ALL: [ConditionType; 18] = [
        ConditionType::Available,
        ConditionType::SourceReachable,
        ConditionType::TargetReachable,
        ConditionType::TargetThrottled,
        ConditionType::TargetQuotaExhausted,
        ConditionType::InitialSyncComplete,
        ConditionType::Compacted,
        ConditionType::ResyncLoopDetected,
        ConditionType::ReplicationLagExceeded,
        ConditionType::DriftDetected,
        ConditionType::EmptyTargetViolation,
        ConditionType::CutoverReady,
        ConditionType::InvariantsHeld,
        ConditionType::LearnerEndpoint,
        ConditionType::PrefixConflict,
        ConditionType::DirectionConflict,
        ConditionType::RevisionSplit,
        ConditionType::SourceHistoryMismatch,
    ];

    /// The API name ("TargetQuotaExhausted").
    pub fn name(self) -> &'static str {
        match self {
            ConditionType::Available => "Available",
            ConditionType::SourceReachable => "SourceReachable",
            ConditionType::TargetReachable => "TargetReachable",
            ConditionType::TargetThrottled => "TargetThrottled",
            ConditionType::TargetQuotaExhausted => "TargetQuotaExhausted",
            ConditionType::InitialSyncComplete => "InitialSyncComplete",
            ConditionType::Compacted => "Compacted",
            ConditionType::ResyncLoopDetected => "ResyncLoopDetected",
            ConditionType::ReplicationLagExceeded => "ReplicationLagExceeded",
            ConditionType::DriftDetected => "DriftDetected",
            ConditionType::EmptyTargetViolation => "EmptyTargetViolation",
            ConditionType::CutoverReady => "CutoverReady",
            ConditionType::InvariantsHeld => "InvariantsHeld",
            ConditionType::LearnerEndpoint => "LearnerEndpoint",
            ConditionType::PrefixConflict => "PrefixConflict",
            ConditionType::DirectionConflict => "DirectionConflict",
            ConditionType::RevisionSplit => "RevisionSplit",
            ConditionType::SourceHistoryMismatch => "SourceHistoryMismatch",
        }
    }
}

/// One condition, Kubernetes style.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// true = "True".
    pub status: bool,
    pub reason: String,
    pub message: String,
    /// Core time of the last status flip.
    pub last_transition_time: Instant,
}

/// Key counts from a counts-producing pass (genesis sweep, reconciliation, drain verify).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub source_key_count: u64,
    pub target_key_count: u64,
    pub missing: u64,
    pub divergent: u64,
    pub orphan: u64,
    pub repaired: u64,
}

/// The cut-over record published when a drain completes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cutover {
    pub drain_target_revision: i64,
    pub drained_revision: i64,
    pub verified_time: Instant,
    pub counts: Counts,
    pub leased_key_count: u64,
}

/// Which retry curve the mirror is waiting on, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackoffState {
    /// "transient", "throttled" or "quota".
    pub kind: String,
    pub attempt: u32,
    pub until: Instant,
}

/// The mirror's published status.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub phase: Phase,
    /// The watermark: the source revision the target is known to reflect.
    pub last_applied_revision: i64,
    /// Highest source revision observed (watch headers, progress, reads).
    pub source_revision: i64,
    pub lag_revisions: i64,
    pub lag_seconds: f64,
    pub link: String,
    pub epoch: u64,
    pub holder: String,
    pub role: String,
    pub source_version: String,
    pub target_version: String,
    pub source_cluster_id: u64,
    pub target_cluster_id: u64,
    /// Whether progress notifications from this source are trusted (version floor).
    pub progress_trusted: bool,
    /// Estimated keys to copy in the current genesis.
    pub initial_sync_total_key_count: u64,
    /// Keys copied so far in the current genesis.
    pub initial_sync_copied_key_count: u64,
    pub applied_txns: u64,
    pub applied_ops: u64,
    pub applied_bytes: u64,
    pub pruned_keys: u64,
    /// Target keys a resumed genesis deleted because an earlier attempt's pages put them
    /// past the durable cursor after its last fence write (`scan.residue_above`).
    pub residue_keys_deleted: u64,
    /// Keys written or deleted by reconciliation repairs.
    pub repaired_keys: u64,
    pub reconcile_passes: u64,
    pub last_pass_duration_seconds: f64,
    /// Times a paced repair paused the source watch (stream kept open, events dropped) to
    /// bound its buffer.
    pub watch_cancels_for_pacing: u64,
    /// The revision a drain waits for, once known.
    pub drain_target_revision: Option<i64>,
    /// Watches refused by the etcd #18089 guard (start revision == compact revision).
    pub watch_guard_compactions: u64,
    pub forced_resync_count: u64,
    pub scan_restart_count: u64,
    /// Times a genesis stopped reading its watch because the events held during the scan
    /// reached `sync.watchBufferBytes` (it replays them from the base once the scan is done).
    pub genesis_watch_pauses: u64,
    /// Writes of ours that the target applied after we had written them off (a timed-out
    /// Txn applied late), found by a failed fence compare and adopted.
    pub own_late_writes_adopted: u64,
    /// Source-history proofs that passed (one per connect and watch (re)establishment).
    pub source_history_proofs: u64,
    /// Watch revisions that went backwards and were checked by a proof.
    pub source_history_suspicions: u64,
    /// Windows since the anchor that a new watch replayed and found as the mirror applied them.
    pub source_history_windows: u64,
    pub split_revision_count: u64,
    pub lease_backed_key_count: u64,
    /// Keys the source walked to answer our paged reads (the replies' `count`), and keys
    /// those reads returned: a ratio near 1 means every read cost one page.
    pub source_keys_walked: u64,
    pub source_keys_returned: u64,
    /// The most keys one source read walked: etcd holds its index read lock, which the
    /// source's writers wait for, for the whole walk (about 170 ns a key).
    pub source_longest_walk: u64,
    /// Time the genesis scan waited for the target to take what was read ahead.
    pub reader_stall_seconds: f64,
    /// Time bulk source reads waited to keep to `sync.sourceReadPercent`.
    pub source_read_wait_seconds: f64,
    /// Times a chain of pipelined Txns broke (a Txn failed with later ones in flight) and
    /// the mirror resumed from the fence.
    pub chain_breaks: u64,
    /// Pipelined Txns that reached the target before their predecessor and were sent
    /// again (the chain held).
    pub chain_reorders: u64,
    /// Genesis page Txns sent again because their outcome was unknown or they failed
    /// before the compare (see docs/design.md, "Pipelined commits").
    pub page_resends: u64,
    /// Fence writes that moved the durable scan cursor over pages applied out of order.
    pub scan_cursor_writes: u64,
    /// Txns in flight now (chained writes and genesis pages), and the smoothed commit
    /// round trip.
    pub txns_in_flight: u64,
    pub commit_rtt_seconds: f64,
    /// The least time between two chained sends now (zero until etcd reorders the chain;
    /// docs/design.md, "Pipelined commits").
    pub chain_send_gap_seconds: f64,
    pub last_error: Option<String>,
    /// What the last source-history proof found that the `SourceHistoryMismatch`
    /// condition reports, as data (`None` once a proof passes).
    pub source_history_finding: Option<HistoryFinding>,
    pub backoff: Option<BackoffState>,
    pub last_counts: Option<Counts>,
    pub last_reconcile_time: Option<Instant>,
    pub last_drift: Option<Counts>,
    pub cutover: Option<Cutover>,
    pub conditions: BTreeMap<ConditionType, Condition>,
}

impl Status {
    /// Accounts one paged source read: `count` keys walked (the reply's count), `returned`
    /// keys returned.
    pub fn note_source_read(&mut self, count: i64, returned: usize) {
        self.note_source_walk(u64::try_from(count).unwrap_or(0));
        self.source_keys_returned += returned as u64;
    }

    /// Accounts one source read that walked `walked` keys.
    pub fn note_source_walk(&mut self, walked: u64) {
        self.source_keys_walked += walked;
        self.source_longest_walk = self.source_longest_walk.max(walked);
    }

    /// Sets a condition, keeping `lastTransitionTime` when the status does not flip.
    pub fn set_condition(
        &mut self,
        now: Instant,
        type_: ConditionType,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        let message = message.into();
        let last = match self.conditions.get(&type_) {
            Some(c) if c.status == status => c.last_transition_time,
            _ => now,
        };
        self.conditions.insert(
            type_,
            Condition {
                type_,
                status,
                reason: reason.into(),
                message,
                last_transition_time: last,
            },
        );
    }

    /// What a drain shows moving, for telling a slow drain from a stuck one: the watermark,
    /// the drain target, keys read by scans and passes, repairs, passes, applied Txns and
    /// keys copied by an initial sync. Any change is progress.
    pub fn drain_progress(&self) -> [i64; 7] {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            self.last_applied_revision,
            self.drain_target_revision.unwrap_or(0),
            n(self.source_keys_returned),
            n(self.repaired_keys),
            n(self.reconcile_passes),
            n(self.applied_txns),
            n(self.initial_sync_copied_key_count),
        ]
    }

    /// Whether a condition is currently True.
    pub fn condition(&self, type_: ConditionType) -> bool {
        self.conditions.get(&type_).is_some_and(|c| c.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_flip() {
        let mut s = Status::default();
        s.set_condition(Instant(1), ConditionType::Available, true, "Up", "");
        s.set_condition(Instant(5), ConditionType::Available, true, "Up", "again");
        assert_eq!(
            s.conditions[&ConditionType::Available].last_transition_time,
            Instant(1)
        );
        s.set_condition(Instant(9), ConditionType::Available, false, "Down", "");
        assert_eq!(
            s.conditions[&ConditionType::Available].last_transition_time,
            Instant(9)
        );
        assert!(!s.condition(ConditionType::Available));
    }

    #[test]
    fn status_json_uses_api_names() {
        let s = Status {
            last_applied_revision: 7,
            ..Default::default()
        };
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["lastAppliedRevision"], 7);
        assert!(j.get("sourceRevision").is_some());
        assert_eq!(ConditionType::ALL.len(), 18);
    }
}
