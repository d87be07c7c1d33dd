//! What this machine allows without ap-intake: the latency of the data directory's disk to
//! fsync a write, and SQLite alone storing GL-sized records (one table, a text key and the
//! record's XML; WAL, `synchronous=FULL`, one thread), the same durability the queue has
//! (D17, D28). Throughput and latency figures of `intake` are read against these: a durable
//! answer waits for at least one fsync, and the queue writer does at least this SQLite work.
//! A second layout, each commit's XML in one blob beside a narrow key index, shows what a
//! different queue layout could gain at most.

use crate::cpu::on_cpu;
use crate::records::fixture;
use crate::report::Run;
use ap_intake::interfaces::by_path;
use ap_intake::validate::Validator;
use ap_intake::xml;
use rusqlite::{Connection, Transaction, params};
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The size of the file the fsync probe writes into, in place after the first pass: the WAL
/// is reused the same way once a checkpoint has copied it.
const PROBE_FILE: u64 = 64 << 20;
/// Insertion points in the key index, as 16 clients with their own key ranges make.
const CLIENTS: usize = 16;
/// This thread's /proc task directory.
const THIS_THREAD: &str = "/proc/thread-self";

pub fn run(dir: &Path, rounds: usize, records: usize) {
    for size in [8 << 10, 256 << 10] {
        let took = fsync_probe(dir, size, rounds);
        println!(
            "disk: write {:>3} KiB then fsync, {rounds} times: {}",
            size >> 10,
            summary(&took)
        );
    }
    let xml = gl_xml();
    for per_commit in [1, 100, 1000] {
        let n = if per_commit == 1 {
            (records / 100).max(1)
        } else {
            records
        };
        let (rate, cpu) = sqlite_alone(dir, &xml, n, per_commit);
        println!(
            "SQLite alone: {n} records of {} B XML, {per_commit:>4} a commit: {rate:>8.0} records/s, {cpu:.1} us CPU a record",
            xml.len()
        );
        if per_commit > 1 {
            let (rate, cpu) = sqlite_packed(dir, &xml, n, per_commit);
            println!(
                "SQLite packed (a commit's XML one blob): {n} records, {per_commit:>4} a commit: {rate:>8.0} records/s, {cpu:.1} us CPU a record"
            );
        }
    }
}

/// Writes `size` bytes at successive places of a preallocated file and fsyncs after each;
/// the time of every fsync.
fn fsync_probe(dir: &Path, size: usize, rounds: usize) -> Vec<Duration> {
    let path = dir.join("fsync-probe");
    let file = File::create(&path).expect("probe file");
    let zeros = vec![0u8; 1 << 20];
    for at in (0..PROBE_FILE).step_by(zeros.len()) {
        file.write_all_at(&zeros, at).expect("fill probe file");
    }
    file.sync_all().expect("fsync probe file");
    let mut page = vec![0u8; size];
    let mut took = Vec::with_capacity(rounds);
    let mut at = 0;
    for round in 0..rounds {
        page.fill(round as u8);
        if at + size as u64 > PROBE_FILE {
            at = 0;
        }
        file.write_all_at(&page, at).expect("write probe");
        at += size as u64;
        let start = Instant::now();
        file.sync_all().expect("fsync probe");
        took.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path).expect("remove probe file");
    took
}

fn summary(took: &[Duration]) -> String {
    let mut us: Vec<u32> = took
        .iter()
        .map(|d| u32::try_from(d.as_micros()).unwrap_or(u32::MAX))
        .collect();
    us.sort_unstable();
    let at = |p| Run::percentile(&us, p);
    format!(
        "ms p50 {:.2} p90 {:.2} p99 {:.2} max {:.2}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}

/// The XML the queue keeps for the GL codes fixture the `intake` benchmark sends.
fn gl_xml() -> String {
    let iface = by_path("/general-ledger-codes/v1").expect("GL codes interface");
    let validator = Validator::load(None).expect("embedded schemas");
    let shape = validator.shape(iface).expect("GL codes shape");
    xml::record(shape, iface.xml_record, &[], &fixture(iface))
}

/// The key of record `i`: unique, in one of [`CLIENTS`] ranges.
fn key(i: usize) -> String {
    format!("floor-{}-{}", i % CLIENTS, i / CLIENTS)
}

/// Inserts `n` records with unique keys, `per_commit` to a transaction, into a fresh
/// database: one row each, its key and its XML.
fn sqlite_alone(dir: &Path, xml: &str, n: usize, per_commit: usize) -> (f64, f64) {
    let schema = "CREATE TABLE item (key TEXT PRIMARY KEY, xml TEXT NOT NULL);";
    timed(dir, "alone", schema, n, per_commit, |tx, records| {
        let mut insert = tx.prepare_cached("INSERT INTO item (key, xml) VALUES (?1, ?2)")?;
        for i in records {
            insert.execute(params![key(i), xml])?;
        }
        Ok(())
    })
}

/// As [`sqlite_alone`], in the narrowest layout that still finds a record by its key: each
/// commit's XML as one blob, and a key index whose rows hold only the blob and the offset of
/// the record's XML in it. What a queue could gain by writing each record's XML once, in
/// sequence, rather than in a table row beside the key index.
fn sqlite_packed(dir: &Path, xml: &str, n: usize, per_commit: usize) -> (f64, f64) {
    let schema = "CREATE TABLE pack (id INTEGER PRIMARY KEY, xml BLOB NOT NULL);
        CREATE TABLE item (key TEXT PRIMARY KEY, pack INTEGER NOT NULL, at INTEGER NOT NULL)
          WITHOUT ROWID;";
    timed(dir, "packed", schema, n, per_commit, |tx, records| {
        let blob = xml.as_bytes().repeat(records.len());
        tx.execute("INSERT INTO pack (xml) VALUES (?1)", params![blob])?;
        let pack = tx.last_insert_rowid();
        let mut insert =
            tx.prepare_cached("INSERT INTO item (key, pack, at) VALUES (?1, ?2, ?3)")?;
        for (at, i) in records.enumerate() {
            insert.execute(params![
                key(i),
                pack,
                i64::try_from(at * xml.len()).expect("offset")
            ])?;
        }
        Ok(())
    })
}

/// Runs `insert` over `n` records, `per_commit` to a transaction, in a fresh WAL database
/// with `schema` at `synchronous=FULL`; records per second and this thread's CPU time per
/// record.
fn timed(
    dir: &Path,
    name: &str,
    schema: &str,
    n: usize,
    per_commit: usize,
    mut insert: impl FnMut(&Transaction<'_>, Range<usize>) -> rusqlite::Result<()>,
) -> (f64, f64) {
    let path = dir.join(format!("floor-{name}-{per_commit}.sqlite"));
    let mut conn = Connection::open(&path).expect("open floor database");
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        .expect("WAL");
    conn.execute_batch(&format!("PRAGMA synchronous=FULL; {schema}"))
        .expect("floor schema");
    let cpu = on_cpu(Path::new(THIS_THREAD));
    let start = Instant::now();
    for first in (0..n).step_by(per_commit) {
        let tx = conn.transaction().expect("begin");
        insert(&tx, first..(first + per_commit).min(n)).expect("insert");
        tx.commit().expect("commit");
    }
    let elapsed = start.elapsed();
    let cpu = on_cpu(Path::new(THIS_THREAD)).saturating_sub(cpu);
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    (
        n as f64 / elapsed.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / n as f64,
    )
}
