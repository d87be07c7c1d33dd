//! `kept`: what `[retention] delivered_days` costs on disk (D49). The release binary takes
//! GL codes at a steady `rate` (requests of 100 new keys) for `duration` seconds and
//! delivers them to a local receiver; once everything is delivered it stops, and the data
//! directory's size is read. Run once keeping nothing and once with `delivered_days = 7`, the
//! difference over the records is the bytes a record kept costs.

use crate::service::{KEY, Service, write_config};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Runs both sides; exits non-zero when a request fails or a record is not delivered.
pub fn run(runtime: &tokio::runtime::Runtime, dir: &Path, rate: u64, duration: u64) {
    let mut sizes = Vec::new();
    for (label, days) in [("delivered_days = 0", 0), ("delivered_days = 7", 7)] {
        let side = dir.join(format!("kept-{days}"));
        std::fs::create_dir_all(&side).expect("dir");
        let (records, bytes, kept) = one(runtime, &side, days, rate, duration);
        println!(
            "kept {label}: {records} records at {rate}/s, data directory {bytes} bytes after \
             the stop, status kept_bytes {kept}"
        );
        sizes.push((records, bytes));
    }
    let ((n0, b0), (n7, b7)) = (sizes[0], sizes[1]);
    let extra = b7.saturating_sub(b0);
    println!(
        "kept: {extra} bytes more with delivered_days = 7, {:.0} bytes a record kept",
        extra as f64 / n7.max(n0).max(1) as f64
    );
}

/// One side: records sent, the data directory's bytes, and what status says is kept.
fn one(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    days: u32,
    rate: u64,
    duration: u64,
) -> (u64, u64, u64) {
    let documents = Arc::new(AtomicU64::new(0));
    let platform = runtime.block_on(crate::delivery::receiver(Arc::clone(&documents), None));
    let data = dir.join("data");
    let config = write_config(dir, &data, Some(&format!("http://{platform}/intake")));
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("[retention]\ndelivered_days = {days}\n"));
    std::fs::write(&config, text).expect("config");
    let service = Service::start(&config);
    let agent = crate::service::agent();
    let url = format!("http://{}/general-ledger-codes/v1", service.addr);
    let per_request = 100u64;
    let requests = rate * duration / per_request;
    let every = Duration::from_secs_f64(per_request as f64 / rate as f64);
    let started = Instant::now();
    for n in 0..requests {
        let records: Vec<serde_json::Value> = (0..per_request)
            .map(|i| {
                serde_json::json!({"code": format!("K{days}-{n:06}-{i:03}"), "type": "VAT",
                    "description_en": "Input VAT 24 %", "tax_code": "VAT24"})
            })
            .collect();
        let body = serde_json::json!({"objects": {"object": {"record": records}}}).to_string();
        let status = agent
            .post(&url)
            .header("x-api-key", KEY)
            .header("Content-Type", "application/json")
            .send(body)
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if status != 202 {
            eprintln!("kept: request {n} answered {status}");
            std::process::exit(1);
        }
        let due = every * u32::try_from(n + 1).unwrap_or(u32::MAX);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let records = requests * per_request;
    let status = || -> serde_json::Value {
        let out = std::process::Command::new(crate::service::binary())
            .args(["status", "--json", "--config"])
            .arg(&config)
            .output()
            .expect("status");
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    let drained = Instant::now();
    loop {
        let report = status();
        let pending: u64 = report["interfaces"]
            .as_array()
            .map(|a| a.iter().filter_map(|i| i["pending"].as_u64()).sum())
            .unwrap_or(u64::MAX);
        if pending == 0 {
            let kept = report["kept_bytes"].as_u64().unwrap_or(0);
            drop(service); // a clean stop: the log written back, the file at its size
            return (records, dir_bytes(&data), kept);
        }
        if drained.elapsed() > Duration::from_secs(120) {
            eprintln!("kept: {pending} records still pending after 2 minutes");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The bytes of the queue's files in `data`.
fn dir_bytes(data: &Path) -> u64 {
    std::fs::read_dir(data)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("queue.sqlite3"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
