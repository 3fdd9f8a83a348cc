//! Inventory snapshots for Eno Compositions (issue K1).
//!
//! When Eno's control plane loses history (a missing ResourceSlice, a re-created
//! Composition), nobody knows which downstream resources to delete. This module records the
//! inventory of every Ready synthesis as chunked Secrets, and on recovery selects the newest
//! complete snapshot of a lineage and computes the tombstones, never from ambiguous history
//! and never including something the current synthesis still wants.
//!
//! Pure pieces: [`entry`] (identities from manifests), [`lineage`], [`chunk`], [`secret`]
//! (building a snapshot's Secrets), [`select`](mod@select) (choosing a snapshot), [`tombstone`],
//! [`deletion_group`] (Eno's deletion order), [`budget`] (protected kinds, deletion budget),
//! [`plan`] (the recovery plan every caller shares), [`decision`] (the recovery-decision
//! annotation), [`timestamp`] (RFC 3339).
//! Sans-IO state machines the kube driver runs: [`recorder::Recorder`] and
//! [`recovery::Recovery`], both speaking [`kube::Command`] / [`kube::Reply`].
//!
//! Per Composition and new synthesis UUID the controller runs [`Recovery`] first (it
//! writes the `tidemark.dev/recovery-decision` annotation), then [`Recorder`] (which refuses
//! until that decision is finished). Both are driven the same way:
//!
//! ```
//! use tidemark_core::inventory::*;
//! use tidemark_core::Instant;
//!
//! // A driver executes each command against Kubernetes; here every GET finds nothing.
//! fn execute(_cmd: &Command) -> Result<Reply, KubeError> {
//!     Err(KubeError::NotFound)
//! }
//!
//! let mut m = Recorder::new(RecorderConfig::default(), "ns", "comp");
//! let now = Instant::from_nanos(0);
//! let outcome = loop {
//!     match m.poll_output(now) {
//!         Output::Command { id, cmd } => {
//!             let result = execute(&cmd);
//!             m.handle_input(now, Input::Done { id, result });
//!         }
//!         Output::Timeout(_) => unreachable!("this driver answers synchronously"),
//!         Output::Stopped(outcome) => break outcome,
//!     }
//! };
//! assert!(matches!(outcome, RecordOutcome::NotEligible(Ineligible::NotFound)));
//! ```

pub mod budget;
pub mod chunk;
pub mod decision;
pub mod deletion_group;
pub mod eligibility;
pub mod entry;
pub mod kube;
pub mod lineage;
pub mod plan;
pub mod recorder;
pub mod recovery;
pub mod secret;
pub mod select;
pub mod timestamp;
pub mod tombstone;
pub mod view;

pub use budget::{Hold, Policy, Protection};
pub use chunk::{chunk_entries, decode_chunk, secret_name, ChunkError, DEFAULT_CHUNK_LIMIT};
pub use decision::{Decision, Outcome, DECISION_ANNOTATION};
pub use deletion_group::{deletion_order, effective_deletion_group};
pub use eligibility::{Ineligible, Scope};
pub use entry::{entries_from_slices, present_identities, Entry, Identity, ResourceId};
pub use kube::{Command, CommandId, Input, KubeError, Output, Reply};
pub use lineage::{
    check_lineage, default_lineage, foreign_lineage, lineage_conflicts, lineage_of, LineageProblem,
};
pub use plan::{check_snapshot, plan_recovery, tombstones_json, PlannedTombstone, RecoveryPlan};
pub use recorder::{RecordOutcome, Recorder, RecorderConfig, RecorderStatus};
pub use recovery::{Mode, Recovery, RecoveryConfig, RecoveryOutcome, RecoveryStatus};
pub use secret::{build_snapshot_secrets, Secret, SnapshotSource};
pub use select::{lineages_in, select, select_with_limit, Invalid, Reason, Selection, Snapshot};
pub use timestamp::Timestamp;
pub use tombstone::tombstones;
pub use view::{CompositionView, ObjectView, SliceResource, SliceView, SynthesisView};

/// Label on every inventory Secret; selection lists by it.
pub const LABEL_LINEAGE: &str = "eno.azure.io/inventory-lineage";
/// Composition annotation that overrides the derived lineage (same key as the label).
pub const ANN_LINEAGE: &str = "eno.azure.io/inventory-lineage";
/// Composition opt-in: recording and recovery only when this is `"true"`.
pub const ANN_RECOVERY_ENABLED: &str = "eno.azure.io/recovery-enabled";
/// Kept on inventory entries: Eno's readiness ordering.
pub const ANN_READINESS_GROUP: &str = "eno.azure.io/readiness-group";
/// Kept on inventory entries: Eno's deletion ordering (lowest group first, see
/// [`deletion_group`]).
pub const ANN_DELETION_GROUP: &str = "eno.azure.io/deletion-group";
/// On a downstream object: `orphan` means never delete it.
pub const ANN_DELETION_STRATEGY: &str = "eno.azure.io/deletion-strategy";

/// Snapshot annotations, written on every chunk.
pub const ANN_FORMAT_VERSION: &str = "eno.azure.io/inventory-format-version";
/// Composition name at recording time.
pub const ANN_COMPOSITION_NAME: &str = "eno.azure.io/inventory-composition-name";
/// Composition namespace.
pub const ANN_COMPOSITION_NAMESPACE: &str = "eno.azure.io/inventory-composition-namespace";
/// Synthesizer name.
pub const ANN_SYNTHESIZER_NAME: &str = "eno.azure.io/inventory-synthesizer-name";
/// Synthesis UUID: the grouping key.
pub const ANN_SYNTHESIS_UUID: &str = "eno.azure.io/inventory-synthesis-uuid";
/// Synthesis time (RFC 3339): the ordering key.
pub const ANN_SYNTHESIZED: &str = "eno.azure.io/inventory-synthesized";
/// Index of this chunk.
pub const ANN_CHUNK_INDEX: &str = "eno.azure.io/inventory-chunk-index";
/// Number of chunks in the snapshot.
pub const ANN_CHUNK_COUNT: &str = "eno.azure.io/inventory-chunk-count";
/// SHA-256 of this chunk's `inventory.json` (tidemark only; checked when present).
pub const ANN_CHUNK_SHA256: &str = "eno.azure.io/inventory-chunk-sha256";
/// SHA-256 of all chunks concatenated (tidemark only; checked when present).
pub const ANN_SNAPSHOT_SHA256: &str = "eno.azure.io/inventory-snapshot-sha256";

/// The format version we write and accept.
pub const FORMAT_VERSION: &str = "1";
/// The data key holding the JSON array.
pub const DATA_KEY: &str = "inventory.json";
/// Secret type of inventory Secrets.
pub const SECRET_TYPE: &str = "Opaque";
/// Default namespace of inventory Secrets in the downstream cluster.
pub const DEFAULT_SECRET_NAMESPACE: &str = "kube-system";

/// The label selector listing one lineage's Secrets.
pub fn lineage_selector(lineage: &str) -> String {
    format!("{LABEL_LINEAGE}={lineage}")
}
