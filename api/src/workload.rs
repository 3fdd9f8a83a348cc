//! The objects `tidemark-mirror operator` keeps for one EtcdMirror: a ServiceAccount, a Role
//! that reads only what that EtcdMirror names, its RoleBinding, and the agent Deployment.
//!
//! Pure functions of the EtcdMirror and the operator's settings, so that what the operator
//! writes is tested here without an apiserver, and a reconcile is an idempotent apply of
//! their output (docs/design.md, "The operator").

use crate::{EtcdMirror, EtcdMirrorSpec};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::config::{EndpointSpec, MirrorConfig, Mode};

/// The field manager of every write the operator makes (server-side apply).
pub const FIELD_MANAGER: &str = "tidemark-operator";
/// The pod-template annotation that carries the hash of the spec the agent runs: a change
/// rolls the pod, a change of `spec.mode` alone does not (the agent drains in place).
pub const SPEC_HASH_ANNOTATION: &str = "tidemark.dev/spec-hash";
/// The label naming the EtcdMirror an object belongs to (its name, or a hash of a long one).
pub const MIRROR_LABEL: &str = "tidemark.dev/etcdmirror";
/// `app.kubernetes.io/managed-by` on every object the operator owns; its watches select it.
pub const MANAGED_BY: &str = "tidemark-operator";
/// The agent's read-only admin port (probes and metrics), as in `deploy/`.
pub const ADMIN_PORT: i32 = 9090;
/// Where the agent's scratch emptyDir (Secret material, mode 0600) is mounted.
pub const SCRATCH_DIR: &str = "/var/run/tidemark";

/// What the operator was started with that shapes every agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    /// The `tidemark-mirror` image the agents run (the operator's `--agent-image`).
    pub image: String,
    /// `imagePullPolicy` of the agent container.
    pub image_pull_policy: Option<String>,
    /// The agents' log format (`--log-format`).
    pub log_format: String,
}

/// The four objects of one agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentWorkload {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub deployment: Deployment,
}

/// Why an EtcdMirror cannot be given an agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The object has no name, namespace or uid (it was never stored).
    #[error("the EtcdMirror lacks metadata.{0}; only stored objects get an agent")]
    Unstored(&'static str),
    /// `spec.pod` asks for something the CRD's rules refuse.
    #[error("{0}")]
    Pod(String),
}

const MAX_NAME: usize = 63;

/// `tidemark-mirror-<name>`, or, when that exceeds 63 characters (a label value's limit, and
/// short enough for pod names derived from it), a prefix of it with a hash of the full name.
pub fn agent_name(mirror: &str) -> String {
    let full = format!("tidemark-mirror-{mirror}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash = &hex(&Sha256::digest(mirror.as_bytes()))[..10];
    let keep = MAX_NAME - hash.len() - 1;
    // Object names are ASCII, so any byte index is a char boundary.
    let head = full[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The label value that names `mirror`: the name itself when it is a valid label value.
fn mirror_label(mirror: &str) -> String {
    if mirror.len() <= MAX_NAME && !mirror.contains('.') {
        mirror.to_string()
    } else {
        hex(&Sha256::digest(mirror.as_bytes()))[..MAX_NAME].to_string()
    }
}

/// The labels every object of one agent carries; the first two select its pod.
pub fn labels(mirror: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "tidemark-mirror".into()),
        (MIRROR_LABEL.into(), mirror_label(mirror)),
        ("app.kubernetes.io/component".into(), "agent".into()),
        ("app.kubernetes.io/managed-by".into(), MANAGED_BY.into()),
    ])
}

fn selector(mirror: &str) -> BTreeMap<String, String> {
    let mut l = labels(mirror);
    l.retain(|k, _| k == "app.kubernetes.io/name" || k == MIRROR_LABEL);
    l
}

/// The Secrets the agent of `config` reads (`resolve.rs`), sorted.
pub fn referenced_secrets(config: &MirrorConfig) -> BTreeSet<String> {
    let side = |ep: &EndpointSpec| {
        let tls = ep
            .tls
            .iter()
            .flat_map(|t| [&t.secret_ref, &t.ca_bundle_ref]);
        let auth = ep.auth.iter().map(|a| &a.secret_ref);
        tls.chain(auth)
            .flatten()
            .map(|r| r.name.clone())
            .collect::<Vec<_>>()
    };
    side(&config.source)
        .into_iter()
        .chain(side(&config.target))
        .collect()
}

/// Fields naming files inside the agent's container, which an operator-run pod does not
/// have (it mounts no host or user volumes): the agent would stop at start.
pub fn file_fields(config: &MirrorConfig) -> Vec<String> {
    let mut out = Vec::new();
    for (side, ep) in [("source", &config.source), ("target", &config.target)] {
        if let Some(t) = &ep.tls {
            for (f, v) in [
                ("caFile", &t.ca_file),
                ("certFile", &t.cert_file),
                ("keyFile", &t.key_file),
            ] {
                if v.is_some() {
                    out.push(format!("{side}.tls.{f}"));
                }
            }
        }
        if ep.auth.as_ref().is_some_and(|a| a.password_file.is_some()) {
            out.push(format!("{side}.auth.passwordFile"));
        }
    }
    out
}

/// Hash of everything the agent pod depends on except `mode`: the agent switches to Drain
/// in place, and a restart in the middle of a cut-over would only delay it.
pub fn spec_hash(spec: &EtcdMirrorSpec, settings: &AgentSettings) -> String {
    let mut config = spec.config.clone();
    config.mode = Mode::Sync;
    let canonical = crate::sorted(serde_json::json!({
        "config": config,
        "pod": spec.pod,
        "image": settings.image,
        "logFormat": settings.log_format,
    }));
    hex(&Sha256::digest(canonical.to_string().as_bytes()))[..16].to_string()
}

/// The owner reference that makes Kubernetes' garbage collector remove the agent with its
/// EtcdMirror.
fn owner(uid: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: "tidemark.dev/v1alpha1".into(),
        kind: "EtcdMirror".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn default_resources() -> ResourceRequirements {
    let q = |s: &str| Quantity(s.into());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), q("100m")),
            ("memory".into(), q("128Mi")),
        ])),
        limits: Some(BTreeMap::from([("memory".into(), q("512Mi"))])),
        ..ResourceRequirements::default()
    }
}

fn rule(group: &str, resource: &str, names: Vec<String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        resource_names: (!names.is_empty()).then_some(names),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// The Role of one agent: get its EtcdMirror, patch its status, get the Secrets it names,
/// record Events. No Secret rule at all when it names none: an empty `resourceNames` would
/// grant every Secret in the namespace.
pub fn role_rules(mirror: &str, config: &MirrorConfig) -> Vec<PolicyRule> {
    let mut rules = vec![
        rule("tidemark.dev", "etcdmirrors", vec![mirror.into()], &["get"]),
        rule(
            "tidemark.dev",
            "etcdmirrors/status",
            vec![mirror.into()],
            &["patch"],
        ),
    ];
    let secrets: Vec<String> = referenced_secrets(config).into_iter().collect();
    if !secrets.is_empty() {
        rules.push(rule("", "secrets", secrets, &["get"]));
    }
    // Kubernetes cannot limit `create` by name; the agent only writes Events about its
    // own EtcdMirror.
    rules.push(rule(
        "events.k8s.io",
        "events",
        Vec::new(),
        &["create", "patch"],
    ));
    rules
}

/// Builds the agent objects of `m`.
pub fn agent_workload(m: &EtcdMirror, s: &AgentSettings) -> Result<AgentWorkload, WorkloadError> {
    let name = m
        .metadata
        .name
        .as_deref()
        .ok_or(WorkloadError::Unstored("name"))?;
    let ns = m
        .metadata
        .namespace
        .as_deref()
        .ok_or(WorkloadError::Unstored("namespace"))?;
    let uid = m
        .metadata
        .uid
        .as_deref()
        .ok_or(WorkloadError::Unstored("uid"))?;
    let pod = m.spec.pod.clone().unwrap_or_default();
    if let Some(p) = pod.validate().first() {
        return Err(WorkloadError::Pod(p.to_string()));
    }
    let agent = agent_name(name);
    let meta = ObjectMeta {
        name: Some(agent.clone()),
        namespace: Some(ns.into()),
        labels: Some(labels(name)),
        owner_references: Some(vec![owner(uid, name)]),
        ..ObjectMeta::default()
    };
    let service_account = ServiceAccount {
        metadata: meta.clone(),
        ..ServiceAccount::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(role_rules(name, &m.spec.config)),
    };
    let role_binding = RoleBinding {
        metadata: meta.clone(),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: agent.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: agent.clone(),
            namespace: Some(ns.into()),
            ..Subject::default()
        }]),
    };
    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("admin".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Probe::default()
    };
    let container = Container {
        name: "tidemark-mirror".into(),
        image: Some(s.image.clone()),
        image_pull_policy: s.image_pull_policy.clone(),
        args: Some(vec![
            "run".into(),
            "--resource".into(),
            format!("{ns}/{name}"),
            "--admin-addr".into(),
            format!("0.0.0.0:{ADMIN_PORT}"),
            "--log-format".into(),
            s.log_format.clone(),
        ]),
        env: Some(vec![EnvVar {
            name: "TMPDIR".into(),
            value: Some(SCRATCH_DIR.into()),
            ..EnvVar::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("admin".into()),
            container_port: ADMIN_PORT,
            ..ContainerPort::default()
        }]),
        startup_probe: Some(probe("/healthz", 2, 30)),
        liveness_probe: Some(probe("/healthz", 10, 6)),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        resources: Some(pod.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "scratch".into(),
            mount_path: SCRATCH_DIR.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let template_meta = ObjectMeta {
        labels: Some(labels(name)),
        annotations: Some(BTreeMap::from([(
            SPEC_HASH_ANNOTATION.into(),
            spec_hash(&m.spec, s),
        )])),
        ..ObjectMeta::default()
    };
    let deployment = Deployment {
        metadata: meta,
        spec: DeploymentSpec {
            replicas: Some(1),
            // Two agents on one link would fight over the fence: the old pod must be gone
            // before the new one starts.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..DeploymentStrategy::default()
            }),
            selector: LabelSelector {
                match_labels: Some(selector(name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(template_meta),
                spec: Some(PodSpec {
                    service_account_name: Some(agent.clone()),
                    termination_grace_period_seconds: Some(45),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        run_as_group: Some(65532),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "scratch".into(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            medium: Some("Memory".into()),
                            size_limit: Some(Quantity("16Mi".into())),
                            ..EmptyDirVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    node_selector: (!pod.node_selector.is_empty())
                        .then(|| pod.node_selector.clone()),
                    tolerations: (!pod.tolerations.is_empty()).then(|| pod.tolerations.clone()),
                    affinity: pod.affinity.clone(),
                    priority_class_name: pod.priority_class_name.clone(),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    };
    Ok(AgentWorkload {
        service_account,
        role,
        role_binding,
        deployment,
    })
}
