//! PostgreSQL for the tests (D39): `AP_INTAKE_TEST_PG` names a database whose role may create
//! databases (`.ci/run` sets one up); each test gets a database of its own, dropped after it.

use std::sync::atomic::{AtomicU32, Ordering};

/// The admin URL, or `None` (the caller says the test was skipped).
pub fn admin_url() -> Option<String> {
    std::env::var("AP_INTAKE_TEST_PG")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Says that a PostgreSQL test did not run, and why (a failure under
/// `AP_INTAKE_REQUIRE_TOOLS=1`, as in CI).
pub fn skipped() {
    super::skip::skip("no PostgreSQL to run on: set AP_INTAKE_TEST_PG=postgres://...");
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

impl TestDb {
    /// A service config on this database, reached at `url` (its own, or a [`Proxy`]'s), as
    /// node `node` with leases of `lease_secs`, delivering to `platform_url`.
    pub fn config(
        &self,
        url: &str,
        data_dir: &std::path::Path,
        platform_url: &str,
        extra_tables: &str,
        node: &str,
        lease_secs: u64,
    ) -> String {
        Self::config_text(url, data_dir, platform_url, extra_tables, node, lease_secs)
    }

    /// [`TestDb::config`] for a database at `url`, whichever server holds it.
    pub fn config_text(
        url: &str,
        data_dir: &std::path::Path,
        platform_url: &str,
        extra_tables: &str,
        node: &str,
        lease_secs: u64,
    ) -> String {
        let text = super::config_for(data_dir, "", platform_url, extra_tables)
            .replace("[storage]\n", "[storage]\nbackend = \"postgres\"\n");
        format!(
            "{text}\n[storage.postgres]\nurl = \"{url}\"\nnode = \"{node}\"\nlease_secs = {lease_secs}\n"
        )
    }

    /// This database's URL with its host and port replaced by `addr`.
    pub fn url_at(&self, addr: std::net::SocketAddr) -> String {
        let (scheme, rest) = self.url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let path = &rest[rest.find('/').unwrap()..];
        format!("{scheme}://{user}@{addr}{path}")
    }

    /// The server's address.
    pub fn server(&self) -> std::net::SocketAddr {
        let rest = self.url.split_once('@').unwrap().1;
        let host_port = &rest[..rest.find('/').unwrap()];
        use std::net::ToSocketAddrs;
        host_port.to_socket_addrs().unwrap().next().unwrap()
    }
}

/// A TCP relay to the database that a test can cut (an outage, a partition) and restore.
pub struct Proxy {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    /// Relays to `server` until cut.
    pub fn start(server: std::net::SocketAddr) -> Self {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::AtomicBool;
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (u, o) = (Arc::clone(&up), Arc::clone(&open));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if !u.load(Ordering::Relaxed) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(db) = TcpStream::connect(server) else {
                    continue;
                };
                let mut tracked = o.lock().unwrap();
                for s in [&client, &db] {
                    tracked.push(s.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), db.try_clone().unwrap()),
                    (db, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Self { addr, up, open }
    }

    /// Cuts every connection and refuses new ones: the database is gone.
    pub fn cut(&self) {
        self.up.store(false, Ordering::Relaxed);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::Relaxed);
    }
}

/// A PostgreSQL server of a test's own (initdb in a temp dir, a free port, trust auth), for a
/// test that restarts it: the shared cluster of `AP_INTAKE_TEST_PG` serves other tests at the
/// same time. As root, the server runs as the `postgres` user, as Debian's does.
pub struct PrivateServer {
    bin: std::path::PathBuf,
    data: std::path::PathBuf,
    port: u16,
    as_postgres: bool,
    _dir: tempfile::TempDir,
}

impl PrivateServer {
    /// Starts one, or `None` when PostgreSQL's server programs are not installed.
    pub fn start() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| Some(e.ok()?.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .max()?;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let as_postgres = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if as_postgres {
            let ok = std::process::Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Self {
            bin,
            data,
            port,
            as_postgres,
            _dir: dir,
        };
        let data = server.data.display().to_string();
        server.run(
            "initdb",
            &["-D", &data, "-U", "apintake", "--auth=trust", "-E", "UTF8"],
        );
        server.pg_ctl(&["start"]);
        Some(server)
    }

    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            std::process::Command::new(&path)
        };
        let out = cmd.args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, what: &[&str]) {
        let data = self.data.display().to_string();
        let log = format!("{data}/../server.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
            self.port
        );
        let mut args = vec!["-D", &data, "-l", &log, "-o", &options, "-w"];
        args.extend_from_slice(what);
        self.run("pg_ctl", &args);
    }

    /// The URL of its `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "postgres://apintake@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Restarts it (fast shutdown: every session is ended), waiting until it takes
    /// connections again.
    pub fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "restart"]);
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let _ = std::panic::catch_unwind(|| {
            self.run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"])
        });
    }
}
