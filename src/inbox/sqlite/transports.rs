//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them: `BEGIN IMMEDIATE` holds the whole file, so a second run's claim waits for this batch.

use rusqlite::{OptionalExtension as _, params};

use super::SqliteInbox;
use crate::inbox::{Claim, InboxError, Transports};

impl Transports for SqliteInbox {
    fn claim_message(
        &mut self,
        transport: &str,
        message_id: &str,
        when: &str,
    ) -> Result<Claim, InboxError> {
        self.begin()?;
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO transport_messages (transport, message_id, received_at, last_seen_at)
                 VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (transport, message_id) DO NOTHING",
            )?
            .execute(params![transport, message_id, when])?;
        if inserted == 1 {
            return Ok(Claim::New);
        }
        let answer: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached(
                "UPDATE transport_messages SET sightings = sightings + 1, last_seen_at = ?3
                 WHERE transport = ?1 AND message_id = ?2
                 RETURNING answer",
            )?
            .query_row(params![transport, message_id, when], |r| r.get(0))
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
}
