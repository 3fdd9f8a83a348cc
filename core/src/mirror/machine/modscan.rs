//! The newest mod revision and the key count of a set of source windows, read as one
//! pinned snapshot in bounded keys-only pages.
//!
//! A source whose progress notifications cannot be trusted (etcd before 3.4.31/3.5.13) is
//! asked this to prove a genesis's replay caught up, and a drain asks it for its target.
//! One Range sorted by mod revision would answer it, but etcd then reads every key and
//! every value of the range in one request. Pages bounded by the pager cost one page each,
//! and pinning them at the first page's revision makes them one snapshot. See
//! docs/design.md, "Bounded scans".

use super::*;
use crate::mirror::keys::Window;
use crate::mirror::walk::Walk;

/// One snapshot scan in progress.
#[derive(Debug, Clone)]
pub(super) struct ModScan {
    walk: Walk,
    /// The revision every page after the first is pinned at (0 until the first answers).
    pub(super) at: i64,
    /// The newest mod revision and the number of keys seen so far.
    pub(super) max_mod: i64,
    pub(super) count: i64,
}

impl ModScan {
    pub(super) fn new(windows: Vec<Window>) -> ModScan {
        ModScan {
            walk: Walk::new(windows, &[], Default::default()),
            at: 0,
            max_mod: 0,
            count: 0,
        }
    }

    /// Starts over, for a snapshot compacted away under the scan.
    pub(super) fn restart(&mut self) {
        self.walk.restart();
        self.at = 0;
        self.max_mod = 0;
        self.count = 0;
    }

    /// The next page read, or `None` once every window is read.
    pub(super) fn cmd(&self, limit: u32) -> Option<Command> {
        self.walk.read(Cluster::Source, self.at, limit, false, true)
    }

    /// Takes one page; true once every window is read.
    pub(super) fn on_page(&mut self, mut r: RangeReply, limit: u32) -> bool {
        let Some((w, from, bound)) = self.walk.page().map(|(w, f, b)| (w.clone(), f, b)) else {
            return true;
        };
        if self.at == 0 {
            self.at = r.header_revision;
        }
        let listed = super::genesis::keep_inside(&mut r.kvs, Some(&w));
        // Keys at or past the bound belong to the next page (a server that ignored it).
        r.kvs.retain(|kv| before_end(&kv.key, &bound));
        for kv in &r.kvs {
            self.max_mod = self.max_mod.max(kv.mod_revision);
        }
        self.count += r.kvs.len() as i64;
        let reply = PageReply::of(&r.kvs, r.more, r.count, listed, limit);
        let next = self.walk.pager.advance(&w, &from, &bound, reply);
        self.walk.step(next)
    }
}
