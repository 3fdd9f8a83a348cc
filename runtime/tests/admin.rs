//! Starts the admin server on an ephemeral loopback port and exercises every
//! endpoint over a hand-rolled HTTP/1.1 client (keeps dev-dependencies at zero).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde_json::{json, Value};
use tidemark_runtime::{Admin, AdminConfig, AdminError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Reply {
    fn content_type(&self) -> &str {
        self.headers.get("content-type").map_or("", String::as_str)
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }
}

async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Reply {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to admin server");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read response");
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn loopback_config() -> AdminConfig {
    AdminConfig {
        addr: "127.0.0.1:0".to_owned(),
        ..AdminConfig::default()
    }
}

#[tokio::test]
async fn every_endpoint() {
    let mut admin = Admin::new("tidemark-test", "1.2.3");
    let handle = admin.handle();
    let ops = Counter::<u64>::default();
    handle.with_registry(|r| r.register("test_ops", "Operations done by the test", ops.clone()));
    ops.inc_by(3);
    let mut drains = admin.control("drain", 2);
    admin.control_fn("pause", |args| Ok(json!({ "paused": true, "args": args })));
    admin.control_fn("resume", |_| Err("not paused".to_owned()));
    let config = AdminConfig {
        heartbeat_staleness: Duration::from_millis(300),
        ..loopback_config()
    };
    let server = admin.serve(&config).await.unwrap();
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0);

    // /metrics: registered metric, process start time, build info, OpenMetrics framing.
    let r = http(addr, "GET", "/metrics", "").await;
    assert_eq!(r.status, 200);
    assert!(
        r.content_type().starts_with("application/openmetrics-text"),
        "{:?}",
        r.headers
    );
    assert!(r.body.contains("# TYPE test_ops counter\n"), "{}", r.body);
    assert!(r.body.contains("\ntest_ops_total 3\n"), "{}", r.body);
    assert!(
        r.body.contains("\nprocess_start_time_seconds "),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("tidemark_build_info{binary=\"tidemark-test\",version=\"1.2.3\"} 1"),
        "{}",
        r.body
    );
    assert!(r.body.ends_with("# EOF\n"), "{}", r.body);
    // Registering after start shows up on the next scrape.
    let late = Counter::<u64>::default();
    handle.with_registry(|r| r.register("late", "Registered after start", late.clone()));
    late.inc();
    assert!(http(addr, "GET", "/metrics", "")
        .await
        .body
        .contains("\nlate_total 1\n"));

    // /healthz follows the heartbeat.
    handle.heartbeat();
    let r = http(addr, "GET", "/healthz", "").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    assert!(r.content_type().starts_with("text/plain"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = http(addr, "GET", "/healthz", "").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("last heartbeat"), "{}", r.body);
    handle.heartbeat();
    assert_eq!(http(addr, "GET", "/healthz", "").await.status, 200);

    // /readyz flips with the binary's readiness and explains itself.
    let r = http(addr, "GET", "/readyz", "").await;
    assert_eq!((r.status, r.body.as_str()), (503, "starting\n"));
    handle.set_ready();
    let r = http(addr, "GET", "/readyz", "").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    handle.set_not_ready("draining: waiting for watermark 42");
    let r = http(addr, "GET", "/readyz", "").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.body, "draining: waiting for watermark 42\n");

    // /statusz serves the published JSON.
    let r = http(addr, "GET", "/statusz", "").await;
    assert_eq!((r.status, r.content_type()), (200, "application/json"));
    assert_eq!(r.json(), Value::Null);
    handle.set_status(json!({ "phase": "Syncing", "watermark": 41 }));
    handle.update_status(|s| s["watermark"] = json!(42));
    let r = http(addr, "GET", "/statusz", "").await;
    assert_eq!(r.json(), json!({ "phase": "Syncing", "watermark": 42 }));

    // POST /v1/drain reaches the binary's receiver, and its reply comes back.
    let binary = tokio::spawn(async move {
        let req = drains.recv().await.unwrap();
        assert_eq!(req.name(), "drain");
        assert_eq!(req.args(), &json!({ "verify": true }));
        req.accept(json!({ "accepted": true, "target_revision": 42 }));
        drains
    });
    let r = http(addr, "POST", "/v1/drain", r#"{"verify": true}"#).await;
    assert_eq!((r.status, r.content_type()), (200, "application/json"));
    assert_eq!(r.json(), json!({ "accepted": true, "target_revision": 42 }));
    let mut drains = binary.await.unwrap();

    // A refusal from the binary is a 409 with the reason.
    let refuser = tokio::spawn(async move {
        drains.recv().await.unwrap().refuse("already draining");
        drains
    });
    let r = http(addr, "POST", "/v1/drain", "").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json(), json!({ "error": "already draining" }));
    let drains = refuser.await.unwrap();

    // Callback controls.
    let r = http(addr, "POST", "/v1/pause", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({ "paused": true, "args": null }));
    let r = http(addr, "POST", "/v1/resume", "").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json(), json!({ "error": "not paused" }));

    // Client errors.
    let r = http(addr, "POST", "/v1/pause", "{not json").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("not JSON"));
    let r = http(addr, "POST", "/v1/explode", "").await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("drain, pause, resume"));
    assert_eq!(http(addr, "GET", "/v1/drain", "").await.status, 405);
    assert_eq!(http(addr, "GET", "/nope", "").await.status, 404);
    let r = http(addr, "GET", "/", "").await;
    assert!(r.body.contains("POST /v1/drain\n"), "{}", r.body);

    // Receiver gone: the binary no longer takes drains.
    drop(drains);
    let r = http(addr, "POST", "/v1/drain", "").await;
    assert_eq!(r.status, 503);

    // Graceful shutdown closes the listener.
    server.shutdown().await.unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn control_without_reply_times_out() {
    let mut admin = Admin::new("t", "0");
    let _slow = admin.control("reconcile", 1); // kept alive, never read
    let config = AdminConfig {
        control_timeout: Duration::from_millis(100),
        ..loopback_config()
    };
    let server = admin.serve(&config).await.unwrap();
    let r = http(server.local_addr(), "POST", "/v1/reconcile", "").await;
    assert_eq!(r.status, 504);
    assert!(r.json()["error"].as_str().unwrap().contains("no reply"));
    // Queue (capacity 1) still holds the first request: the next one is refused.
    let r = http(server.local_addr(), "POST", "/v1/reconcile", "").await;
    assert_eq!(r.status, 429);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn non_loopback_controls_need_the_flag() {
    let wildcard = AdminConfig {
        addr: "0.0.0.0:0".to_owned(),
        ..AdminConfig::default()
    };

    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let err = admin.serve(&wildcard).await.unwrap_err();
    assert!(
        matches!(err, AdminError::RemoteControlRefused { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("--admin-addr 0.0.0.0:0"), "{msg}");
    assert!(msg.contains("drain"), "{msg}");
    assert!(msg.contains("--admin-allow-remote-control"), "{msg}");

    // Opting in works.
    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let allowed = AdminConfig {
        allow_remote_control: true,
        ..wildcard.clone()
    };
    let server = admin.serve(&allowed).await.unwrap();
    server.shutdown().await.unwrap();

    // Without controls, read-only endpoints may be exposed (metrics scraping, kubelet probes).
    let server = Admin::new("t", "0").serve(&wildcard).await.unwrap();
    let local = SocketAddr::from(([127, 0, 0, 1], server.local_addr().port()));
    assert_eq!(http(local, "GET", "/healthz", "").await.status, 200);
    server.shutdown().await.unwrap();

    // `localhost` resolves to loopback only, so controls are fine there.
    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let config = AdminConfig {
        addr: "localhost:0".to_owned(),
        ..AdminConfig::default()
    };
    admin
        .serve(&config)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}
