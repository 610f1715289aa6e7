//! `--from sqs://REGION/ACCOUNT/QUEUE` (or the queue's URL): an Amazon SQS queue. Each message
//! is a delivery named `sqs:QUEUE/MESSAGE-ID` (the message id stays the same whenever it comes
//! again; the receipt handle does not), its `ApproximateReceiveCount` its delivery count, its
//! `edi-filename` attribute kept. Received with long polling, up to ten a call and several
//! calls a batch, each invisible to other consumers for the queue's visibility timeout (or
//! `--ack-wait`); deleted, ten a call, only once its batch is committed. A message not deleted
//! (a crash, a database failure, a delete that failed) comes again once its visibility timeout
//! is over, and is decided as a duplicate; the queue's own redrive policy moves a message that
//! keeps coming back.
//!
//! From the moment a message is received until it is deleted, a thread of the feed's own keeps
//! it invisible: each time half of its visibility timeout has gone by, the timeout is set
//! again, whatever the consume loop is doing meanwhile (gathering a batch, reading the next one
//! ahead, waiting on the inbox, deleting, sending dead letters). A message is received again
//! only after a crash or a failure, never because this consumer was slow: a redelivery counted
//! is one the partner's side (or a crash) caused.
//!
//! A FIFO queue gives a message group's messages in order and holds back the rest of a group
//! while one of its messages is held: a batch decides them in the order they came.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageAttributeValue, MessageSystemAttributeName,
};

use super::{Delivery, FILENAME_HEADER, Feed, Options, Settle, Source, Unreadable};
use crate::broker::sqs::{
    self as broker_sqs, BATCH, ENCODING_ATTRIBUTE, FORM, Queue, TIMEOUT, short_receipt_handle,
    without_receipt_handles,
};

/// How long a batch gathers at most, once its first receive gave something.
const MAX_GATHER: Duration = Duration::from_secs(1);

/// The longest long poll SQS takes.
const MAX_LONG_POLL: u64 = 20;

/// The longest visibility timeout SQS takes, in seconds (12 hours).
const MAX_VISIBILITY: u64 = 43_200;

/// `--from sqs://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSource {
    queue: Queue,
}

/// Reads `--from sqs://...` or a queue URL (the broker table's line for SQS).
pub fn parse(text: &str, settings: &crate::broker::Settings) -> Result<Box<dyn Source>, String> {
    Ok(Box::new(SqsSource {
        queue: broker_sqs::queue(text, "--from", FORM)?.with(settings),
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
    /// Its name, for a delete or an extension that failed.
    source: String,
    /// When its visibility was last set: the moment before the receive (or the extension) was
    /// asked for, so never later than SQS's own start of it.
    visible_from: Instant,
    /// Whether an extension that failed was said (once a message).
    said: bool,
}

/// The messages received and not yet deleted, by tag: the feed adds and removes them, its
/// keeper extends their visibility.
type HeldMessages = Arc<Mutex<HashMap<u64, Held>>>;

/// The messages held, locked (a thread that panicked holding them left nothing half-written
/// that matters: at worst a visibility set twice).
fn lock(held: &HeldMessages) -> MutexGuard<'_, HashMap<u64, Held>> {
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct SqsFeed {
    runtime: tokio::runtime::Runtime,
    client: Client,
    url: String,
    name: String,
    shown: String,
    /// How long a message received stays invisible: what each receive and each extension asks.
    visibility: Duration,
    held: HeldMessages,
    /// Why the bodies of deliveries not yet settled cannot be read, by tag.
    unreadable: HashMap<u64, Unreadable>,
    next_tag: u64,
    /// Whether the slow inbox was said (once per slow batch).
    extending: bool,
    /// Dropped with the feed: its keeper then ends.
    _keeper: mpsc::Sender<()>,
}

impl SqsFeed {
    fn connect(queue: &Queue, options: Options) -> anyhow::Result<SqsFeed> {
        let runtime = crate::broker::runtime()?;
        let reached = runtime.block_on(broker_sqs::reach(queue))?;
        // At least a second: a receive asks for whole seconds.
        let visibility = options
            .ack_wait
            .unwrap_or(reached.visibility)
            .clamp(Duration::from_secs(1), Duration::from_secs(MAX_VISIBILITY));
        let held: HeldMessages = Arc::default();
        let keeper = Keeper::start(queue, &reached.url, visibility, held.clone())?;
        Ok(SqsFeed {
            runtime,
            client: reached.client,
            url: reached.url,
            name: queue.name.clone(),
            shown: queue.shown(),
            visibility,
            held,
            unreadable: HashMap::new(),
            next_tag: 1,
            extending: false,
            _keeper: keeper,
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
            .visibility_timeout(self.visibility.as_secs() as i32)
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

    /// The delivery of a message received by a receive asked for at `asked`, under the next tag.
    fn take(&mut self, m: Message, asked: Instant) -> Delivery {
        let tag = self.next_tag;
        self.next_tag += 1;
        let id = m.message_id.clone().unwrap_or_default();
        let source = format!("sqs:{}/{id}", self.name);
        let system = m.attributes.unwrap_or_default();
        let attributes = m.message_attributes.unwrap_or_default();
        let text = |name: &str| attribute_text(&source, name, attributes.get(name));
        let body = m.body.unwrap_or_default();
        let body = match text(ENCODING_ATTRIBUTE).as_deref() {
            // Bytes SQS cannot carry as text: decoded. A body that is not base64 after all is
            // not taken for text (which it may well parse as): it is rejected for what it is,
            // its bytes kept as they came.
            Some("base64") => {
                use base64::Engine as _;
                match base64::engine::general_purpose::STANDARD.decode(body.as_bytes()) {
                    Ok(decoded) => decoded,
                    Err(e) => {
                        self.unreadable.insert(tag, not_base64(body.as_bytes(), &e));
                        body.into_bytes()
                    }
                }
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
        let filename = text(FILENAME_HEADER);
        if let Some(receipt) = m.receipt_handle {
            lock(&self.held).insert(
                tag,
                Held {
                    receipt,
                    source: source.clone(),
                    visible_from: asked,
                    said: false,
                },
            );
        }
        Delivery {
            filename,
            delivery_count: count.max(1),
            key: system
                .get(&MessageSystemAttributeName::MessageGroupId)
                .cloned(),
            produced_at,
            ..Delivery::new(tag, source, self.name.clone(), bytes::Bytes::from(body))
        }
    }
}

/// A message attribute's text: a `String` (or `Number`) attribute's value, or a `Binary` one's
/// bytes where they are UTF-8 (an SDK that sends every attribute as bytes). Binary bytes that
/// are not UTF-8 are said, naming the delivery, and not taken.
fn attribute_text(
    source: &str,
    name: &str,
    value: Option<&MessageAttributeValue>,
) -> Option<String> {
    let value = value?;
    if let Some(text) = &value.string_value {
        return Some(text.clone());
    }
    let bytes = value.binary_value.as_ref()?.as_ref();
    match std::str::from_utf8(bytes) {
        Ok(text) => Some(text.to_string()),
        Err(e) => {
            crate::output::warn(&format!(
                "{source}: its {name} attribute is {} bytes of {} that are not UTF-8 (at byte {}): not taken",
                bytes.len(),
                value.data_type,
                e.valid_up_to()
            ));
            None
        }
    }
}

/// Why `body`, marked base64, is not, and where: the first byte outside base64's alphabet (the
/// decoder's own offset is that of the block it was decoding), else what the decoder found.
fn not_base64(body: &[u8], e: &base64::DecodeError) -> Unreadable {
    use base64::DecodeError as E;
    let foreign = body
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')));
    let (what, offset) = match (foreign, e) {
        (Some(at), _) => (
            format!("byte 0x{:02x} is not a base64 character", body[at]),
            Some(at),
        ),
        (None, E::InvalidByte(at, _)) => ("a padding `=` within it".to_string(), Some(*at)),
        (None, E::InvalidLastSymbol(at, _)) => {
            ("its last character leaves bits over".to_string(), Some(*at))
        }
        (None, E::InvalidLength(len)) => (format!("its length {len} is not one base64 has"), None),
        (None, E::InvalidPadding) => ("its padding is wrong".to_string(), None),
    };
    Unreadable {
        reason: format!(
            "the body is marked {ENCODING_ATTRIBUTE}: base64 but is not base64: {what}"
        ),
        offset,
    }
}

impl Feed for SqsFeed {
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>> {
        let mut taken = Vec::new();
        // The first receive waits (long polling, whole seconds); the rest take what is there.
        let mut wait_secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let started = Instant::now();
        while taken.len() < max {
            let asked = Instant::now();
            let messages = self.receive(max - taken.len(), wait_secs)?;
            if messages.is_empty() {
                break;
            }
            for m in messages {
                taken.push(self.take(m, asked));
            }
            wait_secs = 0;
            if started.elapsed() > MAX_GATHER + wait {
                break;
            }
        }
        Ok(taken)
    }

    fn unreadable(&self, tag: u64) -> Option<Unreadable> {
        self.unreadable.get(&tag).cloned()
    }

    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()> {
        // A rejected message was recorded with its bytes (and dead-lettered where asked):
        // deleted too, so that it never comes again. Taken from the keeper first, so that it
        // does not extend a message being deleted.
        let held: Vec<Held> = {
            let mut held = lock(&self.held);
            settled
                .iter()
                .filter_map(|(tag, _)| held.remove(tag))
                .collect()
        };
        for (tag, _) in settled {
            self.unreadable.remove(tag);
        }
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
                let which = failed.id.parse::<usize>().ok().and_then(|k| chunk.get(k));
                crate::output::warn(&format!(
                    "{}: {} was not deleted ({}: {}); it comes again and is decided as a duplicate",
                    self.shown,
                    which.map_or_else(
                        || "a message".to_string(),
                        |h| format!(
                            "{} (receipt handle {})",
                            h.source,
                            short_receipt_handle(&h.receipt)
                        )
                    ),
                    failed.code,
                    without_receipt_handles(&failed.message.unwrap_or_default())
                ));
            }
        }
        Ok(())
    }

    /// The messages held are kept invisible by the keeper all along: this only says, once per
    /// slow batch, that a batch waits on the inbox while they are.
    fn hold(&mut self, wait: Duration) -> anyhow::Result<Option<String>> {
        std::thread::sleep(wait);
        let said = (!self.extending && !lock(&self.held).is_empty()).then(|| {
            format!(
                "{}: the inbox is slow; the visibility of the messages held is extended ({} s at a time) while a batch waits on it",
                self.shown,
                self.visibility.as_secs()
            )
        });
        if said.is_some() {
            self.extending = true;
        }
        Ok(said)
    }
}

/// The thread that keeps the messages held invisible, from the moment each is received until it
/// is deleted: every tick it sets the visibility of those that have had half of it to the whole
/// again (`ChangeMessageVisibilityBatch`). A thread of its own, so that it keeps to its ticks
/// whatever the consume loop does (a batch gathered, the next read ahead, a wait on the inbox,
/// deletes, dead letters), on a runtime and a client of its own (a connection of the feed's
/// pool is served by the feed's runtime, which runs only while the consume thread waits on it).
struct Keeper {
    runtime: tokio::runtime::Runtime,
    client: Client,
    url: String,
    shown: String,
    visibility: Duration,
    held: HeldMessages,
}

impl Keeper {
    /// Starts the keeper of `held`; it ends once the sender returned is dropped (with the feed),
    /// after the call it may be in.
    fn start(
        queue: &Queue,
        url: &str,
        visibility: Duration,
        held: HeldMessages,
    ) -> anyhow::Result<mpsc::Sender<()>> {
        let runtime = crate::broker::runtime()?;
        let shown = queue.shown();
        let client = runtime
            .block_on(broker_sqs::client(queue))
            .map_err(|e| anyhow!("cannot connect to {shown}: {e}"))?;
        let keeper = Keeper {
            runtime,
            client,
            url: url.to_string(),
            shown,
            visibility,
            held,
        };
        let (stop, stopped) = mpsc::channel();
        std::thread::Builder::new()
            .name("sqs-visibility".into())
            .spawn(move || keeper.run(&stopped))?;
        Ok(stop)
    }

    /// How often it looks: a tenth of the timeout (between 50 ms and a second), so that a
    /// message is extended well before its timeout is over, the calls' own time included.
    fn tick(&self) -> Duration {
        (self.visibility / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    fn run(self, stopped: &mpsc::Receiver<()>) {
        let mut failing = false;
        while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(self.tick()) {
            let due: Vec<(u64, String)> = lock(&self.held)
                .iter()
                .filter(|(_, h)| h.visible_from.elapsed() * 2 >= self.visibility)
                .map(|(tag, h)| (*tag, h.receipt.clone()))
                .collect();
            if due.is_empty() {
                continue;
            }
            let answers = self.extend(&due);
            let mut held = lock(&self.held);
            for (chunk, asked, answer) in answers {
                match answer {
                    Ok(answer) => {
                        failing = false;
                        self.extended(&mut held, &chunk, asked, &answer);
                    }
                    // Said once until a call works again; the messages stay due meanwhile.
                    Err(e) if !failing => {
                        failing = true;
                        crate::output::warn(&format!(
                            "{e}; the messages held may come again to another consumer meanwhile, and are then decided as duplicates"
                        ));
                    }
                    Err(_) => {}
                }
            }
        }
    }

    /// Sets the visibility of the messages `due` names to the whole timeout, ten a call and a
    /// few calls at once (a batch's thousand messages in a tenth of the timeout): each chunk
    /// with the moment before its call was made, and SQS's answer.
    fn extend(&self, due: &[(u64, String)]) -> Vec<Extension> {
        /// The calls in flight at once.
        const AT_ONCE: usize = 8;
        let seconds = self.visibility.as_secs() as i32;
        self.runtime.block_on(async {
            let mut calls = tokio::task::JoinSet::new();
            let mut answers = Vec::with_capacity(due.len().div_ceil(BATCH));
            for chunk in due.chunks(BATCH) {
                if calls.len() >= AT_ONCE
                    && let Some(Ok(done)) = calls.join_next().await
                {
                    answers.push(done);
                }
                let client = self.client.clone();
                let url = self.url.clone();
                let shown = self.shown.clone();
                let chunk = chunk.to_vec();
                calls.spawn(async move {
                    let asked = Instant::now();
                    let answer = extension(&client, &url, &shown, seconds, &chunk).await;
                    (chunk, asked, answer)
                });
            }
            while let Some(done) = calls.join_next().await {
                // A call that panicked extended nothing: its messages stay due.
                if let Ok(done) = done {
                    answers.push(done);
                }
            }
            answers
        })
    }

    /// Notes the extensions SQS made, and says (once a message) each one that failed for a
    /// message still held (not one deleted meanwhile).
    fn extended(
        &self,
        held: &mut HashMap<u64, Held>,
        chunk: &[(u64, String)],
        asked: Instant,
        answer: &ChangeMessageVisibilityBatchOutput,
    ) {
        let tag = |id: &str| {
            id.parse::<usize>()
                .ok()
                .and_then(|k| chunk.get(k))
                .map(|c| c.0)
        };
        for ok in &answer.successful {
            if let Some(h) = tag(&ok.id).and_then(|t| held.get_mut(&t)) {
                h.visible_from = asked;
            }
        }
        for failed in &answer.failed {
            if let Some(h) = tag(&failed.id).and_then(|t| held.get_mut(&t))
                && !h.said
            {
                h.said = true;
                crate::output::warn(&format!(
                    "{}: the visibility of {} (receipt handle {}) was not extended ({}: {}); it may come again to another consumer, and is then decided as a duplicate",
                    self.shown,
                    h.source,
                    short_receipt_handle(&h.receipt),
                    failed.code,
                    without_receipt_handles(failed.message.as_deref().unwrap_or_default())
                ));
            }
        }
    }
}

/// A chunk of messages to extend, when its call was made, and SQS's answer.
type Extension = (
    Vec<(u64, String)>,
    Instant,
    anyhow::Result<ChangeMessageVisibilityBatchOutput>,
);

/// One `ChangeMessageVisibilityBatch` of up to ten messages (tag, receipt handle), bounded.
async fn extension(
    client: &Client,
    url: &str,
    shown: &str,
    seconds: i32,
    chunk: &[(u64, String)],
) -> anyhow::Result<ChangeMessageVisibilityBatchOutput> {
    let entries = chunk
        .iter()
        .enumerate()
        .map(|(k, (_, receipt))| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(k.to_string())
                .receipt_handle(receipt)
                .visibility_timeout(seconds)
                .build()
                .map_err(|e| anyhow!("{shown}: {e}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let call = client
        .change_message_visibility_batch()
        .queue_url(url)
        .set_entries(Some(entries));
    crate::broker::within(TIMEOUT, async {
        call.send().await.map_err(|e| {
            anyhow!(
                "{shown}: cannot extend the visibility of the messages held: {}",
                broker_sqs::explain(&e)
            )
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_queue() {
        let s = parse("sqs://eu-west-1/123456789012/edi-in", &Default::default()).unwrap();
        assert_eq!(s.shown(), "sqs://eu-west-1/123456789012/edi-in");
        let e = parse("sqs://eu-west-1/edi-in", &Default::default()).unwrap_err();
        assert!(e.starts_with("--from takes sqs://"), "{e}");
    }

    fn decoded(body: &str) -> Result<Vec<u8>, Unreadable> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| not_base64(body.as_bytes(), &e))
    }

    #[test]
    fn a_body_that_is_not_base64_is_said_at_its_first_foreign_byte() {
        assert_eq!(decoded("VU5CKw==").unwrap(), b"UNB+");
        // The decoder itself names the apostrophe at 48, the start of a block it decoded.
        let text = "UNB+UNOC:3+GATEWAY:14+HUB:14+240301:1200+X'UNH+1'";
        let e = decoded(text).unwrap_err();
        assert_eq!(
            e.reason,
            "the body is marked edi-body-encoding: base64 but is not base64: byte 0x3a is not a base64 character"
        );
        assert_eq!(e.offset, Some(8));
        assert_eq!(decoded("VU5CK").unwrap_err().offset, None);
        assert!(
            decoded("VU5CK")
                .unwrap_err()
                .reason
                .ends_with("its length 5 is not one base64 has")
        );
        assert_eq!(decoded("VU=CKw==").unwrap_err().offset, Some(2));
    }

    #[test]
    fn a_binary_attribute_is_taken_where_it_is_utf8() {
        let binary = |b: &[u8]| {
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(aws_sdk_sqs::primitives::Blob::new(b.to_vec()))
                .build()
                .unwrap()
        };
        let text = MessageAttributeValue::builder()
            .data_type("String")
            .string_value("a.edi")
            .build()
            .unwrap();
        let name = |v: &MessageAttributeValue| attribute_text("sqs:q/1", "edi-filename", Some(v));
        assert_eq!(name(&text).as_deref(), Some("a.edi"));
        assert_eq!(name(&binary(b"b.edi")).as_deref(), Some("b.edi"));
        assert_eq!(name(&binary(&[b'c', 0xff])), None);
        assert_eq!(attribute_text("sqs:q/1", "edi-filename", None), None);
    }
}
