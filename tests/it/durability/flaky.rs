//! The harness of the flush-failure tests (D40): `flaky_sync.c` built with the system's C
//! compiler, the real binary started under it, clients that remember every record answered
//! 202, the power cut, and the restart that must deliver them all.

use crate::common::process::{Service, bin, post, wait_exit};
use crate::common::receiver::{Receiver, gl_records};
use crate::common::{KEY, config_for, envelope};
use ap_intake::queue::sqlite::FILE_NAME;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";
/// Quick retries, so deliveries after the restart finish soon.
const DELIVERY: &str = "[delivery]\nbackoff_base_ms = 20\nbackoff_cap_ms = 200\n";
/// How long the restarted service may take to deliver what was acknowledged.
const DELIVERED_WITHIN: Duration = Duration::from_secs(90);

/// The shim and the power-cut program, built once per test process.
pub struct Shim {
    lib: PathBuf,
    power_cut: PathBuf,
}

/// The shim, or `None` (the test says it is skipped) without a C compiler.
pub fn shim() -> Option<&'static Shim> {
    static SHIM: OnceLock<Option<Shim>> = OnceLock::new();
    SHIM.get_or_init(build).as_ref().or_else(|| {
        crate::openapi::skip_without("a C compiler (cc) to build the flush-failure shim");
        None
    })
}

fn build() -> Option<Shim> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/durability/flaky_sync.c");
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("flaky-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shim = Shim {
        lib: dir.join("libflaky_sync.so"),
        power_cut: dir.join("power_cut"),
    };
    let cc = |args: &[&str], out: &Path| {
        Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(out)
            .args(args)
            .arg(&src)
            .args(["-ldl", "-lpthread"])
            .status()
    };
    match cc(&["-shared", "-fPIC"], &shim.lib) {
        Err(_) => return None, // no compiler
        Ok(s) => assert!(s.success(), "cc could not build the shim"),
    }
    assert!(
        cc(&["-DPOWER_CUT"], &shim.power_cut).unwrap().success(),
        "cc: power_cut"
    );
    Some(shim)
}

/// One trial: a data directory, the platform, the shim's log and control file.
pub struct Trial {
    shim: &'static Shim,
    dir: tempfile::TempDir,
    pub platform: Receiver,
    generation: AtomicU64,
}

impl Trial {
    pub fn new(shim: &'static Shim) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let platform = Receiver::start();
        let config = config_for(&dir.path().join("data"), "", &platform.url(), DELIVERY);
        std::fs::write(dir.path().join("c.toml"), config).unwrap();
        let trial = Self {
            shim,
            dir,
            platform,
            generation: AtomicU64::new(0),
        };
        trial.arm("none");
        trial
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self) -> Command {
        let mut cmd = bin();
        cmd.args(["serve", "--config"])
            .arg(self.dir.path().join("c.toml"))
            .current_dir(self.dir.path());
        cmd
    }

    /// `serve` on a disk whose flushes fail as the control file says.
    pub fn flaky_command(&self) -> Command {
        let mut cmd = self.command();
        cmd.env("LD_PRELOAD", &self.shim.lib)
            .env("FLAKY_SYNC_FILES", self.data().join(FILE_NAME))
            .env("FLAKY_SYNC_LOG", self.dir.path().join("flaky.log"))
            .env("FLAKY_SYNC_CONTROL", self.dir.path().join("flaky.control"));
        cmd
    }

    /// The service started with [`Trial::flaky_command`].
    pub fn start_flaky(&self) -> Service {
        Service::spawn(self.flaky_command())
    }

    /// Sets the shim's rule (`none`, `once wal-fsync`, `random 0.05 SEED`, ...), afresh.
    pub fn arm(&self, rule: &str) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let control = self.dir.path().join("flaky.control");
        let tmp = control.with_extension("new");
        std::fs::write(&tmp, format!("{generation} {rule}\n")).unwrap();
        std::fs::rename(tmp, control).unwrap();
    }

    /// What a power cut leaves of the files now: every page not durably flushed gets its
    /// last flushed content back (the shared-memory index goes too: SQLite rebuilds it).
    pub fn power_cut(&self) -> String {
        let out = Command::new(&self.shim.power_cut)
            .arg(self.dir.path().join("flaky.log"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "power_cut: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(self.data().join(format!("{FILE_NAME}-shm")));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Starts the service on a sound disk after the power cut and waits until the platform
    /// has every acknowledged record; the codes never delivered otherwise. Panics when the
    /// service does not start (a damaged store, exit 74).
    pub fn restart_and_deliver(&self, acked: &BTreeSet<String>) -> Vec<String> {
        let service = Service::try_spawn(self.command()).unwrap_or_else(|stderr| {
            panic!("the service does not start after the power cut:\n{stderr}")
        });
        let missing = || -> Vec<String> {
            let delivered = delivered_codes(&self.platform);
            acked
                .iter()
                .filter(|c| !delivered.contains(*c))
                .cloned()
                .collect()
        };
        crate::common::wait_for(DELIVERED_WITHIN, || missing().is_empty());
        service.kill_9();
        missing()
    }
}

/// Every GL code the platform received.
fn delivered_codes(platform: &Receiver) -> BTreeSet<String> {
    platform
        .delivered()
        .iter()
        .flat_map(|doc| gl_records(&doc.body))
        .map(|(code, _)| code)
        .collect()
}

/// Four clients sending new numbered GL codes, ten a request, to wherever the service
/// listens now; they remember every code answered 202.
pub struct Load {
    addr: Arc<Mutex<SocketAddr>>,
    pub acked: Arc<Mutex<BTreeSet<String>>>,
    /// 503s whose message says a flush failed (D40).
    pub flush_refusals: Arc<AtomicU64>,
    /// Requests whose connection was taken in and then closed or reset without an answer
    /// (a refused connection is no such request): when (ms since the load started) and the
    /// error.
    pub cut: Arc<Mutex<Vec<String>>>,
    /// When the load started: the clock of `cut`.
    pub started: std::time::Instant,
    /// Milliseconds each client waits between requests (0: as fast as answered).
    pause_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(addr: SocketAddr, clients: usize) -> Self {
        let mut load = Self {
            addr: Arc::new(Mutex::new(addr)),
            acked: Arc::default(),
            flush_refusals: Arc::default(),
            cut: Arc::default(),
            started: std::time::Instant::now(),
            pause_ms: Arc::default(),
            stop: Arc::default(),
            clients: Vec::new(),
        };
        load.clients = (0..clients).map(|c| load.client(c)).collect();
        load
    }

    fn client(&self, c: usize) -> std::thread::JoinHandle<()> {
        let (addr, acked, refusals, cut) = (
            Arc::clone(&self.addr),
            Arc::clone(&self.acked),
            Arc::clone(&self.flush_refusals),
            Arc::clone(&self.cut),
        );
        let (pause, stop) = (Arc::clone(&self.pause_ms), Arc::clone(&self.stop));
        let started = self.started;
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let codes: Vec<String> = (n..n + 10).map(|i| format!("F{c}-{i:07}")).collect();
                n += 10;
                let records: Vec<Value> = codes
                    .iter()
                    .map(|code| json!({"code": code, "type": "VAT", "description_en": format!("flush trial {code}")}))
                    .collect();
                let at = *addr.lock().unwrap();
                let r = post(at, GL, &envelope(&records).to_string(), Some(KEY));
                match r.status {
                    202 => acked.lock().unwrap().extend(codes),
                    503 if r.text.contains("flush") => {
                        refusals.fetch_add(1, Ordering::Relaxed);
                    }
                    0 if !r.text.contains("Connection refused") => {
                        let at = started.elapsed().as_millis();
                        cut.lock().unwrap().push(format!("{at} ms: {}", r.text));
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    // Stopping or stopped: nothing acknowledged, try again shortly.
                    0 | 503 => std::thread::sleep(Duration::from_millis(20)),
                    s => panic!("unexpected answer {s}: {}", r.text),
                }
                std::thread::sleep(Duration::from_millis(pause.load(Ordering::Relaxed)));
            }
        })
    }

    /// Points the clients at a restarted service.
    pub fn redirect(&self, addr: SocketAddr) {
        *self.addr.lock().unwrap() = addr;
    }

    pub fn pace(&self, pause: Duration) {
        self.pause_ms
            .store(pause.as_millis() as u64, Ordering::Relaxed);
    }

    pub fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops the clients; every code answered 202.
    pub fn stop(self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.join().expect("a client saw an unexpected answer");
        }
        std::mem::take(&mut *self.acked.lock().unwrap())
    }
}

/// Waits up to `within` for the service to exit on its own: its status, or `None` while it
/// still runs.
pub fn exited(service: &mut Service, within: Duration) -> Option<ExitStatus> {
    wait_exit(&mut service.child, within)
}
