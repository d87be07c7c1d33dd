//! Pressure (D27): heavy bodies of the worst shapes, sent concurrently, neither hold up
//! `/healthz` and small requests nor take the process past its memory bound.
//!
//! The two tests run one at a time (they share the machine's cores with each other and would
//! blur each other's figures).

use super::common::process::{self, Service};
use super::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const GL: &str = "/general-ledger-codes/v1";
const PO: &str = "/purchase-orders/v2";

/// `n` items written by `item(i, out)`, comma-separated, inside the envelope between `head`
/// and `tail`.
fn envelope_of(head: &str, n: usize, item: impl Fn(usize, &mut String), tail: &str) -> String {
    let mut s = String::with_capacity(64 + n * 8);
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

/// The record `value` as JSON text split around its `field`, whose value is replaced by what
/// the caller writes between the halves.
fn split_at_field(mut value: Value, field: &str) -> (String, String) {
    value[field] = Value::String("@@SLOT@@".into());
    let text = value.to_string();
    let (a, b) = text.split_once(r#""@@SLOT@@""#).unwrap();
    (a.to_string(), b.to_string())
}

/// Bodies of the worst shapes of D27 (as in budgets.rs and `cargo bench --bench load --
/// memory`), each at most `size` bytes: name, path, body.
fn worst_shapes(size: usize) -> Vec<(&'static str, &'static str, String)> {
    let room = size - 64;
    let (gl_a, gl_b) = split_at_field(fixture("general-ledger-codes", "minimal"), "code");
    let gl_n = room / (gl_a.len() + gl_b.len() + 12);
    let (po_a, po_b) = split_at_field(fixture("purchase-orders-v2", "full"), "po_number");
    let po_n = (room / (po_a.len() + po_b.len() + 12)).min(10_000);
    // Root, objects, object, the record array, the record: five levels; x takes 59 more.
    let deep = format!("{}1{}", "[".repeat(59), "]".repeat(59));
    let bomb = r#"{"line_number":1e99999999999,"unit_price":-1e-99999999999}"#;
    vec![
        (
            "valid PO v2 records (at most 10,000)",
            PO,
            envelope_of(
                "",
                po_n,
                |i, s| {
                    s.push_str(&po_a);
                    s.push_str(&format!("\"PO-P-{i}\""));
                    s.push_str(&po_b);
                },
                "",
            ),
        ),
        (
            "valid GL codes (past 10,000 from 1 MiB: 413 once parsed)",
            GL,
            envelope_of(
                "",
                gl_n,
                |i, s| {
                    s.push_str(&gl_a);
                    s.push_str(&format!("\"G{i:07}\""));
                    s.push_str(&gl_b);
                },
                "",
            ),
        ),
        (
            "array of numbers in an unknown field",
            GL,
            envelope_of(
                r#"{"code":"1","x":["#,
                room / 2 - 16,
                |_, s| s.push('1'),
                "]}",
            ),
        ),
        (
            "array of numbers where rows go",
            PO,
            envelope_of(
                r#"{"po_number":"1","rows":["#,
                room / 2 - 24,
                |_, s| s.push('1'),
                "]}",
            ),
        ),
        (
            "deep nesting (64 levels)",
            GL,
            envelope_of(
                "",
                (room / (deep.len() + 20)).min(10_000),
                |_, s| {
                    s.push_str(r#"{"code":"1","x":"#);
                    s.push_str(&deep);
                    s.push('}');
                },
                "",
            ),
        ),
        (
            "many unknown fields",
            GL,
            envelope_of(
                r#"{"code":"1","#,
                room / 16,
                |i, s| s.push_str(&format!(r#""k{i:08}":1"#)),
                "}",
            ),
        ),
        (
            "duplicate keys",
            GL,
            envelope_of("{", room / 11 - 2, |_, s| s.push_str(r#""code":"1""#), "}"),
        ),
        (
            "empty PO v2 rows",
            PO,
            envelope_of(
                r#"{"po_number":"1","rows":["#,
                room / 3 - 12,
                |_, s| s.push_str("{}"),
                "]}",
            ),
        ),
        (
            "empty PO v2 coding rows",
            PO,
            envelope_of(
                r#"{"po_number":"1","rows":[{"coding":["#,
                room / 3 - 16,
                |_, s| s.push_str("{}"),
                "]}]}",
            ),
        ),
        (
            "exponent bombs",
            PO,
            envelope_of(
                r#"{"po_number":"1","rows":["#,
                room / 60 - 1,
                |_, s| s.push_str(bomb),
                "]}",
            ),
        ),
    ]
}

/// POSTs `body` to `addr` with the test key: the status (0 when the connection failed or no
/// answer came within two minutes: a debug build checks a large body slowly).
fn post_status(addr: std::net::SocketAddr, path: &str, body: &str) -> u16 {
    post_answer(addr, path, body).0
}

/// POSTs `body` over a raw socket, reading the answer while the body is still being written
/// (as a client must, to see an answer sent before the server read the whole body): the
/// status and the answer's body, or status 0 and what went wrong.
fn post_reading_early(addr: std::net::SocketAddr, path: &str, body: Arc<String>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut writer = sock.try_clone().unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         x-api-key: {KEY}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let sending = std::thread::spawn(move || {
        writer
            .write_all(head.as_bytes())
            .and_then(|()| writer.write_all(body.as_bytes()))
    });
    let mut answer = Vec::new();
    let read = sock.read_to_end(&mut answer);
    let sent = sending.join().unwrap();
    if answer.is_empty() {
        return (0, format!("no answer: read {read:?}, write {sent:?}"));
    }
    let reply = parse_raw(&answer);
    (reply.status, reply.text)
}

/// [`post_status`] with the answer's body, or the client's error when there was no answer.
fn post_answer(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let sent = agent
        .post(&format!("http://{addr}{path}"))
        .header("Content-Type", "application/json")
        .header("x-api-key", KEY)
        .send(body);
    match sent {
        Ok(mut r) => {
            let text = r.body_mut().read_to_string().unwrap_or_default();
            (r.status().as_u16(), text)
        }
        Err(e) => (0, e.to_string()),
    }
}

fn tiny_gl(code: &str) -> String {
    let mut gl = fixture("general-ledger-codes", "minimal");
    gl["code"] = Value::String(code.into());
    envelope(&[gl]).to_string()
}

/// Busy CPU time of this process so far (user + system), from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command name (which may hold spaces) start after its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // USER_HZ is 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

/// Sends bodies of `shapes` from [`HEAVY_CLIENTS`] threads back to back while `/healthz` on
/// the admin listener and a tiny valid POST are measured, one after the other, for
/// [`WINDOW`]; asserts that each answered within 100 ms every time (D27).
///
/// Only measurements taken while at least one heavy request was in flight (counted before and
/// after the measurement) count, and the heavy requests must really have been worked on:
/// some answered after being parsed (202, 207, 400, not refused by the budget before) and the
/// process busy (over half a core) during the window.
fn small_requests_stay_prompt_under(shapes: Vec<(&'static str, &'static str, String)>) {
    const BOUND: Duration = Duration::from_millis(100);
    // The default budget (256 MiB); the test config's body timeout (2 s) bounds how long a
    // heavy request waits for room in it before its 503.
    let app = TestApp::start_in(
        queue_dir_off_the_disk(),
        "",
        "[limits]\nmax_body_bytes = 8388608\ninflight_bytes = 268435456",
    );
    let shapes = Arc::new(shapes);
    let stop = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let statuses: Arc<Mutex<BTreeMap<u16, usize>>> = Arc::default();
    let heavy: Vec<_> = (0..HEAVY_CLIENTS)
        .map(|c| {
            let (shapes, stop, in_flight, statuses) = (
                Arc::clone(&shapes),
                Arc::clone(&stop),
                Arc::clone(&in_flight),
                Arc::clone(&statuses),
            );
            let addr = app.addr;
            std::thread::spawn(move || {
                let mut i = c;
                while !stop.load(Ordering::SeqCst) {
                    let (_, path, body) = &shapes[i % shapes.len()];
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let status = post_status(addr, path, body);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    *statuses.lock().unwrap().entry(status).or_default() += 1;
                    i += HEAVY_CLIENTS;
                }
            })
        })
        .collect();

    // Wait (with a deadline) until every heavy client has a request in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while in_flight.load(Ordering::SeqCst) < HEAVY_CLIENTS {
        assert!(Instant::now() < deadline, "the heavy clients did not start");
        std::thread::yield_now();
    }

    let ops = app.ops_url("/healthz");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let (mut healthz, mut posts) = (Vec::new(), Vec::new());
    let mut uncounted = 0;
    let cpu_before = cpu_time();
    let window_start = Instant::now();
    let mut n = 0;
    let parsed = |statuses: &BTreeMap<u16, usize>| -> usize {
        [202, 207, 400].iter().filter_map(|s| statuses.get(s)).sum()
    };
    // At least WINDOW, and on until the heavy bodies have been parsed, not only refused
    // early: on a slow machine fewer of them get that far in WINDOW.
    while window_start.elapsed() < WINDOW
        || (parsed(&statuses.lock().unwrap()) < HEAVY_CLIENTS
            && window_start.elapsed() < MAX_WINDOW)
    {
        let busy_before = in_flight.load(Ordering::SeqCst) > 0;
        let t = Instant::now();
        let mut r = agent.get(&ops).call().unwrap();
        let _ = r.body_mut().read_to_string();
        let health_took = t.elapsed();
        assert_eq!(r.status(), 200, "/healthz");

        let t = Instant::now();
        let small = app.post(GL, &tiny_gl(&format!("P{n}")));
        let post_took = t.elapsed();
        assert_eq!(small.status, 202, "a tiny valid POST: {}", small.text);
        n += 1;

        if busy_before && in_flight.load(Ordering::SeqCst) > 0 {
            healthz.push(health_took);
            posts.push(post_took);
        } else {
            uncounted += 1;
        }
    }
    let window = window_start.elapsed();
    let cpu = (cpu_time() - cpu_before).as_secs_f64() / window.as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    for h in heavy {
        h.join().unwrap();
    }

    let statuses = statuses.lock().unwrap().clone();
    let max = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let (health_max, post_max) = (max(&healthz), max(&posts));
    println!(
        "{} measurements under load ({uncounted} with no heavy request in flight, not counted); \
         heavy requests answered {statuses:?}; process CPU {cpu:.2} cores\n\
         /healthz: median {:?}, max {health_max:?}\n\
         tiny POST: median {:?}, max {post_max:?}",
        healthz.len(),
        median(&mut healthz),
        median(&mut posts),
    );

    assert!(
        healthz.len() >= 20,
        "too few measurements while heavy requests were in flight: {}",
        healthz.len()
    );
    assert!(
        parsed(&statuses) >= HEAVY_CLIENTS,
        "the heavy requests were not parsed: {statuses:?}"
    );
    assert!(
        statuses
            .keys()
            .all(|s| [202, 207, 400, 413, 503].contains(s)),
        "heavy requests answered {statuses:?}"
    );
    assert!(cpu > 0.5, "the process was not busy: {cpu:.2} cores");
    assert!(
        health_max < BOUND,
        "/healthz took {health_max:?} under load"
    );
    assert!(post_max < BOUND, "a tiny POST took {post_max:?} under load");
}

/// A temporary directory in memory (tmpfs) when the machine has one with room, else on disk.
///
/// A tiny POST is answered once its commit is fsync'd (D17). On the CI machine's virtual disk
/// a flush alone took 335 ms at times, with nothing but tiny POSTs being stored (`strace -T`
/// of the writer's and the checkpoint's fsyncs), which no body causes. What D27 bounds, the
/// cores, async workers and budget the heavy bodies share with small requests, is the same
/// in memory; the fsync and what it keeps are the crash tests' subject.
fn queue_dir_off_the_disk() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let room = rustix::fs::statvfs(shm).map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize));
    const ROOM: u64 = 2 << 30; // far more than the queue grows to, with min_free_bytes (D30)
    if room >= ROOM {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Threads sending heavy bodies at once.
const HEAVY_CLIENTS: usize = 4;
/// Size of each heavy body.
const HEAVY_BODY: usize = 3 << 20;
/// How long small requests are measured.
const WINDOW: Duration = Duration::from_secs(8);
/// How long the measuring goes on at most, waiting for the heavy bodies to be parsed.
const MAX_WINDOW: Duration = Duration::from_secs(40);

/// D27: while four 3 MiB bodies of the worst crafted shapes (every shape of
/// [`worst_shapes`] but the valid PO v2 records: arrays of numbers, 64-level nesting, unknown
/// fields, duplicate keys, empty rows, exponent bombs, valid GL codes past the record limit,
/// refused once parsed) are
/// received and checked back to back, `/healthz` and a tiny valid POST each answer within
/// 100 ms, every time ([`small_requests_stay_prompt_under`]).
#[test]
fn healthz_and_a_small_post_answer_within_100_ms_under_crafted_bodies_d27() {
    let _machine = crate::heavy();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let crafted = worst_shapes(HEAVY_BODY)
        .into_iter()
        .filter(|(name, _, _)| !name.starts_with("valid PO"))
        .collect();
    small_requests_stay_prompt_under(crafted);
}

// The same bound under large *valid* bodies (each queued, chunk by chunk, while small
// requests go ahead of the chunks) is a question of speed, not of correctness: a debug build
// misses it on this machine. It is measured in release by `cargo bench --bench load --
// memory` (valid PO v2 and GL-code batches; the scenario fails when a /healthz or small POST
// meanwhile takes over 100 ms; figures in BENCHMARKS.md).

/// What the service's memory may reach with an in-flight budget of `budget` bytes (D27):
/// 4 x the budget, plus its resident memory when idle, plus 64 MiB for what the budget does
/// not count: the queue's page cache and log buffers filled by valid records, the
/// allocator's retained pages, response bodies and per-connection buffers.
fn memory_bound(budget: u64, idle: u64) -> u64 {
    4 * budget + idle + (64 << 20)
}

/// D27: the real binary with a 64 MiB in-flight budget and 8 MiB bodies, receiving 16
/// concurrent 8 MiB bodies of the worst shapes (the shapes in turn), keeps its peak resident
/// memory (VmHWM, reset just before) under 4 x 64 MiB + its idle resident memory + 64 MiB
/// ([`memory_bound`]), answers every request with 202, 207, 400, 413 or 503, and is still
/// running afterwards: `/healthz` answers 200 and a small POST 202.
#[test]
fn sixteen_concurrent_bodies_stay_within_4x_a_small_budget_d27() {
    let _machine = crate::heavy();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const BUDGET: u64 = 64 << 20;
    const BODY: usize = 8 << 20;
    const CONCURRENT: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let text = config_text(
        &dir.path().join("data"),
        "",
        &format!("[limits]\ninflight_bytes = {BUDGET}\nmax_body_bytes = {BODY}\n"),
    );
    std::fs::write(&config, text).unwrap();
    let mut svc = Service::start(&config, dir.path());
    let admin = svc
        .admin_addr()
        .expect("the admin listener's address in the log");

    // Idle: after one small request, so that everything started lazily has started.
    assert_eq!(post_status(svc.addr, GL, &tiny_gl("IDLE")), 202);
    let idle = svc.memory("VmRSS");
    let bound = memory_bound(BUDGET, idle);

    let shapes = worst_shapes(BODY);
    let bodies: Vec<(&str, &str, Arc<String>)> = (0..CONCURRENT)
        .map(|i| {
            let (name, path, body) = &shapes[i % shapes.len()];
            (*name, *path, Arc::new(body.clone()))
        })
        .collect();
    drop(shapes);
    svc.reset_peak_memory();
    let started = Instant::now();
    let threads: Vec<_> = bodies
        .into_iter()
        .map(|(name, path, body)| {
            let addr = svc.addr;
            std::thread::spawn(move || {
                let (status, text) = post_reading_early(addr, path, body);
                (name, status, text.chars().take(100).collect::<String>())
            })
        })
        .collect();
    let answers: Vec<(&str, u16, String)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let took = started.elapsed();
    let peak = svc.memory("VmHWM");
    let running = svc.is_running();
    let (health, _) = process::get(admin, "/healthz");
    let after = post_status(svc.addr, GL, &tiny_gl("AFTER"));
    let mib = |b: u64| b as f64 / 1048576.0;
    println!(
        "idle {:.1} MiB, peak {:.1} MiB, bound {:.1} MiB; {CONCURRENT} bodies in {took:?}: {:?}",
        mib(idle),
        mib(peak),
        mib(bound),
        answers.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>()
    );
    assert!(running, "the service exited:\n{}", svc.stderr());
    assert_eq!(health, 200, "/healthz after the load");
    assert_eq!(after, 202, "a small POST after the load");
    for (name, status, text) in &answers {
        assert!(
            [202, 207, 400, 413, 503].contains(status),
            "{name}: {status} {text}"
        );
    }
    assert!(
        peak < bound,
        "peak resident memory {:.1} MiB over the bound {:.1} MiB",
        mib(peak),
        mib(bound)
    );
}
