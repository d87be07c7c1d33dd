//! Benchmarks of ap-intake (see BENCHMARKS.md):
//!
//! ```text
//! cargo bench --bench load -- intake [--interface PATH|all] [--records N] [--concurrency C] [--duration S]
//! cargo bench --bench load -- delivery [--records N] [--batch-size B] [--interfaces K] [--hang]
//! cargo bench --bench load -- scale [--records N]
//! cargo bench --bench load -- memory [--concurrency C] [--body-mib M] [--rounds R] [--timeline]
//! cargo bench --bench load -- hostile [--requests N]
//! cargo bench --bench load -- floor [--rounds N] [--records N]
//! cargo bench --bench load -- backup [--records N] [--concurrency C]
//! cargo bench --bench load -- scrape [--records N] [--concurrency C] [--duration S] [--pairs P]
//! cargo bench --bench load -- feed [--rejections N] [--delivered N] [--postgres URL]
//! cargo bench --bench load -- kept [--rate R] [--duration S]
//! ```
//!
//! `intake` starts the release binary on a loopback port, drives it from C keep-alive clients
//! for S seconds with requests of N records with unique keys, then runs the same load through
//! the intake in-process (validation, XML, the queue, group commit with fsync; no HTTP) and reports
//! both and their ratio.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a benchmark stops loudly when its setup fails"
)]

mod backup;
mod bearer;
mod commits;
mod cpu;
mod delivery;
mod feed;
mod floor;
mod intake;
mod kept;
mod memory;
mod nginx;
mod pg;
mod records;
mod report;
mod scale;
mod scrape;
mod service;

use ap_intake::interfaces::{INTERFACES, Interface, by_path};
use clap::{Parser, Subcommand};
use std::time::Duration;

/// The in-process limit runs the library with the binary's allocator (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "ap-intake benchmarks")]
struct Args {
    #[command(subcommand)]
    what: What,
    /// cargo bench passes this; ignored.
    #[arg(long, hide = true, global = true)]
    bench: bool,
}

#[derive(Subcommand)]
enum What {
    /// The service under load, and the in-process limit.
    Intake {
        /// The interface's path, or `all` for each in turn (and a table at the end).
        #[arg(long, default_value = "/general-ledger-codes/v1")]
        interface: String,
        #[command(flatten)]
        load: LoadArgs,
        /// Skip the in-process limit.
        #[arg(long)]
        service_only: bool,
        /// Only the in-process limit (for profiling).
        #[arg(long, conflicts_with = "service_only")]
        limit_only: bool,
        /// Keep no receipts (`[receipts] retention_days = 0`), to see what they cost (D38).
        #[arg(long)]
        no_receipts: bool,
        /// Queue on PostgreSQL at this URL (its `ap_intake` schema is dropped first, D39).
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
        /// Service nodes sharing the queue (with --postgres); the clients are spread over them.
        #[arg(long, default_value_t = 1, requires = "postgres")]
        nodes: usize,
        /// Also send the same load to nginx answering a static 202 (started on a free port)
        /// and print the service's share of it.
        #[arg(long)]
        nginx: bool,
    },
    /// Drain pending records to a local receiver.
    Delivery {
        #[arg(long, default_value_t = 100_000)]
        records: usize,
        #[arg(long, default_value_t = 100)]
        batch_size: usize,
        /// Spread the records over this many interfaces (1 to 9), delivered in parallel.
        #[arg(long, default_value_t = 1)]
        interfaces: usize,
        /// The receiver never answers the first interface's documents.
        #[arg(long)]
        hang: bool,
        /// Queue the records with receipts: each delivery notes its outcome (D48).
        #[arg(long)]
        receipts: bool,
        /// Queue on PostgreSQL at this URL (its `ap_intake` schema is dropped first, D39).
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
    },
    /// Start time, status time, memory and disk with many pending records.
    Scale {
        #[arg(long, default_value_t = 1_000_000)]
        records: usize,
    },
    /// Peak resident memory under concurrent bodies of the worst shapes (D27).
    Memory {
        /// Bodies sent at once in each batch.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Size of each body in MiB (at most; the default is the default `max_body_bytes`).
        #[arg(long, default_value_t = 32)]
        body_mib: usize,
        /// Times every shape (and the mixed batch) is sent.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Also print resident memory every 250 ms of each batch.
        #[arg(long)]
        timeline: bool,
    },
    /// Latency of small requests carrying exponent bombs beside ordinary ones (D23).
    Hostile {
        /// Requests of each kind.
        #[arg(long, default_value_t = 2000)]
        requests: usize,
    },
    /// `ap-intake backup` of many pending records while clients keep sending (D45).
    Backup {
        #[arg(long, default_value_t = 1_000_000)]
        records: usize,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// The intake with `/metrics` and `/readyz` asked every second, and without, alternated.
    Scrape {
        #[command(flatten)]
        load: LoadArgs,
        /// Runs of each kind.
        #[arg(long, default_value_t = 3)]
        pairs: usize,
    },
    /// Requests with a bearer token (D47) and with an API key, alternated on one service.
    Bearer {
        #[command(flatten)]
        load: LoadArgs,
        /// Runs of each kind.
        #[arg(long, default_value_t = 3)]
        pairs: usize,
    },
    /// The disk `[retention] delivered_days = 7` takes, against keeping nothing (D49).
    Kept {
        /// Records a second.
        #[arg(long, default_value_t = 1500)]
        rate: u64,
        /// Seconds of load on each side.
        #[arg(long, default_value_t = 60)]
        duration: u64,
    },
    /// The outcome feed (D48): rejections among deliveries, paged through at 500 a page.
    Feed {
        #[arg(long, default_value_t = 10_000)]
        rejections: usize,
        #[arg(long, default_value_t = 40_000)]
        delivered: usize,
        /// Queue on PostgreSQL at this URL (its `ap_intake` schema is dropped first, D39).
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
    },
    /// What the machine allows without ap-intake: the disk's fsync latency, and SQLite alone
    /// storing GL-sized records durably at 1, 100 and 1,000 a commit.
    Floor {
        /// Writes and fsyncs of each size.
        #[arg(long, default_value_t = 500)]
        rounds: usize,
        /// Records stored at 100 and at 1,000 a commit (a hundredth of them at 1 a commit).
        #[arg(long, default_value_t = 200_000)]
        records: usize,
    },
}

/// The intake load of `intake` and `scrape`.
#[derive(clap::Args)]
struct LoadArgs {
    /// Records per request.
    #[arg(long, default_value_t = 100)]
    records: usize,
    /// Keep-alive clients sending at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds a run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
}

impl LoadArgs {
    fn of(&self, iface: &'static Interface, receipts: bool) -> intake::Load {
        intake::Load {
            iface,
            per_request: self.records,
            concurrency: self.concurrency,
            duration: Duration::from_secs(self.duration),
            receipts,
        }
    }
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "machine: {} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model()
    );
    match args.what {
        What::Intake {
            interface,
            load: args,
            service_only,
            limit_only,
            no_receipts,
            postgres,
            nodes,
            nginx,
        } => {
            let ifaces: Vec<&'static Interface> = if interface == "all" {
                INTERFACES.iter().collect()
            } else {
                vec![
                    by_path(&interface)
                        .unwrap_or_else(|| panic!("{interface} is not an interface")),
                ]
            };
            let side = Side {
                service: !limit_only,
                limit: !service_only,
                nginx,
                postgres,
                nodes,
            };
            let mut failures = 0;
            let mut summary = Vec::new();
            for iface in ifaces {
                let load = args.of(iface, !no_receipts);
                let (served, limit) = intake_run(&runtime, dir.path(), &load, &side);
                failures += served.as_ref().map_or(0, |r| r.errors());
                failures += limit.as_ref().map_or(0, |r| r.errors());
                summary.push((iface.path, served, limit));
            }
            if summary.len() > 1 {
                println!(
                    "\n{:<32} {:>18} {:>18}",
                    "interface", "service records/s", "limit records/s"
                );
                for (path, served, limit) in &summary {
                    let rate = |r: &Option<report::Run>| {
                        r.as_ref()
                            .map_or("-".to_string(), |r| format!("{:.0}", r.records_per_sec()))
                    };
                    println!("{path:<32} {:>18} {:>18}", rate(served), rate(limit));
                }
            }
            if failures > 0 {
                eprintln!("{failures} request(s) failed");
                std::process::exit(1);
            }
        }
        What::Delivery {
            records,
            batch_size,
            interfaces,
            hang,
            postgres,
            receipts,
        } => {
            let store = pg::fresh_store(postgres.as_deref(), &dir.path().join("queue"), "bench");
            delivery::fill_in(store.as_ref(), records, "D", interfaces, receipts);
            let rate = runtime.block_on(delivery::drain(
                store, records, batch_size, interfaces, hang,
            ));
            println!("delivery: {rate:.0} records/s");
        }
        What::Scale { records } => scale::run(dir.path(), records),
        What::Backup {
            records,
            concurrency,
        } => backup::run(&runtime, dir.path(), records, concurrency),
        What::Memory {
            concurrency,
            body_mib,
            rounds,
            timeline,
        } => {
            let args = memory::MemoryArgs {
                concurrency,
                body_mib,
                rounds,
                timeline,
            };
            if !memory::memory(&runtime, dir.path(), &args) {
                std::process::exit(1);
            }
        }
        What::Hostile { requests } => {
            if !memory::hostile(&runtime, dir.path(), requests) {
                std::process::exit(1);
            }
        }
        What::Floor { rounds, records } => floor::run(dir.path(), rounds, records),
        What::Kept { rate, duration } => kept::run(&runtime, dir.path(), rate, duration),
        What::Feed {
            rejections,
            delivered,
            postgres,
        } => feed::run(dir.path(), rejections, delivered, postgres.as_deref()),
        What::Bearer { load, pairs } => {
            let gl = by_path("/general-ledger-codes/v1").expect("GL codes");
            bearer::run(&runtime, dir.path(), &load.of(gl, true), pairs);
        }
        What::Scrape { load, pairs } => {
            let gl = by_path("/general-ledger-codes/v1").expect("GL codes");
            scrape::run(&runtime, dir.path(), &load.of(gl, true), pairs);
        }
    }
}

/// Which sides an intake run measures, and where its queue is.
struct Side {
    service: bool,
    limit: bool,
    nginx: bool,
    postgres: Option<String>,
    nodes: usize,
}

/// One intake load against the service (and nginx) and in-process; prints each side.
fn intake_run(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    load: &intake::Load,
    side: &Side,
) -> (Option<report::Run>, Option<report::Run>) {
    let (iface, postgres) = (load.iface, side.postgres.as_deref());
    println!(
        "intake: {} records/request, {} clients, {} s, {}{}{}",
        load.per_request,
        load.concurrency,
        load.duration.as_secs(),
        iface.path,
        if load.receipts { "" } else { ", no receipts" },
        match postgres {
            Some(_) => format!(", PostgreSQL, {} node(s)", side.nodes),
            None => String::new(),
        }
    );
    let mut served = None;
    if side.service {
        if let Some(url) = postgres {
            pg::reset(url);
        }
        let svcs: Vec<service::Service> = (0..side.nodes)
            .map(|n| {
                let node = format!("bench-{}-{n}", iface.id);
                let config = service::write_config_on(
                    dir,
                    &dir.join(&node),
                    None,
                    postgres.map(|u| (u, node.as_str())),
                    &format!("{node}.toml"),
                );
                if !load.receipts {
                    let text = std::fs::read_to_string(&config).expect("read config");
                    std::fs::write(&config, text + "[receipts]\nretention_days = 0\n")
                        .expect("write config");
                }
                service::Service::start(&config)
            })
            .collect();
        let addrs: Vec<_> = svcs.iter().map(|s| s.addr).collect();
        // One node's threads per record only when it took every record.
        let pid = (svcs.len() == 1).then(|| svcs[0].child.id());
        let admin = if svcs.len() == 1 { svcs[0].admin } else { None };
        let metrics = commits::client();
        let read_commits = |admin| runtime.block_on(commits::buckets(&metrics, admin));
        let commits_before = admin.map(read_commits);
        let before = pid.map(|p| cpu::Sample::of(Some(p)));
        let mut run = runtime.block_on(intake::against_service(&addrs, load));
        let cpu = before.map(|b| cpu::Sample::of(pid).per_record(&b, run.records));
        let commits = admin
            .zip(commits_before)
            .and_then(|(a, b)| commits::Commits::between(&b, &read_commits(a)));
        let rss = svcs
            .iter()
            .map(service::Service::rss_mib)
            .fold(0.0, f64::max);
        drop(svcs);
        run.print("service");
        if let Some(cpu) = cpu {
            println!("service {cpu}");
        }
        if let Some(c) = commits {
            println!("service {}", c.summary());
        }
        println!("service resident memory after the run: {rss:.1} MiB");
        if let Some(url) = postgres {
            pg::print_stats_time(url, iface.id);
        }
        if side.nginx
            && let Some(n) = nginx::Nginx::start(dir)
        {
            let mut base = runtime.block_on(intake::against_service(&[n.addr], load));
            base.print("nginx static 202");
            println!(
                "ratio service / nginx: {:.2}",
                run.records_per_sec() / base.records_per_sec()
            );
        }
        served = Some(run);
    }
    let mut limit = None;
    if side.limit {
        let store = pg::fresh_store(
            postgres,
            &dir.join(format!("limit-{}", iface.id)),
            "bench-limit",
        );
        let mut run = runtime.block_on(intake::in_process(store, load));
        run.print("in-process limit");
        if let Some(s) = &served {
            println!(
                "ratio service / limit: {:.2}",
                s.records_per_sec() / run.records_per_sec()
            );
        }
        limit = Some(run);
    }
    (served, limit)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into())
}
