//! PostgreSQL for the benchmarks (D39): `--postgres URL` names a database the benchmark may
//! empty; its `ap_intake` schema is dropped before each run.

use ap_intake::config::{Backend, Config, Postgres};
use std::path::Path;

/// Drops the queue's schema, so a run starts on an empty queue.
pub fn reset(url: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect to --postgres");
    c.batch_execute("DROP SCHEMA IF EXISTS ap_intake CASCADE")
        .expect("drop the ap_intake schema");
}

/// The `[storage]` lines of a node on `url`.
pub fn storage_toml(url: &str, node: &str) -> String {
    format!("backend = \"postgres\"\n[storage.postgres]\nurl = \"{url}\"\nnode = \"{node}\"\n")
}

/// The checked settings of a node on `url`.
pub fn settings(url: &str, node: &str) -> Postgres {
    let text = format!("sandbox = true\n[storage]\n{}", storage_toml(url, node));
    match Config::parse(&text, Path::new("bench.toml"))
        .expect("postgres settings")
        .storage
        .backend
    {
        Backend::Postgres(p) => p,
        Backend::Sqlite => unreachable!("the config names postgres"),
    }
}

/// A fresh, empty queue: on PostgreSQL at `postgres` (node `node`) when given, else SQLite in
/// `dir`.
pub fn fresh_store(
    postgres: Option<&str>,
    dir: &Path,
    node: &str,
) -> std::sync::Arc<dyn ap_intake::queue::Store> {
    match postgres {
        Some(url) => {
            reset(url);
            std::sync::Arc::new(
                ap_intake::queue::PostgresStore::open(
                    &settings(url, node),
                    ap_intake::queue::Mode::Inspect,
                )
                .expect("open the PostgreSQL queue"),
            )
        }
        None => std::sync::Arc::new(
            ap_intake::queue::SqliteStore::open(dir, ap_intake::queue::Mode::Serve, 0)
                .expect("open the queue"),
        ),
    }
}

/// How long `stats` (what `status` and each `/metrics` scrape read per interface) takes on the
/// queue a run left behind: the median of 5.
pub fn print_stats_time(url: &str, interface: &str) {
    use ap_intake::queue::Store;
    let store = ap_intake::queue::PostgresStore::open(
        &settings(url, "bench-stats"),
        ap_intake::queue::Mode::Inspect,
    )
    .expect("open the PostgreSQL queue");
    let mut times: Vec<std::time::Duration> = (0..5)
        .map(|_| {
            let started = std::time::Instant::now();
            store.stats(interface).expect("stats");
            started.elapsed()
        })
        .collect();
    times.sort();
    let pending = store.stats(interface).expect("stats").pending;
    println!(
        "stats of {interface} at {pending} pending: median {:.1} ms",
        times[2].as_secs_f64() * 1000.0
    );
}
