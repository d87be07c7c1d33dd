//! D14: one request body through the fast path and the reference path, answers compared byte
//! for byte (tests/it/interfaces/paths.rs, tests/hostile/fuzz/paths.rs).

use ap_intake::intake::{Accepted, CheckError, Checker, Outcome};
use ap_intake::interfaces::Interface;

/// An answer in a form two answers can be compared in: the outcome and, per record queued,
/// its position, key and XML; or the refusal.
type Answer = Result<(Outcome, Vec<(usize, Vec<u8>, String)>), String>;

fn answer(checked: Result<(Outcome, Vec<Accepted>), CheckError>) -> Answer {
    checked
        .map(|(outcome, records)| {
            let records = records
                .into_iter()
                .map(|r| (r.index, r.key.as_bytes().to_vec(), r.xml))
                .collect();
            (outcome, records)
        })
        .map_err(|e| format!("{e:?}"))
}

/// Checks that `check_records` and the fast path (when it takes the body) answer `body` as
/// the reference path does; `Ok(true)` when the fast path took it.
pub fn compare(checker: &Checker, iface: &Interface, body: &[u8]) -> Result<bool, String> {
    let at = iface.needs_accounting_type.then_some("PROJECT");
    let reference = answer(checker.check_records_slow(iface, at, body));
    let served = answer(checker.check_records(iface, at, body));
    if served != reference {
        return Err(format!(
            "{}: answers differ\n served:    {served:?}\n reference: {reference:?}",
            iface.path
        ));
    }
    match checker.check_records_fast(iface, at, body) {
        None => Ok(false),
        Some(fast) => {
            let fast = answer(Ok(fast));
            if fast == reference {
                Ok(true)
            } else {
                Err(format!(
                    "{}: the fast path's answer differs\n fast:      {fast:?}\n reference: {reference:?}",
                    iface.path
                ))
            }
        }
    }
}
