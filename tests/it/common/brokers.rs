//! The machine's brokers for the publish tests: a JetStream stream (NATS on 127.0.0.1:4222) or
//! a RabbitMQ exchange and queue (127.0.0.1:5672, guest/guest) of a test's own, under unique
//! names, removed at the end, so that tests run in parallel and leave nothing behind. Where a
//! broker does not answer, the test is skipped with a notice, unless `EDI_INBOX_REQUIRE_NATS` /
//! `EDI_INBOX_REQUIRE_RABBITMQ` is set (`.ci/run` sets both): then it fails.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub const NATS: &str = "nats://127.0.0.1:4222";
pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn unreachable(what: &str, variable: &str, e: &dyn std::fmt::Display) {
    assert!(
        std::env::var_os(variable).is_none(),
        "{what} does not answer ({e}), and {variable} is set"
    );
    eprintln!("{what} does not answer ({e}): not checked");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A message as a broker holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub subject: String,
    /// Headers (NATS) or properties and application properties (AMQP), by name.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A JetStream stream capturing `PREFIX.>`.
pub struct Jet {
    rt: tokio::runtime::Runtime,
    js: async_nats::jetstream::Context,
    pub stream: String,
    pub prefix: String,
    server: String,
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
                unreachable("NATS on 127.0.0.1:4222", "EDI_INBOX_REQUIRE_NATS", &e);
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

/// A RabbitMQ exchange name of a test's own, and (where asked) a queue bound to all of it.
pub struct Rabbit {
    rt: tokio::runtime::Runtime,
    channel: lapin::Channel,
    _connection: lapin::Connection,
    pub exchange: String,
    pub queue: Option<String>,
    /// The queue's dead-letter exchange and the queue bound to it, where it has them.
    dead: Option<(String, String)>,
}

impl Rabbit {
    /// With a queue bound to the exchange by `binding` (`#` for everything), or none.
    pub fn create(binding: Option<&str>) -> Option<Rabbit> {
        Rabbit::declare(binding, false)
    }

    fn declare(binding: Option<&str>, dead_letters: bool) -> Option<Rabbit> {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let rt = runtime();
        let connected = rt.block_on(async {
            let c = tokio::time::timeout(
                Duration::from_secs(5),
                lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default()),
            )
            .await
            .map_err(|_| "timed out".to_string())?
            .map_err(|e| e.to_string())?;
            let ch = c.create_channel().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((c, ch))
        });
        let (connection, channel) = match connected {
            Ok(x) => x,
            Err(e) => {
                unreachable(
                    "RabbitMQ on 127.0.0.1:5672",
                    "EDI_INBOX_REQUIRE_RABBITMQ",
                    &e,
                );
                return None;
            }
        };
        let exchange = unique("edi_t_");
        let queue = binding.map(|_| format!("{exchange}_q"));
        let dead = dead_letters.then(|| (format!("{exchange}_dlx"), format!("{exchange}_dead")));
        let mut queue_args = FieldTable::default();
        if let Some((dlx, _)) = &dead {
            queue_args.insert(
                "x-dead-letter-exchange".into(),
                lapin::types::AMQPValue::LongString(dlx.as_str().into()),
            );
        }
        rt.block_on(async {
            if let Some((dlx, dq)) = &dead {
                channel
                    .exchange_declare(
                        dlx.as_str().into(),
                        lapin::ExchangeKind::Fanout,
                        ExchangeDeclareOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                channel
                    .queue_declare(
                        dq.as_str().into(),
                        QueueDeclareOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                channel
                    .queue_bind(
                        dq.as_str().into(),
                        dlx.as_str().into(),
                        "".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
            }
            channel
                .exchange_declare(
                    exchange.as_str().into(),
                    lapin::ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .unwrap();
            if let Some(q) = &queue {
                channel
                    .queue_declare(
                        q.as_str().into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..Default::default()
                        },
                        queue_args,
                    )
                    .await
                    .unwrap();
                channel
                    .queue_bind(
                        q.as_str().into(),
                        exchange.as_str().into(),
                        binding.unwrap_or("#").into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
            }
        });
        Some(Rabbit {
            rt,
            channel,
            _connection: connection,
            exchange,
            queue,
            dead,
        })
    }

    /// With a queue bound to the exchange by `#`, whose dead-letter exchange routes to a
    /// queue of its own ([`Rabbit::take_dead`]).
    pub fn with_dead_letters() -> Option<Rabbit> {
        Rabbit::declare(Some("#"), true)
    }

    /// What `consume --from` gets for the queue.
    pub fn from(&self) -> String {
        format!("{AMQP}/{}", self.queue.as_deref().unwrap_or_default())
    }

    /// Publishes each body to the exchange (routing key `edi.in`) with its `message_id` and
    /// `edi-filename` where given, confirmed.
    pub fn put(&self, bodies: &[(Vec<u8>, Option<String>, Option<String>)]) {
        use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
        self.rt.block_on(async {
            let ch = self._connection.create_channel().await.unwrap();
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            for chunk in bodies.chunks(500) {
                let mut confirms = Vec::with_capacity(chunk.len());
                for (body, id, name) in chunk {
                    let mut p = lapin::BasicProperties::default().with_delivery_mode(2);
                    if let Some(id) = id {
                        p = p.with_message_id(id.as_str().into());
                    }
                    if let Some(n) = name {
                        let mut h = lapin::types::FieldTable::default();
                        h.insert(
                            "edi-filename".into(),
                            lapin::types::AMQPValue::LongString(n.as_str().into()),
                        );
                        p = p.with_headers(h);
                    }
                    confirms.push(
                        ch.basic_publish(
                            self.exchange.as_str().into(),
                            "edi.in".into(),
                            BasicPublishOptions::default(),
                            body,
                            p,
                        )
                        .await
                        .unwrap(),
                    );
                }
                for c in confirms {
                    c.await.unwrap();
                }
            }
        });
    }

    /// Deletes the queue (its consumers are cancelled by the broker), as an operator might.
    pub fn delete_queue(&self) {
        use lapin::options::QueueDeleteOptions;
        let q = self.queue.clone().unwrap();
        self.rt.block_on(async {
            self.channel
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await
                .unwrap();
        });
    }

    /// Declares the queue again, bound to the exchange for everything.
    pub fn restore_queue(&self) {
        use lapin::options::{QueueBindOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let q = self.queue.clone().unwrap();
        self.rt.block_on(async {
            self.channel
                .queue_declare(
                    q.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .unwrap();
            self.channel
                .queue_bind(
                    q.as_str().into(),
                    self.exchange.as_str().into(),
                    "#".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
        });
    }

    /// Messages ready in the queue (not delivered, or given back by a consumer that went).
    pub fn ready(&self) -> u32 {
        use lapin::options::QueueDeclareOptions;
        let q = self.queue.clone().unwrap_or_default();
        self.rt.block_on(async {
            let ch = self._connection.create_channel().await.unwrap();
            let declared = ch
                .queue_declare(
                    q.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await
                .unwrap();
            declared.message_count()
        })
    }

    /// Every message the queue's dead-letter exchange took, taken off its queue.
    pub fn take_dead(&self) -> Vec<Held> {
        match &self.dead {
            Some((_, dq)) => self.take_from(dq),
            None => Vec::new(),
        }
    }

    /// Every message in the queue, taken off it, in its order.
    pub fn take(&self) -> Vec<Held> {
        match &self.queue {
            Some(q) => self.take_from(q),
            None => Vec::new(),
        }
    }

    fn take_from(&self, q: &str) -> Vec<Held> {
        use lapin::options::{BasicAckOptions, BasicGetOptions};
        self.rt.block_on(async {
            let mut held = Vec::new();
            while let Some(m) = self
                .channel
                .basic_get(q.into(), BasicGetOptions::default())
                .await
                .unwrap()
            {
                let mut headers = BTreeMap::new();
                let p = &m.delivery.properties;
                if let Some(id) = p.message_id() {
                    headers.insert("message_id".to_string(), id.to_string());
                }
                if let Some(t) = p.content_type() {
                    headers.insert("content_type".to_string(), t.to_string());
                }
                if let Some(mode) = p.delivery_mode() {
                    headers.insert("delivery_mode".to_string(), mode.to_string());
                }
                if let Some(table) = p.headers() {
                    for (k, v) in table.inner() {
                        if let lapin::types::AMQPValue::LongString(s) = v {
                            headers.insert(k.to_string(), s.to_string());
                        }
                    }
                }
                held.push(Held {
                    subject: m.delivery.routing_key.to_string(),
                    headers,
                    body: m.delivery.data.clone(),
                });
                m.delivery.ack(BasicAckOptions::default()).await.unwrap();
            }
            held
        })
    }
}

impl Drop for Rabbit {
    fn drop(&mut self) {
        use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
        let _ = self.rt.block_on(async {
            if let Some(q) = &self.queue {
                let _ = self
                    .channel
                    .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                    .await;
            }
            if let Some((dlx, dq)) = &self.dead {
                let _ = self
                    .channel
                    .queue_delete(dq.as_str().into(), QueueDeleteOptions::default())
                    .await;
                let _ = self
                    .channel
                    .exchange_delete(dlx.as_str().into(), ExchangeDeleteOptions::default())
                    .await;
            }
            self.channel
                .exchange_delete(
                    self.exchange.as_str().into(),
                    ExchangeDeleteOptions::default(),
                )
                .await
        });
    }
}

/// Has RabbitMQ close the connection the client named `name` (`rabbitmqctl close_connection`),
/// as a broker going away would.
pub fn close_rabbitmq_connection(name: &str) {
    let listed = std::process::Command::new("rabbitmqctl")
        .args([
            "list_connections",
            "-q",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let pid = listed
        .lines()
        .find(|l| l.contains(&format!("{{\"connection_name\",\"{name}\"}}")))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("{name} not in {listed}"))
        .to_string();
    let closed = std::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "test: broker going away"])
        .output()
        .unwrap();
    assert!(closed.status.success(), "{closed:?}");
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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .ok()?;
        let mut own = OwnNats {
            port,
            store: store.to_path_buf(),
            child: None,
            config: None,
        };
        if let Err(e) = own.up() {
            unreachable("nats-server", "EDI_INBOX_REQUIRE_NATS", &e);
            return None;
        }
        Some(own)
    }

    /// A server with `config` (nats-server's configuration format) beside its store.
    pub fn start_with(store: &std::path::Path, config: &str) -> Option<OwnNats> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .ok()?;
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
            unreachable("nats-server", "EDI_INBOX_REQUIRE_NATS", &e);
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
