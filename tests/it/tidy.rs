//! Invariants of the repository itself, kept as tests so the docs cannot drift from the code:
//! the crates' layering as Cargo resolves it (the core has no I/O dependency; the table in
//! ARCHITECTURE.md is Cargo's graph), `rust-version` as the locked graph needs it, and every
//! path ARCHITECTURE.md and DEVELOPERS.md name exists.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo metadata` of the workspace, as locked.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(root().join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Package id -> name, and id -> the ids it depends on for building (not dev, not build).
fn graph(meta: &Value) -> (BTreeMap<String, String>, BTreeMap<String, Vec<String>>) {
    let names = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let id = p["id"].as_str().unwrap().to_string();
            (id, p["name"].as_str().unwrap().to_string())
        })
        .collect();
    let edges = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap().to_string())
                .collect();
            (n["id"].as_str().unwrap().to_string(), deps)
        })
        .collect();
    (names, edges)
}

/// The names of every package `name` needs to build, itself excluded.
fn closure(meta: &Value, name: &str) -> BTreeSet<String> {
    let (names, edges) = graph(meta);
    let start = names.iter().find(|(_, n)| *n == name).unwrap().0.clone();
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.clone()];
    while let Some(id) = todo.pop() {
        for dep in edges.get(&id).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen.iter().map(|id| names[id].clone()).collect()
}

/// Crates that bring an async runtime, SQL, HTTP or sockets.
const IO: [&str; 12] = [
    "tokio",
    "mio",
    "socket2",
    "rusqlite",
    "libsqlite3-sys",
    "postgres",
    "tokio-postgres",
    "hyper",
    "warp",
    "ureq",
    "http",
    "rustls",
];

#[test]
fn the_core_crate_needs_no_io_runtime_sql_or_http() {
    let meta = metadata();
    let core = closure(&meta, "ap-intake-core");
    let found: Vec<&&str> = IO.iter().filter(|c| core.contains(**c)).collect();
    assert!(found.is_empty(), "ap-intake-core depends on {found:?}");
    assert!(!core.iter().any(|c| c.starts_with("ap-intake")), "{core:?}");
    // The queue speaks no HTTP and knows nothing of the service.
    let queue = closure(&meta, "ap-intake-queue");
    for c in ["hyper", "warp", "ureq", "http", "ap-intake"] {
        assert!(!queue.contains(c), "ap-intake-queue depends on {c}");
    }
}

#[test]
fn the_crate_table_of_architecture_md_is_cargos_graph() {
    let meta = metadata();
    let (names, edges) = graph(&meta);
    let ours: BTreeSet<String> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| names[id.as_str().unwrap()].clone())
        .collect();
    let mut cargo = BTreeMap::new();
    for (id, deps) in &edges {
        let name = &names[id];
        if ours.contains(name) {
            let inner: BTreeSet<String> = deps
                .iter()
                .map(|d| names[d].clone())
                .filter(|d| ours.contains(d))
                .collect();
            cargo.insert(name.clone(), inner);
        }
    }
    // | `crate` | `path` | role | `dep`, `dep` |
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let table = text
        .split("| crate | path |")
        .nth(1)
        .expect("ARCHITECTURE.md has the crate table");
    let mut documented = BTreeMap::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        let path = cells[2].trim_matches('`');
        assert!(root().join(path).join("Cargo.toml").exists(), "{row}");
        let deps: BTreeSet<String> = cells[4]
            .split(',')
            .map(|d| d.trim().trim_matches('`').to_string())
            .filter(|d| !d.is_empty() && d != "nothing")
            .collect();
        documented.insert(name, deps);
    }
    assert_eq!(
        documented, cargo,
        "ARCHITECTURE.md's crate table against Cargo"
    );
}

#[test]
fn rust_version_is_what_the_locked_graph_needs() {
    let meta = metadata();
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    let ours: BTreeSet<&str> = ["ap-intake", "ap-intake-core", "ap-intake-queue"].into();
    let mut declared = BTreeSet::new();
    let mut needed = (vec![0], String::new());
    for p in meta["packages"].as_array().unwrap() {
        let Some(v) = p["rust_version"].as_str() else {
            continue;
        };
        let name = p["name"].as_str().unwrap();
        if ours.contains(name) {
            declared.insert(v.to_string());
        } else if version(v) > needed.0 {
            needed = (version(v), name.to_string());
        }
    }
    assert_eq!(
        declared.len(),
        1,
        "one rust-version for the workspace: {declared:?}"
    );
    let declared = declared.pop_first().unwrap();
    let mut shown = needed.0.clone();
    shown.truncate(2);
    assert!(
        version(&declared) >= shown,
        "rust-version {declared}, but {} needs {:?}",
        needed.1,
        needed.0
    );
    assert_eq!(
        version(&declared),
        shown,
        "rust-version is above what anything needs"
    );
}

/// The sources and tests the docs name files in.
const TREES: [&str; 8] = [
    "",
    "src",
    "crates/core/src",
    "crates/queue/src",
    "tests",
    "tests/it",
    "tests/hostile",
    "benches",
];

/// The files of this name under `dir` (build outputs, git and node_modules left out).
fn found_under(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.ends_with("target") || p.ends_with(".git") || p.ends_with("node_modules") {
            continue;
        }
        if e.file_name() == name {
            out.push(p.clone());
        }
        if p.is_dir() {
            found_under(&p, name, out);
        }
    }
}

/// The files a path the docs name may be. It is looked for in the repository, then under
/// the crates' sources and the test trees, in that order (the docs name files as a reader of
/// that folder would; `queue/...` and `core/...` are the crates of those names), and the
/// first that has it is the one. A bare file name found in none of them directly (`fault.rs`,
/// in a sentence about the queue) is looked for anywhere in the product's trees (not the
/// tests' or the benchmarks'): it must be one file.
fn resolve(path: &str) -> Vec<PathBuf> {
    let path = path.trim_end_matches('/');
    let first = TREES
        .iter()
        .map(|base| root().join(base).join(path))
        .chain(
            [
                ("queue/", "crates/queue/src/"),
                ("core/", "crates/core/src/"),
            ]
            .iter()
            .filter_map(|(p, to)| path.strip_prefix(p).map(|rest| root().join(to).join(rest))),
        )
        .find(|c| c.exists());
    if let Some(found) = first {
        return vec![found];
    }
    let mut found = Vec::new();
    if !path.contains('/') {
        for d in ["src", "crates", "packaging", "systemd", "schemas"] {
            found_under(&root().join(d), path, &mut found);
        }
    }
    found
}

/// Whether a path the docs name names one file (or folder): none is a stale name, several an
/// ambiguous one (`wire.rs` alone could be any of three).
fn exists(path: &str) -> bool {
    // What builds and `.ci/run` make under target/ is not in a fresh clone.
    path.starts_with("target/") || resolve(path).len() == 1
}

/// The paths in `text`'s code spans: a span of path characters with a `/` or a file
/// extension; URL paths (`/readyz`), globs and placeholders are not files.
fn named_paths(text: &str) -> Vec<String> {
    let extensions = [
        ".rs", ".md", ".toml", ".sql", ".c", ".sh", ".json", ".xsd", ".py", ".ts", ".service",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            !s.is_empty()
                && !s.starts_with('/')
                && !s.contains("::")
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
                && (s.contains('/') || extensions.iter().any(|e| s.ends_with(e)))
        })
        .map(str::to_string)
        .collect()
}

/// The paths of DEVELOPERS.md's layout block: each entry under the folders it is indented in.
fn layout_paths(text: &str) -> Vec<String> {
    let block = text.split("## Layout").nth(1).unwrap();
    let block = block.split("```text\n").nth(1).unwrap();
    let block = block.split("```").next().unwrap();
    let mut folders: Vec<(usize, String)> = Vec::new();
    let mut paths = Vec::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start().len();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        // A continuation line of a description is indented far past any name.
        if indent > 12 || !name.contains(['.', '/']) {
            continue;
        }
        folders.retain(|(i, _)| *i < indent);
        let parent: String = folders.iter().map(|(_, f)| f.as_str()).collect();
        let path = format!("{parent}{name}");
        if name.ends_with('/') {
            folders.push((indent, name.to_string()));
        }
        paths.push(path);
    }
    paths
}

#[test]
fn every_path_the_developer_docs_name_exists() {
    let mut missing = Vec::new();
    for doc in ["ARCHITECTURE.md", "DEVELOPERS.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        for path in named_paths(&text) {
            if !exists(&path) {
                let found = resolve(&path).len();
                let why = if found == 0 {
                    "no such file"
                } else {
                    "names several files"
                };
                missing.push(format!("{doc}: `{path}`: {why}"));
            }
        }
        if doc == "DEVELOPERS.md" {
            let layout = layout_paths(&text);
            assert!(layout.len() > 80, "{layout:?}");
            for path in layout {
                if !root().join(&path).exists() {
                    missing.push(format!("{doc} layout: {path}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that do not name one file:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_path_readers_find_paths() {
    assert_eq!(
        named_paths("a `src/x.rs` b `/readyz` c `Cargo.toml` `x-api-key` `queue::Node`"),
        ["src/x.rs", "Cargo.toml"]
    );
    let layout = "## Layout\n```text\nsrc/\n  http/\n    mod.rs   x\n  main.rs   y\n                     more words/\nREADME.md\n```\n";
    assert_eq!(
        layout_paths(layout),
        [
            "src/",
            "src/http/",
            "src/http/mod.rs",
            "src/main.rs",
            "README.md"
        ]
    );
    assert!(exists("queue/sqlite/mod.rs") && exists("http/routes.rs") && exists("tidy.rs"));
    assert!(!exists("nothing.rs") && !exists("http/intake.rs"));
    // A bare name must name one file: there are several of these, none at a tree's top.
    assert!(!exists("wire.rs") && !exists("mod.rs"));
    // Looked for anywhere in the product's trees only: a test helper is not the intake.
    assert!(
        !exists("intake.rs"),
        "src/intake/mod.rs, not benches/load/intake.rs"
    );
    assert!(
        exists("service.rs"),
        "src/service.rs, before benches/load/service.rs"
    );
}

/// The engine files' code (comments and `#[cfg(test)]` modules left out), each with its path.
fn engine_code() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for engine in ["crates/queue/src/sqlite", "crates/queue/src/pg"] {
        for entry in std::fs::read_dir(root().join(engine)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            out.push((path, code));
        }
    }
    out
}

/// Issue 46: what the stored state numbers mean is written once, in `queue/codes.rs`; the
/// engines' SQL says `pending!()`, `parked!()`, ... (or binds `State::code`), never a number.
#[test]
fn engine_sql_names_no_state_number_of_its_own() {
    let literal = regex::Regex::new(
        r"(?i)\bstate\s*(=|!=|<>)\s*\d|\bstate\s+(not\s+)?in\s*\(\s*\d|\bstate\s*=\s*'\d|\bcase\s+[\w.]*state\s+when\s+\d",
    )
    .unwrap();
    let mut found = Vec::new();
    for (path, code) in engine_code() {
        for m in literal.find_iter(&code) {
            found.push(format!("{}: {}", path.display(), m.as_str()));
        }
    }
    assert!(
        found.is_empty(),
        "state numbers written in engine SQL (use queue/codes.rs):\n{}",
        found.join("\n")
    );
}

/// The module table of ARCHITECTURE.md: each row's modules (`main.rs`, `commands.rs` and
/// `copies.rs` are the binary's root, `main`) and the modules its "imports" column names.
fn module_table(text: &str) -> Vec<(Vec<String>, BTreeSet<String>)> {
    let table = text.split("| module | role | imports |").nth(1).unwrap();
    let words = regex::Regex::new(r"[a-z_][a-z0-9_]*").unwrap();
    let bracketed = regex::Regex::new(r"\([^)]*\)").unwrap();
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').collect();
            let modules = cells[1]
                .split(',')
                .map(|m| {
                    let m = m.split('`').nth(1).unwrap_or("").trim_end_matches(".rs");
                    match m {
                        "commands" | "copies" => "main".to_string(),
                        other => other.to_string(),
                    }
                })
                .collect();
            let imports = bracketed.replace_all(cells[3], "");
            let imports = words
                .find_iter(&imports)
                .map(|w| w.as_str().to_string())
                .collect();
            (modules, imports)
        })
        .collect()
}

/// Issue 46: ARCHITECTURE.md's module table is what `.ci/module-deps` finds in `src/`: each
/// row names exactly the crate's modules it imports, and every import points down the table
/// (a module may import the rows below it, never above).
#[test]
fn the_module_table_of_architecture_md_is_what_module_deps_finds() {
    let out = std::process::Command::new("python3")
        .arg(root().join(".ci/module-deps"))
        .args(["--no-tests", "--json"])
        .output()
        .unwrap();
    let found: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "module-deps --json: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let modules: BTreeSet<String> = found["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .chain(["main".to_string()])
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in found["edges"].as_array().unwrap() {
        let (from, to) = (e["from"].as_str().unwrap(), e["to"].as_str().unwrap());
        if to != "lib" && from != "lib" {
            edges.entry(from.into()).or_default().insert(to.into());
        }
    }
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let table = module_table(&text);
    let mut row_of = BTreeMap::new();
    let mut wrong = Vec::new();
    for (i, (row_modules, imports)) in table.iter().enumerate() {
        let named: BTreeSet<String> = imports.intersection(&modules).cloned().collect();
        let mut real = BTreeSet::new();
        for m in row_modules {
            row_of.insert(m.clone(), i);
            real.extend(edges.get(m).cloned().unwrap_or_default());
        }
        if named != real {
            wrong.push(format!(
                "{row_modules:?}: the table says {named:?}, the code {real:?}"
            ));
        }
    }
    for m in &modules {
        if !row_of.contains_key(m) {
            wrong.push(format!("{m}: no row"));
        }
    }
    for (from, tos) in &edges {
        for to in tos {
            if let (Some(a), Some(b)) = (row_of.get(from), row_of.get(to))
                && b <= a
            {
                wrong.push(format!("{from} imports {to}, which is not below it"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's module table:\n{}",
        wrong.join("\n")
    );
}
