//! The conformance apiserver as a process, for `kubectl`: writes a kubeconfig and serves
//! until interrupted.
//!
//! ```sh
//! cargo run -p tidemark-model --example apiserver -- /tmp/kubeconfig
//! kubectl --kubeconfig /tmp/kubeconfig get secrets -A
//! ```
#![allow(clippy::print_stdout, clippy::expect_used)] // a test tool: prints where it listens

use tidemark_model::conformance::ConformanceServer;

#[tokio::main]
async fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "kubeconfig".to_string());
    let server = ConformanceServer::start()
        .await
        .expect("the conformance server starts");
    std::fs::write(&path, server.kubeconfig_yaml()).expect("the kubeconfig is written");
    println!("serving {} (kubeconfig {path}); Ctrl-C stops", server.url());
    tokio::signal::ctrl_c().await.expect("a signal handler");
}
