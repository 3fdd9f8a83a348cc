//! The target's lanes against real etcd 3.4 and 3.5: Txns take turns on their own
//! connections (so that HTTP/2 flow control cannot bunch a chain's Txns; docs/design.md,
//! "Pipelined commits"), other commands keep the main one, lanes go with it on a failure,
//! and a lane that cannot connect costs nothing but its own connection.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{Etcd, Flags, V};
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{Cluster, Command, RangeRequest, Reply, SortBy, TxnOp, TxnRequest};
use tidemark_etcd::connect::{ClusterConn, ConnSettings};
use tidemark_etcd::Executor;
use tokio::net::TcpListener;

const T: Duration = Duration::from_secs(5);

/// A TCP forwarder that counts the connections it accepts, and forwards only the first
/// `forward` of them (later ones are closed at once).
struct Counter {
    url: String,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Counter {
    async fn start(upstream: &str, forward: u64) -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicU64::new(0));
        let (upstream, n) = (upstream.to_string(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if n.fetch_add(1, Ordering::SeqCst) >= forward {
                    drop(down);
                    continue;
                }
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        });
        Counter {
            url,
            accepted,
            task,
        }
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn put_txn(key: String) -> Command {
    Command::Txn(TxnRequest {
        compares: vec![],
        success: vec![TxnOp::Put {
            key: key.into_bytes(),
            value: b"v".to_vec(),
        }],
        failure: vec![],
    })
}

fn range_cmd(key: &[u8], end: &[u8]) -> Command {
    Command::Range(RangeRequest {
        cluster: Cluster::Target,
        key: key.to_vec(),
        range_end: end.to_vec(),
        revision: 0,
        limit: 0,
        count_only: true,
        keys_only: false,
        sort: SortBy::Key,
    })
}

/// The executor with `lanes` target connections through `via`, and the target itself.
fn executor(e: &Etcd, via: &Counter, lanes: usize) -> (Executor, Arc<ClusterConn>) {
    let direct = Arc::new(ClusterConn::new(
        Cluster::Source,
        ConnSettings::plain(vec![e.url.clone()], T),
    ));
    let target = Arc::new(
        ClusterConn::new(
            Cluster::Target,
            ConnSettings::plain(vec![via.url.clone()], T),
        )
        .with_lanes(lanes),
    );
    (Executor::new(direct, target.clone(), T), target)
}

/// Keys under `/l/` in the target, counted through the executor.
async fn count(x: &Executor) -> i64 {
    match x.run(range_cmd(b"/l/", b"/l0")).await.unwrap() {
        Reply::Range(r) => r.count,
        other => panic!("unexpected {other:?}"),
    }
}

async fn txns_take_turns(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let host = e.url.trim_start_matches("http://").to_string();
    let via = Counter::start(&host, u64::MAX).await;
    let (x, target) = executor(&e, &via, 4);
    for i in 0..8 {
        x.run(put_txn(format!("/l/{i}"))).await.unwrap();
    }
    assert_eq!(via.accepted(), 4, "one connection per lane");
    assert_eq!(count(&x).await, 8);
    // Reads stay on the main connection.
    for _ in 0..3 {
        count(&x).await;
    }
    assert_eq!(via.accepted(), 4, "reads opened no connection");
    // A connection-level failure drops the main connection and its lanes together.
    let generation = target.get().await.unwrap().generation;
    let f = Failure::Transient {
        message: "test".into(),
    };
    target.report(generation, &f).await;
    for i in 8..12 {
        x.run(put_txn(format!("/l/{i}"))).await.unwrap();
    }
    assert_eq!(
        via.accepted(),
        8,
        "the lanes reconnected with the main connection"
    );
    assert_eq!(count(&x).await, 12);
}
both_versions!(txns_take_turns_on_their_own_connections, txns_take_turns);

async fn lane_falls_back(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let host = e.url.trim_start_matches("http://").to_string();
    // Only the main connection gets through.
    let via = Counter::start(&host, 1).await;
    let (x, _) = executor(&e, &via, 3);
    for i in 0..6 {
        x.run(put_txn(format!("/l/{i}"))).await.unwrap();
    }
    assert_eq!(
        count(&x).await,
        6,
        "every Txn applied on the main connection"
    );
    assert_eq!(
        via.accepted(),
        3,
        "each lane tried once, and not again while the main connection lasts"
    );
}
both_versions!(
    a_lane_that_cannot_connect_falls_back_to_the_main_one,
    lane_falls_back
);
