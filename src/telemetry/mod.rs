//! Logging through tracing: text or JSON, to stderr (journald under systemd) and/or files in
//! a directory, rotated daily (UTC midnight) with a retention count.
//!
//! Under journald (D36) each stderr line starts with its syslog priority (`<3>` error, `<4>`
//! warn, `<6>` info, `<7>` debug) and text lines carry no timestamp (journald adds its own).
//! Which requests get a line of their own is `[log] requests`, and refusals (4xx) only up to a
//! number a minute per client address and status ([`refusals`], D44); all of them are counted
//! for a summary line per minute with traffic, beside the deliveries of that minute
//! ([`RequestLog`], [`Summary`]).

pub mod refusals;
mod summary;

pub use summary::{Deliveries, SUMMARY_EVERY, Summary, summary_line};

pub use crate::config::RequestLines;
use crate::config::{Log, LogFormat};
use refusals::Refusals;
use std::fmt;
use std::net::IpAddr;

use std::sync::atomic::{AtomicU64, Ordering};
use tracing::{Event, Level, Subscriber};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// Keeps the file writer's buffer flushing until dropped (at exit).
pub struct Guard(
    #[expect(dead_code, reason = "held, not read: dropping it flushes the log file")]
    Option<WorkerGuard>,
);

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log directory cannot be created or written.
    #[error("log.dir {dir}: {message}")]
    Dir {
        /// The directory.
        dir: String,
        /// What failed.
        message: String,
    },
}

/// The syslog priority journald reads from a line's `<N>` prefix (D36).
pub fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Whether stderr goes to journald: systemd sets `JOURNAL_STREAM` for a service whose
/// stderr is connected to the journal.
pub fn under_journald() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty())
}

/// Writes the event's syslog priority, then the line of the wrapped formatter.
struct Priority<F>(F);

impl<S, N, F> FormatEvent<S, N> for Priority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

fn layer<S>(
    format: LogFormat,
    writer: BoxMakeWriter,
    ansi: bool,
    journald: bool,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false);
    match format {
        LogFormat::Text if journald => base
            .with_ansi(false)
            .without_time()
            .map_event_format(Priority)
            .boxed(),
        LogFormat::Text => base.with_ansi(ansi).boxed(),
        LogFormat::Json => {
            let json = base.json().flatten_event(true).with_current_span(false);
            if journald {
                json.map_event_format(Priority).boxed()
            } else {
                json.boxed()
            }
        }
    }
}

/// Installs the subscriber for `log`. `RUST_LOG`, when set, overrides `log.level`.
pub fn init(log: &Log) -> Result<Guard, LogError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let mut layers = Vec::new();
    if log.stderr {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let stderr = BoxMakeWriter::new(std::io::stderr);
        layers.push(layer(log.format, stderr, ansi, under_journald()));
    }
    let mut guard = None;
    if let Some(dir) = &log.dir {
        let err = |message: String| LogError::Dir {
            dir: dir.display().to_string(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
        let appender = RollingFileAppender::builder()
            .rotation(Rotation::DAILY)
            .filename_prefix("ap-intake")
            .filename_suffix("log")
            .max_log_files(log.max_files)
            .build(dir)
            .map_err(|e| err(e.to_string()))?;
        let (writer, g) = tracing_appender::non_blocking(appender);
        guard = Some(g);
        layers.push(layer(log.format, BoxMakeWriter::new(writer), false, false));
    }
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    if tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init()
        .is_ok()
    {
        let _ = LEVEL.set(handle);
    }
    Ok(Guard(guard))
}

type Layers = Vec<Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>>;
type LevelHandle = tracing_subscriber::reload::Handle<
    EnvFilter,
    tracing_subscriber::layer::Layered<Layers, tracing_subscriber::Registry>,
>;

/// The installed filter, for a reload to change (D34).
static LEVEL: std::sync::OnceLock<LevelHandle> = std::sync::OnceLock::new();

/// Why the log level of the running process was not changed.
#[derive(Debug, thiserror::Error)]
pub enum LevelError {
    /// `[log] level` is not a filter.
    #[error("log.level {level:?}: {source}")]
    Invalid {
        /// The level as written.
        level: String,
        /// Why it is not one.
        source: tracing_subscriber::filter::ParseError,
    },
    /// The subscriber refused the new filter.
    #[error("the log level cannot be changed: {0}")]
    Swap(#[from] tracing_subscriber::reload::Error),
}

/// Sets the log level filter (`[log] level`) of the running process; `RUST_LOG`, when set,
/// still wins. Does nothing where [`init`] did not install the subscriber (tests).
pub fn set_level(level: &str) -> Result<(), LevelError> {
    if std::env::var_os("RUST_LOG").is_some() {
        return Ok(());
    }
    let filter = EnvFilter::try_new(level).map_err(|source| LevelError::Invalid {
        level: level.to_string(),
        source,
    })?;
    match LEVEL.get() {
        Some(handle) => Ok(handle.reload(filter)?),
        None => Ok(()),
    }
}

impl RequestLines {
    /// Whether a request answered with `status` gets its own line.
    pub fn wants(self, status: u16) -> bool {
        match self {
            Self::Failures => status >= 400,
            Self::All => true,
            Self::Off => false,
        }
    }
}

/// The lowest status counted; statuses are three digits.
const FIRST_STATUS: u16 = 100;

/// The per-request log policy and the requests answered since the last summary, one atomic
/// counter per status: counting costs one relaxed add, no lock (refusals take one, D44).
pub struct RequestLog {
    lines: RequestLines,
    counts: Box<[AtomicU64]>,
    refusals: Refusals,
}

impl RequestLog {
    /// Nothing counted yet.
    pub fn new(lines: RequestLines) -> Self {
        Self {
            lines,
            counts: (FIRST_STATUS..1000).map(|_| AtomicU64::new(0)).collect(),
            refusals: Refusals::default(),
        }
    }

    /// Counts a request from `peer` answered with `status`; true when it gets a line of its
    /// own: as `[log] requests` says, and for a refusal (4xx) only among the first of the
    /// minute from that address (D44).
    pub fn answered(&self, status: u16, peer: Option<IpAddr>) -> bool {
        let slot = usize::from(status.clamp(FIRST_STATUS, 999) - FIRST_STATUS);
        if let Some(c) = self.counts.get(slot) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.lines.wants(status)
            && (!(400..500).contains(&status) || self.refusals.admit(peer, status))
    }

    /// A TLS handshake from `peer` failed; true when it gets a line of its own (D44: as a
    /// refusal, ten a minute per address, whatever `[log] requests` says).
    pub fn handshake_failed(&self, peer: IpAddr) -> bool {
        self.refusals.admit(Some(peer), refusals::HANDSHAKE)
    }

    /// The counts since the last call, by status (ascending, zeros left out), reset to zero.
    pub fn take(&self) -> Vec<(u16, u64)> {
        (FIRST_STATUS..)
            .zip(self.counts.iter())
            .filter(|(_, c)| c.load(Ordering::Relaxed) > 0)
            .map(|(status, c)| (status, c.swap(0, Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn priorities_follow_syslog() {
        let got = [
            Level::ERROR,
            Level::WARN,
            Level::INFO,
            Level::DEBUG,
            Level::TRACE,
        ]
        .map(priority);
        assert_eq!(got, [3, 4, 6, 7, 7]);
    }

    #[test]
    fn request_lines_follow_the_setting() {
        let failures = RequestLog::new(RequestLines::Failures);
        let peer = Some(IpAddr::from([10, 0, 0, 1]));
        assert!(!failures.answered(202, peer) && !failures.answered(207, peer));
        assert!(failures.answered(400, peer) && failures.answered(408, peer));
        assert!(failures.answered(503, peer));
        assert!(RequestLog::new(RequestLines::All).answered(202, peer));
        let off = RequestLog::new(RequestLines::Off);
        assert!(!off.answered(202, peer) && !off.answered(500, peer));
        // D44: refusals (4xx) from one address get ten lines a minute; errors all of theirs.
        let lines = |status| (0..100).filter(|_| failures.answered(status, peer)).count();
        assert_eq!((lines(401), lines(431), lines(500)), (10, 10, 100));
    }

    #[test]
    fn counts_by_status_and_reset_when_taken() {
        let log = RequestLog::new(RequestLines::Off);
        for status in [202, 400, 202, 207, 202, 400, 999, 0] {
            log.answered(status, None);
        }
        assert_eq!(
            log.take(),
            [(100, 1), (202, 3), (207, 1), (400, 2), (999, 1)]
        );
        assert_eq!(log.take(), []);
        assert_eq!(summary_line(&log.take(), "in the last minute"), None);
        assert_eq!(
            summary_line(&[(202, 1234), (207, 3), (400, 12)], "in the last minute").as_deref(),
            Some("requests in the last minute: 202=1234 207=3 400=12")
        );
    }

    #[test]
    fn counting_from_many_threads_loses_nothing() {
        let log = Arc::new(RequestLog::new(RequestLines::Failures));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let _ = log.answered(202, None);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(log.take(), [(202, 40_000)]);
    }
}
