//! The CONTRLs: stored with their decisions, sent again for a partner's resending, claimed for
//! delivery.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteInbox;
use crate::inbox::names::{NOT_RESENT, NOT_RESENT_X12, REJECTING};
use crate::inbox::{
    Acknowledgements, ContrlEvent, InboxError, InterchangeKey, NewAcknowledgement, Resend,
    StoredAcknowledgement,
};

impl Acknowledgements for SqliteInbox {
    fn acknowledge(&mut self, ack: &NewAcknowledgement<'_>) -> Result<String, InboxError> {
        self.begin()?;
        self.in_savepoint(|c| record_acknowledgement(c, ack))
    }

    fn resend_acknowledgement(
        &mut self,
        key: InterchangeKey<'_>,
        sending: Option<&str>,
        created_at: &str,
    ) -> Result<Resend, InboxError> {
        self.begin()?;
        self.in_savepoint(|c| resend_acknowledgement(c, key, sending, created_at))
    }

    fn answered_sending(
        &mut self,
        key: InterchangeKey<'_>,
        sending: &str,
    ) -> Result<Option<bool>, InboxError> {
        self.begin()?;
        Ok(self
            .conn
            .prepare_cached(
                "SELECT max((a.action = ?6 AND coalesce(a.error_code, '') = ?7)
                            OR (a.action = ?8 AND coalesce(a.error_code, '') = ?9))
                 FROM acknowledgements a
                 JOIN contrl_outbox o ON o.acknowledgement_id = a.id
                 WHERE a.sender = ?1 AND a.recipient = ?2 AND a.control_ref = ?3
                   AND a.standard = ?4 AND o.source = ?5",
            )?
            .query_row(
                params![
                    key.sender,
                    key.recipient,
                    key.control_ref,
                    key.standard,
                    sending,
                    NOT_RESENT.0,
                    NOT_RESENT.1,
                    NOT_RESENT_X12.0,
                    NOT_RESENT_X12.1
                ],
                |r| r.get(0),
            )?)
    }

    fn pending_contrl(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
    ) -> Result<Vec<ContrlEvent>, InboxError> {
        pending_contrl(&self.conn, pass, retry_after.as_secs() as i64, limit)
    }

    fn acknowledgements(
        &self,
        key: InterchangeKey<'_>,
    ) -> Result<Vec<StoredAcknowledgement>, InboxError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT own_ref, action, error_code, created_at, bytes FROM acknowledgements
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4
             ORDER BY id",
        )?;
        let rows = stmt
            .query_map(
                params![key.sender, key.recipient, key.control_ref, key.standard],
                |r| {
                    Ok(StoredAcknowledgement {
                        own_ref: r.get(0)?,
                        action: r.get(1)?,
                        error_code: r.get(2)?,
                        created_at: r.get(3)?,
                        bytes: r.get(4)?,
                    })
                },
            )?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

/// Allocates the partner's next CONTRL control reference and stores the CONTRL under it.
pub(super) fn record_acknowledgement(
    conn: &Connection,
    ack: &NewAcknowledgement<'_>,
) -> Result<String, InboxError> {
    let n: i64 = conn
        .prepare_cached(
            "INSERT INTO contrl_counters (partner, next) VALUES (?1, 2)
             ON CONFLICT (partner) DO UPDATE SET next = next + 1
             RETURNING next - 1",
        )?
        .query_row([ack.partner], |r| r.get(0))?;
    let own_ref = crate::inbox::ack_reference(ack.standard, n);
    let bytes = (ack.build)(&own_ref);
    conn.prepare_cached(
        "INSERT INTO acknowledgements (sender, recipient, control_ref, partner, own_ref, action,
             error_code, bytes, created_at, syntax_version, standard)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        ack.sender,
        ack.recipient,
        ack.control_ref,
        ack.partner,
        own_ref,
        ack.action,
        ack.error_code,
        bytes,
        ack.created_at,
        ack.syntax_version,
        ack.standard,
    ])?;
    conn.prepare_cached(
        "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         VALUES (last_insert_rowid(), 1, ?3, ?1, ?2)",
    )?
    .execute([ack.created_at, ack.sending, ack.event_type])?;
    Ok(own_ref)
}

/// The newest CONTRL of a key that did not reject what it answered, the applied copy's answer
/// (a broken copy's rejection or a duplicate's is never sent again for another copy; after a
/// purge and the key applied again, the new copy's, not the old one's), queued again for
/// `sending`, where no answer of the key was queued for that sending before.
pub(super) fn resend_acknowledgement(
    conn: &Connection,
    key: InterchangeKey<'_>,
    sending: Option<&str>,
    created_at: &str,
) -> Result<Resend, InboxError> {
    // The newest answer that rejected nothing, and whether any such answer of the key already
    // went to this sending: once per sending for the key, not per answer, so that after a
    // purge and the key applied again a sending given the answer of before is not given the new
    // one too.
    let newest: Option<(i64, String, bool)> = conn
        .prepare_cached(
            "SELECT id, own_ref,
                    EXISTS (SELECT 1 FROM acknowledgements a
                            JOIN contrl_outbox o ON o.acknowledgement_id = a.id
                            WHERE a.sender = ?1 AND a.recipient = ?2 AND a.control_ref = ?3
                              AND a.standard = ?4 AND a.action NOT IN (?5, ?6)
                              AND o.source = ?7)
             FROM acknowledgements
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4
               AND action NOT IN (?5, ?6)
             ORDER BY id DESC LIMIT 1",
        )?
        .query_row(
            params![
                key.sender,
                key.recipient,
                key.control_ref,
                key.standard,
                REJECTING.0,
                REJECTING.1,
                sending
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((id, own_ref, answered)) = newest else {
        return Ok(Resend::Unanswered);
    };
    let Some(sending) = sending.filter(|_| !answered) else {
        return Ok(Resend::AlreadySent);
    };
    let queued = conn
        .prepare_cached(
            "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
             SELECT ?1, max(send) + 1, min(event_type), ?2, ?3
             FROM contrl_outbox WHERE acknowledgement_id = ?1
             ON CONFLICT (acknowledgement_id, source) DO NOTHING",
        )?
        .execute(params![id, created_at, sending])?;
    Ok(if queued == 1 {
        Resend::Queued(own_ref)
    } else {
        Resend::AlreadySent
    })
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
                a.partner, a.own_ref, a.control_ref, a.bytes, a.syntax_version
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
                syntax_version: r.get(11)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
