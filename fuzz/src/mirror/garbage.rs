//! Chaos mode: arbitrary replies and watch events.

use super::*;

pub(super) fn garbage_kv(k: u8, value: &[u8], rev: i16) -> KeyValue {
    KeyValue {
        key: if k.is_multiple_of(4) {
            b"/t/\0tidemark-checkpoint".to_vec()
        } else {
            src_key(k)
        },
        value: value.iter().take(64).copied().collect(),
        create_revision: i64::from(rev) / 2,
        mod_revision: i64::from(rev),
        version: 1,
        lease: i64::from(k % 2),
    }
}

pub(super) fn garbage_reply(w: &World, r: &GarbageReply) -> Result<Reply, Failure> {
    Ok(match r {
        GarbageReply::Status {
            version,
            rev,
            learner,
            cluster,
        } => Reply::Status(StatusReply {
            version: if version.is_empty() {
                w.versions.0.clone()
            } else {
                version.clone()
            },
            header_revision: i64::from(*rev),
            cluster_id: u64::from(cluster % 3),
            member_id: 1,
            is_learner: *learner,
            db_size: 0,
        }),
        GarbageReply::Range {
            kvs,
            more,
            count,
            rev,
        } => Reply::Range(RangeReply {
            header_revision: i64::from(*rev),
            kvs: kvs
                .iter()
                .take(8)
                .map(|(k, v, _, m)| garbage_kv(*k, v, *m))
                .collect(),
            more: *more,
            count: i64::from(*count),
        }),
        GarbageReply::Txn {
            succeeded,
            rev,
            reads,
        } => Reply::Txn(TxnReply {
            succeeded: *succeeded,
            header_revision: i64::from(*rev),
            reads: reads
                .iter()
                .take(4)
                .map(|r| r.as_ref().map(|(k, v, m)| garbage_kv(*k, v, *m)))
                .collect(),
        }),
        GarbageReply::WatchStarted => Reply::WatchStarted,
        GarbageReply::Ok => Reply::Ok,
        GarbageReply::Fail(kind, message) => {
            return Err(match kind % 8 {
                0 => Failure::Transient {
                    message: message.clone(),
                },
                1 => Failure::Throttled {
                    message: message.clone(),
                },
                2 => Failure::FutureRevision,
                3 => Failure::NoSpace,
                4 => Failure::TooLarge { key_redacted: None },
                5 => Failure::Permanent {
                    kind: PermanentKind::Other,
                    message: message.clone(),
                },
                6 => Failure::Unknown {
                    message: message.clone(),
                },
                _ => classify(Code::from_i32(i32::from(*kind)), message),
            })
        }
        GarbageReply::Compacted(rev) => {
            return Err(Failure::Compacted {
                rev: i64::from(*rev),
            })
        }
    })
}

pub(super) fn garbage_event(e: &GarbageEvent) -> WatchEvent {
    match e {
        GarbageEvent::Events { header, events } => WatchEvent::Events {
            header_revision: i64::from(*header),
            events: events
                .iter()
                .take(16)
                .map(|(put, k, v, rev)| Event {
                    kind: if *put {
                        EventKind::Put
                    } else {
                        EventKind::Delete
                    },
                    kv: garbage_kv(k | 1, &[*v], *rev),
                })
                .collect(),
        },
        GarbageEvent::Progress(r) => WatchEvent::Progress {
            revision: i64::from(*r),
        },
        GarbageEvent::Cancelled(r) => WatchEvent::Cancelled {
            compact_revision: i64::from(*r),
            reason: "garbage".into(),
        },
    }
}
