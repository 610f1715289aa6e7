//! What the consumer does when the group gives it partitions or takes them away, on the client's
//! callback (inside `poll`): partitions it is given start at the inbox's positions, not Kafka's
//! committed offsets (which trail them after a crash between the two commits); partitions taken
//! away are noted, so that the records of them fetched for a batch not yet decided are dropped.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaResult;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::consume::PositionLookup;

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
    /// Assignments and revocations, for the log line of each.
    pub changes: Vec<String>,
    /// The inbox could not say where to start: the feed fails, and connects again.
    pub failed: Option<String>,
    /// Offset commits to Kafka that failed (the inbox is the truth; lag tools trail).
    pub commit_failures: u64,
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
                self.place(tpl);
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
                        seen.revoked.insert((e.topic().to_string(), e.partition()));
                        seen.started_at
                            .remove(&(e.topic().to_string(), e.partition()));
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

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        if result.is_err()
            && let Ok(mut seen) = self.seen.lock()
        {
            seen.commit_failures += 1;
        }
    }
}

impl Context {
    /// Sets each partition of `tpl` to start at its stored position, where the inbox has one
    /// (elsewhere at Kafka's committed offset, or `auto.offset.reset` where none).
    pub(super) fn place(&self, tpl: &mut TopicPartitionList) {
        let Some(lookup) = &self.positions else {
            return;
        };
        let partitions: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
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
        match stored {
            Ok(stored) => {
                for ((topic, partition), next) in partitions.into_iter().zip(stored) {
                    seen.revoked.remove(&(topic.clone(), partition));
                    if let Some(next) = next {
                        let _ = tpl.set_partition_offset(&topic, partition, Offset::Offset(next));
                        seen.started_at.insert((topic, partition), next);
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

    fn note(&self, what: &str, tpl: &TopicPartitionList, done: KafkaResult<()>) {
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
