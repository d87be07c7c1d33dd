//! Scale: start time, `status` time, resident memory and disk use with many pending records.

use crate::service::{Service, binary, dir_size, write_config};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn status_time(config: &Path) -> Duration {
    let started = Instant::now();
    let out = Command::new(binary())
        .args(["status", "--json", "--config"])
        .arg(config)
        .output()
        .expect("status");
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

pub fn run(dir: &Path, records: usize) {
    // Idle: an empty queue.
    let empty = dir.join("empty");
    let config = write_config(dir, &empty, None);
    let idle = Service::start(&config);
    std::thread::sleep(Duration::from_secs(2));
    println!(
        "idle service: start {:.0} ms, resident {:.1} MiB",
        idle.start_time.as_secs_f64() * 1000.0,
        idle.rss_mib()
    );
    drop(idle);

    let data = dir.join("full");
    let store = crate::delivery::fill(&data, records, "S");
    // The same keys again, every one pending: a full resend of master data.
    print!("the same keys again: ");
    crate::delivery::fill_in(&store, records, "S", 1, false);
    drop(store);
    let config = write_config(dir, &data, None);
    let service = Service::start(&config);
    std::thread::sleep(Duration::from_secs(2));
    let running = status_time(&config);
    println!(
        "{records} pending: start {:.0} ms, status (running) {:.0} ms, resident {:.1} MiB",
        service.start_time.as_secs_f64() * 1000.0,
        running.as_secs_f64() * 1000.0,
        service.rss_mib()
    );
    drop(service);
    let stopped = status_time(&config);
    println!(
        "{records} pending: status (stopped) {:.0} ms, data directory {:.0} MiB",
        stopped.as_secs_f64() * 1000.0,
        dir_size(&data) as f64 / 1048576.0
    );
    reclaim(&data);
}

/// Removes every record as deliveries do (in settled batches of 100), then lets the store's
/// background thread return the free pages to the filesystem; reports the size as it goes.
fn reclaim(data: &Path) {
    use ap_intake::queue::{Mode, Sent, SqliteStore, State, Store};
    let store = SqliteStore::open(data, Mode::Serve, 0).expect("open the queue");
    let iface = "general-ledger-codes-v1";
    let started = Instant::now();
    loop {
        let batch = store.take(iface, 100).expect("pending");
        if batch.is_empty() {
            break;
        }
        let sent: Vec<Sent> = batch.iter().map(|(k, i)| Sent::of(k, i)).collect();
        store.delivered(&sent).expect("delivered");
    }
    assert!(store.keys(State::Pending, None).expect("keys").is_empty());
    println!(
        "all delivered in {:.1} s: data directory {:.0} MiB",
        started.elapsed().as_secs_f64(),
        dir_size(data) as f64 / 1048576.0
    );
    let started = Instant::now();
    let mut last = u64::MAX;
    while started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_secs(2));
        let size = dir_size(data);
        if size == last {
            break;
        }
        last = size;
    }
    drop(store);
    println!(
        "space returned in {:.0} s: data directory {:.1} MiB after the service stopped",
        started.elapsed().as_secs_f64(),
        dir_size(data) as f64 / 1048576.0
    );
}
