//! Runs one core [`Command`] as etcd-client calls.
//!
//! A straight translation: every unary RPC gets the `sync.requestTimeout` deadline, every
//! error goes through core's `classify`, and nothing here decides what to do about it.

use crate::connect::{ClusterConn, Conn, MAX_DECODING_BYTES};
use crate::error::failure_from;
use crate::probe;
use crate::watch::WatchRegistry;
use crate::wire::{etcd_key, kv_from, kv_into};
use etcd_client::{
    Compare as EcCompare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget,
    Txn as EcTxn, TxnOp as EcTxnOp, TxnOpResponse,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{
    Cluster, Command, CompareTarget, RangeReply, RangeRequest, Reply, SortBy, TxnOp, TxnReply,
    TxnRequest,
};
use tidemark_core::mirror::io::{CommandId, Input};
use tokio::sync::mpsc;

/// Most connections to the target. Past this many Txns in flight, Txns share them.
pub const TARGET_LANES: usize = 16;

/// Executes commands against the source and target clusters.
#[derive(Debug, Clone)]
pub struct Executor {
    source: Arc<ClusterConn>,
    target: Arc<ClusterConn>,
    request_timeout: Duration,
    watches: WatchRegistry,
}

impl Executor {
    /// `request_timeout` is the per-RPC deadline (`sync.requestTimeout`); watches have none.
    pub fn new(
        source: Arc<ClusterConn>,
        target: Arc<ClusterConn>,
        request_timeout: Duration,
    ) -> Self {
        Executor {
            source,
            target,
            request_timeout,
            watches: WatchRegistry::default(),
        }
    }

    /// The connection for one side.
    pub fn conn(&self, c: Cluster) -> &Arc<ClusterConn> {
        match c {
            Cluster::Source => &self.source,
            Cluster::Target => &self.target,
        }
    }

    /// The per-RPC deadline.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Runs `cmd` and delivers its completion (and, for a watch, every later event) on `tx`.
    /// Returns once the completion has been sent; a watch keeps running in the background.
    pub async fn dispatch(&self, id: CommandId, cmd: Command, tx: mpsc::Sender<Input>) {
        match cmd {
            Command::Watch(req) => {
                self.watches
                    .start(id, req, self.source.clone(), self.request_timeout, tx)
                    .await;
            }
            other => {
                let t0 = std::time::Instant::now();
                let label = other.label();
                let result = self.run(other).await;
                tracing::trace!(
                    id,
                    cmd = label,
                    ok = result.is_ok(),
                    micros = t0.elapsed().as_micros() as u64,
                    "command done"
                );
                // The receiver is gone only when the agent stopped; nothing to do then.
                let _ = tx.send(Input::Done { id, result }).await;
            }
        }
    }

    /// Runs a command that completes with one reply (everything but `Watch`).
    pub async fn run(&self, cmd: Command) -> Result<Reply, Failure> {
        match cmd {
            Command::Status { cluster } => self
                .unary(cluster, "status", |mut c| async move {
                    probe::status(&mut c.client).await
                })
                .await
                .map(Reply::Status),
            Command::Range(req) => {
                let cluster = req.cluster;
                self.unary(cluster, "range", move |c| range(c, req))
                    .await
                    .map(Reply::Range)
            }
            Command::Txn(req) => self
                .unary_on(Cluster::Target, "txn", true, move |c| txn(c, req))
                .await
                .map(Reply::Txn),
            Command::Watch(_) => Err(Failure::Permanent {
                kind: tidemark_core::classify::PermanentKind::Other,
                message: "driver bug: Watch must go through dispatch".into(),
            }),
            Command::CancelWatch { watch_id } => {
                self.watches.cancel(watch_id);
                Ok(Reply::Ok)
            }
            Command::RequestProgress { watch_id } => {
                self.watches.request_progress(watch_id);
                Ok(Reply::Ok)
            }
        }
    }

    /// Connects if needed, runs `f` under the request deadline, and reports connection-level
    /// failures so the next attempt rotates endpoints.
    async fn unary<T, F, Fut>(&self, cluster: Cluster, what: &str, f: F) -> Result<T, Failure>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        self.unary_on(cluster, what, false, f).await
    }

    /// [`Executor::unary`], on the next lane of the cluster's connections when `lane`.
    async fn unary_on<T, F, Fut>(
        &self,
        cluster: Cluster,
        what: &str,
        lane: bool,
        f: F,
    ) -> Result<T, Failure>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let conn = self.conn(cluster);
        let c = if lane {
            conn.lane().await?
        } else {
            conn.get().await?
        };
        let generation = c.generation;
        let result = match tokio::time::timeout(self.request_timeout, f(c)).await {
            Ok(r) => r,
            Err(_) => Err(conn.deadline(what, self.request_timeout)),
        };
        if let Err(e) = &result {
            tracing::debug!(cluster = ?cluster, op = what, error = %e, "command failed");
            conn.report(generation, e).await;
        }
        result
    }

    /// Stops every watch task (agent shutdown).
    pub fn cancel_all_watches(&self) {
        self.watches.cancel_all();
    }
}

async fn range(c: Conn, req: RangeRequest) -> Result<RangeReply, Failure> {
    let mut opts = GetOptions::new();
    if !req.range_end.is_empty() {
        opts = opts.with_range(req.range_end.clone());
    }
    if req.revision > 0 {
        opts = opts.with_revision(req.revision);
    }
    if req.limit > 0 {
        opts = opts.with_limit(req.limit);
    }
    if req.count_only {
        opts = opts.with_count_only();
    }
    if req.keys_only {
        opts = opts.with_keys_only();
    }
    if req.sort == SortBy::ModRevisionDescending {
        opts = opts.with_sort(SortTarget::Mod, SortOrder::Descend);
    }
    let key = etcd_key(&req.key, &req.range_end);
    let mut resp = c
        .client
        .kv_client()
        .max_decoding_message_size(MAX_DECODING_BYTES)
        .get(key, Some(opts))
        .await
        .map_err(|e| failure_from(&e))?;
    Ok(RangeReply {
        header_revision: resp.header().map(|h| h.revision()).unwrap_or(0),
        kvs: resp.take_kvs().into_iter().map(kv_into).collect(),
        more: resp.more(),
        count: resp.count(),
    })
}

fn op(o: TxnOp) -> EcTxnOp {
    match o {
        TxnOp::Put { key, value } => EcTxnOp::put(key, value, None),
        TxnOp::Delete { key, range_end } => {
            if range_end.is_empty() {
                EcTxnOp::delete(key, None)
            } else {
                let k = etcd_key(&key, &range_end);
                EcTxnOp::delete(k, Some(DeleteOptions::new().with_range(range_end)))
            }
        }
        TxnOp::Get { key } => EcTxnOp::get(key, None),
    }
}

async fn txn(c: Conn, req: TxnRequest) -> Result<TxnReply, Failure> {
    let compares: Vec<EcCompare> = req
        .compares
        .into_iter()
        .map(|cmp| match cmp.target {
            CompareTarget::ModRevision => {
                EcCompare::mod_revision(cmp.key, CompareOp::Equal, cmp.value)
            }
            CompareTarget::CreateRevision => {
                EcCompare::create_revision(cmp.key, CompareOp::Equal, cmp.value)
            }
            CompareTarget::Version => EcCompare::version(cmp.key, CompareOp::Equal, cmp.value),
            CompareTarget::Value => EcCompare::value(cmp.key, CompareOp::Equal, cmp.bytes),
        })
        .collect();
    let success: Vec<EcTxnOp> = req.success.into_iter().map(op).collect();
    let failure: Vec<EcTxnOp> = req.failure.into_iter().map(op).collect();
    let t = EcTxn::new()
        .when(compares)
        .and_then(success)
        .or_else(failure);
    let resp = c
        .client
        .kv_client()
        .max_decoding_message_size(MAX_DECODING_BYTES)
        .txn(t)
        .await
        .map_err(|e| failure_from(&e))?;
    let reads = resp
        .op_responses()
        .iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().first().map(kv_from)),
            _ => None,
        })
        .collect();
    Ok(TxnReply {
        succeeded: resp.succeeded(),
        header_revision: resp.header().map(|h| h.revision()).unwrap_or(0),
        reads,
    })
}

impl Executor {
    /// The executor for a validated config: loads TLS material and passwords, connects
    /// nothing yet.
    pub fn from_config(
        c: &tidemark_core::config::MirrorConfig,
    ) -> Result<Self, crate::error::DriverError> {
        use crate::connect::ConnSettings;
        let t = c.sync.request_timeout;
        let connect_timeout = t.clamp(Duration::from_secs(1), Duration::from_secs(10));
        let source = ConnSettings::from_spec("source", &c.source, connect_timeout)?;
        let target = ConnSettings::from_spec("target", &c.target, connect_timeout)?;
        // One connection per Txn in flight, up to TARGET_LANES (see `connect.rs`).
        let lanes = (c.sync.max_txns_in_flight as usize).clamp(1, TARGET_LANES);
        Ok(Executor::new(
            Arc::new(ClusterConn::new(Cluster::Source, source)),
            Arc::new(ClusterConn::new(Cluster::Target, target).with_lanes(lanes)),
            t,
        ))
    }
}
