//! Core time: a serialisable instant fed in by the caller.
//!
//! The core never reads a clock. The driver converts its monotonic clock into an
//! [`Instant`] (nanoseconds since an arbitrary epoch of its choosing); the simulator feeds
//! simulated time. Same inputs, same times => same outputs.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A point in core time, in nanoseconds since the driver's epoch.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Instant(pub u64);

impl Instant {
    /// The driver's epoch.
    pub const ZERO: Instant = Instant(0);

    /// Builds an instant from nanoseconds since the epoch.
    pub const fn from_nanos(n: u64) -> Self {
        Instant(n)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating instead of wrapping so a huge backoff cannot go back in time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(nanos))
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates() {
        let t = Instant(u64::MAX - 1);
        assert_eq!(t + Duration::from_secs(1), Instant(u64::MAX));
        assert_eq!(
            Instant(5).saturating_duration_since(Instant(9)),
            Duration::ZERO
        );
        assert_eq!(
            Instant(9).saturating_duration_since(Instant(5)),
            Duration::from_nanos(4)
        );
    }
}
