//! `--to sqs://REGION/ACCOUNT/QUEUE` (or the queue's URL): each event a message, ten to a
//! `SendMessageBatch` call, marked only where its entry in the answer says it was stored. The
//! CloudEvents attributes go as message attributes (`ce-id`, `ce-type`, ... and
//! `content-type`), as many as SQS takes: ten a message, the most telling first. A body that
//! SQS cannot carry as text (it takes XML characters only: Latin-1 or binary bytes are not)
//! goes base64-encoded, with `edi-body-encoding: base64`. On a FIFO queue the event's id is the
//! `MessageDeduplicationId` (SQS drops a copy sent again within five minutes) and the partner
//! (`SENDER/RECIPIENT`) the `MessageGroupId`, which keeps one partner's events in order. An
//! event larger than the queue's `MaximumMessageSize` is refused for itself, and parked after
//! `--max-attempts`.

use anyhow::anyhow;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use sha2::{Digest, Sha256};

use super::{Answer, Attr, Destination, Outgoing, Sink, SinkError, Stop};
use crate::broker::sqs::{self as broker_sqs, BATCH, ENCODING_ATTRIBUTE, FORM, Queue, TIMEOUT};

/// The most message attributes SQS takes on one message.
const MAX_ATTRIBUTES: usize = 10;

/// The attributes sent, in this order, as far as there is room: what identifies the event and
/// its partners first (the body holds the rest: UNB, UNH).
const SENT: [Attr; 11] = [
    Attr::Id,
    Attr::SpecVersion,
    Attr::Type,
    Attr::Source,
    Attr::Time,
    Attr::EdiSender,
    Attr::EdiRecipient,
    Attr::EdiControlRef,
    Attr::DeadLetterReason,
    Attr::DeadLetterSource,
    Attr::DeadLetterFilename,
];

/// `--to sqs://...` or `--dead-letter sqs://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsDestination {
    queue: Queue,
}

/// Reads `--to sqs://...` or a queue URL (the broker table's line for SQS).
pub fn parse(
    text: &str,
    settings: &crate::broker::Settings,
) -> Result<Box<dyn Destination>, String> {
    Ok(Box::new(SqsDestination {
        queue: broker_sqs::queue(text, "--to", FORM)?.with(settings),
    }))
}

/// Reads `--dead-letter sqs://...`: each dead letter is a message there.
pub fn dead_letter(
    text: &str,
    settings: &crate::broker::Settings,
) -> Result<Box<dyn Destination>, String> {
    Ok(Box::new(SqsDestination {
        queue: broker_sqs::queue(text, "--dead-letter", FORM)?.with(settings),
    }))
}

impl Destination for SqsDestination {
    fn shown(&self) -> String {
        self.queue.shown()
    }

    /// One queue: every event goes there, whatever `--subject` says.
    fn subject_template(&self) -> Option<&str> {
        Some(&self.queue.name)
    }

    fn subject_prefix(&self) -> Option<&str> {
        Some(&self.queue.name)
    }

    fn connect(&self, stop: &Stop) -> anyhow::Result<Box<dyn Sink>> {
        let runtime = crate::broker::runtime()?;
        let reached = runtime.block_on(async {
            tokio::select! {
                r = broker_sqs::reach(&self.queue) => Some(r),
                () = crate::broker::stopped(stop.clone()) => None,
            }
        });
        let reached = reached.ok_or_else(|| anyhow!("stopped"))??;
        Ok(Box::new(SqsSink {
            runtime,
            client: reached.client,
            url: reached.url,
            shown: self.queue.shown(),
            fifo: reached.fifo,
            max_size: reached.max_size,
            stop: stop.clone(),
        }))
    }
}

pub struct SqsSink {
    runtime: tokio::runtime::Runtime,
    client: Client,
    url: String,
    shown: String,
    fifo: bool,
    /// The queue's `MaximumMessageSize`: the most one message, and one call, may carry.
    max_size: usize,
    stop: Stop,
}

/// A message as it goes out, and how many bytes SQS counts for it (the body and the
/// attributes' names, types and values).
struct Entry {
    index: usize,
    entry: SendMessageBatchRequestEntry,
    size: usize,
}

/// The body as SQS carries it: the text itself where every character is one SQS takes (tab, line
/// feed, carriage return, and from the space up, but the surrogates, U+FFFE and U+FFFF), else
/// base64 (then `true`).
fn body_text(body: &[u8]) -> (String, bool) {
    let taken = |c: char| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    };
    match std::str::from_utf8(body) {
        Ok(text) if text.chars().all(taken) => (text.to_string(), false),
        _ => {
            use base64::Engine as _;
            (base64::engine::general_purpose::STANDARD.encode(body), true)
        }
    }
}

/// A value as SQS takes it in a FIFO queue's group or deduplication id: up to 128 of
/// letters, digits and ASCII punctuation; a longer one is hashed.
fn fifo_id(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c.is_ascii_punctuation() {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "-".to_string()
    } else if cleaned.len() <= 128 {
        cleaned
    } else {
        hex::encode(Sha256::digest(value.as_bytes()))
    }
}

impl SqsSink {
    /// The entry of an event, or why it cannot go (too large).
    fn entry(&self, index: usize, o: &Outgoing) -> Result<Entry, String> {
        let (body, encoded) = body_text(&o.body);
        let mut size = body.len();
        let mut attributes: Vec<(&str, String)> = vec![("content-type", o.content_type.into())];
        if encoded {
            attributes.push((ENCODING_ATTRIBUTE, "base64".into()));
        }
        for attr in SENT {
            if attributes.len() == MAX_ATTRIBUTES {
                break;
            }
            if let Some(value) = o.attributes.get(attr)
                && !value.is_empty()
            {
                attributes.push((attr_binding!(attr, "ce-"), value.to_string()));
            }
        }
        let mut builder = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body);
        for (name, value) in attributes {
            size += name.len() + "String".len() + value.len();
            builder = builder.message_attributes(
                name,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(value)
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        }
        if self.fifo {
            builder = builder
                .message_group_id(fifo_id(&super::partner_key(o)))
                .message_deduplication_id(fifo_id(&o.id));
        }
        if size > self.max_size {
            return Err(format!(
                "{size} bytes ({}), more than the queue takes: {} (its MaximumMessageSize)",
                if encoded {
                    "the body base64-encoded, with its attributes"
                } else {
                    "with its attributes"
                },
                self.max_size
            ));
        }
        Ok(Entry {
            index,
            entry: builder.build().map_err(|e| e.to_string())?,
            size,
        })
    }

    /// Sends one call's entries; the answer of each, by index, or the call's failure.
    fn call(&self, entries: Vec<Entry>) -> Result<Vec<(usize, Option<Answer>)>, SinkError> {
        let indexes: Vec<usize> = entries.iter().map(|e| e.index).collect();
        let call = self
            .client
            .send_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(entries.into_iter().map(|e| e.entry).collect()));
        let shown = &self.shown;
        let sent = self.runtime.block_on(async {
            tokio::select! {
                r = tokio::time::timeout(TIMEOUT, call.send()) => Some(r),
                () = crate::broker::stopped(self.stop.clone()) => None,
            }
        });
        let answer = match sent {
            // Stopped: nothing of this call is known, nothing marked.
            None => return Ok(Vec::new()),
            Some(Err(_)) => {
                return Err(SinkError::Lost(anyhow!(
                    "{shown}: no answer within {} s",
                    TIMEOUT.as_secs()
                )));
            }
            Some(Ok(Err(e))) if broker_sqs::is_setup(&e) => {
                return Err(SinkError::Setup(format!(
                    "{shown}: {}",
                    broker_sqs::explain(&e)
                )));
            }
            Some(Ok(Err(e))) => {
                return Err(SinkError::Lost(anyhow!(
                    "{shown}: {}",
                    broker_sqs::explain(&e)
                )));
            }
            Some(Ok(Ok(answer))) => answer,
        };
        let mut answers: Vec<(usize, Option<Answer>)> =
            indexes.iter().map(|&i| (i, None)).collect();
        let slot = |id: &str| id.parse::<usize>().ok();
        for ok in answer.successful {
            if let Some(i) = slot(&ok.id)
                && let Some(a) = answers.iter_mut().find(|(k, _)| *k == i)
            {
                a.1 = Some(Answer::Stored);
            }
        }
        for failed in answer.failed {
            // SQS's own failure (a 5xx for one entry) is not the event's: left unknown, the
            // batch ends as with a lost connection, and the event goes again.
            if !failed.sender_fault {
                continue;
            }
            if let Some(i) = slot(&failed.id)
                && let Some(a) = answers.iter_mut().find(|(k, _)| *k == i)
            {
                a.1 = Some(Answer::Refused(format!(
                    "SQS refused it: {}{}",
                    failed.code,
                    failed.message.map(|m| format!(": {m}")).unwrap_or_default()
                )));
            }
        }
        Ok(answers)
    }
}

impl Sink for SqsSink {
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
        let mut answers: Vec<Option<Answer>> = vec![None; batch.len()];
        // Calls of up to ten entries and the queue's size in all, in the events' order.
        let mut calls: Vec<Vec<Entry>> = Vec::new();
        let mut room = 0;
        for (i, o) in batch.iter().enumerate() {
            match self.entry(i, o) {
                Ok(e) => {
                    let fits = calls
                        .last()
                        .is_some_and(|c| c.len() < BATCH && room >= e.size);
                    if !fits {
                        calls.push(Vec::new());
                        room = self.max_size;
                    }
                    room -= e.size;
                    if let Some(call) = calls.last_mut() {
                        call.push(e);
                    }
                }
                Err(why) => answers[i] = Some(Answer::Refused(why)),
            }
        }
        let mut error = None;
        for call in calls {
            if super::stopped(&self.stop) {
                break;
            }
            match self.call(call) {
                Ok(answered) => {
                    let complete = answered.iter().all(|(_, a)| a.is_some());
                    for (i, a) in answered {
                        answers[i] = a;
                    }
                    if !complete {
                        if !super::stopped(&self.stop) {
                            error = Some(SinkError::Lost(anyhow!(
                                "{}: SQS failed to store some messages; they go again",
                                self.shown
                            )));
                        }
                        break;
                    }
                }
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        // The answers known, in order, up to the first unknown one.
        let known: Vec<Answer> = answers.into_iter().map_while(|a| a).collect();
        if known.len() == batch.len() {
            return (known, None);
        }
        (known, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_goes_as_text_where_sqs_takes_it_else_base64() {
        assert_eq!(
            body_text(b"UNB+UNOA:2+S+R'\r\n"),
            ("UNB+UNOA:2+S+R'\r\n".into(), false)
        );
        // UNOC (Latin-1) bytes are not UTF-8; a NUL is not an XML character.
        let (text, encoded) = body_text(b"UNB+UNOC:3+M\xfcller'");
        assert!(encoded);
        use base64::Engine as _;
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap(),
            b"UNB+UNOC:3+M\xfcller'"
        );
        assert!(body_text(b"a\0b").1);
        assert!(!body_text("M\u{fc}ller".as_bytes()).1);
    }

    #[test]
    fn fifo_ids_are_what_sqs_takes() {
        assert_eq!(fifo_id("ACME/HUB"), "ACME/HUB");
        assert_eq!(fifo_id("M\u{fc}ller GmbH/HUB"), "M_ller_GmbH/HUB");
        assert_eq!(fifo_id(""), "-");
        assert_eq!(fifo_id(&"x".repeat(200)).len(), 64);
    }

    #[test]
    fn a_url_names_one_queue() {
        assert!(parse("sqs://eu-west-1/123456789012/edi-out", &Default::default()).is_ok());
        assert!(
            dead_letter(
                "https://sqs.eu-west-1.amazonaws.com/1/dead",
                &Default::default()
            )
            .is_ok()
        );
        let e = dead_letter("sqs://eu-west-1/dead", &Default::default())
            .err()
            .unwrap();
        assert!(e.starts_with("--dead-letter takes sqs://"), "{e}");
    }
}
