//! Endpoint URL checks: scheme, host and port, never echoing credentials.

use thiserror::Error;

/// Why an `endpointList` URL was refused. Each message shows the URL cut to 100
/// characters, except [`EndpointUrlError::Credentials`], which never shows it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(super) enum EndpointUrlError {
    /// `user:password@` in the URL.
    #[error(
        "contains credentials (user:password@); remove them from the URL and use \
                    auth.username with auth.passwordFile (or auth.secretRef)"
    )]
    Credentials,
    /// Not `http://` or `https://`.
    #[error("{0:?} is not an http:// or https:// URL with a host and port")]
    NotHttp(String),
    /// A path, query, fragment, whitespace or control character after the scheme.
    #[error("{0:?} must be scheme://host:port with no path, query, fragment or whitespace")]
    NotHostPort(String),
    /// `[` with no `]`.
    #[error("{0:?} has an unclosed IPv6 bracket")]
    UnclosedBracket(String),
    /// Brackets around something that is not an IPv6 address.
    #[error("{0:?} has an invalid IPv6 address")]
    InvalidIpv6(String),
    /// A port that is not 1..65535.
    #[error("{0:?} has an invalid port (use 1..65535)")]
    InvalidPort(String),
    /// An empty host, or one with a `:` in it.
    #[error("{0:?} has no valid host")]
    NoHost(String),
}

/// Checks one endpoint URL: `http://` or `https://`, a host, an optional numeric port and
/// nothing else. Returns the scheme, or the problem. The message never repeats a URL that
/// carries credentials, so a password cannot reach a log through it.
pub(super) fn endpoint_url(full: &str) -> Result<&'static str, EndpointUrlError> {
    if full.contains('@') {
        return Err(EndpointUrlError::Credentials);
    }
    let url = shown(full);
    let url = url.as_str();
    let (scheme, rest) = match full.split_once("://") {
        Some(("http", rest)) => ("http", rest),
        Some(("https", rest)) => ("https", rest),
        _ => return Err(EndpointUrlError::NotHttp(url.to_string())),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"/?#\\".contains(&b))
    {
        return Err(EndpointUrlError::NotHostPort(url.to_string()));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => {
            let Some((addr, after)) = v6.split_once(']') else {
                return Err(EndpointUrlError::UnclosedBracket(url.to_string()));
            };
            // Pure text parsing of the address (no lookup, no IO): the core stays IO-free.
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(EndpointUrlError::InvalidIpv6(url.to_string()));
            }
            if !after.is_empty() {
                port_of(url, after.strip_prefix(':').unwrap_or(after))?;
            }
            return Ok(scheme);
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => {
                port_of(url, port)?;
                host
            }
            None => authority,
        },
    };
    if host.is_empty() || host.contains(':') {
        return Err(EndpointUrlError::NoHost(url.to_string()));
    }
    Ok(scheme)
}

fn port_of(url: &str, port: &str) -> Result<(), EndpointUrlError> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(EndpointUrlError::InvalidPort(url.to_string())),
    }
}

/// A URL for a message: at most 100 characters of it.
fn shown(url: &str) -> String {
    match url.char_indices().nth(100) {
        Some((cut, _)) => format!("{}...", &url[..cut]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::valid;
    use super::*;

    #[test]
    fn endpoint_urls_are_checked_and_credentials_never_echoed() {
        for ok in [
            "http://127.0.0.1:2379",
            "https://etcd-0.etcd:2379/",
            "http://localhost",
            "http://[::1]:2379",
        ] {
            assert!(endpoint_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://user:hunter2@127.0.0.1:2379",
            "https://hunter2@h:2379",
            "ftp://user:hunter2@h",
        ] {
            let e = endpoint_url(bad).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("auth.username"), "{e}");
        }
        for bad in [
            "http://h:2379/v3",
            "http://h:2379?x=1",
            "http://h:0",
            "http://h:99999",
            "http://:2379",
            "http://h 1:2379",
            "http://[::1:2379",
            "unix:///run/etcd.sock",
        ] {
            assert!(endpoint_url(bad).is_err(), "{bad}");
        }
        for (bad, want) in [
            ("ftp://h", "\"ftp://h\" is not an http:// or https:// URL with a host and port"),
            ("http://h:2379/v3", "\"http://h:2379/v3\" must be scheme://host:port with no path, query, fragment or whitespace"),
            ("http://[::1:2379", "\"http://[::1:2379\" has an unclosed IPv6 bracket"),
            ("http://[::g]:2379", "\"http://[::g]:2379\" has an invalid IPv6 address"),
            ("http://[::1]:0", "\"http://[::1]:0\" has an invalid port (use 1..65535)"),
            ("http://h:99999", "\"http://h:99999\" has an invalid port (use 1..65535)"),
            ("http://:2379", "\"http://:2379\" has no valid host"),
        ] {
            assert_eq!(endpoint_url(bad).unwrap_err().to_string(), want, "{bad}");
        }
        assert_eq!(
            endpoint_url("http://u:p@h").unwrap_err().to_string(),
            "contains credentials (user:password@); remove them from the URL and use \
             auth.username with auth.passwordFile (or auth.secretRef)"
        );
        let huge = format!("http://{}", "h".repeat(100_000));
        let mut c = valid();
        c.source.endpoint_list = vec![format!("{huge}:x")];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.len() < 2000, "messages stay short: {} bytes", e.len());
    }
}
