//! The outcome feed (D48) on both engines: each change once, in order, per client, from a
//! cursor that survives a reopen; on PostgreSQL, a change a slower transaction commits later
//! is never passed by a cursor; outcomes are pruned with the receipts.

use crate::store_suite::{GL_CODES, before_reopening, each_backend, key, sent};
use ap_intake::queue::feed::{Page, Position, Request};
use ap_intake::queue::receipt::{ReceiptLine, ReceiptState, RequestInfo};
use ap_intake::queue::{NewRecord, Store, now_ms};
use std::sync::Arc;

use ReceiptState::{Delivered, Quarantined, Rejected, Superseded};

const ALL: [ReceiptState; 4] = [Rejected, Quarantined, Delivered, Superseded];

/// The GL codes `codes` sent by `client` in request `id`, indexed in order.
fn sent_by(client: &str, id: &str, codes: &[&str]) -> Vec<NewRecord> {
    let request = Arc::new(RequestInfo {
        request_id: id.to_string(),
        api_key: client.to_string(),
        interface: GL_CODES,
        received_at_ms: now_ms(),
        nonce: 1,
    });
    codes
        .iter()
        .enumerate()
        .map(|(i, code)| NewRecord {
            key: key("gl-code", code),
            interface: GL_CODES,
            xml: format!("<gl_code><code>{code}</code></gl_code>"),
            receipt: Some(ReceiptLine {
                request: Arc::clone(&request),
                index: u32::try_from(i).unwrap(),
            }),
        })
        .collect()
}

/// One page of `client`'s feed in `states`, after `after` (passed as clients pass it: the
/// cursor's text).
fn page(s: &dyn Store, client: &str, states: &[ReceiptState], after: &str, limit: usize) -> Page {
    let after = (!after.is_empty()).then(|| Position::parse(after).unwrap());
    s.outcomes(&Request {
        client,
        states,
        interface: None,
        after,
        limit,
    })
    .unwrap()
    .expect("a cursor of this engine")
}

/// `(request id, index, code, state, reason)` of an outcome.
type Seen = (String, u32, String, ReceiptState, Option<String>);

/// Walks `client`'s feed from `after` to its end, `limit` a page; what it saw and the cursor
/// it ended on. Every page's `next` is after the last outcome it listed.
fn walk(s: &dyn Store, client: &str, after: &str, limit: usize) -> (Vec<Seen>, String) {
    let mut cursor = after.to_string();
    let mut seen = Vec::new();
    loop {
        let p = page(s, client, &ALL, &cursor, limit);
        assert!(p.outcomes.len() <= limit);
        if let Some(last) = p.outcomes.last() {
            assert_eq!(p.next, last.position);
        }
        for o in &p.outcomes {
            let code = o.key.rsplit('/').next().unwrap().to_string();
            seen.push((
                o.request_id.clone(),
                o.index,
                code,
                o.state,
                o.reason.clone(),
            ));
        }
        let next = p.next.cursor();
        if p.outcomes.is_empty() {
            assert!(
                cursor.is_empty() || next == cursor,
                "an empty page stays put"
            );
            return (seen, next);
        }
        cursor = next;
    }
}

/// [`walk`] until `n` outcomes have come (at most ten seconds). PostgreSQL shows a change
/// once every transaction older than it has ended, in any database of the server: the
/// suite's other tests run beside this one.
fn walk_for(
    s: &dyn Store,
    client: &str,
    after: &str,
    limit: usize,
    n: usize,
) -> (Vec<Seen>, String) {
    let (mut all, mut cursor) = walk(s, client, after, limit);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while all.len() < n && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (more, next) = walk(s, client, &cursor, limit);
        all.extend(more);
        cursor = next;
    }
    (all, cursor)
}

fn seen(id: &str, index: u32, code: &str, state: ReceiptState, reason: Option<&str>) -> Seen {
    (
        id.to_string(),
        index,
        code.to_string(),
        state,
        reason.map(str::to_string),
    )
}

/// D48: delivered, rejected, superseded and dropped, each listed once, in the order they
/// happened, only to the client whose request queued the record; a walk resumed after a
/// reopen goes on where it stopped, and an empty page's cursor picks up later changes.
#[test]
fn each_change_is_listed_once_in_order_to_its_own_client_across_a_reopen() {
    each_backend(|engine, dir, open| {
        let (cursor, early) = before_reopening(dir, open, |s| {
            s.upsert(&sent_by("erp-a", "R1", &["A", "B", "C", "D"]), 1000)
                .unwrap();
            s.upsert(&sent_by("erp-b", "R2", &["E"]), 1000).unwrap();
            let (b, a) = (sent(s, &key("gl-code", "B")), sent(s, &key("gl-code", "A")));
            assert!(s.reject(&b, "unknown cost centre").unwrap());
            assert_eq!(s.delivered(&[a]).unwrap(), 1);
            s.upsert(&sent_by("erp-a", "R3", &["C"]), 2000).unwrap();
            // erp-b has had no change: an empty page, and a cursor to poll from.
            let empty = page(s, "erp-b", &ALL, "", 100);
            assert!(empty.outcomes.is_empty(), "{engine}: {empty:?}");
            // Half a walk: two pages of one.
            let (_, end) = walk_for(s, "erp-a", "", 1, 3);
            let first = page(s, "erp-a", &ALL, "", 1);
            let second = page(s, "erp-a", &ALL, &first.next.cursor(), 1);
            assert_ne!(second.next, Position::parse(&end).unwrap(), "{engine}");
            let early: Vec<_> = [&first, &second]
                .iter()
                .flat_map(|p| p.outcomes.iter().map(|o| (o.request_id.clone(), o.state)))
                .collect();
            (second.next.cursor(), early)
        });
        assert_eq!(
            early,
            [("R1".to_string(), Rejected), ("R1".to_string(), Delivered)],
            "{engine}"
        );
        let s = open(dir);
        assert!(s.discard(&key("gl-code", "B")).unwrap());
        s.delivered(&[sent(&*s, &key("gl-code", "D"))]).unwrap();
        s.delivered(&[sent(&*s, &key("gl-code", "C"))]).unwrap();
        let (rest, end) = walk_for(&*s, "erp-a", &cursor, 2, 4);
        let dropped = "unknown cost centre; dropped by an operator";
        assert_eq!(
            rest,
            [
                seen("R1", 2, "C", Superseded, None),
                seen("R1", 1, "B", Rejected, Some(dropped)),
                seen("R1", 3, "D", Delivered, None),
                seen("R3", 0, "C", Delivered, None),
            ],
            "{engine}"
        );
        // Nothing of erp-a's reaches erp-b, whose own change comes when it happens.
        let (none, b_cursor) = walk(&*s, "erp-b", "", 10);
        assert!(none.is_empty(), "{engine}: {none:?}");
        s.delivered(&[sent(&*s, &key("gl-code", "E"))]).unwrap();
        let (e, _) = walk_for(&*s, "erp-b", &b_cursor, 10, 1);
        assert_eq!(e, [seen("R2", 0, "E", Delivered, None)], "{engine}");
        assert!(walk(&*s, "erp-a", &end, 10).0.is_empty(), "{engine}");
        // One state, and one interface.
        let rejected = page(&*s, "erp-a", &[Rejected], "", 100);
        assert_eq!(rejected.outcomes.len(), 2, "{engine}: {rejected:?}");
        let elsewhere = s
            .outcomes(&Request {
                client: "erp-a",
                states: &ALL,
                interface: Some("vendor-data-v1"),
                after: None,
                limit: 100,
            })
            .unwrap()
            .unwrap();
        assert!(elsewhere.outcomes.is_empty(), "{engine}: {elsewhere:?}");
        // A cursor of the other engine is refused, not read as a place of this one's.
        let foreign = match engine {
            "sqlite" => Position {
                tx: Some(1),
                seq: 0,
            },
            _ => Position { tx: None, seq: 0 },
        };
        let asked = Request {
            client: "erp-a",
            states: &ALL,
            interface: None,
            after: Some(foreign),
            limit: 10,
        };
        assert!(s.outcomes(&asked).unwrap().is_none(), "{engine}");
    });
}

/// Outcomes go with the receipts (D48 "keeps as long as they do"), the oldest first, and
/// a cursor from before the pruning still finds what comes after it.
#[test]
fn outcomes_are_pruned_with_the_receipts_and_numbers_are_not_reused() {
    each_backend(|engine, dir, open| {
        let s = open(dir);
        s.upsert(&sent_by("erp-a", "R1", &["A", "B"]), 1000)
            .unwrap();
        let a = sent(&*s, &key("gl-code", "A"));
        s.delivered(&[a]).unwrap();
        let (before, cursor) = walk_for(&*s, "erp-a", "", 10, 1);
        assert_eq!(before.len(), 1, "{engine}");
        ap_intake::queue::receipt::prune(&*s, now_ms() - 60_000).unwrap();
        assert_eq!(walk(&*s, "erp-a", "", 10).0.len(), 1, "{engine}: kept");
        ap_intake::queue::receipt::prune(&*s, now_ms() + 60_000).unwrap();
        assert!(walk(&*s, "erp-a", "", 10).0.is_empty(), "{engine}: pruned");
        s.upsert(&sent_by("erp-a", "R2", &["B"]), 2000).unwrap();
        let (after, _) = walk_for(&*s, "erp-a", &cursor, 10, 1);
        assert_eq!(
            after,
            [seen("R1", 1, "B", Superseded, None)],
            "{engine}: the new outcome is past the old cursor"
        );
    });
}

/// D48 on PostgreSQL: nodes commit in any order. A change a slow node has made but not yet
/// committed is not passed: a later change committed first waits behind it, and both come,
/// in order, once it commits.
#[test]
fn a_cursor_never_passes_a_change_another_node_commits_later() {
    let Some(db) = crate::common::pg::TestDb::create() else {
        crate::common::pg::skipped();
        return;
    };
    let s = ap_intake::queue::PostgresStore::open(
        &db.settings("feed", 30),
        ap_intake::queue::Mode::Inspect,
    )
    .unwrap();
    s.upsert(&sent_by("erp-a", "R1", &["A", "B"]), 1000)
        .unwrap();
    // The slow node replaces A (its version superseded, by the schema's trigger) and holds
    // its transaction open.
    let mut slow = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let mut held = slow.transaction().unwrap();
    held.execute(
        "UPDATE ap_intake.item SET version = version + 1000, updated_at = 2000 WHERE key = $1",
        &[&key("gl-code", "A").as_bytes()],
    )
    .unwrap();
    // Meanwhile this node's rejection of B commits.
    assert!(s.reject(&sent(&s, &key("gl-code", "B")), "no").unwrap());
    let (seen_early, cursor) = walk(&s, "erp-a", "", 10);
    assert!(
        seen_early.is_empty(),
        "listed past a change not yet committed: {seen_early:?}"
    );
    held.commit().unwrap();
    let (both, _) = walk_for(&s, "erp-a", &cursor, 10, 2);
    assert_eq!(
        both,
        [
            seen("R1", 0, "A", Superseded, None),
            seen("R1", 1, "B", Rejected, Some("no")),
        ]
    );
}

/// D48 under way: a walk made page by page while changes land (on PostgreSQL from two
/// stores, as two nodes commit in any order) sees exactly what a walk from the start sees
/// once they have stopped: nothing skipped, nothing twice, the same order.
#[test]
fn a_walk_while_changes_land_sees_what_a_walk_after_them_sees() {
    each_backend(|engine, dir, open| {
        let first: Arc<dyn Store> = Arc::from(open(dir));
        // SQLite has one writer; PostgreSQL gets a second node.
        let second: Arc<dyn Store> = match engine {
            "sqlite" => Arc::clone(&first),
            _ => Arc::from(open(dir)),
        };
        // How many outcomes the walk must come to, once the writers are done; until then
        // none is named.
        let target = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let writers: Vec<_> = [(first.clone(), "N1"), (second, "N2")]
            .into_iter()
            .map(|(s, node)| {
                std::thread::spawn(move || {
                    for round in 0..15 {
                        let codes: Vec<String> = (0..10)
                            .map(|i| format!("{node}-{}", (round * 7 + i) % 40))
                            .collect();
                        let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
                        s.upsert(&sent_by("erp-a", &format!("{node}-{round}"), &codes), 1000)
                            .unwrap();
                        let mine: Vec<_> = codes.iter().map(|c| key("gl-code", c)).collect();
                        for (i, k) in mine.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
                            let Some(item) = s.get(k).unwrap() else {
                                continue;
                            };
                            let sent = ap_intake::queue::Sent::of(k, &item);
                            if i % 4 == 0 {
                                s.reject(&sent, "no").unwrap();
                            } else {
                                s.delivered(&[sent]).unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let (s, target) = (Arc::clone(&first), Arc::clone(&target));
            std::thread::spawn(move || {
                let (mut all, mut cursor) = (Vec::new(), String::new());
                let mut named_at = None;
                loop {
                    let (more, next) = walk(&*s, "erp-a", &cursor, 7);
                    all.extend(more);
                    cursor = next;
                    let want = target.load(std::sync::atomic::Ordering::SeqCst);
                    if want != usize::MAX {
                        // A cursor past a skipped change never comes to the count: the
                        // walk gives up after ten seconds and the comparison shows it.
                        let since = *named_at.get_or_insert_with(std::time::Instant::now);
                        if all.len() >= want || since.elapsed().as_secs() >= 10 {
                            return all;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        // Every change is committed. A walk from the start, once nothing more shows for a
        // second (PostgreSQL shows a change once every older transaction of the server,
        // other tests' included, has ended), is what the walk under way must come to.
        let mut expected = walk_for(&*first, "erp-a", "", 500, 1).0;
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let again = walk(&*first, "erp-a", "", 500).0;
            if again.len() == expected.len() {
                break;
            }
            expected = again;
        }
        target.store(expected.len(), std::sync::atomic::Ordering::SeqCst);
        let during = reader.join().unwrap();
        assert!(expected.len() > 100, "{engine}: {}", expected.len());
        assert_eq!(during.len(), expected.len(), "{engine}");
        assert_eq!(during, expected, "{engine}");
    });
}
