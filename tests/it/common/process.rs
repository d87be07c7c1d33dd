//! The real `ap-intake` binary as a child process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary, unaffected by an `AP_INTAKE_CONFIG` in the test's environment.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ap-intake"));
    // The config, the log filter and journald come from each test, not from the environment.
    c.env_remove("AP_INTAKE_CONFIG")
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM");
    c
}

/// A running `ap-intake serve`, killed when dropped.
pub struct Service {
    pub child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Service {
    /// Starts `serve --config FILE` in `cwd` and waits for its "listening" log line.
    pub fn start(config: &Path, cwd: &Path) -> Self {
        let mut cmd = bin();
        cmd.args(["serve", "--config"]).arg(config).current_dir(cwd);
        Self::spawn(cmd)
    }

    /// Runs `cmd` (an `ap-intake serve ...`) and waits for its "listening" log line.
    pub fn spawn(cmd: Command) -> Self {
        Self::try_spawn(cmd)
            .unwrap_or_else(|stderr| panic!("the service exited before listening:\n{stderr}"))
    }

    /// [`Service::spawn`], or what the service wrote before it exited without listening.
    pub fn try_spawn(mut cmd: Command) -> Result<Self, String> {
        let mut child = cmd
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = Arc::default();
        let addr = try_listening(&mut child, Arc::clone(&stderr))?;
        Ok(Self {
            child,
            addr,
            stderr,
        })
    }

    /// Everything the service wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// POSTs the envelope around `records`.
    pub fn post_records(
        &self,
        path: &str,
        records: &[serde_json::Value],
        key: Option<&str>,
    ) -> super::Reply {
        post(self.addr, path, &super::envelope(records).to_string(), key)
    }

    /// SIGTERM, then waits (up to 20 s) for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("-TERM")
    }

    /// Sends a signal (`-TERM`, `-INT`), then waits (up to 20 s) for the exit status.
    pub fn signal(&mut self, signal: &str) -> ExitStatus {
        Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        wait_exit(&mut self.child, Duration::from_secs(20))
            .expect("no exit within 20 s of the signal")
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits up to `within` for `child` to exit; `None` while it still runs.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let mut status = None;
    super::wait_for(within, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status
}

/// Reads the child's stderr until it logs where it listens (`listen=ADDR` in text logs,
/// `"listen":"ADDR"` in JSON ones); panics with its output if it exits.
pub fn wait_listening(child: &mut Child) -> SocketAddr {
    wait_listening_into(child, Arc::default())
}

fn listen_addr(line: &str) -> Option<String> {
    let rest = line
        .split("listen=")
        .nth(1)
        .or_else(|| line.split("\"listen\":\"").nth(1))?;
    Some(rest.split([' ', '"']).next().unwrap_or("").to_string())
}

fn wait_listening_into(child: &mut Child, seen: Arc<Mutex<String>>) -> SocketAddr {
    try_listening(child, seen)
        .unwrap_or_else(|stderr| panic!("the service exited before listening:\n{stderr}"))
}

/// The address the child listens on, or its stderr when it exits first.
fn try_listening(child: &mut Child, seen: Arc<Mutex<String>>) -> Result<SocketAddr, String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = listen_addr(&line) {
                let _ = tx.send(Ok(addr));
            }
            let mut s = seen.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
        let all = seen.lock().unwrap().clone();
        let _ = tx.send(Err(all)); // the service exited
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(addr)) => Ok(addr.parse().unwrap()),
        Ok(Err(stderr)) => Err(stderr),
        Err(_) => panic!("the service did not log where it listens within 30 s"),
    }
}

/// POSTs JSON to a service; status 0 when the connection failed.
pub fn post(addr: SocketAddr, path: &str, body: &str, key: Option<&str>) -> super::Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut req = agent
        .post(&format!("http://{addr}{path}"))
        .header("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    match req.send(body) {
        Ok(mut r) => super::reply_of(&mut r),
        Err(e) => super::Reply {
            status: 0,
            headers: vec![],
            text: e.to_string(),
        },
    }
}

impl Service {
    /// The admin listener's address (`/healthz`), from the service's log line
    /// `admin listener: ... admin=ADDR` (logged at info, before it listens).
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        let stderr = self.stderr();
        let line = stderr.lines().find(|l| l.contains("admin listener"))?;
        let rest = line.split("admin=").nth(1)?;
        rest.split([' ', '"', ',']).next()?.parse().ok()
    }

    /// A memory field of the service's `/proc/<pid>/status` (`VmRSS`, `VmHWM`) in bytes.
    pub fn memory(&self, field: &str) -> u64 {
        proc_status_bytes(self.child.id(), field)
    }

    /// Sets the service's peak resident memory (VmHWM) back to its current resident memory
    /// (`/proc/<pid>/clear_refs`, Linux 4.0 and later).
    pub fn reset_peak_memory(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5")
            .expect("write /proc/<pid>/clear_refs");
    }

    /// Whether the process is still running (not exited, not killed).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// A memory field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, ...) in bytes; 0 if absent.
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// GETs `http://ADDR/path`: the status (0 when the connection failed) and how long it took.
pub fn get(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let started = Instant::now();
    let status = match agent.get(&format!("http://{addr}{path}")).call() {
        Ok(mut r) => {
            let _ = r.body_mut().read_to_string();
            r.status().as_u16()
        }
        Err(_) => 0,
    };
    (status, started.elapsed())
}
