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

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};

use super::{Answer, Attr, Destination, Outgoing, Sink, SinkError, Stop};
use crate::broker::kafka::{self as broker_kafka, Settings, Target};

/// How long a wait for delivery reports lasts before the stop flag and the deadline are looked
/// at again: a report wakes it at once. (The reports are served by the producer's own polling
/// thread: a poll here, librdkafka's `BaseProducer::poll`, serves reports until its timeout is
/// over and never returns at the first, which made every batch wait that long past its last
/// report, a third of the time `publish` took.)
const WAIT: Duration = Duration::from_millis(100);

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

/// Reads `--to kafka://...` (the broker table's line for Kafka).
pub fn parse(text: &str, run: &crate::broker::Settings) -> Result<Box<dyn Destination>, String> {
    read(text, "--to", run).map(|d| Box::new(d) as Box<dyn Destination>)
}

/// Reads `--dead-letter kafka://HOST:PORT/TOPIC`: each dead letter is a record there.
pub fn dead_letter(
    text: &str,
    run: &crate::broker::Settings,
) -> Result<Box<dyn Destination>, String> {
    let d = read(text, "--dead-letter", run)?;
    if !broker_kafka::is_topic_name(&d.topic) {
        return Err("--dead-letter kafka:// takes one topic name (no placeholders)".into());
    }
    Ok(Box::new(d))
}

fn read(text: &str, flag: &str, run: &crate::broker::Settings) -> Result<KafkaDestination, String> {
    let target = broker_kafka::target(text, flag, FORM)?;
    if target.topics.len() != 1 || target.group.is_some() || target.partitions.is_some() {
        return Err(format!("{flag} kafka:// takes {FORM}: one topic"));
    }
    let topic = target.topics[0].clone();
    let settings = Settings::of(run)?;
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

/// The delivery reports come and not yet filed with their batches, by the record's place (the
/// opaque's low 32 bits; the high ones are the batch's number, so that a report of a batch given
/// up on is never taken for one of another).
struct Reports {
    done: Mutex<Vec<(usize, Result<(), KafkaError>)>>,
    /// Told of each report.
    came: Condvar,
    /// Why every broker was found down, where librdkafka said so (each connection refused, or
    /// not set up within `socket.connection.setup.timeout.ms`).
    down: Mutex<Option<String>>,
}

impl ClientContext for Reports {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, text: &str) {
        broker_kafka::log(level, facility, text);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error,
            KafkaError::Global(rdkafka::types::RDKafkaErrorCode::AllBrokersDown)
        ) && let Ok(mut down) = self.down.lock()
        {
            *down = Some(reason.to_string());
        }
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
        self.came.notify_all();
    }
}

pub struct KafkaSink {
    producer: ThreadedProducer<Reports>,
    shown: String,
    stop: Stop,
    /// The number of the batch handed over last.
    batch: usize,
    /// The batches handed over and not answered yet, oldest first: two at most as `publish`
    /// hands them over, so that the producer sends the next while the reports of the one before
    /// come.
    flights: VecDeque<Flight>,
}

/// A batch handed to the producer, with what is known of its records so far.
struct Flight {
    /// The batch's number, in its records' opaques.
    number: usize,
    /// Per record, in order: its answer, once known.
    answers: Vec<Option<Answer>>,
    /// Records handed over whose report has not come.
    awaited: usize,
    /// Why the destination is taken for lost, where it is.
    lost: Option<anyhow::Error>,
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
        let producer: ThreadedProducer<Reports> = config
            .create_with_context(Reports {
                done: Mutex::new(Vec::new()),
                came: Condvar::new(),
                down: Mutex::new(None),
            })
            .map_err(|e| anyhow!("{shown}: {}", settings.scrub(&e.to_string())))?;
        // Asked in short waits, so that brokers that all refused the connection are known at
        // once (librdkafka says so by its error callback), not after the whole timeout.
        let started = std::time::Instant::now();
        loop {
            match producer
                .client()
                .fetch_metadata(None, std::time::Duration::from_millis(500))
            {
                Ok(_) => break,
                Err(e) => {
                    let down = producer.context().down.lock().ok().and_then(|d| d.clone());
                    if let Some(why) = down {
                        return Err(anyhow!(
                            "cannot connect to {shown}: no broker answered ({})",
                            settings.scrub(&why)
                        ));
                    }
                    if started.elapsed() >= broker_kafka::TIMEOUT || super::stopped(&stop) {
                        return Err(anyhow!("cannot connect to {shown}: {e}"));
                    }
                }
            }
        }
        Ok(KafkaSink {
            producer,
            shown,
            stop,
            batch: 0,
            flights: VecDeque::new(),
        })
    }

    fn stopped(&self) -> bool {
        super::stopped(&self.stop)
    }

    /// The reports come so far, or, where none has and `wait` says so, those that come within
    /// [`WAIT`].
    fn next_reports(&self, wait: bool) -> Vec<(usize, Result<(), KafkaError>)> {
        let context = self.producer.context();
        let mut done = context
            .done
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if wait && done.is_empty() {
            done = match context.came.wait_timeout(done, WAIT) {
                Ok((done, _)) => done,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        std::mem::take(&mut *done)
    }

    /// Files delivery reports with the batches in flight they belong to (those of a batch given
    /// up on are dropped); true where any was filed.
    fn file(&mut self, reports: Vec<(usize, Result<(), KafkaError>)>) -> bool {
        let mut filed = false;
        for (opaque, r) in reports {
            let Some(flight) = self.flights.iter_mut().find(|f| f.number == opaque >> 32) else {
                continue;
            };
            let Some(slot) = flight
                .answers
                .get_mut(opaque & 0xffff_ffff)
                .filter(|slot| slot.is_none())
            else {
                continue;
            };
            flight.awaited = flight.awaited.saturating_sub(1);
            filed = true;
            *slot = Some(match r {
                Ok(()) => Answer::Stored,
                Err(e) => match refusal(&e) {
                    Some(why) => Answer::Refused(why),
                    None => {
                        flight.lost.get_or_insert_with(|| {
                            anyhow!("{}: a record was not stored: {e}", self.shown)
                        });
                        continue;
                    }
                },
            });
        }
        filed
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
        // Alone: a batch left in flight before (by a run that gave up on it) is not answered
        // here; its events stay unmarked and go out again, with their ids.
        self.flights.clear();
        let _ = self.hand_over(batch);
        self.answers()
    }

    /// Hands every record of `batch` to the producer and returns without waiting for their
    /// reports, which [`Sink::answers`] waits for: the producer sends this batch while the
    /// reports of the one before come (waiting for each batch's last report before handing over
    /// the next left the producer idle for that time, a fifth of publish's).
    fn hand_over(&mut self, batch: Vec<Outgoing>) -> Option<(Vec<Answer>, Option<SinkError>)> {
        self.batch = (self.batch + 1) & 0xffff_ffff;
        let tag = self.batch << 32;
        // Nothing more goes to a destination already lost for a batch before (a record of a
        // partner would be stored ahead of that partner's record left unstored), nor once
        // stopped: the batch is answered with nothing.
        let lost = self
            .flights
            .iter()
            .any(|f| f.lost.is_some())
            .then(|| anyhow!("{}: not sent, the batch before was not stored", self.shown));
        let hold = lost.is_some() || self.stopped();
        self.flights.push_back(Flight {
            number: self.batch,
            answers: vec![None; batch.len()],
            awaited: 0,
            lost,
        });
        if hold {
            return None;
        }
        // Within the timeout of the last sign of progress, while the producer's queue is full.
        let mut deadline = Instant::now() + broker_kafka::TIMEOUT;
        'records: for (i, o) in batch.iter().enumerate() {
            let key = super::partner_key(o);
            let mut headers = OwnedHeaders::new_with_capacity(o.attributes.iter().len() + 1)
                .insert(Header {
                    key: "content-type",
                    value: Some(o.content_type),
                });
            for (attr, value) in o.attributes.iter() {
                headers = headers.insert(Header {
                    key: header(attr),
                    value: Some(value),
                });
            }
            let mut record = BaseRecord::with_opaque_to(&o.subject, tag | i)
                .key(key.as_str())
                .payload(&o.body[..])
                .headers(headers);
            let failed = loop {
                match self.producer.send(record) {
                    Ok(()) => break None,
                    // The producer's queue is full: its reports make room.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        let reports = self.next_reports(true);
                        if self.file(reports) {
                            deadline = Instant::now() + broker_kafka::TIMEOUT;
                        }
                        if self.stopped() {
                            break 'records;
                        }
                        if Instant::now() > deadline {
                            break Some(Err(anyhow!(
                                "{}: the producer's queue stayed full for {} s",
                                self.shown,
                                broker_kafka::TIMEOUT.as_secs()
                            )));
                        }
                    }
                    Err((e, _)) => {
                        break Some(match refusal(&e) {
                            Some(why) => Ok(Answer::Refused(why)),
                            None => Err(anyhow!("{}: cannot produce: {e}", self.shown)),
                        });
                    }
                }
            };
            let Some(flight) = self.flights.back_mut() else {
                break;
            };
            match failed {
                None => flight.awaited += 1,
                Some(Ok(refused)) => flight.answers[i] = Some(refused),
                Some(Err(lost)) => {
                    flight.lost = Some(lost);
                    break;
                }
            }
        }
        None
    }

    /// The answers of the oldest batch in flight, each report waited for within the timeout
    /// of the last sign of progress.
    fn answers(&mut self) -> (Vec<Answer>, Option<SinkError>) {
        let mut deadline = Instant::now() + broker_kafka::TIMEOUT;
        let mut wait = false;
        loop {
            // What has come is filed before the stop flag is looked at: a record stored is
            // marked, also when the run is stopping.
            let reports = self.next_reports(wait);
            if self.file(reports) {
                deadline = Instant::now() + broker_kafka::TIMEOUT;
            }
            let Some(first) = self.flights.front_mut() else {
                break;
            };
            if first.awaited == 0 || super::stopped(&self.stop) {
                break;
            }
            if Instant::now() > deadline {
                first.lost.get_or_insert_with(|| {
                    anyhow!(
                        "{}: no delivery report within {} s",
                        self.shown,
                        broker_kafka::TIMEOUT.as_secs()
                    )
                });
                break;
            }
            wait = true;
        }
        let Some(flight) = self.flights.pop_front() else {
            return (
                Vec::new(),
                Some(SinkError::Lost(anyhow!(
                    "{}: no batch in flight",
                    self.shown
                ))),
            );
        };
        let handed = flight.answers.len();
        // The answers known, in order, up to the first unknown one.
        let known: Vec<Answer> = flight.answers.into_iter().map_while(|a| a).collect();
        if known.len() == handed {
            return (known, None);
        }
        let error = match flight.lost {
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
        use super::super::partner_key as key;
        let o = |attributes: Vec<(Attr, &str)>| Outgoing {
            id: "id1".into(),
            subject: "t".into(),
            attributes: attributes.into_iter().collect(),
            body: bytes::Bytes::new(),
            content_type: super::super::CONTENT_TYPE,
        };
        assert_eq!(
            key(&o(vec![
                (Attr::EdiSender, "ACME"),
                (Attr::EdiRecipient, "HUB")
            ])),
            "ACME/HUB"
        );
        assert_eq!(
            key(&o(vec![(Attr::DeadLetterSource, "kafka:t/0/9")])),
            "kafka:t/0/9"
        );
        assert_eq!(key(&o(vec![])), "id1");
        assert_eq!(header(Attr::Id), "ce_id");
        assert_eq!(header(Attr::DeadLetterReason), "edi-inbox-reason");
    }

    #[test]
    fn a_url_names_one_topic() {
        assert!(parse("kafka://h:9092/edifact.{type}", &Default::default()).is_ok());
        assert!(dead_letter("kafka://h:9092/edifact.{type}", &Default::default()).is_err());
        assert!(dead_letter("kafka://h:9092/edi.dead", &Default::default()).is_ok());
        assert!(parse("kafka://h:9092/a,b", &Default::default()).is_err());
        assert!(parse("kafka://h:9092/a?group=g", &Default::default()).is_err());
    }
}
