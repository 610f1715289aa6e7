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
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers as _, Message as _};
use rdkafka::{Offset, TopicPartitionList};

use super::{Delivery, FILENAME_HEADER, Feed, Options, Position, Settle, Source};
use crate::broker::kafka::{self as broker_kafka, Settings, Target};

use rebalance::{Context, Seen};

/// Once the first record of a batch came, how long the next may take to still join it.
const GAP: Duration = Duration::from_millis(20);

/// How long a batch gathers at most.
const MAX_GATHER: Duration = Duration::from_secs(1);

/// How long after connecting a consumer that the group has given no partitions yet counts as
/// joining, not idle (`--until-idle` waits that long on top): the first rebalance of a group
/// takes a few seconds, and a member a group has no partition for must still end such a run.
const JOIN_WAIT: Duration = Duration::from_secs(60);

/// The form of the URL, for errors.
const FORM: &str = "kafka://HOST:PORT[,HOST:PORT...]/TOPIC[,TOPIC...]?group=NAME";

/// `--from kafka://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSource {
    target: Target,
    settings: Settings,
}

/// Reads `--from kafka://...` (the registry's line for Kafka), with this run's settings.
pub fn parse(text: &str) -> Result<Box<dyn Source>, String> {
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
    let settings = Settings::of_this_run()?;
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
}

impl KafkaFeed {
    fn connect(target: &Target, settings: &Settings, options: Options) -> anyhow::Result<Self> {
        let shown = broker_kafka::shown(target);
        let group = options
            .group
            .clone()
            .or_else(|| target.group.clone())
            .ok_or_else(|| {
                anyhow!(
                    "{shown}: a Kafka source needs a consumer group: --group NAME or ?group=NAME"
                )
            })?;
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
        let consumer: BaseConsumer<Context> = config
            .create_with_context(context)
            .map_err(|e| anyhow!("{shown}: {}", settings.scrub(&e.to_string())))?;
        // The topics must exist: a consumer of a topic that is not there would wait for ever.
        for topic in &target.topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), broker_kafka::TIMEOUT)
                .map_err(|e| anyhow!("{shown}: the brokers did not answer: {e}"))?;
            let missing = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .is_none_or(|t| t.error().is_some() || t.partitions().is_empty());
            if missing {
                return Err(anyhow!("{shown}: there is no topic {topic}"));
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
                consumer.context().place(&mut tpl);
                consumer
                    .assign(&tpl)
                    .map_err(|e| anyhow!("{shown}: cannot assign the partitions: {e}"))?;
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
        for change in seen.changes.drain(..) {
            crate::output::warn(&format!("{}: {change}", self.shown));
        }
        let revoked = std::mem::take(&mut seen.revoked);
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
        }
        let in_flight = &mut self.in_flight;
        let mut n = 0;
        taken.retain(|d| {
            n += 1;
            if n <= fresh && revoked.is_empty() {
                return true;
            }
            let keep = d.position.as_ref().is_none_or(|p| {
                let partition = (p.topic.clone(), p.partition);
                // Another consumer has it now, from the inbox's position: not decided here.
                !revoked.contains(&partition)
                    // A record below where its partition started was decided before (looked
                    // at once, as it came).
                    && (n <= fresh
                        || seen
                            .started_at
                            .get(&partition)
                            .is_none_or(|&start| p.offset >= start))
            });
            if !keep {
                in_flight.remove(&d.tag);
            }
            keep
        });
        Ok(())
    }

    /// The delivery of a record, under the next tag.
    fn take(
        in_flight: &mut HashMap<u64, (String, i32, i64)>,
        next_tag: &mut u64,
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
        Delivery {
            tag,
            source: format!("kafka:{topic}/{partition}/{offset}"),
            subject: topic.clone(),
            filename,
            delivery_count: 1,
            body: bytes::Bytes::copy_from_slice(m.payload().unwrap_or_default()),
            key: m.key().map(broker_kafka::text_of),
            produced_at,
            position: Some(Position {
                topic,
                partition,
                offset,
            }),
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
                    taken.push(Self::take(&mut self.in_flight, &mut self.next_tag, &m));
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
            Some(Ok(m)) => held.push(Self::take(&mut self.in_flight, &mut self.next_tag, &m)),
            Some(Err(e)) if is_lost(&e) => return Err(anyhow!("{}: {e}", self.shown)),
            _ => {}
        }
        let looked_at = self.look(&mut held, looked);
        self.held = held;
        looked_at?;
        Ok(said)
    }

    fn take_commit_failures(&mut self) -> u64 {
        self.consumer
            .context()
            .seen
            .lock()
            .map_or(0, |mut seen| std::mem::take(&mut seen.commit_failures))
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

    fn group(&self) -> Option<&str> {
        Some(&self.group)
    }

    fn joining(&self) -> bool {
        !self.assigned && self.connected_at.elapsed() < JOIN_WAIT
    }

    /// What the broker reports (ListOffsets "latest"), partition by partition, a second each at
    /// most; the first that does not answer ends the list.
    fn high_watermarks(&self) -> Vec<(String, i32, i64)> {
        let Ok(assignment) = self.consumer.assignment() else {
            return Vec::new();
        };
        let mut marks = Vec::new();
        for e in assignment.elements() {
            match self
                .consumer
                .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(1))
            {
                Ok((_, high)) => marks.push((e.topic().to_string(), e.partition(), high)),
                Err(_) => break,
            }
        }
        marks
    }
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
        // request timeouts).
        let _ = self.consumer.commit(&tpl, CommitMode::Sync);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_topics_and_a_group_and_is_checked() {
        let s = parse("kafka://127.0.0.1:9092/edi.in?group=hub").unwrap();
        assert_eq!(s.shown(), "kafka://127.0.0.1:9092/edi.in (group hub)");
        for bad in [
            "kafka://h:9092/a b?group=g",
            "kafka://h:9092/a,b?group=g&partitions=0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
