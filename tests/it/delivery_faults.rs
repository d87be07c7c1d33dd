//! Delivery faults (D31, D32): one interface's endpoint hanging or failing delays no other,
//! shutdown is bounded while a delivery hangs, wall-clock jumps neither stall nor flood,
//! answers that concern the configuration (401, 403, 404, 405, 407) pause the interface
//! without touching its records and resume by themselves, 413 halves the batch, and a 3xx
//! is reported with its Location. The platform is a real HTTP listener.

use crate::common;
use ap_intake::config::{Config, Platform};
use ap_intake::delivery::backoff::Policy;
use ap_intake::delivery::clock::{Clock, ShiftedClock};
use ap_intake::delivery::target::{PlatformClient, Target};
use ap_intake::delivery::{Settings, Worker};
use ap_intake::metrics::Metrics;
use ap_intake::queue::{Backoff, Mode, NewRecord, QueueKey, SqliteStore, State, Store, StoreError};
use common::receiver::{Receiver, gl_records, ok};
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";
const GL_ID: &str = "general-ledger-codes-v1";
const PO2: &str = "/purchase-orders/v2";
const PO2_ID: &str = "purchase-orders-v2";
const FAST: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\ntimeout_secs = 5\n";
/// A POST may take longer than the platform hangs, so a hang is not cut short by the client.
const PATIENT: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 100\ntimeout_secs = 60\n";
const DAY_MS: i64 = 86_400_000;

fn pending(store: &dyn Store, iface: &str) -> usize {
    store.keys(State::Pending, Some(iface)).unwrap().len()
}

/// GL codes in the documents the platform accepted.
fn delivered_codes(platform: &Receiver) -> BTreeSet<String> {
    platform
        .delivered()
        .iter()
        .flat_map(|d| gl_records(&d.body))
        .map(|(code, _)| code)
        .collect()
}

/// Requests the platform received for one interface.
fn requests_to(platform: &Receiver, iface: &str) -> usize {
    let path = format!("/intake/{iface}");
    platform
        .received()
        .iter()
        .filter(|(r, _)| r.path == path)
        .count()
}

fn metrics(app: &TestApp) -> String {
    ureq::get(&app.ops_url("/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

fn paused_gauge(app: &TestApp, iface: &str) -> Option<String> {
    let prefix = format!("ap_intake_delivery_paused{{interface=\"{iface}\"}} ");
    metrics(app)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

// ---------------------------------------------------------------------------------------------
// 1. Isolation (D31)
// ---------------------------------------------------------------------------------------------

/// The platform hangs on purchase orders v2; GL codes are delivered meanwhile, and a stop
/// returns within the delivery deadline, the hanging record staying pending.
#[test]
fn a_hanging_endpoint_delays_no_other_interface_and_does_not_hold_up_shutdown() {
    let platform = Receiver::start();
    let release = Arc::new(AtomicBool::new(false));
    // The receiver logs a request once it is answered: count arrivals here.
    let hanging = Arc::new(AtomicUsize::new(0));
    let (r, h) = (Arc::clone(&release), Arc::clone(&hanging));
    platform.answer(move |req| {
        if req.path.ends_with(PO2_ID) {
            h.fetch_add(1, Ordering::Relaxed);
            let until = Instant::now() + Duration::from_secs(30);
            while !r.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            (503, vec![], "hung".into())
        } else {
            ok()
        }
    });
    let app = TestApp::delivering_to(&platform.url(), PATIENT);
    assert_eq!(
        app.post_records(PO2, &[fixture("purchase-orders-v2", "minimal")])
            .status,
        202
    );
    assert!(
        wait_for(Duration::from_secs(10), || hanging.load(Ordering::Relaxed)
            == 1),
        "the purchase order reached the platform, which now hangs"
    );
    let posted = Instant::now();
    assert_eq!(app.post_records(GL, &[gl("H1"), gl("H2")]).status, 202);
    let flowed = wait_for(Duration::from_secs(10), || {
        delivered_codes(&platform).len() == 2 && pending(app.store().as_ref(), GL_ID) == 0
    });
    assert!(
        flowed,
        "GL codes not delivered within 10 s of being posted while purchase orders v2 hangs \
         (D31); delivered: {:?}",
        delivered_codes(&platform)
    );
    let took = posted.elapsed();
    assert_eq!(
        pending(app.store().as_ref(), PO2_ID),
        1,
        "the hanging one is pending"
    );

    // Graceful stop while the purchase order's POST still hangs: bounded by
    // DELIVERY_STOP_DEADLINE (10 s).
    let stopping = Instant::now();
    let dir = app.stop();
    let stop_took = stopping.elapsed();
    assert!(
        stop_took < Duration::from_secs(15),
        "stop took {stop_took:?} while a delivery hung"
    );
    // The stuck lane keeps its handle on the queue until its POST returns (in the real binary
    // the process exits); let the platform answer (503) so it lets go.
    let early = SqliteStore::open(&dir.path().join("data"), Mode::Inspect, 0).map(drop);
    eprintln!("reopen while the POST still hangs: {early:?}");
    release.store(true, Ordering::Relaxed);
    let data = dir.path().join("data");
    let deadline = Instant::now() + Duration::from_secs(10);
    let store = loop {
        match SqliteStore::open(&data, Mode::Inspect, 0) {
            Ok(s) => break s,
            Err(StoreError::Busy(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("reopen: {e}"),
        }
    };
    assert_eq!(
        pending(&store, PO2_ID),
        1,
        "the purchase order cut off by the stop is still pending after a reopen"
    );
    assert_eq!(pending(&store, GL_ID), 0);
    assert_eq!(store.stats(GL_ID).unwrap().delivered, 2);
    eprintln!("GL delivered {took:?} after posting; stop took {stop_took:?}");
}

/// Purchase orders v2 answer 503 with `Retry-After: 120`: only that interface waits.
#[test]
fn a_long_retry_after_on_one_interface_delays_no_other() {
    let platform = Receiver::start();
    platform.answer(|req| {
        if req.path.ends_with(PO2_ID) {
            (
                503,
                vec![("Retry-After".into(), "120".into())],
                "maintenance".into(),
            )
        } else {
            ok()
        }
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(
        app.post_records(PO2, &[fixture("purchase-orders-v2", "minimal")])
            .status,
        202
    );
    assert!(wait_for(Duration::from_secs(10), || requests_to(
        &platform, PO2_ID
    ) == 1));
    assert!(wait_for(Duration::from_secs(10), || {
        app.store().stats(PO2_ID).unwrap().backoff.failures == 1
    }));
    assert_eq!(app.post_records(GL, &[gl("R1"), gl("R2")]).status, 202);
    let flowed = wait_for(Duration::from_secs(10), || {
        delivered_codes(&platform).len() == 2 && pending(app.store().as_ref(), GL_ID) == 0
    });
    assert!(
        flowed,
        "GL codes not delivered within 10 s while purchase orders v2 wait out Retry-After: 120 \
         (D31)"
    );
    assert_eq!(
        requests_to(&platform, PO2_ID),
        1,
        "purchase orders v2 still honour their Retry-After"
    );
    assert_eq!(pending(app.store().as_ref(), PO2_ID), 1);
    let po = status_of(&app, PO2_ID);
    assert_eq!(po["delivery"], "backing off", "{po}");
    assert_eq!(status_of(&app, GL_ID)["delivery"], "flowing");
}

// ---------------------------------------------------------------------------------------------
// 2. Time (D31): the worker on a wall clock the test moves
// ---------------------------------------------------------------------------------------------

/// A worker over its own store, delivering to `platform` with a 50 ms .. 500 ms backoff.
struct Bench {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: Arc<ShiftedClock>,
    platform_url: String,
}

const SETTINGS: Settings = Settings {
    batch_size: 100,
    backoff: Policy {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(500),
    },
};

impl Bench {
    fn new(platform: &Receiver) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(&dir.path().join("data"), Mode::Serve, 0).unwrap());
        Self {
            _dir: dir,
            store,
            clock: Arc::new(ShiftedClock::default()),
            platform_url: platform.url(),
        }
    }

    fn start(&self) -> (Worker, ap_intake::delivery::Waker) {
        // The `[platform]` table as the service reads it (no credentials).
        let text = config_for(self._dir.path(), "", &self.platform_url, "");
        let config = Config::parse(&text, std::path::Path::new("t.toml")).unwrap();
        let platform: Platform = config.platform.unwrap();
        let client = PlatformClient::new(&platform, Duration::from_secs(5)).unwrap();
        let target = Target::Platform(client);
        let clock: Arc<dyn Clock> = self.clock.clone();
        Worker::start(
            Arc::clone(&self.store),
            target,
            SETTINGS,
            Arc::new(Metrics::default()),
            clock,
            ap_intake::queue::Stop::new(),
        )
        .unwrap()
    }

    /// Stores GL codes (dated by the shifted clock).
    fn upsert(&self, codes: &[String]) {
        let records: Vec<NewRecord> = codes
            .iter()
            .map(|c| NewRecord {
                key: QueueKey::new("gl-code", &["main", c]).unwrap(),
                interface: GL_ID,
                xml: format!(
                    "<gl_code><code>{c}</code><description_en>t</description_en></gl_code>"
                ),
                receipt: None,
            })
            .collect();
        self.store.upsert(&records, self.clock.wall_ms()).unwrap();
    }
}

fn codes(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// A platform that answers 503 until `up` is set.
fn flaky_platform() -> (Receiver, Arc<AtomicBool>) {
    let platform = Receiver::start();
    let up = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&up);
    platform.answer(move |_| {
        if flag.load(Ordering::Relaxed) {
            ok()
        } else {
            (503, vec![], "down".into())
        }
    });
    (platform, up)
}

/// Requests the platform received from `from` to `from + window`.
fn attempts_within(platform: &Receiver, from: Instant, window: Duration) -> usize {
    platform
        .received()
        .iter()
        .filter(|(r, _)| r.at >= from && r.at < from + window)
        .count()
}

/// Wakes the worker every 10 ms for `d`, as records arriving all the time would.
fn keep_waking(waker: &ap_intake::delivery::Waker, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        waker.wake();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The wall clock goes back a day during an outage: once the platform recovers, everything
/// is delivered within a few seconds, and what is stored is dated by that clock.
#[test]
fn a_wall_clock_jump_back_during_an_outage_does_not_stall_delivery() {
    let (platform, up) = flaky_platform();
    let bench = Bench::new(&platform);
    let (worker, waker) = bench.start();
    let sent = codes("B", 10);
    bench.upsert(&sent);
    waker.wake();
    assert!(
        platform.wait_for(Duration::from_secs(10), |r| r.len() >= 3),
        "the outage was retried"
    );
    // The lane stores its retry state just after the answer.
    assert!(
        wait_for(Duration::from_secs(5), || {
            bench.store.stats(GL_ID).unwrap().backoff.failures >= 3
        }),
        "{:?}",
        bench.store.stats(GL_ID).unwrap().backoff
    );

    bench.clock.jump(-DAY_MS);
    up.store(true, Ordering::Relaxed);
    let recovered = Instant::now();
    let delivered = wait_for(Duration::from_secs(3), || {
        pending(bench.store.as_ref(), GL_ID) == 0
    });
    assert!(
        delivered,
        "after the wall clock went back a day, the recovered platform got nothing within 3 s \
         (cap 500 ms); requests: {}",
        platform.received().len()
    );
    eprintln!("delivered {:?} after recovery", recovered.elapsed());
    assert_eq!(
        delivered_codes(&platform),
        sent.iter().cloned().collect::<BTreeSet<_>>()
    );
    // The success is stored just after the records are settled.
    assert!(
        wait_for(Duration::from_secs(5), || {
            bench.store.stats(GL_ID).unwrap().backoff.failures == 0
        }),
        "{:?}",
        bench.store.stats(GL_ID).unwrap().backoff
    );
    let after = bench.store.stats(GL_ID).unwrap().backoff;
    assert!(!after.paused);
    let success = after.last_success_ms.expect("a success is stored");
    let wall = bench.clock.wall_ms();
    assert!(
        success <= wall && wall - success < 60_000,
        "last_success_ms {success} is dated by the delivery clock (now {wall})"
    );
    assert!(worker.stop(Duration::from_secs(10)));
}

/// The wall clock jumps a day forward while the platform fails: the attempts stay spaced by
/// the backoff, however often the lanes are woken, and a restarted worker does not flood
/// either.
#[test]
fn a_wall_clock_jump_forward_does_not_flood_the_platform() {
    let (platform, _up) = flaky_platform();
    let bench = Bench::new(&platform);
    let (worker, waker) = bench.start();
    bench.upsert(&codes("F", 5));
    waker.wake();
    assert!(platform.wait_for(Duration::from_secs(10), |r| r.len() >= 3));

    bench.clock.jump(DAY_MS);
    let from = Instant::now();
    let window = Duration::from_secs(3);
    keep_waking(&waker, window);
    let n = attempts_within(&platform, from, window);
    // With a 500 ms cap and full jitter about 12 attempts are expected in 3 s; the platform
    // answers in about a millisecond, so a flood would be hundreds.
    assert!(
        (3..=40).contains(&n),
        "{n} attempts in {window:?} after the clock jumped a day forward (cap 500 ms)"
    );
    assert_eq!(pending(bench.store.as_ref(), GL_ID), 5);
    assert!(worker.stop(Duration::from_secs(10)));

    // Restarted with the stored retry state, which the jump has put a day in the past.
    let (worker, waker) = bench.start();
    let from = Instant::now();
    let window = Duration::from_secs(2);
    keep_waking(&waker, window);
    let n = attempts_within(&platform, from, window);
    assert!(
        (1..=30).contains(&n),
        "{n} attempts in {window:?} after a restart with a retry time a day in the past"
    );
    assert!(worker.stop(Duration::from_secs(10)));
}

/// A stored retry time a day ahead (written before the clock went back, or by a clock that
/// was wrong) is clamped to the backoff cap when read: delivery does not stall.
#[test]
fn a_stored_retry_time_a_day_ahead_waits_no_longer_than_the_cap() {
    let platform = Receiver::start();
    let bench = Bench::new(&platform);
    bench
        .store
        .set_backoff(
            GL_ID,
            &Backoff {
                failures: 9,
                next_attempt_ms: bench.clock.wall_ms() + DAY_MS as u64,
                last_error: Some("HTTP 503: down".into()),
                last_error_ms: Some(bench.clock.wall_ms()),
                paused: false,
                last_success_ms: None,
            },
        )
        .unwrap();
    bench.upsert(&codes("S", 3));
    let started = Instant::now();
    let (worker, waker) = bench.start();
    waker.wake();
    let arrived = platform.wait_for(Duration::from_secs(3), |r| !r.is_empty());
    assert!(
        arrived,
        "nothing sent within 3 s with a stored retry time a day ahead (cap 500 ms, D31)"
    );
    let first = platform.received()[0].0.at - started;
    assert!(
        wait_for(Duration::from_secs(3), || pending(
            bench.store.as_ref(),
            GL_ID
        ) == 0),
        "all delivered"
    );
    assert_eq!(delivered_codes(&platform).len(), 3);
    assert!(
        wait_for(Duration::from_secs(5), || {
            bench.store.stats(GL_ID).unwrap().backoff.failures == 0
        }),
        "the stored retry state is cleared by the success"
    );
    eprintln!("first attempt {first:?} after start");
    assert!(worker.stop(Duration::from_secs(10)));
}

// ---------------------------------------------------------------------------------------------
// 3. Answers that concern the configuration, 413, 3xx (D32)
// ---------------------------------------------------------------------------------------------

/// 401, then 403, 404, 405 and 407 in turn: the interface pauses, its records stay pending
/// with no attempt counted, status, metrics and one warning per answer say so; when the
/// platform accepts again delivery resumes by itself.
#[test]
fn configuration_refusals_pause_the_interface_until_the_platform_accepts() {
    warnings::capture();
    let platform = Receiver::start();
    let code = Arc::new(AtomicU16::new(401));
    let c = Arc::clone(&code);
    let token = format!("refused-{}", platform.addr.port());
    let t = token.clone();
    platform.answer(move |req| match c.load(Ordering::Relaxed) {
        200 => ok(),
        _ if !req.path.ends_with(GL_ID) => ok(),
        n => (n, vec![], format!("{n} {t}")),
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(
        app.post_records(GL, &[gl("P1"), gl("P2"), gl("P3")]).status,
        202
    );
    let mut seen = 0;
    for n in [401u16, 403, 404, 405, 407] {
        code.store(n, Ordering::Relaxed);
        let answered = |r: &[(common::receiver::Received, u16)]| {
            r.iter().filter(|(_, s)| *s == n).count() >= 4
        };
        assert!(
            platform.wait_for(Duration::from_secs(10), answered),
            "{n}: retried while paused"
        );
        let reason = format!("HTTP {n}: {n} {token}");
        // The state is stored after the answer: wait for it to name this one.
        assert!(
            wait_for(Duration::from_secs(5), || {
                status_of(&app, GL_ID)["last_error"].as_str() == Some(reason.as_str())
            }),
            "{n}: status names the answer: {}",
            status_of(&app, GL_ID)
        );
        let s = status_of(&app, GL_ID);
        assert_eq!(s["delivery"], "paused", "{n}: {s}");
        assert_eq!(s["pending"], 3, "{n}: {s}");
        assert_eq!(s["rejected"], 0, "{n}: {s}");
        assert_eq!(s["delivered"], 0, "{n}: {s}");
        for key in ["gl-code:main/P1", "gl-code:main/P2", "gl-code:main/P3"] {
            let item = app.item(key).unwrap();
            assert_eq!(item.state, State::Pending, "{n}: {key}");
            assert_eq!(item.attempts, 0, "{n}: {key}: a pause counts no attempt");
        }
        assert_eq!(
            paused_gauge(&app, GL_ID).as_deref(),
            Some("1"),
            "{n}: ap_intake_delivery_paused"
        );
        assert_eq!(paused_gauge(&app, PO2_ID).as_deref(), Some("0"));
        let warned = warnings::matching(&["paused", &reason]);
        assert_eq!(
            warned.len(),
            1,
            "{n}: one warning when the pause starts or its answer changes, not per attempt: \
             {warned:#?}"
        );
        seen += 1;
    }
    assert_eq!(seen, 5);
    assert_eq!(
        warnings::matching(&[&token]).len(),
        5,
        "no other warning than one per answer: {:#?}",
        warnings::matching(&[&token])
    );

    code.store(200, Ordering::Relaxed);
    assert!(
        wait_for(Duration::from_secs(10), || pending(
            app.store().as_ref(),
            GL_ID
        ) == 0),
        "delivery resumed by itself"
    );
    assert_eq!(
        delivered_codes(&platform),
        ["P1", "P2", "P3"].map(String::from).into_iter().collect()
    );
    assert!(
        wait_for(
            Duration::from_secs(5),
            || status_of(&app, GL_ID)["delivery"] == "flowing"
        ),
        "{}",
        status_of(&app, GL_ID)
    );
    let s = status_of(&app, GL_ID);
    assert!(s["last_success_ms"].as_u64().is_some(), "{s}");
    assert_eq!(s["next_retry_ms"], Value::Null, "{s}");
    assert_eq!(s["failures"], 0, "{s}");
    assert_eq!(
        (&s["pending"], &s["rejected"]),
        (&json!(0), &json!(0)),
        "{s}"
    );
    assert_eq!(s["delivered"], 3, "{s}");
    assert_eq!(paused_gauge(&app, GL_ID).as_deref(), Some("0"));
    let m = metrics(&app);
    assert!(
        m.lines().any(|l| l.starts_with(
            "ap_intake_delivery_failures_total{interface=\"general-ledger-codes-v1\",kind=\"paused\"}"
        )),
        "failures of kind paused are counted:\n{m}"
    );
}

/// 413 to documents of more than 2 records: the batch of 8 is halved until the platform
/// takes it; everything is delivered, nothing rejected.
#[test]
fn a_document_too_large_is_sent_again_in_halves() {
    let platform = Receiver::start();
    platform.answer(|req| {
        if gl_records(&req.body).len() > 2 {
            (413, vec![], "too many records".into())
        } else {
            ok()
        }
    });
    let app = TestApp::delivering_to(
        &platform.url(),
        &FAST.replace("[delivery]\n", "[delivery]\nbatch_size = 8\n"),
    );
    let records: Vec<Value> = (0..8).map(|i| gl(&format!("L{i}"))).collect();
    assert_eq!(app.post_records(GL, &records).status, 202);
    assert!(
        wait_for(Duration::from_secs(10), || delivered_codes(&platform).len()
            == 8
            && pending(app.store().as_ref(), GL_ID) == 0),
        "all 8 delivered; received: {:?}",
        platform
            .received()
            .iter()
            .map(|(r, s)| (gl_records(&r.body).len(), *s))
            .collect::<Vec<_>>()
    );
    let sizes: Vec<(usize, u16)> = platform
        .received()
        .iter()
        .map(|(r, s)| (gl_records(&r.body).len(), *s))
        .collect();
    assert_eq!(
        &sizes[..3],
        &[(8, 413), (4, 413), (2, 200)],
        "the batch is halved on each 413: {sizes:?}"
    );
    assert!(
        platform
            .delivered()
            .iter()
            .all(|d| gl_records(&d.body).len() <= 2),
        "{sizes:?}"
    );
    let stats = app.store().stats(GL_ID).unwrap();
    assert_eq!((stats.pending, stats.rejected, stats.delivered), (0, 0, 8));
    assert!(app.store().keys(State::Rejected, None).unwrap().is_empty());
    assert!(
        metrics(&app).lines().any(|l| l.starts_with(
            "ap_intake_delivery_failures_total{interface=\"general-ledger-codes-v1\",kind=\"too_large\"}"
        )),
        "413s are counted as too_large"
    );
}

/// A single record answered 413 (empty body) cannot be halved: it is parked as rejected
/// with a reason naming the status.
#[test]
fn a_single_record_too_large_is_parked_with_a_reason() {
    let platform = Receiver::start();
    platform.answer(|_| (413, vec![], String::new()));
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(app.post_records(GL, &[gl("HUGE")]).status, 202);
    assert!(
        wait_for(Duration::from_secs(10), || app
            .item("gl-code:main/HUGE")
            .is_some_and(|i| i.state == State::Rejected)),
        "parked as rejected: {:?}",
        app.item("gl-code:main/HUGE")
    );
    let item = app.item("gl-code:main/HUGE").unwrap();
    let reason = item.last_error.unwrap_or_default();
    assert!(
        reason.starts_with("HTTP 413") && reason.len() > "HTTP 413: ".len(),
        "reason {reason:?}"
    );
    let stats = app.store().stats(GL_ID).unwrap();
    assert_eq!((stats.pending, stats.rejected, stats.delivered), (0, 1, 0));
    let s = status_of(&app, GL_ID);
    assert_eq!(s["rejected"], 1, "{s}");
}

/// A rejection is the platform refusing a record, not a successful delivery: status must not
/// report a last success when nothing was ever delivered.
#[test]
fn a_rejection_is_not_reported_as_a_success() {
    let platform = Receiver::start();
    platform.answer(|_| (422, vec![], "unknown cost centre".into()));
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(app.post_records(GL, &[gl("NOPE")]).status, 202);
    assert!(wait_for(Duration::from_secs(10), || app
        .store()
        .stats(GL_ID)
        .unwrap()
        .rejected
        == 1));
    // A lane handles one answer at a time: once a second record is rejected, whatever the
    // first answer made the lane store is stored.
    assert_eq!(app.post_records(GL, &[gl("NOPE2")]).status, 202);
    assert!(wait_for(Duration::from_secs(10), || app
        .store()
        .stats(GL_ID)
        .unwrap()
        .rejected
        == 2));
    let s = status_of(&app, GL_ID);
    assert_eq!(s["delivered"], 0, "{s}");
    assert_eq!(
        s["last_success_ms"],
        Value::Null,
        "nothing was ever delivered, yet status reports a last success: {s}"
    );
}

/// 302 with a Location and no body: not followed, not a rejection; status names the status
/// and where the platform pointed.
#[test]
fn a_redirect_is_reported_with_its_location_and_the_records_stay_pending() {
    let platform = Receiver::start();
    let location = "https://platform.example.com/v2/intake/general-ledger-codes-v1";
    platform.answer(move |_| {
        (
            302,
            vec![("Location".into(), location.into())],
            String::new(),
        )
    });
    let app = TestApp::delivering_to(&platform.url(), FAST);
    assert_eq!(app.post_records(GL, &[gl("M1"), gl("M2")]).status, 202);
    assert!(platform.wait_for(Duration::from_secs(10), |r| r.len() >= 2));
    assert!(
        wait_for(Duration::from_secs(5), || {
            status_of(&app, GL_ID)["last_error"]
                .as_str()
                .is_some_and(|e| !e.is_empty())
        }),
        "{}",
        status_of(&app, GL_ID)
    );
    let s = status_of(&app, GL_ID);
    let error = s["last_error"].as_str().unwrap();
    assert!(
        error.contains("302") && error.contains(location),
        "last_error names 302 and the Location: {error:?}"
    );
    assert_ne!(s["delivery"], "flowing", "{s}");
    assert_eq!(
        (&s["pending"], &s["rejected"]),
        (&json!(2), &json!(0)),
        "{s}"
    );
    assert!(
        platform
            .received()
            .iter()
            .all(|(r, _)| r.path == "/intake/general-ledger-codes-v1"),
        "the redirect was not followed"
    );
}
