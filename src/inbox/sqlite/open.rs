//! Opening the database: checked before SQLite may write a byte (is it an inbox, of this
//! version), then connected for writing, for reading, or read-only from a copy.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::SqliteInbox;
use crate::inbox::sqlite::migrations::MIGRATIONS;
use crate::inbox::sqlite::wal::cannot_share_wal;
use crate::inbox::sqlite::wal::persist_wal;
use crate::inbox::sqlite::wal::wal_is_empty;
use crate::inbox::{Access, InboxError};

impl SqliteInbox {
    pub(super) fn new(conn: Connection, path: &Path, busy_timeout: Duration) -> SqliteInbox {
        SqliteInbox {
            conn,
            path: path.to_path_buf(),
            busy_timeout,
            pending_counts: BTreeMap::new(),
            next_id: None,
            checkpoints: None,
            publisher_lock: None,
            effects: None,
            host: crate::inbox::host_name(),
            rollbacks: 0,
            given_up: false,
        }
    }

    /// Opens the database at `path`, waiting up to `busy_timeout` for another run's lock.
    ///
    /// A file that is not an SQLite database (checked by its header before SQLite sees it, so
    /// that not even a one-byte file is written to), or another program's, or one written by a
    /// newer edi-inbox, is an error and is left untouched. An up-to-date database is not written
    /// to; with [`Access::Read`] none is, nor created.
    pub(crate) fn connect(
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
        // The savepoint of a decision with side effects journals the pages it changes, as a
        // statement of several rows does; in memory, not in a temporary file (measured: 8% of
        // an ingest when every decision had a savepoint).
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
    pub(super) fn connect_read_only(
        path: &Path,
        shown: &str,
        busy_timeout: Duration,
    ) -> Result<SqliteInbox, InboxError> {
        // A database with neither -wal nor -shm beside it (a copy, a backup restored, one an
        // older edi-inbox closed) has every commit in its file: read as it stands, so that a
        // report creates nothing beside it. Every run of ingest keeps both files (persist_wal),
        // so a live inbox never takes this way.
        if !companion(path, "-wal").exists() && !companion(path, "-shm").exists() {
            return SqliteInbox::connect_immutable(path, shown, busy_timeout);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(busy_timeout)?;
        let found = match identify_or_why(&conn, shown, busy_timeout) {
            Err(Unidentified::Sqlite(e)) if cannot_share_wal(&e) && wal_is_empty(path) => {
                // A WAL database read by a user who can create neither its -shm nor its -wal
                // (a folder they may not write), with no -wal there or an empty one: every
                // commit is in the database file, which is then read as it stands.
                drop(conn);
                return SqliteInbox::connect_immutable(path, shown, busy_timeout);
            }
            other => other.map_err(InboxError::from)?,
        };
        SqliteInbox::read_only(conn, path, shown, busy_timeout, found)
    }

    pub(super) fn connect_immutable(
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

    pub(super) fn read_only(
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
}

/// `PRAGMA application_id` of an edi-inbox database ("EDIx"), so that another program's SQLite
/// file is never mistaken for one.
pub const APPLICATION_ID: i32 = 0x4544_4978;

/// A database to be created at `path`: its folder must exist and be writable, each said in
/// words (SQLite says "unable to open database file: Error code 14" of either). The file is
/// made here, empty, which SQLite takes for a database not created yet.
fn creatable(path: &Path, shown: &str) -> Result<(), InboxError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let reason = match std::fs::metadata(folder) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some(format!(
            "{} is not a folder: the database {shown} cannot be made in it",
            folder.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "the folder {} does not exist: ingest creates the database {shown}, not its folder; create the folder, or name a path in one that exists",
            folder.display()
        )),
        Err(e) => Some(format!(
            "the folder {} cannot be read: {e}",
            folder.display()
        )),
    };
    if let Some(reason) = reason {
        return Err(InboxError::BadLocation { reason });
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        // Made now, or by another run creating the same database at once.
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(InboxError::BadLocation {
                reason: format!(
                    "the database {shown} cannot be created: this user may not write in the folder {} ({e})",
                    folder.display()
                ),
            })
        }
        Err(e) => Err(InboxError::Io {
            path: shown.to_string(),
            source: e,
        }),
    }
}

/// What must be true of the file at `path` before SQLite may open it: SQLite writes a header
/// into any file of fewer than 512 bytes, and creates what is missing.
pub(super) fn precheck(path: &Path, shown: &str, access: Access) -> Result<(), InboxError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match access {
                Access::Create => creatable(path, shown),
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
pub(super) fn identify_inbox(
    conn: &Connection,
    shown: &str,
    busy_timeout: Duration,
) -> Result<(i32, i64, i64), InboxError> {
    identify_or_why(conn, shown, busy_timeout).map_err(InboxError::from)
}

/// Why a database could not be identified: SQLite's own error, kept as it is so that the
/// caller may tell one kind from another (no downcasting), or the inbox's verdict.
pub(super) enum Unidentified {
    Sqlite(rusqlite::Error),
    Inbox(InboxError),
}

impl From<Unidentified> for InboxError {
    fn from(e: Unidentified) -> InboxError {
        match e {
            Unidentified::Sqlite(e) => e.into(),
            Unidentified::Inbox(e) => e,
        }
    }
}

/// [`identify_inbox`], with SQLite's error as it is.
pub(super) fn identify_or_why(
    conn: &Connection,
    shown: &str,
    busy_timeout: Duration,
) -> Result<(i32, i64, i64), Unidentified> {
    let (app_id, version, tables) = match retry_while_busy(busy_timeout, || identify(conn)) {
        Ok(found) => found,
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::NotADatabase =>
        {
            return Err(Unidentified::Inbox(InboxError::NotAnInbox {
                path: shown.to_string(),
                reason: ": the file is not an SQLite database".into(),
            }));
        }
        Err(e) => return Err(Unidentified::Sqlite(e)),
    };
    let fresh = app_id == 0 && version == 0 && tables == 0;
    if !fresh && app_id != APPLICATION_ID {
        return Err(Unidentified::Inbox(InboxError::NotAnInbox {
            path: shown.to_string(),
            reason: format!(
                " (SQLite application_id {app_id}, {tables} tables of another program)"
            ),
        }));
    }
    if version as usize > MIGRATIONS.len() {
        return Err(Unidentified::Inbox(InboxError::TooNew {
            path: shown.to_string(),
            found: version,
            known: MIGRATIONS.len(),
        }));
    }
    Ok((app_id, version, tables))
}

/// A `file:` URI for `path`, with the characters a URI gives a meaning escaped.
pub(super) fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' | 0..=0x20 | 0x7F.. => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(*b as char),
        }
    }
    uri
}

/// Runs `f` again while the database answers "busy" or "locked", for up to the busy timeout.
pub(super) fn retry_while_busy<T>(
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
pub(super) fn identify(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
    // One statement, so one snapshot: another run may be creating the schema meanwhile.
    conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id),
                (SELECT user_version FROM pragma_user_version),
                (SELECT count(*) FROM sqlite_schema WHERE type = 'table')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// The file SQLite keeps beside the database under `suffix` (`-wal`, `-shm`).
fn companion(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}
