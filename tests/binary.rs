//! The real `ap-intake` binary: command line, config errors, key generation, the README's quick
//! start, and a kill -9 under load that must lose no acknowledged record (D17).

mod common;
use ap_intake::queue::Store;
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ap-intake"))
}

/// Starts `serve --config FILE` and waits for its "listening" log line.
fn serve(config: &Path, cwd: &Path) -> (Child, SocketAddr) {
    let mut child = bin()
        .args(["serve", "--config"])
        .arg(config)
        .current_dir(cwd)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let addr = wait_listening(&mut child);
    (child, addr)
}

fn wait_listening(child: &mut Child) -> SocketAddr {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listen=").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send(Ok(addr));
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        let _ = tx.send(Err(seen)); // the service exited
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(addr)) => addr.parse().unwrap(),
        Ok(Err(stderr)) => panic!("the service exited before listening:\n{stderr}"),
        Err(_) => panic!("the service did not log where it listens within 30 s"),
    }
}

fn post(addr: SocketAddr, path: &str, body: &str, key: Option<&str>) -> Reply {
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
        Ok(mut r) => reply_of(&mut r),
        Err(e) => Reply {
            status: 0,
            headers: vec![],
            text: e.to_string(),
        },
    }
}

#[test]
fn help_explains_the_commands() {
    let out = bin().arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("serve") && text.contains("key"), "{text}");
    let out = bin().args(["serve", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sandbox") && text.contains("127.0.0.1:8080") && text.contains("--config"),
        "{text}"
    );
}

#[test]
fn a_bad_config_stops_start_up_with_a_message_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "sandbox = true\n[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n",
            "lisen",
        ),
        (
            "sandbox = true\n[server]\nlisten = \"here\"\n",
            "server.listen",
        ),
        (
            "sandbox = true\n[limits]\nmax_body_bytes = -1\n",
            "max_body_bytes",
        ),
        (
            "sandbox = true\n[accounting_objects]\ntypes = []\n",
            "accounting_objects.types",
        ),
        (
            "[server]\nplain_http = true\n[platform]\nurl = \"ftp://x\"\n[[api_keys]]\nname = \"a\"\nsha256 = \"00\"\ninterfaces = [\"*\"]\n",
            "api_keys[0].sha256",
        ),
    ];
    for (text, key) in cases {
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, text).unwrap();
        let out = bin()
            .args(["serve", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(key), "expected {key:?} in: {err}");
    }
    let out = bin()
        .args(["serve", "--config", "/nonexistent/ap.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/ap.toml"));
}

#[test]
fn a_generated_key_works_and_only_its_hash_is_configured() {
    let out = bin()
        .args(["key", "generate", "--name", "erp-main"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let key = text
        .split_whitespace()
        .find(|w| w.starts_with("apk_"))
        .expect("the key")
        .to_string();
    let block = &text[text.find("[[api_keys]]").expect("the block")..];
    assert!(block.contains("name = \"erp-main\""));
    assert!(block.contains(&format!("sha256 = \"{}\"", sha(&key))));
    assert!(
        !block.contains(&key),
        "the config holds the hash, never the key"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n[platform]\nurl = \"https://ap.example.com\"\n{block}",
        dir.path().join("data").display()
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config).unwrap();
    let (mut child, addr) = serve(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    assert_eq!(
        post(addr, "/general-ledger-codes/v1", &body, Some(&key)).status,
        202
    );
    assert_eq!(
        post(addr, "/general-ledger-codes/v1", &body, Some("apk_wrong")).status,
        401
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn sigterm_stops_the_service_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        format!(
            "sandbox = true\n[server]\nlisten = \"127.0.0.1:0\"\n[storage]\ndata_dir = \"{}\"\n",
            dir.path().join("d").display()
        ),
    )
    .unwrap();
    let (mut child, addr) = serve(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    assert_eq!(
        post(addr, "/general-ledger-codes/v1", &body, None).status,
        202
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    // The queue is released and the record went to the sandbox sink (D21).
    let store = reopen(&dir.path().join("d"));
    assert_eq!(store.stats("general-ledger-codes-v1").unwrap().delivered, 1);
    let sink: Vec<_> = std::fs::read_dir(dir.path().join("d/sandbox-sink"))
        .unwrap()
        .collect();
    assert_eq!(sink.len(), 1);
}

/// README.md's first command runs the sandbox; its curl example gets the documented answer.
#[test]
fn the_readme_quick_start_works() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let first_block = readme.split("```").nth(1).expect("a code block");
    assert!(
        first_block.contains("cargo run --release -- serve"),
        "{first_block}"
    );
    let curl = readme
        .split("```")
        .find(|b| b.contains("curl"))
        .expect("a curl example");
    let payload = curl
        .split("-d '")
        .nth(1)
        .and_then(|s| s.split('\'').next())
        .expect("-d '...'");
    let documented: Value = {
        let after = &readme[readme.find(curl).unwrap() + curl.len()..];
        let block = after
            .split("```")
            .find(|b| b.starts_with("json"))
            .expect("the answer in a json block");
        serde_json::from_str(block.trim_start_matches("json").trim())
            .expect("the documented answer is JSON")
    };

    let cwd = tempfile::tempdir().unwrap();
    let mut child = bin()
        .arg("serve")
        .current_dir(cwd.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = wait_listening(&mut child);
    assert_eq!(addr.to_string(), "127.0.0.1:8080", "D21 sandbox default");
    let r = post(addr, "/general-ledger-codes/v1", payload, None);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(r.status, 202, "{}", r.text);
    let mut got = r.json();
    assert!(got["request_id"].is_string());
    got["request_id"] = documented["request_id"].clone();
    assert_eq!(got, documented);
    assert!(
        cwd.path().join("ap-intake-data").is_dir(),
        "data in ./ap-intake-data"
    );
}

/// kill -9 while concurrent clients send: every record that got 202 is on disk afterwards,
/// with at least the content that was acknowledged.
#[test]
fn kill_9_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config_text(&data, "", "")).unwrap();
    let (mut child, addr) = serve(&file, dir.path());

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
                    if r.status == 202 {
                        let mut a = acked.lock().unwrap();
                        for i in 0..10 {
                            a.insert(format!("gl-code:main/T{t}-{i}"), round);
                        }
                    } else if r.status != 0 {
                        panic!("unexpected answer {}: {}", r.status, r.text);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap();
    assert!(
        acked.len() >= 40,
        "the clients got answers before the kill: {}",
        acked.len()
    );
    let stored: HashMap<String, String> = reopen(&data)
        .items()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.xml))
        .collect();
    for (key, round) in acked.iter() {
        let xml = stored
            .get(key)
            .unwrap_or_else(|| panic!("{key} was acknowledged and is lost"));
        let stored_round: u64 = xml
            .split("<description_en>round ")
            .nth(1)
            .and_then(|s| s.split('<').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert!(
            stored_round >= *round,
            "{key}: acknowledged round {round}, stored {stored_round}"
        );
    }
}
