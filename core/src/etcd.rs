//! The etcd vocabulary the core speaks: requests it asks the driver to run and the
//! replies and watch events that come back.
//!
//! These mirror the etcd v3 gRPC API closely enough that the driver is a thin translation
//! and the simulator's model etcd can serve them directly. Keys and values are raw bytes:
//! etcd keys are not UTF-8.

use serde::{Deserialize, Serialize};

/// Which cluster a command is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Cluster {
    /// The cluster we read from. The core never writes to it.
    Source,
    /// The cluster we write to, guarded by the fence.
    Target,
}

/// One key-value pair as etcd returns it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyValue {
    #[serde(with = "crate::bytes_b64")]
    pub key: Vec<u8>,
    #[serde(with = "crate::bytes_b64")]
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// Lease ID, 0 when the key is not lease-backed.
    pub lease: i64,
}

/// What happened to a key in one watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One watch event. For a delete, `kv.key` and `kv.mod_revision` (the delete's revision)
/// are set and the value is empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
}

/// How a range is sorted; only what the core uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SortBy {
    /// Ascending by key (etcd's default order).
    #[default]
    Key,
    /// Descending by mod revision: with `limit: 1`, the highest in-scope mod revision.
    ModRevisionDescending,
}

/// A range read. `range_end` empty means the single key `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    pub cluster: Cluster,
    #[serde(with = "crate::bytes_b64")]
    pub key: Vec<u8>,
    #[serde(with = "crate::bytes_b64")]
    pub range_end: Vec<u8>,
    /// 0 reads at the latest revision (unpinned); >0 pins the read to that revision.
    pub revision: i64,
    /// 0 means no limit.
    pub limit: i64,
    pub count_only: bool,
    pub keys_only: bool,
    pub sort: SortBy,
}

impl RangeRequest {
    /// One key at the latest revision, value included: how the fence record is read.
    pub fn latest(cluster: Cluster, key: Vec<u8>) -> RangeRequest {
        RangeRequest {
            cluster,
            key,
            range_end: Vec::new(),
            revision: 0,
            limit: 0,
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }
    }
}

/// The result of a range read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RangeReply {
    /// The store revision the read was served at.
    pub header_revision: i64,
    pub kvs: Vec<KeyValue>,
    /// More keys exist past `limit`.
    pub more: bool,
    /// Total keys in the range (before `limit`).
    pub count: i64,
}

/// Which field a compare looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    ModRevision,
    CreateRevision,
    Version,
    /// The value bytes (`Compare::bytes`). Fails on a missing key, as etcd does.
    Value,
}

/// `target(key) == value` (or `== bytes` for [`CompareTarget::Value`]); the only
/// comparison the core needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    #[serde(with = "crate::bytes_b64")]
    pub key: Vec<u8>,
    pub target: CompareTarget,
    pub value: i64,
    /// The expected value of a [`CompareTarget::Value`] compare; empty otherwise.
    #[serde(default, with = "crate::bytes_b64")]
    pub bytes: Vec<u8>,
}

impl Compare {
    /// `value(key) == bytes`: what a pipelined fenced Txn compares (the record it builds on).
    pub fn value_is(key: Vec<u8>, bytes: Vec<u8>) -> Compare {
        Compare {
            key,
            target: CompareTarget::Value,
            value: 0,
            bytes,
        }
    }

    /// `target(key) == value` on a revision or version.
    pub fn revision(key: Vec<u8>, target: CompareTarget, value: i64) -> Compare {
        Compare {
            key,
            target,
            value,
            bytes: Vec::new(),
        }
    }
}

/// One operation inside a Txn branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    Put {
        #[serde(with = "crate::bytes_b64")]
        key: Vec<u8>,
        #[serde(with = "crate::bytes_b64")]
        value: Vec<u8>,
    },
    /// Deletes `key`, or `[key, range_end)` when `range_end` is non-empty.
    Delete {
        #[serde(with = "crate::bytes_b64")]
        key: Vec<u8>,
        #[serde(with = "crate::bytes_b64")]
        range_end: Vec<u8>,
    },
    /// Reads one key; used in the failure branch to learn the current fence in one round trip.
    Get {
        #[serde(with = "crate::bytes_b64")]
        key: Vec<u8>,
    },
}

impl TxnOp {
    /// The key this op touches.
    pub fn key(&self) -> &[u8] {
        match self {
            TxnOp::Put { key, .. } | TxnOp::Delete { key, .. } | TxnOp::Get { key } => key,
        }
    }

    /// Bytes this op adds to a request; used for the byte budget.
    pub fn wire_size(&self) -> usize {
        // A fixed allowance covers the protobuf framing of one RequestOp.
        const OVERHEAD: usize = 16;
        OVERHEAD
            + match self {
                TxnOp::Put { key, value } => key.len() + value.len(),
                TxnOp::Delete { key, range_end } => key.len() + range_end.len(),
                TxnOp::Get { key } => key.len(),
            }
    }
}

/// A Txn against the target. Always fenced by the core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compares: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

/// The result of a Txn.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnReply {
    pub succeeded: bool,
    /// The store revision after the Txn (the revision it wrote at, when it wrote).
    pub header_revision: i64,
    /// Key-values read by `Get` ops of the branch that ran, in op order.
    pub reads: Vec<Option<KeyValue>>,
}

/// What the version probe learns about one cluster endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatusReply {
    /// Server version, e.g. "3.5.13".
    pub version: String,
    pub header_revision: i64,
    pub cluster_id: u64,
    pub member_id: u64,
    pub is_learner: bool,
    pub db_size: i64,
}

/// A source watch. The driver opens it with require-leader and progress-notify.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchRequest {
    /// The core's name for this watch; every later event carries it.
    pub watch_id: u64,
    #[serde(with = "crate::bytes_b64")]
    pub key: Vec<u8>,
    #[serde(with = "crate::bytes_b64")]
    pub range_end: Vec<u8>,
    pub start_revision: i64,
}

/// Something a watch delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchEvent {
    /// One watch response: events in revision order, never splitting a revision.
    Events {
        header_revision: i64,
        events: Vec<Event>,
    },
    /// A progress notification: every event up to `revision` has been sent.
    Progress { revision: i64 },
    /// The server cancelled the watch. `compact_revision > 0` means the start revision was
    /// compacted away.
    Cancelled {
        compact_revision: i64,
        reason: String,
    },
    /// The stream broke (connection loss, leader loss under require-leader); classified.
    Failed { failure: crate::classify::Failure },
}

/// One thing the core asks the driver to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Version probe of one cluster. Replies [`Reply::Status`].
    Status { cluster: Cluster },
    /// Replies [`Reply::Range`].
    Range(RangeRequest),
    /// A fenced Txn on the target. Replies [`Reply::Txn`].
    Txn(TxnRequest),
    /// Opens a source watch. Replies [`Reply::WatchStarted`]; events arrive as
    /// `Input::Watch`.
    Watch(WatchRequest),
    /// Cancels a watch; no more events for it are wanted. Replies [`Reply::Ok`].
    CancelWatch { watch_id: u64 },
    /// Asks the source for a progress notification on a watch. Replies [`Reply::Ok`].
    RequestProgress { watch_id: u64 },
}

impl Command {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Command::Status { .. } => "status",
            Command::Range(_) => "range",
            Command::Txn(_) => "txn",
            Command::Watch(_) => "watch",
            Command::CancelWatch { .. } => "cancel_watch",
            Command::RequestProgress { .. } => "request_progress",
        }
    }
}

/// The successful result of a [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Status(StatusReply),
    Range(RangeReply),
    Txn(TxnReply),
    WatchStarted,
    Ok,
}

/// `prefix_end(p)`: the smallest key greater than every key with prefix `p`
/// (etcd's `GetPrefixRangeEnd`). An empty result means "to the end of the keyspace".
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All bytes were 0xff (or the prefix was empty): etcd spells "no upper bound" as "\0".
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"/app/"), b"/app0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
