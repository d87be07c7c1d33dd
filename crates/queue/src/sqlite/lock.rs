//! One process has the queue at a time: the service, or an operator command on the stopped
//! service, holds `<data_dir>/queue.lock`.

use crate::StoreError;
use std::path::Path;
use std::time::{Duration, Instant};

/// The lock file beside the queue.
const LOCK_NAME: &str = "queue.lock";

/// How long [`take`] waits for a lock that is being let go before it refuses. A lock can
/// outlive its holder's close for a moment: a process that forks while it holds the lock
/// hands the child a share of it until the child's `exec`, and a stopping service lets go
/// only as it exits (an operator's restart). A second service or command is still refused,
/// one second later.
const LOCK_GRACE: Duration = Duration::from_secs(1);

/// Takes the service's lock on `data_dir`, refusing when another service holds it.
pub(super) fn take(data_dir: &Path) -> Result<std::fs::File, StoreError> {
    use rustix::fs::{FlockOperation, flock};
    let path = data_dir.join(LOCK_NAME);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let deadline = Instant::now() + LOCK_GRACE;
    let mut taken = flock(&file, FlockOperation::NonBlockingLockExclusive);
    while taken == Err(rustix::io::Errno::WOULDBLOCK) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        taken = flock(&file, FlockOperation::NonBlockingLockExclusive);
    }
    match taken {
        Ok(()) => {
            // Who holds it, for the message another process gets.
            use std::io::Write;
            let mut f = &file;
            let _ = file
                .set_len(0)
                .and_then(|()| write!(f, "{}", std::process::id()));
            Ok(file)
        }
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .map_or_else(String::new, |pid| format!(" (process {pid})"));
            Err(StoreError::Busy(format!("{}{holder}", data_dir.display())))
        }
        Err(e) => Err(StoreError::Io(e.into())),
    }
}
