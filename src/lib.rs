//! ap-intake: an accounts-payable integration appliance.
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
pub mod interfaces;
pub mod keys;
pub mod live;
pub mod metrics;
pub mod number;
pub mod offline;
pub mod openapi;
pub mod queue;
pub mod reload;
pub mod service;
pub mod shape;
pub mod status;
pub mod telemetry;
pub mod tree;
pub mod validate;
pub mod xml;
