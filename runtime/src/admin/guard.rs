//! Who may use a control (`POST /v1/<name>`): the checks every control request passes
//! before it reaches the binary.
//!
//! A control can cut a mirror over or stop it, so three independent checks stand between
//! the network and the binary:
//! - **Reachability.** The control listener is loopback or a Unix socket, unless a bearer
//!   token is configured (enforced when the server starts, see `Admin::serve`).
//! - **Token.** With `--control-token-file`, `Authorization: Bearer <token>` must match,
//!   compared in constant time.
//! - **Browser defences.** `Content-Type` must be `application/json` (a cross-site form
//!   cannot send it without a CORS preflight, which the server never grants), and on a
//!   loopback listener `Host` must name loopback and the bound port (DNS rebinding).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::extract::connect_info::Connected;
use axum::http::{header, HeaderMap, StatusCode};
use axum::serve::IncomingStream;
use tokio::net::{TcpListener, UnixListener};

/// Who sent a control request, for the audit log line.
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    /// A TCP client.
    Tcp(SocketAddr),
    /// A Unix-socket client, with its credentials when the kernel tells them.
    Unix { uid: Option<u32>, pid: Option<i32> },
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(a) => write!(f, "tcp {a}"),
            Peer::Unix { uid, pid } => {
                f.write_str("unix socket")?;
                if let Some(uid) = uid {
                    write!(f, " uid {uid}")?;
                }
                if let Some(pid) = pid {
                    write!(f, " pid {pid}")?;
                }
                Ok(())
            }
        }
    }
}

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Peer::Tcp(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        let cred = stream.io().peer_cred().ok();
        Peer::Unix {
            uid: cred.map(|c| c.uid()),
            pid: cred.and_then(|c| c.pid()),
        }
    }
}

/// Why the control token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("--control-token-file {path}: cannot read it: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Others could read the token, so it does not authenticate anyone.
    #[error(
        "--control-token-file {path}: mode {mode:04o} lets group or others read it; \
         chmod 600 it (on Kubernetes, set defaultMode: 0400 on the Secret volume)"
    )]
    Permissive { path: String, mode: u32 },
    /// An empty token would match an empty header.
    #[error(
        "--control-token-file {path}: holds no token; write at least 32 random characters \
         (e.g. `head -c 32 /dev/urandom | base64`)"
    )]
    Empty { path: String },
    /// Short tokens can be guessed.
    #[error("--control-token-file {path}: the token has {len} characters; use at least 16")]
    Short { path: String, len: usize },
}

/// Shortest accepted bearer token.
const MIN_TOKEN_LEN: usize = 16;

/// A bearer token. Its `Debug` never shows the secret.
#[derive(Clone)]
pub(crate) struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Reads the token (surrounding whitespace ignored) from a file only its owner can read.
    pub(crate) fn load(path: &Path) -> Result<Token, TokenError> {
        let shown = path.display().to_string();
        let read = |source| TokenError::Read {
            path: shown.clone(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(TokenError::Permissive { path: shown, mode });
            }
        }
        let raw = std::fs::read(path).map_err(read)?;
        let token = raw.trim_ascii();
        if token.is_empty() {
            return Err(TokenError::Empty { path: shown });
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(TokenError::Short {
                path: shown,
                len: token.len(),
            });
        }
        Ok(Token(token.to_vec()))
    }

    /// Constant-time in the token's content (the length is not secret).
    fn matches(&self, presented: &[u8]) -> bool {
        if presented.len() != self.0.len() {
            return false;
        }
        let diff = self
            .0
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        diff == 0
    }
}

/// Which `Host` headers a listener accepts.
#[derive(Debug, Clone)]
pub(crate) enum HostRule {
    /// Loopback TCP: a loopback name or address, and the bound port.
    Loopback { port: u16 },
    /// Non-loopback TCP (token required): any host, the bound port.
    Port { port: u16 },
    /// Unix socket: clients send any name, and only the file's mode lets them in.
    Any,
}

/// The checks of one control listener.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    pub(crate) token: Option<Token>,
    pub(crate) host: HostRule,
}

/// A refused control request: status and the reason sent back (never the token).
pub(crate) type Refusal = (StatusCode, String);

impl Guard {
    /// Passes a request that may act, or says why not.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        self.check_host(headers)?;
        if let Some(token) = &self.token {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
            match presented {
                Some(p) if token.matches(p.trim_ascii()) => {}
                Some(_) => {
                    return Err((StatusCode::UNAUTHORIZED, "wrong bearer token".into()));
                }
                None => {
                    return Err((
                        StatusCode::UNAUTHORIZED,
                        "controls need `Authorization: Bearer <token>` (the agent's --control-token-file)"
                            .into(),
                    ));
                }
            }
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "controls accept only `Content-Type: application/json` with a JSON body such as {}"
                    .into(),
            ));
        }
        Ok(())
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let port = match self.host {
            HostRule::Any => return Ok(()),
            HostRule::Loopback { port } | HostRule::Port { port } => port,
        };
        let refuse = |why: String| Err((StatusCode::FORBIDDEN, why));
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return refuse("missing Host header".into());
        };
        let Some((name, got_port)) = split_host(host) else {
            return refuse(format!("Host {host:?} must name the control port {port}"));
        };
        if got_port != port {
            return refuse(format!(
                "Host {host:?} does not name the control port {port}"
            ));
        }
        if matches!(self.host, HostRule::Loopback { .. }) && !is_loopback_name(name) {
            return refuse(format!(
                "Host {host:?} is not a loopback name; use 127.0.0.1, [::1] or localhost"
            ));
        }
        Ok(())
    }
}

/// `name:port` or `[v6]:port`; `None` without a numeric port.
fn split_host(host: &str) -> Option<(&str, u16)> {
    let (name, port) = host.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    Some((name, port))
}

fn is_loopback_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Where the control listener listens, for messages and `tidemark-mirror drain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

impl fmt::Display for ControlAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlAddr::Tcp(a) => write!(f, "{a}"),
            ControlAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_host_rule() {
        let g = Guard {
            token: None,
            host: HostRule::Loopback { port: 9091 },
        };
        let json = (header::CONTENT_TYPE, "application/json; charset=utf-8");
        for ok in [
            "127.0.0.1:9091",
            "localhost:9091",
            "[::1]:9091",
            "LOCALHOST:9091",
        ] {
            assert!(
                g.check(&headers(&[(header::HOST, ok), json.clone()]))
                    .is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "evil.example:9091",
            "127.0.0.1:80",
            "127.0.0.1",
            "10.0.0.1:9091",
        ] {
            let e = g
                .check(&headers(&[(header::HOST, bad), json.clone()]))
                .unwrap_err();
            assert_eq!(e.0, StatusCode::FORBIDDEN, "{bad}");
        }
        let e = g.check(&headers(&[json])).unwrap_err();
        assert_eq!(e.0, StatusCode::FORBIDDEN);
    }

    #[test]
    fn content_type_must_be_json() {
        let g = Guard {
            token: None,
            host: HostRule::Any,
        };
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            let e = g
                .check(&headers(&[(header::CONTENT_TYPE, bad)]))
                .unwrap_err();
            assert_eq!(e.0, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad}");
        }
        assert_eq!(
            g.check(&HeaderMap::new()).unwrap_err().0,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
    }

    #[test]
    fn token_is_required_and_compared() {
        let g = Guard {
            token: Some(Token(b"0123456789abcdef".to_vec())),
            host: HostRule::Port { port: 9091 },
        };
        let host = (header::HOST, "tidemark.example:9091");
        let json = (header::CONTENT_TYPE, "application/json");
        let with = |auth: &str| {
            g.check(&headers(&[
                host.clone(),
                json.clone(),
                (header::AUTHORIZATION, auth),
            ]))
        };
        assert!(with("Bearer 0123456789abcdef").is_ok());
        for bad in [
            "Bearer 0123456789abcdeg",
            "Bearer 0123",
            "Basic 0123456789abcdef",
            "0123456789abcdef",
        ] {
            assert_eq!(with(bad).unwrap_err().0, StatusCode::UNAUTHORIZED, "{bad}");
        }
        let none = g.check(&headers(&[host, json])).unwrap_err();
        assert_eq!(none.0, StatusCode::UNAUTHORIZED);
        assert!(format!("{:?}", g.token).contains("redacted"));
    }

    #[test]
    fn token_file_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tidemark-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        let write = |body: &str, mode: u32| {
            std::fs::write(&file, body).unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("0123456789abcdef\n", 0o644);
        let e = Token::load(&file).unwrap_err();
        assert!(
            matches!(e, TokenError::Permissive { mode: 0o644, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 600"), "{e}");
        write("  \n", 0o600);
        assert!(matches!(Token::load(&file), Err(TokenError::Empty { .. })));
        write("short", 0o600);
        assert!(matches!(
            Token::load(&file),
            Err(TokenError::Short { len: 5, .. })
        ));
        write("0123456789abcdef\n", 0o400);
        let t = Token::load(&file).unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
