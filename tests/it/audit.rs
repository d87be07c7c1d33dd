//! The audit trail (D50), with the real binary:
//!
//! - a second Unix user runs `requeue` and `drop` through the running service's admin socket
//!   and is named in the trail (SO_PEERCRED), as root is for its own commands;
//! - start, stop, reload (SIGHUP), backup, restore and move-to-postgres each leave a record;
//!   the trail survives a restart, a restore of a copy made before later records (they are
//!   carried over), and a move to PostgreSQL;
//! - `status audit --since` and `--json`; retention prunes the oldest records.

use crate::common;
use common::process::bin;
use common::receiver::Receiver;
use common::setup::Setup;
use common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const GL: &str = "/general-ledger-codes/v1";
/// The second Unix user the tests create, a member of [`OPERATORS`].
const SECOND_USER: &str = "apintake-audit";
/// The group whose members may use the admin socket (`[admin] socket_group`).
const OPERATORS: &str = "apintake-ops";

/// `status audit --json <args>` on `setup`: the records.
fn trail(setup: &Setup, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit", "--json"];
    all.extend_from_slice(args);
    let text = setup.ok("status", &all);
    serde_json::from_str::<Value>(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}"))
        .as_array()
        .unwrap()
        .clone()
}

/// The actions of a trail, in order.
fn actions(trail: &[Value]) -> Vec<String> {
    trail
        .iter()
        .map(|r| r["action"].as_str().unwrap().to_string())
        .collect()
}

/// The uid of the second user, made if missing; `None` where this process may not make
/// users (not root), said as a skip.
fn second_user() -> Option<u32> {
    if uzers_uid() != 0 {
        common::skip::skip("the audit test's second Unix user needs root to be made");
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, SECOND_USER]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
            ])
            .arg(SECOND_USER)
            .status()
            .unwrap();
        assert!(
            made.success() || id("-u").is_some(),
            "useradd {SECOND_USER}"
        );
    }
    let _ = Command::new("groupadd")
        .args(["--system", OPERATORS])
        .status();
    let joined = Command::new("usermod")
        .args(["--append", "--groups", OPERATORS, SECOND_USER])
        .status()
        .unwrap();
    assert!(joined.success(), "usermod: {SECOND_USER} into {OPERATORS}");
    id("-u")
}

fn uzers_uid() -> u32 {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Lets every user reach `path` through the temp dirs above it (the socket itself is the
/// operators' group's, by `[admin] socket_group`).
fn open_up(path: &Path) {
    let mut p = path.parent();
    while let Some(dir) = p {
        if dir.starts_with(std::env::temp_dir()) && dir != std::env::temp_dir() {
            let mode = std::fs::metadata(dir).unwrap().permissions().mode();
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o755));
        }
        p = dir.parent();
    }
}

/// D50: the second user's `requeue` and `drop`, through the socket, are theirs in the trail;
/// root's `requeue --all`, root's. The key the platform refused is back in line after the
/// requeue.
#[test]
fn d50_commands_through_the_admin_socket_name_the_peer_unix_user() {
    let Some(uid) = second_user() else { return };
    let platform = Receiver::start();
    platform.answer(|r| {
        if r.body.contains("<code>BAD") {
            (422, vec![], "unknown cost centre".into())
        } else {
            common::receiver::ok()
        }
    });
    let setup = Setup::new("", &platform.url());
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[admin]\n",
        &format!("[admin]\nsocket_group = \"{OPERATORS}\"\n"),
    );
    std::fs::write(&setup.config, text).unwrap();
    let mut service = setup.serve();
    let sent = service.post_records(GL, &[gl("BAD1"), gl("BAD2")], Some(KEY));
    assert_eq!(sent.status, 202, "{}", sent.text);
    setup.report_until("both rejected", |r| {
        common::setup::count(r, "general-ledger-codes-v1", "rejected") == 2
    });
    let socket = setup.data_dir().join("admin.sock");
    open_up(&socket);
    std::fs::set_permissions(&setup.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o660,
        "the operators' group may use the socket, no one else"
    );
    let as_second = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                "--regid=nogroup",
                "--init-groups",
            ])
            .arg(bin().get_program())
            .args(args)
            .arg("--config")
            .arg(&setup.config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?} as {SECOND_USER}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    as_second(&["requeue", &gl_key("BAD1")]);
    as_second(&["drop", &gl_key("BAD2")]);
    setup.ok("requeue", &["--all-rejected"]);

    let records = trail(&setup, &[]);
    let of = |action: &str, key: &str| -> &Value {
        records
            .iter()
            .find(|r| r["action"] == action && r["args"]["key"] == key)
            .unwrap_or_else(|| panic!("no {action} of {key}: {records:#?}"))
    };
    let requeued = of("requeue", &gl_key("BAD1"));
    assert_eq!(requeued["actor"], SECOND_USER, "{requeued:#}");
    assert_eq!(requeued["uid"], uid, "{requeued:#}");
    assert_eq!(requeued["changed"]["requeued"], 1, "{requeued:#}");
    let dropped = of("drop", &gl_key("BAD2"));
    assert_eq!(dropped["actor"], SECOND_USER, "{dropped:#}");
    assert_eq!(dropped["changed"]["dropped"], true, "{dropped:#}");
    let all = records
        .iter()
        .find(|r| r["action"] == "requeue" && r["args"]["all"] == true)
        .unwrap_or_else(|| panic!("no requeue --all: {records:#?}"));
    assert_eq!(all["actor"], "root", "{all:#}");
    assert_eq!(all["uid"], 0, "{all:#}");
    assert_eq!(actions(&records)[0], "start", "{records:#?}");
    service.terminate();
}

/// D50: the trail through a restart, a reload, a backup and a restore of that backup (the
/// records made after it carried over), then a move to PostgreSQL; `--since` and retention.
#[test]
fn d50_the_trail_survives_restart_restore_and_a_move_to_postgres() {
    let setup = Setup::new("", NOWHERE);
    let mut service = setup.serve();
    let copy = setup.dir.path().join("copy.sqlite3");
    setup.ok("backup", &[copy.to_str().unwrap()]);
    let hup = Command::new("kill")
        .args(["-HUP", &service.child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    eventually("the reload recorded", PATIENCE_AUDIT, || {
        actions(&trail(&setup, &[])).contains(&"reload".to_string())
    });
    service.terminate();
    let mut again = setup.serve();
    again.terminate();
    let before: Vec<Value> = trail(&setup, &[]);
    assert_eq!(
        actions(&before),
        ["start", "backup", "reload", "stop", "start", "stop"],
        "{before:#?}"
    );
    let me = before[0]["actor"].clone();
    assert_eq!(before[1]["actor"], me, "{before:#?}");
    assert!(
        before[2]["actor"].as_str().unwrap().ends_with("(SIGHUP)"),
        "{before:#?}"
    );
    assert_eq!(before[1]["args"]["file"], copy.display().to_string());

    setup.ok("restore", &[copy.to_str().unwrap()]);
    let after = trail(&setup, &[]);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "nothing lost, nothing changed"
    );
    assert_eq!(actions(&after[before.len()..]), ["restore"], "{after:#?}");
    assert_eq!(
        after[before.len()]["changed"]["audit_records_carried"],
        before.len(),
        "{after:#?}"
    );
    // --since: from the restore on.
    let restored_at = after[before.len()]["at_ms"].as_u64().unwrap();
    let since = ap_intake::status::receipt::rfc3339(restored_at);
    assert_eq!(actions(&trail(&setup, &["--since", &since])), ["restore"]);
    let text = setup.ok("status", &["audit"]);
    assert!(
        text.contains("restore") && text.contains("backup"),
        "{text}"
    );

    let Some(db) = pg::TestDb::create() else {
        pg::skipped();
        return;
    };
    let text = pg::TestDb::config_text(&db.url, &setup.data_dir(), NOWHERE, "", "audit", 30);
    std::fs::write(&setup.config, text).unwrap();
    setup.ok("move-to-postgres", &[]);
    let moved = trail(&setup, &[]);
    assert_eq!(&moved[..after.len()], &after[..], "the trail came along");
    assert_eq!(actions(&moved[after.len()..]), ["move-to-postgres"]);
}

/// How long the service may take to record a reload.
const PATIENCE_AUDIT: std::time::Duration = std::time::Duration::from_secs(15);

/// D50 retention: records past `[audit] retention_days` go at start, newer ones stay.
#[test]
fn d50_audit_records_past_their_retention_are_pruned() {
    let setup = Setup::new("", NOWHERE);
    let text = std::fs::read_to_string(&setup.config).unwrap() + "\n[audit]\nretention_days = 2\n";
    std::fs::write(&setup.config, text).unwrap();
    let mut first = setup.serve();
    first.terminate();
    {
        let store = reopen(&setup.data_dir());
        let day = 24 * 3600 * 1000;
        for (id, age) in [("old", 3 * day), ("recent", day)] {
            let record = ap_intake::queue::audit::AuditRecord {
                id: id.into(),
                at_ms: ap_intake::queue::now_ms() - age,
                actor: "someone".into(),
                uid: Some(1000),
                action: "drop".into(),
                args: "{}".into(),
                changed: "{}".into(),
            };
            ap_intake::queue::Store::audit(&store, &record).unwrap();
        }
        ap_intake::queue::Store::close(&store).unwrap();
    }
    let mut second = setup.serve();
    eventually("the old record pruned", PATIENCE_AUDIT, || {
        trail(&setup, &[]).iter().all(|r| r["id"] != "old")
    });
    let ids: Vec<Value> = trail(&setup, &[]).iter().map(|r| r["id"].clone()).collect();
    assert!(ids.contains(&Value::from("recent")), "{ids:?}");
    second.terminate();
}
