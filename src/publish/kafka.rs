//! `--to kafka://HOST:PORT[,HOST:PORT...]/TOPIC`: Kafka, with librdkafka's idempotent producer
//! (`enable.idempotence`, `acks=all`: a retry inside one producer session never writes a record
//! twice). TOPIC is a template like `--subject` (`edifact.{type}`), rendered per event. The
//! record key is the interchange's sender and recipient (0004/0010, as `SENDER/RECIPIENT`), so
//! that one partner's events land in one partition, in the order they were decided. The
//! CloudEvents attributes are `ce_` headers with `content-type` (the Kafka binary binding); the
//! id is `ce_id`. An event is marked only once its delivery report says it is stored.
//!
//! Kafka does not drop a duplicate sent by a new producer session: a crash between the
//! delivery and the mark sends that event again, under the same id.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};

use super::{Answer, Attr, CONTENT_TYPE, Destination, Outgoing, Sink, SinkError, Stop};
use crate::broker::kafka::{self as broker_kafka, Settings, Target};

/// The form of the URL, for errors.
const FORM: &str = "kafka://HOST:PORT[,HOST:PORT...]/TOPIC";

/// `--to kafka://...` or `--dead-letter kafka://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaDestination {
    target: Target,
    settings: Settings,
    /// The topic, or its template.
    topic: String,
}

/// Reads `--to kafka://...` (the registry's line for Kafka).
pub fn parse(text: &str) -> Result<Box<dyn Destination>, String> {
    read(text, "--to").map(|d| Box::new(d) as Box<dyn Destination>)
}

/// Reads `--dead-letter kafka://HOST:PORT/TOPIC`: each dead letter is a record there.
pub fn dead_letter(text: &str) -> Result<Box<dyn Destination>, String> {
    let d = read(text, "--dead-letter")?;
    if !broker_kafka::is_topic_name(&d.topic) {
        return Err("--dead-letter kafka:// takes one topic name (no placeholders)".into());
    }
    Ok(Box::new(d))
}

fn read(text: &str, flag: &str) -> Result<KafkaDestination, String> {
    let target = broker_kafka::target(text, flag, FORM)?;
    if target.topics.len() != 1 || target.group.is_some() || target.partitions.is_some() {
        return Err(format!("{flag} kafka:// takes {FORM}: one topic"));
    }
    let topic = target.topics[0].clone();
    let settings = Settings::of_this_run()?;
    // Checked now: a wrong setting is the operator's to fix, not a broker to wait for.
    settings.client(&target.servers, "publish", &[])?;
    Ok(KafkaDestination {
        target,
        settings,
        topic,
    })
}

impl Destination for KafkaDestination {
    fn shown(&self) -> String {
        broker_kafka::shown(&self.target)
    }

    /// A dead letter goes to the URL's topic.
    fn subject_prefix(&self) -> Option<&str> {
        Some(&self.topic)
    }

    fn subject_template(&self) -> Option<&str> {
        Some(&self.topic)
    }

    fn connect(&self, stop: &Stop) -> anyhow::Result<Box<dyn Sink>> {
        Ok(Box::new(KafkaSink::connect(
            &self.target,
            &self.settings,
            stop.clone(),
        )?))
    }
}

/// The delivery reports of the batch in flight, by its index in the batch.
struct Reports {
    done: Mutex<Vec<(usize, Result<(), KafkaError>)>>,
}

impl ClientContext for Reports {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, text: &str) {
        broker_kafka::log(level, facility, text);
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let r = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.clone()),
        };
        if let Ok(mut done) = self.done.lock() {
            done.push((index, r));
        }
    }
}

pub struct KafkaSink {
    producer: BaseProducer<Reports>,
    shown: String,
    stop: Stop,
}

impl KafkaSink {
    fn connect(target: &Target, settings: &Settings, stop: Stop) -> anyhow::Result<KafkaSink> {
        let shown = broker_kafka::shown(target);
        let timeout = broker_kafka::TIMEOUT.as_millis().to_string();
        let config = settings
            .client(
                &target.servers,
                "publish",
                &[
                    ("enable.idempotence", "true"),
                    ("acks", "all"),
                    // A record not stored within this is reported failed, never left hanging.
                    ("message.timeout.ms", &timeout),
                    ("linger.ms", "5"),
                ],
            )
            .map_err(|e| anyhow!("{shown}: {e}"))?;
        let producer: BaseProducer<Reports> = config
            .create_with_context(Reports {
                done: Mutex::new(Vec::new()),
            })
            .map_err(|e| anyhow!("{shown}: {}", settings.scrub(&e.to_string())))?;
        producer
            .client()
            .fetch_metadata(None, broker_kafka::TIMEOUT)
            .map_err(|e| anyhow!("cannot connect to {shown}: {e}"))?;
        Ok(KafkaSink {
            producer,
            shown,
            stop,
        })
    }

    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The record key: one partner's events (the interchange's sender and recipient) in one
/// partition, in order; a dead letter by where it came from.
fn key(o: &Outgoing) -> String {
    let value = |a: Attr| o.attributes.iter().find(|(k, _)| *k == a).map(|(_, v)| v);
    match (value(Attr::EdiSender), value(Attr::EdiRecipient)) {
        (Some(s), Some(r)) => format!("{s}/{r}"),
        _ => value(Attr::DeadLetterSource).unwrap_or(&o.id).clone(),
    }
}

/// An attribute's Kafka header: the CloudEvents Kafka binding's `ce_` and its name.
fn header(a: Attr) -> &'static str {
    attr_binding!(a, "ce_")
}

/// What a failed delivery means: the record refused for itself (too large, no such topic, not
/// permitted), or the destination lost.
fn refusal(e: &KafkaError) -> Option<String> {
    let code = match e {
        KafkaError::MessageProduction(code) => *code,
        _ => return None,
    };
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownPartition
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::PolicyViolation
    )
    .then(|| e.to_string())
}

impl Sink for KafkaSink {
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
        let mut answers: Vec<Option<Answer>> = vec![None; batch.len()];
        let mut deadline = Instant::now() + broker_kafka::TIMEOUT;
        let mut lost: Option<anyhow::Error> = None;
        let keys: Vec<String> = batch.iter().map(key).collect();
        'records: for (i, o) in batch.iter().enumerate() {
            let mut headers =
                OwnedHeaders::new_with_capacity(o.attributes.len() + 1).insert(Header {
                    key: "content-type",
                    value: Some(CONTENT_TYPE),
                });
            for (attr, value) in &o.attributes {
                headers = headers.insert(Header {
                    key: header(*attr),
                    value: Some(value.as_str()),
                });
            }
            let mut record = BaseRecord::with_opaque_to(&o.subject, i)
                .key(keys[i].as_str())
                .payload(&o.body[..])
                .headers(headers);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    // The producer's queue is full: its reports make room.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        self.producer.poll(Duration::from_millis(50));
                        if self.stopped() {
                            break 'records;
                        }
                        if Instant::now() > deadline {
                            lost = Some(anyhow!(
                                "{}: the producer's queue stayed full for {} s",
                                self.shown,
                                broker_kafka::TIMEOUT.as_secs()
                            ));
                            break 'records;
                        }
                    }
                    Err((e, _)) => {
                        match refusal(&e) {
                            Some(why) => answers[i] = Some(Answer::Refused(why)),
                            None => {
                                lost = Some(anyhow!("{}: cannot produce: {e}", self.shown));
                                break 'records;
                            }
                        }
                        break;
                    }
                }
            }
        }
        // The reports, each within the timeout of the last sign of progress.
        loop {
            let reports = self
                .producer
                .context()
                .done
                .lock()
                .map(|mut d| std::mem::take(&mut *d))
                .unwrap_or_default();
            if !reports.is_empty() {
                deadline = Instant::now() + broker_kafka::TIMEOUT;
            }
            for (i, r) in reports {
                let Some(slot) = answers.get_mut(i) else {
                    continue;
                };
                *slot = Some(match r {
                    Ok(()) => Answer::Stored,
                    Err(e) => match refusal(&e) {
                        Some(why) => Answer::Refused(why),
                        None => {
                            lost.get_or_insert_with(|| {
                                anyhow!("{}: a record was not stored: {e}", self.shown)
                            });
                            continue;
                        }
                    },
                });
            }
            let pending = self.producer.in_flight_count() > 0;
            if !pending || self.stopped() {
                break;
            }
            if Instant::now() > deadline {
                lost.get_or_insert_with(|| {
                    anyhow!(
                        "{}: no delivery report within {} s",
                        self.shown,
                        broker_kafka::TIMEOUT.as_secs()
                    )
                });
                break;
            }
            self.producer.poll(Duration::from_millis(20));
        }
        // The answers known, in order, up to the first unknown one.
        let known: Vec<Answer> = answers.into_iter().map_while(|a| a).collect();
        if known.len() == batch.len() {
            return (known, None);
        }
        let error = match lost {
            Some(e) => Some(SinkError::Lost(e)),
            // Stopped: nothing unconfirmed is marked; it goes out again, with its ids.
            None if self.stopped() => None,
            None => Some(SinkError::Lost(anyhow!(
                "{}: some records had no delivery report",
                self.shown
            ))),
        };
        (known, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_keeps_a_partners_events_together() {
        let o = |attributes: Vec<(Attr, String)>| Outgoing {
            id: "id1".into(),
            subject: "t".into(),
            attributes,
            body: bytes::Bytes::new(),
        };
        assert_eq!(
            key(&o(vec![
                (Attr::EdiSender, "ACME".into()),
                (Attr::EdiRecipient, "HUB".into())
            ])),
            "ACME/HUB"
        );
        assert_eq!(
            key(&o(vec![(Attr::DeadLetterSource, "kafka:t/0/9".into())])),
            "kafka:t/0/9"
        );
        assert_eq!(key(&o(vec![])), "id1");
        assert_eq!(header(Attr::Id), "ce_id");
        assert_eq!(header(Attr::DeadLetterReason), "edi-inbox-reason");
    }

    #[test]
    fn a_url_names_one_topic() {
        assert!(parse("kafka://h:9092/edifact.{type}").is_ok());
        assert!(dead_letter("kafka://h:9092/edifact.{type}").is_err());
        assert!(dead_letter("kafka://h:9092/edi.dead").is_ok());
        assert!(parse("kafka://h:9092/a,b").is_err());
        assert!(parse("kafka://h:9092/a?group=g").is_err());
    }
}
