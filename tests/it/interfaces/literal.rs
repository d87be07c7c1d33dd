use crate::common::*;
use crate::interfaces::support::*;

use ap_intake::interfaces::INTERFACES;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// 9. Cases written out in full
// ---------------------------------------------------------------------------------------------

#[test]
fn gl_type_outside_the_enum_lists_deductable_and_vat() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "X", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/type",
        r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#,
        "type X",
    );
    let record = json!({"code": "4000", "type": "DEDUCTABLE", "description_en": "Office supplies",
        "catalog_product": "yes"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/catalog_product",
        r#"instance value ("yes") not found in enum (possible values: ["YES","NO"])"#,
        "catalog_product yes",
    );
}

#[test]
fn gl_empty_description_en_has_its_own_message_and_empty_code_is_too_short() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "VAT", "description_en": ""});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        "description_en is required.",
        "empty description_en",
    );
    let record = json!({"code": "", "type": "VAT", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/code",
        r#"string "" is too short (length: 0, required minimum: 1)"#,
        "empty code",
    );
    // An empty optional string is fine (D8).
    let record =
        json!({"code": "4000", "type": "VAT", "description_en": "Office supplies", "tax_code": ""});
    expect_accepted(&app, gl, &record, "empty tax_code");
}

#[test]
fn wrong_types_are_named_exactly() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": num("1.5"), "type": "VAT", "description_en": "Office supplies"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/code",
        r#"instance type (number) does not match any allowed primitive type (allowed: ["string"])"#,
        "code 1.5",
    );
    let record = json!({"code": "4000", "type": "VAT", "description_en": true});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        r#"instance type (boolean) does not match any allowed primitive type (allowed: ["string"])"#,
        "description_en true",
    );
    let po = iface("/purchase-orders/v1");
    let record = with(&minimal(po), "/rows/0/line_number", num("1.5"));
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/line_number",
        r#"instance type (number) does not match any allowed primitive type (allowed: ["integer"])"#,
        "line_number 1.5",
    );
    let record = with(&minimal(po), "/rows/0/unit_price", json!("19.99"));
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/unit_price",
        r#"instance type (string) does not match any allowed primitive type (allowed: ["number"])"#,
        "unit_price \"19.99\"",
    );
}

#[test]
fn po_v2_coding_percentages_must_sum_to_exactly_100() {
    let app = TestApp::start();
    let po = iface("/purchase-orders/v2");
    let coding = |line: u32, pct: &str, net: &str| {
        json!({"posting_line": line, "distribution_percentage": num(pct), "quantity": 1,
            "coding_net_amount": num(net), "coding_gross_amount": num(net),
            "coding_tax_code": "VAT24", "gl_code": "4000"})
    };
    let po_with = |codings: Vec<Value>| {
        json!({"po_number": "PO-7", "supplier_number": "V1", "po_date": "2024-03-15",
            "rows": [{"line_number": 7, "quantity": 1, "unit": "EA", "unit_price": 100,
                "unit_price_is_net": "true", "row_handling_style": "NO_MATCH",
                "partial_invoice_indicator": "FIRST_LINE", "tolerence_group": "DEFAULT",
                "coding": codings}]})
    };
    expect_one_error(
        &app,
        po,
        &po_with(vec![coding(1, "50", "50"), coding(2, "49.99", "49.99")]),
        "/rows/0/coding",
        "coding distribution_percentage must sum to 100 for line 7",
        "50 + 49.99",
    );
    expect_one_error(
        &app,
        po,
        &po_with(vec![coding(1, "50", "50"), coding(2, "50.01", "50.01")]),
        "/rows/0/coding",
        "coding distribution_percentage must sum to 100 for line 7",
        "50 + 50.01",
    );
    let item = expect_accepted(
        &app,
        po,
        &po_with(vec![
            coding(1, "33.33", "33.33"),
            coding(2, "33.33", "33.33"),
            coding(3, "33.34", "33.34"),
        ]),
        "33.33 + 33.33 + 33.34",
    );
    expect_valid_xml(po, &[&item], "33.33 + 33.33 + 33.34");
    assert!(
        item.xml
            .contains("<distribution_percentage>33.34</distribution_percentage>"),
        "{}: {}",
        po.path,
        item.xml
    );
}

#[test]
fn empty_rows_and_coding_arrays_are_too_short() {
    let app = TestApp::start();
    let po = iface("/purchase-orders/v1");
    expect_one_error(
        &app,
        po,
        &with(&minimal(po), "/rows", json!([])),
        "/rows",
        "array is too short: must have at least 1 elements but instance has 0 elements",
        "rows []",
    );
    // Every array the schemas require to be non-empty.
    let mut arrays = 0;
    for iface in &INTERFACES {
        let record = full(iface);
        for (path, prop) in all_props(iface, &record) {
            if prop["minItems"] != 1 {
                continue;
            }
            arrays += 1;
            expect_one_error(
                &app,
                iface,
                &with(&record, &path, json!([])),
                &path,
                ARRAY_EMPTY_MSG,
                &format!("{path} = []"),
            );
        }
    }
    assert!(arrays >= 5, "only {arrays} arrays with minItems found");
}

#[test]
fn vendor_bank_account_with_a_bad_iban_checksum_is_refused() {
    let app = TestApp::start();
    let vendor = iface("/vendor-data/v1");
    let record = with(
        &full(vendor),
        "/bank_accounts/0/iban",
        json!("DE89370400440532013001"),
    );
    expect_one_error(
        &app,
        vendor,
        &record,
        "/bank_accounts/0/iban",
        r#"string "DE89370400440532013001" is not a valid IBAN"#,
        "iban with a bad checksum",
    );
    let record = with(
        &full(vendor),
        "/bank_accounts/0/iban",
        json!("DE89 3704 0044 0532 0130 00"),
    );
    let item = expect_accepted(&app, vendor, &record, "iban in print format");
    expect_valid_xml(vendor, &[&item], "iban in print format");
}

#[test]
fn all_problems_of_a_record_are_reported_in_document_order() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    // Sent in another order than the schema's: entries follow the record as sent.
    let record =
        json!({"end_date": "2023-02-29", "code": "4000", "type": "X", "description_en": ""});
    expect_refused(
        &app,
        gl,
        &record,
        &[
            e(
                "/end_date",
                r#"string "2023-02-29" is not a valid calendar date"#,
            ),
            e(
                "/type",
                r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#,
            ),
            e("/description_en", "description_en is required."),
        ],
        "three problems",
    );

    // Nested and missing: a missing field comes after its object's present members.
    let po = iface("/purchase-orders/v1");
    let mut record = with(&minimal(po), "/po_date", json!("2024/01/01"));
    record = without(&record, "/rows/0/uom");
    record = with(&record, "/rows/0/quantity", num("1.1234567"));
    record = with(&record, "/zz", json!(1));
    expect_refused(
        &app,
        po,
        &record,
        &[
            e(
                "/po_date",
                r#"string "2024/01/01" does not match pattern "^\d{4}-\d{2}-\d{2}$""#,
            ),
            e(
                "/rows/0/quantity",
                "number 1.1234567 has more than 6 decimal places",
            ),
            e("/rows/0/uom", "required key [uom] not found"),
            e("/zz", "extraneous key [zz] is not permitted"),
        ],
        "four problems, nested",
    );
}

#[test]
fn errors_carry_the_index_of_their_record() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let records = [
        json!({"code": "A", "type": "X", "description_en": "a"}),
        json!({"code": "B", "type": "VAT"}),
    ];
    let r = app.post_records(gl.path, &records);
    assert_eq!(r.status, 400, "{}: {}", gl.path, r.text);
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{}: {}", gl.path, r.text);
    assert_eq!(body["total"], 2, "{}: {}", gl.path, r.text);
    assert_eq!(body["succeeded"], 0, "{}: {}", gl.path, r.text);
    assert_eq!(body["failed"], 2, "{}: {}", gl.path, r.text);
    assert_eq!(
        body["message"], "2 of 2 records failed validation",
        "{}: {}",
        gl.path, r.text
    );
    assert_eq!(
        r.errors(),
        vec![
            (
                0,
                "/type".to_string(),
                r#"instance value ("X") not found in enum (possible values: ["DEDUCTABLE","VAT"])"#
                    .to_string()
            ),
            (
                1,
                "/description_en".to_string(),
                "required key [description_en] not found".to_string()
            ),
        ],
        "{}",
        gl.path
    );
    assert!(
        app.store().items().unwrap().is_empty(),
        "{}: nothing queued",
        gl.path
    );
}

#[test]
fn payment_confirmation_with_one_bad_record_queues_nothing() {
    let app = TestApp::start();
    let pay = iface("/payment-confirmation/v1");
    let good = full(pay);
    let bad = with(
        &with(&good, "/softco_case_id", json!("SC-2")),
        "/payment_date",
        json!("2024-02-30"),
    );
    let r = app.post_records(pay.path, &[good, bad]);
    assert_eq!(r.status, 400, "{}: {}", pay.path, r.text);
    let body = r.json();
    assert_eq!(body["status"], "FAILED", "{}: {}", pay.path, r.text);
    assert_eq!(body["total"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(body["succeeded"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(body["failed"], 0, "{}: {}", pay.path, r.text);
    assert_eq!(
        body["message"], "No items could be processed as the structure was invalid.",
        "{}: {}",
        pay.path, r.text
    );
    assert_eq!(
        r.errors(),
        vec![(
            1,
            "/payment_date".to_string(),
            r#"string "2024-02-30" is not a valid calendar date"#.to_string()
        )],
        "{}",
        pay.path
    );
    assert!(
        app.store().items().unwrap().is_empty(),
        "{}: nothing queued",
        pay.path
    );
}

#[test]
fn control_character_is_refused_with_its_code_point() {
    let app = TestApp::start();
    let gl = iface("/general-ledger-codes/v1");
    let record = json!({"code": "4000", "type": "VAT", "description_en": "Bell\u{7}ring"});
    expect_one_error(
        &app,
        gl,
        &record,
        "/description_en",
        r#"string "Bell\u0007ring" contains a character that XML cannot carry (U+0007)"#,
        "BEL in description_en",
    );
    let po = iface("/purchase-orders/v2");
    let record = with(
        &full(po),
        "/rows/0/coding/0/coding_line_description",
        json!("a\u{7}b"),
    );
    expect_one_error(
        &app,
        po,
        &record,
        "/rows/0/coding/0/coding_line_description",
        r#"string "a\u0007b" contains a character that XML cannot carry (U+0007)"#,
        "BEL in a coding row",
    );
    // Tab, LF and CR are fine.
    let record = json!({"code": "4000", "type": "VAT", "description_en": "a\tb\nc\rd"});
    let item = expect_accepted(&app, gl, &record, "tab, LF and CR");
    expect_valid_xml(gl, &[&item], "tab, LF and CR");
}
