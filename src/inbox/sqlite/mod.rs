//! The SQLite inbox: one database file, shared by the runs on one host.
//!
//! The decision for an interchange is one `INSERT ... ON CONFLICT DO NOTHING` on the inbox key,
//! inside a savepoint of the batch's `BEGIN IMMEDIATE` transaction, together with the business
//! rows it implies. A batch left open when the inbox is dropped (a failed run) is rolled back by
//! SQLite. Nothing outside this module knows it is SQLite (but for the walk, which passes over
//! the database's -wal, -shm and -journal files): its errors, write-ahead log,
//! checkpoints and ids stay here.

mod decide;
mod queries;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{
    Access, Candidate, ContrlEvent, Decision, DeliveryRecord, Event, EventFilter, Inbox,
    InboxError, KeyHistory, KeyProbe, NewAcknowledgement, Outbox, OutboxEvent, PurgeTarget,
    RejectedFile, Resend, Stats, StoredAcknowledgement,
};
use crate::edifact::EnvelopeError;

/// `PRAGMA application_id` of an edi-inbox database ("EDIx"), so that another program's SQLite
/// file is never mistaken for one.
pub const APPLICATION_ID: i32 = 0x4544_4978;

/// One step of the schema: SQL, or code where rows must be computed again.
enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> Result<(), InboxError>),
}

/// The schema, as an append-only list of migrations in `migrations/`: entry N takes
/// `user_version` from N to N+1.
const MIGRATIONS: &[Migration] = &[
    Migration::Sql(include_str!("migrations/0000_schema.sql")),
    Migration::Sql(include_str!("migrations/0001_counters.sql")),
    Migration::Sql(include_str!("migrations/0002_raw_codec.sql")),
    Migration::Sql(include_str!("migrations/0003_rejected_files.sql")),
    // 4: the hash takes the service characters in force where they are not the defaults.
    Migration::Code(decide::rehash),
    Migration::Sql(include_str!("migrations/0005_id_sequences.sql")),
    Migration::Sql(include_str!("migrations/0006_publish.sql")),
    Migration::Sql(include_str!("migrations/0007_deliveries.sql")),
    Migration::Sql(include_str!("migrations/0008_acknowledgements.sql")),
    Migration::Sql(include_str!("migrations/0009_contrl_outbox.sql")),
    Migration::Sql(include_str!("migrations/0010_contrl_sendings.sql")),
];

impl From<rusqlite::Error> for InboxError {
    /// "Busy" and "locked" (another process held the database past the busy timeout) are told
    /// apart from every other failure, so that the caller can say so without knowing SQLite.
    fn from(e: rusqlite::Error) -> InboxError {
        let busy = matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        if busy {
            InboxError::Busy(Box::new(e))
        } else {
            InboxError::Backend(Box::new(e))
        }
    }
}

/// An open SQLite inbox.
pub struct SqliteInbox {
    conn: Connection,
    path: PathBuf,
    busy_timeout: Duration,
    /// Counter increments of the open batch, written just before it commits.
    pending_counts: BTreeMap<&'static str, i64>,
    /// The id the next new interchange gets, read from `id_sequences` once a batch and written
    /// back before it commits (the write lock keeps it to this run meanwhile).
    next_id: Option<i64>,
    /// The checkpointing thread of a run, where one is started.
    checkpoints: Option<Checkpoints>,
    /// The publisher's lock file, locked, where this run publishes.
    publisher_lock: Option<std::fs::File>,
}

impl SqliteInbox {
    fn new(conn: Connection, path: &Path, busy_timeout: Duration) -> SqliteInbox {
        SqliteInbox {
            conn,
            path: path.to_path_buf(),
            busy_timeout,
            pending_counts: BTreeMap::new(),
            next_id: None,
            checkpoints: None,
            publisher_lock: None,
        }
    }

    /// Opens the database at `path`, waiting up to `busy_timeout` for another run's lock.
    ///
    /// A file that is not an SQLite database (checked by its header before SQLite sees it, so
    /// that not even a one-byte file is written to), or another program's, or one written by a
    /// newer edi-inbox, is an error and is left untouched. An up-to-date database is not written
    /// to; with [`Access::Read`] none is, nor created.
    pub(super) fn connect(
        path: &Path,
        busy_timeout: Duration,
        access: Access,
    ) -> Result<SqliteInbox, InboxError> {
        let shown = path.display().to_string();
        precheck(path, &shown, access)?;
        if access == Access::Read {
            return SqliteInbox::connect_read_only(path, &shown, busy_timeout);
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
        let mut inbox = SqliteInbox::new(conn, path, busy_timeout);
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
    ) -> Result<SqliteInbox, InboxError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(busy_timeout)?;
        let found = match identify_inbox(&conn, shown, busy_timeout) {
            Err(e) if cannot_share_wal(&e) && wal_is_empty(path) => {
                // A WAL database read by a user who can create neither its -shm nor its -wal
                // (a folder they may not write), with no -wal there or an empty one: every
                // commit is in the database file, which is then read as it stands.
                drop(conn);
                return SqliteInbox::connect_immutable(path, shown, busy_timeout);
            }
            other => other?,
        };
        SqliteInbox::read_only(conn, path, shown, busy_timeout, found)
    }

    fn connect_immutable(
        path: &Path,
        shown: &str,
        busy_timeout: Duration,
    ) -> Result<SqliteInbox, InboxError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(format!("{}?immutable=1", file_uri(path)), flags)?;
        let found = identify_inbox(&conn, shown, busy_timeout)?;
        SqliteInbox::read_only(conn, path, shown, busy_timeout, found)
    }

    fn read_only(
        conn: Connection,
        path: &Path,
        shown: &str,
        busy_timeout: Duration,
        (app_id, version, tables): (i32, i64, i64),
    ) -> Result<SqliteInbox, InboxError> {
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
        Ok(SqliteInbox::new(conn, path, busy_timeout))
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

    /// True while a batch (an open transaction) holds decisions not yet committed.
    fn in_batch(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// One interchange, in a savepoint of the batch: the key insert decides, and a new key's
    /// business rows go with it or not at all.
    fn decide_one(&mut self, c: &Candidate<'_>) -> Result<Decision, InboxError> {
        self.begin()?;
        let id = self.next_id()?;
        let d = self.in_savepoint(|conn| {
            decide::decide(
                conn,
                id,
                c.interchange,
                c.compressed,
                c.source_file,
                c.received_at,
            )
        })?;
        let name = match d {
            Decision::New { .. } => {
                self.next_id = Some(id + 1);
                "ingest_new"
            }
            Decision::Duplicate => "ingest_duplicate",
            Decision::Drift { .. } => "ingest_drift",
            Decision::Refused { .. } => "ingest_rejected",
        };
        *self.pending_counts.entry(name).or_default() += 1;
        Ok(d)
    }

    /// The id the next new interchange gets: the sequence's, read once a batch.
    fn next_id(&mut self) -> Result<i64, InboxError> {
        if let Some(id) = self.next_id {
            return Ok(id);
        }
        let id = self.conn.query_row(
            "SELECT next FROM id_sequences WHERE name = 'interchanges'",
            [],
            |r| r.get(0),
        )?;
        self.next_id = Some(id);
        Ok(id)
    }

    /// Turns SQLite's own checkpoints at commit on (the default) or off, while a
    /// [`Checkpointer`] does them instead.
    fn set_auto_checkpoint(&self, on: bool) -> Result<(), InboxError> {
        let pages = if on { DEFAULT_AUTOCHECKPOINT_PAGES } else { 0 };
        self.conn
            .pragma_update_and_check(None, "wal_autocheckpoint", pages, |_| Ok(()))?;
        Ok(())
    }

    /// Copies everything in the WAL into the database file and empties it (a TRUNCATE
    /// checkpoint), so that the database file alone holds every commit (a plain
    /// `cp inbox.db backup/` then copies all of it). Waits a little for another process's
    /// transaction, no more: a run that overlaps another leaves the rest to that one. Returns
    /// whether the WAL is empty.
    fn checkpoint_all(&self) -> Result<bool, InboxError> {
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
    fn restart_wal(&self) -> Result<(), InboxError> {
        self.conn.busy_timeout(Duration::ZERO)?;
        let restarted = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        self.conn.busy_timeout(self.busy_timeout)?;
        Ok(restarted?)
    }

    /// The connection, for this module's tests.
    #[cfg(test)]
    fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Drops every decision of the open batch (a run that fails drops the inbox instead, which
    /// rolls the batch back).
    #[cfg(test)]
    fn rollback(&mut self) -> Result<(), InboxError> {
        self.pending_counts.clear();
        self.next_id = None;
        if self.in_batch() {
            self.conn.execute_batch("ROLLBACK")?;
        }
        Ok(())
    }
}

impl Inbox for SqliteInbox {
    fn decide(&mut self, batch: &[Candidate<'_>]) -> Result<Vec<Decision>, InboxError> {
        let mut decisions = Vec::with_capacity(batch.len());
        for c in batch {
            decisions.push(self.decide_one(c)?);
            crash_point!("mid-batch");
        }
        Ok(decisions)
    }

    /// Each file as it comes: a decision here is a few calls into a library in this process,
    /// and deciding meanwhile keeps the reading threads busy (deciding whole batches at the end
    /// was 14% slower, or took four times the memory with longer queues).
    fn decides_whole_batches(&self) -> bool {
        false
    }

    fn rejected_file(
        &mut self,
        source_file: &str,
        bytes: &[u8],
        sha256: &str,
        seen_at: &str,
    ) -> Result<RejectedFile, InboxError> {
        let id = self.in_savepoint(|c| {
            decide::record_rejected_file(c, source_file, bytes, sha256, seen_at)
        })?;
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
        seen_at: &str,
    ) -> Result<(), InboxError> {
        self.in_savepoint(|c| decide::record_rejection(c, file, source_file, error, seen_at))?;
        *self.pending_counts.entry("ingest_rejected").or_default() += 1;
        Ok(())
    }

    fn record_deliveries(
        &mut self,
        deliveries: &[DeliveryRecord<'_>],
        seen_at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.in_savepoint(|c| decide::record_deliveries(c, deliveries, seen_at))?;
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
        self.in_savepoint(|c| decide::record_acknowledgement(c, ack))
    }

    fn resend_acknowledgement(
        &mut self,
        key: (&str, &str, &str),
        sending: Option<&str>,
        created_at: &str,
    ) -> Result<Resend, InboxError> {
        self.begin()?;
        self.in_savepoint(|c| decide::resend_acknowledgement(c, key, sending, created_at))
    }

    fn pending_contrl(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
    ) -> Result<Vec<ContrlEvent>, InboxError> {
        queries::pending_contrl(&self.conn, pass, retry_after.as_secs() as i64, limit)
    }

    fn acknowledgements(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<Vec<StoredAcknowledgement>, InboxError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT own_ref, action, error_code, created_at, bytes FROM acknowledgements
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 ORDER BY id",
        )?;
        let rows = stmt
            .query_map([sender, recipient, control_ref], |r| {
                Ok(StoredAcknowledgement {
                    own_ref: r.get(0)?,
                    action: r.get(1)?,
                    error_code: r.get(2)?,
                    created_at: r.get(3)?,
                    bytes: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// One fsync with `synchronous=FULL`, whatever the batch's size. Between batches, the WAL
    /// is restarted where the checkpointing thread found it grown.
    fn commit(&mut self) -> Result<(), InboxError> {
        if self.in_batch() {
            for (name, by) in std::mem::take(&mut self.pending_counts) {
                queries::add_counter(&self.conn, name, by)?;
            }
            if let Some(next) = self.next_id.take() {
                self.conn.execute(
                    "UPDATE id_sequences SET next = ?1 WHERE name = 'interchanges'",
                    [next],
                )?;
            }
            crash_point!("before-commit");
            self.conn.execute_batch("COMMIT")?;
            crash_point!("after-commit");
        }
        if let Some(c) = &self.checkpoints {
            c.committed.store(true, Ordering::Relaxed);
            if c.wal_frames.load(Ordering::Relaxed) >= WAL_RESTART_FRAMES {
                c.wal_frames.store(0, Ordering::Relaxed);
                // Like the checkpointer's, a failed restart loses nothing; a real problem with
                // the database shows at the next commit.
                let _ = self.restart_wal();
            }
        }
        Ok(())
    }

    /// Starts the checkpointing thread (see [`Checkpointer`]); where its connection cannot be
    /// had, SQLite's own checkpoints at commit stay on.
    fn start_run(&mut self) {
        if self.checkpoints.is_some() {
            return;
        }
        let Ok(checkpointer) = Checkpointer::open(&self.path) else {
            return;
        };
        if self.set_auto_checkpoint(false).is_err() {
            return;
        }
        self.checkpoints = Some(Checkpoints::start(checkpointer));
    }

    /// The checkpointing thread is not waited for: a checkpoint may be copying another
    /// process's writes (a purge's, say), and an interrupted checkpoint is safe by SQLite's
    /// design. SQLite's own checkpoints come back on, then the WAL is emptied into the file.
    fn end_run(&mut self) {
        if self.checkpoints.take().is_some() {
            let _ = self.set_auto_checkpoint(true);
        }
        let _ = self.checkpoint_all();
    }

    fn probe(&self) -> Option<Box<dyn KeyProbe + Send>> {
        SqliteProbe::open(&self.path)
            .ok()
            .map(|p| Box::new(p) as Box<dyn KeyProbe + Send>)
    }

    fn stats(&self) -> Result<Stats, InboxError> {
        queries::stats(&self.conn)
    }

    /// The database file and its write-ahead log.
    fn size_bytes(&self) -> u64 {
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        [self.path.clone(), wal.into()]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError> {
        queries::events(&self.conn, filter)
    }

    fn key_history(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<KeyHistory, InboxError> {
        queries::key_history(&self.conn, sender, recipient, control_ref)
    }

    fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError> {
        queries::count_older(&self.conn, target, cutoff)
    }

    fn purge_step(
        &mut self,
        target: PurgeTarget,
        cutoff: &str,
        limit: u32,
    ) -> Result<usize, InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = queries::delete_older(&tx, target, cutoff, limit)?;
        if target == PurgeTarget::Inbox && n > 0 {
            queries::add_counter(&tx, "purge_entries", n as i64)?;
        }
        tx.commit()?;
        Ok(n)
    }

    fn oldest_entry(&self) -> Result<Option<String>, InboxError> {
        queries::oldest_entry(&self.conn)
    }

    fn counter(&self, name: &str) -> Result<i64, InboxError> {
        queries::counter(&self.conn, name)
    }

    /// An exclusive `flock` on `DB-publish.lock` beside the database: never a lock on the
    /// database file itself, whose descriptors SQLite's own (POSIX) locks depend on.
    fn lock_publisher(&mut self) -> Result<bool, InboxError> {
        use rustix::fs::{FlockOperation, flock};
        let mut name = self.path.as_os_str().to_owned();
        name.push("-publish.lock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| InboxError::Io {
                path: path.display().to_string(),
                source,
            })?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                self.publisher_lock = Some(file);
                Ok(true)
            }
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(e) => Err(InboxError::Io {
                path: path.display().to_string(),
                source: e.into(),
            }),
        }
    }

    fn pending_events(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
        whole: bool,
    ) -> Result<Vec<OutboxEvent>, InboxError> {
        queries::pending_events(&self.conn, pass, retry_after.as_secs() as i64, limit, whole)
    }

    fn interchange_bytes(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError> {
        queries::interchange_bytes(&self.conn, ids)
    }

    fn mark_published(&mut self, outbox: Outbox, rows: &[i64]) -> Result<(), InboxError> {
        let now = crate::clock::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = queries::mark_published(&tx, outbox, rows, &now)?;
        queries::add_counter(&tx, "publish_published", n as i64)?;
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
        let now = crate::clock::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut parked = 0;
        {
            let mut mark = tx.prepare_cached(&format!(
                "UPDATE {} SET attempts = attempts + 1, last_error = ?1,
                        last_attempt_at = ?2, last_attempt_pass = ?3,
                        failed_at = CASE WHEN attempts + 1 >= ?4 THEN ?2 END
                 WHERE id = ?5 AND published_at IS NULL
                 RETURNING failed_at IS NOT NULL",
                outbox.table()
            ))?;
            for row in rows {
                let now_parked: Option<bool> = mark
                    .query_row(
                        rusqlite::params![error, now, pass, max_attempts, row],
                        |r| r.get(0),
                    )
                    .optional()?;
                parked += usize::from(now_parked == Some(true));
            }
        }
        queries::add_counter(&tx, "publish_failed", rows.len() as i64)?;
        queries::add_counter(&tx, "publish_parked", parked as i64)?;
        tx.commit()?;
        Ok(parked)
    }
}

/// SQLite's default `wal_autocheckpoint`.
const DEFAULT_AUTOCHECKPOINT_PAGES: i64 = 1000;

/// How often the checkpointing thread copies the WAL into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// 64 MiB of 4 KiB pages. Without restarts, an ingest of 310 MB left a 115 MB WAL.
const WAL_RESTART_FRAMES: i64 = 16 * 1024;

/// Copies committed pages from the WAL into the database file from a connection of its own, so
/// that the deciding connection does not stop for it: with automatic checkpoints, the deciding
/// thread spent a quarter of an ingest in the checkpoints' writes and fsyncs (70 of its 86
/// fsyncs on 20,000 files), waiting while the reading threads had nothing to hand it.
///
/// The WAL only starts over from its beginning when a write begins after every frame in it was
/// copied, which a writer that always has the next batch open never allows; so the deciding
/// connection restarts it itself between two batches once it holds [`WAL_RESTART_FRAMES`]
/// ([`SqliteInbox::restart_wal`]), which costs little since this has copied nearly all of it
/// by then.
struct Checkpointer {
    conn: Connection,
}

impl Checkpointer {
    fn open(path: &Path) -> Result<Checkpointer, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(Checkpointer { conn })
    }

    /// Checkpoints what is committed without waiting for anyone (PASSIVE); returns the number of
    /// frames in the WAL.
    fn checkpoint(&self) -> Result<i64, InboxError> {
        Ok(self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?)
    }
}

/// A run's checkpointing thread, stopped when this is dropped.
struct Checkpoints {
    wal_frames: Arc<AtomicI64>,
    committed: Arc<AtomicBool>,
    /// Dropped to stop the thread.
    _stop: Sender<()>,
}

impl Checkpoints {
    /// The thread checkpoints every [`CHECKPOINT_EVERY`], once the run has committed a batch of
    /// its own: before that, whatever is in the WAL is another process's, and copying it only
    /// slows that process down while this run waits for it (a single-file run during a large
    /// purge took up to 1.25 s instead of 0.44 s).
    fn start(checkpointer: Checkpointer) -> Checkpoints {
        let wal_frames = Arc::new(AtomicI64::new(0));
        let committed = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (frames, done) = (Arc::clone(&wal_frames), Arc::clone(&committed));
        std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                if !done.load(Ordering::Relaxed) {
                    continue;
                }
                // A failed checkpoint loses nothing: the pages stay in the WAL for the next.
                if let Ok(n) = checkpointer.checkpoint() {
                    frames.store(n, Ordering::Relaxed);
                }
            }
        });
        Checkpoints {
            wal_frames,
            committed,
            _stop: stop,
        }
    }
}

/// A read-only connection of a reading thread, for [`Inbox::probe`].
struct SqliteProbe {
    conn: Connection,
}

impl SqliteProbe {
    fn open(path: &Path) -> Result<SqliteProbe, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_millis(100))?;
        Ok(SqliteProbe { conn })
    }
}

impl KeyProbe for SqliteProbe {
    fn has(&self, sender: &str, recipient: &str, control_ref: &str) -> bool {
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
fn cannot_share_wal(e: &InboxError) -> bool {
    let InboxError::Backend(e) = e else {
        return false;
    };
    matches!(
        e.downcast_ref::<rusqlite::Error>()
            .and_then(rusqlite::Error::sqlite_error_code),
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
/// run instead (`end_run`, by [`SqliteInbox::checkpoint_all`]).
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

    impl SqliteInbox {
        /// A batch of one.
        fn decide_single(
            &mut self,
            interchange: &crate::edifact::Interchange<'_>,
            compressed: Option<&[u8]>,
            source_file: &str,
            received_at: &str,
        ) -> Result<Decision, InboxError> {
            let c = Candidate {
                interchange,
                compressed,
                source_file,
                received_at,
            };
            Ok(self.decide(&[c])?.remove(0))
        }
    }

    fn open(path: &Path) -> Result<SqliteInbox, InboxError> {
        SqliteInbox::connect(path, Duration::from_secs(60), Access::Create)
    }
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
        let inbox = SqliteInbox::connect(&path, Duration::from_secs(30), Access::Create).unwrap();
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

    fn count(inbox: &SqliteInbox, table: &str) -> i64 {
        inbox
            .connection()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn new_then_duplicate_then_drift() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = open(&dir.path().join("t.db")).unwrap();
        let i = interchanges(ORDERS).next().unwrap().unwrap();
        let b = &mut inbox;
        assert!(matches!(
            b.decide_single(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
                .unwrap(),
            Decision::New { .. }
        ));
        assert_eq!(
            b.decide_single(&i, None, "b.edi", "2026-01-01T00:00:01.000Z")
                .unwrap(),
            Decision::Duplicate
        );
        let changed = String::from_utf8_lossy(ORDERS).replace("PO1", "PO2");
        let j = interchanges(changed.as_bytes()).next().unwrap().unwrap();
        assert_eq!(
            b.decide_single(&j, None, "c.edi", "2026-01-01T00:00:02.000Z")
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
        let mut inbox = open(&dir.path().join("t.db")).unwrap();
        let i = interchanges(ORDERS).next().unwrap().unwrap();
        inbox
            .decide_single(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
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
        assert!(matches!(open(&text), Err(InboxError::NotAnInbox { .. })));
        assert_eq!(std::fs::read(&text).unwrap(), before);

        let other = dir.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        assert!(matches!(open(&other), Err(InboxError::NotAnInbox { .. })));

        let newer = dir.path().join("newer.db");
        drop(open(&newer).unwrap());
        Connection::open(&newer)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(open(&newer), Err(InboxError::TooNew { .. })));
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
        let inbox = open(&path).unwrap();
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

    /// Interchange ids come from the sequence, which an older database gets from the ids it
    /// holds; ids of a rolled-back batch are simply not used.
    #[test]
    fn ids_come_from_the_sequence_and_continue_after_an_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut inbox = open(&path).unwrap();
        let first = interchanges(ORDERS).next().unwrap().unwrap();
        let new = |d| matches!(d, Decision::New { interchange_id } if interchange_id > 0);
        assert!(new(inbox
            .decide_single(&first, None, "a", "2026-01-01T00:00:00.000Z")
            .unwrap()));
        inbox.commit().unwrap();
        inbox
            .connection()
            .execute_batch(
                "DROP TABLE id_sequences; DROP TABLE deliveries;
                 DROP TABLE contrl_outbox; DROP TABLE acknowledgements; DROP TABLE contrl_counters;
                 DROP INDEX outbox_failed; DROP INDEX outbox_unpublished;
                 DROP INDEX outbox_message;
                 ALTER TABLE outbox DROP COLUMN attempts;
                 ALTER TABLE outbox DROP COLUMN last_error;
                 ALTER TABLE outbox DROP COLUMN last_attempt_at;
                 ALTER TABLE outbox DROP COLUMN last_attempt_pass;
                 ALTER TABLE outbox DROP COLUMN failed_at;
                 CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
                 PRAGMA user_version = 5;",
            )
            .unwrap();
        drop(inbox);
        let mut inbox = open(&path).unwrap();
        let again = String::from_utf8_lossy(ORDERS).replace("REF1", "REF2");
        let second = interchanges(again.as_bytes()).next().unwrap().unwrap();
        assert_eq!(
            inbox
                .decide_single(&second, None, "b", "2026-01-01T00:00:01.000Z")
                .unwrap(),
            Decision::New { interchange_id: 2 }
        );
        inbox.rollback().unwrap();
        let third = String::from_utf8_lossy(ORDERS).replace("REF1", "REF3");
        let third = interchanges(third.as_bytes()).next().unwrap().unwrap();
        assert_eq!(
            inbox
                .decide_single(&third, None, "c", "2026-01-01T00:00:02.000Z")
                .unwrap(),
            Decision::New { interchange_id: 2 }
        );
        inbox.commit().unwrap();
        let next: i64 = inbox
            .connection()
            .query_row("SELECT next FROM id_sequences", [], |r| r.get(0))
            .unwrap();
        assert_eq!(next, 3);
    }

    #[test]
    fn reopening_keeps_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        drop(open(&path).unwrap());
        let inbox = open(&path).unwrap();
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
