//! The database restarts under load (issue 46, item 4): while it is down intake answers 503
//! (D39), and once it is back no request fails for a connection the restart closed. The
//! pool checks a connection that sat idle before handing it out, and drops every idle one
//! when the database closes one. A server of the test's own (the shared one serves other
//! tests meanwhile).

use super::*;
use crate::common::pg::PrivateServer;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn after_a_database_restart_no_request_fails_for_a_stale_connection() {
    if std::env::var("AP_INTAKE_TEST_PG").is_err() {
        return skipped();
    }
    let Some(server) = PrivateServer::start() else {
        return crate::common::skip::skip("PostgreSQL's server programs (initdb, pg_ctl)");
    };
    let platform = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let text = TestDb::config_text(
        &server.url(),
        &dir.path().join("data"),
        &platform.url(),
        FAST,
        "r",
        30,
    );
    let config = Config::parse(&text, Path::new("node.toml")).unwrap();
    let app = TestApp::start_config(dir, config);

    // Four clients, one record a request, as fast as answered; each answer noted with when
    // its request was sent and when it was answered.
    let answers: Mutex<Vec<(Instant, Instant, u16)>> = Mutex::default();
    let (paused, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut marks = [Instant::now(); 3];
    std::thread::scope(|s| {
        for c in 0..4 {
            let (app, answers, paused, stop) = (&app, &answers, &paused, &stop);
            s.spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if paused.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    n += 1;
                    let sent = Instant::now();
                    let status = app.post_records(GL, &[gl(&format!("C{c}-{n}"))]).status;
                    answers.lock().unwrap().push((sent, Instant::now(), status));
                }
            });
        }
        std::thread::sleep(Duration::from_secs(1));
        // The load pauses, the database restarts (the pool's idle connections are closed at
        // the other end now), the load comes back.
        paused.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        server.restart();
        std::thread::sleep(Duration::from_millis(300));
        marks[0] = Instant::now();
        paused.store(false, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(2));
        // Once more without a pause: requests fail while it is down (503, D39), none once it
        // is back.
        marks[1] = Instant::now();
        server.restart();
        marks[2] = Instant::now();
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
    });
    let [resumed, second_down, second_back] = marks;
    let answers = answers.into_inner().unwrap();
    // Requests sent from `from` and answered by `to` (one in flight when a restart begins
    // may rightly fail).
    let failed = |from: Instant, to: Instant| -> (usize, usize) {
        let window: Vec<u16> = answers
            .iter()
            .filter(|(sent, answered, _)| *sent >= from && *answered < to)
            .map(|(_, _, s)| *s)
            .collect();
        (window.iter().filter(|s| **s != 202).count(), window.len())
    };
    let (after_pause, of) = failed(resumed, second_down);
    assert!(of > 20, "the load came back: {of} requests");
    assert_eq!(after_pause, 0, "of {of} requests after the idle restart");
    let (after_back, of) = failed(second_back, Instant::now());
    assert!(of > 20, "the load went on: {of} requests");
    assert_eq!(after_back, 0, "of {of} requests once the database was back");
    let (during, of) = failed(second_down, second_back + Duration::from_secs(1));
    eprintln!("restart under load: {during} of {of} requests refused (503) while it restarted");
}
