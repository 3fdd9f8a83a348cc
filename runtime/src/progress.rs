//! Progress reporting for long operations (genesis scans, reconciliation passes,
//! inventory recovery).
//!
//! On a terminal, one line is redrawn in place at most four times a second. When
//! stderr is not a terminal (systemd, Kubernetes, CI), `\r` redraws would only pile
//! up garbage in the log, so an `info` event is emitted every few seconds instead.
//! Dependency-free on purpose: the needs are one line of text and a rate limiter.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Minimum time between two redraws of the terminal line.
const TTY_INTERVAL: Duration = Duration::from_millis(250);
/// Minimum time between two log events when stderr is not a terminal.
const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// True while a progress line is on screen without a trailing newline. The
/// logging writer erases it before printing, so log lines start at column 0.
static LIVE_LINE: AtomicBool = AtomicBool::new(false);

/// Erases the live progress line, if any (called by the logging writer while it
/// holds the stderr lock).
pub(crate) fn clear_live_line(w: &mut impl Write) -> io::Result<()> {
    if LIVE_LINE.swap(false, Ordering::AcqRel) {
        w.write_all(b"\r\x1b[K")?;
    }
    Ok(())
}

#[derive(Debug)]
enum Sink {
    Tty,
    Log,
    #[cfg(test)]
    Capture(Vec<String>),
}

/// Progress of one long operation, e.g.
/// `genesis: 120,000 / ~200,000 keys (60%), 58,210 keys/s, eta 1s`.
///
/// Only one `Progress` should draw on a terminal at a time. Dropping it without
/// [`finish`](Progress::finish) ends the terminal line so later output stays readable.
#[derive(Debug)]
pub struct Progress {
    label: String,
    unit: &'static str,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_emit: Option<Instant>,
    interval: Duration,
    sink: Sink,
    finished: bool,
}

impl Progress {
    /// Starts tracking `label`; `estimated_total` is shown with `~` because the
    /// callers' totals are estimates (e.g. a count read at a different revision).
    pub fn new(label: impl Into<String>, estimated_total: Option<u64>) -> Self {
        let sink = if io::stderr().is_terminal() {
            Sink::Tty
        } else {
            Sink::Log
        };
        Self::with_sink(label.into(), estimated_total, sink, Instant::now())
    }

    fn with_sink(label: String, total: Option<u64>, sink: Sink, now: Instant) -> Self {
        // Terminals draw on the first update; logs wait one interval so short
        // operations do not log a useless "0 done" line.
        let (last_emit, interval) = match sink {
            Sink::Tty => (None, TTY_INTERVAL),
            _ => (Some(now), LOG_INTERVAL),
        };
        Self {
            label,
            unit: "items",
            total,
            done: 0,
            started: now,
            last_emit,
            interval,
            sink,
            finished: false,
        }
    }

    /// Sets the unit name shown after the counts (default `items`).
    pub fn with_unit(mut self, unit: &'static str) -> Self {
        self.unit = unit;
        self
    }

    /// Replaces the estimated total (e.g. once a better count is known).
    pub fn set_total(&mut self, estimated_total: Option<u64>) {
        self.total = estimated_total;
    }

    /// Records that `done` units are complete; redraws or logs if due.
    pub fn set(&mut self, done: u64) {
        self.set_at(done, Instant::now());
    }

    /// Adds `n` completed units; redraws or logs if due.
    pub fn inc(&mut self, n: u64) {
        self.set_at(self.done.saturating_add(n), Instant::now());
    }

    /// Units completed so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    fn set_at(&mut self, done: u64, now: Instant) {
        self.done = done;
        let due = self
            .last_emit
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if due {
            self.last_emit = Some(now);
            let line = render(
                &self.label,
                self.unit,
                done,
                self.total,
                now.saturating_duration_since(self.started),
            );
            self.emit(line, false);
        }
    }

    /// Prints the final summary (`genesis: 200,000 keys in 3.4s, 58,823 keys/s`).
    pub fn finish(mut self) {
        self.finish_at(Instant::now());
    }

    fn finish_at(&mut self, now: Instant) {
        self.finished = true;
        let line = render_done(
            &self.label,
            self.unit,
            self.done,
            now.saturating_duration_since(self.started),
        );
        self.emit(line, true);
    }

    fn emit(&mut self, line: String, last: bool) {
        match &mut self.sink {
            Sink::Tty => {
                let mut err = io::stderr().lock();
                // Progress output is best effort: a closed stderr must not fail the work.
                let _ = write!(err, "\r{line}\x1b[K{}", if last { "\n" } else { "" });
                let _ = err.flush();
                LIVE_LINE.store(!last, Ordering::Release);
            }
            Sink::Log => tracing::info!(
                target: "tidemark::progress",
                label = %self.label,
                done = self.done,
                total = self.total,
                finished = last,
                "{line}"
            ),
            #[cfg(test)]
            Sink::Capture(lines) => lines.push(line),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.finished && matches!(self.sink, Sink::Tty) && self.last_emit.is_some() {
            let mut err = io::stderr().lock();
            if LIVE_LINE.swap(false, Ordering::AcqRel) {
                let _ = writeln!(err);
            }
        }
    }
}

/// `label: done / ~total unit (pct%), rate unit/s, eta T`; parts that are not
/// known yet (total, rate, eta) are left out.
fn render(label: &str, unit: &str, done: u64, total: Option<u64>, elapsed: Duration) -> String {
    let mut s = format!("{label}: {}", thousands(done));
    if let Some(total) = total {
        s.push_str(&format!(" / ~{}", thousands(total)));
    }
    s.push(' ');
    s.push_str(unit);
    if let Some(total) = total.filter(|&t| t > 0) {
        let pct = (u128::from(done) * 100 / u128::from(total)).min(100);
        s.push_str(&format!(" ({pct}%)"));
    }
    if let Some(rate) = rate(done, elapsed) {
        s.push_str(&format!(", {} {unit}/s", thousands(rate.round() as u64)));
        if let Some(total) = total.filter(|&t| t > done) {
            if rate > 0.0 {
                let eta = Duration::from_secs_f64(((total - done) as f64 / rate).ceil());
                s.push_str(&format!(", eta {}", duration(eta)));
            }
        }
    }
    s
}

fn render_done(label: &str, unit: &str, done: u64, elapsed: Duration) -> String {
    let mut s = format!(
        "{label}: {} {unit} in {}",
        thousands(done),
        duration(elapsed)
    );
    if let Some(rate) = rate(done, elapsed) {
        s.push_str(&format!(", {} {unit}/s", thousands(rate.round() as u64)));
    }
    s
}

/// Average rate since start; `None` before 100 ms, where it would be noise.
fn rate(done: u64, elapsed: Duration) -> Option<f64> {
    (elapsed >= Duration::from_millis(100)).then(|| done as f64 / elapsed.as_secs_f64())
}

/// `1234567` -> `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Short human duration: `850ms`, `3.4s`, `42s`, `2m05s`, `1h02m`.
fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if secs < 10 && d.subsec_nanos() != 0 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(p: &Progress) -> &[String] {
        match &p.sink {
            Sink::Capture(lines) => lines,
            _ => unreachable!(),
        }
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(120_000), "120,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(3_400)), "3.4s");
        assert_eq!(duration(Duration::from_secs(42)), "42s");
        assert_eq!(duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration(Duration::from_secs(3_720)), "1h02m");
    }

    #[test]
    fn render_full_line() {
        let line = render(
            "genesis",
            "keys",
            120_000,
            Some(200_000),
            Duration::from_secs_f64(120_000.0 / 58_210.0),
        );
        assert_eq!(
            line,
            "genesis: 120,000 / ~200,000 keys (60%), 58,210 keys/s, eta 2s"
        );
    }

    #[test]
    fn render_without_total_or_rate() {
        assert_eq!(
            render("scan", "keys", 5, None, Duration::ZERO),
            "scan: 5 keys"
        );
        assert_eq!(
            render("scan", "keys", 500, None, Duration::from_secs(2)),
            "scan: 500 keys, 250 keys/s"
        );
    }

    #[test]
    fn render_past_estimate_caps_percent_and_drops_eta() {
        let line = render("scan", "keys", 300, Some(200), Duration::from_secs(1));
        assert_eq!(line, "scan: 300 / ~200 keys (100%), 300 keys/s");
        // Zero estimate: no division by zero, no percent.
        assert_eq!(
            render("scan", "keys", 3, Some(0), Duration::ZERO),
            "scan: 3 / ~0 keys"
        );
    }

    #[test]
    fn tty_redraws_at_most_four_times_a_second() {
        let t0 = Instant::now();
        let mut p = Progress::with_sink("g".into(), Some(100), Sink::Capture(vec![]), t0);
        // Behave like a terminal: first update draws at once, then every 250 ms.
        p.last_emit = None;
        p.interval = TTY_INTERVAL;
        for ms in (0..1000).step_by(10) {
            p.set_at(ms / 10, t0 + Duration::from_millis(ms));
        }
        assert_eq!(captured(&p).len(), 4, "{:?}", captured(&p));
        p.finish_at(t0 + Duration::from_secs(1));
        assert_eq!(captured(&p).len(), 5);
        assert!(
            captured(&p)[4].starts_with("g: 99 items in 1s, 99 items/s"),
            "{:?}",
            captured(&p)
        );
    }

    #[test]
    fn log_mode_waits_an_interval_between_lines() {
        let t0 = Instant::now();
        let mut p =
            Progress::with_sink("g".into(), None, Sink::Capture(vec![]), t0).with_unit("keys");
        p.last_emit = Some(t0);
        for s in 0..12 {
            p.set_at(s, t0 + Duration::from_secs(s));
        }
        // Lines at 5 s and 10 s only.
        assert_eq!(captured(&p).len(), 2, "{:?}", captured(&p));
        assert_eq!(captured(&p)[0], "g: 5 keys, 1 keys/s");
    }

    #[test]
    fn clear_live_line_only_when_drawn() {
        let mut buf = Vec::new();
        LIVE_LINE.store(false, Ordering::Release);
        clear_live_line(&mut buf).unwrap();
        assert!(buf.is_empty());
        LIVE_LINE.store(true, Ordering::Release);
        clear_live_line(&mut buf).unwrap();
        assert_eq!(buf, b"\r\x1b[K");
        clear_live_line(&mut buf).unwrap();
        assert_eq!(buf, b"\r\x1b[K", "cleared once only");
    }
}
