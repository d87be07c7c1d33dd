//! The bodies of the operator commands `check-config`, `check-store`, `validate` and
//! `status`: part of the binary, beside `main.rs`, which parses the command line, runs the
//! shorter commands itself and turns every outcome into an exit code. Output goes through
//! `main.rs`'s `out!`, which ends quietly when the reader goes away (D34).

use anyhow::{Context, bail};
use ap_intake::admin::{self, Request, Response};
use ap_intake::cli::StatusWhat;
use ap_intake::config::{Config, Locations};
use ap_intake::delivery::target::PlatformClient;
use ap_intake::http::tls;
use ap_intake::queue::State;
use ap_intake::queue::sqlite::FILE_NAME;
use ap_intake::validate::Validator;
use ap_intake::{interfaces, status};
use std::path::Path;
use std::process::ExitCode;

/// The `[oauth2]` lines of `check-config`: what is accepted, which clients, which key.
fn print_oauth2(
    o: &ap_intake::config::OAuth2Server,
    a: ap_intake::config::Accept,
    signing: Option<&ap_intake::oauth2::SigningKey>,
) {
    let accepted: Vec<&str> = [
        (a.api_key, "api_key"),
        (a.bearer, "bearer"),
        (a.client_secret, "client_secret"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    out!("  auth:        {}", accepted.join(", "));
    let ids: Vec<&str> = o.clients.iter().map(|c| c.client_id.as_str()).collect();
    out!("  clients:     {} {}", ids.len(), ids.join(", "));
    match signing {
        Some(k) => out!(
            "  oauth2:      tokens signed {:?}, kid {}, iss {:?}, aud {:?}",
            k.alg,
            k.kid,
            o.issuer,
            o.audience
        ),
        None => out!("  oauth2:      no signing key: the service issues no tokens"),
    }
    if let Some(e) = &o.external {
        let from = match &e.keys {
            ap_intake::config::KeySource::Url(url) => url.clone(),
            ap_intake::config::KeySource::File(file) => file.display().to_string(),
        };
        out!(
            "  provider:    iss {:?}, aud {:?}, scopes from {:?}, keys from {from}",
            e.issuer,
            e.audience,
            e.scope_claim
        );
        // A provider out of reach now is a warning, not an error (D47): the service starts,
        // uses the set it last kept, and fetches again in the background.
        match ap_intake::oauth2::ProviderKeys::probe(&e.keys) {
            Ok(n) => out!("               {n} signing key(s) there now"),
            Err(why) => {
                out!("  warning:     {why}");
                out!(
                    "               the service starts anyway; bearer tokens of the provider \
                     get 503 until a key set is had (the last one kept in data_dir is used)"
                );
            }
        }
    }
}

/// Everything `serve` would check before listening, without opening the queue.
pub fn check_config(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    writable(&config.data_dir).map_err(|message| ap_intake::config::ConfigError::Invalid {
        path: path.to_path_buf(),
        key: "storage.data_dir".into(),
        message,
    })?;
    if let Some(t) = &config.server.tls {
        tls::server_config(t)?;
    }
    // The service reads the signing key at start; one it cannot use stops it (exit 78).
    let signing = match config
        .oauth2
        .as_ref()
        .and_then(|o| o.signing_key_file.as_ref())
    {
        Some(file) => Some(
            ap_intake::oauth2::SigningKey::load(file)
                .map_err(ap_intake::service::StartError::SigningKey)?,
        ),
        None => None,
    };
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
    if let Some(o) = &config.oauth2 {
        print_oauth2(o, config.accept, signing.as_ref());
    }
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
pub fn check_store(config: Option<&Path>) -> anyhow::Result<ExitCode> {
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
pub fn validate(
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

/// The interface at `path` (or one of its aliases), or an error naming it as an operator
/// would have typed it.
pub fn interface(path: &str) -> anyhow::Result<&'static interfaces::Interface> {
    interfaces::by_path(path).with_context(|| {
        format!("{path:?} is not an interface path, such as /general-ledger-codes/v1")
    })
}

/// `status request` for an id without a receipt.
const NO_RECEIPT: &str = "no receipt of that request: unknown id, older than [receipts] \
                          retention_days, or sent while receipts were off";

pub fn status_command(
    at: &Locations,
    json: bool,
    wide: bool,
    what: Option<StatusWhat>,
) -> anyhow::Result<()> {
    let interface_id = |path: Option<String>| -> anyhow::Result<Option<String>> {
        path.map(|p| interface(&p).map(|i| i.id.to_string()))
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
        Some(StatusWhat::Audit { since }) => Request::Audit {
            since_ms: since.as_deref().map(since_ms).transpose()?.unwrap_or(0),
        },
    };
    let response = admin::query(at, &req)?;
    if json {
        let value = match &response {
            Response::Status(r) => serde_json::to_string_pretty(&status::wire::Report::from(r))?,
            Response::Keys(k) => serde_json::to_string_pretty(k)?,
            Response::Parked(p) => {
                let parked: Vec<_> = p.iter().map(admin::wire::Parked::from).collect();
                serde_json::to_string_pretty(&parked)?
            }
            Response::Item(Some(i)) => serde_json::to_string_pretty(&admin::wire::Item::from(i))?,
            Response::Item(None) => bail!("no queued record with that key"),
            Response::Receipts(r) if r.is_empty() => bail!("{NO_RECEIPT}"),
            Response::Receipts(r) => {
                let shown: Vec<_> = r.iter().map(status::receipt::Shown::of).collect();
                serde_json::to_string_pretty(&shown)?
            }
            Response::Audit(records) => {
                let shown: Vec<_> = records.iter().map(admin::audit::Entry::from).collect();
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
        Response::Audit(records) => out_raw!(admin::audit::render(&records)),
        other => return unexpected(other),
    }
    Ok(())
}

/// `ap-intake replay` (D49), through the running service or on the stopped store.
pub fn replay_command(at: &Locations, asked: admin::replay::Asked) -> anyhow::Result<()> {
    match admin::query(at, &Request::Replay(asked))? {
        Response::Replayed(done) => {
            out_raw!(done.render());
            Ok(())
        }
        other => unexpected(other),
    }
}

/// `--since`: an RFC 3339 time or date, or a span back from now (`7d`), as unix ms.
pub fn since_ms(text: &str) -> anyhow::Result<u64> {
    let date = format!("{text}T00:00:00Z");
    let at = match humantime::parse_rfc3339_weak(text).or_else(|_| humantime::parse_rfc3339(&date))
    {
        Ok(t) => t,
        Err(_) => {
            let back = humantime::parse_duration(text).map_err(|_| {
                anyhow::anyhow!(
                    "{text:?} is neither a time (2026-11-01T00:00:00Z, 2026-11-01) nor \
                     a span back from now (7d, 24h)"
                )
            })?;
            std::time::SystemTime::now() - back
        }
    };
    Ok(at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
}

/// The admin socket's answer when it is not the one asked for.
pub fn unexpected(r: Response) -> anyhow::Result<()> {
    match r {
        Response::Error(e) => bail!("{e}"),
        other => bail!("unexpected answer: {other:?}"),
    }
}
