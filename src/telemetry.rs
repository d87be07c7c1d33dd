//! Logging through tracing, to stderr (journald picks it up under systemd).

use tracing_subscriber::EnvFilter;

/// Installs the subscriber. `RUST_LOG` overrides the default level (`info`).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
