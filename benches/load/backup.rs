//! Backup under load (D45): `ap-intake backup` of a queue with many pending records while
//! clients keep sending, timed, with the latency of the requests answered meanwhile against
//! those answered just before.

use crate::intake::{Load, against_service};
use crate::report::Run;
use crate::service::{Service, binary, dir_size, write_config};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One window of load.
const WINDOW: Duration = Duration::from_millis(500);

pub fn run(runtime: &tokio::runtime::Runtime, dir: &Path, records: usize, concurrency: usize) {
    let data = dir.join("full");
    drop(crate::delivery::fill(&data, records, "S"));
    let config = write_config(dir, &data, None);
    let service = Service::start(&config);
    let load = Load {
        iface: ap_intake::interfaces::by_path("/general-ledger-codes/v1").expect("GL codes"),
        per_request: 10,
        concurrency,
        duration: WINDOW,
        receipts: true,
    };
    let window = |into: &mut Run| {
        let run = runtime.block_on(against_service(&[service.addr], &load));
        into.elapsed += run.elapsed;
        into.merge(run);
    };
    let mut before = Run::default();
    for _ in 0..4 {
        window(&mut before);
    }
    let copy = dir.join("copy.sqlite3");
    let (cfg, to) = (config.clone(), copy.clone());
    let backup = std::thread::spawn(move || {
        let started = Instant::now();
        let out = Command::new(binary())
            .args(["backup", "--config"])
            .arg(&cfg)
            .arg(&to)
            .output()
            .expect("run backup");
        (started.elapsed(), out)
    });
    let mut during = Run::default();
    while !backup.is_finished() {
        window(&mut during);
    }
    let (took, out) = backup.join().expect("backup thread");
    assert!(
        out.status.success(),
        "backup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{}", String::from_utf8_lossy(&out.stdout));
    println!(
        "backup of {records} pending records: {:.1} s, copy {:.0} MiB, data directory {:.0} MiB",
        took.as_secs_f64(),
        std::fs::metadata(&copy).map_or(0, |m| m.len()) as f64 / 1048576.0,
        dir_size(&data) as f64 / 1048576.0
    );
    let errors = before.errors() + during.errors();
    before.print("requests before the backup");
    during.print("requests during the backup");
    drop(service);
    if errors > 0 {
        eprintln!("{errors} request(s) failed");
        std::process::exit(1);
    }
}
