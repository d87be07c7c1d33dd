//! The OpenAPI linters integrators and API gateways run on a document before they accept it:
//! redocly (`recommended` rules) and spectral (`spectral:oas`), both clean on the document of
//! a service with keys and of the sandbox (issue 45, item 4: redocly found no `servers`,
//! spectral no `servers` and no `info.contact`).

use super::*;

/// `node_modules/.bin` of .ci/run's target/ci-node, when it has both linters and node runs.
fn linters() -> Option<PathBuf> {
    let bin = installed("ci-node").join("node_modules/.bin");
    let node = Command::new("node").arg("--version").output();
    (bin.join("redocly").exists()
        && bin.join("spectral").exists()
        && node.is_ok_and(|o| o.status.success()))
    .then_some(bin)
}

#[test]
fn redocly_and_spectral_find_nothing_in_the_document() {
    let Some(bin) = linters() else {
        return skip_without("redocly and spectral (target/ci-node, .ci/run)");
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".spectral.yaml"),
        "extends: [\"spectral:oas\"]\n",
    )
    .unwrap();
    for (name, app) in [
        ("keys", TestApp::start()),
        ("sandbox", TestApp::start_with("sandbox = true", "")),
        ("tokens", app_with_tokens().0),
    ] {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, document(&app).to_string()).unwrap();
        let redocly = run(Command::new(bin.join("redocly"))
            .args(["lint", "--format=stylish", "--extends=recommended"])
            .arg(&file)
            .env("REDOCLY_TELEMETRY", "off")
            .env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true"));
        let said = text(&redocly);
        assert!(
            said.contains("Your API description is valid") && !said.contains(" warning "),
            "redocly on the {name} document:\n{said}"
        );
        let spectral = run(Command::new(bin.join("spectral"))
            .args(["lint", "--fail-severity=hint"])
            .arg(&file)
            .current_dir(dir.path()));
        let said = text(&spectral);
        assert!(
            said.contains("No results with a severity of 'hint' or higher found"),
            "spectral on the {name} document:\n{said}"
        );
    }
}
