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

/// Whether a file of this name is anywhere under `dir`.
fn anywhere(dir: &Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        let skip = p.ends_with("target") || p.ends_with(".git") || p.ends_with("node_modules");
        !skip && (e.file_name() == name || (p.is_dir() && anywhere(&p, name)))
    })
}

/// Where a path the docs name may be: the repository, or under one of the crates' sources
/// and the test trees (the docs name files as a reader of that folder would); `queue/...` and
/// `core/...` are the crates of those names. A bare file name (`wire.rs`, in a sentence about
/// the HTTP edge) is a file of that name somewhere in those trees.
fn exists(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    // What builds and `.ci/run` make under target/ is not in a fresh clone.
    if path.starts_with("target/") {
        return true;
    }
    if !path.contains('/') {
        return [
            "src",
            "crates",
            "tests",
            "benches",
            "packaging",
            "systemd",
            "schemas",
        ]
        .iter()
        .any(|d| anywhere(&root().join(d), path))
            || root().join(path).exists();
    }
    let candidates: Vec<PathBuf> = TREES
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
        .collect();
    candidates.iter().any(|c| c.exists())
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
                missing.push(format!("{doc}: `{path}`"));
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
        "paths that do not exist:\n{}",
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
    assert!(exists("queue/sqlite/mod.rs") && exists("http/routes.rs") && exists("wire.rs"));
    assert!(!exists("nothing.rs") && !exists("http/intake.rs"));
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
        r"(?i)\bstate\s*(=|!=|<>)\s*\d|\bstate\s+(not\s+)?in\s*\(\s*\d|\bstate\s*=\s*'\d",
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
