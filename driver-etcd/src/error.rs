//! Driver errors, and the one mapping of etcd-client errors onto core's [`Failure`].

use tidemark_core::classify::{classify, Code, Failure};

/// Errors the driver itself raises before the core is involved (config files, setup).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A config file could not be read. The IO error is part of the message, not a
    /// `source`, so a printed chain names it once.
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// A config file is not valid YAML/JSON for the EtcdMirror schema.
    #[error("cannot parse {path}: {message}")]
    Parse { path: String, message: String },
    /// The config is invalid; every problem is listed.
    #[error(transparent)]
    Invalid(#[from] tidemark_core::config::ConfigErrors),
    /// A TLS or credential file failed to load.
    #[error("{field}: {message}")]
    Credentials { field: String, message: String },
}

/// Maps any etcd-client error onto core's taxonomy. gRPC statuses keep their code and
/// message; transport-level failures count as `Unavailable` so they retry.
pub fn failure_from(e: &etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => classify(Code::from_i32(s.code() as i32), s.message()),
        E::TransportError(t) => classify(Code::Unavailable, &format!("transport error: {t}")),
        E::IoError(io) => classify(Code::Unavailable, &format!("io error: {io}")),
        E::WatchError(m) => classify(Code::Unavailable, &format!("watch error: {m}")),
        E::InvalidArgs(m) => classify(Code::InvalidArgument, m),
        E::InvalidUri(u) => classify(Code::InvalidArgument, &format!("invalid endpoint URI: {u}")),
        E::EndpointError(m) => classify(Code::Unavailable, &format!("endpoint error: {m}")),
        other => classify(Code::Unknown, &other.to_string()),
    }
}

/// The failure for a unary RPC that hit the driver's per-request deadline. The outcome of a
/// write that timed out is unknown, which is what `DeadlineExceeded` classifies as.
pub fn deadline_failure(what: &str, timeout: std::time::Duration) -> Failure {
    classify(
        Code::DeadlineExceeded,
        &format!("context deadline exceeded: {what} took longer than {timeout:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_status_keeps_code_and_message() {
        let e = etcd_client::Error::GRpcStatus(tonic_status(
            8,
            "etcdserver: mvcc: database space exceeded",
        ));
        assert_eq!(failure_from(&e), Failure::NoSpace);
    }

    #[test]
    fn deadline_is_unknown_outcome() {
        assert!(matches!(
            deadline_failure("txn", std::time::Duration::from_secs(1)),
            Failure::Unknown { .. }
        ));
    }

    fn tonic_status(code: i32, msg: &str) -> tonic::Status {
        tonic::Status::new(tonic::Code::from_i32(code), msg)
    }
}
