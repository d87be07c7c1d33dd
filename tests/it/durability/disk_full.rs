//! A filesystem that fills (D30), with the real binary and its data directory on a small tmpfs
//! the test mounts: below `[storage] min_free_bytes`, and when the disk itself is full (SQLite
//! meets ENOSPC), intake answers 503 with Retry-After and `storage is full: <detail>`, nothing
//! answered 503 is in the queue or reaches the platform, everything answered 202 is queued or
//! delivered, deliveries go on while intake is refused, and when space returns intake and
//! `/readyz` recover by themselves within 30 s, without a restart.
//!
//! Mounting needs root (CAP_SYS_ADMIN); without it the tests say why they are skipped and pass.

use crate::common::Items;
use crate::common::process::{Service, bin, post};
use crate::common::receiver::{Receiver, gl_records, ok};
use crate::common::{KEY, Reply, config_for, envelope, reopen};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;
const GL: &str = "/general-ledger-codes/v1";
/// Quick retries, so deliveries resume within a fraction of a second.
const DELIVERY: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 200\ntimeout_secs = 5\n";
/// D30: intake recovers by itself within this long after space returns.
const RECOVERY: Duration = Duration::from_secs(30);
/// How long a poll waits for the service to get somewhere.
const PATIENCE: Duration = Duration::from_secs(20);
/// Records per request: far below the writer's 250 records per transaction, so a request is
/// stored in one transaction or not at all.
const RECORDS: usize = 10;
/// Length of each record's description (the schema allows 4,000); the XML also carries it in
/// three fallback fields, so a record takes about 16 KB in the queue.
const DESCRIPTION: usize = 3_900;

/// A tmpfs mounted on a temp dir; unmounted (lazily if need be) when dropped.
pub(super) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB, or says why it cannot.
    fn mount(mib: u64) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run `mount`: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`mount -t tmpfs -o size={mib}m tmpfs {}` failed ({}): {}",
                dir.path().display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        let fs = Self { dir };
        let total = total_bytes(fs.path());
        assert!(
            total <= mib * MIB,
            "the mount at {} is {total} bytes, not a {mib} MiB tmpfs",
            fs.path().display()
        );
        Ok(fs)
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Mounts the tmpfs of a test, or prints (past the test harness's capture) why the test is
/// skipped.
pub(super) fn tmpfs_or_skip(test: &str, mib: u64) -> Option<Tmpfs> {
    match Tmpfs::mount(mib) {
        Ok(fs) => Some(fs),
        Err(why) => {
            crate::common::skip::skip(&format!(
                "{test} needs a small filesystem for the data directory and cannot mount one: \
                 {why} (run the tests as root, as CI does)"
            ));
            None
        }
    }
}

/// Bytes available to unprivileged writers on the filesystem of `dir` (what the service sees).
fn free_bytes(dir: &Path) -> u64 {
    let s = rustix::fs::statvfs(dir).unwrap();
    s.f_bavail * s.f_frsize
}

fn total_bytes(dir: &Path) -> u64 {
    let s = rustix::fs::statvfs(dir).unwrap();
    s.f_blocks * s.f_frsize
}

fn no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28)
}

/// A file that takes the filesystem's space away from the service.
struct Filler {
    path: PathBuf,
    file: Option<File>,
}

impl Filler {
    fn new(path: PathBuf) -> Self {
        let file = File::create(&path).unwrap();
        Self {
            path,
            file: Some(file),
        }
    }

    fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("the filler was removed")
    }

    /// Grows the filler until at most `target` bytes are free.
    fn fill_until_free(&mut self, target: u64) {
        let dir = self.path.parent().unwrap().to_path_buf();
        let chunk = vec![0xA5u8; MIB as usize];
        loop {
            let free = free_bytes(&dir);
            if free <= target {
                break;
            }
            let n = (free - target).min(MIB) as usize;
            self.file().write_all(&chunk[..n]).unwrap();
        }
        self.file().sync_all().unwrap();
    }

    /// Grows the filler until the filesystem refuses another byte (ENOSPC).
    fn fill_completely(&mut self) {
        for size in [MIB as usize, 64 * 1024, 4096, 1] {
            let chunk = vec![0xA5u8; size];
            loop {
                match self.file().write(&chunk) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if no_space(&e) => break,
                    Err(e) => panic!("writing the filler {}: {e}", self.path.display()),
                }
            }
        }
        let _ = self.file().sync_all();
    }

    /// Deletes the filler: its space returns.
    fn remove(&mut self) {
        self.file = None;
        std::fs::remove_file(&self.path).unwrap();
    }
}

/// GL-code records whose description starts with the code (about 16 KB each once queued).
fn gl(code: &str) -> Value {
    json!({
        "code": code,
        "type": "VAT",
        "description_en": format!("{code} {}", "x".repeat(DESCRIPTION)),
    })
}

/// What every request got: the codes answered 202 and those answered 503.
#[derive(Default)]
struct Ledger {
    accepted: BTreeSet<String>,
    refused: BTreeSet<String>,
    next: usize,
}

impl Ledger {
    /// POSTs [`RECORDS`] GL codes never sent before and files them by the answer, which must
    /// be 202 or 503.
    fn send(&mut self, addr: SocketAddr, prefix: &str) -> Reply {
        let codes: Vec<String> = (0..RECORDS)
            .map(|i| format!("{prefix}-{}-{i}", self.next))
            .collect();
        self.next += 1;
        let records: Vec<Value> = codes.iter().map(|c| gl(c)).collect();
        let r = post(addr, GL, &envelope(&records).to_string(), Some(KEY));
        match r.status {
            202 => self.accepted.extend(codes),
            503 => self.refused.extend(codes),
            s => panic!("expected 202 or 503, got {s}: {}", r.text),
        }
        r
    }

    /// After the service stopped cleanly: no code answered 503 is queued or reached the
    /// platform (nothing unstored is reported queued, D17, D30); every code answered 202 is
    /// queued or was delivered.
    fn check(&self, data_dir: &Path, platform: &Receiver) {
        let queued: BTreeSet<String> = reopen(data_dir)
            .items()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        let received: BTreeSet<String> = platform
            .received()
            .iter()
            .flat_map(|(r, _)| gl_records(&r.body))
            .map(|(code, _)| code)
            .collect();
        let delivered = delivered_codes(platform);
        let key = |code: &str| format!("gl-code:main/{code}");
        let stored_refused: Vec<&String> = self
            .refused
            .iter()
            .filter(|c| queued.contains(&key(c)) || received.contains(*c))
            .collect();
        assert!(
            stored_refused.is_empty(),
            "answered 503 yet queued or sent to the platform: {stored_refused:?}"
        );
        let lost: Vec<&String> = self
            .accepted
            .iter()
            .filter(|c| !queued.contains(&key(c)) && !delivered.contains(*c))
            .collect();
        assert!(
            lost.is_empty(),
            "answered 202 yet neither queued nor delivered: {lost:?}"
        );
    }
}

/// The codes the platform received in documents it answered 2xx.
fn delivered_codes(platform: &Receiver) -> BTreeSet<String> {
    platform
        .delivered()
        .iter()
        .flat_map(|r| gl_records(&r.body))
        .map(|(code, _)| code)
        .collect()
}

/// A 503 as D30 words it: Retry-After, and `storage is full: <detail>`; the message, returned.
fn assert_storage_full(r: &Reply) -> String {
    assert_eq!(r.status, 503, "{}", r.text);
    let retry = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("a 503 without Retry-After: {:?}", r.headers));
    assert!(
        retry.parse::<u64>().is_ok_and(|s| s >= 1),
        "Retry-After {retry:?} is not a number of seconds"
    );
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{}", r.text);
    assert!(
        body["succeeded"].as_u64().unwrap_or(0) == 0,
        "a 503 reports records queued: {}",
        r.text
    );
    let message = body["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.starts_with("storage is full: "),
        "D30: the 503 for a full disk says `storage is full: <detail>`; got {message:?}"
    );
    message
}

/// GET on the admin listener: status and JSON body.
fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut r = agent.get(&format!("http://{addr}{path}")).call().unwrap();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (r.status().as_u16(), body)
}

/// Polls `/readyz` until it answers 200; how long that took from `since`.
fn wait_ready(admin: SocketAddr, since: Instant) -> Duration {
    loop {
        let (status, body) = get_json(admin, "/readyz");
        if status == 200 {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < RECOVERY,
            "D30: /readyz still {status} {body} {} s after space returned",
            RECOVERY.as_secs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// POSTs new records until one request is answered 202; how long that took from `since`.
fn wait_intake(ledger: &mut Ledger, addr: SocketAddr, prefix: &str, since: Instant) -> Duration {
    loop {
        let r = ledger.send(addr, prefix);
        if r.status == 202 {
            return since.elapsed();
        }
        assert_storage_full(&r);
        assert!(
            since.elapsed() < RECOVERY,
            "D30: intake still refused {} s after space returned, without a restart: {}",
            RECOVERY.as_secs(),
            r.text
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Pending records of the GL interface, from `status --json` over the admin socket.
fn gl_pending(config: &Path) -> u64 {
    let out = bin()
        .arg("status")
        .arg("--config")
        .arg(config)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["interface"] == "general-ledger-codes-v1")
        .and_then(|i| i["pending"].as_u64())
        .unwrap_or_else(|| panic!("no GL pending count in {report:#}"))
}

/// The config of a service on `fs` (data in `fs/data`) keeping `min_free` bytes free.
fn write_config(fs: &Tmpfs, config: &Path, platform: &Receiver, min_free: u64) -> PathBuf {
    let data_dir = fs.path().join("data");
    let text = config_for(&data_dir, "", &platform.url(), DELIVERY);
    let with = text.replacen(
        "[storage]\n",
        &format!("[storage]\nmin_free_bytes = {min_free}\n"),
        1,
    );
    assert_ne!(with, text, "the harness config has a [storage] table");
    std::fs::write(config, with).unwrap();
    data_dir
}

/// Path 1: the free-space rule refuses before the disk is full. Records queued while the
/// platform was down are delivered (and leave the queue) while intake is refused; once the
/// filler is deleted, intake and `/readyz` recover by themselves.
#[test]
fn below_min_free_bytes_intake_is_refused_delivery_runs_on_and_intake_recovers_d30() {
    let Some(fs) = tmpfs_or_skip("disk_full::below_min_free_bytes", 48) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("ap-intake.toml");
    let platform = Receiver::start();
    platform.answer(|_| (503, vec![], "platform down".into()));
    let data_dir = write_config(&fs, &config, &platform, 16 * MIB);
    let mut svc = Service::start(&config, work.path());
    let admin = svc.admin_addr().expect("the admin listener's address");
    let mut ledger = Ledger::default();

    // Room to spare: queued, held back by the platform.
    for _ in 0..3 {
        let r = ledger.send(svc.addr, "before");
        assert_eq!(r.status, 202, "{}", r.text);
    }
    let queued_before = ledger.accepted.clone();
    assert_eq!(get_json(admin, "/readyz").0, 200);

    // 8 MiB free, less than the 16 MiB minimum, though far from full.
    let mut filler = Filler::new(fs.path().join("filler"));
    filler.fill_until_free(8 * MIB);
    let free = free_bytes(fs.path());
    assert!(
        free > 4 * MIB && free < 16 * MIB,
        "free after filling: {free}"
    );
    for _ in 0..3 {
        let r = ledger.send(svc.addr, "below");
        let message = assert_storage_full(&r);
        assert!(
            message.contains("min_free_bytes"),
            "the detail names the setting that refused: {message:?}"
        );
    }
    let (status, body) = get_json(admin, "/readyz");
    assert_eq!(status, 503, "/readyz below the minimum: {body}");
    assert!(
        body["storage"]
            .as_str()
            .is_some_and(|s| s.starts_with("storage is full: ")),
        "/readyz names the full storage: {body}"
    );

    // The platform comes back: what was queued is delivered and leaves the queue while intake
    // is still refused.
    platform.answer(|_| ok());
    assert!(
        platform.wait_for(PATIENCE, |_| delivered_codes(&platform)
            .is_superset(&queued_before)),
        "records queued before the disk filled were not delivered while intake was refused; \
         delivered: {:?}",
        delivered_codes(&platform)
    );
    crate::common::eventually(
        "delivered records leave the queue while intake is refused",
        PATIENCE,
        || gl_pending(&config) == 0,
    );
    let r = ledger.send(svc.addr, "still-below");
    assert_storage_full(&r);

    // Space returns: intake and /readyz recover by themselves.
    filler.remove();
    let freed = Instant::now();
    let took = wait_intake(&mut ledger, svc.addr, "after", freed);
    eprintln!("intake accepted again {took:?} after space returned");
    wait_ready(admin, freed);
    assert!(
        platform.wait_for(PATIENCE, |_| delivered_codes(&platform)
            .is_superset(&ledger.accepted)),
        "records accepted after recovery were not delivered"
    );

    let exit = svc.terminate();
    assert!(
        exit.success(),
        "exit after SIGTERM: {exit:?}\n{}",
        svc.stderr()
    );
    ledger.check(&data_dir, &platform);
    assert!(!ledger.refused.is_empty() && ledger.accepted.len() > queued_before.len());
}

/// Path 2: no minimum, and the disk filled to the last byte, so SQLite itself meets ENOSPC
/// (SQLITE_FULL). The platform is down meanwhile, so nothing leaves the queue to make room.
/// After the filler is deleted, intake and `/readyz` work again without a restart, and every
/// acknowledged record reaches the platform.
#[test]
fn when_the_disk_itself_fills_intake_is_refused_and_recovers_without_restart_d30() {
    let Some(fs) = tmpfs_or_skip("disk_full::when_the_disk_itself_fills", 48) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("ap-intake.toml");
    let platform = Receiver::start();
    platform.answer(|_| (503, vec![], "platform down".into()));
    let data_dir = write_config(&fs, &config, &platform, 0);
    let mut svc = Service::start(&config, work.path());
    let admin = svc.admin_addr().expect("the admin listener's address");
    let mut ledger = Ledger::default();

    for _ in 0..2 {
        let r = ledger.send(svc.addr, "before");
        assert_eq!(r.status, 202, "{}", r.text);
    }

    // Not one byte left. SQLite may still reuse space its files already hold, so requests
    // go on until one needs more; the filler takes back whatever is freed before each one.
    let mut filler = Filler::new(fs.path().join("filler"));
    let mut messages = Vec::new();
    for _ in 0..60 {
        filler.fill_completely();
        let r = ledger.send(svc.addr, "full");
        if r.status == 503 {
            messages.push(assert_storage_full(&r));
            if messages.len() == 3 {
                break;
            }
        }
    }
    assert!(
        !messages.is_empty(),
        "60 requests of about 160 KB each were all accepted on a full 48 MiB filesystem"
    );
    for m in &messages {
        assert!(
            !m.contains("min_free_bytes"),
            "with min_free_bytes = 0 the refusal comes from the full disk: {m:?}"
        );
    }
    eprintln!(
        "full disk: {} accepted, {} refused; {:?}; /readyz {:?}",
        ledger.accepted.len(),
        ledger.refused.len(),
        messages[0],
        get_json(admin, "/readyz")
    );

    // Space returns: intake and /readyz recover, no restart.
    filler.remove();
    let freed = Instant::now();
    let took = wait_intake(&mut ledger, svc.addr, "after", freed);
    eprintln!("intake accepted again {took:?} after space returned");
    wait_ready(admin, freed);
    assert!(svc.is_running(), "the service is still the same process");

    // The platform comes back: every acknowledged record reaches it.
    platform.answer(|_| ok());
    assert!(
        platform.wait_for(RECOVERY, |_| delivered_codes(&platform)
            .is_superset(&ledger.accepted)),
        "acknowledged records not delivered after the disk was full: {:?}",
        ledger
            .accepted
            .difference(&delivered_codes(&platform))
            .collect::<Vec<_>>()
    );

    let exit = svc.terminate();
    assert!(
        exit.success(),
        "exit after SIGTERM: {exit:?}\n{}",
        svc.stderr()
    );
    ledger.check(&data_dir, &platform);
}
