//! The command line.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Accounts-payable intake appliance: ERP systems POST JSON records; ap-intake validates them,
/// turns them into XML and queues them durably for delivery to the AP platform.
#[derive(Debug, Parser)]
#[command(name = "ap-intake", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service. Without --config it runs as a sandbox: plain HTTP on 127.0.0.1:8080,
    /// no API key, data in ./ap-intake-data, nothing delivered to a platform.
    Serve {
        /// The TOML configuration file (see config.example.toml).
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// Listen for ERP clients here instead of [server] listen (e.g. 0.0.0.0:8443, or
        /// 127.0.0.1:0 for any free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// The admin listener (/healthz, /readyz, /metrics) here instead of [admin] listen;
        /// "off" turns it off.
        #[arg(long, value_name = "ADDR")]
        admin_listen: Option<String>,
    },
    /// Check a config file without starting: every key, the TLS certificate, key and client
    /// CA, the platform secret files and the schema overrides. Exits non-zero with the problem.
    CheckConfig {
        /// The TOML configuration file.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: PathBuf,
    },
    /// Print the example configuration, every key documented (a starting point for
    /// /etc/ap-intake/config.toml).
    PrintConfig,
    /// Show the queue: per interface pending, rejected and delivered counts, the age of the
    /// oldest pending record, the last delivery error and the next retry. Asks the running
    /// service over its admin socket, or reads the data directory when it is stopped.
    Status {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(
            long,
            short,
            value_name = "FILE",
            env = "AP_INTAKE_CONFIG",
            global = true
        )]
        config: Option<PathBuf>,
        /// Print JSON for scripts.
        #[arg(long, global = true)]
        json: bool,
        /// Every column (delivered, next retry, last success) and the whole last error,
        /// wider than 100 columns.
        #[arg(long)]
        wide: bool,
        /// Something more specific than the summary.
        #[command(subcommand)]
        what: Option<StatusWhat>,
    },
    /// Queue again the last delivered version of keys delivered in a window of time, for when
    /// the platform lost what it had taken (D49; needs [retention] delivered_days). A key with
    /// a newer version pending or parked is left alone; each replayed key is delivered once
    /// more, in the usual order. Works with the service running or stopped; prints what it
    /// queued, and how many named keys it could not replay.
    Replay {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// Delivered at or after: RFC 3339 (2026-11-01T08:00:00Z, or a date) or a span back
        /// from now (2d, 6h).
        #[arg(long, value_name = "TIME")]
        since: String,
        /// Delivered before (the same forms); now when omitted.
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// Only this interface (its path, e.g. /general-ledger-codes/v1).
        #[arg(long, value_name = "PATH")]
        interface: Option<String>,
        /// Only this key (as `status` lists keys); repeat for more.
        #[arg(long = "key", value_name = "KEY")]
        keys: Vec<String>,
        /// Say what would be queued; queue nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Put records the platform rejected, or that were quarantined, back in the queue, at
    /// the place they had.
    Requeue {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// The key, as `status rejected` or `status quarantined` lists it (e.g.
        /// gl-code:main/4000).
        #[arg(required_unless_present_any = ["all_rejected", "all_quarantined"],
              conflicts_with_all = ["all_rejected", "all_quarantined"])]
        key: Option<String>,
        /// Every rejected record.
        #[arg(long, conflicts_with = "all_quarantined")]
        all_rejected: bool,
        /// Every quarantined record.
        #[arg(long)]
        all_quarantined: bool,
    },
    /// Remove a rejected or quarantined record from the queue for good (it is never
    /// delivered; `status show KEY` prints it first if you need a copy).
    Drop {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// The key, as `status rejected` or `status quarantined` lists it.
        key: String,
    },
    /// Read the whole queue of a stopped service and report damage: every page, every item,
    /// the counters. Exit 0 when sound, 1 when damaged (what is damaged is printed).
    CheckStore {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// Check this queue file instead, a copy `backup` made, without changing it.
        #[arg(long, value_name = "FILE", conflicts_with = "config")]
        file: Option<PathBuf>,
    },
    /// Copy the queue to FILE, consistent as of one commit, receipts included (D45). Works
    /// while the service runs, which goes on storing meanwhile; run it as the service's user
    /// (or root). The copy is checked as `check-store --file` checks it. Exit 0 copied, 1
    /// the copy failed (no space, a damaged queue), 2 usage (FILE exists, the queue is in
    /// PostgreSQL: use pg_dump).
    Backup {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// Where the copy goes; never an existing file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Carry the embedded queue of a stopped service into PostgreSQL (D45), after setting
    /// [storage] backend = "postgres" and [storage.postgres] in the config: every record not
    /// yet delivered (pending, rejected, quarantined, with its place in line and attempts),
    /// the retry state and the receipts, in one transaction. The embedded queue is left as
    /// it was, marked as moved; a key the cluster already holds keeps the newer version. A
    /// second run copies nothing. Exit 0 moved, 1 failed (nothing was copied), 2 usage.
    MoveToPostgres {
        /// The service's config file, already switched to PostgreSQL.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: PathBuf,
    },
    /// Put a copy `backup` made in place of the queue (D45), the service stopped. The copy
    /// is checked first; the queue it replaces is kept beside it under a dated name, never
    /// deleted. Records acknowledged after the backup was made are not in the copy: the
    /// ERP systems must send them again. Exit 0 restored, 1 refused (the service runs, the
    /// copy is damaged), 2 usage.
    Restore {
        /// The service's config file (for its data directory); the sandbox default without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// The copy to restore.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Check JSON files offline, as the service would (D38): the same schemas (with
    /// [validation] schema_dir from --config), the same rules and the same answer. Nothing
    /// is queued. Exit 0 when every record is valid, 1 when some are not, 2 on a usage
    /// error (a file that cannot be read, an unknown interface).
    Validate {
        /// The interface's path, e.g. /general-ledger-codes/v1.
        #[arg(long, value_name = "PATH")]
        interface: String,
        /// The accountingType of an accounting-objects request.
        #[arg(long, value_name = "TYPE")]
        accounting_type: Option<String>,
        /// The service's config file (schema overrides, accounting types, record limit);
        /// the built-in defaults without.
        #[arg(long, short, value_name = "FILE", env = "AP_INTAKE_CONFIG")]
        config: Option<PathBuf>,
        /// Print the JSON body the service would answer, one line per file.
        #[arg(long)]
        json: bool,
        /// Request bodies to check; `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Manage API keys, OAuth 2.0 clients and the token signing key (D20, D47).
    Key {
        /// Key commands.
        #[command(subcommand)]
        command: KeyCommand,
    },
}

/// What `status` shows.
#[derive(Debug, Subcommand)]
pub enum StatusWhat {
    /// Keys of pending records.
    Pending {
        /// Only this interface (its path, e.g. /general-ledger-codes/v1).
        #[arg(long, value_name = "PATH")]
        interface: Option<String>,
    },
    /// Keys of records the platform rejected, each with the platform's reason.
    Rejected {
        /// Only this interface (its path, e.g. /general-ledger-codes/v1).
        #[arg(long, value_name = "PATH")]
        interface: Option<String>,
    },
    /// Keys of records that could not be read back or delivered (requeue or drop them).
    Quarantined {
        /// Only this interface (its path, e.g. /general-ledger-codes/v1).
        #[arg(long, value_name = "PATH")]
        interface: Option<String>,
    },
    /// One queued record: its state, attempts, last error and XML.
    Show {
        /// The key, as `status pending`, `status rejected` or `status quarantined` lists it.
        key: String,
    },
    /// The receipt of a request (D38): each record it queued and where it stands (pending,
    /// delivered, rejected, quarantined, superseded), as GET /requests/<id> shows it.
    Request {
        /// The request id (the `request_id` of the answer, or the `x-request-id` header).
        id: String,
    },
    /// The audit trail (D50): each requeue, drop, backup, restore, move, reload, start and
    /// stop, when, by which Unix user, with its arguments and what it changed.
    Audit {
        /// From this time on: RFC 3339 (2026-11-01T00:00:00Z, or a date) or a span back from
        /// now (7d, 24h); everything kept when omitted.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
    },
}

/// Key subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Print a new random API key once, and the [[api_keys]] block (with its SHA-256) to add
    /// to the config file; with --client, a new OAuth 2.0 client secret and its
    /// [[oauth2.clients]] block (D47). The key or secret itself is never stored.
    Generate {
        /// A name for the key, shown in logs instead of the key (e.g. erp-main).
        #[arg(long, required_unless_present = "client", conflicts_with = "client")]
        name: Option<String>,
        /// Make an OAuth 2.0 client with this client_id instead (the spec's Client_Id).
        #[arg(long, value_name = "CLIENT_ID")]
        client: Option<String>,
        /// Interface paths the key may use (repeat or comma-separate); all when omitted.
        #[arg(long = "interface", value_name = "PATH", value_delimiter = ',')]
        interfaces: Vec<String>,
    },
    /// Write a new Ed25519 private key (PEM, PKCS#8, mode 0600) to FILE for [oauth2]
    /// signing_key_file, and print the [oauth2] lines. Every node of a cluster is given the
    /// same file. Exit 0 written, 1 when FILE exists (it is never replaced) or cannot be
    /// written.
    GenerateSigning {
        /// Where to write the key.
        file: PathBuf,
    },
}
