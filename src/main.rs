//! `ap-intake`: parse the command line, dispatch, turn the outcome into an exit code.
#![forbid(unsafe_code)]

use anyhow::{Context, bail};
use ap_intake::admin::{self, Request, Response};
use ap_intake::cli::{Cli, Command, KeyCommand, StatusWhat};
use ap_intake::config::{Config, Locations};
use ap_intake::delivery::target::PlatformClient;
use ap_intake::http::tls;
use ap_intake::queue::State;
use ap_intake::queue::sqlite::FILE_NAME;
use ap_intake::validate::Validator;
use ap_intake::{interfaces, keys, service, status, telemetry};
use clap::Parser;
use std::path::Path;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: the intake allocates many small values (JSON
/// trees, queue nodes), and glibc's malloc took a third of the time (BENCHMARKS.md). Chosen
/// by the binary, not the library, so tests may measure allocations with their own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status when the queue cannot be opened or is damaged (EX_IOERR, D29, D34).
const EXIT_STORE: u8 = 74;
/// Exit status for a configuration error (EX_CONFIG, D34): the unit does not restart on it.
const EXIT_CONFIG: u8 = 78;

/// Writes a line to stdout. A reader that went away (`status | head`) ends the command
/// quietly; never a panic (D34).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            stdout_failed(&e);
        }
    }};
}

/// [`out!`] for text that brings its own line ends.
macro_rules! out_raw {
    ($text:expr) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), "{}", $text) {
            stdout_failed(&e);
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
        match cause.downcast_ref::<service::StartError>() {
            Some(service::StartError::Queue { .. }) => return ExitCode::from(EXIT_STORE),
            Some(service::StartError::Tls(_) | service::StartError::Schema(_)) => {
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
    if let Command::CheckStore { config } = &cli.command {
        return check_store(config.as_deref());
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
        Command::CheckStore { .. } | Command::Validate { .. } => Ok(()),
        Command::Key {
            command:
                KeyCommand::Generate {
                    name,
                    interfaces: paths,
                },
        } => {
            anyhow::ensure!(!name.trim().is_empty(), "--name must not be empty");
            for p in &paths {
                anyhow::ensure!(
                    p == "*" || interfaces::by_path(p).is_some(),
                    "{p:?} is not an interface path, such as /general-ledger-codes/v1"
                );
            }
            let key = keys::generate().map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
            out_raw!(keys::instructions(&name, &paths, &key));
            Ok(())
        }
    }
}

/// Everything `serve` would check before listening, without opening the queue.
fn check_config(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    writable(&config.data_dir).map_err(|message| ap_intake::config::ConfigError::Invalid {
        path: path.to_path_buf(),
        key: "storage.data_dir".into(),
        message,
    })?;
    if let Some(t) = &config.server.tls {
        tls::server_config(t)?;
    }
    let validator = Validator::load(config.schema_dir.as_deref())?;
    let overridden = interfaces::INTERFACES
        .iter()
        .filter(|i| validator.origin(i).is_some())
        .count();
    let listener = match &config.server.tls {
        Some(t) => match (&t.client_ca, t.client_auth) {
            (None, _) => "https".to_string(),
            (Some(_), auth) => format!("https, client certificates {auth:?}").to_lowercase(),
        },
        None => "plain http".to_string(),
    };
    out!("{}: OK", path.display());
    out!(
        "  mode:        {}",
        if config.sandbox {
            "sandbox (D21)"
        } else {
            "production"
        }
    );
    out!("  listen:      {} ({listener})", config.server.listen);
    match config.admin.listen {
        Some(a) => out!("  admin:       http://{a}/ (healthz, readyz, metrics)"),
        None => out!("  admin:       off"),
    }
    out!("  data dir:    {}", config.data_dir.display());
    match &config.platform {
        Some(p) => {
            out!("  platform:    {}", p.url);
            let n = &p.network;
            let mut extras = Vec::new();
            if n.ca_pem.is_some() {
                extras.push("ca_file".to_string());
            }
            if n.client_pem.is_some() {
                extras.push("client certificate".to_string());
            }
            extras.push(match &n.proxy {
                Some(proxy) => format!("proxy {proxy}"),
                None => "proxy from the environment, if any".to_string(),
            });
            if let Some(o) = &n.oauth2 {
                extras.push(format!("OAuth2 via {}", o.token_url));
            }
            out!("               {}", extras.join(", "));
            // The same client the service builds: TLS and proxy settings that cannot be used
            // are reported now.
            PlatformClient::new(p, config.delivery.timeout)
                .map_err(|e| anyhow::anyhow!("[platform]: {e}"))?;
        }
        None => out!("  platform:    sandbox sink"),
    }
    out!("  api keys:    {}", config.api_keys.len());
    out!(
        "  schemas:     {} compiled, {overridden} from schema_dir",
        interfaces::INTERFACES.len()
    );
    Ok(())
}

/// Directories the shipped unit lets the service write (`ProtectSystem=strict`).
const UNIT_WRITABLE: [&str; 3] = ["/var/lib/ap-intake", "/var/log/ap-intake", "/run/ap-intake"];

/// Whether the service could keep its queue in `dir`: the directory, or the nearest one
/// that exists above it (the service creates the rest), is writable by this user. Nothing is
/// created. Run as the service's user (`sudo -u ap-intake`), this is the service's view.
fn writable(dir: &Path) -> Result<(), String> {
    let existing = dir
        .ancestors()
        .find(|p| p.exists() || p.as_os_str().is_empty())
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !existing.is_dir() {
        return Err(format!(
            "{} is not writable: {} is not a directory",
            dir.display(),
            existing.display()
        ));
    }
    rustix::fs::access(
        existing,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .map_err(|e| {
        format!(
            "{} is not writable by this user ({}: {e})",
            dir.display(),
            existing.display()
        )
    })?;
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !UNIT_WRITABLE.iter().any(|w| absolute.starts_with(w)) {
        out!(
            "  note:        the shipped systemd unit only lets the service write {}; for {} add \
             ReadWritePaths= with `systemctl edit ap-intake`",
            UNIT_WRITABLE.join(", "),
            absolute.display()
        );
    }
    Ok(())
}

/// `check-store` (D29): 0 sound, 1 damaged or unreadable, with what was found.
fn check_store(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let at = Config::locations(config)?;
    if let ap_intake::config::Backend::Postgres(pg) = &at.storage.backend {
        // D29's check is of the embedded file; PostgreSQL checks its own pages.
        bail!(
            "check-store reads the embedded SQLite queue; this configuration keeps the queue in \
             PostgreSQL ({}), whose integrity its own tools check (amcheck, pg_amcheck)",
            ap_intake::config::redacted_url(&pg.url)
        );
    }
    match ap_intake::queue::sqlite::verify_file(&at.data_dir) {
        Ok(problems) if problems.is_empty() => {
            out!("{}: sound", at.data_dir.join(FILE_NAME).display());
            Ok(ExitCode::SUCCESS)
        }
        Ok(problems) => {
            out!("{}: damaged", at.data_dir.join(FILE_NAME).display());
            problems.iter().for_each(|p| out!("  {p}"));
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            out!(
                "{}: cannot be checked: {e}",
                at.data_dir.join(FILE_NAME).display()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `ap-intake validate` (D38): 0 every record valid, 1 some not, 2 usage.
fn validate(
    config: &Config,
    interface: &str,
    accounting_type: Option<&str>,
    json: bool,
    files: &[std::path::PathBuf],
) -> ExitCode {
    let usage = |e: &dyn std::fmt::Display| {
        eprintln!("ap-intake validate: {e}");
        ExitCode::from(2)
    };
    let offline = match ap_intake::offline::Offline::new(config, interface, accounting_type) {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    let mut all_valid = true;
    for file in files {
        let answer = match offline.check_file(file) {
            Ok(a) => a,
            Err(e) => return usage(&e),
        };
        all_valid &= answer.valid;
        if json {
            out!("{}", String::from_utf8_lossy(&answer.body));
        } else {
            out_raw!(answer.render(file));
        }
    }
    if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `status request` for an id without a receipt.
const NO_RECEIPT: &str = "no receipt of that request: unknown id, older than [receipts] \
                          retention_days, or sent while receipts were off";

fn status_command(
    at: &Locations,
    json: bool,
    wide: bool,
    what: Option<StatusWhat>,
) -> anyhow::Result<()> {
    let interface_id = |path: Option<String>| -> anyhow::Result<Option<String>> {
        path.map(|p| {
            interfaces::by_path(&p)
                .map(|i| i.id.to_string())
                .with_context(|| {
                    format!("{p:?} is not an interface path, such as /general-ledger-codes/v1")
                })
        })
        .transpose()
    };
    let req = match what {
        None => Request::Status,
        Some(StatusWhat::Pending { interface }) => Request::Keys {
            state: State::Pending,
            interface: interface_id(interface)?,
        },
        Some(StatusWhat::Rejected { interface }) => Request::Keys {
            state: State::Rejected,
            interface: interface_id(interface)?,
        },
        Some(StatusWhat::Quarantined { interface }) => Request::Keys {
            state: State::Quarantined,
            interface: interface_id(interface)?,
        },
        Some(StatusWhat::Show { key }) => Request::Show { key },
        Some(StatusWhat::Request { id }) => Request::Receipts { request_id: id },
    };
    let response = admin::query(at, &req)?;
    if json {
        let value = match &response {
            Response::Status(r) => serde_json::to_string_pretty(r)?,
            Response::Keys(k) => serde_json::to_string_pretty(k)?,
            Response::Parked(p) => serde_json::to_string_pretty(p)?,
            Response::Item(Some(i)) => serde_json::to_string_pretty(i)?,
            Response::Item(None) => bail!("no queued record with that key"),
            Response::Receipts(r) if r.is_empty() => bail!("{NO_RECEIPT}"),
            Response::Receipts(r) => {
                let shown: Vec<_> = r.iter().map(status::receipt::Shown::of).collect();
                serde_json::to_string_pretty(&shown)?
            }
            other => return unexpected(other.clone()),
        };
        out!("{value}");
        return Ok(());
    }
    match response {
        Response::Status(r) => out_raw!(status::render(&r, wide)),
        Response::Keys(keys) => keys.iter().for_each(|k| out!("{k}")),
        Response::Parked(parked) => parked.iter().for_each(|p| out!("{}\t{}", p.key, p.reason)),
        Response::Item(Some(item)) => {
            out!("interface:  {}", item.interface);
            out!("state:      {:?}", item.state);
            out!("version:    {}", item.version);
            out!("attempts:   {}", item.attempts);
            out!("last error: {}", item.last_error.as_deref().unwrap_or("-"));
            out!("\n{}", item.xml);
        }
        Response::Item(None) => bail!("no queued record with that key"),
        Response::Receipts(r) if r.is_empty() => bail!("{NO_RECEIPT}"),
        Response::Receipts(r) => r.iter().for_each(|r| out_raw!(status::receipt::render(r))),
        other => return unexpected(other),
    }
    Ok(())
}

fn unexpected(r: Response) -> anyhow::Result<()> {
    match r {
        Response::Error(e) => bail!("{e}"),
        other => bail!("unexpected answer: {other:?}"),
    }
}
