mod common;
use common::*;

#[test]
fn gl_code_is_accepted() {
    let app = TestApp::start();
    let r = app.post_records(
        "/general-ledger-codes/v1",
        &[fixture("general-ledger-codes", "minimal")],
    );
    assert_eq!(r.status, 202, "{}", r.text);
}
