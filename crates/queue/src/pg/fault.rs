//! The one place a PostgreSQL error becomes the product's [`StoreError`]: by its SQLSTATE
//! code and the types in its chain of causes, never by its text.

use crate::{Source, StoreError};
use postgres::error::SqlState;

/// A transaction the database ended to break a deadlock (or a serialization failure): nothing
/// of it was written, and it may simply run again. Nodes lock the same keys in different
/// orders (one's resend in key order, another's delivery in line order, a heartbeat in table
/// order), and rather than order every statement's locks, the loser runs again.
pub(super) fn conflicted(e: &postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        [
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ]
        .contains(code)
    })
}

/// The product's error for `e`, met on the database `at` (its URL without the password).
pub(super) fn error_at(at: &str, e: postgres::Error) -> StoreError {
    let at = at.to_string();
    if let Some(code) = e.code() {
        if [SqlState::DISK_FULL, SqlState::OUT_OF_MEMORY].contains(code) {
            return StoreError::Full(format!("the database {at} reports: {e}"));
        }
        if [
            SqlState::INVALID_PASSWORD,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
        ]
        .contains(code)
        {
            return StoreError::Denied {
                at,
                source: Box::new(e),
            };
        }
        // The server going down or not yet up: as good as unreachable, and as passing.
        if [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_FAILURE,
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
        ]
        .contains(code)
        {
            return StoreError::Unreachable {
                at,
                source: Box::new(e),
            };
        }
    }
    let source: Source = Box::new(e);
    if caused_by::<rustls::Error>(source.as_ref()) {
        return StoreError::Untrusted { at, source };
    }
    if caused_by::<std::io::Error>(source.as_ref()) || is_closed(source.as_ref()) {
        return StoreError::Unreachable { at, source };
    }
    StoreError::Engine {
        engine: crate::Engine::Postgres,
        at,
        source,
    }
}

/// Whether `e` or one of its causes is a `T`, also inside an `io::Error` (whose `source`
/// skips the error it wraps: a TLS failure reaches the client as one).
fn caused_by<T: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.is::<T>() {
            return true;
        }
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// A connection the server or the network closed.
fn is_closed(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<postgres::Error>()
        .is_some_and(postgres::Error::is_closed)
}
