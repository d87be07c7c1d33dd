//! D14: the fast path (`ap_intake::validate::fast`) gives the reference path's answer, byte
//! for byte, for every generated request: the same outcome (status, counts, errors, message)
//! and the same records to queue (keys, XML, receipt lines), or the same refusal. Half the
//! cases keep every record valid, so the fast path is taken often; the other half are the
//! mutated cases of the property test above, where it must step aside.

use super::case::{self, Case, MAX_RECORDS};
use super::config;
use ap_intake::intake::{Checker, IntakeError, Outcome};
use ap_intake::interfaces::INTERFACES;
use ap_intake::queue::NewRecord;
use ap_intake::queue::receipt::RequestInfo;
use ap_intake::validate::Validator;
use proptest::strategy::{Strategy, Union};
use proptest::test_runner::{TestCaseError, TestRunner};
use std::cell::Cell;
use std::sync::Arc;

/// An answer in a form two answers can be compared in.
type Answer = Result<(Outcome, Vec<(Vec<u8>, &'static str, String, Option<u32>)>), String>;

fn answer(checked: Result<(Outcome, Vec<NewRecord>), IntakeError>) -> Answer {
    checked
        .map(|(outcome, records)| {
            let records = records
                .into_iter()
                .map(|r| {
                    let line = r.receipt.map(|l| l.index);
                    (r.key.as_bytes().to_vec(), r.interface, r.xml, line)
                })
                .collect();
            (outcome, records)
        })
        .map_err(|e| format!("{e:?}"))
}

/// Runs one case's body through both paths and compares; `Ok(true)` when the fast path took it.
pub fn compare(checker: &Checker, case: &Case) -> Result<bool, String> {
    let body = case.bytes();
    let at = case.iface.needs_accounting_type.then_some("PROJECT");
    let receipt = Arc::new(RequestInfo {
        request_id: "paths".into(),
        api_key: "test".into(),
        interface: case.iface.id,
        received_at_ms: 0,
        nonce: 0,
    });
    let reference = answer(checker.check_records_slow(case.iface, at, &body, Some(&receipt)));
    let served = answer(checker.check_records(case.iface, at, &body, Some(&receipt)));
    if served != reference {
        return Err(format!(
            "{} answers differ\n served:    {served:?}\n reference: {reference:?}",
            case.iface.path
        ));
    }
    let fast = checker.check_records_fast(case.iface, at, &body, Some(&receipt));
    match fast {
        None => Ok(false),
        Some(fast) if answer(Ok(fast.clone())) == reference => Ok(true),
        Some(fast) => Err(format!(
            "{}: the fast path's answer differs\n fast:      {:?}\n reference: {reference:?}",
            case.iface.path,
            answer(Ok(fast))
        )),
    }
}

#[test]
fn the_fast_path_answers_as_the_reference_path_does_d14() {
    let types = ap_intake::config::DEFAULT_ACCOUNTING_TYPES
        .map(String::from)
        .to_vec();
    let checker = Checker::new(Validator::load(None).unwrap(), types, MAX_RECORDS);
    let valid = Union::new(INTERFACES.iter().map(|i| case::cases_with(i, false)));
    let strategy = Union::new([valid.boxed(), case::all_cases().boxed()]);
    let (cases, fast) = (Cell::new(0u32), Cell::new(0u32));
    let mut runner = TestRunner::new(config());
    let result = runner.run(&strategy, |case| {
        cases.set(cases.get() + 1);
        let took = compare(&checker, &case).map_err(TestCaseError::fail)?;
        fast.set(fast.get() + u32::from(took));
        Ok(())
    });
    eprintln!(
        "paths: {} cases compared, {} taken by the fast path",
        cases.get(),
        fast.get()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    // The comparison means something only if the fast path answered a good share.
    assert!(
        fast.get() * 5 >= cases.get(),
        "the fast path took {} of {} cases",
        fast.get(),
        cases.get()
    );
}
