//! Executor conformance against real etcd 3.4 and 3.5: every command the core can issue,
//! and every error class the core reacts to, classified as core expects.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::{Etcd, Flags, V};
use tidemark_core::classify::{Failure, PermanentKind};
use tidemark_core::etcd::{
    prefix_end, Cluster, Command, Compare, CompareTarget, EventKind, RangeRequest, Reply, SortBy,
    TxnOp, TxnRequest, WatchEvent, WatchRequest,
};
use tidemark_core::mirror::io::Input;
use tidemark_etcd::connect::{ClusterConn, ConnSettings};
use tidemark_etcd::Executor;
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(5);

fn range(cluster: Cluster, key: &[u8], end: &[u8]) -> RangeRequest {
    RangeRequest {
        cluster,
        key: key.to_vec(),
        range_end: end.to_vec(),
        revision: 0,
        limit: 0,
        count_only: false,
        keys_only: false,
        sort: SortBy::Key,
    }
}

fn put(k: &str, v: &str) -> TxnOp {
    TxnOp::Put {
        key: k.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
    }
}

async fn run_range(
    x: &Executor,
    r: RangeRequest,
) -> Result<tidemark_core::etcd::RangeReply, Failure> {
    match x.run(Command::Range(r)).await? {
        Reply::Range(r) => Ok(r),
        other => panic!("unexpected reply {other:?}"),
    }
}

async fn run_txn(x: &Executor, t: TxnRequest) -> Result<tidemark_core::etcd::TxnReply, Failure> {
    match x.run(Command::Txn(t)).await? {
        Reply::Txn(r) => Ok(r),
        other => panic!("unexpected reply {other:?}"),
    }
}

async fn one(v: V) -> Option<(Etcd, Executor)> {
    let e = Etcd::start(v, Flags::default()).await?;
    let x = support::executor(&e, &e, T);
    Some((e, x))
}

async fn range_semantics(v: V) {
    let Some((e, x)) = one(v).await else { return };
    let mut c = e.client().await;
    for i in 0..10 {
        c.put(format!("/p/k{i:02}"), format!("v{i}"), None)
            .await
            .unwrap();
    }
    c.put("/q/other", "x", None).await.unwrap();
    let end = prefix_end(b"/p/");

    let mut r = range(Cluster::Source, b"/p/", &end);
    r.limit = 3;
    let page = run_range(&x, r.clone()).await.unwrap();
    assert_eq!(page.kvs.len(), 3);
    assert!(page.more);
    assert_eq!(page.count, 10);
    assert_eq!(page.kvs[0].key, b"/p/k00");
    assert_eq!(page.kvs[0].value, b"v0");
    assert!(page.header_revision >= 11);

    // Next page from just after the last key.
    let mut next = page.kvs[2].key.clone();
    next.push(0);
    r.key = next;
    let page2 = run_range(&x, r).await.unwrap();
    assert_eq!(page2.kvs[0].key, b"/p/k03");

    let mut r = range(Cluster::Source, b"/p/", &end);
    r.count_only = true;
    let cnt = run_range(&x, r).await.unwrap();
    assert_eq!(cnt.count, 10);
    assert!(cnt.kvs.is_empty());

    let mut r = range(Cluster::Source, b"/p/", &end);
    r.keys_only = true;
    let ko = run_range(&x, r).await.unwrap();
    assert_eq!(ko.kvs.len(), 10);
    assert!(ko.kvs.iter().all(|kv| kv.value.is_empty()));

    c.put("/p/k03", "newest", None).await.unwrap();
    let mut r = range(Cluster::Source, b"/p/", &end);
    r.sort = SortBy::ModRevisionDescending;
    r.limit = 1;
    let top = run_range(&x, r).await.unwrap();
    assert_eq!(top.kvs[0].key, b"/p/k03");

    // Single key and whole keyspace ("\0" end with an empty key).
    let single = run_range(&x, range(Cluster::Source, b"/q/other", b""))
        .await
        .unwrap();
    assert_eq!(single.kvs.len(), 1);
    let all = run_range(&x, range(Cluster::Source, b"", &[0]))
        .await
        .unwrap();
    assert_eq!(all.count, 11);

    // Pinned read at an old revision.
    let mut r = range(Cluster::Source, b"/p/k03", b"");
    r.revision = top.kvs[0].mod_revision - 1;
    let old = run_range(&x, r).await.unwrap();
    assert_eq!(old.kvs[0].value, b"v3");
}
both_versions!(range_paging_count_keys_only_sort, range_semantics);

async fn txn_semantics(v: V) {
    let Some((_e, x)) = one(v).await else { return };
    let fence = b"/m/\0fence".to_vec();
    let get = TxnOp::Get { key: fence.clone() };
    // Create when absent.
    let t = TxnRequest {
        compares: vec![Compare::revision(
            fence.clone(),
            CompareTarget::CreateRevision,
            0,
        )],
        success: vec![
            put("/m/a", "1"),
            TxnOp::Put {
                key: fence.clone(),
                value: b"f1".to_vec(),
            },
        ],
        failure: vec![get.clone()],
    };
    let r1 = run_txn(&x, t.clone()).await.unwrap();
    assert!(r1.succeeded);
    assert!(r1.reads.is_empty());
    let rev1 = r1.header_revision;
    // The same create now fails and reads the fence in the failure branch.
    let r2 = run_txn(&x, t).await.unwrap();
    assert!(!r2.succeeded);
    assert_eq!(r2.reads.len(), 1);
    let f = r2.reads[0].clone().expect("fence read");
    assert_eq!(f.value, b"f1");
    assert_eq!(f.mod_revision, rev1);
    assert_eq!(f.version, 1);
    // ModRevision compare succeeds with the right value, with a Get in the success branch.
    let t = TxnRequest {
        compares: vec![Compare::revision(
            fence.clone(),
            CompareTarget::ModRevision,
            rev1,
        )],
        success: vec![
            TxnOp::Delete {
                key: b"/m/a".to_vec(),
                range_end: vec![],
            },
            TxnOp::Put {
                key: fence.clone(),
                value: b"f2".to_vec(),
            },
            TxnOp::Get {
                key: b"/m/a".to_vec(),
            },
            get.clone(),
        ],
        failure: vec![get.clone()],
    };
    let r3 = run_txn(&x, t).await.unwrap();
    assert!(r3.succeeded);
    assert_eq!(r3.reads.len(), 2);
    assert!(r3.reads[0].is_none(), "deleted key reads as None");
    assert_eq!(r3.reads[1].as_ref().unwrap().value, b"f2");
    // Version compare and a ranged delete.
    let t = TxnRequest {
        compares: vec![Compare::revision(fence.clone(), CompareTarget::Version, 2)],
        success: vec![put("/m/b1", "x"), put("/m/b2", "x")],
        failure: vec![],
    };
    assert!(run_txn(&x, t).await.unwrap().succeeded);
    // Value compares (what a pipelined Txn uses): equal bytes apply, other bytes do not,
    // and a missing key never matches, not even the empty value.
    let by_value = |key: &[u8], bytes: &[u8]| TxnRequest {
        compares: vec![Compare::value_is(key.to_vec(), bytes.to_vec())],
        success: vec![put("/m/bv", "x")],
        failure: vec![],
    };
    assert!(
        run_txn(&x, by_value(&fence, b"f2"))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        !run_txn(&x, by_value(&fence, b"f1"))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        !run_txn(&x, by_value(b"/m/absent", b""))
            .await
            .unwrap()
            .succeeded
    );
    let t = TxnRequest {
        compares: vec![],
        success: vec![TxnOp::Delete {
            key: b"/m/b".to_vec(),
            range_end: prefix_end(b"/m/b"),
        }],
        failure: vec![],
    };
    assert!(run_txn(&x, t).await.unwrap().succeeded);
    let left = run_range(&x, range(Cluster::Target, b"/m/", &prefix_end(b"/m/")))
        .await
        .unwrap();
    assert_eq!(left.count, 1, "only the fence is left");
}
both_versions!(txn_compare_and_reads, txn_semantics);

async fn recv(rx: &mut mpsc::Receiver<Input>) -> Input {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("input within 10s")
        .expect("channel open")
}

async fn compaction_classified(v: V) {
    let Some((e, x)) = one(v).await else { return };
    let mut c = e.client().await;
    for i in 0..5 {
        c.put("/c/k", format!("{i}"), None).await.unwrap();
    }
    let rev = c
        .get("/c/k", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    c.compact(rev, None).await.unwrap();
    let mut r = range(Cluster::Source, b"/c/", &prefix_end(b"/c/"));
    r.revision = rev - 2;
    assert_eq!(
        run_range(&x, r).await.unwrap_err(),
        Failure::Compacted { rev: 0 }
    );

    let (tx, mut rx) = mpsc::channel(16);
    x.dispatch(
        7,
        Command::Watch(WatchRequest {
            watch_id: 1,
            key: b"/c/".to_vec(),
            range_end: prefix_end(b"/c/"),
            start_revision: 2,
        }),
        tx,
    )
    .await;
    match recv(&mut rx).await {
        Input::Done {
            id: 7,
            result: Ok(Reply::WatchStarted),
        } => {}
        other => panic!("expected WatchStarted, got {other:?}"),
    }
    match recv(&mut rx).await {
        Input::Watch {
            watch_id: 1,
            event: WatchEvent::Cancelled {
                compact_revision, ..
            },
        } => {
            assert_eq!(compact_revision, rev)
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
}
both_versions!(
    compaction_classified_on_range_and_watch,
    compaction_classified
);

async fn watch_order_progress(v: V) {
    let Some(e) = Etcd::start(
        v,
        Flags {
            progress_notify_interval: Some("500ms"),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let x = support::executor(&e, &e, T);
    let mut c = e.client().await;
    let start = c
        .put("/w/seed", "0", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
        + 1;
    let (tx, mut rx) = mpsc::channel(64);
    x.dispatch(
        1,
        Command::Watch(WatchRequest {
            watch_id: 9,
            key: b"/w/".to_vec(),
            range_end: prefix_end(b"/w/"),
            start_revision: start,
        }),
        tx,
    )
    .await;
    assert!(matches!(
        recv(&mut rx).await,
        Input::Done {
            id: 1,
            result: Ok(Reply::WatchStarted)
        }
    ));
    for i in 0..20 {
        c.put(format!("/w/k{i}"), "v", None).await.unwrap();
    }
    c.delete("/w/k0", None).await.unwrap();
    c.txn(etcd_client::Txn::new().and_then(vec![
        etcd_client::TxnOp::put("/w/t1", "a", None),
        etcd_client::TxnOp::put("/w/t2", "b", None),
    ]))
    .await
    .unwrap();
    c.put("/outside", "x", None).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 23 {
        match recv(&mut rx).await {
            Input::Watch {
                watch_id: 9,
                event:
                    WatchEvent::Events {
                        events,
                        header_revision,
                    },
            } => {
                for ev in events {
                    assert!(ev.kv.mod_revision <= header_revision);
                    seen.push(ev);
                }
            }
            Input::Watch {
                watch_id: 9,
                event: WatchEvent::Progress { .. },
            } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let revs: Vec<i64> = seen.iter().map(|e| e.kv.mod_revision).collect();
    assert!(
        revs.windows(2).all(|w| w[0] <= w[1]),
        "revision order {revs:?}"
    );
    assert_eq!(revs[0], start);
    assert_eq!(seen[20].kind, EventKind::Delete);
    assert!(seen[20].kv.value.is_empty());
    assert_eq!(
        seen[21].kv.mod_revision, seen[22].kv.mod_revision,
        "one txn, one revision"
    );
    let last = c
        .get("/outside", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();

    // Client-requested progress reports at least the latest revision.
    x.run(Command::RequestProgress { watch_id: 9 })
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        match recv(&mut rx).await {
            Input::Watch {
                watch_id: 9,
                event: WatchEvent::Progress { revision },
            } if revision >= last => break,
            Input::Watch { watch_id: 9, .. } => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no progress notification"
        );
    }
    // Server-side periodic notifications also arrive (interval 500ms).
    match recv(&mut rx).await {
        Input::Watch {
            watch_id: 9,
            event: WatchEvent::Progress { revision },
        } => assert!(revision >= last),
        other => panic!("unexpected {other:?}"),
    }
    // After cancel, the task stops.
    x.run(Command::CancelWatch { watch_id: 9 }).await.unwrap();
    c.put("/w/after", "x", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(i) = rx.try_recv() {
        if let Input::Watch {
            event: WatchEvent::Events { .. },
            ..
        } = i
        {
            panic!("event after cancel");
        }
    }
}
both_versions!(watch_ordering_and_progress, watch_order_progress);

async fn nospace(v: V) {
    let Some(e) = Etcd::start(
        v,
        Flags {
            quota_backend_bytes: Some(1 << 20),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let x = support::executor(&e, &e, T);
    let big = "x".repeat(100 * 1024);
    let mut got = None;
    for i in 0..200 {
        let t = TxnRequest {
            compares: vec![],
            success: vec![put(&format!("/n/{i}"), &big)],
            failure: vec![],
        };
        if let Err(f) = run_txn(&x, t).await {
            got = Some(f);
            break;
        }
    }
    assert_eq!(got, Some(Failure::NoSpace));
    // Reads still work while the alarm is raised.
    run_range(&x, range(Cluster::Target, b"/n/", &prefix_end(b"/n/")))
        .await
        .unwrap();
}
both_versions!(nospace_classified, nospace);

async fn too_large(v: V) {
    let Some(e) = Etcd::start(
        v,
        Flags {
            max_request_bytes: Some(8 * 1024),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let x = support::executor(&e, &e, T);
    // Over --max-request-bytes: etcd's own check.
    let t = TxnRequest {
        compares: vec![],
        success: vec![put("/l/a", &"x".repeat(16 * 1024))],
        failure: vec![],
    };
    assert!(
        matches!(run_txn(&x, t).await, Err(Failure::TooLarge { .. })),
        "etcd size limit"
    );
    // Far over it: gRPC's receive limit (max-request-bytes + 512KiB).
    let t = TxnRequest {
        compares: vec![],
        success: vec![put("/l/b", &"x".repeat(700 * 1024))],
        failure: vec![],
    };
    let r = run_txn(&x, t).await;
    assert!(
        matches!(r, Err(Failure::TooLarge { .. })),
        "grpc size limit: {r:?}"
    );
    // The connection still works afterwards.
    let t = TxnRequest {
        compares: vec![],
        success: vec![put("/l/c", "small")],
        failure: vec![],
    };
    assert!(run_txn(&x, t).await.unwrap().succeeded);
}
both_versions!(oversize_request_classified_too_large, too_large);

async fn too_many_ops(v: V) {
    let Some(e) = Etcd::start(
        v,
        Flags {
            max_txn_ops: Some(4),
            ..Default::default()
        },
    )
    .await
    else {
        return;
    };
    let x = support::executor(&e, &e, T);
    let t = TxnRequest {
        compares: vec![],
        success: (0..6).map(|i| put(&format!("/o/{i}"), "v")).collect(),
        failure: vec![],
    };
    match run_txn(&x, t).await {
        Err(Failure::Permanent {
            kind: PermanentKind::InvalidRequest,
            message,
        }) => {
            assert!(message.contains("too many operations"), "{message}")
        }
        other => panic!("expected permanent InvalidRequest, got {other:?}"),
    }
}
both_versions!(too_many_ops_classified, too_many_ops);

async fn auth_failure(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let mut c = e.client().await;
    c.user_add("root", "right", None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    c.auth_enable().await.unwrap();
    let wrong = ConnSettings::plain(vec![e.url.clone()], T).with_user("root", "wrong");
    let conn = ClusterConn::new(Cluster::Source, wrong);
    match conn.get().await {
        Err(Failure::Permanent {
            kind: PermanentKind::Auth,
            ..
        }) => {}
        Err(other) => panic!("expected permanent auth, got {other:?}"),
        Ok(_) => panic!("expected permanent auth, got a connection"),
    }
    // The right password works, through the executor.
    let right = ConnSettings::plain(vec![e.url.clone()], T).with_user("root", "right");
    let conn = Arc::new(ClusterConn::new(Cluster::Source, right));
    let x = Executor::new(conn.clone(), conn, T);
    run_range(&x, range(Cluster::Source, b"/a", b""))
        .await
        .unwrap();
    // Unauthenticated access is refused with a permanent auth failure.
    let anon = ConnSettings::plain(vec![e.url.clone()], T);
    let conn = Arc::new(ClusterConn::new(Cluster::Source, anon));
    let x = Executor::new(conn.clone(), conn, T);
    let r = run_range(&x, range(Cluster::Source, b"/a", b"")).await;
    assert!(
        matches!(
            r,
            Err(Failure::Permanent {
                kind: PermanentKind::Auth,
                ..
            })
        ),
        "{r:?}"
    );
}
both_versions!(auth_failure_classified_permanent, auth_failure);

#[tokio::test]
async fn unreachable_endpoint_is_transient() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = ConnSettings::plain(
        vec![format!("http://127.0.0.1:{port}")],
        Duration::from_secs(2),
    );
    let conn = Arc::new(ClusterConn::new(Cluster::Source, s));
    let x = Executor::new(conn.clone(), conn, Duration::from_secs(2));
    let r = run_range(&x, range(Cluster::Source, b"/a", b"")).await;
    assert!(matches!(r, Err(Failure::Transient { .. })), "{r:?}");
    let (tx, mut rx) = mpsc::channel(4);
    x.dispatch(
        3,
        Command::Watch(WatchRequest {
            watch_id: 1,
            key: b"/a".to_vec(),
            range_end: vec![],
            start_revision: 0,
        }),
        tx,
    )
    .await;
    match recv(&mut rx).await {
        Input::Done {
            id: 3,
            result: Err(Failure::Transient { .. }),
        } => {}
        other => panic!("expected transient watch failure, got {other:?}"),
    }
}

async fn rotation(v: V) {
    let Some(e) = Etcd::start(v, Flags::default()).await else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = ConnSettings::plain(
        vec![format!("http://127.0.0.1:{port}"), e.url.clone()],
        Duration::from_secs(2),
    );
    let conn = Arc::new(ClusterConn::new(Cluster::Source, s));
    let x = Executor::new(conn.clone(), conn, Duration::from_secs(2));
    // First attempt hits the dead endpoint, the retry rotates to the live one.
    assert!(run_range(&x, range(Cluster::Source, b"/a", b""))
        .await
        .is_err());
    run_range(&x, range(Cluster::Source, b"/a", b""))
        .await
        .unwrap();
    let status = x
        .run(Command::Status {
            cluster: Cluster::Source,
        })
        .await
        .unwrap();
    match status {
        Reply::Status(s) => {
            assert!(
                s.version.starts_with(match v {
                    V::V34 => "3.4.",
                    V::V35 => "3.5.",
                }),
                "{}",
                s.version
            );
            assert!(s.cluster_id != 0 && s.member_id != 0);
            assert!(!s.is_learner);
            assert!(s.db_size > 0);
        }
        other => panic!("{other:?}"),
    }
}
both_versions!(endpoint_rotation_and_status, rotation);
