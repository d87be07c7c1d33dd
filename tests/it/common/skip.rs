//! A test that cannot run here says so where it shows, and fails where it must run.

use std::io::Write as _;

/// Set to 1 (CI does) to fail, instead of skipping, a test whose tool, database or privilege
/// is missing.
pub const REQUIRE_TOOLS: &str = "AP_INTAKE_REQUIRE_TOOLS";

/// Skips the calling test for want of `what`: a line on stderr written past the harness's
/// capture (so it shows even when the test passes), or a failure under [`REQUIRE_TOOLS`]=1.
pub fn skip(what: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    if std::env::var(REQUIRE_TOOLS).is_ok_and(|v| v == "1") {
        panic!("{test}: {what}, and {REQUIRE_TOOLS}=1");
    }
    // Direct writes to stderr are not captured by the test harness; eprintln! would be.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {what} (set {REQUIRE_TOOLS}=1 to fail instead)"
    );
}
