//! The operator side of a cut-over (`tidemark-mirror drain`): ask a running agent to drain
//! over its admin server, then follow `/statusz` until the cut-over record is published.
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
    /// The admin server could not be reached or answered garbage.
    #[error("admin server {addr}: {message}")]
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
    #[error("no cut-over within {timeout:?}: phase {phase}, watermark {watermark}, drain target {target}")]
    Timeout {
        timeout: Duration,
        phase: String,
        watermark: i64,
        target: String,
    },
}

/// One request; returns (status code, body).
async fn request(addr: &str, method: &str, path: &str) -> Result<(u16, String), DrainError> {
    let err = |m: String| DrainError::Admin {
        addr: addr.to_string(),
        message: m,
    };
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| err(format!("cannot connect: {e}")))?;
        let req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| err(format!("write: {e}")))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .await
            .map_err(|e| err(format!("read: {e}")))?;
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

async fn statusz(addr: &str) -> Result<Value, DrainError> {
    let (code, body) = request(addr, "GET", "/statusz").await?;
    if code != 200 {
        return Err(DrainError::Admin {
            addr: addr.into(),
            message: format!("/statusz answered HTTP {code}"),
        });
    }
    serde_json::from_str(&body).map_err(|e| DrainError::Admin {
        addr: addr.into(),
        message: format!("/statusz is not JSON: {e}"),
    })
}

/// The cut-over record, once it is published with `CutoverReady`.
fn cutover(s: &Value) -> Option<Value> {
    let ready = s["conditions"]["CutoverReady"]["status"] == true;
    (ready && s["cutover"].is_object()).then(|| s["cutover"].clone())
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
        let line = format!(
            "drain: phase {}, watermark {w}, target {target}, passes {}, repaired {}",
            s["phase"].as_str().unwrap_or("?"),
            s["reconcilePasses"].as_u64().unwrap_or(0),
            s["repairedKeys"].as_u64().unwrap_or(0),
        );
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

/// Requests a drain from the agent at `addr` and waits up to `timeout` for the cut-over;
/// returns the published `status.cutover` record.
pub async fn drain(addr: &str, timeout: Duration, progress: bool) -> Result<Value, DrainError> {
    let t0 = Instant::now();
    let first = statusz(addr).await?;
    if let Some(c) = cutover(&first) {
        // Idempotent: an agent that already cut over (and is still serving) answers at once.
        return Ok(c);
    }
    let (code, body) = request(addr, "POST", "/v1/drain").await?;
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
        match statusz(addr).await {
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
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    line.end();
    result
}
