//! kill -9 while clients send and the platform receives: every record that got 202 is on disk
//! or already delivered, and after a restart it reaches the platform in at least its
//! acknowledged version (D17, D18).

mod common;
use ap_intake::queue::{QueueKey, Store};
use common::process::{Service, post};
use common::receiver::{Receiver, gl_records};
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The round number in a description `round N`.
fn round_of(description: &str) -> u64 {
    description
        .trim_start_matches("round ")
        .parse()
        .unwrap_or(0)
}

/// The highest round the platform received of each code.
fn latest_delivered_rounds(platform: &Receiver) -> HashMap<String, u64> {
    let mut latest: HashMap<String, u64> = HashMap::new();
    for doc in platform.delivered() {
        for (code, description) in gl_records(&doc.body) {
            let r = latest.entry(code).or_default();
            *r = (*r).max(round_of(&description));
        }
    }
    latest
}

fn round_of_xml(xml: &str) -> u64 {
    gl_records(xml).first().map_or(0, |(_, d)| round_of(d))
}

#[test]
fn kill_9_then_restart_delivers_every_acknowledged_record() {
    let platform = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let delivery = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 200\nbatch_size = 50\n";
    std::fs::write(
        &file,
        config_for(&dir.path().join("data"), "", &platform.url(), delivery),
    )
    .unwrap();
    let service = Service::start(&file, dir.path());
    let addr = service.addr;

    let acked: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..8)
        .map(|t| {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    let records: Vec<Value> = (0..10)
                        .map(|i| json!({"code": format!("T{t}-{i}"), "type": "VAT", "description_en": format!("round {round}")}))
                        .collect();
                    let r = post(addr, "/general-ledger-codes/v1", &envelope(&records).to_string(), Some(KEY));
                    match r.status {
                        202 => {
                            let mut a = acked.lock().unwrap();
                            for i in 0..10 {
                                a.insert(format!("T{t}-{i}"), round);
                            }
                        }
                        0 => {} // the service is gone
                        s => panic!("unexpected answer {s}: {}", r.text),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    service.kill_9();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert_eq!(
        acked.len(),
        80,
        "every key was acknowledged at least once before the kill"
    );
    // On disk, every acknowledged version is queued or already at the platform (D17).
    {
        let store = reopen(&dir.path().join("data"));
        let delivered = latest_delivered_rounds(&platform);
        for (code, round) in &acked {
            let key = QueueKey::new("gl-code", &["main", code]).unwrap();
            let queued = store
                .get(&key)
                .unwrap()
                .map(|i| round_of_xml(&i.xml))
                .unwrap_or(0);
            let sent = delivered.get(code).copied().unwrap_or(0);
            assert!(
                queued.max(sent) >= *round,
                "{code}: acknowledged round {round}, queued {queued}, delivered {sent}"
            );
        }
    }

    let _restarted = Service::start(&file, dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let missing = loop {
        let latest = latest_delivered_rounds(&platform);
        let missing: Vec<String> = acked
            .iter()
            .filter(|(code, round)| latest.get(*code).is_none_or(|got| got < *round))
            .map(|(code, round)| {
                format!(
                    "{code} (acknowledged round {round}, delivered {:?})",
                    latest.get(code)
                )
            })
            .collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        missing.is_empty(),
        "acknowledged and never delivered: {missing:?}"
    );
}
