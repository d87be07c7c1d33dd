//! The alerting rules the package ships (D46): they check and pass their own tests under
//! promtool, and every metric they name is one a running service exports; `/metrics` in the
//! text format passes `promtool check metrics`.

use crate::common::{Reply, TestApp, reply_of, skip};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const RULES: &str = "packaging/prometheus/ap-intake.rules.yml";
const RULE_TESTS: &str = "packaging/prometheus/ap-intake.rules.test.yml";

/// `promtool <args>` in the rules' directory, or `None` (said) without promtool.
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus");
    match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(out) => Some(out),
        Err(e) => {
            skip::skip(&format!(
                "promtool is not installed ({e}; Debian's `prometheus` package has it)"
            ));
            None
        }
    }
}

#[test]
fn the_rules_check_and_pass_their_promtool_tests_d46() {
    for args in [
        ["check", "rules", "ap-intake.rules.yml"],
        ["test", "rules", "ap-intake.rules.test.yml"],
    ] {
        let Some(out) = promtool(&args) else { return };
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn get(url: &str) -> Reply {
    get_accepting(url, None)
}

fn get_accepting(url: &str, accept: Option<&str>) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(url);
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    reply_of(&mut req.call().unwrap())
}

/// What Prometheus 2 and 3 send when they scrape.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Issue 45, item 3: `/metrics` answered OpenMetrics even to `Accept: text/plain;
/// version=0.0.4`, and `promtool check metrics` (which reads the text format) found five
/// counters without help text. A scraper gets the format it asks for: OpenMetrics when it
/// prefers it (Prometheus), the text format otherwise, and that one passes promtool clean.
#[test]
fn metrics_come_in_the_format_asked_for_and_the_text_format_passes_promtool() {
    let app = TestApp::start();
    let gl = [crate::common::gl("4000")];
    assert_eq!(
        app.post_records("/general-ledger-codes/v1", &gl).status,
        202
    );
    assert_eq!(app.post("/nope", "{}").status, 404);
    let url = app.ops_url("/metrics");
    let open = get_accepting(&url, Some(PROMETHEUS_ACCEPT));
    assert_eq!(
        open.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(open.text.ends_with("# EOF\n"), "{}", open.text);
    assert!(
        open.text.contains("# TYPE ap_intake_requests counter\n"),
        "{}",
        open.text
    );
    for accept in [Some("text/plain; version=0.0.4"), Some("*/*"), None] {
        let text = get_accepting(&url, accept);
        assert_eq!(
            text.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8"),
            "{accept:?}"
        );
        assert!(!text.text.contains("# EOF"), "{}", text.text);
        for line in [
            "# TYPE ap_intake_requests_total counter\n",
            "# HELP ap_intake_requests_total ",
            "ap_intake_requests_total{interface=\"-\",status=\"404\"} 1\n",
            "# TYPE ap_intake_request_duration_seconds histogram\n",
        ] {
            assert!(text.text.contains(line), "{line:?} in:\n{}", text.text);
        }
        let Some(out) = promtool_with_stdin(&["check", "metrics"], &text.text) else {
            return;
        };
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && said.trim().is_empty(),
            "promtool: {said}"
        );
    }
}

/// `promtool <args>` reading `input`, or `None` (said) without promtool.
fn promtool_with_stdin(args: &[&str], input: &str) -> Option<std::process::Output> {
    use std::io::Write;
    let mut child = match Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            skip::skip(&format!(
                "promtool is not installed ({e}; Debian's `prometheus` package has it)"
            ));
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    Some(child.wait_with_output().unwrap())
}

/// The `ap_intake_*` names a text uses.
fn named(text: &str) -> BTreeSet<String> {
    regex::Regex::new(r"\bap_intake_[a-z_]+")
        .unwrap()
        .find_iter(text)
        .map(|m| m.as_str().to_string())
        .collect()
}

#[test]
fn every_metric_the_rules_name_is_exported_d46() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = std::fs::read_to_string(root.join(RULES)).unwrap();
    let tests = std::fs::read_to_string(root.join(RULE_TESTS)).unwrap();
    let wanted = named(&rules);
    assert!(wanted.len() >= 5, "{wanted:?}");
    assert_eq!(
        named(&tests),
        wanted,
        "the promtool tests write exactly the series the rules read"
    );

    let app = TestApp::start();
    assert_eq!(
        app.post_records("/general-ledger-codes/v1", &[crate::common::gl("4000")])
            .status,
        202
    );
    let metrics = get(&app.ops_url("/metrics"));
    assert_eq!(metrics.status, 200);
    // A counter's samples end in _total; OpenMetrics declares its family without it, the
    // text format with it.
    let declared: BTreeSet<String> = metrics
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    for name in &wanted {
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            declared.contains(family) || declared.contains(name),
            "{RULES} names {name}, which /metrics does not export:\n{}",
            metrics.text
        );
    }
    // The gauges added for the rules carry values now.
    assert!(
        metrics.text.contains("\nap_intake_ready 1\n"),
        "{}",
        metrics.text
    );
    assert!(
        metrics.text.contains(
            "ap_intake_queue_oldest_pending_age_seconds{interface=\"general-ledger-codes-v1\"}"
        ),
        "{}",
        metrics.text
    );
}
