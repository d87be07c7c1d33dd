//! SIGHUP (D34): the real binary re-reads its config file; new keys are accepted, removed
//! ones refused, a new TLS certificate is served on new connections, and a broken file is
//! refused with the running configuration kept.

mod common;
use common::process::{Service, post};
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn config(data: &Path, keys: &[&str]) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nplain_http = true\n[storage]\ndata_dir = \"{}\"\n\
         [platform]\nurl = \"http://127.0.0.1:9/intake\"\n[admin]\nlisten = \"\"\n",
        data.display()
    );
    for (i, key) in keys.iter().enumerate() {
        text.push_str(&format!(
            "[[api_keys]]\nname = \"k{i}\"\nsha256 = \"{}\"\ninterfaces = [\"*\"]\n",
            sha(key)
        ));
    }
    text
}

fn hangup(service: &Service) {
    let pid = service.child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP");
}

/// Waits until the service's log has `n` lines containing `text`.
fn wait_log(service: &Service, text: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while service.stderr().matches(text).count() < n {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log: {}",
            service.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_applies_new_keys_and_refuses_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("c.toml");
    let (old, new) = ("apk_old_key_0123456789", "apk_new_key_0123456789");
    std::fs::write(&file, config(&data, &[old])).unwrap();
    let service = Service::start(&file, dir.path());
    let body = envelope(&[fixture("general-ledger-codes", "minimal")]).to_string();
    let status = |key| post(service.addr, "/general-ledger-codes/v1", &body, Some(key)).status;
    assert_eq!((status(old), status(new)), (202, 401));

    std::fs::write(&file, config(&data, &[new])).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 1);
    assert_eq!(
        (status(old), status(new)),
        (401, 202),
        "the keys of the new file"
    );

    std::fs::write(&file, "[server]\nlisten = ").unwrap();
    hangup(&service);
    wait_log(&service, "reload refused", 1);
    assert_eq!(status(new), 202, "the running configuration stays");

    // A change that needs a restart is named, and the rest is applied.
    let moved = config(&data, &[old]).replace("127.0.0.1:0", "127.0.0.1:1");
    std::fs::write(&file, moved).unwrap();
    hangup(&service);
    wait_log(&service, "reload: configuration re-read", 2);
    wait_log(&service, "server.listen", 1);
    assert_eq!((status(old), status(new)), (202, 401));
}
