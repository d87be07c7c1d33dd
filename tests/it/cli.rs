//! The operator's command line (D34): exit statuses, a closed stdout, `serve
//! --listen`, listeners and data directories already in use, `check-config` on the data
//! directory, and `status` as an admin reads it.

use crate::common;
use common::process::{bin, post, wait_listening};
use std::io::Read;
use std::process::Stdio;

fn sandbox_config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let file = dir.join("config.toml");
    let data = dir.join("data");
    std::fs::write(
        &file,
        format!(
            "sandbox = true\n[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"\"\n\
             [storage]\ndata_dir = \"{}\"\n{extra}",
            data.display()
        ),
    )
    .unwrap();
    file
}

fn run(args: &[&str]) -> std::process::Output {
    bin().args(args).output().unwrap()
}

#[test]
fn a_configuration_error_exits_78_and_a_damaged_store_74() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "sandbox = true\n[server]\nlisen = 1\n").unwrap();
    for cmd in ["serve", "check-config"] {
        let out = run(&[cmd, "--config", bad.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(78), "{cmd}: {out:?}");
    }
    let config = sandbox_config(dir.path(), "");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("queue.sqlite3"), vec![0x5a_u8; 8192]).unwrap();
    let out = run(&["serve", "--config", config.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("check-store"), "{err}");
}

/// `cmd | head -c 1`: the reader goes away while the command writes.
fn into_closed_pipe(args: &[&str]) -> std::process::ExitStatus {
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    let _ = stdout.read(&mut one);
    drop(stdout);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    status
}

#[test]
fn a_closed_stdout_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let config = sandbox_config(dir.path(), "");
    // The service ran once, so `status` has a queue to read.
    let mut child = bin()
        .args(["serve", "--config", config.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    for args in [
        &["print-config"][..],
        &["key", "generate", "--name", "x"][..],
        &["status", "--config", config.to_str().unwrap(), "--json"][..],
    ] {
        let status = into_closed_pipe(args);
        assert_ne!(status.code(), Some(101), "{args:?}: {status:?}");
    }
}

#[test]
fn serve_listen_overrides_the_config_and_a_port_in_use_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = sandbox_config(dir.path(), "");
    let mut child = bin()
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "off"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = wait_listening(&mut child);
    let r = post(
        addr,
        "/general-ledger-codes/v1",
        r#"{"objects":{"object":{"record":[{"code":"1","type":"VAT","description_en":"x"}]}}}"#,
        None,
    );
    assert_eq!(r.status, 202, "{}", r.text);
    // The same port again, from another data directory: the key is named.
    let other = tempfile::tempdir().unwrap();
    let other_config = sandbox_config(other.path(), "");
    let out = run(&[
        "serve",
        "--config",
        other_config.to_str().unwrap(),
        "--listen",
        &addr.to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&addr.to_string()) && err.contains("[server] listen"),
        "{err}"
    );
    // The same data directory from a second service: in use, by whom.
    let out = run(&["serve", "--config", config.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "{err}");
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains(&format!("process {}", child.id())), "{err}");
    let bad = run(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--admin-listen",
        "x",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--admin-listen"));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn check_config_refuses_a_data_directory_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        format!(
            "sandbox = true\n[storage]\ndata_dir = \"{}\"\n",
            blocker.join("data").display()
        ),
    )
    .unwrap();
    let out = run(&["check-config", "--config", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("storage.data_dir") && err.contains("not writable"),
        "{err}"
    );
    let ok = sandbox_config(dir.path(), "");
    let out = run(&["check-config", "--config", ok.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ReadWritePaths"),
        "a data dir outside the unit's: {text}"
    );
}

#[test]
fn status_takes_config_anywhere_and_an_unknown_key_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let config = sandbox_config(dir.path(), "");
    let mut child = bin()
        .args(["serve", "--config", config.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&mut child);
    let c = config.to_str().unwrap();
    for args in [
        vec!["status", "show", "gl-code:main/NOPE", "--config", c],
        vec![
            "status",
            "--config",
            c,
            "show",
            "gl-code:main/NOPE",
            "--json",
        ],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("no queued record with that key"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}: no `null`");
    }
    let out = run(&["status", "--config", c]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert!(
        text.contains("QUAR.") && text.contains("DELIVERY"),
        "{text}"
    );
    let wide = run(&["status", "--wide", "--config", c]);
    assert!(String::from_utf8_lossy(&wide.stdout).contains("LAST SUCCESS"));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_interface_path_that_does_not_exist_is_named_before_anything_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let config = sandbox_config(dir.path(), "");
    let c = config.to_str().unwrap();
    for args in [
        vec![
            "key",
            "generate",
            "--name",
            "erp",
            "--interface",
            "/nope/v1",
        ],
        vec![
            "status",
            "pending",
            "--interface",
            "/nope/v1",
            "--config",
            c,
        ],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(
                r#""/nope/v1" is not an interface path, such as /general-ledger-codes/v1"#
            ),
            "{args:?}: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: no key printed, nothing asked"
        );
    }
    // A name the config would refuse is refused before a key is printed (D47: `client:` and
    // `idp:` name OAuth 2.0 callers).
    for who in ["--name", "--client"] {
        let out = run(&["key", "generate", who, "client:erp", "--interface", "*"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{who}: {err}");
        assert!(err.contains("must not contain ':'"), "{who}: {err}");
        assert!(out.stdout.is_empty(), "{who}: no key printed");
    }
    // `*`, every interface, is not refused.
    let out = run(&["key", "generate", "--name", "erp", "--interface", "*"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value after `label` on a line of `text`.
fn field_after<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
}

/// What `key generate-signing` and `key generate --client` print is a working [oauth2]
/// (D47): pasted into the config it passes check-config, and the printed secret gets a
/// token the service takes. A missing signing key file is a configuration error (exit 78)
/// and an existing one is never replaced.
#[test]
fn the_printed_oauth2_blocks_make_a_service_that_issues_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("signing.pem");
    let p = pem.to_str().unwrap();
    let signing = run(&["key", "generate-signing", p]);
    let signing_out = String::from_utf8_lossy(&signing.stdout).to_string();
    assert!(signing.status.success(), "{signing:?}");
    let before = std::fs::read(&pem).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&pem).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the private key is the owner's only");
    }
    let again = run(&["key", "generate-signing", p]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("never replaced"));
    assert_eq!(
        std::fs::read(&pem).unwrap(),
        before,
        "the existing key is kept"
    );

    let client = run(&["key", "generate", "--client", "erp1", "--interface", "*"]);
    let client_out = String::from_utf8_lossy(&client.stdout).to_string();
    assert!(client.status.success(), "{client:?}");
    let secret = field_after(&client_out, "client_secret:").to_string();
    assert!(!client_out.contains("[[api_keys]]"), "{client_out}");
    let block = |out: &str, from: &str| out[out.find(from).unwrap()..].to_string();
    let tables = format!(
        "{}\n{}",
        block(&signing_out, "[oauth2]"),
        block(&client_out, "[[oauth2.clients]]")
    );
    let config = sandbox_config(dir.path(), &tables);
    let c = config.to_str().unwrap();
    let check = run(&["check-config", "--config", c]);
    assert!(check.status.success(), "{check:?}");
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("erp1"),
        "check-config names the client: {check:?}"
    );

    let mut child = bin()
        .args(["serve", "--config", c, "--admin-listen", "off"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = wait_listening(&mut child);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .post(&format!("http://{addr}/oauth2/token"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!(
            "grant_type=client_credentials&client_id=erp1&client_secret={secret}"
        ))
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    let token = body["access_token"].as_str().unwrap();
    let mut r = agent
        .post(&format!("http://{addr}/general-ledger-codes/v1"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(
            r#"{"objects":{"object":{"record":[{"code":"1","type":"VAT","description_en":"x"}]}}}"#,
        )
        .unwrap();
    assert_eq!(
        r.status(),
        202,
        "{}",
        r.body_mut().read_to_string().unwrap()
    );
    child.kill().unwrap();
    child.wait().unwrap();

    std::fs::remove_file(&pem).unwrap();
    for cmd in ["check-config", "serve"] {
        let out = run(&[cmd, "--config", c]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd}: {err}");
        assert!(err.contains(p), "{cmd} names the file: {err}");
    }
}

/// D47, issue 47: check-config fetches the identity provider's key set as the service will;
/// one out of reach is a warning (the service starts and uses the set it kept), a
/// `jwks_file` that holds keys is counted.
#[test]
fn check_config_warns_of_an_identity_provider_out_of_reach() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}/jwks", closed.local_addr().unwrap());
    drop(closed);
    let external = format!(
        "[oauth2.external]\nissuer = \"corp\"\naudience = \"ap-intake\"\njwks_url = \"{nowhere}\"\n"
    );
    let config = sandbox_config(dir.path(), &external);
    let out = run(&["check-config", "--config", config.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("warning:") && said.contains(&nowhere),
        "check-config: {said}"
    );

    let key = ap_intake::oauth2::SigningKey::from_pem(
        ap_intake::oauth2::keys::generate_pem().unwrap().as_bytes(),
    )
    .unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, serde_json::json!({"keys": [key.jwk]}).to_string()).unwrap();
    let external = format!(
        "[oauth2.external]\nissuer = \"corp\"\naudience = \"ap-intake\"\njwks_file = '{}'\n",
        jwks.display()
    );
    let config = sandbox_config(dir.path(), &external);
    let out = run(&["check-config", "--config", config.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("1 signing key(s) there now") && !said.contains("warning:"),
        "{said}"
    );
}
