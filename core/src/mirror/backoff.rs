//! Retry curves and pacing, on core time with seeded jitter.

use crate::rng::Rng;
use crate::time::Instant;
use std::time::Duration;

/// Exponential backoff with "equal jitter": each delay is half fixed, half random, so
/// agents restarted together spread out but never retry faster than half the curve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The curve for "too many requests": slower start and a higher cap than the
    /// transient curve, so a throttled target gets real relief.
    pub fn throttled(initial: Duration, max: Duration) -> Self {
        Backoff::new(
            (initial * 2).max(Duration::from_secs(2)),
            (max * 2).max(Duration::from_secs(60)),
        )
    }

    /// Consecutive failures so far.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The next delay; grows until `max`.
    pub fn next_delay(&mut self, rng: &mut Rng) -> Duration {
        let exp = self.attempt.min(30);
        self.attempt = self.attempt.saturating_add(1);
        let base = self.initial.saturating_mul(1u32 << exp).min(self.max);
        let half = base / 2;
        let jitter_ns = rng.below(
            u64::try_from(half.as_nanos())
                .unwrap_or(u64::MAX)
                .saturating_add(1),
        );
        half + Duration::from_nanos(jitter_ns)
    }

    /// Success: start over from `initial`.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// `maxOpsPerSecond` as a GCRA token bucket with a one-second burst.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacer {
    /// Nanoseconds per op; 0 = unpaced.
    ns_per_op: u64,
    /// Theoretical arrival time of the next op.
    tat: Instant,
}

const BURST: Duration = Duration::from_secs(1);

impl Pacer {
    pub fn new(ops_per_second: u32) -> Self {
        let ns_per_op = if ops_per_second == 0 {
            0
        } else {
            1_000_000_000 / u64::from(ops_per_second)
        };
        Pacer {
            ns_per_op,
            tat: Instant::ZERO,
        }
    }

    /// Whether pacing is on.
    pub fn enabled(&self) -> bool {
        self.ns_per_op > 0
    }

    /// When `n` ops may go: `now` if allowed, else a later instant. Does not consume.
    pub fn ready_at(&self, now: Instant) -> Instant {
        if !self.enabled() {
            return now;
        }
        let tat = self.tat.max(now);
        let earliest = Instant(
            tat.0
                .saturating_sub(u64::try_from(BURST.as_nanos()).unwrap_or(u64::MAX)),
        );
        earliest.max(now)
    }

    /// Records that `n` ops were sent at `now`.
    pub fn consume(&mut self, now: Instant, n: u64) {
        if self.enabled() {
            self.tat = Instant(
                self.tat
                    .max(now)
                    .0
                    .saturating_add(n.saturating_mul(self.ns_per_op)),
            );
        }
    }

    /// How much pacing is already queued beyond `now`.
    pub fn queued(&self, now: Instant) -> Duration {
        self.tat.saturating_duration_since(now)
    }

    /// How long `n` more ops take at the configured rate.
    pub fn cost(&self, n: u64) -> Duration {
        Duration::from_nanos(n.saturating_mul(self.ns_per_op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

    proptest! {
        #[test]
        fn delays_stay_within_bounds_and_are_deterministic(seed in any::<u64>(), init_ms in 1u64..5000, max_ms in 1u64..120_000, n in 1usize..40) {
            let init = Duration::from_millis(init_ms);
            let max = Duration::from_millis(max_ms);
            let mut a = Backoff::new(init, max);
            let mut b = Backoff::new(init, max);
            let (mut ra, mut rb) = (Rng::new(seed), Rng::new(seed));
            let cap = max.max(init);
            for i in 0..n {
                let d = a.next_delay(&mut ra);
                prop_assert_eq!(d, b.next_delay(&mut rb));
                prop_assert!(d <= cap, "attempt {} delay {:?} > cap {:?}", i, d, cap);
                prop_assert!(d >= init.min(cap) / 2);
            }
        }
    }

    #[test]
    fn grows_then_caps_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let mut r = Rng::new(1);
        let ds: Vec<_> = (0..10).map(|_| b.next_delay(&mut r)).collect();
        assert!(ds[0] <= Duration::from_secs(1));
        assert!(ds[9] >= Duration::from_secs(15));
        b.reset();
        assert!(b.next_delay(&mut r) <= Duration::from_secs(1));
    }

    #[test]
    fn pacer_allows_a_burst_then_spaces_ops() {
        let mut p = Pacer::new(100);
        let t0 = Instant(10_000_000_000);
        assert_eq!(p.ready_at(t0), t0);
        p.consume(t0, 100); // one second of ops
        assert_eq!(p.ready_at(t0), t0, "a full burst is allowed");
        p.consume(t0, 100);
        let next = p.ready_at(t0);
        assert_eq!(next, t0 + Duration::from_secs(1));
        assert_eq!(p.queued(t0), Duration::from_secs(2));
        assert!(!Pacer::new(0).enabled());
    }
}
