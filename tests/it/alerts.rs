//! The alerting rules the package ships (D46): they check and pass their own tests under
//! promtool, and every metric they name is one a running service exports.

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
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    reply_of(&mut agent.get(url).call().unwrap())
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
    // A counter's samples end in _total; its family is declared without it.
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
            declared.contains(family),
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
