//! Bounded paging: every page reads `[cursor, bound)`, never `[cursor, window end)`.
//!
//! etcd (3.4 to 3.6) answers a limited Range by walking every key left in the requested
//! range to fill `count`, under the index read lock that the source's writers also take.
//! A scan that always asks for the rest of the range is therefore quadratic, and it stalls
//! the cluster it copies. The pager keeps each request's walk near one page: it picks the
//! page's upper bound from the key density the previous page showed, shrinks the span when
//! `count` says the bound held more keys than the page could return, and grows it while
//! pages come back short. See docs/design.md, "Bounded scans".
//!
//! A span is a fraction of the window's key space, as `point_map.rs` divides it: monotone
//! in key order, and learned from the byte values the keys use, so that the gaps between
//! them take little space. A bound is found in the points of a local base, the longest
//! prefix of the cursor whose share of the space is still much wider than the span, so a
//! page resolves keys that share a long prefix (`/registry/pods/kube-system/…`) as finely
//! as any others.

use std::collections::BTreeMap;

use super::keys::{before_end, Window};
use super::point_map::PointMap;
use crate::etcd::KeyValue;

/// Span of the first page of a window, as a fraction of its key space: small, so the first
/// request of an unknown key distribution walks little; empty pages grow it fast.
const FIRST_SPAN: f64 = 1.0 / (1u128 << 88) as f64;
/// How much an empty page widens the span before any key was seen in the window.
const EMPTY_GROWTH: f64 = 16.0;
/// How much a short page may widen the span at most.
const SHORT_GROWTH: f64 = 2.0;
/// The smallest span: below it an `f64` fraction of the space stops meaning anything.
const MIN_SPAN: f64 = 1e-280;
/// How much wider than the span a local base must be: a span is then at most 2^-32 of the
/// base's 2^128 points, so it resolves to a bound at least that finely.
const BASE_MARGIN: f64 = (1u64 << 32) as f64;
/// 2^128, to turn fractions of a base into its points.
const POINTS: f64 = 340_282_366_920_938_463_463_374_607_431_768_211_456.0;

/// Where a window's keys began when a pager last found them, and the bound that fit there.
///
/// etcd offers no read that finds the next key without walking up to it, so a pager that
/// knows nothing grows its span across the empty space before a window's first keys, and
/// the read that reaches them spans far more than one page: it walks the whole first run
/// of keys at once (every key of a window whose keys share a long prefix). A pager that
/// holds a hint reads from the window's start to `reach` instead, walking the gap (empty
/// when the hint was learned) and one page of keys. A stale hint costs at most the walk it
/// was meant to save; it never changes what is read. See docs/design.md, "Bounded scans".
///
/// Both ends are keys, not points: each pager learns its own map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The first key found (or, learned by a count, where the first read that found keys
    /// began: a count does not see its keys).
    gap_end: Vec<u8>,
    /// The bound of a read from `gap_end` that fits one page, as learned there.
    reach: Vec<u8>,
}

/// Hints by window start, handed from one paged read to the next over the same windows.
pub type Hints = BTreeMap<Vec<u8>, Hint>;

/// The density state of one paged read (one per scan, sweep or pass side).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pager {
    /// The fraction of the window's key space the next page should span; 0 = nothing
    /// learned yet in this window.
    span: f64,
    /// Whether a page of this window returned keys: empty pages then widen the span by
    /// doubling only, since a gap between key clusters ends where density resumes.
    seen: bool,
    /// Keys walked by etcd (the replies' `count`) and keys returned, for the walk ratio.
    pub walked: u64,
    pub returned: u64,
    /// What earlier reads learned of where each window's keys begin (kept across windows).
    hints: Hints,
    /// Keys to points, learned from the keys read (kept across windows).
    map: PointMap,
}

/// What one page taught the pager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Read on from this key.
    From(Vec<u8>),
    /// The window is exhausted.
    Done,
}

/// One reply to a page, as far as the pager needs it.
#[derive(Debug, Clone, Copy)]
pub struct PageReply<'a> {
    /// The first key the page returned: where the window's keys begin, on its first page
    /// that found any.
    pub first: Option<&'a [u8]>,
    /// The last key the page returned (after any filtering of foreign keys).
    pub last: Option<&'a [u8]>,
    /// Keys the page returned.
    pub returned: usize,
    /// The reply's `more`: the bound held more keys than the limit.
    pub more: bool,
    /// The reply's `count`: keys in `[cursor, bound)` (what etcd walked).
    pub count: i64,
    /// The page's key limit, the density the span is aimed at.
    pub limit: u32,
}

impl PageReply<'_> {
    /// What a page reply of `kvs` (already cut to the window) says. `listed` is whether
    /// the server listed any key at all: keys outside the window only is no progress, so
    /// the page is read again, narrower.
    pub fn of(kvs: &[KeyValue], more: bool, count: i64, listed: bool, limit: u32) -> PageReply<'_> {
        PageReply {
            first: kvs.first().map(|kv| kv.key.as_slice()),
            last: kvs.last().map(|kv| kv.key.as_slice()),
            returned: kvs.len(),
            more: more || (kvs.is_empty() && listed),
            count,
            limit,
        }
    }
}

/// Where the page at `cursor` starts: the window's start before the first page.
pub fn page_start(window: &Window, cursor: &[u8]) -> Vec<u8> {
    if cursor > window.start.as_slice() {
        cursor.to_vec()
    } else {
        window.start.clone()
    }
}

impl Pager {
    /// A pager that starts each window where `hints` say its keys begin.
    pub fn with_hints(hints: Hints) -> Pager {
        Pager {
            hints,
            ..Pager::default()
        }
    }

    /// The hints this pager holds: those it was given, and those it learned.
    pub fn hints(&self) -> &Hints {
        &self.hints
    }

    /// The hint that shapes the read at `from` in `window`: only a window's first read
    /// that found nothing yet, and only before the gap's end.
    fn hint_at(&self, window: &Window, from: &[u8]) -> Option<&Hint> {
        if self.span != 0.0 || self.seen {
            return None;
        }
        self.hints
            .get(&window.start)
            .filter(|h| from < h.gap_end.as_slice())
    }

    /// The span a reply is judged against, and whether a hint shaped the read.
    fn span_for(&self, window: &Window, cursor: &[u8]) -> (f64, bool) {
        match self.hint_at(window, cursor) {
            Some(h) => (self.distance(window, &h.gap_end, &h.reach), true),
            None if self.span == 0.0 => (FIRST_SPAN, false),
            None => (self.span, false),
        }
    }

    /// The fraction of `window`'s key space between keys `a <= b`, found in the points of
    /// their common prefix (so that it resolves keys that share a long one).
    fn distance(&self, window: &Window, a: &[u8], b: &[u8]) -> f64 {
        distance_in(&self.map, window, a, b)
    }

    /// The first key at least `span` past `from` in `window`, found in the points of the
    /// longest prefix of `from` wide enough for it; the window's end when none is.
    fn reach(&self, window: &Window, from: &[u8], span: f64) -> Vec<u8> {
        reach_in(&self.map, window, from, span)
    }

    /// Records where keys began, after the first read of a window that found any: `first`
    /// is the first key found (a page), or `None` when the read only counted them, which
    /// places them no closer than where the read began (`cursor`).
    fn learn(
        &mut self,
        window: &Window,
        cursor: &[u8],
        first: Option<&[u8]>,
        hinted: bool,
        was_seen: bool,
    ) {
        if !self.seen || was_seen {
            return;
        }
        let gap_end = match (hinted, self.hints.get(&window.start), first) {
            // Keys written into the gap since the hint was learned move it back.
            (true, Some(h), Some(first)) => h.gap_end.as_slice().min(first).to_vec(),
            // A count read from the window's start says nothing finer than the hint.
            (true, Some(_), None) => return,
            (_, _, first) => first.unwrap_or(cursor).to_vec(),
        };
        let reach = self.reach(window, &gap_end, self.span);
        self.hints
            .insert(window.start.clone(), Hint { gap_end, reach });
    }

    /// The `[key, range_end)` of the page at `cursor` in `window`.
    pub fn page(&self, window: &Window, cursor: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let key = page_start(window, cursor);
        let end = self.bound(window, &key);
        (key, end)
    }

    /// [`Pager::advance`] for the page [`Pager::page`] asked for at `cursor`.
    pub fn advance_page(&mut self, window: &Window, cursor: &[u8], reply: PageReply<'_>) -> Next {
        let (from, bound) = self.page(window, cursor);
        self.advance(window, &from, &bound, reply)
    }

    /// Forgets the density learned, for a new window.
    pub fn reset(&mut self) {
        self.span = 0.0;
        self.seen = false;
    }

    /// The exclusive upper bound of the page that starts at `cursor` in `window`:
    /// always after `cursor`, never past the window's end.
    pub fn bound(&self, window: &Window, cursor: &[u8]) -> Vec<u8> {
        let bound = match self.hint_at(window, cursor) {
            Some(h) => clip(h.reach.clone(), window),
            None => {
                let span = if self.span == 0.0 {
                    FIRST_SPAN
                } else {
                    self.span
                };
                self.reach(window, cursor, span)
            }
        };
        if bound == window.end || bound.as_slice() > cursor {
            bound
        } else {
            // The cursor is longer than the map resolves: the next key after it.
            next_key(cursor)
        }
    }

    /// Learns from the reply to the page `[cursor, bound)` and says where to go on.
    pub fn advance(
        &mut self,
        window: &Window,
        cursor: &[u8],
        bound: &[u8],
        reply: PageReply<'_>,
    ) -> Next {
        self.walked += u64::try_from(reply.count).unwrap_or(0);
        self.returned += reply.returned as u64;
        let (span, hinted) = self.span_for(window, cursor);
        let was_seen = self.seen;
        let next = self.advance_span(window, cursor, bound, span, reply);
        self.learn_bytes(window, &next, [reply.first, reply.last]);
        self.learn(window, cursor, reply.first, hinted, was_seen);
        next
    }

    /// Teaches the map the byte values of `keys`. When that changes the map, the span of
    /// the page at `next` is carried over as the same keys, measured anew.
    fn learn_bytes(&mut self, window: &Window, next: &Next, keys: [Option<&[u8]>; 2]) {
        let base = common_prefix(&window.start, &window.end);
        let tails = keys.map(|k| k.map(|k| k.get(base..).unwrap_or(&[])));
        if tails.iter().flatten().all(|t| self.map.knows(t)) {
            // Most pages: nothing new, and no copy of the map to make.
            return;
        }
        let old = self.map.clone();
        for tail in tails.into_iter().flatten() {
            self.map.learn(tail);
        }
        let Next::From(from) = next else {
            return;
        };
        if self.span == 0.0 {
            return;
        }
        let to = reach_in(&old, window, from, self.span);
        if to != window.end {
            self.span = self.distance(window, from, &to).max(MIN_SPAN);
        }
    }

    fn advance_span(
        &mut self,
        window: &Window,
        cursor: &[u8],
        bound: &[u8],
        span: f64,
        reply: PageReply<'_>,
    ) -> Next {
        // Aim below the limit, so that most pages end at their bound (walk == return).
        let aim = f64::from(reply.limit.max(4)) * 0.75;
        self.seen |= reply.returned > 0;
        // Only foreign keys listed, and the server counts none in the span: nothing to
        // read again there (a server that lists keys it was not asked for on every page
        // would otherwise hold the read at one page forever).
        let foreign_only = reply.last.is_none() && reply.count <= 0;
        if reply.more && !foreign_only {
            // The bound held more keys than the limit. Keys cluster (a common prefix, then
            // digits), so the density of the whole requested span says little; the keys
            // the page returned say how far `aim` keys reach from here.
            let count = reply.count.max(1) as f64;
            let by_count = span * aim / count;
            return match reply.last {
                Some(last) => {
                    // The keys' own spread, not the empty space before them, when the page
                    // has enough of them to show one.
                    let from = match reply.first {
                        Some(first) if reply.returned >= 2 => first,
                        _ => cursor,
                    };
                    let used = self.distance(window, from, &next_key(last));
                    let by_page = used * aim / reply.returned.max(1) as f64;
                    self.span = by_count.min(by_page).max(MIN_SPAN);
                    Next::From(next_key(last))
                }
                // Only keys outside the window were listed: read the same page again with
                // a narrower span.
                None => {
                    self.span = by_count.max(MIN_SPAN);
                    Next::From(cursor.to_vec())
                }
            };
        }
        self.span = grown(span, reply.returned as f64, aim, self.seen);
        if bound == window.end.as_slice() || !before_end(bound, &window.end) {
            Next::Done
        } else {
            Next::From(bound.to_vec())
        }
    }
}

impl Pager {
    /// Learns from a count-only read of `[cursor, bound)` that walked `count` keys, and
    /// says where to go on. A count is exact however many keys the span held, so the read
    /// never repeats: only the next span adapts, aiming at `limit` keys walked per read.
    pub fn advance_count(
        &mut self,
        window: &Window,
        cursor: &[u8],
        bound: &[u8],
        count: i64,
        limit: u32,
    ) -> Next {
        let count = u64::try_from(count).unwrap_or(0);
        self.walked += count;
        let (span, hinted) = self.span_for(window, cursor);
        let was_seen = self.seen;
        let aim = f64::from(limit.max(4)) * 0.75;
        self.seen |= count > 0;
        let count = count as f64;
        self.span = if count > aim {
            (span * aim / count).max(MIN_SPAN)
        } else {
            grown(span, count, aim, self.seen)
        };
        self.learn(window, cursor, None, hinted, was_seen);
        if bound == window.end.as_slice() || !before_end(bound, &window.end) {
            Next::Done
        } else {
            Next::From(bound.to_vec())
        }
    }
}

/// The span after a read of `span` that found `found` keys, no more than `aim`: an empty
/// one grows fast until the window's first keys (then by doubling, since a gap between key
/// clusters ends where density resumes), a short one by what it lacked, at most twice.
fn grown(span: f64, found: f64, aim: f64, seen: bool) -> f64 {
    let factor = if found == 0.0 {
        if seen {
            2.0
        } else {
            EMPTY_GROWTH
        }
    } else {
        (aim / found).floor().clamp(1.0, SHORT_GROWTH)
    };
    (span * factor).min(1.0)
}

/// [`Pager::distance`] in `map`.
fn distance_in(map: &PointMap, window: &Window, a: &[u8], b: &[u8]) -> f64 {
    let base = common_prefix(&window.start, &window.end);
    let common = a
        .iter()
        .zip(b)
        .take_while(|(x, y)| x == y)
        .count()
        .max(base);
    let (Some(ta), Some(tb)) = (a.get(common..), b.get(common..)) else {
        return 0.0;
    };
    let width = map.width(&a[base..common]);
    let points = map.point(tb).saturating_sub(map.point(ta));
    width * (points as f64 / POINTS)
}

/// [`Pager::reach`] in `map`.
fn reach_in(map: &PointMap, window: &Window, from: &[u8], span: f64) -> Vec<u8> {
    let base = common_prefix(&window.start, &window.end);
    let Some(tail) = from.get(base..) else {
        return window.end.clone();
    };
    // The longest prefix of `from` whose share is at least BASE_MARGIN spans wide.
    let mut local = base;
    let mut width = 1.0f64;
    for &b in tail {
        let w = width * map.width(&[b]);
        if w < span * BASE_MARGIN {
            break;
        }
        width = w;
        local += 1;
    }
    // Shorter bases until the bound fits under one.
    loop {
        let points = (span / width * POINTS).min(POINTS);
        // `points` < 2^128 unless the span is the whole base: that saturates, as it should.
        let add = points as u128;
        let bound = map
            .point(&from[local..])
            .checked_add(add.max(1))
            .and_then(|p| map.key_at(&from[..local], p));
        if let Some(bound) = bound {
            return clip(bound, window);
        }
        if local == base {
            return window.end.clone();
        }
        local -= 1;
        width /= map.width(&from[local..=local]);
    }
}

/// Bytes that every key of the window shares (the end `[0]`, +infinity, shares none).
fn common_prefix(start: &[u8], end: &[u8]) -> usize {
    if end == [0] {
        return 0;
    }
    start.iter().zip(end).take_while(|(a, b)| a == b).count()
}

fn clip(bound: Vec<u8>, window: &Window) -> Vec<u8> {
    if before_end(&bound, &window.end) {
        bound
    } else {
        window.end.clone()
    }
}

/// The smallest key after `k`.
fn next_key(k: &[u8]) -> Vec<u8> {
    let mut n = k.to_vec();
    n.push(0);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Pages through `keys` (sorted) inside `window` as etcd would answer, returning the
    /// keys read in order and what etcd walked in total.
    fn page_all(keys: &BTreeSet<Vec<u8>>, window: &Window, limit: u32) -> (Vec<Vec<u8>>, u64) {
        let (read, p, _) = page_with(Pager::default(), keys, window, limit);
        (read, p.walked)
    }

    /// As [`page_all`] with the pager `p` (which may hold hints); returns the keys read,
    /// the pager, and the keys walked by the first read that found any.
    fn page_with(
        mut p: Pager,
        keys: &BTreeSet<Vec<u8>>,
        window: &Window,
        limit: u32,
    ) -> (Vec<Vec<u8>>, Pager, u64) {
        let mut cursor = window.start.clone();
        let mut out = Vec::new();
        let mut most = 0u64; // the first hit's walk
        for _ in 0..1_000_000 {
            let bound = p.bound(window, &cursor);
            assert!(bound.as_slice() > cursor.as_slice() || bound == window.end);
            let inside: Vec<&Vec<u8>> = keys
                .iter()
                .filter(|k| k.as_slice() >= cursor.as_slice() && before_end(k, &bound))
                .collect();
            let page: Vec<Vec<u8>> = inside
                .iter()
                .take(limit as usize)
                .map(|k| k.to_vec())
                .collect();
            if most == 0 {
                most = inside.len() as u64;
            }
            let reply = PageReply {
                first: page.first().map(Vec::as_slice),
                last: page.last().map(Vec::as_slice),
                returned: page.len(),
                more: inside.len() > limit as usize,
                count: inside.len() as i64,
                limit,
            };
            out.extend(page.iter().cloned());
            match p.advance(window, &cursor, &bound, reply) {
                Next::Done => return (out, p, most),
                Next::From(c) => cursor = c,
            }
        }
        panic!("the pager did not finish");
    }

    fn window(prefix: &[u8]) -> Window {
        let mut end = prefix.to_vec();
        *end.last_mut().expect("non-empty prefix") += 1;
        Window {
            start: prefix.to_vec(),
            end,
        }
    }

    #[test]
    fn a_dense_numbered_range_is_walked_a_few_times_not_quadratically() {
        let keys: BTreeSet<Vec<u8>> = (0..20_000u32)
            .map(|i| format!("/bench/k{i:010}").into_bytes())
            .collect();
        let (read, walked) = page_all(&keys, &window(b"/bench/"), 1000);
        assert_eq!(read, keys.iter().cloned().collect::<Vec<_>>());
        // Unbounded pages of 1000 would walk about 20k * 20 / 2 = 200k keys. Decimal keys
        // leave a gap at every carry, and the first page past a gap may walk the block
        // behind it: about one extra walk of the range per decimal scale above the page.
        assert!(walked < 5 * 20_000, "walked {walked} keys for 20000");
    }

    #[test]
    fn keys_under_a_long_shared_prefix_are_paged_finely() {
        // Every key shares 28 bytes after the window's own prefix, more than a 128-bit
        // point resolves: the bound must be found under a longer, local base, or each page
        // walks the rest of the run.
        let keys: BTreeSet<Vec<u8>> = (0..20_000u32)
            .map(|i| {
                format!(
                    "/registry/pods/kube-system/coredns-{:08x}",
                    i.wrapping_mul(2_654_435_761)
                )
                .into_bytes()
            })
            .collect();
        let (read, walked) = page_all(&keys, &window(b"/registry/"), 1000);
        assert_eq!(read, keys.iter().cloned().collect::<Vec<_>>());
        // One walk of the run by the first read that reaches it, one by the pages.
        assert!(walked < 3 * 20_000, "walked {walked} keys for 20000");
    }

    #[test]
    fn a_window_read_again_starts_where_its_keys_began() {
        // Every key shares `/bench/k`: the first read that reaches them, after growing its
        // span across the empty space before them, walks all of them.
        let keys: BTreeSet<Vec<u8>> = (0..20_000u32)
            .map(|i| format!("/bench/k{i:010}").into_bytes())
            .collect();
        let w = window(b"/bench/");
        let (_, first, hit) = page_with(Pager::default(), &keys, &w, 1000);
        assert_eq!(hit, 20_000, "without a hint the first hit walks the run");
        let (read, _, hit) = page_with(Pager::with_hints(first.hints().clone()), &keys, &w, 1000);
        assert_eq!(read, keys.iter().cloned().collect::<Vec<_>>());
        assert!(hit <= 1000, "with the hint the first read walked {hit}");
    }

    /// Counts `keys` in `window` in bounded count-only reads as etcd would answer them;
    /// returns the total and the pager.
    fn count_all(p: Pager, keys: &BTreeSet<Vec<u8>>, window: &Window, limit: u32) -> (u64, Pager) {
        let mut p = p;
        let mut cursor = window.start.clone();
        let mut total = 0;
        for _ in 0..1_000_000 {
            let bound = p.bound(window, &cursor);
            let count = keys
                .iter()
                .filter(|k| k.as_slice() >= cursor.as_slice() && before_end(k, &bound))
                .count() as u64;
            total += count;
            match p.advance_count(window, &cursor, &bound, count as i64, limit) {
                Next::Done => return (total, p),
                Next::From(c) => cursor = c,
            }
        }
        panic!("the count did not finish");
    }

    #[test]
    fn a_count_keeps_the_hint_a_scan_learned() {
        let keys: BTreeSet<Vec<u8>> = (0..20_000u32)
            .map(|i| format!("/bench/k{i:010}").into_bytes())
            .collect();
        let w = window(b"/bench/");
        let (_, scan, _) = page_with(Pager::default(), &keys, &w, 1000);
        let (total, count) = count_all(Pager::with_hints(scan.hints().clone()), &keys, &w, 1000);
        assert_eq!(total, 20_000);
        // A count does not see where its keys are: it must not move the scan's hint to
        // where its own first read began.
        assert_eq!(count.hints(), scan.hints());
        let (_, _, hit) = page_with(Pager::with_hints(count.hints().clone()), &keys, &w, 1000);
        assert!(hit <= 1000, "after the count the first read walked {hit}");
    }

    proptest! {
        /// Hints learned from other keys (a stale hint) change what each read walks, never
        /// what is read.
        #[test]
        fn a_stale_hint_reads_every_key_once_in_order(
            before in proptest::collection::btree_set(
                proptest::collection::vec(any::<u8>(), 0..12), 1..100),
            after in proptest::collection::btree_set(
                proptest::collection::vec(any::<u8>(), 0..12), 0..200),
            limit in 1u32..30,
        ) {
            let w = window(b"/p/");
            let prefixed = |set: BTreeSet<Vec<u8>>| -> BTreeSet<Vec<u8>> {
                set.into_iter().map(|mut k| {
                    let mut key = b"/p/".to_vec();
                    key.append(&mut k);
                    key
                }).collect()
            };
            let (_, learned, _) = page_with(Pager::default(), &prefixed(before), &w, limit);
            let keys = prefixed(after);
            let (read, p, _) = page_with(Pager::with_hints(learned.hints().clone()), &keys, &w, limit);
            prop_assert_eq!(&read, &keys.iter().cloned().collect::<Vec<_>>());
            prop_assert!(p.walked <= 8 * keys.len() as u64 + 64, "walked {} for {}", p.walked, keys.len());
        }

        /// Every key is read exactly once and in order, whatever the distribution, and
        /// the walk stays linear.
        #[test]
        fn every_key_is_read_once_in_order(
            raw in proptest::collection::btree_set(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..24),
                0..400),
            limit in 1u32..50,
        ) {
            let w = window(b"/p/");
            let keys: BTreeSet<Vec<u8>> = raw.into_iter().map(|mut k| {
                let mut key = b"/p/".to_vec();
                key.append(&mut k);
                key
            }).collect();
            let (read, walked) = page_all(&keys, &w, limit);
            prop_assert_eq!(&read, &keys.iter().cloned().collect::<Vec<_>>());
            prop_assert!(walked <= 8 * keys.len() as u64 + 64, "walked {} for {}", walked, keys.len());
        }
    }
}
