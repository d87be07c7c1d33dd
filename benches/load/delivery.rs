//! Delivery drain: N pending records, spread over one or more interfaces, sent to a local
//! HTTP receiver that answers 200 at once, or with `--hang`, never answers the first
//! interface's documents (D31: the others must flow as fast as without it).

use ap_intake::config::Platform;
use ap_intake::delivery::backoff::Policy;
use ap_intake::delivery::target::{PlatformClient, Target};
use ap_intake::delivery::{Settings, Worker};
use ap_intake::interfaces::{INTERFACES, by_path};
use ap_intake::metrics::Metrics;
use ap_intake::queue::{Mode, NewRecord, QueueKey, SqliteStore, Store, now_ms};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A receiver answering 200 to every POST, but never to those whose path ends in `hang`;
/// counts the documents answered.
pub async fn receiver(documents: Arc<AtomicU64>, hang: Option<String>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let documents = Arc::clone(&documents);
            let hang = hang.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let documents = Arc::clone(&documents);
                        let hangs = hang.as_ref().is_some_and(|h| req.uri().path().ends_with(h));
                        async move {
                            if hangs {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                            }
                            let _ = req.into_body().collect().await;
                            documents.fetch_add(1, Ordering::Relaxed);
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                                b"ok",
                            ))))
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Fills the queue in `data_dir` with `n` GL-code records (XML as the intake makes it).
pub fn fill(data_dir: &Path, n: usize, label: &str) -> SqliteStore {
    let store = SqliteStore::open(data_dir, Mode::Serve, 0).expect("open the queue");
    fill_in(&store, n, label, 1, false);
    store
}

/// Fills the queue with `n` GL-code records spread in turn over the first `interfaces`
/// interfaces (the platform here does not read the XML; each interface gets its own keys),
/// with `receipts` as requests of 1,000 with receipts (each delivery then notes its outcome
/// for the feed, D48). Outside the runtime: a database client blocks.
pub fn fill_in(store: &dyn Store, n: usize, label: &str, interfaces: usize, receipts: bool) {
    let iface = by_path("/general-ledger-codes/v1").expect("GL codes");
    let validator = ap_intake::validate::Validator::load(None).expect("schemas");
    let shape = validator.shape(iface).expect("GL codes' shape");
    let started = Instant::now();
    for (c, chunk) in (0..n).collect::<Vec<_>>().chunks(1000).enumerate() {
        let request = std::sync::Arc::new(ap_intake::queue::receipt::RequestInfo {
            request_id: format!("{label}-{c}"),
            api_key: "bench".into(),
            interface: iface.id,
            received_at_ms: now_ms(),
            nonce: 1,
        });
        let records: Vec<NewRecord> = chunk
            .iter()
            .enumerate()
            .map(|(index, i)| {
                let code = format!("{label}-{i:08}");
                let rec = serde_json::json!({"code": code, "type": "VAT", "description_en": "Input VAT 24 %", "tax_code": "VAT24"});
                let into = match interfaces {
                    1 => iface,
                    k => &INTERFACES[i % k.min(INTERFACES.len())],
                };
                NewRecord {
                    key: QueueKey::new(into.id, &["main", &code]).expect("key"),
                    interface: into.id,
                    xml: ap_intake::xml::record(shape, iface.xml_record, &[], &rec),
                    receipt: receipts.then(|| ap_intake::queue::receipt::ReceiptLine {
                        request: std::sync::Arc::clone(&request),
                        index: u32::try_from(index).expect("index"),
                    }),
                }
            })
            .collect();
        store.upsert(&records, now_ms()).expect("upsert");
    }
    println!(
        "filled {n} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Drains the `n` records [`fill_in`] put in `store` over `interfaces` interfaces, the first
/// of them hanging with `hang`; returns the records per second of those delivered.
pub async fn drain(
    store: Arc<dyn Store>,
    n: usize,
    batch_size: usize,
    interfaces: usize,
    hang: bool,
) -> f64 {
    let documents = Arc::new(AtomicU64::new(0));
    let hanging = hang.then(|| INTERFACES[0].id.to_string());
    let addr = receiver(Arc::clone(&documents), hanging.clone()).await;
    let platform = Platform {
        url: format!("http://{addr}/intake"),
        auth: None,
        network: Default::default(),
    };
    let settings = Settings {
        batch_size,
        backoff: Policy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        },
    };
    let started = Instant::now();
    let target = Target::Platform(
        PlatformClient::new(&platform, Duration::from_secs(30)).expect("platform client"),
    );
    let (worker, _waker) = Worker::start(
        Arc::clone(&store),
        target,
        settings,
        Arc::new(Metrics::default()),
        Arc::new(ap_intake::delivery::clock::SystemClock),
        ap_intake::queue::Stop::new(),
    )
    .expect("worker");
    let flowing: Vec<&str> = INTERFACES
        .iter()
        .map(|i| i.id)
        .filter(|id| Some(id.to_string()) != hanging)
        .collect();
    let count = |what: fn(&ap_intake::queue::Stats) -> u64| -> u64 {
        flowing
            .iter()
            // On the runtime's thread, but allowed to block (a database client does).
            .map(|id| tokio::task::block_in_place(|| what(&store.stats(id).expect("stats"))))
            .sum()
    };
    while count(|s| s.pending) > 0 {
        // Not too often: counting is a query on a database-backed store.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let delivered = count(|s| s.delivered);
    let stopped = worker.stop(Duration::from_secs(2));
    let expected = match &hanging {
        None => n as u64,
        Some(h) => {
            n as u64 - tokio::task::block_in_place(|| store.stats(h).expect("stats").pending)
        }
    };
    assert_eq!(
        delivered, expected,
        "every record of a flowing interface delivered"
    );
    println!(
        "delivery: {delivered} records over {} interface(s){} in {} documents of up to \
         {batch_size}, {:.2} s{}",
        interfaces,
        hanging
            .as_ref()
            .map(|h| format!(" ({h} hanging)"))
            .unwrap_or_default(),
        documents.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        if stopped {
            ""
        } else {
            "; the hanging lane was left at its POST"
        }
    );
    delivered as f64 / elapsed.as_secs_f64()
}
