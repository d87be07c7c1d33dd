//! A temp dir with a config file for the real binary, and the operator commands run on it.

use super::process::{Service, bin};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

/// Quick retries, so a platform is asked again within a fraction of a second.
pub const QUICK_RETRIES: &str = "[delivery]\nbackoff_base_ms = 50\nbackoff_cap_ms = 200\n";
/// How long a poll waits for the service to get somewhere.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A temp dir with `data/` as the data directory and `ap-intake.toml` as the config file.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Setup {
    /// Delivers to `platform_url` with [`QUICK_RETRIES`]; `extra_top` goes before the tables.
    pub fn new(extra_top: &str, platform_url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ap-intake.toml");
        let setup = Self { dir, config };
        setup.write_config(extra_top, platform_url);
        setup
    }

    /// Rewrites the config file.
    pub fn write_config(&self, extra_top: &str, platform_url: &str) {
        let text = super::config_for(&self.data_dir(), extra_top, platform_url, QUICK_RETRIES);
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `ap-intake serve` on this config, listening.
    pub fn serve(&self) -> Service {
        Service::start(&self.config, self.dir.path())
    }

    /// `ap-intake <command> --config FILE <args>`.
    pub fn run(&self, command: &str, args: &[&str]) -> Output {
        bin()
            .arg(command)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap()
    }

    /// `<command> <args>`, which must succeed; its stdout.
    pub fn ok(&self, command: &str, args: &[&str]) -> String {
        let out = self.run(command, args);
        assert!(
            out.status.success(),
            "{command} {args:?} failed ({:?}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `status --json`, parsed.
    pub fn report(&self) -> Value {
        let text = self.ok("status", &["--json"]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("status --json: {e}: {text}"))
    }

    /// The keys `status <args>` lists (`status rejected` and `quarantined` print
    /// `KEY<TAB>reason`).
    pub fn keys(&self, args: &[&str]) -> Vec<String> {
        self.ok("status", args)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect()
    }

    /// Polls `status --json` until `done` holds for it, failing after [`PATIENCE`].
    pub fn report_until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let reached = super::wait_for(PATIENCE, || {
            last = self.report();
            done(&last)
        });
        assert!(
            reached,
            "within {PATIENCE:?}: {what}; last report:\n{last:#}"
        );
        last
    }
}

/// The status report's entry for an interface identifier.
pub fn entry<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["interfaces"]
        .as_array()
        .expect("interfaces is an array")
        .iter()
        .find(|i| i["interface"] == id)
        .unwrap_or_else(|| panic!("no {id} in {report:#}"))
}

/// A count of the status report's entry for `id`.
pub fn count(report: &Value, id: &str, field: &str) -> u64 {
    entry(report, id)[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{id}.{field} is not a count: {report:#}"))
}
