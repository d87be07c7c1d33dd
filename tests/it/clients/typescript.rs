//! openapi-typescript on the live document, default options; `tsc --strict` on every
//! documented example and on a script using openapi-fetch, which then runs under node.

use super::*;
use crate::common::KEY;
use serde_json::json;

/// .ci/run's target/ci-node (node_modules of tests/clients/package.json), when node runs.
fn tools() -> Option<PathBuf> {
    let dir = std::env::var_os("AP_INTAKE_NODE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| installed("ci-node"));
    let modules = dir.join("node_modules");
    let node = Command::new("node").arg("--version").output();
    (modules.join(".bin/openapi-typescript").exists()
        && modules.join(".bin/tsc").exists()
        && node.is_ok_and(|o| o.status.success()))
    .then_some(modules)
}

/// A TypeScript project in `dir`: the tools' node_modules, ES modules, `strict`.
fn project(dir: &Path, modules: &Path, files: &[&str]) {
    std::os::unix::fs::symlink(modules, dir.join("node_modules")).unwrap();
    std::fs::write(dir.join("package.json"), r#"{"type": "module"}"#).unwrap();
    let config = json!({
        "compilerOptions": {
            "strict": true, "target": "es2022", "module": "nodenext",
            "moduleResolution": "nodenext", "types": ["node"], "outDir": "out"
        },
        "files": files
    });
    std::fs::write(dir.join("tsconfig.json"), config.to_string()).unwrap();
}

/// `schema.d.ts` from the document in `file`, as `npx openapi-typescript` writes it.
fn generate(modules: &Path, file: &Path, dir: &Path) {
    run(Command::new(modules.join(".bin/openapi-typescript"))
        .arg(file)
        .arg("-o")
        .arg(dir.join("schema.d.ts")));
}

/// `tsc --strict --noEmit` on the project in `dir`.
fn type_check(modules: &Path, dir: &Path) {
    run(Command::new(modules.join(".bin/tsc"))
        .args(["--strict", "--noEmit", "-p"])
        .arg(dir.join("tsconfig.json")));
}

/// The schema component a media type declares: `components["schemas"]["X"]`.
fn declared(media: &Value) -> String {
    let r = media["schema"]["$ref"].as_str().unwrap();
    let name = r.rsplit('/').next().unwrap();
    format!("components[\"schemas\"][{}]", json!(name))
}

/// `value`, or what its `$ref` points at inside `doc`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap(),
        None => value,
    }
}

/// A TypeScript module typing every example of the document with the schema declared for it:
/// request bodies and answers, each a constant.
fn examples_module(doc: &Value) -> (String, usize) {
    let mut out = String::from("import type { components } from \"./schema.js\";\n\n");
    let mut n = 0;
    let mut add = |what: &str, media: &Value, value: &Value| {
        out.push_str(&format!(
            "// {what}\nexport const example{n}: {} = {value};\n\n",
            declared(media)
        ));
        n += 1;
    };
    for (method, path, op) in operations(doc) {
        let body = resolve(doc, &op["requestBody"]);
        if let Some(media) = body["content"].get("application/json") {
            add(&format!("{method} {path} body"), media, &media["example"]);
        }
        for (code, response) in op["responses"].as_object().unwrap() {
            let media = &resolve(doc, response)["content"]["application/json"];
            for (name, example) in media["examples"].as_object().unwrap() {
                add(
                    &format!("{method} {path} {code} {name}"),
                    media,
                    &example["value"],
                );
            }
        }
    }
    (out, n)
}

#[test]
fn every_documented_example_type_checks_under_tsc_strict() {
    let Some(modules) = tools() else {
        return skip_without("openapi-typescript and tsc (target/ci-node, .ci/run)");
    };
    let app = TestApp::start();
    let dir = tempfile::tempdir().unwrap();
    let (doc, file) = write_document(&app, dir.path());
    generate(&modules, &file, dir.path());
    let (source, n) = examples_module(&doc);
    // 21 operations, each a body or answers with examples.
    assert!(n > 250, "{n} examples");
    std::fs::write(dir.path().join("examples.ts"), source).unwrap();
    project(dir.path(), &modules, &["examples.ts"]);
    type_check(&modules, dir.path());
}

#[test]
fn a_script_on_openapi_fetch_compiles_under_tsc_strict_and_works() {
    let Some(modules) = tools() else {
        return skip_without("openapi-typescript and tsc (target/ci-node, .ci/run)");
    };
    let (app, token) = app_with_tokens();
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = write_document(&app, dir.path());
    generate(&modules, &file, dir.path());
    std::fs::copy(support("gl_codes.ts"), dir.path().join("gl_codes.ts")).unwrap();
    // README's example, as written there.
    let example = readme_example("TypeScript, with", "ts", &app.url(""), KEY);
    std::fs::write(dir.path().join("readme.ts"), &example).unwrap();
    project(dir.path(), &modules, &["gl_codes.ts", "readme.ts"]);
    type_check(&modules, dir.path());
    run(Command::new(modules.join(".bin/tsc"))
        .arg("-p")
        .arg(dir.path().join("tsconfig.json")));
    // With the API key, then with a bearer token (D47).
    for credential in [KEY, token.as_str()] {
        let out = run(Command::new("node")
            .arg(dir.path().join("out/gl_codes.js"))
            .arg(app.url(""))
            .arg(credential));
        let said = text(&out);
        assert_eq!(
            said.lines().filter(|l| l.starts_with("ok: ")).count(),
            4,
            "{said}"
        );
    }
    let out = run(Command::new("node").arg(dir.path().join("out/readme.js")));
    assert_eq!(text(&out).trim(), "202 1 record(s) queued", "{example}");
}

#[test]
fn a_schema_override_shows_in_the_generated_types() {
    let Some(modules) = tools() else {
        return skip_without("openapi-typescript and tsc (target/ci-node, .ci/run)");
    };
    let schemas = tempfile::tempdir().unwrap();
    gl_override(schemas.path());
    let app = TestApp::with_schemas(schemas.path());
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = write_document(&app, dir.path());
    generate(&modules, &file, dir.path());
    let types = std::fs::read_to_string(dir.path().join("schema.d.ts")).unwrap();
    let record = types
        .split("GeneralLedgerCodesV1Record: {")
        .nth(1)
        .and_then(|rest| rest.split("\n        };").next())
        .unwrap();
    assert!(record.contains("cost_owner?: string;"), "{record}");
}
