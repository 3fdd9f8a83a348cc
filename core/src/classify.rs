//! One pure classification of every error the outside world returns.
//!
//! The etcd driver and the simulator both call [`classify`] with the gRPC status code and
//! message they got, so the core reacts to a real server and to the model identically.
//! Error strings are etcd's (`server/etcdserver/api/v3rpc/rpctypes/error.go` and
//! `server/mvcc` in etcd 3.4/3.5) and grpc-go's client-side size limits.

use serde::{Deserialize, Serialize};

/// gRPC status codes (numeric values are the wire values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    /// Maps a wire value; anything unrecognised is `Unknown`, as gRPC does.
    pub fn from_i32(v: i32) -> Code {
        match v {
            0 => Code::Ok,
            1 => Code::Cancelled,
            3 => Code::InvalidArgument,
            4 => Code::DeadlineExceeded,
            5 => Code::NotFound,
            6 => Code::AlreadyExists,
            7 => Code::PermissionDenied,
            8 => Code::ResourceExhausted,
            9 => Code::FailedPrecondition,
            10 => Code::Aborted,
            11 => Code::OutOfRange,
            12 => Code::Unimplemented,
            13 => Code::Internal,
            14 => Code::Unavailable,
            15 => Code::DataLoss,
            16 => Code::Unauthenticated,
            _ => Code::Unknown,
        }
    }
}

/// Why a permanent failure is permanent; each maps to an operator action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PermanentKind {
    /// Wrong credentials or missing permission: fix `auth` or the role.
    Auth,
    /// The request is malformed for this server (too many ops, duplicate keys, ...).
    InvalidRequest,
    /// The server does not support what we need.
    Unsupported,
    /// Anything else the server says will not change on retry.
    Other,
}

/// The one error taxonomy of the core.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// Retry with exponential backoff (connection loss, no leader, timeouts on reads).
    Transient { message: String },
    /// The server asks us to slow down: a slower backoff curve, condition `TargetThrottled`.
    Throttled { message: String },
    /// The requested revision was compacted. `rev` is the compact revision when known, else 0.
    Compacted { rev: i64 },
    /// The requested revision is ahead of the server (a lagging member); retry.
    FutureRevision,
    /// The target's quota alarm is raised: park and probe.
    NoSpace,
    /// The request exceeds a size limit. The core fills in the redacted key when it knows it.
    TooLarge { key_redacted: Option<String> },
    /// Retrying cannot help; an operator must act.
    Permanent {
        kind: PermanentKind,
        message: String,
    },
    /// The outcome is unknown (deadline on a write): the write may or may not have applied.
    Unknown { message: String },
}

impl Failure {
    /// A short stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Failure::Transient { .. } => "transient",
            Failure::Throttled { .. } => "throttled",
            Failure::Compacted { .. } => "compacted",
            Failure::FutureRevision => "future_revision",
            Failure::NoSpace => "no_space",
            Failure::TooLarge { .. } => "too_large",
            Failure::Permanent { .. } => "permanent",
            Failure::Unknown { .. } => "unknown",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient { message } => write!(f, "transient error: {message}"),
            Failure::Throttled { message } => write!(f, "throttled: {message}"),
            Failure::Compacted { rev } => write!(f, "revision compacted (compact revision {rev})"),
            Failure::FutureRevision => write!(f, "requested revision is in the future"),
            Failure::NoSpace => write!(f, "etcd database space exceeded (NOSPACE alarm)"),
            Failure::TooLarge {
                key_redacted: Some(k),
            } => {
                write!(f, "request too large (key {k})")
            }
            Failure::TooLarge { key_redacted: None } => write!(f, "request too large"),
            Failure::Permanent { kind, message } => {
                write!(f, "permanent error ({kind:?}): {message}")
            }
            Failure::Unknown { message } => write!(f, "outcome unknown: {message}"),
        }
    }
}

/// Classifies a gRPC status from etcd (or a transport error mapped to a code by the driver).
pub fn classify(code: Code, message: &str) -> Failure {
    let m = message.to_ascii_lowercase();
    let msg = || message.to_string();
    // Message checks first: etcd reuses codes across very different conditions.
    if m.contains("required revision has been compacted") {
        return Failure::Compacted { rev: 0 };
    }
    if m.contains("required revision is a future revision") {
        return Failure::FutureRevision;
    }
    if m.contains("database space exceeded") || m.contains("no space") {
        return Failure::NoSpace;
    }
    if m.contains("request is too large")
        || m.contains("message larger than max")
        || m.contains("larger than max")
    {
        return Failure::TooLarge { key_redacted: None };
    }
    if m.contains("too many requests") || m.contains("too many concurrent") {
        return Failure::Throttled { message: msg() };
    }
    if m.contains("too many operations in txn request") || m.contains("duplicate key given in txn")
    {
        return Failure::Permanent {
            kind: PermanentKind::InvalidRequest,
            message: msg(),
        };
    }
    if m.contains("authentication failed")
        || m.contains("permission denied")
        || m.contains("invalid auth token")
        || m.contains("user name is empty")
        || m.contains("auth: invalid")
    {
        return Failure::Permanent {
            kind: PermanentKind::Auth,
            message: msg(),
        };
    }
    if m.contains("no leader")
        || m.contains("leader changed")
        || m.contains("request timed out")
        || m.contains("timed out")
        || m.contains("connection")
    {
        return match code {
            Code::DeadlineExceeded => Failure::Unknown { message: msg() },
            _ => Failure::Transient { message: msg() },
        };
    }
    match code {
        Code::Ok => Failure::Transient {
            message: "ok status reported as error".into(),
        },
        Code::Cancelled | Code::Unavailable | Code::Aborted | Code::Internal => {
            Failure::Transient { message: msg() }
        }
        Code::DeadlineExceeded | Code::Unknown => Failure::Unknown { message: msg() },
        Code::ResourceExhausted => Failure::Throttled { message: msg() },
        Code::Unauthenticated | Code::PermissionDenied => Failure::Permanent {
            kind: PermanentKind::Auth,
            message: msg(),
        },
        Code::Unimplemented => Failure::Permanent {
            kind: PermanentKind::Unsupported,
            message: msg(),
        },
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange | Code::NotFound => {
            Failure::Permanent {
                kind: PermanentKind::InvalidRequest,
                message: msg(),
            }
        }
        Code::AlreadyExists | Code::DataLoss => Failure::Permanent {
            kind: PermanentKind::Other,
            message: msg(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_strings_classify() {
        let c = |code, m: &str| classify(code, m);
        assert_eq!(
            c(
                Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted"
            ),
            Failure::Compacted { rev: 0 }
        );
        assert_eq!(
            c(
                Code::OutOfRange,
                "etcdserver: mvcc: required revision is a future revision"
            ),
            Failure::FutureRevision
        );
        assert_eq!(
            c(
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded"
            ),
            Failure::NoSpace
        );
        assert_eq!(
            c(Code::InvalidArgument, "etcdserver: request is too large"),
            Failure::TooLarge { key_redacted: None }
        );
        assert_eq!(
            c(
                Code::ResourceExhausted,
                "grpc: trying to send message larger than max (3 vs. 2)"
            ),
            Failure::TooLarge { key_redacted: None }
        );
        assert!(matches!(
            c(Code::ResourceExhausted, "etcdserver: too many requests"),
            Failure::Throttled { .. }
        ));
        assert!(matches!(
            c(
                Code::InvalidArgument,
                "etcdserver: too many operations in txn request"
            ),
            Failure::Permanent {
                kind: PermanentKind::InvalidRequest,
                ..
            }
        ));
        assert!(matches!(
            c(
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password"
            ),
            Failure::Permanent {
                kind: PermanentKind::Auth,
                ..
            }
        ));
        assert!(matches!(
            c(Code::Unavailable, "etcdserver: no leader"),
            Failure::Transient { .. }
        ));
        assert!(matches!(
            c(Code::DeadlineExceeded, "context deadline exceeded"),
            Failure::Unknown { .. }
        ));
        assert!(matches!(
            c(Code::Unavailable, "transport error"),
            Failure::Transient { .. }
        ));
    }

    #[test]
    fn unknown_codes_are_unknown() {
        assert_eq!(Code::from_i32(99), Code::Unknown);
        assert_eq!(Code::from_i32(14), Code::Unavailable);
    }
}
