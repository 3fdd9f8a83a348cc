//! `tidemark-bench`: load generators and probes for `scripts/bench.sh`.
//!
//! - `load`: the batched-Txn loader (seeds a source; also measures the raw target ingest
//!   ceiling with the same ops per Txn the mirror uses, one Txn in flight like the mirror).
//! - `tail-lag`: single-key writers at a fixed total rate into the source while a watch on
//!   the target measures how long each write takes to appear there (p50/p99).
//! - `count`: keys under a prefix.

use anyhow::Context;
use clap::{Parser, Subcommand};
use etcd_client::{Client, EventType, GetOptions, Txn, TxnOp, WatchOptions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(
    name = "tidemark-bench",
    about = "Load generators and probes for scripts/bench.sh"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Put COUNT keys PREFIX<n> with VALUE_BYTES-byte values, OPS_PER_TXN puts per Txn.
    Load {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        #[arg(long, default_value_t = 127)]
        ops_per_txn: u64,
        /// Txns in flight at once (the mirror keeps one).
        #[arg(long, default_value_t = 1)]
        concurrency: u64,
    },
    /// Measure source-to-target lag of single-key writes at a fixed rate.
    TailLag {
        #[arg(long)]
        source: String,
        #[arg(long)]
        target: String,
        /// Source key prefix to write under (must be mirrored).
        #[arg(long)]
        source_prefix: String,
        /// Where those keys appear in the target.
        #[arg(long)]
        target_prefix: String,
        /// Total writes per second.
        #[arg(long, default_value_t = 5000)]
        rate: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        writers: u64,
    },
    /// Print the number of keys under PREFIX.
    Count {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        prefix: String,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Load {
            endpoint,
            prefix,
            count,
            value_bytes,
            ops_per_txn,
            concurrency,
        } => {
            load(
                &endpoint,
                &prefix,
                count,
                value_bytes,
                ops_per_txn,
                concurrency,
            )
            .await
        }
        Cmd::TailLag {
            source,
            target,
            source_prefix,
            target_prefix,
            rate,
            seconds,
            writers,
        } => {
            tail_lag(
                &source,
                &target,
                &source_prefix,
                &target_prefix,
                rate,
                seconds,
                writers,
            )
            .await
        }
        Cmd::Count { endpoint, prefix } => {
            let mut c = Client::connect([endpoint.as_str()], None).await?;
            let r = c
                .get(
                    prefix,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await?;
            println!("{}", r.count());
            Ok(())
        }
    }
}

async fn load(
    endpoint: &str,
    prefix: &str,
    count: u64,
    value_bytes: usize,
    ops: u64,
    concurrency: u64,
) -> anyhow::Result<()> {
    let c = Client::connect([endpoint], None).await.context("connect")?;
    let value = vec![b'v'; value_bytes];
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let mut c = c.clone();
        let next = next.clone();
        let value = value.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(ops, std::sync::atomic::Ordering::Relaxed);
                if start >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (start + ops).min(count);
                let puts: Vec<TxnOp> = (start..end)
                    .map(|i| TxnOp::put(format!("{prefix}{i:09}"), value.clone(), None))
                    .collect();
                c.txn(Txn::new().and_then(puts)).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"keys": count, "seconds": secs, "keysPerSecond": count as f64 / secs})
    );
    Ok(())
}

async fn tail_lag(
    source: &str,
    target: &str,
    sp: &str,
    tp: &str,
    rate: u64,
    seconds: u64,
    writers: u64,
) -> anyhow::Result<()> {
    let src = Client::connect([source], None).await.context("source")?;
    let mut tgt = Client::connect([target], None).await.context("target")?;
    let sent: Arc<Mutex<HashMap<Vec<u8>, Instant>>> = Arc::default();
    let mut stream = tgt
        .watch(tp, Some(WatchOptions::new().with_prefix()))
        .await
        .context("target watch")?;
    // Wait for the watch to be registered before writing.
    let _created = stream.message().await?;
    let total = rate * seconds;
    let per_writer = total / writers.max(1);
    let interval = Duration::from_secs_f64(writers as f64 / rate as f64);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut c = src.clone();
        let sent = sent.clone();
        let sp = sp.to_string();
        let tp = tp.to_string();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..per_writer {
                tick.tick().await;
                let key = format!("w{w:03}-{i:08}");
                let tkey = format!("{tp}{key}").into_bytes();
                sent.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tkey, Instant::now());
                c.put(format!("{sp}{key}"), "x", None).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    let expected = per_writer * writers;
    let mut lags: Vec<f64> = Vec::with_capacity(expected as usize);
    let deadline = Instant::now() + Duration::from_secs(seconds + 30);
    while (lags.len() as u64) < expected && Instant::now() < deadline {
        let msg = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
        let Ok(Ok(Some(resp))) = msg else { continue };
        let now = Instant::now();
        for e in resp.events() {
            if e.event_type() != EventType::Put {
                continue;
            }
            if let Some(kv) = e.kv() {
                if let Some(t) = sent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(kv.key())
                {
                    lags.push(now.duration_since(t).as_secs_f64() * 1000.0);
                }
            }
        }
    }
    let write_secs = t0.elapsed().as_secs_f64();
    for t in tasks {
        t.await??;
    }
    lags.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if lags.is_empty() {
            f64::NAN
        } else {
            lags[((lags.len() as f64 - 1.0) * p).round() as usize]
        }
    };
    println!(
        "{}",
        serde_json::json!({
            "writes": expected,
            "observed": lags.len(),
            "targetRate": rate,
            "achievedRate": expected as f64 / write_secs,
            "p50Ms": pct(0.50),
            "p99Ms": pct(0.99),
            "maxMs": pct(1.0),
        })
    );
    Ok(())
}
