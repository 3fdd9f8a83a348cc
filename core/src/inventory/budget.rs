//! What recovery may delete on its own: protected kinds and the deletion budget.
//!
//! Recovery deletes with a privileged identity on the word of Secrets anyone with write
//! access to the Secret namespace could have shaped. So some objects are never deleted
//! unless the operator says so ([`Protection`]), and a plan that would delete more than a
//! bound is held for an operator ([`Hold`]) instead of run.

use super::entry::Entry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Why a tombstone is planned but not deleted unless the operator lifts the protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protection {
    /// A Namespace: deleting it deletes everything in it.
    Namespace,
    /// A CustomResourceDefinition: deleting it deletes every object of its kind.
    CustomResourceDefinition,
    /// Anything in `kube-system`.
    KubeSystem,
}

impl Protection {
    /// Every protection, in declaration order.
    pub const ALL: [Protection; 3] = [
        Protection::Namespace,
        Protection::CustomResourceDefinition,
        Protection::KubeSystem,
    ];

    /// The name used by `--deletable-protected-kinds` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Protection::Namespace => "Namespace",
            Protection::CustomResourceDefinition => "CustomResourceDefinition",
            Protection::KubeSystem => "kube-system",
        }
    }

    /// The protection that applies to `e`, if any (kinds are matched whatever the group,
    /// as Eno matches managed kinds).
    pub fn of(e: &Entry) -> Option<Protection> {
        match e.kind.as_str() {
            "Namespace" => Some(Protection::Namespace),
            "CustomResourceDefinition" => Some(Protection::CustomResourceDefinition),
            _ if e.namespace.as_deref() == Some("kube-system") => Some(Protection::KubeSystem),
            _ => None,
        }
    }
}

impl fmt::Display for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--deletable-protected-kinds` value that names no protection.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown protected kind {0:?}: use Namespace, CustomResourceDefinition or kube-system")]
pub struct UnknownProtection(pub String);

impl FromStr for Protection {
    type Err = UnknownProtection;
    fn from_str(s: &str) -> Result<Protection, UnknownProtection> {
        Protection::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownProtection(s.to_string()))
    }
}

/// The limits recovery works within. The defaults are the controller's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// Accept a snapshot recorded in, or an override naming the lineage of, another
    /// namespace (`--allow-cross-namespace-lineage`; moving a Composition on purpose).
    pub allow_cross_namespace_lineage: bool,
    /// Most deletions one recovery may make without an operator (`--max-deletions`).
    pub max_deletions: u64,
    /// Most deletions as a fraction of the snapshot's entries (`--max-deletion-fraction`).
    pub max_deletion_fraction: f64,
    /// Protections lifted by the operator (`--deletable-protected-kinds`).
    pub deletable_protected: BTreeSet<Protection>,
    /// An operator's release of a held plan: up to this many deletions, whatever the
    /// limits above (`recover --apply --allow-deletions N`).
    pub allow_deletions: Option<u64>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            allow_cross_namespace_lineage: false,
            max_deletions: 100,
            max_deletion_fraction: 0.5,
            deletable_protected: BTreeSet::new(),
            allow_deletions: None,
        }
    }
}

/// A plan over budget: nothing is deleted until an operator releases it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// Deletions the plan would make (protected tombstones not counted).
    pub deletions: u64,
    /// The most allowed without an operator.
    pub limit: u64,
}

impl Policy {
    /// The protection still in force for `e` (none when the operator lifted it).
    pub fn protection(&self, e: &Entry) -> Option<Protection> {
        Protection::of(e).filter(|p| !self.deletable_protected.contains(p))
    }

    /// The deletion limit for a snapshot of `snapshot_entries` entries.
    pub fn limit(&self, snapshot_entries: usize) -> u64 {
        if let Some(n) = self.allow_deletions {
            return n;
        }
        // Float to integer casts saturate; a negative or NaN fraction allows nothing.
        let by_fraction = (self.max_deletion_fraction * snapshot_entries as f64).floor() as u64;
        self.max_deletions.min(by_fraction)
    }

    /// `Some` when `deletions` is over the limit for the snapshot.
    pub fn hold(&self, deletions: u64, snapshot_entries: usize) -> Option<Hold> {
        let limit = self.limit(snapshot_entries);
        (deletions > limit).then_some(Hold { deletions, limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: &str, ns: Option<&str>) -> Entry {
        Entry {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            name: "x".into(),
            labels: None,
            annotations: None,
        }
    }

    #[test]
    fn protected_kinds_and_lifting() {
        let mut p = Policy::default();
        assert_eq!(
            p.protection(&e("Namespace", None)),
            Some(Protection::Namespace)
        );
        assert_eq!(
            p.protection(&e("CustomResourceDefinition", None)),
            Some(Protection::CustomResourceDefinition)
        );
        assert_eq!(
            p.protection(&e("ConfigMap", Some("kube-system"))),
            Some(Protection::KubeSystem)
        );
        assert_eq!(p.protection(&e("ConfigMap", Some("app"))), None);
        p.deletable_protected
            .insert(Protection::CustomResourceDefinition);
        assert_eq!(p.protection(&e("CustomResourceDefinition", None)), None);
        assert_eq!(
            p.protection(&e("Namespace", None)),
            Some(Protection::Namespace)
        );
        for q in Protection::ALL {
            assert_eq!(q.name().parse::<Protection>(), Ok(q));
        }
        assert!("Secret".parse::<Protection>().is_err());
    }

    #[test]
    fn budget_by_count_fraction_and_release() {
        let p = Policy::default();
        // 101 of 1000: over the count limit only.
        assert_eq!(
            p.hold(101, 1000),
            Some(Hold {
                deletions: 101,
                limit: 100
            })
        );
        assert_eq!(p.hold(100, 1000), None);
        // 4 of 7: over half the snapshot.
        assert_eq!(
            p.hold(4, 7),
            Some(Hold {
                deletions: 4,
                limit: 3
            })
        );
        assert_eq!(p.hold(3, 6), None);
        let released = Policy {
            allow_deletions: Some(101),
            ..Policy::default()
        };
        assert_eq!(released.hold(101, 150), None);
        assert!(released.hold(102, 1000).is_some());
    }
}
