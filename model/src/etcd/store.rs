//! The MVCC key-value store of one model etcd cluster.
//!
//! Semantics follow etcd 3.4/3.5 where the mirror depends on them (sources read for facts,
//! none copied):
//! - one revision per write transaction, starting at 1 for an empty store
//!   (`server/storage/mvcc/kvstore.go`, `kvstore_txn.go`); a Txn or DeleteRange that changes
//!   nothing does not bump the revision;
//! - per key `create_revision`, `mod_revision`, `version` (version resets on delete)
//!   (`server/storage/mvcc/key_index.go`);
//! - a range pinned below the compact revision fails with `ErrCompacted`; above the current
//!   revision with `ErrFutureRev`; the header revision is always the current one
//!   (`kvstore_txn.go` `rangeKeys`);
//! - compaction at C keeps, per key, the newest version at or below C; before the fix of
//!   etcd issue 18089 a tombstone at exactly C was dropped (`key_index.go` `compact`), so a
//!   watch from C could miss that delete (modelled per version in [`super`]).
//!
//! The store keeps its whole history even past compaction: the compact revision only
//! refuses requests below it, so the checker can still read `source@W` for any W. A restore
//! from an older snapshot ([`Store::restore_to`]) is the one thing that drops history; the
//! simulator's world keeps a copy of the history it replaced (see `tidemark_sim::restore`).

use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::etcd::{Event, EventKind, KeyValue, RangeReply, RangeRequest, SortBy};

/// One version of one key; `None` is a tombstone.
pub type Version = Option<KeyValue>;

/// A lease on the model's clock.
#[derive(Debug, Clone)]
pub struct Lease {
    /// Expiry on the simulated clock (nanoseconds).
    pub expires_at: u64,
    /// Keys currently attached.
    pub keys: BTreeSet<Vec<u8>>,
}

/// Whether a range end means one key, everything from `key`, or `[key, end)`.
pub fn in_range(k: &[u8], key: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        k == key
    } else if end == [0] {
        k >= key
    } else {
        k >= key && k < end
    }
}

/// A write recorded for one revision; the watch log.
#[derive(Debug, Clone)]
pub struct RevisionLog {
    pub rev: i64,
    pub events: Vec<Event>,
}

/// The MVCC store.
#[derive(Debug, Clone, Default)]
pub struct Store {
    rev: i64,
    compact_rev: i64,
    history: BTreeMap<Vec<u8>, Vec<(i64, Version)>>,
    /// `log[i]` holds revision `i + 2` (revision 1 is the empty store).
    log: Vec<RevisionLog>,
    pub leases: BTreeMap<i64, Lease>,
    next_lease: i64,
}

/// One mutation inside a write transaction.
#[derive(Debug, Clone)]
pub enum Mutation {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    DeleteRange {
        key: Vec<u8>,
        end: Vec<u8>,
    },
}

impl Store {
    /// An empty store at revision 1.
    pub fn new() -> Store {
        Store {
            rev: 1,
            compact_rev: 0,
            next_lease: 0x1000,
            ..Default::default()
        }
    }

    /// The current revision.
    pub fn rev(&self) -> i64 {
        self.rev
    }

    /// The compact revision (0 before any compaction).
    pub fn compact_rev(&self) -> i64 {
        self.compact_rev
    }

    /// The live version of `key` at revision `at`.
    pub fn get_at(&self, key: &[u8], at: i64) -> Option<&KeyValue> {
        let h = self.history.get(key)?;
        let idx = h.partition_point(|(r, _)| *r <= at);
        if idx == 0 {
            return None;
        }
        h[idx - 1].1.as_ref()
    }

    /// The live version of `key` now.
    pub fn get(&self, key: &[u8]) -> Option<&KeyValue> {
        self.history
            .get(key)
            .and_then(|h| h.last())
            .and_then(|(_, v)| v.as_ref())
    }

    /// All live keys in `[key, end)` at revision `at`, in key order (no compaction check).
    pub fn range_at(&self, key: &[u8], end: &[u8], at: i64) -> Vec<&KeyValue> {
        let mut out = Vec::new();
        self.for_each_at(key, end, at, |kv| out.push(kv));
        out
    }

    fn for_each_at<'a>(&'a self, key: &[u8], end: &[u8], at: i64, mut f: impl FnMut(&'a KeyValue)) {
        use std::ops::Bound;
        let upper = if end.is_empty() {
            Bound::Included(key.to_vec())
        } else if end == [0] {
            Bound::Unbounded
        } else {
            if end <= key {
                return;
            }
            Bound::Excluded(end.to_vec())
        };
        for (_, h) in self
            .history
            .range::<Vec<u8>, _>((Bound::Included(key.to_vec()), upper))
        {
            let idx = h.partition_point(|(r, _)| *r <= at);
            if idx > 0 {
                if let Some(kv) = &h[idx - 1].1 {
                    f(kv);
                }
            }
        }
    }

    /// Serves a range request; errors are `(code, message)` for the caller to classify.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeReply, StoreError> {
        if r.revision > self.rev {
            return Err(StoreError::FutureRev);
        }
        if r.revision > 0 && r.revision < self.compact_rev {
            return Err(StoreError::Compacted);
        }
        let at = if r.revision > 0 { r.revision } else { self.rev };
        let mut kvs: Vec<&KeyValue> = Vec::new();
        let mut count = 0i64;
        let limit = if r.limit > 0 {
            r.limit as usize
        } else {
            usize::MAX
        };
        match r.sort {
            SortBy::Key => self.for_each_at(&r.key, &r.range_end, at, |kv| {
                count += 1;
                if !r.count_only && kvs.len() < limit {
                    kvs.push(kv);
                }
            }),
            SortBy::ModRevisionDescending => {
                self.for_each_at(&r.key, &r.range_end, at, |kv| {
                    count += 1;
                    kvs.push(kv)
                });
                // Stable sort: ties keep key order, as etcd's sort of a key-ordered range does.
                kvs.sort_by_key(|kv| std::cmp::Reverse(kv.mod_revision));
                if r.count_only {
                    kvs.clear();
                }
                kvs.truncate(limit);
            }
        }
        let more = !r.count_only && (count as usize) > kvs.len();
        Ok(RangeReply {
            header_revision: self.rev,
            kvs: kvs
                .into_iter()
                .map(|kv| {
                    let mut kv = kv.clone();
                    if r.keys_only {
                        kv.value.clear();
                    }
                    kv
                })
                .collect(),
            more,
            count,
        })
    }

    /// Applies one write transaction as one revision. Returns its events (empty if nothing
    /// changed, in which case the revision does not move).
    pub fn write(&mut self, muts: &[Mutation]) -> &[Event] {
        let new_rev = self.rev + 1;
        let mut events = Vec::new();
        for m in muts {
            match m {
                Mutation::Put { key, value, lease } => {
                    let prev = self.get(key).cloned();
                    let (create, version) = match &prev {
                        Some(p) => (p.create_revision, p.version + 1),
                        None => (new_rev, 1),
                    };
                    if let Some(p) = &prev {
                        if p.lease != 0 && p.lease != *lease {
                            if let Some(l) = self.leases.get_mut(&p.lease) {
                                l.keys.remove(key);
                            }
                        }
                    }
                    if *lease != 0 {
                        if let Some(l) = self.leases.get_mut(lease) {
                            l.keys.insert(key.clone());
                        }
                    }
                    let kv = KeyValue {
                        key: key.clone(),
                        value: value.clone(),
                        create_revision: create,
                        mod_revision: new_rev,
                        version,
                        lease: *lease,
                    };
                    self.push_version(key, new_rev, Some(kv.clone()));
                    events.push(Event {
                        kind: EventKind::Put,
                        kv,
                    });
                }
                Mutation::DeleteRange { key, end } => {
                    let victims: Vec<KeyValue> = self
                        .range_at(key, end, self.rev.max(new_rev))
                        .into_iter()
                        .cloned()
                        .collect();
                    for v in victims {
                        if v.lease != 0 {
                            if let Some(l) = self.leases.get_mut(&v.lease) {
                                l.keys.remove(&v.key);
                            }
                        }
                        self.push_version(&v.key, new_rev, None);
                        events.push(Event {
                            kind: EventKind::Delete,
                            kv: KeyValue {
                                key: v.key.clone(),
                                mod_revision: new_rev,
                                ..Default::default()
                            },
                        });
                    }
                }
            }
        }
        if events.is_empty() {
            return &[];
        }
        self.rev = new_rev;
        self.log.push(RevisionLog {
            rev: new_rev,
            events,
        });
        &self.log[self.log.len() - 1].events
    }

    fn push_version(&mut self, key: &[u8], rev: i64, v: Version) {
        let h = self.history.entry(key.to_vec()).or_default();
        // Two mutations of one key in one revision (a put after a delete-range inside one
        // Txn) keep only the last, as etcd's index does.
        if h.last().is_some_and(|(r, _)| *r == rev) {
            h.pop();
        }
        h.push((rev, v));
    }

    /// Compacts at `rev`. Errors as etcd: at or below the current compact revision is
    /// `ErrCompacted`, above the current revision `ErrFutureRev` (`kvstore.go` `compact`).
    pub fn compact(&mut self, rev: i64) -> Result<(), StoreError> {
        if rev <= self.compact_rev {
            return Err(StoreError::Compacted);
        }
        if rev > self.rev {
            return Err(StoreError::FutureRev);
        }
        self.compact_rev = rev;
        Ok(())
    }

    /// Restores the store from a snapshot taken at revision `at` (`etcdutl snapshot
    /// restore`): every version and log entry above `at` is gone, the revision is `at` again
    /// and the compact revision is at most `at`. Leases keep their ids; each lease's key set
    /// is what `at` had attached, and a lease revoked after `at` comes back (with the given
    /// expiry) because the snapshot still holds it and keys attached to it. Returns whether
    /// anything changed (false when `at` is not below the current revision).
    pub fn restore_to(&mut self, at: i64, lease_expiry: u64) -> bool {
        let at = at.max(1);
        if at >= self.rev {
            return false;
        }
        self.history.retain(|_, h| {
            h.truncate(h.partition_point(|(r, _)| *r <= at));
            !h.is_empty()
        });
        // `log[i]` holds revision `i + 2`: revisions 2..=at stay.
        self.log.truncate((at - 1) as usize);
        self.rev = at;
        self.compact_rev = self.compact_rev.min(at);
        for l in self.leases.values_mut() {
            l.keys.clear();
        }
        for h in self.history.values() {
            let Some((_, Some(kv))) = h.last() else {
                continue;
            };
            if kv.lease != 0 {
                self.leases
                    .entry(kv.lease)
                    .or_insert_with(|| Lease {
                        expires_at: lease_expiry,
                        keys: BTreeSet::new(),
                    })
                    .keys
                    .insert(kv.key.clone());
            }
        }
        true
    }

    /// Events of revision `rev` (the watch layer applies compaction effects).
    pub fn events_at(&self, rev: i64) -> &[Event] {
        if rev < 2 || rev > self.rev {
            return &[];
        }
        &self.log[(rev - 2) as usize].events
    }

    /// Grants a lease that expires at `expires_at` (simulated nanoseconds).
    pub fn grant_lease(&mut self, expires_at: u64) -> i64 {
        self.next_lease += 1;
        self.leases.insert(
            self.next_lease,
            Lease {
                expires_at,
                keys: BTreeSet::new(),
            },
        );
        self.next_lease
    }

    /// Revokes every lease expired at `now`: each revocation deletes its keys in one
    /// revision (`server/lease/lessor.go` revoke runs one delete txn). Returns the
    /// revisions written.
    pub fn expire_leases(&mut self, now: u64) -> Vec<i64> {
        let expired: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        let mut out = Vec::new();
        for id in expired {
            let Some(l) = self.leases.remove(&id) else {
                continue;
            };
            let muts: Vec<Mutation> = l
                .keys
                .into_iter()
                .map(|k| Mutation::DeleteRange {
                    key: k,
                    end: Vec::new(),
                })
                .collect();
            if !self.write(&muts).is_empty() {
                out.push(self.rev);
            }
        }
        out
    }

    /// Highest revision at which a key accepted by `in_scope` changed, at or below `at`.
    pub fn last_rev_matching(&self, at: i64, mut in_scope: impl FnMut(&[u8]) -> bool) -> i64 {
        let mut r = at.min(self.rev);
        while r >= 2 {
            if self.events_at(r).iter().any(|e| in_scope(&e.kv.key)) {
                return r;
            }
            r -= 1;
        }
        0
    }

    /// Approximate database size in bytes (sum of live values and keys).
    pub fn live_bytes(&self) -> i64 {
        self.history
            .iter()
            .filter_map(|(k, h)| {
                h.last()
                    .and_then(|(_, v)| v.as_ref())
                    .map(|v| k.len() + v.value.len())
            })
            .sum::<usize>() as i64
    }
}

/// Store-level errors, turned into gRPC statuses by the server layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    Compacted,
    FutureRev,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, v: &str) -> Mutation {
        Mutation::Put {
            key: k.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
            lease: 0,
        }
    }

    #[test]
    fn revisions_versions_and_history() {
        let mut s = Store::new();
        assert_eq!(s.rev(), 1);
        s.write(&[put("a", "1"), put("b", "1")]);
        s.write(&[put("a", "2")]);
        assert_eq!(s.rev(), 3);
        let a = s.get(b"a").unwrap();
        assert_eq!((a.create_revision, a.mod_revision, a.version), (2, 3, 2));
        assert_eq!(s.get_at(b"a", 2).unwrap().value, b"1");
        let evs = s.write(&[Mutation::DeleteRange {
            key: b"a".to_vec(),
            end: b"c".to_vec(),
        }]);
        assert_eq!(evs.len(), 2);
        assert_eq!(s.rev(), 4);
        assert!(s
            .write(&[Mutation::DeleteRange {
                key: b"a".to_vec(),
                end: b"c".to_vec()
            }])
            .is_empty());
        assert_eq!(s.rev(), 4, "a no-op delete does not bump the revision");
        s.write(&[put("a", "3")]);
        let a = s.get(b"a").unwrap();
        assert_eq!((a.create_revision, a.version), (5, 1));
    }

    #[test]
    fn compaction_refuses_old_reads_but_keeps_history() {
        let mut s = Store::new();
        for i in 0..5 {
            s.write(&[put("k", &i.to_string())]);
        }
        s.compact(4).unwrap();
        let req = |rev| RangeRequest {
            cluster: tidemark_core::etcd::Cluster::Source,
            key: b"k".to_vec(),
            range_end: vec![],
            revision: rev,
            limit: 0,
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        };
        assert_eq!(s.range(&req(3)), Err(StoreError::Compacted));
        assert!(s.range(&req(4)).is_ok());
        assert_eq!(s.range(&req(9)), Err(StoreError::FutureRev));
        assert_eq!(s.get_at(b"k", 2).unwrap().value, b"0");
        assert_eq!(s.compact(3), Err(StoreError::Compacted));
    }

    #[test]
    fn restore_rewinds_history_compaction_and_leases() {
        let mut s = Store::new();
        s.write(&[put("a", "1")]); // 2
        let l = s.grant_lease(100);
        s.write(&[Mutation::Put {
            key: b"x".to_vec(),
            value: b"v".to_vec(),
            lease: l,
        }]); // 3
        s.write(&[put("a", "2"), put("b", "1")]); // 4
        assert_eq!(s.expire_leases(100).len(), 1); // 5: x deleted, lease gone
        s.compact(5).unwrap();
        assert!(
            !s.restore_to(5, 0),
            "restoring at the current revision is a no-op"
        );
        assert!(s.restore_to(3, 7_000));
        assert_eq!((s.rev(), s.compact_rev()), (3, 3));
        assert_eq!(s.get(b"a").unwrap().value, b"1");
        assert!(s.get(b"b").is_none());
        assert_eq!(s.events_at(4), &[]);
        let lease = &s.leases[&l];
        assert_eq!((lease.expires_at, lease.keys.len()), (7_000, 1));
        // The new history continues from 3: a put of `a` is version 2 at revision 4.
        s.write(&[put("a", "3")]);
        let a = s.get(b"a").unwrap();
        assert_eq!((a.mod_revision, a.version, a.create_revision), (4, 2, 2));
        assert_eq!(s.events_at(4).len(), 1);
    }

    #[test]
    fn leases_expire_in_one_revision() {
        let mut s = Store::new();
        let l = s.grant_lease(100);
        s.write(&[
            Mutation::Put {
                key: b"x".to_vec(),
                value: b"v".to_vec(),
                lease: l,
            },
            Mutation::Put {
                key: b"y".to_vec(),
                value: b"v".to_vec(),
                lease: l,
            },
        ]);
        assert!(s.expire_leases(50).is_empty());
        let out = s.expire_leases(100);
        assert_eq!(out.len(), 1);
        assert_eq!(s.events_at(out[0]).len(), 2);
        assert!(s.get(b"x").is_none());
    }
}
