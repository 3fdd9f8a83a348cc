//! `sync.sourceReadPercent`: the share of the source's time the mirror's bulk reads may take.
//!
//! A genesis reads the source as fast as the target takes its writes, one page after the
//! other. Bounded pages keep each read's walk of etcd's index near one page, but the reads
//! still cost the source CPU: an etcd member serves a 2 MiB page in tens of milliseconds,
//! and the source's own writers queue behind it. On a member with no spare core that
//! raised its put p99 by 30 times or more in the benchmark (README, "Benchmarks").
//!
//! So after each bulk read (a scan page or a count read) the next one waits until the
//! read's busy time is `percent` of the time since: a read that kept the source busy for
//! `b` is followed by `b * (100 - percent) / percent` of quiet. The busy time is the read's
//! latency less the smallest latency of the point reads the mirror makes anyway (one key,
//! no walk), which is the round trip, so a distant source is not mistaken for a busy one.
//! Gaps add up, so reads that overlap are paced as if they had not. 100 turns it off.
//! See docs/design.md, "Bounded scans".

use crate::time::Instant;
use std::time::Duration;

/// The longest one read's gap may be: a read that stalled on the network is not the
/// source's work, and must not hold the scan for minutes.
const MAX_GAP: Duration = Duration::from_secs(5);

/// The pacing state of bulk source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceShare {
    percent: u32,
    /// The smallest point-read latency seen: the round trip to the source.
    rtt: Option<Duration>,
    /// No bulk read starts before this.
    quiet_until: Instant,
}

impl SourceShare {
    /// `percent` of the source's time, 1 to 100 (validated with the config).
    pub fn new(percent: u32) -> SourceShare {
        SourceShare {
            percent: percent.clamp(1, 100),
            rtt: None,
            quiet_until: Instant::ZERO,
        }
    }

    /// Whether reads wait at all.
    pub fn enabled(&self) -> bool {
        self.percent < 100
    }

    /// A point read (one key, no walk) took `latency`: a bound on the round trip.
    pub fn note_point_read(&mut self, latency: Duration) {
        self.rtt = Some(self.rtt.map_or(latency, |r| r.min(latency)));
    }

    /// A bulk read that took `latency` finished at `now`: the next waits out its share.
    pub fn note_bulk_read(&mut self, now: Instant, latency: Duration) {
        if !self.enabled() {
            return;
        }
        let busy = latency.saturating_sub(self.rtt.unwrap_or_default());
        let gap = busy
            .saturating_mul(100 - self.percent)
            .checked_div(self.percent)
            .unwrap_or_default()
            .min(MAX_GAP);
        self.quiet_until = self.quiet_until.max(now) + gap;
    }

    /// Whether a bulk read may start at `now`.
    pub fn ready(&self, now: Instant) -> bool {
        !self.enabled() || self.quiet_until <= now
    }

    /// When the next bulk read may start, if that is later than `now`.
    pub fn wait_until(&self, now: Instant) -> Option<Instant> {
        (self.enabled() && self.quiet_until > now).then_some(self.quiet_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_read_is_followed_by_quiet_in_proportion_to_its_busy_time() {
        let mut s = SourceShare::new(25);
        s.note_point_read(ms(4));
        s.note_point_read(ms(2));
        let t = Instant::ZERO + ms(1000);
        // 12 ms of latency, 2 of them the round trip: 10 ms busy, 30 ms quiet at 25%.
        s.note_bulk_read(t, ms(12));
        assert!(!s.ready(t + ms(29)));
        assert!(s.ready(t + ms(30)));
        assert_eq!(s.wait_until(t), Some(t + ms(30)));
        // Gaps of overlapping reads add up.
        s.note_bulk_read(t + ms(1), ms(12));
        assert_eq!(s.wait_until(t), Some(t + ms(60)));
    }

    #[test]
    fn a_read_no_slower_than_the_round_trip_costs_no_quiet() {
        let mut s = SourceShare::new(50);
        s.note_point_read(ms(50));
        let t = Instant::ZERO + ms(10);
        s.note_bulk_read(t, ms(40));
        assert!(s.ready(t));
        assert_eq!(s.wait_until(t), None);
    }

    #[test]
    fn one_gap_is_capped_and_100_percent_never_waits() {
        let mut s = SourceShare::new(1);
        let t = Instant::ZERO + ms(10);
        s.note_bulk_read(t, Duration::from_secs(60));
        assert_eq!(s.wait_until(t), Some(t + MAX_GAP));
        let mut off = SourceShare::new(100);
        off.note_bulk_read(t, Duration::from_secs(60));
        assert!(off.ready(t));
        assert!(!off.enabled());
    }
}
