//! `ap-intake`: parse the command line, dispatch, turn the outcome into an exit code.
#![forbid(unsafe_code)]

use anyhow::{Context, bail};
use ap_intake::admin::{self, Request, Response};
use ap_intake::cli::{Cli, Command, KeyCommand};
use ap_intake::config::Config;
use ap_intake::queue::State;
use ap_intake::{keys, service, telemetry};
use clap::Parser;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: the intake allocates many small values (JSON
/// trees, queue nodes), and glibc's malloc took a third of the time (BENCHMARKS.md). Chosen
/// by the binary, not the library, so tests may measure allocations with their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status when the queue cannot be opened or is damaged, or a flush of it failed
/// (EX_IOERR, D29, D34, D40).
const EXIT_STORE: u8 = 74;
/// Exit status for a configuration error (EX_CONFIG, D34): the unit does not restart on it.
const EXIT_CONFIG: u8 = 78;

/// Writes a line to stdout. A reader that went away (`status | head`) ends the command
/// quietly; never a panic (D34).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            crate::stdout_failed(&e);
        }
    }};
}

/// [`out!`] for text that brings its own line ends.
macro_rules! out_raw {
    ($text:expr) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), "{}", $text) {
            crate::stdout_failed(&e);
        }
    }};
}

fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("ap-intake: cannot write the output: {e}");
    std::process::exit(1);
}

mod commands;
mod copies;

use commands::{check_config, check_store, status_command, unexpected, validate};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ap-intake: {}", report(&e));
            exit_code(&e)
        }
    }
}

/// The exit status of a failure (D34): 78 configuration, 74 store, 1 anything else.
fn exit_code(e: &anyhow::Error) -> ExitCode {
    for cause in e.chain() {
        if cause
            .downcast_ref::<ap_intake::config::ConfigError>()
            .is_some()
        {
            return ExitCode::from(EXIT_CONFIG);
        }
        let start = match cause.downcast_ref::<service::RunError>() {
            // D40: systemd starts the service again, and the store recovers from its WAL.
            Some(service::RunError::FlushFailed(_)) => return ExitCode::from(EXIT_STORE),
            // Starting again would meet the same schema: the node needs upgrading first.
            Some(service::RunError::Outdated { .. }) => return ExitCode::from(EXIT_CONFIG),
            Some(service::RunError::Start(e)) => Some(e),
            None => cause.downcast_ref::<service::StartError>(),
        };
        match start {
            Some(service::StartError::Queue {
                source: ap_intake::queue::StoreError::NewerSchema { .. },
                ..
            }) => return ExitCode::from(EXIT_CONFIG),
            Some(service::StartError::Queue { .. }) => return ExitCode::from(EXIT_STORE),
            Some(
                service::StartError::Tls(_)
                | service::StartError::SigningKey(_)
                | service::StartError::Schema(_)
                | service::StartError::NotMoved { .. },
            ) => {
                return ExitCode::from(EXIT_CONFIG);
            }
            _ => {}
        }
    }
    ExitCode::FAILURE
}

/// The error and its causes on one line. Our error types already say their cause in their
/// message, so a cause whose text is already there is not repeated.
fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::CheckStore {
            file: Some(file), ..
        } => return Ok(copies::check_copy(file)),
        Command::CheckStore { config, file: None } => return check_store(config.as_deref()),
        Command::Backup { config, file } => return copies::backup(config.as_deref(), file),
        Command::Restore { config, file } => return copies::restore(config.as_deref(), file),
        Command::MoveToPostgres { config } => return copies::move_to_postgres(config),
        _ => {}
    }
    if let Command::Validate {
        interface,
        accounting_type,
        config,
        json,
        files,
    } = &cli.command
    {
        let config = match config {
            Some(path) => Config::load(path)?,
            None => Config::sandbox_default(),
        };
        return Ok(validate(
            &config,
            interface,
            accounting_type.as_deref(),
            *json,
            files,
        ));
    }
    operate(cli).map(|()| ExitCode::SUCCESS)
}

fn operate(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            admin_listen,
        } => {
            let path = config;
            let mut config = match &path {
                Some(path) => Config::load(path)?,
                None => Config::sandbox_default(),
            };
            if let Some(addr) = listen {
                config.server.listen = addr;
            }
            match admin_listen.as_deref() {
                None => {}
                Some("off" | "") => config.admin.listen = None,
                Some(a) => {
                    config.admin.listen = Some(a.parse().map_err(|_| {
                        anyhow::anyhow!(
                            "--admin-listen {a:?} is not an address and port such as 127.0.0.1:9091 (or \"off\")"
                        )
                    })?);
                }
            }
            let _log = telemetry::init(&config.log)?;
            let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
            runtime.block_on(service::run(config, path))?;
            Ok(())
        }
        Command::CheckConfig { config } => check_config(&config),
        Command::PrintConfig => {
            out_raw!(ap_intake::config::EXAMPLE);
            Ok(())
        }
        Command::Status {
            config,
            json,
            wide,
            what,
        } => {
            let at = Config::locations(config.as_deref())?;
            status_command(&at, json, wide, what)
        }
        Command::Requeue {
            config,
            key,
            all_rejected: _,
            all_quarantined,
        } => {
            let at = Config::locations(config.as_deref())?;
            let req = match key {
                Some(key) => Request::Requeue { key },
                None if all_quarantined => Request::RequeueAll {
                    state: State::Quarantined,
                },
                None => Request::RequeueAll {
                    state: State::Rejected,
                },
            };
            match admin::query(&at, &req)? {
                Response::Requeued(0) if matches!(req, Request::Requeue { .. }) => {
                    bail!(
                        "nothing requeued: the key is not a rejected or quarantined record (see `ap-intake status rejected`)"
                    )
                }
                Response::Requeued(n) => {
                    out!("{n} record(s) back in the queue");
                    Ok(())
                }
                other => unexpected(other),
            }
        }
        Command::Replay {
            config,
            since,
            until,
            interface,
            keys,
            dry_run,
        } => {
            let at = Config::locations(config.as_deref())?;
            let asked = ap_intake::admin::replay::Asked {
                since_ms: commands::since_ms(&since).context("--since")?,
                until_ms: until
                    .as_deref()
                    .map(commands::since_ms)
                    .transpose()
                    .context("--until")?,
                interface: interface
                    .as_deref()
                    .map(|p| commands::interface(p).map(|i| i.id.to_string()))
                    .transpose()?,
                keys,
                dry_run,
            };
            commands::replay_command(&at, asked)
        }
        Command::Drop { config, key } => {
            let at = Config::locations(config.as_deref())?;
            match admin::query(&at, &Request::Drop { key })? {
                Response::Dropped(true) => {
                    out!("dropped");
                    Ok(())
                }
                Response::Dropped(false) => bail!(
                    "nothing dropped: the key is not a rejected or quarantined record (only those can be dropped)"
                ),
                other => unexpected(other),
            }
        }
        Command::CheckStore { .. }
        | Command::Backup { .. }
        | Command::Restore { .. }
        | Command::MoveToPostgres { .. }
        | Command::Validate { .. } => Ok(()),
        Command::Key {
            command:
                KeyCommand::Generate {
                    name,
                    client,
                    interfaces: paths,
                },
        } => {
            let (who, is_client) = match (name, client) {
                (_, Some(client)) => (client, true),
                (Some(name), None) => (name, false),
                (None, None) => anyhow::bail!("give --name or --client"),
            };
            anyhow::ensure!(!who.trim().is_empty(), "the name must not be empty");
            anyhow::ensure!(
                !who.contains(':'),
                "{} must not contain ':' ({})",
                if is_client {
                    "a client_id"
                } else {
                    "a key's name"
                },
                if is_client {
                    "HTTP Basic carries id:secret"
                } else {
                    "logs and receipts name OAuth 2.0 callers client:<id> and idp:<id>"
                }
            );
            for p in paths.iter().filter(|p| *p != "*") {
                commands::interface(p)?;
            }
            let key = keys::generate().map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            match is_client {
                true => out_raw!(keys::client_instructions(&who, &paths, &key)),
                false => out_raw!(keys::instructions(&who, &paths, &key)),
            }
            Ok(())
        }
        Command::Key {
            command: KeyCommand::GenerateSigning { file },
        } => {
            keys::write_signing_key(&file)?;
            out_raw!(keys::signing_instructions(&file));
            Ok(())
        }
    }
}
