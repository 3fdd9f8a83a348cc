//! Process-wide log setup: human-readable lines for terminals, JSON lines for
//! log pipelines, both on stderr so stdout stays free for command output
//! (e.g. `recover --plan` printing JSON).

use std::io::{self, IsTerminal, Write};

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Log line format, offered on the command line as `--log-format plain|json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (ANSI colours only when stderr is a terminal).
    #[default]
    Plain,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the
    /// event's fields at top level, and the current span (if any) under `span`.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` is set but is not a valid filter; refusing beats silently
    /// logging at a level the operator did not ask for.
    #[error("invalid RUST_LOG filter {value:?}: {reason}")]
    BadEnvFilter { value: String, reason: String },
    /// The binary's built-in default filter does not parse (a programming error).
    #[error("invalid default log filter {value:?}: {reason}")]
    BadDefaultFilter { value: String, reason: String },
    /// A global subscriber was already installed (init called twice).
    #[error("logging already initialised: {0}")]
    AlreadyInitialised(String),
}

/// Installs the global `tracing` subscriber writing to stderr.
///
/// `default_filter` (e.g. `"info,tidemark=debug"`) applies unless `RUST_LOG` is set
/// and non-empty, in which case `RUST_LOG` wins entirely.
pub fn init(format: LogFormat, default_filter: &str) -> Result<(), LoggingError> {
    let filter = resolve_filter(std::env::var("RUST_LOG").ok().as_deref(), default_filter)?;
    let ansi = io::stderr().is_terminal();
    let subscriber = build(format, filter, ansi, StderrWriter);
    // `try_init` also bridges `log`-crate records from dependencies into tracing.
    subscriber
        .try_init()
        .map_err(|e| LoggingError::AlreadyInitialised(e.to_string()))
}

/// Picks `RUST_LOG` when set and non-empty, else the binary's default.
fn resolve_filter(env: Option<&str>, default_filter: &str) -> Result<EnvFilter, LoggingError> {
    match env.map(str::trim).filter(|s| !s.is_empty()) {
        Some(value) => EnvFilter::try_new(value).map_err(|e| LoggingError::BadEnvFilter {
            value: value.to_owned(),
            reason: e.to_string(),
        }),
        None => EnvFilter::try_new(default_filter).map_err(|e| LoggingError::BadDefaultFilter {
            value: default_filter.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// Builds the subscriber; separate from [`init`] so tests can capture output.
fn build<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let base = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(true);
    match format {
        LogFormat::Plain => Box::new(base.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(
            base.json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
    }
}

/// stderr writer that first erases a live progress line (see
/// [`crate::progress`]), so log lines never get glued onto it.
#[derive(Debug, Clone, Copy)]
struct StderrWriter;

impl<'a> MakeWriter<'a> for StderrWriter {
    type Writer = StderrWriter;
    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

impl Write for StderrWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut err = io::stderr().lock();
        crate::progress::clear_live_line(&mut err)?;
        err.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        io::stderr().lock().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn capture(format: LogFormat, filter: &str, emit: impl FnOnce()) -> String {
        let out = Capture::default();
        let sub = build(
            format,
            EnvFilter::try_new(filter).unwrap(),
            false,
            out.clone(),
        );
        tracing::subscriber::with_default(sub, emit);
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn json_is_one_object_per_line_with_fields() {
        let out = capture(LogFormat::Json, "info", || {
            tracing::info!(watermark = 42_i64, link = "a", "flushed batch");
            tracing::debug!("filtered out");
            let span = tracing::info_span!("genesis", base = 7);
            let _g = span.enter();
            tracing::warn!("inside span");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert!(first["timestamp"].is_string(), "{first}");
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["target"], module_path!());
        assert_eq!(first["message"], "flushed batch");
        assert_eq!(first["watermark"], 42);
        assert_eq!(first["link"], "a");
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["level"], "WARN");
        assert_eq!(second["span"]["name"], "genesis");
    }

    #[test]
    fn plain_is_readable() {
        let out = capture(LogFormat::Plain, "info", || {
            tracing::info!(watermark = 42_i64, "flushed batch");
        });
        assert!(out.contains("INFO"), "{out}");
        assert!(out.contains("flushed batch watermark=42"), "{out}");
        assert!(
            !out.contains('\x1b'),
            "no ANSI when not a terminal: {out:?}"
        );
    }

    #[test]
    fn rust_log_overrides_default() {
        assert!(resolve_filter(None, "info").is_ok());
        assert!(
            resolve_filter(Some("  "), "info").is_ok(),
            "blank RUST_LOG is unset"
        );
        assert!(matches!(
            resolve_filter(Some("info,[bad"), "info"),
            Err(LoggingError::BadEnvFilter { .. })
        ));
        assert!(matches!(
            resolve_filter(None, "info,[bad"),
            Err(LoggingError::BadDefaultFilter { .. })
        ));
        let f = resolve_filter(Some("debug"), "warn").unwrap();
        assert_eq!(f.to_string(), "debug");
    }

    #[test]
    fn log_format_is_a_value_enum() {
        use clap::ValueEnum;
        assert_eq!(LogFormat::from_str("json", false), Ok(LogFormat::Json));
        assert_eq!(LogFormat::from_str("plain", false), Ok(LogFormat::Plain));
    }
}
