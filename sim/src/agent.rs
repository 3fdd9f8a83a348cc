//! Agents as the simulator drives them: a replicator behind the core contract, plus what a
//! process would lose on a crash.

use crate::replicator::Replicator;
use crate::schedule::Options;
use std::collections::BTreeSet;
use std::time::Duration;
use tidemark_core::MirrorConfig;

/// The link config of a run, in one of several variants that keep the link identity
/// (prefixes) and change everything a restart may change.
pub fn config_for(o: &Options, variant: u32) -> MirrorConfig {
    let mut c = MirrorConfig::new("/app/", "/mirror/");
    c.source.endpoint_list = vec!["http://source:2379".into()];
    c.target.endpoint_list = vec!["http://target:2379".into()];
    c.sync.dest_prefix = o.dest_prefix.clone();
    c.sync.exclude_prefixes = o.exclude_prefixes.clone();
    c.initial_sync.mode = o.initial_mode;
    // Chains of Txns in flight, which the default (1) does not use: the simulator reorders
    // every concurrent Txn, so it checks what the chain must survive.
    c.sync.max_txns_in_flight = 16;
    match variant % 6 {
        0 => {}
        1 => {
            // Tiny pages and batches: many flushes, many cursors.
            c.sync.page_key_limit = 7;
            c.sync.page_bytes = 4096;
            c.sync.max_txn_ops = 5;
            c.sync.txn_flush_bytes = 2048;
        }
        2 => {
            // The smallest replay buffer: overflows pause the scan's watch (and restart a
            // genesis past its scan).
            c.sync.watch_buffer_bytes = 64 * 1024;
            c.sync.page_key_limit = 50;
        }
        3 => {
            c.sync.progress_interval = Duration::from_secs(5);
            c.sync.reconnect_backoff.initial_delay = Duration::from_millis(200);
            c.sync.reconnect_backoff.max_delay = Duration::from_secs(5);
            c.sync.request_timeout = Duration::from_secs(2);
            // Bulk source reads wait out their share of the source between them.
            c.sync.source_read_percent = 30;
        }
        4 => {
            c.sync.max_ops_per_second = 500;
            c.sync.max_txn_ops = 64;
        }
        _ => {
            c.reconciliation.enabled = true;
            c.reconciliation.interval = Duration::from_secs(20);
            c.reconciliation.delete_orphans = true;
        }
    }
    if let Some(r) = &o.reconcile {
        c.reconciliation.enabled = true;
        c.reconciliation.interval = Duration::from_millis(r.interval_ms);
        c.reconciliation.delete_orphans = r.delete_orphans;
    }
    if o.drain_from_start {
        c.mode = tidemark_core::config::Mode::Drain;
    }
    c
}

/// One agent process slot; a crash bumps `incarnation` and replaces the replicator.
#[derive(Debug)]
pub struct Agent {
    pub index: u32,
    pub incarnation: u32,
    pub replicator: Option<Box<dyn Replicator>>,
    pub config: MirrorConfig,
    /// The core's holder nonce once known (from status).
    pub holder: String,
    /// Watches the driver was asked to cancel: later events for them are dropped, as the
    /// driver drops them once it closed the stream.
    pub cancelled: BTreeSet<u64>,
    /// Pending wake-up (time, generation); older generations are stale.
    pub wake_gen: u64,
    pub stopped: Option<tidemark_core::mirror::StopReason>,
    /// When a restart is due (ns), for crashed agents.
    pub restart_at: Option<u64>,
    /// Twins stop (crash, not restart) at this time.
    pub retire_at: Option<u64>,
    /// Commands issued but not completed: (id, is a target Txn).
    pub in_flight: BTreeSet<u64>,
    /// Conditions currently raised (for rising-edge coverage marks).
    pub raised: BTreeSet<tidemark_core::mirror::ConditionType>,
    /// Reconciliation passes this incarnation has reported (status counter).
    pub passes_seen: u64,
    /// When this incarnation's last reported pass started.
    pub last_pass_start: Option<u64>,
    /// The newest source history (restores before it) this incarnation has received data
    /// from: what its writes are judged against (see [`crate::restore`]).
    pub source_epoch: u32,
    /// The fence records of the Txns this incarnation sent lately, each with the basis it
    /// was first sent with: a Txn sent again unchanged (a chain re-send after a reorder)
    /// is the same commit, built from the same knowledge.
    pub sent_records: std::collections::VecDeque<(Vec<u8>, u32)>,
}

impl Agent {
    /// The connection id the model clusters know this incarnation by.
    pub fn conn(&self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.incarnation)
    }

    /// Whether a replicator is running and has not stopped.
    pub fn alive(&self) -> bool {
        self.replicator.is_some() && self.stopped.is_none()
    }
}
