use crate::common::*;
use crate::interfaces::support::*;

use ap_intake::interfaces::INTERFACES;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// 1. Accepted records and their XML
// ---------------------------------------------------------------------------------------------

#[test]
fn minimal_and_full_fixtures_are_queued_as_schema_valid_xml() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let min = expect_accepted(&app, iface, &minimal(iface), "minimal fixture");
        expect_valid_xml(iface, &[&min], "minimal fixture");
        let fu = expect_accepted(&app, iface, &full(iface), "full fixture");
        expect_valid_xml(iface, &[&fu], "full fixture");
        for item in [&min, &fu] {
            assert!(
                item.xml.starts_with(&format!("<{}>", iface.xml_record))
                    && item.xml.ends_with(&format!("</{}>", iface.xml_record)),
                "{}: the queued XML must be one <{}> element: {}",
                iface.path,
                iface.xml_record,
                item.xml
            );
        }
        let doc = expect_valid_xml(iface, &[&min, &fu], "minimal and full in one document");
        assert!(
            doc.contains(&format!("<{}>", iface.xml_root)),
            "{}: root element <{}> missing: {doc}",
            iface.path,
            iface.xml_root
        );
    }
}

#[test]
fn defaults_and_fallbacks_of_the_schema_are_written_for_minimal_records() {
    let app = TestApp::start();
    for iface in &INTERFACES {
        let record = minimal(iface);
        let item = expect_accepted(&app, iface, &record, "minimal fixture");
        for (name, prop) in schema(iface)["properties"].as_object().unwrap() {
            if record.get(name).is_some() {
                continue;
            }
            let want = if let Some(default) = prop["default"].as_str() {
                default.to_string()
            } else if let Some(from) = prop["x-fallback"].as_str() {
                record[from].as_str().unwrap().to_string()
            } else {
                continue;
            };
            assert_eq!(
                element_text(&item.xml, name),
                Some(want.as_str()),
                "{}: absent {name} must be written as {want:?}: {}",
                iface.path,
                item.xml
            );
        }
    }

    // Written out for GL codes (D9).
    let gl = iface("/general-ledger-codes/v1");
    let xml = expect_accepted(&app, gl, &minimal(gl), "minimal fixture").xml;
    for (name, want) in [
        ("organization", "main"),
        ("catalog_product", "NO"),
        ("product_group", "DEFAULT"),
        ("start_date", "2001-01-01"),
        ("end_date", "2999-12-31"),
        ("description_en", "Office supplies"),
        ("description_fi_FI", "Office supplies"),
        ("description_en_US", "Office supplies"),
        ("description_sv_SE", "Office supplies"),
    ] {
        assert_eq!(
            element_text(&xml, name),
            Some(want),
            "{}: <{name}> of the minimal record: {xml}",
            gl.path
        );
    }
    assert!(
        xml.starts_with("<gl_code><organization>main</organization><code>4000</code>"),
        "{}: fields in schema order, organization first: {xml}",
        gl.path
    );

    // D9: product_group defaults when blank, also when catalog_product is YES.
    let blank = with(
        &with(&minimal(gl), "/catalog_product", json!("YES")),
        "/product_group",
        json!(""),
    );
    let xml = expect_accepted(&app, gl, &blank, "blank product_group").xml;
    assert_eq!(
        element_text(&xml, "product_group"),
        Some("DEFAULT"),
        "{}: {xml}",
        gl.path
    );
    assert_eq!(
        element_text(&xml, "catalog_product"),
        Some("YES"),
        "{}: {xml}",
        gl.path
    );

    // Accounting objects carry the request's accountingType first.
    let ao = iface("/accounting-objects/v1");
    let xml = expect_accepted(&app, ao, &minimal(ao), "minimal fixture").xml;
    assert!(
        xml.starts_with("<accounting_object><accountingType>PROJECT</accountingType>"),
        "{}: {xml}",
        ao.path
    );
}

#[test]
fn xml_escapes_ampersand_and_angle_brackets() {
    let app = TestApp::start();
    let mut seen = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        let item = expect_accepted(&app, iface, &record, "full fixture");
        expect_valid_xml(iface, &[&item], "full fixture");
        for (name, value) in record.as_object().unwrap() {
            let Some(text) = value.as_str() else { continue };
            if !text.contains(['&', '<']) {
                continue;
            }
            seen += 1;
            let written = element_text(&item.xml, name)
                .unwrap_or_else(|| panic!("{}: no <{name}> in {}", iface.path, item.xml));
            assert!(
                !written.contains('<'),
                "{}: '<' of {name} must be escaped: {written}",
                iface.path
            );
            assert!(
                written.contains("&amp;") || !text.contains('&'),
                "{}: '&' of {name} must be escaped: {written}",
                iface.path
            );
            assert_eq!(unescape(written), text, "{}: {name}", iface.path);
        }
    }
    assert!(seen >= 5, "the full fixtures must hold values with & and <");

    // Written out for one GL code.
    let gl = iface("/general-ledger-codes/v1");
    let xml = expect_accepted(&app, gl, &full(gl), "full fixture").xml;
    let text = element_text(&xml, "description_en").unwrap();
    assert!(
        text.starts_with("Input VAT &lt;24%") && text.ends_with(" &amp; more"),
        "{}: description_en written as {text}",
        gl.path
    );
}
