//! A commit held up (an admin's `sqlite3` session holding the write lock, a disk that stalls):
//! the request waits for it, is answered 202 once its record is stored (D17), and the operator
//! is told (a warning, `/metrics` `ap_intake_queue_commit_seconds`).

use crate::common::warnings;
use crate::common::{TestApp, agent, fixture, reply_of};
use ap_intake::queue::sqlite::FILE_NAME;
use std::time::{Duration, Instant};

const GL: &str = "/general-ledger-codes/v1";

#[test]
fn a_commit_held_up_over_a_second_is_answered_when_stored_and_warned_of() {
    warnings::capture();
    let app = TestApp::start();
    let mut record = fixture("general-ledger-codes", "minimal");
    record["code"] = serde_json::json!("SLOW-COMMIT-1");
    // Another connection takes the write lock, as `sqlite3` in a transaction would.
    let other = rusqlite::Connection::open(app.data_dir().join(FILE_NAME)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let held = Duration::from_millis(1300);
    let reply = std::thread::scope(|s| {
        let post = s.spawn(|| {
            let started = Instant::now();
            (app.post_records(GL, &[record]), started.elapsed())
        });
        std::thread::sleep(held);
        other.execute_batch("ROLLBACK").unwrap();
        post.join().unwrap()
    });
    let (reply, took) = reply;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert!(
        took >= held,
        "answered after {took:?}, before the lock was let go"
    );
    assert!(app.item("gl-code:main/SLOW-COMMIT-1").is_some(), "stored");
    let warned = warnings::matching(&["storing records took over a second", "records=1"]);
    assert!(!warned.is_empty(), "no warning of the slow commit");
    let metrics = reply_of(&mut agent().get(&app.ops_url("/metrics")).call().unwrap()).text;
    // One transaction, in no bucket below a second.
    assert!(
        metrics.contains("ap_intake_queue_commit_seconds_count 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ap_intake_queue_commit_seconds_bucket{le=\"0.512\"} 0\n"),
        "{metrics}"
    );
}
