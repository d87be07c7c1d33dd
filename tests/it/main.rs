//! The integration tests, one binary (a test binary per file cost minutes of linking on two
//! cores): the real service in-process or the real binary on loopback ports, real SQLite
//! queues in temp dirs, real HTTP listeners standing in for the platform. `tests/hostile/`
//! is the other binary: it measures allocations with a global allocator of its own.
//!
//! Run one area with `cargo test --test it <module>::`, e.g. `cargo test --test it crash::`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests stop loudly on a broken expectation"
)]

mod common;

mod alerts;
mod audit;
mod batches;
mod binary;
mod cli;
mod clients;
mod cluster;
mod console;
mod crash;
mod delivery;
mod delivery_faults;
mod durability;
mod feed;
mod http_edge;
mod interfaces;
mod logs;
mod oauth2;
mod openapi;
mod ops;
mod outside;
mod platform_network;
mod proxy;
mod queue;
mod receipts;
mod reload;
mod replay;
mod schema_override;
mod status;
mod store_suite;
mod tidy;
mod tls;
