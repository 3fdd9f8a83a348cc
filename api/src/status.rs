//! `EtcdMirror.status`: the core [`Status`] in Kubernetes form.
//!
//! Conditions become a list of `metav1.Condition`-shaped entries (what `kubectl wait
//! --for=condition=...` reads), core instants become RFC 3339 times, and every entry carries
//! the generation it was computed for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tidemark_core::mirror::status::{self as core, Phase as CorePhase};
use tidemark_core::mirror::Status;
use tidemark_core::Instant;

/// Lifecycle phase, with the names the core reports (`tidemark_core::mirror::Phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
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

impl From<CorePhase> for Phase {
    fn from(p: CorePhase) -> Self {
        match p {
            CorePhase::Pending => Phase::Pending,
            CorePhase::Connecting => Phase::Connecting,
            CorePhase::InitialSync => Phase::InitialSync,
            CorePhase::Syncing => Phase::Syncing,
            CorePhase::Draining => Phase::Draining,
            CorePhase::Drained => Phase::Drained,
            CorePhase::Degraded => Phase::Degraded,
            CorePhase::Paused => Phase::Paused,
            CorePhase::Failed => Phase::Failed,
        }
    }
}

/// One condition, shaped like `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// One of the frozen vocabulary (`tidemark_core::mirror::ConditionType`).
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"` or `"False"`.
    pub status: String,
    /// CamelCase machine-readable cause.
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// When `status` last flipped.
    pub last_transition_time: Time,
    /// The `metadata.generation` this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Key counts from a counts-producing pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub source_key_count: u64,
    pub target_key_count: u64,
    pub missing: u64,
    pub divergent: u64,
    pub orphan: u64,
    pub repaired: u64,
}

impl From<core::Counts> for Counts {
    fn from(c: core::Counts) -> Self {
        Counts {
            source_key_count: c.source_key_count,
            target_key_count: c.target_key_count,
            missing: c.missing,
            divergent: c.divergent,
            orphan: c.orphan,
            repaired: c.repaired,
        }
    }
}

/// The record of a completed drain: what a migration's cut-over step waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cutover {
    pub drain_target_revision: i64,
    pub drained_revision: i64,
    /// When the final verification pass completed.
    pub verified_time: Time,
    pub counts: Counts,
    #[serde(default)]
    pub leased_key_count: u64,
}

/// The retry curve the mirror is waiting on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// `transient`, `throttled` or `quota`.
    pub kind: String,
    pub attempt: u32,
    pub until: Time,
}

/// `EtcdMirror.status`. Every field defaults, so a partial status written by an older agent
/// (or by hand) still reads.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct EtcdMirrorStatus {
    /// The `metadata.generation` this status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub phase: Phase,
    /// The watermark: the source revision the target is known to reflect.
    pub last_applied_revision: i64,
    /// Highest source revision observed.
    pub source_revision: i64,
    pub lag_revisions: i64,
    pub lag_seconds: f64,
    pub link: String,
    /// Fence epoch; an agent run from an EtcdMirror claims at least `metadata.generation`.
    pub epoch: u64,
    /// Per-process fence nonce of the agent holding the fence.
    pub holder: String,
    /// `Mirror` or `Primary` (after cut-over).
    pub role: String,
    pub source_version: String,
    pub target_version: String,
    /// etcd cluster IDs in hex (they do not fit a signed 64-bit JSON integer).
    pub source_cluster_id: String,
    pub target_cluster_id: String,
    /// Whether progress notifications from this source are trusted (version floor).
    pub progress_trusted: bool,
    pub initial_sync_total_key_count: u64,
    pub initial_sync_copied_key_count: u64,
    pub applied_txns: u64,
    pub applied_ops: u64,
    pub applied_bytes: u64,
    pub pruned_keys: u64,
    /// Target keys a resumed genesis deleted: pages of a dead process past its durable
    /// cursor, which a restored source may never put again.
    pub residue_keys_deleted: u64,
    pub repaired_keys: u64,
    pub reconcile_passes: u64,
    pub last_pass_duration_seconds: f64,
    pub watch_cancels_for_pacing: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_target_revision: Option<i64>,
    pub forced_resync_count: u64,
    pub scan_restart_count: u64,
    pub split_revision_count: u64,
    pub lease_backed_key_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_counts: Option<Counts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_drift: Option<Counts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cutover: Option<Cutover>,
    /// One entry per condition type, in the vocabulary's fixed order.
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Vec<Condition>,
}

/// Maps core instants (a monotonic clock with an arbitrary epoch) to wall-clock times by one
/// anchor pair read at the same moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    core: Instant,
    wall: Timestamp,
}

impl WallClock {
    /// `core_now` and `wall_now` read at the same moment.
    pub fn anchored(core_now: Instant, wall_now: Timestamp) -> Self {
        WallClock {
            core: core_now,
            wall: wall_now,
        }
    }

    /// For cores fed nanoseconds since the Unix epoch (the conformance server, tests).
    pub fn unix() -> Self {
        WallClock {
            core: Instant::ZERO,
            wall: Timestamp::UNIX_EPOCH,
        }
    }

    /// The wall-clock time of a core instant, clamped to the representable range.
    pub fn time(&self, t: Instant) -> Time {
        let delta = i128::from(t.as_nanos()) - i128::from(self.core.as_nanos());
        let delta = i64::try_from(delta).unwrap_or(if delta < 0 { i64::MIN } else { i64::MAX });
        let d = SignedDuration::from_nanos(delta);
        let ts = self.wall.checked_add(d).unwrap_or(if delta < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        // Kubernetes times are second-precision RFC 3339 on the wire; keep them that way so
        // an unchanged status serialises identically.
        Time(Timestamp::from_second(ts.as_second()).unwrap_or(ts))
    }
}

impl EtcdMirrorStatus {
    /// Converts the core status for an object at `generation`, mapping core instants through
    /// `to_wall` (usually [`WallClock::time`]).
    pub fn from_core(
        s: &Status,
        generation: Option<i64>,
        to_wall: impl Fn(Instant) -> Time,
    ) -> Self {
        let conditions = s
            .conditions
            .values()
            .map(|c| Condition {
                type_: c.type_.name().to_string(),
                status: if c.status { "True" } else { "False" }.to_string(),
                reason: if c.reason.is_empty() {
                    // metav1.Condition requires a reason; the type name is the least surprising one.
                    c.type_.name().to_string()
                } else {
                    c.reason.clone()
                },
                message: c.message.clone(),
                last_transition_time: to_wall(c.last_transition_time),
                observed_generation: generation,
            })
            .collect();
        EtcdMirrorStatus {
            observed_generation: generation,
            phase: s.phase.into(),
            last_applied_revision: s.last_applied_revision,
            source_revision: s.source_revision,
            lag_revisions: s.lag_revisions,
            lag_seconds: s.lag_seconds,
            link: s.link.clone(),
            epoch: s.epoch,
            holder: s.holder.clone(),
            role: s.role.clone(),
            source_version: s.source_version.clone(),
            target_version: s.target_version.clone(),
            source_cluster_id: cluster_id(s.source_cluster_id),
            target_cluster_id: cluster_id(s.target_cluster_id),
            progress_trusted: s.progress_trusted,
            initial_sync_total_key_count: s.initial_sync_total_key_count,
            initial_sync_copied_key_count: s.initial_sync_copied_key_count,
            applied_txns: s.applied_txns,
            applied_ops: s.applied_ops,
            applied_bytes: s.applied_bytes,
            pruned_keys: s.pruned_keys,
            residue_keys_deleted: s.residue_keys_deleted,
            repaired_keys: s.repaired_keys,
            reconcile_passes: s.reconcile_passes,
            last_pass_duration_seconds: s.last_pass_duration_seconds,
            watch_cancels_for_pacing: s.watch_cancels_for_pacing,
            drain_target_revision: s.drain_target_revision,
            forced_resync_count: s.forced_resync_count,
            scan_restart_count: s.scan_restart_count,
            split_revision_count: s.split_revision_count,
            lease_backed_key_count: s.lease_backed_key_count,
            last_error: s.last_error.clone(),
            backoff: s.backoff.as_ref().map(|b| Backoff {
                kind: b.kind.clone(),
                attempt: b.attempt,
                until: to_wall(b.until),
            }),
            last_counts: s.last_counts.map(Counts::from),
            last_reconcile_time: s.last_reconcile_time.map(&to_wall),
            last_drift: s.last_drift.map(Counts::from),
            cutover: s.cutover.as_ref().map(|c| Cutover {
                drain_target_revision: c.drain_target_revision,
                drained_revision: c.drained_revision,
                verified_time: to_wall(c.verified_time),
                counts: c.counts.into(),
                leased_key_count: c.leased_key_count,
            }),
            conditions,
        }
    }

    /// The condition of this type, if reported.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

fn cluster_id(id: u64) -> String {
    if id == 0 {
        String::new()
    } else {
        format!("{id:x}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design
    use super::*;
    use tidemark_core::mirror::status::{ConditionType, Cutover as CoreCutover};

    #[test]
    fn converts_conditions_times_and_cutover() {
        let mut s = Status {
            phase: CorePhase::Drained,
            last_applied_revision: 42,
            source_cluster_id: 0xdead_beef_0000_0001,
            ..Default::default()
        };
        s.set_condition(
            Instant::from_nanos(5_000_000_000),
            ConditionType::CutoverReady,
            true,
            "Drained",
            "verified",
        );
        s.set_condition(
            Instant::from_nanos(1_000_000_000),
            ConditionType::Available,
            false,
            "",
            "",
        );
        s.cutover = Some(CoreCutover {
            drain_target_revision: 40,
            drained_revision: 42,
            verified_time: Instant::from_nanos(6_500_000_000),
            counts: core::Counts {
                source_key_count: 3,
                target_key_count: 3,
                ..Default::default()
            },
            leased_key_count: 1,
        });
        // Core time 0 is 2026-01-01T00:00:00Z.
        let anchor: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = WallClock::anchored(Instant::ZERO, anchor);
        let api = EtcdMirrorStatus::from_core(&s, Some(3), |t| clock.time(t));
        assert_eq!(api.phase, Phase::Drained);
        assert_eq!(api.observed_generation, Some(3));
        assert_eq!(api.source_cluster_id, "deadbeef00000001");
        assert_eq!(api.target_cluster_id, "");
        let names: Vec<_> = api.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(names, ["Available", "CutoverReady"]);
        let cr = api.condition("CutoverReady").unwrap();
        assert_eq!(cr.status, "True");
        assert_eq!(cr.observed_generation, Some(3));
        assert_eq!(
            cr.last_transition_time.0.to_string(),
            "2026-01-01T00:00:05Z"
        );
        assert_eq!(api.condition("Available").unwrap().reason, "Available");
        let j = serde_json::to_value(&api).unwrap();
        assert_eq!(j["lastAppliedRevision"], 42);
        assert_eq!(j["cutover"]["drainedRevision"], 42);
        assert_eq!(j["cutover"]["verifiedTime"], "2026-01-01T00:00:06Z");
        assert_eq!(j["conditions"][1]["type"], "CutoverReady");
        assert_eq!(j["phase"], "Drained");
        let back: EtcdMirrorStatus = serde_json::from_value(j).unwrap();
        assert_eq!(back, api);
    }

    #[test]
    fn wall_clock_maps_before_and_after_the_anchor() {
        let anchor: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let clock = WallClock::anchored(Instant::from_nanos(60_000_000_000), anchor);
        assert_eq!(
            clock.time(Instant::ZERO).0.to_string(),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            WallClock::unix()
                .time(Instant::from_nanos(1_500_000_000))
                .0
                .to_string(),
            "1970-01-01T00:00:01Z"
        );
        let empty: EtcdMirrorStatus = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, EtcdMirrorStatus::default());
    }
}
