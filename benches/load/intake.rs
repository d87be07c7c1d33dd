//! The load generator (async, keep-alive) against the running service, and the in-process
//! limit: the same bodies through `Intake::submit` (validation, XML, the queue, group commit with
//! fsync) without HTTP.

use crate::cpu::Sample;
use crate::records::Records;
use crate::report::{Failure, Run};
use crate::service::KEY;
use ap_intake::budget::{Budget, Charge};
use ap_intake::delivery::Waker;
use ap_intake::intake::{Intake, Limits, Take};
use ap_intake::interfaces::Interface;
use ap_intake::queue::receipt::RequestInfo;
use ap_intake::queue::{Store, Writer};
use ap_intake::validate::Validator;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Load {
    pub iface: &'static Interface,
    pub per_request: usize,
    pub concurrency: usize,
    pub duration: Duration,
    /// Keep receipts (D38), as the service does by default.
    pub receipts: bool,
}

fn path(iface: &Interface) -> String {
    if iface.needs_accounting_type {
        format!("{}?accountingType=PROJECT", iface.path)
    } else {
        iface.path.to_string()
    }
}

/// Runs `load.concurrency` clients for `load.duration`; `send(client, seq)` sends one request
/// and says whether all its records were acknowledged, or why not.
async fn drive<F, Fut>(load: &Load, send: F) -> Run
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Failure>> + Send,
{
    let started = Instant::now();
    let deadline = started + load.duration;
    let per = load.per_request as u64;
    let tasks: Vec<_> = (0..load.concurrency)
        .map(|c| {
            let send = send.clone();
            tokio::spawn(async move {
                let mut run = Run::default();
                let mut seq = 0u64;
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let result = send(c, seq).await;
                    seq += 1;
                    run.latencies.push(sent.elapsed().as_micros() as u32);
                    run.requests += 1;
                    match result {
                        Ok(()) => run.records += per,
                        Err(failure) => run.fail(failure),
                    }
                }
                run
            })
        })
        .collect();
    let mut total = Run::default();
    for t in tasks {
        total.merge(t.await.expect("client task"));
    }
    total.elapsed = started.elapsed();
    total
}

/// Sends for `load.duration` from `load.concurrency` clients over kept-alive connections,
/// client `c` to `addrs[c % addrs.len()]` (several nodes share the clients), with the API key.
pub async fn against_service(addrs: &[SocketAddr], load: &Load) -> Run {
    against_service_as(addrs, load, ("x-api-key", KEY.to_string())).await
}

/// [`against_service`] with `credential` (a header's name and value) on every request.
pub async fn against_service_as(
    addrs: &[SocketAddr],
    load: &Load,
    credential: (&'static str, String),
) -> Run {
    let credential = Arc::new(credential);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(load.concurrency)
        .build_http();
    let records = Arc::new(Records::new(load.iface));
    let uris: Arc<Vec<http::Uri>> = Arc::new(
        addrs
            .iter()
            .map(|addr| {
                format!("http://{addr}{}", path(load.iface))
                    .parse()
                    .expect("uri")
            })
            .collect(),
    );
    let per = load.per_request;
    drive(load, move |c, seq| {
        let (client, records) = (client.clone(), Arc::clone(&records));
        let uri = uris[c % uris.len()].clone();
        let credential = Arc::clone(&credential);
        async move {
            let req = http::Request::post(uri)
                .header("content-type", "application/json")
                .header(credential.0, credential.1.as_str())
                .body(Full::new(Bytes::from(records.body(c, seq, per))))
                .expect("request");
            match client.request(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    let body = resp.into_body().collect().await;
                    if status == http::StatusCode::ACCEPTED {
                        return Ok(());
                    }
                    let body = body.map(|b| b.to_bytes()).unwrap_or_default();
                    Err(Failure::new(
                        status.to_string(),
                        String::from_utf8_lossy(&body),
                    ))
                }
                Err(e) => Err(Failure::new("connection", e.to_string())),
            }
        }
    })
    .await
}

/// The same load without HTTP, on `store` (a fresh queue).
pub async fn in_process(store: Arc<dyn Store>, load: &Load) -> Run {
    let writer = Writer::start(Arc::clone(&store)).expect("write thread");
    let types = ap_intake::config::DEFAULT_ACCOUNTING_TYPES
        .map(String::from)
        .to_vec();
    let intake = Arc::new(Intake::new(
        Validator::load(None).expect("schemas"),
        writer.clone(),
        types,
        Limits {
            max_records: 10_000,
            budget: Arc::new(Budget::new(256 << 20)),
        },
        Waker::none(),
    ));
    let records = Arc::new(Records::new(load.iface));
    let accounting_type = load
        .iface
        .needs_accounting_type
        .then(|| "PROJECT".to_string());
    let (iface, per, receipts) = (load.iface, load.per_request, load.receipts);
    let before = Sample::of(None);
    let run = drive(load, move |c, seq| {
        let (intake, records, at) = (
            Arc::clone(&intake),
            Arc::clone(&records),
            accounting_type.clone(),
        );
        async move {
            let body = Bytes::from(records.body(c, seq, per));
            let mut charge = Charge::default();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            // With a receipt, as the service keeps by default (D38).
            let receipt = Arc::new(RequestInfo {
                request_id: format!("bench-{c}-{seq}"),
                api_key: "bench".into(),
                interface: iface.id,
                received_at_ms: ap_intake::queue::now_ms(),
                nonce: seq,
            });
            let take = Take::Queue(receipts.then_some(receipt));
            match intake
                .submit(iface, at, body, &mut charge, deadline, take)
                .await
            {
                Ok(o) if o.succeeded == per => Ok(()),
                Ok(o) => {
                    let first = o.errors.first().map(|e| format!("{}: {}", e.path, e.error));
                    let detail = format!("{}; {}", o.message, first.unwrap_or_default());
                    Err(Failure::new(format!("{:?}", o.status), detail))
                }
                Err(e) => Err(Failure::new("refused", e.to_string())),
            }
        }
    })
    .await;
    let cpu = Sample::of(None).per_record(&before, run.records);
    writer.stop();
    let (syncs, txns) = (writer.transactions().max(1), writer.transactions().max(1));
    let per = |n: u64| run.requests as f64 / n as f64;
    println!(
        "queue: {txns} transactions ({:.1} requests each), {syncs} syncs ({:.1} requests each)",
        per(txns),
        per(syncs)
    );
    println!("{cpu}");
    run
}
