//! The SQLite inbox: one database file, shared by the runs on one host.
//!
//! The decision for an interchange is one `INSERT ... ON CONFLICT DO NOTHING` on the inbox key,
//! inside the batch's `BEGIN IMMEDIATE` transaction (and a savepoint of it where the operator's
//! side effects run), together with the business rows it implies. A batch left open when the
//! inbox is dropped (a failed run) is rolled back by SQLite. Nothing outside this module knows
//! it is SQLite (but for the walk, which passes over the database's -wal, -shm and -journal
//! files): its errors, write-ahead log, checkpoints and ids stay here.
//!
//! Each capability of the inbox is in the file of its name (`decisions.rs`, `transaction.rs` for
//! the batch's transaction, `acknowledgements.rs`, `positions.rs`, `transports.rs`,
//! `publishing.rs`, `reports.rs`, `retention.rs`); opening the database is `open.rs`, the schema
//! `migrations.rs` (and `migrations/`), the write-ahead log and its checkpoints `wal.rs`;
//! SQLite's failures told apart, `error.rs`. No SQL stands in this file.
//!
//! Where a new thing goes: what a new capability asks of the database, in the file of the
//! capability's name, and the same in `postgres/`; a change of schema, a new migration at the end
//! of `migrations.rs`, never an edit of a released one.

mod acknowledgements;
mod copying;
mod decisions;
mod effects;
mod error;
mod message_segments;
mod migrations;
mod open;
mod positions;
mod publishing;
mod refusals;
mod reports;
mod retention;
mod transaction;
mod transports;
mod wal;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use rusqlite::Connection;

use crate::inbox::sqlite::wal::Checkpoints;

pub use open::APPLICATION_ID;
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
    /// The operator's side effects, where `--effects` installed them.
    effects: Option<std::sync::Arc<effects::Installed>>,
    /// This machine's name, recorded with each sighting it decides.
    host: String,
    /// Batches it rolled back itself, on a decision that failed ([`Transaction::rollbacks`]).
    ///
    /// [`Transaction::rollbacks`]: crate::inbox::Transaction::rollbacks
    rollbacks: u64,
    /// A batch was given up but its `ROLLBACK` failed, so the transaction may still hold part
    /// of it: until a `ROLLBACK` succeeds, nothing may begin or commit on top of it.
    given_up: bool,
}
