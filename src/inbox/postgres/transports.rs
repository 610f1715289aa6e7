//! The messages of a transport that names its messages (AS4), claimed in the batch that decides
//! them. Two hosts claiming one id: the second's insert waits on the first's row until that batch
//! ends, then finds it (and the first's answer) there, or, where the first rolled back, claims it.

use super::PgInbox;
use crate::inbox::{Claim, InboxError, Transports};

impl Transports for PgInbox {
    fn claim_message(
        &mut self,
        transport: &str,
        message_id: &str,
        when: &str,
    ) -> Result<Claim, InboxError> {
        let _ = when;
        self.begin()?;
        let client = self.client.get_mut();
        let inserted = client.execute(
            "INSERT INTO transport_messages (transport, message_id)
             VALUES ($1, $2)
             ON CONFLICT (transport, message_id) DO NOTHING",
            &[&transport, &message_id],
        )?;
        if inserted == 1 {
            return Ok(Claim::New);
        }
        let row = client.query_opt(
            "UPDATE transport_messages SET sightings = sightings + 1, last_seen_at = now()
             WHERE transport = $1 AND message_id = $2
             RETURNING answer",
            &[&transport, &message_id],
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
