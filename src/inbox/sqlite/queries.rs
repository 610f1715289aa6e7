//! The queries behind `stats`, `list` and `show`, the batched deletes of `purge`, and the
//! cumulative counters.

use crate::inbox::{
    ContrlEvent, Event, EventFilter, InboxError, KeyHistory, Outbox, OutboxEvent, OutboxFigures,
    OutboxKinds, PurgeTarget, Sighting, Stats, StoredInterchange, StoredMessage,
};
use crate::status::Status;
use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

pub(super) fn stats(conn: &Connection) -> Result<Stats, InboxError> {
    let one = |sql: &str| -> rusqlite::Result<i64> { conn.query_row(sql, [], |r| r.get(0)) };
    let (oldest, newest) = conn.query_row(
        "SELECT min(received_at), max(received_at) FROM inbox",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let figures = |table: &str| -> rusqlite::Result<OutboxFigures> {
        conn.query_row(
            &format!(
                "SELECT count(*) FILTER (WHERE failed_at IS NULL),
                        count(*) FILTER (WHERE failed_at IS NOT NULL),
                        CAST((julianday('now') - julianday(min(created_at) FILTER (WHERE failed_at IS NULL))) * 86400 AS INTEGER)
                 FROM {table} WHERE published_at IS NULL"
            ),
            [],
            |r| {
                Ok(OutboxFigures {
                    unpublished: r.get(0)?,
                    failed: r.get(1)?,
                    oldest_unpublished_age_seconds: r
                        .get::<_, Option<i64>>(2)?
                        .map(|a| a.max(0)),
                })
            },
        )
    };
    let mut stats = Stats {
        inbox: one("SELECT count(*) FROM inbox")?,
        interchanges: one("SELECT count(*) FROM interchanges")?,
        messages: one("SELECT count(*) FROM messages")?,
        duplicates: one("SELECT count(*) FROM sightings WHERE status = 'duplicate'")?,
        drift: one("SELECT count(*) FROM sightings WHERE status = 'drift'")?,
        rejected: one("SELECT count(*) FROM rejected_files")?,
        oldest_entry: oldest,
        newest_entry: newest,
        ..Stats::default()
    };
    stats.set_outboxes(OutboxKinds {
        message: figures("outbox")?,
        contrl: figures("contrl_outbox")?,
    });
    Ok(stats)
}

pub(super) fn events(conn: &Connection, f: &EventFilter) -> Result<Vec<Event>, InboxError> {
    let mut stmt = conn.prepare_cached(
        "SELECT time, status, file, sender, recipient, control_ref, error, errors FROM (
             SELECT received_at AS time, 'new' AS status, source_file AS file, sender, recipient,
                    control_ref, NULL AS error, NULL AS errors, id AS n
             FROM interchanges
             UNION ALL
             SELECT seen_at, status, source_file, sender, recipient, control_ref, NULL, NULL, id
             FROM sightings
             UNION ALL
             SELECT f.last_seen_at, 'rejected', f.source_file, NULL, NULL, NULL,
                    (SELECT r.error FROM rejections r WHERE r.file_id = f.id
                     ORDER BY r.byte_offset LIMIT 1),
                    (SELECT count(*) FROM rejections r WHERE r.file_id = f.id), f.id
             FROM rejected_files f
             UNION ALL
             SELECT o.failed_at, 'failed', i.source_file, i.sender, i.recipient, i.control_ref,
                    'message ' || m.reference || ' (' || o.event_type || ') not published: '
                        || coalesce(o.last_error, ''),
                    o.attempts, o.id
             FROM outbox o
             JOIN messages m ON m.id = o.message_id
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
             UNION ALL
             SELECT o.failed_at, 'failed', coalesce(i.source_file, ''), a.sender, a.recipient,
                    a.control_ref,
                    'CONTRL ' || a.own_ref || ' (' || o.event_type || ', sending ' || o.send
                        || ') not published: ' || coalesce(o.last_error, ''),
                    o.attempts, o.id
             FROM contrl_outbox o
             JOIN acknowledgements a ON a.id = o.acknowledgement_id
             LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                               AND i.control_ref = a.control_ref
             WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
         )
         WHERE (?1 IS NULL OR status = ?1)
           AND (?2 IS NULL OR sender = ?2)
           AND (?3 IS NULL OR time >= ?3)
         ORDER BY time DESC, n DESC
         LIMIT ?4",
    )?;
    let status = f.status.map(Status::as_str);
    let rows = stmt.query_map(params![status, f.sender, f.since, f.limit], |r| {
        Ok(Event {
            time: r.get(0)?,
            status: stored_status(r, 1)?,
            file: r.get(2)?,
            sender: r.get(3)?,
            recipient: r.get(4)?,
            control_ref: r.get(5)?,
            error: r.get(6)?,
            errors: r.get(7)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn key_history(
    conn: &Connection,
    sender: &str,
    recipient: &str,
    control_ref: &str,
) -> Result<KeyHistory, InboxError> {
    let current: Option<i64> = conn
        .query_row(
            "SELECT interchange_id FROM inbox WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3",
            params![sender, recipient, control_ref],
            |r| r.get(0),
        )
        .optional()?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, sender, sender_qualifier, recipient, recipient_qualifier, control_ref,
                syntax_id || ':' || syntax_version, prepared_date, prepared_time, test_indicator,
                application_ref, sha256, source_file, received_at, raw, raw_codec
         FROM interchanges WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 ORDER BY id",
    )?;
    let stored = stmt
        .query_map(params![sender, recipient, control_ref], |r| {
            let id: i64 = r.get(0)?;
            let codec: String = r.get(15)?;
            let interchange = StoredInterchange {
                id,
                sender: r.get(1)?,
                sender_qualifier: r.get(2)?,
                recipient: r.get(3)?,
                recipient_qualifier: r.get(4)?,
                control_ref: r.get(5)?,
                syntax: r.get(6)?,
                date: r.get(7)?,
                time: r.get(8)?,
                test: r.get::<_, Option<String>>(9)?.as_deref() == Some("1"),
                application_ref: r.get(10)?,
                sha256: r.get(11)?,
                source_file: r.get(12)?,
                received_at: r.get(13)?,
                in_inbox: current == Some(id),
                messages: Vec::new(),
                raw: r.get(14)?,
            };
            Ok((interchange, codec))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut interchanges = Vec::with_capacity(stored.len());
    for (mut i, codec) in stored {
        if codec == "zstd" {
            i.raw = crate::inbox::decompress(&i.raw)?;
        }
        interchanges.push(i);
    }
    let mut messages = conn.prepare_cached(
        "SELECT m.reference, m.message_type, m.version, m.release, m.agency, m.segments, m.group_ref,
                (SELECT o.published_at FROM outbox o WHERE o.message_id = m.id)
         FROM messages m WHERE m.interchange_id = ?1 ORDER BY m.position",
    )?;
    for i in &mut interchanges {
        i.messages = messages
            .query_map([i.id], |r| {
                Ok(StoredMessage {
                    reference: r.get(0)?,
                    message_type: r.get(1)?,
                    version: r.get(2)?,
                    release: r.get(3)?,
                    agency: r.get(4)?,
                    segments: r.get(5)?,
                    group_ref: r.get(6)?,
                    outbox_published_at: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
    }
    let mut stmt = conn.prepare_cached(
        "SELECT status, sha256, stored_sha256, source_file, seen_at FROM sightings
         WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 ORDER BY id",
    )?;
    let sightings = stmt
        .query_map(params![sender, recipient, control_ref], |r| {
            Ok(Sighting {
                status: stored_status(r, 0)?,
                sha256: r.get(1)?,
                stored_sha256: r.get(2)?,
                source_file: r.get(3)?,
                seen_at: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(KeyHistory {
        interchanges,
        sightings,
    })
}

/// The SQL of each purge target.
trait PurgeSql {
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
        }
    }

    fn delete_sql(self) -> &'static str {
        match self {
            // The index on received_at finds the oldest rows without a scan.
            PurgeTarget::Inbox => {
                "DELETE FROM inbox WHERE (sender, recipient, control_ref) IN (
                     SELECT sender, recipient, control_ref FROM inbox
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

/// A status word of the database as a [`Status`].
fn stored_status(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<Status> {
    let word: String = row.get(column)?;
    Status::from_stored(&word).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            format!("{word:?} is not a status").into(),
        )
    })
}

pub(super) fn add_counter(conn: &Connection, name: &str, by: i64) -> Result<(), InboxError> {
    conn.prepare_cached(
        "INSERT INTO counters (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
    )?
    .execute(params![name, by])?;
    Ok(())
}

pub(super) fn counter(conn: &Connection, name: &str) -> Result<i64, InboxError> {
    Ok(conn
        .query_row("SELECT value FROM counters WHERE name = ?1", [name], |r| {
            r.get(0)
        })
        .optional()?
        .unwrap_or(0))
}

/// The columns of an outbox event as a publisher claims it, from `outbox o`, `messages m` and
/// `interchanges i`.
const EVENT_COLUMNS: &str = "o.id, o.event_type, o.created_at, o.attempts, i.id,
    i.sender, i.sender_qualifier, i.recipient, i.recipient_qualifier, i.control_ref,
    i.syntax_id, i.syntax_version, m.group_ref, m.reference, m.message_type, m.version,
    m.release, m.agency, m.raw_start, m.raw_end";

/// Up to `limit` events to publish, oldest first: not published, not parked, not tried in
/// `pass`, and not tried within the last `retry_after_seconds`. With `whole`, every such event
/// of each interchange among them, however many (their ids need not be consecutive).
pub(super) fn pending_events(
    conn: &Connection,
    pass: &str,
    retry_after_seconds: i64,
    limit: u32,
    whole: bool,
) -> Result<Vec<OutboxEvent>, InboxError> {
    const PENDING: &str = "o.published_at IS NULL AND o.failed_at IS NULL
           AND (o.last_attempt_at IS NULL
                OR (o.last_attempt_pass IS NOT ?1
                    AND o.last_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?2)))";
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
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE m.interchange_id IN (SELECT iid FROM first) AND {PENDING}
             ORDER BY o.id"
        )
    } else {
        format!(
            "SELECT {EVENT_COLUMNS}
             FROM outbox o
             JOIN messages m ON m.id = o.message_id
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE {PENDING}
             ORDER BY o.id
             LIMIT ?3"
        )
    };
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![pass, format!("-{retry_after_seconds} seconds"), limit],
        |r| {
            Ok(OutboxEvent {
                row: r.get(0)?,
                event_type: r.get(1)?,
                created_at: r.get(2)?,
                attempts: r.get(3)?,
                interchange_id: r.get(4)?,
                sender: r.get(5)?,
                sender_qualifier: r.get(6)?,
                recipient: r.get(7)?,
                recipient_qualifier: r.get(8)?,
                control_ref: r.get(9)?,
                syntax_id: r.get(10)?,
                syntax_version: r.get(11)?,
                group_ref: r.get(12)?,
                message_ref: r.get(13)?,
                message_type: r.get(14)?,
                version: r.get(15)?,
                release: r.get(16)?,
                agency: r.get(17)?,
                raw_start: r.get::<_, i64>(18)?.max(0) as usize,
                raw_end: r.get::<_, i64>(19)?.max(0) as usize,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The CONTRLs to deliver, claimed as events are.
pub(super) fn pending_contrl(
    conn: &Connection,
    pass: &str,
    retry_after_seconds: i64,
    limit: u32,
) -> Result<Vec<ContrlEvent>, InboxError> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id, o.event_type, o.created_at, o.attempts, o.send, a.recipient, a.sender,
                a.partner, a.own_ref, a.control_ref, a.bytes
         FROM contrl_outbox o
         JOIN acknowledgements a ON a.id = o.acknowledgement_id
         WHERE o.published_at IS NULL AND o.failed_at IS NULL
           AND (o.last_attempt_at IS NULL
                OR (o.last_attempt_pass IS NOT ?1
                    AND o.last_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?2)))
         ORDER BY o.id LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        params![pass, format!("-{retry_after_seconds} seconds"), limit],
        |r| {
            Ok(ContrlEvent {
                row: r.get(0)?,
                event_type: r.get(1)?,
                created_at: r.get(2)?,
                attempts: r.get(3)?,
                send: r.get(4)?,
                sender: r.get(5)?,
                recipient: r.get(6)?,
                partner: r.get(7)?,
                own_ref: r.get(8)?,
                control_ref: r.get(9)?,
                bytes: r.get(10)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
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
