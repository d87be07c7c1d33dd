//! The admin socket (D22): `status` and `requeue` talk to the running service over a Unix
//! socket in the data directory, readable and writable by its owner only. When no service
//! answers, the same commands run against the data directory itself.

use crate::delivery::Waker;
use crate::queue::{Item, QueueKey, SledStore, State, Store, StoreError};
use crate::status::{self, Report, Source};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// A command, sent as one line of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// The status report.
    Status,
    /// Keys in a state, of one interface (identifier) or all.
    Keys {
        /// Pending or rejected.
        state: State,
        /// Interface identifier.
        interface: Option<String>,
    },
    /// One item, with its XML.
    Show {
        /// The key in operator form.
        key: String,
    },
    /// Put a rejected record back in the queue.
    Requeue {
        /// The key in operator form.
        key: String,
    },
    /// Put every rejected record back.
    RequeueAllRejected,
}

/// The answer, one line of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// For `Status`.
    Status(Report),
    /// For `Keys`, in operator form.
    Keys(Vec<String>),
    /// For `Show`.
    Item(Option<Item>),
    /// For the requeue commands: how many went back.
    Requeued(usize),
    /// The command failed.
    Error(String),
}

/// Why the admin commands cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Neither the service nor the data directory can be reached.
    #[error(
        "cannot reach the running service ({socket}: {socket_error}) and cannot open the data directory {dir}: {dir_error}"
    )]
    Unreachable {
        /// The socket tried.
        socket: PathBuf,
        /// Why it did not answer.
        socket_error: String,
        /// The data directory.
        dir: PathBuf,
        /// Why it could not be opened.
        dir_error: String,
    },
    /// There is no queue in the data directory.
    #[error("no queue in {0}: the service has never run with this data directory (check --config)")]
    NoQueue(PathBuf),
}

/// The socket of the service whose data directory is `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.sock")
}

/// Runs one command against a store.
pub fn execute(store: &dyn Store, data_dir: &Path, source: Source, req: &Request) -> Response {
    let result = match req {
        Request::Status => status::build(store, data_dir, source).map(Response::Status),
        Request::Keys { state, interface } => store
            .keys(*state, interface.as_deref())
            .map(|keys| Response::Keys(keys.iter().map(ToString::to_string).collect())),
        Request::Show { key } => match QueueKey::parse(key) {
            Ok(k) => store.get(&k).map(Response::Item),
            Err(e) => Ok(Response::Error(e.to_string())),
        },
        Request::Requeue { key } => match QueueKey::parse(key) {
            Ok(k) => store
                .requeue(&k)
                .map(|done| Response::Requeued(usize::from(done))),
            Err(e) => Ok(Response::Error(e.to_string())),
        },
        Request::RequeueAllRejected => store.keys(State::Rejected, None).and_then(|keys| {
            let mut n = 0;
            for k in keys {
                n += usize::from(store.requeue(&k)?);
            }
            Ok(Response::Requeued(n))
        }),
    };
    result.unwrap_or_else(|e: StoreError| Response::Error(e.to_string()))
}

/// Asks the running service, or failing that reads the data directory.
pub fn query(data_dir: &Path, req: &Request) -> Result<Response, AdminError> {
    let socket = socket_path(data_dir);
    let socket_error = match ask(&socket, req) {
        Ok(r) => return Ok(r),
        Err(e) => e.to_string(),
    };
    if !SledStore::exists(data_dir) {
        return Err(AdminError::NoQueue(data_dir.to_path_buf()));
    }
    match SledStore::open(data_dir) {
        Ok(store) => Ok(execute(&store, data_dir, Source::DataDirectory, req)),
        Err(e) => Err(AdminError::Unreachable {
            socket,
            socket_error,
            dir: data_dir.to_path_buf(),
            dir_error: e.to_string(),
        }),
    }
}

fn ask(socket: &Path, req: &Request) -> std::io::Result<Response> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    Ok(serde_json::from_str(&answer)?)
}

/// Serves the admin socket until `shutdown` completes. The socket file is made owner-only.
pub async fn serve(
    data_dir: PathBuf,
    store: Arc<dyn Store>,
    waker: Waker,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let path = socket_path(&data_dir);
    // The queue is open, so no other service owns this directory: a socket left here is stale.
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "admin socket accept failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (store, data_dir, waker) = (Arc::clone(&store), data_dir.clone(), waker.clone());
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(read.take(64 * 1024));
            if reader.read_line(&mut line).await.is_err() {
                return;
            }
            let response = match serde_json::from_str::<Request>(&line) {
                Ok(req) => tokio::task::spawn_blocking(move || {
                    let r = execute(store.as_ref(), &data_dir, Source::Service, &req);
                    if matches!(r, Response::Requeued(n) if n > 0) {
                        waker.wake();
                    }
                    r
                })
                .await
                .unwrap_or_else(|e| Response::Error(e.to_string())),
                Err(e) => Response::Error(format!("bad request: {e}")),
            };
            let mut out = serde_json::to_vec(&response).unwrap_or_default();
            out.push(b'\n');
            let _ = write.write_all(&out).await;
        });
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}
