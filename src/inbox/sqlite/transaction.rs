//! The batch's transaction: `BEGIN IMMEDIATE`, a savepoint per decision with side effects (and
//! per rejection or acknowledgement recorded), committed with the counters and the id sequence
//! of the batch or rolled back whole; the run's checkpointing thread, told of each commit.

use std::sync::atomic::Ordering;

use rusqlite::Connection;

use super::SqliteInbox;
use crate::inbox::sqlite::reports::add_counter;
use crate::inbox::sqlite::wal::{Checkpointer, Checkpoints, WAL_RESTART_FRAMES};
use crate::inbox::{InboxError, Transaction};

impl Transaction for SqliteInbox {
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

    /// One fsync with `synchronous=FULL`, whatever the batch's size. Between batches, the WAL
    /// is restarted where the checkpointing thread found it grown.
    fn commit(&mut self) -> Result<(), InboxError> {
        if self.given_up {
            // What is open is a batch given up, never to be committed: it goes now, or the
            // commit fails.
            return self.rollback();
        }
        if self.in_batch() {
            for (name, by) in std::mem::take(&mut self.pending_counts) {
                add_counter(&self.conn, name, by)?;
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

    fn abandon(&mut self) {
        let _ = self.rollback();
    }

    /// The batches a decision that failed without side effects rolled back (see
    /// `SqliteInbox::decide_one`); a batch the caller abandons is not counted.
    fn rollbacks(&self) -> u64 {
        self.rollbacks
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
}

impl SqliteInbox {
    /// Starts a batch if none is open: one `BEGIN IMMEDIATE` transaction, so the write lock is
    /// taken (waiting up to the busy timeout for another run) before anything is read for a
    /// decision. A deferred transaction would fail at once when it upgrades to a writer.
    pub(super) fn begin(&mut self) -> Result<(), InboxError> {
        if self.given_up {
            self.rollback()?;
        }
        if !self.in_batch() {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
        }
        Ok(())
    }

    /// Runs `f` in a savepoint of the batch: on failure only its own writes are rolled back.
    pub(super) fn in_savepoint<T>(
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
            Err(e) => match self
                .conn
                .execute_batch("ROLLBACK TO decision; RELEASE decision")
            {
                Ok(()) => Err(e),
                Err(undo) => {
                    // The savepoint's writes would stay in the batch and be committed with
                    // it: the whole batch goes instead, and the caller sees the database
                    // fail, never a refusal it could go on after.
                    self.rollbacks += 1;
                    let _ = self.rollback();
                    Err(InboxError::Backend(
                        format!("{e}; undoing it in the batch failed ({undo}), so the whole batch was rolled back").into(),
                    ))
                }
            },
        }
    }

    /// True while a batch (an open transaction) holds decisions not yet committed.
    pub(super) fn in_batch(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// The connection, for this module's tests.
    #[cfg(test)]
    pub(super) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Drops every decision of the open batch (a run that fails drops the inbox instead, which
    /// rolls the batch back).
    ///
    /// Where the `ROLLBACK` fails, the batch is marked given up: the next `begin` or `commit`
    /// tries again, and fails rather than build on it or commit it.
    pub(super) fn rollback(&mut self) -> Result<(), InboxError> {
        self.pending_counts.clear();
        self.next_id = None;
        if self.in_batch() {
            self.given_up = true;
            self.conn.execute_batch("ROLLBACK")?;
        }
        self.given_up = false;
        Ok(())
    }
}
