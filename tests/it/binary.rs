//! The real `ap-intake` binary: command line, config errors, key generation, SIGTERM and the
//! README's quick start. (kill -9 is in `crash.rs`.)

use crate::common;
use ap_intake::queue::Store;
use common::process::{Service, bin, post, wait_listening};
use common::*;
use serde_json::Value;
use std::process::Stdio;

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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/ap.toml"), "{err}");
    assert_eq!(
        err.matches("No such file").count(),
        1,
        "the cause is said once: {err}"
    );
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
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n[platform]\nurl = \"https://ap.example.com\"\n[admin]\nlisten = \"\"\n{block}",
        dir.path().join("data").display()
    );
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config).unwrap();
    let service = Service::start(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    let answer = |key| post(service.addr, "/general-ledger-codes/v1", &body, Some(key)).status;
    assert_eq!(answer(&key), 202);
    assert_eq!(answer("apk_wrong"), 401);
}

#[test]
fn sigterm_and_sigint_stop_the_service_cleanly() {
    for signal in ["-TERM", "-INT"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let data = dir.path().join("d");
        let text = format!(
            "sandbox = true\n[server]\nlisten = \"127.0.0.1:0\"\n[storage]\ndata_dir = \"{}\"\n[admin]\nlisten = \"\"\n",
            data.display()
        );
        std::fs::write(&file, text).unwrap();
        let mut service = Service::start(&file, dir.path());
        let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
        assert_eq!(
            post(service.addr, "/general-ledger-codes/v1", &body, None).status,
            202
        );
        // Delivery runs beside the intake (D31): let it reach the sink before the signal.
        let sink = data.join("sandbox-sink");
        crate::common::eventually(
            "a record reaches the sink",
            std::time::Duration::from_secs(10),
            || std::fs::read_dir(&sink).map_or(0, |d| d.count()) > 0,
        );
        let status = service.signal(signal);
        assert!(status.success(), "{signal}: {status:?}");
        // The queue is released and the record went to the sandbox sink (D21).
        let store = reopen(&data);
        assert_eq!(
            store.stats("general-ledger-codes-v1").unwrap().delivered,
            1,
            "{signal}"
        );
        assert_eq!(
            std::fs::read_dir(data.join("sandbox-sink"))
                .unwrap()
                .count(),
            1,
            "{signal}"
        );
    }
}

/// SIGTERM lets a request in flight finish and does not wait forever for a platform that
/// does not answer; the exit status is 0.
#[test]
fn sigterm_finishes_requests_in_flight_and_bounds_the_wait_for_the_platform() {
    use std::io::{Read, Write};
    let platform = common::receiver::Receiver::start();
    platform.answer(|_| {
        std::thread::sleep(std::time::Duration::from_secs(120));
        common::receiver::ok()
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        config_for(
            &dir.path().join("data"),
            "",
            &platform.url(),
            "[delivery]\ntimeout_secs = 120\n",
        ),
    )
    .unwrap();
    let mut service = Service::start(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    assert_eq!(
        post(service.addr, "/general-ledger-codes/v1", &body, Some(KEY)).status,
        202
    );
    // The platform has the request and will not answer it: the delivery is hanging.
    assert!(platform.wait_for(std::time::Duration::from_secs(10), |_| true));

    // A request whose body is still arriving when SIGTERM comes. `Expect: 100-continue`
    // makes the server say when it has taken the request and started reading its body.
    let mut conn = std::net::TcpStream::connect(service.addr).unwrap();
    let head = format!(
        "POST /general-ledger-codes/v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut interim = [0u8; 25];
    conn.read_exact(&mut interim).unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    conn.write_all(&body.as_bytes()[..10]).unwrap();
    let pid = service.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(
        common::wait_for(std::time::Duration::from_secs(10), || service
            .stderr()
            .contains("shutting down")),
        "SIGTERM is logged: {}",
        service.stderr()
    );
    conn.write_all(&body.as_bytes()[10..]).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "the request in flight is answered: {answer}"
    );

    let started = std::time::Instant::now();
    let status = service.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "bounded by the delivery deadline"
    );
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

/// The sandbox listens where `serve --listen` says, on every interface when asked, and logs
/// the console's URL (D21, D38).
#[test]
fn the_sandbox_listens_where_asked_and_names_its_console() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args(["serve", "--listen", "0.0.0.0:0", "--admin-listen", "off"])
        .current_dir(dir.path());
    let service = Service::spawn(cmd);
    let port = service.addr.port();
    assert!(service.addr.ip().is_unspecified(), "{}", service.addr);
    let console = format!("console=http://localhost:{port}/docs/");
    assert!(
        common::wait_for(std::time::Duration::from_secs(10), || service
            .stderr()
            .contains(&console)),
        "no {console:?} in the log:\n{}",
        service.stderr()
    );
    // Reachable on an address of this machine other than loopback, when it has one.
    let outward = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    for ip in [Some(std::net::Ipv4Addr::LOCALHOST.into()), outward]
        .into_iter()
        .flatten()
    {
        let addr = std::net::SocketAddr::new(ip, port);
        let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
        let r = post(addr, "/general-ledger-codes/v1", &body, None);
        assert_eq!(r.status, 202, "{addr}: {}", r.text);
    }
}
