//! `mirror_core`: the mirror state machine driven by an arbitrary sequence of inputs.
//!
//! The harness plays both etcd clusters with the model etcd's MVCC [`Store`] and its Txn
//! (`tidemark-model`, the same model the simulator runs; watches are delivered here, as the
//! fuzzer chooses) and lets the fuzzer choose, step by step: which
//! issued command completes and how (success, transient error, throttling, NOSPACE, too
//! large, unknown outcome applied or not), source writes, deletes, multi-key revisions and
//! compactions, watch deliveries, progress notifications and stream failures, operator
//! controls, time advances, and agent crashes (with in-flight writes applied or not).
//!
//! In *chaos* mode the fuzzer may also answer with arbitrary replies and failures of any
//! kind; there only safety-by-construction is checked. Properties:
//! - nothing panics, and `poll_output` always reaches `Timeout`/`Stopped` (no livelock);
//! - every `Command::Txn` carries exactly one compare, on the fence key (`ModRevision`,
//!   `CreateRevision == 0`, or the value of a record), ends its success branch with a Put of
//!   the fence key whose value is a valid checkpoint of this agent, touches the fence
//!   nowhere else, writes only inside the mirrored target window, and its failure branch
//!   only reads; a genesis page (a `ModRevision` compare) instead only puts window keys;
//! - the core never writes to the source;
//! - in honest mode (the model never lies), whenever the fence says `watermark = W` with no
//!   split and no scan, the target window equals the source range at `W`, rewritten (in
//!   `Overwrite` mode, pre-existing target keys may remain); and keys outside the window
//!   (excluded prefix, other prefixes) are never touched.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
use tidemark_core::classify::{classify, Code, Failure, PermanentKind};
use tidemark_core::config::{InitialSyncMode, MirrorConfig, OversizedRevision};
use tidemark_core::etcd::*;
use tidemark_core::mirror::checkpoint::Checkpoint;
use tidemark_core::mirror::{Control, Input, Mirror, Output};
use tidemark_core::Instant;
use tidemark_model::etcd::store::in_range;
use tidemark_model::etcd::{apply_txn, check_txn, store_err, Mutation, Store};

mod garbage;
mod world;

use garbage::*;
use world::*;

const SRC_PREFIX: &str = "/s/";
const TGT_PREFIX: &str = "/t/";
const EXCLUDE: &str = "x/";
/// `TIDEMARK_FUZZ_TRACE=1` prints every step and output (for `examples/replay.rs`).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TIDEMARK_FUZZ_TRACE").is_some())
}

const MAX_OUTPUTS_PER_DRAIN: usize = 20_000;
const VERSIONS: [&str; 6] = ["3.5.13", "3.5.9", "3.4.31", "3.4.20", "3.6.1", "3.3.27"];

#[derive(Debug, Arbitrary)]
struct Plan {
    chaos: bool,
    mode: u8,
    max_txn_ops: u8,
    page_keys: u8,
    paced: bool,
    split_fail: bool,
    reconcile: bool,
    source_version: u8,
    target_version: u8,
    preexisting: Vec<(u8, u8)>,
    steps: Vec<Step>,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Reply {
        pick: u8,
        how: How,
    },
    ReplyAll,
    SourcePut {
        key: u8,
        value: u8,
    },
    SourceDelete {
        key: u8,
    },
    SourceDeletePrefix {
        key: u8,
    },
    SourceTxn {
        keys: Vec<(u8, u8)>,
    },
    Compact {
        back: u8,
    },
    Deliver {
        revs: u8,
    },
    Progress,
    WatchFail,
    Control(u8),
    Advance {
        millis: u16,
    },
    AdvanceToDeadline,
    Restart {
        apply_inflight: bool,
    },
    /// Chaos only.
    Garbage {
        pick: u8,
        reply: GarbageReply,
    },
    /// Chaos only.
    GarbageWatch {
        event: GarbageEvent,
    },
}

#[derive(Debug, Arbitrary, Clone, Copy)]
enum How {
    Ok,
    Transient,
    Throttled,
    NoSpace,
    TooLarge,
    UnknownApplied,
    UnknownNotApplied,
}

#[derive(Debug, Arbitrary)]
enum GarbageReply {
    Status {
        version: String,
        rev: i16,
        learner: bool,
        cluster: u8,
    },
    Range {
        kvs: Vec<(u8, Vec<u8>, i16, i16)>,
        more: bool,
        count: i16,
        rev: i16,
    },
    Txn {
        succeeded: bool,
        rev: i16,
        reads: Vec<Option<(u8, Vec<u8>, i16)>>,
    },
    WatchStarted,
    Ok,
    Fail(u8, String),
    Compacted(i16),
}

#[derive(Debug, Arbitrary)]
enum GarbageEvent {
    Events {
        header: i16,
        events: Vec<(bool, u8, u8, i16)>,
    },
    Progress(i16),
    Cancelled(i16),
}

/// The source's server version: some trust progress notifications, some do not.
fn source_version(plan: &Plan) -> String {
    VERSIONS[usize::from(plan.source_version) % VERSIONS.len()].into()
}

fn config(plan: &Plan) -> MirrorConfig {
    let mut cfg = MirrorConfig::new(SRC_PREFIX, TGT_PREFIX);
    cfg.source.endpoint_list = vec!["http://source:2379".into()];
    cfg.target.endpoint_list = vec!["http://target:2379".into()];
    cfg.initial_sync.mode = match plan.mode % 3 {
        0 => InitialSyncMode::RequireEmpty,
        1 => InitialSyncMode::Overwrite,
        _ => InitialSyncMode::OverwriteAndPrune,
    };
    cfg.sync.exclude_prefixes = vec![EXCLUDE.into()];
    cfg.sync.max_txn_ops = 2 + u32::from(plan.max_txn_ops % 6);
    cfg.sync.txn_flush_bytes = 1024;
    cfg.sync.page_key_limit = 1 + u32::from(plan.page_keys % 4);
    cfg.sync.page_bytes = 1024;
    cfg.sync.watch_buffer_bytes = 64 * 1024;
    cfg.sync.max_ops_per_second = if plan.paced { 20 } else { 0 };
    if plan.split_fail {
        cfg.sync.oversized_revision = OversizedRevision::Fail;
    }
    cfg.reconciliation.enabled = plan.reconcile;
    cfg
}

pub fn run(data: &[u8]) {
    let Ok(plan) = Plan::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cfg = config(&plan);
    let mirror = match Mirror::new(cfg.clone(), 0x5eed) {
        Ok(m) => m,
        Err(e) => panic!("the harness config is invalid: {e}"),
    };
    let mut target = Store::new();
    let mut foreign = BTreeMap::new();
    let untouchable = BTreeMap::from([
        (
            format!("{TGT_PREFIX}{EXCLUDE}keep").into_bytes(),
            b"keep".to_vec(),
        ),
        (b"/u/other".to_vec(), b"other".to_vec()),
    ]);
    let mut muts: Vec<Mutation> = untouchable
        .iter()
        .map(|(k, v)| put(k.clone(), v.clone()))
        .collect();
    if cfg.initial_sync.mode != InitialSyncMode::RequireEmpty || plan.chaos {
        for (k, v) in plan.preexisting.iter().take(4) {
            let key = format!("{TGT_PREFIX}k{}", k % 9).into_bytes();
            foreign.insert(key.clone(), vec![*v]);
            muts.push(put(key, vec![*v]));
        }
    }
    target.write(&muts);
    let fence = cfg.checkpoint_key();
    let mut w = World {
        chaos: plan.chaos,
        fence,
        source: Store::new(),
        target,
        foreign,
        untouchable,
        versions: (
            source_version(&plan),
            VERSIONS[usize::from(plan.target_version) % VERSIONS.len()].into(),
        ),
        mirror,
        incarnation: 0,
        now: Instant::from_nanos(1_000_000_000),
        deadline: None,
        pending: Vec::new(),
        watches: BTreeMap::new(),
        stopped: false,
        cfg,
    };
    w.drain();
    if tracing() {
        eprintln!("config: {:?}", w.cfg);
    }
    for step in plan.steps.iter().take(400) {
        if tracing() {
            eprintln!(
                "step {step:?} (pending {:?})",
                w.pending.iter().map(|p| p.0).collect::<Vec<_>>()
            );
        }
        match step {
            Step::Reply { pick, how } => w.reply(*pick, *how),
            Step::ReplyAll => {
                for _ in 0..64 {
                    if w.pending.is_empty() {
                        break;
                    }
                    w.reply(0, How::Ok);
                }
            }
            Step::SourcePut { key, value } => {
                w.source.write(&[put(src_key(*key), vec![*value])]);
            }
            Step::SourceDelete { key } => {
                w.source.write(&[del(src_key(*key), Vec::new())]);
            }
            Step::SourceDeletePrefix { key } => {
                let k = src_key(*key);
                let p = k[..k.len().min(4)].to_vec();
                w.source.write(&[del(p.clone(), prefix_end(&p))]);
            }
            Step::SourceTxn { keys } => {
                let mut seen = std::collections::BTreeSet::new();
                let muts: Vec<Mutation> = keys
                    .iter()
                    .take(12)
                    .filter(|(k, _)| seen.insert(src_key(*k)))
                    .map(|(k, v)| {
                        if v.is_multiple_of(5) {
                            del(src_key(*k), Vec::new())
                        } else {
                            put(src_key(*k), vec![*v; usize::from(*v % 16) * 40])
                        }
                    })
                    .collect();
                w.source.write(&muts);
            }
            Step::Compact { back } => {
                // At or below the compact revision, or below revision 1, etcd refuses the
                // compaction; so does the model, and nothing changes.
                let _ = w.source.compact(w.source.rev() - i64::from(back % 8));
            }
            Step::Deliver { revs } => w.deliver(*revs),
            Step::Progress => w.progress(),
            Step::WatchFail => {
                if let Some((&id, _)) = w.watches.iter().next_back() {
                    w.watches.remove(&id);
                    w.input(Input::Watch {
                        watch_id: id,
                        event: WatchEvent::Failed {
                            failure: err(Code::Unavailable, "etcdserver: no leader"),
                        },
                    });
                }
            }
            Step::Control(c) => {
                let c = match c % 5 {
                    0 => Control::Drain,
                    1 => Control::Reconcile,
                    2 => Control::Pause,
                    3 => Control::Resume,
                    _ => Control::Shutdown,
                };
                w.input(Input::Control(c));
            }
            Step::Advance { millis } => {
                w.now = w.now + std::time::Duration::from_millis(u64::from(*millis));
                w.drain();
            }
            Step::AdvanceToDeadline => {
                if let Some(t) = w.deadline {
                    w.now = w.now.max(t);
                }
                w.drain();
            }
            Step::Restart { apply_inflight } => w.restart(*apply_inflight),
            Step::Garbage { pick, reply } if w.chaos => {
                if !w.pending.is_empty() {
                    let (id, _) = w.pending.remove(usize::from(*pick) % w.pending.len());
                    let result = garbage_reply(&w, reply);
                    w.input(Input::Done { id, result });
                }
            }
            Step::GarbageWatch { event } if w.chaos => {
                if let Some(&id) = w.watches.keys().next_back() {
                    let event = garbage_event(event);
                    w.input(Input::Watch {
                        watch_id: id,
                        event,
                    });
                }
            }
            Step::Garbage { .. } | Step::GarbageWatch { .. } => {}
        }
        if !w.chaos {
            w.check_invariant();
        }
    }
}
