//! PostgreSQL for the tests (D39): `AP_INTAKE_TEST_PG` names a database whose role may create
//! databases (`.ci/run` sets one up); each test gets a database of its own, dropped after it.

use std::sync::atomic::{AtomicU32, Ordering};

/// The admin URL, or `None` (the caller says the test was skipped).
pub fn admin_url() -> Option<String> {
    std::env::var("AP_INTAKE_TEST_PG")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Says that a PostgreSQL test did not run, and why.
pub fn skipped(test: &str) {
    eprintln!("{test}: SKIPPED on PostgreSQL (set AP_INTAKE_TEST_PG=postgres://... to run it)");
}

/// A database created for one test, dropped when this is dropped.
pub struct TestDb {
    admin: String,
    name: String,
    /// Its URL.
    pub url: String,
}

impl TestDb {
    /// A new empty database, or `None` without `AP_INTAKE_TEST_PG`.
    pub fn create() -> Option<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let admin = admin_url()?;
        let name = format!(
            "ap_intake_t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let (base, query) = match admin.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (admin.as_str(), String::new()),
        };
        let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
        let url = format!("{server}/{name}{query}");
        Some(Self { admin, name, url })
    }

    /// `[storage]` for a service on this database, as node `node`.
    pub fn storage_toml(&self, node: &str, lease_secs: u64) -> String {
        format!(
            "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = \"{}\"\nnode = \"{node}\"\nlease_secs = {lease_secs}\n",
            self.url
        )
    }

    /// The checked settings for opening a store directly.
    pub fn settings(&self, node: &str, lease_secs: u64) -> ap_intake::config::Postgres {
        let text = format!("sandbox = true\n{}", self.storage_toml(node, lease_secs));
        let config =
            ap_intake::config::Config::parse(&text, std::path::Path::new("pg.toml")).unwrap();
        match config.storage.backend {
            ap_intake::config::Backend::Postgres(p) => p,
            other => panic!("not postgres: {other:?}"),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
