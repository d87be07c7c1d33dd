//! [`Store`](super::Store) on PostgreSQL (D39): one database shared by every node of a
//! cluster. A commit returns once PostgreSQL has flushed it (`synchronous_commit` is kept
//! `on`), so a 202 still means "on disk" (D17) - on the primary: an asynchronous replica
//! promoted after a failover may lack the last commits.
//!
//! ```sql
//! -- schema ap_intake; ap_intake_meta.schema_version = SCHEMA_VERSION (migrations below)
//! CREATE SEQUENCE item_version;                     -- store-wide versions, all nodes
//! CREATE TABLE item (                               -- one row per queue key (D15, D16)
//!   key bytea PRIMARY KEY, interface text, state smallint,  -- 0 pending 1 rejected 2 quarantined
//!   version bigint, queued_at bigint, seq bigint,   -- delivery order: (queued_at, seq)
//!   updated_at bigint, attempts integer, last_error text, xml text, state_at bigint,
//!   lease_instance text, lease_until timestamptz,  -- who delivers it, until when (D39, D41)
//!   origin_request text, origin_client text, origin_index integer); -- this version's (D48)
//! CREATE INDEX item_line ON item (interface, state, queued_at, seq);
//! CREATE TABLE counter (interface text, kind text, writer integer, n bigint,
//!   PRIMARY KEY (interface, kind, writer));      -- counts, kept by triggers (counts.rs)
//! CREATE TABLE backoff (interface text PRIMARY KEY, failures integer, next_attempt_ms bigint,
//!   last_error text, last_error_ms bigint, paused boolean, last_success_ms bigint);
//! CREATE TABLE node (instance text PRIMARY KEY,    -- a running process (D41)
//!   name text, started_at timestamptz, last_seen timestamptz, lease_secs float8);
//! CREATE TABLE probe (node text PRIMARY KEY, at bigint);  -- readiness, by instance
//! CREATE TABLE receipt (rid bigserial PRIMARY KEY, request_id text, api_key text,
//!   nonce bigint, interface text, received_at bigint, UNIQUE (request_id, api_key));
//! CREATE TABLE receipt_line (rid bigint, idx integer, key bytea, version bigint,
//!   PRIMARY KEY (rid, idx));
//! CREATE TABLE settled (key bytea, version bigint, state smallint, at bigint, reason text,
//!   PRIMARY KEY (key, version));                    -- versions that left (D38)
//! CREATE TABLE outcome (seq bigserial PRIMARY KEY, tx xid8 DEFAULT pg_current_xact_id(),
//!   client text, state smallint, interface text, request_id text, idx integer, key bytea,
//!   reason text, at bigint);                        -- the feed (D48, outcomes.rs); INDEX
//!                                                   -- (client, state, tx, seq); a trigger
//!                                                   -- notes a replaced version superseded
//! CREATE TABLE kept (key bytea PRIMARY KEY, interface text, version bigint, at bigint,
//!   bytes bigint, xml text);                        -- last delivered XML (D49, replay.rs)
//! CREATE TABLE audit (n bigserial PRIMARY KEY, id text UNIQUE, at bigint, actor text,
//!   uid bigint, action text, args text, changed text);  -- the audit trail (D50, audit.rs)
//! ```
//!
//! Leases (D39): a lane takes its next batch with `FOR UPDATE SKIP LOCKED` and marks it
//! `lease_instance = <this process>, lease_until = now() + lease_secs` on the database's
//! clock, so a key is delivered by one node at a time; a node renews its leases while it runs
//! (a heartbeat thread) and another node takes them once they lapse. Settling a delivery is
//! fenced by the version sent (D18), so a lapsed node can never remove a newer version.
//!
//! A node is a running process, not a name (D41): every open of the store draws an instance
//! id (`instance.rs`), and leases, the node row, the heartbeat and the probe are keyed by it.
//! `[storage.postgres] node` is only the label status shows, so two processes with one name
//! (two on one host, cloned machines) never take or renew each other's leases. A store
//! dropped cleanly releases its leases and its row; one killed leaves them to lapse.

mod audit;
mod counts;
mod fault;
mod import;
mod instance;
mod outcomes;
mod read;
mod replay;
mod store;
mod tls;
mod write;

use super::{Mode, StoreError};
use crate::options::Postgres;
use postgres::{Client, NoTls};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The schema this version reads and writes.
const SCHEMA_VERSION: i64 = 4;

/// Each migration brings the schema from the version before it to its own (a version's
/// parts in order, all in the one transaction of [`migrate`]).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("schema_v1.sql")),
    (2, include_str!("schema_v2.sql")), // leases by instance, not by name (D41)
    // Schema 3 in two parts, one transaction: origins and the outcome feed (D48), the
    // audit trail (D50).
    (3, outcomes::SCHEMA_V3),
    (3, audit::SCHEMA_V3),
    (3, replay::SCHEMA_V3), // each key's last delivered XML (D49)
    (4, counts::SCHEMA_V4), // exact counts, as SQLite keeps them
];

/// Serialises schema changes among nodes starting at once (`pg_advisory_xact_lock`).
const MIGRATION_LOCK: i64 = 0x4150_4951;

/// How long connecting may take before the database counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle connections kept for reuse.
const POOL: usize = 8;

/// A pooled connection idle this long is checked with a round trip before it is used: a
/// database restarted meanwhile has closed it, and the operation would fail for that alone.
/// A restart takes longer than this, so every connection it closed has sat idle at least as
/// long when it is next wanted (unless an operation met the closed database first, and the
/// pool dropped them all then). Under load, connections come back faster, unchecked.
const CHECK_IDLE_AFTER: Duration = Duration::from_millis(100);

/// How long that check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// A place in an interface's line (queued time, sequence), and since when a cursor there has
/// run without a look at the whole line.
type Cursor = ((i64, i64), std::time::Instant);

/// The queue in a PostgreSQL database.
pub struct PostgresStore {
    config: postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    pool: crate::pool::Pool<Client>,
    /// The name status shows (`[storage.postgres] node`): a label, maybe shared (D41).
    node: String,
    /// This process's own id, which leases are kept by (D41).
    instance: String,
    /// This store has taken leases or registered its instance: dropping it releases them.
    held: AtomicBool,
    lease: Duration,
    shown: String,
    heartbeat: Mutex<Option<Heartbeat>>,
    /// Set by [`crate::Store::close`]: every later call is refused.
    closed: AtomicBool,
    /// Per interface, where this instance's last delivered batch ended (`read::lease`), and
    /// since when the cursor has run without a look at the whole line.
    cursors: Mutex<std::collections::HashMap<String, Cursor>>,
    /// Tripped when the heartbeat finds the schema migrated past [`SCHEMA_VERSION`] by a
    /// newer node: every later call is refused, and the service stops (exit 78).
    halt: crate::Halt,
    /// The outcome of the last write, for readiness without a write of its own.
    last_write: crate::recent::LastWrite,
    /// Whether deliveries keep their XML for a replay (D49).
    keep_delivered: AtomicBool,
}

impl PostgresStore {
    /// Connects, creates or migrates the schema, and draws this process's instance id (D41);
    /// for the service (`heartbeat`) registers the instance and starts renewing its leases.
    pub fn open(settings: &Postgres, mode: Mode) -> Result<Self, StoreError> {
        let shown = crate::options::redacted(&settings.url);
        let mut config: postgres::Config = settings
            .url
            .parse()
            .map_err(|e| StoreError::Settings(format!("url {shown}: {e}")))?;
        if let Some(p) = &settings.password {
            config.password(p);
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("ap-intake");
        let tls = match config.get_ssl_mode() {
            postgres::config::SslMode::Disable => None,
            _ => Some(tls::connector(
                &settings.system_ca_pem,
                settings.ca_pem.as_deref(),
            )?),
        };
        let mut store = Self {
            config,
            tls,
            pool: crate::pool::Pool::new(POOL, CHECK_IDLE_AFTER),
            node: settings.node.clone(),
            instance: instance::draw()?,
            held: AtomicBool::new(false),
            lease: settings.lease,
            shown,
            heartbeat: Mutex::new(None),
            closed: AtomicBool::new(false),
            cursors: Mutex::default(),
            halt: crate::Halt::default(),
            last_write: crate::recent::LastWrite::default(),
            keep_delivered: AtomicBool::new(false),
        };
        let found = store.with(migrate)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: format!("the queue database {}", store.shown),
                version: found,
                reads: SCHEMA_VERSION,
            });
        }
        if mode == Mode::Serve {
            store.with(counts::fold)?;
            let swept = store.tx(write::sweep)?;
            if swept > 0 {
                tracing::warn!(
                    items = swept,
                    "queued items this version cannot deliver were quarantined (see `ap-intake status`)"
                );
            }
            store.held.store(true, Ordering::Relaxed);
            store.with(|c| instance::beat(c, &store.instance, &store.node, store.lease))?;
            let beat = Heartbeat::start(&store)?;
            store.heartbeat = Mutex::new(Some(beat));
            store.warn_of_namesakes();
        }
        Ok(store)
    }

    /// Says in the log when another running process carries this node's name (D41): its
    /// leases stay its own, but status and logs cannot tell the two apart by name.
    fn warn_of_namesakes(&self) {
        if let Ok(n @ 1..) = self.with(|c| instance::namesakes(c, &self.instance, &self.node)) {
            tracing::warn!(
                node = %self.node,
                others = n,
                "another running ap-intake uses this node name ([storage.postgres] node, \
                 default: the host name); leases are kept per process, but give each node \
                 a name of its own so status and logs tell them apart (D41)"
            );
        }
    }

    /// Where this instance's next batch of `interface` starts looking: after its last
    /// delivered one, for at most a lease period. An item can come back behind it only from
    /// another node (its requeue, or its lease that lapsed); a look at the whole line once a
    /// lease period takes such an item within `lease_secs`, as a lapsed lease promises (D39).
    /// This process's own requeues and failed batches forget the cursors at once.
    fn cursor(&self, interface: &str) -> Option<(i64, i64)> {
        let mut cursors = self.cursors.lock().ok()?;
        match cursors.get(interface) {
            Some((_, since)) if since.elapsed() >= self.lease => {
                cursors.remove(interface);
                None
            }
            Some((place, _)) => Some(*place),
            None => None,
        }
    }

    /// The line up to `place` is delivered: later batches start after it.
    fn advance_cursor(&self, interface: &str, place: (i64, i64)) {
        if let Ok(mut c) = self.cursors.lock() {
            let at = c
                .entry(interface.to_string())
                .or_insert((place, std::time::Instant::now()));
            at.0 = at.0.max(place);
        }
    }

    pub(super) fn forget_cursors(&self) {
        if let Ok(mut c) = self.cursors.lock() {
            c.clear();
        }
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This process's instance id, which its leases are kept by (D41).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn connect(&self) -> Result<Client, postgres::Error> {
        let mut client = connect(&self.config, self.tls.as_ref())?;
        // A 202 means the commit is flushed (D17): never let a server default weaken that.
        let commit: String = client.query_one("SHOW synchronous_commit", &[])?.get(0);
        if commit == "off" || commit == "local" {
            client.batch_execute("SET synchronous_commit TO on")?;
        }
        Ok(client)
    }

    /// Runs `f` on a pooled connection (a new one when none is idle); a connection that
    /// failed is not pooled again. Refused once the store is closed.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Stopping);
        }
        if let Some(why) = self.halt.reason() {
            return Err(why.error(&format!("the queue database {}", self.shown)));
        }
        self.on_connection(f)
    }

    /// The halt a newer node's migration trips (see [`PostgresStore::open`]).
    pub(super) fn halt(&self) -> crate::Halt {
        self.halt.clone()
    }

    /// [`crate::Store::close`]: no renewal after it, this instance's leases released at once
    /// (D41), the pooled connections closed.
    pub(super) fn close_connections(&self) -> Result<(), StoreError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        drop(self.heartbeat.lock().ok().and_then(|mut h| h.take()));
        let released = match self.held.swap(false, Ordering::AcqRel) {
            true => self.on_connection(|c| instance::release(c, &self.instance)),
            false => Ok(()),
        };
        self.pool.clear();
        released
    }

    fn on_connection<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let sound = |c: &mut Client| !c.is_closed() && c.is_valid(CHECK_TIMEOUT).is_ok();
        let mut client = self
            .pool
            .get(sound, || self.connect())
            .map_err(|e| self.fail(e))?;
        let out = f(&mut client).map_err(|e| self.fail(e));
        if client.is_closed() || matches!(out, Err(StoreError::Unreachable { .. })) {
            // The database closed a connection, or is going down (a restart, a network cut):
            // the idle ones are no better, and each would fail one operation of its own.
            self.pool.clear();
        } else {
            self.pool.put(client);
        }
        out
    }

    /// The product's error for a database error (`fault.rs`).
    fn fail(&self, e: postgres::Error) -> StoreError {
        fault::error_at(&self.shown, e)
    }
}

impl Drop for PostgresStore {
    /// A clean stop releases this instance's leases (D41): the last holder of the store
    /// drops it only once no delivery is in flight (a lane stuck on the platform keeps it,
    /// and its leases then lapse instead). A client owns a small runtime of its own, which
    /// may not be used or dropped on an async worker (the last holder of the store may be
    /// one): the release runs and the pooled clients close on a thread of their own.
    fn drop(&mut self) {
        drop(self.heartbeat.get_mut().ok().and_then(Option::take)); // no renewal after the release
        let mut pool = self.pool.drain();
        let release = self.held.load(Ordering::Relaxed).then(|| {
            let (config, tls) = (self.config.clone(), self.tls.clone());
            (config, tls, self.instance.clone())
        });
        let _ = std::thread::spawn(move || {
            let Some((config, tls, instance)) = release else {
                return;
            };
            let client = match pool.pop() {
                Some(c) if !c.is_closed() => Ok(c),
                _ => connect(&config, tls.as_ref()),
            };
            if let Err(e) = client.and_then(|mut c| instance::release(&mut c, &instance)) {
                tracing::warn!(error = %chain(&e), "cannot release this node's leases in the queue database; they lapse after lease_secs");
            }
        })
        .join();
    }
}

/// A new session in the queue's schema.
fn connect(
    config: &postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<Client, postgres::Error> {
    let mut client = match tls {
        Some(tls) => config.connect(tls.clone())?,
        None => config.connect(NoTls)?,
    };
    client.batch_execute("SET search_path TO ap_intake, public")?;
    Ok(client)
}

/// An error with its causes ("error connecting to server: Connection refused").
use crate::chain;

/// Creates the schema, or brings it up to [`SCHEMA_VERSION`], under a lock only one node
/// holds at a time; leaves a schema written by a newer version alone. The version found.
fn migrate(client: &mut Client) -> Result<i64, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS ap_intake;
         CREATE TABLE IF NOT EXISTS ap_intake.ap_intake_meta (name text PRIMARY KEY,
           value bigint NOT NULL);",
    )?;
    let current = schema_version(&mut tx)?;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql)?;
        tx.execute(
            "INSERT INTO ap_intake.ap_intake_meta VALUES ('schema_version', $1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            &[version],
        )?;
    }
    tx.commit()?;
    Ok(current.max(SCHEMA_VERSION))
}

/// Renews this instance's row and its leases while the store is open (D39, D41).
struct Heartbeat {
    stop: crate::Stop,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start(store: &PostgresStore) -> Result<Self, StoreError> {
        let stop = crate::Stop::new();
        let beat = Beat {
            config: store.config.clone(),
            tls: store.tls.clone(),
            instance: store.instance.clone(),
            node: store.node.clone(),
            lease: store.lease,
            stop: stop.clone(),
            halt: store.halt.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("queue-heartbeat".into())
            .spawn(move || beat.run())
            .map_err(StoreError::Io)?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Beat {
    config: postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    instance: String,
    node: String,
    lease: Duration,
    stop: crate::Stop,
    halt: crate::Halt,
}

impl Beat {
    /// A third of the lease between beats: two can fail before a lease lapses.
    fn run(self) {
        let every = self.lease / 3;
        let mut client: Option<Client> = None;
        while !self.stop.wait_timeout(every) {
            if client.as_ref().is_none_or(Client::is_closed) {
                client = connect(&self.config, self.tls.as_ref()).ok();
            }
            let Some(c) = client.as_mut() else { continue };
            if let Err(e) = instance::beat(c, &self.instance, &self.node, self.lease) {
                tracing::warn!(error = %chain(&e), "cannot renew this node's leases in the queue database");
            }
            // A newer node that started since may have migrated the schema: this node then
            // knows too little to write (or read) safely, and stops.
            if let Ok(found) = schema_version(c)
                && found > SCHEMA_VERSION
            {
                self.halt.outdated(found, SCHEMA_VERSION);
            }
        }
    }
}

/// The schema version the database is at (0 before the first migration).
fn schema_version(client: &mut impl postgres::GenericClient) -> Result<i64, postgres::Error> {
    Ok(client
        .query_opt(
            "SELECT value FROM ap_intake.ap_intake_meta WHERE name = 'schema_version'",
            &[],
        )?
        .map_or(0, |r| r.get(0)))
}
