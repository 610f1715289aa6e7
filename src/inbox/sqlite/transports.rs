//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them: `BEGIN IMMEDIATE` holds the whole file, so a second run's claim waits for this batch.

use rusqlite::{OptionalExtension as _, params};

use super::SqliteInbox;
use crate::inbox::{Claim, InboxError, TransportMessage, Transports};

impl Transports for SqliteInbox {
    fn claim_message(&mut self, m: &TransportMessage<'_>, when: &str) -> Result<Claim, InboxError> {
        self.begin()?;
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO transport_messages
                     (transport, message_id, received_at, last_seen_at, sender, content_sha256)
                 VALUES (?1, ?2, ?3, ?3, ?4, ?5)
                 ON CONFLICT (transport, message_id) DO NOTHING",
            )?
            .execute(params![
                m.transport,
                m.message_id,
                when,
                m.sender,
                m.content_sha256
            ])?;
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
}
