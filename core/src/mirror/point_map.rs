//! The pager's map from keys to points: monotone in key order, and shaped by the bytes the
//! keys actually use.
//!
//! The pager sizes each page as a span of points, so the map decides where a page's bound
//! falls. Mapping a key's bytes straight to a big-endian number wastes most of the space on
//! byte values no key uses: decimal keys fill 10 of 256 values at every position, and the
//! empty space after each `…9` (a decimal carry) is 24 times the block before it. A page
//! whose span grows across such a gap then reaches deep into the block behind it, and etcd
//! walks all of it under its index lock.
//!
//! This map codes a key like an arithmetic coder: every byte value gets a share of the
//! interval its prefix maps to, in byte order, so the map stays monotone. Byte values seen
//! in keys get `SEEN_WEIGHT` times the share of the others, which closes the gaps between
//! the digits (or letters) a key range actually uses. Unseen values keep a share, so a key
//! that uses them still has points of its own, only fewer of them. Before any key is seen
//! every byte has the same share, which is the plain big-endian map. See docs/design.md,
//! "Bounded scans".

use crate::etcd::prefix_end;

/// How much more of the interval a seen byte value gets than an unseen one. Larger closes
/// gaps better, but a byte value first seen late then packs its keys that much denser than
/// the pager expects, and one read walks that many more of them.
const SEEN_WEIGHT: u32 = 16;
/// Bytes of a key (after the window's common prefix) that teach the map.
const LEARNED_BYTES: usize = 64;

/// A monotone map from key tails to points of a 128-bit space, one alphabet for every
/// byte position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PointMap {
    /// Byte values seen in keys, as a bit set.
    seen: [u64; 4],
    /// `cum[b]`: the summed weights of the byte values below `b`; `cum[256]` is the total.
    cum: [u32; 257],
}

impl Default for PointMap {
    fn default() -> PointMap {
        PointMap {
            seen: [0; 4],
            cum: std::array::from_fn(|i| i as u32),
        }
    }
}

impl PointMap {
    fn is_seen(&self, b: u8) -> bool {
        self.seen[usize::from(b >> 6)] & (1 << (b & 63)) != 0
    }

    /// Where byte `b`'s share starts, its width, and the total they are shares of.
    fn share(&self, b: u8) -> (u128, u128, u128) {
        let (lo, hi) = (self.cum[usize::from(b)], self.cum[usize::from(b) + 1]);
        (lo.into(), (hi - lo).into(), self.cum[256].into())
    }

    /// Whether every byte value of `tail` that [`PointMap::learn`] would read is known.
    pub(crate) fn knows(&self, tail: &[u8]) -> bool {
        tail.iter().take(LEARNED_BYTES).all(|&b| self.is_seen(b))
    }

    /// Marks the byte values of `tail` as used; says whether the map changed (points of the
    /// old map then mean nothing to the new one).
    pub(crate) fn learn(&mut self, tail: &[u8]) -> bool {
        let mut changed = false;
        for &b in tail.iter().take(LEARNED_BYTES) {
            if !self.is_seen(b) {
                self.seen[usize::from(b >> 6)] |= 1 << (b & 63);
                changed = true;
            }
        }
        if changed {
            let mut sum = 0;
            for v in 0..=255u8 {
                self.cum[usize::from(v)] = sum;
                sum += if self.is_seen(v) { SEEN_WEIGHT } else { 1 };
            }
            self.cum[256] = sum;
        }
        changed
    }

    /// The fraction of the space that the keys starting with `tail` take (0 once it is too
    /// small for an `f64`).
    pub(crate) fn width(&self, tail: &[u8]) -> f64 {
        let mut w = 1.0f64;
        for &b in tail {
            let (_, width, total) = self.share(b);
            // Shares are at most 2^16 wide: exact in an f64.
            w *= width as f64 / total as f64;
        }
        w
    }

    /// The point of a key tail. A tail that is a prefix of another maps to its start, and
    /// bytes past the map's precision are ignored, so distinct keys may share a point.
    pub(crate) fn point(&self, tail: &[u8]) -> u128 {
        let (mut lo, mut range) = (0u128, u128::MAX);
        for &b in tail {
            let (start, width, total) = self.share(b);
            let step = range / total;
            if step == 0 {
                break;
            }
            // No overflow: lo + step * total <= lo + range, which the parent fits in.
            lo += step * start;
            range = step * width;
        }
        lo
    }

    /// The shortest key, `base` then a tail, whose point is at least `p`; `None` when every
    /// key under `base` maps below `p`. So a key above a cursor's point is above the cursor.
    pub(crate) fn key_at(&self, base: &[u8], p: u128) -> Option<Vec<u8>> {
        let (mut lo, mut range) = (0u128, u128::MAX);
        let mut key = base.to_vec();
        loop {
            if p <= lo {
                return Some(key);
            }
            let step = range / self.cum[256] as u128;
            // The first byte value whose interval reaches past `p`.
            let child = match step {
                0 => None,
                _ => {
                    let reach = |b: u8| lo + step * u128::from(self.cum[usize::from(b) + 1]);
                    // `cum` is increasing: bisect for the first byte value reaching past `p`.
                    let i = self.cum[1..].partition_point(|&c| lo + step * u128::from(c) <= p);
                    u8::try_from(i).ok().filter(|&b| reach(b) > p)
                }
            };
            let Some(b) = child else {
                // `p` lies past every key under `key` (in the coder's rounding slack, or
                // beyond its precision): the next key after all of them.
                return after_all(base, &key);
            };
            let (start, width, _) = self.share(b);
            key.push(b);
            lo += step * start;
            range = step * width;
        }
    }
}

/// The smallest key after every key that starts with `key`, if it still starts with `base`.
fn after_all(base: &[u8], key: &[u8]) -> Option<Vec<u8>> {
    if key.len() == base.len() {
        return None;
    }
    let end = prefix_end(key);
    (end.starts_with(base) && end.len() > base.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map_with(seen: &[u8]) -> PointMap {
        let mut m = PointMap::default();
        m.learn(seen);
        m
    }

    #[test]
    fn before_learning_it_is_the_big_endian_map() {
        let m = PointMap::default();
        assert!(m.point(b"a") < m.point(b"a\0\x01"));
        assert!(m.point(b"a\xff") < m.point(b"b"));
        assert_eq!(m.point(b""), 0);
        assert_eq!(m.key_at(b"/p/", 0), Some(b"/p/".to_vec()));
    }

    #[test]
    fn learned_digits_close_the_gap_at_a_carry() {
        // The empty space after `k09…`, in blocks like the one before it.
        let gap_in_blocks = |m: &PointMap| {
            let gap = m.point(b"k10") - m.point(b"k09\xff");
            let block = m.point(b"k09") - m.point(b"k00");
            gap as f64 / block as f64
        };
        let uniform = gap_in_blocks(&PointMap::default());
        let learned = gap_in_blocks(&map_with(b"0123456789k"));
        assert!(uniform > 20.0, "uniform bytes leave {uniform} blocks");
        assert!(
            learned < uniform / 8.0,
            "learned bytes leave {learned} blocks"
        );
    }

    proptest! {
        /// The map is monotone, and `key_at` is a ceiling: what it returns maps at or
        /// above the point, and every key that maps below the point comes before it.
        #[test]
        fn monotone_and_key_at_is_a_ceiling(
            seen in proptest::collection::vec(any::<u8>(), 0..40),
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..40),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(255u8), any::<u8>()], 0..40),
            p in any::<u128>(),
        ) {
            let m = map_with(&seen);
            let (lo, hi) = if a <= b { (&a, &b) } else { (&b, &a) };
            prop_assert!(m.point(lo) <= m.point(hi));
            let base = b"/p/";
            match m.key_at(base, p) {
                Some(k) => {
                    prop_assert!(k.starts_with(base));
                    prop_assert!(m.point(&k[base.len()..]) >= p);
                    // A key whose point is below `p` is before the returned key.
                    if m.point(&a) < p {
                        let mut ka = base.to_vec();
                        ka.extend_from_slice(&a);
                        prop_assert!(ka < k);
                    }
                }
                None => prop_assert!(m.point(&a) < p),
            }
        }
    }
}
