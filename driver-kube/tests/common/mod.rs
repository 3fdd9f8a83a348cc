//! Shared test environment: the conformance server by default, a real cluster when
//! `TIDEMARK_TEST_KUBECONFIG` names a kubeconfig file.
#![allow(dead_code)]

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use std::sync::atomic::{AtomicU64, Ordering};
use tidemark_kube::conformance::ConformanceServer;

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
