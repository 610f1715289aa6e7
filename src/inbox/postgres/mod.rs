//! The PostgreSQL inbox: one database that several ingest hosts share, so that an interchange
//! delivered to one host and redelivered to another is still applied once.
//!
//! A batch is decided set-based, in one READ COMMITTED transaction and a few statements
//! (`decisions.rs`): the keys, sorted, go in with `INSERT ... ON CONFLICT ON CONSTRAINT inbox_key DO
//! NOTHING`; a host that inserts a key another host holds uncommitted waits for it, then finds
//! the key taken and compares hashes, as SQLite does. No savepoint per interchange: past 64 open
//! subtransactions, every other connection to the server slows down. Times come from the
//! server's clock; ids from sequences. The inbox lives in a schema of its own (`edi_inbox` by
//! default), created on first use by migrations under an advisory lock.
//!
//! Each capability of the inbox is in the file of its name (`decisions.rs`, `transaction.rs` for
//! the batch's transaction, `acknowledgements.rs`, `positions.rs`, `transports.rs`,
//! `publishing.rs`, `reports.rs`, `retention.rs`); where the inbox is, `target.rs`; opening it,
//! `open.rs`; the schema, `migrations.rs` (and `migrations/`); the server's failures,
//! `error.rs`; TLS, `tls.rs`; the session and the statements it keeps prepared, `session.rs`. No SQL stands in this file.
//!
//! Where a new thing goes: what a new capability asks of the database, in the file of the
//! capability's name, and the same in `sqlite/`; a change of schema, a new migration at the end
//! of `migrations.rs`, never an edit of a released one; SQL that several files share, `sql.rs`.

#[macro_use]
mod sql;

mod acknowledgements;
mod copying;
mod decisions;
mod effects;
mod error;
mod migrations;
mod open;
mod positions;
mod publishing;
mod refusals;
mod reports;
mod retention;
mod session;
mod target;
mod tls;
mod transaction;
mod transports;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::BTreeMap;

pub use target::Target;

/// An open PostgreSQL inbox.
pub struct PgInbox {
    /// In a cell: the reports take `&self`, and a client queries through `&mut`.
    client: RefCell<session::Session>,
    target: Target,
    /// True while a batch's transaction is open.
    in_tx: bool,
    /// Counter increments of the open batch, added to this host's rows before it commits.
    pending_counts: BTreeMap<&'static str, i64>,
    /// Deliveries of the open batch, written as it commits, with the counters.
    pending_deliveries: decisions::PendingDeliveries,
    /// Open batches rolled back so far (see `Transaction::rollbacks`).
    rollbacks: u64,
    /// This host's name, for its own counter rows.
    host: String,
    /// The operator's side effects, where `--effects` installed them.
    effects: Option<std::sync::Arc<effects::Installed>>,
    /// True while the open transaction is the one `effects try` installed the side effects in
    /// (their migrations not committed): never rolled back to its start but by the caller.
    try_transaction: bool,
}

/// `text` as a PostgreSQL text column takes it: a reason quotes the input's bytes, and a NUL
/// among them would make the server refuse the row (22021) and with it the whole batch.
pub(super) fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        text.replace('\0', "\\x00").into()
    } else {
        text.into()
    }
}
