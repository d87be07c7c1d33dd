//! Hostile input against the release binary (D23, D27).
//!
//! `memory`: batches of `--concurrency` concurrent bodies of about `--body-mib` MiB of each of
//! the worst shapes, then a batch mixing them, `--rounds` times; per batch the statuses
//! received, the wall time and the service's peak resident memory (VmHWM, reset before each
//! batch through `/proc/<pid>/clear_refs`, and VmRSS sampled every 5 ms). The bound (D27):
//! under 1.5 GiB, and the service still alive and answering `/healthz` and a small POST
//! afterwards.
//!
//! `hostile`: the latency of small requests carrying exponent bombs and 10,000-digit
//! mantissas beside the same requests with ordinary numbers (D23: refused in microseconds,
//! like any other).

use crate::commits::{self, Commits, HttpClient};
use crate::service::{self, KEY, Service};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// D27: 16 concurrent 32 MiB bodies of any shape stay under this.
const RSS_BOUND_MIB: f64 = 1536.0;
/// D27: no body delays /healthz or another client's small request by more than 100 ms.
const PROBE_BOUND_US: u32 = 100_000;

/// No answer within this counts as a failed request (status 0).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

const GL: &str = "/general-ledger-codes/v1";
const PO: &str = "/purchase-orders/v2";

fn client(concurrency: usize) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build_http()
}

// ---------------------------------------------------------------------------------------------
// The service.

/// The benchmark service: the usual bench config (service.rs) with, for bodies over the
/// default 32 MiB, a larger `max_body_bytes`.
struct Target {
    svc: Service,
    /// The admin listener (`/healthz`, `/metrics`), from the service's log.
    admin: SocketAddr,
}

fn start(dir: &Path, max_body: Option<usize>) -> Target {
    let config = service::write_config(dir, &dir.join("data"), None);
    if let Some(bytes) = max_body {
        let text = std::fs::read_to_string(&config).expect("read config");
        assert!(text.contains("[limits]\n"), "the bench config has changed");
        let text = text.replace(
            "[limits]\n",
            &format!("[limits]\nmax_body_bytes = {bytes}\n"),
        );
        std::fs::write(&config, text).expect("write config");
    }
    let svc = Service::start(&config);
    let admin = svc.admin.expect("the service logs its admin listener");
    Target { svc, admin }
}

/// A field of /proc/<pid>/status in MiB.
fn proc_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .map_or(0.0, |kb: f64| kb / 1024.0)
}

/// Resets the peak resident memory (VmHWM) of `pid` to its current resident memory.
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Samples VmRSS of `pid` every 5 ms until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Duration, f64)>>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                samples.push((started.elapsed(), proc_mib(pid, "VmRSS")));
                std::thread::sleep(Duration::from_millis(5));
            }
            samples
        });
        Self { stop, thread }
    }

    fn finish(self) -> Vec<(Duration, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler")
    }
}

async fn post(client: &HttpClient, uri: http::Uri, body: Bytes) -> (u16, String) {
    let req = http::Request::post(uri)
        .header("content-type", "application/json")
        .header("x-api-key", KEY)
        .body(Full::new(body))
        .expect("request");
    let answer = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        ))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => (0, e),
        Err(_) => (0, "no answer within the client's timeout".into()),
    }
}

async fn get(client: &HttpClient, uri: http::Uri) -> (u16, Duration) {
    let started = Instant::now();
    let status = match client.get(uri).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
        Err(_) => 0,
    };
    (status, started.elapsed())
}

// ---------------------------------------------------------------------------------------------
// The worst shapes.

fn fixture(stem: &str, kind: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/{stem}.{kind}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("fixture JSON")
}

/// `n` copies of what `item(i)` writes, comma-separated, inside the envelope with `head` and
/// `tail` around them.
fn envelope_of(head: &str, n: usize, item: impl Fn(usize, &mut String), tail: &str) -> String {
    let mut s = String::with_capacity(64 + head.len() + tail.len() + n * 8);
    s.push_str(r#"{"objects":{"object":{"record":["#);
    s.push_str(head);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        item(i, &mut s);
    }
    s.push_str(tail);
    s.push_str("]}}}");
    s
}

/// A valid PO v2 record of about `bytes` bytes: the full fixture with its rows replaced by
/// copies of its smaller row (at least one), numbered.
fn po_record(bytes: usize) -> (String, String) {
    let mut po = fixture("purchase-orders-v2", "full");
    let rows = po["rows"].as_array().expect("rows").clone();
    let row = rows
        .iter()
        .min_by_key(|r| r.to_string().len())
        .expect("a row")
        .clone();
    po["rows"] = Value::Array(Vec::new());
    po["po_number"] = Value::String("@@KEY@@".into());
    let bare = po.to_string().len();
    let per_row = row.to_string().len() + 1;
    let n = (bytes.saturating_sub(bare) / per_row).max(1);
    po["rows"] = Value::Array(
        (0..n)
            .map(|i| {
                let mut r = row.clone();
                r["line_number"] = Value::from(i + 1);
                r
            })
            .collect(),
    );
    let text = po.to_string();
    let (a, b) = text.split_once(r#""@@KEY@@""#).expect("marker");
    (a.to_string(), b.to_string())
}

/// The full GL code fixture as JSON text, split where its code goes.
fn gl_record() -> (String, String) {
    let mut gl = fixture("general-ledger-codes", "full");
    gl["code"] = Value::String("@@KEY@@".into());
    let text = gl.to_string();
    let (a, b) = text.split_once(r#""@@KEY@@""#).expect("marker");
    (a.to_string(), b.to_string())
}

fn gl_item(a: &str, b: &str, i: usize, s: &mut String) {
    s.push_str(a);
    s.push_str(&format!("\"G{i:07}\""));
    s.push_str(b);
}

/// The worst shapes (D27's and those tests/hostile/budgets.rs measures): name and path.
pub const SHAPES: &[(&str, &str)] = &[
    ("valid PO v2 records (10,000 from 32 MiB)", PO),
    ("10,000 valid GL codes", GL),
    ("valid GL codes (over 10,000: 413 once parsed)", GL),
    ("array of numbers in an unknown field", GL),
    ("array of numbers where rows go", PO),
    ("deep nesting (64 levels), up to 10,000 records", GL),
    ("many unknown fields", GL),
    ("duplicate keys", GL),
    ("empty PO v2 rows", PO),
    ("empty PO v2 coding rows", PO),
    ("exponent bombs", PO),
];

/// The body of shape `which` (an index into [`SHAPES`]), at most `size` bytes.
pub fn body(which: usize, size: usize) -> String {
    let room = size - 64;
    match which {
        0 => {
            let (a, b) = po_record(room / 10_000 - 40);
            let n = (room / (a.len() + b.len() + 12)).min(10_000);
            envelope_of(
                "",
                n,
                |i, s| {
                    s.push_str(&a);
                    s.push_str(&format!("\"PO-M-{i}\""));
                    s.push_str(&b);
                },
                "",
            )
        }
        1 => {
            let (a, b) = gl_record();
            let n = (room / (a.len() + b.len() + 12)).min(10_000);
            envelope_of("", n, |i, s| gl_item(&a, &b, i, s), "")
        }
        2 => {
            let (a, b) = gl_record();
            let n = room / (a.len() + b.len() + 12);
            envelope_of("", n, |i, s| gl_item(&a, &b, i, s), "")
        }
        3 => envelope_of(
            r#"{"code":"1","x":["#,
            room / 2 - 16,
            |_, s| s.push('1'),
            "]}",
        ),
        4 => envelope_of(
            r#"{"po_number":"1","rows":["#,
            room / 2 - 24,
            |_, s| s.push('1'),
            "]}",
        ),
        5 => {
            // Root, objects, object, the record array, the record, x: six levels; then 58.
            let deep = format!("{}1{}", "[".repeat(58), "]".repeat(58));
            let per = (room / 10_000 - 20) / (deep.len() + 1);
            let x = vec![deep.as_str(); per.max(1)].join(",");
            envelope_of(
                "",
                (room / (x.len() + 20)).min(10_000),
                |_, s| {
                    s.push_str(r#"{"code":"1","x":["#);
                    s.push_str(&x);
                    s.push_str("]}");
                },
                "",
            )
        }
        6 => envelope_of(
            r#"{"code":"1","#,
            room / 16,
            |i, s| s.push_str(&format!(r#""k{i:08}":1"#)),
            "}",
        ),
        7 => envelope_of("{", room / 11 - 2, |_, s| s.push_str(r#""code":"1""#), "}"),
        8 => envelope_of(
            r#"{"po_number":"1","rows":["#,
            room / 3 - 12,
            |_, s| s.push_str("{}"),
            "]}",
        ),
        9 => envelope_of(
            r#"{"po_number":"1","rows":[{"coding":["#,
            room / 3 - 16,
            |_, s| s.push_str("{}"),
            "]}]}",
        ),
        10 => envelope_of(
            r#"{"po_number":"1","rows":["#,
            room / 60 - 1,
            |_, s| s.push_str(r#"{"line_number":1e99999999999,"unit_price":-1e-99999999999}"#),
            "]}",
        ),
        _ => unreachable!("no shape {which}"),
    }
}

// ---------------------------------------------------------------------------------------------
// `memory`.

/// What one batch of concurrent requests saw.
struct Batch {
    label: String,
    bytes: usize,
    /// Status -> (count, the first answer's message).
    statuses: BTreeMap<u16, (usize, String)>,
    wall: Duration,
    hwm_mib: f64,
    sampled_max_mib: f64,
    after_mib: f64,
    samples: Vec<(Duration, f64)>,
    probes: Probes,
    /// The queue writer's transactions meanwhile, when `/metrics` could be read.
    commits: Option<Commits>,
}

fn message_of(text: &str) -> String {
    let m = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.to_string());
    m.chars().take(110).collect()
}

/// Sends `bodies` (path, body) at once and waits for every answer.
async fn batch(
    client: &HttpClient,
    target: &Target,
    label: String,
    bodies: Vec<(&'static str, Bytes)>,
) -> Batch {
    let pid = target.svc.child.id();
    let bytes = bodies.iter().map(|(_, b)| b.len()).sum();
    let cleared = reset_peak(pid);
    let commits_before = commits::buckets(client, target.admin).await;
    let sampler = Sampler::start(pid);
    let done = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(probe(
        client.clone(),
        target.svc.addr,
        target.admin,
        Arc::clone(&done),
    ));
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|(path, body)| {
            let client = client.clone();
            let uri: http::Uri = format!("http://{}{path}", target.svc.addr)
                .parse()
                .expect("uri");
            tokio::spawn(async move { post(&client, uri, body).await })
        })
        .collect();
    let mut statuses: BTreeMap<u16, (usize, String)> = BTreeMap::new();
    for t in tasks {
        let (status, text) = t.await.expect("client task");
        let entry = statuses.entry(status).or_insert((0, message_of(&text)));
        entry.0 += 1;
    }
    let wall = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let probes = probe.await.expect("probe task");
    let samples = sampler.finish();
    let commits = Commits::between(
        &commits_before,
        &commits::buckets(client, target.admin).await,
    );
    let sampled_max_mib = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let hwm = proc_mib(pid, "VmHWM");
    Batch {
        label,
        bytes,
        statuses,
        wall,
        // Without clear_refs, VmHWM is the peak since start: still an upper bound.
        hwm_mib: if cleared {
            hwm
        } else {
            hwm.max(sampled_max_mib)
        },
        sampled_max_mib,
        after_mib: proc_mib(pid, "VmRSS"),
        samples,
        probes,
        commits,
    }
}

/// Small requests sent during a batch: latencies in microseconds and unexpected statuses.
#[derive(Default)]
struct Probes {
    healthz: Vec<u32>,
    small_post: Vec<u32>,
    unexpected: BTreeMap<u16, usize>,
}

/// Every 20 ms until `done`: GET /healthz on the admin listener, then a POST of one small
/// valid GL code (D27: each answered within 100 ms whatever else is in flight).
async fn probe(
    client: HttpClient,
    addr: SocketAddr,
    admin: SocketAddr,
    done: Arc<AtomicBool>,
) -> Probes {
    let healthz: http::Uri = format!("http://{admin}/healthz").parse().expect("uri");
    let small: http::Uri = format!("http://{addr}{GL}").parse().expect("uri");
    let mut out = Probes::default();
    let mut n = 0u64;
    while !done.load(Ordering::Relaxed) {
        let (status, took) = get(&client, healthz.clone()).await;
        out.healthz.push(took.as_micros() as u32);
        if status != 200 {
            *out.unexpected.entry(status).or_default() += 1;
        }
        let body = format!(
            r#"{{"objects":{{"object":{{"record":[{{"code":"PROBE-{n}","type":"DEDUCTABLE","description_en":"Office supplies"}}]}}}}}}"#
        );
        n += 1;
        let started = Instant::now();
        let (status, _) = post(&client, small.clone(), Bytes::from(body)).await;
        out.small_post.push(started.elapsed().as_micros() as u32);
        if status != 202 {
            *out.unexpected.entry(status).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

fn summary(l: &mut [u32]) -> String {
    l.sort_unstable();
    format!(
        "p50 {:.1} p99 {:.1} max {:.1} ms ({})",
        percentile(l, 0.5) as f64 / 1000.0,
        percentile(l, 0.99) as f64 / 1000.0,
        l.last().copied().unwrap_or(0) as f64 / 1000.0,
        l.len()
    )
}

impl Batch {
    fn print(&mut self, timeline: bool) {
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, (n, _))| format!("{n}x{s}"))
            .collect();
        println!(
            "{:<42} {:>7.1} MiB sent  {:<22} {:>7.2} s  peak RSS {:>7.1} MiB (sampled {:>7.1})  after {:>6.1} MiB",
            self.label,
            self.bytes as f64 / 1048576.0,
            statuses.join(" "),
            self.wall.as_secs_f64(),
            self.hwm_mib,
            self.sampled_max_mib,
            self.after_mib
        );
        for (s, (_, m)) in &self.statuses {
            println!("{:<44}{s}: {m}", "");
        }
        println!(
            "{:<44}meanwhile /healthz {}; small POST {}{}",
            "",
            summary(&mut self.probes.healthz),
            summary(&mut self.probes.small_post),
            if self.probes.unexpected.is_empty() {
                String::new()
            } else {
                format!("; UNEXPECTED statuses {:?}", self.probes.unexpected)
            }
        );
        // A small POST is answered after its transaction's fsync (D17). In a phase that stores
        // nothing but the probes' records, a slow transaction here is the disk's.
        match &self.commits {
            Some(c) if c.total > 0 => println!(
                "{:<44}queue transactions meanwhile {}, over 64 ms {}, the slowest within {} ms",
                "",
                c.total,
                c.over_ms(64.0),
                c.slowest_within_ms()
            ),
            Some(_) => println!("{:<44}queue transactions meanwhile none", ""),
            None => {}
        }
        if timeline {
            let mut next = Duration::ZERO;
            let mut line = String::new();
            for (t, rss) in &self.samples {
                if *t >= next {
                    line.push_str(&format!(" {:.1}s:{rss:.0}", t.as_secs_f64()));
                    next += Duration::from_millis(250);
                }
            }
            println!("{:<44}VmRSS MiB over time:{line}", "");
        }
    }
}

pub struct MemoryArgs {
    pub concurrency: usize,
    pub body_mib: usize,
    pub rounds: usize,
    pub timeline: bool,
}

/// The `memory` scenario; false when the bound was not met.
pub fn memory(runtime: &tokio::runtime::Runtime, dir: &Path, args: &MemoryArgs) -> bool {
    let size = args.body_mib << 20;
    let max_body = (size > 32 << 20).then_some(size);
    assert!(
        size <= 128 << 20,
        "bodies over 128 MiB need inflight_bytes raised too"
    );
    let mut target = start(dir, max_body);
    let pid = target.svc.child.id();
    std::thread::sleep(Duration::from_millis(500));
    println!(
        "memory: {} concurrent bodies of at most {} MiB, {} round(s); service pid {pid}, idle RSS {:.1} MiB",
        args.concurrency,
        args.body_mib,
        args.rounds,
        proc_mib(pid, "VmRSS")
    );
    let client = client(args.concurrency);
    let bodies: Vec<Bytes> = (0..SHAPES.len())
        .map(|i| Bytes::from(body(i, size)))
        .collect();
    for (i, b) in bodies.iter().enumerate() {
        assert!(b.len() <= size, "{} is {} bytes", SHAPES[i].0, b.len());
    }
    let mut worst: f64 = 0.0;
    let mut slowest_us: u32 = 0;
    let mut unanswered = 0;
    for round in 1..=args.rounds {
        println!("round {round}");
        let mut batches: Vec<(String, Vec<(&'static str, Bytes)>)> = SHAPES
            .iter()
            .zip(&bodies)
            .map(|(&(name, path), b)| (name.to_string(), vec![(path, b.clone()); args.concurrency]))
            .collect();
        batches.push((
            "mixed (shapes in turn)".into(),
            (0..args.concurrency)
                .map(|i| (SHAPES[i % SHAPES.len()].1, bodies[i % SHAPES.len()].clone()))
                .collect(),
        ));
        for (label, sent) in batches {
            let mut b = runtime.block_on(batch(&client, &target, label, sent));
            b.print(args.timeline);
            worst = worst.max(b.hwm_mib);
            let probes = b.probes.healthz.iter().chain(&b.probes.small_post);
            slowest_us = slowest_us.max(probes.copied().max().unwrap_or(0));
            unanswered += b.statuses.get(&0).map_or(0, |e| e.0);
            if let Ok(Some(status)) = target.svc.child.try_wait() {
                println!("THE SERVICE EXITED: {status}");
                return false;
            }
        }
    }
    let alive = target.svc.child.try_wait().ok().flatten().is_none();
    let healthz: http::Uri = format!("http://{}/healthz", target.admin)
        .parse()
        .expect("uri");
    let (health, took) = runtime.block_on(get(&client, healthz));
    let small: http::Uri = format!("http://{}{GL}", target.svc.addr)
        .parse()
        .expect("uri");
    let gl = fixture("general-ledger-codes", "minimal");
    let small_body = Bytes::from(format!(r#"{{"objects":{{"object":{{"record":[{gl}]}}}}}}"#));
    let (small_status, _) = runtime.block_on(post(&client, small, small_body));
    println!(
        "afterwards: alive {alive}, /healthz {health} in {:.2} ms, a small POST {small_status}; resident {:.1} MiB",
        took.as_secs_f64() * 1000.0,
        proc_mib(pid, "VmRSS")
    );
    let prompt = slowest_us <= PROBE_BOUND_US;
    let met = worst < RSS_BOUND_MIB && alive && health == 200 && small_status == 202 && prompt;
    println!(
        "peak RSS over all batches {worst:.1} MiB (bound {RSS_BOUND_MIB:.0} MiB), slowest \
         /healthz or small POST meanwhile {:.1} ms (bound 100 ms), the service alive and \
         serving: {}",
        slowest_us as f64 / 1000.0,
        if met { "met" } else { "NOT MET" }
    );
    if unanswered > 0 {
        println!(
            "{unanswered} request(s) got no HTTP answer (status 0 above: the connection failed)"
        );
    }
    met
}

// ---------------------------------------------------------------------------------------------
// `hostile`.

/// The minimal PO v2 record with `text` as the number at `field` of its first row (or of
/// the record when `field` has no slash).
fn po_with(field: &str, text: &str, key: &str) -> String {
    let mut po = fixture("purchase-orders-v2", "minimal");
    po["po_number"] = Value::String(key.into());
    let slot = match field.split_once('/') {
        Some((_, f)) => &mut po["rows"][0][f],
        None => &mut po[field],
    };
    *slot = Value::String("@@NUMBER@@".into());
    let record = po.to_string().replace(r#""@@NUMBER@@""#, text);
    format!(r#"{{"objects":{{"object":{{"record":[{record}]}}}}}}"#)
}

/// The request kinds compared: label, field, number text, expected status.
fn variants() -> Vec<(String, &'static str, String, u16)> {
    let mantissa = format!("1{}", "0".repeat(9_999));
    let fraction = format!("0.{}1", "0".repeat(9_998));
    vec![
        (
            "ordinary numbers, valid".into(),
            "rows/quantity",
            "2".into(),
            202,
        ),
        (
            "ordinary number out of range (20 digits)".into(),
            "rows/line_number",
            "99999999999999999999".into(),
            400,
        ),
        (
            "ordinary number with too many places".into(),
            "rows/unit_price",
            "19.999".into(),
            400,
        ),
        (
            "1e99999999999 (integer)".into(),
            "rows/line_number",
            "1e99999999999".into(),
            400,
        ),
        (
            "1E+9223372036854775807 (money)".into(),
            "rows/unit_price",
            "1E+9223372036854775807".into(),
            400,
        ),
        (
            "-1e-99999999999 (money)".into(),
            "rows/unit_price",
            "-1e-99999999999".into(),
            400,
        ),
        (
            "10,000-digit mantissa (quantity)".into(),
            "rows/quantity",
            mantissa,
            400,
        ),
        (
            "10,000-digit fraction (money)".into(),
            "rows/unit_price",
            fraction,
            400,
        ),
    ]
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The `hostile` scenario: `requests` of each kind from one keep-alive client, the kinds
/// interleaved so that the machine's noise falls on all alike; false when a request got an
/// unexpected status.
pub fn hostile(runtime: &tokio::runtime::Runtime, dir: &Path, requests: usize) -> bool {
    let target = start(dir, None);
    let client = client(1);
    let uri: http::Uri = format!("http://{}{PO}", target.svc.addr)
        .parse()
        .expect("uri");
    let kinds = variants();
    let bodies: Vec<Vec<Bytes>> = kinds
        .iter()
        .map(|(_, field, text, _)| {
            (0..4)
                .map(|k| Bytes::from(po_with(field, text, &format!("PO-H-{k}"))))
                .collect()
        })
        .collect();
    println!(
        "hostile: {requests} requests of each kind, one keep-alive client, kinds interleaved; bodies {} to {} bytes",
        bodies.iter().map(|b| b[0].len()).min().unwrap_or(0),
        bodies.iter().map(|b| b[0].len()).max().unwrap_or(0)
    );
    let mut latencies = vec![Vec::with_capacity(requests); kinds.len()];
    let mut unexpected = vec![BTreeMap::<u16, usize>::new(); kinds.len()];
    runtime.block_on(async {
        // Warm-up: connections, the queue, the caches.
        for (i, b) in bodies.iter().enumerate() {
            for _ in 0..20 {
                let _ = post(&client, uri.clone(), b[i % 4].clone()).await;
            }
        }
        for r in 0..requests {
            for (k, b) in bodies.iter().enumerate() {
                let started = Instant::now();
                let (status, _) = post(&client, uri.clone(), b[r % 4].clone()).await;
                latencies[k].push(started.elapsed().as_micros() as u32);
                if status != kinds[k].3 {
                    *unexpected[k].entry(status).or_default() += 1;
                }
            }
        }
    });
    let mut ok = true;
    println!(
        "{:<42} {:>8} {:>10} {:>10} {:>10}",
        "request", "status", "p50 µs", "p99 µs", "max µs"
    );
    for (k, l) in latencies.iter_mut().enumerate() {
        l.sort_unstable();
        println!(
            "{:<42} {:>8} {:>10} {:>10} {:>10}{}",
            kinds[k].0,
            kinds[k].3,
            percentile(l, 0.50),
            percentile(l, 0.99),
            l.last().copied().unwrap_or(0),
            if unexpected[k].is_empty() {
                String::new()
            } else {
                ok = false;
                format!("  UNEXPECTED statuses {:?}", unexpected[k])
            }
        );
    }
    ok
}
