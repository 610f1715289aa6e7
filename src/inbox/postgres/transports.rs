//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them. Two hosts claiming one id: the second's insert waits on the first's row until that batch
//! ends, then finds it (and the first's answer) there, locked, or, where the first rolled back,
//! claims it.

use super::PgInbox;
use crate::inbox::{AnswerOutbox, Claim, DueAnswer, InboxError, TransportMessage, Transports};

impl Transports for PgInbox {
    fn claim_messages(
        &mut self,
        messages: &[(TransportMessage<'_>, Option<&[u8]>)],
        when: &str,
    ) -> Result<Vec<Claim>, InboxError> {
        let _ = when;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        self.begin()?;
        let transports: Vec<&str> = messages.iter().map(|(m, _)| m.transport).collect();
        let ids: Vec<&str> = messages.iter().map(|(m, _)| m.message_id).collect();
        let senders: Vec<&str> = messages.iter().map(|(m, _)| m.sender).collect();
        let contents: Vec<&str> = messages.iter().map(|(m, _)| m.content_sha256).collect();
        let answers: Vec<Option<&[u8]>> = messages.iter().map(|(_, a)| *a).collect();
        // One statement for the batch's messages (one round trip, however many): each row
        // either inserted or found and locked, whatever another host does meanwhile (a claim
        // of a row `purge` deletes between an insert that conflicted and a read that follows
        // would find nothing, and answer a message it never decided). The update takes the
        // row's lock, so that the sender, content and answer returned are the committed ones;
        // it counts a sighting only where the same sender sent the same content, and changes
        // nothing of another message's row. `xmax = 0`: the row is a new one. In the order
        // given, which is the order of the ids, so that two hosts never wait on each other.
        // A refused sending's negative MDN not yet delivered is superseded in the same
        // statement: not sent after this sending is decided (accepted, or refused anew, which
        // queues its own).
        let rows = self.client.get_mut().query_prepared(
            "WITH superseded AS (
                 UPDATE refusal_outbox r SET superseded_at = now()
                 FROM unnest($1::text[], $2::text[]) AS v(tr, id)
                 WHERE r.transport = v.tr AND r.message_id = v.id
                   AND r.delivered_at IS NULL AND r.superseded_at IS NULL)
             INSERT INTO transport_messages AS t
                 (transport, message_id, sender, content_sha256, answer)
             SELECT tr, id, s, c, a
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[])
                  WITH ORDINALITY AS u(tr, id, s, c, a, o)
             ORDER BY o
             ON CONFLICT (transport, message_id) DO UPDATE
                 SET sightings = t.sightings + CASE
                         WHEN (t.sender IS NULL OR t.sender = excluded.sender)
                          AND (t.content_sha256 IS NULL
                               OR t.content_sha256 = excluded.content_sha256)
                         THEN 1 ELSE 0 END,
                     last_seen_at = CASE
                         WHEN (t.sender IS NULL OR t.sender = excluded.sender)
                          AND (t.content_sha256 IS NULL
                               OR t.content_sha256 = excluded.content_sha256)
                         THEN now() ELSE t.last_seen_at END
             RETURNING t.transport, t.message_id, (t.xmax = 0), t.sender, t.content_sha256,
                       t.answer",
            &[&transports, &ids, &senders, &contents, &answers],
        )?;
        type Row = (bool, Option<String>, Option<String>, Option<Vec<u8>>);
        let mut found: std::collections::HashMap<(String, String), Row> = rows
            .iter()
            .map(|r| {
                (
                    (r.get(0), r.get(1)),
                    (r.get(2), r.get(3), r.get(4), r.get(5)),
                )
            })
            .collect();
        messages
            .iter()
            .map(|(m, _)| {
                let (new, sender, content, answer) = found
                    .remove(&(m.transport.to_string(), m.message_id.to_string()))
                    .ok_or(InboxError::NoClaim)?;
                Ok(if new {
                    Claim::New
                } else if sender.as_deref().is_some_and(|s| s != m.sender)
                    || content.as_deref().is_some_and(|c| c != m.content_sha256)
                {
                    Claim::Other { sender }
                } else {
                    Claim::Seen(answer)
                })
            })
            .collect()
    }

    fn answer_message(
        &mut self,
        transport: &str,
        message_id: &str,
        answer: &[u8],
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.client.get_mut().execute_prepared(
            "UPDATE transport_messages SET answer = $3 WHERE transport = $1 AND message_id = $2",
            &[&transport, &message_id, &answer],
        )?;
        Ok(())
    }

    fn release_message(&mut self, transport: &str, message_id: &str) -> Result<(), InboxError> {
        self.begin()?;
        self.client.get_mut().execute_prepared(
            "DELETE FROM transport_messages WHERE transport = $1 AND message_id = $2",
            &[&transport, &message_id],
        )?;
        Ok(())
    }

    fn queue_answer(
        &mut self,
        transport: &str,
        message_id: &str,
        url: &str,
        when: &str,
    ) -> Result<(), InboxError> {
        let _ = when;
        self.begin()?;
        self.client.get_mut().execute_prepared(
            "INSERT INTO answer_outbox (transport, message_id, url)
             VALUES ($1, $2, $3)
             ON CONFLICT (transport, message_id) DO UPDATE
                 SET url = excluded.url,
                     created_at = CASE WHEN answer_outbox.delivered_at IS NULL
                                       THEN answer_outbox.created_at ELSE now() END,
                     due_at = now(), delivered_at = NULL",
            &[&transport, &message_id, &url],
        )?;
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
        let _ = when;
        self.begin()?;
        self.client.get_mut().execute_prepared(
            "INSERT INTO refusal_outbox (transport, message_id, url, answer)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (transport, message_id) DO UPDATE
                 SET url = excluded.url, answer = excluded.answer,
                     created_at = CASE WHEN refusal_outbox.delivered_at IS NULL
                                       THEN refusal_outbox.created_at ELSE now() END,
                     due_at = now(), delivered_at = NULL,
                     superseded_at = NULL, attempts = refusal_outbox.attempts + 1",
            &[&transport, &message_id, &url, &answer],
        )?;
        Ok(())
    }

    fn answer_outbox(&self) -> Result<Box<dyn AnswerOutbox + Send>, InboxError> {
        Ok(Box::new(Answers {
            client: answers_client(&self.target)?,
            target: self.target.clone(),
        }))
    }
}

/// The answer outbox's own connection (see [`Transports::answer_outbox`]): each statement its
/// own transaction, beside the deciding connection's batches.
struct Answers {
    client: postgres::Client,
    target: super::Target,
}

/// A connection for [`Answers`]: in the inbox's schema, no statement waiting long on a lock.
fn answers_client(target: &super::Target) -> Result<postgres::Client, InboxError> {
    let mut client = target.connect()?;
    client.batch_execute(&format!(
        "SET search_path = {}; SET lock_timeout = 10000; SET statement_timeout = 30000",
        target.sql_schema()
    ))?;
    Ok(client)
}

impl AnswerOutbox for Answers {
    fn take_due_answers(
        &mut self,
        lease: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<DueAnswer>, InboxError> {
        // SKIP LOCKED: two receivers of one inbox take other rows, never one row twice. Both
        // queues in one statement: the claims' answers first, then the refusals'.
        let rows = self.client.query(
            "WITH due AS (
                 SELECT transport, message_id FROM answer_outbox
                 WHERE delivered_at IS NULL AND due_at <= now()
                 ORDER BY due_at LIMIT $2
                 FOR UPDATE SKIP LOCKED),
             answers AS (
                 UPDATE answer_outbox a
                    SET due_at = now() + make_interval(secs => $1), attempts = a.attempts + 1
                   FROM due, transport_messages t
                  WHERE a.transport = due.transport AND a.message_id = due.message_id
                    AND t.transport = a.transport AND t.message_id = a.message_id
                 RETURNING a.transport, a.message_id, a.url, a.attempts, t.answer),
             due_refusals AS (
                 SELECT transport, message_id FROM refusal_outbox
                 WHERE delivered_at IS NULL AND superseded_at IS NULL AND due_at <= now()
                 ORDER BY due_at LIMIT greatest(0, $2 - (SELECT count(*) FROM due))
                 FOR UPDATE SKIP LOCKED),
             refusals AS (
                 UPDATE refusal_outbox r
                    SET due_at = now() + make_interval(secs => $1), attempts = r.attempts + 1
                   FROM due_refusals d
                  WHERE r.transport = d.transport AND r.message_id = d.message_id
                 RETURNING r.transport, r.message_id, r.url, r.attempts, r.answer)
             SELECT *, false FROM answers
             UNION ALL
             SELECT *, true FROM refusals",
            &[&lease.as_secs_f64(), &i64::from(limit)],
        )?;
        Ok(rows
            .iter()
            .map(|r| DueAnswer {
                transport: r.get(0),
                message_id: r.get(1),
                url: r.get(2),
                attempts: i64::from(r.get::<_, i32>(3)),
                answer: r.get::<_, Option<Vec<u8>>>(4).unwrap_or_default(),
                refusal: r.get(5),
            })
            .collect())
    }

    fn answer_delivered(&mut self, due: &DueAnswer) -> Result<(), InboxError> {
        self.client.execute(
            if due.refusal {
                "UPDATE refusal_outbox SET delivered_at = now(), last_error = NULL
                 WHERE transport = $1 AND message_id = $2 AND attempts = $3"
            } else {
                "UPDATE answer_outbox SET delivered_at = now(), last_error = NULL
                 WHERE transport = $1 AND message_id = $2 AND attempts = $3"
            },
            &[
                &due.transport,
                &due.message_id,
                &i32::try_from(due.attempts).unwrap_or(i32::MAX),
            ],
        )?;
        Ok(())
    }

    fn answer_not_delivered(
        &mut self,
        due: &DueAnswer,
        error: &str,
        retry_in: std::time::Duration,
    ) -> Result<(), InboxError> {
        self.client.execute(
            if due.refusal {
                "UPDATE refusal_outbox
                    SET due_at = now() + make_interval(secs => $3), last_error = $4
                  WHERE transport = $1 AND message_id = $2 AND delivered_at IS NULL
                    AND attempts = $5"
            } else {
                "UPDATE answer_outbox
                    SET due_at = now() + make_interval(secs => $3), last_error = $4
                  WHERE transport = $1 AND message_id = $2 AND delivered_at IS NULL
                    AND attempts = $5"
            },
            &[
                &due.transport,
                &due.message_id,
                &retry_in.as_secs_f64(),
                &error,
                &i32::try_from(due.attempts).unwrap_or(i32::MAX),
            ],
        )?;
        Ok(())
    }

    fn undelivered_answers(&mut self) -> Result<(i64, Option<i64>), InboxError> {
        let row = self.client.query_one(
            // Not greatest(0, ...): it ignores a NULL, and an empty queue has no age.
            "SELECT count(*), extract(epoch FROM now() - min(created_at))::bigint
             FROM (SELECT created_at FROM answer_outbox WHERE delivered_at IS NULL
                   UNION ALL
                   SELECT created_at FROM refusal_outbox
                   WHERE delivered_at IS NULL AND superseded_at IS NULL) AS q",
            &[],
        )?;
        Ok((row.get(0), row.get::<_, Option<i64>>(1).map(|a| a.max(0))))
    }

    fn reconnect(&mut self) -> Result<(), InboxError> {
        if self.client.is_closed() {
            self.client = answers_client(&self.target)?;
        }
        Ok(())
    }
}
