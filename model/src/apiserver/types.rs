//! The apiserver's vocabulary: how a collection is addressed, what a request may fail with,
//! the operations a fault may target, and the events a watch sees.

use serde_json::{json, Value};

/// Group, version and plural resource name: how the REST API addresses a collection.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gvr {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `secrets`.
    pub resource: String,
}

impl Gvr {
    /// Builds a Gvr from its parts.
    pub fn new(group: &str, version: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
        }
    }

    /// Core `v1` Secrets.
    pub fn secrets() -> Gvr {
        Gvr::new("", "v1", "secrets")
    }

    /// Eno Compositions.
    pub fn compositions() -> Gvr {
        Gvr::new("eno.azure.io", "v1", "compositions")
    }

    /// Eno ResourceSlices.
    pub fn resource_slices() -> Gvr {
        Gvr::new("eno.azure.io", "v1", "resourceslices")
    }

    /// tidemark EtcdMirrors (a later issue).
    pub fn etcd_mirrors() -> Gvr {
        Gvr::new("tidemark.dev", "v1alpha1", "etcdmirrors")
    }

    /// `apiVersion` as written in objects.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// What the model knows about a resource type beyond its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// Kind written into stored objects.
    pub kind: String,
    /// Whether `/status` is a separate subresource (main-endpoint writes keep status).
    pub status_subresource: bool,
    /// Whether objects carry metadata.generation (CRDs do; Secrets do not).
    pub generation: bool,
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    Main,
    /// The `/status` subresource.
    Status,
}

/// An apiserver error, mapped one to one onto a `kind: Status` failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// Plural resource.
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 on create when the name exists.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// Plural resource.
        resource: String,
        /// Object name.
        name: String,
    },
    /// 409 on a stale resourceVersion or uid precondition.
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        /// Plural resource.
        resource: String,
        /// Object name.
        name: String,
        /// Why.
        message: String,
    },
    /// 422.
    #[error("{kind} \"{name}\" is invalid: {message}")]
    Invalid {
        /// Kind of the object.
        kind: String,
        /// Object name.
        name: String,
        /// Field and reason.
        message: String,
    },
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 405.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 500, only ever injected.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::Internal(_) => 500,
        }
    }

    /// The `reason` field of the Status object.
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::Internal(_) => "InternalError",
        }
    }

    /// The `kind: Status` failure body the apiserver sends.
    pub fn status(&self, group: &str) -> Value {
        let details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. } => {
                json!({"name": name, "group": group, "kind": resource})
            }
            ApiError::Invalid {
                kind,
                name,
                message,
            } => json!({
                "name": name, "group": group, "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message}]
            }),
            _ => json!({}),
        };
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "details": details,
            "code": self.code(),
        })
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound { .. })
    }

    /// Whether this is a 409 of either kind.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            ApiError::Conflict { .. } | ApiError::AlreadyExists { .. }
        )
    }
}

/// The operation a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// GET of one object.
    Get,
    /// LIST of a collection.
    List,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
    /// Any of create, update, patch, delete.
    AnyWrite,
}

impl Op {
    pub(super) fn covers(self, actual: Op) -> bool {
        self == actual
            || (self == Op::AnyWrite
                && matches!(actual, Op::Create | Op::Update | Op::Patch | Op::Delete))
    }
}

/// An injected failure: the next matching request fails with `error` instead of running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Which operation.
    pub op: Op,
    /// Restricts to one resource type (plural name), if set.
    pub resource: Option<String>,
    /// Restricts to one object name, if set.
    pub name: Option<String>,
    /// What the request gets instead.
    pub error: ApiError,
}

impl Fault {
    /// The next write to `resource`/`name` answers 409 Conflict.
    pub fn conflict_next_write(resource: &str, name: &str) -> Fault {
        Fault {
            op: Op::AnyWrite,
            resource: Some(resource.to_string()),
            name: Some(name.to_string()),
            error: ApiError::Conflict {
                resource: resource.to_string(),
                name: name.to_string(),
                message: "the object has been modified; please apply your changes to the latest version and try again".to_string(),
            },
        }
    }
}

/// A watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed (including becoming terminating).
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One entry of the watch log.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// The resourceVersion this change produced.
    pub rv: u64,
    /// Which collection.
    pub gvr: Gvr,
    /// Namespace of the object.
    pub namespace: String,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (before it, for Deleted).
    pub object: Value,
}

/// A JSON patch operation (RFC 6902) as kube sends it.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json` (RFC 7386).
    Merge(Value),
    /// `application/json-patch+json`.
    Json(Vec<Value>),
}
