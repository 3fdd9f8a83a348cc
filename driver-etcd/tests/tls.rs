//! TLS against real etcd: CA bundle, client certificate, server name override; and the
//! failures a wrong CA or a missing client certificate produce.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{Etcd, Flags, V};
use tidemark_core::classify::Failure;
use tidemark_core::config::{EndpointSpec, TlsSpec};
use tidemark_core::etcd::Cluster;
use tidemark_etcd::connect::{ClusterConn, ConnSettings};

fn openssl(dir: &Path, args: &[&str]) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl CLI (Debian package openssl)");
    assert!(
        st.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// A CA, a server certificate for `etcd.test` + 127.0.0.1, and a client certificate.
fn certs(dir: &Path, ca_name: &str) {
    let ext = dir.join("san.ext");
    std::fs::write(
        &ext,
        "subjectAltName=DNS:etcd.test,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca_name}"),
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={who}"),
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                &format!("{who}.pem"),
            ],
        );
    }
}

fn spec(dir: &Path, server_name: Option<&str>, client_cert: bool) -> TlsSpec {
    let p = |f: &str| Some(dir.join(f).display().to_string());
    TlsSpec {
        ca_file: p("ca.pem"),
        cert_file: if client_cert { p("client.pem") } else { None },
        key_file: if client_cert { p("client.key") } else { None },
        server_name: server_name.map(String::from),
        ..Default::default()
    }
}

fn conn(url: &str, t: TlsSpec) -> ClusterConn {
    let e = EndpointSpec {
        endpoint_list: vec![url.to_string()],
        tls: Some(t),
        ..Default::default()
    };
    ClusterConn::new(
        Cluster::Target,
        ConnSettings::from_spec("target", &e, Duration::from_secs(3)).unwrap(),
    )
}

async fn tls(v: V) {
    if Command::new("openssl").arg("version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "openssl CLI missing in CI");
        eprintln!("!!!!! SKIPPING TLS test: no openssl CLI !!!!!");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    certs(d.path(), "tidemark-test-ca");
    let other = tempfile::tempdir().unwrap();
    certs(other.path(), "some-other-ca");
    let f = |n: &str| d.path().join(n).display().to_string();
    let flags = Flags {
        tls_server: vec![
            format!("--cert-file={}", f("server.pem")),
            format!("--key-file={}", f("server.key")),
            format!("--trusted-ca-file={}", f("ca.pem")),
            "--client-cert-auth".into(),
        ],
        tls_client: Some(spec(d.path(), None, true)),
        ..Default::default()
    };
    let Some(e) = Etcd::start(v, flags).await else {
        return;
    };
    assert!(e.url.starts_with("https://"));

    // CA + client certificate, verified against the IP SAN.
    conn(&e.url, spec(d.path(), None, true))
        .get()
        .await
        .unwrap();
    // Server name override (the certificate also names etcd.test).
    conn(&e.url, spec(d.path(), Some("etcd.test"), true))
        .get()
        .await
        .unwrap();
    // A name the certificate does not carry fails verification.
    let r = conn(&e.url, spec(d.path(), Some("wrong.test"), true))
        .get()
        .await;
    assert!(matches!(r, Err(Failure::Transient { .. })), "{:?}", r.err());
    // Wrong CA: the server is not trusted.
    let r = conn(&e.url, spec(other.path(), None, true)).get().await;
    assert!(matches!(r, Err(Failure::Transient { .. })), "{:?}", r.err());
    // insecureSkipVerify (acknowledged): no CA at all, wrong server name, still connects
    // and authenticates with the client certificate.
    let mut t = spec(d.path(), Some("wrong.test"), true);
    t.ca_file = None;
    t.insecure_skip_verify = true;
    t.insecure_skip_verify_acknowledge_risk = true;
    let c = conn(&e.url, t.clone());
    c.get().await.unwrap();
    let x = tidemark_etcd::Executor::new(
        std::sync::Arc::new(c),
        std::sync::Arc::new(conn(&e.url, t.clone())),
        Duration::from_secs(3),
    );
    x.run(tidemark_core::etcd::Command::Status {
        cluster: Cluster::Target,
    })
    .await
    .unwrap();
    // ... but never without the acknowledgement.
    t.insecure_skip_verify_acknowledge_risk = false;
    let ep = EndpointSpec {
        endpoint_list: vec![e.url.clone()],
        tls: Some(t),
        ..Default::default()
    };
    let err = ConnSettings::from_spec("target", &ep, Duration::from_secs(3)).unwrap_err();
    assert!(
        err.to_string()
            .contains("insecureSkipVerifyAcknowledgeRisk"),
        "{err}"
    );
    // No client certificate while the server requires one.
    let r = conn(&e.url, spec(d.path(), None, false)).get().await;
    assert!(
        r.is_err(),
        "client-cert-auth must refuse a client without a certificate"
    );
}
both_versions!(tls_ca_client_cert_and_server_name, tls);

/// Certificates rotated during a run: the target is restarted with a server certificate from
/// a new CA, and the agent's client certificate, key and CA files are replaced. The agent
/// connects again with the new files, keeps its fence and counts the reload.
async fn tls_rotation(v: V) {
    use support::agent::{config, load, revision, Proc};
    if Command::new("openssl").arg("version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "openssl CLI missing in CI");
        eprintln!("!!!!! SKIPPING TLS rotation test: no openssl CLI !!!!!");
        return;
    }
    let old = tempfile::tempdir().unwrap();
    certs(old.path(), "ca-before-rotation");
    let new = tempfile::tempdir().unwrap();
    certs(new.path(), "ca-after-rotation");
    let server_flags = |d: &Path| {
        let f = |n: &str| d.join(n).display().to_string();
        vec![
            format!("--cert-file={}", f("server.pem")),
            format!("--key-file={}", f("server.key")),
            format!("--trusted-ca-file={}", f("ca.pem")),
            "--client-cert-auth".into(),
        ]
    };
    let Some(src) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let flags = Flags {
        tls_server: server_flags(old.path()),
        tls_client: Some(spec(old.path(), None, true)),
        ..Default::default()
    };
    let Some(mut tgt) = Etcd::start(v, flags).await else {
        return;
    };
    // The agent reads its files from one directory, as from a mounted Secret.
    let live = tempfile::tempdir().unwrap();
    let install = |from: &Path| {
        for f in ["ca.pem", "client.pem", "client.key"] {
            let tmp = live.path().join(format!(".{f}.new"));
            std::fs::copy(from.join(f), &tmp).unwrap();
            std::fs::rename(&tmp, live.path().join(f)).unwrap();
        }
    };
    install(old.path());
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&src, "/app/", &tgt, "/mirror/");
    cfg.target.tls = Some(spec(live.path(), None, true));
    load(&src, "/app/a/", 50, 16).await;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let rev = revision(&src).await;
    let before = a
        .wait("synced", 30 * Duration::from_secs(1), |s| {
            s["phase"] == "Syncing" && s["lastAppliedRevision"].as_i64() >= Some(rev)
        })
        .await;

    install(new.path());
    tgt.restart_with_tls(
        |args| {
            args.retain(|a| !a.starts_with("--cert-file") && !a.starts_with("--key-file"));
            args.retain(|a| !a.starts_with("--trusted-ca-file"));
            args.extend(server_flags(new.path()));
        },
        spec(new.path(), None, true),
    )
    .await;
    load(&src, "/app/b/", 50, 16).await;
    let rev = revision(&src).await;
    let after = a
        .wait(
            "caught up after the rotation",
            60 * Duration::from_secs(1),
            |s| s["phase"] == "Syncing" && s["lastAppliedRevision"].as_i64() >= Some(rev),
        )
        .await;
    assert_eq!(after["epoch"], before["epoch"], "the fence was kept");
    assert_eq!(after["holder"], before["holder"]);
    let (_, metrics) = a.http("GET", "/metrics").unwrap();
    assert!(
        metrics.contains("tidemark_mirror_tls_reloads_total{cluster=\"target\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tidemark_mirror_tls_reloads_total{cluster=\"source\"} 0"),
        "{metrics}"
    );
    assert!(a.log().contains("TLS files changed"), "{}", a.log());
    assert!(a.term().success(), "{}", a.log());
}
both_versions!(tls_files_rotated_during_a_run_are_used, tls_rotation);
