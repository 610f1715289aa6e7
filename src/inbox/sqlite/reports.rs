//! What `stats`, `list`, `show` and the metrics read, and the cumulative counters.

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteInbox;
use crate::inbox::DriftedCopy;
use crate::inbox::Outbox;
use crate::inbox::names::{Counter, not_published};
use crate::inbox::{
    Event, EventFilter, Filed, InboxError, KeyHistory, OutboxFigures, OutboxKinds, Refusal,
    Reports, Sighting, Stats, StoredInterchange, StoredMessage, StoredRefusal,
};
use crate::status::Status;

impl Reports for SqliteInbox {
    fn stats(&self) -> Result<Stats, InboxError> {
        stats(&self.conn)
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
        events(&self.conn, filter)
    }

    fn key_history(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<KeyHistory, InboxError> {
        key_history(&self.conn, sender, recipient, control_ref)
    }

    fn drifted_copies(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<Vec<DriftedCopy>, InboxError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT sha256, stored_sha256, source_file, seen_at, payload FROM sightings
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND status = 'drift'
               AND payload IS NOT NULL
             ORDER BY id",
        )?;
        let copies = stmt
            .query_map(params![sender, recipient, control_ref], |r| {
                Ok(DriftedCopy {
                    sha256: r.get(0)?,
                    stored_sha256: r.get(1)?,
                    source_file: r.get(2)?,
                    seen_at: r.get(3)?,
                    payload: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(copies)
    }

    fn counter(&self, c: Counter) -> Result<i64, InboxError> {
        counter(&self.conn, c.name())
    }
}

pub(super) fn stats(conn: &Connection) -> Result<Stats, InboxError> {
    let one = |sql: &str| -> rusqlite::Result<i64> { conn.query_row(sql, [], |r| r.get(0)) };
    let sightings = |status: Status| -> rusqlite::Result<i64> {
        conn.query_row(
            "SELECT count(*) FROM sightings WHERE status = ?1",
            [status.as_str()],
            |r| r.get(0),
        )
    };
    let (oldest, newest) = conn.query_row(
        "SELECT min(received_at), max(received_at) FROM inbox",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let figures = |outbox: Outbox| -> rusqlite::Result<OutboxFigures> {
        conn.query_row(
            &format!(
                "SELECT count(*) FILTER (WHERE failed_at IS NULL),
                        count(*) FILTER (WHERE failed_at IS NOT NULL),
                        CAST((julianday('now') - julianday(min(created_at) FILTER (WHERE failed_at IS NULL))) * 86400 AS INTEGER)
                 FROM {} WHERE published_at IS NULL",
                outbox.table()
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
        duplicates: sightings(Status::Duplicate)?,
        drift: sightings(Status::Drift)?,
        rejected: one("SELECT count(*) FROM rejected_files")?,
        refused: one("SELECT count(*) FROM refusals WHERE resolved_at IS NULL")?,
        oldest_entry: oldest,
        newest_entry: newest,
        ..Stats::default()
    };
    stats.set_outboxes(OutboxKinds {
        message: figures(Outbox::Messages)?,
        contrl: figures(Outbox::Acknowledgements)?,
    });
    Ok(stats)
}

pub(super) fn events(conn: &Connection, f: &EventFilter) -> Result<Vec<Event>, InboxError> {
    let mut stmt = conn.prepare_cached(
        "SELECT time, status, file, sender, recipient, control_ref, error, errors, unit_ref,
                event_type, send, detail, n, source_path, host, moved_to FROM (
             SELECT received_at AS time, ?5 AS status, source_file AS file, sender, recipient,
                    control_ref, NULL AS error, NULL AS errors, NULL AS unit_ref,
                    NULL AS event_type, NULL AS send, NULL AS detail, id AS n, source_path, host,
                    moved_to
             FROM interchanges
             UNION ALL
             SELECT seen_at, status, source_file, sender, recipient, control_ref, NULL, NULL,
                    NULL, NULL, NULL, NULL, id, source_path, host, moved_to
             FROM sightings
             UNION ALL
             SELECT f.last_seen_at, ?6, f.source_file, NULL, NULL, NULL,
                    (SELECT r.error FROM rejections r WHERE r.file_id = f.id
                     ORDER BY r.byte_offset LIMIT 1),
                    (SELECT count(*) FROM rejections r WHERE r.file_id = f.id), NULL, NULL, NULL,
                    NULL, f.id, NULL, NULL, NULL
             FROM rejected_files f
             UNION ALL
             SELECT o.failed_at, ?7, i.source_file, i.sender, i.recipient, i.control_ref,
                    coalesce(o.last_error, ''), o.attempts, m.reference, o.event_type, NULL, NULL,
                    o.id, NULL, NULL, NULL
             FROM outbox o
             JOIN messages m ON m.id = o.message_id
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
             UNION ALL
             SELECT o.failed_at, ?7, coalesce(i.source_file, ''), a.sender, a.recipient,
                    a.control_ref, coalesce(o.last_error, ''), o.attempts, a.own_ref,
                    o.event_type, o.send, NULL, o.id, NULL, NULL, NULL
             FROM contrl_outbox o
             JOIN acknowledgements a ON a.id = o.acknowledgement_id
             LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                               AND i.control_ref = a.control_ref
             WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
             UNION ALL
             SELECT last_seen_at, ?8, source_file, sender, recipient, control_ref, statement,
                    times_seen, message_ref, code, NULL, error, id, NULL, NULL, NULL
             FROM refusals WHERE resolved_at IS NULL
         )
         WHERE (?1 IS NULL OR status = ?1)
           AND (?2 IS NULL OR sender = ?2)
           AND (?3 IS NULL OR time >= ?3)
         ORDER BY time DESC, n DESC
         LIMIT ?4",
    )?;
    let status = f.status.map(Status::as_str);
    let words = [
        Status::New,
        Status::Rejected,
        Status::Failed,
        Status::Refused,
    ]
    .map(Status::as_str);
    let rows = stmt.query_map(
        params![
            status, f.sender, f.since, f.limit, words[0], words[1], words[2], words[3]
        ],
        |r| {
            let error: Option<String> = r.get(6)?;
            let status = stored_status(r, 1)?;
            // A refusal and a parked event: what they were and why, said in Rust, once.
            let error = match r.get::<_, Option<String>>(8)? {
                _ if status == Status::Refused => Some(
                    Refusal {
                        statement: error.unwrap_or_default(),
                        message_ref: r.get(8)?,
                        code: r.get(9)?,
                        error: r.get(11)?,
                        times_seen: r.get(7)?,
                    }
                    .to_string(),
                ),
                Some(reference) => Some(not_published(
                    &reference,
                    &r.get::<_, String>(9)?,
                    r.get(10)?,
                    error.as_deref().unwrap_or_default(),
                )),
                None => error,
            };
            Ok(Event {
                refusal_id: if status == Status::Refused {
                    r.get(12)?
                } else {
                    None
                },
                time: r.get(0)?,
                status,
                file: r.get(2)?,
                sender: r.get(3)?,
                recipient: r.get(4)?,
                control_ref: r.get(5)?,
                error,
                // How many times a refusal was seen is in its words, not a count of errors.
                errors: if status == Status::Refused {
                    None
                } else {
                    r.get(7)?
                },
                event_id: if status == Status::Failed {
                    r.get(12)?
                } else {
                    None
                },
                event_kind: crate::inbox::event_kind(status, r.get(10)?),
                filed: Filed {
                    source_path: r.get(13)?,
                    host: r.get(14)?,
                    moved_to: r.get(15)?,
                },
            })
        },
    )?;
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
                application_ref, sha256, source_file, received_at, raw, raw_codec, source_path,
                host, moved_to
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
                filed: Filed {
                    source_path: r.get(16)?,
                    host: r.get(17)?,
                    moved_to: r.get(18)?,
                },
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
        "SELECT status, sha256, stored_sha256, source_file, seen_at, source_path, host, moved_to
         FROM sightings
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
                filed: Filed {
                    source_path: r.get(5)?,
                    host: r.get(6)?,
                    moved_to: r.get(7)?,
                },
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let refusals = conn
        .prepare_cached(
            "SELECT id, sha256, source_file, statement, message_ref, code, error, times_seen,
                    first_seen_at, last_seen_at, resolved_at, resolved_as
             FROM refusals WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3
             ORDER BY id",
        )?
        .query_map(params![sender, recipient, control_ref], |r| {
            Ok(StoredRefusal {
                id: r.get(0)?,
                sha256: r.get(1)?,
                source_file: r.get(2)?,
                refusal: Refusal {
                    statement: r.get(3)?,
                    message_ref: r.get(4)?,
                    code: r.get(5)?,
                    error: r.get(6)?,
                    times_seen: r.get(7)?,
                },
                first_seen_at: r.get(8)?,
                last_seen_at: r.get(9)?,
                resolved_at: r.get(10)?,
                resolved_as: r.get(11)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(KeyHistory {
        interchanges,
        sightings,
        refusals,
    })
}

/// A status word of the database as a [`Status`].
pub(super) fn stored_status(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<Status> {
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
