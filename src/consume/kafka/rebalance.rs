//! What the consumer does when the group gives it partitions or takes them away, on the client's
//! callback (inside `poll`): partitions it is given start at the inbox's positions, not Kafka's
//! committed offsets (which trail them after a crash between the two commits), where those
//! positions belong to the topic as it is now (its topic id); partitions taken away are noted,
//! so that the records of them fetched for a batch not yet decided are dropped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::client::Client;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaResult, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::broker::kafka::{TopicNow, topic_ids};
use crate::consume::PositionLookup;

/// How long the topics' ids may take to be described at an assignment.
const DESCRIBE_WAIT: Duration = Duration::from_secs(10);

/// The consumer's context: the inbox's positions to start from, and what the callbacks saw.
pub(super) struct Context {
    pub group: String,
    pub positions: Option<PositionLookup>,
    pub seen: Mutex<Seen>,
}

/// What the callbacks saw since the feed last looked.
#[derive(Default)]
pub(super) struct Seen {
    /// Partitions taken away: their records fetched and not yet decided are dropped.
    pub revoked: HashSet<(String, i32)>,
    /// The stored position each assigned partition started at (records below it are skipped).
    pub started_at: HashMap<(String, i32), i64>,
    /// The offset each partition's next record must have, from its stored position on: a
    /// record below it means the log no longer holds the position (the client started the
    /// partition again from its beginning), see `KafkaFeed::look`.
    pub expected: HashMap<(String, i32), i64>,
    /// The watermarks the client kept of each partition with a position when it was given
    /// (older than the assignment: not judged, see `KafkaFeed::judge`).
    pub marks_given: HashMap<(String, i32), Option<(i64, i64)>>,
    /// Partitions whose position was lost and that are read again from the log's start: their
    /// next records replace the position ([`crate::consume::Position::restart`]).
    pub restarting: HashSet<(String, i32)>,
    /// Partitions whose first records since going back came in the records being looked at.
    pub restarted_now: HashSet<(String, i32)>,
    /// The topic id of each topic, as the brokers described it at the last assignment: kept
    /// with each position, so that a topic created again is known for another.
    pub topic_ids: HashMap<String, Option<Arc<str>>>,
    /// Assignments and revocations, for the log line of each.
    pub changes: Vec<String>,
    /// The inbox could not say where to start: the feed fails, and connects again.
    pub failed: Option<String>,
    /// Offset commits to Kafka that failed (the inbox is the truth; lag tools trail).
    pub commit_failures: u64,
    /// Whether a commit refused because the group has members this consumer is not one of was
    /// said already: said once a run, not once a batch.
    pub said_not_a_member: bool,
}

impl ClientContext for Context {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, text: &str) {
        crate::broker::kafka::log(level, facility, text);
    }
}

impl ConsumerContext for Context {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.place(consumer.client(), tpl);
                let done = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                self.note("given", tpl, done);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if let Ok(mut seen) = self.seen.lock() {
                    for e in tpl.elements() {
                        let partition = (e.topic().to_string(), e.partition());
                        seen.started_at.remove(&partition);
                        seen.expected.remove(&partition);
                        seen.restarting.remove(&partition);
                        seen.revoked.insert(partition);
                    }
                }
                let done = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                self.note("taken away", tpl, done);
            }
            other => {
                // The group could not be joined; librdkafka tries again. Whatever was
                // assigned is dropped meanwhile, as the default handler does.
                let _ = consumer.unassign();
                if let Ok(mut seen) = self.seen.lock() {
                    seen.changes.push(format!("rebalance failed: {other:?}"));
                }
            }
        }
    }

    /// A commit refused as a whole, or for one of its partitions, counts as failed.
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        let refused = result.is_err() || offsets.elements().iter().any(|e| e.error().is_err());
        if !refused {
            return;
        }
        let codes = std::iter::once(result.as_ref().err().and_then(|e| e.rdkafka_error_code()))
            .chain(
                offsets
                    .elements()
                    .into_iter()
                    .map(|e| e.error().err().and_then(|e| e.rdkafka_error_code())),
            );
        let not_a_member = codes.flatten().find(|c| {
            matches!(
                c,
                RDKafkaErrorCode::UnknownMemberId | RDKafkaErrorCode::IllegalGeneration
            )
        });
        if let Ok(mut seen) = self.seen.lock() {
            seen.commit_failures += 1;
            if not_a_member.is_some() && !std::mem::replace(&mut seen.said_not_a_member, true) {
                seen.changes.push(commit_refused(
                    &self.group,
                    &codes_text(&result, offsets),
                    not_a_member,
                ));
            }
        }
    }
}

impl Context {
    /// Sets each partition of `tpl` to start at its stored position, where the inbox has one
    /// of the topic as it is now (elsewhere at Kafka's committed offset, or `auto.offset.reset`
    /// where none); a position of the topic under another id (deleted and created again) is
    /// left, said, and the new topic is read from its beginning.
    pub(super) fn place<C: ClientContext>(&self, client: &Client<C>, tpl: &mut TopicPartitionList) {
        let Some(lookup) = &self.positions else {
            return;
        };
        let partitions: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let mut topics: Vec<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        // Asked on the client's own connections, from its callback: the answer comes on
        // librdkafka's threads, not this one.
        let described = topic_ids(client, &topics, DESCRIBE_WAIT);
        let asked: Vec<(&str, i32)> = partitions.iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let stored = match lookup.0.lock() {
            Ok(mut reader) => reader.read(&self.group, &asked),
            Err(_) => Err(crate::inbox::InboxError::Backend(
                "the position reader failed before".into(),
            )),
        };
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        match &described {
            Ok(now) => {
                for (topic, now) in topics.iter().zip(now) {
                    let id = match now {
                        TopicNow::Id(id) => Some(Arc::from(id.as_str())),
                        TopicNow::NoId | TopicNow::Missing => None,
                    };
                    seen.topic_ids.insert(topic.to_string(), id);
                }
            }
            Err(e) => {
                // Without the ids, a position is taken as the topic's own (as before they
                // were kept); a position outside the log is still found by its records.
                seen.changes.push(format!(
                    "the topics' ids could not be asked ({e}); a topic deleted and created again is known only once its records are below the inbox's position"
                ));
                for topic in &topics {
                    seen.topic_ids.entry(topic.to_string()).or_insert(None);
                }
            }
        }
        match stored {
            Ok(stored) => {
                for ((topic, partition), stored) in partitions.into_iter().zip(stored) {
                    let key = (topic.clone(), partition);
                    seen.revoked.remove(&key);
                    seen.started_at.remove(&key);
                    seen.expected.remove(&key);
                    seen.restarting.remove(&key);
                    let marks = crate::broker::kafka::cached_watermarks(client, &topic, partition);
                    seen.marks_given.insert(key.clone(), marks);
                    let Some(stored) = stored else { continue };
                    let now = seen.topic_ids.get(&topic).cloned().flatten();
                    if stored.is_of(now.as_deref()) {
                        let next = stored.next_offset;
                        let _ = tpl.set_partition_offset(&topic, partition, Offset::Offset(next));
                        seen.started_at.insert(key.clone(), next);
                        seen.expected.insert(key, next);
                    } else {
                        seen.changes.push(format!(
                            "the topic {topic} was deleted and created again (its topic id is {}, the inbox's position {} of partition {partition} is of the topic of id {}): the new topic's partition {partition} is decided from its beginning",
                            now.as_deref().unwrap_or("?"),
                            stored.next_offset,
                            stored.topic_id.as_deref().unwrap_or("?"),
                        ));
                        let _ = tpl.set_partition_offset(&topic, partition, Offset::Beginning);
                    }
                }
            }
            Err(e) => {
                seen.failed = Some(format!(
                    "cannot read the consumer's positions from the inbox: {e}"
                ));
            }
        }
    }

    pub(super) fn note(&self, what: &str, tpl: &TopicPartitionList, done: KafkaResult<()>) {
        let list: Vec<String> = tpl
            .elements()
            .iter()
            .map(|e| format!("{}/{}", e.topic(), e.partition()))
            .collect();
        if let Ok(mut seen) = self.seen.lock() {
            match done {
                Ok(()) => seen
                    .changes
                    .push(format!("partitions {what}: {}", list.join(" "))),
                Err(e) => seen.changes.push(format!(
                    "partitions {what} ({}) not taken: {e}",
                    list.join(" ")
                )),
            }
        }
    }
}

/// What a refused commit of the group's offsets says: why, where the broker said the consumer
/// is no member of the group (`code`), and always that the inbox's positions are unharmed.
pub(super) fn commit_refused(group: &str, error: &str, code: Option<RDKafkaErrorCode>) -> String {
    let why = match code {
        Some(RDKafkaErrorCode::UnknownMemberId | RDKafkaErrorCode::IllegalGeneration) => {
            // A run with its partitions given by hand commits as no member of the group, which
            // Kafka refuses while the group has members: one that died and is not yet evicted
            // (until its session times out; the test broker evicts only when another member
            // joins) or one still running.
            ": the group has members this consumer is not one of (partitions given by hand while a member that died is not yet evicted, or while another consumer runs in the group)"
        }
        _ => "",
    };
    format!(
        "Kafka refused the offsets committed for the group {group} ({error}){why}; the inbox keeps its positions and decides nothing twice, but the group's committed offsets, which lag tools read, stay behind until a member of the group commits"
    )
}

/// The errors of a refused commit, as the broker named them (the whole commit's first).
fn codes_text(result: &KafkaResult<()>, offsets: &TopicPartitionList) -> String {
    let mut said: Vec<String> = Vec::new();
    if let Err(e) = result {
        said.push(e.to_string());
    }
    for e in offsets.elements() {
        if let Err(err) = e.error() {
            let text = format!("{}/{}: {err}", e.topic(), e.partition());
            if !said.contains(&text) {
                said.push(text);
            }
        }
    }
    said.join("; ")
}
