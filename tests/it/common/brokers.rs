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
}

impl Jet {
    pub fn create() -> Option<Jet> {
        Jet::with_stream(true, None)
    }

    /// A prefix of its own, with (or without) a stream capturing it, which takes messages up to
    /// `max_message_size` bytes where given.
    pub fn with_stream(stream: bool, max_message_size: Option<i32>) -> Option<Jet> {
        let rt = runtime();
        let client = match rt.block_on(
            async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
                .connect(NATS),
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
        })
    }

    /// What `--to` gets.
    pub fn to(&self) -> String {
        format!("{NATS}/{}", self.prefix)
    }

    /// Every message of the stream, in its order.
    pub fn messages(&self) -> Vec<Held> {
        self.rt.block_on(async {
            let mut stream = self.js.get_stream(&self.stream).await.unwrap();
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
}

impl Rabbit {
    /// With a queue bound to the exchange by `binding` (`#` for everything), or none.
    pub fn create(binding: Option<&str>) -> Option<Rabbit> {
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
        rt.block_on(async {
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
                        FieldTable::default(),
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
        })
    }

    /// Every message in the queue, taken off it, in its order.
    pub fn take(&self) -> Vec<Held> {
        use lapin::options::{BasicAckOptions, BasicGetOptions};
        let Some(q) = &self.queue else {
            return Vec::new();
        };
        self.rt.block_on(async {
            let mut held = Vec::new();
            while let Some(m) = self
                .channel
                .basic_get(q.as_str().into(), BasicGetOptions::default())
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
            self.channel
                .exchange_delete(
                    self.exchange.as_str().into(),
                    ExchangeDeleteOptions::default(),
                )
                .await
        });
    }
}
