//! openapi-python-client and datamodel-code-generator on the live document, default options.

use super::*;
use crate::common::KEY;

/// The venv's bin directory: .ci/run's target/ci-python, else whatever PATH has (None when
/// a tool is missing: the caller skips).
fn tools() -> Option<PathBuf> {
    let venv = installed("ci-python").join("bin");
    let dir = if venv.join("python3").exists() {
        venv
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).find(|d| d.join("openapi-python-client").exists())?
    };
    let needed = ["openapi-python-client", "datamodel-codegen", "python3"];
    let probe = Command::new(dir.join("python3"))
        .args(["-c", "import httpx, attrs, poetry.core"])
        .output();
    (needed.iter().all(|t| dir.join(t).exists()) && probe.is_ok_and(|o| o.status.success()))
        .then_some(dir)
}

/// Generates the client of `file` into `dir/client` and returns the generator's output.
fn generate(bin: &Path, file: &Path, dir: &Path) -> String {
    let out = run(Command::new(bin.join("openapi-python-client"))
        .args(["generate", "--path"])
        .arg(file)
        .arg("--output-path")
        .arg(dir.join("client")));
    let said = text(&out);
    for sign in [
        "will not be generated",
        "Unable to",
        "Could not",
        "duplicate",
    ] {
        assert!(
            !said.contains(sign),
            "the generator dropped a part:\n{said}"
        );
    }
    said
}

/// The generated package's directory.
fn package(dir: &Path) -> PathBuf {
    dir.join("client/ap_intake_client")
}

#[test]
fn openapi_python_client_generates_every_operation_and_a_model_per_component() {
    let Some(bin) = tools() else {
        return skip_without("openapi-python-client (target/ci-python, .ci/run)");
    };
    let app = TestApp::start();
    let dir = tempfile::tempdir().unwrap();
    let (doc, file) = write_document(&app, dir.path());
    generate(&bin, &file, dir.path());
    let pkg = package(dir.path());

    // A function module per operationId, under its tag.
    for (method, path, op) in operations(&doc) {
        let id = op["operationId"].as_str().unwrap();
        let tag = snake(op["tags"][0].as_str().unwrap());
        let module = pkg.join(format!("api/{tag}/{}.py", snake(id)));
        let source = std::fs::read_to_string(&module)
            .unwrap_or_else(|_| panic!("{method} {path}: no {}", module.display()));
        for f in ["def sync_detailed(", "def sync(", "async def asyncio("] {
            assert!(source.contains(f), "{}: no {f}", module.display());
        }
    }

    // Every model is named after a component; every interface has its request and record.
    let names = components(&doc);
    let mut models = BTreeSet::new();
    for entry in std::fs::read_dir(pkg.join("models")).unwrap() {
        let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for class in python_classes(&source) {
            assert!(names.contains(&class), "model {class} is no component");
            models.insert(class);
        }
        // No field typed Any (the catch-all dict of unknown fields aside).
        for line in source
            .lines()
            .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
        {
            let field = line.trim_start();
            let typed_any = field.split_once(": ").is_some_and(|(name, ty)| {
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && ty.split(|c: char| !c.is_alphanumeric()).any(|w| w == "Any")
            });
            assert!(
                !typed_any || field.starts_with("additional_properties:"),
                "a field typed Any: {line}"
            );
        }
    }
    for iface in ap_intake::interfaces::INTERFACES.iter() {
        let stem = snake(iface.id).replace('_', "").to_lowercase();
        for part in ["Request", "Record"] {
            assert!(
                models
                    .iter()
                    .any(|m| m.to_lowercase() == format!("{stem}{}", part.to_lowercase())),
                "{}: no {part} model in {models:?}",
                iface.path
            );
        }
    }
    assert!(
        !models.contains("V1") && !models.contains("V2"),
        "{models:?}"
    );
}

#[test]
fn a_generated_python_client_sends_every_example_and_parses_every_answer() {
    let Some(bin) = tools() else {
        return skip_without("openapi-python-client (target/ci-python, .ci/run)");
    };
    let (app, token) = app_with_tokens();
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = write_document(&app, dir.path());
    generate(&bin, &file, dir.path());
    // Installed as an integrator installs it; offline: poetry-core is in the venv.
    let site = dir.path().join("site");
    run(Command::new(bin.join("python3"))
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
        ])
        .arg("--target")
        .arg(&site)
        .arg(dir.path().join("client")));
    // With the API key, then with a bearer token (D47).
    for credential in [KEY, token.as_str()] {
        let out = run(Command::new(bin.join("python3"))
            .arg(support("use_python_client.py"))
            .arg(app.url(""))
            .arg(credential)
            .arg(&file)
            .env("PYTHONPATH", &site));
        let said = text(&out);
        // Ten paths, three checks each, and the invalid record.
        assert_eq!(
            said.lines().filter(|l| l.starts_with("ok: ")).count(),
            31,
            "{said}"
        );
    }
}

#[test]
fn datamodel_code_generator_names_every_class_after_a_component() {
    let Some(bin) = tools() else {
        return skip_without("datamodel-code-generator (target/ci-python, .ci/run)");
    };
    let app = TestApp::start();
    let dir = tempfile::tempdir().unwrap();
    let (doc, file) = write_document(&app, dir.path());
    let models = dir.path().join("models.py");
    run(Command::new(bin.join("datamodel-codegen"))
        .arg("--input")
        .arg(&file)
        .args(["--input-file-type", "openapi", "--output"])
        .arg(&models));
    let source = std::fs::read_to_string(&models).unwrap();
    let classes = python_classes(&source);
    let names = components(&doc);
    assert!(classes.len() >= 60, "{classes:?}");
    for class in &classes {
        assert!(
            names.contains(class),
            "class {class} is named after no component"
        );
    }
}

#[test]
fn a_schema_override_shows_in_a_generated_python_client() {
    let Some(bin) = tools() else {
        return skip_without("openapi-python-client (target/ci-python, .ci/run)");
    };
    let schemas = tempfile::tempdir().unwrap();
    gl_override(schemas.path());
    let app = TestApp::with_schemas(schemas.path());
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = write_document(&app, dir.path());
    generate(&bin, &file, dir.path());
    let model = package(dir.path()).join("models/general_ledger_codes_v1_record.py");
    let source = std::fs::read_to_string(model).unwrap();
    assert!(
        source.contains("    cost_owner: str | Unset = UNSET"),
        "{source}"
    );
    // Interfaces without an override keep the built-in schema.
    let items = package(dir.path()).join("models/non_inventory_items_v1_record.py");
    assert!(
        !std::fs::read_to_string(items)
            .unwrap()
            .contains("cost_owner")
    );
}
