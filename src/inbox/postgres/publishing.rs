//! The outboxes' relay: the publisher's advisory lock, its events claimed in order, marked
//! published or failed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use postgres::GenericClient;

use super::{PgInbox, storable};

use crate::inbox::names::Counter;
use crate::inbox::postgres::reports::add_counters;
use crate::inbox::{EventEnvelope, InboxError, Outbox, OutboxEvent, Publishing};

impl Publishing for PgInbox {
    /// A session-level advisory lock on this connection: the server gives it up when the
    /// process dies or the connection drops, so a killed publisher never blocks the next.
    fn lock_publisher(&mut self) -> Result<bool, InboxError> {
        Ok(self
            .client
            .get_mut()
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended('edi-inbox publish ' || $1, 0))",
                &[&self.target.schema],
            )?
            .get(0))
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
            &mut **self.client.borrow_mut(),
            pass,
            retry_after.as_secs_f64(),
            limit,
            whole,
            leave_out,
        )
    }

    fn interchange_bytes(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError> {
        interchange_bytes(&mut **self.client.borrow_mut(), ids)
    }

    fn mark_published(&mut self, outbox: Outbox, rows: &[i64]) -> Result<(), InboxError> {
        let host = self.host.clone();
        let mut tx = self.client.get_mut().transaction()?;
        let n = tx.execute(
            &format!(
                "UPDATE {} SET published_at = now(), last_error = NULL
                 WHERE id = ANY($1) AND published_at IS NULL",
                outbox.table()
            ),
            &[&rows],
        )?;
        let counts = BTreeMap::from([(Counter::PublishPublished.name(), n as i64)]);
        add_counters(&mut tx, &host, &counts)?;
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
        let host = self.host.clone();
        let mut tx = self.client.get_mut().transaction()?;
        let parked = tx
            .query(
                &format!(
                    "UPDATE {} SET attempts = attempts + 1, last_error = $2,
                            last_attempt_at = now(), last_attempt_pass = $3,
                            failed_at = CASE WHEN attempts + 1 >= $4 THEN now() END
                     WHERE id = ANY($1) AND published_at IS NULL
                     RETURNING failed_at IS NOT NULL",
                    outbox.table()
                ),
                &[
                    &rows,
                    &storable(error),
                    &pass,
                    &(max_attempts.min(i32::MAX as u32) as i32),
                ],
            )?
            .iter()
            .filter(|r| r.get::<_, bool>(0))
            .count();
        let counts = BTreeMap::from([
            (Counter::PublishFailed.name(), rows.len() as i64),
            (Counter::PublishParked.name(), parked as i64),
        ]);
        add_counters(&mut tx, &host, &counts)?;
        tx.commit()?;
        Ok(parked)
    }

    fn retry_parked(&mut self, outbox: Outbox, id: Option<i64>) -> Result<Vec<i64>, InboxError> {
        let mut ids: Vec<i64> = self
            .client
            .get_mut()
            .query(
                &format!(
                    "UPDATE {} SET failed_at = NULL, attempts = 0, last_attempt_at = NULL,
                            last_attempt_pass = NULL
                     WHERE failed_at IS NOT NULL AND published_at IS NULL
                       AND ($1::bigint IS NULL OR id = $1)
                     RETURNING id",
                    outbox.table()
                ),
                &[&id],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }
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
    leave_out: &[i64],
) -> Result<Vec<OutboxEvent>, InboxError> {
    macro_rules! pending {
        () => {
            "o.published_at IS NULL AND o.failed_at IS NULL
               AND (o.last_attempt_at IS NULL
                    OR (o.last_attempt_pass IS DISTINCT FROM $1
                        AND o.last_attempt_at <= now() - make_interval(secs => $2)))
               AND NOT (o.id = ANY($4))"
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
                    m.raw_start, m.raw_end, i.standard"
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
    let rows = c.query(
        sql,
        &[&pass, &retry_after_seconds, &i64::from(limit), &leave_out],
    )?;
    // The events of one interchange share its envelope.
    let mut envelopes: HashMap<i64, Arc<EventEnvelope>> = HashMap::new();
    Ok(rows
        .iter()
        .map(|r| OutboxEvent {
            row: r.get(0),
            event_type: r.get(1),
            created_at: r.get(2),
            attempts: r.get(3),
            interchange_id: r.get(4),
            envelope: envelopes
                .entry(r.get(4))
                .or_insert_with(|| {
                    Arc::new(EventEnvelope {
                        sender: r.get(5),
                        sender_qualifier: r.get(6),
                        recipient: r.get(7),
                        recipient_qualifier: r.get(8),
                        control_ref: r.get(9),
                        syntax_id: r.get(10),
                        syntax_version: r.get(11),
                        standard: r.get(20),
                    })
                })
                .clone(),
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
