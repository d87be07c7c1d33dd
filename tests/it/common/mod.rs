//! Test harness: the real service in-process on a loopback port, a real SQLite queue in a temp
//! dir, and real HTTP clients (ureq, and a raw socket for what ureq would tidy up).
#![allow(dead_code)]

pub mod certs;
pub mod paths;
pub mod pg;
pub mod process;
pub mod receiver;
pub mod setup;
pub mod skip;
pub mod warnings;

use ap_intake::config::Config;
use ap_intake::interfaces::{self, Interface};
use ap_intake::queue::{Item, Mode, QueueKey, SqliteStore, State, Store, StoreError};
use ap_intake::service::{self, Running};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The key every test app accepts for all interfaces.
pub const KEY: &str = "test-key-all";
/// A key that may only use GL codes.
pub const GL_ONLY_KEY: &str = "test-key-gl-only";

pub fn sha(key: &str) -> String {
    ap_intake::keys::sha256_hex(key)
}

/// A running service with its own data directory.
pub struct TestApp {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    running: Option<Running>,
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// `(total, succeeded, failed)` of the common response body.
    pub fn counts(&self) -> (u64, u64, u64) {
        let b = self.json();
        let n = |k: &str| {
            b[k].as_u64()
                .unwrap_or_else(|| panic!("{k} in {}", self.text))
        };
        (n("total"), n("succeeded"), n("failed"))
    }

    /// `(index, path, error)` of every error entry.
    pub fn errors(&self) -> Vec<(u64, String, String)> {
        self.json()["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["index"].as_u64().unwrap(),
                    e["path"].as_str().unwrap().to_string(),
                    e["error"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// Where test apps deliver unless a test gives a receiver: a closed port (connection refused),
/// so records stay pending.
pub const NOWHERE: &str = "http://127.0.0.1:9/intake";

/// The config text of a test app: production mode with two keys, plus `extra` lines appended
/// to the top level (before any table).
pub fn config_text(data_dir: &Path, extra_top: &str, extra_tables: &str) -> String {
    config_for(data_dir, extra_top, NOWHERE, extra_tables)
}

/// [`config_text`] delivering to `platform_url`.
pub fn config_for(
    data_dir: &Path,
    extra_top: &str,
    platform_url: &str,
    extra_tables: &str,
) -> String {
    format!(
        r#"{extra_top}
[server]
listen = "127.0.0.1:0"
plain_http = true
body_timeout_secs = 2

[storage]
data_dir = "{dir}"

[[api_keys]]
name = "all"
sha256 = "{all}"
interfaces = ["*"]

[[api_keys]]
name = "gl-only"
sha256 = "{gl}"
interfaces = ["/general-ledger-codes/v1"]

[platform]
url = "{platform_url}"

[admin]
listen = "127.0.0.1:0"
{extra_tables}
"#,
        dir = data_dir.display(),
        all = sha(KEY),
        gl = sha(GL_ONLY_KEY),
    )
}

/// `[oauth2]` with a new signing key written in `dir`, and one client, `client_id` with
/// `secret`, that may use every interface (D47): config tables.
pub fn oauth2_client_tables(dir: &Path, client_id: &str, secret: &str) -> String {
    let key = dir.join("signing.pem");
    std::fs::write(&key, ap_intake::oauth2::keys::generate_pem().unwrap()).unwrap();
    format!(
        "[oauth2]\nsigning_key_file = '{}'\n[[oauth2.clients]]\nclient_id = \"{client_id}\"\n\
         secret_sha256 = \"{}\"\ninterfaces = [\"*\"]\n",
        key.display(),
        sha(secret)
    )
}

impl TestApp {
    pub fn start() -> Self {
        Self::start_with("", "")
    }

    /// Starts issuing tokens to `client_id` with `secret` ([`oauth2_client_tables`]), beside
    /// the two keys.
    pub fn with_client(client_id: &str, secret: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tables = oauth2_client_tables(dir.path(), client_id, secret);
        Self::start_in(dir, "", &tables)
    }

    /// Starts with extra top-level keys and extra tables in the config.
    pub fn start_with(extra_top: &str, extra_tables: &str) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), extra_top, extra_tables)
    }

    /// Starts with its data directory in `dir`, extra top-level keys and extra tables.
    pub fn start_in(dir: tempfile::TempDir, extra_top: &str, extra_tables: &str) -> Self {
        let text = config_text(&dir.path().join("data"), extra_top, extra_tables);
        let config = Config::parse(&text, Path::new("test.toml")).unwrap();
        Self::start_config(dir, config)
    }

    /// Starts with the schema overrides in `dir` (`[validation] schema_dir`, D14).
    pub fn with_schemas(dir: &Path) -> Self {
        Self::start_with(
            "",
            &format!("[validation]\nschema_dir = \"{}\"\n", dir.display()),
        )
    }

    /// Starts delivering to `platform_url`, with `extra_tables` in the config.
    pub fn delivering_to(platform_url: &str, extra_tables: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = config_for(&dir.path().join("data"), "", platform_url, extra_tables);
        let config = Config::parse(&text, Path::new("test.toml")).unwrap();
        Self::start_config(dir, config)
    }

    pub fn start_config(dir: tempfile::TempDir, config: Config) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = runtime.block_on(service::start(&config)).unwrap();
        Self {
            addr: running.addr,
            dir,
            runtime,
            running: Some(running),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// What operator commands use to reach this service.
    pub fn locations(&self) -> ap_intake::config::Locations {
        ap_intake::config::Locations {
            data_dir: self.data_dir(),
            storage: ap_intake::config::Storage::default(),
            admin_socket: self.data_dir().join("admin.sock"),
        }
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.running.as_ref().unwrap().store()
    }

    /// The admin listener's address.
    pub fn ops_addr(&self) -> SocketAddr {
        self.running.as_ref().unwrap().ops_addr.unwrap()
    }

    /// Where the admin listener (`/healthz`, `/readyz`, `/metrics`) listens.
    pub fn ops_url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.running.as_ref().unwrap().ops_addr.unwrap()
        )
    }

    pub fn transactions(&self) -> u64 {
        self.running.as_ref().unwrap().transactions()
    }

    /// POSTs `body` as JSON with the all-interfaces key.
    pub fn post(&self, path: &str, body: &str) -> Reply {
        self.post_with(
            path,
            body,
            &[("x-api-key", KEY), ("Content-Type", "application/json")],
        )
    }

    /// POSTs the envelope around `records`.
    pub fn post_records(&self, path: &str, records: &[Value]) -> Reply {
        self.post(path, &envelope(records).to_string())
    }

    /// POSTs the envelope around `records` on `agent`'s kept-alive connection, as an ERP
    /// client sending many requests does.
    pub fn post_records_on(&self, agent: &ureq::Agent, path: &str, records: &[Value]) -> Reply {
        self.send_on(
            agent,
            path,
            &envelope(records).to_string(),
            &[("x-api-key", KEY), ("Content-Type", "application/json")],
        )
    }

    /// POSTs with exactly these headers (plus Host and Content-Length).
    pub fn post_with(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Reply {
        self.send_on(&agent(), path, body, headers)
    }

    fn send_on(
        &self,
        agent: &ureq::Agent,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = agent.post(&self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.send(body).unwrap();
        reply_of(&mut resp)
    }

    /// Sends `raw` (a whole HTTP/1.1 request) over a socket and reads the answer.
    pub fn raw(&self, raw: &[u8]) -> Reply {
        raw_request(self.addr, raw)
    }

    /// The queued item of a key in its operator form (`gl-code:main/4000`).
    pub fn item(&self, key: &str) -> Option<Item> {
        self.store().get(&QueueKey::parse(key).unwrap()).unwrap()
    }

    /// Stops the service (requests in flight finish, the queue is synced and closed).
    pub fn stop(mut self) -> tempfile::TempDir {
        if let Some(r) = self.running.take() {
            self.runtime.block_on(r.stop());
        }
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            self.runtime.block_on(r.stop());
        }
    }
}

/// A client that answers every status as a reply (not an error), with its own connections.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

pub fn reply_of(resp: &mut ureq::http::Response<ureq::Body>) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    Reply {
        status,
        headers,
        text,
    }
}

pub fn raw_request(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse_raw(&buf)
}

pub fn parse_raw(buf: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        text: body.to_string(),
    }
}

/// `{"objects":{"object":{"record":[...]}}}`.
pub fn envelope(records: &[Value]) -> Value {
    serde_json::json!({"objects": {"object": {"record": records}}})
}

/// A fixture record: `tests/fixtures/<stem>.<kind>.json`.
pub fn fixture(stem: &str, kind: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/{stem}.{kind}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The JSON Schema of an interface, as shipped.
pub fn schema(iface: &Interface) -> Value {
    let path = format!("{}/schemas/{}", env!("CARGO_MANIFEST_DIR"), iface.schema);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture stem of an interface (its schema file without `.json`).
pub fn stem(iface: &Interface) -> &'static str {
    iface.schema.trim_end_matches(".json")
}

/// The request path of an interface, with `?accountingType=PROJECT` where it needs one.
pub fn post_path(iface: &Interface) -> String {
    if iface.needs_accounting_type {
        format!("{}?accountingType=PROJECT", iface.path)
    } else {
        iface.path.to_string()
    }
}

pub fn iface(path: &str) -> &'static Interface {
    interfaces::by_path(path).unwrap()
}

/// Validates an XML document against an XSD in `schemas/` with xmllint; panics with xmllint's
/// output when it is invalid.
pub fn assert_valid_xml(xml: &[u8], xsd: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.xml");
    std::fs::write(&file, xml).unwrap();
    let xsd_path = format!("{}/schemas/{xsd}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", &xsd_path])
        .arg(&file)
        .output()
        .expect("xmllint must be installed (Debian: libxml2-utils)");
    assert!(
        out.status.success(),
        "XML does not validate against {xsd}:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(xml)
    );
}

/// Opens the queue of a stopped service, as a fresh process would.
pub fn reopen(data_dir: &Path) -> SqliteStore {
    SqliteStore::open(data_dir, Mode::Inspect, 0).unwrap()
}

/// xmllint's complaint when `xml` does not validate against `xsd` (a file in `schemas/`).
pub fn xml_invalid(xml: &[u8], xsd: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.xml");
    std::fs::write(&file, xml).unwrap();
    let xsd_path = format!("{}/schemas/{xsd}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema", &xsd_path])
        .arg(&file)
        .output()
        .expect("xmllint must be installed (Debian: libxml2-utils)");
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Whether `cond` holds within `within`, polling. Tests wait on conditions, never on a
/// fixed sleep.
pub fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// The seed of a randomised test: the variable `name` when set (to replay a failure), else
/// the clock.
pub fn seed_from(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// [`wait_for`] that fails naming `what` when `done` does not come.
pub fn eventually(what: &str, within: Duration, done: impl FnMut() -> bool) {
    assert!(wait_for(within, done), "not within {within:?}: {what}");
}

/// A valid GL code record.
pub fn gl(code: &str) -> Value {
    serde_json::json!({"code": code, "type": "VAT", "description_en": format!("account {code}")})
}

/// The queue key of the GL code `code`.
pub fn gl_key(code: &str) -> String {
    format!("gl-code:main/{code}")
}

/// The running service's status entry for `iface`, over its admin socket.
pub fn status_of(app: &TestApp, iface: &str) -> Value {
    use ap_intake::admin::{Request, Response};
    let report = match ap_intake::admin::query(&app.locations(), &Request::Status).unwrap() {
        Response::Status(r) => r,
        other => panic!("status answered {other:?}"),
    };
    let wire = ap_intake::status::wire::Report::from(&report);
    setup::entry(&serde_json::to_value(&wire).unwrap(), iface).clone()
}

/// Every readable item of a store, in key order: what a test looks at. Not a store operation:
/// delivery takes batches (`Store::take`), status counts (`Store::stats`).
pub trait Items {
    /// The items, read key by key.
    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError>;
}

impl<S: Store + ?Sized> Items for S {
    fn items(&self) -> Result<Vec<(QueueKey, Item)>, StoreError> {
        let mut items = Vec::new();
        for state in State::ALL {
            for key in self.keys(state, None)? {
                if let Ok(Some(item)) = self.get(&key) {
                    items.push((key, item));
                }
            }
        }
        items.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(items)
    }
}
