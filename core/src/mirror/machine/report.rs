//! Status refresh: watermark, lag and phase.

use super::*;

/// A commit round trip from which a lagging tail is most likely held back by how many Txns
/// cross it, not by the target's speed: about a region away, and ten times what a target
/// next to the mirror takes for a full Txn.
const DISTANT_TARGET_RTT: Duration = Duration::from_millis(20);

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
            let message = if lagging { self.lag_hint() } else { None };
            self.status.set_condition(
                now,
                C::ReplicationLagExceeded,
                lagging,
                if lagging {
                    "LagExceeded"
                } else {
                    "WithinBound"
                },
                message.unwrap_or_default(),
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

    /// What to change when a tail lags behind a distant target with nothing else wrong.
    /// Each target Txn holds whole source revisions and at most `sync.maxTxnOps` ops, so a
    /// source that writes large revisions needs a Txn for each; across a long round trip
    /// the Txns in flight then cap the rate, and only a target that takes more ops per Txn
    /// lifts it (docs/design.md, "Pipelined commits"). The text names no figure that moves,
    /// so the condition is not rewritten on every refresh.
    fn lag_hint(&self) -> Option<String> {
        let distant = self
            .pipeline
            .commit_rtt
            .is_some_and(|rtt| rtt >= DISTANT_TARGET_RTT);
        let healthy = self.status.backoff.is_none() && !self.life.paused;
        (self.life.stage == Stage::Tail && distant && healthy).then(|| {
            format!(
                "the target's commit round trip is over {} ms; each fenced Txn carries whole source revisions and at most sync.maxTxnOps ({}) ops, with at most sync.maxTxnsInFlight ({}) in flight, so a source that writes large revisions is held to the Txns that cross that round trip: raise the target's --max-txn-ops and sync.maxTxnOps together",
                DISTANT_TARGET_RTT.as_millis(),
                self.cfg.sync.max_txn_ops,
                self.cfg.sync.max_txns_in_flight,
            )
        })
    }
}
