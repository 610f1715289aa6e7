//! `--from amqp://USER:PASS@HOST:PORT/VHOST/QUEUE`: a RabbitMQ queue, with manual
//! acknowledgements and a prefetch of one batch. A rejected delivery is rejected without
//! requeue, so that a dead-letter exchange set on the queue receives it; deliveries not
//! acknowledged when the connection ends go back to the queue at once. The client talks to the
//! broker through a relay that repairs the deliveries lapin would refuse (`frames.rs`).
//!
//! Where a new thing goes: what is AMQP-only on the consume side here, what publish shares in
//! `crate::broker::amqp`.

mod frames;

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use futures_util::StreamExt as _;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, Consumer};

use super::relay::{self, Relay};
use super::{Delivery, FILENAME_HEADER, Feed, Options, Settle, Source};
use crate::broker;

/// Once the first delivery of a batch came, how long the next may take to still join it.
const GAP: Duration = Duration::from_millis(20);

/// How long the acknowledgements of a batch may take to go out.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a batch gathers at most.
const MAX_GATHER: Duration = Duration::from_secs(1);

/// `--from amqp://USER:PASS@HOST:PORT/VHOST/QUEUE`: `url` is the connection's (up to the
/// vhost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpSource {
    url: broker::Url,
    queue: String,
    /// The run's TLS files.
    tls: broker::tls::Settings,
}

/// Reads `--from amqp://...` (the broker table's line for RabbitMQ).
pub fn parse(text: &str, settings: &broker::Settings) -> Result<Box<dyn Source>, String> {
    let mut source = read(text)?;
    source.tls = settings.tls.clone();
    Ok(Box::new(source))
}

fn read(text: &str) -> Result<AmqpSource, String> {
    let (url, queue) = broker::amqp::split_last_segment(text)
        .ok_or("--from amqp:// takes amqp://USER:PASS@HOST:PORT/VHOST/QUEUE")?;
    Ok(AmqpSource {
        url: url.into(),
        queue,
        tls: broker::tls::Settings::default(),
    })
}

impl Source for AmqpSource {
    fn shown(&self) -> String {
        format!("{}/{}", broker::amqp::shown(&self.url), self.queue)
    }

    fn connect(&self, options: Options) -> anyhow::Result<Box<dyn Feed>> {
        Ok(Box::new(AmqpFeed::connect(
            &self.url,
            &self.queue,
            options,
            &self.tls,
        )?))
    }
}

pub struct AmqpFeed {
    runtime: tokio::runtime::Runtime,
    connection: Connection,
    channel: Channel,
    consumer: Consumer,
    queue: String,
    shown: String,
    /// Names the deliveries of this connection that have no `message_id`: a delivery tag
    /// counts from 1 again on every connection.
    connection_id: String,
    /// Between the client and the broker, for as long as the client lives.
    _relay: Relay,
}

impl AmqpFeed {
    pub fn connect(
        url: &str,
        queue: &str,
        options: Options,
        settings: &broker::tls::Settings,
    ) -> anyhow::Result<AmqpFeed> {
        let shown = format!("{}/{queue}", broker::amqp::shown(url));
        let runtime = broker::runtime()?;
        let prefetch = u16::try_from(options.batch).unwrap_or(u16::MAX);
        // amqps://: the relay speaks TLS to the broker, lapin plain AMQP to the relay.
        let (way, port) = if broker::amqp::is_tls(url) {
            let name = broker::tls::server_name(&broker::host_of_url(url));
            let config = settings.client_config().and_then(|c| Ok((c, name?)));
            let (config, name) = config.map_err(|e| anyhow!("cannot connect to {shown}: {e}"))?;
            let tls = relay::Tls {
                config: std::sync::Arc::new(config),
                name,
            };
            (relay::Upstream::Tls(tls), 5671)
        } else {
            (relay::Upstream::Plain, 5672)
        };
        let setup = async {
            let (relay, through) =
                relay::start_for(url, port, way, "amqp", frames::AmqpFrames::default).await?;
            let connection = broker::amqp::connect(&through, "consume", settings)
                .await
                .map_err(|e| relay.explained(e, settings))?;
            let channel = connection.create_channel().await?;
            channel
                .basic_qos(prefetch, BasicQosOptions::default())
                .await?;
            let consumer = channel
                .basic_consume(
                    queue.into(),
                    format!("edi-inbox-{}", std::process::id()).into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await
                .with_context(|| format!("cannot consume from queue {queue}"))?;
            anyhow::Ok((connection, channel, consumer, relay))
        };
        // A broker that takes the connection and then says nothing must not hold the run.
        let (connection, channel, consumer, relay) = runtime
            .block_on(broker::within(broker::amqp::SETUP_TIMEOUT, setup))
            .with_context(|| format!("cannot connect to {shown}"))?;
        Ok(AmqpFeed {
            runtime,
            connection,
            channel,
            consumer,
            queue: queue.to_string(),
            shown,
            connection_id: connection_id(),
            _relay: relay,
        })
    }
}

/// This connection's name for the deliveries without a `message_id`: the time it was made and
/// 32 random bits (a delivery tag alone is only unique on its connection).
fn connection_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut random = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty());
    format!("{millis:x}-{}", hex::encode(random))
}

fn take(queue: &str, connection: &str, d: lapin::message::Delivery) -> Delivery {
    let headers = d.properties.headers().as_ref();
    let header = |name: &str| headers.and_then(|h| h.inner().get(name));
    // Kept whatever its bytes are: shown escaped where they are not UTF-8.
    let filename = header(FILENAME_HEADER).and_then(|v| match v {
        AMQPValue::LongString(s) => Some(relay::text_or_escaped(s.as_bytes()).into_owned()),
        AMQPValue::ByteArray(b) => Some(relay::text_or_escaped(b.as_slice()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    });
    // Quorum queues count deliveries (earlier ones, in x-delivery-count); classic queues only
    // say whether it came before.
    let earlier = header("x-delivery-count").and_then(|v| match v {
        AMQPValue::LongLongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::LongInt(n) => u32::try_from(*n).ok(),
        AMQPValue::LongUInt(n) => Some(*n),
        AMQPValue::ShortInt(n) => u32::try_from(*n).ok(),
        AMQPValue::ShortShortInt(n) => u32::try_from(*n).ok(),
        _ => None,
    });
    let delivery_count = match earlier {
        Some(n) => n.saturating_add(1),
        None if d.redelivered => 2,
        None => 1,
    };
    let message_id = d.properties.message_id().as_ref();
    let source = match message_id {
        Some(id) => format!("amqp:{queue}/{}", id.as_str()),
        None => format!("amqp:{queue}/delivery-{connection}-{}", d.delivery_tag),
    };
    Delivery {
        filename,
        delivery_count,
        named_per_delivery: message_id.is_none(),
        ..Delivery::new(
            d.delivery_tag,
            source,
            d.routing_key.as_str().to_string(),
            bytes::Bytes::from(d.data),
        )
    }
}

impl Feed for AmqpFeed {
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>> {
        let consumer = &mut self.consumer;
        let shown = &self.shown;
        let queue = &self.queue;
        let connection_id = &self.connection_id;
        self.runtime.block_on(async move {
            let mut taken = Vec::new();
            let started = Instant::now();
            let mut timeout = wait;
            while taken.len() < max {
                let next = match tokio::time::timeout(timeout, consumer.next()).await {
                    Err(_) => break,
                    Ok(next) => next,
                };
                match next {
                    Some(Ok(d)) => taken.push(take(queue, connection_id, d)),
                    Some(Err(e)) => return Err(anyhow!("{shown}: {e}")),
                    None => {
                        return Err(anyhow!(
                            "{shown}: the broker cancelled the consumer (queue deleted?)"
                        ));
                    }
                }
                // Group commit: what is already here, or comes right after, joins the batch.
                timeout = GAP.min(MAX_GATHER.saturating_sub(started.elapsed()));
            }
            Ok(taken)
        })
    }

    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()> {
        let channel = self.channel.clone();
        let shown = self.shown.clone();
        let answer = async move {
            for (tag, how) in settled {
                let sent = match how {
                    Settle::Ack => channel.basic_ack(*tag, BasicAckOptions::default()).await,
                    // To the queue's dead-letter exchange, if it has one.
                    Settle::Reject => {
                        channel
                            .basic_reject(*tag, BasicRejectOptions { requeue: false })
                            .await
                    }
                };
                sent.map_err(|e| anyhow!("{shown}: cannot acknowledge: {e}"))?;
            }
            anyhow::Ok(())
        };
        // A broker under a resource alarm can stop reading without a word.
        self.runtime
            .block_on(async { tokio::time::timeout(SETTLE_TIMEOUT, answer).await })
            .map_err(|_| anyhow!("{}: acknowledgements not sent within 30 s", self.shown))?
    }
}

impl Drop for AmqpFeed {
    /// Closes the connection cleanly, so that every acknowledgement sent is taken (and what
    /// was fetched and not settled goes back to the queue).
    fn drop(&mut self) {
        let connection = &self.connection;
        let _ = self.runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(5),
                connection.close(200, "consume done".into()),
            )
            .await
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_connection_and_the_queue() {
        assert_eq!(
            read("amqp://guest:guest@h:5672/%2f/edi.in"),
            Ok(AmqpSource {
                url: "amqp://guest:guest@h:5672/%2f".into(),
                queue: "edi.in".into(),
                tls: Default::default(),
            })
        );
        assert_eq!(
            read("amqp://h:5672/q"),
            Ok(AmqpSource {
                url: "amqp://h:5672".into(),
                queue: "q".into(),
                tls: Default::default(),
            })
        );
        for bad in ["amqp://h:5672", "amqp://h:5672/"] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let s = read("amqp://edi:s3cret@h:5672/vh/q").unwrap();
        assert!(!s.shown().contains("s3cret"), "{}", s.shown());
        assert!(s.shown().ends_with("/vh/q"));
        // A derived Debug (a panic message, a log line) does not show it either.
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("h:5672"),
            "{debug}"
        );
    }
}
