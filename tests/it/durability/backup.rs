//! Backup and restore (D45), with the real binary on real files: a backup of a running
//! service under load is consistent as of one commit and passes `check-store --file`;
//! `restore` is refused while the service runs, keeps the queue it replaces, and says what
//! the copy cannot hold; wrong uses get a clear word and exit 2, failures exit 1.

use super::disk_full::tmpfs_or_skip;
use crate::common::process::Service;
use crate::common::setup::Setup;
use crate::common::{KEY, NOWHERE, gl, gl_key};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

const GL_PATH: &str = "/general-ledger-codes/v1";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The keys of the items in a queue file, read directly.
fn keys_in(file: &Path) -> BTreeSet<String> {
    let c = rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let mut stmt = c.prepare("SELECT key FROM item").unwrap();
    stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|k| ap_intake::queue::QueueKey::from_bytes(&k.unwrap()).to_string())
        .collect()
}

/// Posts batches of ten new GL codes until `stop`, keeping the keys of every 202.
fn load(service: &Service, stop: &AtomicBool, acked: &Mutex<Vec<String>>) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let codes: Vec<String> = (n..n + 10).map(|i| format!("B{i:06}")).collect();
        n += 10;
        let records: Vec<_> = codes.iter().map(|c| gl(c)).collect();
        let reply = service.post_records(GL_PATH, &records, Some(KEY));
        assert_eq!(reply.status, 202, "{}", reply.text);
        acked
            .lock()
            .unwrap()
            .extend(codes.iter().map(|c| gl_key(c)));
    }
}

#[test]
fn d45_a_backup_under_load_holds_every_record_acknowledged_before_it_and_restores() {
    let setup = Setup::new("", NOWHERE); // nothing is delivered: every record stays queued
    let mut service = setup.serve();
    let (stop, acked) = (AtomicBool::new(false), Mutex::new(Vec::new()));
    let copy = setup.dir.path().join("nightly.sqlite3");
    let (before, output) = std::thread::scope(|s| {
        s.spawn(|| load(&service, &stop, &acked));
        assert!(crate::common::wait_for(
            crate::common::setup::PATIENCE,
            || { acked.lock().unwrap().len() >= 300 }
        ));
        let before: BTreeSet<String> = acked.lock().unwrap().iter().cloned().collect();
        let output = setup.run("backup", &[copy.to_str().unwrap()]);
        // Intake went on meanwhile: the load thread's asserts saw only 202s.
        stop.store(true, Ordering::SeqCst);
        (before, output)
    });
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let all: BTreeSet<String> = acked.lock().unwrap().iter().cloned().collect();
    let copied = keys_in(&copy);
    assert!(
        before.is_subset(&copied),
        "{} records acknowledged before the backup are missing from it",
        before.difference(&copied).count()
    );
    assert!(copied.is_subset(&all), "the copy holds records never sent");
    assert!(
        text(&output).contains(&format!("{} pending", copied.len())),
        "{}",
        text(&output)
    );
    let checked = crate::common::process::bin()
        .args(["check-store", "--file"])
        .arg(&copy)
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked));
    assert!(text(&checked).contains("sound"), "{}", text(&checked));
    assert!(
        !Path::new(&format!("{}-wal", copy.display())).exists(),
        "the copy is one file"
    );

    let refused = setup.run("restore", &[copy.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("the service is running") && text(&refused).contains("stop it"),
        "{}",
        text(&refused)
    );
    assert!(service.terminate().success());

    let restored = setup.run("restore", &[copy.to_str().unwrap()]);
    let said = text(&restored);
    assert_eq!(restored.status.code(), Some(0), "{said}");
    assert!(said.contains("are not in it"), "{said}");
    let kept = std::fs::read_dir(setup.data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("queue.sqlite3.replaced-"))
        .expect("the replaced queue is kept");
    assert!(said.contains(&kept.display().to_string()), "{said}");
    assert_eq!(keys_in(&kept), all, "the replaced queue is kept whole");
    assert_eq!(keys_in(&setup.data_dir().join("queue.sqlite3")), copied);
    // The service starts on the restored queue, and status shows what it holds.
    let mut again = setup.serve();
    let listed: BTreeSet<String> = setup.keys(&["pending"]).into_iter().collect();
    assert_eq!(listed, copied);
    assert!(again.terminate().success());
}

#[test]
fn d45_wrong_uses_are_refused_with_a_clear_word() {
    let setup = Setup::new("", NOWHERE);
    let copy = setup.dir.path().join("copy.sqlite3");

    let none = setup.run("backup", &[copy.to_str().unwrap()]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none));
    assert!(text(&none).contains("no queue at"), "{}", text(&none));

    let service = setup.serve();
    let reply = service.post_records(GL_PATH, &[gl("4000")], Some(KEY));
    assert_eq!(reply.status, 202);
    std::fs::write(&copy, "keep me").unwrap();
    let exists = setup.run("backup", &[copy.to_str().unwrap()]);
    assert_eq!(exists.status.code(), Some(2), "{}", text(&exists));
    assert!(text(&exists).contains("exists"), "{}", text(&exists));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "keep me");

    // A file that is not a queue: check-store says so, restore refuses it.
    let checked = crate::common::process::bin()
        .args(["check-store", "--file"])
        .arg(&copy)
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    assert!(
        text(&checked).contains("not a database"),
        "{}",
        text(&checked)
    );
    drop(service);
    let live = setup.data_dir().join("queue.sqlite3");
    let restored = setup.run("restore", &[copy.to_str().unwrap()]);
    assert_eq!(restored.status.code(), Some(1), "{}", text(&restored));
    assert!(
        text(&restored).contains("was not restored"),
        "{}",
        text(&restored)
    );
    assert_eq!(keys_in(&live), BTreeSet::from([gl_key("4000")]));

    // With the queue in PostgreSQL: pg_dump (nothing is connected to).
    let pg = setup.dir.path().join("pg.toml");
    std::fs::write(
        &pg,
        std::fs::read_to_string(&setup.config)
            .unwrap()
            .replace("[storage]\n", "[storage]\nbackend = \"postgres\"\n")
            + "\n[storage.postgres]\nurl = \"postgres://u@127.0.0.1:9/db\"\n",
    )
    .unwrap();
    let dump = crate::common::process::bin()
        .args(["backup", "--config"])
        .arg(&pg)
        .arg(setup.dir.path().join("other.sqlite3"))
        .output()
        .unwrap();
    assert_eq!(dump.status.code(), Some(2), "{}", text(&dump));
    assert!(text(&dump).contains("pg_dump"), "{}", text(&dump));
}

#[test]
fn d45_no_room_for_the_copy_fails_clearly_and_leaves_nothing_behind() {
    let Some(small) = tmpfs_or_skip("d45_no_room_for_the_copy", 1) else {
        return;
    };
    let setup = Setup::new("", NOWHERE);
    let service = setup.serve();
    let records: Vec<_> = (0..200)
        .map(|i| {
            let mut r = gl(&format!("R{i:04}"));
            r["description_en"] = "x".repeat(3_900).into();
            r
        })
        .collect();
    for chunk in records.chunks(50) {
        assert_eq!(service.post_records(GL_PATH, chunk, Some(KEY)).status, 202);
    }
    let copy = small.path().join("copy.sqlite3");
    let out = setup.run("backup", &[copy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is full"), "{}", text(&out));
    let left: Vec<_> = std::fs::read_dir(small.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing is left behind: {left:?}");
    // The service went on storing.
    assert_eq!(
        service
            .post_records(GL_PATH, &[gl("after")], Some(KEY))
            .status,
        202
    );
}
