//! The outboxes' relay: the publisher's lock, its events claimed in order, marked published or
//! failed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteInbox;
use crate::inbox::names::Counter;
use crate::inbox::sqlite::reports::add_counter;
use crate::inbox::{EventEnvelope, InboxError, Outbox, OutboxEvent, Publishing};

impl Publishing for SqliteInbox {
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
        leave_out: &[i64],
    ) -> Result<Vec<OutboxEvent>, InboxError> {
        pending_events(
            &self.conn,
            pass,
            retry_after.as_secs() as i64,
            limit,
            whole,
            leave_out,
        )
    }

    fn interchange_bytes(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError> {
        interchange_bytes(&self.conn, ids)
    }

    fn mark_published(&mut self, outbox: Outbox, rows: &[i64]) -> Result<(), InboxError> {
        let now = crate::clock::now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = mark_published(&tx, outbox, rows, &now)?;
        add_counter(&tx, Counter::PublishPublished.name(), n as i64)?;
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
        add_counter(&tx, Counter::PublishFailed.name(), rows.len() as i64)?;
        add_counter(&tx, Counter::PublishParked.name(), parked as i64)?;
        tx.commit()?;
        Ok(parked)
    }

    fn retry_parked(&mut self, outbox: Outbox, id: Option<i64>) -> Result<Vec<i64>, InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut ids = {
            let mut stmt = tx.prepare(&format!(
                "UPDATE {} SET failed_at = NULL, attempts = 0, last_attempt_at = NULL,
                        last_attempt_pass = NULL
                 WHERE failed_at IS NOT NULL AND published_at IS NULL
                   AND (?1 IS NULL OR id = ?1)
                 RETURNING id",
                outbox.table()
            ))?;
            stmt.query_map(params![id], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?
        };
        tx.commit()?;
        ids.sort_unstable();
        Ok(ids)
    }
}

/// The columns of an outbox event as a publisher claims it, from `outbox o` and `messages m`
/// (its interchange's envelope is read once for all of the interchange's events).
const EVENT_COLUMNS: &str = "o.id, o.event_type, o.created_at, o.attempts, m.interchange_id,
    m.group_ref, m.reference, m.message_type, m.version, m.release, m.agency, m.raw_start,
    m.raw_end";

/// Up to `limit` events to publish, oldest first: not published, not parked, not tried in
/// `pass`, not in `leave_out`, and not tried within the last `retry_after_seconds`. With
/// `whole`, every such event of each interchange among them, however many (their ids need not
/// be consecutive).
pub(super) fn pending_events(
    conn: &Connection,
    pass: &str,
    retry_after_seconds: i64,
    limit: u32,
    whole: bool,
    leave_out: &[i64],
) -> Result<Vec<OutboxEvent>, InboxError> {
    const PENDING: &str = "o.published_at IS NULL AND o.failed_at IS NULL
           AND (o.last_attempt_at IS NULL
                OR (o.last_attempt_pass IS NOT ?1
                    AND o.last_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?2)))
           AND o.id NOT IN (SELECT value FROM json_each(?4))";
    // Two statements, not one with a flag: SQLite plans a bound flag as a value, and the branch
    // it switched off still scanned the whole outbox for every batch.
    let sql = if whole {
        format!(
            "WITH first AS (
                 SELECT o.id AS oid, m.interchange_id AS iid
                 FROM outbox o JOIN messages m ON m.id = o.message_id
                 WHERE {PENDING}
                 ORDER BY o.id LIMIT ?3)
             SELECT {EVENT_COLUMNS}
             FROM messages m
             JOIN outbox o ON o.message_id = m.id
             WHERE m.interchange_id IN (SELECT iid FROM first) AND {PENDING}
             ORDER BY o.id"
        )
    } else {
        format!(
            "SELECT {EVENT_COLUMNS}
             FROM outbox o
             JOIN messages m ON m.id = o.message_id
             WHERE {PENDING}
             ORDER BY o.id
             LIMIT ?3"
        )
    };
    // One snapshot for the events and their envelopes.
    let read = conn.unchecked_transaction()?;
    let mut stmt = read.prepare_cached(&sql)?;
    // Filled in below, once the interchanges are known.
    let unread = Arc::new(EventEnvelope::default());
    let rows = stmt.query_map(
        params![
            pass,
            format!("-{retry_after_seconds} seconds"),
            limit,
            serde_json::to_string(leave_out).unwrap_or_default()
        ],
        |r| {
            Ok(OutboxEvent {
                row: r.get(0)?,
                event_type: r.get(1)?,
                created_at: r.get(2)?,
                attempts: r.get(3)?,
                interchange_id: r.get(4)?,
                envelope: unread.clone(),
                group_ref: r.get(5)?,
                message_ref: r.get(6)?,
                message_type: r.get(7)?,
                version: r.get(8)?,
                release: r.get(9)?,
                agency: r.get(10)?,
                raw_start: r.get::<_, i64>(11)?.max(0) as usize,
                raw_end: r.get::<_, i64>(12)?.max(0) as usize,
            })
        },
    )?;
    let mut events: Vec<OutboxEvent> = rows.collect::<rusqlite::Result<_>>()?;
    let mut ids: Vec<i64> = events.iter().map(|e| e.interchange_id).collect();
    ids.sort_unstable();
    ids.dedup();
    drop(stmt);
    let envelopes = envelopes(&read, &ids)?;
    read.finish()?;
    for e in &mut events {
        // Every message has its interchange (a foreign key); an event without one would be
        // sent with an empty envelope, so it is an error instead.
        e.envelope = envelopes
            .get(&e.interchange_id)
            .ok_or_else(|| {
                InboxError::Backend(
                    format!(
                        "outbox event {}: its interchange {} is missing",
                        e.row, e.interchange_id
                    )
                    .into(),
                )
            })?
            .clone();
    }
    Ok(events)
}

/// The envelopes of the interchanges `ids`, each read once for all of its events.
fn envelopes(
    conn: &Connection,
    ids: &[i64],
) -> Result<HashMap<i64, Arc<EventEnvelope>>, InboxError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, sender, sender_qualifier, recipient, recipient_qualifier, control_ref,
                syntax_id, syntax_version, standard
         FROM interchanges WHERE id IN (SELECT value FROM json_each(?1))",
    )?;
    let list = serde_json::to_string(ids).unwrap_or_default();
    let mut rows = stmt.query([list])?;
    let mut out = HashMap::with_capacity(ids.len());
    while let Some(r) = rows.next()? {
        let envelope = EventEnvelope {
            sender: r.get(1)?,
            sender_qualifier: r.get(2)?,
            recipient: r.get(3)?,
            recipient_qualifier: r.get(4)?,
            control_ref: r.get(5)?,
            syntax_id: r.get(6)?,
            syntax_version: r.get(7)?,
            standard: r.get(8)?,
        };
        out.insert(r.get(0)?, Arc::new(envelope));
    }
    Ok(out)
}

/// Interchanges' bytes as received, for their events' payloads.
pub(super) fn interchange_bytes(
    conn: &Connection,
    ids: &[i64],
) -> Result<HashMap<i64, Vec<u8>>, InboxError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, raw, raw_codec FROM interchanges
         WHERE id IN (SELECT value FROM json_each(?1))",
    )?;
    let list = serde_json::to_string(ids).unwrap_or_default();
    let mut rows = stmt.query([list])?;
    let mut out = HashMap::with_capacity(ids.len());
    while let Some(r) = rows.next()? {
        let raw: Vec<u8> = r.get(1)?;
        let raw = if r.get_ref(2)?.as_str().is_ok_and(|c| c == "zstd") {
            crate::inbox::decompress(&raw)?
        } else {
            raw
        };
        out.insert(r.get(0)?, raw);
    }
    Ok(out)
}

/// Marks events published, in one statement.
pub(super) fn mark_published(
    conn: &Connection,
    outbox: Outbox,
    rows: &[i64],
    now: &str,
) -> Result<usize, InboxError> {
    Ok(conn
        .prepare_cached(&format!(
            "UPDATE {} SET published_at = ?1, last_error = NULL
             WHERE id IN (SELECT value FROM json_each(?2)) AND published_at IS NULL",
            outbox.table()
        ))?
        .execute(params![
            now,
            serde_json::to_string(rows).unwrap_or_default()
        ])?)
}
