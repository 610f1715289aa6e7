//! The PostgreSQL inbox: one database that several ingest hosts share, so that an interchange
//! delivered to one host and redelivered to another is still applied once.
//!
//! A batch is decided set-based, in one READ COMMITTED transaction and a few statements
//! (`decide.rs`): the keys, sorted, go in with `INSERT ... ON CONFLICT ON CONSTRAINT inbox_key DO
//! NOTHING`; a host that inserts a key another host holds uncommitted waits for it, then finds
//! the key taken and compares hashes, as SQLite does. No savepoint per interchange: past 64 open
//! subtransactions, every other connection to the server slows down. Times come from the
//! server's clock; ids from sequences. The inbox lives in a schema of its own (`edi_inbox` by
//! default), created on first use by migrations under an advisory lock.

mod decide;
mod queries;
mod tls;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, Config, GenericClient, NoTls};
use tls::{Verify, is_url, take_tls};

use super::{
    Access, Candidate, ContrlEvent, Decision, DeliveryRecord, Event, EventFilter, Inbox,
    InboxError, KeyHistory, KeyProbe, NewAcknowledgement, Outbox, OutboxEvent, PurgeTarget,
    RejectedFile, Resend, Stats, StoredAcknowledgement,
};
use crate::edifact::EnvelopeError;

/// The schema, as an append-only list of migrations: entry N-1 brings the inbox to version N
/// (recorded in `schema_migrations`).
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_schema.sql"),
    include_str!("migrations/0002_publish.sql"),
    include_str!("migrations/0003_deliveries.sql"),
    include_str!("migrations/0004_acknowledgements.sql"),
    include_str!("migrations/0005_contrl_outbox.sql"),
    include_str!("migrations/0006_contrl_sendings.sql"),
];

/// How long a connection may take where neither the string nor `PGCONNECT_TIMEOUT` says.
const CONNECT_TIMEOUT_SECONDS: u64 = 30;

/// How many times a batch is tried again after a deadlock or a serialization failure.
const RETRIES: usize = 5;

/// Where a PostgreSQL inbox is: the connection settings and the schema.
#[derive(Clone)]
pub struct Target {
    config: Config,
    verify: Verify,
    schema: String,
    shown: String,
}

/// True for what `--db` gives as a PostgreSQL connection: a `postgres://` or `postgresql://`
/// URL, or libpq's `key=value` form (`host=... dbname=...`), told by its first word being one of
/// libpq's keywords followed by `=` (spaces around it allowed, values quoted or not). A string
/// that starts so but does not parse is then refused as a connection string, never taken for a
/// SQLite file named after it (which would create the file and show the password).
pub fn is_connection_string(text: &str) -> bool {
    if is_url(text) {
        return true;
    }
    let text = text.trim_start();
    let word_end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(word_end);
    LIBPQ_KEYWORDS.contains(&word) && rest.trim_start().starts_with('=')
}

/// libpq's connection keywords (those a `key=value` string may start with).
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Shown without the connection settings, which hold the password.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// Reads a connection string, with the usual `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
    /// `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT` and `PGCONNECT_TIMEOUT` where it leaves them
    /// out, as libpq does.
    pub fn parse(text: &str, schema: &str) -> Result<Target, InboxError> {
        if let Some((_, rest)) = text.split_once("://") {
            let authority = rest.split(['/', '?']).next().unwrap_or_default();
            // The first `@` ends the password; another would make the rest of the password
            // the host's name, shown in every message.
            if authority.matches('@').count() > 1 {
                return Err(InboxError::BadLocation {
                    reason: "the URL holds more than one '@' before the host: write an '@' in the user name or password as %40".into(),
                });
            }
        }
        let (text, verify) = take_tls(text)?;
        let mut config: Config = text.parse().map_err(|e: postgres::Error| {
            // The parser's messages name the option, never the string (which may hold a
            // password).
            let why = std::error::Error::source(&e).map(ToString::to_string);
            // "unexpected character at byte 12: expected `=` but got `x`": the character may
            // be one of the password's.
            let why = why.map(|w| w.split(": expected").next().unwrap_or_default().to_string());
            InboxError::BadLocation {
                reason: match why {
                    Some(why) => format!("invalid connection string: {why}"),
                    None => "invalid connection string".to_string(),
                },
            }
        })?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if config.get_hosts().is_empty() {
            let host = env("PGHOST").unwrap_or_else(|| "localhost".into());
            if host.starts_with('/') {
                config.host_path(&host);
            } else {
                config.host(&host);
            }
        }
        if config.get_ports().is_empty()
            && let Some(port) = env("PGPORT").and_then(|p| p.parse().ok())
        {
            config.port(port);
        }
        if config.get_user().is_none() {
            let user = env("PGUSER")
                .or_else(|| env("USER"))
                .unwrap_or_else(|| "postgres".into());
            config.user(&user);
        }
        if config.get_password().is_none()
            && let Some(password) = env("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_dbname().is_none() {
            let db = env("PGDATABASE")
                .or_else(|| config.get_user().map(str::to_string))
                .unwrap_or_default();
            config.dbname(&db);
        }
        // A server that drops packets must not hold a cron run forever (libpq waits forever).
        if config.get_connect_timeout().is_none() {
            let seconds = env("PGCONNECT_TIMEOUT")
                .and_then(|s| s.parse().ok())
                .unwrap_or(CONNECT_TIMEOUT_SECONDS);
            config.connect_timeout(Duration::from_secs(seconds));
        }
        if !is_identifier(schema) {
            return Err(InboxError::BadLocation {
                reason: format!(
                    "--pg-schema {schema:?} is not a plain lower-case name (letters, digits, _)"
                ),
            });
        }
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let shown = format!(
            "postgres://{}@{host}:{port}/{} (schema {schema})",
            config.get_user().unwrap_or(""),
            config.get_dbname().unwrap_or(""),
        );
        Ok(Target {
            config,
            verify,
            schema: schema.to_string(),
            shown,
        })
    }

    /// For messages: user, server, database and schema, never the password.
    pub fn shown(&self) -> String {
        self.shown.clone()
    }

    /// The schema as SQL names it: quoted, so that a name that is also a keyword (`select`,
    /// `user`) is still a name. It holds nothing to escape (checked to be a plain name).
    fn sql_schema(&self) -> String {
        format!("\"{}\"", self.schema)
    }

    /// A connection: TLS with rustls where `sslmode` asks for it (or, with the default
    /// `prefer`, where the server offers it).
    fn connect(&self) -> Result<Client, InboxError> {
        // libpq never uses TLS over a Unix-domain socket, whatever sslmode says (the socket
        // file's permissions guard it): a TLS attempt there failed on the path as a host name.
        let sockets_only = !self.config.get_hosts().is_empty()
            && self.config.get_hosts().iter().all(|h| match h {
                postgres::config::Host::Tcp(_) => false,
                #[cfg(unix)]
                postgres::config::Host::Unix(_) => true,
            });
        let client = match self.config.get_ssl_mode() {
            _ if sockets_only => {
                let mut plain = self.config.clone();
                plain.ssl_mode(postgres::config::SslMode::Disable);
                plain.connect(NoTls)
            }
            postgres::config::SslMode::Disable => self.config.connect(NoTls),
            _ => match tls::connector(&self.verify) {
                Ok(tls) => self.config.connect(tls),
                Err(e) => {
                    return Err(InboxError::Connect {
                        path: self.shown.clone(),
                        source: Box::new(e),
                    });
                }
            },
        };
        client.map_err(|e| InboxError::Connect {
            path: self.shown.clone(),
            source: Box::new(PgError(e)),
        })
    }
}

/// A schema name that needs no quoting.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

/// A failure of the server or the connection, told in one line with the server's own words
/// (the driver's own `Display` says only "db error" and keeps the reason in its source).
#[derive(Debug)]
pub(super) struct PgError(pub(super) postgres::Error);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(f, "{}", db.message())?;
            if let Some(detail) = db.detail() {
                write!(f, " ({})", one_line(detail))?;
            }
            if let Some(hint) = db.hint() {
                write!(f, "; hint: {}", one_line(hint))?;
            }
            return write!(f, " [SQLSTATE {}]", db.code().code());
        }
        // "error connecting to server", then why: "Connection refused (os error 111)".
        let mut text = self.0.to_string();
        let mut cause = std::error::Error::source(&self.0);
        while let Some(c) = cause {
            let part = one_line(&c.to_string());
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            cause = c.source();
        }
        f.write_str(&text)
    }
}

impl std::error::Error for PgError {}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The driver's error, where an inbox error holds one.
fn pg_error(e: &InboxError) -> Option<&postgres::Error> {
    match e {
        InboxError::Backend(b) | InboxError::Busy(b) => b.downcast_ref::<PgError>().map(|p| &p.0),
        _ => None,
    }
}

impl From<postgres::Error> for InboxError {
    /// A lock not had within `lock_timeout` (another host's key, a purge's batch) is told apart
    /// from every other failure, as SQLite's "busy" is.
    fn from(e: postgres::Error) -> InboxError {
        if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            InboxError::Busy(Box::new(PgError(e)))
        } else {
            InboxError::Backend(Box::new(PgError(e)))
        }
    }
}

/// True for the failures after which a batch, rolled back, is simply tried again: a deadlock,
/// a serialization failure, a key that vanished between two statements.
fn retryable(e: &InboxError) -> bool {
    match e {
        InboxError::Backend(b) if b.is::<decide::KeyVanished>() => true,
        InboxError::Backend(_) => pg_error(e)
            .and_then(postgres::Error::code)
            .is_some_and(|c| {
                *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
            }),
        _ => false,
    }
}

/// True for the server refusing the data itself (class 22, data exception; 23, integrity
/// constraint violation; 54, program limit exceeded, such as a key too long for its index):
/// the one interchange that caused it is refused, the rest of its batch decided. Anything else
/// (a statement timeout, a full disk, the server out of memory, a cancel) fails the batch,
/// so that the run exits 1 and the next one decides the interchange.
fn refusable(e: &InboxError) -> bool {
    matches!(e, InboxError::Backend(_))
        && pg_error(e)
            .and_then(postgres::Error::code)
            .is_some_and(|c| matches!(&c.code()[..2], "22" | "23" | "54"))
}

/// An open PostgreSQL inbox.
pub struct PgInbox {
    /// In a cell: the reports take `&self`, and a client queries through `&mut`.
    client: RefCell<Client>,
    target: Target,
    /// True while a batch's transaction is open.
    in_tx: bool,
    /// Counter increments of the open batch, added to this host's rows before it commits.
    pending_counts: BTreeMap<&'static str, i64>,
    /// This host's name, for its own counter rows.
    host: String,
}

impl PgInbox {
    /// Opens the inbox: with [`Access::Create`] the schema is created or brought up to date
    /// under an advisory lock (two hosts starting at once do not both migrate); with
    /// [`Access::Write`] it is brought up to date but never created; with [`Access::Read`]
    /// nothing is created or changed, and the session is read-only.
    pub(super) fn connect(
        target: &Target,
        busy_timeout: Duration,
        access: Access,
    ) -> Result<PgInbox, InboxError> {
        let mut client = target.connect()?;
        // A host never waits forever for another host's key or a purge's batch.
        client.batch_execute(&format!(
            "SET lock_timeout = {}; SET application_name = 'edi-inbox'",
            busy_timeout.as_millis().clamp(1, i32::MAX as u128)
        ))?;
        let schema = &target.sql_schema();
        let version = applied_version(&mut client, target)?;
        let known = MIGRATIONS.len();
        match version {
            Some(v) if v as usize > known => {
                return Err(InboxError::TooNew {
                    path: target.shown(),
                    found: v,
                    known,
                });
            }
            None if access != Access::Create => {
                return Err(InboxError::Missing {
                    path: target.shown(),
                });
            }
            Some(v) if (v as usize) < known && access == Access::Read => {
                return Err(InboxError::Outdated {
                    path: target.shown(),
                    found: v,
                    known,
                });
            }
            Some(v) if v as usize == known => {}
            _ => migrate(&mut client, target)?,
        }
        client.batch_execute(&format!("SET search_path = {schema}"))?;
        if access == Access::Read {
            client.batch_execute("SET default_transaction_read_only = on")?;
        } else {
            warn_if_not_durable(&mut client);
        }
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Ok(PgInbox {
            client: RefCell::new(client),
            target: target.clone(),
            in_tx: false,
            pending_counts: BTreeMap::new(),
            host,
        })
    }

    /// Opens the batch's transaction if none is open.
    fn begin(&mut self) -> Result<(), InboxError> {
        if !self.in_tx {
            self.client
                .get_mut()
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")?;
            self.in_tx = true;
        }
        Ok(())
    }

    fn rollback(&mut self) {
        if self.in_tx {
            let _ = self.client.get_mut().batch_execute("ROLLBACK");
            self.in_tx = false;
        }
        self.pending_counts.clear();
    }

    fn count(&mut self, decisions: &[Decision]) {
        for d in decisions {
            let name = match d {
                Decision::New { .. } => "ingest_new",
                Decision::Duplicate => "ingest_duplicate",
                Decision::Drift { .. } => "ingest_drift",
                Decision::Refused { .. } => "ingest_rejected",
            };
            *self.pending_counts.entry(name).or_default() += 1;
        }
    }

    /// Finds the interchanges of `batch` that the server refuses to store (a key too long for
    /// its index, say), halving the batch in savepoints around a data error. Every savepoint is
    /// rolled back, whatever it found: a released subtransaction that wrote keeps its place in
    /// the server's cache of 64 per transaction, a rolled-back one does not, so isolating many
    /// bad interchanges never overflows it. Only after the batch as a whole failed.
    fn refused(
        &mut self,
        batch: &[Candidate<'_>],
        refused: &mut Vec<Option<String>>,
        at: usize,
    ) -> Result<(), InboxError> {
        let client = self.client.get_mut();
        client.batch_execute("SAVEPOINT part")?;
        let result = decide::decide(client, batch);
        client.batch_execute("ROLLBACK TO part; RELEASE part")?;
        match result {
            Ok(_) => Ok(()),
            Err(e) if !refusable(&e) => Err(e),
            Err(e) if batch.len() == 1 => {
                refused[at] = Some(format!(
                    "the PostgreSQL inbox cannot store it: {}",
                    describe(&e)
                ));
                Ok(())
            }
            Err(_) => {
                let half = batch.len() / 2;
                let (left, right) = batch.split_at(half);
                self.refused(left, refused, at)?;
                self.refused(right, refused, at + half)
            }
        }
    }

    /// Decides `batch` once the interchanges the server refuses are found: the others together,
    /// in the batch's own transaction, the refused ones refused.
    fn decide_around_refused(
        &mut self,
        batch: &[Candidate<'_>],
    ) -> Result<Vec<Decision>, InboxError> {
        let mut refused = vec![None; batch.len()];
        self.refused(batch, &mut refused, 0)?;
        let rest: Vec<Candidate<'_>> = batch
            .iter()
            .zip(&refused)
            .filter(|(_, r)| r.is_none())
            .map(|(c, _)| *c)
            .collect();
        let mut decided = decide::decide(self.client.get_mut(), &rest)?.into_iter();
        refused
            .into_iter()
            .map(|r| match r {
                Some(reason) => Ok(Decision::Refused { reason }),
                None => decided.next().ok_or_else(|| {
                    InboxError::Backend("a batch's decisions came back short".into())
                }),
            })
            .collect()
    }
}

/// The server's own words for a failure.
fn describe(e: &InboxError) -> String {
    match pg_error(e) {
        Some(pg) => match pg.as_db_error() {
            Some(db) => db.message().to_string(),
            None => e.to_string(),
        },
        None => e.to_string(),
    }
}

/// The version the inbox's schema has, or `None` where there is none yet.
fn applied_version(client: &mut Client, target: &Target) -> Result<Option<i64>, InboxError> {
    let version = stored_version(client, target)?;
    if version.is_some() {
        // The schema's name is a plain identifier (checked), never a value from the input.
        client.batch_execute(&format!("SET search_path = {}", target.sql_schema()))?;
    }
    Ok(version)
}

/// The highest version in the schema's `schema_migrations`, `None` where it has no such table,
/// and "not an inbox" where the table is another tool's (golang-migrate keeps one of the same
/// name, with `bigint` versions and a `dirty` flag, in whatever schema it is given): read as
/// ours, its versions would make the inbox look newer than this edi-inbox.
fn stored_version(
    client: &mut impl GenericClient,
    target: &Target,
) -> Result<Option<i64>, InboxError> {
    let columns: Vec<(String, String)> = client
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = 'schema_migrations'
             ORDER BY ordinal_position",
            &[&target.schema],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if columns.is_empty() {
        return Ok(None);
    }
    let ours = [
        ("version", "integer"),
        ("applied_at", "timestamp with time zone"),
    ];
    let not_ours = || InboxError::NotAnInbox {
        path: target.shown(),
        reason: format!(
            ": its schema {} holds a schema_migrations table of another tool; give edi-inbox a schema of its own with --pg-schema",
            target.schema
        ),
    };
    if columns.len() != ours.len()
        || columns
            .iter()
            .zip(ours)
            .any(|((n, t), (on, ot))| n != on || t != ot)
    {
        return Err(not_ours());
    }
    let v: Option<i32> = client
        .query_one(
            &format!(
                "SELECT max(version) FROM {}.schema_migrations",
                target.sql_schema()
            ),
            &[],
        )?
        .try_get(0)
        .map_err(|_| not_ours())?;
    Ok(Some(i64::from(v.unwrap_or(0))))
}

/// Creates the schema or brings it up to date, in one transaction, under an advisory lock that
/// makes a second host starting at once wait, then find the work done. A schema from a newer
/// edi-inbox, or one whose `schema_migrations` is another tool's, is refused and left as it is.
fn migrate(client: &mut Client, target: &Target) -> Result<(), InboxError> {
    let mut tx = client.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('edi-inbox ' || $1, 0))",
        &[&target.schema],
    )?;
    let schema = target.sql_schema();
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         SET LOCAL search_path = {schema};
         CREATE TABLE IF NOT EXISTS schema_migrations (
             version     integer PRIMARY KEY,
             applied_at  timestamptz NOT NULL DEFAULT now()
         );"
    ))?;
    let version = stored_version(&mut tx, target)?.unwrap_or(0);
    if version as usize > MIGRATIONS.len() {
        return Err(InboxError::TooNew {
            path: target.shown(),
            found: version,
            known: MIGRATIONS.len(),
        });
    }
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(migration)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&(n as i32 + 1)],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Says once, on standard error, where the server does not make a commit durable: then a crash
/// of the server can lose what was reported as decided.
fn warn_if_not_durable(client: &mut Client) {
    for setting in ["synchronous_commit", "fsync"] {
        let value = client
            .query_one(&format!("SHOW {setting}"), &[])
            .ok()
            .map(|r| r.get::<_, String>(0));
        if value.as_deref() == Some("off") {
            crate::output::warn(&format!(
                "the PostgreSQL server runs with {setting}=off: a commit is not durable, and a crash of the server can lose interchanges reported as new (see the README)"
            ));
        }
    }
}

impl Inbox for PgInbox {
    fn decide(&mut self, batch: &[Candidate<'_>]) -> Result<Vec<Decision>, InboxError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // The batch's decision is the first thing its transaction does (ingest records the
        // rejected pieces after it), so a failed try is rolled back whole and made again.
        let mut tries = 0;
        loop {
            self.begin()?;
            let result = match decide::decide(self.client.get_mut(), batch) {
                Err(e) if refusable(&e) => {
                    self.rollback();
                    self.begin()?;
                    self.decide_around_refused(batch)
                }
                other => other,
            };
            match result {
                Ok(decisions) => {
                    self.count(&decisions);
                    return Ok(decisions);
                }
                Err(e) if retryable(&e) && tries < RETRIES => {
                    tries += 1;
                    self.rollback();
                    std::thread::sleep(Duration::from_millis(20 * tries as u64));
                }
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
            }
        }
    }

    /// A deadlock with another host over the rows a batch writes after its decision (the
    /// rejected files, the CONTRLs), or a serialization failure: the batch goes back whole.
    fn rolled_back_for_retry(&mut self, e: &InboxError) -> bool {
        if retryable(e) {
            self.rollback();
            true
        } else {
            false
        }
    }

    /// The decision costs a round trip to the server per statement: a whole batch at once.
    fn decides_whole_batches(&self) -> bool {
        true
    }

    fn rejected_file(
        &mut self,
        source_file: &str,
        bytes: &[u8],
        sha256: &str,
        _seen_at: &str,
    ) -> Result<RejectedFile, InboxError> {
        self.begin()?;
        let id = queries::record_rejected_file(self.client.get_mut(), source_file, bytes, sha256)?;
        Ok(RejectedFile {
            id,
            sha256: sha256.to_string(),
            size: bytes.len(),
        })
    }

    fn reject(
        &mut self,
        file: &RejectedFile,
        source_file: &str,
        error: &EnvelopeError,
        _seen_at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        queries::record_rejection(self.client.get_mut(), file, source_file, error)?;
        *self.pending_counts.entry("ingest_rejected").or_default() += 1;
        Ok(())
    }

    fn record_deliveries(
        &mut self,
        deliveries: &[DeliveryRecord<'_>],
        _seen_at: &str,
    ) -> Result<(), InboxError> {
        if deliveries.is_empty() {
            return Ok(());
        }
        self.begin()?;
        queries::record_deliveries(self.client.get_mut(), deliveries)?;
        let redelivered = deliveries.iter().filter(|d| d.delivery_count > 1).count();
        *self.pending_counts.entry("consume_deliveries").or_default() += deliveries.len() as i64;
        *self
            .pending_counts
            .entry("consume_redelivered")
            .or_default() += redelivered as i64;
        Ok(())
    }

    fn acknowledge(&mut self, ack: &NewAcknowledgement<'_>) -> Result<String, InboxError> {
        self.begin()?;
        queries::record_acknowledgement(self.client.get_mut(), ack)
    }

    fn resend_acknowledgement(
        &mut self,
        key: (&str, &str, &str),
        sending: Option<&str>,
        created_at: &str,
    ) -> Result<Resend, InboxError> {
        self.begin()?;
        queries::resend_acknowledgement(self.client.get_mut(), key, sending, created_at)
    }

    /// Hosts answering the same partners in another order would each hold one counter and wait
    /// for the other's: taken in one order, up front, they wait in turn instead.
    fn lock_partners(&mut self, partners: &[String]) -> Result<(), InboxError> {
        if partners.is_empty() {
            return Ok(());
        }
        self.begin()?;
        let c = self.client.get_mut();
        c.execute(
            "INSERT INTO contrl_counters (partner, next)
             SELECT p, 1 FROM unnest($1::text[]) AS p ORDER BY p ON CONFLICT DO NOTHING",
            &[&partners],
        )?;
        c.execute(
            "SELECT 1 FROM contrl_counters WHERE partner = ANY($1) ORDER BY partner FOR UPDATE",
            &[&partners],
        )?;
        Ok(())
    }

    fn pending_contrl(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
    ) -> Result<Vec<ContrlEvent>, InboxError> {
        queries::pending_contrl(
            &mut *self.client.borrow_mut(),
            pass,
            retry_after.as_secs_f64(),
            limit,
        )
    }

    fn acknowledgements(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<Vec<StoredAcknowledgement>, InboxError> {
        queries::acknowledgements(
            &mut *self.client.borrow_mut(),
            sender,
            recipient,
            control_ref,
        )
    }

    fn commit(&mut self) -> Result<(), InboxError> {
        if !self.in_tx {
            return Ok(());
        }
        let counts = std::mem::take(&mut self.pending_counts);
        let client = self.client.get_mut();
        let result = queries::add_counters(client, &self.host, &counts)
            .and_then(|()| Ok(client.batch_execute("COMMIT")?));
        self.in_tx = false;
        result
    }

    fn start_run(&mut self) {}

    fn end_run(&mut self) {}

    fn probe(&self) -> Option<Box<dyn KeyProbe + Send>> {
        let mut client = self.target.connect().ok()?;
        client
            .batch_execute(&format!(
                // A lookup is only a hint (an answer of "not known" makes the reader read the
                // file whole): it never waits on a lock or a slow server.
                "SET search_path = {}; SET default_transaction_read_only = on;
                 SET lock_timeout = 1000; SET statement_timeout = 5000",
                self.target.sql_schema()
            ))
            .ok()?;
        // Prepared once: parsed and planned per file, the lookup cost more than it saved.
        let has = client
            .prepare(
                "SELECT 1 FROM inbox WHERE sender = $1 AND recipient = $2 AND control_ref = $3",
            )
            .ok()?;
        Some(Box::new(PgProbe {
            client: std::sync::Mutex::new(client),
            has,
        }))
    }

    fn stats(&self) -> Result<Stats, InboxError> {
        queries::stats(&mut *self.client.borrow_mut())
    }

    fn size_bytes(&self) -> u64 {
        queries::size_bytes(&mut *self.client.borrow_mut(), &self.target.schema).unwrap_or(0)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError> {
        queries::events(&mut *self.client.borrow_mut(), filter)
    }

    fn key_history(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<KeyHistory, InboxError> {
        queries::key_history(
            &mut *self.client.borrow_mut(),
            sender,
            recipient,
            control_ref,
        )
    }

    fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError> {
        queries::count_older(&mut *self.client.borrow_mut(), target, cutoff)
    }

    fn purge_step(
        &mut self,
        target: PurgeTarget,
        cutoff: &str,
        limit: u32,
    ) -> Result<usize, InboxError> {
        // Whatever the server's default: under REPEATABLE READ a purge racing an ingest would
        // fail with serialization errors instead of deleting what it can.
        let mut tx = self
            .client
            .get_mut()
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::ReadCommitted)
            .start()?;
        let n = queries::delete_older(&mut tx, target, cutoff, limit)?;
        if target == PurgeTarget::Inbox && n > 0 {
            let counts = BTreeMap::from([("purge_entries", n as i64)]);
            queries::add_counters(&mut tx, &self.host, &counts)?;
        }
        tx.commit()?;
        Ok(n)
    }

    fn oldest_entry(&self) -> Result<Option<String>, InboxError> {
        queries::oldest_entry(&mut *self.client.borrow_mut())
    }

    fn counter(&self, name: &str) -> Result<i64, InboxError> {
        queries::counter(&mut *self.client.borrow_mut(), name)
    }

    /// A session-level advisory lock on this connection: the server gives it up when the
    /// process dies or the connection drops, so a killed publisher never blocks the next.
    fn lock_publisher(&mut self) -> Result<bool, InboxError> {
        Ok(self
            .client
            .get_mut()
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended('edi-inbox publish ' || $1, 0))",
                &[&self.target.schema],
            )?
            .get(0))
    }

    fn pending_events(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
        whole: bool,
    ) -> Result<Vec<OutboxEvent>, InboxError> {
        queries::pending_events(
            &mut *self.client.borrow_mut(),
            pass,
            retry_after.as_secs_f64(),
            limit,
            whole,
        )
    }

    fn interchange_bytes(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError> {
        queries::interchange_bytes(&mut *self.client.borrow_mut(), ids)
    }

    fn mark_published(&mut self, outbox: Outbox, rows: &[i64]) -> Result<(), InboxError> {
        let host = self.host.clone();
        let mut tx = self.client.get_mut().transaction()?;
        let n = tx.execute(
            &format!(
                "UPDATE {} SET published_at = now(), last_error = NULL
                 WHERE id = ANY($1) AND published_at IS NULL",
                outbox.table()
            ),
            &[&rows],
        )?;
        let counts = BTreeMap::from([("publish_published", n as i64)]);
        queries::add_counters(&mut tx, &host, &counts)?;
        tx.commit()?;
        Ok(())
    }

    fn mark_failed(
        &mut self,
        outbox: Outbox,
        rows: &[i64],
        error: &str,
        pass: &str,
        max_attempts: u32,
    ) -> Result<usize, InboxError> {
        let host = self.host.clone();
        let mut tx = self.client.get_mut().transaction()?;
        let parked = tx
            .query(
                &format!(
                    "UPDATE {} SET attempts = attempts + 1, last_error = $2,
                            last_attempt_at = now(), last_attempt_pass = $3,
                            failed_at = CASE WHEN attempts + 1 >= $4 THEN now() END
                     WHERE id = ANY($1) AND published_at IS NULL
                     RETURNING failed_at IS NOT NULL",
                    outbox.table()
                ),
                &[
                    &rows,
                    &queries::storable(error),
                    &pass,
                    &(max_attempts.min(i32::MAX as u32) as i32),
                ],
            )?
            .iter()
            .filter(|r| r.get::<_, bool>(0))
            .count();
        let counts = BTreeMap::from([
            ("publish_failed", rows.len() as i64),
            ("publish_parked", parked as i64),
        ]);
        queries::add_counters(&mut tx, &host, &counts)?;
        tx.commit()?;
        Ok(parked)
    }
}

/// A reading thread's connection, for [`Inbox::probe`].
struct PgProbe {
    client: std::sync::Mutex<Client>,
    has: postgres::Statement,
}

impl KeyProbe for PgProbe {
    fn has(&self, sender: &str, recipient: &str, control_ref: &str) -> bool {
        let Ok(mut client) = self.client.lock() else {
            return false;
        };
        client
            .query_opt(&self.has, &[&sender, &recipient, &control_ref])
            .is_ok_and(|r| r.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_strings_are_told_from_paths() {
        for yes in [
            "postgres://u@h/db",
            "postgresql://h:5433/db",
            "host=h dbname=db",
            "dbname=db",
            "password='top secret' host=h",
            "dbname = db",
            "  user =u",
            "port=5432 oops",
        ] {
            assert!(is_connection_string(yes), "{yes}");
        }
        for no in [
            "inbox.db",
            "/srv/edi/inbox.db",
            "my db.sqlite",
            "a=b",
            "",
            "hosts=x",
            "./dbname=x",
            "dbname",
        ] {
            assert!(!is_connection_string(no), "{no}");
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        let t = Target::parse("postgres://alice:s3cret@db.example:5433/edi", "edi_inbox").unwrap();
        assert_eq!(
            t.shown(),
            "postgres://alice@db.example:5433/edi (schema edi_inbox)"
        );
        let t = Target::parse("host=db.example user=bob password=hunter2 dbname=x", "s").unwrap();
        assert!(!t.shown().contains("hunter2"), "{}", t.shown());
        assert!(!format!("{t:?}").contains("hunter2"));
        assert!(Target::parse("postgres://u@h/db", "Bad-Name").is_err());
        for text in [
            "postgres://alice:p@zq@db.example/edi",
            "postgres://alice:p:zq@db.example/edi",
        ] {
            match Target::parse(text, "s") {
                Ok(t) => assert!(!t.shown().contains("zq"), "{}", t.shown()),
                Err(e) => assert!(!e.to_string().contains("zq"), "{e}"),
            }
        }
        let e = Target::parse("password='top secret' oops", "s").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
