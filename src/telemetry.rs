//! Logging through tracing: text or JSON, to stderr (journald under systemd) and/or files in
//! a directory, rotated daily (UTC midnight) with a retention count.

use crate::config::{Log, LogFormat};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::prelude::*;

/// Keeps the file writer's buffer flushing until dropped (at exit).
pub struct Guard(#[allow(dead_code)] Option<WorkerGuard>);

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

fn layer<S>(
    format: LogFormat,
    writer: BoxMakeWriter,
    ansi: bool,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let base = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_target(false);
    match format {
        LogFormat::Text => base.with_ansi(ansi).boxed(),
        LogFormat::Json => base
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .boxed(),
    }
}

/// Installs the subscriber for `log`. `RUST_LOG`, when set, overrides `log.level`.
pub fn init(log: &Log) -> Result<Guard, LogError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    let mut layers = Vec::new();
    if log.stderr {
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        layers.push(layer(log.format, BoxMakeWriter::new(std::io::stderr), ansi));
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
        layers.push(layer(log.format, BoxMakeWriter::new(writer), false));
    }
    let _ = tracing_subscriber::registry()
        .with(layers)
        .with(filter)
        .try_init();
    Ok(Guard(guard))
}
