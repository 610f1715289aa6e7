//! Taking interchanges from a broker: what a delivery is (its bytes, the broker's identity for
//! it, how often it came) and the sources that give them: a NATS JetStream pull consumer
//! (`nats.rs`) and a RabbitMQ queue (`amqp.rs`). As in [`crate::publish`], the brokers' code is
//! asynchronous on a current-thread runtime each source keeps to itself, and offers the rest of
//! the program blocking calls: [`Feed::fetch`], then, once the inbox committed,
//! [`Feed::settle`].

mod amqp;
mod nats;
mod relay;

use std::time::Duration;

/// Where `consume --from` takes deliveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `nats://HOST:PORT/STREAM/CONSUMER`: a durable pull consumer.
    Nats {
        server: String,
        stream: String,
        consumer: String,
    },
    /// `amqp://USER:PASS@HOST:PORT/VHOST/QUEUE`: `url` is the connection's (up to the vhost).
    Amqp { url: String, queue: String },
}

impl Source {
    /// Reads `--from`; the error says what is accepted (never the text, which may hold a
    /// password).
    pub fn parse(text: &str) -> Result<Source, String> {
        if let Some(rest) = text.strip_prefix("nats://") {
            let mut parts = rest.split('/');
            let (Some(server), Some(stream), Some(consumer), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err("--from nats:// takes nats://HOST:PORT/STREAM/CONSUMER".into());
            };
            for (what, name) in [("stream", stream), ("consumer", consumer)] {
                if !is_nats_name(name) {
                    return Err(format!(
                        "the {what} name {name:?} must be letters, digits, - and _ (JetStream's names)"
                    ));
                }
            }
            if server.is_empty() {
                return Err("nats:// needs a server: nats://HOST:PORT/STREAM/CONSUMER".into());
            }
            return Ok(Source::Nats {
                server: format!("nats://{server}"),
                stream: stream.to_string(),
                consumer: consumer.to_string(),
            });
        }
        if text.starts_with("amqp://") {
            let (url, queue) = crate::broker::amqp::split_last_segment(text)
                .ok_or("--from amqp:// takes amqp://USER:PASS@HOST:PORT/VHOST/QUEUE")?;
            return Ok(Source::Amqp { url, queue });
        }
        Err(
            "--from takes nats://HOST:PORT/STREAM/CONSUMER or amqp://USER:PASS@HOST:PORT/VHOST/QUEUE"
                .into(),
        )
    }

    /// For messages: never the password.
    pub fn shown(&self) -> String {
        match self {
            Source::Nats {
                server,
                stream,
                consumer,
            } => format!("{}/{stream}/{consumer}", crate::broker::nats::shown(server)),
            Source::Amqp { url, queue } => format!("{}/{queue}", crate::broker::amqp::shown(url)),
        }
    }
}

/// A stream or consumer name JetStream accepts (and that cannot widen a subject).
fn is_nats_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// One delivery: the bytes of one file, one or more interchanges.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// What [`Feed::settle`] takes to acknowledge it; valid until the feed reconnects.
    pub tag: u64,
    /// The broker's identity for it: `nats:STREAM/SEQUENCE`, or `amqp:QUEUE/MESSAGE-ID`
    /// (`amqp:QUEUE/delivery-TAG` where the publisher set no `message_id`). The same for every
    /// redelivery of it (but the last form).
    pub source: String,
    /// The subject or routing key it was published with (a dead letter keeps it).
    pub subject: String,
    /// Its `edi-filename` header.
    pub filename: Option<String>,
    /// How many times the broker has delivered it, this time included.
    pub delivery_count: u32,
    pub body: bytes::Bytes,
}

/// What becomes of a delivery once its decisions are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Done with: not delivered again.
    Ack,
    /// Rejected input, recorded: not delivered again (JetStream: terminated), and dead-lettered
    /// by the broker where the queue has a dead-letter exchange (RabbitMQ).
    Reject,
}

/// A broker's deliveries, connected.
pub trait Feed {
    /// Up to `max` deliveries: those ready at once, or else those that come within `wait`
    /// (none when nothing came). An error means the connection failed: deliveries not
    /// returned come again (at once on RabbitMQ, after the consumer's ack wait on JetStream).
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>>;

    /// Acknowledges or rejects deliveries (after the commit): the answers are written to the
    /// connection before it returns (not confirmed by the broker). An error, or an answer lost
    /// with the connection, means the broker delivers those again, and the inbox decides them
    /// as duplicates.
    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()>;
}

/// What a source is set up with.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `--batch`: the most deliveries fetched (and unacknowledged) at once.
    pub batch: usize,
    /// The ack wait of a JetStream consumer made where missing.
    pub ack_wait: Duration,
}

/// Connects to `source`.
pub fn connect(source: &Source, options: Options) -> anyhow::Result<Box<dyn Feed>> {
    Ok(match source {
        Source::Nats {
            server,
            stream,
            consumer,
        } => Box::new(nats::NatsFeed::connect(server, stream, consumer, options)?),
        Source::Amqp { url, queue } => Box::new(amqp::AmqpFeed::connect(url, queue, options)?),
    })
}

/// The header naming the file a delivery was (`edi-filename`).
pub const FILENAME_HEADER: &str = "edi-filename";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(
            Source::parse("nats://127.0.0.1:4222/EDI/inbox"),
            Ok(Source::Nats {
                server: "nats://127.0.0.1:4222".into(),
                stream: "EDI".into(),
                consumer: "inbox".into()
            })
        );
        assert_eq!(
            Source::parse("amqp://guest:guest@h:5672/%2f/edi.in"),
            Ok(Source::Amqp {
                url: "amqp://guest:guest@h:5672/%2f".into(),
                queue: "edi.in".into()
            })
        );
        assert_eq!(
            Source::parse("amqp://h:5672/q"),
            Ok(Source::Amqp {
                url: "amqp://h:5672".into(),
                queue: "q".into()
            })
        );
        for bad in [
            "nats://h:4222/EDI",
            "nats://h:4222/EDI/a/b",
            "nats://h:4222/E.DI/c",
            "nats:///EDI/c",
            "amqp://h:5672",
            "amqp://h:5672/",
            "file:x",
        ] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_password_is_never_shown() {
        let s = Source::parse("amqp://edi:s3cret@h:5672/vh/q").unwrap();
        assert!(!s.shown().contains("s3cret"), "{}", s.shown());
        assert!(s.shown().ends_with("/vh/q"));
        let s = Source::parse("nats://edi:s3cret@h:4222/S/C").unwrap();
        assert!(!s.shown().contains("s3cret"), "{}", s.shown());
    }
}
