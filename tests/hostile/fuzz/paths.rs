//! D14: the fast path (`ap_intake::validate::fast`) gives the reference path's answer, byte
//! for byte, for every generated request: the same outcome (status, counts, errors, message)
//! and the same records to queue (keys, XML, receipt lines), or the same refusal. Half the
//! cases keep every record valid, so the fast path is taken often; the other half are the
//! mutated cases of the property test above, where it must step aside.

use super::case::{self, MAX_RECORDS};
use super::config;
use crate::common::paths::compare;
use ap_intake::intake::Checker;
use ap_intake::interfaces::INTERFACES;
use ap_intake::validate::Validator;
use proptest::strategy::{Strategy, Union};
use proptest::test_runner::{TestCaseError, TestRunner};
use std::cell::Cell;

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
        let took = compare(&checker, case.iface, &case.bytes()).map_err(TestCaseError::fail)?;
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
