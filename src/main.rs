//! `ap-intake`: parse the command line, dispatch, turn the outcome into an exit code.
#![forbid(unsafe_code)]

use anyhow::Context;
use ap_intake::cli::{Cli, Command, KeyCommand};
use ap_intake::config::Config;
use ap_intake::{interfaces, keys, service, telemetry};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ap-intake: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { config } => {
            let config = match config {
                Some(path) => Config::load(&path)?,
                None => Config::sandbox_default(),
            };
            telemetry::init();
            let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
            runtime.block_on(service::run(config))?;
            Ok(())
        }
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
            print!("{}", keys::instructions(&name, &paths, &key));
            Ok(())
        }
    }
}
