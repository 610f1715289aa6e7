//! The inbox: all storage lives behind this boundary. Today it is one SQLite file; a shared
//! PostgreSQL inbox for several ingest hosts would implement the same [`Inbox`] / [`Batch`] calls.
//!
//! The decision for an interchange is one `INSERT ... ON CONFLICT DO NOTHING` on the inbox key,
//! inside a savepoint of the batch's `BEGIN IMMEDIATE` transaction, together with the business
//! rows it implies. Nothing here commits except [`Inbox::commit`]; a batch left open when the
//! `Inbox` is dropped (a failed run) is rolled back by SQLite.

mod report;
mod sql;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::edifact::{EnvelopeError, Interchange};

pub use report::{Event, EventFilter, KeyHistory, PurgeTarget, Sighting, Stats, StoredInterchange};

/// `PRAGMA application_id` of an edi-inbox database ("EDIx"), so that another program's SQLite
/// file is never mistaken for one.
pub const APPLICATION_ID: i32 = 0x4544_4978;

/// One step of the schema: SQL, or code where rows must be computed again.
enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> Result<(), InboxError>),
}

/// The schema, as an append-only list of migrations: entry N takes `user_version` from N to N+1.
const MIGRATIONS: &[Migration] = &[
    Migration::Sql(include_str!("schema.sql")),
    Migration::Sql(include_str!("0001_counters.sql")),
    Migration::Sql(include_str!("0002_raw_codec.sql")),
    Migration::Sql(include_str!("0003_rejected_files.sql")),
    // 4: the hash takes the service characters in force where they are not the defaults.
    Migration::Code(sql::rehash),
];

/// zstd level for stored interchanges: EDIFACT text shrinks about fivefold at level 3, at several
/// hundred MB/s, which writes less than storing it plain (see BENCHMARKS.md).
pub const ZSTD_LEVEL: i32 = 1;

/// How long a writer waits for another run's transaction before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// How much of a rejected file is kept in the database.
pub const REJECTED_BYTES_LIMIT: usize = 4 << 20;

/// How a command opens the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `ingest`: created with its schema where missing (or an empty file).
    Create,
    /// `purge`: read and written, never created.
    Write,
    /// `stats`, `list`, `show`: read only, never created or changed.
    Read,
}

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("{path} is not an edi-inbox database{reason}")]
    NotAnInbox { path: String, reason: String },
    #[error(
        "{path} has schema version {found}; this edi-inbox knows versions up to {known}: use a newer edi-inbox"
    )]
    TooNew {
        path: String,
        found: i64,
        known: usize,
    },
    #[error("there is no inbox database at {path}: name it with --db or EDI_INBOX_DB")]
    Missing { path: String },
    #[error("{path} is a folder: --db names the database file")]
    IsAFolder { path: String },
    #[error("cannot open {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} has schema version {found} of {known}, from an older edi-inbox: a report does not change the database; run ingest or purge once to bring it up to date"
    )]
    Outdated {
        path: String,
        found: i64,
        known: usize,
    },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("stored interchange bytes cannot be (de)compressed: {0}")]
    Codec(#[from] std::io::Error),
}

/// What the inbox decided for one interchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The key was new: the interchange, its messages and their outbox events were written.
    New { interchange_id: i64 },
    /// The key was there with the same payload hash: nothing written but the sighting.
    Duplicate,
    /// The key was there with another payload hash: nothing applied; the bytes are kept.
    Drift { stored_sha256: String },
}

/// A rejected file's record, which its errors point at.
#[derive(Debug, Clone)]
pub struct RejectedFile {
    id: i64,
    sha256: String,
    size: usize,
}

/// An open inbox database.
pub struct Inbox {
    conn: Connection,
    busy_timeout: Duration,
    /// Counter increments of the open batch, written just before it commits.
    pending_counts: std::collections::BTreeMap<&'static str, i64>,
}

impl Inbox {
    /// Opens the database at `path` with the default busy timeout, creating it on first use.
    pub fn open(path: &Path) -> Result<Inbox, InboxError> {
        Inbox::connect(path, BUSY_TIMEOUT, Access::Create)
    }

    /// Opens the database at `path`, waiting up to `busy_timeout` for another run's lock.
    ///
    /// A file that is not an SQLite database (checked by its header before SQLite sees it, so
    /// that not even a one-byte file is written to), or another program's, or one written by a
    /// newer edi-inbox, is an error and is left untouched. An up-to-date database is not written
    /// to; with [`Access::Read`] none is, nor created.
    pub fn connect(
        path: &Path,
        busy_timeout: Duration,
        access: Access,
    ) -> Result<Inbox, InboxError> {
        let shown = path.display().to_string();
        precheck(path, &shown, access)?;
        if access == Access::Read {
            return Inbox::connect_read_only(path, &shown, busy_timeout);
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if access == Access::Create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(busy_timeout)?;
        // Read before anything writes: a file that is not a database fails here, unchanged.
        let (app_id, version, tables) = identify_inbox(&conn, &shown, busy_timeout)?;
        let fresh = app_id == 0 && version == 0 && tables == 0;
        if fresh && access != Access::Create {
            return Err(InboxError::Missing { path: shown });
        }
        // Switching a new file to WAL needs an exclusive lock, and SQLite answers "busy" at once,
        // without the busy handler, while another run is creating the same file; so wait here.
        retry_while_busy(busy_timeout, || {
            let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            Ok(mode)
        })?;
        persist_wal(&conn);
        conn.pragma_update(None, "synchronous", "FULL")?;
        // The savepoint of each decision journals the pages it changes; in memory, not in a
        // temporary file (measured: 8% of an ingest).
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // A batch of 1,000 interchanges changes more pages than the default 2 MiB cache holds,
        // and SQLite then spills them to the WAL before the commit, some of them twice.
        conn.pragma_update(None, "cache_size", -16 * 1024)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut inbox = Inbox {
            conn,
            busy_timeout,
            pending_counts: Default::default(),
        };
        if app_id != APPLICATION_ID || (version as usize) < MIGRATIONS.len() {
            inbox.migrate(&shown)?;
        }
        Ok(inbox)
    }

    /// The reporting commands' connection: read-only, so it never creates, migrates or changes
    /// the database, and works for a user who may only read it.
    fn connect_read_only(
        path: &Path,
        shown: &str,
        busy_timeout: Duration,
    ) -> Result<Inbox, InboxError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(busy_timeout)?;
        let found = match identify_inbox(&conn, shown, busy_timeout) {
            Err(InboxError::Sqlite(e)) if cannot_share_wal(&e) && wal_is_empty(path) => {
                // A WAL database read by a user who can create neither its -shm nor its -wal
                // (a folder they may not write), with no -wal there or an empty one: every
                // commit is in the database file, which is then read as it stands.
                drop(conn);
                return Inbox::connect_immutable(path, shown, busy_timeout);
            }
            other => other?,
        };
        Inbox::read_only(conn, shown, busy_timeout, found)
    }

    fn connect_immutable(
        path: &Path,
        shown: &str,
        busy_timeout: Duration,
    ) -> Result<Inbox, InboxError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(format!("{}?immutable=1", file_uri(path)), flags)?;
        let found = identify_inbox(&conn, shown, busy_timeout)?;
        Inbox::read_only(conn, shown, busy_timeout, found)
    }

    fn read_only(
        conn: Connection,
        shown: &str,
        busy_timeout: Duration,
        (app_id, version, tables): (i32, i64, i64),
    ) -> Result<Inbox, InboxError> {
        if app_id == 0 && version == 0 && tables == 0 {
            return Err(InboxError::Missing {
                path: shown.to_string(),
            });
        }
        if (version as usize) < MIGRATIONS.len() {
            return Err(InboxError::Outdated {
                path: shown.to_string(),
                found: version,
                known: MIGRATIONS.len(),
            });
        }
        Ok(Inbox {
            conn,
            busy_timeout,
            pending_counts: Default::default(),
        })
    }

    /// Applies the migrations this database has not had, in one transaction, so that two runs
    /// starting on a new file at once cannot both create the schema.
    fn migrate(&mut self, shown: &str) -> Result<(), InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > MIGRATIONS.len() {
            return Err(InboxError::TooNew {
                path: shown.to_string(),
                found: version,
                known: MIGRATIONS.len(),
            });
        }
        for (n, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            match migration {
                Migration::Sql(sql) => tx.execute_batch(sql)?,
                Migration::Code(f) => f(&tx)?,
            }
            tx.pragma_update(None, "user_version", n as i64 + 1)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.commit()?;
        Ok(())
    }

    /// True while a batch (an open transaction) holds decisions not yet committed.
    pub fn in_batch(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// Starts a batch if none is open: one `BEGIN IMMEDIATE` transaction, so the write lock is
    /// taken (waiting up to the busy timeout for another run) before anything is read for a
    /// decision. A deferred transaction would fail at once when it upgrades to a writer.
    fn begin(&mut self) -> Result<(), InboxError> {
        if !self.in_batch() {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
        }
        Ok(())
    }

    /// Runs `f` in a savepoint of the batch: on failure only its own writes are rolled back.
    fn in_savepoint<T>(
        &mut self,
        f: impl FnOnce(&Connection) -> Result<T, InboxError>,
    ) -> Result<T, InboxError> {
        self.begin()?;
        // Prepared once: a statement parsed per interchange is measurable at 20,000 files.
        self.conn
            .prepare_cached("SAVEPOINT decision")?
            .execute([])?;
        match f(&self.conn) {
            Ok(v) => {
                self.conn.prepare_cached("RELEASE decision")?.execute([])?;
                Ok(v)
            }
            Err(e) => {
                let _ = self
                    .conn
                    .execute_batch("ROLLBACK TO decision; RELEASE decision");
                Err(e)
            }
        }
    }

    /// Decides one interchange within the current batch (starting one if needed).
    /// `compressed` is its bytes as [`compress`] gives them, where already made; otherwise they
    /// are compressed here if the interchange is new.
    pub fn decide(
        &mut self,
        interchange: &Interchange<'_>,
        compressed: Option<&[u8]>,
        source_file: &str,
        received_at: &str,
    ) -> Result<Decision, InboxError> {
        let d = self
            .in_savepoint(|c| sql::decide(c, interchange, compressed, source_file, received_at))?;
        let name = match d {
            Decision::New { .. } => "ingest_new",
            Decision::Duplicate => "ingest_duplicate",
            Decision::Drift { .. } => "ingest_drift",
        };
        *self.pending_counts.entry(name).or_default() += 1;
        Ok(d)
    }

    /// Records a file that holds rejected input, keeping its bytes (up to the limit) once
    /// however many errors it has; the same file seen again only counts again. `sha256` is the
    /// file's hash, made by the caller once. Returns the record, for [`Inbox::reject`].
    pub fn rejected_file(
        &mut self,
        source_file: &str,
        bytes: &[u8],
        sha256: &str,
        seen_at: &str,
    ) -> Result<RejectedFile, InboxError> {
        let id = self
            .in_savepoint(|c| sql::record_rejected_file(c, source_file, bytes, sha256, seen_at))?;
        Ok(RejectedFile {
            id,
            sha256: sha256.to_string(),
            size: bytes.len(),
        })
    }

    /// Records one rejected piece of input against its file's record.
    pub fn reject(
        &mut self,
        file: &RejectedFile,
        source_file: &str,
        error: &EnvelopeError,
        seen_at: &str,
    ) -> Result<(), InboxError> {
        self.in_savepoint(|c| sql::record_rejection(c, file, source_file, error, seen_at))?;
        *self.pending_counts.entry("ingest_rejected").or_default() += 1;
        Ok(())
    }

    /// Makes every decision of the batch durable at once (one fsync with `synchronous=FULL`).
    pub fn commit(&mut self) -> Result<(), InboxError> {
        if self.in_batch() {
            for (name, by) in std::mem::take(&mut self.pending_counts) {
                report::add_counter(&self.conn, name, by)?;
            }
            crash_point!("before-commit");
            self.conn.execute_batch("COMMIT")?;
            crash_point!("after-commit");
        }
        Ok(())
    }

    /// Drops every decision of the open batch.
    pub fn rollback(&mut self) -> Result<(), InboxError> {
        self.pending_counts.clear();
        if self.in_batch() {
            self.conn.execute_batch("ROLLBACK")?;
        }
        Ok(())
    }

    /// The figures of `stats`.
    pub fn stats(&self) -> Result<Stats, InboxError> {
        report::stats(&self.conn)
    }

    /// The most recent events, newest first.
    pub fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError> {
        report::events(&self.conn, filter)
    }

    /// Everything stored under one key.
    pub fn key_history(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<KeyHistory, InboxError> {
        report::key_history(&self.conn, sender, recipient, control_ref)
    }

    /// How many rows of `target` are older than `cutoff` (RFC 3339 UTC).
    pub fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError> {
        report::count_older(&self.conn, target, cutoff)
    }

    /// Deletes up to `limit` rows of `target` older than `cutoff` in one short transaction of its
    /// own, so that a large purge never holds the write lock for long. Returns how many went.
    pub fn purge_step(
        &mut self,
        target: PurgeTarget,
        cutoff: &str,
        limit: u32,
    ) -> Result<usize, InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = report::delete_older(&tx, target, cutoff, limit)?;
        if target == PurgeTarget::Inbox && n > 0 {
            report::add_counter(&tx, "purge_entries", n as i64)?;
        }
        tx.commit()?;
        Ok(n)
    }

    /// The `received_at` of the oldest inbox entry.
    pub fn oldest_entry(&self) -> Result<Option<String>, InboxError> {
        report::oldest_entry(&self.conn)
    }

    /// A cumulative counter (`ingest_new`, `ingest_duplicate`, `ingest_drift`,
    /// `ingest_rejected`, `purge_entries`).
    pub fn counter(&self, name: &str) -> Result<i64, InboxError> {
        report::counter(&self.conn, name)
    }

    /// The connection, for the read-only reports of other commands.
    /// Turns SQLite's own checkpoints at commit on (the default) or off, while a [`Checkpointer`]
    /// does them instead.
    pub fn set_auto_checkpoint(&self, on: bool) -> Result<(), InboxError> {
        let pages = if on { DEFAULT_AUTOCHECKPOINT_PAGES } else { 0 };
        self.conn
            .pragma_update_and_check(None, "wal_autocheckpoint", pages, |_| Ok(()))?;
        Ok(())
    }

    /// Copies everything in the WAL into the database file and empties it (a TRUNCATE
    /// checkpoint), at the end of a run, so that the database file alone holds every commit (a
    /// plain `cp inbox.db backup/` then copies all of it). Waits a little for another process's
    /// transaction, no more: a run that overlaps another leaves the rest to that one. Returns
    /// whether the WAL is empty.
    pub fn checkpoint_all(&self) -> Result<bool, InboxError> {
        self.conn.busy_timeout(Duration::from_secs(2))?;
        let done = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok(r.get::<_, i64>(0)? == 0)
            });
        self.conn.busy_timeout(self.busy_timeout)?;
        Ok(done?)
    }

    /// Copies what is left of the WAL and has the next write start it over (a RESTART
    /// checkpoint); between batches, while a [`Checkpointer`] does the rest.
    ///
    /// It does not wait: where another process is writing, or a reader is still on the WAL, it
    /// leaves the WAL as it is for a later try (waiting had an ingest run during a large purge
    /// sit out the purge's batches).
    pub fn restart_wal(&self) -> Result<(), InboxError> {
        self.conn.busy_timeout(Duration::ZERO)?;
        let restarted = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        self.conn.busy_timeout(self.busy_timeout)?;
        Ok(restarted?)
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// SQLite's default `wal_autocheckpoint`.
const DEFAULT_AUTOCHECKPOINT_PAGES: i64 = 1000;

/// An interchange's bytes as the inbox stores them (a zstd frame), made ahead of the decision so
/// that another thread can do it while this one writes.
pub fn compress(raw: &[u8]) -> Result<Vec<u8>, InboxError> {
    thread_local! {
        // One context per thread, reused: making a fresh one for every interchange (what
        // `zstd::bulk::compress` does) was a tenth of the time spent compressing.
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let compressor = match &mut *slot {
            Some(compressor) => compressor,
            None => slot.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
        };
        Ok(compressor.compress(raw)?)
    })
}

/// Copies committed pages from the WAL into the database file from a connection of its own, so
/// that the deciding connection does not stop for it: with automatic checkpoints, the deciding
/// thread spent a quarter of an ingest in the checkpoints' writes and fsyncs (70 of its 86
/// fsyncs on 20,000 files), waiting while the reading threads had nothing to hand it.
///
/// The WAL only starts over from its beginning when a write begins after every frame in it was
/// copied, which a writer that always has the next batch open never allows; so the deciding
/// connection restarts it itself between two batches once it holds [`WAL_RESTART_FRAMES`]
/// ([`Inbox::restart_wal`]), which costs little since this has copied nearly all of it by then.
pub struct Checkpointer {
    conn: Connection,
}

/// 64 MiB of 4 KiB pages. Without restarts, an ingest of 310 MB left a 115 MB WAL.
pub const WAL_RESTART_FRAMES: i64 = 16 * 1024;

impl Checkpointer {
    pub fn open(path: &Path) -> Result<Checkpointer, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(Checkpointer { conn })
    }

    /// Checkpoints what is committed without waiting for anyone (PASSIVE); returns the number of
    /// frames in the WAL.
    pub fn checkpoint(&self) -> Result<i64, InboxError> {
        Ok(self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?)
    }
}

/// A read-only look at the inbox from another thread: whether a key is already there, so that
/// work done ahead (compressing) is spared for what will only be a duplicate. A hint only: the
/// decision is still the insert.
pub struct KeyProbe {
    conn: Connection,
}

impl KeyProbe {
    pub fn open(path: &Path) -> Result<KeyProbe, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_millis(100))?;
        Ok(KeyProbe { conn })
    }

    /// True where the key is in the inbox; false where it is not or the probe cannot tell.
    pub fn has(&self, sender: &str, recipient: &str, control_ref: &str) -> bool {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM inbox WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3",
            )
            .and_then(|mut s| s.exists([sender, recipient, control_ref]))
            .unwrap_or(false)
    }
}

/// What must be true of the file at `path` before SQLite may open it: SQLite writes a header
/// into any file of fewer than 512 bytes, and creates what is missing.
fn precheck(path: &Path, shown: &str, access: Access) -> Result<(), InboxError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match access {
                Access::Create => Ok(()),
                _ => Err(InboxError::Missing {
                    path: shown.to_string(),
                }),
            };
        }
        Err(e) => {
            return Err(InboxError::Io {
                path: shown.to_string(),
                source: e,
            });
        }
    };
    if meta.is_dir() {
        return Err(InboxError::IsAFolder {
            path: shown.to_string(),
        });
    }
    if meta.len() == 0 {
        // An empty file is a database not created yet: ingest creates it, nothing else reads it.
        return match access {
            Access::Create => Ok(()),
            _ => Err(InboxError::Missing {
                path: shown.to_string(),
            }),
        };
    }
    let mut header = [0u8; 16];
    let read =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header));
    if read.is_err() || meta.len() < 100 || &header != b"SQLite format 3\0" {
        if let Err(e) = read
            && e.kind() == std::io::ErrorKind::PermissionDenied
        {
            return Err(InboxError::Io {
                path: shown.to_string(),
                source: e,
            });
        }
        return Err(InboxError::NotAnInbox {
            path: shown.to_string(),
            reason: ": the file is not an SQLite database".into(),
        });
    }
    Ok(())
}

/// `(application_id, user_version, number of tables)`, or why the file is not an inbox.
fn identify_inbox(
    conn: &Connection,
    shown: &str,
    busy_timeout: Duration,
) -> Result<(i32, i64, i64), InboxError> {
    let (app_id, version, tables) = match retry_while_busy(busy_timeout, || identify(conn)) {
        Ok(found) => found,
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            return Err(InboxError::NotAnInbox {
                path: shown.to_string(),
                reason: ": the file is not an SQLite database".into(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let fresh = app_id == 0 && version == 0 && tables == 0;
    if !fresh && app_id != APPLICATION_ID {
        return Err(InboxError::NotAnInbox {
            path: shown.to_string(),
            reason: format!(
                " (SQLite application_id {app_id}, {tables} tables of another program)"
            ),
        });
    }
    if version as usize > MIGRATIONS.len() {
        return Err(InboxError::TooNew {
            path: shown.to_string(),
            found: version,
            known: MIGRATIONS.len(),
        });
    }
    Ok((app_id, version, tables))
}

/// True for the errors of a read-only connection that can neither open nor create a WAL
/// database's -shm file.
fn cannot_share_wal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// True where `PATH-wal` is missing or empty: every commit is in the database file.
fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(true, |m| m.len() == 0)
}

/// A `file:` URI for `path`, with the characters a URI gives a meaning escaped.
fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' | 0..=0x20 | 0x7F.. => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(*b as char),
        }
    }
    uri
}

/// Keeps the -wal and -shm files when the last connection closes. Without them a user who may
/// read the database but not write its folder cannot read it at all (SQLite would have to create
/// them); with them, such a user reads it like anyone else. The WAL is emptied at the end of each
/// run instead ([`Inbox::checkpoint_all`]).
fn persist_wal(conn: &Connection) {
    let mut on: std::os::raw::c_int = 1;
    // SAFETY: the handle is a live connection owned by `conn`; "main" is a NUL-terminated
    // schema name, and the file control reads and writes one int through the pointer.
    unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::os::raw::c_int).cast(),
        );
    }
}

/// Runs `f` again while the database answers "busy" or "locked", for up to the busy timeout.
fn retry_while_busy<T>(
    timeout: Duration,
    mut f: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let start = std::time::Instant::now();
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && start.elapsed() < timeout =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// `(application_id, user_version, number of tables)`.
fn identify(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
    // One statement, so one snapshot: another run may be creating the schema meanwhile.
    conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id),
                (SELECT user_version FROM pragma_user_version),
                (SELECT count(*) FROM sqlite_schema WHERE type = 'table')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edifact::interchanges;

    const ORDERS: &[u8] = b"UNB+UNOC:3+S:14+R:14+240101:1200+REF1'\
UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNZ+2+REF1'";

    /// A writer that always has the next transaction open, as an ingest does, never lets the
    /// WAL start over by itself. 400 commits of 32 KiB with a checkpointer beside: restarting
    /// between commits once the WAL holds 64 frames keeps it near that; without the restart it
    /// grows past 12 MB.
    #[test]
    fn restarts_keep_the_wal_bounded_under_a_busy_writer() {
        use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inbox.db");
        let inbox = Inbox::connect(&path, Duration::from_secs(30), Access::Create).unwrap();
        inbox.set_auto_checkpoint(false).unwrap();
        inbox
            .connection()
            .execute_batch("CREATE TABLE filler (b BLOB)")
            .unwrap();
        let checkpointer = Checkpointer::open(&path).unwrap();
        let (done, frames) = (&AtomicBool::new(false), &AtomicI64::new(0));
        let rounds = &AtomicI64::new(0);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let conn = inbox.connection();
                for n in 0..400 {
                    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                    conn.execute("INSERT INTO filler VALUES (zeroblob(16384))", [])
                        .unwrap();
                    // On a loaded machine the checkpointing thread may not run for a while (in
                    // the program it runs every 250 ms whatever the load); here the writer lets
                    // it catch up every eight commits, inside its transaction (as an ingest
                    // always has the next batch open), so the test measures the restarts, not
                    // the scheduler.
                    if n % 8 == 0 {
                        let seen = rounds.load(Ordering::SeqCst);
                        while rounds.load(Ordering::SeqCst) < seen + 2 {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    conn.execute("INSERT INTO filler VALUES (zeroblob(16384))", [])
                        .unwrap();
                    conn.execute_batch("COMMIT").unwrap();
                    if frames.load(Ordering::SeqCst) >= 64 {
                        inbox.restart_wal().unwrap();
                        frames.store(0, Ordering::SeqCst);
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
            while !done.load(Ordering::SeqCst) {
                frames.store(checkpointer.checkpoint().unwrap(), Ordering::SeqCst);
                rounds.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let wal = std::fs::metadata(dir.path().join("inbox.db-wal"))
            .unwrap()
            .len();
        assert!(wal < 4_000_000, "WAL of {wal} bytes");
    }

    fn count(inbox: &Inbox, table: &str) -> i64 {
        inbox
            .connection()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn new_then_duplicate_then_drift() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = Inbox::open(&dir.path().join("t.db")).unwrap();
        let i = interchanges(ORDERS).next().unwrap().unwrap();
        let b = &mut inbox;
        assert!(matches!(
            b.decide(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
                .unwrap(),
            Decision::New { .. }
        ));
        assert_eq!(
            b.decide(&i, None, "b.edi", "2026-01-01T00:00:01.000Z")
                .unwrap(),
            Decision::Duplicate
        );
        let changed = String::from_utf8_lossy(ORDERS).replace("PO1", "PO2");
        let j = interchanges(changed.as_bytes()).next().unwrap().unwrap();
        assert_eq!(
            b.decide(&j, None, "c.edi", "2026-01-01T00:00:02.000Z")
                .unwrap(),
            Decision::Drift {
                stored_sha256: i.sha256_hex()
            }
        );
        b.commit().unwrap();
        assert_eq!(count(&inbox, "inbox"), 1);
        assert_eq!(count(&inbox, "interchanges"), 1);
        assert_eq!(count(&inbox, "messages"), 2);
        assert_eq!(count(&inbox, "outbox"), 2);
        assert_eq!(count(&inbox, "sightings"), 2);
        let payload: Vec<u8> = inbox
            .connection()
            .query_row(
                "SELECT payload FROM sightings WHERE status = 'drift'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(payload, changed.as_bytes());
        let (start, end): (usize, usize) = inbox
            .connection()
            .query_row(
                "SELECT raw_start, raw_end FROM messages WHERE position = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            &ORDERS[start..end],
            b"UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'"
        );
    }

    #[test]
    fn an_uncommitted_batch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = Inbox::open(&dir.path().join("t.db")).unwrap();
        let i = interchanges(ORDERS).next().unwrap().unwrap();
        inbox
            .decide(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
            .unwrap();
        assert!(inbox.in_batch());
        inbox.rollback().unwrap();
        assert_eq!(count(&inbox, "inbox"), 0);
        assert_eq!(count(&inbox, "interchanges"), 0);
    }

    #[test]
    fn refuses_files_that_are_not_an_inbox() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("text.db");
        std::fs::write(
            &text,
            b"just some text, long enough to be a header of sorts......",
        )
        .unwrap();
        let before = std::fs::read(&text).unwrap();
        assert!(matches!(
            Inbox::open(&text),
            Err(InboxError::NotAnInbox { .. })
        ));
        assert_eq!(std::fs::read(&text).unwrap(), before);

        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        assert!(matches!(
            Inbox::open(&other),
            Err(InboxError::NotAnInbox { .. })
        ));

        let newer = dir.path().join("newer.db");
        drop(Inbox::open(&newer).unwrap());
        Connection::open(&newer)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(
            Inbox::open(&newer),
            Err(InboxError::TooNew { .. })
        ));
    }

    /// A database made before migration 3 kept a copy of the file per error; opened now, the
    /// copies become one record that the errors point at.
    #[test]
    fn rejected_bytes_are_migrated_to_one_record_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = Connection::open(&path).unwrap();
            for m in &MIGRATIONS[..3] {
                let Migration::Sql(sql) = m else {
                    unreachable!()
                };
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            for offset in [10, 20] {
                conn.execute(
                    "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
                         first_seen_at, last_seen_at, file_size, bytes, truncated)
                     VALUES ('a.edi', 'abc', 'bad', 'unt-count', ?1, '2026-01-01', '2026-01-02', 3,
                         x'414243', 0)",
                    [offset],
                )
                .unwrap();
            }
        }
        let inbox = Inbox::open(&path).unwrap();
        assert_eq!(count(&inbox, "rejected_files"), 1);
        let (bytes, first, last): (Vec<u8>, String, String) = inbox
            .connection()
            .query_row(
                "SELECT bytes, first_seen_at, last_seen_at FROM rejected_files",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (bytes.as_slice(), first.as_str(), last.as_str()),
            (&b"ABC"[..], "2026-01-01", "2026-01-02")
        );
        assert_eq!(
            count(
                &inbox,
                "rejections r JOIN rejected_files f ON f.id = r.file_id"
            ),
            2
        );
        assert!(
            inbox
                .connection()
                .prepare("SELECT bytes FROM rejections")
                .is_err(),
            "the per-error copies are gone"
        );
    }

    #[test]
    fn reopening_keeps_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        drop(Inbox::open(&path).unwrap());
        let inbox = Inbox::open(&path).unwrap();
        let version: i64 = inbox
            .connection()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        let mode: String = inbox
            .connection()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
}
