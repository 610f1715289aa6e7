//! `--to amqp://USER:PASS@HOST:PORT/VHOST`: RabbitMQ (AMQP 0-9-1). Events go to a durable topic
//! exchange (`--exchange`, declared if missing) with the subject as routing key, persistent,
//! `mandatory` (a message no queue takes comes back, and is a failure, never a silent drop),
//! with publisher confirms read after the whole batch went out. The id is the `message_id`;
//! the CloudEvents attributes are application properties (`cloudEvents:` and the name), as
//! the AMQP binding has them.

use anyhow::{Context as _, anyhow};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};

use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};

use super::{Answer, CONTENT_TYPE, Options, Outgoing, Sink, SinkError};

/// AMQP's `delivery_mode` for a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// How long the broker may take to confirm a batch's messages before the connection counts as
/// lost (a broker under a resource alarm blocks publishers without a word).
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub struct AmqpSink {
    runtime: tokio::runtime::Runtime,
    // Kept open for the channel's sake.
    _connection: Connection,
    channel: Channel,
    exchange: String,
    shown: String,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// How long connecting, opening the channel and declaring the exchange may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The URL without its password.
pub fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = match authority.rsplit_once('@') {
                Some((user, host)) => {
                    let user = user.split(':').next().unwrap_or_default();
                    format!("{user}@{host}")
                }
                None => authority.to_string(),
            };
            format!("{scheme}://{host}{path}")
        }
        None => "amqp://?".to_string(),
    }
}

impl AmqpSink {
    pub fn connect(url: &str, options: &Options) -> anyhow::Result<AmqpSink> {
        let shown = shown(url);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let exchange = options.exchange.clone();
        let setup = async {
            // Named, so that an operator (or a test) can find it in the broker's list.
            let connection = Connection::connect(
                url,
                ConnectionProperties::default().with_connection_name(
                    format!("edi-inbox publish {}", std::process::id()).into(),
                ),
            )
            .await
            // The driver's message may quote the URL, password and all.
            .map_err(|e| anyhow!("{}", scrub(&e.to_string(), url)))?;
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
            .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, setup).await })
            .map_err(|_| anyhow!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))
            .and_then(|r| r)
            .with_context(|| format!("cannot connect to {shown}"))?;
        Ok(AmqpSink {
            runtime,
            _connection: connection,
            channel,
            exchange: options.exchange.clone(),
            shown,
            stop: options.stop.clone(),
        })
    }
}

/// `text` without the password `url` holds.
pub fn scrub(text: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|auth| auth.rsplit_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty());
    match password {
        Some(p) => text.replace(p, "***"),
        None => text.to_string(),
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
                () = super::stopped(stop) => (Vec::new(), None),
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
        for (attr, value) in &o.attributes {
            headers.insert(
                attr.amqp.into(),
                AMQPValue::LongString(LongString::from(value.as_str())),
            );
        }
        let properties = BasicProperties::default()
            .with_message_id(o.id.as_str().into())
            .with_content_type(CONTENT_TYPE.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        assert_eq!(
            shown("amqp://guest:s3cret@h:5672/%2f"),
            "amqp://guest@h:5672/%2f"
        );
        assert_eq!(shown("amqp://h"), "amqp://h");
        assert_eq!(
            scrub("bad uri amqp://u:s3cret@h", "amqp://u:s3cret@h"),
            "bad uri amqp://u:***@h"
        );
    }
}
