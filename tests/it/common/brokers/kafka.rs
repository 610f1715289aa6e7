//! Kafka topics on the test broker (tansu 0.6.0, which `.ci/run` starts at the address in
//! `EDI_INBOX_TEST_KAFKA`, 127.0.0.1:9092 where unset), and tansu brokers of a test's own on
//! its S3 engine (a bucket of the test's own on the S3 server at `EDI_INBOX_TEST_S3`, moto in
//! CI), which a test may kill and start again without losing what they hold.
//!
//! tansu 0.6.0 gets some answers wrong, and the tests do not depend on them: the high watermark
//! (ListOffsets "latest"), so a topic is read to its end by waiting for nothing more to come;
//! transactions; and the eviction of a member killed with SIGKILL, which it sometimes never
//! does, so that a group's run after a kill takes its partitions by hand. A new group forms only
//! once a member's session timeout has gone by: the processes the tests start use 6 s (see
//! `common::edi_inbox`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Header, Headers as _, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{Held, Put, TestBroker, runtime, unique};
use crate::common::require;
use crate::common::sinks::{Event, Got, Order, TestDestination, consume_into};

/// The test broker's address.
pub fn servers() -> String {
    std::env::var("EDI_INBOX_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".to_string())
}

/// The session timeout the processes the tests start use (see the module's text).
pub const SESSION_TIMEOUT_MS: &str = "6000";

/// A topic of a test's own, and a consumer group name of its own.
pub struct Kafka {
    rt: tokio::runtime::Runtime,
    admin: AdminClient<DefaultClientContext>,
    pub servers: String,
    pub topic: String,
    pub group: String,
    pub partitions: i32,
    /// Where each message sent went, in the order sent: its partition and offset.
    sent: Mutex<Vec<(i32, i64)>>,
    /// Messages sent from now on go round the partitions (else all to partition 0).
    pub spread: bool,
    /// The broker of its own it is on, where it is ([`TestBroker::droppable`]).
    own: Option<OwnTansu>,
    /// The largest record `publish` may send to it, where smaller than librdkafka's default
    /// (`message.max.bytes`, [`TestDestination::refusing`]).
    max_bytes: Option<usize>,
}

impl Kafka {
    /// A topic of `partitions` on the test broker.
    pub fn with_partitions(partitions: i32) -> Option<Kafka> {
        Kafka::on(&servers(), partitions, None)
    }

    fn on(servers: &str, partitions: i32, own: Option<OwnTansu>) -> Option<Kafka> {
        let rt = runtime();
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", servers)
            .create()
            .ok()?;
        let topic = unique("edi_t_");
        let created = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(15),
                admin.create_topics(
                    &[NewTopic::new(
                        &topic,
                        partitions,
                        TopicReplication::Fixed(1),
                    )],
                    &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                ),
            )
            .await
        });
        match created {
            Ok(Ok(results)) if results.iter().all(Result::is_ok) => {}
            Ok(Ok(results)) => panic!("cannot create the topic {topic}: {results:?}"),
            Ok(Err(e)) => {
                require(
                    &format!("Kafka on {servers} does not answer ({e})"),
                    "EDI_INBOX_REQUIRE_KAFKA",
                );
                return None;
            }
            Err(_) => {
                require(
                    &format!("Kafka on {servers} does not answer (no answer within 15 s)"),
                    "EDI_INBOX_REQUIRE_KAFKA",
                );
                return None;
            }
        }
        Some(Kafka {
            rt,
            admin,
            servers: servers.to_string(),
            group: format!("{topic}_g"),
            topic,
            partitions,
            sent: Mutex::new(Vec::new()),
            spread: false,
            own,
            max_bytes: None,
        })
    }

    /// `--from` for the group (the group's assignment, not by hand).
    pub fn group_url(&self) -> String {
        format!(
            "kafka://{}/{}?group={}",
            self.servers, self.topic, self.group
        )
    }

    /// `--from` with every partition assigned by hand, under the group's positions.
    pub fn by_hand_url(&self) -> String {
        let all: Vec<String> = (0..self.partitions).map(|p| p.to_string()).collect();
        format!("{}&partitions={}", self.group_url(), all.join(","))
    }

    /// `--to` for this topic.
    pub fn to(&self) -> String {
        format!("kafka://{}/{}", self.servers, self.topic)
    }

    /// Where the `seq`-th message sent (from 1) went.
    pub fn place(&self, seq: usize) -> (i32, i64) {
        self.sent.lock().unwrap()[seq - 1]
    }

    /// How many messages were sent to each partition.
    fn sent_per_partition(&self) -> Vec<i64> {
        let mut n = vec![0; self.partitions as usize];
        for (p, _) in self.sent.lock().unwrap().iter() {
            n[*p as usize] += 1;
        }
        n
    }

    /// The group's offsets committed to Kafka, per partition (0 where none).
    pub fn committed(&self) -> Option<Vec<i64>> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", &self.group)
            .create()
            .ok()?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let got = c.committed_offsets(tpl, Duration::from_secs(10)).ok()?;
        Some(
            (0..self.partitions)
                .map(
                    |p| match got.find_partition(&self.topic, p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => 0,
                    },
                )
                .collect(),
        )
    }

    /// Joins the group as a member of its own, until the broker gives it partitions, and
    /// leaves it again (committing nothing). A broker evicts a member whose session timed out
    /// when the group is next joined (tansu only then: it has no timer of its own), so this is
    /// how a test makes the group empty after a member died, as another host starting would.
    pub fn join_and_leave(&self) {
        let c = self.member();
        // Leaves the group at once (LeaveGroup), instead of waiting out its session.
        c.unsubscribe();
        let _ = c.poll(Duration::from_millis(200));
    }

    /// A member of the group that the broker has given partitions, which commits nothing: it
    /// stays in the group (librdkafka's own thread keeps its heartbeats going) until dropped.
    pub fn member(&self) -> BaseConsumer {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("session.timeout.ms", "6000")
            .create()
            .unwrap();
        c.subscribe(&[&self.topic]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while c.assignment().map_or(0, |a| a.count()) == 0 {
            assert!(
                Instant::now() < deadline,
                "no partitions given to a new member of {} within 60 s",
                self.group
            );
            let _ = c.poll(Duration::from_millis(200));
        }
        c
    }

    /// Every record the topic holds, in each partition's order (partition 0 first): read until
    /// nothing more came for 3 s (the broker's high watermark is not to be trusted).
    pub fn records(&self) -> Vec<Held> {
        self.records_of(&self.topic)
    }

    /// The same of another topic on the broker (one that a publish made, say).
    pub fn records_of(&self, topic: &str) -> Vec<Held> {
        self.placed_records_of(topic).into_values().collect()
    }

    /// Every record of `topic`, by partition and offset.
    fn placed_records_of(&self, topic: &str) -> BTreeMap<(i32, i64), Held> {
        // A group id of its own (librdkafka may ask for one to assign by hand), never joined.
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("group.id", format!("{topic}_reader"))
            .set("enable.partition.eof", "false")
            .create()
            .unwrap();
        let partitions = c
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_or(0, |m| {
                m.topics().first().map_or(0, |t| t.partitions().len())
            });
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        let mut tries = 0;
        while let Err(e) = c.assign(&tpl) {
            tries += 1;
            assert!(tries < 120, "cannot read {topic} (assign): {e}");
            std::thread::sleep(Duration::from_millis(250));
        }
        let mut by_partition: BTreeMap<(i32, i64), Held> = BTreeMap::new();
        let mut last = Instant::now();
        let start = Instant::now();
        while last.elapsed() < Duration::from_secs(3) && start.elapsed() < Duration::from_secs(120)
        {
            // A fetch that failed once is made again by the client.
            if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                last = Instant::now();
                let mut headers = BTreeMap::new();
                if let Some(h) = m.headers() {
                    for h in h.iter() {
                        headers.insert(
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        );
                    }
                }
                if let Some(k) = m.key() {
                    headers.insert("key".into(), String::from_utf8_lossy(k).into_owned());
                }
                by_partition.insert(
                    (m.partition(), m.offset()),
                    Held {
                        subject: m.topic().to_string(),
                        headers,
                        body: m.payload().unwrap_or_default().to_vec(),
                    },
                );
            }
        }
        by_partition
    }
}

impl Kafka {
    /// Deletes `topic` (one a publish made beside this one).
    pub fn delete(&self, topic: &str) {
        let admin = &self.admin;
        let _ = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                admin.delete_topics(&[topic], &AdminOptions::new()),
            )
            .await
        });
    }
}

impl Kafka {
    /// Deletes the topic and creates it again under its name, with as many partitions: another
    /// topic (a new topic id), empty, whose records start again at offset 0.
    pub fn recreate(&self) {
        let admin = &self.admin;
        let deleted = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                admin.delete_topics(&[&self.topic], &AdminOptions::new()),
            )
            .await
        });
        assert!(
            matches!(&deleted, Ok(Ok(r)) if r.iter().all(Result::is_ok)),
            "cannot delete the topic {}: {deleted:?}",
            self.topic
        );
        let start = Instant::now();
        loop {
            let created = self.rt.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    admin.create_topics(
                        &[NewTopic::new(
                            &self.topic,
                            self.partitions,
                            TopicReplication::Fixed(1),
                        )],
                        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
                    ),
                )
                .await
            });
            match created {
                Ok(Ok(r)) if r.iter().all(Result::is_ok) => break,
                // The deletion may take a moment to be done with.
                other => assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "cannot create the topic {} again: {other:?}",
                    self.topic
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.sent.lock().unwrap().clear();
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        self.delete(&self.topic.clone());
    }
}

/// The delivery reports of [`TestBroker::send`], by index.
struct Reports(Mutex<Vec<(usize, i32, i64)>>);

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let m = result
            .as_ref()
            .unwrap_or_else(|(e, _)| panic!("not stored: {e}"));
        self.0
            .lock()
            .unwrap()
            .push((index, m.partition(), m.offset()));
    }
}

impl TestBroker for Kafka {
    const SAYS_RECONNECTING: bool = false;
    const DROPS_THE_ACKNOWLEDGED: bool = true;

    fn create() -> Option<Kafka> {
        Kafka::with_partitions(1)
    }

    fn droppable(self, dir: &std::path::Path) -> Option<Kafka> {
        let partitions = self.partitions;
        drop(self);
        let own = OwnTansu::start(dir)?;
        let servers = own.servers();
        Kafka::on(&servers, partitions, Some(own))
    }

    fn send(&self, messages: &[Put]) {
        let producer: BaseProducer<Reports> = ClientConfig::new()
            .set("bootstrap.servers", &self.servers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create_with_context(Reports(Mutex::new(Vec::new())))
            .unwrap();
        let first = self.sent.lock().unwrap().len();
        for (i, m) in messages.iter().enumerate() {
            let partition = if self.spread {
                ((first + i) % self.partitions as usize) as i32
            } else {
                0
            };
            let mut headers = OwnedHeaders::new();
            if let Some(name) = &m.name {
                headers = headers.insert(Header {
                    key: "edi-filename",
                    value: Some(name.as_str()),
                });
            }
            let mut record = BaseRecord::with_opaque_to(&self.topic, i)
                .partition(partition)
                .payload(&m.body[..])
                .headers(headers);
            if let Some(id) = &m.id {
                record = record.key(id.as_str());
            }
            let mut record = Some(record);
            while let Some(r) = record.take() {
                if let Err((e, back)) = producer.send(r) {
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ),
                        "cannot produce to {}: {e}",
                        self.topic
                    );
                    producer.poll(Duration::from_millis(50));
                    record = Some(back);
                }
            }
        }
        producer
            .flush(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{} records not stored: {e}", self.topic));
        let mut reports = std::mem::take(&mut *producer.context().0.lock().unwrap());
        assert_eq!(
            reports.len(),
            messages.len(),
            "a delivery report for each record"
        );
        reports.sort_unstable();
        self.sent
            .lock()
            .unwrap()
            .extend(reports.into_iter().map(|(_, p, o)| (p, o)));
    }

    fn source_url(&self) -> String {
        self.by_hand_url()
    }

    fn source(&self, seq: usize, _id: &str) -> String {
        let (p, o) = self.place(seq);
        format!("kafka:{}/{p}/{o}", self.topic)
    }

    fn source_prefix(&self) -> String {
        format!("kafka:{}/", self.topic)
    }

    /// Records past the offsets the group committed to Kafka (which follow the inbox's).
    fn unacknowledged(&self) -> Option<u64> {
        let committed = self.committed()?;
        let sent = self.sent_per_partition();
        Some(
            sent.iter()
                .zip(committed)
                .map(|(s, c)| (s - c).max(0) as u64)
                .sum(),
        )
    }

    fn dead_letter_to(&self) -> String {
        self.to()
    }

    fn dead_letter_subject(&self) -> String {
        self.topic.clone()
    }

    fn dead_lettered(&self) -> Vec<Held> {
        self.records()
    }

    /// Kafka is told nothing of a rejected record: it is decided, and its partition's position
    /// moves past it.
    /// Kafka is told nothing of a refusal: what it holds for done with, for good, is what lies
    /// below the group's committed offsets (which follow the inbox's positions), the
    /// acknowledged as the refused.
    fn watch_refused(&self) -> Option<super::Watch<'_>> {
        let mut told = 0;
        Some(Box::new(move || {
            let committed = self.committed().unwrap_or_default();
            let below: Vec<Option<Vec<u8>>> = self
                .placed_records_of(&self.topic)
                .into_iter()
                .filter(|((p, o), _)| committed.get(*p as usize).is_some_and(|c| o < c))
                .map(|(_, h)| Some(h.body))
                .collect();
            let new = below[told.min(below.len())..].to_vec();
            told = below.len();
            new
        }))
    }

    /// Kills its own broker (SIGKILL) and starts it again on its S3 store.
    fn drop_connection_of(&mut self, _pid: u32) {
        let own = self
            .own
            .as_mut()
            .expect("a connection is dropped on a broker of the test's own (droppable)");
        own.kill();
        std::thread::sleep(Duration::from_millis(500));
        own.up().unwrap();
    }
}

impl TestDestination for Kafka {
    /// Kafka does not drop a record sent again across producer sessions: a consumer drops a
    /// `ce_id` it has seen.
    const DUPLICATES: bool = true;
    /// A partner's records under one key, in one partition; the topic has three.
    const ORDER: Order = Order::PerPartner;
    const REFUSAL: &'static str = "too large";

    /// A topic of three partitions, so that partners' records go apart.
    fn destination() -> Option<Kafka> {
        Kafka::with_partitions(3)
    }

    /// The same, and a producer that takes records up to 64 KiB (`message.max.bytes`, through
    /// `EDI_INBOX_KAFKA_MESSAGE_MAX_BYTES`): the refusal of a larger one is librdkafka's, before
    /// the broker sees it, as under a deployment's lower limit.
    fn refusing(_poison: &Event, _others: &[Event]) -> Option<Kafka> {
        let mut kafka = Kafka::with_partitions(3)?;
        kafka.max_bytes = Some(64 * 1024);
        Some(kafka)
    }

    fn publish_args(&self) -> Vec<String> {
        vec!["--to".into(), self.to()]
    }

    fn publish_env(&self) -> Vec<(&'static str, String)> {
        self.max_bytes
            .map(|n| ("EDI_INBOX_KAFKA_MESSAGE_MAX_BYTES", n.to_string()))
            .into_iter()
            .collect()
    }

    fn taken(&self) -> Vec<Got> {
        Got::all(self.records(), "ce_id", Some("key"))
    }

    /// `consume` by a group of its own (its assignment, not by hand).
    fn take_into(&self, second: &crate::common::site::Site, args: &[&str]) -> crate::common::Run {
        consume_into(second, "3s", &self.group_url(), args)
    }
}

/// A tansu broker of a test's own, on its S3 engine (a bucket of its own on the S3 server at
/// `EDI_INBOX_TEST_S3`), the binary at `EDI_INBOX_TANSU`: killed and started again, it keeps
/// its topics, records and groups.
pub struct OwnTansu {
    port: u16,
    bucket: String,
    s3: String,
    binary: String,
    log: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl OwnTansu {
    /// `None` (with a notice) where there is no tansu or no S3 server, unless
    /// `EDI_INBOX_REQUIRE_KAFKA`.
    pub fn start(dir: &std::path::Path) -> Option<OwnTansu> {
        let (Ok(binary), Ok(s3)) = (
            std::env::var("EDI_INBOX_TANSU"),
            std::env::var("EDI_INBOX_TEST_S3"),
        ) else {
            require(
                "a tansu broker of the test's own does not answer (EDI_INBOX_TANSU and \
                 EDI_INBOX_TEST_S3 are not both set)",
                "EDI_INBOX_REQUIRE_KAFKA",
            );
            return None;
        };
        let port = crate::common::free_port();
        std::fs::create_dir_all(dir).ok()?;
        let bucket = unique("tansu-").replace('_', "-");
        if let Err(e) = create_bucket(&s3, &bucket) {
            require(
                &format!("S3 on {s3} does not answer ({e})"),
                "EDI_INBOX_REQUIRE_KAFKA",
            );
            return None;
        }
        let mut own = OwnTansu {
            port,
            bucket,
            s3,
            binary,
            log: dir.join("tansu.log"),
            child: None,
        };
        if let Err(e) = own.up() {
            require(
                &format!("tansu does not answer ({e})"),
                "EDI_INBOX_REQUIRE_KAFKA",
            );
            return None;
        }
        Some(own)
    }

    pub fn servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it (again) and waits until it takes connections.
    pub fn up(&mut self) -> std::io::Result<()> {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = std::process::Command::new(&self.binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", &format!("s3://{}/", self.bucket)])
            .env("AWS_ENDPOINT", &self.s3)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(std::io::Error::other("tansu did not listen within 20 s"))
    }

    /// Kills it with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnTansu {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Creates `bucket` on the S3 server at `endpoint` (moto takes an unsigned request).
fn create_bucket(endpoint: &str, bucket: &str) -> std::io::Result<()> {
    use std::io::{Read as _, Write as _};
    let host = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut s = std::net::TcpStream::connect(&host)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    if answer.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the bucket was not made: {}",
            answer.lines().next().unwrap_or_default()
        )))
    }
}
