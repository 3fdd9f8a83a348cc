//! The README's `kubectl` lines, run with the real `kubectl` binary against the conformance
//! apiserver, with an agent (`run --resource`) mirroring between two real etcd servers:
//! install the CRD and wait for it, apply `deploy/`, watch the mirror reach `Syncing` in
//! `kubectl get etcdmirrors`, switch it to `Drain` and `kubectl wait` for `CutoverReady`,
//! read its Events, and delete it. Skipped, loudly, when `kubectl` is not on PATH.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use support::agent::{bin, converge, load};
use support::{Etcd, Flags, V};
use tidemark_model::conformance::ConformanceServer;

const SEC: Duration = Duration::from_secs(1);

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

/// `kubectl ARGS`, with the test's kubeconfig: (success, stdout + stderr).
fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (success, text) = kubectl(kubeconfig, args);
    assert!(success, "kubectl {args:?} failed:\n{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_kubectl_lines_drive_a_mirror() {
    if std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_err()
    {
        eprintln!("!!!!! SKIPPING the kubectl test: no kubectl on PATH !!!!!");
        return;
    }
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = ConformanceServer::start().await.unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, server.kubeconfig_yaml()).unwrap();

    // README: install the CRD, wait until it is served, then the rest of deploy/.
    ok(&kc, &["apply", "-f", deploy("crd.yaml").to_str().unwrap()]);
    ok(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/etcdmirrors.tidemark.dev",
            "--timeout=10s",
        ],
    );
    let applied = ok(&kc, &["apply", "-f", deploy("").to_str().unwrap()]);
    for created in [
        "deployment.apps/tidemark-mirror-main",
        "etcdmirror.tidemark.dev/main",
        "networkpolicy.networking.k8s.io/tidemark-mirror",
        "role.rbac.authorization.k8s.io/tidemark-mirror",
    ] {
        assert!(
            applied.contains(created),
            "{created} not applied:\n{applied}"
        );
    }

    // A mirror between the two test servers, applied the same way.
    load(&src, "/app/", 100, 16).await;
    let manifest = dir.path().join("local.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: tidemark.dev/v1alpha1\nkind: EtcdMirror\nmetadata:\n  name: local\n  \
             namespace: tidemark\nspec:\n  source:\n    endpointList: [\"{}\"]\n    prefix: /app/\n  \
             target:\n    endpointList: [\"{}\"]\n    prefix: /mirror/\n",
            src.url, tgt.url
        ),
    )
    .unwrap();
    ok(&kc, &["apply", "-f", manifest.to_str().unwrap()]);
    let log = dir.path().join("agent.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut agent = std::process::Command::new(bin())
        .args(["run", "--no-progress", "--resource", "tidemark/local"])
        .args(["--admin-addr", "127.0.0.1:0", "--drain-linger", "30s"])
        .arg("--kubeconfig")
        .arg(&kc)
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let deadline = tokio::time::Instant::now() + 60 * SEC;
    loop {
        let table = ok(&kc, &["get", "etcdmirrors", "-A"]);
        let row = table.lines().find(|l| l.contains("local")).unwrap_or("");
        if row.contains("Syncing") {
            assert!(table.starts_with("NAMESPACE"), "{table}");
            for column in ["PHASE", "WATERMARK", "LAG", "AGE"] {
                assert!(table.contains(column), "no {column} column:\n{table}");
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not Syncing in kubectl get etcdmirrors:\n{table}\n{}",
            read_log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    converge(&src, "/app/", &tgt, "/mirror/", &[], 10 * SEC).await;

    // README: cut over by switching the mode, and wait for it.
    ok(
        &kc,
        &[
            "patch",
            "etcdmirror",
            "local",
            "-n",
            "tidemark",
            "--type=merge",
            "-p",
            "{\"spec\":{\"mode\":\"Drain\"}}",
        ],
    );
    let kc2 = kc.clone();
    let waited = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc2,
            &[
                "wait",
                "etcdmirror/local",
                "-n",
                "tidemark",
                "--for=condition=CutoverReady",
                "--timeout=60s",
            ],
        )
    })
    .await
    .unwrap();
    assert!(waited.0, "kubectl wait: {}\n{}", waited.1, read_log());
    assert!(waited.1.contains("condition met"), "{}", waited.1);

    // Events are published in the background, shortly after the status that caused them.
    let deadline = tokio::time::Instant::now() + 10 * SEC;
    loop {
        let events = ok(&kc, &["get", "events", "-n", "tidemark"]);
        // (Draining may be too short to be seen between two status offers.)
        let missing: Vec<&str> = ["Syncing", "CutoverReady", "Drained"]
            .into_iter()
            .filter(|r| !events.contains(r))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {missing:?} events:\n{events}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    ok(&kc, &["delete", "etcdmirror", "local", "-n", "tidemark"]);
    let left = ok(&kc, &["get", "etcdmirrors", "-n", "tidemark"]);
    assert!(!left.contains("local"), "{left}");
    let _ = agent.kill();
    let _ = agent.wait();
}
