//! What monitoring costs the intake: the same load with Prometheus scraping `/metrics` and a
//! probe asking `/readyz` every second, and without, alternated on one service in one run
//! (issue 46: readiness answers from the queue's last write and writes nothing while the
//! queue is busy, so the figures should agree within noise).

use crate::commits::{self, HttpClient};
use crate::intake::{self, Load};
use crate::service;
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// `pairs` runs without and with scraping, each `load`; prints each and the ratio of the
/// sums (with / without).
pub fn run(runtime: &tokio::runtime::Runtime, dir: &Path, load: &Load, pairs: usize) {
    let config = service::write_config_on(dir, &dir.join("scrape"), None, None, "scrape.toml");
    let svc = service::Service::start(&config);
    let admin = svc.admin.expect("the admin listener");
    println!(
        "scrape: {} records/request, {} clients, {} s a run, {pairs} pairs, {}",
        load.per_request,
        load.concurrency,
        load.duration.as_secs(),
        load.iface.path
    );
    let (mut without, mut with) = (0.0, 0.0);
    // The queue grows as the runs go (nothing is delivered): each pair runs the other way
    // round from the one before, so that neither kind always meets the larger queue.
    for pair in 0..pairs {
        for watched in [pair % 2 == 1, pair % 2 == 0] {
            let (rate, errors) = one_run(runtime, svc.addr, admin, load, pair, watched);
            assert_eq!(errors, 0, "requests failed");
            if watched {
                with += rate;
            } else {
                without += rate;
            }
        }
    }
    println!(
        "scrape: {:.0} records/s without, {:.0} with a scrape every second: ratio {:.3}",
        without / pairs as f64,
        with / pairs as f64,
        with / without
    );
}

/// One run of `load`, with the scraper when `watched`: records/s and failed requests.
fn one_run(
    runtime: &tokio::runtime::Runtime,
    addr: SocketAddr,
    admin: SocketAddr,
    load: &Load,
    pair: usize,
    watched: bool,
) -> (f64, u64) {
    let scrapes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let scraper =
        watched.then(|| runtime.spawn(scrape(admin, Arc::clone(&scrapes), Arc::clone(&stop))));
    let mut run = runtime.block_on(intake::against_service(&[addr], load));
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = scraper {
        let _ = runtime.block_on(s);
    }
    let label = match watched {
        true => format!(
            "pair {pair}, /metrics and /readyz every second ({} scrapes)",
            scrapes.load(Ordering::Relaxed)
        ),
        false => format!("pair {pair}, no scrape"),
    };
    run.print(&label);
    (run.records_per_sec(), run.errors())
}

/// GET /metrics and /readyz every second until `stop`, as Prometheus and a probe would.
async fn scrape(admin: SocketAddr, scrapes: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let client: HttpClient = commits::client();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        for path in ["/metrics", "/readyz"] {
            let uri: http::Uri = format!("http://{admin}{path}").parse().expect("uri");
            if let Ok(resp) = client.get(uri).await {
                let _ = resp.into_body().collect().await;
                scrapes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
