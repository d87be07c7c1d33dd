//! kill -9 while clients send and the platform receives: every record that got 202 is on disk
//! or already delivered, and after a restart it reaches the platform in at least its
//! acknowledged version (D17, D18). A loop of kills at random moments: no acknowledged record
//! lost, each client's records a prefix, the store sound every time. The durability settings
//! in force (WAL, synchronous FULL, incremental vacuum, D28) and a clean stop without a WAL.

use crate::common;
use ap_intake::queue::sqlite::FILE_NAME;
use ap_intake::queue::{Mode, NewRecord, QueueKey, SqliteStore, State, Store, StoreError, now_ms};
use common::process::{self, Service, post};
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
    // Killed under load: once a few hundred requests are acknowledged, with more in flight.
    assert!(
        wait_for(Duration::from_secs(30), || {
            // Each acknowledged request moves ten keys to its round: 300 is 30 requests.
            acked.lock().unwrap().values().sum::<u64>() >= 300
        }),
        "the clients got acknowledgements"
    );
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
    let mut missing = Vec::new();
    wait_for(Duration::from_secs(30), || {
        let latest = latest_delivered_rounds(&platform);
        missing = acked
            .iter()
            .filter(|(code, round)| latest.get(*code).is_none_or(|got| got < *round))
            .map(|(code, round)| {
                format!(
                    "{code} (acknowledged round {round}, delivered {:?})",
                    latest.get(code)
                )
            })
            .collect();
        missing.is_empty()
    });
    assert!(
        missing.is_empty(),
        "acknowledged and never delivered: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The kill loop: many SIGKILLs at random moments while clients send numbered records.

/// A small seeded generator (splitmix64), so a failing run can be replayed from its seed.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// The GL code of record `n` of client `c`.
fn numbered_code(client: usize, n: u64) -> String {
    format!("c{client}-{n}")
}

/// The description record `n` of client `c` carries when sent in `cycle`: the content the
/// store must hold once it was acknowledged.
fn numbered_description(client: usize, n: u64, cycle: u32) -> String {
    format!("c{client}-{n} cycle {cycle}")
}

/// What one client saw in one cycle.
#[derive(Debug, Default)]
struct ClientRun {
    /// One past the highest number answered 202 (the first number of the cycle when none was).
    acked_end: u64,
    /// One past the highest number sent, answered or not.
    sent_end: u64,
    /// The request whose answer never came (the kill, or a refused connection after it).
    in_flight: Option<std::ops::Range<u64>>,
    requests_acked: u64,
    records_acked: u64,
    /// An answer other than 202 or a lost connection: the product misbehaved.
    unexpected: Option<String>,
}

/// Sends numbered records from `first` on, one request at a time (single records and batches
/// of up to five), until a request gets no answer.
fn numbered_client(
    addr: std::net::SocketAddr,
    client: usize,
    first: u64,
    cycle: u32,
    mut rng: Prng,
) -> ClientRun {
    let mut run = ClientRun {
        acked_end: first,
        sent_end: first,
        ..ClientRun::default()
    };
    let mut next = first;
    loop {
        let size = if rng.next().is_multiple_of(2) {
            1
        } else {
            rng.between(2, 5)
        };
        let numbers = next..next + size;
        let records: Vec<Value> = numbers
            .clone()
            .map(|n| {
                json!({"code": numbered_code(client, n), "type": "VAT",
                       "description_en": numbered_description(client, n, cycle)})
            })
            .collect();
        run.sent_end = numbers.end;
        let r = post(
            addr,
            "/general-ledger-codes/v1",
            &envelope(&records).to_string(),
            Some(KEY),
        );
        match r.status {
            202 => {
                let succeeded = serde_json::from_str::<Value>(&r.text)
                    .ok()
                    .and_then(|b| b["succeeded"].as_u64());
                if succeeded != Some(size) {
                    run.unexpected = Some(format!("202 for {size} record(s) saying {}", r.text));
                    return run;
                }
                run.acked_end = numbers.end;
                run.requests_acked += 1;
                run.records_acked += size;
                next = numbers.end;
            }
            0 => {
                run.in_flight = Some(numbers);
                return run;
            }
            s => {
                run.unexpected = Some(format!("answer {s} to {numbers:?}: {}", r.text));
                return run;
            }
        }
    }
}

/// Reads the queue left by a killed service through the product's own store (as a restart
/// would) and, independently, through SQLite: the stored numbers of each client, with their
/// descriptions. Panics when the store does not open cleanly or is not sound.
fn stored_numbers(data: &std::path::Path, clients: usize, cycle: u32) -> Vec<Vec<(u64, String)>> {
    let store = SqliteStore::open(data, Mode::Inspect, 0).unwrap_or_else(|e| {
        panic!("cycle {cycle}: the queue does not open cleanly after the kill: {e}")
    });
    let items = store
        .items()
        .unwrap_or_else(|e| panic!("cycle {cycle}: reading the queue: {e}"));
    for state in [State::Rejected, State::Quarantined] {
        let keys = store.keys(state, None).unwrap();
        assert!(
            keys.is_empty(),
            "cycle {cycle}: {state:?} after the kill: {keys:?}"
        );
    }
    // Every row of the file is an item the product can read, and the file is sound.
    let conn = rusqlite::Connection::open(data.join(FILE_NAME)).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM item", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows,
        items.len() as i64,
        "cycle {cycle}: rows in the file vs items the store reads"
    );
    let integrity: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        integrity,
        ["ok"],
        "cycle {cycle}: integrity_check after the kill"
    );
    drop(conn);

    let mut per_client = vec![Vec::new(); clients];
    for (key, item) in items {
        let shown = key.to_string();
        let code = shown
            .strip_prefix("gl-code:main/")
            .unwrap_or_else(|| panic!("cycle {cycle}: unexpected key {shown}"));
        let (client, n) = code
            .strip_prefix('c')
            .and_then(|s| s.split_once('-'))
            .and_then(|(c, n)| Some((c.parse::<usize>().ok()?, n.parse::<u64>().ok()?)))
            .unwrap_or_else(|| panic!("cycle {cycle}: unexpected code {code}"));
        assert_eq!(item.state, State::Pending, "cycle {cycle}: {shown}");
        let fields = gl_records(&item.xml);
        assert_eq!(fields.len(), 1, "cycle {cycle}: {shown}: {}", item.xml);
        assert_eq!(fields[0].0, code, "cycle {cycle}: {shown}: {}", item.xml);
        per_client[client].push((n, fields[0].1.clone()));
    }
    for numbers in &mut per_client {
        numbers.sort();
    }
    per_client
}

/// Cycles of: start the binary, four clients each sending numbered records (`c{client}-{n}`,
/// single records and batches of up to five, one request at a time), SIGKILL at a random
/// moment, then open the queue as the next start would. Every record answered 202 is there
/// with its content, each client's numbers are exactly 0..k with k between its last
/// acknowledged and its last sent number, and the store opens and checks sound each time.
/// Numbers continue after what is stored, so nothing acknowledged is ever sent again (D16).
///
/// A SIGKILL leaves what was written in the page cache: this shows that no answer goes out
/// before its transaction is written, not that the write is fsync'd (the settings test below
/// asserts `synchronous=FULL` for that).
#[test]
fn kill_loop_loses_no_acknowledged_record_and_keeps_each_client_a_prefix() {
    const CLIENTS: usize = 4;
    let cycles: u32 = std::env::var("AP_INTAKE_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48);
    let seed = seed_from("AP_INTAKE_CRASH_SEED");
    println!("kill loop: seed {seed} (replay with AP_INTAKE_CRASH_SEED={seed}), {cycles} cycles");
    let mut rng = Prng(seed);
    let started = Instant::now();

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    // Delivery goes nowhere (connection refused): every stored record stays in the queue.
    std::fs::write(&file, config_text(&data, "", "")).unwrap();

    // Per client, the cycle each stored number was sent in: numbers 0..len are in the store.
    let mut sent_in: Vec<Vec<u32>> = vec![Vec::new(); CLIENTS];
    let (mut requests_acked, mut records_acked) = (0u64, 0u64);
    let (mut killed_in_flight, mut in_flight_stored, mut in_flight_partial) = (0u64, 0u64, 0u64);
    for cycle in 0..cycles {
        let service = Service::start(&file, dir.path());
        let addr = service.addr;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let first = sent_in[c].len() as u64;
                let client_rng = Prng(rng.next());
                std::thread::spawn(move || numbered_client(addr, c, first, cycle, client_rng))
            })
            .collect();
        // The kill comes at a random moment of the load: the moment is the test's input.
        std::thread::sleep(Duration::from_millis(rng.between(20, 600)));
        let log = service.stderr();
        service.kill_9();
        let runs: Vec<ClientRun> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        assert!(
            !log.contains("panicked") && !log.contains("damaged"),
            "cycle {cycle}: the service reported trouble before the kill:\n{log}"
        );
        for (c, run) in runs.iter().enumerate() {
            assert!(
                run.unexpected.is_none(),
                "cycle {cycle} (seed {seed}): client {c}: {}",
                run.unexpected.as_deref().unwrap_or("")
            );
        }

        let stored = stored_numbers(&data, CLIENTS, cycle);
        for (c, run) in runs.iter().enumerate() {
            requests_acked += run.requests_acked;
            records_acked += run.records_acked;
            let numbers: Vec<u64> = stored[c].iter().map(|(n, _)| *n).collect();
            let len = numbers.len() as u64;
            // A prefix: exactly 0..len, nothing after a gap.
            let gap = numbers.iter().enumerate().find(|(i, n)| **n != *i as u64);
            assert!(
                gap.is_none(),
                "cycle {cycle} (seed {seed}): client {c}: stored numbers are not 0..{len}: first \
                 out of place at position {:?} (acknowledged up to {}, sent up to {}): {numbers:?}",
                gap,
                run.acked_end,
                run.sent_end,
            );
            // Zero acknowledged loss, and nothing beyond what was sent.
            assert!(
                len >= run.acked_end,
                "cycle {cycle} (seed {seed}): client {c}: acknowledged records lost: numbers \
                 {len}..{} were answered 202 but are not stored",
                run.acked_end
            );
            assert!(
                len <= run.sent_end,
                "cycle {cycle} (seed {seed}): client {c}: {len} numbers stored, only {} sent",
                run.sent_end
            );
            if let Some(in_flight) = &run.in_flight {
                killed_in_flight += 1;
                if len == in_flight.end && len > run.acked_end {
                    in_flight_stored += 1;
                } else if len > in_flight.start && len < in_flight.end {
                    in_flight_partial += 1;
                }
            }
            // Content: every stored number holds what was sent for it (acknowledged numbers are
            // never sent again; unanswered ones that were not stored are sent afresh).
            let before = sent_in[c].len() as u64;
            sent_in[c].resize(len as usize, cycle);
            for (n, description) in &stored[c] {
                let expected = numbered_description(c, *n, sent_in[c][*n as usize]);
                assert_eq!(
                    description, &expected,
                    "cycle {cycle} (seed {seed}): client {c}: content of number {n} (stored \
                     before this cycle: {before})"
                );
            }
        }
    }

    // The store is sound for the product too: the service starts on it, stores a record and
    // stops cleanly, and check-store finds nothing. (The record first: a SIGTERM at once
    // after the "listening" line is another matter, see
    // `sigterm_as_soon_as_the_service_says_it_listens_stops_it_cleanly`.)
    let mut service = Service::start(&file, dir.path());
    let r = service.post_records(
        "/general-ledger-codes/v1",
        &[
            json!({"code": numbered_code(0, sent_in[0].len() as u64), "type": "VAT",
                 "description_en": numbered_description(0, sent_in[0].len() as u64, cycles)}),
        ],
        Some(KEY),
    );
    assert_eq!(r.status, 202, "after {cycles} kills: {}", r.text);
    sent_in[0].push(cycles);
    let status = service.terminate();
    assert!(status.success(), "{status:?}\n{}", service.stderr());
    let check = process::bin()
        .args(["check-store", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "check-store after {cycles} kills: {:?}\n{}{}",
        check.status,
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // Everything seen stored along the way is still there, as sent.
    let stored = stored_numbers(&data, CLIENTS, cycles);
    for (c, numbers) in stored.iter().enumerate() {
        let expected: Vec<(u64, String)> = (0..sent_in[c].len())
            .map(|n| (n as u64, numbered_description(c, n as u64, sent_in[c][n])))
            .collect();
        assert!(
            *numbers == expected,
            "client {c} (seed {seed}): at the end {} stored, expected {}",
            numbers.len(),
            expected.len()
        );
    }
    let found: u64 = stored.iter().map(|n| n.len() as u64).sum();
    println!(
        "kill loop: {cycles} cycles in {:.1} s; {requests_acked} requests / {records_acked} \
         records acknowledged, {found} records stored; {killed_in_flight} requests unanswered at \
         the kill, {in_flight_stored} of them stored whole, {in_flight_partial} in part",
        started.elapsed().as_secs_f64()
    );
    assert!(
        records_acked >= u64::from(cycles),
        "the clients got few records acknowledged ({records_acked}): the loop tested little"
    );
    assert!(
        found > records_acked,
        "{found} stored (and one record after the kills) <= {records_acked} acknowledged"
    );
}

// ---------------------------------------------------------------------------------------------
// The durability settings (D17, D28).

/// The `-wal` file beside the queue is absent or empty.
fn assert_no_wal(data: &std::path::Path, when: &str) {
    let wal = data.join(format!("{FILE_NAME}-wal"));
    let len = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(len, 0, "{when}: {} holds {len} bytes", wal.display());
}

/// What SQLite itself says of a closed queue file: the journal mode and auto_vacuum stored in
/// it (the header, then the pragmas on a connection of our own), and how many items it holds.
fn assert_persisted_settings(data: &std::path::Path, items: i64) {
    let path = data.join(FILE_NAME);
    let header = std::fs::read(&path).unwrap();
    // Bytes 18 and 19: file format write/read versions, 2 = WAL.
    assert_eq!(
        (header[18], header[19]),
        (2, 2),
        "the header says WAL (bytes 18, 19)"
    );
    // Byte 64..68: the incremental-vacuum flag (non-zero: incremental); 52..56 non-zero with
    // any auto_vacuum.
    let word = |at: usize| u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
    assert_ne!(
        word(52),
        0,
        "the header says auto_vacuum is on (bytes 52..56)"
    );
    assert_ne!(
        word(64),
        0,
        "the header says incremental vacuum (bytes 64..68)"
    );

    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal", "the journal mode persisted in the file");
    let vacuum: i64 = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        vacuum, 2,
        "auto_vacuum persisted in the file (2: incremental)"
    );
    let n: i64 = conn
        .query_row("SELECT count(*) FROM item", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, items, "items in the file");
}

#[test]
fn the_store_runs_with_full_sync_wal_and_incremental_vacuum_and_closes_without_a_wal() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let store = SqliteStore::open(&data, Mode::Serve, 0).unwrap();
        let s = store.settings().unwrap();
        assert_eq!(s.journal_mode, "wal", "{s:?}");
        assert_eq!(s.synchronous, "FULL", "{s:?}");
        assert_eq!(s.auto_vacuum, "INCREMENTAL", "{s:?}");
        assert!(s.background_checkpoint.is_some(), "{s:?}");
        // The writer's own safety net, not SQLite's automatic checkpoint, which would ignore a
        // failed flush (D40): `settings` reports a threshold only when SQLite's is off.
        assert!(s.wal_autocheckpoint_pages > 0, "{s:?}");
        assert!(s.journal_size_limit > 0, "{s:?}");
        let records: Vec<NewRecord> = (0..200)
            .map(|i| NewRecord {
                key: QueueKey::new("gl-code", &["main", &format!("S{i}")]).unwrap(),
                interface: iface("/general-ledger-codes/v1").id,
                xml: format!("<gl_code><code>S{i}</code></gl_code>"),
                receipt: None,
            })
            .collect();
        store.upsert(&records, now_ms()).unwrap();
        assert!(
            data.join(format!("{FILE_NAME}-wal")).exists(),
            "a commit goes to the write-ahead log"
        );
        // Closed explicitly, while the value still lives: written back, and no more calls.
        store.close().unwrap();
        assert_no_wal(&data, "after the store was closed");
        assert!(matches!(
            store.upsert(&records, now_ms()),
            Err(StoreError::Stopping)
        ));
        assert!(matches!(
            store.get(&records[0].key),
            Err(StoreError::Stopping)
        ));
        store.close().unwrap();
    }
    assert_no_wal(&data, "after the store was dropped");
    assert_persisted_settings(&data, 200);
    // Opened again, it keeps the settings.
    let store = SqliteStore::open(&data, Mode::Inspect, 0).unwrap();
    let s = store.settings().unwrap();
    assert_eq!(
        (s.journal_mode.as_str(), s.synchronous, s.auto_vacuum),
        ("wal", "FULL", "INCREMENTAL"),
        "{s:?}"
    );
    assert_eq!(
        s.background_checkpoint, None,
        "operator commands do not checkpoint"
    );
}

#[test]
fn the_service_logs_its_store_settings_and_leaves_no_wal_after_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_text(&data, "", "")).unwrap();
    let mut service = Service::start(&file, dir.path());
    let r = service.post_records(
        "/general-ledger-codes/v1",
        &[json!({"code": "LOG-1", "type": "VAT", "description_en": "settings"})],
        Some(KEY),
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let status = service.terminate();
    let log = service.stderr();
    assert!(status.success(), "{status:?}\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("synchronous FULL"))
        .unwrap_or_else(|| panic!("no start-up line with \"synchronous FULL\":\n{log}"));
    for part in ["journal wal", "auto_vacuum INCREMENTAL", FILE_NAME] {
        assert!(line.contains(part), "{part:?} in {line}");
    }
    assert_no_wal(&data, "after SIGTERM");
    assert_persisted_settings(&data, 1);
}

/// systemd stops a service whenever it likes once it said it is ready, and the "listening"
/// line (with READY=1) says so: a SIGTERM from then on is a clean stop (requests finish, the
/// queue is closed, exit 0), never the default action of the signal. The window is short
/// (about one start in fifteen here), hence the attempts.
#[test]
fn sigterm_as_soon_as_the_service_says_it_listens_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_text(&data, "", "")).unwrap();
    for attempt in 0..100 {
        let mut service = Service::start(&file, dir.path());
        let status = service.terminate();
        assert!(
            status.success(),
            "attempt {attempt}: SIGTERM right after the \"listening\" line: {status:?} (the \
             signal's default action: no handler yet?)\n{}",
            service.stderr()
        );
        assert_no_wal(&data, &format!("attempt {attempt}: after SIGTERM"));
    }
}
