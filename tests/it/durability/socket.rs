//! Where the admin socket lives (D37), with the real binary: at `[admin] socket` (its parent
//! directories created), else `$RUNTIME_DIRECTORY/admin.sock` (systemd's RuntimeDirectory=),
//! else `<data_dir>/admin.sock`; owner-only (0600); and `ap-intake status --config FILE` finds
//! the running service through it.

use crate::common::process::{bin, wait_exit, wait_listening};
use crate::common::{config_text, wait_for};
use serde_json::Value;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The environment of a command: with `RUNTIME_DIRECTORY` set to a directory, or without it
/// (whatever the test's own environment holds).
fn with_runtime(cmd: &mut Command, runtime: Option<&Path>) {
    match runtime {
        Some(dir) => cmd.env("RUNTIME_DIRECTORY", dir),
        None => cmd.env_remove("RUNTIME_DIRECTORY"),
    };
}

/// `ap-intake serve --config FILE`, killed when dropped.
struct Serving {
    child: Child,
}

impl Serving {
    fn start(config: &Path, cwd: &Path, runtime: Option<&Path>) -> Self {
        let mut cmd = bin();
        cmd.args(["serve", "--config"])
            .arg(config)
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        with_runtime(&mut cmd, runtime);
        let mut s = Self {
            child: cmd.spawn().unwrap(),
        };
        wait_listening(&mut s.child);
        s
    }

    /// SIGTERM; the exit must be clean.
    fn stop(mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = wait_exit(&mut self.child, Duration::from_secs(20))
            .expect("an exit within 20 s of SIGTERM");
        assert!(status.success(), "exit after SIGTERM: {status:?}");
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ap-intake status --config FILE --json`, which must succeed, parsed.
fn status(config: &Path, cwd: &Path, runtime: Option<&Path>) -> Value {
    let mut cmd = bin();
    cmd.arg("status")
        .arg("--config")
        .arg(config)
        .arg("--json")
        .current_dir(cwd);
    with_runtime(&mut cmd, runtime);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "status failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `path` is a Unix socket only its owner may use (0600).
fn assert_owner_only_socket(path: &Path) {
    // The service creates it before it listens; allow a moment all the same.
    wait_for(Duration::from_secs(5), || path.exists());
    let meta = std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("D37: no admin socket at {}: {e}", path.display()));
    assert!(
        meta.file_type().is_socket(),
        "{} is not a socket: {:?}",
        path.display(),
        meta.file_type()
    );
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "the admin socket {} is mode {:o}, not 0600",
        path.display(),
        meta.permissions().mode() & 0o777
    );
}

fn assert_absent(path: &Path, why: &str) {
    assert!(
        std::fs::symlink_metadata(path).is_err(),
        "{} exists: {why}",
        path.display()
    );
}

/// A temp dir with the config file `ap-intake.toml` and the data directory `data/`.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Setup {
    /// `admin` lines go into the `[admin]` table.
    fn new(admin: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ap-intake.toml");
        std::fs::write(&config, config_text(&dir.path().join("data"), "", admin)).unwrap();
        Self { dir, config }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn serve(&self, runtime: Option<&Path>) -> Serving {
        Serving::start(&self.config, self.dir.path(), runtime)
    }

    fn status(&self, runtime: Option<&Path>) -> Value {
        status(&self.config, self.dir.path(), runtime)
    }
}

/// `[admin] socket` names the socket's place: its missing parent directories are created, it
/// wins over `RUNTIME_DIRECTORY`, and `status` finds the service there whether or not the
/// operator's shell has `RUNTIME_DIRECTORY`.
#[test]
fn configured_admin_socket_is_created_there_and_status_finds_the_service_d37() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sockets/nested/ap-intake.sock");
    let setup = Setup::new(&format!("socket = \"{}\"\n", socket.display()));
    let runtime = setup.path("runtime");
    std::fs::create_dir(&runtime).unwrap();

    let service = setup.serve(Some(&runtime));
    assert_owner_only_socket(&socket);
    assert_absent(
        &runtime.join("admin.sock"),
        "[admin] socket is set, so RUNTIME_DIRECTORY is not used",
    );
    assert_absent(
        &setup.path("data/admin.sock"),
        "[admin] socket is set, so the data directory holds no socket",
    );
    for runtime in [Some(runtime.as_path()), None] {
        let report = setup.status(runtime);
        assert_eq!(
            report["source"],
            "service",
            "status (RUNTIME_DIRECTORY {runtime:?}) did not reach the service through {}: \
             {report:#}",
            socket.display()
        );
    }
    service.stop();
}

/// Without `[admin] socket`, a service given `RUNTIME_DIRECTORY` (systemd's
/// `RuntimeDirectory=ap-intake`) puts its socket there, and `status` run with the same
/// variable finds it.
#[test]
fn runtime_directory_holds_the_admin_socket_when_none_is_configured_d37() {
    let setup = Setup::new("");
    let runtime = setup.path("run/ap-intake");
    std::fs::create_dir_all(&runtime).unwrap();

    let service = setup.serve(Some(&runtime));
    assert_owner_only_socket(&runtime.join("admin.sock"));
    assert_absent(
        &setup.path("data/admin.sock"),
        "under RUNTIME_DIRECTORY the socket is not in the data directory",
    );
    let report = setup.status(Some(&runtime));
    assert_eq!(report["source"], "service", "{report:#}");
    service.stop();
}

/// Neither `[admin] socket` nor `RUNTIME_DIRECTORY`: the socket is `<data_dir>/admin.sock`.
#[test]
fn data_dir_holds_the_admin_socket_by_default_d37() {
    let setup = Setup::new("");
    let service = setup.serve(None);
    assert_owner_only_socket(&setup.path("data/admin.sock"));
    let report = setup.status(None);
    assert_eq!(report["source"], "service", "{report:#}");
    service.stop();
}
