//! CEL validation rules (`x-kubernetes-validations`) injected into the generated spec schema.
//!
//! The spec types live in `tidemark-core`, which knows nothing of Kubernetes, so the rules are
//! attached here to schema nodes named by their property path. Every rule mirrors a check of
//! `MirrorConfig::validate()` (or is a transition rule the agent cannot check, since it never
//! sees the old object); the tests evaluate both on the same objects.
//!
//! Rules read optional fields through `has()` with the serde default as fallback, so they hold
//! whether or not the apiserver has applied schema defaults.

use crate::pod::MAX_POD_LIST;
use serde_json::{json, Map, Value};
use tidemark_core::config::{MAX_ENDPOINTS, MAX_EXCLUDE_PREFIXES};

/// One rule attached to one schema node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Stable identifier, used by tests and docs.
    pub id: &'static str,
    /// Property path of the node from the spec root (`[]` is the spec itself).
    pub node: Vec<&'static str>,
    /// The CEL expression; `self` is the node's value.
    pub rule: String,
    /// Shown to the user when the rule fails.
    pub message: String,
    /// Field (relative to the node) the error is reported on, if narrower than the node.
    pub field_path: Option<&'static str>,
}

impl Rule {
    /// Whether the rule compares with the stored object (evaluated on update only).
    pub fn is_transition(&self) -> bool {
        self.rule.contains("oldSelf")
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("rule".into(), json!(self.rule));
        m.insert("message".into(), json!(self.message));
        if let Some(p) = self.field_path {
            m.insert("fieldPath".into(), json!(p));
        }
        Value::Object(m)
    }
}

/// `x.field` or `default` when the field is absent.
fn or_default(x: &str, field: &str, default: &str) -> String {
    format!("(has({x}.{field}) ? {x}.{field} : {default})")
}

/// `x.a.b` or `default` when `a` or `b` is absent.
fn nested_or_default(x: &str, a: &str, b: &str, default: &str) -> String {
    format!("(has({x}.{a}) && has({x}.{a}.{b}) ? {x}.{a}.{b} : {default})")
}

/// The target range base, `target.prefix + sync.destPrefix`, of the spec `x`.
fn target_base(x: &str) -> String {
    format!(
        "{} + {}",
        or_default(&format!("{x}.target"), "prefix", "''"),
        nested_or_default(x, "sync", "destPrefix", "''")
    )
}

/// Every rule, in the order they appear in the CRD.
pub fn rules() -> Vec<Rule> {
    let mut r = Vec::new();
    // Spec-level rules: cross-field and transition rules over `sync` and `checkpoint`.
    let dest = |x: &str| nested_or_default(x, "sync", "destPrefix", "''");
    r.push(Rule {
        id: "immutable-dest-prefix",
        node: vec![],
        rule: format!("{} == {}", dest("self"), dest("oldSelf")),
        message: "sync.destPrefix is immutable; create a new EtcdMirror for a new range".into(),
        field_path: Some(".sync.destPrefix"),
    });
    let excl = |x: &str| nested_or_default(x, "sync", "excludePrefixes", "[]");
    r.push(Rule {
        id: "immutable-exclude-prefixes",
        node: vec![],
        rule: format!("{} == {}", excl("self"), excl("oldSelf")),
        message: "sync.excludePrefixes is immutable; create a new EtcdMirror for a new range"
            .into(),
        field_path: Some(".sync.excludePrefixes"),
    });
    let key = |x: &str| nested_or_default(x, "checkpoint", "key", "''");
    r.push(Rule {
        id: "immutable-checkpoint-key",
        node: vec![],
        rule: format!("{} == {}", key("self"), key("oldSelf")),
        message: "checkpoint.key is immutable: the fence would be lost".into(),
        field_path: Some(".checkpoint.key"),
    });
    r.push(Rule {
        id: "checkpoint-key-under-target-range",
        node: vec![],
        rule: format!(
            "!has(self.checkpoint) || !has(self.checkpoint.key) || \
             (self.checkpoint.key.startsWith({base}) && \
             self.checkpoint.key.substring(size({base})).contains('\\u0000'))",
            base = format!("({})", target_base("self"))
        ),
        message:
            "checkpoint.key must start with target.prefix + sync.destPrefix and contain a \\0 \
                  after it, so it can never collide with a mirrored key"
                .into(),
        field_path: Some(".checkpoint.key"),
    });
    r.push(Rule {
        id: "target-range-not-whole-keyspace",
        node: vec![],
        rule: format!("{} != ''", target_base("self")),
        message: "target.prefix and sync.destPrefix are both empty, so the mirror would own the \
                  whole target keyspace; set a prefix such as \"/mirror/\""
            .into(),
        field_path: Some(".target.prefix"),
    });
    r.push(Rule {
        id: "start-revision-needs-overwrite",
        node: vec![],
        rule: format!(
            "{} <= 0 || {} != 'RequireEmpty'",
            nested_or_default("self", "initialSync", "startRevision", "0"),
            nested_or_default("self", "initialSync", "mode", "'RequireEmpty'")
        ),
        message: "initialSync.startRevision > 0 requires initialSync.mode Overwrite or \
                  OverwriteAndPrune: RequireEmpty always scans"
            .into(),
        field_path: Some(".initialSync.startRevision"),
    });
    r.push(Rule {
        id: "start-revision-not-negative",
        node: vec![],
        rule: format!(
            "{} >= 0",
            nested_or_default("self", "initialSync", "startRevision", "0")
        ),
        message: "initialSync.startRevision must be 0 (scan) or a positive source revision".into(),
        field_path: Some(".initialSync.startRevision"),
    });
    r.push(Rule {
        id: "abandon-watermark-positive",
        node: vec![],
        rule: "!has(self.initialSync) || !has(self.initialSync.abandonWatermark) || \
               self.initialSync.abandonWatermark > 0"
            .into(),
        message: "initialSync.abandonWatermark must be the positive fence watermark that \
                  SourceHistoryMismatch reported; omit it otherwise"
            .into(),
        field_path: Some(".initialSync.abandonWatermark"),
    });

    for side in ["source", "target"] {
        let prefix = |x: &str| or_default(x, "prefix", "''");
        r.push(Rule {
            id: if side == "source" {
                "immutable-source-prefix"
            } else {
                "immutable-target-prefix"
            },
            node: vec![side],
            rule: format!("{} == {}", prefix("self"), prefix("oldSelf")),
            message: format!("{side}.prefix is immutable; create a new EtcdMirror for a new range"),
            field_path: Some(".prefix"),
        });
        r.push(Rule {
            id: "exactly-one-endpoint",
            node: vec![side],
            rule: "(has(self.endpointList) && size(self.endpointList) > 0) != has(self.serviceRef)"
                .into(),
            message: format!("{side}: set exactly one of endpointList or serviceRef"),
            field_path: None,
        });
        r.push(Rule {
            id: "endpoint-url-form",
            node: vec![side],
            rule: "!has(self.endpointList) || \
                   self.endpointList.all(u, u.matches('^https?://.+'))"
                .into(),
            message: format!(
                "{side}.endpointList: every entry must be an http:// or https:// URL with a host \
                 and port"
            ),
            field_path: Some(".endpointList"),
        });
        r.push(Rule {
            id: "scheme-matches-tls",
            node: vec![side],
            rule: "!has(self.endpointList) || (has(self.tls) ? \
                   self.endpointList.all(u, !u.startsWith('http://')) : \
                   self.endpointList.all(u, !u.startsWith('https://')))"
                .into(),
            message: format!(
                "{side}: https:// endpoints require tls, and tls requires https:// endpoints \
                 (one scheme for all)"
            ),
            field_path: Some(".tls"),
        });
        r.push(Rule {
            id: "insecure-skip-verify-acknowledged",
            node: vec![side, "tls"],
            rule: format!(
                "!{} || {}",
                or_default("self", "insecureSkipVerify", "false"),
                or_default("self", "insecureSkipVerifyAcknowledgeRisk", "false")
            ),
            message: format!(
                "{side}.tls.insecureSkipVerify requires insecureSkipVerifyAcknowledgeRisk: true; \
                 prefer a CA bundle"
            ),
            field_path: Some(".insecureSkipVerify"),
        });
        r.push(Rule {
            id: "ca-with-insecure-skip-verify",
            node: vec![side, "tls"],
            rule: format!(
                "!{} || !(has(self.caFile) || has(self.caBundleRef))",
                or_default("self", "insecureSkipVerify", "false")
            ),
            message: format!(
                "{side}.tls.insecureSkipVerify would silently ignore the CA (caFile or \
                 caBundleRef); remove insecureSkipVerify"
            ),
            field_path: Some(".insecureSkipVerify"),
        });
        r.push(Rule {
            id: "auth-needs-tls",
            node: vec![side],
            rule: format!(
                "!has(self.auth) || {} || !has(self.endpointList) || \
                 self.endpointList.all(u, !u.startsWith('http://'))",
                or_default("self.auth", "plaintextAcknowledgeRisk", "false")
            ),
            message: format!(
                "{side}.auth would send the password over plain http://; use https:// with tls, \
                 or set auth.plaintextAcknowledgeRisk: true"
            ),
            field_path: Some(".auth"),
        });
        r.push(Rule {
            id: "endpoint-without-credentials",
            node: vec![side],
            rule: "!has(self.endpointList) || self.endpointList.all(u, !u.contains('@'))".into(),
            message: format!(
                "{side}.endpointList: credentials in a URL would be logged; use auth instead"
            ),
            field_path: Some(".endpointList"),
        });
        for (node, what) in [
            (vec![side, "tls", "secretRef"], "tls.secretRef"),
            (vec![side, "tls", "caBundleRef"], "tls.caBundleRef"),
            (vec![side, "auth", "secretRef"], "auth.secretRef"),
            (vec![side, "serviceRef"], "serviceRef"),
        ] {
            r.push(Rule {
                id: "ref-name-not-empty",
                node,
                rule: "size(self.name) > 0".into(),
                message: format!("{side}.{what}.name must not be empty"),
                field_path: Some(".name"),
            });
        }
    }
    // `spec.pod`: what the operator's Deployment would otherwise be refused for later, out
    // of the user's sight (`AgentPod::validate`).
    r.push(Rule {
        id: "pod-toleration-operator",
        node: vec!["pod"],
        rule: "!has(self.tolerations) || \
               self.tolerations.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])"
            .into(),
        message: "pod.tolerations: operator must be Exists or Equal".into(),
        field_path: Some(".tolerations"),
    });
    r.push(Rule {
        id: "pod-toleration-exists-without-value",
        node: vec!["pod"],
        rule: "!has(self.tolerations) || self.tolerations.all(t, !has(t.operator) || \
               t.operator != 'Exists' || !has(t.value) || t.value == '')"
            .into(),
        message: "pod.tolerations: operator Exists takes no value; remove value or use \
                  operator Equal"
            .into(),
        field_path: Some(".tolerations"),
    });
    r.push(Rule {
        id: "pod-priority-class-name",
        node: vec!["pod"],
        rule: "!has(self.priorityClassName) || self.priorityClassName.matches(\
               '^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')"
            .into(),
        message: "pod.priorityClassName must be a PriorityClass name (lowercase DNS subdomain)"
            .into(),
        field_path: Some(".priorityClassName"),
    });
    r
}

/// Upper bounds on lists the rules iterate over. Without them the apiserver's CEL cost
/// estimator assumes request-sized lists and refuses the CRD. The agent refuses the same
/// counts (`MirrorConfig::validate`).
pub const BOUNDS: &[(&[&str], &str, u64)] = &[
    (
        &["source", "endpointList"],
        "maxItems",
        MAX_ENDPOINTS as u64,
    ),
    (
        &["target", "endpointList"],
        "maxItems",
        MAX_ENDPOINTS as u64,
    ),
    (
        &["sync", "excludePrefixes"],
        "maxItems",
        MAX_EXCLUDE_PREFIXES as u64,
    ),
    (&["pod", "tolerations"], "maxItems", MAX_POD_LIST as u64),
    (
        &["pod", "nodeSelector"],
        "maxProperties",
        MAX_POD_LIST as u64,
    ),
    (&["pod", "priorityClassName"], "maxLength", 253),
];

/// Longest accepted string anywhere in the spec, for the same reason as [`BOUNDS`]; the
/// agent refuses the same lengths (`MirrorConfig::validate`).
pub const MAX_STRING_LENGTH: u64 = tidemark_core::config::MAX_STRING_LENGTH as u64;

fn node_mut<'a>(spec: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut cur = spec;
    for p in path {
        cur = cur.get_mut("properties")?.get_mut(*p)?;
    }
    cur.as_object_mut()
}

/// Adds the rules and bounds to the spec schema (`openAPIV3Schema.properties.spec`).
///
/// Panics when a rule names a node the schema lacks: that is a programming error caught by
/// the CRD tests, not a runtime condition.
pub fn inject(spec: &mut Value) {
    for rule in rules() {
        let node = node_mut(spec, &rule.node)
            .unwrap_or_else(|| panic!("rule {} names a missing node {:?}", rule.id, rule.node));
        let list = node
            .entry("x-kubernetes-validations")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = list {
            list.push(rule.to_json());
        }
    }
    for (path, key, bound) in BOUNDS {
        let node =
            node_mut(spec, path).unwrap_or_else(|| panic!("bound names a missing node {path:?}"));
        node.insert((*key).into(), json!(bound));
    }
    bound_strings(spec);
}

/// Puts `maxLength` on every string in the spec that has no `enum`.
fn bound_strings(v: &mut Value) {
    if let Value::Object(m) = v {
        if m.get("type") == Some(&json!("string"))
            && !m.contains_key("enum")
            && !m.contains_key("maxLength")
        {
            m.insert("maxLength".into(), json!(MAX_STRING_LENGTH));
        }
        for (k, child) in m.iter_mut() {
            if k == "properties" {
                if let Value::Object(props) = child {
                    for p in props.values_mut() {
                        bound_strings(p);
                    }
                }
            } else if k == "items" {
                bound_strings(child);
            }
        }
    }
}
