//! The operator side of a cut-over (`tidemark-mirror drain`): ask a running agent to drain
//! over its control listener, then follow `/statusz` until the cut-over record is published.
//!
//! A plain HTTP/1.0 exchange is all the admin server needs, so no HTTP client crate is
//! pulled in for it.

use serde_json::Value;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why a drain did not end in a published cut-over.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The control listener could not be reached or answered garbage.
    #[error("agent control server {addr}: {message} (is the agent running with this --control-addr or --control-socket?)")]
    Admin { addr: String, message: String },
    /// The agent refused the drain request.
    #[error("the agent refused the drain (HTTP {code}): {body}")]
    Refused { code: u16, body: String },
    /// The agent stopped with a failure.
    #[error("the agent failed during the drain: {message}")]
    Failed { message: String },
    /// The agent went away before a cut-over record was seen.
    #[error("the agent's admin server went away before a cut-over was published (last phase {phase}); run `tidemark-mirror checkpoint` to see whether the fence role is Primary")]
    Gone { phase: String },
    /// The timeout passed first.
    #[error("no cut-over within {timeout:?}: phase {phase}, watermark {watermark}, drain target {target}{why}")]
    Timeout {
        timeout: Duration,
        phase: String,
        watermark: i64,
        target: String,
        /// `; blocked (REASON): MESSAGE` when the agent says why, else empty.
        why: String,
    },
}

/// How to reach a running agent's control listener (`run --control-addr`,
/// `--control-socket`, `--control-token-file`).
#[derive(Debug, Clone)]
pub struct ControlClient {
    target: ControlTarget,
    token: Option<String>,
}

#[derive(Debug, Clone)]
enum ControlTarget {
    Tcp(String),
    Unix(std::path::PathBuf),
}

impl ControlClient {
    /// A client for a TCP control address (`HOST:PORT`).
    pub fn tcp(addr: &str) -> Self {
        ControlClient {
            target: ControlTarget::Tcp(addr.to_owned()),
            token: None,
        }
    }

    /// A client for a control Unix socket.
    pub fn unix(path: &std::path::Path) -> Self {
        ControlClient {
            target: ControlTarget::Unix(path.to_owned()),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>`, read from `file` (surrounding whitespace
    /// ignored), as the agent's `--control-token-file` requires.
    pub fn with_token_file(mut self, file: &std::path::Path) -> Result<Self, DrainError> {
        let raw = std::fs::read_to_string(file).map_err(|e| DrainError::Admin {
            addr: self.to_string(),
            message: format!("cannot read --control-token-file {}: {e}", file.display()),
        })?;
        self.token = Some(raw.trim().to_owned());
        Ok(self)
    }

    /// One request; returns (status code, body).
    async fn request(&self, method: &str, path: &str) -> Result<(u16, String), DrainError> {
        let err = |m: String| DrainError::Admin {
            addr: self.to_string(),
            message: m,
        };
        let body = if method == "POST" { "{}" } else { "" };
        let host = match &self.target {
            ControlTarget::Tcp(a) => a.as_str(),
            ControlTarget::Unix(_) => "localhost",
        };
        let mut req = format!(
            "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n",
            body.len()
        );
        if let Some(t) = &self.token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        let exchange = async {
            let buf = match &self.target {
                ControlTarget::Tcp(a) => {
                    let s = tokio::net::TcpStream::connect(a)
                        .await
                        .map_err(|e| err(format!("cannot connect: {e}")))?;
                    roundtrip(s, &req).await
                }
                ControlTarget::Unix(p) => {
                    let s = tokio::net::UnixStream::connect(p)
                        .await
                        .map_err(|e| err(format!("cannot connect: {e}")))?;
                    roundtrip(s, &req).await
                }
            }
            .map_err(|e| err(format!("exchange: {e}")))?;
            let text = String::from_utf8_lossy(&buf).into_owned();
            let (head, body) = text
                .split_once("\r\n\r\n")
                .ok_or_else(|| err("malformed HTTP response".into()))?;
            let code = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| err("malformed HTTP status line".into()))?;
            Ok::<_, DrainError>((code, body.to_string()))
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| err("no answer within 10s".into()))?
    }

    async fn statusz(&self) -> Result<Value, DrainError> {
        let (code, body) = self.request("GET", "/statusz").await?;
        if code != 200 {
            return Err(DrainError::Admin {
                addr: self.to_string(),
                message: format!("/statusz answered HTTP {code}"),
            });
        }
        serde_json::from_str(&body).map_err(|e| DrainError::Admin {
            addr: self.to_string(),
            message: format!("/statusz is not JSON: {e}"),
        })
    }
}

impl std::fmt::Display for ControlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            ControlTarget::Tcp(a) => f.write_str(a),
            ControlTarget::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

async fn roundtrip<S>(mut s: S, req: &str) -> std::io::Result<Vec<u8>>
where
    S: AsyncReadExt + AsyncWriteExt + Unpin,
{
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    Ok(buf)
}

/// The cut-over record, once it is published with `CutoverReady`.
fn cutover(s: &Value) -> Option<Value> {
    let ready = s["conditions"]["CutoverReady"]["status"] == true;
    (ready && s["cutover"].is_object()).then(|| s["cutover"].clone())
}

/// Why the agent says the drain is not moving (`CutoverReady` False with a reason other
/// than `Draining`), for the progress line and the timeout message.
fn blocked(s: &Value) -> Option<String> {
    let c = &s["conditions"]["CutoverReady"];
    let reason = c["reason"].as_str()?;
    if c["status"] == true || reason.is_empty() || reason == "Draining" {
        return None;
    }
    Some(format!(
        "blocked ({reason}): {}",
        c["message"].as_str().unwrap_or("")
    ))
}

/// Draws "watermark vs drain target" on a terminal, or logs it every few seconds.
struct Line {
    tty: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Line {
    fn show(&mut self, s: &Value) {
        let every = if self.tty {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(5)
        };
        if self.last.is_some_and(|l| l.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let w = s["lastAppliedRevision"].as_i64().unwrap_or(0);
        let target = match s["drainTargetRevision"].as_i64() {
            Some(t) => format!("{t} ({} behind)", (t - w).max(0)),
            None => "not read yet".into(),
        };
        let mut line = format!(
            "drain: phase {}, watermark {w}, target {target}, passes {}, repaired {}",
            s["phase"].as_str().unwrap_or("?"),
            s["reconcilePasses"].as_u64().unwrap_or(0),
            s["repairedKeys"].as_u64().unwrap_or(0),
        );
        if let Some(why) = blocked(s) {
            line.push_str(&format!("; {why}"));
        }
        if self.tty {
            eprint!("\r\x1b[K{line}");
            self.drawn = true;
        } else {
            tracing::info!("{line}");
        }
    }

    fn end(&mut self) {
        if self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

/// Requests a drain from the agent behind `client` and waits up to `timeout` for the
/// cut-over; returns the published `status.cutover` record.
pub async fn drain(
    client: &ControlClient,
    timeout: Duration,
    progress: bool,
) -> Result<Value, DrainError> {
    let t0 = Instant::now();
    let first = client.statusz().await?;
    if let Some(c) = cutover(&first) {
        // Idempotent: an agent that already cut over (and is still serving) answers at once.
        return Ok(c);
    }
    let (code, body) = client.request("POST", "/v1/drain").await?;
    if code != 200 {
        return Err(DrainError::Refused {
            code,
            body: body.trim().to_string(),
        });
    }
    let mut line = Line {
        tty: progress && std::io::stderr().is_terminal(),
        last: None,
        drawn: false,
    };
    let mut last = first;
    let mut misses = 0;
    let result = loop {
        match client.statusz().await {
            Ok(s) => {
                misses = 0;
                if let Some(c) = cutover(&s) {
                    break Ok(c);
                }
                if s["phase"] == "Failed" {
                    break Err(DrainError::Failed {
                        message: s["lastError"]
                            .as_str()
                            .unwrap_or("no error message")
                            .to_string(),
                    });
                }
                if progress {
                    line.show(&s);
                }
                last = s;
            }
            // A drained agent keeps serving for a while; a few misses in a row mean it is gone.
            Err(_) if misses >= 5 => {
                break Err(DrainError::Gone {
                    phase: last["phase"].as_str().unwrap_or("?").to_string(),
                })
            }
            Err(_) => misses += 1,
        }
        if t0.elapsed() >= timeout {
            break Err(DrainError::Timeout {
                timeout,
                phase: last["phase"].as_str().unwrap_or("?").to_string(),
                watermark: last["lastAppliedRevision"].as_i64().unwrap_or(0),
                target: last["drainTargetRevision"]
                    .as_i64()
                    .map_or("not read yet".into(), |t| t.to_string()),
                why: blocked(&last).map_or_else(String::new, |w| format!("; {w}")),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    line.end();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use tidemark_runtime::{Admin, AdminConfig, ControlAddr, ControlConfig, ControlListen};

    /// An admin server whose `drain` control publishes a cut-over record in /statusz.
    async fn agent(control: ControlConfig) -> tidemark_runtime::AdminServer {
        let mut admin = Admin::new("t", "0");
        let handle = admin.handle();
        handle.set_status(serde_json::json!({"phase": "Syncing"}));
        let mut drains = admin.control("drain", 1);
        tokio::spawn(async move {
            while let Some(req) = drains.recv().await {
                handle.set_status(serde_json::json!({
                    "phase": "Drained",
                    "conditions": {"CutoverReady": {"status": true}},
                    "cutover": {"drainedRevision": 7},
                }));
                req.accept(serde_json::json!({"accepted": "drain"}));
            }
        });
        let config = AdminConfig {
            addr: "127.0.0.1:0".into(),
            control,
            ..AdminConfig::default()
        };
        admin.serve(&config).await.unwrap()
    }

    #[tokio::test]
    async fn drains_over_a_token_guarded_tcp_listener() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let server = agent(ControlConfig {
            listen: ControlListen::Tcp("127.0.0.1:0".into()),
            token_file: Some(token.clone()),
        })
        .await;
        let Some(ControlAddr::Tcp(addr)) = server.control_addr().cloned() else {
            panic!("no TCP control listener");
        };
        let client = ControlClient::tcp(&addr.to_string());
        match drain(&client, Duration::from_secs(5), false).await {
            Err(DrainError::Refused { code: 401, .. }) => {}
            other => panic!("drained without the token: {other:?}"),
        }
        let client = client.with_token_file(&token).unwrap();
        let cut = drain(&client, Duration::from_secs(5), false).await.unwrap();
        assert_eq!(cut["drainedRevision"], 7);
        server.shutdown().await.unwrap();
    }

    #[test]
    fn a_blocked_drain_is_explained() {
        let draining = serde_json::json!({"conditions": {"CutoverReady":
            {"status": false, "reason": "Draining", "message": "catching up"}}});
        assert_eq!(blocked(&draining), None);
        let full = serde_json::json!({"conditions": {"CutoverReady":
            {"status": false, "reason": "TargetQuotaExhausted", "message": "disarm NOSPACE"}}});
        assert_eq!(
            blocked(&full).as_deref(),
            Some("blocked (TargetQuotaExhausted): disarm NOSPACE")
        );
    }

    #[tokio::test]
    async fn drains_over_a_unix_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("control.sock");
        let server = agent(ControlConfig {
            listen: ControlListen::Unix(sock.clone()),
            token_file: None,
        })
        .await;
        let cut = drain(&ControlClient::unix(&sock), Duration::from_secs(5), false)
            .await
            .unwrap();
        assert_eq!(cut["drainedRevision"], 7);
        server.shutdown().await.unwrap();
    }
}
