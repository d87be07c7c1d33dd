//! Start-up and shutdown of the whole service.

use crate::admin;
use crate::budget::Budget;
use crate::config::Config;
use crate::delivery::target::{PlatformClient, SandboxSink, Target};
use crate::delivery::{self, Worker};
use crate::http::conn::ConnSettings;
use crate::http::ops::{self, Ops};
use crate::http::tls::{self, TlsError};
use crate::http::{self, App, Edge, RequestIds, auth::Auth};
use crate::intake::{Intake, Limits};
use crate::interfaces::INTERFACES;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::queue::{self, Mode, Stop, Store, StoreError, Writer};
use crate::telemetry::{RequestLog, Summary};
use crate::validate::{SchemaError, Validator};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long shutdown waits for a delivery in flight.
pub const DELIVERY_STOP_DEADLINE: Duration = Duration::from_secs(10);

/// After a failed flush, how long the answers in flight (503 now) may take to go out before
/// the process exits (D40): the requests already taken in, and those whose connection was
/// (`http::conn::STOP_GRACE`), are answered well within it.
pub const HALT_GRACE: Duration = Duration::from_millis(600);

/// Why a running service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A flush of the queue to disk failed (D40): exit 74, so that systemd starts it again
    /// and the store recovers from its write-ahead log.
    #[error("stopped after a failed flush of the queue: {0}")]
    FlushFailed(String),
    /// A newer node migrated the PostgreSQL queue's schema past what this version reads:
    /// exit 78, so that systemd does not start it again until it is upgraded.
    #[error(
        "stopped: the queue database has schema {found}, migrated by a newer ap-intake; this \
         version reads schema {reads}: upgrade this node (README, Upgrading a cluster)"
    )]
    Outdated {
        /// The database's schema version.
        found: i64,
        /// The newest this version reads.
        reads: i64,
    },
}

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
    /// The queue is in PostgreSQL, and the data directory still holds an embedded queue with
    /// records never moved there (D45): they would be left behind unseen. Exit 78.
    #[error(
        "{path} holds {records} records in the embedded queue that were never moved to \
         PostgreSQL; stop here and run `ap-intake move-to-postgres` (README: \"Moving to \
         PostgreSQL\"), or set [storage] backend back to sqlite until they are delivered"
    )]
    NotMoved {
        /// The embedded queue's file.
        path: std::path::PathBuf,
        /// Its undelivered records.
        records: u64,
    },
    /// The queue cannot be opened: held by another process, damaged (D29), in the old
    /// format (D28). The exit status says so (74).
    #[error("cannot open the queue in {path}: {source}")]
    Queue {
        /// The data directory.
        path: std::path::PathBuf,
        /// Why.
        source: StoreError,
    },
    /// The listener cannot be bound.
    #[error("cannot listen on {addr} ({key}): {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Where it was configured.
        key: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The admin socket cannot be created.
    #[error("cannot create the admin socket {path}: {source}")]
    AdminSocket {
        /// The socket.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate, key or client CA cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The platform's TLS or proxy settings cannot be used (D33).
    #[error("[platform]: {0}")]
    Platform(#[from] crate::delivery::target::ClientError),
    /// A background thread cannot be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
    /// The signing key of `[oauth2]` cannot be used (D47): exit 78.
    #[error("[oauth2] signing_key_file: {0}")]
    SigningKey(#[from] crate::oauth2::KeyError),
}

/// A running service.
pub struct Running {
    /// What a reload (SIGHUP) replaces; taken by [`run`].
    pub reloadable: Option<crate::reload::Reloadable>,
    /// The address the intake listens on (useful with port 0).
    pub addr: SocketAddr,
    /// The address of the admin listener (`/healthz`, `/readyz`, `/metrics`), if enabled.
    pub ops_addr: Option<SocketAddr>,
    /// The one stop signal: listeners, the admin socket, receipt pruning and the delivery
    /// lanes all end on it.
    stop: Stop,
    server: JoinHandle<()>,
    admin: JoinHandle<std::io::Result<()>>,
    ops: Option<JoinHandle<()>>,
    pruner: JoinHandle<()>,
    summary: Summary,
    worker: Worker,
    writer: Writer,
    store: Arc<dyn Store>,
}

impl Running {
    /// The queue the service writes to.
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Queue transactions of the intake so far (see [`Writer::transactions`]): with
    /// `synchronous=FULL` each is one sync of the WAL (group commit, D17).
    pub fn transactions(&self) -> u64 {
        self.writer.transactions()
    }

    /// After a failed flush (D40): stops accepting and gives the answers in flight (503, the
    /// store refusing every write now) up to [`HALT_GRACE`] to go out. Nothing waits for the
    /// delivery worker, and the store is not closed (its `Drop` leaves the connections open):
    /// the process exits next.
    pub async fn abandon(self) {
        self.stop.signal();
        let _ = tokio::time::timeout(HALT_GRACE, self.server).await;
        self.summary.stop();
    }

    /// Gives the stop signal, then, in order: lets the requests in flight finish, waits for
    /// the admin socket, the admin listener and receipt pruning, for the delivery lanes (up to
    /// [`DELIVERY_STOP_DEADLINE`]) and for the queue writer, and closes the queue. When this
    /// returns another process may open the data directory.
    pub async fn stop(self) {
        self.stop.signal();
        let _ = self.server.await;
        self.summary.stop(); // every request is answered: the last counts are final
        let _ = self.admin.await;
        if let Some(ops) = self.ops {
            let _ = ops.await;
        }
        let _ = self.pruner.await;
        let (worker, writer, store) = (self.worker, self.writer, self.store);
        let _ = tokio::task::spawn_blocking(move || {
            let worker_stopped = worker.stop(DELIVERY_STOP_DEADLINE);
            if !worker_stopped {
                tracing::warn!(
                    "the delivery in flight did not finish in time; its records stay queued"
                );
            }
            writer.stop();
            note(store.as_ref(), "stop");
            // Closed explicitly, whoever still holds it: a worker stuck on the platform or a
            // connection task finishing its answer gets "the queue is stopping" from now on.
            if let Err(e) = store.close() {
                tracing::error!(error = %e, "closing the queue failed; the next start recovers it from its log");
            }
        })
        .await;
    }
}

/// D50: the service's own start and clean stop in the audit trail, in the name of the user
/// it runs as. A failure is logged: it stops neither.
fn note(store: &dyn Store, action: &str) {
    let args = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
    });
    let actor = admin::audit::Actor::current();
    let changed = serde_json::json!({});
    if let Err(e) = admin::audit::record(store, &actor, action, &args, &changed) {
        tracing::warn!(error = %e, action, "the audit trail could not record this");
    }
}

/// Opens (and checks) the queue off the async workers: a database client may block.
async fn open_store(config: &Config) -> Result<Arc<dyn Store>, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    if let crate::config::Backend::Postgres(_) = config.storage.backend {
        let dir = config.data_dir.clone();
        let left = tokio::task::spawn_blocking(move || queue::moving::left_behind(&dir))
            .await
            .unwrap_or_else(|e| Err(queue::StoreError::Internal(e.to_string())));
        match left {
            Ok(0) => {}
            Ok(records) => {
                return Err(StartError::NotMoved {
                    path: config.data_dir.join(queue::sqlite::FILE_NAME),
                    records,
                });
            }
            Err(source) => {
                return Err(StartError::Queue {
                    path: config.data_dir.clone(),
                    source,
                });
            }
        }
    }
    let (storage, dir) = (config.storage.clone(), config.data_dir.clone());
    let opened = tokio::task::spawn_blocking(move || queue::open(&storage, &dir, Mode::Serve))
        .await
        .unwrap_or_else(|e| Err(queue::StoreError::Internal(e.to_string())));
    let store = opened.map_err(|source| StartError::Queue {
        path: config.data_dir.clone(),
        source,
    })?;
    tracing::info!(store = %store.describe(), "queue open and checked");
    Ok(store)
}

async fn bind(
    addr: SocketAddr,
    key: &'static str,
) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen { addr, key, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| StartError::Listen { addr, key, source })?;
    Ok((listener, local))
}

/// Opens the queue, compiles the schemas, starts the delivery worker, the admin socket, the
/// admin listener and the intake listener.
pub async fn start(config: &Config) -> Result<Running, StartError> {
    let validator = load_schemas(config)?;
    // /readyz reports what the validator holds, not what the table lists.
    let compiled = INTERFACES
        .iter()
        .filter(|i| validator.schema_json(i).is_some() && validator.shape(i).is_some())
        .count();
    let tls = config
        .server
        .tls
        .as_ref()
        .map(tls::server_config)
        .transpose()?;
    let tls = Arc::new(Live::new(tls.map(tokio_rustls::TlsAcceptor::from)));
    let oauth2 = crate::oauth2::setup::build(
        config.oauth2.as_ref(),
        &config.data_dir,
        &crate::oauth2::setup::State::default(),
    )?;
    let clients = config.oauth2.as_ref().map_or(&[][..], |o| &o.clients[..]);
    let auth = Arc::new(Live::new(
        Auth::new(config.sandbox, config.api_keys.clone()).with_oauth2(
            config.accept,
            clients,
            oauth2.verifier.clone(),
        ),
    ));
    let endpoints = oauth2
        .issuer
        .zip(oauth2.state.ring().cloned())
        .map(|(issuer, ring)| Arc::new(crate::http::oauth2::Endpoints::new(issuer, ring)));
    let store = open_store(config).await?;
    store.keep_delivered(!config.delivered_retention.is_zero());
    {
        let store = Arc::clone(&store);
        let _ = tokio::task::spawn_blocking(move || note(store.as_ref(), "start")).await;
    }
    let metrics = Arc::new(Metrics::default());
    let commits = Arc::clone(&metrics);
    let writer = Writer::start_observed(
        Arc::clone(&store),
        Box::new(move |took, records| commits.commit(took, records)),
    )
    .map_err(StartError::Thread)?;
    let stop = Stop::new();
    let (worker, waker) = start_delivery(config, &store, &metrics, &stop)?;
    let request_log = Arc::new(RequestLog::new(config.log.requests));
    let app = intake_app(
        config,
        validator,
        Handles {
            store: &store,
            writer: &writer,
            waker: &waker,
            auth: &auth,
            metrics: &metrics,
            request_log: &request_log,
            oauth2: endpoints.as_ref(),
        },
    );
    let (listener, addr) = bind(config.server.listen, "[server] listen or --listen").await?;
    let ops_listener = match config.admin.listen {
        Some(a) => Some(bind(a, "[admin] listen or --admin-listen").await?),
        None => None,
    };
    let until = |stop: &Stop| {
        let stop = stop.clone();
        async move { stop.signalled().await }
    };
    let socket = config.admin.socket.clone();
    let admin_listener = admin::bind(&socket, config.admin.socket_group).map_err(|source| {
        StartError::AdminSocket {
            path: socket.clone(),
            source,
        }
    })?;
    let admin = tokio::spawn(admin::serve(
        admin_listener,
        socket,
        config.data_dir.clone(),
        Arc::clone(&store),
        waker,
        until(&stop),
    ));
    if let Some(keys) = &oauth2.opened {
        tokio::spawn(crate::oauth2::provider::keep_fresh(
            Arc::downgrade(keys),
            until(&stop),
        ));
    }
    let pruner = tokio::spawn(crate::queue::receipt::keep_pruned(
        Arc::clone(&store),
        crate::queue::receipt::Retention {
            receipts: config.receipt_retention,
            audit: config.audit_retention,
            delivered: config.delivered_retention,
        },
        until(&stop),
    ));
    let ops_addr = ops_listener.as_ref().map(|(_, a)| *a);
    let delivered = Arc::clone(&metrics);
    let trusted_proxies = Arc::new(crate::http::forwarded::TrustedProxies::new(
        config.server.trusted_proxies.clone(),
    ));
    let settings = |tls| ConnSettings {
        tls,
        handshake_timeout: config.server.handshake_timeout,
        header_timeout: config.server.header_timeout,
        max_streams_per_connection: config.server.max_streams_per_connection,
        max_connections_per_ip: config.server.max_connections_per_ip,
        trusted_proxies: Arc::clone(&trusted_proxies),
    };
    let edge = |metrics| Edge {
        request_ids: RequestIds::default(),
        request_log: Arc::clone(&request_log),
        metrics,
    };
    // The admin listener keeps the intake listener's connection rules (D26, D42), plain HTTP.
    let ops = ops_listener.map(|(listener, _)| {
        let state = Arc::new(Ops {
            store: Arc::clone(&store),
            metrics: Arc::clone(&metrics),
            schemas: compiled,
            auth: Arc::clone(&auth),
        });
        tokio::spawn(http::serve(
            listener,
            warp::service(ops::routes(state)),
            edge(None),
            settings(Arc::new(Live::new(None))),
            ops::MAX_CONNECTIONS,
            until(&stop),
        ))
    });
    let server = tokio::spawn(http::serve(
        listener,
        warp::service(http::routes::routes(app)),
        edge(Some(Arc::clone(&metrics))),
        settings(Arc::clone(&tls)),
        config.server.max_connections,
        until(&stop),
    ));
    let reloadable = crate::reload::Reloadable {
        auth,
        tls,
        target: worker.target(),
        oauth2: endpoints,
        oauth2_state: oauth2.state,
        stop: stop.clone(),
        store: Arc::clone(&store),
    };
    Ok(Running {
        reloadable: Some(reloadable),
        addr,
        ops_addr,
        stop,
        server,
        admin,
        ops,
        pruner,
        summary: Summary::start(request_log, Box::new(move || delivered.take_deliveries())),
        worker,
        writer,
        store,
    })
}

/// Compiles the schemas (built-in or from `schema_dir`, D14), naming the replaced ones.
fn load_schemas(config: &Config) -> Result<Validator, StartError> {
    let validator = Validator::load(config.schema_dir.as_deref())?;
    for iface in &INTERFACES {
        if let Some(path) = validator.origin(iface) {
            tracing::info!(interface = iface.id, schema = %path.display(), "schema replaced from schema_dir");
        }
    }
    Ok(validator)
}

/// The delivery lanes, to the platform or the sandbox sink (D21, D31).
fn start_delivery(
    config: &Config,
    store: &Arc<dyn Store>,
    metrics: &Arc<Metrics>,
    stop: &Stop,
) -> Result<(Worker, delivery::Waker), StartError> {
    let target = match &config.platform {
        Some(p) => Target::Platform(PlatformClient::new(p, config.delivery.timeout)?),
        None => Target::Sandbox(SandboxSink::new(&config.data_dir)),
    };
    delivery::Worker::start(
        Arc::clone(store),
        target,
        config.delivery.settings,
        Arc::clone(metrics),
        Arc::new(delivery::clock::SystemClock),
        stop.clone(),
    )
    .map_err(StartError::Thread)
}

/// The running parts the intake listener's handler is wired to.
struct Handles<'a> {
    store: &'a Arc<dyn Store>,
    writer: &'a Writer,
    waker: &'a delivery::Waker,
    auth: &'a Arc<Live<Auth>>,
    metrics: &'a Arc<Metrics>,
    request_log: &'a Arc<RequestLog>,
    oauth2: Option<&'a Arc<crate::http::oauth2::Endpoints>>,
}

/// What the intake listener's handler shares: the intake pipeline, keys, limits, metrics.
fn intake_app(config: &Config, validator: Validator, h: Handles<'_>) -> Arc<App> {
    let Handles {
        store,
        writer,
        waker,
        auth,
        metrics,
        request_log,
        oauth2,
    } = h;
    let budget = Arc::new(Budget::new(
        usize::try_from(config.inflight_bytes).unwrap_or(usize::MAX),
    ));
    let intake = Intake::new(
        validator,
        writer.clone(),
        config.accounting_types.clone(),
        Limits {
            max_records: config.max_records,
            budget: Arc::clone(&budget),
        },
        waker.clone(),
    );
    let security = crate::openapi::Security {
        sandbox: config.sandbox,
        api_key: config.accept.api_key,
        bearer: config.accept.bearer && config.oauth2.is_some(),
        token_endpoint: oauth2.is_some(),
        client_secret: config.accept.client_secret,
    };
    let document = crate::openapi::document(
        intake.checker().validator(),
        &config.accounting_types,
        security,
    );
    Arc::new(App {
        console: crate::http::console::Console::new(&document),
        store: Arc::clone(store),
        receipts: !config.receipt_retention.is_zero(),
        oauth2: oauth2.cloned(),
        tls: config.server.tls.is_some(),
        intake: Arc::new(intake),
        auth: Arc::clone(auth),
        max_body_bytes: config.max_body_bytes,
        body_timeout: config.server.body_timeout,
        budget,
        request_ids: RequestIds::default(),
        metrics: Arc::clone(metrics),
        request_log: Arc::clone(request_log),
    })
}

/// Resolves on SIGTERM or SIGINT. The handlers are in place when this returns, so a signal
/// that arrives before the future is first polled still stops the service cleanly.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            (Ok(mut one), Err(_)) | (Err(_), Ok(mut one)) => {
                one.recv().await;
            }
            (Err(e), Err(_)) => {
                tracing::error!(error = %e, "cannot handle SIGTERM or SIGINT; stop the service with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Where a browser on this machine finds the console (D38); an address that listens on
/// every interface is shown as localhost.
fn console_url(scheme: &str, addr: std::net::SocketAddr) -> String {
    let host = match addr.ip() {
        ip if ip.is_unspecified() => "localhost".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    format!("{scheme}://{host}:{}/docs/", addr.port())
}

/// Runs the service until SIGTERM or SIGINT, or until a flush of the queue fails (D40);
/// SIGHUP re-reads `path` (D34).
pub async fn run(config: Config, path: Option<std::path::PathBuf>) -> Result<(), RunError> {
    if config.sandbox {
        tracing::warn!(
            "SANDBOX MODE: no API key is required and nothing is delivered to an AP platform; \
             deliveries are kept in the data directory's sandbox-sink (D21)"
        );
    }
    // Before anything listens: a SIGTERM right after start-up stops cleanly too.
    let stop = shutdown_signal();
    let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let mut running = start(&config).await?;
    if config.server.tls.is_none() && !config.sandbox {
        tracing::warn!("serving plain HTTP without TLS (server.plain_http = true)");
    }
    match &config.platform {
        Some(p) => tracing::info!(platform = %p.url, "delivering to the AP platform"),
        None => {
            tracing::info!(sink = %delivery::target::sink_dir(&config.data_dir).display(), "delivering to the sandbox sink")
        }
    }
    if let Some(a) = running.ops_addr {
        tracing::info!(admin = %a, "admin listener: /healthz /readyz /metrics");
    }
    let scheme = if config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(listen = %running.addr, scheme, data_dir = %config.data_dir.display(), sandbox = config.sandbox, "ap-intake listening");
    tracing::info!(console = %console_url(scheme, running.addr), "API console and OpenAPI document (/openapi.json)");
    notify(sd_notify::NotifyState::Ready);
    let halt = running.store.halt();
    let halted = async move {
        match halt {
            Some(halt) => halt.tripped().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop, halted);
    let mut reloader = running
        .reloadable
        .take()
        .map(|parts| crate::reload::Reloader::new(path, config.clone(), parts));
    let mut hangup = hangup.ok();
    loop {
        let can_reload = reloader.is_some();
        let reload = async {
            match &mut hangup {
                Some(hangup) if can_reload => hangup.recv().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut stop => break,
            why = &mut halted => {
                notify(sd_notify::NotifyState::Stopping);
                running.abandon().await;
                return Err(match why {
                    queue::Halted::FlushFailed(why) => RunError::FlushFailed(why),
                    queue::Halted::NewerSchema { found, reads } => {
                        RunError::Outdated { found, reads }
                    }
                });
            }
            Some(()) = reload => {
                if let Some(reloader) = reloader.as_mut() {
                    notify(sd_notify::NotifyState::Reloading);
                    reloader.reload();
                    notify(sd_notify::NotifyState::Ready);
                }
            }
        }
    }
    notify(sd_notify::NotifyState::Stopping);
    tracing::info!("shutting down: finishing requests in flight");
    running.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// Tells systemd (Type=notify) where the service stands; nothing without NOTIFY_SOCKET.
fn notify(state: sd_notify::NotifyState) {
    if let Err(e) = sd_notify::notify(false, &[state]) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}
