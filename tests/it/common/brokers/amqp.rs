//! RabbitMQ exchanges and queues on the machine's server.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Held, Put, TestBroker, runtime, unique};
use crate::common::require;
use crate::common::sinks::{Event, Got, Order, TestDestination, consume_into, token};

pub const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

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
        Rabbit::declare(binding.as_slice(), false)
    }

    /// With a queue bound to the exchange by each of `bindings` (none: no queue).
    fn declare(bindings: &[&str], dead_letters: bool) -> Option<Rabbit> {
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
                require(
                    &format!("RabbitMQ on 127.0.0.1:5672 does not answer ({e})"),
                    "EDI_INBOX_REQUIRE_RABBITMQ",
                );
                return None;
            }
        };
        let exchange = unique("edi_t_");
        let queue = (!bindings.is_empty()).then(|| format!("{exchange}_q"));
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
                for binding in bindings {
                    channel
                        .queue_bind(
                            q.as_str().into(),
                            exchange.as_str().into(),
                            (*binding).into(),
                            QueueBindOptions::default(),
                            FieldTable::default(),
                        )
                        .await
                        .unwrap();
                }
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
        Rabbit::declare(&["#"], true)
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

impl TestBroker for Rabbit {
    const SAYS_RECONNECTING: bool = true;

    /// A queue bound to the exchange for everything, with a dead-letter exchange of its own.
    fn create() -> Option<Rabbit> {
        Rabbit::with_dead_letters()
    }

    fn droppable(self, _dir: &std::path::Path) -> Option<Rabbit> {
        Some(self)
    }

    fn send(&self, messages: &[Put]) {
        let bodies: Vec<_> = messages
            .iter()
            .map(|m| (m.body.clone(), m.id.clone(), m.name.clone()))
            .collect();
        self.put(&bodies);
    }

    fn source_url(&self) -> String {
        self.from()
    }

    fn source(&self, _seq: usize, id: &str) -> String {
        format!("{}{id}", self.source_prefix())
    }

    fn source_prefix(&self) -> String {
        format!("amqp:{}/", self.queue.as_deref().unwrap_or_default())
    }

    fn unacknowledged(&self) -> Option<u64> {
        Some(u64::from(self.ready()))
    }

    fn dead_letter_to(&self) -> String {
        format!("{AMQP}/{}", self.exchange)
    }

    /// The routing key the messages were sent under ([`Rabbit::put`]'s), which a dead letter
    /// keeps.
    fn dead_letter_subject(&self) -> String {
        "edi.in".to_string()
    }

    fn dead_lettered(&self) -> Vec<Held> {
        self.take()
    }

    fn watch_refused(&self) -> Option<super::Watch<'_>> {
        Some(Box::new(move || {
            self.take_dead().into_iter().map(|h| Some(h.body)).collect()
        }))
    }

    /// `rabbitmqctl close_connection` of the connection consume `pid` named.
    fn drop_connection_of(&mut self, pid: u32) {
        close_rabbitmq_connection(&format!("edi-inbox consume {pid}"));
    }
}

impl TestDestination for Rabbit {
    /// RabbitMQ cannot drop a message sent again: a consumer drops a `message_id` it has seen.
    const DUPLICATES: bool = true;
    const ORDER: Order = Order::Total;
    const REFUSAL: &'static str = "no queue takes";

    /// A queue bound to the exchange for everything.
    fn destination() -> Option<Rabbit> {
        Rabbit::create(Some("#"))
    }

    /// A queue bound to the subjects of the other events' senders (`edifact.TYPE.SENDER`), so
    /// that nothing takes the poison's (its sender is none of theirs): RabbitMQ returns it
    /// (`mandatory`).
    fn refusing(poison: &Event, others: &[Event]) -> Option<Rabbit> {
        let bindings: std::collections::BTreeSet<String> = others
            .iter()
            .map(|e| format!("edifact.*.{}", token(&e.sender)))
            .collect();
        assert!(
            !bindings.contains(&format!("edifact.*.{}", token(&poison.sender))),
            "the poison's sender is another event's too"
        );
        let bindings: Vec<&str> = bindings.iter().map(String::as_str).collect();
        Rabbit::declare(&bindings, false)
    }

    fn publish_args(&self) -> Vec<String> {
        vec![
            "--to".into(),
            AMQP.into(),
            "--exchange".into(),
            self.exchange.clone(),
        ]
    }

    fn taken(&self) -> Vec<Got> {
        Got::all(self.take(), "message_id", None)
    }

    /// `consume` from the queue.
    fn take_into(&self, second: &crate::common::site::Site, args: &[&str]) -> crate::common::Run {
        consume_into(second, "1s", &self.from(), args)
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
