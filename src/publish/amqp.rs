//! `--to amqp://USER:PASS@HOST:PORT/VHOST`: RabbitMQ (AMQP 0-9-1). Events go to a durable topic
//! exchange (`--exchange`, declared if missing) with the subject as routing key, persistent,
//! `mandatory` (a message no queue takes comes back, and is a failure, never a silent drop),
//! with publisher confirms read after the whole batch went out. The id is the `message_id`;
//! the CloudEvents attributes are application properties (`cloudEvents:` and the name), as
//! the AMQP binding has them.

use anyhow::{Context as _, anyhow};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};

use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ExchangeKind};

use super::{Answer, Destination, Outgoing, Sink, SinkError, Stop, Template};
use crate::broker;

/// AMQP's `delivery_mode` for a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// How long the broker may take to confirm a batch's messages before the connection counts as
/// lost (a broker under a resource alarm blocks publishers without a word).
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `--to amqp://USER:PASS@HOST:PORT/VHOST`, and `--exchange`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpDestination {
    url: broker::Url,
    exchange: String,
    /// A dead-letter destination names its exchange where it is shown (its URL does).
    dead_letter: bool,
    /// The run's TLS files.
    tls: broker::tls::Settings,
}

/// Reads `--to amqp://...` (the broker table's line for RabbitMQ).
pub fn parse(text: &str, settings: &broker::Settings) -> Result<Box<dyn Destination>, String> {
    Ok(Box::new(AmqpDestination {
        url: text.into(),
        exchange: String::new(),
        dead_letter: false,
        tls: settings.tls.clone(),
    }))
}

/// Reads `--dead-letter amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE`: a topic exchange, declared
/// if missing; each dead letter keeps its delivery's routing key.
pub fn dead_letter(
    text: &str,
    settings: &broker::Settings,
) -> Result<Box<dyn Destination>, String> {
    let (url, exchange) = broker::amqp::split_last_segment(text)
        .ok_or("--dead-letter amqp:// takes amqp://USER:PASS@HOST:PORT/VHOST/EXCHANGE")?;
    Ok(Box::new(AmqpDestination {
        url: url.into(),
        exchange,
        dead_letter: true,
        tls: settings.tls.clone(),
    }))
}

impl Destination for AmqpDestination {
    fn shown(&self) -> String {
        let url = broker::amqp::shown(&self.url);
        if self.dead_letter {
            format!("{url}/{}", self.exchange)
        } else {
            url
        }
    }

    fn configure(&mut self, settings: &super::DestinationSettings, _: &Template) {
        self.exchange.clone_from(&settings.exchange);
    }

    fn connect(&self, stop: &Stop) -> anyhow::Result<Box<dyn Sink>> {
        Ok(Box::new(AmqpSink::connect(
            &self.url,
            &self.exchange,
            stop.clone(),
            &self.tls,
        )?))
    }
}

pub struct AmqpSink {
    runtime: tokio::runtime::Runtime,
    // Kept open for the channel's sake.
    _connection: Connection,
    channel: Channel,
    exchange: String,
    shown: String,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl AmqpSink {
    pub fn connect(
        url: &str,
        exchange: &str,
        stop: Stop,
        tls: &broker::tls::Settings,
    ) -> anyhow::Result<AmqpSink> {
        let shown = broker::amqp::shown(url);
        let runtime = broker::runtime()?;
        let exchange = exchange.to_string();
        let setup = async {
            let connection = broker::amqp::connect(url, "publish", tls).await?;
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            channel
                .exchange_declare(
                    exchange.as_str().into(),
                    ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .with_context(|| format!("cannot declare the topic exchange {exchange}"))?;
            anyhow::Ok((connection, channel))
        };
        // A broker that takes the connection and then says nothing must not hold the run.
        let (connection, channel) = runtime
            .block_on(broker::within(broker::amqp::SETUP_TIMEOUT, setup))
            .with_context(|| format!("cannot connect to {shown}"))?;
        Ok(AmqpSink {
            runtime,
            _connection: connection,
            channel,
            exchange,
            shown,
            stop,
        })
    }
}

impl Sink for AmqpSink {
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
        let channel = self.channel.clone();
        let exchange = self.exchange.clone();
        let shown = self.shown.clone();
        let stop = self.stop.clone();
        self.runtime.block_on(async move {
            tokio::select! {
                sent = confirm(&channel, &exchange, &shown, &batch) => match sent {
                    Ok(answers) => (answers, None),
                    Err(e) => (Vec::new(), Some(SinkError::Lost(e))),
                },
                // Stopped: nothing of this batch is marked; it goes out again, with its ids.
                () = broker::stopped(stop) => (Vec::new(), None),
            }
        })
    }
}

/// Publishes `batch` with publisher confirms and `mandatory`, and gives each message's answer.
/// The broker has [`CONFIRM_TIMEOUT`] from the last sign of progress to confirm the next
/// message; past that, or on a nack, the batch fails as a whole (the destination's fault).
async fn confirm(
    channel: &Channel,
    exchange: &str,
    shown: &str,
    batch: &[Outgoing],
) -> anyhow::Result<Vec<Answer>> {
    let stalled = || {
        anyhow!(
            "{shown}: no confirmation within {} s (is the broker blocking publishers?)",
            CONFIRM_TIMEOUT.as_secs()
        )
    };
    let mut pending = Vec::with_capacity(batch.len());
    for o in batch {
        let mut headers = FieldTable::default();
        for (attr, value) in o.attributes.iter() {
            headers.insert(
                property(attr).into(),
                AMQPValue::LongString(LongString::from(value)),
            );
        }
        let properties = BasicProperties::default()
            .with_message_id(o.id.as_str().into())
            .with_content_type(o.content_type.into())
            .with_delivery_mode(PERSISTENT)
            .with_headers(headers);
        let sent = channel.basic_publish(
            exchange.into(),
            o.subject.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            &o.body,
            properties,
        );
        match tokio::time::timeout(CONFIRM_TIMEOUT, sent).await {
            Ok(Ok(confirm)) => pending.push(confirm),
            Ok(Err(e)) => return Err(anyhow!("{shown}: cannot publish: {e}")),
            Err(_) => return Err(stalled()),
        }
    }
    // The broker's answers, all of them, before any is read: a returned message is handed to
    // whichever confirmation completes first, not to its own, so the returned ones are told by
    // their `message_id`.
    let mut returned = std::collections::HashMap::new();
    let mut deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
    for confirm in pending {
        match tokio::time::timeout_at(deadline, confirm).await {
            Ok(Ok(Confirmation::Ack(None))) => {}
            Ok(Ok(Confirmation::Ack(Some(r)))) => {
                if let Some(id) = r.delivery.properties.message_id() {
                    returned.insert(id.to_string(), format!("{} {}", r.reply_code, r.reply_text));
                }
            }
            // A nack is RabbitMQ failing to store (an internal error, a queue full with
            // reject-publish): the destination's, not one event's.
            Ok(Ok(Confirmation::Nack(_))) => {
                return Err(anyhow!("{shown}: the broker refused messages (nack)"));
            }
            Ok(Ok(Confirmation::NotRequested)) => {
                return Err(anyhow!("{shown}: publisher confirms are off"));
            }
            Ok(Err(e)) => return Err(anyhow!("{shown}: no confirmation: {e}")),
            Err(_) => return Err(stalled()),
        }
        deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
    }
    Ok(batch
        .iter()
        .map(|o| match returned.get(&o.id) {
            Some(why) => Answer::Refused(format!(
                "no queue takes routing key {} on exchange {exchange} ({why})",
                o.subject
            )),
            None => Answer::Stored,
        })
        .collect())
}

/// An attribute's AMQP application property: the CloudEvents AMQP binding's `cloudEvents:` and
/// its name.
fn property(a: super::Attr) -> &'static str {
    attr_binding!(a, "cloudEvents:")
}
