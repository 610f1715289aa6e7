//! The queries behind `stats`, `list` and `show`, the batched deletes of `purge`, the rejected
//! pieces, and the per-host counters, on PostgreSQL. Times come out as the SQLite inbox stores
//! them (RFC 3339 UTC with milliseconds), so that both backends print the same.

use std::collections::BTreeMap;

use postgres::GenericClient;

use crate::edifact::EnvelopeError;
use crate::inbox::{
    ContrlEvent, DeliveryRecord, Event, EventFilter, InboxError, KeyHistory, NewAcknowledgement,
    OutboxEvent, OutboxFigures, OutboxKinds, PurgeTarget, REJECTED_BYTES_LIMIT, RejectedFile,
    Resend, Sighting, Stats, StoredAcknowledgement, StoredInterchange, StoredMessage,
};
use crate::status::Status;

/// A `timestamptz` column as the text both backends show.
macro_rules! ts {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        )
    };
}

pub(super) fn stats(c: &mut impl GenericClient) -> Result<Stats, InboxError> {
    let row = c.query_one(
        concat!(
            "SELECT (SELECT count(*) FROM inbox), (SELECT count(*) FROM interchanges),
                    (SELECT count(*) FROM messages),
                    (SELECT count(*) FROM sightings WHERE status = 'duplicate'),
                    (SELECT count(*) FROM sightings WHERE status = 'drift'),
                    (SELECT count(*) FROM rejected_files),
                    (SELECT count(*) FROM outbox WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM outbox
                     WHERE published_at IS NULL AND failed_at IS NOT NULL),
                    (SELECT greatest(0, extract(epoch FROM now() - min(created_at)))::bigint
                     FROM outbox WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM contrl_outbox
                     WHERE published_at IS NULL AND failed_at IS NULL),
                    (SELECT count(*) FROM contrl_outbox
                     WHERE published_at IS NULL AND failed_at IS NOT NULL),
                    (SELECT greatest(0, extract(epoch FROM now() - min(created_at)))::bigint
                     FROM contrl_outbox WHERE published_at IS NULL AND failed_at IS NULL), ",
            ts!("(SELECT min(received_at) FROM inbox)"),
            ", ",
            ts!("(SELECT max(received_at) FROM inbox)")
        ),
        &[],
    )?;
    let figures = |at: usize| OutboxFigures {
        unpublished: row.get(at),
        failed: row.get(at + 1),
        oldest_unpublished_age_seconds: row.get(at + 2),
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
        ..Stats::default()
    };
    stats.set_outboxes(OutboxKinds {
        message: figures(6),
        contrl: figures(9),
    });
    Ok(stats)
}

pub(super) fn events(
    c: &mut impl GenericClient,
    f: &EventFilter,
) -> Result<Vec<Event>, InboxError> {
    let rows = c.query(
        concat!(
            "SELECT ",
            ts!("time"),
            ", status, file, sender, recipient, control_ref, error, errors FROM (
                 SELECT received_at AS time, 'new' AS status, source_file AS file, sender,
                        recipient, control_ref, NULL::text AS error, NULL::bigint AS errors,
                        id AS n
                 FROM interchanges
                 UNION ALL
                 SELECT seen_at, status, source_file, sender, recipient, control_ref, NULL, NULL,
                        id
                 FROM sightings
                 UNION ALL
                 SELECT f.last_seen_at, 'rejected', f.source_file, NULL, NULL, NULL,
                        (SELECT r.error FROM rejections r WHERE r.file_id = f.id
                         ORDER BY r.byte_offset LIMIT 1),
                        (SELECT count(*) FROM rejections r WHERE r.file_id = f.id), f.id
                 FROM rejected_files f
                 UNION ALL
                 SELECT o.failed_at, 'failed', i.source_file, i.sender, i.recipient,
                        i.control_ref,
                        'message ' || m.reference || ' (' || o.event_type
                            || ') not published: ' || coalesce(o.last_error, ''),
                        o.attempts::bigint, o.id
                 FROM outbox o
                 JOIN messages m ON m.id = o.message_id
                 JOIN interchanges i ON i.id = m.interchange_id
                 WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
                 UNION ALL
                 SELECT o.failed_at, 'failed', coalesce(i.source_file, ''), a.sender,
                        a.recipient, a.control_ref,
                        'CONTRL ' || a.own_ref || ' (' || o.event_type || ', sending '
                            || o.send || ') not published: ' || coalesce(o.last_error, ''),
                        o.attempts::bigint, o.id
                 FROM contrl_outbox o
                 JOIN acknowledgements a ON a.id = o.acknowledgement_id
                 LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                                   AND i.control_ref = a.control_ref
                 WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
             ) e
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR sender = $2)
               AND ($3::text::timestamptz IS NULL OR time >= $3::text::timestamptz)
             ORDER BY time DESC, n DESC
             LIMIT $4"
        ),
        &[
            &f.status.map(Status::as_str),
            &f.sender,
            &f.since,
            &i64::from(f.limit),
        ],
    )?;
    rows.into_iter()
        .map(|r| {
            Ok(Event {
                time: r.get(0),
                status: status(r.get(1))?,
                file: r.get(2),
                sender: r.get(3),
                recipient: r.get(4),
                control_ref: r.get(5),
                error: r.get(6),
                errors: r.get(7),
            })
        })
        .collect()
}

fn status(word: &str) -> Result<Status, InboxError> {
    Status::from_stored(word)
        .ok_or_else(|| InboxError::Backend(format!("{word:?} is not a status").into()))
}

pub(super) fn key_history(
    c: &mut impl GenericClient,
    sender: &str,
    recipient: &str,
    control_ref: &str,
) -> Result<KeyHistory, InboxError> {
    let key: [&(dyn postgres::types::ToSql + Sync); 3] = [&sender, &recipient, &control_ref];
    let current: Option<i64> = c
        .query_opt(
            "SELECT interchange_id FROM inbox
             WHERE sender = $1 AND recipient = $2 AND control_ref = $3",
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
            ", raw, raw_codec
             FROM interchanges WHERE sender = $1 AND recipient = $2 AND control_ref = $3
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
            syntax: r.get(6),
            date: r.get(7),
            time: r.get(8),
            test: r.get::<_, Option<String>>(9).as_deref() == Some("1"),
            application_ref: r.get(10),
            sha256: r.get(11),
            source_file: r.get(12),
            received_at: r.get(13),
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
            " FROM sightings WHERE sender = $1 AND recipient = $2 AND control_ref = $3
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
        });
    }
    Ok(KeyHistory {
        interchanges,
        sightings,
    })
}

pub(super) fn count_older(
    c: &mut impl GenericClient,
    target: PurgeTarget,
    cutoff: &str,
) -> Result<i64, InboxError> {
    let sql = match target {
        PurgeTarget::Inbox => {
            "SELECT count(*) FROM inbox WHERE received_at < $1::text::timestamptz"
        }
        PurgeTarget::Sightings => {
            "SELECT count(*) FROM sightings WHERE seen_at < $1::text::timestamptz"
        }
        PurgeTarget::Rejections => {
            "SELECT count(*) FROM rejected_files WHERE last_seen_at < $1::text::timestamptz"
        }
        PurgeTarget::Deliveries => {
            "SELECT count(*) FROM deliveries WHERE seen_at < $1::text::timestamptz"
        }
    };
    Ok(c.query_one(sql, &[&cutoff])?.get(0))
}

/// Deletes up to `limit` rows older than `cutoff`, passing over rows another purge has locked
/// (it deletes those), so two purges at once neither wait for each other nor fail.
pub(super) fn delete_older(
    c: &mut impl GenericClient,
    target: PurgeTarget,
    cutoff: &str,
    limit: u32,
) -> Result<usize, InboxError> {
    let limit = i64::from(limit);
    let n = match target {
        PurgeTarget::Inbox => c.execute(
            "DELETE FROM inbox WHERE (sender, recipient, control_ref) IN (
                 SELECT sender, recipient, control_ref FROM inbox
                 WHERE received_at < $1::text::timestamptz ORDER BY received_at LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::Sightings => c.execute(
            "DELETE FROM sightings WHERE id IN (
                 SELECT id FROM sightings WHERE seen_at < $1::text::timestamptz ORDER BY seen_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::Deliveries => c.execute(
            "DELETE FROM deliveries WHERE id IN (
                 SELECT id FROM deliveries WHERE seen_at < $1::text::timestamptz ORDER BY seen_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        // A rejected file's errors go first (they point at it), in the same transaction.
        PurgeTarget::Rejections => {
            let ids: Vec<i64> = c
                .query(
                    "SELECT id FROM rejected_files WHERE last_seen_at < $1::text::timestamptz
                     ORDER BY last_seen_at LIMIT $2 FOR UPDATE SKIP LOCKED",
                    &[&cutoff, &limit],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            c.execute("DELETE FROM rejections WHERE file_id = ANY($1)", &[&ids])?;
            c.execute("DELETE FROM rejected_files WHERE id = ANY($1)", &[&ids])?
        }
    };
    Ok(n as usize)
}

pub(super) fn oldest_entry(c: &mut impl GenericClient) -> Result<Option<String>, InboxError> {
    Ok(c.query_one(
        concat!("SELECT ", ts!("(SELECT min(received_at) FROM inbox)")),
        &[],
    )?
    .get(0))
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

/// `text` as a PostgreSQL text column takes it: a reason quotes the input's bytes, and a NUL
/// among them would make the server refuse the row (22021) and with it the whole batch.
pub(super) fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        text.replace('\0', "\\x00").into()
    } else {
        text.into()
    }
}

/// Allocates the partner's next CONTRL control reference (the counter's row stays locked until
/// the commit, so hosts answering one partner take turns) and stores the CONTRL under it.
pub(super) fn record_acknowledgement(
    c: &mut impl GenericClient,
    ack: &NewAcknowledgement<'_>,
) -> Result<String, InboxError> {
    let n: i64 = c
        .query_one(
            "INSERT INTO contrl_counters (partner, next) VALUES ($1, 2)
             ON CONFLICT (partner) DO UPDATE SET next = contrl_counters.next + 1
             RETURNING next - 1",
            &[&storable(ack.partner)],
        )?
        .get(0);
    let own_ref = crate::inbox::contrl_reference(n);
    let bytes = (ack.build)(&own_ref);
    // The host's clock, which also wrote the CONTRL's UNB S004: one time for both.
    c.execute(
        "WITH a AS (
             INSERT INTO acknowledgements (sender, recipient, control_ref, partner, own_ref,
                 action, error_code, bytes, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::timestamptz)
             RETURNING id)
         INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         SELECT id, 1, 'edifact.CONTRL.outbound', $9::text::timestamptz, $10 FROM a",
        &[
            &storable(ack.sender),
            &storable(ack.recipient),
            &storable(ack.control_ref),
            &storable(ack.partner),
            &own_ref,
            &ack.action,
            &ack.error_code,
            &bytes,
            &ack.created_at,
            &storable(ack.sending),
        ],
    )?;
    Ok(own_ref)
}

/// The first CONTRL of a key (not a rejection as a duplicate) queued again for `sending`,
/// where no event of it was queued for that sending before.
pub(super) fn resend_acknowledgement(
    c: &mut impl GenericClient,
    (sender, recipient, control_ref): (&str, &str, &str),
    sending: Option<&str>,
    created_at: &str,
) -> Result<Resend, InboxError> {
    let first = c.query_opt(
        "SELECT id, own_ref FROM acknowledgements
         WHERE sender = $1 AND recipient = $2 AND control_ref = $3
           AND (action <> '4' OR error_code IS NULL OR error_code <> '26')
         ORDER BY id LIMIT 1",
        &[
            &storable(sender),
            &storable(recipient),
            &storable(control_ref),
        ],
    )?;
    let Some(first) = first else {
        return Ok(Resend::Unanswered);
    };
    let (id, own_ref): (i64, String) = (first.get(0), first.get(1));
    let Some(sending) = sending else {
        return Ok(Resend::AlreadySent);
    };
    let queued = c.execute(
        "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         SELECT $1, max(send) + 1, 'edifact.CONTRL.outbound', $2::text::timestamptz, $3
         FROM contrl_outbox WHERE acknowledgement_id = $1
         ON CONFLICT (acknowledgement_id, source) DO NOTHING",
        &[&id, &created_at, &storable(sending)],
    )?;
    Ok(if queued == 1 {
        Resend::Queued(own_ref)
    } else {
        Resend::AlreadySent
    })
}

/// The CONTRLs to deliver, claimed as events are.
pub(super) fn pending_contrl(
    c: &mut impl GenericClient,
    pass: &str,
    retry_after_seconds: f64,
    limit: u32,
) -> Result<Vec<ContrlEvent>, InboxError> {
    Ok(c.query(
        concat!(
            "SELECT o.id, o.event_type, ",
            ts!("o.created_at"),
            ", o.attempts, o.send, a.recipient, a.sender, a.partner, a.own_ref,
                        a.control_ref, a.bytes
                 FROM contrl_outbox o
                 JOIN acknowledgements a ON a.id = o.acknowledgement_id
                 WHERE o.published_at IS NULL AND o.failed_at IS NULL
                   AND (o.last_attempt_at IS NULL
                        OR (o.last_attempt_pass IS DISTINCT FROM $1
                            AND o.last_attempt_at <= now() - make_interval(secs => $2)))
                 ORDER BY o.id LIMIT $3"
        ),
        &[&pass, &retry_after_seconds, &i64::from(limit)],
    )?
    .into_iter()
    .map(|r| ContrlEvent {
        row: r.get(0),
        event_type: r.get(1),
        created_at: r.get(2),
        attempts: i64::from(r.get::<_, i32>(3)),
        send: i64::from(r.get::<_, i32>(4)),
        sender: r.get(5),
        recipient: r.get(6),
        partner: r.get(7),
        own_ref: r.get(8),
        control_ref: r.get(9),
        bytes: r.get(10),
    })
    .collect())
}

/// The CONTRLs stored for a key, oldest first.
pub(super) fn acknowledgements(
    c: &mut impl GenericClient,
    sender: &str,
    recipient: &str,
    control_ref: &str,
) -> Result<Vec<StoredAcknowledgement>, InboxError> {
    Ok(c.query(
        concat!(
            "SELECT own_ref, action, error_code, ",
            ts!("created_at"),
            ", bytes FROM acknowledgements
                 WHERE sender = $1 AND recipient = $2 AND control_ref = $3 ORDER BY id"
        ),
        &[&sender, &recipient, &control_ref],
    )?
    .into_iter()
    .map(|r| StoredAcknowledgement {
        own_ref: r.get(0),
        action: r.get(1),
        error_code: r.get(2),
        created_at: r.get(3),
        bytes: r.get(4),
    })
    .collect())
}

/// Records deliveries taken from a broker, in one statement.
pub(super) fn record_deliveries(
    c: &mut impl GenericClient,
    deliveries: &[DeliveryRecord<'_>],
) -> Result<(), InboxError> {
    let sources: Vec<_> = deliveries.iter().map(|d| storable(d.source)).collect();
    let names: Vec<_> = deliveries
        .iter()
        .map(|d| d.filename.map(storable))
        .collect();
    let counts: Vec<i32> = deliveries
        .iter()
        .map(|d| i32::try_from(d.delivery_count).unwrap_or(i32::MAX))
        .collect();
    let sizes: Vec<i64> = deliveries.iter().map(|d| d.size as i64).collect();
    c.execute(
        "INSERT INTO deliveries (source, filename, delivery_count, size, seen_at)
         SELECT s, f, n, z, now() FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[])
             AS d (s, f, n, z)",
        &[&sources, &names, &counts, &sizes],
    )?;
    Ok(())
}

/// Records a rejected file's bytes once; the same file with the same content only counts again.
pub(super) fn record_rejected_file(
    c: &mut impl GenericClient,
    source_file: &str,
    bytes: &[u8],
    sha256: &str,
) -> Result<i64, InboxError> {
    let kept = &bytes[..bytes.len().min(REJECTED_BYTES_LIMIT)];
    Ok(c.query_one(
        "INSERT INTO rejected_files (source_file, file_sha256, file_size, bytes, truncated,
             first_seen_at, last_seen_at)
         VALUES ($1, $2, $3, $4, $5, now(), now())
         ON CONFLICT (source_file, file_sha256)
         DO UPDATE SET last_seen_at = excluded.last_seen_at,
                       times_seen = rejected_files.times_seen + 1
         RETURNING id",
        &[
            &storable(source_file),
            &sha256,
            &(bytes.len() as i64),
            &kept,
            &(kept.len() < bytes.len()),
        ],
    )?
    .get(0))
}

/// Records one error of a rejected file; the same error of the same file only counts again.
pub(super) fn record_rejection(
    c: &mut impl GenericClient,
    file: &RejectedFile,
    source_file: &str,
    error: &EnvelopeError,
) -> Result<(), InboxError> {
    c.execute(
        "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
             first_seen_at, last_seen_at, file_size, truncated, file_id)
         VALUES ($1, $2, $3, $4, $5, now(), now(), $6, $7, $8)
         ON CONFLICT (source_file, file_sha256, kind, byte_offset)
         DO UPDATE SET last_seen_at = excluded.last_seen_at,
                       times_seen = rejections.times_seen + 1",
        &[
            &storable(source_file),
            &file.sha256,
            &storable(&error.to_string()),
            &error.code(),
            &(error.offset as i64),
            &(file.size as i64),
            &(file.size > REJECTED_BYTES_LIMIT),
            &file.id,
        ],
    )?;
    Ok(())
}

/// Up to `limit` events to publish, oldest first: not published, not parked, not tried in
/// `pass`, and not tried within the last `retry_after_seconds` (by the server's clock). With
/// `whole`, every such event of each interchange among them (hosts drawing ids from one
/// sequence interleave them).
pub(super) fn pending_events(
    c: &mut impl GenericClient,
    pass: &str,
    retry_after_seconds: f64,
    limit: u32,
    whole: bool,
) -> Result<Vec<OutboxEvent>, InboxError> {
    macro_rules! pending {
        () => {
            "o.published_at IS NULL AND o.failed_at IS NULL
               AND (o.last_attempt_at IS NULL
                    OR (o.last_attempt_pass IS DISTINCT FROM $1
                        AND o.last_attempt_at <= now() - make_interval(secs => $2)))"
        };
    }
    macro_rules! columns {
        () => {
            concat!(
                "SELECT o.id, o.event_type, ",
                ts!("o.created_at"),
                ", o.attempts::bigint, i.id, i.sender, i.sender_qualifier, i.recipient,
                    i.recipient_qualifier, i.control_ref, i.syntax_id, i.syntax_version,
                    m.group_ref, m.reference, m.message_type, m.version, m.release, m.agency,
                    m.raw_start, m.raw_end"
            )
        };
    }
    // Two statements, not one with a flag: a plan made for a bound flag may scan the outbox
    // in the branch the flag switches off.
    let sql = if whole {
        concat!(
            "WITH first AS (
                 SELECT o.id AS oid, m.interchange_id AS iid
                 FROM outbox o JOIN messages m ON m.id = o.message_id
                 WHERE ",
            pending!(),
            " ORDER BY o.id LIMIT $3) ",
            columns!(),
            " FROM messages m
             JOIN outbox o ON o.message_id = m.id
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE m.interchange_id IN (SELECT iid FROM first) AND ",
            pending!(),
            " ORDER BY o.id"
        )
    } else {
        concat!(
            columns!(),
            " FROM outbox o
             JOIN messages m ON m.id = o.message_id
             JOIN interchanges i ON i.id = m.interchange_id
             WHERE ",
            pending!(),
            " ORDER BY o.id LIMIT $3"
        )
    };
    let rows = c.query(sql, &[&pass, &retry_after_seconds, &i64::from(limit)])?;
    Ok(rows
        .iter()
        .map(|r| OutboxEvent {
            row: r.get(0),
            event_type: r.get(1),
            created_at: r.get(2),
            attempts: r.get(3),
            interchange_id: r.get(4),
            sender: r.get(5),
            sender_qualifier: r.get(6),
            recipient: r.get(7),
            recipient_qualifier: r.get(8),
            control_ref: r.get(9),
            syntax_id: r.get(10),
            syntax_version: r.get(11),
            group_ref: r.get(12),
            message_ref: r.get(13),
            message_type: r.get(14),
            version: r.get(15),
            release: r.get(16),
            agency: r.get(17),
            raw_start: r.get::<_, i64>(18).max(0) as usize,
            raw_end: r.get::<_, i64>(19).max(0) as usize,
        })
        .collect())
}

/// Interchanges' bytes as received, for their events' payloads, in one round trip.
pub(super) fn interchange_bytes(
    c: &mut impl GenericClient,
    ids: &[i64],
) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError> {
    let mut out = std::collections::HashMap::with_capacity(ids.len());
    for row in c.query(
        "SELECT id, raw, raw_codec FROM interchanges WHERE id = ANY($1)",
        &[&ids],
    )? {
        let raw: Vec<u8> = row.get(1);
        let codec: &str = row.get(2);
        let raw = if codec == "zstd" {
            crate::inbox::decompress(&raw)?
        } else {
            raw
        };
        out.insert(row.get(0), raw);
    }
    Ok(out)
}
