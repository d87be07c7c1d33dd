//! Start-up and shutdown of the whole service.

use crate::config::Config;
use crate::http::{self, App, RequestIds, auth::Auth};
use crate::intake::Intake;
use crate::interfaces::INTERFACES;
use crate::queue::{GroupCommit, SledStore, Store, StoreError};
use crate::validate::{SchemaError, Validator};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A schema does not load or compile.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The data directory cannot be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The queue cannot be opened (another process may hold it).
    #[error("cannot open the queue in {path}: {source}")]
    Queue {
        /// The data directory.
        path: std::path::PathBuf,
        /// Why.
        source: StoreError,
    },
    /// The listener cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A background thread cannot be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// A running service.
pub struct Running {
    /// The address the intake listens on (useful with port 0).
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
    commit: GroupCommit,
    store: Arc<dyn Store>,
}

impl Running {
    /// The queue the service writes to.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Queue syncs so far (see [`GroupCommit::syncs`]).
    pub fn syncs(&self) -> u64 {
        self.commit.syncs()
    }

    /// Stops accepting, lets requests in flight finish, syncs the queue and closes it. When
    /// this returns another process may open the data directory.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
        let (commit, store) = (self.commit, self.store);
        let _ = tokio::task::spawn_blocking(move || {
            commit.stop();
            drop(commit); // it holds the store too
            let _ = store.sync();
            // Connection tasks that served the last requests drop their handles shortly.
            let deadline = std::time::Instant::now() + http::DRAIN_DEADLINE;
            while Arc::strong_count(&store) > 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
        .await;
    }
}

/// Opens the queue, compiles the schemas and starts serving.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let validator = Validator::load(config.schema_dir.as_deref())?;
    for iface in &INTERFACES {
        if let Some(path) = validator.origin(iface) {
            tracing::info!(interface = iface.id, schema = %path.display(), "schema replaced from schema_dir");
        }
    }
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    let store: Arc<dyn Store> =
        Arc::new(
            SledStore::open(&config.data_dir).map_err(|source| StartError::Queue {
                path: config.data_dir.clone(),
                source,
            })?,
        );
    let commit = GroupCommit::start(Arc::clone(&store)).map_err(StartError::Thread)?;
    let intake = Intake::new(
        validator,
        Arc::clone(&store),
        commit.clone(),
        config.accounting_types.clone(),
        config.max_records,
    );
    let app = Arc::new(App {
        intake: Arc::new(intake),
        auth: Auth::new(config.sandbox, config.api_keys.clone()),
        max_body_bytes: config.max_body_bytes,
        body_timeout: config.body_timeout,
        request_ids: RequestIds::default(),
    });
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: config.listen,
        source,
    })?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(http::serve(listener, app, async {
        let _ = stopped.await;
    }));
    Ok(Running {
        addr,
        stop,
        server,
        commit,
        store,
    })
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs the service until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), StartError> {
    if config.sandbox {
        tracing::warn!(
            "SANDBOX MODE: no API key is required and nothing is delivered to an AP platform (D21)"
        );
    }
    let running = start(&config).await?;
    if config.plain_http && !config.sandbox {
        tracing::warn!("serving plain HTTP without TLS (server.plain_http = true)");
    }
    tracing::info!(listen = %running.addr, data_dir = %config.data_dir.display(), sandbox = config.sandbox, "ap-intake listening");
    shutdown_signal().await;
    tracing::info!("shutting down: finishing requests in flight");
    running.stop().await;
    tracing::info!("stopped");
    Ok(())
}
