//! Shared test environment: the conformance server by default, a real cluster when
//! `TIDEMARK_TEST_KUBECONFIG` names a kubeconfig file.
#![allow(dead_code)]

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use tidemark_model::conformance::ConformanceServer;

/// Where a test runs.
pub struct Env {
    /// Client for everything (Eno and downstream are the same cluster in tests).
    pub client: Client,
    /// The conformance server, absent against a real cluster.
    pub server: Option<ConformanceServer>,
    /// Namespace for namespaced test objects.
    pub ns: String,
    /// Unique name prefix so runs against a shared cluster do not collide.
    pub prefix: String,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Env {
    pub async fn new() -> Env {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let prefix = format!("t{pid:x}-{n}");
        match std::env::var("TIDEMARK_TEST_KUBECONFIG") {
            Ok(path) if !path.is_empty() => {
                let kc = Kubeconfig::read_from(&path).expect("read TIDEMARK_TEST_KUBECONFIG");
                let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .expect("kubeconfig usable");
                let ns = std::env::var("TIDEMARK_TEST_NAMESPACE")
                    .unwrap_or_else(|_| "default".to_string());
                Env {
                    client: Client::try_from(cfg).expect("client"),
                    server: None,
                    ns,
                    prefix,
                }
            }
            _ => {
                let server = ConformanceServer::start().await.expect("server starts");
                Env {
                    client: server.client().expect("client"),
                    server: Some(server),
                    ns: "default".to_string(),
                    prefix,
                }
            }
        }
    }

    /// A unique object name.
    pub fn name(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    /// True against the conformance server (fault injection available).
    pub fn simulated(&self) -> bool {
        self.server.is_some()
    }
}

/// The `(code, reason)` of an API error.
pub fn api_err(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A kubeconfig file for the binary: the real one, or one written for the server.
pub fn kubeconfig_file(env: &Env) -> std::path::PathBuf {
    match &env.server {
        Some(server) => {
            let p = std::env::temp_dir().join(format!("tidemark-kubeconfig-{}.yaml", env.prefix));
            std::fs::write(&p, server.kubeconfig_yaml()).expect("write kubeconfig");
            p
        }
        None => std::env::var("TIDEMARK_TEST_KUBECONFIG")
            .expect("TIDEMARK_TEST_KUBECONFIG")
            .into(),
    }
}

/// Where inventory Secrets go in tests: kube-system on the conformance server, the test
/// namespace on a real cluster (so no kube-system write access is needed).
pub fn secret_namespace(env: &Env) -> String {
    if env.simulated() {
        "kube-system".to_string()
    } else {
        env.ns.clone()
    }
}

/// A plain HTTP/1.0 GET of the admin server on 127.0.0.1: the whole response, or `None`
/// while nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Runs `tidemark-inventory` with `args`: its exit code and the JSON it printed (`Null`
/// when it printed none).
pub fn run_inventory<S: AsRef<str>>(args: &[S]) -> (i32, serde_json::Value) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidemark-inventory"))
        .args(&args)
        .output()
        .expect("run tidemark-inventory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("$ tidemark-inventory {}\n{stdout}", args.join(" "));
    if !out.stderr.is_empty() {
        eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

pub mod eno_objects {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use serde_json::json;
    use tidemark_kube::eno::{Composition, ResourceSlice};

    /// A ConfigMap manifest as Eno keeps it in a slice, with optional annotations.
    pub fn manifest(ns: &str, name: &str, annotations: &[(&str, &str)]) -> serde_json::Value {
        let ann: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({"manifest": json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "annotations": ann}}).to_string()})
    }

    /// Creates a ResourceSlice holding `resources`.
    pub async fn slice(
        api: &Api<ResourceSlice>,
        name: &str,
        uuid: &str,
        resources: Vec<serde_json::Value>,
    ) {
        let s: ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "eno.azure.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"synthesisUUID": uuid, "resources": resources}
        }))
        .expect("slice json");
        api.create(&PostParams::default(), &s)
            .await
            .expect("create slice");
    }

    /// Creates an opted-in Composition of `synthesizer` whose current synthesis is Ready.
    pub async fn composition(
        api: &Api<Composition>,
        name: &str,
        synthesizer: &str,
        uuid: &str,
        synthesized: &str,
        slice: &str,
    ) {
        composition_with(api, name, synthesizer, uuid, synthesized, slice, None).await
    }

    /// [`composition`] with an optional `eno.azure.io/inventory-lineage` override.
    pub async fn composition_with(
        api: &Api<Composition>,
        name: &str,
        synthesizer: &str,
        uuid: &str,
        synthesized: &str,
        slice: &str,
        lineage: Option<&str>,
    ) {
        let mut annotations = json!({"eno.azure.io/recovery-enabled": "true"});
        if let Some(l) = lineage {
            annotations["eno.azure.io/inventory-lineage"] = json!(l);
        }
        let c: Composition = serde_json::from_value(json!({
            "apiVersion": "eno.azure.io/v1", "kind": "Composition",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"synthesizer": {"name": synthesizer}}
        }))
        .expect("composition json");
        api.create(&PostParams::default(), &c)
            .await
            .expect("create composition");
        let status = json!({"status": {"currentSynthesis": {
            "uuid": uuid, "observedCompositionGeneration": 1,
            "synthesized": synthesized, "reconciled": synthesized, "ready": synthesized,
            "resourceSlices": [{"name": slice}]}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("composition status");
    }
}
