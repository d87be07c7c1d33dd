//! Hostile input (D23 to D27, D42 to D44): numbers, duplicate keys, encodings, connections and
//! HTTP/1.1 framing, budgets, request ids and log volume, each shown over real sockets against
//! the real service; property tests that mutate bodies generated from every interface's schema,
//! and that hold the early look at request heads to hyper's reading of them.
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
mod exposure;
mod fuzz;
mod heads;
mod meter;
mod numbers;
mod pressure;
mod shapes;

#[global_allocator]
static METER: meter::Meter = meter::Meter;

/// Held by the test that measures latency and by the tests that load both cores: a latency
/// bound (D27) is about the service, not about another test sharing the machine with it.
pub static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`HEAVY`] (a failed test elsewhere does not poison it for the others).
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
