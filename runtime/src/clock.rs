//! The drivers' one clock: core [`Instant`]s are nanoseconds since the clock started, read
//! from tokio's clock so a test that pauses tokio time pauses the core's time too.

use std::time::Duration;
use tidemark_core::Instant;

/// Monotonic core time since [`Clock::start`].
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: tokio::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::start()
    }
}

impl Clock {
    /// A clock at zero now.
    pub fn start() -> Clock {
        Clock {
            start: tokio::time::Instant::now(),
        }
    }

    /// Now, in core time (saturating after 584 years).
    pub fn now(&self) -> Instant {
        let n = self.start.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// The tokio instant a core instant stands for, to sleep until a core deadline.
    pub fn to_tokio(&self, t: Instant) -> tokio::time::Instant {
        self.start + Duration::from_nanos(t.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn core_time_and_tokio_time_convert_both_ways() {
        let c = Clock::start();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = tokio::time::Instant::now();
        let t = c.now();
        let after = tokio::time::Instant::now();
        assert!(t.as_nanos() >= 20_000_000, "{t:?}");
        let back = c.to_tokio(t);
        assert!(before <= back && back <= after);
    }
}
