//! Version probes, reading the fence, RequireEmpty, and the claim.

use super::*;

/// What the version probes found out about the two clusters.
#[derive(Debug, Clone, Default)]
pub(super) struct Peers {
    pub(super) src: Option<StatusReply>,
    pub(super) tgt: Option<StatusReply>,
    pub(super) progress_trusted: bool,
    pub(super) drops_compact_tombstone: bool,
}

/// The fence as this agent knows it: the record it holds and how it was claimed.
#[derive(Debug, Clone, Default)]
pub(super) struct Fence {
    /// Mod revision of the fence as we last wrote or read it; 0 = absent.
    pub(super) rev: i64,
    /// Whether `rev` is the exact mod revision of `Pipeline::fence_bytes` (a write proven only
    /// by a later Txn's success leaves it unknown). Genesis pages compare it.
    pub(super) rev_exact: bool,
    /// The record at `rev` (what the target holds), once claimed.
    pub(super) record: Option<Checkpoint>,
    /// The record read at startup, before our claim.
    pub(super) found: Option<Checkpoint>,
    pub(super) takeovers: u32,
    /// The lowest epoch this agent may claim (an EtcdMirror's `metadata.generation`).
    pub(super) epoch_floor: u64,
    /// This process's nonce, written into every record it puts.
    pub(super) holder: String,
    /// The link the fence belongs to (from the config's ranges); another link's fence in
    /// the target range is a conflict.
    pub(super) link: String,
}

impl Mirror {
    pub(super) fn after_probes(&mut self, now: Instant) {
        let (Some(src), Some(tgt)) = (self.peers.src.clone(), self.peers.tgt.clone()) else {
            return;
        };
        self.status.source_version = src.version.clone();
        self.status.target_version = tgt.version.clone();
        self.status.source_cluster_id = src.cluster_id;
        self.status.target_cluster_id = tgt.cluster_id;
        self.status
            .set_condition(now, C::SourceReachable, true, "Reachable", "");
        self.status
            .set_condition(now, C::TargetReachable, true, "Reachable", "");
        self.observe_source_rev(now, src.header_revision);
        for (side, s) in [("source", &src), ("target", &tgt)] {
            match Version::parse(&s.version) {
                Some(v) if v >= Version::FLOOR => {}
                _ => {
                    let msg = format!(
                        "{side} etcd version {:?} is below the supported floor {}; upgrade the {side} cluster",
                        s.version,
                        Version::FLOOR
                    );
                    return self.fail(now, FailKind::Unsupported, msg);
                }
            }
        }
        self.peers.progress_trusted =
            Version::parse(&src.version).is_some_and(|v| v.progress_notify_trusted());
        self.peers.drops_compact_tombstone =
            Version::parse(&src.version).is_some_and(|v| v.drops_compact_tombstone());
        self.status.progress_trusted = self.peers.progress_trusted;
        let learner = src.is_learner || tgt.is_learner;
        self.status.set_condition(
            now,
            C::LearnerEndpoint,
            learner,
            if learner { "LearnerEndpoint" } else { "Voter" },
            if learner {
                "an endpoint is a learner member; point the endpoints at voting members"
            } else {
                ""
            },
        );
        if src.cluster_id == tgt.cluster_id
            && ranges_overlap(self.keys.source_prefix(), self.keys.target_base())
        {
            return self.fail(
                now,
                FailKind::DirectionConflict,
                "source and target are the same cluster and the source range overlaps the target range; the mirror would copy its own writes",
            );
        }
        self.status
            .set_condition(now, C::DirectionConflict, false, "Distinct", "");
        self.life.stage = Stage::Fencing;
        let cmd = self.fence_read_cmd();
        self.issue(Job::ReadFence, cmd);
    }

    pub(super) fn fence_read_cmd(&self) -> Command {
        Command::Range(RangeRequest::latest(
            Cluster::Target,
            self.keys.checkpoint_key().to_vec(),
        ))
    }

    pub(super) fn on_fence_read(&mut self, now: Instant, r: RangeReply) {
        let found = match r.kvs.first() {
            None => None,
            Some(kv) => match Checkpoint::decode(&kv.value) {
                Ok(c) => {
                    self.fence.rev = kv.mod_revision;
                    self.pipeline.next_seq = self.pipeline.next_seq.max(c.seq + 1);
                    Some(c)
                }
                Err(e) => {
                    return self.fail(
                        now,
                        FailKind::CheckpointInvalid,
                        format!("the checkpoint at the fence key cannot be used ({e}); nothing was written. Inspect it with `tidemark-mirror checkpoint`, then restore or delete it"),
                    )
                }
            },
        };
        if let Some(c) = &found {
            if c.link != self.fence.link {
                return self.fail(
                    now,
                    FailKind::PrefixConflict,
                    format!("the fence key holds the checkpoint of another link ({:?}); choose another target prefix or checkpoint.key", c.link),
                );
            }
            if c.role == Role::Primary && self.drain.requested {
                // A drain that already cut over (e.g. killed right after the flip): done.
                let cutover = Cutover {
                    drain_target_revision: c.watermark,
                    drained_revision: c.watermark,
                    verified_time: now,
                    counts: Counts::default(),
                    leased_key_count: 0,
                };
                self.status.last_applied_revision = c.watermark;
                return self.publish_cutover(now, cutover);
            }
            if c.role == Role::Primary {
                return self.fail(
                    now,
                    FailKind::FenceLost,
                    "the target was cut over (fence role Primary); a mirror must never write to it again",
                );
            }
            self.status.last_applied_revision = c.watermark;
        }
        self.fence.found = found;
        self.prove_at_connect(now);
    }

    /// The found record's history is proven (or it had no progress): RequireEmpty, then claim.
    pub(super) fn after_fence_proven(&mut self, now: Instant) {
        let needs_genesis = match &self.fence.found {
            None => true,
            Some(c) => c.scan.is_some() || (c.watermark == 0 && c.split.is_none()),
        };
        let fresh = self.fence.found.as_ref().is_none_or(|c| c.scan.is_none());
        if needs_genesis
            && fresh
            && self.cfg.initial_sync.start_revision == 0
            && self.cfg.initial_sync.mode == InitialSyncMode::RequireEmpty
        {
            let cmd = self.check_empty_cmd();
            self.issue(Job::CheckEmpty, cmd);
        } else {
            self.claim(now);
        }
    }

    pub(super) fn check_empty_cmd(&self) -> Command {
        let (key, range_end) = self.keys.target_range();
        Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key,
            range_end,
            revision: 0,
            limit: 2,
            count_only: false,
            keys_only: true,
            sort: SortBy::Key,
        })
    }

    pub(super) fn on_check_empty(&mut self, now: Instant, r: RangeReply) {
        // The fence key sorts first in the range (its suffix starts with a zero byte), so
        // the page holds it whenever it is there.
        let fence_now = r
            .kvs
            .iter()
            .find(|kv| self.keys.is_checkpoint(&kv.key))
            .map(|kv| kv.mod_revision);
        if fence_now.is_some_and(|rev| rev != self.fence.rev) {
            // The fence moved since it was read (another agent claimed and wrote): the keys
            // are the mirror's own, not foreign ones. Read the fence again and go on from it.
            let cmd = self.fence_read_cmd();
            self.issue(Job::ReadFence, cmd);
            return;
        }
        let foreign = r
            .kvs
            .iter()
            .filter(|kv| !self.keys.is_checkpoint(&kv.key))
            .count();
        if foreign > 0 || r.count > r.kvs.len() as i64 {
            return self.fail(
                now,
                FailKind::EmptyTargetViolation,
                "initialSync.mode is RequireEmpty but the target range already holds keys; nothing was written. Empty the target range, or choose Overwrite or OverwriteAndPrune",
            );
        }
        self.status
            .set_condition(now, C::EmptyTargetViolation, false, "Empty", "");
        self.claim(now);
    }

    /// Claims the fence at a new epoch, carrying the found record's progress forward.
    pub(super) fn claim(&mut self, now: Instant) {
        let base = self.fence.found.clone();
        let epoch = (base.as_ref().map_or(0, |c| c.epoch) + 1).max(self.fence.epoch_floor);
        let src_id = self.peers.src.as_ref().map_or(0, |s| s.cluster_id);
        let tgt_id = self.peers.tgt.as_ref().map_or(0, |s| s.cluster_id);
        let mut rec = base.unwrap_or(Checkpoint {
            v: VERSION,
            seq: 0,
            link: self.fence.link.clone(),
            epoch: 0,
            holder: String::new(),
            role: Role::Mirror,
            watermark: 0,
            split: None,
            scan: None,
            prune_pending: false,
            prune_floor: 0,
            source_cluster: format!("{src_id:x}"),
            target_cluster: format!("{tgt_id:x}"),
            anchor: None,
        });
        rec.upgrade();
        rec.epoch = epoch;
        rec.holder = self.fence.holder.clone();
        rec.source_cluster = format!("{src_id:x}");
        rec.target_cluster = format!("{tgt_id:x}");
        let fresh_genesis = rec.scan.is_none() && rec.watermark == 0 && rec.split.is_none();
        if fresh_genesis && self.cfg.initial_sync.start_revision > 0 {
            rec.watermark = self.cfg.initial_sync.start_revision - 1;
            rec.prune_pending = false;
        } else if fresh_genesis {
            rec.prune_pending = self.cfg.initial_sync.mode == InitialSyncMode::OverwriteAndPrune;
            rec.prune_floor = 0;
        }
        let floor_set_by_claim = rec.prune_pending && rec.prune_floor == 0;
        if let Some(s) = rec.scan.as_ref().filter(|s| !s.scanned) {
            if self.fence.rev > 0 && !floor_set_by_claim {
                // Pages of the attempt that wrote the found record may have applied after
                // it, past its cursor, and a restored source may never put those keys
                // again. Everything there newer than the found record is such a page
                // (an earlier claim's mark carries on until its sweep ends). A prune whose
                // floor this claim sets deletes them anyway.
                let above = s.residue_above.unwrap_or(self.fence.rev);
                rec.set_residue_above(Some(above));
            }
        }
        self.status.epoch = epoch;
        self.status.role = "Mirror".into();
        self.submit_direct(now, Work::Claim, rec);
    }
}
