//! An operator's key-by-key comparison of the target range with the rewritten source range
//! (`tidemark-mirror verify`), used by the demo and benchmarks to prove convergence.
//!
//! It reads both sides unpinned at their latest revisions, so on a live source it can only
//! be expected to match once the mirror has caught up; callers retry.

use crate::exec::Executor;
use std::collections::BTreeMap;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{Cluster, Command, RangeRequest, Reply, SortBy};
use tidemark_core::mirror::KeySpace;

/// The outcome of one comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub source_keys: u64,
    pub target_keys: u64,
    /// In the source, not in the target.
    pub missing: u64,
    /// In both, with different values.
    pub divergent: u64,
    /// In the target range, not in the source (excluding the fence).
    pub orphan: u64,
    /// Up to 10 differing keys, redacted.
    pub examples: Vec<String>,
    /// Source header revision of the first page read.
    pub source_revision: i64,
}

impl Comparison {
    /// True when the target equals the rewritten source.
    pub fn equal(&self) -> bool {
        self.missing == 0 && self.divergent == 0 && self.orphan == 0
    }
}

async fn read_all(
    x: &Executor,
    cluster: Cluster,
    start: Vec<u8>,
    end: Vec<u8>,
) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, i64), Failure> {
    let mut out = Vec::new();
    let mut key = start;
    let mut first_rev = 0;
    loop {
        let r = x
            .run(Command::Range(RangeRequest {
                cluster,
                key: key.clone(),
                range_end: end.clone(),
                revision: 0,
                // Large pages: etcd counts the whole remaining range on every limited
                // read, so small pages make a full scan quadratic.
                limit: 10_000,
                count_only: false,
                keys_only: false,
                sort: SortBy::Key,
            }))
            .await?;
        let Reply::Range(r) = r else {
            return Err(Failure::Unknown {
                message: "unexpected reply to a range read".into(),
            });
        };
        if first_rev == 0 {
            first_rev = r.header_revision;
        }
        let last = r.kvs.last().map(|kv| kv.key.clone());
        out.extend(r.kvs.into_iter().map(|kv| (kv.key, kv.value)));
        match (r.more, last) {
            (true, Some(mut k)) => {
                k.push(0);
                key = k;
            }
            _ => return Ok((out, first_rev)),
        }
    }
}

/// Compares the whole target range with the rewritten, exclude-filtered source range.
pub async fn compare(x: &Executor, ks: &KeySpace) -> Result<Comparison, Failure> {
    let (ss, se) = ks.source_range();
    let (ts, te) = ks.target_range();
    let (src, source_revision) = read_all(x, Cluster::Source, ss, se).await?;
    let (tgt, _) = read_all(x, Cluster::Target, ts, te).await?;
    let want: BTreeMap<Vec<u8>, Vec<u8>> = src
        .into_iter()
        .filter(|(k, _)| ks.in_scope(k))
        .filter_map(|(k, v)| ks.rewrite(&k).map(|t| (t, v)))
        .collect();
    let have: BTreeMap<Vec<u8>, Vec<u8>> = tgt
        .into_iter()
        .filter(|(k, _)| ks.unrewrite(k).is_some())
        .collect();
    let mut c = Comparison {
        source_keys: want.len() as u64,
        target_keys: have.len() as u64,
        source_revision,
        ..Default::default()
    };
    let note = |c: &mut Comparison, k: &[u8], what: &str| {
        if c.examples.len() < 10 {
            c.examples.push(format!("{what} {}", ks.redact(k)));
        }
    };
    for (k, v) in &want {
        match have.get(k) {
            None => {
                c.missing += 1;
                note(&mut c, k, "missing");
            }
            Some(tv) if tv != v => {
                c.divergent += 1;
                note(&mut c, k, "divergent");
            }
            Some(_) => {}
        }
    }
    for k in have.keys() {
        if !want.contains_key(k) {
            c.orphan += 1;
            note(&mut c, k, "orphan");
        }
    }
    Ok(c)
}
