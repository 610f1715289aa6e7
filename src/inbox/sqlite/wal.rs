//! The write-ahead log: checkpointed by a thread of its own while a run writes, restarted
//! before it grows without bound, and folded into the database file when a run ends.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::SqliteInbox;
use crate::inbox::InboxError;

/// SQLite's default `wal_autocheckpoint`.
pub(super) const DEFAULT_AUTOCHECKPOINT_PAGES: i64 = 1000;

/// How often the checkpointing thread copies the WAL into the database file.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// 64 MiB of 4 KiB pages. Without restarts, an ingest of 310 MB left a 115 MB WAL.
pub(super) const WAL_RESTART_FRAMES: i64 = 16 * 1024;

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
pub(super) struct Checkpointer {
    pub(super) conn: Connection,
}

impl Checkpointer {
    pub(super) fn open(path: &Path) -> Result<Checkpointer, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(Checkpointer { conn })
    }

    /// Checkpoints what is committed without waiting for anyone (PASSIVE); returns the number of
    /// frames in the WAL.
    pub(super) fn checkpoint(&self) -> Result<i64, InboxError> {
        Ok(self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?)
    }
}

/// A run's checkpointing thread, stopped when this is dropped.
pub(super) struct Checkpoints {
    pub(super) wal_frames: Arc<AtomicI64>,
    pub(super) committed: Arc<AtomicBool>,
    /// Dropped to stop the thread.
    pub(super) _stop: Sender<()>,
}

impl Checkpoints {
    /// The thread checkpoints every [`CHECKPOINT_EVERY`], once the run has committed a batch of
    /// its own: before that, whatever is in the WAL is another process's, and copying it only
    /// slows that process down while this run waits for it (a single-file run during a large
    /// purge took up to 1.25 s instead of 0.44 s).
    pub(super) fn start(checkpointer: Checkpointer) -> Checkpoints {
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

impl SqliteInbox {
    /// Turns SQLite's own checkpoints at commit on (the default) or off, while a
    /// [`Checkpointer`] does them instead.
    pub(super) fn set_auto_checkpoint(&self, on: bool) -> Result<(), InboxError> {
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
    pub(super) fn checkpoint_all(&self) -> Result<bool, InboxError> {
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
    pub(super) fn restart_wal(&self) -> Result<(), InboxError> {
        self.conn.busy_timeout(Duration::ZERO)?;
        let restarted = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        self.conn.busy_timeout(self.busy_timeout)?;
        Ok(restarted?)
    }
}

/// True for the errors of a read-only connection that can neither open nor create a WAL
/// database's -shm file.
pub(super) fn cannot_share_wal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// True where `PATH-wal` is missing or empty: every commit is in the database file.
pub(super) fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(true, |m| m.len() == 0)
}

/// Keeps the -wal and -shm files when the last connection closes. Without them a user who may
/// read the database but not write its folder cannot read it at all (SQLite would have to create
/// them); with them, such a user reads it like anyone else. The WAL is emptied at the end of each
/// run instead (`end_run`, by [`SqliteInbox::checkpoint_all`]).
pub(super) fn persist_wal(conn: &Connection) {
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
