//! `--from sqs://REGION/ACCOUNT/QUEUE` (or the queue's URL): an Amazon SQS queue. Each message
//! is a delivery named `sqs:QUEUE/MESSAGE-ID` (the message id stays the same whenever it comes
//! again; the receipt handle does not), its `ApproximateReceiveCount` its delivery count, its
//! `edi-filename` attribute kept. Received with long polling, up to ten a call and several
//! calls a batch, each invisible to other consumers for the queue's visibility timeout (or
//! `--ack-wait`); deleted, ten a call, only once its batch is committed. A message not deleted
//! (a crash, a database failure, a delete that failed) comes again once its visibility timeout
//! is over, and is decided as a duplicate; the queue's own redrive policy moves a message that
//! keeps coming back. While a batch waits on a slow inbox, the visibility of the messages held is
//! extended, so that no other consumer takes them meanwhile.
//!
//! A FIFO queue gives a message group's messages in order and holds back the rest of a group
//! while one of its messages is held: a batch decides them in the order they came.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageSystemAttributeName,
};

use super::{Delivery, FILENAME_HEADER, Feed, Options, Settle, Source};
use crate::broker::sqs::{self as broker_sqs, BATCH, ENCODING_ATTRIBUTE, FORM, Queue, TIMEOUT};

/// How long a batch gathers at most, once its first receive gave something.
const MAX_GATHER: Duration = Duration::from_secs(1);

/// The longest long poll SQS takes.
const MAX_LONG_POLL: u64 = 20;

/// `--from sqs://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSource {
    queue: Queue,
}

/// Reads `--from sqs://...` or a queue URL (the registry's lines for SQS).
pub fn parse(text: &str) -> Result<Box<dyn Source>, String> {
    Ok(Box::new(SqsSource {
        queue: broker_sqs::queue(text, "--from", FORM)?,
    }))
}

impl Source for SqsSource {
    fn shown(&self) -> String {
        self.queue.shown()
    }

    fn connect(&self, options: Options) -> anyhow::Result<Box<dyn Feed>> {
        Ok(Box::new(SqsFeed::connect(&self.queue, options)?))
    }
}

/// A message received and not yet deleted.
struct Held {
    receipt: String,
    /// Its name, for a delete that failed.
    source: String,
    /// When its visibility was last set (received, or extended).
    visible_from: Instant,
}

pub struct SqsFeed {
    runtime: tokio::runtime::Runtime,
    client: Client,
    url: String,
    name: String,
    shown: String,
    /// How long a message received stays invisible: what each receive and each extension asks.
    visibility: Duration,
    held: HashMap<u64, Held>,
    next_tag: u64,
    /// Whether the extension of the visibility was said (once per slow batch).
    extending: bool,
}

impl SqsFeed {
    fn connect(queue: &Queue, options: Options) -> anyhow::Result<SqsFeed> {
        let runtime = crate::broker::runtime()?;
        let reached = runtime.block_on(broker_sqs::reach(queue))?;
        // At least a second: a receive asks for whole seconds.
        let visibility = options
            .ack_wait
            .unwrap_or(reached.visibility)
            .max(Duration::from_secs(1));
        Ok(SqsFeed {
            runtime,
            client: reached.client,
            url: reached.url,
            name: queue.name.clone(),
            shown: queue.shown(),
            visibility,
            held: HashMap::new(),
            next_tag: 1,
            extending: false,
        })
    }

    /// One receive: up to `n` messages, waiting up to `wait_secs` for the first.
    fn receive(&mut self, n: usize, wait_secs: u64) -> anyhow::Result<Vec<Message>> {
        let call = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(n.clamp(1, BATCH) as i32)
            .wait_time_seconds(wait_secs.min(MAX_LONG_POLL) as i32)
            .visibility_timeout(self.visibility.as_secs().min(43_200) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_attribute_names("All");
        let shown = &self.shown;
        let limit = TIMEOUT + Duration::from_secs(wait_secs);
        let answer = self.runtime.block_on(crate::broker::within(limit, async {
            call.send()
                .await
                .map_err(|e| anyhow!("{shown}: {}", broker_sqs::explain(&e)))
        }))?;
        Ok(answer.messages.unwrap_or_default())
    }

    /// The delivery of a message, under the next tag.
    fn take(&mut self, m: Message) -> Delivery {
        let tag = self.next_tag;
        self.next_tag += 1;
        let id = m.message_id.clone().unwrap_or_default();
        let source = format!("sqs:{}/{id}", self.name);
        let system = m.attributes.unwrap_or_default();
        let attributes = m.message_attributes.unwrap_or_default();
        let text = |name: &str| attributes.get(name).and_then(|v| v.string_value.clone());
        let body = m.body.unwrap_or_default();
        let body = match text(ENCODING_ATTRIBUTE).as_deref() {
            // Bytes SQS cannot carry as text: decoded. A body that is not base64 after all is
            // taken as it is, and the parser says what is wrong with it.
            Some("base64") => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(body.as_bytes())
                    .unwrap_or_else(|_| body.into_bytes())
            }
            _ => body.into_bytes(),
        };
        let count = system
            .get(&MessageSystemAttributeName::ApproximateReceiveCount)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(1);
        let produced_at = system
            .get(&MessageSystemAttributeName::SentTimestamp)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|ms| crate::clock::rfc3339(std::time::UNIX_EPOCH + Duration::from_millis(ms)));
        if let Some(receipt) = m.receipt_handle {
            self.held.insert(
                tag,
                Held {
                    receipt,
                    source: source.clone(),
                    visible_from: Instant::now(),
                },
            );
        }
        Delivery {
            tag,
            source,
            subject: self.name.clone(),
            filename: text(FILENAME_HEADER),
            delivery_count: count.max(1),
            body: bytes::Bytes::from(body),
            key: system
                .get(&MessageSystemAttributeName::MessageGroupId)
                .cloned(),
            produced_at,
            position: None,
        }
    }

    /// Sets the visibility of the messages held that have had half of it to the whole again.
    fn extend(&mut self) -> anyhow::Result<usize> {
        let due: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| h.visible_from.elapsed() * 2 >= self.visibility)
            .map(|(tag, _)| *tag)
            .collect();
        let seconds = self.visibility.as_secs().min(43_200) as i32;
        for chunk in due.chunks(BATCH) {
            let mut entries = Vec::with_capacity(chunk.len());
            for (k, tag) in chunk.iter().enumerate() {
                if let Some(h) = self.held.get(tag) {
                    entries.push(
                        ChangeMessageVisibilityBatchRequestEntry::builder()
                            .id(k.to_string())
                            .receipt_handle(&h.receipt)
                            .visibility_timeout(seconds)
                            .build()
                            .map_err(|e| anyhow!("{}: {e}", self.shown))?,
                    );
                }
            }
            let call = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries));
            let shown = &self.shown;
            self.runtime
                .block_on(crate::broker::within(TIMEOUT, async {
                    call.send()
                        .await
                        .map_err(|e| anyhow!("{shown}: {}", broker_sqs::explain(&e)))
                }))?;
            for tag in chunk {
                if let Some(h) = self.held.get_mut(tag) {
                    h.visible_from = Instant::now();
                }
            }
        }
        Ok(due.len())
    }
}

impl Feed for SqsFeed {
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>> {
        let mut taken = Vec::new();
        // The first receive waits (long polling, whole seconds); the rest take what is there.
        let mut wait_secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let started = Instant::now();
        while taken.len() < max {
            let messages = self.receive(max - taken.len(), wait_secs)?;
            if messages.is_empty() {
                break;
            }
            for m in messages {
                taken.push(self.take(m));
            }
            wait_secs = 0;
            if started.elapsed() > MAX_GATHER + wait {
                break;
            }
        }
        Ok(taken)
    }

    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()> {
        // A rejected message was recorded with its bytes (and dead-lettered where asked):
        // deleted too, so that it never comes again.
        let held: Vec<Held> = settled
            .iter()
            .filter_map(|(tag, _)| self.held.remove(tag))
            .collect();
        self.extending = false;
        for chunk in held.chunks(BATCH) {
            let entries: Vec<DeleteMessageBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(k, h)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(k.to_string())
                        .receipt_handle(&h.receipt)
                        .build()
                        .ok()
                })
                .collect();
            let call = self
                .client
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries));
            let shown = &self.shown;
            let answer = self
                .runtime
                .block_on(crate::broker::within(TIMEOUT, async {
                    call.send()
                        .await
                        .map_err(|e| anyhow!("{shown}: cannot delete: {}", broker_sqs::explain(&e)))
                }))?;
            // Each delete that failed (a receipt handle too old, say): that message comes again
            // and is decided as a duplicate.
            for failed in answer.failed {
                let which = failed
                    .id
                    .parse::<usize>()
                    .ok()
                    .and_then(|k| chunk.get(k))
                    .map_or("a message", |h| h.source.as_str());
                crate::output::warn(&format!(
                    "{}: {which} was not deleted ({}: {}); it comes again and is decided as a duplicate",
                    self.shown,
                    failed.code,
                    failed.message.unwrap_or_default()
                ));
            }
        }
        Ok(())
    }

    /// Extends the visibility of the messages held (those of the batch waiting on the inbox,
    /// and those fetched for the next), so that no other consumer takes them meanwhile.
    fn hold(&mut self, wait: Duration) -> anyhow::Result<Option<String>> {
        let started = Instant::now();
        let extended = self.extend()?;
        let said = (extended > 0 && !self.extending).then(|| {
            format!(
                "{}: the inbox is slow; the visibility of the messages held is extended ({} s at a time) while a batch waits on it",
                self.shown,
                self.visibility.as_secs()
            )
        });
        if extended > 0 {
            self.extending = true;
        }
        std::thread::sleep(wait.saturating_sub(started.elapsed()));
        Ok(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_queue() {
        let s = parse("sqs://eu-west-1/123456789012/edi-in").unwrap();
        assert_eq!(s.shown(), "sqs://eu-west-1/123456789012/edi-in");
        let e = parse("sqs://eu-west-1/edi-in").unwrap_err();
        assert!(e.starts_with("--from takes sqs://"), "{e}");
    }
}
