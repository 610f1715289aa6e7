//! What `stats`, `list`, `show` and the metrics read, and the cumulative counters.

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteInbox;
use crate::inbox::DriftedCopy;
use crate::inbox::Outbox;
use crate::inbox::names::{Counter, not_published};
use crate::inbox::records::Volumes;
use crate::inbox::{
    AcknowledgementFigures, AcknowledgementRow, Event, EventFilter, Filed, InboxError,
    InterchangeKey, KeyHistory, OutboxFigures, OutboxKinds, Refusal, Reports, SentContrl, Sighting,
    Stats, StoredInterchange, StoredKey, StoredMessage, StoredRefusal, StoredRejection, Volume,
    VolumeBy,
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

    fn count_events(&self, filter: &EventFilter) -> Result<u64, InboxError> {
        count_events(&self.conn, filter)
    }

    fn sent_contrls(&self, filter: &EventFilter) -> Result<(Vec<SentContrl>, u64), InboxError> {
        sent_contrls(&self.conn, filter)
    }

    fn volumes(&self, by: VolumeBy, since: Option<&str>) -> Result<Vec<Volume>, InboxError> {
        volumes(&self.conn, by, since)
    }

    fn interchange_key(&self, id: i64) -> Result<Option<StoredKey>, InboxError> {
        interchange_key(&self.conn, id)
    }

    fn key_history(&self, key: InterchangeKey<'_>) -> Result<KeyHistory, InboxError> {
        key_history(&self.conn, key)
    }

    fn drifted_copies(&self, key: InterchangeKey<'_>) -> Result<Vec<DriftedCopy>, InboxError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT sha256, stored_sha256, source_file, seen_at, payload FROM sightings
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4 AND status = 'drift'
               AND payload IS NOT NULL
             ORDER BY id",
        )?;
        let copies = stmt
            .query_map(
                params![key.sender, key.recipient, key.control_ref, key.standard],
                |r| {
                    Ok(DriftedCopy {
                        sha256: r.get(0)?,
                        stored_sha256: r.get(1)?,
                        source_file: r.get(2)?,
                        seen_at: r.get(3)?,
                        payload: r.get(4)?,
                    })
                },
            )?
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
    stats.acknowledgements = acknowledgement_figures(conn)?;
    Ok(stats)
}

/// The answers held, by kind. A TA1 is told by where it stands: our own X12 answer writes its
/// ISA at its fixed 106 bytes, then the TA1 (see `x12::ack::build`).
fn acknowledgement_figures(conn: &Connection) -> Result<Vec<AcknowledgementFigures>, InboxError> {
    let mut statement = conn.prepare_cached(
        "SELECT a.standard,
                (SELECT o.event_type FROM contrl_outbox o WHERE o.acknowledgement_id = a.id
                 ORDER BY o.send LIMIT 1),
                a.action IN ('4', 'R'),
                a.standard = 'x12' AND CAST(substr(a.bytes, 107, 3) AS TEXT) = 'TA1',
                count(*)
         FROM acknowledgements a
         GROUP BY 1, 2, 3, 4",
    )?;
    let rows = statement
        .query_map([], |r| {
            Ok(AcknowledgementRow {
                standard: r.get(0)?,
                event_type: r.get(1)?,
                negative: r.get(2)?,
                with_ta1: r.get(3)?,
                count: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(AcknowledgementFigures::of(rows))
}

/// Every event `list` shows, with `list`'s filters, as named parameters: each with the
/// interchange its messages are read from (`iid`) or its one message's type (`one_type`). A
/// rejected file takes the key of its first error (by byte) that matches the key filters, so
/// that a file is found by any interchange in it whose UNB was read.
const EVENTS: &str = "
    SELECT * FROM (
        SELECT received_at AS time, :new AS status, source_file AS file, sender, recipient,
               control_ref, NULL AS error, NULL AS errors, NULL AS unit_ref, NULL AS event_type,
               NULL AS send, NULL AS detail, id AS n, id AS iid, NULL AS one_type, source_path,
               host, moved_to, standard
        FROM interchanges
        UNION ALL
        SELECT s.seen_at, s.status, s.source_file, s.sender, s.recipient, s.control_ref, NULL,
               NULL, NULL, NULL, NULL, NULL, s.id,
               (SELECT max(x.id) FROM interchanges x WHERE x.sender = s.sender
                AND x.recipient = s.recipient AND x.control_ref = s.control_ref
                AND x.standard = s.standard), NULL,
               s.source_path, s.host, s.moved_to, s.standard
        FROM sightings s
        UNION ALL
        SELECT f.last_seen_at, :rejected, f.source_file, r.sender, r.recipient, r.control_ref,
               r.error, (SELECT count(*) FROM rejections c WHERE c.file_id = f.id), NULL, NULL,
               NULL, NULL, f.id, NULL, NULL, NULL, NULL, NULL, r.standard
        FROM (SELECT g.*,
                     (SELECT r.id FROM rejections r WHERE r.file_id = g.id
                        AND (:sender IS NULL OR r.sender = :sender)
                        AND (:recipient IS NULL OR r.recipient = :recipient)
                        AND (:ref IS NULL OR r.control_ref = :ref)
                      ORDER BY r.byte_offset LIMIT 1) AS rid
              FROM rejected_files g) f
        LEFT JOIN rejections r ON r.id = f.rid
        UNION ALL
        SELECT o.failed_at, :failed, i.source_file, i.sender, i.recipient, i.control_ref,
               coalesce(o.last_error, ''), o.attempts, m.reference, o.event_type, NULL, NULL,
               o.id, NULL, m.message_type, NULL, NULL, NULL, i.standard
        FROM outbox o
        JOIN messages m ON m.id = o.message_id
        JOIN interchanges i ON i.id = m.interchange_id
        WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
        UNION ALL
        SELECT o.failed_at, :failed, coalesce(i.source_file, ''), a.sender, a.recipient,
               a.control_ref, coalesce(o.last_error, ''), o.attempts, a.own_ref,
               o.event_type, o.send, NULL, o.id, NULL, 'CONTRL', NULL, NULL, NULL, a.standard
        FROM contrl_outbox o
        JOIN acknowledgements a ON a.id = o.acknowledgement_id
        LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                          AND i.control_ref = a.control_ref AND i.standard = a.standard
        WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
        UNION ALL
        SELECT last_seen_at, :refused, source_file, sender, recipient, control_ref, statement,
               times_seen, message_ref, code, NULL, error, id, NULL, NULL, NULL, NULL, NULL,
               standard
        FROM refusals WHERE resolved_at IS NULL
    )
    WHERE (:status IS NULL OR status = :status)
      AND (:sender IS NULL OR sender = :sender)
      AND (:recipient IS NULL OR recipient = :recipient)
      AND (:ref IS NULL OR control_ref = :ref)
      AND (:file IS NULL OR file = :file OR substr(file, -length(:file) - 1) = '/' || :file)
      AND (:since IS NULL OR time >= :since)
      AND (:until IS NULL OR time < :until)
      AND (:standard IS NULL OR standard = :standard)
      AND (:type IS NULL OR one_type = :type
           OR EXISTS (SELECT 1 FROM messages m WHERE m.interchange_id = iid
                      AND m.message_type = :type))";

/// A listed rejected file's error (by its file's id `e.n` and its words `e.error`): its byte, for
/// the quote `list` prints from the 1,000 bytes around it.
const QUOTED_AT: &str = "(SELECT r.byte_offset FROM rejections r WHERE r.file_id = e.n
                          AND r.error IS e.error ORDER BY r.byte_offset LIMIT 1)";

/// `list`'s filters as the named parameters of [`EVENTS`].
fn event_params(f: &EventFilter) -> Vec<(&'static str, Box<dyn rusqlite::ToSql + '_>)> {
    vec![
        (":new", Box::new(Status::New.as_str())),
        (":rejected", Box::new(Status::Rejected.as_str())),
        (":failed", Box::new(Status::Failed.as_str())),
        (":refused", Box::new(Status::Refused.as_str())),
        (":status", Box::new(f.status.map(Status::as_str))),
        (":sender", Box::new(f.sender.as_deref())),
        (":recipient", Box::new(f.recipient.as_deref())),
        (":ref", Box::new(f.control_ref.as_deref())),
        (":file", Box::new(f.file.as_deref())),
        (":since", Box::new(f.since.as_deref())),
        (":until", Box::new(f.until.as_deref())),
        (":type", Box::new(f.message_type.as_deref())),
        (
            ":standard",
            Box::new(f.standard.map(crate::standard::Standard::as_str)),
        ),
    ]
}

fn as_named<'a>(
    params: &'a [(&'static str, Box<dyn rusqlite::ToSql + 'a>)],
) -> Vec<(&'static str, &'a dyn rusqlite::ToSql)> {
    params.iter().map(|(n, v)| (*n, v.as_ref())).collect()
}

pub(super) fn count_events(conn: &Connection, f: &EventFilter) -> Result<u64, InboxError> {
    let params = event_params(f);
    let n: i64 = conn
        .prepare_cached(&format!("SELECT count(*) FROM ({EVENTS})"))?
        .query_row(as_named(&params).as_slice(), |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

pub(super) fn events(conn: &Connection, f: &EventFilter) -> Result<Vec<Event>, InboxError> {
    // The page first, then its message types: read for the rows shown only.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT e.time, e.status, e.file, e.sender, e.recipient, e.control_ref, e.error, e.errors,
                e.unit_ref, e.event_type, e.send, e.detail, e.n,
                coalesce(e.one_type, (SELECT group_concat(m.message_type) FROM messages m
                                      WHERE m.interchange_id = e.iid)),
                CASE WHEN e.one_type IS NOT NULL THEN 1
                     WHEN e.iid IS NOT NULL THEN (SELECT count(*) FROM messages m
                                                  WHERE m.interchange_id = e.iid) END,
                e.source_path, e.host, e.moved_to,
                CASE WHEN e.status = :rejected THEN min({QUOTED_AT}, 500) END,
                CASE WHEN e.status = :rejected THEN
                    (SELECT substr(f.bytes, max(1, {QUOTED_AT} - 499), 1000)
                     FROM rejected_files f WHERE f.id = e.n) END,
                e.standard
         FROM ({EVENTS} ORDER BY time DESC, n DESC LIMIT :limit OFFSET :offset) e
         ORDER BY e.time DESC, e.n DESC"
    ))?;
    let mut params = event_params(f);
    params.push((":limit", Box::new(f.limit)));
    params.push((":offset", Box::new(f.offset)));
    let rows = stmt.query_map(as_named(&params).as_slice(), |r| {
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
            message_types: Event::types_of(r.get(13)?),
            messages: r.get(14)?,
            event_id: if status == Status::Failed {
                r.get(12)?
            } else {
                None
            },
            event_kind: crate::inbox::event_kind(status, r.get(10)?),
            filed: Filed {
                source_path: r.get(15)?,
                host: r.get(16)?,
                moved_to: r.get(17)?,
            },
            quote: Event::quote_of(r.get(18)?, r.get(19)?),
            standard: r.get(20)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The CONTRLs `list --contrl` shows, with its filters as named parameters; an
/// acknowledgement's latest sending says whether it was delivered.
const SENT: &str = "FROM acknowledgements a
     LEFT JOIN contrl_outbox o ON o.id = (SELECT max(x.id) FROM contrl_outbox x
                                          WHERE x.acknowledgement_id = a.id)
     WHERE (:sender IS NULL OR a.sender = :sender)
       AND (:recipient IS NULL OR a.recipient = :recipient)
       AND (:ref IS NULL OR a.control_ref = :ref)
       AND (:since IS NULL OR a.created_at >= :since)
       AND (:until IS NULL OR a.created_at < :until)";

pub(super) fn sent_contrls(
    conn: &Connection,
    f: &EventFilter,
) -> Result<(Vec<SentContrl>, u64), InboxError> {
    let filters: [(&str, &dyn rusqlite::ToSql); 5] = [
        (":sender", &f.sender),
        (":recipient", &f.recipient),
        (":ref", &f.control_ref),
        (":since", &f.since),
        (":until", &f.until),
    ];
    let total: i64 = conn
        .prepare_cached(&format!("SELECT count(*) {SENT}"))?
        .query_row(&filters[..], |r| r.get(0))?;
    let mut page: Vec<(&str, &dyn rusqlite::ToSql)> = filters.to_vec();
    page.push((":limit", &f.limit));
    page.push((":offset", &f.offset));
    let sent = conn
        .prepare_cached(&format!(
            "SELECT a.created_at, a.partner, a.sender, a.recipient, a.control_ref, a.own_ref,
                    a.action, a.error_code, o.published_at, o.failed_at
             {SENT} ORDER BY a.created_at DESC, a.id DESC LIMIT :limit OFFSET :offset"
        ))?
        .query_map(page.as_slice(), |r| {
            Ok(SentContrl {
                time: r.get(0)?,
                partner: r.get(1)?,
                sender: r.get(2)?,
                recipient: r.get(3)?,
                control_ref: r.get(4)?,
                own_ref: r.get(5)?,
                action: r.get(6)?,
                error_code: r.get(7)?,
                published_at: r.get(8)?,
                failed_at: r.get(9)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok((sent, total.max(0) as u64))
}

/// Every figure of `stats --by` for each day (UTC: times are stored as RFC 3339 UTC text, a
/// day is its first ten characters) from ?1, pair of partners and (for messages) type: the
/// partners' figures are summed in Rust for the sender or the recipient (see
/// `Volumes::add_row`). An interchange's rejections are counted once: its file and key.
const VOLUMES: &str = "
    SELECT 'interchanges', substr(received_at, 1, 10), sender, recipient, NULL, count(*)
    FROM interchanges WHERE received_at >= ?1 GROUP BY 2, 3, 4
    UNION ALL
    SELECT 'messages', substr(i.received_at, 1, 10), i.sender, i.recipient, m.message_type,
           count(*)
    FROM interchanges i JOIN messages m ON m.interchange_id = i.id
    WHERE i.received_at >= ?1 GROUP BY 2, 3, 4, 5
    UNION ALL
    SELECT 'interchanges of type', substr(i.received_at, 1, 10), i.sender, i.recipient,
           m.message_type, count(DISTINCT i.id)
    FROM interchanges i JOIN messages m ON m.interchange_id = i.id
    WHERE i.received_at >= ?1 GROUP BY 2, 3, 4, 5
    UNION ALL
    SELECT status, substr(seen_at, 1, 10), sender, recipient, NULL, count(*)
    FROM sightings WHERE seen_at >= ?1 GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT 'rejected', substr(first_seen_at, 1, 10), sender, recipient, NULL, count(*)
    FROM (SELECT min(first_seen_at) AS first_seen_at, sender, recipient FROM rejections
          WHERE sender IS NOT NULL GROUP BY file_id, sender, recipient, control_ref)
    WHERE first_seen_at >= ?1 GROUP BY 2, 3, 4";

pub(super) fn volumes(
    conn: &Connection,
    by: VolumeBy,
    since: Option<&str>,
) -> Result<Vec<Volume>, InboxError> {
    let mut volumes = Volumes::new(by);
    let mut stmt = conn.prepare_cached(VOLUMES)?;
    let mut rows = stmt.query([since.unwrap_or("")])?;
    while let Some(r) = rows.next()? {
        volumes.add_row(
            &r.get::<_, String>(0)?,
            r.get(1)?,
            (r.get(2)?, r.get(3)?),
            r.get(4)?,
            r.get(5)?,
        );
    }
    Ok(volumes.into_rows())
}

pub(super) fn interchange_key(conn: &Connection, id: i64) -> Result<Option<StoredKey>, InboxError> {
    Ok(conn
        .query_row(
            "SELECT standard, sender, recipient, control_ref FROM interchanges WHERE id = ?1",
            [id],
            |r| {
                Ok(StoredKey {
                    standard: r.get(0)?,
                    sender: r.get(1)?,
                    recipient: r.get(2)?,
                    control_ref: r.get(3)?,
                })
            },
        )
        .optional()?)
}

pub(super) fn key_history(
    conn: &Connection,
    key: InterchangeKey<'_>,
) -> Result<KeyHistory, InboxError> {
    let current: Option<i64> = conn
        .query_row(
            "SELECT interchange_id FROM inbox WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4",
            params![key.sender, key.recipient, key.control_ref, key.standard],
            |r| r.get(0),
        )
        .optional()?;
    let mut stmt = conn.prepare_cached(
        "SELECT id, sender, sender_qualifier, recipient, recipient_qualifier, control_ref,
                syntax_id || ':' || syntax_version, prepared_date, prepared_time, test_indicator,
                application_ref, sha256, source_file, received_at, raw, raw_codec, source_path,
                host, moved_to, standard
         FROM interchanges WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4 ORDER BY id",
    )?;
    let stored = stmt
        .query_map(
            params![key.sender, key.recipient, key.control_ref, key.standard],
            |r| {
                let id: i64 = r.get(0)?;
                let codec: String = r.get(15)?;
                let interchange = StoredInterchange {
                    id,
                    sender: r.get(1)?,
                    sender_qualifier: r.get(2)?,
                    recipient: r.get(3)?,
                    recipient_qualifier: r.get(4)?,
                    control_ref: r.get(5)?,
                    standard: r.get(19)?,
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
            },
        )?
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
         WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4 ORDER BY id",
    )?;
    let sightings = stmt
        .query_map(
            params![key.sender, key.recipient, key.control_ref, key.standard],
            |r| {
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
            },
        )?
        .collect::<rusqlite::Result<_>>()?;
    let refusals = conn
        .prepare_cached(
            "SELECT id, sha256, source_file, statement, message_ref, code, error, times_seen,
                    first_seen_at, last_seen_at, resolved_at, resolved_as
             FROM refusals WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4
             ORDER BY id",
        )?
        .query_map(params![key.sender, key.recipient, key.control_ref, key.standard], |r| {
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
    let rejections = conn
        .prepare_cached(
            "SELECT r.error, r.kind, r.byte_offset, r.source_file, r.file_sha256, r.file_size,
                    r.truncated, r.first_seen_at, r.last_seen_at, r.times_seen, f.bytes
             FROM rejections r LEFT JOIN rejected_files f ON f.id = r.file_id
             WHERE r.sender = ?1 AND r.recipient = ?2 AND r.control_ref = ?3 AND r.standard = ?4
             ORDER BY r.id",
        )?
        .query_map(
            params![key.sender, key.recipient, key.control_ref, key.standard],
            |r| {
                Ok(StoredRejection {
                    error: r.get(0)?,
                    kind: r.get(1)?,
                    byte_offset: r.get(2)?,
                    source_file: r.get(3)?,
                    file_sha256: r.get(4)?,
                    file_size: r.get(5)?,
                    truncated: r.get(6)?,
                    first_seen_at: r.get(7)?,
                    last_seen_at: r.get(8)?,
                    times_seen: r.get(9)?,
                    bytes: r.get::<_, Option<Vec<u8>>>(10)?.unwrap_or_default(),
                })
            },
        )?
        .collect::<rusqlite::Result<_>>()?;
    Ok(KeyHistory {
        interchanges,
        sightings,
        refusals,
        rejections,
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
