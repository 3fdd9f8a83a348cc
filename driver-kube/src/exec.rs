//! Runs the core's abstract inventory commands against real clusters with `kube`.
//!
//! Compositions and ResourceSlices are read from the Eno (control plane) cluster; Secrets and
//! the resources recovery deletes live in the downstream cluster. Objects travel as JSON and
//! are mapped by the core's `from_kube_json` views, so the core owns every interpretation.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::Client;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use tidemark_core::inventory::{
    Command, CompositionView, KubeError, ObjectView, Reply, ResourceId, Secret, SliceView,
};

/// Where the executor reads and writes.
#[derive(Clone)]
pub struct Clusters {
    /// The cluster holding Eno's Compositions and ResourceSlices.
    pub eno: Client,
    /// The downstream cluster: inventory Secrets and the resources recovery deletes.
    pub downstream: Client,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters").finish_non_exhaustive()
    }
}

/// Executes [`Command`]s. Holds a small discovery cache for downstream kinds.
#[derive(Debug)]
pub struct Executor {
    clusters: Clusters,
    discovered: Mutex<BTreeMap<(String, String, String), ApiResource>>,
}

/// Maps a kube error to the core's classification.
pub fn classify(e: &kube::Error) -> KubeError {
    match e {
        kube::Error::Api(status) => KubeError::from_status(status.code, &status.message),
        kube::Error::SerdeError(e) => KubeError::Other(format!("decoding response: {e}")),
        other => KubeError::Transient(other.to_string()),
    }
}

fn composition_api() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::eno::GROUP, crate::eno::VERSION, "Composition"),
        "compositions",
    )
}

fn slice_api() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::eno::GROUP, crate::eno::VERSION, "ResourceSlice"),
        "resourceslices",
    )
}

fn to_json(obj: &DynamicObject) -> Result<Value, KubeError> {
    serde_json::to_value(obj).map_err(|e| KubeError::Other(format!("encoding object: {e}")))
}

fn view<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, KubeError> {
    r.map_err(|why| KubeError::Invalid(format!("malformed object: {why}")))
}

impl Executor {
    /// An executor over the two clusters (which may be the same).
    pub fn new(clusters: Clusters) -> Executor {
        Executor {
            clusters,
            discovered: Mutex::new(BTreeMap::new()),
        }
    }

    /// The clusters this executor talks to.
    pub fn clusters(&self) -> &Clusters {
        &self.clusters
    }

    /// Runs one command to completion.
    pub async fn execute(&self, cmd: &Command) -> Result<Reply, KubeError> {
        let eno = &self.clusters.eno;
        let down = &self.clusters.downstream;
        match cmd {
            Command::GetComposition { namespace, name } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(eno.clone(), namespace, &composition_api());
                let obj = api.get(name).await.map_err(|e| classify(&e))?;
                Ok(Reply::Composition(view(CompositionView::from_kube_json(
                    &to_json(&obj)?,
                ))?))
            }
            Command::ListCompositions { namespace } => {
                let ar = composition_api();
                let api: Api<DynamicObject> = match namespace {
                    Some(ns) => Api::namespaced_with(eno.clone(), ns, &ar),
                    None => Api::all_with(eno.clone(), &ar),
                };
                let list = api
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| classify(&e))?;
                let mut out = Vec::with_capacity(list.items.len());
                for obj in &list.items {
                    out.push(view(CompositionView::from_kube_json(&to_json(obj)?))?);
                }
                Ok(Reply::Compositions(out))
            }
            Command::ListResourceSlices { namespace, names } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(eno.clone(), namespace, &slice_api());
                let mut out = Vec::with_capacity(names.len());
                for name in names {
                    match api.get_opt(name).await.map_err(|e| classify(&e))? {
                        Some(obj) => out.push(view(SliceView::from_kube_json(&to_json(&obj)?))?),
                        None => continue,
                    }
                }
                Ok(Reply::Slices(out))
            }
            Command::ListSecrets {
                namespace,
                label_selector,
            } => {
                let list = self
                    .secrets(down, namespace)
                    .list(&ListParams::default().labels(label_selector))
                    .await
                    .map_err(|e| classify(&e))?;
                let mut out = Vec::with_capacity(list.items.len());
                for obj in &list.items {
                    out.push(view(Secret::from_kube_json(&to_json(obj)?))?);
                }
                Ok(Reply::Secrets(out))
            }
            Command::GetSecret { namespace, name } => {
                let obj = self
                    .secrets(down, namespace)
                    .get(name)
                    .await
                    .map_err(|e| classify(&e))?;
                Ok(Reply::Secret(view(Secret::from_kube_json(&to_json(
                    &obj,
                )?))?))
            }
            Command::CreateSecret(secret) => {
                let obj: DynamicObject = serde_json::from_value(secret.to_kube_json())
                    .map_err(|e| KubeError::Other(format!("encoding secret: {e}")))?;
                let created = self
                    .secrets(down, &secret.namespace)
                    .create(&PostParams::default(), &obj)
                    .await
                    .map_err(|e| classify(&e))?;
                Ok(Reply::Secret(view(Secret::from_kube_json(&to_json(
                    &created,
                )?))?))
            }
            Command::UpdateSecret(secret) => {
                let obj: DynamicObject = serde_json::from_value(secret.to_kube_json())
                    .map_err(|e| KubeError::Other(format!("encoding secret: {e}")))?;
                let updated = self
                    .secrets(down, &secret.namespace)
                    .replace(&secret.name, &PostParams::default(), &obj)
                    .await
                    .map_err(|e| classify(&e))?;
                Ok(Reply::Secret(view(Secret::from_kube_json(&to_json(
                    &updated,
                )?))?))
            }
            Command::PatchCompositionAnnotation {
                namespace,
                name,
                key,
                value,
                resource_version,
            } => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(eno.clone(), namespace, &composition_api());
                let patch = json!({"metadata": {
                    "resourceVersion": resource_version,
                    "annotations": { key: value },
                }});
                let obj = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| classify(&e))?;
                Ok(Reply::Composition(view(CompositionView::from_kube_json(
                    &to_json(&obj)?,
                ))?))
            }
            Command::GetResource { id } => {
                let api = self.resource_api(id).await?;
                let obj = api.get(&id.name).await.map_err(|e| classify(&e))?;
                Ok(Reply::Object(view(ObjectView::from_kube_json(&to_json(
                    &obj,
                )?))?))
            }
            Command::DeleteResource { id, uid } => {
                let api = self.resource_api(id).await?;
                let dp = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    preconditions: Some(Preconditions {
                        uid: (!uid.is_empty()).then(|| uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&id.name, &dp).await.map_err(|e| classify(&e))?;
                Ok(Reply::Deleted)
            }
        }
    }

    fn secrets(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Secret"),
            "secrets",
        );
        Api::namespaced_with(client.clone(), namespace, &ar)
    }

    /// The API for a downstream kind, by discovery. A kind the cluster does not serve has
    /// no objects, so asking for one is `NotFound`; other discovery failures are classified
    /// like any request (nothing is guessed, and failures are not cached).
    async fn resource_api(&self, id: &ResourceId) -> Result<Api<DynamicObject>, KubeError> {
        let key = (id.group.clone(), id.version.clone(), id.kind.clone());
        let cached = self
            .discovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let ar = match cached {
            Some(ar) => ar,
            None => {
                let gvk = GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
                let ar = match kube::discovery::pinned_kind(&self.clusters.downstream, &gvk).await {
                    Ok((ar, _caps)) => ar,
                    Err(kube::Error::Discovery(_)) => return Err(KubeError::NotFound),
                    Err(e) => return Err(classify(&e)),
                };
                self.discovered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, ar.clone());
                ar
            }
        };
        let client = self.clusters.downstream.clone();
        Ok(match &id.namespace {
            Some(ns) if !ns.is_empty() => Api::namespaced_with(client, ns, &ar),
            _ => Api::all_with(client, &ar),
        })
    }
}
