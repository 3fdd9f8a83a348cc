//! Starts the admin server on an ephemeral loopback port and exercises every
//! endpoint over a hand-rolled HTTP/1.1 client (keeps dev-dependencies at zero).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde_json::{json, Value};
use tidemark_runtime::{Admin, AdminConfig, AdminError, ControlAddr, ControlConfig, ControlListen};
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
    let host = format!("Host: {addr}\r\nContent-Type: application/json");
    send(addr, &host, method, path, body).await
}

/// One request with the given header lines (CRLF-separated, no trailing CRLF).
async fn send(addr: SocketAddr, headers: &str, method: &str, path: &str, body: &str) -> Reply {
    let stream = TcpStream::connect(addr)
        .await
        .expect("connect to admin server");
    exchange(stream, headers, method, path, body).await
}

async fn exchange<S>(mut stream: S, headers: &str, method: &str, path: &str, body: &str) -> Reply
where
    S: AsyncReadExt + AsyncWriteExt + Unpin,
{
    let request = format!(
        "{method} {path} HTTP/1.1\r\n{headers}\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
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
        control: ControlConfig {
            listen: ControlListen::Tcp("127.0.0.1:0".to_owned()),
            token_file: None,
        },
        ..AdminConfig::default()
    }
}

fn control_tcp(server: &tidemark_runtime::AdminServer) -> SocketAddr {
    match server.control_addr() {
        Some(ControlAddr::Tcp(a)) => *a,
        other => panic!("expected a TCP control listener, got {other:?}"),
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

    // The read-only listener has no control route at all.
    assert_eq!(http(addr, "POST", "/v1/drain", "{}").await.status, 404);
    let r = http(addr, "GET", "/", "").await;
    assert!(!r.body.contains("POST"), "{}", r.body);
    let ro = addr;
    let addr = control_tcp(&server);
    assert_ne!(addr, ro);
    assert!(addr.ip().is_loopback());
    // The control listener also serves status (for `tidemark-mirror drain`).
    assert_eq!(http(addr, "GET", "/statusz", "").await.status, 200);

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
    let r = http(addr, "POST", "/v1/drain", "{}").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json(), json!({ "error": "already draining" }));
    let drains = refuser.await.unwrap();

    // Callback controls.
    let r = http(addr, "POST", "/v1/pause", "{}").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({ "paused": true, "args": {} }));
    let r = http(addr, "POST", "/v1/resume", "{}").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json(), json!({ "error": "not paused" }));

    // Client errors.
    let r = http(addr, "POST", "/v1/pause", "{not json").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("not JSON"));
    let r = http(addr, "POST", "/v1/pause", "").await;
    assert_eq!(r.status, 400, "an empty body is not JSON");
    let r = http(addr, "POST", "/v1/explode", "{}").await;
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
    let r = http(addr, "POST", "/v1/drain", "{}").await;
    assert_eq!(r.status, 503);

    // Graceful shutdown closes both listeners.
    server.shutdown().await.unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
    assert!(TcpStream::connect(ro).await.is_err());
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
    let ctl = control_tcp(&server);
    let r = http(ctl, "POST", "/v1/reconcile", "{}").await;
    assert_eq!(r.status, 504);
    assert!(r.json()["error"].as_str().unwrap().contains("no reply"));
    // Queue (capacity 1) still holds the first request: the next one is refused.
    let r = http(ctl, "POST", "/v1/reconcile", "{}").await;
    assert_eq!(r.status, 429);
    server.shutdown().await.unwrap();
}

/// A browser on a port-forward, or a page using DNS rebinding, must not reach a control:
/// every request without a loopback Host or a JSON content type is refused before the
/// binary sees it.
#[tokio::test]
async fn controls_refuse_foreign_hosts_and_non_json() {
    let mut admin = Admin::new("t", "0");
    let mut drains = admin.control("drain", 4);
    let server = admin.serve(&loopback_config()).await.unwrap();
    let ctl = control_tcp(&server);
    let port = ctl.port();
    let cases = [
        (
            format!("Host: evil.example:{port}\r\nContent-Type: application/json"),
            403,
        ),
        (
            format!(
                "Host: 127.0.0.1:{}\r\nContent-Type: application/json",
                port ^ 1
            ),
            403,
        ),
        (
            format!("Host: 127.0.0.1:{port}\r\nContent-Type: text/plain"),
            415,
        ),
        (
            format!("Host: localhost:{port}\r\nContent-Type: application/x-www-form-urlencoded"),
            415,
        ),
        (format!("Host: localhost:{port}"), 415),
    ];
    for (headers, want) in &cases {
        let r = send(ctl, headers, "POST", "/v1/drain", "{}").await;
        assert_eq!(r.status, *want, "{headers}: {}", r.body);
    }
    assert!(
        drains.try_recv().is_err(),
        "a refused request reached the binary"
    );
    // The same request with loopback Host and JSON passes.
    let ok = format!("Host: localhost:{port}\r\nContent-Type: application/json; charset=utf-8");
    let binary = tokio::spawn(async move {
        let req = drains.recv().await.unwrap();
        req.accept(json!({}));
    });
    assert_eq!(send(ctl, &ok, "POST", "/v1/drain", "{}").await.status, 200);
    binary.await.unwrap();
    server.shutdown().await.unwrap();
}

fn token_file(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let f = dir.join("token");
    std::fs::write(&f, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tidemark-admin-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[tokio::test]
async fn non_loopback_controls_need_a_token() {
    let wildcard = |token_file: Option<std::path::PathBuf>| AdminConfig {
        addr: "127.0.0.1:0".to_owned(),
        control: ControlConfig {
            listen: ControlListen::Tcp("0.0.0.0:0".to_owned()),
            token_file,
        },
        ..AdminConfig::default()
    };

    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let err = admin.serve(&wildcard(None)).await.unwrap_err();
    assert!(
        matches!(err, AdminError::RemoteControlRefused { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("--control-addr 0.0.0.0:0"), "{msg}");
    assert!(msg.contains("drain"), "{msg}");
    assert!(msg.contains("--control-token-file"), "{msg}");

    // With a token it starts, and every control must carry it.
    let dir = scratch("token");
    let token = "s3cr3t-t0ken-0123456789";
    let mut admin = Admin::new("t", "0");
    let mut drains = admin.control("drain", 1);
    let server = admin
        .serve(&wildcard(Some(token_file(&dir, token))))
        .await
        .unwrap();
    let port = control_tcp(&server).port();
    let local = SocketAddr::from(([127, 0, 0, 1], port));
    let base = format!("Host: tidemark.example:{port}\r\nContent-Type: application/json");
    let r = send(local, &base, "POST", "/v1/drain", "{}").await;
    assert_eq!(r.status, 401, "{}", r.body);
    let wrong = format!("{base}\r\nAuthorization: Bearer {token}x");
    assert_eq!(
        send(local, &wrong, "POST", "/v1/drain", "{}").await.status,
        401
    );
    assert!(drains.try_recv().is_err());
    let right = format!("{base}\r\nAuthorization: Bearer {token}");
    let binary = tokio::spawn(async move { drains.recv().await.unwrap().accept(json!({})) });
    let r = send(local, &right, "POST", "/v1/drain", "{}").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains(token));
    binary.await.unwrap();
    server.shutdown().await.unwrap();

    // Read-only endpoints may face the network (metrics scraping, kubelet probes).
    let server = Admin::new("t", "0")
        .serve(&AdminConfig {
            addr: "0.0.0.0:0".to_owned(),
            ..AdminConfig::default()
        })
        .await
        .unwrap();
    let local = SocketAddr::from(([127, 0, 0, 1], server.local_addr().port()));
    assert_eq!(http(local, "GET", "/healthz", "").await.status, 200);
    assert!(
        server.control_addr().is_none(),
        "no controls, no control listener"
    );
    server.shutdown().await.unwrap();

    // `localhost` resolves to loopback only, so controls are fine there.
    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let config = AdminConfig {
        control: ControlConfig {
            listen: ControlListen::Tcp("localhost:0".to_owned()),
            token_file: None,
        },
        ..loopback_config()
    };
    admin
        .serve(&config)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();

    // One address cannot be both listeners.
    let mut admin = Admin::new("t", "0");
    let _rx = admin.control("drain", 1);
    let config = AdminConfig {
        addr: "127.0.0.1:39091".to_owned(),
        control: ControlConfig {
            listen: ControlListen::Tcp("127.0.0.1:39091".to_owned()),
            token_file: None,
        },
        ..AdminConfig::default()
    };
    let err = admin.serve(&config).await.unwrap_err();
    assert!(matches!(err, AdminError::SameAddress { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn unix_socket_controls() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("unix");
    let path = dir.join("control.sock");
    // A stale socket file from a killed process is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let mut admin = Admin::new("t", "0");
    let mut pauses = admin.control("pause", 1);
    let config = AdminConfig {
        control: ControlConfig {
            listen: ControlListen::Unix(path.clone()),
            token_file: None,
        },
        ..loopback_config()
    };
    let server = admin.serve(&config).await.unwrap();
    assert_eq!(
        server.control_addr(),
        Some(&ControlAddr::Unix(path.clone()))
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let binary = tokio::spawn(async move { pauses.recv().await.unwrap().accept(json!({"ok": 1})) });
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let r = exchange(
        stream,
        "Host: localhost\r\nContent-Type: application/json",
        "POST",
        "/v1/pause",
        "{}",
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"ok": 1})));
    binary.await.unwrap();
    // A second server cannot take over a socket that answers.
    let mut other = Admin::new("t", "0");
    let _rx = other.control("pause", 1);
    let err = other.serve(&config).await.unwrap_err();
    assert!(matches!(err, AdminError::AddrInUse { .. }), "{err:?}");
    server.shutdown().await.unwrap();
    assert!(!path.exists(), "the socket file is removed on shutdown");
    std::fs::remove_dir_all(&dir).unwrap();
}
