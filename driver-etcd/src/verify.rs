//! An operator's key-by-key comparison of the target range with the rewritten source range
//! (`tidemark-mirror verify`), used by the demo and benchmarks to prove convergence.
//!
//! It reads each side as one snapshot, at the revision of its first page; the two sides are
//! read at different moments, so on a live source it can only be expected to match once the
//! mirror has caught up; callers retry.

use crate::exec::Executor;
use crate::paged::{PagedReader, PAGE_KEYS};
use std::cmp::Ordering;
use std::collections::VecDeque;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::Cluster;
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
    /// The source revision the comparison read (that of its first page).
    pub source_revision: i64,
}

impl Comparison {
    /// True when the target equals the rewritten source.
    pub fn equal(&self) -> bool {
        self.missing == 0 && self.divergent == 0 && self.orphan == 0
    }
}

/// One side of the comparison: its keys in target-key order, a page at a time.
struct Side<'a> {
    reader: PagedReader<'a>,
    /// `(target key, value)` of the page being compared.
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Maps a listed key to the target key it stands for, or drops it.
    map: Box<dyn Fn(Vec<u8>) -> Option<Vec<u8>> + 'a>,
}

impl Side<'_> {
    /// The next key-value, reading pages (some of them empty) until one has any.
    async fn front(&mut self) -> Result<Option<&(Vec<u8>, Vec<u8>)>, Failure> {
        while self.buf.is_empty() {
            let Some(page) = self.reader.next_page().await? else {
                break;
            };
            let map = &self.map;
            self.buf.extend(
                page.into_iter()
                    .filter_map(|kv| map(kv.key).map(|k| (k, kv.value))),
            );
        }
        Ok(self.buf.front())
    }
}

/// Compares the whole target range with the rewritten, exclude-filtered source range.
///
/// Both sides are read in bounded pages (`paged.rs`), each pinned at its first page's
/// revision, and merged in key order, so the comparison holds one page of each side in
/// memory whatever the range's size, and never walks the source's range more than about
/// three times over.
pub async fn compare(x: &Executor, ks: &KeySpace) -> Result<Comparison, Failure> {
    let mut src = Side {
        reader: PagedReader::new(x, Cluster::Source, ks.source_windows(), PAGE_KEYS),
        buf: VecDeque::new(),
        map: Box::new(|k: Vec<u8>| ks.rewrite(&k)),
    };
    let mut tgt = Side {
        reader: PagedReader::new(x, Cluster::Target, ks.target_windows(), PAGE_KEYS),
        buf: VecDeque::new(),
        // The fence key (and anything else that maps to no source key) is not compared.
        map: Box::new(|k: Vec<u8>| ks.unrewrite(&k).is_some().then_some(k)),
    };
    let mut c = Comparison::default();
    let note = |c: &mut Comparison, k: &[u8], what: &str| {
        if c.examples.len() < 10 {
            c.examples.push(format!("{what} {}", ks.redact(k)));
        }
    };
    loop {
        let s = src.front().await?.cloned();
        c.source_revision = src.reader.revision();
        let t = tgt.front().await?;
        let order = match (&s, t) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((sk, _)), Some((tk, _))) => sk.cmp(tk),
        };
        match order {
            Ordering::Less => {
                if let Some((k, _)) = &s {
                    c.missing += 1;
                    note(&mut c, k, "missing");
                }
                src.buf.pop_front();
                c.source_keys += 1;
            }
            Ordering::Greater => {
                if let Some((k, _)) = tgt.buf.pop_front() {
                    c.orphan += 1;
                    note(&mut c, &k, "orphan");
                }
                c.target_keys += 1;
            }
            Ordering::Equal => {
                let (sk, sv) = src.buf.pop_front().unwrap_or_default();
                let (_, tv) = tgt.buf.pop_front().unwrap_or_default();
                if sv != tv {
                    c.divergent += 1;
                    note(&mut c, &sk, "divergent");
                }
                c.source_keys += 1;
                c.target_keys += 1;
            }
        }
    }
    Ok(c)
}
