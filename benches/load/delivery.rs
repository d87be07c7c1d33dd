//! Delivery drain: N pending records sent to a local HTTP receiver that answers 200 at once.

use ap_intake::config::Platform;
use ap_intake::delivery::backoff::Policy;
use ap_intake::delivery::target::{PlatformClient, Target};
use ap_intake::delivery::{Settings, Worker};
use ap_intake::interfaces::by_path;
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

/// A receiver answering 200 to every POST; counts the documents.
async fn receiver(documents: Arc<AtomicU64>) -> std::net::SocketAddr {
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
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let documents = Arc::clone(&documents);
                        async move {
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
    let iface = by_path("/general-ledger-codes/v1").expect("GL codes");
    let validator = ap_intake::validate::Validator::load(None).expect("schemas");
    let shape = validator.shape(iface);
    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let records: Vec<NewRecord> = chunk
            .iter()
            .map(|i| {
                let code = format!("{label}-{i:08}");
                let rec = serde_json::json!({"code": code, "type": "VAT", "description_en": "Input VAT 24 %", "tax_code": "VAT24"});
                NewRecord {
                    key: QueueKey::new("gl-code", &["main", &code]).expect("key"),
                    interface: iface.id,
                    xml: ap_intake::xml::record(shape, iface.xml_record, &[], &rec),
                }
            })
            .collect();
        store.upsert(&records, now_ms()).expect("upsert");
    }
    store.sync().expect("sync");
    println!(
        "filled {n} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    store
}

/// Drains `n` records; returns records per second.
pub async fn drain(data_dir: &Path, n: usize, batch_size: usize) -> f64 {
    let store: Arc<dyn Store> = Arc::new(fill(data_dir, n, "D"));
    let documents = Arc::new(AtomicU64::new(0));
    let addr = receiver(Arc::clone(&documents)).await;
    let platform = Platform {
        url: format!("http://{addr}/intake"),
        auth: None,
    };
    let settings = Settings {
        batch_size,
        backoff: Policy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        },
    };
    let started = Instant::now();
    let target = Target::Platform(PlatformClient::new(&platform, Duration::from_secs(30)));
    let (worker, _waker) = Worker::start(
        Arc::clone(&store),
        target,
        settings,
        Arc::new(Metrics::default()),
        Arc::new(ap_intake::delivery::clock::SystemClock),
    )
    .expect("worker");
    let iface = "general-ledger-codes-v1";
    loop {
        let pending = store.stats(iface).expect("stats").pending;
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    worker.stop(Duration::from_secs(5));
    let delivered = store.stats(iface).expect("stats").delivered;
    assert_eq!(delivered, n as u64, "every record delivered");
    println!(
        "delivery: {n} records in {} documents of up to {batch_size}, {:.2} s",
        documents.load(Ordering::Relaxed),
        elapsed.as_secs_f64()
    );
    n as f64 / elapsed.as_secs_f64()
}
