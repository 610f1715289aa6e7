//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them. Two hosts claiming one id: the second's insert waits on the first's row until that batch
//! ends, then finds it (and the first's answer) there, locked, or, where the first rolled back,
//! claims it.

use super::PgInbox;
use crate::inbox::{Claim, InboxError, TransportMessage, Transports};

impl Transports for PgInbox {
    fn claim_message(&mut self, m: &TransportMessage<'_>, when: &str) -> Result<Claim, InboxError> {
        let _ = when;
        self.begin()?;
        let client = self.client.get_mut();
        // One statement, so that the row is either inserted or found and locked, whatever
        // another host does meanwhile: a claim of a row `purge` deletes between an insert that
        // conflicted and a read that follows would find nothing, and answer a message it never
        // decided. The update changes nothing; it takes the row's lock, so that the sender and
        // content returned are the committed ones. `xmax = 0`: the row is a new one.
        let row = client.query_one(
            "INSERT INTO transport_messages (transport, message_id, sender, content_sha256)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (transport, message_id)
                 DO UPDATE SET last_seen_at = transport_messages.last_seen_at
             RETURNING (xmax = 0), sender, content_sha256",
            &[&m.transport, &m.message_id, &m.sender, &m.content_sha256],
        )?;
        if row.get::<_, bool>(0) {
            return Ok(Claim::New);
        }
        let sender: Option<String> = row.get(1);
        let content: Option<String> = row.get(2);
        if sender.as_deref().is_some_and(|s| s != m.sender)
            || content.as_deref().is_some_and(|c| c != m.content_sha256)
        {
            return Ok(Claim::Other { sender });
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

    fn release_message(&mut self, transport: &str, message_id: &str) -> Result<(), InboxError> {
        self.begin()?;
        self.client.get_mut().execute(
            "DELETE FROM transport_messages WHERE transport = $1 AND message_id = $2",
            &[&transport, &message_id],
        )?;
        Ok(())
    }
}
