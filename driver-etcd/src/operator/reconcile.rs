//! One reconcile: apply the agent objects that `tidemark_api::workload` builds for an
//! EtcdMirror, and say on the EtcdMirror (Events) what changed or why nothing could be.

use super::Shared;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tidemark_api::events::reason;
use tidemark_api::workload::{
    agent_workload, file_fields, spec_hash, WorkloadError, FIELD_MANAGER, SPEC_HASH_ANNOTATION,
};
use tidemark_api::EtcdMirror;

/// Every success is checked again after this long, which also repairs an agent object that
/// someone edited or deleted (only Deployments are watched).
pub const RESYNC: Duration = Duration::from_secs(300);
/// After a failed apply.
pub const RETRY: Duration = Duration::from_secs(15);

/// A failed reconcile; kube-runtime retries it after [`RETRY`].
#[derive(Debug, thiserror::Error)]
#[error("applying {what} for EtcdMirror {mirror}: {source}")]
pub struct ApplyError {
    mirror: String,
    what: String,
    #[source]
    source: kube::Error,
}

async fn apply<K>(api: Api<K>, obj: &K, mirror: &str) -> Result<K, ApplyError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    // Forced: the operator is the only manager of these fields, and a user's edit of them
    // is drift to undo, not a conflict to stop on.
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(obj))
        .await
        .map_err(|source| ApplyError {
            mirror: mirror.to_string(),
            what: format!("{} {name}", K::kind(&())),
            source,
        })
}

/// Reconciles one EtcdMirror.
pub async fn reconcile(m: Arc<EtcdMirror>, shared: Arc<Shared>) -> Result<Action, ApplyError> {
    let ns = m.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", m.name_any());
    if m.meta().deletion_timestamp.is_some() {
        // Kubernetes' garbage collector removes the agent through its owner reference.
        shared.forget(&key);
        return Ok(Action::await_change());
    }
    let workload = match agent_workload(&m, &shared.settings) {
        Ok(w) => w,
        Err(e @ WorkloadError::Pod(_)) | Err(e @ WorkloadError::Unstored(_)) => {
            let note = format!("no agent is run for this spec: {e}");
            shared
                .note(&key, Some(note.clone()), None, |s| s.invalid += 1)
                .await;
            shared
                .event(&m, true, reason::AGENT_SPEC_INVALID, note)
                .await;
            return Ok(Action::await_change());
        }
    };
    let files = file_fields(&m.spec.config);
    if !files.is_empty() {
        // The agent will stop at start and say so in its status; say it here first.
        shared
            .event(
                &m,
                true,
                reason::AGENT_SPEC_INVALID,
                format!(
                    "{} name files the operator's agent pod does not have; use secretRef, \
                     caBundleRef or auth.secretRef instead",
                    files.join(", ")
                ),
            )
            .await;
    }
    let client = shared.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let before = deployments
        .get_opt(&workload.deployment.name_any())
        .await
        .map_err(|source| ApplyError {
            mirror: key.clone(),
            what: "reading the Deployment".into(),
            source,
        })?;
    apply(
        Api::<ServiceAccount>::namespaced(client.clone(), &ns),
        &workload.service_account,
        &key,
    )
    .await?;
    apply(
        Api::<Role>::namespaced(client.clone(), &ns),
        &workload.role,
        &key,
    )
    .await?;
    apply(
        Api::<RoleBinding>::namespaced(client.clone(), &ns),
        &workload.role_binding,
        &key,
    )
    .await?;
    apply(deployments, &workload.deployment, &key).await?;
    let hash = spec_hash(&m.spec, &shared.settings);
    let old_hash = before.as_ref().and_then(|d| {
        d.spec
            .template
            .metadata
            .as_ref()
            .and_then(|t| t.annotations.as_ref())
            .and_then(|a| a.get(SPEC_HASH_ANNOTATION).cloned())
    });
    let deployment = workload.deployment.name_any();
    match (&before, old_hash.as_deref() == Some(hash.as_str())) {
        (None, _) => {
            tracing::info!(mirror = %key, %deployment, "agent created");
            shared
                .event(
                    &m,
                    false,
                    reason::AGENT_CREATED,
                    format!(
                        "Deployment {deployment} runs the agent ({})",
                        shared.settings.image
                    ),
                )
                .await;
        }
        (Some(_), false) => {
            tracing::info!(mirror = %key, %deployment, "spec changed; agent rolled");
            shared
                .event(
                    &m,
                    false,
                    reason::AGENT_UPDATED,
                    format!("the spec changed; Deployment {deployment} replaces the agent pod"),
                )
                .await;
        }
        (Some(_), true) => {}
    }
    shared
        .note(&key, None, Some((deployment, hash)), |s| s.applied += 1)
        .await;
    Ok(Action::requeue(RESYNC))
}

/// kube-runtime's error policy: log, count, retry.
pub fn error_policy(_m: Arc<EtcdMirror>, e: &ApplyError, shared: Arc<Shared>) -> Action {
    tracing::warn!(error = %e, "reconcile failed; retrying in {RETRY:?}");
    shared.failed(e.to_string());
    Action::requeue(RETRY)
}

/// An Event about `m` from the operator.
pub(super) fn operator_event(warning: bool, reason: &str, note: String) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(tidemark_api::events::truncate_note(note)),
        action: tidemark_api::events::OPERATOR_ACTION.into(),
        secondary: None,
    }
}
