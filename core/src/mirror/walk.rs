//! Where a paged read over a list of windows is: the window, the cursor in it, and the
//! pager that bounds each read. One type for every bounded walk: the mirror's snapshot scan
//! and key counts, and the driver's own tools (`verify`, the preflight's size sample), so
//! that no read of either walks the rest of a range (docs/design.md, "Bounded scans").

use crate::etcd::{Cluster, Command, RangeRequest, SortBy};
use crate::mirror::keys::{before_end, Window};
use crate::mirror::pager::{Hints, Next, Pager};

/// A bounded walk over a list of windows.
#[derive(Debug, Clone)]
pub struct Walk {
    windows: Vec<Window>,
    window: usize,
    /// The next key to read in the current window; empty = the window's start.
    cursor: Vec<u8>,
    /// What bounds each read; callers feed it each reply (`advance`, `advance_count`).
    pub pager: Pager,
}

impl Walk {
    /// A walk of `windows` from `from` on (keys before it are skipped), its pages shaped by
    /// `hints`.
    pub fn new(windows: Vec<Window>, from: &[u8], hints: Hints) -> Walk {
        let window = windows
            .iter()
            .position(|w| before_end(from, &w.end))
            .unwrap_or(windows.len());
        Walk {
            windows,
            window,
            cursor: from.to_vec(),
            pager: Pager::with_hints(hints),
        }
    }

    /// The same windows from the start, with what the pager learned forgotten.
    pub fn restart(&mut self) {
        *self = Walk::new(std::mem::take(&mut self.windows), &[], Hints::new());
    }

    /// The window being read and the `[from, bound)` of its next page; `None` once every
    /// window is read.
    pub fn page(&self) -> Option<(&Window, Vec<u8>, Vec<u8>)> {
        let w = self.windows.get(self.window)?;
        let (from, bound) = self.pager.page(w, &self.cursor);
        Some((w, from, bound))
    }

    /// The read of the next page on `cluster`, pinned at `revision` (0: the current one);
    /// `None` once every window is read.
    pub fn read(
        &self,
        cluster: Cluster,
        revision: i64,
        limit: u32,
        count_only: bool,
        keys_only: bool,
    ) -> Option<Command> {
        let (_, key, range_end) = self.page()?;
        Some(Command::Range(RangeRequest {
            cluster,
            key,
            range_end,
            revision,
            limit: i64::from(limit),
            count_only,
            keys_only,
            sort: SortBy::Key,
        }))
    }

    /// Moves on as the pager said; true once every window is read.
    pub fn step(&mut self, next: Next) -> bool {
        match next {
            Next::From(c) => self.cursor = c,
            Next::Done => {
                self.window += 1;
                self.cursor = Vec::new();
                self.pager.reset();
            }
        }
        self.done()
    }

    /// Whether every window has been read.
    pub fn done(&self) -> bool {
        self.window >= self.windows.len()
    }
}
