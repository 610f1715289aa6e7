//! The CONTRLs to deliver: claimed, sent and marked a batch at a time, before the messages'
//! events (a partner waits for them). Apart from the messages' pipeline because it is simpler
//! (one batch, sent and answered at once) and reads the acknowledgements' outbox.

use anyhow::Context as _;

use super::report::Line;
use super::{BatchError, Run};
use crate::inbox::{Inbox, Outbox};
use crate::publish::{self, Answer, Outgoing};

impl Run<'_> {
    /// Claims, sends and marks a batch of CONTRLs.
    pub(super) fn contrl_batch(
        &mut self,
        inbox: &mut dyn Inbox,
        sink: &mut dyn publish::Sink,
    ) -> Result<usize, BatchError> {
        let events = inbox
            .pending_contrl(&self.pass, self.args.retry_after, self.args.batch)
            .context("cannot read the CONTRL outbox")
            .map_err(BatchError::Inbox)?;
        if events.is_empty() {
            return Ok(0);
        }
        let outgoing: Vec<Outgoing> = events
            .iter()
            .map(|e| publish::contrl_outgoing(e, &self.template))
            .collect();
        let named: Vec<(String, String)> = outgoing
            .iter()
            .map(|o| (o.id.clone(), o.subject.clone()))
            .collect();
        let (answers, lost) = sink.send(outgoing);
        crash_point!("publish-after-confirm");
        // Answers in order; those after a lost connection have none and are not marked.
        let published: Vec<i64> = events
            .iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Answer::Stored | Answer::Duplicate))
            .map(|(e, _)| e.row)
            .collect();
        inbox
            .mark_published(Outbox::Acknowledgements, &published)
            .context("cannot mark CONTRLs published")
            .map_err(BatchError::Inbox)?;
        for ((e, (id, subject)), answer) in events.iter().zip(&named).zip(&answers) {
            let parked = match answer {
                Answer::Refused(why) => inbox
                    .mark_failed(
                        Outbox::Acknowledgements,
                        &[e.row],
                        why,
                        &self.pass,
                        self.args.max_attempts,
                    )
                    .context("cannot record a failed CONTRL")
                    .map_err(BatchError::Inbox)?,
                _ => 0,
            };
            let line = Line {
                status: "",
                id,
                subject,
                event_type: &e.event_type,
                sender: &e.sender,
                recipient: &e.recipient,
                control_ref: &e.own_ref,
                message_refs: Vec::new(),
                error: None,
                attempts: None,
                tried: e.attempts,
                answering: Some((&e.control_ref, e.send)),
            };
            self.report_one(line, answer, parked > 0);
        }
        self.out.flush();
        match lost {
            Some(e) => Err(BatchError::Destination(e)),
            None => Ok(events.len()),
        }
    }
}
