//! The `cargo fuzz` inputs kept in the repository, replayed over HTTP by `cargo test`, so a
//! crash once found by the fuzzer stays a regression test where no fuzzer runs
//! (fuzz/README.md).

use super::oracle::documented;
use crate::common::Items;
use crate::common::{TestApp, post_path, xml_invalid};
use ap_intake::interfaces::INTERFACES;
use std::collections::BTreeMap;
use std::path::Path;

/// The files of `fuzz/seeds/json_to_xml` and `fuzz/regressions/json_to_xml`: the first byte
/// picks the interface, the rest is the body (as in `fuzz/fuzz_targets/json_to_xml.rs`).
fn inputs() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in ["seeds/json_to_xml", "regressions/json_to_xml"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with('.') && !name.ends_with(".md") {
                out.push((format!("{dir}/{name}"), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// D2/D3 and D19 for every kept fuzz input: an answer of the documented kinds, counts that
/// add up, documented error texts, and schema-valid XML for whatever was queued.
#[test]
fn fuzz_seeds_and_regressions_replay_over_http() {
    let app = TestApp::start();
    let inputs = inputs();
    assert!(
        inputs.len() >= 18,
        "the seeds are missing: {}",
        inputs.len()
    );
    for (name, data) in inputs {
        let Some((&pick, body)) = data.split_first() else {
            continue;
        };
        let iface = &INTERFACES[usize::from(pick) % INTERFACES.len()];
        let Ok(body) = std::str::from_utf8(body) else {
            continue; // `post` sends text; bytes that are not UTF-8 are the property test's
        };
        let reply = app.post(&post_path(iface), body);
        assert!(
            [202, 207, 400, 413].contains(&reply.status),
            "{name}: {} {}",
            reply.status,
            reply.text
        );
        if reply.status == 413 {
            continue;
        }
        let (total, succeeded, failed) = reply.counts();
        if total > 0 {
            assert_eq!(succeeded + failed, total, "{name}: {}", reply.text);
        }
        let json = reply.json();
        if json.get("expected_format").is_none() {
            for (index, _, error) in reply.errors() {
                let more = error.ends_with(" more error(s) not shown");
                assert!(documented(&error) || more, "{name}: [{index}] {error}");
            }
        }
    }
    let mut by_interface: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, item) in app.store().items().unwrap() {
        by_interface
            .entry(item.interface)
            .or_default()
            .push(item.xml);
    }
    for (id, xmls) in by_interface {
        let iface = ap_intake::interfaces::by_id(&id).unwrap();
        let doc = ap_intake::xml::document(iface, &xmls);
        let xsd = iface.schema.replace(".json", ".xsd");
        if let Some(why) = xml_invalid(&doc, &xsd) {
            panic!("{id}: {why}");
        }
    }
}
