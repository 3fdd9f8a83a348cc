//! `spec.pod`: how the operator runs the agent pod of one EtcdMirror.
//!
//! The agent never reads it; only `tidemark-mirror operator` does, when it builds the agent's
//! Deployment (`workload.rs`). The types are Kubernetes' own, so the CRD schema is the one
//! users know from Pods, and the CEL rules of `rules.rs` check what the apiserver would
//! otherwise only refuse later, when the operator's Deployment is created.

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tidemark_core::config::ConfigProblem;

/// Most `nodeSelector` entries and `tolerations` accepted (also the CRD's bounds).
pub const MAX_POD_LIST: usize = 64;

/// Scheduling and resources of the agent pod; everything else about the pod is fixed by the
/// operator (hardened security context, probes, one replica, `Recreate`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentPod {
    /// Compute resources of the agent container. Default: requests cpu 100m and memory
    /// 128Mi, limit memory 512Mi (a genesis holds at most four pages of keys in memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node labels the agent pod must be scheduled on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the agent pod tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity of the agent pod, e.g. to keep it near the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// PriorityClass of the agent pod; a mirror that falls behind during node pressure
    /// may need one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`, at most 253 bytes:
/// a Kubernetes object name (DNS-1123 subdomain).
pub fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

impl AgentPod {
    /// The operator's own check of what the CRD's rules (`rules.rs`, `pod-*`) refuse, for
    /// an object stored before the rules existed or a CRD installed without them.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut out = Vec::new();
        let mut bad = |field: &str, problem: String| {
            out.push(ConfigProblem {
                field: format!("pod.{field}"),
                problem,
            })
        };
        if self.node_selector.len() > MAX_POD_LIST {
            bad(
                "nodeSelector",
                format!(
                    "at most {MAX_POD_LIST} entries, got {}",
                    self.node_selector.len()
                ),
            );
        }
        if self.tolerations.len() > MAX_POD_LIST {
            bad(
                "tolerations",
                format!(
                    "at most {MAX_POD_LIST} entries, got {}",
                    self.tolerations.len()
                ),
            );
        }
        for (i, t) in self.tolerations.iter().enumerate() {
            if t.operator.as_deref() == Some("Exists")
                && t.value.as_deref().is_some_and(|v| !v.is_empty())
            {
                bad(
                    &format!("tolerations[{i}]"),
                    "operator Exists takes no value; remove value or use operator Equal".into(),
                );
            }
            if let Some(op) = t.operator.as_deref() {
                if op != "Exists" && op != "Equal" {
                    bad(
                        &format!("tolerations[{i}].operator"),
                        format!("must be Exists or Equal, got {op:?}"),
                    );
                }
            }
        }
        if let Some(p) = &self.priority_class_name {
            if !is_dns_subdomain(p) {
                bad(
                    "priorityClassName",
                    format!("{p:?} is not a PriorityClass name (lowercase DNS subdomain)"),
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for ok in ["a", "system-cluster-critical", "a.b-c.d1", &"a".repeat(63)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn validate_names_each_problem() {
        let mut p = AgentPod {
            priority_class_name: Some("High".into()),
            ..AgentPod::default()
        };
        p.tolerations.push(Toleration {
            operator: Some("Exists".into()),
            value: Some("x".into()),
            ..Toleration::default()
        });
        p.tolerations.push(Toleration {
            operator: Some("In".into()),
            ..Toleration::default()
        });
        let fields: Vec<String> = p.validate().into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "pod.tolerations[0]",
                "pod.tolerations[1].operator",
                "pod.priorityClassName"
            ]
        );
        assert!(AgentPod::default().validate().is_empty());
    }
}
