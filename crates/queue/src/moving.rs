//! `move-to-postgres` (D45): the embedded queue of a stopped service carried into a
//! PostgreSQL cluster in one transaction: every item not yet delivered (pending, rejected,
//! quarantined, with its version, its place in line and its attempts), the retry state and
//! the receipts. The embedded queue is left as it was, marked as moved; a key the cluster
//! holds already keeps whichever version is newer (D15). A second run copies nothing twice:
//! the marked queue is not read again, and every statement of the copy leaves what the
//! cluster holds as it is when it has it already.

pub use crate::carried::{Export, Exported, ExportedReceipt, ExportedSettled, Moved};
use crate::{PostgresStore, StoreError};
use std::path::Path;

/// Moves the embedded queue in `data_dir` into `cluster`. The service must be stopped: the
/// data directory's lock refuses the move otherwise ([`StoreError::Busy`]).
pub fn move_to_postgres(data_dir: &Path, cluster: &PostgresStore) -> Result<Moved, StoreError> {
    let Some((export, moved_before, _lock)) = crate::sqlite::export::read(data_dir)? else {
        return Err(StoreError::Missing(
            data_dir
                .join(crate::sqlite::FILE_NAME)
                .display()
                .to_string(),
        ));
    };
    if let Some(at) = moved_before {
        return Ok(Moved {
            moved_before_ms: Some(at),
            ..Moved::default()
        });
    }
    let moved = cluster.import(&export)?;
    crate::sqlite::export::mark_moved(data_dir, crate::now_ms())?;
    Ok(moved)
}

/// Undelivered items of an embedded queue in `data_dir` never moved to PostgreSQL: a
/// service started on PostgreSQL refuses to leave them behind unseen (D45). 0 when there is
/// no embedded queue, it was moved, or it holds nothing.
pub fn left_behind(data_dir: &Path) -> Result<u64, StoreError> {
    crate::sqlite::export::left_behind(data_dir)
}
