//! ap-intake: an accounts-payable integration appliance. This crate is the service (HTTP edge,
//! intake, delivery, operator commands) over two libraries: `ap-intake-core` and
//! `ap-intake-queue` (ARCHITECTURE.md).
//!
//! ERP systems POST JSON records to nine interfaces ([`interfaces`]). Each request is
//! authenticated ([`http::auth`]), each record validated against its interface's JSON Schema
//! ([`validate`]), turned into XML ([`xml`]) and stored in a durable queue keyed by the
//! record's primary key ([`queue`]) before the client gets its answer ([`intake`]).
#![forbid(unsafe_code)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        reason = "unit tests stop loudly on a broken expectation"
    )
)]

pub mod admin;
pub mod budget;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod http;
pub mod intake;
pub mod keys;
pub mod live;
pub mod metrics;
pub mod oauth2;
pub mod offline;
pub mod openapi;
pub mod reload;
pub mod service;
pub mod status;
pub mod telemetry;

// The two libraries below the service, under the names the service's modules use: the core
// (ap-intake-core) and the queue (ap-intake-queue). Cargo keeps them from using the service.
pub use ap_intake_core::{interfaces, number, shape, tree, validate, xml};
pub use ap_intake_queue as queue;
