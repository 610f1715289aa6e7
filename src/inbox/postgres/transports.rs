//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them. Two hosts claiming one id: the second's insert waits on the first's row until that batch
//! ends, then finds it (and the first's answer) there, or, where the first rolled back, claims it.

use super::PgInbox;
use crate::inbox::{Claim, InboxError, TransportMessage, Transports};

impl Transports for PgInbox {
    fn claim_message(&mut self, m: &TransportMessage<'_>, when: &str) -> Result<Claim, InboxError> {
        let _ = when;
        self.begin()?;
        let client = self.client.get_mut();
        let inserted = client.execute(
            "INSERT INTO transport_messages (transport, message_id, sender, content_sha256)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (transport, message_id) DO NOTHING",
            &[&m.transport, &m.message_id, &m.sender, &m.content_sha256],
        )?;
        if inserted == 1 {
            return Ok(Claim::New);
        }
        // The row locked (FOR UPDATE) as the sighting's update would: its sender and content
        // are then the committed ones.
        let stored = client.query_opt(
            "SELECT sender, content_sha256 FROM transport_messages
             WHERE transport = $1 AND message_id = $2 FOR UPDATE",
            &[&m.transport, &m.message_id],
        )?;
        if let Some(row) = stored {
            let sender: Option<String> = row.get(0);
            let content: Option<String> = row.get(1);
            if sender.as_deref().is_some_and(|s| s != m.sender)
                || content.as_deref().is_some_and(|c| c != m.content_sha256)
            {
                return Ok(Claim::Other { sender });
            }
        }
        let row = client.query_opt(
            "UPDATE transport_messages SET sightings = sightings + 1, last_seen_at = now()
             WHERE transport = $1 AND message_id = $2
             RETURNING answer",
            &[&m.transport, &m.message_id],
        )?;
        Ok(Claim::Seen(
            row.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)),
        ))
    }

    fn answer_message(
        &mut self,
        transport: &str,
        message_id: &str,
        answer: &[u8],
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.client.get_mut().execute(
            "UPDATE transport_messages SET answer = $3 WHERE transport = $1 AND message_id = $2",
            &[&transport, &message_id, &answer],
        )?;
        Ok(())
    }
}
