//! What `stats`, `list`, `show` and the metrics read, and the per-host counters.

use std::collections::BTreeMap;

use postgres::GenericClient;
use postgres::types::ToSql;

use super::PgInbox;
use crate::inbox::DriftedCopy;
use crate::inbox::names::{Counter, not_published};
use crate::inbox::records::Volumes;
use crate::inbox::{
    AcknowledgementFigures, AcknowledgementRow, Event, EventFilter, Filed, InboxError,
    InterchangeKey, KeyHistory, OutboxFigures, OutboxKinds, Reports, SentContrl, Sighting, Stats,
    StoredInterchange, StoredKey, StoredMessage, StoredRefusal, StoredRejection, Volume, VolumeBy,
};

/// The status words the events are stored with, as parameters.
const NEW: &str = Status::New.as_str();
const REJECTED: &str = Status::Rejected.as_str();
const FAILED: &str = Status::Failed.as_str();
const REFUSED: &str = Status::Refused.as_str();
use crate::status::Status;

impl Reports for PgInbox {
    fn stats(&self) -> Result<Stats, InboxError> {
        stats(&mut **self.client.borrow_mut())
    }

    fn size_bytes(&self) -> u64 {
        size_bytes(&mut **self.client.borrow_mut(), &self.target.schema).unwrap_or(0)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError> {
        events(&mut **self.client.borrow_mut(), filter)
    }

    fn count_events(&self, filter: &EventFilter) -> Result<u64, InboxError> {
        count_events(&mut **self.client.borrow_mut(), filter)
    }

    fn sent_contrls(&self, filter: &EventFilter) -> Result<(Vec<SentContrl>, u64), InboxError> {
        sent_contrls(&mut **self.client.borrow_mut(), filter)
    }

    fn volumes(&self, by: VolumeBy, since: Option<&str>) -> Result<Vec<Volume>, InboxError> {
        volumes(&mut **self.client.borrow_mut(), by, since)
    }

    fn interchange_key(&self, id: i64) -> Result<Option<StoredKey>, InboxError> {
        interchange_key(&mut **self.client.borrow_mut(), id)
    }

    fn key_history(&self, key: InterchangeKey<'_>) -> Result<KeyHistory, InboxError> {
        key_history(&mut **self.client.borrow_mut(), key)
    }

    fn drifted_copies(&self, key: InterchangeKey<'_>) -> Result<Vec<DriftedCopy>, InboxError> {
        let mut copies = Vec::new();
        for r in self.client.borrow_mut().query(
            concat!(
                "SELECT sha256, stored_sha256, source_file, ",
                ts!("seen_at"),
                ", payload FROM sightings
                 WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4 AND status = 'drift'
                   AND payload IS NOT NULL
                 ORDER BY id"
            ),
            &[
                &key.sender,
                &key.recipient,
                &key.control_ref,
                &key.standard.as_str(),
            ],
        )? {
            copies.push(DriftedCopy {
                sha256: r.get(0),
                stored_sha256: r.get(1),
                source_file: r.get(2),
                seen_at: r.get(3),
                payload: r.get(4),
            });
        }
        Ok(copies)
    }

    fn counter(&self, c: Counter) -> Result<i64, InboxError> {
        counter(&mut **self.client.borrow_mut(), c.name())
    }
}

pub(super) fn stats(c: &mut impl GenericClient) -> Result<Stats, InboxError> {
    let row = c.query_one(
        concat!(
            "SELECT (SELECT count(*) FROM inbox), (SELECT count(*) FROM interchanges),
                    (SELECT count(*) FROM messages),
                    (SELECT count(*) FROM sightings WHERE status = $1),
                    (SELECT count(*) FROM sightings WHERE status = $2),
                    (SELECT count(*) FROM rejected_files),
                    (SELECT count(*) FROM outbox WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM outbox
                     WHERE published_at IS NULL AND failed_at IS NOT NULL),
                    (SELECT extract(epoch FROM now() - min(created_at))::bigint
                     FROM outbox WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM contrl_outbox
                     WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM contrl_outbox
                     WHERE published_at IS NULL AND failed_at IS NOT NULL),
                    (SELECT extract(epoch FROM now() - min(created_at))::bigint
                     FROM contrl_outbox WHERE published_at IS NULL AND failed_at IS NULL), ",
            ts!("(SELECT min(received_at) FROM inbox)"),
            ", ",
            ts!("(SELECT max(received_at) FROM inbox)"),
            ", (SELECT count(*) FROM refusals WHERE resolved_at IS NULL)"
        ),
        &[&Status::Duplicate.as_str(), &Status::Drift.as_str()],
    )?;
    // The age clamped here, not by greatest(0, ...), which would give an empty outbox an age
    // of 0 where SQLite (and the JSON's contract) has none.
    let figures = |at: usize| OutboxFigures {
        unpublished: row.get(at),
        failed: row.get(at + 1),
        oldest_unpublished_age_seconds: row.get::<_, Option<i64>>(at + 2).map(|a| a.max(0)),
    };
    let mut stats = Stats {
        inbox: row.get(0),
        interchanges: row.get(1),
        messages: row.get(2),
        duplicates: row.get(3),
        drift: row.get(4),
        rejected: row.get(5),
        oldest_entry: row.get(12),
        newest_entry: row.get(13),
        refused: row.get(14),
        ..Stats::default()
    };
    stats.set_outboxes(OutboxKinds {
        message: figures(6),
        contrl: figures(9),
    });
    // The answers held, by kind. A TA1 is told by where it stands: our own X12 answer writes
    // its ISA at its fixed 106 bytes, then the TA1 (see `x12::ack::build`).
    let rows = c.query(
        "SELECT a.standard,
                (SELECT o.event_type FROM contrl_outbox o WHERE o.acknowledgement_id = a.id
                 ORDER BY o.send LIMIT 1),
                a.action IN ('4', 'R'),
                a.standard = 'x12' AND substring(a.bytes FROM 107 FOR 3) = 'TA1'::bytea,
                count(*)
         FROM acknowledgements a
         GROUP BY 1, 2, 3, 4",
        &[],
    )?;
    let mut counted = Vec::with_capacity(rows.len());
    for r in rows {
        counted.push(AcknowledgementRow {
            standard: r.get(0),
            event_type: r.get(1),
            negative: r.get(2),
            with_ta1: r.get(3),
            count: r.get(4),
        });
    }
    stats.acknowledgements = AcknowledgementFigures::of(counted);
    Ok(stats)
}

/// Every event `list` shows, with `list`'s filters ($1 to $12, see [`event_params`]): each
/// with the interchange its messages are read from (`iid`) or its one message's type
/// (`one_type`). A rejected file takes the key of its first error (by byte) that matches the key
/// filters, so that a file is found by any interchange in it whose UNB was read. As SQLite's.
/// A macro, for `concat!` to join it with `ts!`.
/// A listed rejected file's error (by its file's id `e.n` and its words `e.error`): its byte, for
/// the quote `list` prints from the 1,000 bytes around it.
macro_rules! quoted_at {
    () => {
        "(SELECT r.byte_offset FROM rejections r WHERE r.file_id = e.n
          AND r.error IS NOT DISTINCT FROM e.error ORDER BY r.byte_offset LIMIT 1)"
    };
}

macro_rules! events {
    () => {
        "
    SELECT * FROM (
        SELECT received_at AS time, $9::text AS status, source_file AS file, sender, recipient,
               control_ref, NULL::text AS error, NULL::bigint AS errors, NULL::text AS unit_ref,
               NULL::text AS event_type, NULL::bigint AS send, NULL::text AS detail, id AS n,
               id AS iid, NULL::text AS one_type, source_path, host, moved_to, standard
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
        SELECT f.last_seen_at, $10::text, f.source_file, r.sender, r.recipient, r.control_ref,
               r.error, (SELECT count(*) FROM rejections c WHERE c.file_id = f.id), NULL, NULL,
               NULL, NULL, f.id, NULL, NULL, NULL, NULL, NULL, r.standard
        FROM (SELECT g.id, g.source_file, g.last_seen_at,
                     (SELECT r.id FROM rejections r WHERE r.file_id = g.id
                        AND ($2::text IS NULL OR r.sender = $2)
                        AND ($3::text IS NULL OR r.recipient = $3)
                        AND ($4::text IS NULL OR r.control_ref = $4)
                      ORDER BY r.byte_offset LIMIT 1) AS rid
              FROM rejected_files g) f
        LEFT JOIN rejections r ON r.id = f.rid
        UNION ALL
        SELECT o.failed_at, $11::text, i.source_file, i.sender, i.recipient, i.control_ref,
               coalesce(o.last_error, ''), o.attempts::bigint, m.reference, o.event_type, NULL,
               NULL, o.id, NULL, m.message_type, NULL, NULL, NULL, i.standard
        FROM outbox o
        JOIN messages m ON m.id = o.message_id
        JOIN interchanges i ON i.id = m.interchange_id
        WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
        UNION ALL
        SELECT o.failed_at, $11::text, coalesce(i.source_file, ''), a.sender, a.recipient,
               a.control_ref, coalesce(o.last_error, ''), o.attempts::bigint, a.own_ref,
               o.event_type, o.send::bigint, NULL, o.id, NULL, 'CONTRL', NULL, NULL, NULL,
               a.standard
        FROM contrl_outbox o
        JOIN acknowledgements a ON a.id = o.acknowledgement_id
        LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                          AND i.control_ref = a.control_ref AND i.standard = a.standard
        WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
        UNION ALL
        SELECT last_seen_at, $12::text, source_file, sender, recipient, control_ref, statement,
               times_seen::bigint, message_ref, code, NULL, error, id, NULL, NULL, NULL, NULL,
               NULL, standard
        FROM refusals WHERE resolved_at IS NULL
    ) u
    WHERE ($1::text IS NULL OR status = $1)
      AND ($2::text IS NULL OR sender = $2)
      AND ($3::text IS NULL OR recipient = $3)
      AND ($4::text IS NULL OR control_ref = $4)
      AND ($5::text IS NULL OR file = $5 OR right(file, length($5) + 1) = '/' || $5)
      AND ($6::text IS NULL OR time >= $6::text::timestamptz)
      AND ($7::text IS NULL OR time < $7::text::timestamptz)
      AND ($13::text IS NULL OR standard = $13)
      AND ($8::text IS NULL OR one_type = $8
           OR EXISTS (SELECT 1 FROM messages m WHERE m.interchange_id = iid
                      AND m.message_type = $8))"
    };
}

/// `list`'s filters as $1 to $13 of [`EVENTS`]; `status` is `f.status`'s word, `standard`
/// `f.standard`'s.
fn event_params<'a>(
    f: &'a EventFilter,
    status: &'a Option<&'static str>,
    standard: &'a Option<&'static str>,
) -> [&'a (dyn ToSql + Sync); 13] {
    [
        status,
        &f.sender,
        &f.recipient,
        &f.control_ref,
        &f.file,
        &f.since,
        &f.until,
        &f.message_type,
        &NEW,
        &REJECTED,
        &FAILED,
        &REFUSED,
        standard,
    ]
}

pub(super) fn count_events(c: &mut impl GenericClient, f: &EventFilter) -> Result<u64, InboxError> {
    let n: i64 = c
        .query_one(
            concat!("SELECT count(*) FROM (", events!(), ") e"),
            &event_params(
                f,
                &f.status.map(Status::as_str),
                &f.standard.map(crate::standard::Standard::as_str),
            ),
        )?
        .get(0);
    Ok(n.max(0) as u64)
}

pub(super) fn events(
    c: &mut impl GenericClient,
    f: &EventFilter,
) -> Result<Vec<Event>, InboxError> {
    // The page first, then its message types: read for the rows shown only.
    let limit = i64::from(f.limit);
    let offset = i64::from(f.offset);
    let word = f.status.map(Status::as_str);
    let standard = f.standard.map(crate::standard::Standard::as_str);
    let mut params: Vec<&(dyn ToSql + Sync)> = event_params(f, &word, &standard).to_vec();
    params.push(&limit);
    params.push(&offset);
    let rows = c.query(
        concat!(
            "SELECT ",
            ts!("e.time"),
            ", e.status, e.file, e.sender, e.recipient, e.control_ref, e.error,
                    e.errors, e.unit_ref, e.event_type, e.send, e.detail, e.n,
                    coalesce(e.one_type, (SELECT string_agg(m.message_type, ',') FROM messages m
                                          WHERE m.interchange_id = e.iid)),
                    CASE WHEN e.one_type IS NOT NULL THEN 1
                         WHEN e.iid IS NOT NULL THEN (SELECT count(*) FROM messages m
                                                      WHERE m.interchange_id = e.iid) END,
                    e.source_path, e.host, e.moved_to,
                    CASE WHEN e.status = $10::text THEN least(",
            quoted_at!(),
            ", 500) END,
                    CASE WHEN e.status = $10::text THEN
                        (SELECT substring(f.bytes from greatest(1, ",
            quoted_at!(),
            " - 499)::int for 1000) FROM rejected_files f WHERE f.id = e.n) END,
                    e.standard
             FROM (",
            events!(),
            " ORDER BY time DESC, n DESC LIMIT $14 OFFSET $15) e
             ORDER BY e.time DESC, e.n DESC"
        ),
        &params,
    )?;
    rows.into_iter()
        .map(|r| {
            let status = status(r.get(1))?;
            let refused = status == Status::Refused;
            let error = if refused {
                // A refusal: its statement and reason, said in Rust (records.rs), once.
                Some(
                    crate::inbox::Refusal {
                        statement: r.get::<_, Option<String>>(6).unwrap_or_default(),
                        message_ref: r.get(8),
                        code: r.get::<_, Option<String>>(9).unwrap_or_default(),
                        error: r.get::<_, Option<String>>(11).unwrap_or_default(),
                        times_seen: r.get::<_, Option<i64>>(7).unwrap_or(1),
                    }
                    .to_string(),
                )
            } else {
                // A parked event: what it was and why, said in Rust (names.rs), once.
                match r.get::<_, Option<String>>(8) {
                    Some(reference) => Some(not_published(
                        &reference,
                        r.get(9),
                        r.get(10),
                        r.get::<_, Option<&str>>(6).unwrap_or_default(),
                    )),
                    None => r.get(6),
                }
            };
            Ok(Event {
                time: r.get(0),
                status,
                file: r.get(2),
                sender: r.get(3),
                recipient: r.get(4),
                control_ref: r.get(5),
                error,
                errors: if refused { None } else { r.get(7) },
                refusal_id: if refused { r.get(12) } else { None },
                message_types: Event::types_of(r.get(13)),
                messages: r.get::<_, Option<i64>>(14),
                event_id: if status == Status::Failed {
                    r.get(12)
                } else {
                    None
                },
                event_kind: crate::inbox::event_kind(status, r.get(10)),
                filed: Filed {
                    source_path: r.get(15),
                    host: r.get(16),
                    moved_to: r.get(17),
                },
                quote: Event::quote_of(r.get(18), r.get(19)),
                standard: r.get(20),
            })
        })
        .collect()
}

/// The CONTRLs `list --contrl` shows, with its filters ($1 to $5); an acknowledgement's latest
/// sending says whether it was delivered. A macro, for `concat!` to join it with `ts!`.
macro_rules! sent {
    () => {
        " FROM acknowledgements a
         LEFT JOIN contrl_outbox o ON o.id = (SELECT max(x.id) FROM contrl_outbox x
                                              WHERE x.acknowledgement_id = a.id)
         WHERE ($1::text IS NULL OR a.sender = $1)
           AND ($2::text IS NULL OR a.recipient = $2)
           AND ($3::text IS NULL OR a.control_ref = $3)
           AND ($4::text IS NULL OR a.created_at >= $4::text::timestamptz)
           AND ($5::text IS NULL OR a.created_at < $5::text::timestamptz)"
    };
}

pub(super) fn sent_contrls(
    c: &mut impl GenericClient,
    f: &EventFilter,
) -> Result<(Vec<SentContrl>, u64), InboxError> {
    let filters: [&(dyn ToSql + Sync); 5] =
        [&f.sender, &f.recipient, &f.control_ref, &f.since, &f.until];
    let total: i64 = c
        .query_one(concat!("SELECT count(*)", sent!()), &filters)?
        .get(0);
    let limit = i64::from(f.limit);
    let offset = i64::from(f.offset);
    let mut page: Vec<&(dyn ToSql + Sync)> = filters.to_vec();
    page.push(&limit);
    page.push(&offset);
    let sent = c
        .query(
            concat!(
                "SELECT ",
                ts!("a.created_at"),
                ", a.partner, a.sender, a.recipient, a.control_ref, a.own_ref, a.action,
                 a.error_code, ",
                ts!("o.published_at"),
                ", ",
                ts!("o.failed_at"),
                sent!(),
                " ORDER BY a.created_at DESC, a.id DESC LIMIT $6 OFFSET $7"
            ),
            &page,
        )?
        .into_iter()
        .map(|r| SentContrl {
            time: r.get(0),
            partner: r.get(1),
            sender: r.get(2),
            recipient: r.get(3),
            control_ref: r.get(4),
            own_ref: r.get(5),
            action: r.get(6),
            error_code: r.get(7),
            published_at: r.get(8),
            failed_at: r.get(9),
        })
        .collect();
    Ok((sent, total.max(0) as u64))
}

/// Every figure of `stats --by` for each day (UTC) from $1, pair of partners and (for
/// messages) type, as SQLite's `VOLUMES`: the partners' figures are summed in Rust for the
/// sender or the recipient (see `Volumes::add_row`).
const VOLUMES: &str = "
    SELECT 'interchanges', to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), sender,
           recipient, NULL::text, count(*)
    FROM interchanges WHERE ($1::text IS NULL OR received_at >= $1::text::timestamptz)
    GROUP BY 2, 3, 4
    UNION ALL
    SELECT 'messages', to_char(i.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), i.sender,
           i.recipient, m.message_type, count(*)
    FROM interchanges i JOIN messages m ON m.interchange_id = i.id
    WHERE ($1::text IS NULL OR i.received_at >= $1::text::timestamptz) GROUP BY 2, 3, 4, 5
    UNION ALL
    SELECT 'interchanges of type', to_char(i.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
           i.sender, i.recipient, m.message_type, count(DISTINCT i.id)
    FROM interchanges i JOIN messages m ON m.interchange_id = i.id
    WHERE ($1::text IS NULL OR i.received_at >= $1::text::timestamptz) GROUP BY 2, 3, 4, 5
    UNION ALL
    SELECT status, to_char(seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), sender, recipient, NULL,
           count(*)
    FROM sightings WHERE ($1::text IS NULL OR seen_at >= $1::text::timestamptz)
    GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT 'rejected', to_char(first_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), sender,
           recipient, NULL, count(*)
    FROM (SELECT min(first_seen_at) AS first_seen_at, sender, recipient FROM rejections
          WHERE sender IS NOT NULL GROUP BY file_id, sender, recipient, control_ref) r
    WHERE ($1::text IS NULL OR first_seen_at >= $1::text::timestamptz) GROUP BY 2, 3, 4";

pub(super) fn volumes(
    c: &mut impl GenericClient,
    by: VolumeBy,
    since: Option<&str>,
) -> Result<Vec<Volume>, InboxError> {
    let mut volumes = Volumes::new(by);
    for r in c.query(VOLUMES, &[&since])? {
        volumes.add_row(r.get(0), r.get(1), (r.get(2), r.get(3)), r.get(4), r.get(5));
    }
    Ok(volumes.into_rows())
}

pub(super) fn interchange_key(
    c: &mut impl GenericClient,
    id: i64,
) -> Result<Option<StoredKey>, InboxError> {
    Ok(c.query_opt(
        "SELECT standard, sender, recipient, control_ref FROM interchanges WHERE id = $1",
        &[&id],
    )?
    .map(|r| StoredKey {
        standard: r.get(0),
        sender: r.get(1),
        recipient: r.get(2),
        control_ref: r.get(3),
    }))
}

pub(super) fn status(word: &str) -> Result<Status, InboxError> {
    Status::from_stored(word)
        .ok_or_else(|| InboxError::Backend(format!("{word:?} is not a status").into()))
}

pub(super) fn key_history(
    c: &mut impl GenericClient,
    key: InterchangeKey<'_>,
) -> Result<KeyHistory, InboxError> {
    let standard = key.standard.as_str();
    let key: [&(dyn postgres::types::ToSql + Sync); 4] =
        [&key.sender, &key.recipient, &key.control_ref, &standard];
    let current: Option<i64> = c
        .query_opt(
            "SELECT interchange_id FROM inbox
             WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4",
            &key,
        )?
        .map(|r| r.get(0));
    let mut interchanges = Vec::new();
    for r in c.query(
        concat!(
            "SELECT id, sender, sender_qualifier, recipient, recipient_qualifier, control_ref,
                    syntax_id || ':' || syntax_version, prepared_date, prepared_time,
                    test_indicator, application_ref, sha256, source_file, ",
            ts!("received_at"),
            ", raw, raw_codec, source_path, host, moved_to, standard
             FROM interchanges WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4
             ORDER BY id"
        ),
        &key,
    )? {
        let id: i64 = r.get(0);
        let codec: String = r.get(15);
        let mut raw: Vec<u8> = r.get(14);
        if codec == "zstd" {
            raw = crate::inbox::decompress(&raw)?;
        }
        let messages = c
            .query(
                concat!(
                    "SELECT m.reference, m.message_type, m.version, m.release, m.agency,
                            m.segments::bigint, m.group_ref, ",
                    ts!("(SELECT o.published_at FROM outbox o WHERE o.message_id = m.id)"),
                    " FROM messages m WHERE m.interchange_id = $1 ORDER BY m.position"
                ),
                &[&id],
            )?
            .into_iter()
            .map(|m| StoredMessage {
                reference: m.get(0),
                message_type: m.get(1),
                version: m.get(2),
                release: m.get(3),
                agency: m.get(4),
                segments: m.get(5),
                group_ref: m.get(6),
                outbox_published_at: m.get(7),
            })
            .collect();
        interchanges.push(StoredInterchange {
            id,
            sender: r.get(1),
            sender_qualifier: r.get(2),
            recipient: r.get(3),
            recipient_qualifier: r.get(4),
            control_ref: r.get(5),
            standard: r.get(19),
            syntax: r.get(6),
            date: r.get(7),
            time: r.get(8),
            test: r.get::<_, Option<String>>(9).as_deref() == Some("1"),
            application_ref: r.get(10),
            sha256: r.get(11),
            source_file: r.get(12),
            received_at: r.get(13),
            filed: Filed {
                source_path: r.get(16),
                host: r.get(17),
                moved_to: r.get(18),
            },
            in_inbox: current == Some(id),
            messages,
            raw,
        });
    }
    let mut sightings = Vec::new();
    for r in c.query(
        concat!(
            "SELECT status, sha256, stored_sha256, source_file, ",
            ts!("seen_at"),
            ", source_path, host, moved_to
             FROM sightings WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4
             ORDER BY id"
        ),
        &key,
    )? {
        sightings.push(Sighting {
            status: status(r.get(0))?,
            sha256: r.get(1),
            stored_sha256: r.get(2),
            source_file: r.get(3),
            seen_at: r.get(4),
            filed: Filed {
                source_path: r.get(5),
                host: r.get(6),
                moved_to: r.get(7),
            },
        });
    }
    let mut refusals = Vec::new();
    for r in c.query(
        concat!(
            "SELECT id, sha256, source_file, statement, message_ref, code, error,
                    times_seen::bigint, ",
            ts!("first_seen_at"),
            ", ",
            ts!("last_seen_at"),
            ", ",
            ts!("resolved_at"),
            ", resolved_as
             FROM refusals WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4
             ORDER BY id"
        ),
        &key,
    )? {
        refusals.push(StoredRefusal {
            id: r.get(0),
            sha256: r.get(1),
            source_file: r.get(2),
            refusal: crate::inbox::Refusal {
                statement: r.get(3),
                message_ref: r.get(4),
                code: r.get(5),
                error: r.get(6),
                times_seen: r.get(7),
            },
            first_seen_at: r.get(8),
            last_seen_at: r.get(9),
            resolved_at: r.get(10),
            resolved_as: r.get(11),
        });
    }
    let mut rejections = Vec::new();
    for r in c.query(
        concat!(
            "SELECT r.error, r.kind, r.byte_offset, r.source_file, r.file_sha256, r.file_size,
                    r.truncated, ",
            ts!("r.first_seen_at"),
            ", ",
            ts!("r.last_seen_at"),
            ", r.times_seen::bigint, f.bytes
             FROM rejections r LEFT JOIN rejected_files f ON f.id = r.file_id
             WHERE r.sender = $1 AND r.recipient = $2 AND r.control_ref = $3 AND r.standard = $4
             ORDER BY r.id"
        ),
        &key,
    )? {
        rejections.push(StoredRejection {
            error: r.get(0),
            kind: r.get(1),
            byte_offset: r.get(2),
            source_file: r.get(3),
            file_sha256: r.get(4),
            file_size: r.get(5),
            truncated: r.get(6),
            first_seen_at: r.get(7),
            last_seen_at: r.get(8),
            times_seen: r.get(9),
            bytes: r.get::<_, Option<Vec<u8>>>(10).unwrap_or_default(),
        });
    }
    Ok(KeyHistory {
        interchanges,
        sightings,
        refusals,
        rejections,
    })
}

/// Adds this host's counter increments: one row per host and name, so that hosts never wait
/// for each other on a shared row.
pub(super) fn add_counters(
    c: &mut impl GenericClient,
    host: &str,
    counts: &BTreeMap<&'static str, i64>,
) -> Result<(), InboxError> {
    if counts.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = counts.keys().copied().collect();
    let values: Vec<i64> = counts.values().copied().collect();
    c.execute(
        "INSERT INTO counters (host, name, value)
         SELECT $1, n, v FROM unnest($2::text[], $3::bigint[]) AS t(n, v)
         ON CONFLICT (host, name) DO UPDATE SET value = counters.value + excluded.value",
        &[&host, &names, &values],
    )?;
    Ok(())
}

/// A counter, summed over the hosts.
pub(super) fn counter(c: &mut impl GenericClient, name: &str) -> Result<i64, InboxError> {
    Ok(c.query_one(
        "SELECT coalesce(sum(value), 0)::bigint FROM counters WHERE name = $1",
        &[&name],
    )?
    .get(0))
}

/// The bytes the inbox's tables take, indexes and TOAST included.
pub(super) fn size_bytes(c: &mut impl GenericClient, schema: &str) -> Result<u64, InboxError> {
    let n: i64 = c
        .query_one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
             FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
             WHERE s.nspname = $1 AND c.relkind = 'r'",
            &[&schema],
        )?
        .get(0);
    Ok(n.max(0) as u64)
}
