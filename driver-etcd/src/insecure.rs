//! `tls.insecureSkipVerify` (only with `insecureSkipVerifyAcknowledgeRisk`, which core's
//! config validation enforces): TLS that encrypts but does not authenticate the server.
//!
//! tonic's TLS config has no switch for this, so the channel is built here with our own
//! connector: TCP, then rustls with a verifier that accepts any server certificate but
//! still checks the handshake signatures (so the session is at least bound to the key the
//! server presented). A client certificate is still offered when configured.

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
struct AcceptAnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Client-side TLS material for an unverified connection.
#[derive(Clone)]
pub struct InsecureTls {
    config: Arc<ClientConfig>,
    server_name: Option<String>,
}

impl std::fmt::Debug for InsecureTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InsecureTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl InsecureTls {
    /// Builds the rustls config; `identity` is a PEM certificate chain and key.
    pub fn new(
        identity: Option<(Vec<u8>, Vec<u8>)>,
        server_name: Option<String>,
    ) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider)));
        let mut config = match identity {
            Some((cert, key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("certFile: {e}"))?;
                let key =
                    PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("keyFile: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("certFile/keyFile: {e}"))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(InsecureTls {
            config: Arc::new(config),
            server_name,
        })
    }

    /// A lazily connecting tonic channel to `url` (an https:// endpoint).
    pub fn channel(
        &self,
        url: &str,
        connect_timeout: Duration,
    ) -> Result<tonic::transport::Channel, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid endpoint {url}: {e}"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| format!("endpoint {url} has no host:port"))?
            .clone();
        // The TLS is ours; tonic sees a plain HTTP/2 connection.
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(connect_timeout)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        let config = self.config.clone();
        let name = self
            .server_name
            .clone()
            .unwrap_or_else(|| authority.host().to_string());
        let port = authority.port_u16().unwrap_or(2379);
        let host = authority.host().to_string();
        let connector = tower::service_fn(move |_: Uri| {
            let config = config.clone();
            let name = name.clone();
            let host = host.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                let server_name = ServerName::try_from(name)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(server_name, tcp)
                    .await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        });
        Ok(endpoint.connect_with_connector_lazy(connector))
    }
}
