//! `--from kafka://HOST:PORT[,HOST:PORT...]/TOPIC[,TOPIC...]?group=NAME`: Kafka topics read by a
//! consumer group, each record a delivery named `kafka:TOPIC/PARTITION/OFFSET`. The inbox, not
//! Kafka, keeps where the group stands: each partition's position moves in the transaction of
//! the decisions before it (see `crate::inbox::Positions`), a partition the group gives this
//! consumer starts there (`rebalance.rs`), and a record below it is skipped without a decision.
//! Kafka's committed offsets follow after each commit, for the lag tools only. With
//! `&partitions=0,1`, those partitions are assigned by hand (no group membership: a recovery
//! run that must not wait on a rebalance), still at the inbox's positions.
//!
//! librdkafka's `BaseConsumer` is synchronous: the feed polls it on the caller's thread, and
//! its own threads keep the group's heartbeats going while a batch waits on the inbox.

mod rebalance;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers as _, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::{
    Delivery, FILENAME_HEADER, Feed, OnPositionLost, Options, PartitionedLog, Position,
    PositionsLost, Settle, Source,
};
use crate::broker::kafka::{self as broker_kafka, Settings, Target, TopicNow};

use rebalance::{Context, Seen};

/// Once the first record of a batch came, how long the next may take to still join it.
const GAP: Duration = Duration::from_millis(20);

/// How long a batch gathers at most.
const MAX_GATHER: Duration = Duration::from_secs(1);

/// How long after connecting a consumer that the group has given no partitions yet counts as
/// joining, not idle (`--until-idle` waits that long on top): the first rebalance of a group
/// takes a few seconds, and a member a group has no partition for must still end such a run.
const JOIN_WAIT: Duration = Duration::from_secs(60);

/// How often a running consumer asks whether its topics are still the ones it was given (a
/// topic deleted, or deleted and created again under its name, has no or another topic id).
const TOPIC_CHECK_EVERY: Duration = Duration::from_secs(10);

/// The form of the URL, for errors.
const FORM: &str = "kafka://HOST:PORT[,HOST:PORT...]/TOPIC[,TOPIC...]?group=NAME";

/// `--from kafka://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSource {
    target: Target,
    settings: Settings,
}

/// Reads `--from kafka://...` (the broker table's line for Kafka), with the run's settings.
pub fn parse(text: &str, run: &crate::broker::Settings) -> Result<Box<dyn Source>, String> {
    let target = broker_kafka::target(text, "--from", FORM)?;
    if let Some(bad) = target
        .topics
        .iter()
        .find(|t| !broker_kafka::is_topic_name(t))
    {
        return Err(format!(
            "--from kafka://: {bad:?} is not a topic name (letters, digits, '.', '_' and '-')"
        ));
    }
    if target.partitions.is_some() && target.topics.len() != 1 {
        return Err("--from kafka://: partitions= takes one topic".into());
    }
    let settings = Settings::of(run)?;
    // Checked now: a wrong setting is the operator's to fix, not a broker to wait for.
    settings.client(&target.servers, "consume", &[("group.id", "check")])?;
    Ok(Box::new(KafkaSource { target, settings }))
}

impl Source for KafkaSource {
    fn shown(&self) -> String {
        broker_kafka::shown(&self.target)
    }

    fn connect(&self, options: Options) -> anyhow::Result<Box<dyn Feed>> {
        Ok(Box::new(KafkaFeed::connect(
            &self.target,
            &self.settings,
            options,
        )?))
    }

    fn keeps_positions(&self) -> bool {
        true
    }
}

pub struct KafkaFeed {
    consumer: BaseConsumer<Context>,
    shown: String,
    group: String,
    /// The records fetched and not yet settled, by tag.
    in_flight: HashMap<u64, (String, i32, i64)>,
    next_tag: u64,
    connected_at: Instant,
    /// Whether partitions were ever assigned to it (by hand, or by the group).
    assigned: bool,
    /// What was last committed to Kafka per partition, committed again at the end (the
    /// commits after each batch are not waited for).
    committed: HashMap<(String, i32), i64>,
    /// Records polled while the partitions were paused for a slow inbox (a partition given
    /// meanwhile is not paused), for the next fetch.
    held: Vec<Delivery>,
    /// Whether the partitions are paused ([`Feed::hold`]).
    paused: bool,
    /// `--on-position-lost`.
    on_position_lost: OnPositionLost,
    /// Positions found outside their partition's log and decided again from its start.
    positions_lost: u64,
    /// When the topics' ids were last asked while running.
    topics_checked: Instant,
}

impl KafkaFeed {
    fn connect(target: &Target, settings: &Settings, options: Options) -> anyhow::Result<Self> {
        let group = options
            .group
            .clone()
            .or_else(|| target.group.clone())
            .ok_or_else(|| {
                anyhow!(
                    "{}: a Kafka source needs a consumer group: --group NAME or ?group=NAME",
                    broker_kafka::shown(target)
                )
            })?;
        // Named with its group, however it was given (--group or ?group=).
        let shown = broker_kafka::shown(&Target {
            group: Some(group.clone()),
            ..target.clone()
        });
        let config = settings
            .client(
                &target.servers,
                "consume",
                &[
                    ("group.id", &group),
                    // The inbox commits; Kafka's offsets follow it, after the inbox's commit.
                    ("enable.auto.commit", "false"),
                    ("enable.auto.offset.store", "false"),
                    // A partition the inbox holds no position for starts at its beginning:
                    // nothing on the topic is left undecided.
                    ("auto.offset.reset", "earliest"),
                    ("enable.partition.eof", "false"),
                    // librdkafka stops fetching a partition whose queue of records is full and
                    // by default waits a whole second before it looks again: the queue drained
                    // meanwhile, every batch after stalled (consume took twice as long as
                    // `ingest`). Looked at again soon, a quarter of the default queue reads
                    // as fast, in less memory.
                    ("fetch.queue.backoff.ms", "20"),
                    ("queued.max.messages.kbytes", "16384"),
                ],
            )
            .map_err(|e| anyhow!("{shown}: {e}"))?;
        let context = Context {
            group: group.clone(),
            positions: options.positions.clone(),
            seen: Mutex::new(Seen::default()),
        };
        let on_position_lost = options.on_position_lost;
        let consumer: BaseConsumer<Context> = config
            .create_with_context(context)
            .map_err(|e| anyhow!("{shown}: {}", settings.scrub(&e.to_string())))?;
        // The topics must exist: a consumer of a topic that is not there would wait for ever;
        // so must the partitions given by hand, or the consumer would wait on nothing.
        for topic in &target.topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), broker_kafka::TIMEOUT)
                .map_err(|e| anyhow!("{shown}: the brokers did not answer: {e}"))?;
            let found = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .filter(|t| t.error().is_none() && !t.partitions().is_empty());
            let Some(found) = found else {
                return Err(anyhow!("{shown}: there is no topic {topic}"));
            };
            let has: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
            if let Some(absent) = target
                .partitions
                .iter()
                .flatten()
                .find(|p| !has.contains(p))
            {
                return Err(anyhow!(
                    "{shown}: the topic {topic} has no partition {absent} (it has {} partition{}: {})",
                    has.len(),
                    if has.len() == 1 { "" } else { "s" },
                    has.iter()
                        .map(i32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        match &target.partitions {
            None => {
                let topics: Vec<&str> = target.topics.iter().map(String::as_str).collect();
                consumer
                    .subscribe(&topics)
                    .map_err(|e| anyhow!("{shown}: cannot subscribe: {e}"))?;
            }
            Some(partitions) => {
                let mut tpl = TopicPartitionList::new();
                for p in partitions {
                    tpl.add_partition(&target.topics[0], *p);
                }
                consumer.context().place(consumer.client(), &mut tpl);
                let done = consumer.assign(&tpl);
                consumer
                    .context()
                    .note("given (by hand)", &tpl, done.clone());
                done.map_err(|e| anyhow!("{shown}: cannot assign the partitions: {e}"))?;
            }
        }
        Ok(KafkaFeed {
            consumer,
            shown,
            group,
            in_flight: HashMap::new(),
            next_tag: 1,
            connected_at: Instant::now(),
            assigned: target.partitions.is_some(),
            committed: HashMap::new(),
            held: Vec::new(),
            paused: false,
            on_position_lost,
            positions_lost: 0,
            topics_checked: Instant::now(),
        })
    }

    /// What the callbacks saw: a failure to place a partition fails the feed. The records of
    /// `taken` from `fresh` on came since the last look.
    fn look(&mut self, taken: &mut Vec<Delivery>, fresh: usize) -> anyhow::Result<()> {
        if !self.assigned {
            self.assigned = self.consumer.assignment().is_ok_and(|a| a.count() > 0);
        }
        let mut seen = self
            .consumer
            .context()
            .seen
            .lock()
            .map_err(|_| anyhow!("{}: the consumer's state was lost", self.shown))?;
        if let Some(e) = seen.failed.take() {
            return Err(anyhow!("{}: {e}", self.shown));
        }
        let revoked = std::mem::take(&mut seen.revoked);
        let mut looked_before = fresh;
        // Kafka's offsets are brought up to the inbox's positions at the end, even where this
        // run decides nothing (a run after a crash that found everything decided); never for a
        // partition another consumer has now.
        for (partition, &start) in &seen.started_at {
            let c = self.committed.entry(partition.clone()).or_insert(start);
            *c = (*c).max(start);
        }
        self.committed.retain(|p, _| !revoked.contains(p));
        if !revoked.is_empty() {
            // Another consumer has them now: Kafka's offsets for them are its to commit.
            self.in_flight
                .retain(|_, (topic, partition, _)| !revoked.contains(&(topic.clone(), *partition)));
            // Another consumer has it now, from the inbox's position: not decided here.
            let in_flight = &mut self.in_flight;
            let mut n = 0;
            taken.retain(|d| {
                n += 1;
                let gone = d
                    .position
                    .as_ref()
                    .is_some_and(|p| revoked.contains(&(p.topic.clone(), p.partition)));
                if gone {
                    in_flight.remove(&d.tag);
                    // One fewer of those looked at before.
                    looked_before -= usize::from(n <= fresh);
                }
                !gone
            });
        }
        let fresh = looked_before.min(taken.len());
        let lost = judge(
            &self.consumer,
            self.on_position_lost,
            &mut self.positions_lost,
            &mut seen,
            &mut taken[fresh..],
        );
        // Records of a partition lost or started again: they come again, from the log's start.
        let in_flight = &mut self.in_flight;
        taken.retain(|d| {
            let dropped = d.position.as_ref().is_some_and(|p| p.offset < 0);
            if dropped {
                in_flight.remove(&d.tag);
            }
            !dropped
        });
        for change in seen.changes.drain(..) {
            crate::output::warn(&format!("{}: {change}", self.shown));
        }
        drop(seen);
        if !lost.is_empty() {
            return Err(anyhow::Error::new(PositionsLost(lost)).context(self.shown.clone()));
        }
        Ok(())
    }

    /// Every [`TOPIC_CHECK_EVERY`]: whether the topics read are still there under the ids they
    /// had when their partitions were given. A topic deleted, or deleted and created again,
    /// fails the feed: the consumer connects again (once the topic is there), and a topic of
    /// another id is read from its beginning.
    fn check_topics(&mut self) -> anyhow::Result<()> {
        if self.topics_checked.elapsed() < TOPIC_CHECK_EVERY {
            return Ok(());
        }
        self.topics_checked = Instant::now();
        let known: Vec<(String, Option<Arc<str>>)> = match self.consumer.context().seen.lock() {
            Ok(seen) => seen
                .topic_ids
                .iter()
                .map(|(t, id)| (t.clone(), id.clone()))
                .collect(),
            Err(_) => return Err(anyhow!("{}: the consumer's state was lost", self.shown)),
        };
        if known.is_empty() {
            return Ok(());
        }
        let topics: Vec<&str> = known.iter().map(|(t, _)| t.as_str()).collect();
        // A broker slow to answer is no news: asked again at the next check.
        let Ok(now) =
            broker_kafka::topic_ids(self.consumer.client(), &topics, Duration::from_secs(5))
        else {
            return Ok(());
        };
        for ((topic, was), now) in known.iter().zip(now) {
            match (was, now) {
                (_, TopicNow::Missing) => {
                    return Err(anyhow!(
                        "{}: the topic {topic} was deleted; the consumer connects again once it is there",
                        self.shown
                    ));
                }
                (Some(was), TopicNow::Id(now)) if **was != *now => {
                    return Err(anyhow!(
                        "{}: the topic {topic} was deleted and created again (its topic id is {now}, was {was}); the consumer connects again and reads the new topic from its beginning",
                        self.shown
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The delivery of a record, under the next tag.
    fn take(
        in_flight: &mut HashMap<u64, (String, i32, i64)>,
        next_tag: &mut u64,
        context: &Context,
        m: &rdkafka::message::BorrowedMessage<'_>,
    ) -> Delivery {
        let topic = m.topic().to_string();
        let (partition, offset) = (m.partition(), m.offset());
        let tag = *next_tag;
        *next_tag += 1;
        in_flight.insert(tag, (topic.clone(), partition, offset));
        let filename = m.headers().and_then(|h| {
            h.iter()
                .find(|h| h.key == FILENAME_HEADER)
                .and_then(|h| h.value)
                .map(broker_kafka::text_of)
        });
        let produced_at = m.timestamp().to_millis().filter(|&ms| ms >= 0).map(|ms| {
            crate::clock::rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
        });
        let record = Delivery::new(
            tag,
            format!("kafka:{topic}/{partition}/{offset}"),
            topic.clone(),
            bytes::Bytes::copy_from_slice(m.payload().unwrap_or_default()),
        );
        Delivery {
            filename,
            key: m.key().map(broker_kafka::text_of),
            produced_at,
            position: Some(Position {
                topic_id: context
                    .seen
                    .lock()
                    .ok()
                    .and_then(|seen| seen.topic_ids.get(&topic).cloned().flatten()),
                topic,
                partition,
                offset,
                restart: false,
            }),
            ..record
        }
    }
}

/// True for an error after which the consumer cannot go on as it is: it is made again (and
/// joins the group again).
fn is_lost(e: &KafkaError) -> bool {
    let code = match e {
        KafkaError::MessageConsumption(code) | KafkaError::Global(code) => *code,
        KafkaError::MessageConsumptionFatal(_) => return true,
        _ => return false,
    };
    matches!(
        code,
        RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::Fatal
    )
}

impl Feed for KafkaFeed {
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>> {
        self.check_topics()?;
        // What came while the partitions were paused first (looked at as it came).
        let mut taken = std::mem::take(&mut self.held);
        let started = Instant::now();
        let mut timeout = if taken.is_empty() { wait } else { GAP };
        // How many of `taken` were looked at.
        let mut looked = taken.len();
        while taken.len() < max {
            let polled = self.consumer.poll(timeout);
            match polled {
                None => {
                    self.look(&mut taken, looked)?;
                    looked = taken.len();
                    if taken.is_empty() && started.elapsed() < wait {
                        // A rebalance callback ended the poll early: wait on.
                        timeout = wait.saturating_sub(started.elapsed());
                        if timeout.is_zero() {
                            break;
                        }
                        continue;
                    }
                    break;
                }
                Some(Ok(m)) => {
                    taken.push(Self::take(
                        &mut self.in_flight,
                        &mut self.next_tag,
                        self.consumer.context(),
                        &m,
                    ));
                }
                Some(Err(e)) if is_lost(&e) => {
                    return Err(anyhow!("{}: {e}", self.shown));
                }
                // Anything else (a broker connection closed, a fetch that failed once):
                // librdkafka deals with it and goes on.
                Some(Err(_)) => {}
            }
            self.look(&mut taken, looked)?;
            looked = taken.len();
            if !taken.is_empty() {
                // Group commit: what is already here, or comes right after, joins the batch.
                timeout = GAP.min(MAX_GATHER.saturating_sub(started.elapsed()));
            } else if started.elapsed() >= wait {
                break;
            } else {
                timeout = wait.saturating_sub(started.elapsed());
            }
        }
        Ok(taken)
    }

    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()> {
        // Rejected records were decided too: their position moved with the rest.
        let mut next: HashMap<(String, i32), i64> = HashMap::new();
        for (tag, _) in settled {
            if let Some((topic, partition, offset)) = self.in_flight.remove(tag) {
                let n = next.entry((topic, partition)).or_insert(offset + 1);
                *n = (*n).max(offset + 1);
            }
        }
        if next.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in next {
            let _ = tpl.add_partition_offset(&topic, partition, Offset::Offset(offset));
            self.committed.insert((topic, partition), offset);
        }
        // For lag tools only: the inbox holds the positions. A commit refused (the partition
        // taken away meanwhile) changes nothing that matters, and is counted.
        if self.consumer.commit(&tpl, CommitMode::Async).is_err()
            && let Ok(mut seen) = self.consumer.context().seen.lock()
        {
            seen.commit_failures += 1;
        }
        Ok(())
    }

    /// Pauses the assigned partitions (again after each rebalance) and polls, so that the group
    /// does not count the consumer gone while a batch waits on the inbox longer than
    /// `max.poll.interval.ms`.
    fn hold(&mut self, wait: Duration) -> anyhow::Result<Option<String>> {
        let assignment = self
            .consumer
            .assignment()
            .map_err(|e| anyhow!("{}: {e}", self.shown))?;
        self.consumer
            .pause(&assignment)
            .map_err(|e| anyhow!("{}: cannot pause the partitions: {e}", self.shown))?;
        let said = (!self.paused).then(|| {
            format!(
                "{}: the inbox is slow; the partitions are paused while a batch waits on it, and the consumer stays in its group",
                self.shown
            )
        });
        self.paused = true;
        let mut held = std::mem::take(&mut self.held);
        let looked = held.len();
        match self.consumer.poll(wait) {
            Some(Ok(m)) => held.push(Self::take(
                &mut self.in_flight,
                &mut self.next_tag,
                self.consumer.context(),
                &m,
            )),
            Some(Err(e)) if is_lost(&e) => return Err(anyhow!("{}: {e}", self.shown)),
            _ => {}
        }
        let looked_at = self.look(&mut held, looked);
        self.held = held;
        looked_at?;
        Ok(said)
    }

    fn release(&mut self) -> anyhow::Result<()> {
        if !std::mem::take(&mut self.paused) {
            return Ok(());
        }
        let assignment = self
            .consumer
            .assignment()
            .map_err(|e| anyhow!("{}: {e}", self.shown))?;
        self.consumer
            .resume(&assignment)
            .map_err(|e| anyhow!("{}: cannot resume the partitions: {e}", self.shown))
    }

    fn log(&mut self) -> Option<&mut dyn PartitionedLog> {
        Some(self)
    }
}

impl PartitionedLog for KafkaFeed {
    fn group(&self) -> &str {
        &self.group
    }

    fn joining(&self) -> bool {
        !self.assigned && self.connected_at.elapsed() < JOIN_WAIT
    }

    /// The high watermark of each partition given, as the last fetch response gave it (no
    /// request: ListOffsets is not asked, and the test broker answers it wrongly).
    fn high_watermarks(&self) -> Vec<(String, i32, i64)> {
        let Ok(assignment) = self.consumer.assignment() else {
            return Vec::new();
        };
        assignment
            .elements()
            .iter()
            .filter_map(|e| {
                broker_kafka::cached_watermarks(self.consumer.client(), e.topic(), e.partition())
                    .map(|(_, high)| (e.topic().to_string(), e.partition(), high))
            })
            .collect()
    }

    fn take_commit_failures(&mut self) -> u64 {
        self.consumer
            .context()
            .seen
            .lock()
            .map_or(0, |mut seen| std::mem::take(&mut seen.commit_failures))
    }

    fn take_positions_lost(&mut self) -> u64 {
        std::mem::take(&mut self.positions_lost)
    }
}

/// Whether each partition's log still holds the position the inbox keeps for it: judged by
/// the `fresh` records as they come (one below the position, or past a gap the log's start
/// has moved beyond), and by the watermarks of the fetches since the partition was given
/// (its end below the position). A position lost fails the feed with
/// `--on-position-lost fail` (returned, each said); with `earliest` the partition is read
/// again from the log's start and its next records replace the position. A record to drop
/// (it comes again) is given the offset -1.
fn judge(
    consumer: &BaseConsumer<Context>,
    on_position_lost: OnPositionLost,
    positions_lost: &mut u64,
    seen: &mut Seen,
    fresh: &mut [Delivery],
) -> Vec<String> {
    let client = consumer.client();
    seen.restarted_now.clear();
    let mut lost_now: Vec<((String, i32), String)> = Vec::new();
    for d in fresh.iter_mut() {
        let Some(p) = d.position.as_mut() else {
            continue;
        };
        let key = (p.topic.clone(), p.partition);
        if lost_now.iter().any(|(k, _)| *k == key) {
            p.offset = -1;
            continue;
        }
        // The first records after it went back to the log's start replace the position;
        // the batches after theirs move it forward from there.
        if seen.restarting.remove(&key) {
            p.restart = true;
            seen.restarted_now.insert(key);
            continue;
        }
        if seen.restarted_now.contains(&key) {
            p.restart = true;
            continue;
        }
        let Some(want) = seen.expected.get_mut(&key) else {
            continue;
        };
        let log = broker_kafka::cached_watermarks(client, &p.topic, p.partition);
        let gap_lost = matches!(log, Some((low, _)) if p.offset > *want && low > *want);
        if p.offset < *want || gap_lost {
            let said = lost_position(&p.topic, p.partition, *want, Some(p.offset), log);
            p.offset = -1;
            lost_now.push((key, said));
        } else {
            *want = p.offset + 1;
        }
    }
    // Where nothing came: a log whose end is below the position (the test broker answers
    // such a fetch with nothing, Kafka with OFFSET_OUT_OF_RANGE), or whose start is past it.
    // Only watermarks that changed since the partition was given are judged: those the
    // client kept from before may be older than the position.
    for (key, want) in &seen.expected {
        if lost_now.iter().any(|(k, _)| k == key) {
            continue;
        }
        let log = broker_kafka::cached_watermarks(client, &key.0, key.1);
        let given = seen.marks_given.get(key).copied().flatten();
        if let Some((low, high)) = log
            && log != given
            && (high < *want || low > *want)
        {
            lost_now.push((key.clone(), lost_position(&key.0, key.1, *want, None, log)));
        }
    }
    let mut lost = Vec::new();
    for (key, said) in lost_now {
        seen.expected.remove(&key);
        *positions_lost += 1;
        match on_position_lost {
            OnPositionLost::Fail => lost.push(said),
            OnPositionLost::Earliest => {
                // From the log's start: the client may not have gone back by itself (it
                // does only where the broker says the offset is out of range).
                let seek = consumer.seek(&key.0, key.1, Offset::Beginning, Duration::from_secs(5));
                match seek {
                    Ok(()) => seen.changes.push(format!(
                        "{said}; its records are decided from the log's start (--on-position-lost earliest)"
                    )),
                    Err(e) => {
                        seen.failed = Some(format!(
                            "{said}; it could not be read again from the log's start ({e}); the consumer connects again"
                        ))
                    }
                }
                seen.restarting.insert(key);
            }
        }
    }
    lost
}

/// What is said of a partition whose stored position `want` its log no longer holds: the
/// record that came instead, and the log's bounds where the client knows them.
fn lost_position(
    topic: &str,
    partition: i32,
    want: i64,
    came: Option<i64>,
    log: Option<(i64, i64)>,
) -> String {
    let bounds = match log {
        Some((low, high)) if high > low => format!("the log holds offsets {low} to {}", high - 1),
        Some((low, _)) => format!("the log is empty, its next offset {low}"),
        None => "the log's bounds are not known".to_string(),
    };
    let (what, why) = match (came, log) {
        (Some(came), _) if came < want => (
            format!("the next record came at offset {came}"),
            "the topic was emptied, truncated, or deleted and created again without a topic id",
        ),
        (Some(came), _) => (
            format!("the next record came at offset {came}"),
            "the records between were deleted before they were decided",
        ),
        (None, Some((low, _))) if low > want => (
            "nothing came".to_string(),
            "the records from the position on were deleted before they were decided",
        ),
        (None, _) => (
            "nothing came".to_string(),
            "the position is past the log's end: the topic was emptied, truncated, or deleted and created again without a topic id",
        ),
    };
    format!(
        "kafka:{topic}/{partition}: the inbox's position {want} is not in the partition's log ({what}; {bounds}): {why}"
    )
}

impl Drop for KafkaFeed {
    /// Commits the last positions to Kafka and waits for the answer, so that lag tools see where
    /// the run ended; the consumer then leaves its group as it is dropped.
    fn drop(&mut self) {
        if self.committed.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &self.committed {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset));
        }
        // Waited for: the commits after each batch were not (librdkafka bounds the wait by its
        // request timeouts). A refusal is said (issue 36, item 9: a run with its partitions
        // given by hand, while the group had a member, left the group's offsets behind without
        // a word): the inbox's positions are unharmed, but lag tools read these.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync) {
            let said = self
                .consumer
                .context()
                .seen
                .lock()
                .is_ok_and(|seen| seen.said_not_a_member);
            if !said {
                crate::output::warn(&format!(
                    "{}: {}",
                    self.shown,
                    rebalance::commit_refused(&self.group, &e.to_string(), e.rdkafka_error_code())
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_topics_and_a_group_and_is_checked() {
        let s = parse(
            "kafka://127.0.0.1:9092/edi.in?group=hub",
            &Default::default(),
        )
        .unwrap();
        assert_eq!(s.shown(), "kafka://127.0.0.1:9092/edi.in (group hub)");
        for bad in [
            "kafka://h:9092/a b?group=g",
            "kafka://h:9092/a,b?group=g&partitions=0",
        ] {
            assert!(parse(bad, &Default::default()).is_err(), "{bad}");
        }
    }
}
