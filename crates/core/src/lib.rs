//! ap-intake's pure core: what a record of each interface is ([`interfaces`]), how its numbers
//! are read exactly as written ([`number`]), its shape from its schema ([`shape`]), its
//! validation with the documented messages ([`validate`]), its primary key ([`key`]) and its
//! XML ([`xml`]); [`check`] puts them together into a request's answer.
//!
//! No async runtime, no SQL, no HTTP: the queue (`ap-intake-queue`) and the service depend on
//! this crate, never the other way, and the fuzz target runs it alone.
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

pub mod check;
pub mod interfaces;
pub mod key;
pub mod number;
pub mod shape;
pub mod tree;
pub mod validate;
pub mod xml;
