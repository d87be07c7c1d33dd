//! Encodings (D25) and nesting (D27): UTF-8 only, a byte order mark skipped, gzip decoded with
//! the size limit on what it decodes to, other codings refused with a message that says what
//! is supported.

use super::common::*;
use std::io::Write;

const GL: &str = "/general-ledger-codes/v1";

fn gl_body(code: &str) -> String {
    format!(
        r#"{{"objects":{{"object":{{"record":[{{"code":"{code}","type":"DEDUCTABLE","description_en":"Café"}}]}}}}}}"#
    )
}

/// POSTs raw bytes with the key and these headers.
fn post_bytes(app: &TestApp, path: &str, body: &[u8], headers: &[(&str, &str)]) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.post(&app.url(path)).header("x-api-key", KEY);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.send(body).unwrap();
    reply_of(&mut resp)
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn assert_refused(r: &Reply, status: u16, message: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    let b = r.json();
    assert_eq!(b["status"], "FAILED");
    assert_eq!(b["message"], message, "{}", r.text);
    assert!(b["request_id"].is_string(), "{}", r.text);
}

fn assert_structure_failure(r: &Reply, message: &str) {
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.counts(), (0, 0, 0));
    assert_eq!(r.errors(), vec![(0, String::new(), message.to_string())]);
}

#[test]
fn a_utf8_byte_order_mark_is_skipped() {
    let app = TestApp::start();
    let body = format!("\u{FEFF}{}", gl_body("BOM1"));
    let r = post_bytes(&app, GL, body.as_bytes(), &[JSON]);
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(app.item("gl-code:main/BOM1").unwrap().xml.contains("Café"));
}

#[test]
fn only_utf8_is_accepted_whatever_the_charset_says() {
    let app = TestApp::start();
    for ct in [
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "Application/JSON; charset=\"utf-8\"",
    ] {
        let r = post_bytes(&app, GL, gl_body("CS1").as_bytes(), &[("Content-Type", ct)]);
        assert_eq!(r.status, 202, "{ct}: {}", r.text);
    }
    for (ct, value) in [
        ("application/json; charset=iso-8859-1", "iso-8859-1"),
        ("application/json; charset=utf-16", "utf-16"),
    ] {
        let r = post_bytes(&app, GL, gl_body("CS2").as_bytes(), &[("Content-Type", ct)]);
        assert_refused(
            &r,
            415,
            &format!("only UTF-8 JSON is accepted (charset={value})"),
        );
    }
}

/// A Latin-1 body used to get an unclear "not valid JSON"; now the offset of the first byte
/// that is not UTF-8, counted in the body as sent (a byte order mark included).
#[test]
fn bytes_that_are_not_utf8_are_a_structure_failure_naming_the_offset() {
    let app = TestApp::start();
    let latin1: Vec<u8> = gl_body("L1").chars().map(|c| c as u32 as u8).collect();
    let at = latin1.iter().position(|&b| b == 0xE9).unwrap();
    let r = post_bytes(&app, GL, &latin1, &[JSON]);
    assert_structure_failure(&r, &format!("request body is not valid UTF-8 (byte {at})"));
    let mut with_bom = b"\xEF\xBB\xBF".to_vec();
    with_bom.extend_from_slice(&latin1);
    let r = post_bytes(&app, GL, &with_bom, &[JSON]);
    assert_structure_failure(
        &r,
        &format!("request body is not valid UTF-8 (byte {})", at + 3),
    );
}

#[test]
fn gzip_bodies_are_decoded() {
    let app = TestApp::start();
    for coding in ["gzip", "GZIP", "identity, gzip"] {
        let code = format!("GZ-{}", coding.len());
        let body = gzip(gl_body(&code).as_bytes());
        let r = post_bytes(&app, GL, &body, &[JSON, ("Content-Encoding", coding)]);
        assert_eq!(r.status, 202, "{coding}: {}", r.text);
        assert!(
            app.item(&format!("gl-code:main/{code}")).is_some(),
            "{coding}"
        );
    }
    let r = post_bytes(
        &app,
        GL,
        gl_body("ID1").as_bytes(),
        &[JSON, ("Content-Encoding", "identity")],
    );
    assert_eq!(r.status, 202, "{}", r.text);
}

/// D25: the size limit applies to the decoded body; a bomb is refused as soon as it passes
/// the limit, not after inflating all of it.
#[test]
fn a_gzip_body_decoding_past_the_limit_gets_413() {
    let app = TestApp::start_with("", "[limits]\nmax_body_bytes = 1048576\n");
    // 64 MiB of spaces inside a valid document compress to about 64 KiB.
    let mut doc = gl_body("BOMB").into_bytes();
    doc.splice(1..1, std::iter::repeat_n(b' ', 64 << 20));
    let bomb = gzip(&doc);
    assert!(
        bomb.len() < 1 << 20,
        "the compressed body is within the limit"
    );
    let r = post_bytes(&app, GL, &bomb, &[JSON, ("Content-Encoding", "gzip")]);
    assert_refused(&r, 413, "the request body is larger than 1048576 bytes");
    assert!(app.item("gl-code:main/BOMB").is_none());
}

#[test]
fn a_body_that_is_not_gzip_is_refused() {
    let app = TestApp::start();
    let r = post_bytes(
        &app,
        GL,
        gl_body("NG").as_bytes(),
        &[JSON, ("Content-Encoding", "gzip")],
    );
    assert_eq!(r.status, 400, "{}", r.text);
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("gzip"), "{message}");
}

#[test]
fn other_content_codings_get_415_saying_what_is_supported() {
    let app = TestApp::start();
    for (header, named) in [
        ("br", "br"),
        ("deflate", "deflate"),
        ("gzip, br", "br"),
        ("gzip, gzip", "gzip"),
    ] {
        let r = post_bytes(
            &app,
            GL,
            gl_body("CE").as_bytes(),
            &[JSON, ("Content-Encoding", header)],
        );
        assert_refused(
            &r,
            415,
            &format!("content encoding {named} is not supported (supported: gzip, identity)"),
        );
    }
    assert!(app.item("gl-code:main/CE").is_none());
}

/// D25: only chunked framing; a request that also names another transfer coding gets 501.
#[test]
fn a_transfer_coding_other_than_chunked_gets_501() {
    let app = TestApp::start();
    let body = gl_body("TE1");
    let raw = format!(
        "POST {GL} HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let r = app.raw(raw.as_bytes());
    assert_eq!(r.status, 501, "{}", r.text);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("transfer encoding gzip is not supported"),
        "{}",
        r.text
    );
    assert!(app.item("gl-code:main/TE1").is_none());
}

/// D27: 64 levels of nesting are parsed (here in an unknown field, refused as such); one more
/// is a structure failure that says where.
#[test]
fn nesting_is_limited_to_64_levels() {
    let app = TestApp::start();
    // The envelope and the record take five levels.
    let nested = |levels: usize| {
        let x = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        format!(
            r#"{{"objects":{{"object":{{"record":[{{"code":"N1","type":"VAT","description_en":"d","x":{x}}}]}}}}}}"#
        )
    };
    let r = app.post(GL, &nested(59));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(
        r.errors(),
        vec![(0, "/x".into(), "extraneous key [x] is not permitted".into())]
    );
    let r = app.post(GL, &nested(60));
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.counts(), (0, 0, 0));
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("request body is nested more than 64 levels deep at line 1 column "),
        "{message}"
    );
}
