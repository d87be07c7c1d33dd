//! D36 logs, on the real binary: under journald (`JOURNAL_STREAM` set) every stderr line
//! starts with its syslog priority and text lines carry no timestamp of their own; without it
//! lines keep their timestamp. `[log] requests` decides which requests get a line of their
//! own; all of them are counted for the summary line (the last one is written at shutdown,
//! so no test waits a minute; the per-minute task is unit-tested in `src/telemetry.rs`).

use crate::common;
use common::process::{bin, post, wait_exit};
use common::*;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const GL: &str = "/general-ledger-codes/v1";

/// A valid GL code (202).
fn gl_body() -> String {
    envelope(&[serde_json::json!({
        "code": "4000", "type": "DEDUCTABLE", "description_en": "Office supplies"
    })])
    .to_string()
}

/// A sandbox (so one warning at start) on a free port, with `log` lines added to `[log]` and
/// `storage` lines to `[storage]`.
fn config(dir: &Path, log: &str, storage: &str) -> std::path::PathBuf {
    let text = format!(
        "sandbox = true\n[server]\nlisten = \"127.0.0.1:0\"\n[storage]\ndata_dir = \"{}\"\n{storage}\n[admin]\nlisten = \"\"\n[log]\n{log}\n",
        dir.join("data").display()
    );
    let file = dir.join("c.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn listen_addr(line: &str) -> Option<SocketAddr> {
    let rest = line
        .split("listen=")
        .nth(1)
        .or_else(|| line.split("\"listen\":\"").nth(1))?;
    rest.split([' ', '"']).next()?.parse().ok()
}

/// Runs `serve` (under journald when `journald`), calls `traffic` with its address once it
/// listens, stops it with SIGTERM and returns every line it wrote to stderr.
fn run(config: &Path, journald: bool, traffic: impl FnOnce(SocketAddr)) -> Vec<String> {
    let mut cmd = bin();
    cmd.args(["serve", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if journald {
        cmd.env("JOURNAL_STREAM", "8:12345");
    } else {
        cmd.env_remove("JOURNAL_STREAM");
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = listen_addr(&line) {
                let _ = tx.send(addr);
            }
            lines.push(line);
        }
        lines
    });
    let addr = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => addr,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the service did not listen:\n{}",
                reader.join().unwrap().join("\n")
            );
        }
    };
    traffic(addr);
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let Some(status) = wait_exit(&mut child, Duration::from_secs(20)) else {
        let _ = child.kill();
        panic!("no exit within 20 s of SIGTERM");
    };
    let lines = reader.join().unwrap();
    assert!(status.success(), "{status:?}\n{}", lines.join("\n"));
    lines
}

/// `<N>` at the start of a line, and the rest.
fn priority(line: &str) -> Option<(u8, &str)> {
    let rest = line.strip_prefix('<')?;
    let (n, rest) = rest.split_once('>')?;
    Some((n.parse().ok()?, rest))
}

/// Whether `text` starts (after blanks) with an RFC 3339 date and time, `2026-11-03T...`.
fn starts_with_timestamp(text: &str) -> bool {
    let b = text.trim_start().as_bytes();
    b.len() >= 11
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
        && b[10] == b'T'
}

/// The syslog priority of a text line's level word.
fn level_priority(text: &str) -> u8 {
    match text.split_whitespace().next() {
        Some("ERROR") => 3,
        Some("WARN") => 4,
        Some("INFO") => 6,
        Some("DEBUG" | "TRACE") => 7,
        other => panic!("no level word in {text:?} ({other:?})"),
    }
}

/// The per-request lines of the routes (they carry a `request_id`), by status.
fn request_lines(lines: &[String], status: u16) -> Vec<&String> {
    lines
        .iter()
        .filter(|l| l.contains("request_id=") && l.contains(&format!(" status={status} ")))
        .collect()
}

#[test]
fn under_journald_every_line_carries_its_priority_and_no_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "", "");
    let lines = run(&file, true, |addr| {
        assert_eq!(post(addr, GL, &gl_body(), None).status, 202);
        assert_eq!(post(addr, GL, "{}", None).status, 400);
    });
    let all = lines.join("\n");
    assert!(!lines.is_empty());
    for line in &lines {
        let (n, text) =
            priority(line).unwrap_or_else(|| panic!("no <N> prefix on {line:?} in\n{all}"));
        assert!(!starts_with_timestamp(text), "a timestamp in {line:?}");
        assert_eq!(n, level_priority(text), "{line:?}");
    }
    let find = |what: &str| {
        lines
            .iter()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in\n{all}"))
    };
    assert!(find("SANDBOX MODE").starts_with("<4>"), "a warning is 4");
    assert!(find("ap-intake listening").starts_with("<6>"), "info is 6");
    // The default, "failures": the 400 has its line, the 202 none (D36).
    assert_eq!(request_lines(&lines, 400).len(), 1, "{all}");
    assert!(request_lines(&lines, 400)[0].starts_with("<6>"));
    assert_eq!(request_lines(&lines, 202).len(), 0, "{all}");
    // Both are counted.
    assert!(
        find("requests since the last summary:").ends_with(": 202=1 400=1"),
        "{all}"
    );
}

#[test]
fn a_storage_error_is_logged_with_priority_3() {
    let dir = tempfile::tempdir().unwrap();
    // No filesystem has an exabyte free: every write that grows the queue is refused (D30).
    let file = config(dir.path(), "", "min_free_bytes = 1000000000000000000");
    let lines = run(&file, true, |addr| {
        assert_eq!(post(addr, GL, &gl_body(), None).status, 503);
    });
    let all = lines.join("\n");
    let errors: Vec<_> = lines.iter().filter(|l| l.contains("ERROR")).collect();
    assert!(!errors.is_empty(), "no error line in\n{all}");
    for line in errors {
        assert!(line.starts_with("<3>ERROR"), "{line:?}");
    }
    assert_eq!(request_lines(&lines, 503).len(), 1, "{all}");
}

#[test]
fn requests_all_logs_every_request_and_off_none_but_both_count_them() {
    let traffic = |addr| {
        assert_eq!(post(addr, GL, &gl_body(), None).status, 202);
        assert_eq!(post(addr, GL, &gl_body(), None).status, 202);
        assert_eq!(post(addr, GL, "{}", None).status, 400);
        assert_eq!(post(addr, "/nowhere", "{}", None).status, 404);
    };
    let dir = tempfile::tempdir().unwrap();
    let all = run(&config(dir.path(), "requests = \"all\"", ""), true, traffic);
    let text = all.join("\n");
    assert_eq!(request_lines(&all, 202).len(), 2, "{text}");
    assert_eq!(request_lines(&all, 400).len(), 1, "{text}");
    assert_eq!(request_lines(&all, 404).len(), 1, "{text}");
    assert!(request_lines(&all, 202)[0].starts_with("<6>"));

    let dir = tempfile::tempdir().unwrap();
    let off = run(&config(dir.path(), "requests = \"off\"", ""), true, traffic);
    let text = off.join("\n");
    assert!(!off.iter().any(|l| l.contains("request_id=")), "{text}");
    let summary = off
        .iter()
        .find(|l| l.contains("requests since the last summary:"))
        .unwrap_or_else(|| panic!("no summary in\n{text}"));
    assert!(summary.starts_with("<6>"), "{summary}");
    assert!(summary.ends_with(": 202=2 400=1 404=1"), "{summary}");
}

#[test]
fn without_journald_lines_keep_their_timestamp_and_have_no_priority() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run(&config(dir.path(), "", ""), false, |addr| {
        assert_eq!(post(addr, GL, "{}", None).status, 400);
    });
    let all = lines.join("\n");
    for line in &lines {
        assert!(priority(line).is_none(), "{line:?}");
        assert!(starts_with_timestamp(line), "no timestamp in {line:?}");
    }
    assert_eq!(request_lines(&lines, 400).len(), 1, "{all}");
}

#[test]
fn json_lines_under_journald_carry_the_priority_before_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "format = \"json\"", "");
    let lines = run(&file, true, |addr| {
        assert_eq!(post(addr, GL, "{}", None).status, 400);
    });
    let levels = [("ERROR", 3), ("WARN", 4), ("INFO", 6), ("DEBUG", 7)];
    for line in &lines {
        let (n, text) = priority(line).unwrap_or_else(|| panic!("no <N> prefix on {line:?}"));
        let v: serde_json::Value = serde_json::from_str(text).expect("a JSON object");
        let level = v["level"].as_str().unwrap_or_default();
        assert_eq!(
            levels.iter().find(|(l, _)| *l == level).map(|(_, n)| *n),
            Some(n),
            "{line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>{") && l.contains("\"status\":400")),
        "{}",
        lines.join("\n")
    );
}

#[test]
fn a_bad_requests_value_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "requests = \"errors\"", "");
    for command in ["check-config", "serve"] {
        let out = bin()
            .args([command, "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {err}");
        assert!(
            err.contains("log.requests") && err.contains("\"failures\", \"all\", \"off\""),
            "{command}: {err}"
        );
    }
}

/// D44: each delivery to the platform is a debug line; at info the summary counts them, so a
/// steady stream of deliveries adds a line a minute, not one per delivery.
#[test]
fn deliveries_are_counted_by_the_summary_not_logged_one_by_one_d44() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "", "");
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("listen = \"\"", "listen = \"127.0.0.1:0\"");
    std::fs::write(&file, text).unwrap();
    let mut service = common::process::Service::start(&file, dir.path());
    for code in 0..30 {
        let body = envelope(&[gl(&format!("{code}"))]).to_string();
        assert_eq!(post(service.addr, GL, &body, None).status, 202);
    }
    let admin = service.admin_addr().expect("the admin listener");
    let delivered = || {
        let mut r = agent()
            .get(&format!("http://{admin}/metrics"))
            .call()
            .unwrap();
        let text = r.body_mut().read_to_string().unwrap();
        text.lines()
            .find(|l| {
                l.starts_with(
                    "ap_intake_delivered_records_total{interface=\"general-ledger-codes-v1\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    eventually("30 records delivered", Duration::from_secs(20), || {
        delivered() == 30
    });
    assert_eq!(service.terminate().code(), Some(0));
    let log = service.stderr();
    let per_delivery: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("INFO delivered "))
        .collect();
    assert!(per_delivery.is_empty(), "{per_delivery:?}");
    let summary = log
        .lines()
        .find(|l| l.contains("platform deliveries since the last summary"))
        .unwrap_or_else(|| panic!("no delivery count in\n{log}"));
    assert!(summary.contains("records=30"), "{summary}");
}
