//! Executes the core's abstract inventory commands against the model apiserver, the pure
//! twin of `tidemark-kube`'s kube executor, so simulator scenarios run the real recorder and
//! recovery machines with the same command semantics.

use super::{ApiError, ApiServer, Gvr, Subresource};
use std::collections::BTreeMap;
use tidemark_core::inventory::{
    Command, CompositionView, KubeError, ObjectView, Reply, ResourceId, Secret, SliceView,
};
use tidemark_core::Instant;

fn err(e: ApiError) -> KubeError {
    KubeError::from_status(e.code(), &e.to_string())
}

fn view<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, KubeError> {
    r.map_err(|why| KubeError::Invalid(format!("malformed object: {why}")))
}

/// The collection a downstream resource lives in, pluralised the simple way (`ConfigMap` =>
/// `configmaps`), which is all the scenarios need.
pub fn gvr_of(id: &ResourceId) -> Gvr {
    let lower = id.kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    };
    Gvr::new(&id.group, &id.version, &plural)
}

/// Runs one command at time `now` (nanoseconds since the Unix epoch).
pub fn execute(api: &mut ApiServer, now: Instant, cmd: &Command) -> Result<Reply, KubeError> {
    let comps = Gvr::compositions();
    let secrets = Gvr::secrets();
    match cmd {
        Command::GetComposition { namespace, name } => {
            let v = api.get(&comps, namespace, name).map_err(err)?;
            Ok(Reply::Composition(view(CompositionView::from_kube_json(
                &v,
            ))?))
        }
        Command::ListCompositions { namespace } => {
            let (items, _) = api.list(&comps, namespace.as_deref(), None).map_err(err)?;
            let views: Result<Vec<_>, _> =
                items.iter().map(CompositionView::from_kube_json).collect();
            Ok(Reply::Compositions(view(views)?))
        }
        Command::ListResourceSlices { namespace, names } => {
            let mut out = Vec::new();
            for name in names {
                match api.get(&Gvr::resource_slices(), namespace, name) {
                    Ok(v) => out.push(view(SliceView::from_kube_json(&v))?),
                    Err(ApiError::NotFound { .. }) => {}
                    Err(e) => return Err(err(e)),
                }
            }
            Ok(Reply::Slices(out))
        }
        Command::ListSecrets {
            namespace,
            label_selector,
        } => {
            let (items, _) = api
                .list(&secrets, Some(namespace), Some(label_selector))
                .map_err(err)?;
            let views: Result<Vec<_>, _> = items.iter().map(Secret::from_kube_json).collect();
            Ok(Reply::Secrets(view(views)?))
        }
        Command::GetSecret { namespace, name } => {
            let v = api.get(&secrets, namespace, name).map_err(err)?;
            Ok(Reply::Secret(view(Secret::from_kube_json(&v))?))
        }
        Command::CreateSecret(s) => {
            let v = api
                .create(now, &secrets, &s.namespace, s.to_kube_json())
                .map_err(err)?;
            Ok(Reply::Secret(view(Secret::from_kube_json(&v))?))
        }
        Command::UpdateSecret(s) => {
            let v = api
                .update(
                    now,
                    &secrets,
                    &s.namespace,
                    &s.name,
                    s.to_kube_json(),
                    Subresource::Main,
                )
                .map_err(err)?;
            Ok(Reply::Secret(view(Secret::from_kube_json(&v))?))
        }
        Command::PatchCompositionAnnotation {
            namespace,
            name,
            key,
            value,
            resource_version,
        } => {
            let ann = BTreeMap::from([(key.clone(), Some(value.clone()))]);
            let v = api
                .patch_annotations(now, &comps, namespace, name, &ann, Some(resource_version))
                .map_err(err)?;
            Ok(Reply::Composition(view(CompositionView::from_kube_json(
                &v,
            ))?))
        }
        Command::GetResource { id } => {
            let ns = id.namespace.clone().unwrap_or_default();
            let v = api.get(&gvr_of(id), &ns, &id.name).map_err(err)?;
            Ok(Reply::Object(view(ObjectView::from_kube_json(&v))?))
        }
        Command::DeleteResource { id, uid } => {
            let ns = id.namespace.clone().unwrap_or_default();
            let uid = (!uid.is_empty()).then_some(uid.as_str());
            api.delete(now, &gvr_of(id), &ns, &id.name, None, uid)
                .map_err(err)?;
            Ok(Reply::Deleted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        let id = |kind: &str| ResourceId {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: None,
            name: "x".into(),
        };
        assert_eq!(gvr_of(&id("ConfigMap")).resource, "configmaps");
        assert_eq!(gvr_of(&id("Ingress")).resource, "ingresses");
        assert_eq!(gvr_of(&id("NetworkPolicy")).resource, "networkpolicies");
    }
}
