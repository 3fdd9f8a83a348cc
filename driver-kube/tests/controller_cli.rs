//! `tidemark-inventory controller` as a process: admin endpoints answer, a Composition gets
//! recorded, and SIGTERM stops it cleanly.

mod common;

use common::eno_objects::{composition, manifest, slice};
use common::{http_get, kubeconfig_file, secret_namespace, Env};
use k8s_openapi::api::core::v1::Secret as K8sSecret;
use kube::api::{Api, ListParams};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;
use tidemark_core::inventory::{default_lineage, lineage_selector};
use tidemark_kube::eno::{Composition, ResourceSlice};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_process_records_and_stops_on_sigterm() {
    let env = Env::new().await;
    let ns = env.ns.clone();
    let kc = kubeconfig_file(&env);
    let sns = secret_namespace(&env);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark-inventory"))
        .args([
            "--kubeconfig",
            kc.to_str().expect("utf-8"),
            "--secret-namespace",
            &sns,
            "--log-format",
            "json",
            "controller",
            "--namespace",
            &ns,
            "--min-interval",
            "50ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn controller");

    // Admin endpoints come up.
    let mut ready = None;
    for _ in 0..100 {
        if let Some(r) = http_get(port, "/readyz") {
            ready = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = ready.expect("admin server answers");
    assert!(
        ready.starts_with("HTTP/1.0 200") || ready.starts_with("HTTP/1.1 200"),
        "{ready}"
    );

    // It records a Composition.
    let comps: Api<Composition> = Api::namespaced(env.client.clone(), &ns);
    let slices: Api<ResourceSlice> = Api::namespaced(env.client.clone(), &ns);
    let synth = env.name("proc-synth");
    let (c, s) = (env.name("proc"), env.name("proc-slice"));
    slice(
        &slices,
        &s,
        "uuid-proc",
        vec![manifest(&ns, &env.name("cm"), &[])],
    )
    .await;
    composition(&comps, &c, &synth, "uuid-proc", "2026-05-01T00:00:00Z", &s).await;
    let secrets: Api<K8sSecret> = Api::namespaced(env.client.clone(), &sns);
    let sel = lineage_selector(&default_lineage(&ns, &synth));
    let mut recorded = false;
    for _ in 0..100 {
        let list = secrets
            .list(&ListParams::default().labels(&sel))
            .await
            .expect("list");
        if !list.items.is_empty() {
            recorded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recorded, "the controller process recorded the Composition");
    let status = http_get(port, "/statusz").expect("statusz");
    assert!(status.contains("reconciles"), "{status}");
    let metrics = http_get(port, "/metrics").expect("metrics");
    assert!(
        metrics.contains("tidemark_inventory_reconciles_total"),
        "{metrics}"
    );

    // SIGTERM: clean exit.
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let mut code = None;
    for _ in 0..100 {
        if let Some(st) = child.try_wait().expect("wait") {
            code = Some(st);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(code) = code else {
        let _ = child.kill();
        panic!("controller did not stop on SIGTERM");
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(code.success(), "exit {code:?}; stderr: {stderr}");
    assert!(stderr.contains("inventory recorded"), "{stderr}");
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "--log-format json: {line}"
        );
    }
}
