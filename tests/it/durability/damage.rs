//! Damaged queue files (D29), on the real binary and real files in a temp dir.
//!
//! - A stopped queue whose file is damaged (a b-tree block flipped, the file cut in half, the
//!   header page zeroed) is refused by `serve` (exit 74, never a panic, a message naming the
//!   file and `check-store`) and reported by `check-store` (exit 1).
//! - A clean stop leaves one self-contained file: without its WAL nothing is lost.
//! - A row that cannot be read back is quarantined, blocks nothing, and can be requeued and
//!   dropped; `check-store` names it.
//! - `/readyz` answers 503, naming the damage, once the running service has met it.

use crate::common::process::{Service, bin, wait_exit};
use crate::common::receiver::{Receiver, gl_records};
use crate::common::setup::{PATIENCE, Setup, count};
use crate::common::{KEY, NOWHERE, gl, gl_key};
use ap_intake::queue::{Mode, QueueKey, SqliteStore};
use rusqlite::{Connection, OpenFlags, params};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const GL: &str = "general-ledger-codes-v1";
const GL_PATH: &str = "/general-ledger-codes/v1";
/// "Within a few seconds": how long `serve` may take to refuse a damaged queue.
const REFUSAL_WITHIN: Duration = Duration::from_secs(5);
/// The exit status of `serve` when the queue cannot be opened or is damaged (EX_IOERR).
const EXIT_STORE: i32 = 74;
/// The queue's page size (`PRAGMA page_size`, SQLite's default).
const PAGE: usize = 4096;

impl Setup {
    /// Delivers to `platform_url`.
    fn at(platform_url: &str) -> Self {
        Setup::new("", platform_url)
    }

    /// Rewrites the config file to deliver to `platform_url`.
    fn deliver_to(&self, platform_url: &str) {
        self.write_config("", platform_url);
    }

    /// The queue file.
    fn file(&self) -> PathBuf {
        self.data_dir().join("queue.sqlite3")
    }

    /// `check-store`: exit code and stdout.
    fn check_store(&self) -> (Option<i32>, String) {
        let out = self.run("check-store", &[]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }

    /// `check-store`, which must find the queue sound.
    fn assert_sound(&self, when: &str) {
        let (code, text) = self.check_store();
        let sound = format!("{}: sound", self.file().display());
        assert!(
            code == Some(0) && text.contains(&sound),
            "check-store {when}: want exit 0 and {sound:?}, got {code:?}:\n{text}"
        );
    }

    /// Runs `serve` on a queue it should refuse: the exit, what it wrote to stderr, how long
    /// it took. A service still running after 15 s is killed.
    fn serve_once(&self) -> Exit {
        let started = Instant::now();
        let mut child = bin()
            .args(["serve", "--config"])
            .arg(&self.config)
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        });
        let status = wait_exit(&mut child, Duration::from_secs(15));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let elapsed = started.elapsed();
        Exit {
            code: status.and_then(|s| s.code()),
            running: status.is_none(),
            elapsed,
            stderr: reader.join().unwrap(),
        }
    }
}

/// How a `serve` that should refuse to start ended.
struct Exit {
    /// `None` when killed by a signal or still running.
    code: Option<i32>,
    /// Still running after 15 s (then killed).
    running: bool,
    elapsed: Duration,
    stderr: String,
}

fn key_bytes(code: &str) -> Vec<u8> {
    QueueKey::parse(&gl_key(code)).unwrap().as_bytes().to_vec()
}

/// `count` GL-code codes: `{prefix}000`, `{prefix}001`, ...
fn codes(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i:03}")).collect()
}

/// The report's count `field` of GL codes.
fn gl_count(report: &Value, field: &str) -> u64 {
    count(report, GL, field)
}

/// Posts `codes` as GL codes through the real service of `setup` (delivering wherever its
/// config says), then stops it cleanly (SIGTERM, exit 0). Returns the stderr of the run.
fn fill(setup: &Setup, codes: &[String]) -> String {
    let mut service = setup.serve();
    for chunk in codes.chunks(100) {
        let records: Vec<Value> = chunk.iter().map(|c| gl(c)).collect();
        let r = service.post_records(GL_PATH, &records, Some(KEY));
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let log = service.stderr();
    let status = service.terminate();
    assert!(status.success(), "clean stop: {status:?}\n{log}");
    log
}

/// A stopped queue holding `codes` as pending GL codes (the platform unreachable), checked
/// sound by `check-store`.
fn stopped_queue(codes: &[String]) -> Setup {
    let setup = Setup::at(NOWHERE);
    fill(&setup, codes);
    setup.assert_sound("after a clean stop");
    setup
}

/// A new setup holding a copy of `template`'s stopped queue file(s).
fn copy_of(template: &Setup) -> Setup {
    let copy = Setup::at(NOWHERE);
    std::fs::create_dir_all(copy.data_dir()).unwrap();
    for entry in std::fs::read_dir(template.data_dir()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("queue.sqlite3") {
            std::fs::copy(entry.path(), copy.data_dir().join(&name)).unwrap();
        }
    }
    copy
}

/// Runs `sql` on the queue of a stopped service, as an operator with the `sqlite3` shell
/// would; the number of rows changed.
fn sql(setup: &Setup, statement: &str, code: &str) -> usize {
    let conn = Connection::open(setup.file()).unwrap();
    conn.execute(statement, params![key_bytes(code)]).unwrap()
}

/// `(rowid, queued_at)` of a code's row: the rowid is its place in the line.
fn place(setup: &Setup, code: &str) -> (i64, i64) {
    let conn = Connection::open(setup.file()).unwrap();
    conn.query_row(
        "SELECT rowid, queued_at FROM item WHERE key = ?1",
        params![key_bytes(code)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// Codes of every GL code any request to the platform carried, whatever the answer.
fn codes_received(platform: &Receiver) -> BTreeSet<String> {
    platform
        .received()
        .iter()
        .flat_map(|(r, _)| gl_records(&r.body))
        .map(|(code, _)| code)
        .collect()
}

/// Codes of the GL codes the platform accepted (2xx).
fn codes_delivered(platform: &Receiver) -> BTreeSet<String> {
    platform
        .delivered()
        .iter()
        .flat_map(|r| gl_records(&r.body))
        .map(|(code, _)| code)
        .collect()
}

/// How many "cannot be read ... quarantined" warnings the service logged so far.
fn quarantine_warnings(service: &Service) -> usize {
    service
        .stderr()
        .lines()
        .filter(|l| l.contains("cannot be read") && l.contains("quarantined"))
        .count()
}

/// Waits until the service has logged `n` quarantine warnings.
fn wait_warnings(service: &Service, n: usize) {
    let logged = crate::common::wait_for(PATIENCE, || quarantine_warnings(service) >= n);
    assert!(
        logged,
        "within {PATIENCE:?}: {n} quarantine warning(s) in the log; the log:\n{}",
        service.stderr()
    );
}

// ---------------------------------------------------------------------------------------
// The file's structure: which pages are b-tree pages.

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Every page of a stopped queue file, by what it is.
struct Layout {
    /// Pages in the file.
    pages: u32,
    /// Pages on the free list.
    free: u32,
    /// `(page, tree name, page type)` of every b-tree page, each tree walked from its root.
    btree: Vec<(u32, String, u8)>,
    /// Pages that are neither b-tree pages nor the pointer map of auto_vacuum (free or
    /// overflow pages).
    others: BTreeSet<u32>,
}

/// Walks every b-tree of the file (roots from `sqlite_schema`, read without touching the
/// file: `immutable=1`) and sorts the pages into b-tree pages, the pointer-map page(s) of
/// auto_vacuum and the rest.
fn layout(file: &Path) -> Layout {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(be16(&bytes, 16), PAGE, "page size of {}", file.display());
    assert_eq!(bytes.len() % PAGE, 0, "the file is whole pages");
    let pages = u32::try_from(bytes.len() / PAGE).unwrap();
    assert_eq!(be32(&bytes, 28), pages, "in-header page count");
    let free = be32(&bytes, 36);
    let reserved = usize::from(bytes[20]);

    let conn = Connection::open_with_flags(
        format!("file:{}?immutable=1", file.display()),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let mut roots: Vec<(String, u32)> = conn
        .prepare("SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(conn);
    roots.push(("sqlite_schema".into(), 1));

    let mut btree = Vec::new();
    for (name, root) in roots {
        let mut stack = vec![root];
        while let Some(p) = stack.pop() {
            let start = (p as usize - 1) * PAGE;
            let page = &bytes[start..start + PAGE];
            let hdr = if p == 1 { 100 } else { 0 };
            let kind = page[hdr];
            btree.push((p, name.clone(), kind));
            match kind {
                // Interior pages: the right-most child, then the left child of every cell.
                0x02 | 0x05 => {
                    stack.push(be32(page, hdr + 8));
                    for i in 0..be16(page, hdr + 3) {
                        stack.push(be32(page, be16(page, hdr + 12 + 2 * i)));
                    }
                }
                0x0a | 0x0d => {}
                other => panic!("page {p} of {name} has page type {other:#x}"),
            }
        }
    }
    // With auto_vacuum on (a non-zero largest root page in the header) the file also holds
    // pointer-map pages: page 2, then every usable/5 + 1.
    let mut seen: BTreeSet<u32> = btree.iter().map(|(p, _, _)| *p).collect();
    assert_eq!(seen.len(), btree.len(), "a page in two trees: {btree:?}");
    if be32(&bytes, 52) != 0 {
        let mut p = 2;
        while p <= pages {
            seen.insert(p);
            p += u32::try_from((PAGE - reserved) / 5 + 1).unwrap();
        }
    }
    let others = (1..=pages).filter(|p| !seen.contains(p)).collect();
    Layout {
        pages,
        free,
        btree,
        others,
    }
}

/// XORs every byte of page `page` (1-based) with 0xFF.
fn flip_page(file: &Path, page: u32) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let at = (u64::from(page) - 1) * PAGE as u64;
    let mut block = vec![0; PAGE];
    f.read_exact_at(&mut block, at).unwrap();
    block.iter_mut().for_each(|b| *b ^= 0xFF);
    f.write_all_at(&block, at).unwrap();
    f.sync_all().unwrap();
}

// ---------------------------------------------------------------------------------------
// 1. A damaged file is never served.

/// What is wrong with how `serve` and `check-store` treat a damaged copy (empty: right).
fn refusals(kind: &str, setup: &Setup) -> Vec<String> {
    let mut wrong = Vec::new();
    let file = setup.file().display().to_string();
    let exit = setup.serve_once();
    if exit.running {
        wrong.push(format!(
            "{kind}: serve was still running after 15 s (served a damaged queue)"
        ));
    } else if exit.code != Some(EXIT_STORE) {
        wrong.push(format!(
            "{kind}: serve exited with {:?} (101 is a panic), want {EXIT_STORE}",
            exit.code
        ));
    }
    if !exit.running && exit.elapsed > REFUSAL_WITHIN {
        wrong.push(format!("{kind}: serve took {:?} to refuse", exit.elapsed));
    }
    // The error is the last thing serve prints; it may span lines (SQLite's own report).
    match exit.stderr.find("ap-intake: cannot open the queue in") {
        Some(at) => {
            let message = &exit.stderr[at..];
            if !message.contains(&file) || !message.contains("check-store") {
                wrong.push(format!(
                    "{kind}: serve's message does not name {file} and `check-store`: {message}"
                ));
            }
        }
        None => wrong.push(format!(
            "{kind}: no \"ap-intake: cannot open the queue in\" on stderr:\n{}",
            exit.stderr
        )),
    }
    wrong.extend(reported(kind, setup));
    wrong
}

/// What is wrong with `check-store`'s verdict on a damaged queue (empty: right): exit 1,
/// `<file>: damaged` and the problems, or `<file>: cannot be checked: ...`.
fn reported(kind: &str, setup: &Setup) -> Vec<String> {
    let mut wrong = Vec::new();
    let file = setup.file().display().to_string();
    let (code, text) = setup.check_store();
    let damaged = format!("{file}: damaged");
    let unreadable = format!("{file}: cannot be checked");
    if code != Some(1) {
        wrong.push(format!(
            "{kind}: check-store exited {code:?}, want 1:\n{text}"
        ));
    }
    if text.contains(&damaged) {
        if !text
            .lines()
            .any(|l| l.starts_with("  ") && !l.trim().is_empty())
        {
            wrong.push(format!("{kind}: check-store names no problem:\n{text}"));
        }
    } else if !text.contains(&unreadable) {
        wrong.push(format!(
            "{kind}: check-store says neither {damaged:?} nor {unreadable:?}:\n{text}"
        ));
    }
    wrong
}

/// A queue of 340 GL codes posted through the real service and stopped cleanly; a fresh copy
/// per kind of damage. `serve` must exit 74 within a few seconds naming the file and
/// `check-store`; `check-store` must exit 1 saying damaged / cannot be checked.
#[test]
fn damaged_queue_files_are_refused_by_serve_and_reported_by_check_store() {
    let template = stopped_queue(&codes("D", 340));
    let report = template.report();
    assert_eq!(gl_count(&report, "pending"), 340, "{report:#}");
    let mut wrong = Vec::new();

    // (a) One 4 KiB block in the middle, every bit flipped. The block is chosen among the
    // b-tree pages (table or index, leaf or interior), which the start-up `quick_check` and
    // `check-store` read in full: with small records and no deletions the file holds no
    // free pages and no overflow pages (`layout` checks that b-tree pages, and the pointer
    // map when auto_vacuum is on, are the whole file), and a flipped b-tree page has an invalid
    // page type (0x0d becomes 0xf2, 0x05 0xfa, 0x0a 0xf5, 0x02 0xfd), so the damage is found
    // whatever rows the page held. A free page, by contrast, may never be read.
    {
        let copy = copy_of(&template);
        let layout = layout(&copy.file());
        assert_eq!(
            (layout.free, &layout.others),
            (0, &BTreeSet::new()),
            "free pages, and pages neither b-tree nor pointer map"
        );
        let middle = layout.pages / 2 + 1;
        let (page, tree, kind) = layout
            .btree
            .iter()
            .filter(|(p, _, _)| *p != 1)
            .min_by_key(|(p, _, _)| p.abs_diff(middle))
            .cloned()
            .expect("b-tree pages besides page 1");
        flip_page(&copy.file(), page);
        wrong.extend(refusals(
            &format!(
                "block {page} of {} ({tree}, type {kind:#x}) flipped",
                layout.pages
            ),
            &copy,
        ));
    }

    // (b) The file cut to half its length.
    {
        let copy = copy_of(&template);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(copy.file())
            .unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len / 2).unwrap();
        f.sync_all().unwrap();
        wrong.extend(refusals(
            &format!("truncated from {len} to {} bytes", len / 2),
            &copy,
        ));
    }

    // (c) The first 4 KiB (the header and the schema page) zeroed.
    {
        let copy = copy_of(&template);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(copy.file())
            .unwrap();
        f.write_all_at(&[0; PAGE], 0).unwrap();
        f.sync_all().unwrap();
        wrong.extend(refusals("first 4 KiB zeroed", &copy));
    }

    assert!(wrong.is_empty(), "D29:\n{}", wrong.join("\n"));
}

/// After a clean stop the queue is one self-contained file: without `queue.sqlite3-wal` and
/// `-shm` the service starts and every record is still there; `check-store` finds the queue
/// sound before and after.
#[test]
fn a_cleanly_stopped_queue_needs_no_wal_file() {
    let codes = codes("W", 340);
    let setup = stopped_queue(&codes);
    for suffix in ["-wal", "-shm"] {
        let path = setup.data_dir().join(format!("queue.sqlite3{suffix}"));
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    setup.assert_sound("without the WAL");

    let mut service = setup.serve();
    let report = setup.report();
    assert_eq!(report["source"], "service", "{report:#}");
    assert_eq!(gl_count(&report, "pending"), 340, "{report:#}");
    let listed: BTreeSet<String> = setup
        .keys(&["pending", "--interface", GL_PATH])
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = codes.iter().map(|c| gl_key(c)).collect();
    assert_eq!(
        listed.symmetric_difference(&expected).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "pending keys after the WAL was removed"
    );
    let shown = setup.ok("status", &["show", &gl_key("W339")]);
    assert!(shown.contains("<code>W339</code>"), "{shown}");
    let status = service.terminate();
    assert!(status.success(), "{status:?}\n{}", service.stderr());
    setup.assert_sound("after the restart");
}

// ---------------------------------------------------------------------------------------
// 2. A row that cannot be read back is quarantined.

/// One pending row of 30 made unreadable (its XML no longer UTF-8) on a stopped queue: the
/// service delivers the other 29, quarantines that one (log warning, `status`), requeue puts
/// it back at its place (quarantined again while still unreadable, on a running and on a
/// stopped service), drop removes it; `check-store` names the row while it is there and finds
/// the queue sound once it is dropped.
#[test]
fn an_unreadable_row_is_quarantined_requeued_and_dropped() {
    let codes = codes("Q", 30);
    let bad = "Q007";
    let bad_key = gl_key(bad);
    let setup = stopped_queue(&codes);
    let (rowid, queued_at) = place(&setup, bad);
    // The XML keeps its text (and code) but ends in a byte that is not UTF-8.
    let changed = sql(
        &setup,
        "UPDATE item SET xml = CAST(xml || X'FF' AS TEXT) WHERE key = ?1",
        bad,
    );
    assert_eq!(changed, 1);

    let platform = Receiver::start();
    setup.deliver_to(&platform.url());
    let mut service = setup.serve();
    let others: BTreeSet<String> = codes.iter().filter(|c| *c != bad).cloned().collect();
    assert!(
        platform.wait_for(PATIENCE, |_| codes_delivered(&platform)
            .is_superset(&others)),
        "the 29 readable records were not all delivered; delivered {:?}; log:\n{}",
        codes_delivered(&platform),
        service.stderr()
    );
    let report = setup.report_until("pending 0, quarantined 1", |r| {
        gl_count(r, "pending") == 0 && gl_count(r, "quarantined") == 1
    });
    assert_eq!(gl_count(&report, "delivered"), 29, "{report:#}");
    assert_eq!(setup.keys(&["quarantined"]), vec![bad_key.clone()]);
    assert_eq!(
        setup.keys(&["quarantined", "--interface", GL_PATH]),
        vec![bad_key.clone()]
    );
    assert!(setup.keys(&["pending"]).is_empty());
    wait_warnings(&service, 1);

    // Requeued on the running service: pending again, met again, quarantined again.
    let out = setup.ok("requeue", &[&bad_key]);
    assert!(out.contains("1 record(s) back in the queue"), "{out}");
    wait_warnings(&service, 2);
    setup.report_until("quarantined again after requeue", |r| {
        gl_count(r, "pending") == 0 && gl_count(r, "quarantined") == 1
    });
    let out = setup.ok("requeue", &["--all-quarantined"]);
    assert!(out.contains("1 record(s) back in the queue"), "{out}");
    wait_warnings(&service, 3);
    setup.report_until("quarantined again after requeue --all-quarantined", |r| {
        gl_count(r, "pending") == 0 && gl_count(r, "quarantined") == 1
    });
    let status = service.terminate();
    assert!(status.success(), "{status:?}\n{}", service.stderr());

    // Stopped: check-store names the row.
    let (code, text) = setup.check_store();
    assert_eq!(code, Some(1), "check-store:\n{text}");
    assert!(
        text.contains(&format!("{}: damaged", setup.file().display())),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  ") && l.contains(&format!("item row {rowid} cannot be read"))),
        "check-store does not name item row {rowid}:\n{text}"
    );

    // Requeued on the stopped service: pending, at the place it had.
    let out = setup.ok("requeue", &[&bad_key]);
    assert!(out.contains("1 record(s) back in the queue"), "{out}");
    let report = setup.report();
    assert_eq!(report["source"], "data_directory", "{report:#}");
    assert_eq!(
        (
            gl_count(&report, "pending"),
            gl_count(&report, "quarantined")
        ),
        (1, 0),
        "{report:#}"
    );
    assert_eq!(setup.keys(&["pending"]), vec![bad_key.clone()]);
    assert_eq!(
        place(&setup, bad),
        (rowid, queued_at),
        "its place in the line"
    );

    // Started again: quarantined again, never delivered; then dropped for good.
    let mut service = setup.serve();
    wait_warnings(&service, 1);
    setup.report_until("quarantined again after a restart", |r| {
        gl_count(r, "pending") == 0 && gl_count(r, "quarantined") == 1
    });
    let out = setup.ok("drop", &[&bad_key]);
    assert!(out.contains("dropped"), "{out}");
    let report = setup.report();
    assert_eq!(
        (
            gl_count(&report, "pending"),
            gl_count(&report, "quarantined")
        ),
        (0, 0),
        "{report:#}"
    );
    assert!(setup.keys(&["quarantined"]).is_empty());
    let out = setup.run("drop", &[&bad_key]);
    assert!(!out.status.success(), "dropped twice");
    let status = service.terminate();
    assert!(status.success(), "{status:?}\n{}", service.stderr());

    assert!(
        !codes_received(&platform).contains(bad),
        "the unreadable record reached the platform"
    );
    assert!(
        platform
            .received()
            .iter()
            .all(|(r, _)| !r.body.contains('\u{FFFD}')),
        "a document with a replacement character reached the platform"
    );
    setup.assert_sound("after the quarantined row was dropped");
}

/// A pending row whose `version` is text instead of a number is an item that cannot be read:
/// quarantined, and the other records are delivered. It must not keep the service from
/// starting.
#[test]
fn a_row_whose_version_is_not_a_number_is_quarantined_and_blocks_nothing() {
    quarantined_not_fatal("version", "UPDATE item SET version = 'v7' WHERE key = ?1");
}

/// A pending row whose `state` is not one of the state numbers cannot be read: quarantined
/// (so `status` shows it and the operator can requeue or drop it), the others delivered.
#[test]
fn a_row_whose_state_is_not_a_number_is_quarantined_and_blocks_nothing() {
    quarantined_not_fatal("state", "UPDATE item SET state = 'pending' WHERE key = ?1");
}

fn quarantined_not_fatal(column: &str, statement: &str) {
    let codes = codes("T", 12);
    let bad = "T005";
    let setup = stopped_queue(&codes);
    assert_eq!(sql(&setup, statement, bad), 1);

    // The store must open as the service opens it before anything can be quarantined.
    if let Err(e) = SqliteStore::open(&setup.data_dir(), Mode::Serve, 0) {
        panic!("D29: one row with a bad {column} keeps the whole queue from opening: {e}");
    }

    let platform = Receiver::start();
    setup.deliver_to(&platform.url());
    let mut service = setup.serve();
    let others: BTreeSet<String> = codes.iter().filter(|c| *c != bad).cloned().collect();
    assert!(
        platform.wait_for(PATIENCE, |_| codes_delivered(&platform)
            .is_superset(&others)),
        "{column}: the 11 readable records were not all delivered; delivered {:?}",
        codes_delivered(&platform)
    );
    // The row is met by the same read that found the others: quarantined by now, give or
    // take a status round trip.
    let mut report = setup.report();
    // Asserted below, with the other counts.
    crate::common::wait_for(Duration::from_secs(3), || {
        report = setup.report();
        gl_count(&report, "quarantined") == 1
    });
    let listed = setup.keys(&["quarantined"]);
    let status = service.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        !codes_received(&platform).contains(bad),
        "{column}: the unreadable record reached the platform"
    );
    assert_eq!(
        (
            gl_count(&report, "pending"),
            gl_count(&report, "quarantined"),
            listed
        ),
        (0, 1, vec![gl_key(bad)]),
        "D29: a row with a bad {column} is quarantined; report:\n{report:#}\nlog:\n{}",
        service.stderr()
    );
}

// ---------------------------------------------------------------------------------------
// 3. /readyz once the running service has met damage.

/// GETs `http://ADDR/path`: the status and the body.
fn get_text(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut r = agent.get(&format!("http://{addr}{path}")).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

/// A running service meets a damaged page: `/readyz` answers 503 naming the file and the
/// damage, and after the stop `check-store` reports it.
///
/// Deterministic because of what the service reads and writes: every record is parked as
/// rejected (the platform refused them all in a first run), so in the second run nothing
/// writes item pages (delivery finds nothing pending and reads only the `item_line` index; a
/// `/readyz` probe writes only the `meta` table). The damaged page, a leaf of the `item`
/// table, is therefore only in the main file, never in the WAL, and no checkpoint writes
/// over it; the start-up check read it before the damage, on the writer connection, which
/// never reads items for `status`. `status rejected` then reads every row of `item` on a
/// read connection, which reads the damaged page from the file.
#[test]
fn readyz_answers_503_once_the_running_service_met_damage() {
    let codes = codes("R", 120);
    let platform = Receiver::start();
    platform.answer(|_| (400, vec![], "record refused".into()));
    let setup = Setup::at(&platform.url());
    let mut service = setup.serve();
    for chunk in codes.chunks(100) {
        let records: Vec<Value> = chunk.iter().map(|c| gl(c)).collect();
        let r = service.post_records(GL_PATH, &records, Some(KEY));
        assert_eq!(r.status, 202, "{}", r.text);
    }
    setup.report_until("every record rejected", |r| {
        gl_count(r, "rejected") == 120 && gl_count(r, "pending") == 0
    });
    let status = service.terminate();
    assert!(status.success(), "{status:?}");
    setup.assert_sound("after the records were rejected");

    let layout = layout(&setup.file());
    let leaves: Vec<u32> = layout
        .btree
        .iter()
        .filter(|(_, tree, kind)| tree == "item" && *kind == 0x0d)
        .map(|(p, _, _)| *p)
        .collect();
    assert!(leaves.len() >= 3, "item leaves: {leaves:?}");
    let page = leaves[leaves.len() / 2];

    let mut service = setup.serve();
    let admin = service
        .admin_addr()
        .expect("the admin listener's address in the log");
    let (code, body) = get_text(admin, "/readyz");
    assert_eq!(code, 200, "before the damage: {body}");

    flip_page(&setup.file(), page);
    let listed = setup.run("status", &["rejected"]);
    // Readiness answers from the queue's last write while it is recent, and probes with a
    // write of its own at least every PROBE_EVERY (issue 46): the damage shows by then.
    let file = setup.file().display().to_string();
    let (mut code, mut body) = (0, String::new());
    let named = crate::common::wait_for(
        ap_intake::queue::recent::PROBE_EVERY + Duration::from_secs(5),
        || {
            (code, body) = get_text(admin, "/readyz");
            body.contains(&file) && body.contains("damaged") && body.contains("check-store")
        },
    );
    let exit = service.terminate();
    assert!(
        code == 503 && named,
        "D29: /readyz once the service met a damaged page (item leaf {page}): want 503 naming \
         {file}, the damage and check-store; got {code}: {body}\n`status rejected` said \
         {:?}: {}{}",
        listed.status,
        String::from_utf8_lossy(&listed.stdout),
        String::from_utf8_lossy(&listed.stderr)
    );
    assert_ne!(
        exit.code(),
        Some(101),
        "the service panicked:\n{}",
        service.stderr()
    );

    let wrong = reported("after the stop", &setup);
    assert!(wrong.is_empty(), "D29: check-store\n{}", wrong.join("\n"));
}
