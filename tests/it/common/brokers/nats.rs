//! JetStream streams on the machine's NATS, and NATS servers of a test's own.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Held, Put, TestBroker, runtime, unique};
use crate::common::require;
use crate::common::sinks::{Event, Got, Order, TestDestination, consume_into};

pub const NATS: &str = "nats://127.0.0.1:4222";

/// A JetStream stream capturing `PREFIX.>`.
pub struct Jet {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
    pub stream: String,
    pub prefix: String,
    server: String,
    /// The server of its own it is on, where it is (see [`TestBroker::droppable`]).
    own: Option<OwnNats>,
}

impl Jet {
    pub fn create() -> Option<Jet> {
        Jet::with_stream(true, None)
    }

    /// A prefix of its own, with (or without) a stream capturing it, which takes messages up to
    /// `max_message_size` bytes where given.
    pub fn with_stream(stream: bool, max_message_size: Option<i32>) -> Option<Jet> {
        Jet::on(NATS, stream, max_message_size)
    }

    /// The same on the server at `server`.
    pub fn on(server: &str, stream: bool, max_message_size: Option<i32>) -> Option<Jet> {
        let rt = runtime();
        let client = match rt.block_on(
            async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
                .connect(server),
        ) {
            Ok(c) => c,
            Err(e) => {
                require(
                    &format!("NATS on {server} does not answer ({e})"),
                    "EDI_INBOX_REQUIRE_NATS",
                );
                return None;
            }
        };
        let js = {
            let _inside = rt.enter();
            async_nats::jetstream::new(client)
        };
        let name = unique("EDI_T_");
        let prefix = name.to_lowercase();
        if stream {
            rt.block_on(js.create_stream(async_nats::jetstream::stream::Config {
                name: name.clone(),
                subjects: vec![format!("{prefix}.>")],
                storage: async_nats::jetstream::stream::StorageType::File,
                max_message_size: max_message_size.unwrap_or(-1),
                ..Default::default()
            }))
            .unwrap();
        }
        Some(Jet {
            rt,
            js,
            stream: name,
            prefix,
            server: server.to_string(),
            own: None,
        })
    }

    /// What `--to` gets.
    pub fn to(&self) -> String {
        format!("{}/{}", self.server, self.prefix)
    }

    /// How many messages the stream holds (0 while the server does not answer).
    pub fn stored(&self) -> u64 {
        self.rt.block_on(async {
            let Ok(mut stream) = self.js.get_stream(&self.stream).await else {
                return 0;
            };
            stream.info().await.map_or(0, |i| i.state.messages)
        })
    }

    /// Every message of the stream, in its order.
    pub fn messages(&self) -> Vec<Held> {
        self.rt.block_on(async {
            // After a restart of the server, this connection comes back on its own, in a while.
            let mut tries = 0;
            let mut stream = loop {
                match self.js.get_stream(&self.stream).await {
                    Ok(s) => break s,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        eprintln!("stream {}: {e}; again", self.stream);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("stream {}: {e}", self.stream),
                }
            };
            let info = stream.info().await.unwrap().clone();
            let mut held = Vec::new();
            for seq in info.state.first_sequence..=info.state.last_sequence {
                if info.state.messages == 0 {
                    break;
                }
                let m = stream.get_raw_message(seq).await.unwrap();
                let mut headers = BTreeMap::new();
                for (k, v) in m.headers.iter() {
                    if let Some(v) = v.first() {
                        headers.insert(k.to_string(), v.to_string());
                    }
                }
                held.push(Held {
                    subject: m.subject.to_string(),
                    headers,
                    body: m.payload.to_vec(),
                });
            }
            held
        })
    }
}

impl Jet {
    /// What `consume --from` gets for the durable consumer `consumer` on the stream.
    pub fn from(&self, consumer: &str) -> String {
        format!("{}/{}/{consumer}", self.server, self.stream)
    }

    /// Publishes each body to `PREFIX.in`, with its `edi-filename` header where given, the
    /// confirmations pipelined; returns when the stream holds them all. After a restart of the
    /// server, this connection comes back on its own, in a while: a message not confirmed is
    /// published again, one by one (a copy may be stored twice, as a gateway's retry would).
    pub fn put(&self, bodies: &[(Vec<u8>, Option<String>)]) {
        let subject = format!("{}.in", self.prefix);
        let headers = |name: &Option<String>| {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(n) = name {
                headers.insert("edi-filename", n.as_str());
            }
            headers
        };
        self.rt.block_on(async {
            // Back (after a restart) once the stream answers: what is published before only
            // waits out its confirmation's timeout.
            for _ in 0..120 {
                if self.js.get_stream(&self.stream).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            for chunk in bodies.chunks(500) {
                let mut acks = Vec::with_capacity(chunk.len());
                for (body, name) in chunk {
                    let sent = self
                        .js
                        .publish_with_headers(subject.clone(), headers(name), body.clone().into())
                        .await;
                    acks.push(sent);
                }
                for ((body, name), sent) in chunk.iter().zip(acks) {
                    let confirmed = match sent {
                        Ok(ack) => ack.await.is_ok(),
                        Err(_) => false,
                    };
                    let mut tries = 0;
                    let mut stored = confirmed;
                    while !stored {
                        if let Ok(ack) = self
                            .js
                            .publish_with_headers(
                                subject.clone(),
                                headers(name),
                                body.clone().into(),
                            )
                            .await
                        {
                            stored = ack.await.is_ok();
                        }
                        if !stored {
                            tries += 1;
                            assert!(tries < 120, "{subject}: not stored after a minute");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            }
        });
    }

    /// A durable pull consumer `name` that acknowledges all earlier messages with each
    /// acknowledgement (ack policy `all`): one `consume` must refuse.
    pub fn consumer_acking_all(&self, name: &str) {
        use async_nats::jetstream::consumer::{AckPolicy, pull};
        self.rt.block_on(async {
            let stream = self.js.get_stream(&self.stream).await.unwrap();
            stream
                .create_consumer(pull::Config {
                    durable_name: Some(name.to_string()),
                    ack_policy: AckPolicy::All,
                    ..Default::default()
                })
                .await
                .unwrap();
        });
    }

    /// Starts counting the server's advisories that `consumer` terminated a message.
    pub fn watch_terminated(&self, consumer: &str) -> async_nats::Subscriber {
        self.rt.block_on(async {
            let sub = self
                .js
                .client()
                .subscribe(format!(
                    "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{}.{consumer}",
                    self.stream
                ))
                .await
                .unwrap();
            self.js.client().flush().await.unwrap();
            sub
        })
    }

    /// How many advisories `watch` got (those in the next second included).
    pub fn count(&self, watch: &mut async_nats::Subscriber) -> usize {
        use futures_util::StreamExt as _;
        self.rt.block_on(async {
            let mut n = 0;
            while let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(1), watch.next()).await
            {
                n += 1;
            }
            n
        })
    }

    /// The durable consumer's (messages not delivered yet, delivered and not acknowledged);
    /// `None` where it does not exist.
    pub fn backlog(&self, consumer: &str) -> Option<(u64, usize)> {
        self.rt.block_on(async {
            let stream = self.js.get_stream(&self.stream).await.ok()?;
            let mut c: async_nats::jetstream::consumer::PullConsumer =
                stream.get_consumer(consumer).await.ok()?;
            let info = c.info().await.ok()?;
            Some((info.num_pending, info.num_ack_pending))
        })
    }
}

impl Drop for Jet {
    fn drop(&mut self) {
        let _ = self.rt.block_on(self.js.delete_stream(&self.stream));
    }
}

/// The durable consumer the contract tests consume through.
const CONSUMER: &str = "c";

impl TestBroker for Jet {
    const SAYS_RECONNECTING: bool = false;

    fn create() -> Option<Jet> {
        Jet::create()
    }

    fn droppable(self, dir: &std::path::Path) -> Option<Jet> {
        drop(self);
        let own = OwnNats::start(dir)?;
        let mut jet = Jet::on(&own.url(), true, None)?;
        jet.own = Some(own);
        Some(jet)
    }

    fn send(&self, messages: &[Put]) {
        let bodies: Vec<_> = messages
            .iter()
            .map(|m| (m.body.clone(), m.name.clone()))
            .collect();
        self.put(&bodies);
    }

    fn source_url(&self) -> String {
        self.from(CONSUMER)
    }

    fn source(&self, seq: usize, _id: &str) -> String {
        format!("nats:{}/{seq}", self.stream)
    }

    fn source_prefix(&self) -> String {
        format!("nats:{}/", self.stream)
    }

    fn unacknowledged(&self) -> Option<u64> {
        self.backlog(CONSUMER)
            .map(|(pending, unacknowledged)| pending + unacknowledged as u64)
    }

    fn dead_letter_to(&self) -> String {
        format!("{}/{}.dead", self.server, self.prefix)
    }

    fn dead_letter_subject(&self) -> String {
        format!("{}.dead", self.prefix)
    }

    fn dead_lettered(&self) -> Vec<Held> {
        self.messages()
    }

    fn watch_refused(&self) -> Option<super::Watch<'_>> {
        let mut watch = self.watch_terminated(CONSUMER);
        Some(Box::new(move || vec![None; self.count(&mut watch)]))
    }

    /// Kills its own server (SIGKILL) and starts it again.
    fn drop_connection_of(&mut self, _pid: u32) {
        let own = self
            .own
            .as_mut()
            .expect("a connection is dropped on a server of the test's own (droppable)");
        own.kill();
        std::thread::sleep(Duration::from_millis(500));
        own.up().unwrap();
    }
}

impl TestDestination for Jet {
    /// JetStream drops an event sent again by its `Nats-Msg-Id` within the stream's duplicate
    /// window (two minutes, the server's default).
    const DUPLICATES: bool = false;
    const ORDER: Order = Order::Total;
    const REFUSAL: &'static str = "message size exceeds maximum allowed";

    fn destination() -> Option<Jet> {
        Jet::create()
    }

    /// A stream that takes messages up to 256 KiB: the server refuses a larger one.
    fn refusing(_poison: &Event, _others: &[Event]) -> Option<Jet> {
        Jet::with_stream(true, Some(256 * 1024))
    }

    fn publish_args(&self) -> Vec<String> {
        vec!["--to".into(), self.to()]
    }

    fn taken(&self) -> Vec<Got> {
        Got::all(self.messages(), "Nats-Msg-Id", None)
    }

    /// `consume` through a durable consumer of its own on the stream.
    fn take_into(&self, second: &crate::common::site::Site, args: &[&str]) -> crate::common::Run {
        consume_into(second, "1s", &self.from("copy"), args)
    }
}

/// A NATS server with JetStream of a test's own (on a free port, its store in a folder of the
/// test's), which the test may kill and start again: a broker restart that the other tests,
/// on the machine's server, do not see.
pub struct OwnNats {
    pub port: u16,
    store: std::path::PathBuf,
    child: Option<std::process::Child>,
    /// A configuration file of its own (authorization, TLS), where given.
    config: Option<std::path::PathBuf>,
}

impl OwnNats {
    /// `None` (with a notice) where there is no `nats-server`, unless `EDI_INBOX_REQUIRE_NATS`.
    pub fn start(store: &std::path::Path) -> Option<OwnNats> {
        let port = crate::common::free_port();
        let mut own = OwnNats {
            port,
            store: store.to_path_buf(),
            child: None,
            config: None,
        };
        if let Err(e) = own.up() {
            require(
                &format!("nats-server does not answer ({e})"),
                "EDI_INBOX_REQUIRE_NATS",
            );
            return None;
        }
        Some(own)
    }

    /// A server with `config` (nats-server's configuration format) beside its store.
    pub fn start_with(store: &std::path::Path, config: &str) -> Option<OwnNats> {
        let port = crate::common::free_port();
        std::fs::create_dir_all(store).ok()?;
        let file = store.with_extension("conf");
        std::fs::write(&file, config).ok()?;
        let mut own = OwnNats {
            port,
            store: store.to_path_buf(),
            child: None,
            config: Some(file),
        };
        if let Err(e) = own.up() {
            require(
                &format!("nats-server does not answer ({e})"),
                "EDI_INBOX_REQUIRE_NATS",
            );
            return None;
        }
        Some(own)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts it (again) and waits until it answers.
    pub fn up(&mut self) -> std::io::Result<()> {
        let mut command = std::process::Command::new("/usr/sbin/nats-server");
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let child = command
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        self.child = Some(child);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < until {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(std::io::Error::other("nats-server did not start"))
    }

    /// Stops it answering (SIGSTOP), its connections left open: a server that hangs.
    pub fn pause(&self) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, libc::SIGSTOP) };
        }
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
        }
    }

    /// Kills it dead, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.kill();
    }
}
