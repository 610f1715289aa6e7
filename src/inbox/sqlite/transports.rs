//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them: `BEGIN IMMEDIATE` holds the whole file, so a second run's claim waits for this batch.

use rusqlite::{Connection, OpenFlags, OptionalExtension as _, TransactionBehavior, params};

use super::SqliteInbox;
use crate::inbox::{AnswerOutbox, Claim, DueAnswer, InboxError, TransportMessage, Transports};

impl SqliteInbox {
    /// One message's claim: see [`Transports::claim_message`].
    fn claim_one(
        &mut self,
        m: &TransportMessage<'_>,
        answer: Option<&[u8]>,
        when: &str,
    ) -> Result<Claim, InboxError> {
        self.begin()?;
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO transport_messages
                     (transport, message_id, received_at, last_seen_at, sender, content_sha256,
                      answer)
                 VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6)
                 ON CONFLICT (transport, message_id) DO NOTHING",
            )?
            .execute(params![
                m.transport,
                m.message_id,
                when,
                m.sender,
                m.content_sha256,
                answer
            ])?;
        // A refused sending's negative MDN not yet delivered is not sent after this one is
        // decided (accepted, or refused anew, which queues its own).
        self.conn
            .prepare_cached(
                "UPDATE refusal_outbox SET superseded_at = ?3
                 WHERE transport = ?1 AND message_id = ?2
                   AND delivered_at IS NULL AND superseded_at IS NULL",
            )?
            .execute(params![m.transport, m.message_id, when])?;
        if inserted == 1 {
            return Ok(Claim::New);
        }
        let stored: Option<(Option<String>, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT sender, content_sha256 FROM transport_messages
                 WHERE transport = ?1 AND message_id = ?2",
            )?
            .query_row(params![m.transport, m.message_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        if let Some((sender, content)) = stored
            && (sender.as_deref().is_some_and(|s| s != m.sender)
                || content.as_deref().is_some_and(|c| c != m.content_sha256))
        {
            return Ok(Claim::Other { sender });
        }
        let answer: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached(
                "UPDATE transport_messages SET sightings = sightings + 1, last_seen_at = ?3
                 WHERE transport = ?1 AND message_id = ?2
                 RETURNING answer",
            )?
            .query_row(params![m.transport, m.message_id, when], |r| r.get(0))
            .optional()?;
        Ok(Claim::Seen(answer.flatten()))
    }
}

impl Transports for SqliteInbox {
    fn claim_messages(
        &mut self,
        messages: &[(TransportMessage<'_>, Option<&[u8]>)],
        when: &str,
    ) -> Result<Vec<Claim>, InboxError> {
        // One after the other: the database is in this process, a statement costs no round trip.
        let mut claims = Vec::with_capacity(messages.len());
        for (m, answer) in messages {
            claims.push(self.claim_one(m, *answer, when)?);
        }
        Ok(claims)
    }

    fn answer_message(
        &mut self,
        transport: &str,
        message_id: &str,
        answer: &[u8],
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.conn
            .prepare_cached(
                "UPDATE transport_messages SET answer = ?3 WHERE transport = ?1 AND message_id = ?2",
            )?
            .execute(params![transport, message_id, answer])?;
        Ok(())
    }

    fn release_message(&mut self, transport: &str, message_id: &str) -> Result<(), InboxError> {
        self.begin()?;
        self.conn
            .prepare_cached(
                "DELETE FROM transport_messages WHERE transport = ?1 AND message_id = ?2",
            )?
            .execute(params![transport, message_id])?;
        Ok(())
    }

    fn queue_answer(
        &mut self,
        transport: &str,
        message_id: &str,
        url: &str,
        when: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.conn
            .prepare_cached(
                "INSERT INTO answer_outbox (transport, message_id, url, created_at, due_at)
                 VALUES (?1, ?2, ?3, ?4, ?4)
                 ON CONFLICT (transport, message_id) DO UPDATE
                     SET url = excluded.url,
                         created_at = CASE WHEN answer_outbox.delivered_at IS NULL
                                           THEN answer_outbox.created_at
                                           ELSE excluded.created_at END,
                         due_at = excluded.due_at, delivered_at = NULL",
            )?
            .execute(params![transport, message_id, url, when])?;
        Ok(())
    }

    fn queue_refusal(
        &mut self,
        transport: &str,
        message_id: &str,
        url: &str,
        answer: &[u8],
        when: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.conn
            .prepare_cached(
                "INSERT INTO refusal_outbox (transport, message_id, url, answer, created_at, due_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (transport, message_id) DO UPDATE
                     SET url = excluded.url, answer = excluded.answer,
                         created_at = CASE WHEN refusal_outbox.delivered_at IS NULL
                                           THEN refusal_outbox.created_at
                                           ELSE excluded.created_at END,
                         due_at = excluded.due_at, delivered_at = NULL,
                         superseded_at = NULL, attempts = refusal_outbox.attempts + 1",
            )?
            .execute(params![transport, message_id, url, answer, when])?;
        Ok(())
    }

    fn answer_outbox(&self) -> Result<Box<dyn AnswerOutbox + Send>, InboxError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(self.busy_timeout)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        Ok(Box::new(Answers { conn }))
    }
}

/// The answer outbox's own connection (see [`Transports::answer_outbox`]): short
/// transactions of its own, beside the deciding connection's batches.
struct Answers {
    conn: Connection,
}

impl AnswerOutbox for Answers {
    fn take_due_answers(
        &mut self,
        lease: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<DueAnswer>, InboxError> {
        let now = std::time::SystemTime::now();
        let until = crate::clock::rfc3339(now + lease);
        let now_text = crate::clock::rfc3339(now);
        // A read first: an idle poll never takes the write lock the deciding thread needs.
        let any: bool = self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM answer_outbox
                                WHERE delivered_at IS NULL AND due_at <= ?1)
                     OR EXISTS (SELECT 1 FROM refusal_outbox
                                WHERE delivered_at IS NULL AND superseded_at IS NULL
                                  AND due_at <= ?1)",
            )?
            .query_row([&now_text], |r| r.get(0))?;
        if !any {
            return Ok(Vec::new());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut taken = Vec::new();
        for (sql, refusal) in [
            (
                "UPDATE answer_outbox SET due_at = ?2, attempts = attempts + 1
                 WHERE rowid IN (SELECT rowid FROM answer_outbox
                                 WHERE delivered_at IS NULL AND due_at <= ?1
                                 ORDER BY due_at LIMIT ?3)
                 RETURNING transport, message_id, url, attempts,
                     (SELECT t.answer FROM transport_messages t
                      WHERE t.transport = answer_outbox.transport
                        AND t.message_id = answer_outbox.message_id)",
                false,
            ),
            (
                "UPDATE refusal_outbox SET due_at = ?2, attempts = attempts + 1
                 WHERE rowid IN (SELECT rowid FROM refusal_outbox
                                 WHERE delivered_at IS NULL AND superseded_at IS NULL
                                   AND due_at <= ?1
                                 ORDER BY due_at LIMIT ?3)
                 RETURNING transport, message_id, url, attempts, answer",
                true,
            ),
        ] {
            let room = limit.saturating_sub(taken.len() as u32);
            if room == 0 {
                break;
            }
            let mut take = tx.prepare_cached(sql)?;
            let rows = take.query_map(params![now_text, until, room], |r| {
                Ok(DueAnswer {
                    transport: r.get(0)?,
                    message_id: r.get(1)?,
                    url: r.get(2)?,
                    attempts: r.get(3)?,
                    answer: r.get::<_, Option<Vec<u8>>>(4)?.unwrap_or_default(),
                    refusal,
                })
            })?;
            for row in rows {
                taken.push(row?);
            }
        }
        tx.commit()?;
        Ok(taken)
    }

    fn answer_delivered(&mut self, due: &DueAnswer) -> Result<(), InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.prepare_cached(if due.refusal {
            "UPDATE refusal_outbox SET delivered_at = ?3, last_error = NULL
             WHERE transport = ?1 AND message_id = ?2 AND attempts = ?4"
        } else {
            "UPDATE answer_outbox SET delivered_at = ?3, last_error = NULL
             WHERE transport = ?1 AND message_id = ?2 AND attempts = ?4"
        })?
        .execute(params![
            due.transport,
            due.message_id,
            crate::clock::now(),
            due.attempts
        ])?;
        tx.commit()?;
        Ok(())
    }

    fn answer_not_delivered(
        &mut self,
        due: &DueAnswer,
        error: &str,
        retry_in: std::time::Duration,
    ) -> Result<(), InboxError> {
        let at = crate::clock::rfc3339(std::time::SystemTime::now() + retry_in);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.prepare_cached(if due.refusal {
            "UPDATE refusal_outbox SET due_at = ?3, last_error = ?4
             WHERE transport = ?1 AND message_id = ?2 AND delivered_at IS NULL
               AND attempts = ?5"
        } else {
            "UPDATE answer_outbox SET due_at = ?3, last_error = ?4
             WHERE transport = ?1 AND message_id = ?2 AND delivered_at IS NULL
               AND attempts = ?5"
        })?
        .execute(params![
            due.transport,
            due.message_id,
            at,
            error,
            due.attempts
        ])?;
        tx.commit()?;
        Ok(())
    }

    fn undelivered_answers(&mut self) -> Result<(i64, Option<i64>), InboxError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT count(*),
                    CAST((julianday('now') - julianday(min(created_at))) * 86400 AS INTEGER)
             FROM (SELECT created_at FROM answer_outbox WHERE delivered_at IS NULL
                   UNION ALL
                   SELECT created_at FROM refusal_outbox
                   WHERE delivered_at IS NULL AND superseded_at IS NULL)",
            )?
            .query_row([], |r| {
                Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.map(|a| a.max(0))))
            })?)
    }

    fn reconnect(&mut self) -> Result<(), InboxError> {
        Ok(())
    }
}
