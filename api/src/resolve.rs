//! Turns an EtcdMirror into the file-based [`MirrorConfig`] the standalone agent runs.
//!
//! The agent's TLS and auth loaders read files (`caFile`, `certFile`, `keyFile`,
//! `passwordFile`); the custom resource names Secrets and Services instead. Resolving once at
//! start keeps one code path for both: Secret material is written to files with mode 0600
//! in a directory the caller owns, and `serviceRef` becomes an in-cluster DNS endpoint.
//!
//! Secret keys follow the built-in Secret types: `tls.crt`, `tls.key` and optionally
//! `ca.crt` (`kubernetes.io/tls`) for `tls.secretRef`; `ca.crt` for `tls.caBundleRef`;
//! `username` and `password` (`kubernetes.io/basic-auth`) for `auth.secretRef`.

use crate::{EtcdMirror, ResourceRef};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use std::path::{Path, PathBuf};
use tidemark_core::config::{EndpointSpec, MirrorConfig};

/// The etcd client port, used when `serviceRef.port` is 0.
pub const DEFAULT_ETCD_PORT: u16 = 2379;

/// Why an EtcdMirror could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The EtcdMirror does not exist.
    #[error("EtcdMirror {0} not found")]
    NotFound(ResourceRef),
    /// A referenced Secret is missing or lacks a key.
    #[error("{field}: {message}")]
    Secret { field: String, message: String },
    /// Reading from the apiserver failed.
    #[error("reading {what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Writing a credential file failed.
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An EtcdMirror ready to run.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The spec with Secrets and Services replaced by files and endpoints.
    pub config: MirrorConfig,
    /// `metadata.generation`: the fence epoch floor and the status `observedGeneration`.
    pub generation: i64,
    /// `metadata.uid`.
    pub uid: String,
    /// The object as read.
    pub object: EtcdMirror,
}

/// Reads `r`, fetches the Secrets it references and writes their material under `dir`.
pub async fn resolve(
    client: kube::Client,
    r: &ResourceRef,
    dir: &Path,
) -> Result<Resolved, ResolveError> {
    let mirrors: Api<EtcdMirror> = Api::namespaced(client.clone(), &r.namespace);
    let object = match mirrors.get_opt(&r.name).await {
        Ok(Some(o)) => o,
        Ok(None) => return Err(ResolveError::NotFound(r.clone())),
        Err(source) => {
            return Err(ResolveError::Kube {
                what: format!("EtcdMirror {r}"),
                source,
            })
        }
    };
    let secrets: Api<Secret> = Api::namespaced(client, &r.namespace);
    let mut config = object.spec.config.clone();
    for (side, ep) in [
        ("source", &mut config.source),
        ("target", &mut config.target),
    ] {
        resolve_side(side, ep, &r.namespace, &secrets, dir).await?;
    }
    Ok(Resolved {
        config,
        generation: object.metadata.generation.unwrap_or(0),
        uid: object.metadata.uid.clone().unwrap_or_default(),
        object,
    })
}

async fn resolve_side(
    side: &str,
    ep: &mut EndpointSpec,
    namespace: &str,
    secrets: &Api<Secret>,
    dir: &Path,
) -> Result<(), ResolveError> {
    if let Some(s) = ep.service_ref.take() {
        let scheme = if ep.tls.is_some() { "https" } else { "http" };
        let ns = if s.namespace.is_empty() {
            namespace
        } else {
            &s.namespace
        };
        let port = if s.port == 0 {
            DEFAULT_ETCD_PORT
        } else {
            s.port
        };
        ep.endpoint_list = vec![format!("{scheme}://{}.{ns}.svc:{port}", s.name)];
    }
    if let Some(tls) = &mut ep.tls {
        if let Some(r) = tls.secret_ref.take() {
            let field = format!("{side}.tls.secretRef");
            let s = read_secret(secrets, &field, &r.name).await?;
            let cert = key_of(&s, &field, &r.name, "tls.crt")?;
            let key = key_of(&s, &field, &r.name, "tls.key")?;
            tls.cert_file = Some(write(dir, &format!("{side}-tls.crt"), cert)?);
            tls.key_file = Some(write(dir, &format!("{side}-tls.key"), key)?);
            if tls.ca_file.is_none() && tls.ca_bundle_ref.is_none() {
                if let Some(ca) = data(&s, "ca.crt") {
                    tls.ca_file = Some(write(dir, &format!("{side}-ca.crt"), ca)?);
                }
            }
        }
        if let Some(r) = tls.ca_bundle_ref.take() {
            let field = format!("{side}.tls.caBundleRef");
            let s = read_secret(secrets, &field, &r.name).await?;
            let ca = key_of(&s, &field, &r.name, "ca.crt")?;
            tls.ca_file = Some(write(dir, &format!("{side}-ca.crt"), ca)?);
        }
    }
    if let Some(auth) = &mut ep.auth {
        if let Some(r) = auth.secret_ref.take() {
            let field = format!("{side}.auth.secretRef");
            let s = read_secret(secrets, &field, &r.name).await?;
            if auth.username.is_none() {
                let u = key_of(&s, &field, &r.name, "username")?;
                let u = String::from_utf8(u.to_vec()).map_err(|_| ResolveError::Secret {
                    field: field.clone(),
                    message: format!("Secret {:?} key \"username\" is not UTF-8", r.name),
                })?;
                auth.username = Some(u);
            }
            let pw = key_of(&s, &field, &r.name, "password")?;
            auth.password_file = Some(write(dir, &format!("{side}-password"), pw)?);
        }
    }
    Ok(())
}

async fn read_secret(
    secrets: &Api<Secret>,
    field: &str,
    name: &str,
) -> Result<Secret, ResolveError> {
    match secrets.get_opt(name).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(ResolveError::Secret {
            field: field.into(),
            message: format!("Secret {name:?} not found in the EtcdMirror's namespace"),
        }),
        Err(source) => Err(ResolveError::Kube {
            what: format!("Secret {name:?} ({field})"),
            source,
        }),
    }
}

fn data<'a>(s: &'a Secret, key: &str) -> Option<&'a [u8]> {
    s.data.as_ref()?.get(key).map(|b| b.0.as_slice())
}

fn key_of<'a>(s: &'a Secret, field: &str, name: &str, key: &str) -> Result<&'a [u8], ResolveError> {
    data(s, key).ok_or_else(|| ResolveError::Secret {
        field: field.into(),
        message: format!("Secret {name:?} has no key {key:?}"),
    })
}

/// Writes `bytes` to `dir/name`, readable by the owner only, and returns the path.
fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<String, ResolveError> {
    use std::io::Write;
    let path = dir.join(name);
    let io = |source| ResolveError::Io {
        path: path.clone(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    Ok(path.to_string_lossy().into_owned())
}
