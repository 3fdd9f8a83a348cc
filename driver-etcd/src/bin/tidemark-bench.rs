//! `tidemark-bench`: load generators and probes for `scripts/bench.sh`.
//!
//! - `load`: the batched-Txn loader (seeds a source; also measures the raw target ingest
//!   ceiling with the same ops per Txn the mirror uses, CONCURRENCY Txns in flight).
//! - `tail-lag`: writers at a fixed total key rate into the source (single puts, or Txns of
//!   OPS_PER_TXN puts) while a watch on the target measures how long each key takes to
//!   appear there (p50/p99).
//! - `source-latency`: open-loop single-key puts at a fixed rate; put latency p50/p99/max
//!   (how much a running mirror hurts the source's own writers).
//! - `delay-proxy`: a TCP delay line standing in for a WAN link (no netem on this kernel).
//! - `chain`: a chain of fenced Txns like the mirror's (each compares a key with the value
//!   the one before it writes), DEPTH in flight with at least GAP between two sends; how
//!   often etcd runs a Txn before its predecessor (docs/design.md, "Pipelined commits").
//! - `count`: keys under a prefix.

#[path = "tidemark-bench/delay_line.rs"]
mod delay_line;

use anyhow::Context;
use clap::{Parser, Subcommand};
use etcd_client::{Client, EventType, GetOptions, Txn, TxnOp, WatchOptions};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};

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
        /// Txns in flight at once.
        #[arg(long, default_value_t = 1)]
        concurrency: u64,
    },
    /// Measure source-to-target lag of writes at a fixed key rate.
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
        /// Total keys written per second.
        #[arg(long, default_value_t = 5000)]
        rate: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        writers: u64,
        /// Puts per source Txn (1: plain puts). Each key's lag is measured separately.
        #[arg(long, default_value_t = 1)]
        ops_per_txn: u64,
    },
    /// Put single keys PREFIX<n> at RATE per second for SECONDS; report put latency.
    SourceLatency {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        prefix: String,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        /// Also count the puts slower than this and group them into stalls (start offset
        /// and worst latency, ms), to line the source's stalls up with the mirror's reads.
        #[arg(long)]
        slow_ms: Option<f64>,
    },
    /// Forward TCP from LISTEN to UPSTREAM, delaying every byte by RTT_MS/2 each way.
    DelayProxy {
        /// Address to listen on (port 0 picks one; the bound address is printed).
        #[arg(long)]
        listen: String,
        #[arg(long)]
        upstream: String,
        #[arg(long, default_value_t = 50)]
        rtt_ms: u64,
    },
    /// Send COUNT chained Txns of OPS_PER_TXN puts each, DEPTH in flight, sends at least
    /// GAP_US apart; a Txn that arrived before its predecessor is sent again. Reports
    /// keys/s and the re-sends.
    Chain {
        #[arg(long)]
        endpoint: String,
        #[arg(long)]
        prefix: String,
        #[arg(long, default_value_t = 2000)]
        count: u64,
        #[arg(long, default_value_t = 127)]
        ops_per_txn: u64,
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        #[arg(long, default_value_t = 16)]
        depth: u64,
        #[arg(long, default_value_t = 0)]
        gap_us: u64,
        /// Connections the Txns take turns on (Txn n uses connection n mod CONNECTIONS).
        #[arg(long, default_value_t = 1)]
        connections: u64,
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
            ops_per_txn,
        } => {
            tail_lag(
                &source,
                &target,
                &source_prefix,
                &target_prefix,
                TailShape {
                    rate,
                    seconds,
                    writers,
                    ops_per_txn,
                },
            )
            .await
        }
        Cmd::SourceLatency {
            endpoint,
            prefix,
            seconds,
            rate,
            value_bytes,
            slow_ms,
        } => source_latency(&endpoint, &prefix, seconds, rate, value_bytes, slow_ms).await,
        Cmd::DelayProxy {
            listen,
            upstream,
            rtt_ms,
        } => delay_proxy(&listen, &upstream, Duration::from_micros(rtt_ms * 500)).await,
        Cmd::Chain {
            endpoint,
            prefix,
            count,
            ops_per_txn,
            value_bytes,
            depth,
            gap_us,
            connections,
        } => {
            let shape = ChainShape {
                count,
                ops: ops_per_txn.max(1),
                value_bytes,
                depth: depth.max(1),
                gap: Duration::from_micros(gap_us),
                connections: connections.max(1),
            };
            chain(&endpoint, &prefix, shape).await
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
    let mut c = Client::connect([endpoint], None).await.context("connect")?;
    // The channel connects lazily: a first round trip outside the timing keeps the TCP and
    // HTTP/2 handshakes (several RTTs through a delay line) out of the rate.
    c.status().await.context("warm-up")?;
    let value = vec![b'v'; value_bytes];
    let ops = ops.max(1);
    let next = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let mut c = c.clone();
        let next = next.clone();
        let value = value.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(ops, Ordering::Relaxed);
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
        serde_json::json!({
            "keys": count,
            "seconds": secs,
            "keysPerSecond": count as f64 / secs,
            "opsPerTxn": ops,
            "concurrency": concurrency.max(1),
        })
    );
    Ok(())
}

/// The Txns of `chain`.
#[derive(Debug, Clone, Copy)]
struct ChainShape {
    count: u64,
    ops: u64,
    value_bytes: usize,
    depth: u64,
    gap: Duration,
    connections: u64,
}

/// Txn `seq` compares `{prefix}fence` with `seq - 1` and writes `seq` there with its puts;
/// it fails (and reads the fence) when its predecessor has not applied yet.
async fn chain(endpoint: &str, prefix: &str, shape: ChainShape) -> anyhow::Result<()> {
    let mut clients = Vec::new();
    for _ in 0..shape.connections {
        let mut c = Client::connect([endpoint], None).await.context("connect")?;
        c.status().await.context("warm-up")?;
        clients.push(c);
    }
    let mut c = clients[0].clone();
    let fence = format!("{prefix}fence");
    c.put(fence.as_str(), "0", None).await.context("fence")?;
    let value = vec![b'v'; shape.value_bytes];
    let (tx, mut rx) = mpsc::unbounded_channel::<(u64, anyhow::Result<bool>)>();
    let send = |seq: u64| {
        // `clients` has `connections` (at least one) entries.
        let mut c = clients[(seq % shape.connections) as usize].clone();
        let tx = tx.clone();
        let fence = fence.clone();
        let puts: Vec<TxnOp> = (0..shape.ops)
            .map(|j| TxnOp::put(format!("{prefix}{seq:08}-{j:04}"), value.clone(), None))
            .chain([TxnOp::put(fence.as_str(), seq.to_string(), None)])
            .collect();
        tokio::spawn(async move {
            let txn = Txn::new()
                .when([etcd_client::Compare::value(
                    fence.as_str(),
                    etcd_client::CompareOp::Equal,
                    (seq - 1).to_string(),
                )])
                .and_then(puts);
            let r = c.txn(txn).await.map(|r| r.succeeded()).map_err(Into::into);
            // The receiver outlives every sender.
            let _ = tx.send((seq, r));
        });
    };
    let t0 = Instant::now();
    let mut last_send: Option<Instant> = None;
    let mut next = 1u64;
    let mut in_flight = 0u64;
    let mut applied = 0u64;
    let mut resends = 0u64;
    let mut redo: std::collections::VecDeque<u64> = Default::default();
    while applied < shape.count {
        // Send while there is room, spacing the sends by the gap.
        while in_flight < shape.depth && (!redo.is_empty() || next <= shape.count) {
            if let Some(at) = last_send.map(|t| t + shape.gap) {
                if Instant::now() < at {
                    tokio::time::sleep_until(at.into()).await;
                }
            }
            let seq = redo.pop_front().unwrap_or_else(|| {
                next += 1;
                next - 1
            });
            send(seq);
            last_send = Some(Instant::now());
            in_flight += 1;
        }
        let Some((seq, r)) = rx.recv().await else {
            anyhow::bail!("every Txn task ended");
        };
        in_flight -= 1;
        if r.with_context(|| format!("txn {seq}"))? {
            applied += 1;
        } else {
            // Arrived before its predecessor: send it again (in seq order).
            resends += 1;
            let at = redo.partition_point(|s| *s < seq);
            redo.insert(at, seq);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "txns": shape.count,
            "opsPerTxn": shape.ops,
            "depth": shape.depth,
            "gapMicros": shape.gap.as_micros() as u64,
            "connections": shape.connections,
            "seconds": secs,
            "keysPerSecond": (shape.count * shape.ops) as f64 / secs,
            "resends": resends,
            "resendsPerTxn": resends as f64 / shape.count as f64,
        })
    );
    Ok(())
}

/// The write pattern of `tail-lag`.
#[derive(Debug, Clone, Copy)]
struct TailShape {
    /// Keys per second, all writers together.
    rate: u64,
    seconds: u64,
    writers: u64,
    ops_per_txn: u64,
}

async fn tail_lag(
    source: &str,
    target: &str,
    sp: &str,
    tp: &str,
    shape: TailShape,
) -> anyhow::Result<()> {
    let mut src = Client::connect([source], None).await.context("source")?;
    src.status().await.context("source warm-up")?;
    let mut tgt = Client::connect([target], None).await.context("target")?;
    let sent: Arc<Mutex<HashMap<Vec<u8>, Instant>>> = Arc::default();
    let mut stream = tgt
        .watch(tp, Some(WatchOptions::new().with_prefix()))
        .await
        .context("target watch")?;
    // Wait for the watch to be registered before writing.
    let _created = stream.message().await?;
    let rate = shape.rate.max(1);
    let k = shape.ops_per_txn.max(1);
    let txns = (rate * shape.seconds / k).max(1);
    let writers = shape.writers.clamp(1, txns);
    let per_writer = txns / writers;
    // One Txn every `period` across all writers: writer w takes slots w, w + writers, ...
    // Staggered starts keep the load steady instead of `writers` Txns at once.
    let period = Duration::from_secs_f64(k as f64 / rate as f64).max(Duration::from_micros(1));
    let interval = period * writers as u32;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut c = src.clone();
        let sent = sent.clone();
        let sp = sp.to_string();
        let tp = tp.to_string();
        tasks.push(tokio::spawn(async move {
            let start = tokio::time::Instant::from_std(t0) + period * w as u32;
            let mut tick = tokio::time::interval_at(start, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..per_writer {
                tick.tick().await;
                let keys: Vec<String> = (0..k).map(|j| format!("w{w:03}-{i:08}-{j:04}")).collect();
                {
                    let now = Instant::now();
                    let mut sent = sent.lock().unwrap_or_else(|p| p.into_inner());
                    for key in &keys {
                        sent.insert(format!("{tp}{key}").into_bytes(), now);
                    }
                }
                if k == 1 {
                    c.put(format!("{sp}{}", keys[0]), "x", None).await?;
                } else {
                    let puts: Vec<TxnOp> = keys
                        .iter()
                        .map(|key| TxnOp::put(format!("{sp}{key}"), "x", None))
                        .collect();
                    c.txn(Txn::new().and_then(puts)).await?;
                }
            }
            Ok::<_, anyhow::Error>(Instant::now())
        }));
    }
    let expected = per_writer * writers * k;
    let mut lags: Vec<f64> = Vec::with_capacity(expected as usize);
    let deadline = Instant::now() + Duration::from_secs(shape.seconds + 30);
    while (lags.len() as u64) < expected && Instant::now() < deadline {
        let msg = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
        let Ok(Ok(Some(resp))) = msg else { continue };
        let now = Instant::now();
        let mut sent = sent.lock().unwrap_or_else(|p| p.into_inner());
        for e in resp.events() {
            if e.event_type() != EventType::Put {
                continue;
            }
            if let Some(t) = e.kv().and_then(|kv| sent.remove(kv.key())) {
                lags.push(now.duration_since(t).as_secs_f64() * 1000.0);
            }
        }
    }
    let observe_secs = t0.elapsed().as_secs_f64();
    let mut writes_done = t0;
    for t in tasks {
        writes_done = writes_done.max(t.await??);
    }
    // The offered rate: writers' time only, not the wait for the mirror to catch up. The
    // last Txn's slot counts in full, so a schedule kept exactly gives `rate`.
    let write_secs = (writes_done.duration_since(t0) + period).as_secs_f64();
    let observed = lags.len();
    // A key that never showed up counts with its wait so far, a lower bound on its lag;
    // dropping it would make a mirror that falls behind look fast.
    let now = Instant::now();
    lags.extend(
        sent.lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|t| now.duration_since(*t).as_secs_f64() * 1000.0),
    );
    let (p50, p99, max) = percentiles(&mut lags);
    println!(
        "{}",
        serde_json::json!({
            "writes": expected,
            "txns": per_writer * writers,
            "opsPerTxn": k,
            "observed": observed,
            "unobserved": lags.len() - observed,
            "targetRate": rate,
            "achievedRate": expected as f64 / write_secs,
            "writeSeconds": write_secs,
            "observeSeconds": observe_secs,
            "p50Ms": p50,
            "p99Ms": p99,
            "maxMs": max,
        })
    );
    Ok(())
}

/// Bound on puts in flight, so a stalled source cannot grow the task count without end.
const MAX_PUTS_IN_FLIGHT: usize = 4096;

/// Open loop: puts are issued on schedule whether or not earlier ones have returned, so
/// a slow source shows up as latency rather than as a silently lower rate (a closed-loop
/// writer would wait and under-report). Latency is timed from the put's issue.
async fn source_latency(
    endpoint: &str,
    prefix: &str,
    seconds: u64,
    rate: u64,
    value_bytes: usize,
    slow_ms: Option<f64>,
) -> anyhow::Result<()> {
    let mut c = Client::connect([endpoint], None).await.context("connect")?;
    c.status().await.context("warm-up")?;
    let value = vec![b'v'; value_bytes];
    let total = rate * seconds;
    let in_flight = Arc::new(Semaphore::new(MAX_PUTS_IN_FLIGHT));
    // (start offset, latency) in ms, or the error.
    let (tx, mut rx) = mpsc::unbounded_channel::<Result<(f64, f64), String>>();
    // The timer's resolution is 1 ms; every tick issues the puts that have come due, so
    // rates above 1000/s hold too.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let t0 = Instant::now();
    let mut issued = 0u64;
    while issued < total {
        tick.tick().await;
        let due = ((t0.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        while issued < due {
            let permit = in_flight.clone().acquire_owned().await?;
            let (mut c, tx, value) = (c.clone(), tx.clone(), value.clone());
            let key = format!("{prefix}{issued:09}");
            tokio::spawn(async move {
                let start = Instant::now();
                let at = start.duration_since(t0).as_secs_f64() * 1000.0;
                let r = c.put(key, value, None).await;
                let ms = start.elapsed().as_secs_f64() * 1000.0;
                drop(permit);
                let _ = tx.send(r.map(|_| (at, ms)).map_err(|e| e.to_string()));
            });
            issued += 1;
        }
    }
    drop(tx);
    let mut lat = Vec::with_capacity(total as usize);
    let mut errors = 0u64;
    let mut first_error = None;
    let mut slow = Vec::new();
    while let Some(r) = rx.recv().await {
        match r {
            Ok((at, ms)) => {
                if slow_ms.is_some_and(|s| ms > s) {
                    slow.push((at, ms));
                }
                lat.push(ms)
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let (p50, p99, max) = percentiles(&mut lat);
    println!(
        "{}",
        serde_json::json!({
            "puts": lat.len(),
            "errors": errors,
            "firstError": first_error,
            "seconds": secs,
            "targetRate": rate,
            "achievedRate": lat.len() as f64 / secs,
            "p50Ms": p50,
            "p99Ms": p99,
            "maxMs": max,
            "slowCount": slow_ms.map(|_| slow.len()),
            "stalls": slow_ms.map(|_| stalls(&mut slow)),
        })
    );
    Ok(())
}

/// Slow puts `(start, latency)` grouped into stalls: puts that started within 5 ms of the
/// previous slow one belong to the same stall. Each stall is `[start ms, worst latency ms]`;
/// at most 100, the earliest first.
fn stalls(slow: &mut [(f64, f64)]) -> Vec<[f64; 2]> {
    slow.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<[f64; 2]> = Vec::new();
    let mut last = f64::NEG_INFINITY;
    for &(at, ms) in slow.iter() {
        match out.last_mut() {
            Some(s) if at - last <= 5.0 => s[1] = s[1].max(ms),
            _ => out.push([at, ms]),
        }
        last = at;
    }
    out.truncate(100);
    for s in &mut out {
        *s = [s[0].round(), (s[1] * 10.0).round() / 10.0];
    }
    out
}

/// p50, p99 and max of `v` (sorted in place); NaN when empty.
fn percentiles(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            v[((v.len() as f64 - 1.0) * p).round() as usize]
        }
    };
    (pct(0.50), pct(0.99), pct(1.0))
}

/// Listens until SIGTERM or SIGINT. Each accepted connection gets its own upstream
/// connection and one delay line per direction (see `delay_line`).
async fn delay_proxy(listen: &str, upstream: &str, one_way: Duration) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen on {listen}"))?;
    // Printed once bound: callers read the address (and know the port is open).
    println!("{}", listener.local_addr()?);
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((down, _)) => {
                    let upstream = upstream.to_string();
                    // Blocking from here on: the delay line runs on threads of its own.
                    let down = down.into_std().and_then(|d| d.set_nonblocking(false).map(|()| d));
                    let spawned = down.and_then(|down| {
                        std::thread::Builder::new().name("delay-conn".into()).spawn(move || {
                            if let Err(e) = delay_line::proxy_connection(down, &upstream, one_way) {
                                eprintln!("delay-proxy: {e:#}");
                            }
                        })
                    });
                    if let Err(e) = spawned {
                        eprintln!("delay-proxy: accepted connection dropped: {e}");
                    }
                }
                Err(e) => {
                    // E.g. out of descriptors: back off rather than spin.
                    eprintln!("delay-proxy: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}
