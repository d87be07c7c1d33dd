//! Arbitrary bytes through the JSON-to-XML path of the core crate (`ap-intake-core`, nothing
//! else: no queue, no HTTP): the first byte picks one of the nine interfaces, the rest is the
//! request body, and `Checker::check_records` (the CPU part of every request: envelope, UTF-8,
//! nesting and duplicate keys, validation, number rules, keys, XML) runs on it exactly as the
//! service runs it.
//!
//! The fast path and the reference path must give the same answer (D14). Nothing may panic;
//! every record the intake would queue must be well-formed XML carrying
//! only characters XML 1.0 allows (D19), as must the document delivery would build from them;
//! and the outcome's counts and indices must agree with D1-D3.
#![no_main]

use ap_intake_core::check::{Accepted, CheckError, Checker, Outcome, Status};
use ap_intake_core::interfaces::{INTERFACES, Mode};
use ap_intake_core::validate::Validator;
use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use std::sync::OnceLock;

/// One checker for the whole run, with the service's defaults (10,000 records a request).
fn checker() -> &'static Checker {
    static CHECKER: OnceLock<Checker> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let validator = Validator::load(None).expect("built-in schemas");
        let types = vec!["PROJECT".to_string(), "COSTCENTRE".to_string()];
        Checker::new(validator, types, 10_000)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let iface = &INTERFACES[usize::from(pick) % INTERFACES.len()];
    let accounting_type = iface.needs_accounting_type.then_some("PROJECT");
    let checker = checker();
    let checked = checker.check_records(iface, accounting_type, body);
    // D14: the fast path answers as the reference path does, or leaves the answer to it.
    let reference = checker.check_records_slow(iface, accounting_type, body);
    assert_eq!(summary(&checked), summary(&reference), "the two paths differ");
    let (outcome, accepted) = match checked {
        Ok(checked) => checked,
        Err(CheckError::Structure(_) | CheckError::TooManyRecords { .. }) => return,
        Err(e) => panic!("check_records failed: {e}"),
    };
    // D1-D3: counts and indices.
    let refused = outcome.status == Status::Failed && iface.mode == Mode::AllOrNothing;
    if refused && outcome.total == 0 {
        assert!(accepted.is_empty() && outcome.succeeded == 0 && outcome.failed == 0);
    } else {
        assert_eq!(outcome.succeeded + outcome.failed, outcome.total);
        assert_eq!(accepted.len(), outcome.succeeded);
        assert!(outcome.errors.iter().all(|e| e.index < outcome.total));
    }
    assert!(outcome.errors.windows(2).all(|w| w[0].index <= w[1].index));
    assert!(accepted.windows(2).all(|w| w[0].index < w[1].index));
    assert_eq!(outcome.errors.is_empty(), outcome.failed == 0 && !refused);
    // D19: every record, and the document of all of them, is well-formed XML.
    for record in &accepted {
        well_formed(record.xml.as_bytes(), Some(iface.xml_record));
    }
    let doc = ap_intake_core::xml::document(iface, accepted.iter().map(|r| r.xml.as_bytes()));
    well_formed(&doc, Some(iface.xml_root));
});

/// An answer in a form two answers can be compared in.
fn summary(
    checked: &Result<(Outcome, Vec<Accepted>), CheckError>,
) -> Result<(Outcome, Vec<Accepted>), String> {
    match checked {
        Ok((outcome, records)) => Ok((outcome.clone(), records.clone())),
        Err(e) => Err(format!("{e:?}")),
    }
}

/// Panics unless `xml` is one well-formed element (named `root`) of XML 1.0 characters.
fn well_formed(xml: &[u8], root: Option<&str>) {
    let text = std::str::from_utf8(xml).expect("XML is UTF-8");
    if let Some(c) = text.chars().find(|&c| !is_xml_char(c)) {
        panic!("U+{:04X} is no XML 1.0 character: {text}", c as u32);
    }
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().check_end_names = true;
    let mut depth = 0usize;
    let mut roots = 0usize;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                if depth == 0 {
                    roots += 1;
                    if let Some(name) = root {
                        assert_eq!(e.name().as_ref(), name, "root element: {text}");
                    }
                }
                depth += 1;
            }
            Ok(Event::End(_)) => depth -= 1,
            Ok(Event::Empty(_)) if depth == 0 => roots += 1,
            Ok(Event::Text(t)) if depth == 0 => {
                let outside = t.xml10_content();
                assert!(outside.trim().is_empty(), "text outside the root: {text}")
            }
            Ok(Event::GeneralRef(r)) => {
                let c = r
                    .resolve_char_ref()
                    .unwrap_or_else(|e| panic!("{e}: {text}"));
                assert!(c.is_none_or(is_xml_char), "bad character reference: {text}");
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!(
                "not well-formed ({e}) at {}: {text}",
                reader.buffer_position()
            ),
        }
    }
    assert_eq!((depth, roots), (0, 1), "one element, closed: {text}");
}

/// XML 1.0's `Char` production.
fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}
