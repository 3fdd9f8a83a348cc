//! Revision-boundary batching of watch events into target Txns.
//!
//! A source revision is atomic in the source, so it is applied atomically in the target
//! whenever it fits in one Txn. Batches are cut when the next revision would exceed the op
//! budget (one slot is always left for the fence put) or the byte budget, when it touches a
//! key already pending (etcd rejects duplicate keys in a Txn), and at the end of every watch
//! response. A revision too large for any Txn is split into parts that record their
//! progress, so a crash resumes exactly.

use crate::etcd::TxnOp;
use std::collections::{BTreeSet, VecDeque};

/// All the (rewritten) ops of one source revision, in watch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevGroup {
    pub rev: i64,
    /// Ops of this revision already applied by an earlier split part (resume).
    pub skip: u32,
    pub ops: Vec<TxnOp>,
}

/// Budgets for one Txn, excluding the fence put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_ops: usize,
    pub max_bytes: usize,
}

impl Limits {
    /// From `maxTxnOps` (which includes the fence put) and `txnFlushBytes`.
    pub fn from_config(max_txn_ops: u32, txn_flush_bytes: u64) -> Limits {
        Limits {
            max_ops: (max_txn_ops as usize).saturating_sub(1).max(1),
            max_bytes: usize::try_from(txn_flush_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// One part of a revision that did not fit in a single Txn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPart {
    pub rev: i64,
    /// Ops of `rev` applied before this part.
    pub done_before: u32,
    /// Ops of `rev` applied after this part.
    pub done_after: u32,
    /// Whether this part completes the revision.
    pub last: bool,
}

/// The ops of one target Txn (fence put not included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub ops: Vec<TxnOp>,
    /// The revisions in this batch and how many ops each has, in order.
    pub revs: Vec<(i64, usize)>,
    pub split: Option<SplitPart>,
}

impl Batch {
    /// The source revision the watermark may move to once this batch is applied.
    /// `None` for a non-final split part: the watermark must not move yet.
    pub fn watermark_after(&self) -> Option<i64> {
        match self.split {
            Some(p) if !p.last => None,
            _ => self.revs.last().map(|r| r.0),
        }
    }

    /// Payload bytes, for the byte budget and metrics.
    pub fn bytes(&self) -> usize {
        self.ops.iter().map(TxnOp::wire_size).sum()
    }
}

/// A revision exceeds one Txn and splitting is disabled (`oversizedRevision: Fail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversized {
    pub rev: i64,
    pub ops: usize,
}

/// Accumulates revision groups into batches.
#[derive(Debug, Clone)]
pub struct Batcher {
    limits: Limits,
    allow_split: bool,
    pending: Vec<TxnOp>,
    pending_revs: Vec<(i64, usize)>,
    pending_bytes: usize,
    pending_keys: BTreeSet<Vec<u8>>,
    ready: VecDeque<Batch>,
}

impl Batcher {
    pub fn new(limits: Limits, allow_split: bool) -> Self {
        Batcher {
            limits,
            allow_split,
            pending: Vec::new(),
            pending_revs: Vec::new(),
            pending_bytes: 0,
            pending_keys: BTreeSet::new(),
            ready: VecDeque::new(),
        }
    }

    /// Adds one revision. Cuts the pending batch first when the revision would not fit.
    pub fn push(&mut self, group: RevGroup) -> Result<(), Oversized> {
        if group.ops.is_empty() {
            return Ok(());
        }
        let bytes: usize = group.ops.iter().map(TxnOp::wire_size).sum();
        let fits_alone = group.ops.len() <= self.limits.max_ops && bytes <= self.limits.max_bytes;
        if !fits_alone || group.skip > 0 {
            if !self.allow_split && group.skip == 0 {
                return Err(Oversized {
                    rev: group.rev,
                    ops: group.ops.len(),
                });
            }
            self.flush();
            self.ready.extend(split_revision(
                group.rev,
                group.skip,
                group.ops,
                self.limits,
            ));
            return Ok(());
        }
        let collides = group
            .ops
            .iter()
            .any(|op| self.pending_keys.contains(op.key()));
        if !self.pending.is_empty()
            && (collides
                || self.pending.len() + group.ops.len() > self.limits.max_ops
                || self.pending_bytes + bytes > self.limits.max_bytes)
        {
            self.flush();
        }
        self.pending_bytes += bytes;
        self.pending_revs.push((group.rev, group.ops.len()));
        for op in group.ops {
            self.pending_keys.insert(op.key().to_vec());
            self.pending.push(op);
        }
        Ok(())
    }

    /// Cuts the pending batch (end of a watch response).
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.ready.push_back(Batch {
            ops: std::mem::take(&mut self.pending),
            revs: std::mem::take(&mut self.pending_revs),
            split: None,
        });
        self.pending_bytes = 0;
        self.pending_keys.clear();
    }

    /// Whether what is ready fills at least half a Txn (or holds a part of a split
    /// revision, which fills one): only then is a Txn worth sending beside one already in
    /// flight (see the tail's pump in `commit.rs`).
    pub fn fills_half_a_txn(&self) -> bool {
        let (mut ops, mut bytes) = (0, 0);
        for b in &self.ready {
            if b.split.is_some() {
                return true;
            }
            ops += b.ops.len();
            bytes += b.bytes();
            if ops * 2 >= self.limits.max_ops || bytes * 2 >= self.limits.max_bytes {
                return true;
            }
        }
        false
    }

    /// The next batch to write. Whole revisions that were cut apart only because a watch
    /// response ended are merged back while they fit, so a backlog is written in full
    /// Txns instead of one revision per round trip; a revision is still never split.
    pub fn pop(&mut self) -> Option<Batch> {
        let mut out = self.ready.pop_front()?;
        if out.split.is_some() {
            return Some(out);
        }
        let mut bytes = out.bytes();
        let mut keys: BTreeSet<Vec<u8>> = out.ops.iter().map(|o| o.key().to_vec()).collect();
        while let Some(next) = self.ready.front() {
            let next_bytes = next.bytes();
            let fits = next.split.is_none()
                && out.ops.len() + next.ops.len() <= self.limits.max_ops
                && bytes + next_bytes <= self.limits.max_bytes
                && next.ops.iter().all(|o| !keys.contains(o.key()));
            if !fits {
                break;
            }
            let next = self.ready.pop_front().expect("front() was Some just above");
            bytes += next_bytes;
            keys.extend(next.ops.iter().map(|o| o.key().to_vec()));
            out.ops.extend(next.ops);
            out.revs.extend(next.revs);
        }
        Some(out)
    }

    /// Whether anything is pending or ready.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.ready.is_empty()
    }

    /// Ready batches plus the pending one, in bytes (memory bound).
    pub fn queued_bytes(&self) -> usize {
        self.pending_bytes + self.ready.iter().map(Batch::bytes).sum::<usize>()
    }

    /// Drops everything (the watch is restarted from the watermark).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.pending_revs.clear();
        self.pending_bytes = 0;
        self.pending_keys.clear();
        self.ready.clear();
    }
}

/// Packs ops greedily into chunks within `limits` (used for scan pages and split parts).
pub fn chunk_ops(ops: Vec<TxnOp>, limits: Limits) -> Vec<Vec<TxnOp>> {
    let mut out = Vec::new();
    let mut cur: Vec<TxnOp> = Vec::new();
    let mut cur_bytes = 0;
    for op in ops {
        let b = op.wire_size();
        if !cur.is_empty() && (cur.len() + 1 > limits.max_ops || cur_bytes + b > limits.max_bytes) {
            out.push(std::mem::take(&mut cur));
            cur_bytes = 0;
        }
        cur_bytes += b;
        cur.push(op);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn split_revision(rev: i64, skip: u32, ops: Vec<TxnOp>, limits: Limits) -> Vec<Batch> {
    let chunks = chunk_ops(ops, limits);
    let n = chunks.len();
    let mut done = skip;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, ops)| {
            let len = u32::try_from(ops.len()).unwrap_or(u32::MAX);
            let part = SplitPart {
                rev,
                done_before: done,
                done_after: done.saturating_add(len),
                last: i + 1 == n,
            };
            done = part.done_after;
            Batch {
                revs: vec![(rev, ops.len())],
                ops,
                split: Some(part),
            }
        })
        .collect()
}

/// Re-cuts a batch the target rejected as too large: first one revision per Txn, then a
/// single revision in halves (as split parts). `None` when it is one op: nothing smaller
/// exists and the caller must fail with the key redacted.
pub fn shrink(batch: Batch) -> Option<Vec<Batch>> {
    if batch.revs.len() > 1 {
        let mut out = Vec::new();
        let mut ops = batch.ops.into_iter();
        for (rev, n) in batch.revs {
            let part: Vec<TxnOp> = ops.by_ref().take(n).collect();
            out.push(Batch {
                ops: part,
                revs: vec![(rev, n)],
                split: None,
            });
        }
        return Some(out);
    }
    if batch.ops.len() <= 1 {
        return None;
    }
    let rev = batch.revs.first().map(|r| r.0).unwrap_or(0);
    let (before, was_last) = match batch.split {
        Some(p) => (p.done_before, p.last),
        None => (0, true),
    };
    let mut first = batch.ops;
    let second = first.split_off(first.len() / 2);
    let n1 = u32::try_from(first.len()).unwrap_or(u32::MAX);
    let n2 = u32::try_from(second.len()).unwrap_or(u32::MAX);
    Some(vec![
        Batch {
            revs: vec![(rev, first.len())],
            ops: first,
            split: Some(SplitPart {
                rev,
                done_before: before,
                done_after: before + n1,
                last: false,
            }),
        },
        Batch {
            revs: vec![(rev, second.len())],
            ops: second,
            split: Some(SplitPart {
                rev,
                done_before: before + n1,
                done_after: before + n1 + n2,
                last: was_last,
            }),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put(k: &str, vlen: usize) -> TxnOp {
        TxnOp::Put {
            key: k.as_bytes().to_vec(),
            value: vec![b'x'; vlen],
        }
    }

    fn drain(b: &mut Batcher) -> Vec<Batch> {
        b.flush();
        std::iter::from_fn(|| b.pop()).collect()
    }

    #[test]
    fn one_revision_is_one_txn_and_fence_slot_is_reserved() {
        let limits = Limits::from_config(4, 1 << 20);
        assert_eq!(limits.max_ops, 3);
        let mut b = Batcher::new(limits, true);
        b.push(RevGroup {
            rev: 5,
            skip: 0,
            ops: vec![put("a", 1), put("b", 1)],
        })
        .unwrap();
        b.push(RevGroup {
            rev: 6,
            skip: 0,
            ops: vec![put("c", 1), put("d", 1)],
        })
        .unwrap();
        let out = drain(&mut b);
        assert_eq!(
            out.len(),
            2,
            "rev 6 does not fit beside rev 5 and is not split"
        );
        assert_eq!(out[0].revs, vec![(5, 2)]);
        assert_eq!(out[1].watermark_after(), Some(6));
    }

    #[test]
    fn a_backlog_of_small_responses_merges_into_full_txns() {
        let mut b = Batcher::new(Limits::from_config(4, 1 << 20), true);
        for rev in 1..=7 {
            b.push(RevGroup {
                rev,
                skip: 0,
                ops: vec![put(&format!("k{rev}"), 1)],
            })
            .unwrap();
            b.flush(); // one watch response per revision
        }
        let out = drain(&mut b);
        let sizes: Vec<usize> = out.iter().map(|x| x.ops.len()).collect();
        assert_eq!(sizes, vec![3, 3, 1]);
        assert_eq!(out[0].watermark_after(), Some(3));
        // The same key in two revisions is never merged into one Txn.
        let mut b = Batcher::new(Limits::from_config(128, 1 << 20), true);
        b.push(RevGroup {
            rev: 1,
            skip: 0,
            ops: vec![put("a", 1)],
        })
        .unwrap();
        b.flush();
        b.push(RevGroup {
            rev: 2,
            skip: 0,
            ops: vec![put("a", 2)],
        })
        .unwrap();
        assert_eq!(drain(&mut b).len(), 2);
    }

    #[test]
    fn pending_key_collision_cuts() {
        let mut b = Batcher::new(Limits::from_config(128, 1 << 20), true);
        b.push(RevGroup {
            rev: 1,
            skip: 0,
            ops: vec![put("a", 1)],
        })
        .unwrap();
        b.push(RevGroup {
            rev: 2,
            skip: 0,
            ops: vec![put("a", 2)],
        })
        .unwrap();
        assert_eq!(drain(&mut b).len(), 2);
    }

    #[test]
    fn oversized_revision_splits_or_fails() {
        let ops: Vec<_> = (0..1000)
            .map(|i| TxnOp::Delete {
                key: format!("k{i:04}").into_bytes(),
                range_end: vec![],
            })
            .collect();
        let mut b = Batcher::new(Limits::from_config(128, 1 << 20), true);
        b.push(RevGroup {
            rev: 9,
            skip: 0,
            ops: ops.clone(),
        })
        .unwrap();
        let out = drain(&mut b);
        assert_eq!(out.len(), 8);
        assert!(out[..7].iter().all(|p| p.watermark_after().is_none()));
        assert_eq!(out[7].watermark_after(), Some(9));
        assert_eq!(out[7].split.unwrap().done_after, 1000);
        let mut strict = Batcher::new(Limits::from_config(128, 1 << 20), false);
        assert_eq!(
            strict.push(RevGroup {
                rev: 9,
                skip: 0,
                ops
            }),
            Err(Oversized { rev: 9, ops: 1000 })
        );
    }

    #[test]
    fn shrink_goes_per_revision_then_halves() {
        let batch = Batch {
            ops: vec![put("a", 1), put("b", 1), put("c", 1)],
            revs: vec![(1, 1), (2, 2)],
            split: None,
        };
        let per_rev = shrink(batch).unwrap();
        assert_eq!(per_rev.len(), 2);
        let halves = shrink(per_rev[1].clone()).unwrap();
        assert_eq!(
            halves[0].split.unwrap(),
            SplitPart {
                rev: 2,
                done_before: 0,
                done_after: 1,
                last: false
            }
        );
        assert_eq!(halves[1].watermark_after(), Some(2));
        assert!(shrink(halves[0].clone()).is_none());
    }

    fn arb_groups() -> impl Strategy<Value = Vec<Vec<(u8, usize)>>> {
        proptest::collection::vec(
            proptest::collection::vec((0u8..40, 0usize..300), 1..40),
            0..30,
        )
    }

    proptest! {
        #[test]
        fn batcher_properties(groups in arb_groups(), max_txn_ops in 2u32..64, flush in 200u64..4000, cut_every in 1usize..6, lazy in any::<bool>()) {
            let limits = Limits::from_config(max_txn_ops, flush);
            let mut b = Batcher::new(limits, true);
            let mut input: Vec<(i64, TxnOp)> = Vec::new();
            let mut sizes = std::collections::BTreeMap::new();
            let mut out = Vec::new();
            for (i, g) in groups.iter().enumerate() {
                let rev = i as i64 + 1;
                // Keys are unique within a revision, as etcd guarantees.
                let mut seen = BTreeSet::new();
                let ops: Vec<TxnOp> = g.iter().filter(|(k, _)| seen.insert(*k)).map(|(k, v)| put(&format!("k{k}"), *v)).collect();
                sizes.insert(rev, (ops.len(), ops.iter().map(TxnOp::wire_size).sum::<usize>()));
                input.extend(ops.iter().cloned().map(|o| (rev, o)));
                b.push(RevGroup { rev, skip: 0, ops }).unwrap();
                if i % cut_every == 0 { b.flush(); }
                // Eager pops see one response at a time; lazy pops (a commit in flight)
                // let responses merge.
                if !lazy { while let Some(x) = b.pop() { out.push(x); } }
            }
            out.extend(drain(&mut b));
            // Exactly the input ops, in order.
            let emitted: Vec<TxnOp> = out.iter().flat_map(|x| x.ops.clone()).collect();
            prop_assert_eq!(emitted, input.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>());
            for x in &out {
                // Never over budget (the fence slot is reserved), except a lone op over the byte budget.
                prop_assert!(x.ops.len() < max_txn_ops as usize);
                prop_assert!(x.bytes() <= limits.max_bytes || x.ops.len() == 1);
                // No duplicate keys in one Txn.
                let keys: BTreeSet<_> = x.ops.iter().map(|o| o.key().to_vec()).collect();
                prop_assert_eq!(keys.len(), x.ops.len());
                // A revision that fits is never split.
                for (rev, _) in &x.revs {
                    let (n, bytes) = sizes[rev];
                    if n <= limits.max_ops && bytes <= limits.max_bytes {
                        prop_assert!(x.split.is_none());
                        prop_assert!(x.revs.iter().any(|(r, c)| r == rev && *c == n));
                    }
                }
            }
        }
    }
}
