//! Taking interchanges from a broker: what a delivery is (its bytes, the broker's identity for
//! it, how often it came) and the sources that give them: a NATS JetStream pull consumer
//! (`nats/`), a RabbitMQ queue (`amqp/`), Kafka topics read by a consumer group (`kafka/`) and an
//! Amazon SQS queue (`sqs.rs`). As in [`crate::publish`], the brokers' code is
//! asynchronous on a current-thread runtime each source keeps to itself, and offers the rest of
//! the program blocking calls: [`Feed::fetch`], then, once the inbox committed,
//! [`Feed::settle`].
//!
//! Where a new thing goes: a new broker's source in a module of its name here, implementing
//! [`Source`] and [`Feed`], with its line in the broker table (`crate::brokers`); what it shares with the broker's sink
//! in `crate::broker`; the relay that repairs frames before a client sees them, `relay.rs`.

#[cfg(feature = "amqp")]
pub(crate) mod amqp;
#[cfg(feature = "kafka")]
pub(crate) mod kafka;
mod log;
#[cfg(feature = "nats")]
pub(crate) mod nats;
#[cfg(feature = "broker")]
mod relay;
#[cfg(feature = "sqs")]
pub(crate) mod sqs;

use std::time::Duration;

pub use log::{LogFigures, PartitionedLog};

/// Where `consume --from` takes deliveries, read by its module.
pub trait Source: std::fmt::Debug {
    /// For messages: never the password.
    fn shown(&self) -> String;

    /// Subscribes (each wait bounded by the broker's timeouts).
    fn connect(&self, options: Options) -> anyhow::Result<Box<dyn Feed>>;

    /// True where the inbox keeps this source's positions ([`PartitionedLog::group`]): its feed is
    /// given a [`PositionLookup`].
    fn keeps_positions(&self) -> bool {
        false
    }
}

/// One delivery: the bytes of one file, one or more interchanges.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// What [`Feed::settle`] takes to acknowledge it; valid until the feed reconnects.
    pub tag: u64,
    /// The broker's identity for it, in its source's form (`nats:STREAM/SEQUENCE`, say; each
    /// source's module says its own). The same for every redelivery of it, but where a source
    /// says otherwise (RabbitMQ's, for a delivery without a `message_id`).
    pub source: String,
    /// The subject or routing key it was published with (a dead letter keeps it).
    pub subject: String,
    /// Its `edi-filename` header.
    pub filename: Option<String>,
    /// How many times the broker has delivered it, this time included.
    pub delivery_count: u32,
    /// `source` is this delivery's alone (see [`crate::intake::Incoming::named_per_delivery`]).
    pub named_per_delivery: bool,
    pub body: bytes::Bytes,
    /// A Kafka record's key (escaped where it is not UTF-8).
    pub key: Option<String>,
    /// When its producer (or the broker) says it was produced, RFC 3339 UTC.
    pub produced_at: Option<String>,
    /// Its place in a partitioned log (Kafka), whose position the inbox keeps
    /// ([`PartitionedLog::group`]).
    pub position: Option<Position>,
}

impl Delivery {
    /// A delivery `tag` named `source` by its broker, published under `subject`, holding
    /// `body`: delivered once, with no file name, key, time or place in a partitioned log; a
    /// source sets what its broker says beyond that.
    pub fn new(tag: u64, source: String, subject: String, body: bytes::Bytes) -> Delivery {
        Delivery {
            tag,
            source,
            subject,
            filename: None,
            delivery_count: 1,
            named_per_delivery: false,
            body,
            key: None,
            produced_at: None,
            position: None,
        }
    }

    /// What the intake needs of it.
    pub fn incoming(&self) -> crate::intake::Incoming<'_> {
        crate::intake::Incoming {
            name: &self.source,
            filename: self.filename.as_deref(),
            delivery_count: self.delivery_count,
            named_per_delivery: self.named_per_delivery,
            key: self.key.as_deref(),
            produced_at: self.produced_at.as_deref(),
            bytes: &self.body,
        }
    }
}

/// A record's place in a partitioned log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The id of the topic it came from (KIP-516), where the brokers give one: a stored
    /// position of another id is another topic's (deleted and created again under the name).
    pub topic_id: Option<std::sync::Arc<str>>,
    /// The partition's stored position was lost (the log no longer holds it) and its records
    /// are decided from where the log starts now (`--on-position-lost earliest`): the stored
    /// position is replaced by this batch's, not moved forward only.
    pub restart: bool,
}

/// What `consume` does where the inbox's position of a partition is not in the partition's
/// log any more (`--on-position-lost`): the topic was emptied, truncated, deleted and created
/// again where the brokers keep no topic ids, or the records below the log's start were
/// deleted before they were decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnPositionLost {
    /// The run ends (exit 1) naming each position and what the log holds: nothing is decided
    /// from such a partition until an operator looks.
    #[default]
    Fail,
    /// The partition's records are decided from the log's start now (interchanges decided
    /// before are duplicates); said on standard error and in the metrics.
    Earliest,
}

/// Positions the inbox keeps that the log no longer holds, with `--on-position-lost fail`: the
/// run's end, not a connection to make again.
#[derive(Debug)]
pub struct PositionsLost(pub Vec<String>);

impl std::fmt::Display for PositionsLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}; nothing of it was decided (--on-position-lost fail): see that the topic is the one meant, then run once with --on-position-lost earliest to decide its records from the log's start",
            self.0.join("; ")
        )
    }
}

impl std::error::Error for PositionsLost {}

pub use crate::intake::Unreadable;

/// What becomes of a delivery once its decisions are committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Done with: not delivered again.
    Ack,
    /// Rejected input, recorded: settled so that the broker does not deliver it again, as its
    /// source does that (terminated, rejected without requeue to the queue's dead-letter
    /// exchange, deleted, or passed by the position).
    Reject,
}

/// A broker's deliveries, connected.
pub trait Feed {
    /// Up to `max` deliveries: those ready at once, or else those that come within `wait`
    /// (none when nothing came). An error means the connection failed: deliveries not
    /// returned come again when the broker hands them out again (at once, or after an ack wait
    /// or visibility timeout).
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>>;

    /// Acknowledges or rejects deliveries (after the commit): the answers are written to the
    /// connection before it returns (not confirmed by the broker). An error, or an answer lost
    /// with the connection, means the broker delivers those again, and the inbox decides them
    /// as duplicates.
    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()>;

    /// Why the body of a delivery of the last fetches (by its tag) cannot be read as its
    /// broker's metadata says it is written; `None` for one that can (and for every delivery
    /// of a broker whose bodies are bytes as they are).
    fn unreadable(&self, _tag: u64) -> Option<Unreadable> {
        None
    }

    /// Called again and again while a batch waits on a slow inbox, for up to `wait` each: keeps
    /// the consumer's place with the broker without taking deliveries (a Kafka consumer not
    /// polled within `max.poll.interval.ms` is put out of its group). The first call may say
    /// what it did. Nothing to do for a broker without such a limit.
    fn hold(&mut self, wait: Duration) -> anyhow::Result<Option<String>> {
        std::thread::sleep(wait);
        Ok(None)
    }

    /// After [`Feed::hold`]: takes deliveries again.
    fn release(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// The partitioned log it reads, where its broker has one (a Kafka consumer group's
    /// topics): an optional capability, `None` for a broker that settles deliveries itself.
    fn log(&mut self) -> Option<&mut dyn PartitionedLog> {
        None
    }
}

/// The inbox's committed positions, for a feed that places its consumer at them whenever it
/// is given partitions (from the client's own thread).
#[derive(Clone)]
pub struct PositionLookup(
    pub std::sync::Arc<std::sync::Mutex<Box<dyn crate::inbox::PositionReader + Send>>>,
);

impl std::fmt::Debug for PositionLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PositionLookup")
    }
}

/// What a source is set up with.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--batch`: the most deliveries fetched (and unacknowledged) at once.
    pub batch: usize,
    /// `--ack-wait`: the ack wait of a JetStream consumer made where missing (2 minutes where
    /// not given), the visibility timeout of an SQS receive (the queue's where not given).
    pub ack_wait: Option<Duration>,
    /// `--group`: the consumer group (Kafka).
    pub group: Option<String>,
    /// The inbox's positions, for a source that keeps them there (Kafka).
    pub positions: Option<PositionLookup>,
    /// `--on-position-lost`: where a stored position is not in its partition's log.
    pub on_position_lost: OnPositionLost,
}

/// The header naming the file a delivery was (`edi-filename`).
pub const FILENAME_HEADER: &str = "edi-filename";
