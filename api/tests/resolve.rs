//! Resolving an EtcdMirror against the conformance apiserver: Secrets become 0600 files,
//! serviceRef becomes an in-cluster endpoint, and the result passes the agent's validation.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use tidemark_api::{resolve, EtcdMirror, ResolveError, ResourceRef};
use tidemark_model::conformance::ConformanceServer;

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    s
}

fn mirror() -> EtcdMirror {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "tidemark.dev/v1alpha1",
        "kind": "EtcdMirror",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {
            "source": {
                "endpointList": ["https://s-0:2379"],
                "prefix": "/app/",
                "tls": {"secretRef": {"name": "src-client"}},
                "auth": {"secretRef": {"name": "src-auth"}}
            },
            "target": {
                "serviceRef": {"name": "etcd-target"},
                "prefix": "/mirror/",
                "tls": {"secretRef": {"name": "dst-client"}, "caBundleRef": {"name": "dst-ca"}}
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn secrets_and_services_resolve_to_files_and_endpoints() {
    let server = ConformanceServer::start().await.unwrap();
    let client = server.client().unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "ns");
    let pp = PostParams::default();
    for s in [
        secret(
            "src-client",
            &[
                ("tls.crt", "SRC-CERT"),
                ("tls.key", "SRC-KEY"),
                ("ca.crt", "SRC-CA"),
            ],
        ),
        secret("src-auth", &[("username", "root"), ("password", "hunter2")]),
        secret(
            "dst-client",
            &[
                ("tls.crt", "DST-CERT"),
                ("tls.key", "DST-KEY"),
                ("ca.crt", "IGNORED"),
            ],
        ),
        secret("dst-ca", &[("ca.crt", "DST-CA")]),
    ] {
        secrets.create(&pp, &s).await.unwrap();
    }
    let mirrors: Api<EtcdMirror> = Api::namespaced(client.clone(), "ns");
    let r: ResourceRef = "ns/m".parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    match resolve(client.clone(), &r, dir.path()).await {
        Err(ResolveError::NotFound(got)) => assert_eq!(got, r),
        other => panic!("expected NotFound, got {other:?}"),
    }
    mirrors.create(&pp, &mirror()).await.unwrap();

    let got = resolve(client.clone(), &r, dir.path()).await.unwrap();
    assert_eq!(got.generation, 1);
    assert!(!got.uid.is_empty());
    let c = &got.config;
    let read = |p: &Option<String>| std::fs::read_to_string(p.as_ref().unwrap()).unwrap();
    let st = c.source.tls.as_ref().unwrap();
    assert_eq!(read(&st.cert_file), "SRC-CERT");
    assert_eq!(read(&st.key_file), "SRC-KEY");
    assert_eq!(read(&st.ca_file), "SRC-CA");
    assert!(st.secret_ref.is_none());
    let sa = c.source.auth.as_ref().unwrap();
    assert_eq!(sa.username.as_deref(), Some("root"));
    assert_eq!(read(&sa.password_file), "hunter2");
    let tt = c.target.tls.as_ref().unwrap();
    assert_eq!(
        read(&tt.ca_file),
        "DST-CA",
        "caBundleRef wins over the client Secret's ca.crt"
    );
    assert_eq!(read(&tt.cert_file), "DST-CERT");
    assert!(tt.ca_bundle_ref.is_none());
    assert_eq!(c.target.endpoint_list, ["https://etcd-target.ns.svc:2379"]);
    assert!(c.target.service_ref.is_none());
    c.validate()
        .expect("the resolved config is valid to the agent");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(sa.password_file.as_ref().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "credential files are owner-only");
    }

    // A missing key names the field and the key.
    secrets.delete("dst-ca", &Default::default()).await.unwrap();
    secrets
        .create(&pp, &secret("dst-ca", &[("other", "x")]))
        .await
        .unwrap();
    match resolve(client, &r, dir.path()).await {
        Err(ResolveError::Secret { field, message }) => {
            assert_eq!(field, "target.tls.caBundleRef");
            assert!(message.contains("ca.crt"), "{message}");
        }
        other => panic!("expected a Secret error, got {other:?}"),
    }
}
