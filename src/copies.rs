//! The bodies of `backup`, `restore`, `check-store --file` and `move-to-postgres` (D45):
//! copies of the embedded queue. Part of the binary, beside `commands.rs`; the copying itself is the queue's
//! (`queue::sqlite::backup`).

use ap_intake::admin::audit::{self, Actor};
use ap_intake::admin::{self, Request, Response};
use ap_intake::config::{Backend, Config, Locations, redacted_url};
use ap_intake::queue::audit::AuditRecord;
use ap_intake::queue::sqlite::FILE_NAME;
use ap_intake::queue::sqlite::backup::{self, Contents};
use ap_intake::queue::{Mode, PostgresStore, Store, StoreError, moving};
use ap_intake::status::receipt::rfc3339;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

/// Exit status of a command used wrongly (D34's 1 is kept for a failure of the work).
const USAGE: u8 = 2;

/// `ap-intake backup FILE`.
pub fn backup(config: Option<&Path>, file: &Path) -> anyhow::Result<ExitCode> {
    let at = Config::locations(config)?;
    if let Backend::Postgres(pg) = &at.storage.backend {
        eprintln!(
            "ap-intake backup: this configuration keeps the queue in PostgreSQL ({}); back it \
             up with pg_dump (README: \"Backup and restore\")",
            redacted_url(&pg.url)
        );
        return Ok(ExitCode::from(USAGE));
    }
    if file.exists() {
        eprintln!(
            "ap-intake backup: {} exists; a backup never replaces a file: choose another name",
            file.display()
        );
        return Ok(ExitCode::from(USAGE));
    }
    let started = std::time::Instant::now();
    match backup::backup(&at.data_dir, file) {
        Ok(contents) => {
            out!(
                "{}: {}, copied in {:.1} s",
                file.display(),
                shown(&contents),
                started.elapsed().as_secs_f64()
            );
            // D50: through the running service (in the name the socket's peer has), or on
            // the stopped store.
            let args = json!({ "file": file.display().to_string() });
            let note = Request::Note {
                action: "backup".into(),
                args,
                changed: counted(&contents),
            };
            match admin::query(&at, &note) {
                Ok(Response::Noted) => Ok(ExitCode::SUCCESS),
                Ok(other) => {
                    eprintln!(
                        "ap-intake backup: copied, but not recorded in the audit trail: {other:?}"
                    );
                    Ok(ExitCode::FAILURE)
                }
                Err(e) => {
                    eprintln!("ap-intake backup: copied, but not recorded in the audit trail: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Err(e) => {
            eprintln!("ap-intake backup: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `ap-intake restore FILE`.
pub fn restore(config: Option<&Path>, file: &Path) -> anyhow::Result<ExitCode> {
    let at = Config::locations(config)?;
    if let Backend::Postgres(pg) = &at.storage.backend {
        eprintln!(
            "ap-intake restore: this configuration keeps the queue in PostgreSQL ({}); restore \
             it with pg_restore",
            redacted_url(&pg.url)
        );
        return Ok(ExitCode::from(USAGE));
    }
    let stamp = rfc3339(ap_intake::queue::now_ms())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>();
    // D50: the trail is never shortened by a restore: what the queue replaced holds is
    // carried into the copy.
    let trail = trail_of(&at);
    match backup::restore(&at.data_dir, file, &stamp) {
        Ok(restored) => {
            let c = &restored.contents;
            out!("restored {}: {}", file.display(), shown(c));
            let args = json!({ "file": file.display().to_string() });
            if let Err(e) = carry_and_record(&at, &trail, "restore", &args, &counted(c)) {
                eprintln!("ap-intake restore: restored, but the audit trail was not: {e}");
                return Ok(ExitCode::FAILURE);
            }
            if let Some(kept) = &restored.kept {
                out!("the queue it replaced is kept as {}", kept.display());
            }
            let since = c
                .made_at_ms
                .map_or_else(|| "the copy was made".to_string(), rfc3339);
            out!(
                "records acknowledged after {since} are not in it: have the ERP systems send \
                 again what they sent since then (a record sent twice replaces itself, D16)"
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(StoreError::Busy(dir)) => {
            eprintln!(
                "ap-intake restore: the service is running on {dir}; stop it first \
                 (systemctl stop ap-intake), then restore"
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!(
                "ap-intake restore: {} was not restored: {e}",
                file.display()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `ap-intake move-to-postgres`.
pub fn move_to_postgres(config: &Path) -> anyhow::Result<ExitCode> {
    let at = Config::locations(Some(config))?;
    let Backend::Postgres(pg) = &at.storage.backend else {
        eprintln!(
            "ap-intake move-to-postgres: {} keeps the queue in the embedded store; set \
             [storage] backend = \"postgres\" and fill [storage.postgres] first (README: \
             \"Moving to PostgreSQL\")",
            config.display()
        );
        return Ok(ExitCode::from(USAGE));
    };
    let cluster = match PostgresStore::open(pg, Mode::Inspect) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ap-intake move-to-postgres: nothing was moved: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let shown = redacted_url(&pg.url);
    let started = std::time::Instant::now();
    let moved = moving::move_to_postgres(&at.data_dir, &cluster);
    // D50: the trail came along with the queue; the move is its next record.
    let noted = moved
        .as_ref()
        .ok()
        .filter(|m| m.moved_before_ms.is_none())
        .map(|m| {
            let changed = json!({ "items": m.items, "receipts": m.receipts,
                              "kept_newer": m.kept_newer });
            let args = json!({ "from": at.data_dir.display().to_string(), "to": shown });
            audit::record(
                &cluster,
                &Actor::current(),
                "move-to-postgres",
                &args,
                &changed,
            )
        });
    let _ = cluster.close();
    if let Some(Err(e)) = noted {
        eprintln!("ap-intake move-to-postgres: moved, but the move is not in the audit trail: {e}");
        return Ok(ExitCode::FAILURE);
    }
    match moved {
        Ok(m) => {
            if let Some(before) = m.moved_before_ms {
                out!(
                    "{}: moved to PostgreSQL at {}; nothing copied again",
                    at.data_dir.join(FILE_NAME).display(),
                    rfc3339(before)
                );
                return Ok(ExitCode::SUCCESS);
            }
            let [pending, rejected, quarantined] = m.items;
            out!(
                "moved {} records ({pending} pending, {rejected} rejected, {quarantined} \
                 quarantined) and {} receipts into {shown} in {:.1} s",
                pending + rejected + quarantined,
                m.receipts,
                started.elapsed().as_secs_f64()
            );
            if m.kept_newer > 0 {
                out!(
                    "{} keys the cluster already held in a newer version kept it (D15)",
                    m.kept_newer
                );
            }
            out!(
                "{} is left as it was, marked as moved; start the service on PostgreSQL now",
                at.data_dir.join(FILE_NAME).display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(StoreError::Busy(dir)) => {
            eprintln!(
                "ap-intake move-to-postgres: a service is running on {dir}; stop it first \
                 (systemctl stop ap-intake)"
            );
            Ok(ExitCode::FAILURE)
        }
        Err(StoreError::Missing(file)) => {
            eprintln!("ap-intake move-to-postgres: no embedded queue at {file}: nothing to move");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            // The copy is one transaction: it failed whole, or (the count check) says so.
            eprintln!("ap-intake move-to-postgres: the move did not complete: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `ap-intake check-store --file FILE`: 0 sound, 1 damaged or unreadable.
pub fn check_copy(file: &Path) -> ExitCode {
    match backup::verify_copy(file) {
        Ok(problems) if problems.is_empty() => {
            let contents = backup::describe_copy(file).map(|c| shown(&c));
            out!(
                "{}: sound ({})",
                file.display(),
                contents.unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Ok(problems) => {
            out!("{}: damaged", file.display());
            problems.iter().for_each(|p| out!("  {p}"));
            ExitCode::FAILURE
        }
        Err(e) => {
            out!("{}: cannot be checked: {e}", file.display());
            ExitCode::FAILURE
        }
    }
}

/// What a copy holds, for its audit record.
fn counted(c: &Contents) -> serde_json::Value {
    json!({ "pending": c.pending, "rejected": c.rejected, "quarantined": c.quarantined,
            "receipts": c.receipts })
}

/// The audit trail of the queue in the data directory, when it can be read.
fn trail_of(at: &Locations) -> Result<Vec<AuditRecord>, String> {
    let store = ap_intake::queue::open(&at.storage, &at.data_dir, Mode::Inspect)
        .map_err(|e| e.to_string())?;
    let trail = store.audit_trail(0, usize::MAX).map_err(|e| e.to_string());
    let _ = store.close();
    trail
}

/// Adds the records of `trail` the queue in the data directory lacks, then a record of
/// `action` by the user running this command.
fn carry_and_record(
    at: &Locations,
    trail: &Result<Vec<AuditRecord>, String>,
    action: &str,
    args: &serde_json::Value,
    changed: &serde_json::Value,
) -> Result<(), StoreError> {
    let store = ap_intake::queue::open(&at.storage, &at.data_dir, Mode::Inspect)?;
    let mut changed = changed.clone();
    match trail {
        Ok(records) => {
            for r in records {
                store.audit(r)?;
            }
            changed["audit_records_carried"] = json!(records.len());
        }
        // A queue restored because it was damaged may have had no trail left to read.
        Err(e) => changed["audit_trail_unreadable"] = json!(e),
    }
    let done = audit::record(store.as_ref(), &Actor::current(), action, args, &changed);
    let _ = store.close();
    done
}

fn shown(c: &Contents) -> String {
    let made = c
        .made_at_ms
        .map_or_else(String::new, |t| format!(", as of {}", rfc3339(t)));
    format!(
        "{} pending, {} rejected, {} quarantined, {} receipts{made}",
        c.pending, c.rejected, c.quarantined, c.receipts
    )
}
