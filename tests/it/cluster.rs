//! The queue on PostgreSQL with one and several nodes (D39, D15-D18 across nodes): the real
//! service in-process or as the real binary, a real database (`AP_INTAKE_TEST_PG`, a database
//! per test), real HTTP listeners as platforms. Without `AP_INTAKE_TEST_PG` each test says it
//! was skipped.

use crate::common::pg::{Proxy, TestDb, skipped};
use crate::common::process::Service;
use crate::common::receiver::{Held, Receiver, gl_records, ok};
use crate::common::*;
use ap_intake::config::Config;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";
const GL_ID: &str = "general-ledger-codes-v1";
/// Quick retries, so a recovered platform or database is asked again at once.
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 300\n";
const WAIT: Duration = Duration::from_secs(30);

macro_rules! database {
    () => {
        match TestDb::create() {
            Some(db) => db,
            None => {
                skipped();
                return;
            }
        }
    };
}

/// A node in-process on `db`, delivering to `platform`.
/// A platform that holds node a's delivery until released, and a healthy one for node b.
fn failover_platforms() -> (Receiver, Held, Receiver) {
    let hanging = Receiver::start();
    let held = hanging.hold();
    let platform = Receiver::start();
    platform.answer(|_| ok());
    (hanging, held, platform)
}

fn node(db: &TestDb, platform: &str, name: &str, lease_secs: u64) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let text = db.config(
        &db.url,
        &dir.path().join("data"),
        platform,
        FAST,
        name,
        lease_secs,
    );
    let config = Config::parse(&text, Path::new("node.toml")).unwrap();
    TestApp::start_config(dir, config)
}

fn pending(app: &TestApp) -> u64 {
    app.store().stats(GL_ID).unwrap().pending
}

/// How many times the platform took each (code, description).
fn deliveries(platform: &Receiver) -> HashMap<(String, String), usize> {
    let mut seen = HashMap::new();
    for d in platform.delivered() {
        for rec in gl_records(&d.body) {
            *seen.entry(rec).or_insert(0) += 1;
        }
    }
    seen
}

fn described(code: &str, text: &str) -> Value {
    serde_json::json!({"code": code, "type": "VAT", "description_en": text})
}

mod counts;
mod moving;
mod names;
mod restart;
mod upgrade;

#[test]
fn d39_one_node_queues_delivers_and_keeps_receipts_on_postgres() {
    let db = database!();
    let platform = Receiver::start();
    platform.answer(|_| ok());
    let app = node(&db, &platform.url(), "solo", 30);
    let records: Vec<Value> = (0..50).map(|i| gl(&format!("P{i:02}"))).collect();
    let r = app.post_records(GL, &records);
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["request_id"].as_str().unwrap().to_string();
    eventually("all 50 delivered", WAIT, || pending(&app) == 0);
    assert_eq!(deliveries(&platform).len(), 50);
    assert_eq!(app.store().stats(GL_ID).unwrap().delivered, 50);
    let text = ureq::get(&app.url(&format!("/requests/{id}")))
        .header("x-api-key", KEY)
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let receipt: Value = serde_json::from_str(&text).unwrap();
    let states: Vec<&str> = receipt["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, vec!["delivered"; 50], "{receipt:#}");
    let s = status_of(&app, GL_ID);
    assert_eq!(s["delivered"], 50, "{s}");
}

/// D16 across nodes: a key resent through another node replaces the queued record; every
/// key arrives in its latest version, and with healthy nodes no version twice.
#[test]
fn d39_two_nodes_share_one_queue_one_item_per_key() {
    let db = database!();
    let platform = Receiver::start();
    platform.answer(|_| ok());
    let a = node(&db, &platform.url(), "a", 30);
    let b = node(&db, &platform.url(), "b", 30);
    for round in 0..3 {
        for (i, app) in [&a, &b].into_iter().enumerate() {
            let records: Vec<Value> = (0..40)
                .map(|k| described(&format!("K{k:02}"), &format!("round {round} via {i}")))
                .collect();
            assert_eq!(app.post_records(GL, &records).status, 202);
        }
    }
    eventually("the shared queue drains", WAIT, || {
        pending(&a) == 0 && pending(&b) == 0
    });
    let seen = deliveries(&platform);
    let mut latest: HashMap<String, String> = HashMap::new();
    for d in platform.delivered() {
        for (code, text) in gl_records(&d.body) {
            latest.insert(code, text);
        }
    }
    assert_eq!(latest.len(), 40);
    for (code, text) in &latest {
        assert_eq!(
            text, "round 2 via 1",
            "{code}: the last delivery is the latest version"
        );
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "a version delivered twice by healthy nodes: {twice:?}"
    );
}

/// A node killed while its delivery hangs loses its leases after `lease_secs`; another node
/// delivers every acknowledged record. The records the dead node had sent may reach the
/// platform twice (D18, at least once): counted and reported.
#[test]
fn d39_a_killed_nodes_records_are_delivered_by_another_node() {
    let db = database!();
    let (hanging, held, platform) = failover_platforms();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.toml");
    let lease_secs = 5;
    std::fs::write(
        &file,
        db.config(
            &db.url,
            &dir.path().join("data"),
            &hanging.url(),
            FAST,
            "a",
            lease_secs,
        ),
    )
    .unwrap();
    let a = Service::start(&file, dir.path());
    let records: Vec<Value> = (0..30).map(|i| gl(&format!("D{i:02}"))).collect();
    assert_eq!(a.post_records(GL, &records, Some(KEY)).status, 202);
    eventually("node a is delivering", WAIT, || held.arrived() >= 1);
    let b = node(&db, &platform.url(), "b", lease_secs);
    let killed = Instant::now();
    a.kill_9();
    eventually("node b delivers what a held", WAIT, || pending(&b) == 0);
    let took = killed.elapsed();
    let seen = deliveries(&platform);
    assert_eq!(seen.len(), 30, "every acknowledged record delivered");
    let resent = held.arrived();
    eprintln!(
        "D39 failover: node b delivered the 30 records {took:?} after node a was killed \
         (lease {lease_secs} s); node a had {resent} document(s) in flight, whose records \
         reach the platform twice if it took them (D18)"
    );
    assert!(
        took < Duration::from_secs(lease_secs + 10),
        "took {took:?}: a lease of {lease_secs} s plus an idle poll"
    );
    held.release();
}

/// The database goes away: intake answers 503 and queues nothing it reported, delivery
/// waits; both come back by themselves when it returns.
#[test]
fn d39_a_database_outage_is_503_and_both_sides_recover() {
    let db = database!();
    let platform = Receiver::start();
    platform.answer(|_| ok());
    let proxy = Proxy::start(db.server());
    let dir = tempfile::tempdir().unwrap();
    let text = db.config(
        &db.url_at(proxy.addr),
        &dir.path().join("data"),
        &platform.url(),
        FAST,
        "n",
        30,
    );
    let app = TestApp::start_config(dir, Config::parse(&text, Path::new("n.toml")).unwrap());
    assert_eq!(app.post_records(GL, &[gl("BEFORE")]).status, 202);
    eventually("BEFORE delivered", WAIT, || {
        deliveries(&platform).len() == 1
    });

    proxy.cut();
    let r = app.post_records(GL, &[gl("DURING")]);
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(
        r.json()["message"],
        "the queue cannot store records right now; nothing was queued, retry later"
    );
    assert!(r.header("retry-after").is_some());

    proxy.restore();
    let back = Instant::now();
    eventually("intake accepts again", WAIT, || {
        app.post_records(GL, &[gl("AFTER")]).status == 202
    });
    eventually("AFTER delivered", WAIT, || {
        deliveries(&platform)
            .keys()
            .any(|(code, _)| code == "AFTER")
    });
    eprintln!(
        "D39 outage: intake and delivery back {:?} after the database",
        back.elapsed()
    );
    assert!(
        !deliveries(&platform)
            .keys()
            .any(|(code, _)| code == "DURING"),
        "a record refused with 503 was delivered"
    );
    assert!(
        app.item(&gl_key("DURING")).is_none(),
        "a refused record was queued"
    );
}

/// `ap-intake status` shows the cluster (D39): every node, when it was last seen, and the
/// keys it holds; the queue's counts are the shared queue's.
#[test]
fn d39_status_shows_every_node_and_the_leases_it_holds() {
    use ap_intake::admin::{Request, Response};
    let db = database!();
    let hanging = Receiver::start();
    let held = hanging.hold();
    let a = node(&db, &hanging.url(), "a", 30);
    let b = node(&db, &hanging.url(), "b", 30);
    let records: Vec<Value> = (0..10).map(|i| gl(&format!("S{i}"))).collect();
    assert_eq!(a.post_records(GL, &records).status, 202);
    eventually("a delivery is held", WAIT, || held.arrived() >= 1);
    let report = match ap_intake::admin::query(&b.locations(), &Request::Status).unwrap() {
        Response::Status(r) => r,
        other => panic!("status answered {other:?}"),
    };
    let names: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "{report:?}");
    let leases: u64 = report.nodes.iter().map(|n| n.leases).sum();
    assert_eq!(
        leases, 10,
        "the ten keys on the wire are leased: {:?}",
        report.nodes
    );
    for n in &report.nodes {
        assert!(
            report.generated_at_ms.saturating_sub(n.last_seen_ms) < 30_000,
            "{n:?} seen recently"
        );
    }
    let gl = report
        .interfaces
        .iter()
        .find(|i| i.interface == GL_ID)
        .unwrap();
    assert_eq!(gl.pending, 10, "node b reports the shared queue");
    let text = ap_intake::status::render(&report, false);
    assert!(text.contains("NODE") && text.contains("LEASES"), "{text}");
    held.release();
}

/// A relay that answers PostgreSQL's SSLRequest, terminates TLS with `leaf` and passes the
/// plain protocol on to the server: the store's TLS client against a real TLS server.
fn tls_relay(
    server: std::net::SocketAddr,
    leaf: &crate::common::certs::Leaf,
) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8]; // length 8, code 80877103
                    client.read_exact(&mut request).await?;
                    client.write_all(b"S").await?;
                    let mut tls = acceptor.accept(client).await?;
                    let mut db = tokio::net::TcpStream::connect(server).await?;
                    tokio::io::copy_bidirectional(&mut tls, &mut db).await?;
                    Ok::<_, std::io::Error>(())
                });
            }
        });
    });
    addr
}

/// TLS to the database with rustls (D39): the server's certificate is checked against
/// `ca_file` (and the system's CAs); an unknown issuer is refused with a hint.
#[test]
fn d39_tls_to_the_database_is_verified() {
    use ap_intake::queue::{Mode, PostgresStore, Store};
    let db = database!();
    let ca = crate::common::certs::Ca::new("database test CA");
    let leaf = ca.leaf(
        "127.0.0.1",
        &["127.0.0.1"],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let relay = tls_relay(db.server(), &leaf);
    let url = db
        .url_at(relay)
        .replace("sslmode=disable", "sslmode=require");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let settings = |extra: &str| {
        let text = format!(
            "sandbox = true\n[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = \"{url}\"\nnode = \"tls\"\n{extra}"
        );
        match Config::parse(&text, Path::new("tls.toml"))
            .unwrap()
            .storage
            .backend
        {
            ap_intake::config::Backend::Postgres(p) => p,
            other => panic!("{other:?}"),
        }
    };
    let trusted = settings(&format!("ca_file = \"{}\"\n", ca_file.display()));
    let store = PostgresStore::open(&trusted, Mode::Inspect).unwrap();
    store.probe().unwrap();
    let refused = PostgresStore::open(&settings(""), Mode::Inspect)
        .err()
        .expect("an unknown CA is refused");
    let text = refused.to_string();
    assert!(
        text.contains("certificate") && text.contains("ca_file"),
        "{text}"
    );
}

/// A node cut off from the database while its delivery hangs cannot renew its leases: they
/// lapse and another node delivers (D39). When the cut-off node comes back, what it then
/// reports of its stale batch changes nothing the other node did.
#[test]
fn d39_a_partitioned_nodes_leases_lapse_and_another_node_delivers() {
    let db = database!();
    let (hanging, held, platform) = failover_platforms();
    let proxy = Proxy::start(db.server());
    let lease_secs = 5;
    let dir = tempfile::tempdir().unwrap();
    let text = db.config(
        &db.url_at(proxy.addr),
        &dir.path().join("data"),
        &hanging.url(),
        FAST,
        "cut-off",
        lease_secs,
    );
    let a = TestApp::start_config(dir, Config::parse(&text, Path::new("a.toml")).unwrap());
    let records: Vec<Value> = (0..20).map(|i| gl(&format!("Q{i:02}"))).collect();
    assert_eq!(a.post_records(GL, &records).status, 202);
    eventually("node a is delivering", WAIT, || held.arrived() >= 1);
    proxy.cut();
    let cut = Instant::now();
    let b = node(&db, &platform.url(), "b", lease_secs);
    eventually("node b delivers what a held", WAIT, || {
        deliveries(&platform).len() == 20
    });
    let took = cut.elapsed();
    eprintln!(
        "D39 partition: node b delivered the 20 records {took:?} after node a was cut off (lease {lease_secs} s)"
    );
    assert!(
        took >= Duration::from_secs(lease_secs - 1),
        "not before the lease lapsed: {took:?}"
    );
    proxy.restore();
    held.release(); // node a's stale delivery now completes
    eventually("the queue is empty", WAIT, || pending(&b) == 0);
    let stats = b.store().stats(GL_ID).unwrap();
    assert_eq!((stats.pending, stats.rejected), (0, 0));
}
