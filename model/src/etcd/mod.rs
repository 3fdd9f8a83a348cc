//! One model etcd cluster: the gRPC surface the mirror uses, over the MVCC [`Store`].
//!
//! Limits and error strings are etcd's, so the core classifies the model's failures
//! exactly as a real server's (facts from etcd-io/etcd, nothing copied):
//! - `--max-txn-ops` (default 128) per Compare list and per branch:
//!   "etcdserver: too many operations in txn request" (`server/etcdserver/api/v3rpc/key.go`
//!   `checkTxnRequest`, `rpctypes/error.go` `ErrGRPCTooManyOps`, InvalidArgument);
//! - overlapping writes in one branch: "etcdserver: duplicate key given in txn request"
//!   (`key.go` `checkIntervals`: two puts of one key, or a put inside a deleted range);
//! - `--max-request-bytes` (default 1.5 MiB): "etcdserver: request is too large"
//!   (`server/etcdserver/v3_server.go` `processInternalRaftRequestOnce`, InvalidArgument);
//! - NOSPACE alarm: a Txn that costs quota (has a put) fails with
//!   "etcdserver: mvcc: database space exceeded" until disarmed; reads and delete-only Txns
//!   still work (`server/etcdserver/apply.go` `applierV3Capped`, `quota.go` `costTxn`);
//! - throttling: "etcdserver: too many requests" (ResourceExhausted) when the apply loop lags
//!   (`v3_server.go`, `ErrTooManyRequests`);
//! - compaction: "etcdserver: mvcc: required revision has been compacted" (OutOfRange) and
//!   "...is a future revision"; a watch below the compact revision is cancelled with
//!   `compact_revision` set (`server/storage/mvcc/watchable_store.go` `syncWatchers`);
//! - watch catch-up sends at most 1000 distinct revisions per response, never splitting one
//!   (`watchable_store.go` `watchBatchMaxRevs`, `watcher_group.go` `newWatcherBatch`); synced
//!   watchers get one response per write revision (`notify`);
//! - progress notifications go only to synced watchers on fixed servers
//!   (`progressIfSync`); servers before 3.4.31 / 3.5.13 may send one ahead of pending events
//!   (etcd issues 15220 and 17507), which the `progress_bug` flag models;
//! - require-leader: with no leader the watch stream is closed with "etcdserver: no leader"
//!   (`v3rpc/watch.go`, `rpctypes.ErrGRPCNoLeader`, Unavailable).

pub mod store;
pub mod txn;

pub use store::{Mutation, Store};
pub use txn::{apply_txn, check_txn, txn_size};

use std::collections::BTreeMap;
use store::{in_range, StoreError};
use tidemark_core::classify::{classify, Code, Failure};
use tidemark_core::etcd::{
    Command, Event, EventKind, Reply, StatusReply, TxnOp, TxnReply, TxnRequest, WatchEvent,
    WatchRequest,
};

/// etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;
/// etcd's default `--max-request-bytes` (1.5 MiB).
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// `watchBatchMaxRevs` in `watchable_store.go`.
pub const WATCH_BATCH_MAX_REVS: usize = 1000;

/// etcd's error strings (`api/v3rpc/rpctypes/error.go`).
pub mod msg {
    pub const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
    pub const FUTURE_REV: &str = "etcdserver: mvcc: required revision is a future revision";
    pub const TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
    pub const DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
    pub const TOO_LARGE: &str = "etcdserver: request is too large";
    pub const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
    pub const TOO_MANY_REQUESTS: &str = "etcdserver: too many requests";
    pub const NO_LEADER: &str = "etcdserver: no leader";
    pub const DEADLINE: &str = "context deadline exceeded";
    pub const UNAVAILABLE: &str =
        "connection error: desc = \"transport: Error while dialing: dial tcp: connection refused\"";
}

/// Classified failures the model produces, always through core's [`classify`].
pub fn fail(code: Code, message: &str) -> Failure {
    classify(code, message)
}

/// A client connection: which agent incarnation owns a watch.
pub type ConnId = u64;

/// A watch as the server keeps it.
#[derive(Debug, Clone)]
struct Watcher {
    conn: ConnId,
    watch_id: u64,
    key: Vec<u8>,
    end: Vec<u8>,
    /// The next revision this watcher needs (`minRev` in etcd).
    next_rev: i64,
    synced: bool,
    /// Events were sent since the last periodic progress tick.
    sent_since_tick: bool,
}

/// Something the cluster sends on a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchOut {
    pub conn: ConnId,
    pub watch_id: u64,
    pub event: WatchEvent,
}

/// Cluster-wide conditions the fault schedule switches.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    pub no_space_alarm: bool,
    pub leader_lost: bool,
    pub throttled: bool,
}

/// One model etcd cluster.
#[derive(Debug, Clone)]
pub struct EtcdCluster {
    pub name: &'static str,
    pub store: Store,
    pub version: String,
    pub cluster_id: u64,
    pub cond: Conditions,
    /// Models etcd 15220/17507: progress may be sent ahead of pending events.
    pub progress_bug: bool,
    /// Models etcd 18089: the tombstone at the compact revision is compacted away.
    pub tombstone_bug: bool,
    watchers: BTreeMap<(ConnId, u64), Watcher>,
    /// Coverage marks of rare model paths, drained by the world.
    marks: Vec<&'static str>,
}

/// Whether a server drops a tombstone at exactly the compact revision, so a watch from that
/// revision misses the delete (etcd issue 18089, fixed by PR 18274 "keep tombstone if
/// revision == compactAtRev", backported to the 3.4 and 3.5 branches; we take 3.4.33 and
/// 3.5.15 as the first fixed releases).
pub fn has_compact_tombstone_bug(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [3, 4, p, ..] => *p < 33,
        [3, 5, p, ..] => *p < 15,
        [3, m, ..] => *m < 4,
        _ => false,
    }
}

/// Whether a server version has the progress-notification ordering bug.
pub fn has_progress_bug(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [3, 4, p, ..] => *p < 31,
        [3, 5, p, ..] => *p < 13,
        [3, m, ..] => *m < 4,
        _ => false,
    }
}

impl EtcdCluster {
    /// A fresh, empty cluster reporting `version`.
    pub fn new(name: &'static str, version: &str, cluster_id: u64) -> Self {
        EtcdCluster {
            name,
            store: Store::new(),
            version: version.to_string(),
            cluster_id,
            cond: Conditions::default(),
            progress_bug: has_progress_bug(version),
            tombstone_bug: has_compact_tombstone_bug(version),
            watchers: BTreeMap::new(),
            marks: Vec::new(),
        }
    }

    /// Rare model paths hit since the last call (coverage).
    pub fn take_marks(&mut self) -> Vec<&'static str> {
        std::mem::take(&mut self.marks)
    }

    /// Number of open watches.
    pub fn watch_count(&self) -> usize {
        self.watchers.len()
    }

    /// Runs one unary command (everything but the watch stream's events).
    pub fn execute(
        &mut self,
        conn: ConnId,
        cmd: &Command,
        out: &mut Vec<WatchOut>,
    ) -> Result<Reply, Failure> {
        if self.cond.leader_lost {
            return Err(fail(Code::Unavailable, msg::NO_LEADER));
        }
        match cmd {
            Command::Status { .. } => Ok(Reply::Status(StatusReply {
                version: self.version.clone(),
                header_revision: self.store.rev(),
                cluster_id: self.cluster_id,
                member_id: self.cluster_id ^ 0x5eed,
                is_learner: false,
                db_size: self.store.live_bytes(),
            })),
            Command::Range(r) => self.store.range(r).map(Reply::Range).map_err(store_err),
            Command::Txn(t) => self.txn(t, out).map(Reply::Txn),
            Command::Watch(w) => {
                self.watch(conn, w, out);
                Ok(Reply::WatchStarted)
            }
            Command::CancelWatch { watch_id } => {
                self.watchers.remove(&(conn, *watch_id));
                Ok(Reply::Ok)
            }
            Command::RequestProgress { watch_id } => {
                if let Some(w) = self.watchers.get(&(conn, *watch_id)) {
                    if !w.synced && self.progress_bug {
                        self.marks.push("model.progress_ahead_of_events");
                    }
                    if w.synced || self.progress_bug {
                        out.push(WatchOut {
                            conn,
                            watch_id: *watch_id,
                            event: WatchEvent::Progress {
                                revision: self.store.rev(),
                            },
                        });
                    }
                }
                Ok(Reply::Ok)
            }
        }
    }

    /// Validates and applies a Txn: etcd's request checks, then the cluster's conditions,
    /// then the compares and the branch.
    pub fn txn(&mut self, t: &TxnRequest, out: &mut Vec<WatchOut>) -> Result<TxnReply, Failure> {
        check_txn(t)?;
        if self.cond.throttled {
            return Err(fail(Code::ResourceExhausted, msg::TOO_MANY_REQUESTS));
        }
        let costs = |ops: &[TxnOp]| ops.iter().any(|o| matches!(o, TxnOp::Put { .. }));
        if self.cond.no_space_alarm && (costs(&t.success) || costs(&t.failure)) {
            return Err(fail(Code::ResourceExhausted, msg::NO_SPACE));
        }
        let before = self.store.rev();
        let reply = apply_txn(&mut self.store, t);
        let rev = self.store.rev();
        if rev != before {
            notify(&mut self.watchers, rev, self.store.events_at(rev), out);
        }
        Ok(reply)
    }

    /// A write that does not come through a command (the source workload).
    pub fn write(&mut self, muts: &[Mutation], out: &mut Vec<WatchOut>) -> i64 {
        if !self.store.write(muts).is_empty() {
            let rev = self.store.rev();
            notify(&mut self.watchers, rev, self.store.events_at(rev), out);
        }
        self.store.rev()
    }

    /// Expires leases at `now`, delivering their delete revisions.
    pub fn expire_leases(&mut self, now: u64, out: &mut Vec<WatchOut>) {
        for rev in self.store.expire_leases(now) {
            notify(&mut self.watchers, rev, self.store.events_at(rev), out);
        }
    }

    fn watch(&mut self, conn: ConnId, w: &WatchRequest, out: &mut Vec<WatchOut>) {
        let start = if w.start_revision > 0 {
            w.start_revision
        } else {
            self.store.rev() + 1
        };
        let synced = start > self.store.rev();
        self.watchers.insert(
            (conn, w.watch_id),
            Watcher {
                conn,
                watch_id: w.watch_id,
                key: w.key.clone(),
                end: w.range_end.clone(),
                next_rev: start,
                synced,
                sent_since_tick: false,
            },
        );
        if !synced {
            self.sync_one((conn, w.watch_id), out);
        }
    }

    /// The 100 ms `syncWatchersLoop`: one catch-up batch for every unsynced watcher.
    pub fn sync_tick(&mut self, out: &mut Vec<WatchOut>) {
        let keys: Vec<(ConnId, u64)> = self
            .watchers
            .iter()
            .filter(|(_, w)| !w.synced)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.sync_one(k, out);
        }
    }

    /// Whether any watcher still needs catching up.
    pub fn has_unsynced(&self) -> bool {
        self.watchers.values().any(|w| !w.synced)
    }

    fn sync_one(&mut self, k: (ConnId, u64), out: &mut Vec<WatchOut>) {
        let compact = self.store.compact_rev();
        let cur = self.store.rev();
        let tombstone_bug = self.tombstone_bug;
        let Some(w) = self.watchers.get(&k) else {
            return;
        };
        if w.next_rev < compact {
            out.push(WatchOut {
                conn: w.conn,
                watch_id: w.watch_id,
                event: WatchEvent::Cancelled {
                    compact_revision: compact,
                    reason: msg::COMPACTED.to_string(),
                },
            });
            self.watchers.remove(&k);
            return;
        }
        if tombstone_bug
            && w.next_rev <= compact
            && self
                .store
                .events_at(compact)
                .iter()
                .any(|e| e.kind == EventKind::Delete && in_range(&e.kv.key, &w.key, &w.end))
        {
            self.marks.push("model.tombstone_at_compact_dropped");
        }
        let mut evs = Vec::new();
        let mut revs = 0usize;
        let mut next = cur + 1;
        let mut r = w.next_rev.max(2);
        while r <= cur {
            let matching: Vec<&Event> = self
                .store
                .events_at(r)
                .iter()
                // On affected versions the tombstone at exactly the compact revision was
                // compacted away (etcd 18089).
                .filter(|e| !(tombstone_bug && r == compact && e.kind == EventKind::Delete))
                .filter(|e| in_range(&e.kv.key, &w.key, &w.end))
                .collect();
            if !matching.is_empty() {
                if revs == WATCH_BATCH_MAX_REVS {
                    next = r;
                    break;
                }
                revs += 1;
                evs.extend(matching.into_iter().cloned());
            }
            r += 1;
        }
        let w = self.watchers.get_mut(&k).expect("watcher checked above");
        w.next_rev = next;
        if next <= cur {
            self.marks.push("model.watch_catch_up_continued");
        }
        w.synced = next > cur;
        if !evs.is_empty() {
            w.sent_since_tick = true;
            out.push(WatchOut {
                conn: w.conn,
                watch_id: w.watch_id,
                event: WatchEvent::Events {
                    header_revision: cur,
                    events: evs,
                },
            });
        }
    }

    /// The periodic progress notification (`--experimental-watch-progress-notify-interval`):
    /// to idle synced watchers, or to every watcher on a server with the ordering bug.
    pub fn progress_tick(&mut self, out: &mut Vec<WatchOut>) {
        let rev = self.store.rev();
        let bug = self.progress_bug;
        for w in self.watchers.values_mut() {
            if (w.synced || bug) && !w.sent_since_tick {
                if !w.synced {
                    self.marks.push("model.progress_ahead_of_events");
                }
                out.push(WatchOut {
                    conn: w.conn,
                    watch_id: w.watch_id,
                    event: WatchEvent::Progress { revision: rev },
                });
            }
            w.sent_since_tick = false;
        }
    }

    /// Leader loss under require-leader: every watch stream fails.
    pub fn break_all_watches(&mut self, failure: &Failure, out: &mut Vec<WatchOut>) {
        for (_, w) in std::mem::take(&mut self.watchers) {
            out.push(WatchOut {
                conn: w.conn,
                watch_id: w.watch_id,
                event: WatchEvent::Failed {
                    failure: failure.clone(),
                },
            });
        }
    }

    /// A connection closed (agent crash): its watches are gone.
    pub fn drop_conn(&mut self, conn: ConnId) {
        self.watchers.retain(|(c, _), _| *c != conn);
    }

    /// Breaks the watches of one connection (network partition).
    pub fn break_conn(&mut self, conn: ConnId, failure: &Failure, out: &mut Vec<WatchOut>) {
        let ks: Vec<(ConnId, u64)> = self
            .watchers
            .keys()
            .filter(|(c, _)| *c == conn)
            .copied()
            .collect();
        for k in ks {
            if let Some(w) = self.watchers.remove(&k) {
                out.push(WatchOut {
                    conn,
                    watch_id: w.watch_id,
                    event: WatchEvent::Failed {
                        failure: failure.clone(),
                    },
                });
            }
        }
    }

    /// The cluster is restored from a snapshot at revision `at` and restarted: same cluster
    /// and member IDs, the MVCC state rewound (see [`Store::restore_to`]), every watch stream
    /// broken with `failure`. Returns whether anything was rewound.
    pub fn restore(
        &mut self,
        at: i64,
        lease_expiry: u64,
        failure: &Failure,
        out: &mut Vec<WatchOut>,
    ) -> bool {
        self.break_all_watches(failure, out);
        self.store.restore_to(at, lease_expiry)
    }

    /// Compacts, as `etcdctl compact`.
    pub fn compact(&mut self, rev: i64) -> Result<(), Failure> {
        self.store.compact(rev).map_err(store_err)
    }
}

/// Synced watchers get each write revision as one response (`notify`).
fn notify(
    watchers: &mut BTreeMap<(ConnId, u64), Watcher>,
    rev: i64,
    events: &[Event],
    out: &mut Vec<WatchOut>,
) {
    for w in watchers.values_mut() {
        if !w.synced || w.next_rev > rev {
            continue;
        }
        let evs: Vec<Event> = events
            .iter()
            .filter(|e| in_range(&e.kv.key, &w.key, &w.end))
            .cloned()
            .collect();
        w.next_rev = rev + 1;
        if !evs.is_empty() {
            w.sent_since_tick = true;
            out.push(WatchOut {
                conn: w.conn,
                watch_id: w.watch_id,
                event: WatchEvent::Events {
                    header_revision: rev,
                    events: evs,
                },
            });
        }
    }
}

/// The gRPC failure of a store error.
pub fn store_err(e: StoreError) -> Failure {
    match e {
        StoreError::Compacted => fail(Code::OutOfRange, msg::COMPACTED),
        StoreError::FutureRev => fail(Code::OutOfRange, msg::FUTURE_REV),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_core::etcd::{Compare, CompareTarget};

    fn put(k: &str) -> TxnOp {
        TxnOp::Put {
            key: k.as_bytes().to_vec(),
            value: b"v".to_vec(),
        }
    }

    #[test]
    fn txn_limits_use_etcd_strings() {
        let mut c = EtcdCluster::new("t", "3.5.17", 1);
        let mut out = Vec::new();
        let many: Vec<TxnOp> = (0..129).map(|i| put(&format!("k{i}"))).collect();
        let t = TxnRequest {
            compares: vec![],
            success: many,
            failure: vec![],
        };
        assert!(matches!(
            c.txn(&t, &mut out),
            Err(Failure::Permanent { .. })
        ));
        let dup = TxnRequest {
            compares: vec![],
            success: vec![put("a"), put("a")],
            failure: vec![],
        };
        assert!(matches!(
            c.txn(&dup, &mut out),
            Err(Failure::Permanent { .. })
        ));
        let big = TxnRequest {
            compares: vec![],
            success: vec![TxnOp::Put {
                key: b"k".to_vec(),
                value: vec![0; MAX_REQUEST_BYTES],
            }],
            failure: vec![],
        };
        assert_eq!(
            c.txn(&big, &mut out),
            Err(Failure::TooLarge { key_redacted: None })
        );
        c.cond.no_space_alarm = true;
        let one = TxnRequest {
            compares: vec![],
            success: vec![put("a")],
            failure: vec![],
        };
        assert_eq!(c.txn(&one, &mut out), Err(Failure::NoSpace));
    }

    #[test]
    fn compare_selects_branch() {
        let mut c = EtcdCluster::new("t", "3.5.17", 1);
        let mut out = Vec::new();
        let t = TxnRequest {
            compares: vec![Compare::revision(
                b"f".to_vec(),
                CompareTarget::CreateRevision,
                0,
            )],
            success: vec![put("f")],
            failure: vec![TxnOp::Get { key: b"f".to_vec() }],
        };
        let r = c.txn(&t, &mut out).unwrap();
        assert!(r.succeeded);
        let r = c.txn(&t, &mut out).unwrap();
        assert!(!r.succeeded);
        assert_eq!(r.reads[0].as_ref().unwrap().mod_revision, 2);
    }

    #[test]
    fn watch_catch_up_batches_and_compaction() {
        let mut c = EtcdCluster::new("s", "3.5.17", 1);
        let mut out = Vec::new();
        for i in 0..2500 {
            c.write(
                &[Mutation::Put {
                    key: format!("k{}", i % 7).into_bytes(),
                    value: b"v".to_vec(),
                    lease: 0,
                }],
                &mut out,
            );
        }
        let w = WatchRequest {
            watch_id: 1,
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            start_revision: 2,
        };
        c.execute(9, &Command::Watch(w.clone()), &mut out).unwrap();
        c.sync_tick(&mut out);
        c.sync_tick(&mut out);
        let sizes: Vec<usize> = out
            .iter()
            .map(|o| match &o.event {
                WatchEvent::Events { events, .. } => events.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![1000, 1000, 500]);
        c.compact(100).unwrap();
        out.clear();
        c.execute(
            9,
            &Command::Watch(WatchRequest { watch_id: 2, ..w }),
            &mut out,
        )
        .unwrap();
        assert!(matches!(
            out[0].event,
            WatchEvent::Cancelled {
                compact_revision: 100,
                ..
            }
        ));
    }

    fn put_mut(k: &str) -> Mutation {
        Mutation::Put {
            key: k.as_bytes().to_vec(),
            value: b"v".to_vec(),
            lease: 0,
        }
    }

    #[test]
    fn watch_from_compact_revision_loses_the_tombstone_on_old_servers() {
        for (version, lost) in [("3.5.13", true), ("3.5.15", false), ("3.6.4", false)] {
            let mut c = EtcdCluster::new("s", version, 1);
            let mut out = Vec::new();
            c.write(&[put_mut("a")], &mut out); // rev 2
            c.write(
                &[Mutation::DeleteRange {
                    key: b"a".to_vec(),
                    end: vec![],
                }],
                &mut out,
            ); // rev 3
            c.compact(3).unwrap();
            let w = WatchRequest {
                watch_id: 1,
                key: b"a".to_vec(),
                range_end: vec![],
                start_revision: 3,
            };
            c.execute(7, &Command::Watch(w), &mut out).unwrap();
            let got_delete = out.iter().any(|o| matches!(&o.event, WatchEvent::Events { events, .. } if events.iter().any(|e| e.kind == EventKind::Delete)));
            assert_eq!(got_delete, !lost, "{version}");
        }
    }

    #[test]
    fn progress_ahead_of_pending_events_only_on_buggy_servers() {
        for (version, ahead) in [("3.5.12", true), ("3.5.13", false)] {
            let mut c = EtcdCluster::new("s", version, 1);
            let mut out = Vec::new();
            for i in 0..1500 {
                c.write(&[put_mut(&format!("k{i}"))], &mut out);
            }
            let w = WatchRequest {
                watch_id: 1,
                key: b"k".to_vec(),
                range_end: b"l".to_vec(),
                start_revision: 2,
            };
            c.execute(7, &Command::Watch(w), &mut out).unwrap();
            out.clear();
            // Still unsynced after the first 1000-revision batch.
            c.execute(7, &Command::RequestProgress { watch_id: 1 }, &mut out)
                .unwrap();
            let progress = out
                .iter()
                .any(|o| matches!(o.event, WatchEvent::Progress { .. }));
            assert_eq!(progress, ahead, "{version}");
        }
    }

    #[test]
    fn progress_bug_versions() {
        assert!(has_progress_bug("3.5.12"));
        assert!(!has_progress_bug("3.5.13"));
        assert!(has_progress_bug("3.4.30"));
        assert!(!has_progress_bug("3.4.31"));
        assert!(!has_progress_bug("3.6.0"));
    }
}
