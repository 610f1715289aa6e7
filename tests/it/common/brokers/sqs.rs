//! Amazon SQS queues on the test server (moto, which `.ci/run` starts at the address in
//! `EDI_INBOX_TEST_SQS`, http://127.0.0.1:5000 where unset), one of a test's own under a
//! unique name, deleted at the end. The processes the tests start reach it through the queue's
//! URL (its endpoint in it) with moto's made-up credentials (`common::edi_inbox`).
//!
//! moto differs from AWS in one way the tests meet: a delete with a receipt handle that a later
//! receive replaced deletes the message on moto, and not always on AWS. The code is written for
//! AWS's rule (a delete that fails is said, and the message is decided again as a duplicate);
//! no test asserts what a stale handle does.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

use super::{Held, Put, TestBroker, runtime, unique};
use crate::common::require;
use crate::common::sinks::{Event, Got, Order, TestDestination, consume_into};

/// The test server's address.
pub fn endpoint() -> String {
    std::env::var("EDI_INBOX_TEST_SQS").unwrap_or_else(|_| "http://127.0.0.1:5000".to_string())
}

/// The account moto's queue URLs name.
const ACCOUNT: &str = "123456789012";

/// What a queue is made with.
#[derive(Debug, Clone, Copy)]
pub struct Made {
    pub fifo: bool,
    /// Its visibility timeout, in seconds.
    pub visibility: u32,
    /// Its `MaximumMessageSize`, where not SQS's default.
    pub max_size: Option<u32>,
}

impl Default for Made {
    fn default() -> Made {
        Made {
            fifo: false,
            visibility: 30,
            max_size: None,
        }
    }
}

/// A message attribute as a sender sets it.
#[derive(Debug, Clone, Copy)]
pub enum Attribute<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

/// A queue of a test's own.
pub struct Sqs {
    rt: tokio::runtime::Runtime,
    client: Client,
    pub name: String,
    /// Its URL as moto gives it.
    pub url: String,
    /// The message ids of the messages sent, in order.
    sent: Mutex<Vec<String>>,
    /// The relay `consume` reaches it through, where made droppable.
    relay: Option<Relay>,
}

/// A body as SQS carries it: as text where it is (tab, line feed, carriage return and from the
/// space up), else base64 (then `true`), as a gateway sending EDIFACT would.
fn body_text(body: &[u8]) -> (String, bool) {
    let taken = |c: char| matches!(c, '\t' | '\n' | '\r') || c >= ' ';
    match std::str::from_utf8(body) {
        Ok(t) if t.chars().all(taken) => (t.to_string(), false),
        _ => {
            use base64::Engine as _;
            (base64::engine::general_purpose::STANDARD.encode(body), true)
        }
    }
}

/// A client of the test server.
fn client() -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .endpoint_url(endpoint())
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

impl Sqs {
    /// A queue made as `made` says; `None` (with a notice) where the server does not answer,
    /// unless `EDI_INBOX_REQUIRE_SQS` is set.
    pub fn with(made: Made) -> Option<Sqs> {
        let rt = runtime();
        let client = client();
        let mut name = unique("edi_q_");
        if made.fifo {
            name.push_str(".fifo");
        }
        let mut create = client.create_queue().queue_name(&name).attributes(
            QueueAttributeName::VisibilityTimeout,
            made.visibility.to_string(),
        );
        if made.fifo {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        if let Some(size) = made.max_size {
            create = create.attributes(QueueAttributeName::MaximumMessageSize, size.to_string());
        }
        let made = rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(15), create.send()).await });
        let url = match made {
            Ok(Ok(out)) => out.queue_url.unwrap(),
            Ok(Err(e)) => {
                let e = aws_sdk_sqs::error::DisplayErrorContext(e);
                require(
                    &format!("SQS at {} does not answer ({e})", endpoint()),
                    "EDI_INBOX_REQUIRE_SQS",
                );
                return None;
            }
            Err(_) => {
                require(
                    &format!(
                        "SQS at {} does not answer (no answer within 15 s)",
                        endpoint()
                    ),
                    "EDI_INBOX_REQUIRE_SQS",
                );
                return None;
            }
        };
        Some(Sqs {
            rt,
            client,
            name,
            url,
            sent: Mutex::new(Vec::new()),
            relay: None,
        })
    }

    /// A FIFO queue of its own.
    pub fn fifo() -> Option<Sqs> {
        Sqs::with(Made {
            fifo: true,
            ..Made::default()
        })
    }

    /// `sqs://us-east-1/ACCOUNT/NAME`, for a process given `--sqs-endpoint`.
    pub fn sqs_url(&self) -> String {
        format!("sqs://us-east-1/{ACCOUNT}/{}", self.name)
    }

    /// Sends `messages` in order, each with the message group `group` on a FIFO queue.
    pub fn send_grouped(&self, messages: &[Put], group: impl Fn(usize) -> String) {
        let mut ids = Vec::with_capacity(messages.len());
        for (c, chunk) in messages.chunks(10).enumerate() {
            let mut entries = Vec::with_capacity(chunk.len());
            for (k, m) in chunk.iter().enumerate() {
                let (body, encoded) = body_text(&m.body);
                let mut e = SendMessageBatchRequestEntry::builder()
                    .id(k.to_string())
                    .message_body(body);
                let text = |v: &str| {
                    MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value(v)
                        .build()
                        .unwrap()
                };
                if let Some(name) = &m.name {
                    e = e.message_attributes("edi-filename", text(name));
                }
                if encoded {
                    e = e.message_attributes("edi-body-encoding", text("base64"));
                }
                if self.name.ends_with(".fifo") {
                    let n = c * 10 + k;
                    e = e
                        .message_group_id(group(n))
                        .message_deduplication_id(m.id.clone().unwrap_or_else(|| n.to_string()));
                }
                entries.push(e.build().unwrap());
            }
            let out = self
                .rt
                .block_on(
                    self.client
                        .send_message_batch()
                        .queue_url(&self.url)
                        .set_entries(Some(entries))
                        .send(),
                )
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot send to {}: {}",
                        self.name,
                        aws_sdk_sqs::error::DisplayErrorContext(e)
                    )
                });
            assert!(out.failed.is_empty(), "not stored: {:?}", out.failed);
            let mut by_id: Vec<(usize, String)> = out
                .successful
                .into_iter()
                .map(|s| (s.id.parse().unwrap(), s.message_id))
                .collect();
            by_id.sort();
            assert_eq!(by_id.len(), chunk.len());
            ids.extend(by_id.into_iter().map(|(_, id)| id));
        }
        self.sent.lock().unwrap().extend(ids);
    }

    /// Sends one message whose body is `body` as it stands, with the message attributes
    /// `attributes` (a `String` attribute's text, or a `Binary` one's bytes), as a sender other
    /// than edi-inbox may; its message id.
    pub fn send_with(&self, body: &str, attributes: &[(&str, Attribute<'_>)]) -> String {
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(body);
        for (name, value) in attributes {
            let value = match value {
                Attribute::Text(t) => MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(*t),
                Attribute::Binary(b) => MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(aws_sdk_sqs::primitives::Blob::new(b.to_vec())),
            };
            send = send.message_attributes(*name, value.build().unwrap());
        }
        let out = self.rt.block_on(send.send()).unwrap_or_else(|e| {
            panic!(
                "cannot send to {}: {}",
                self.name,
                aws_sdk_sqs::error::DisplayErrorContext(e)
            )
        });
        let id = out.message_id.unwrap();
        self.sent.lock().unwrap().push(id.clone());
        id
    }

    /// Deletes every message of the queue, those in flight too (`PurgeQueue`): a receipt
    /// handle a consumer holds is then invalid.
    pub fn purge(&self) {
        self.rt
            .block_on(self.client.purge_queue().queue_url(&self.url).send())
            .unwrap();
    }

    /// What the queue holds now, visible and in flight.
    pub fn counts(&self) -> Option<(u64, u64)> {
        let out = self
            .rt
            .block_on(
                self.client
                    .get_queue_attributes()
                    .queue_url(&self.url)
                    .attribute_names(QueueAttributeName::All)
                    .send(),
            )
            .ok()?;
        let attributes = out.attributes?;
        let n = |a: QueueAttributeName| -> Option<u64> { attributes.get(&a)?.parse().ok() };
        Some((
            n(QueueAttributeName::ApproximateNumberOfMessages)?,
            n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
        ))
    }

    /// Receives (and deletes) every message the queue holds, in the order given.
    pub fn drain(&self) -> Vec<Held> {
        let mut held = Vec::new();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let out = self
                .rt
                .block_on(
                    self.client
                        .receive_message()
                        .queue_url(&self.url)
                        .max_number_of_messages(10)
                        .wait_time_seconds(1)
                        .message_attribute_names("All")
                        .message_system_attribute_names(MessageSystemAttributeName::All)
                        .send(),
                )
                .unwrap();
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let mut headers = BTreeMap::new();
                for (k, v) in m.message_attributes.unwrap_or_default() {
                    headers.insert(k, v.string_value.unwrap_or_default());
                }
                for (k, v) in m.attributes.unwrap_or_default() {
                    headers.insert(k.as_str().to_string(), v);
                }
                let body = m.body.unwrap_or_default();
                let body = if headers
                    .get("edi-body-encoding")
                    .is_some_and(|e| e == "base64")
                {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(body)
                        .unwrap()
                } else {
                    body.into_bytes()
                };
                self.rt
                    .block_on(
                        self.client
                            .delete_message()
                            .queue_url(&self.url)
                            .receipt_handle(m.receipt_handle.unwrap())
                            .send(),
                    )
                    .unwrap();
                held.push(Held {
                    subject: self.name.clone(),
                    headers,
                    body,
                });
            }
        }
        held
    }
}

impl Drop for Sqs {
    fn drop(&mut self) {
        let _ = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                self.client.delete_queue().queue_url(&self.url).send(),
            )
            .await
        });
    }
}

impl TestBroker for Sqs {
    /// The SDK tries a call again on a new connection by itself: a dropped connection is not
    /// always a failure consume sees.
    const SAYS_RECONNECTING: bool = false;

    fn create() -> Option<Sqs> {
        Sqs::with(Made::default())
    }

    fn droppable(mut self, _dir: &std::path::Path) -> Option<Sqs> {
        self.relay = Some(Relay::start(&self.url));
        Some(self)
    }

    fn send(&self, messages: &[Put]) {
        self.send_grouped(messages, |_| "g".to_string());
    }

    /// The queue's URL (its endpoint in it), through the relay where there is one.
    fn source_url(&self) -> String {
        match &self.relay {
            Some(relay) => format!("http://127.0.0.1:{}/{ACCOUNT}/{}", relay.port, self.name),
            None => self.url.clone(),
        }
    }

    fn source(&self, seq: usize, _id: &str) -> String {
        format!("sqs:{}/{}", self.name, self.sent.lock().unwrap()[seq - 1])
    }

    fn source_prefix(&self) -> String {
        format!("sqs:{}/", self.name)
    }

    fn unacknowledged(&self) -> Option<u64> {
        self.counts()
            .map(|(visible, in_flight)| visible + in_flight)
    }

    fn dead_letter_to(&self) -> String {
        self.url.clone()
    }

    fn dead_letter_subject(&self) -> String {
        self.name.clone()
    }

    fn dead_lettered(&self) -> Vec<Held> {
        self.drain()
    }

    /// SQS is told to delete a rejected message once it is recorded, as it is told to delete
    /// an accepted one: what it dropped for good is what the queue no longer holds, neither
    /// visible nor in flight, of what it held when the watch began (counted: SQS keeps nothing
    /// of a deleted message). A message merely left alone is still in flight, and would come
    /// again after its visibility timeout.
    const DROPS_THE_ACKNOWLEDGED: bool = true;

    fn watch_refused(&self) -> Option<super::Watch<'_>> {
        let mut held = self.unacknowledged().expect("the queue's counts");
        Some(Box::new(move || {
            let now = self.unacknowledged().expect("the queue's counts");
            let dropped = held.saturating_sub(now);
            held = now;
            vec![None; dropped as usize]
        }))
    }

    /// moto's queues take longer with every message they hold (1,000 messages: 8 s to send and
    /// 23 s to receive and delete, against 0.4 s for 100): a tenth of what the other brokers
    /// are sent.
    fn many(n: usize) -> usize {
        (n / 10).max(20)
    }

    /// Closes every connection through the relay, and refuses new ones for a second.
    fn drop_connection_of(&mut self, _pid: u32) {
        self.relay
            .as_ref()
            .expect("a connection is dropped through the relay (droppable)")
            .drop_all(Duration::from_secs(1));
    }
}

impl TestDestination for Sqs {
    /// A FIFO queue drops an event sent again within five minutes by its deduplication id (the
    /// event's id). (A standard queue does not: [`Standard`].)
    const DUPLICATES: bool = false;
    /// A message group per partner.
    const ORDER: Order = Order::PerPartner;
    const REFUSAL: &'static str = "more than the queue takes: 8192";

    /// A FIFO queue.
    fn destination() -> Option<Sqs> {
        Sqs::fifo()
    }

    /// A FIFO queue that takes messages up to 8,192 bytes (its `MaximumMessageSize`), which
    /// `publish` reads from it and holds a larger event to, unsent.
    fn refusing(_poison: &Event, _others: &[Event]) -> Option<Sqs> {
        Sqs::with(Made {
            fifo: true,
            max_size: Some(8192),
            ..Made::default()
        })
    }

    fn publish_args(&self) -> Vec<String> {
        vec!["--to".into(), self.url.clone()]
    }

    fn taken(&self) -> Vec<Got> {
        Got::all(self.drain(), "ce-id", Some("MessageGroupId"))
    }

    /// `consume` from the queue named `sqs://REGION/ACCOUNT/NAME`, its endpoint given apart.
    fn take_into(&self, second: &crate::common::site::Site, args: &[&str]) -> crate::common::Run {
        let endpoint = endpoint();
        let args = [&["--sqs-endpoint", endpoint.as_str()], args].concat();
        consume_into(second, "2s", &self.sqs_url(), &args)
    }

    fn many(n: usize) -> usize {
        <Sqs as TestBroker>::many(n)
    }
}

/// A standard queue of a test's own, as a destination: it keeps no order and drops no copy
/// (docs/brokers.md), where a FIFO queue ([`Sqs`]'s destination) does both.
pub struct Standard(pub Sqs);

impl TestDestination for Standard {
    /// A crash between the delivery and the mark sends those events again, with the same `ce-id`.
    const DUPLICATES: bool = true;
    const ORDER: Order = Order::Unordered;
    const REFUSAL: &'static str = <Sqs as TestDestination>::REFUSAL;

    fn destination() -> Option<Standard> {
        Sqs::create().map(Standard)
    }

    /// A standard queue that takes messages up to 8,192 bytes, as [`Sqs`]'s FIFO one.
    fn refusing(_poison: &Event, _others: &[Event]) -> Option<Standard> {
        Sqs::with(Made {
            max_size: Some(8192),
            ..Made::default()
        })
        .map(Standard)
    }

    fn publish_args(&self) -> Vec<String> {
        self.0.publish_args()
    }

    /// Without a partner: a standard queue has no message groups.
    fn taken(&self) -> Vec<Got> {
        Got::all(self.0.drain(), "ce-id", None)
    }

    fn take_into(&self, second: &crate::common::site::Site, args: &[&str]) -> crate::common::Run {
        self.0.take_into(second, args)
    }

    fn many(n: usize) -> usize {
        <Sqs as TestDestination>::many(n)
    }
}

/// A TCP relay on loopback in front of the test server, whose connections a test can close
/// (as a network failure or a restart of the endpoint does) without other tests seeing it.
pub struct Relay {
    pub port: u16,
    state: Arc<RelayState>,
}

#[derive(Default)]
struct RelayState {
    closed: AtomicBool,
    refusing: AtomicBool,
    /// Each connection relayed: its two sockets, and whether it has ended (either way).
    streams: Mutex<Vec<(TcpStream, TcpStream, Arc<AtomicBool>)>>,
}

impl Relay {
    fn start(queue_url: &str) -> Relay {
        let upstream = queue_url
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap()
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(RelayState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if shared.closed.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                if shared.refusing.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let ended = Arc::new(AtomicBool::new(false));
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    shared.streams.lock().unwrap().push((c, s, ended.clone()));
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let ended = ended.clone();
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        ended.store(true, Ordering::Relaxed);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay { port, state }
    }

    /// Closes every connection, and refuses new ones for `refuse`. The cut must cut something:
    /// it waits (at most 30 s) until a connection is open through the relay (moto closes each
    /// after its answer, so one is open while a request is), and fails where none came.
    pub fn drop_all(&self, refuse: Duration) {
        let open = |streams: &[(TcpStream, TcpStream, Arc<AtomicBool>)]| {
            streams
                .iter()
                .filter(|(_, _, ended)| !ended.load(Ordering::Relaxed))
                .count()
        };
        let until = Instant::now() + Duration::from_secs(30);
        while open(&self.state.streams.lock().unwrap()) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.state.refusing.store(true, Ordering::Relaxed);
        // Those open when shut down: the connections this cut (consume's: nothing else goes
        // through the relay).
        let mut cut = 0;
        for (client, server, ended) in self.state.streams.lock().unwrap().drain(..) {
            let open = !ended.load(Ordering::Relaxed);
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = server.shutdown(std::net::Shutdown::Both);
            cut += usize::from(open);
        }
        assert!(cut > 0, "no connection was open through the relay to cut");
        std::thread::sleep(refuse);
        self.state.refusing.store(false, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then ends.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for (client, server, _) in self.state.streams.lock().unwrap().drain(..) {
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = server.shutdown(std::net::Shutdown::Both);
        }
    }
}
