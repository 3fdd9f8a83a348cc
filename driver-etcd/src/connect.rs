//! One lazily (re)connected etcd client per cluster, with endpoint rotation.
//!
//! The mirror talks to one endpoint of a cluster at a time. A transient failure drops the
//! connection and moves to the next endpoint in the list, so the core's backoff governs how
//! fast the endpoints are retried and a dead member is skipped on the next attempt.
//!
//! The target side may also keep *lanes*: further connections to the same endpoint, which
//! the Txns take turns on. HTTP/2 flow control holds a connection's later requests behind
//! its window, and releases them together once the peer's window update arrives; etcd then
//! runs requests that arrive together in no useful order. Across a long round trip one
//! connection therefore turns a paced chain of Txns into bursts that etcd reorders, and one
//! connection per Txn in flight keeps them apart (docs/design.md, "Pipelined commits").

use crate::error::{deadline_failure, failure_from, DriverError};
use crate::probe;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use std::time::Duration;
use tidemark_core::classify::{classify, Code, Failure};
use tidemark_core::config::{AuthSpec, EndpointSpec, TlsSpec};
use tidemark_core::etcd::{Cluster, StatusReply};
use tokio::sync::Mutex;

/// Decoding limit for responses: etcd clients accept up to 2 GiB; range pages and watch
/// responses can exceed tonic's 4 MiB default when values are large.
pub const MAX_DECODING_BYTES: usize = 512 << 20;

/// Connection settings derived from one side's [`EndpointSpec`]; credentials already loaded.
#[derive(Clone)]
pub struct ConnSettings {
    /// Endpoint URLs, tried in order with rotation on failure.
    pub endpoints: Vec<String>,
    user: Option<(String, String)>,
    tls: Option<Tls>,
    /// Where `tls` came from, to load it again when the files change (rotation).
    tls_files: Option<TlsFiles>,
    /// Deadline for connecting (and the connect-time probe).
    pub connect_timeout: Duration,
}

/// The TLS files of one side and a digest of their contents when last loaded.
#[derive(Clone)]
struct TlsFiles {
    side: String,
    spec: TlsSpec,
    digest: u64,
}

/// A digest of the CA, certificate and key files' contents; `None` while one is unreadable
/// (a rotation in progress keeps the material already loaded).
fn tls_digest(t: &TlsSpec) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for path in [&t.ca_file, &t.cert_file, &t.key_file]
        .into_iter()
        .flatten()
    {
        std::fs::read(path).ok()?.hash(&mut h);
    }
    Some(h.finish())
}

impl std::fmt::Debug for ConnSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("ConnSettings")
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ConnSettings {
    /// Loads TLS material and the password file named by `spec` (the config was validated
    /// already; this is where unreadable files surface, with the field name).
    pub fn from_spec(
        side: &str,
        spec: &EndpointSpec,
        connect_timeout: Duration,
    ) -> Result<Self, DriverError> {
        let tls = match &spec.tls {
            Some(t) => Some(load_tls(side, t)?),
            None => None,
        };
        let tls_files = spec.tls.as_ref().map(|t| TlsFiles {
            side: side.to_string(),
            spec: t.clone(),
            digest: tls_digest(t).unwrap_or(0),
        });
        let user = match &spec.auth {
            Some(a) => load_auth(side, a)?,
            None => None,
        };
        Ok(ConnSettings {
            endpoints: spec.endpoint_list.clone(),
            user,
            tls,
            tls_files,
            connect_timeout,
        })
    }

    /// Plain-text settings for a list of endpoints (tests, tools).
    pub fn plain(endpoints: Vec<String>, connect_timeout: Duration) -> Self {
        ConnSettings {
            endpoints,
            user: None,
            tls: None,
            tls_files: None,
            connect_timeout,
        }
    }

    /// Adds username/password auth.
    pub fn with_user(mut self, user: &str, password: &str) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Loads the TLS files again when their contents changed since they were last loaded;
    /// true when new material is in use. Half-rotated or unreadable files keep the old
    /// material (the next connect tries again).
    fn refresh_tls(&mut self) -> bool {
        let Some(files) = &mut self.tls_files else {
            return false;
        };
        let Some(digest) = tls_digest(&files.spec) else {
            return false;
        };
        if digest == files.digest {
            return false;
        }
        match load_tls(&files.side, &files.spec) {
            Ok(tls) => {
                files.digest = digest;
                self.tls = Some(tls);
                true
            }
            Err(e) => {
                tracing::warn!(side = %files.side, error = %e, "changed TLS files could not be loaded; keeping the previous ones");
                false
            }
        }
    }

    fn options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::new()
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true)
            .with_connect_timeout(self.connect_timeout)
            .with_tcp_keepalive(Duration::from_secs(30))
            // `hasleader` metadata: a member cut off from the leader fails our RPCs and
            // watches instead of serving stale data.
            .with_require_leader(true)
            .with_auto_token_refresh(true);
        if let Some((u, p)) = &self.user {
            o = o.with_user(u.clone(), p.clone());
        }
        if let Some(Tls::Verified(t)) = &self.tls {
            o = o.with_tls((**t).clone());
        }
        o
    }
}

fn read_file(field: String, path: &str) -> Result<Vec<u8>, DriverError> {
    std::fs::read(path).map_err(|e| DriverError::Credentials {
        field,
        message: format!("cannot read {path}: {e}"),
    })
}

/// How one side speaks TLS.
#[derive(Clone, Debug)]
enum Tls {
    Verified(Box<TlsOptions>),
    /// `insecureSkipVerify` with the acknowledgement: encrypted, server not authenticated.
    Unverified(crate::insecure::InsecureTls),
}

fn load_tls(side: &str, t: &TlsSpec) -> Result<Tls, DriverError> {
    let identity = match (&t.cert_file, &t.key_file) {
        (Some(c), Some(k)) => Some((
            read_file(format!("{side}.tls.certFile"), c)?,
            read_file(format!("{side}.tls.keyFile"), k)?,
        )),
        (None, None) => None,
        (Some(_), None) => {
            return Err(DriverError::Credentials {
                field: format!("{side}.tls.keyFile"),
                message: "certFile is set but keyFile is not; set both or neither".into(),
            })
        }
        (None, Some(_)) => {
            return Err(DriverError::Credentials {
                field: format!("{side}.tls.certFile"),
                message: "keyFile is set but certFile is not; set both or neither".into(),
            })
        }
    };
    if t.insecure_skip_verify {
        if !t.insecure_skip_verify_acknowledge_risk {
            return Err(DriverError::Credentials {
                field: format!("{side}.tls.insecureSkipVerifyAcknowledgeRisk"),
                message: "must be true to use insecureSkipVerify (anyone on the path can impersonate the server)".into(),
            });
        }
        tracing::warn!(
            side,
            "TLS server verification is disabled (insecureSkipVerify)"
        );
        return crate::insecure::InsecureTls::new(identity, t.server_name.clone())
            .map(Tls::Unverified)
            .map_err(|message| DriverError::Credentials {
                field: format!("{side}.tls"),
                message,
            });
    }
    let mut o = TlsOptions::new();
    if let Some(ca) = &t.ca_file {
        let pem = read_file(format!("{side}.tls.caFile"), ca)?;
        o = o.ca_certificate(Certificate::from_pem(pem));
    }
    if let Some((cert, key)) = identity {
        o = o.identity(Identity::from_pem(cert, key));
    }
    if let Some(n) = &t.server_name {
        o = o.domain_name(n.clone());
    }
    Ok(Tls::Verified(Box::new(o)))
}

fn load_auth(side: &str, a: &AuthSpec) -> Result<Option<(String, String)>, DriverError> {
    match (&a.username, &a.password_file) {
        (None, None) => Ok(None),
        (Some(u), Some(f)) => {
            let raw = read_file(format!("{side}.auth.passwordFile"), f)?;
            let pw = String::from_utf8(raw).map_err(|_| DriverError::Credentials {
                field: format!("{side}.auth.passwordFile"),
                message: format!("{f} is not UTF-8"),
            })?;
            // A trailing newline is an editor artefact, never part of the password.
            let pw = pw.strip_suffix('\n').unwrap_or(&pw);
            let pw = pw.strip_suffix('\r').unwrap_or(pw);
            Ok(Some((u.clone(), pw.to_string())))
        }
        (Some(_), None) => Err(DriverError::Credentials {
            field: format!("{side}.auth.passwordFile"),
            message: "username is set but passwordFile is not".into(),
        }),
        (None, Some(_)) => Err(DriverError::Credentials {
            field: format!("{side}.auth.username"),
            message: "passwordFile is set but username is not".into(),
        }),
    }
}

/// One extra connection of a [`ClusterConn`].
#[derive(Clone)]
enum Lane {
    /// Not connected yet in this generation.
    Idle,
    Up(Box<Client>),
    /// Could not connect at this time: until LANE_RETRY later its turns go to the main
    /// connection, so an unreachable lane costs one connect timeout, not one per Txn.
    Failed(std::time::Instant),
}

/// How long a lane that could not connect leaves its turns to the main connection.
const LANE_RETRY: Duration = Duration::from_secs(30);

struct ConnState {
    client: Option<Client>,
    /// The endpoint `client` is connected to.
    endpoint: String,
    /// The lanes besides `client`, connected on first use to `endpoint`, and dropped with
    /// `client` (they share its generation).
    lanes: Vec<Lane>,
    /// The lane the next [`ClusterConn::lane`] call takes (0 is `client` itself).
    next_lane: usize,
    /// Bumped on every (re)connect so a stale failure report cannot rotate twice.
    generation: u64,
    /// Index of the endpoint the next connect uses.
    next: usize,
    /// What the connect-time probe learned.
    last_probe: Option<StatusReply>,
    /// The settings the next connect uses: TLS material is reloaded into them.
    settings: ConnSettings,
}

/// A cluster connection shared by every command and watch task for one side.
pub struct ClusterConn {
    side: Cluster,
    settings: ConnSettings,
    state: Mutex<ConnState>,
    /// TLS material reloads after rotation (`tidemark_mirror_tls_reloads_total`).
    reloads: prometheus_client::metrics::counter::Counter,
}

impl std::fmt::Debug for ClusterConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConn")
            .field("side", &self.side)
            .field("settings", &self.settings)
            .finish()
    }
}

/// A connected client and the generation it belongs to (for [`ClusterConn::report`]).
#[derive(Clone)]
#[allow(missing_debug_implementations)] // etcd_client::Client is not Debug
pub struct Conn {
    pub client: Client,
    pub generation: u64,
}

/// A client for `endpoint` with `settings` (credentials, TLS, keepalive), not yet probed.
async fn open(settings: &ConnSettings, endpoint: &str) -> Result<Client, Failure> {
    match &settings.tls {
        Some(Tls::Unverified(insecure)) => {
            let channel = insecure
                .channel(endpoint, settings.connect_timeout)
                .map_err(|m| classify(Code::InvalidArgument, &m))?;
            Client::from_channel(
                etcd_client::Channel::Tonic(channel),
                Some(settings.options()),
            )
            .await
        }
        _ => Client::connect([endpoint], Some(settings.options())).await,
    }
    .map_err(|e| failure_from(&e))
}

impl ClusterConn {
    /// Nothing connects until the first command needs it.
    pub fn new(side: Cluster, settings: ConnSettings) -> Self {
        ClusterConn {
            side,
            state: Mutex::new(ConnState {
                client: None,
                endpoint: String::new(),
                lanes: Vec::new(),
                next_lane: 0,
                generation: 0,
                next: 0,
                last_probe: None,
                settings: settings.clone(),
            }),
            settings,
            reloads: Default::default(),
        }
    }

    /// Keeps `n` connections for [`ClusterConn::lane`] (1: every command shares one).
    pub fn with_lanes(self, n: usize) -> Self {
        let mut st = self.state.into_inner();
        st.lanes = vec![Lane::Idle; n.saturating_sub(1)];
        ClusterConn {
            state: Mutex::new(st),
            ..self
        }
    }

    /// The connection for one Txn: the lanes in turn, so that Txns sent one after another
    /// travel on different connections. A lane that cannot connect falls back to the main
    /// connection (logged): an extra connection is an optimisation, never a new failure.
    pub async fn lane(&self) -> Result<Conn, Failure> {
        let main = self.get().await?;
        let (i, endpoint, settings) = {
            let mut st = self.state.lock().await;
            let n = st.lanes.len() + 1;
            let i = st.next_lane % n;
            st.next_lane = st.next_lane.wrapping_add(1);
            if i == 0 || st.generation != main.generation || st.client.is_none() {
                return Ok(main);
            }
            match st.lanes.get(i - 1) {
                Some(Lane::Up(c)) => {
                    return Ok(Conn {
                        client: (**c).clone(),
                        generation: main.generation,
                    })
                }
                Some(Lane::Failed(at)) if at.elapsed() < LANE_RETRY => return Ok(main),
                Some(_) => {}
                None => return Ok(main),
            }
            (i, st.endpoint.clone(), st.settings.clone())
        };
        // Connected (and probed, so that a dead lane shows now and not in the Txn)
        // outside the lock, so other commands are not held up meanwhile.
        let t = settings.connect_timeout;
        let opened = tokio::time::timeout(t, async {
            let mut client = open(&settings, &endpoint).await?;
            probe::status(&mut client).await?;
            Ok::<_, Failure>(client)
        })
        .await
        .unwrap_or_else(|_| {
            Err(Failure::Transient {
                message: format!("connect to {endpoint} timed out after {t:?}"),
            })
        });
        let mut st = self.state.lock().await;
        if st.generation != main.generation || st.client.is_none() {
            return Ok(main);
        }
        let Some(slot) = st.lanes.get_mut(i - 1) else {
            return Ok(main);
        };
        match (opened, &*slot) {
            // Another Txn connected this lane meanwhile: use its client.
            (_, Lane::Up(c)) => Ok(Conn {
                client: (**c).clone(),
                generation: main.generation,
            }),
            (Ok(client), _) => {
                tracing::debug!(cluster = ?self.side, endpoint = %endpoint, lane = i, "lane connected");
                *slot = Lane::Up(Box::new(client.clone()));
                Ok(Conn {
                    client,
                    generation: main.generation,
                })
            }
            (Err(f), _) => {
                tracing::warn!(cluster = ?self.side, endpoint = %endpoint, lane = i, error = %f, "lane connect failed; its Txns use the main connection until the next reconnect");
                *slot = Lane::Failed(std::time::Instant::now());
                Ok(main)
            }
        }
    }

    /// The reload counter, to register in a metrics registry (clones share the count).
    pub fn tls_reloads(&self) -> prometheus_client::metrics::counter::Counter {
        self.reloads.clone()
    }

    /// Which cluster this is.
    pub fn side(&self) -> Cluster {
        self.side
    }

    /// The current client, connecting (and probing) the next endpoint if there is none.
    pub async fn get(&self) -> Result<Conn, Failure> {
        let mut st = self.state.lock().await;
        if let Some(c) = &st.client {
            return Ok(Conn {
                client: c.clone(),
                generation: st.generation,
            });
        }
        if st.settings.refresh_tls() {
            self.reloads.inc();
            tracing::info!(cluster = ?self.side, "TLS files changed; connecting with the new certificate, key and CA");
        }
        let settings = st.settings.clone();
        let n = settings.endpoints.len().max(1);
        let idx = st.next % n;
        let endpoint = self
            .settings
            .endpoints
            .get(idx)
            .cloned()
            .unwrap_or_default();
        let t = settings.connect_timeout;
        let attempt = async {
            let mut client = open(&settings, &endpoint).await?;
            let probe = probe::status(&mut client).await?;
            Ok::<_, Failure>((client, probe))
        };
        match tokio::time::timeout(t, attempt).await {
            Ok(Ok((client, probe))) => {
                tracing::info!(
                    cluster = ?self.side,
                    endpoint = %endpoint,
                    version = %probe.version,
                    revision = probe.header_revision,
                    learner = probe.is_learner,
                    "connected"
                );
                st.generation += 1;
                st.client = Some(client.clone());
                st.endpoint = endpoint.clone();
                st.last_probe = Some(probe);
                Ok(Conn {
                    client,
                    generation: st.generation,
                })
            }
            Ok(Err(f)) => {
                tracing::warn!(cluster = ?self.side, endpoint = %endpoint, error = %f, "connect failed");
                st.next = idx + 1;
                Err(f)
            }
            Err(_) => {
                tracing::warn!(cluster = ?self.side, endpoint = %endpoint, "connect timed out");
                st.next = idx + 1;
                // A connect that timed out wrote nothing: transient, not unknown.
                Err(Failure::Transient {
                    message: format!("connect to {endpoint} timed out after {t:?}"),
                })
            }
        }
    }

    /// Tells the connection a command on `generation` failed with `f`. Connection-level
    /// failures drop the client and rotate to the next endpoint.
    pub async fn report(&self, generation: u64, f: &Failure) {
        let drop_conn = matches!(f, Failure::Transient { .. } | Failure::Unknown { .. });
        if !drop_conn {
            return;
        }
        let mut st = self.state.lock().await;
        if st.generation == generation && st.client.is_some() {
            tracing::debug!(cluster = ?self.side, error = %f, "dropping connection, rotating endpoint");
            st.client = None;
            st.lanes.iter_mut().for_each(|l| *l = Lane::Idle);
            st.next += 1;
        }
    }

    /// What the last connect-time probe learned, if any.
    pub async fn last_probe(&self) -> Option<StatusReply> {
        self.state.lock().await.last_probe.clone()
    }

    /// Maps a deadline on this cluster to a failure.
    pub fn deadline(&self, what: &str, t: Duration) -> Failure {
        deadline_failure(&format!("{:?} {what}", self.side), t)
    }
}
