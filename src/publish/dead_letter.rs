//! `--dead-letter DEST`: where `consume` also publishes each rejected delivery, with the reason
//! it was rejected, where it came from and its `edi-filename` as attributes of its destination's
//! binding (the same names in every one), under an id that is the same whenever it is sent
//! again.

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::{Answer, Attr, Attributes, Destination, Outgoing, Sink, Stop};

/// A dead-letter destination, connected on first use and again after a failure.
pub struct DeadLetter {
    destination: Box<dyn Destination>,
    sink: Option<Box<dyn Sink>>,
    stop: Stop,
}

/// A rejected delivery, as it goes to the dead letters.
pub struct Rejected<'a> {
    /// The broker's name for it.
    pub source: &'a str,
    /// The subject or routing key it was published with.
    pub subject: &'a str,
    pub filename: Option<&'a str>,
    pub body: &'a bytes::Bytes,
    /// Why it was rejected (each error with its byte).
    pub reason: String,
}

impl DeadLetter {
    /// Reads `--dead-letter`, by the broker table (`crate::brokers::dead_letter`): the forms
    /// each broker takes are its.
    pub fn parse(
        text: &str,
        settings: &crate::broker::Settings,
        stop: Stop,
    ) -> Result<DeadLetter, String> {
        Ok(DeadLetter {
            destination: crate::brokers::dead_letter(text, settings)?,
            sink: None,
            stop,
        })
    }

    /// Has a wait on the destination (connecting) end when `stop` is set.
    pub fn hear(&mut self, stop: Stop) {
        self.stop = stop;
    }

    /// Where to, for messages: the server with its exchange or subject, never a password.
    pub fn shown(&self) -> String {
        self.destination.shown()
    }

    /// Publishes the rejected deliveries, each with its reason; all of them stored, or an error
    /// (then none is settled, and the broker delivers them again).
    pub fn send(&mut self, rejected: &[Rejected<'_>]) -> anyhow::Result<()> {
        let shown = self.shown();
        let sink = match &mut self.sink {
            Some(sink) => sink,
            None => self.sink.insert(
                self.destination
                    .connect(&self.stop)
                    .with_context(|| format!("--dead-letter {shown}"))?,
            ),
        };
        let batch: Vec<Outgoing> = rejected
            .iter()
            .map(|d| {
                let mut attributes = Attributes::with_capacity(3, 256);
                attributes.push_header(Attr::DeadLetterReason, &d.reason);
                attributes.push_header(Attr::DeadLetterSource, d.source);
                if let Some(f) = d.filename {
                    attributes.push_header(Attr::DeadLetterFilename, f);
                }
                Outgoing {
                    // The same whenever it is sent again: JetStream drops a second copy.
                    id: format!(
                        "dead-letter:{}:{}",
                        d.source,
                        &hex::encode(Sha256::digest(d.body))[..32]
                    ),
                    // To the subject the URL names where it names one (a NATS subject, a
                    // Kafka topic, an SQS queue); else (AMQP) the delivery's routing key kept.
                    subject: self
                        .destination
                        .subject_prefix()
                        .unwrap_or(d.subject)
                        .to_string(),
                    attributes,
                    body: d.body.clone(),
                    content_type: body_content_type(d.body),
                }
            })
            .collect();
        let (answers, error) = sink.send(batch);
        if let Some(e) = error {
            self.sink = None;
            return Err(e.into_error().context(format!("--dead-letter {shown}")));
        }
        for a in answers {
            if let Answer::Refused(why) = a {
                anyhow::bail!("--dead-letter {shown} refused a rejected delivery: {why}");
            }
        }
        Ok(())
    }
}

/// The media type of a rejected delivery's body: X12's where it starts an X12 interchange (its
/// ISA, after a byte-order mark or white space), else EDIFACT's, as every body went out before
/// the standard was kept (a body that begins neither has no standard to tell).
fn body_content_type(body: &[u8]) -> &'static str {
    if crate::envelopes::starts_x12(body) {
        super::X12_CONTENT_TYPE
    } else {
        super::CONTENT_TYPE
    }
}

#[cfg(test)]
mod content_type_tests {
    use super::*;

    #[test]
    fn a_rejected_x12_body_goes_out_as_x12() {
        let x12 = b"\xEF\xBB\xBF\r\nISA*00*          *00*  broken...";
        assert_eq!(body_content_type(x12), "application/EDI-X12");
        assert_eq!(body_content_type(b"UNB+UNOC:3+S+R"), "application/EDIFACT");
        assert_eq!(
            body_content_type(b"not an interchange"),
            "application/EDIFACT",
            "a body of neither standard keeps the type every body had"
        );
    }
}
