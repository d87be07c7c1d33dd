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
    },
    /// Manage API keys.
    Key {
        /// Key commands.
        #[command(subcommand)]
        command: KeyCommand,
    },
}

/// Key subcommands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Print a new random API key once, and the [[api_keys]] block (with its SHA-256) to add
    /// to the config file. The key itself is never stored.
    Generate {
        /// A name for the key, shown in logs instead of the key (e.g. erp-main).
        #[arg(long)]
        name: String,
        /// Interface paths the key may use (repeat or comma-separate); all when omitted.
        #[arg(long = "interface", value_name = "PATH", value_delimiter = ',')]
        interfaces: Vec<String>,
    },
}
