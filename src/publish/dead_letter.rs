//! `--dead-letter DEST`: where `consume` also publishes each rejected delivery, with the reason
//! it was rejected, where it came from and its `edi-filename` as headers (NATS) or application
//! properties (AMQP), under an id that is the same whenever it is sent again.

use anyhow::Context as _;
use sha2::{Digest, Sha256};

use super::{Answer, Attr, Destination, Outgoing, Sink, Stop, header_value};

/// A dead-letter destination, connected on first use and again after a failure.
pub struct DeadLetter {
    destination: Destination,
    /// The NATS subject (an AMQP dead letter keeps the delivery's routing key).
    subject: Option<String>,
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
    /// Reads `--dead-letter`: `nats://HOST:PORT/SUBJECT` (a JetStream stream must capture it)
    /// or `amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE` (a topic exchange, declared if missing).
    pub fn parse(text: &str, stop: Stop) -> Result<DeadLetter, String> {
        if text.starts_with("amqp://") {
            let (url, exchange) = crate::broker::amqp::split_last_segment(text)
                .ok_or("--dead-letter amqp:// takes amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE")?;
            return Ok(DeadLetter {
                destination: Destination::Amqp { url, exchange },
                subject: None,
                sink: None,
                stop,
            });
        }
        match Destination::parse(text) {
            Ok(Destination::Nats {
                server,
                prefix: Some(subject),
                ..
            }) => Ok(DeadLetter {
                destination: Destination::Nats {
                    server,
                    prefix: None,
                    create_stream: None,
                    stream_subjects: vec![subject.clone()],
                },
                subject: Some(subject),
                sink: None,
                stop,
            }),
            _ => Err(
                "--dead-letter takes nats://HOST:PORT/SUBJECT or amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE"
                    .into(),
            ),
        }
    }

    /// Has a wait on the destination (connecting) end when `stop` is set.
    pub fn hear(&mut self, stop: Stop) {
        self.stop = stop;
    }

    /// Where to, for messages: the server with its exchange or subject, never a password.
    pub fn shown(&self) -> String {
        match (&self.destination, &self.subject) {
            (Destination::Amqp { exchange, .. }, _) => {
                format!("{}/{exchange}", self.destination.shown())
            }
            (_, Some(subject)) => format!("{}/{subject}", self.destination.shown()),
            _ => self.destination.shown(),
        }
    }

    /// Publishes the rejected deliveries, each with its reason; all of them stored, or an error
    /// (then none is settled, and the broker delivers them again).
    pub fn send(&mut self, rejected: &[Rejected<'_>]) -> anyhow::Result<()> {
        let shown = self.shown();
        let sink = match &mut self.sink {
            Some(sink) => sink,
            None => self.sink.insert(
                super::connect(&self.destination, &self.stop)
                    .with_context(|| format!("--dead-letter {shown}"))?,
            ),
        };
        let batch: Vec<Outgoing> = rejected
            .iter()
            .map(|d| {
                let mut attributes = vec![
                    (Attr::DeadLetterReason, header_value(&d.reason)),
                    (Attr::DeadLetterSource, header_value(d.source)),
                ];
                if let Some(f) = d.filename {
                    attributes.push((Attr::DeadLetterFilename, header_value(f)));
                }
                Outgoing {
                    // The same whenever it is sent again: JetStream drops a second copy.
                    id: format!(
                        "dead-letter:{}:{}",
                        d.source,
                        &hex::encode(Sha256::digest(d.body))[..32]
                    ),
                    subject: self
                        .subject
                        .clone()
                        .unwrap_or_else(|| d.subject.to_string()),
                    attributes,
                    body: d.body.clone(),
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
