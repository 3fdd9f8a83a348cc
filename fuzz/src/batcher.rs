//! `batcher`: arbitrary revision streams and limits against the batching properties.
//!
//! Properties (docs/design.md, "The fence record" and "The mirror's flows": target writes are
//! atomic at source-revision boundaries):
//! - the emitted ops are exactly the pushed ops, in order (a `clear` drops the unemitted tail);
//! - no batch exceeds `maxTxnOps - 1` ops (one slot is the fence put) or `txnFlushBytes`,
//!   except a lone op over the byte budget;
//! - no key appears twice in one batch;
//! - a revision that fits in one Txn is never split, and sits whole in one batch;
//! - split parts of a revision are contiguous, start at the resume offset, and only the
//!   last one lets the watermark move;
//! - `Oversized` is returned exactly for a revision that does not fit when splitting is off;
//! - `shrink` and `chunk_ops` preserve the ops and their order and respect the limits.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeSet;
use tidemark_core::etcd::TxnOp;
use tidemark_core::mirror::batcher::{chunk_ops, shrink, Batch, Batcher, Limits, RevGroup};

#[derive(Debug, Arbitrary)]
struct Plan {
    max_txn_ops: u8,
    flush_bytes: u16,
    allow_split: bool,
    steps: Vec<Step>,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Push { gap: u8, skip: u8, ops: Vec<OpSpec> },
    Flush,
    Pop,
    PopAll,
    Shrink,
    Clear,
}

#[derive(Debug, Arbitrary)]
struct OpSpec {
    key: u8,
    delete: bool,
    value_len: u16,
}

/// What a pushed revision looked like, to judge the batches it ends up in.
struct Pushed {
    rev: i64,
    skip: u32,
    n: usize,
    fits: bool,
}

struct Checker {
    limits: Limits,
    max_txn_ops: usize,
    input: Vec<TxnOp>,
    output: Vec<TxnOp>,
    pushed: Vec<Pushed>,
    /// Per split revision: ops of it applied so far (as the checkpoint's `split.done`).
    split_progress: Option<(i64, u32, bool)>,
    last_popped: Option<Batch>,
}

fn op(spec: &OpSpec) -> TxnOp {
    let key = format!("/t/k{:03}", spec.key).into_bytes();
    if spec.delete {
        TxnOp::Delete {
            key,
            range_end: Vec::new(),
        }
    } else {
        TxnOp::Put {
            key,
            value: vec![b'v'; usize::from(spec.value_len % 1500)],
        }
    }
}

fn bytes(ops: &[TxnOp]) -> usize {
    ops.iter().map(TxnOp::wire_size).sum()
}

impl Checker {
    fn within_limits(&self, ops: &[TxnOp], what: &str) {
        assert!(!ops.is_empty(), "{what}: empty batch");
        assert!(
            ops.len() <= self.limits.max_ops && ops.len() < self.max_txn_ops.max(2),
            "{what}: {} ops, budget {} (maxTxnOps {} incl. the fence)",
            ops.len(),
            self.limits.max_ops,
            self.max_txn_ops
        );
        assert!(
            bytes(ops) <= self.limits.max_bytes || ops.len() == 1,
            "{what}: {} bytes over the budget {}",
            bytes(ops),
            self.limits.max_bytes
        );
    }

    fn on_batch(&mut self, b: Batch) {
        self.within_limits(&b.ops, "batch");
        let keys: BTreeSet<&[u8]> = b.ops.iter().map(TxnOp::key).collect();
        assert_eq!(keys.len(), b.ops.len(), "duplicate key in one batch");
        assert!(!b.revs.is_empty());
        assert_eq!(
            b.revs.iter().map(|r| r.1).sum::<usize>(),
            b.ops.len(),
            "revs do not account for the ops"
        );
        assert!(
            b.revs.windows(2).all(|w| w[0].0 < w[1].0),
            "revisions out of order in a batch"
        );
        for (rev, n) in &b.revs {
            let p = self
                .pushed
                .iter()
                .find(|p| p.rev == *rev)
                .expect("batch holds a revision never pushed");
            if p.fits {
                assert!(b.split.is_none(), "revision {rev} fits but was split");
                assert_eq!(*n, p.n, "revision {rev} fits but is not whole in one batch");
            }
        }
        match b.split {
            None => {
                assert!(
                    self.split_progress.is_none(),
                    "split revision left unfinished"
                );
                assert_eq!(b.watermark_after(), b.revs.last().map(|r| r.0));
            }
            Some(part) => {
                assert_eq!(b.revs.len(), 1, "a split part carries one revision");
                assert_eq!(b.revs[0].0, part.rev);
                let p = self.pushed.iter().find(|p| p.rev == part.rev).unwrap();
                let expect_before = match self.split_progress {
                    Some((rev, done, _)) if rev == part.rev => done,
                    Some((rev, ..)) => panic!("revision {rev} split left unfinished"),
                    None => p.skip,
                };
                assert_eq!(
                    part.done_before, expect_before,
                    "split parts not contiguous"
                );
                assert_eq!(
                    part.done_after as usize,
                    part.done_before as usize + b.ops.len(),
                    "split offsets do not count the ops"
                );
                let total = p.skip as usize + p.n;
                assert_eq!(
                    part.last,
                    part.done_after as usize == total,
                    "last flag wrong"
                );
                if part.last {
                    assert_eq!(b.watermark_after(), Some(part.rev));
                    self.split_progress = None;
                } else {
                    assert_eq!(
                        b.watermark_after(),
                        None,
                        "a non-final part moves the watermark"
                    );
                    self.split_progress = Some((part.rev, part.done_after, false));
                }
            }
        }
        self.output.extend(b.ops.iter().cloned());
        assert!(
            self.input.starts_with(&self.output),
            "emitted ops are not the pushed ops in order"
        );
        self.last_popped = Some(b);
    }

    fn check_shrink(&self, b: &Batch) {
        match shrink(b.clone()) {
            None => assert!(b.ops.len() <= 1, "shrink gave up on {} ops", b.ops.len()),
            Some(parts) => {
                assert!(parts.len() >= 2, "shrink did not cut");
                let ops: Vec<TxnOp> = parts.iter().flat_map(|p| p.ops.clone()).collect();
                assert_eq!(ops, b.ops, "shrink changed the ops");
                for p in &parts {
                    assert!(!p.ops.is_empty() && p.ops.len() < b.ops.len());
                    assert_eq!(p.revs.iter().map(|r| r.1).sum::<usize>(), p.ops.len());
                }
                if b.revs.len() > 1 {
                    assert_eq!(
                        parts.len(),
                        b.revs.len(),
                        "shrink is one revision per Txn first"
                    );
                    for (p, r) in parts.iter().zip(&b.revs) {
                        assert_eq!(p.revs, vec![*r]);
                        assert!(p.split.is_none());
                    }
                } else {
                    let (a, z) = (parts[0].split.unwrap(), parts[1].split.unwrap());
                    let before = b.split.map_or(0, |s| s.done_before);
                    assert_eq!(a.done_before, before);
                    assert_eq!(a.done_after, z.done_before);
                    assert!(!a.last);
                    assert_eq!(parts[0].watermark_after(), None);
                    assert_eq!(parts[1].watermark_after(), b.watermark_after());
                }
            }
        }
    }
}

pub fn run(data: &[u8]) {
    let Ok(plan) = Plan::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let max_txn_ops = 2 + usize::from(plan.max_txn_ops % 40);
    let limits = Limits::from_config(max_txn_ops as u32, 64 + u64::from(plan.flush_bytes % 4096));
    let mut b = Batcher::new(limits, plan.allow_split);
    let mut c = Checker {
        limits,
        max_txn_ops,
        input: Vec::new(),
        output: Vec::new(),
        pushed: Vec::new(),
        split_progress: None,
        last_popped: None,
    };
    let mut rev = 0i64;
    for step in plan.steps.iter().take(200) {
        match step {
            Step::Push { gap, skip, ops } => {
                rev += 1 + i64::from(gap % 4);
                // etcd never touches a key twice in one revision.
                let mut seen = BTreeSet::new();
                let ops: Vec<TxnOp> = ops
                    .iter()
                    .take(300)
                    .filter(|o| seen.insert(o.key))
                    .map(op)
                    .collect();
                let skip = u32::from(*skip % 4).min(ops.len() as u32);
                let fits = ops.len() <= limits.max_ops && bytes(&ops) <= limits.max_bytes;
                for chunk in chunk_ops(ops.clone(), limits) {
                    c.within_limits(&chunk, "chunk_ops");
                }
                assert_eq!(
                    chunk_ops(ops.clone(), limits).concat(),
                    ops,
                    "chunk_ops changed the ops"
                );
                let n = ops.len();
                let group = RevGroup {
                    rev,
                    skip,
                    ops: ops.clone(),
                };
                match b.push(group) {
                    Ok(()) => {
                        assert!(
                            plan.allow_split || fits || skip > 0 || n == 0,
                            "an oversized revision was accepted with splitting off"
                        );
                        c.input.extend(ops);
                        c.pushed.push(Pushed {
                            rev,
                            skip,
                            n,
                            fits: fits && skip == 0,
                        });
                    }
                    Err(o) => {
                        assert!(!plan.allow_split && !fits && skip == 0, "Oversized wrongly");
                        assert_eq!((o.rev, o.ops), (rev, n));
                    }
                }
            }
            Step::Flush => b.flush(),
            Step::Pop => {
                if let Some(x) = b.pop() {
                    c.on_batch(x);
                }
            }
            Step::PopAll => {
                while let Some(x) = b.pop() {
                    c.on_batch(x);
                }
            }
            Step::Shrink => {
                if let Some(x) = &c.last_popped {
                    c.check_shrink(x);
                }
            }
            Step::Clear => {
                b.clear();
                assert!(b.is_empty());
                assert_eq!(b.queued_bytes(), 0);
                c.input.truncate(c.output.len());
                c.split_progress = None;
            }
        }
    }
    b.flush();
    while let Some(x) = b.pop() {
        c.on_batch(x);
    }
    assert!(b.is_empty());
    assert_eq!(c.output, c.input, "ops lost or invented");
}
