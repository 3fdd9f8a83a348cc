//! Bounded, pinned reads of whole key windows, for the driver's own tools (`verify` and
//! `preflight`'s size sample).
//!
//! etcd answers a limited Range by walking every key of `[key, range_end)` under the index
//! lock that the cluster's writers also take. A tool that pages with an open end therefore
//! walks the rest of the range on every page: quadratic in the range, and each walk stalls
//! the source's writes for its whole length (about 170 ms per million keys). These reads
//! bound every page with the core's [`Pager`], as the mirror's own scans do
//! (docs/design.md, "Bounded scans"), and pin every page after the first at the first
//! page's revision, so a side is read as one snapshot.

use crate::exec::Executor;
use tidemark_core::classify::Failure;
use tidemark_core::etcd::{Cluster, KeyValue, RangeReply, Reply};
use tidemark_core::mirror::keys::Window;
use tidemark_core::mirror::pager::{Hints, PageReply};
use tidemark_core::mirror::walk::Walk;

/// Keys one page returns at most; also the density each page's bound aims at.
pub const PAGE_KEYS: u32 = 1000;
/// Keys one count read aims to walk: a count returns no keys, so it can span more than a
/// page (10,000 keys hold the source's index lock for about 2 ms).
pub const COUNT_KEYS: u32 = 10_000;

/// A paged read of a list of windows on one cluster: the core's [`Walk`], run through the
/// executor and pinned at the first reply's revision.
#[derive(Debug)]
pub struct PagedReader<'a> {
    exec: &'a Executor,
    cluster: Cluster,
    walk: Walk,
    limit: u32,
    /// The revision pages are read at; 0 until the first reply pins it.
    revision: i64,
}

impl<'a> PagedReader<'a> {
    /// A read of `windows` on `cluster`, `limit` keys per page at most.
    pub fn new(
        exec: &'a Executor,
        cluster: Cluster,
        windows: Vec<Window>,
        limit: u32,
    ) -> PagedReader<'a> {
        PagedReader {
            exec,
            cluster,
            walk: Walk::new(windows, &[], Hints::new()),
            limit: limit.max(1),
            revision: 0,
        }
    }

    /// The revision the read is pinned at (0 before its first page).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Keys the server walked (the replies' `count`) and keys it returned, so far.
    pub fn walked(&self) -> (u64, u64) {
        (self.walk.pager.walked, self.walk.pager.returned)
    }

    /// Whether every window has been read.
    pub fn done(&self) -> bool {
        self.walk.done()
    }

    /// The key-values of the next page, in key order (empty for a page that spanned a gap),
    /// or `None` once every window is read.
    pub async fn next_page(&mut self) -> Result<Option<Vec<KeyValue>>, Failure> {
        let Some((w, key, bound)) = self.walk.page().map(|(w, k, b)| (w.clone(), k, b)) else {
            return Ok(None);
        };
        let r = self.read(self.limit, false).await?;
        let listed = !r.kvs.is_empty();
        // A server that lists keys outside the window is not believed about them.
        let kvs: Vec<KeyValue> = r.kvs.into_iter().filter(|kv| w.contains(&kv.key)).collect();
        let reply = PageReply::of(&kvs, r.more, r.count, listed, self.limit);
        let next = self.walk.pager.advance(&w, &key, &bound, reply);
        self.walk.step(next);
        Ok(Some(kvs))
    }

    /// Counts the keys of the next span without reading them, or `None` once every window
    /// is read. Each count walks about [`COUNT_KEYS`] keys.
    pub async fn next_count(&mut self) -> Result<Option<u64>, Failure> {
        let Some((w, key, bound)) = self.walk.page().map(|(w, k, b)| (w.clone(), k, b)) else {
            return Ok(None);
        };
        // A count returns no keys: `count` is what it walked.
        let r = self.read(0, true).await?;
        let next = self
            .walk
            .pager
            .advance_count(&w, &key, &bound, r.count, COUNT_KEYS);
        self.walk.step(next);
        Ok(Some(u64::try_from(r.count).unwrap_or(0)))
    }

    /// Reads the walk's next page (it is there: the callers looked first).
    async fn read(&mut self, limit: u32, count_only: bool) -> Result<RangeReply, Failure> {
        let Some(cmd) = self
            .walk
            .read(self.cluster, self.revision, limit, count_only, false)
        else {
            return Err(Failure::Unknown {
                message: "a paged read past its last window".into(),
            });
        };
        let reply = self.exec.run(cmd).await?;
        let Reply::Range(r) = reply else {
            return Err(Failure::Unknown {
                message: format!("unexpected reply to a range read: {reply:?}"),
            });
        };
        if self.revision == 0 {
            self.revision = r.header_revision;
        }
        Ok(r)
    }
}
