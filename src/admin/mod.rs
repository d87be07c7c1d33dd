//! The admin socket (D22, D37): `status`, `requeue` and `drop` talk to the running service
//! over a Unix socket (`[admin] socket`; by default in systemd's runtime directory, else in
//! the data directory), readable and writable by its owner only. When no service answers,
//! the same commands run against the store in the data directory itself. The commands and
//! answers cross the socket in their wire form, versioned ([`wire`]).

pub mod audit;
pub mod replay;
pub mod wire;

use crate::config::Locations;
use crate::delivery::Waker;
use crate::queue::{self, Item, Mode, QueueKey, State, Store, StoreError};
use crate::status::{self, Report, Source};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// A command (sent as one line of JSON, [`wire::Request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The status report.
    Status,
    /// Keys in a state, of one interface (identifier) or all.
    Keys {
        /// Pending, rejected or quarantined.
        state: State,
        /// Interface identifier.
        interface: Option<String>,
    },
    /// One item, with its XML.
    Show {
        /// The key in operator form.
        key: String,
    },
    /// Put a rejected or quarantined record back in the queue.
    Requeue {
        /// The key in operator form.
        key: String,
    },
    /// Put every record in a state (rejected or quarantined) back.
    RequeueAll {
        /// The state.
        state: State,
    },
    /// Remove a rejected or quarantined record for good.
    Drop {
        /// The key in operator form.
        key: String,
    },
    /// The receipts of a request id, whichever key sent it (D38).
    Receipts {
        /// The request id.
        request_id: String,
    },
    /// The audit trail from a time on (D50).
    Audit {
        /// Unix ms.
        since_ms: u64,
    },
    /// Queue kept delivered versions again (D49).
    Replay(replay::Asked),
    /// Adds an audit record of an action a command took outside the service (a backup),
    /// in the name of whoever sent it (D50).
    Note {
        /// The action.
        action: String,
        /// Its arguments (a JSON object).
        args: serde_json::Value,
        /// What it changed (a JSON object).
        changed: serde_json::Value,
    },
}

/// The answer (one line of JSON, [`wire::Response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// For `Status`.
    Status(Report),
    /// For `Keys` of pending records, in operator form.
    Keys(Vec<String>),
    /// For `Keys` of rejected or quarantined records: each key and why it is parked.
    Parked(Vec<ParkedRecord>),
    /// For `Show`.
    Item(Option<Item>),
    /// For the requeue commands: how many went back.
    Requeued(usize),
    /// For `Drop`: whether the record was removed.
    Dropped(bool),
    /// For `Receipts`.
    Receipts(Vec<crate::queue::receipt::Receipt>),
    /// For `Audit`, oldest first.
    Audit(Vec<crate::queue::audit::AuditRecord>),
    /// For `Note`: recorded.
    Noted,
    /// For `Replay`.
    Replayed(replay::Done),
    /// The command failed.
    Error(String),
}

/// A parked record and the reason it is parked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedRecord {
    /// The key in operator form.
    pub key: String,
    /// The platform's answer, or why it was quarantined.
    pub reason: String,
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
    #[error(
        "no queue in {0}: the service has not run with this data directory, or its queue file \
         was removed (check --config and [storage] data_dir)"
    )]
    NoQueue(PathBuf),
    /// The running service answered in a version of the protocol this release cannot read.
    #[error(
        "the running service answered on {socket}, but {error}: use the ap-intake of the \
         service's release"
    )]
    Version {
        /// The socket that answered.
        socket: PathBuf,
        /// What cannot be read.
        error: wire::LineError,
    },
}

/// Where the packaged unit's service listens when the operator's shell has no
/// `RUNTIME_DIRECTORY` to tell (`RuntimeDirectory=ap-intake`, D37).
const PACKAGED_SOCKET: &str = "/run/ap-intake/admin.sock";

/// The most audit records one `status audit` lists.
const AUDIT_LISTED: usize = 100_000;

/// Runs one command of `actor`'s against a store; what changes the queue is recorded in the
/// audit trail (D50).
pub fn execute(
    store: &dyn Store,
    data_dir: &Path,
    source: Source,
    req: &Request,
    actor: &audit::Actor,
) -> Response {
    let response = run(store, data_dir, source, req, actor);
    let noted = match (req, &response) {
        (Request::Requeue { key }, Response::Requeued(n)) => {
            Some(("requeue", json!({ "key": key }), json!({ "requeued": n })))
        }
        (Request::Drop { key }, Response::Dropped(done)) => {
            Some(("drop", json!({ "key": key }), json!({ "dropped": done })))
        }
        (
            Request::Note {
                action,
                args,
                changed,
            },
            Response::Noted,
        ) => Some((action.as_str(), args.clone(), changed.clone())),
        (Request::Replay(asked), Response::Replayed(done)) if !done.dry_run => Some((
            "replay",
            serde_json::to_value(asked).unwrap_or_default(),
            done.changed(),
        )),
        _ => None,
    };
    let Some((action, args, changed)) = noted else {
        return response;
    };
    match audit::record(store, actor, action, &args, &changed) {
        Ok(()) => response,
        Err(e) => Response::Error(format!(
            "{action} done, but its audit record could not be written: {e}"
        )),
    }
}

/// Runs one command against a store.
fn run(
    store: &dyn Store,
    data_dir: &Path,
    source: Source,
    req: &Request,
    actor: &audit::Actor,
) -> Response {
    let result = match req {
        Request::Status => status::build(store, data_dir, source).map(Response::Status),
        Request::Keys {
            state: State::Pending,
            interface,
        } => store
            .keys(State::Pending, interface.as_deref())
            .map(|keys| Response::Keys(keys.iter().map(ToString::to_string).collect())),
        Request::Keys { state, interface } => {
            store.keys(*state, interface.as_deref()).and_then(|keys| {
                let parked = keys.iter().map(|k| {
                    Ok(ParkedRecord {
                        key: k.to_string(),
                        reason: match store.get(k) {
                            Ok(item) => item.and_then(|i| i.last_error).unwrap_or_default(),
                            // A quarantined row may not read back as an item at all.
                            Err(StoreError::Corrupt { reason, .. }) => {
                                format!("cannot be read: {reason}")
                            }
                            Err(e) => return Err(e),
                        },
                    })
                });
                Ok(Response::Parked(parked.collect::<Result<_, StoreError>>()?))
            })
        }
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
        Request::RequeueAll { state } => store.keys(*state, None).and_then(|keys| {
            let mut back = Vec::new();
            for k in keys {
                if store.requeue(&k)? {
                    back.push(k.to_string());
                }
            }
            // Recorded here, where the keys are known (D50).
            let args = json!({ "state": state.name(), "all": true });
            let changed = audit::keys(&back);
            let n = back.len();
            audit::record(store, actor, "requeue", &args, &changed).map(|()| Response::Requeued(n))
        }),
        Request::Drop { key } => match QueueKey::parse(key) {
            Ok(k) => store.discard(&k).map(Response::Dropped),
            Err(e) => Ok(Response::Error(e.to_string())),
        },
        Request::Receipts { request_id } => {
            store.receipts(request_id, None).map(Response::Receipts)
        }
        Request::Audit { since_ms } => store
            .audit_trail(*since_ms, AUDIT_LISTED)
            .map(Response::Audit),
        Request::Note { .. } => Ok(Response::Noted),
        Request::Replay(asked) => match asked.window() {
            Ok(window) => store
                .replay(&window, asked.dry_run)
                .map(|r| Response::Replayed(replay::Done::of(&r, asked.dry_run))),
            Err(e) => Ok(Response::Error(e)),
        },
    };
    result.unwrap_or_else(|e: StoreError| Response::Error(e.to_string()))
}

/// Asks the running service, or failing that opens the store in the data directory.
pub fn query(at: &Locations, req: &Request) -> Result<Response, AdminError> {
    let mut sockets = vec![at.admin_socket.clone()];
    if std::env::var_os("RUNTIME_DIRECTORY").is_none() {
        sockets.push(PathBuf::from(PACKAGED_SOCKET));
    }
    let mut socket_error = String::new();
    for socket in &sockets {
        match ask(socket, req) {
            Ok(r) => return Ok(r),
            Err(Unanswered::Version(error)) => {
                return Err(AdminError::Version {
                    socket: socket.clone(),
                    error,
                });
            }
            Err(Unanswered::Io(e)) if socket_error.is_empty() => socket_error = e.to_string(),
            Err(Unanswered::Io(_)) => {}
        }
    }
    match queue::open(&at.storage, &at.data_dir, Mode::Inspect) {
        Ok(store) => Ok(execute(
            store.as_ref(),
            &at.data_dir,
            Source::DataDirectory,
            req,
            &audit::Actor::current(),
        )),
        Err(StoreError::Missing(_)) => Err(AdminError::NoQueue(at.data_dir.clone())),
        Err(e) => Err(AdminError::Unreachable {
            socket: at.admin_socket.clone(),
            socket_error,
            dir: at.data_dir.clone(),
            dir_error: e.to_string(),
        }),
    }
}

/// Why a socket gave no answer to use.
enum Unanswered {
    /// Nothing answered there, or not in the protocol.
    Io(std::io::Error),
    /// A service answered in a version this release does not read.
    Version(wire::LineError),
}

impl From<std::io::Error> for Unanswered {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

fn ask(socket: &Path, req: &Request) -> Result<Response, Unanswered> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let line = wire::to_line(&wire::Request::from(req), true).map_err(std::io::Error::from)?;
    stream.write_all(&line)?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    match wire::from_line::<wire::Response>(&answer) {
        Ok(r) => Ok(r.message.into()),
        Err(e @ wire::LineError::Version(_)) => Err(Unanswered::Version(e)),
        Err(wire::LineError::Malformed(e)) => Err(Unanswered::Io(e.into())),
    }
}

/// Creates the admin socket at `path`, owner-only, or with `group` for the group's members
/// too (before anything listens, so a socket that cannot be created stops start-up).
pub fn bind(path: &Path, group: Option<u32>) -> std::io::Result<tokio::net::UnixListener> {
    // The queue is open, and the store admits one service at a time: a socket left here by
    // a service that stopped without cleaning up is stale.
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    }
    Ok(listener)
}

/// Serves the admin socket (made by [`bind`] at `path`) until `shutdown` completes, then
/// removes it.
pub async fn serve(
    listener: tokio::net::UnixListener,
    path: PathBuf,
    data_dir: PathBuf,
    store: Arc<dyn Store>,
    waker: Waker,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
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
        // D50: the peer's Unix user, as the kernel says (SO_PEERCRED), never as it claims.
        let uid = match stream.peer_cred() {
            Ok(cred) => cred.uid(),
            Err(e) => {
                tracing::warn!(error = %e, "admin socket peer has no credentials; refused");
                continue;
            }
        };
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(read.take(64 * 1024));
            if reader.read_line(&mut line).await.is_err() {
                return;
            }
            let received = wire::from_line::<wire::Request>(&line);
            // A command without a version, from an ap-intake of an earlier release, is
            // answered in the form that release reads.
            let versioned = received.as_ref().map_or(true, |r| r.versioned);
            let response = match received {
                Ok(req) => tokio::task::spawn_blocking(move || {
                    let req = Request::from(req.message);
                    // The name through NSS may ask a directory: off the async workers.
                    let actor = audit::Actor::user(uid);
                    let r = execute(store.as_ref(), &data_dir, Source::Service, &req, &actor);
                    let queued = match &r {
                        Response::Requeued(n) => *n > 0,
                        Response::Replayed(d) => !d.queued.is_empty() && !d.dry_run,
                        _ => false,
                    };
                    if queued {
                        waker.wake();
                    }
                    r
                })
                .await
                .unwrap_or_else(|e| Response::Error(e.to_string())),
                Err(e @ wire::LineError::Version(_)) => Response::Error(format!(
                    "the running service cannot read this command: {e}; use the ap-intake of \
                     the service's release"
                )),
                Err(wire::LineError::Malformed(e)) => Response::Error(format!("bad request: {e}")),
            };
            let out =
                wire::to_line(&wire::Response::from(&response), versioned).unwrap_or_default();
            let _ = write.write_all(&out).await;
        });
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}
