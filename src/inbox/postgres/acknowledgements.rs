//! The CONTRLs: stored with their decisions, sent again for a partner's resending, their
//! partners' counters taken in one order, claimed for delivery.

use std::time::Duration;

use postgres::GenericClient;

use super::session::Session;
use super::{PgInbox, storable};
use crate::inbox::names::{NOT_RESENT, NOT_RESENT_X12, REJECTING};
use crate::inbox::{
    Acknowledgements, ContrlEvent, InboxError, InterchangeKey, NewAcknowledgement, Resend,
    StoredAcknowledgement,
};

impl Acknowledgements for PgInbox {
    fn acknowledge(&mut self, ack: &NewAcknowledgement<'_>) -> Result<String, InboxError> {
        self.begin()?;
        record_acknowledgement(self.client.get_mut(), ack)
    }

    fn resend_acknowledgement(
        &mut self,
        key: InterchangeKey<'_>,
        sending: Option<&str>,
        created_at: &str,
    ) -> Result<Resend, InboxError> {
        self.begin()?;
        resend_acknowledgement(self.client.get_mut(), key, sending, created_at)
    }

    fn answered_sending(
        &mut self,
        key: InterchangeKey<'_>,
        sending: &str,
    ) -> Result<Option<bool>, InboxError> {
        self.begin()?;
        Ok(self
            .client
            .get_mut()
            .query_one_prepared(
                "SELECT bool_or((a.action = $6 AND coalesce(a.error_code, '') = $7)
                            OR (a.action = $8 AND coalesce(a.error_code, '') = $9))
                 FROM acknowledgements a
                 JOIN contrl_outbox o ON o.acknowledgement_id = a.id
                 WHERE a.sender = $1 AND a.recipient = $2 AND a.control_ref = $3
                   AND a.standard = $4 AND o.source = $5",
                &[
                    &storable(key.sender),
                    &storable(key.recipient),
                    &storable(key.control_ref),
                    &key.standard.as_str(),
                    &storable(sending),
                    &NOT_RESENT.0,
                    &NOT_RESENT.1,
                    &NOT_RESENT_X12.0,
                    &NOT_RESENT_X12.1,
                ],
            )?
            .get(0))
    }

    /// Hosts answering the same partners in another order would each hold one counter and wait
    /// for the other's: taken in one order, up front, they wait in turn instead.
    fn lock_partners(&mut self, partners: &[String]) -> Result<(), InboxError> {
        if partners.is_empty() {
            return Ok(());
        }
        self.begin()?;
        let c = self.client.get_mut();
        c.execute_prepared(
            "INSERT INTO contrl_counters (partner, next)
             SELECT p, 1 FROM unnest($1::text[]) AS p ORDER BY p ON CONFLICT DO NOTHING",
            &[&partners],
        )?;
        c.execute_prepared(
            "SELECT 1 FROM contrl_counters WHERE partner = ANY($1) ORDER BY partner FOR UPDATE",
            &[&partners],
        )?;
        Ok(())
    }

    fn pending_contrl(
        &self,
        pass: &str,
        retry_after: Duration,
        limit: u32,
    ) -> Result<Vec<ContrlEvent>, InboxError> {
        pending_contrl(
            &mut **self.client.borrow_mut(),
            pass,
            retry_after.as_secs_f64(),
            limit,
        )
    }

    fn acknowledgements(
        &self,
        key: InterchangeKey<'_>,
    ) -> Result<Vec<StoredAcknowledgement>, InboxError> {
        acknowledgements(&mut **self.client.borrow_mut(), key)
    }
}

/// Allocates the partner's next CONTRL control reference (the counter's row stays locked until
/// the commit, so hosts answering one partner take turns) and stores the CONTRL under it.
pub(super) fn record_acknowledgement(
    c: &mut Session,
    ack: &NewAcknowledgement<'_>,
) -> Result<String, InboxError> {
    let n: i64 = c
        .query_one_prepared(
            "INSERT INTO contrl_counters (partner, next) VALUES ($1, 2)
             ON CONFLICT (partner) DO UPDATE SET next = contrl_counters.next + 1
             RETURNING next - 1",
            &[&storable(ack.partner)],
        )?
        .get(0);
    let own_ref = crate::inbox::ack_reference(ack.standard, n);
    let bytes = (ack.build)(&own_ref);
    // The host's clock, which also wrote the CONTRL's UNB S004: one time for both.
    c.execute_prepared(
        "WITH a AS (
             INSERT INTO acknowledgements (sender, recipient, control_ref, partner, own_ref,
                 action, error_code, bytes, created_at, syntax_version, standard)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::timestamptz, $12, $13)
             RETURNING id)
         INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         SELECT id, 1, $11, $9::text::timestamptz, $10 FROM a",
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
            &ack.event_type,
            &ack.syntax_version,
            &ack.standard.as_str(),
        ],
    )?;
    Ok(own_ref)
}

/// The newest CONTRL of a key that did not reject what it answered, the applied copy's answer
/// (a broken copy's rejection or a duplicate's is never sent again for another copy; after a
/// purge and the key applied again, the new copy's, not the old one's), queued again for
/// `sending`, where no answer of the key was queued for that sending before.
pub(super) fn resend_acknowledgement(
    c: &mut Session,
    key: InterchangeKey<'_>,
    sending: Option<&str>,
    created_at: &str,
) -> Result<Resend, InboxError> {
    // The newest answer that rejected nothing, and whether any such answer of the key already
    // went to this sending: once per sending for the key, not per answer, so that after a
    // purge and the key applied again a sending given the answer of before is not given the new
    // one too.
    let newest = c.query_opt_prepared(
        "SELECT id, own_ref,
                EXISTS (SELECT 1 FROM acknowledgements a
                        JOIN contrl_outbox o ON o.acknowledgement_id = a.id
                        WHERE a.sender = $1 AND a.recipient = $2 AND a.control_ref = $3
                          AND a.standard = $4 AND a.action NOT IN ($5, $6)
                          AND o.source = $7)
         FROM acknowledgements
         WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4
           AND action NOT IN ($5, $6)
         ORDER BY id DESC LIMIT 1",
        &[
            &storable(key.sender),
            &storable(key.recipient),
            &storable(key.control_ref),
            &key.standard.as_str(),
            &REJECTING.0,
            &REJECTING.1,
            &sending.map(storable),
        ],
    )?;
    let Some(newest) = newest else {
        return Ok(Resend::Unanswered);
    };
    let (id, own_ref, answered): (i64, String, bool) =
        (newest.get(0), newest.get(1), newest.get(2));
    let Some(sending) = sending.filter(|_| !answered) else {
        return Ok(Resend::AlreadySent);
    };
    let queued = c.execute_prepared(
        "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         SELECT $1, max(send) + 1, min(event_type), $2::text::timestamptz, $3
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
                        a.control_ref, a.bytes, a.syntax_version
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
        syntax_version: r.get(11),
    })
    .collect())
}

/// The CONTRLs stored for a key, oldest first.
pub(super) fn acknowledgements(
    c: &mut impl GenericClient,
    key: InterchangeKey<'_>,
) -> Result<Vec<StoredAcknowledgement>, InboxError> {
    Ok(c.query(
        concat!(
            "SELECT own_ref, action, error_code, ",
            ts!("created_at"),
            ", bytes FROM acknowledgements
                 WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4
                 ORDER BY id"
        ),
        &[
            &key.sender,
            &key.recipient,
            &key.control_ref,
            &key.standard.as_str(),
        ],
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
