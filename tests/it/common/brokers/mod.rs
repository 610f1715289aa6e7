//! The machine's brokers for the publish tests: a JetStream stream (NATS on 127.0.0.1:4222),
//! a RabbitMQ exchange and queue (127.0.0.1:5672, guest/guest), a Kafka topic (the test
//! broker `.ci/run` starts, `kafka.rs`) or an SQS queue (moto, `sqs.rs`) of a test's own, under unique
//! names, removed at the end, so that tests run in parallel and leave nothing behind. Where a
//! broker does not answer, the test is skipped with a notice, unless its `EDI_INBOX_REQUIRE_NATS`,
//! `_RABBITMQ`, `_KAFKA` or `_SQS` is set (`.ci/run` sets each): then it fails
//! (`common::require`).
//!
//! [`TestBroker`] is what the contract tests of `consume` need of either broker, so that each
//! contract is one body run per broker (see `per_broker!`).

use std::collections::BTreeMap;

#[cfg(feature = "amqp")]
mod amqp;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "sqs")]
pub mod sqs;

#[cfg(feature = "amqp")]
pub use amqp::{AMQP, Rabbit, close_rabbitmq_connection};
#[cfg(feature = "kafka")]
pub use kafka::Kafka;
#[cfg(feature = "nats")]
pub use nats::{Jet, NATS, OwnNats};
#[cfg(feature = "sqs")]
pub use sqs::Sqs;

#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
pub(super) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What [`TestBroker::watch_refused`] gives: each call, what the broker was told to drop for
/// good since the last (with the body where the broker keeps it).
pub type Watch<'a> = Box<dyn FnMut() -> Vec<Option<Vec<u8>>> + 'a>;

/// A message as a broker holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub subject: String,
    /// Headers (NATS) or properties and application properties (AMQP), by name.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A message for [`TestBroker::send`]: its body, its broker id (RabbitMQ's `message_id`; a
/// JetStream message is named by its stream sequence, and this is not sent) and the name of
/// the file it stands for (the `edi-filename` header), where given.
#[derive(Debug, Clone)]
pub struct Put {
    pub body: Vec<u8>,
    pub id: Option<String>,
    pub name: Option<String>,
}

impl Put {
    /// `body` under `id`, without a file name.
    pub fn new(body: &[u8], id: impl Into<String>) -> Put {
        Put {
            body: body.to_vec(),
            id: Some(id.into()),
            name: None,
        }
    }

    /// The same with the file name `name`.
    pub fn named(mut self, name: impl Into<String>) -> Put {
        self.name = Some(name.into());
        self
    }
}

/// What the tests of `consume` need of a broker, whichever it is: a source of the test's own
/// (a JetStream stream and its durable consumer `c`, or a RabbitMQ queue with a dead-letter
/// exchange of its own), removed at the end.
pub trait TestBroker: Sized {
    /// Whether `consume` says `reconnecting` whenever its connection is dropped. RabbitMQ's
    /// close is always seen; NATS's client library reconnects on its own, and whether a pull
    /// failed meanwhile depends on timing.
    const SAYS_RECONNECTING: bool;

    /// Whether the broker drops an acknowledged delivery for good just as it drops a refused
    /// one (SQS deletes both), so that [`TestBroker::watch_refused`] counts the acknowledged
    /// too.
    const DROPS_THE_ACKNOWLEDGED: bool = false;

    /// A source of its own; `None` (with a notice) where the broker does not answer, unless its
    /// `EDI_INBOX_REQUIRE_*` is set: then it panics (`common::require`).
    fn create() -> Option<Self>;

    /// The same source, made where [`TestBroker::drop_connection_of`] can drop consume's
    /// connection without other tests seeing it: for NATS a server of the test's own (its store
    /// in `dir`), which it restarts; RabbitMQ closes a named connection, so this is `self`.
    fn droppable(self, dir: &std::path::Path) -> Option<Self>;

    /// Puts `messages` on the source, in order, each confirmed.
    fn send(&self, messages: &[Put]);

    /// What `consume --from` gets.
    fn source_url(&self) -> String;

    /// How consume names the delivery of the `seq`-th message sent (from 1) with id `id`.
    fn source(&self, seq: usize, id: &str) -> String;

    /// How the names of this source's deliveries start.
    fn source_prefix(&self) -> String;

    /// Messages not yet acknowledged (not delivered, or delivered and not acknowledged);
    /// `None` where the broker cannot say (no consumer yet, a server down).
    fn unacknowledged(&self) -> Option<u64>;

    /// The `--dead-letter` destination whose dead letters land here.
    fn dead_letter_to(&self) -> String;

    /// The subject (NATS) or routing key (AMQP) a dead letter sent here is held under.
    fn dead_letter_subject(&self) -> String;

    /// What dead letters this destination holds.
    fn dead_lettered(&self) -> Vec<Held>;

    /// Starts watching what the broker is told to drop for good (JetStream's advisories that
    /// a message was terminated; what RabbitMQ dead-lettered through the queue's own
    /// dead-letter exchange): each call then says what came since, with its body where the
    /// broker keeps it. `None` for a broker that is told nothing of a rejected delivery (Kafka:
    /// the record is decided, and its partition's position moves past it).
    fn watch_refused(&self) -> Option<Watch<'_>>;

    /// Drops the connection of the consume process `pid` under it, as a broker restart does
    /// (RabbitMQ's and SQS's fail where they found no connection to drop).
    fn drop_connection_of(&mut self, pid: u32);

    /// How many of `n` messages a contract sends through this broker: all of them, but for a
    /// test server that slows down with every message a queue holds (moto's SQS), where a
    /// tenth shows the same.
    fn many(n: usize) -> usize {
        n
    }
}
