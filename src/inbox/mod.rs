//! The inbox: all storage lives behind this boundary. The commands talk to an [`Inbox`], which
//! says what happens (decide, commit, purge a step, count), one capability per trait
//! ([`Decisions`], [`Transaction`], [`Acknowledgements`], [`Positions`], [`Transports`],
//! [`Publishing`], [`Reports`], [`Retention`]); how a backend does it (SQL, locks, write-ahead
//! logs, checkpoints, ids) stays in its module, one per backend (`sqlite/`, `postgres/`), each
//! capability in the file of its name.
//!
//! Where a new thing goes: a new capability's trait here, and its implementation in each
//! backend's file of that name; a record the commands read or write, `records.rs`.
//!
//! A trait object rather than an enum over backends: the commands hold one inbox for a whole run
//! and call it a few thousand times a second at most, so the dynamic call costs nothing that can
//! be measured; the backends differ in far more than their SQL (SQLite's checkpointing thread
//! and read-only probes, a server's connections and set-based batches), and each keeps that
//! state and its helpers private behind the same calls; and tests written against a
//! `&mut dyn Inbox` can run once per backend.
//!
//! No decision is durable before [`Transaction::commit`] (a purge step commits its own short
//! transaction); a batch left open when the inbox is dropped (a failed run) is rolled back.

#[cfg(test)]
mod contract;
pub mod copying;
pub mod effects;
mod location;
pub mod names;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
#[cfg(feature = "sqlite")]
mod sqlite;

use crate::edifact::{EnvelopeError, Interchange};
use crate::standard::Standard;

pub use location::{Location, open, open_copy_source, open_copy_target};
pub use records::{
    AcknowledgementFigures, AcknowledgementRow, ContrlEvent, Decision, DeliveryRecord, DriftedCopy,
    Event, EventEnvelope, EventFilter, Filed, KeptRefusal, KeyHistory, NewAcknowledgement, Outbox,
    OutboxEvent, OutboxFigures, OutboxKinds, PurgeTarget, Reapplied, ReapplyBatch, ReapplyFilter,
    Refusal, RejectedFile, Resend, SentContrl, Sighting, SightingRow, Stats, StoredAcknowledgement,
    StoredInterchange, StoredMessage, StoredRefusal, StoredRejection, Volume, VolumeBy, event_kind,
};

/// An interchange's key: its standard, sender (UNB 0004), recipient (0010), control reference
/// (0020). The standard keeps an X12 interchange apart from an EDIFACT one of the same sender,
/// recipient and control number (issue 41).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterchangeKey<'a> {
    pub standard: Standard,
    pub sender: &'a str,
    pub recipient: &'a str,
    pub control_ref: &'a str,
}

impl<'a> InterchangeKey<'a> {
    /// The key of an interchange as read.
    pub fn of(i: &'a Interchange<'_>) -> InterchangeKey<'a> {
        InterchangeKey {
            standard: i.standard,
            sender: &i.unb.sender,
            recipient: &i.unb.recipient,
            control_ref: &i.unb.control_ref,
        }
    }
}

/// A key as the inbox stores it, owned ([`Reports::interchange_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKey {
    pub standard: Standard,
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
}

/// zstd level for stored interchanges: level 1 gave the same size as level 3 on EDIFACT text
/// (about 0.4x the input, with the rows) for less CPU (see BENCHMARKS.md).
pub const ZSTD_LEVEL: i32 = 1;

/// How much of a rejected file is kept.
pub const REJECTED_BYTES_LIMIT: usize = 4 << 20;

/// How a command opens the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `ingest`: created with its schema where missing (or an empty file).
    Create,
    /// `purge`: read and written, never created.
    Write,
    /// `stats`, `list`, `show`: read only, never created or changed.
    Read,
}

/// An error of a backend's own library, kept whole for its message and its chain.
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("{path} is not an edi-inbox database{reason}")]
    NotAnInbox { path: String, reason: String },
    #[error(
        "{path} has schema version {found}; this edi-inbox knows versions up to {known}: use a newer edi-inbox"
    )]
    TooNew {
        path: String,
        found: i64,
        known: usize,
    },
    /// What to do about it depends on whether `--db` named it: the command says (commands/).
    #[error("there is no inbox database at {path}")]
    Missing { path: String },
    #[error("{path} is a folder: --db names the database file")]
    IsAFolder { path: String },
    #[error("--db: {reason}")]
    BadLocation { reason: String },
    /// The server did not let us in (it does not answer, the database does not exist, the
    /// password is wrong, the certificate is not trusted).
    #[error("cannot connect to {path}: {source}")]
    Connect { path: String, source: BackendError },
    #[error("cannot open {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} has schema version {found} of {known}, from an older edi-inbox: a report does not change the database; run ingest or purge once to bring it up to date"
    )]
    Outdated {
        path: String,
        found: i64,
        known: usize,
    },
    /// Another process held the inbox longer than the busy timeout.
    #[error(transparent)]
    Busy(BackendError),
    /// The open batch lost to another host's transaction (a deadlock, a serialization failure,
    /// a key gone between two statements): rolled back, it may simply be made again.
    #[error(transparent)]
    Conflict(BackendError),
    /// The store refused the data itself (a value it cannot hold, a key too long for its
    /// index): the interchange that holds it is refused, in the store's own words.
    #[error("{source}")]
    Refused {
        reason: String,
        source: BackendError,
    },
    /// Anything else the backend reported.
    #[error(transparent)]
    Backend(BackendError),
    #[error("stored interchange bytes cannot be (de)compressed: {0}")]
    Codec(#[from] std::io::Error),
    /// The operator's side effects cannot be installed (`--effects`): a statement that does not
    /// prepare, or that may not run in the decision's transaction, a migration that fails or
    /// was edited after it was applied. Said before any input is read.
    #[error("--effects {place}: {reason}")]
    Effects { place: String, reason: String },
    /// A side effect failed on the interchange's data: the backend rolls the interchange back
    /// and decides it [`Decision::Refused`]; never seen outside the backend.
    #[error("{0}")]
    EffectFailed(Refusal),
    /// A refusal of the side effects under `--on-effect-error halt`: the run stops there.
    #[error("{0}")]
    Halted(String),
    /// A table `migrate` cannot copy as the target holds it.
    #[error("cannot copy the table {table}: {reason}")]
    Copy { table: String, reason: String },
    /// A claim of transport messages answered for fewer messages than it claimed: a backend's
    /// fault, never the input's.
    #[error("the inbox answered no claim for a transport message")]
    NoClaim,
    /// A side effect ran longer than `--effects-timeout`: a failure of the run, not of the data.
    #[error("{statement} ran longer than --effects-timeout ({seconds} s) and was stopped")]
    EffectTimeout { statement: String, seconds: u64 },
}

impl InboxError {
    /// True where another process held the inbox past the busy timeout: nothing is wrong with
    /// it, and the run may simply be tried again.
    pub fn is_busy(&self) -> bool {
        matches!(self, InboxError::Busy(_))
    }

    /// `reapply --applied` on an inbox with no side effects installed (a caller's mistake: the
    /// command installs them first).
    pub fn no_effects() -> InboxError {
        InboxError::Effects {
            place: "reapply".into(),
            reason: "no side effects are installed".into(),
        }
    }
}

/// Deciding: a batch's interchanges, its rejected input and its deliveries, in the batch's
/// transaction, which stays open until [`Transaction::commit`].
pub trait Decisions {
    /// Decides a batch of interchanges, in one transaction that stays open until
    /// [`Transaction::commit`]; the decisions come back in the batch's order. Each is decided as
    /// if the ones before it in the batch were already in: a later copy of a key is a duplicate
    /// or drift of the earlier one.
    fn decide(&mut self, batch: &[Candidate<'_>]) -> Result<Vec<Decision>, InboxError>;

    /// True where the backend decides best a whole batch at once (a database server, where
    /// each statement is a round trip); false where it may as well decide each file as it comes
    /// (an embedded database), which lets the reading threads work on meanwhile.
    fn decides_whole_batches(&self) -> bool;

    /// Records a file that holds rejected input, keeping its bytes (up to
    /// [`REJECTED_BYTES_LIMIT`]) once however many errors it has; the same file seen again only
    /// counts again. `sha256` is the file's hash, made by the caller once; `sending` the
    /// partner's sending it came in (a file's name without its folder, a delivery's name), by
    /// which [`RejectedFile::seen_before`] tells the same bytes of the same sending recorded
    /// before.
    fn rejected_file(
        &mut self,
        source_file: &str,
        sending: &str,
        bytes: &[u8],
        sha256: &str,
        seen_at: &str,
    ) -> Result<RejectedFile, InboxError>;

    /// Records one rejected piece of input against its file's record, under the key of its
    /// interchange where its UNB was read (so that `list --sender` and `show` find it).
    fn reject(
        &mut self,
        file: &RejectedFile,
        source_file: &str,
        error: &EnvelopeError,
        key: Option<InterchangeKey<'_>>,
        seen_at: &str,
    ) -> Result<(), InboxError>;

    /// Records deliveries taken from a broker in the open batch (after its decisions), with
    /// the counters `consume_deliveries` and `consume_redelivered` (those delivered before).
    fn record_deliveries(
        &mut self,
        deliveries: &[DeliveryRecord<'_>],
        seen_at: &str,
    ) -> Result<(), InboxError>;

    /// Records where the files of committed sightings were moved (`moved_to` of each row), in
    /// one short transaction of its own, after the moves: a crash before it leaves `moved_to`
    /// unknown, never a destination the file did not reach.
    fn record_moves(&mut self, moves: &[(SightingRow, String)]) -> Result<(), InboxError>;

    /// A look at the keys from another thread (`Send`), so that work done ahead (compressing)
    /// can be spared for what will only be a duplicate. A hint only: the decision is still
    /// [`Decisions::decide`]. `None` where the backend cannot offer one.
    fn probe(&self) -> Option<Box<dyn KeyProbe + Send>>;
}

/// The batch's transaction, apart from what is written in it: the writes of every capability
/// ([`Decisions`], [`Acknowledgements`], [`Positions`], [`Transports`]) go into one open batch,
/// which [`Transaction::commit`] makes durable at once or which is rolled back whole
/// ([`Transaction::abandon`], a retry after a conflict, the inbox dropped); a run of many batches
/// lies between [`Transaction::start_run`] and [`Transaction::end_run`].
///
/// No `begin`: the first write of a batch opens it where none is open (each backend's own
/// `begin`, beside these in its `transaction.rs`), so a caller has nothing to forget.
pub trait Transaction {
    /// A run of many batches begins: the backend may start what helps it keep up.
    fn start_run(&mut self);

    /// Makes every write of the batch durable at once.
    fn commit(&mut self) -> Result<(), InboxError>;

    /// Drops every write of the open batch, for a service that goes on after a failure (a
    /// run that ends on one drops the inbox instead, which rolls the batch back).
    fn abandon(&mut self);

    /// Where `e` is a conflict with another host's transaction that only trying again resolves
    /// (a deadlock, a serialization failure), rolls the open batch back and says so: the
    /// caller makes the batch again from its first decision. Never for a store that has no
    /// such conflicts.
    fn rolled_back_for_retry(&mut self, _e: &InboxError) -> bool {
        false
    }

    /// How many open batches it has rolled back since it was opened, to make one again after a
    /// conflict or on a failure: what a caller that took locks in the batch before its decision
    /// (a consumer's positions) compares across the decision, to know whether it still holds
    /// them. Always 0 for a store that never rolls a batch back itself.
    fn rollbacks(&self) -> u64 {
        0
    }

    /// True where the connection to the database is gone for good (the server restarted, the
    /// network cut): a service that goes on opens the inbox again. Never for an embedded store.
    fn is_lost(&self) -> bool {
        false
    }

    /// The run is over: helpers stop, and what it wrote is made whole in the store, so that a
    /// copy of it taken now is complete. Never a failure of the run.
    fn end_run(&mut self);
}

/// The CONTRLs: stored with the decisions they answer, sent again for a partner's resending,
/// and claimed for delivery.
pub trait Acknowledgements {
    /// Stores a CONTRL in the open batch, under the next control reference of its partner's
    /// counter (allocated in the same transaction: a crash never reuses one); returns that
    /// reference.
    fn acknowledge(&mut self, ack: &NewAcknowledgement<'_>) -> Result<String, InboxError>;

    /// Sends the applied copy's answer again (the partner sent its interchange again): the
    /// newest stored for a key that did not reject what it answered (a broken copy's rejection,
    /// a duplicate's, is never its answer; after a purge, the key's new copy's), as a new event in the CONTRL outbox, the same
    /// bytes, once per `sending` (a file's name, a delivery's broker name) not answered yet;
    /// never for `None` (a redelivery its name cannot tell). `Unanswered` where there is none.
    fn resend_acknowledgement(
        &mut self,
        key: InterchangeKey<'_>,
        sending: Option<&str>,
        created_at: &str,
    ) -> Result<Resend, InboxError>;

    /// What `sending` (a file's name, a delivery's broker name) was answered for a key: `None`
    /// where nothing, `Some(true)` where an answer rejected it as a duplicate (a drift, or a
    /// duplicate under `--contrl-duplicates reject`: UCI 4/26, TA1 `R`/`025`), `Some(false)`
    /// where only others. The same sending read again is not answered again.
    fn answered_sending(
        &mut self,
        key: InterchangeKey<'_>,
        sending: &str,
    ) -> Result<Option<bool>, InboxError>;

    /// Takes the counters of these partners (sorted, without repeats) for the open batch
    /// before any of them is used, where other hosts may use them at once.
    fn lock_partners(&mut self, _partners: &[String]) -> Result<(), InboxError> {
        Ok(())
    }

    /// Up to `limit` CONTRLs to deliver, in the order written, claimed as
    /// [`Publishing::pending_events`] claims events.
    fn pending_contrl(
        &self,
        pass: &str,
        retry_after: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<ContrlEvent>, InboxError>;

    /// The CONTRLs stored for a key, oldest first.
    fn acknowledgements(
        &self,
        key: InterchangeKey<'_>,
    ) -> Result<Vec<StoredAcknowledgement>, InboxError>;
}

/// Where `consume` stands in a partitioned log (Kafka): per consumer group, the offset of the
/// next record of each partition to decide. Kept in the inbox, so that it moves in the same
/// transaction as the decisions of the records before it: a crash, a rebalance or a late
/// write of a consumer that lost its partitions never has a record decided twice.
pub trait Positions {
    /// Takes the positions of `partitions` for the open batch (a batch of another host on the
    /// same partitions waits until this one ends) and returns each one's next offset, in
    /// order; `None` where none is stored yet.
    fn claim_positions(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError>;

    /// Moves positions in the open batch to the offset after the last record decided: forward
    /// only, a lower offset than the stored one leaves it; but a position of another topic id
    /// (the topic deleted and created again), or one marked [`Advance::restart`], is replaced.
    /// The topic id is stored where one is given.
    fn advance_positions(
        &mut self,
        group: &str,
        positions: &[Advance<'_>],
        at: &str,
    ) -> Result<(), InboxError>;

    /// The committed positions of `group` (of every group with `None`), by group, topic and
    /// partition.
    fn positions(&self, group: Option<&str>) -> Result<Vec<StoredPosition>, InboxError>;

    /// A reader of the committed positions for another thread (the Kafka client's, which
    /// asks on each assignment of partitions); `None` where the backend cannot offer one.
    fn position_reader(&self) -> Option<Box<dyn PositionReader + Send>>;
}

/// The messages of a transport whose messages name themselves (AS4's `eb:MessageId`): claimed
/// in the batch that decides them, with the answer sent for each, so that a message sent again
/// is answered again the same way and never decided twice.
pub trait Transports {
    /// Claims `message` in the open batch (a batch of another host claiming it waits until this
    /// one ends): [`Claim::New`] where its id is new; where the same sender sent the same content
    /// under it, what was answered when it was first decided (and it is counted as seen again);
    /// else [`Claim::Other`], and nothing is changed.
    fn claim_message(
        &mut self,
        message: &TransportMessage<'_>,
        when: &str,
    ) -> Result<Claim, InboxError> {
        let mut claims = self.claim_messages(&[(*message, None)], when)?;
        claims.pop().ok_or(InboxError::NoClaim)
    }

    /// Claims `messages` in the open batch, as [`Transports::claim_message`] claims one, in one
    /// round trip to the server where it has one: each claim, in their order. The answer given
    /// with a message is stored with it where its claim is new (a message its batch then does
    /// not apply is released with it). Each transport and id comes at most once; two hosts
    /// claiming the same ids in other orders would wait on each other, so they come in the
    /// order of their transports and ids.
    fn claim_messages(
        &mut self,
        messages: &[(TransportMessage<'_>, Option<&[u8]>)],
        when: &str,
    ) -> Result<Vec<Claim>, InboxError>;

    /// Stores the answer to a message claimed in the open batch.
    fn answer_message(
        &mut self,
        transport: &str,
        message_id: &str,
        answer: &[u8],
    ) -> Result<(), InboxError>;

    /// Gives back the claim of a message made in the open batch and not answered (one of its
    /// interchanges refused by the side effects): its sending again is decided as new.
    fn release_message(&mut self, transport: &str, message_id: &str) -> Result<(), InboxError>;

    /// Queues the answer stored for a message claimed in the open batch for delivery to `url`
    /// (AS2's asynchronous MDN), due at once: written with the claim, so that it is delivered
    /// only once the batch commits. A message queued before (its sending again: the sender did
    /// not get it) is due again, to `url`, its delivery tried afresh.
    fn queue_answer(
        &mut self,
        transport: &str,
        message_id: &str,
        url: &str,
        when: &str,
    ) -> Result<(), InboxError>;

    /// Queues `answer`, the negative answer to a message refused (not claimed: its sending
    /// again is decided anew), for delivery to `url`, due at once, in the open batch: an AS2
    /// message the side effects refused whose sender asked for its MDN asynchronously. A
    /// refusal queued before under the id is replaced and due again, its attempts counted on
    /// (so that a try of the one replaced never records this one as delivered). A claim of the
    /// id ([`Transports::claim_messages`]) supersedes a refusal not yet delivered: it is never
    /// sent after (one already under way still is).
    fn queue_refusal(
        &mut self,
        transport: &str,
        message_id: &str,
        url: &str,
        answer: &[u8],
        when: &str,
    ) -> Result<(), InboxError>;

    /// A connection of its own to this inbox, for the thread that delivers the queued answers:
    /// made by the backend from this one's settings, not through `open`, whose checks read the
    /// SQLite file outside SQLite: opening and closing the file beside a live connection drops
    /// this process's POSIX locks on it (SQLite's "How To Corrupt An SQLite Database File",
    /// 2.2). A second SQLite connection is safe: SQLite shares its locks within the process.
    fn answer_outbox(&self) -> Result<Box<dyn AnswerOutbox + Send>, InboxError>;
}

/// The queued answers, as the thread that delivers them sees them: each taken, then recorded
/// as delivered or tried again later ([`Transports::answer_outbox`]).
pub trait AnswerOutbox {
    /// Up to `limit` answers due now, oldest first, each taken for `lease` in one short
    /// transaction (its next try pushed past the lease, its attempt counted), so that another
    /// receiver of a shared inbox does not try it meanwhile; a receiver that dies holding one
    /// leaves it due again once the lease ends.
    fn take_due_answers(
        &mut self,
        lease: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<DueAnswer>, InboxError>;

    /// Records an answer's delivery (the partner's server took it), in one short transaction,
    /// where its row is still the try's (see [`DueAnswer::attempts`]).
    fn answer_delivered(&mut self, due: &DueAnswer) -> Result<(), InboxError>;

    /// Records a failed delivery and its reason, in one short transaction, where its row is
    /// still the try's: tried again after `retry_in`.
    fn answer_not_delivered(
        &mut self,
        due: &DueAnswer,
        error: &str,
        retry_in: std::time::Duration,
    ) -> Result<(), InboxError>;

    /// The answers queued and not delivered yet, and how long the oldest of them has waited,
    /// in whole seconds (a read).
    fn undelivered_answers(&mut self) -> Result<(i64, Option<i64>), InboxError>;

    /// Connects again where the connection was lost (PostgreSQL); a no-op where it was not.
    fn reconnect(&mut self) -> Result<(), InboxError>;
}

/// An answer to deliver ([`AnswerOutbox::take_due_answers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueAnswer {
    pub transport: String,
    pub message_id: String,
    pub url: String,
    /// The attempts made, this one counted: never lowered, so it tells this try from any later
    /// take of the same row (after the lease, or once a sending again queued it again).
    pub attempts: i64,
    /// What is delivered: the answer stored with the message's claim, or a refusal's.
    pub answer: Vec<u8>,
    /// A refused message's negative answer ([`Transports::queue_refusal`]), not the answer
    /// stored with a claim.
    pub refusal: bool,
}

/// What a claim of a transport's message found ([`Transports::claim_message`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Not seen before: claimed now.
    New,
    /// Seen before, with the answer sent then (none where it was not stored).
    Seen(Option<Vec<u8>>),
    /// The id is another message's: another sender's, or other content (the one stored then).
    Other { sender: Option<String> },
}

/// A transport message as it is claimed: its id, who sent it, and a digest of what it carries.
#[derive(Debug, Clone, Copy)]
pub struct TransportMessage<'a> {
    pub transport: &'a str,
    pub message_id: &'a str,
    pub sender: &'a str,
    pub content_sha256: &'a str,
}

/// The committed positions, read from another thread ([`Positions::position_reader`]).
pub trait PositionReader {
    /// Each partition's stored position, in order; `None` where none is stored.
    fn read(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError>;
}

/// A partition's stored position: the offset of the next record to decide, in the topic of
/// that id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub next_offset: i64,
    /// The topic id (KIP-516) the position belongs to; `None` where the brokers gave none, or
    /// the position was stored before edi-inbox kept it.
    pub topic_id: Option<String>,
}

impl Stored {
    /// True where the position belongs to the topic of id `now`: the same id, or either unknown
    /// (nothing says it is another topic).
    pub fn is_of(&self, now: Option<&str>) -> bool {
        match (self.topic_id.as_deref(), now) {
            (Some(stored), Some(now)) => stored == now,
            _ => true,
        }
    }
}

/// Where a batch leaves one partition ([`Positions::advance_positions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// The offset after the last record decided.
    pub next_offset: i64,
    /// The topic id its records came from, where the brokers give one.
    pub topic_id: Option<&'a str>,
    /// The stored position was lost (outside the partition's records) and the records are
    /// decided again from where the log starts now (`--on-position-lost earliest`): replaced,
    /// not moved forward only.
    pub restart: bool,
}

/// One stored position ([`Positions::positions`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredPosition {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// The offset of the next record to decide.
    pub next_offset: i64,
    /// The topic id (KIP-516) the position belongs to, where known.
    pub topic_id: Option<String>,
    pub updated_at: String,
}

/// The outboxes' relay: one publisher at a time, its events claimed in order and marked.
pub trait Publishing {
    /// Takes the lock that keeps a second publisher off this inbox, held as long as the inbox
    /// is open (and given up by the operating system or the server when the process dies).
    /// False where another publisher holds it.
    fn lock_publisher(&mut self) -> Result<bool, InboxError>;

    /// Up to `limit` events to publish, in the order they were written (the order their
    /// interchanges were decided): not published, not parked, not tried in this `pass`, and
    /// not tried within the last `retry_after`. With `whole`, every such event of each
    /// interchange among them too (for publishing interchanges whole). A read, never a
    /// transaction left open. The rows in `leave_out` (a batch still in flight, not marked
    /// yet) are passed over, as though they were marked.
    fn pending_events(
        &self,
        pass: &str,
        retry_after: std::time::Duration,
        limit: u32,
        whole: bool,
        leave_out: &[i64],
    ) -> Result<Vec<OutboxEvent>, InboxError>;

    /// Interchanges' bytes as received (UNA, if any, to UNZ), by id, in one query.
    fn interchange_bytes(
        &self,
        ids: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<u8>>, InboxError>;

    /// Marks events published (the broker confirmed them), in one short transaction.
    fn mark_published(&mut self, outbox: Outbox, rows: &[i64]) -> Result<(), InboxError>;

    /// Records a failed attempt at publishing events, with its reason, in one short
    /// transaction; an event tried `max_attempts` times is parked (no longer claimed). Returns
    /// how many were parked.
    fn mark_failed(
        &mut self,
        outbox: Outbox,
        rows: &[i64],
        error: &str,
        pass: &str,
        max_attempts: u32,
    ) -> Result<usize, InboxError>;

    /// Makes the parked events of `outbox` due again (all of them, or the one of id `id`), in
    /// one short transaction: not failed, no attempt made, so that the next pass claims them
    /// as new (their last error is kept until they go through). Returns their ids, in order.
    fn retry_parked(&mut self, outbox: Outbox, id: Option<i64>) -> Result<Vec<i64>, InboxError>;
}

/// The operator's side effects (`--effects`, docs/effects.md): SQL run in the decision's
/// transaction for each new interchange, after its rows and before its outbox events.
pub trait SideEffects {
    /// Applies the operator's migrations not applied yet (in order, with edi-inbox's own, in one
    /// transaction: an applied one whose file changed is an error), prepares every statement of
    /// `effects` (refusing what may not run in a decision: transaction control, attaching,
    /// pragmas, writes to edi-inbox's own tables) and keeps them: from now on every new
    /// interchange runs them, each statement stopped after the settings' timeout. Before any input is read.
    fn install_effects(
        &mut self,
        effects: std::sync::Arc<crate::effects::Effects>,
        settings: &effects::EffectSettings,
        when: &str,
    ) -> Result<effects::Installation, InboxError>;

    /// What the threads that read ahead may hold of a new interchange's messages for the
    /// installed side effects (handed over as [`Candidate::held`]); `None` where nothing would
    /// be used (no side effects, none reading `:message` only through `message_segments`, or a
    /// backend whose `message_segments` reads the JSON).
    fn hold_ahead(&self) -> Option<effects::HoldAhead> {
        None
    }

    /// What each statement did since the last call, where the settings asked for a trace.
    fn take_trace(&mut self) -> Vec<effects::Traced>;

    /// Runs the installed side effects again (`:reapply` = 1) in the open batch for the applied
    /// messages `filter` names, in the interchanges after id `after`, at most `limit` of them:
    /// each message's statements in a savepoint of its own, so that one failing on its data
    /// is rolled back alone and said; the inbox, its outbox and CONTRLs are left as they are.
    fn reapply_effects(
        &mut self,
        filter: &ReapplyFilter,
        after: i64,
        limit: u32,
        when: &str,
    ) -> Result<ReapplyBatch, InboxError>;
}

/// The interchanges the side effects refused, kept whole until they are decided again
/// (`reapply --refused`).
pub trait Refusals {
    /// The open refusals after id `after` (of `ids` alone where any are given), oldest first,
    /// at most `limit`, with their bytes.
    fn open_refusals(
        &self,
        ids: &[i64],
        after: i64,
        limit: u32,
    ) -> Result<Vec<KeptRefusal>, InboxError>;

    /// Marks an open refusal resolved in the open batch, as its interchange was decided again
    /// (new, or duplicate or drift of a resend taken meanwhile); false where another run
    /// resolved it first.
    fn resolve_refusal(
        &mut self,
        id: i64,
        resolved_as: crate::status::Status,
        when: &str,
    ) -> Result<bool, InboxError>;
}

/// What `stats`, `list`, `show` and the metrics read.
pub trait Reports {
    /// The figures of `stats`.
    fn stats(&self) -> Result<Stats, InboxError>;

    /// The bytes the inbox takes where it is stored.
    fn size_bytes(&self) -> u64;

    /// The most recent events, newest first, past `filter.offset`, at most `filter.limit`.
    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, InboxError>;

    /// How many events match `filter`, whatever its limit and offset.
    fn count_events(&self, filter: &EventFilter) -> Result<u64, InboxError>;

    /// The CONTRLs sent, newest first, matching the key and time parts of `filter` (its
    /// sender is the answered one), past its offset, at most its limit; and how many match.
    fn sent_contrls(&self, filter: &EventFilter) -> Result<(Vec<SentContrl>, u64), InboxError>;

    /// The volumes of each day (UTC) from `since` (a day, `2026-11-01`) for each sender,
    /// recipient or message type, by day then key.
    fn volumes(&self, by: VolumeBy, since: Option<&str>) -> Result<Vec<Volume>, InboxError>;

    /// The key of the interchange stored as `id` (`show` prints it as `stored as #N`).
    fn interchange_key(&self, id: i64) -> Result<Option<StoredKey>, InboxError>;

    /// Everything stored under one key.
    fn key_history(&self, key: InterchangeKey<'_>) -> Result<KeyHistory, InboxError>;

    /// A cumulative counter's value.
    fn counter(&self, c: names::Counter) -> Result<i64, InboxError>;

    /// The copies of a key that drifted (same key, other content), with their bytes, in the
    /// order they were seen.
    fn drifted_copies(&self, key: InterchangeKey<'_>) -> Result<Vec<DriftedCopy>, InboxError>;
}

/// The duplicate-detection window: what `purge` counts and deletes.
pub trait Retention {
    /// How many rows of `target` are older than `cutoff` (RFC 3339 UTC).
    fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError>;

    /// Deletes up to `limit` rows of `target` older than `cutoff` in one short transaction of
    /// its own, so that a large purge never holds the inbox for long. Returns how many went.
    fn purge_step(
        &mut self,
        target: PurgeTarget,
        cutoff: &str,
        limit: u32,
    ) -> Result<usize, InboxError>;

    /// The `received_at` of the oldest inbox entry.
    fn oldest_entry(&self) -> Result<Option<String>, InboxError>;
}

/// An inbox, whatever stores it: every capability, each a trait of its own, which each backend
/// implements in the file of the same name (`decisions.rs`, `transaction.rs`, ...). `Send`,
/// so that a batch is decided on a thread of its own while the next one is fetched (`consume`).
pub trait Inbox:
    Decisions
    + Transaction
    + Acknowledgements
    + Positions
    + Transports
    + Publishing
    + Reports
    + Retention
    + SideEffects
    + Refusals
    + Send
{
}

impl<
    T: Decisions
        + Transaction
        + Acknowledgements
        + Positions
        + Transports
        + Publishing
        + Reports
        + Retention
        + SideEffects
        + Refusals
        + Send,
> Inbox for T
{
}

/// One interchange of a batch to decide.
#[derive(Clone, Copy)]
pub struct Candidate<'a> {
    pub interchange: &'a Interchange<'a>,
    /// Its bytes as [`compress`] gives them, where already made; otherwise they are compressed
    /// when it turns out to be new.
    pub compressed: Option<&'a [u8]>,
    /// Its messages held ahead for the side effects, by position; empty where none was.
    pub held: &'a [Option<std::sync::Arc<effects::HeldMessage>>],
    pub source_file: &'a str,
    /// The absolute path of the file it was read from; `None` for a broker's delivery or a
    /// request.
    pub source_path: Option<&'a str>,
    /// When it was received, by this host's clock; a backend with a clock of its own (a
    /// database server shared by hosts whose clocks differ) uses that instead.
    pub received_at: &'a str,
}

impl Candidate<'_> {
    /// Its bytes as the inbox stores them: compressed ahead, or now.
    pub fn stored_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, InboxError> {
        Ok(match self.compressed {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => std::borrow::Cow::Owned(compress(&self.interchange.raw)?),
        })
    }
}

/// Whether a key is in the inbox, asked from a reading thread.
pub trait KeyProbe {
    /// True where the key is in the inbox; false where it is not or the probe cannot tell.
    fn has(&self, key: InterchangeKey<'_>) -> bool;
}

/// This machine's name (`uname -n`), which every host's rows are told apart by: its counters
/// on PostgreSQL, and the sightings it decided.
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// A CONTRL's own control reference (0020, at most 14 characters) from its counter's value.
pub fn contrl_reference(n: i64) -> String {
    format!("{n:014}")
}

/// Our control reference for the `n`th answer to a partner in `standard`: a CONTRL's 0020
/// ([`contrl_reference`]), an X12 answer's nine-digit ISA13.
pub fn ack_reference(standard: crate::standard::Standard, n: i64) -> String {
    match standard {
        crate::standard::Standard::Edifact => contrl_reference(n),
        crate::standard::Standard::X12 => crate::x12::ack::control_number(n),
    }
}

/// Stored interchange bytes back as received, from a zstd frame. The decompression context is
/// kept per thread: a fresh one for each interchange (what `zstd::stream::decode_all` makes)
/// was most of the time `publish` spent on its own.
pub fn decompress(stored: &[u8]) -> Result<Vec<u8>, InboxError> {
    thread_local! {
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    // The size the compressor wrote in the frame; a frame without one (or a lie) is read as a
    // stream instead, which needs no size.
    let size = zstd::zstd_safe::get_frame_content_size(stored)
        .ok()
        .flatten()
        .filter(|&n| n <= 1 << 31);
    let Some(size) = size else {
        return Ok(zstd::stream::decode_all(stored)?);
    };
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match &mut *slot {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new()?),
        };
        match d.decompress(stored, size as usize) {
            Ok(raw) => Ok(raw),
            Err(_) => Ok(zstd::stream::decode_all(stored)?),
        }
    })
}

/// An interchange's bytes as the inbox stores them (a zstd frame), made ahead of the decision so
/// that another thread can do it while this one writes.
pub fn compress(raw: &[u8]) -> Result<Vec<u8>, InboxError> {
    thread_local! {
        // One context per thread, reused: making a fresh one for every interchange (what
        // `zstd::bulk::compress` does) was a tenth of the time spent compressing.
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let compressor = match &mut *slot {
            Some(compressor) => compressor,
            None => slot.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
        };
        Ok(compressor.compress(raw)?)
    })
}
