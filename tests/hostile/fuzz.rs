//! Property tests: request bodies generated from each interface's JSON Schema, mutated, and
//! POSTed over HTTP to one in-process service (decisions.md D1-D3, D6-D8, D13, D15-D16,
//! D23-D25, D27).
//!
//! Each case is one request to one of the nine interfaces: up to five records generated valid
//! from the schema ([`valid`]), some resent under an earlier record's key (D16), then mutated
//! ([`mutate`]): wrong types and null, missing and unknown fields, duplicate keys written as
//! JSON text (D24), hostile numbers (exponent bombs, 10,000-digit mantissas, `1.500`,
//! `1000e-3`, `1.5e1`, D23), the same numbers in other notations, characters XML cannot
//! carry, multi-byte strings at and past maxLength, bad dates, enums, patterns, IBANs, BICs,
//! bank accounts, coding sums, nesting up to and past 64 levels, and floods of unknown fields
//! past D2's 1,000 entries. Some bodies are damaged as a whole (cut, not UTF-8, envelope
//! keys repeated or missing, too many records), sent with a BOM, gzip, or another media type.
//!
//! Every answer must be 202/207/400/413/415 with the counts, indices, ordering, status and
//! message of D2/D3, every error text of a documented shape ([`oracle`]), and each record
//! refused exactly when a mutation made it invalid, with the entry that mutation implies. After
//! each answer the queue must hold, per D15 key, the last accepted occurrence and nothing
//! else; its XML must validate against the interface's XSD and carry every value of the
//! record exactly ([`queue`]).
//!
//! The default run is `DEFAULT_CASES` cases (under 10 s in a debug build on 2 cores, after
//! the build). Longer runs (proptest reads its `PROPTEST_*` variables itself):
//!
//! ```sh
//! PROPTEST_CASES=5000 cargo test --test hostile fuzz -- --nocapture
//! PROPTEST_CASES=100000 PROPTEST_RNG_SEED=7 cargo test --release --test hostile fuzz
//! ```
//!
//! A failure prints the smallest failing request (after shrinking) as it was sent.

mod case;
mod dec;
mod json;
mod mutate;
mod numbers;
mod oracle;
mod paths;
mod queue;
mod replay;
mod slots;
mod strings;
mod valid;

use crate::common::{KEY, Reply, TestApp, reply_of};
use case::{Case, MAX_RECORDS};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::io::Write;
use std::time::Duration;

/// Cases of the default run: enough to pass every mutation over every interface a few times,
/// small enough for CI.
const DEFAULT_CASES: u32 = 300;

/// proptest's configuration from its environment variables (`PROPTEST_CASES`,
/// `PROPTEST_RNG_SEED`, `PROPTEST_MAX_SHRINK_ITERS`, ...), with this suite's defaults where
/// they are unset. Nothing is persisted: a failure prints its request instead.
fn config() -> Config {
    let set = |name: &str| std::env::var_os(name).is_some();
    let mut c = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if !set("PROPTEST_CASES") {
        c.cases = DEFAULT_CASES;
    }
    if !set("PROPTEST_MAX_SHRINK_ITERS") {
        c.max_shrink_iters = 400;
    }
    c
}

/// Sends a case as the client would, over one kept-alive connection: its media type,
/// optionally gzip (D25). An answer that never comes is an error naming why.
fn send(app: &TestApp, agent: &ureq::Agent, case: &Case) -> Result<Reply, String> {
    let mut body = case.bytes();
    let mut req = agent
        .post(app.url(&case.path()))
        .header("x-api-key", KEY)
        .header("Content-Type", case.content_type);
    if case.gzip {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&body).unwrap();
        body = gz.finish().unwrap();
        req = req.header("Content-Encoding", "gzip");
    }
    let mut resp = req.send(&body[..]).map_err(|e| format!("no answer: {e}"))?;
    Ok(reply_of(&mut resp))
}

/// D1-D3, D15-D16, D23-D25, D27: see the module documentation.
#[test]
fn generated_and_mutated_requests_keep_the_answer_and_queue_invariants() {
    let _machine = crate::heavy();
    let app = TestApp::start_with("", &format!("[limits]\nmax_records = {MAX_RECORDS}\n"));
    let model = RefCell::new(queue::Model::default());
    let seen = RefCell::new(std::collections::BTreeMap::<String, usize>::new());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut runner = TestRunner::new(config());
    let result = runner.run(&case::all_cases(), |case| {
        let mut model = model.borrow_mut();
        if model.stale {
            model.resync(&app);
        }
        let checked = send(&app, &agent, &case).and_then(|reply| {
            let mut seen = seen.borrow_mut();
            *seen.entry(format!("status {}", reply.status)).or_default() += 1;
            *seen.entry(format!("{} case", case.iface.path)).or_default() += 1;
            if reply.text.contains(" more error(s) not shown\"") {
                *seen.entry("errors past 1,000 (D2)".into()).or_default() += 1;
            }
            if reply.text.contains("\"expected_format\"") {
                *seen.entry("structure failure".into()).or_default() += 1;
            }
            for invalid in &case.invalid {
                *seen
                    .entry(format!(
                        "record {}",
                        if *invalid { "refused" } else { "valid" }
                    ))
                    .or_default() += 1;
            }
            let accepted = oracle::check_answer(&case, &reply)?;
            queue::check(&app, &case, &accepted, &mut model)
        });
        checked.map_err(|e| {
            model.stale = true;
            TestCaseError::fail(e)
        })
    });
    // What the run covered, for `--nocapture`.
    eprintln!("fuzz: {:?}", seen.borrow());
    if let Err(e) = result {
        panic!("{e}");
    }
    let model = model.borrow();
    if !model.stale {
        model.matches_all(&app).unwrap();
    }
}

/// D26: an answer given before the body is read (here 415) reaches a client that sends its
/// whole body before reading, as ureq does. Found by the property test above (a 415 case with
/// a 1 MiB body): closing at once reset the connection under the client's writes, and it got
/// EPIPE instead of the answer. The connection now lingers, reading and dropping the body.
#[test]
fn an_early_415_reaches_a_client_still_sending_a_large_body() {
    let app = TestApp::start();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for size in [64 << 10, 1 << 20, 4 << 20, 32 << 20] {
        let got = agent
            .post(app.url("/general-ledger-codes/v1"))
            .header("x-api-key", KEY)
            .header("Content-Type", "text/plain")
            .send(&vec![b' '; size][..])
            .map(|mut r| reply_of(&mut r).status);
        assert!(matches!(got, Ok(415)), "{size}-byte body: {got:?}");
    }
}
