//! Hostile input (D23 to D27): numbers, duplicate keys, encodings, connections and budgets,
//! each shown over real sockets against the real service, and property tests that mutate
//! bodies generated from every interface's schema.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests stop loudly on a broken expectation"
)]

#[path = "../it/common/mod.rs"]
mod common;

mod budgets;
mod connections;
mod duplicates;
mod encoding;
mod fuzz;
mod meter;
mod numbers;
mod pressure;

#[global_allocator]
static METER: meter::Meter = meter::Meter;
