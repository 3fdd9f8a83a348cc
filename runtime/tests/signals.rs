//! SIGTERM delivered to this test process resolves the shutdown future.
//! (Kept in its own test binary: the signal is process-wide.)

use std::time::Duration;

use tidemark_runtime::{Shutdown, ShutdownSignal};

#[tokio::test]
async fn sigterm_resolves_shutdown() {
    let shutdown = Shutdown::install().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let got = tokio::time::timeout(Duration::from_secs(5), shutdown.recv())
        .await
        .expect("signal within 5s");
    assert_eq!(got, ShutdownSignal::Terminate);
    assert_eq!(got.exit_code(), 143);
}
