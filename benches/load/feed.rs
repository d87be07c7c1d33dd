//! `feed`: the outcome feed (D48) as an ERP pages through it. The queue is filled with
//! `rejections` records the platform refused and `delivered` it took, of one key, in turns
//! (so the rejections are spread among many more deliveries), then the release binary
//! serves `GET /requests?state=rejected&limit=500` from the first page to the last, timed a
//! page at a time, and the whole feed (every state) after it.

use crate::service::{KEY, Service, write_config_on};
use ap_intake::queue::receipt::{ReceiptLine, RequestInfo};
use ap_intake::queue::{NewRecord, QueueKey, Sent, Store, now_ms};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GL: &str = "general-ledger-codes-v1";
/// Each page must come well within this: the acceptance bound of D48's benchmark.
const PAGE_BOUND: Duration = Duration::from_secs(1);

/// Fills the queue, then pages through the feed; exits non-zero when a page is missing
/// records or takes [`PAGE_BOUND`] or more.
pub fn run(dir: &Path, rejections: usize, delivered: usize, postgres: Option<&str>) {
    let data_dir = dir.join("queue");
    let store = crate::pg::fresh_store(postgres, &data_dir, "bench");
    let started = Instant::now();
    fill(store.as_ref(), rejections, delivered);
    println!(
        "feed: {rejections} rejected and {delivered} delivered records of one key in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    store.close().expect("close the queue");
    drop(store);
    let config = write_config_on(
        dir,
        &data_dir,
        None,
        postgres.map(|u| (u, "bench")),
        "feed.toml",
    );
    let service = Service::start(&config);
    let agent = crate::service::agent();
    let base = format!("http://{}/requests", service.addr);
    let (seen, times) = walk(&agent, &base, "state=rejected&limit=500");
    report("rejected, 500 a page", seen, rejections, &times);
    let (all, all_times) = walk(&agent, &base, "limit=500");
    report(
        "every state, 500 a page",
        all,
        rejections + delivered,
        &all_times,
    );
}

/// Queues the records in requests of 500 (each with its receipt), then settles them in
/// turns: a rejection (its own transaction, as the delivery worker writes one) for every
/// `delivered / rejections` deliveries.
fn fill(store: &dyn Store, rejections: usize, delivered: usize) {
    let total = rejections + delivered;
    for (n, chunk) in (0..total).collect::<Vec<_>>().chunks(500).enumerate() {
        let request = Arc::new(RequestInfo {
            request_id: format!("feed-bench-{n}"),
            api_key: "bench".into(),
            interface: GL,
            received_at_ms: now_ms(),
            nonce: 1,
        });
        let records: Vec<NewRecord> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| NewRecord {
                key: QueueKey::new("gl-code", &["main", &format!("F{r:08}")]).expect("key"),
                interface: GL,
                xml: format!("<gl_code><code>F{r:08}</code></gl_code>"),
                receipt: Some(ReceiptLine {
                    request: Arc::clone(&request),
                    index: u32::try_from(i).expect("index"),
                }),
            })
            .collect();
        store.upsert(&records, now_ms()).expect("upsert");
    }
    let every = (total / rejections.max(1)).max(1);
    let mut n = 0usize;
    loop {
        let batch = store.take(GL, 500).expect("take");
        if batch.is_empty() {
            break;
        }
        let mut deliver = Vec::new();
        for (key, item) in &batch {
            let sent = Sent::of(key, item);
            if n.is_multiple_of(every) && n / every < rejections {
                store
                    .reject(&sent, "HTTP 422: unknown cost centre")
                    .expect("reject");
            } else {
                deliver.push(sent);
            }
            n += 1;
        }
        store.delivered(&deliver).expect("delivered");
    }
}

/// Pages through the feed from its start with `query`: records seen, each page's time.
fn walk(agent: &ureq::Agent, base: &str, query: &str) -> (usize, Vec<Duration>) {
    let mut after = String::new();
    let mut seen = 0;
    let mut times = Vec::new();
    loop {
        let url = match after.as_str() {
            "" => format!("{base}?{query}"),
            a => format!("{base}?{query}&after={a}"),
        };
        let asked = Instant::now();
        let mut resp = agent
            .get(&url)
            .header("x-api-key", KEY)
            .call()
            .expect("GET /requests");
        let text = resp.body_mut().read_to_string().expect("a page");
        let body: serde_json::Value = serde_json::from_str(&text).expect("a JSON page");
        times.push(asked.elapsed());
        assert_eq!(resp.status(), 200, "{body}");
        let records = body["records"].as_array().expect("records").len();
        after = body["next"].as_str().expect("next").to_string();
        if records == 0 {
            return (seen, times);
        }
        seen += records;
    }
}

fn report(what: &str, seen: usize, expected: usize, times: &[Duration]) {
    let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let total: f64 = ms.iter().sum();
    let median = ms.get(ms.len() / 2).copied().unwrap_or(0.0);
    let slowest = ms.last().copied().unwrap_or(0.0);
    println!(
        "feed {what}: {seen} records in {} pages, {total:.0} ms in all; a page: median \
         {median:.1} ms, slowest {slowest:.1} ms",
        times.len()
    );
    if seen != expected || slowest >= PAGE_BOUND.as_secs_f64() * 1000.0 {
        eprintln!("feed {what}: expected {expected} records, each page under {PAGE_BOUND:?}");
        std::process::exit(1);
    }
}
