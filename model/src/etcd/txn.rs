//! A Txn as etcd checks and applies it, apart from the cluster's conditions (alarms,
//! throttling, leader loss) and its watchers, so that every harness that needs a Txn on a
//! [`Store`] (the model cluster, the fuzz harness) applies it the same way.

use super::store::{in_range, Mutation, Store};
use super::{fail, msg, MAX_REQUEST_BYTES, MAX_TXN_OPS};
use std::collections::BTreeSet;
use tidemark_core::classify::{Code, Failure};
use tidemark_core::etcd::{CompareTarget, TxnOp, TxnReply, TxnRequest};

/// The request checks etcd makes before a Txn reaches the apply loop (`checkTxnRequest`,
/// `checkIntervals`, `--max-request-bytes`), in etcd's order.
pub fn check_txn(t: &TxnRequest) -> Result<(), Failure> {
    if t.compares.len() > MAX_TXN_OPS
        || t.success.len() > MAX_TXN_OPS
        || t.failure.len() > MAX_TXN_OPS
    {
        return Err(fail(Code::InvalidArgument, msg::TOO_MANY_OPS));
    }
    if has_overlap(&t.success) || has_overlap(&t.failure) {
        return Err(fail(Code::InvalidArgument, msg::DUPLICATE_KEY));
    }
    if txn_size(t) > MAX_REQUEST_BYTES {
        return Err(fail(Code::InvalidArgument, msg::TOO_LARGE));
    }
    Ok(())
}

/// Evaluates the compares and applies the chosen branch as one revision (none if it
/// changes nothing). Gets in the branch read the state before the branch's writes; the core
/// only uses them in a write-free failure branch, where both readings agree.
pub fn apply_txn(store: &mut Store, t: &TxnRequest) -> TxnReply {
    let ok = t.compares.iter().all(|c| {
        let kv = store.get(&c.key);
        let actual = match c.target {
            CompareTarget::ModRevision => kv.map_or(0, |k| k.mod_revision),
            CompareTarget::CreateRevision => kv.map_or(0, |k| k.create_revision),
            CompareTarget::Version => kv.map_or(0, |k| k.version),
            // etcd fails a value compare on a missing key (no value to compare).
            CompareTarget::Value => return kv.is_some_and(|k| k.value == c.bytes),
        };
        actual == c.value
    });
    let branch = if ok { &t.success } else { &t.failure };
    let mut reads = Vec::new();
    let mut muts = Vec::new();
    for op in branch {
        match op {
            TxnOp::Put { key, value } => muts.push(Mutation::Put {
                key: key.clone(),
                value: value.clone(),
                lease: 0,
            }),
            TxnOp::Delete { key, range_end } => muts.push(Mutation::DeleteRange {
                key: key.clone(),
                end: range_end.clone(),
            }),
            TxnOp::Get { key } => reads.push(store.get(key).cloned()),
        }
    }
    store.write(&muts);
    TxnReply {
        succeeded: ok,
        header_revision: store.rev(),
        reads,
    }
}

/// `checkIntervals`: a put key twice, or a put inside a deleted range, in one branch.
fn has_overlap(ops: &[TxnOp]) -> bool {
    let mut puts: BTreeSet<&[u8]> = BTreeSet::new();
    let mut dels: Vec<(&[u8], &[u8])> = Vec::new();
    for op in ops {
        match op {
            TxnOp::Put { key, .. } => {
                if !puts.insert(key) {
                    return true;
                }
            }
            TxnOp::Delete { key, range_end } => dels.push((key, range_end)),
            TxnOp::Get { .. } => {}
        }
    }
    puts.iter()
        .any(|p| dels.iter().any(|(k, e)| in_range(p, k, e)))
}

/// Request size as the server counts it (protobuf payload, close enough to the limit).
pub fn txn_size(t: &TxnRequest) -> usize {
    let ops: usize = t
        .success
        .iter()
        .chain(&t.failure)
        .map(|o| o.wire_size())
        .sum();
    ops + t.compares.iter().map(|c| c.key.len() + 16).sum::<usize>()
}
