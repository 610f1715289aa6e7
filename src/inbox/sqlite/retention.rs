//! The duplicate-detection window: what `purge` counts and deletes, in short batches.

use rusqlite::{Connection, TransactionBehavior, params};

use super::SqliteInbox;
use crate::inbox::names::Counter;
use crate::inbox::sqlite::reports::add_counter;
use crate::inbox::{InboxError, PurgeTarget, Retention};

impl Retention for SqliteInbox {
    fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError> {
        count_older(&self.conn, target, cutoff)
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
        let n = delete_older(&tx, target, cutoff, limit)?;
        if target == PurgeTarget::Inbox && n > 0 {
            add_counter(&tx, Counter::PurgeEntries.name(), n as i64)?;
        }
        tx.commit()?;
        Ok(n)
    }

    fn oldest_entry(&self) -> Result<Option<String>, InboxError> {
        oldest_entry(&self.conn)
    }
}

/// The SQL of each purge target.
pub(super) trait PurgeSql {
    fn count_sql(self) -> &'static str;
    fn delete_sql(self) -> &'static str;
}

impl PurgeSql for PurgeTarget {
    fn count_sql(self) -> &'static str {
        match self {
            PurgeTarget::Inbox => "SELECT count(*) FROM inbox WHERE received_at < ?1",
            PurgeTarget::Sightings => "SELECT count(*) FROM sightings WHERE seen_at < ?1",
            PurgeTarget::Rejections => {
                "SELECT count(*) FROM rejected_files WHERE last_seen_at < ?1"
            }
            PurgeTarget::Deliveries => "SELECT count(*) FROM deliveries WHERE seen_at < ?1",
            PurgeTarget::TransportMessages => {
                "SELECT count(*) FROM transport_messages WHERE received_at < ?1"
            }
            PurgeTarget::RefusedAnswers => {
                "SELECT count(*) FROM refusal_outbox WHERE created_at < ?1"
            }
        }
    }

    fn delete_sql(self) -> &'static str {
        match self {
            // The index on received_at finds the oldest rows without a scan.
            PurgeTarget::Inbox => {
                "DELETE FROM inbox WHERE (sender, recipient, control_ref, standard) IN (
                     SELECT sender, recipient, control_ref, standard FROM inbox
                     WHERE received_at < ?1 ORDER BY received_at LIMIT ?2)"
            }
            PurgeTarget::Sightings => {
                "DELETE FROM sightings WHERE id IN (
                     SELECT id FROM sightings WHERE seen_at < ?1 ORDER BY seen_at LIMIT ?2)"
            }
            PurgeTarget::Rejections => {
                "DELETE FROM rejected_files WHERE id IN (
                     SELECT id FROM rejected_files WHERE last_seen_at < ?1
                     ORDER BY last_seen_at LIMIT ?2)"
            }
            PurgeTarget::Deliveries => {
                "DELETE FROM deliveries WHERE id IN (
                     SELECT id FROM deliveries WHERE seen_at < ?1 ORDER BY seen_at LIMIT ?2)"
            }
            PurgeTarget::TransportMessages => {
                "DELETE FROM transport_messages WHERE rowid IN (
                     SELECT rowid FROM transport_messages WHERE received_at < ?1
                     ORDER BY received_at LIMIT ?2)"
            }
            PurgeTarget::RefusedAnswers => {
                "DELETE FROM refusal_outbox WHERE rowid IN (
                     SELECT rowid FROM refusal_outbox WHERE created_at < ?1
                     ORDER BY created_at LIMIT ?2)"
            }
        }
    }
}

pub(super) fn count_older(
    conn: &Connection,
    target: PurgeTarget,
    cutoff: &str,
) -> Result<i64, InboxError> {
    Ok(conn.query_row(target.count_sql(), [cutoff], |r| r.get(0))?)
}

pub(super) fn delete_older(
    conn: &Connection,
    target: PurgeTarget,
    cutoff: &str,
    limit: u32,
) -> Result<usize, InboxError> {
    // A rejected file's errors go first (they point at it), in the same transaction.
    if target == PurgeTarget::Rejections {
        conn.prepare_cached(
            "DELETE FROM rejections WHERE file_id IN (
                 SELECT id FROM rejected_files WHERE last_seen_at < ?1
                 ORDER BY last_seen_at LIMIT ?2)",
        )?
        .execute(params![cutoff, limit])?;
    }
    Ok(conn
        .prepare_cached(target.delete_sql())?
        .execute(params![cutoff, limit])?)
}

pub(super) fn oldest_entry(conn: &Connection) -> Result<Option<String>, InboxError> {
    Ok(conn.query_row("SELECT min(received_at) FROM inbox", [], |r| r.get(0))?)
}
