//! What `stats`, `list`, `show` and the metrics read, and the per-host counters.

use std::collections::BTreeMap;

use postgres::GenericClient;

use super::PgInbox;
use crate::inbox::DriftedCopy;
use crate::inbox::names::{Counter, not_published};
use crate::inbox::{
    Event, EventFilter, Filed, InboxError, KeyHistory, OutboxFigures, OutboxKinds, Reports,
    Sighting, Stats, StoredInterchange, StoredMessage, StoredRefusal,
};
use crate::status::Status;

impl Reports for PgInbox {
    fn stats(&self) -> Result<Stats, InboxError> {
        stats(&mut *self.client.borrow_mut())
    }

    fn size_bytes(&self) -> u64 {
        size_bytes(&mut *self.client.borrow_mut(), &self.target.schema).unwrap_or(0)
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError> {
        events(&mut *self.client.borrow_mut(), filter)
    }

    fn key_history(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<KeyHistory, InboxError> {
        key_history(
            &mut *self.client.borrow_mut(),
            sender,
            recipient,
            control_ref,
        )
    }

    fn drifted_copies(
        &self,
        sender: &str,
        recipient: &str,
        control_ref: &str,
    ) -> Result<Vec<DriftedCopy>, InboxError> {
        let mut copies = Vec::new();
        for r in self.client.borrow_mut().query(
            concat!(
                "SELECT sha256, stored_sha256, source_file, ",
                ts!("seen_at"),
                ", payload FROM sightings
                 WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND status = 'drift'
                   AND payload IS NOT NULL
                 ORDER BY id"
            ),
            &[&sender, &recipient, &control_ref],
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
        counter(&mut *self.client.borrow_mut(), c.name())
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
            ts!("(SELECT max(received_at) FROM inbox)"),
            ", (SELECT count(*) FROM refusals WHERE resolved_at IS NULL)"
        ),
        &[&Status::Duplicate.as_str(), &Status::Drift.as_str()],
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
        refused: row.get(14),
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
            ", status, file, sender, recipient, control_ref, error, errors, unit_ref, event_type,
               send, detail, n, source_path, host, moved_to FROM (
                 SELECT received_at AS time, $5::text AS status, source_file AS file, sender,
                        recipient, control_ref, NULL::text AS error, NULL::bigint AS errors,
                        NULL::text AS unit_ref, NULL::text AS event_type, NULL::bigint AS send,
                        NULL::text AS detail, id AS n, source_path, host, moved_to
                 FROM interchanges
                 UNION ALL
                 SELECT seen_at, status, source_file, sender, recipient, control_ref, NULL, NULL,
                        NULL, NULL, NULL, NULL, id, source_path, host, moved_to
                 FROM sightings
                 UNION ALL
                 SELECT f.last_seen_at, $6::text, f.source_file, NULL, NULL, NULL,
                        (SELECT r.error FROM rejections r WHERE r.file_id = f.id
                         ORDER BY r.byte_offset LIMIT 1),
                        (SELECT count(*) FROM rejections r WHERE r.file_id = f.id), NULL, NULL,
                        NULL, NULL, f.id, NULL, NULL, NULL
                 FROM rejected_files f
                 UNION ALL
                 SELECT o.failed_at, $7::text, i.source_file, i.sender, i.recipient,
                        i.control_ref, coalesce(o.last_error, ''), o.attempts::bigint,
                        m.reference, o.event_type, NULL, NULL, o.id, NULL, NULL, NULL
                 FROM outbox o
                 JOIN messages m ON m.id = o.message_id
                 JOIN interchanges i ON i.id = m.interchange_id
                 WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
                 UNION ALL
                 SELECT o.failed_at, $7::text, coalesce(i.source_file, ''), a.sender,
                        a.recipient, a.control_ref, coalesce(o.last_error, ''),
                        o.attempts::bigint, a.own_ref, o.event_type, o.send::bigint, NULL, o.id,
                        NULL, NULL, NULL
                 FROM contrl_outbox o
                 JOIN acknowledgements a ON a.id = o.acknowledgement_id
                 LEFT JOIN inbox i ON i.sender = a.sender AND i.recipient = a.recipient
                                   AND i.control_ref = a.control_ref
                 WHERE o.failed_at IS NOT NULL AND o.published_at IS NULL
                 UNION ALL
                 SELECT last_seen_at, $8::text, source_file, sender, recipient, control_ref,
                        statement, times_seen::bigint, message_ref, code, NULL, error, id,
                        NULL, NULL, NULL
                 FROM refusals WHERE resolved_at IS NULL
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
            &Status::New.as_str(),
            &Status::Rejected.as_str(),
            &Status::Failed.as_str(),
            &Status::Refused.as_str(),
        ],
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
                event_id: if status == Status::Failed {
                    r.get(12)
                } else {
                    None
                },
                event_kind: crate::inbox::event_kind(status, r.get(10)),
                filed: Filed {
                    source_path: r.get(13),
                    host: r.get(14),
                    moved_to: r.get(15),
                },
            })
        })
        .collect()
}

pub(super) fn status(word: &str) -> Result<Status, InboxError> {
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
            ", raw, raw_codec, source_path, host, moved_to
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
             FROM sightings WHERE sender = $1 AND recipient = $2 AND control_ref = $3
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
             FROM refusals WHERE sender = $1 AND recipient = $2 AND control_ref = $3
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
    Ok(KeyHistory {
        interchanges,
        sightings,
        refusals,
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
