//! Status refresh: watermark, lag and phase.

use super::*;

impl Mirror {
    pub(super) fn observe_source_rev(&mut self, now: Instant, rev: i64) {
        if rev > self.status.source_revision {
            self.status.source_revision = rev;
        }
        let _ = now;
    }

    pub(super) fn refresh_status(&mut self, now: Instant) {
        let w = self
            .fence
            .record
            .as_ref()
            .map_or(self.status.last_applied_revision, |r| r.watermark);
        self.status.last_applied_revision = w;
        self.status.txns_in_flight = (self.pipeline.chain.len() + self.pages.in_flight()) as u64;
        self.status.commit_rtt_seconds = self.pipeline.commit_rtt.map_or(0.0, |d| d.as_secs_f64());
        self.status.chain_send_gap_seconds = self.pipeline.gap.as_secs_f64();
        let lag = (self.status.source_revision - w).max(0);
        // Lag in revisions counts every revision of the source cluster, including other
        // prefixes; lag in time starts when the watch delivered something not yet applied.
        self.status.lag_revisions = lag;
        let behind = self.tail.delivered > w || !self.batcher.is_empty() || !self.work.is_empty();
        match (behind, self.tail.lag_since) {
            (true, None) => self.tail.lag_since = Some(now),
            (false, Some(_)) => self.tail.lag_since = None,
            _ => {}
        }
        self.status.lag_seconds = self
            .tail
            .lag_since
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        if self.life.stage != Stage::Stopped {
            let lagging = self.status.lag_seconds > self.cfg.sync.max_lag.as_secs_f64();
            self.status.set_condition(
                now,
                C::ReplicationLagExceeded,
                lagging,
                if lagging {
                    "LagExceeded"
                } else {
                    "WithinBound"
                },
                "",
            );
            if self.life.stage == Stage::Tail && !self.life.paused {
                self.status.phase = if self.status.backoff.is_some() {
                    Phase::Degraded
                } else if self.drain.state.is_some() || self.drain.requested {
                    Phase::Draining
                } else {
                    Phase::Syncing
                };
            }
            if self.life.paused {
                self.status.phase = Phase::Paused;
            }
            self.watch_drain(now);
        }
    }
}
