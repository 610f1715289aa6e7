//! `--from nats://HOST:PORT/STREAM/CONSUMER`: a durable JetStream pull consumer with explicit
//! acknowledgements, made where missing. Several `consume` processes on one consumer share its
//! deliveries: each pull hands out messages no other pull holds. The client talks to the
//! server through a relay that repairs the messages async-nats would refuse (`frames.rs`).
//!
//! Where a new thing goes: what is NATS-only on the consume side here, what publish shares in
//! `crate::broker::nats`.

mod frames;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use async_nats::jetstream::{self, AckKind, consumer::pull};
use futures_util::StreamExt as _;

use super::relay::{self, Relay};
use super::{Delivery, FILENAME_HEADER, Feed, Options, Settle, Source};
use crate::broker;

/// How long the server may take to answer a request (a stream or consumer lookup).
const REQUEST_TIMEOUT: Duration = broker::nats::TIMEOUT;

/// The ack wait of a consumer made where `--ack-wait` does not say: longer than a batch takes.
const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(120);

/// `--from nats://HOST:PORT/STREAM/CONSUMER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSource {
    server: broker::Url,
    stream: String,
    consumer: String,
    /// The run's TLS and credential files.
    tls: broker::tls::Settings,
}

/// Reads `--from nats://...` (the broker table's line for NATS).
pub fn parse(text: &str, settings: &broker::Settings) -> Result<Box<dyn Source>, String> {
    let mut source = read(text)?;
    source.tls = settings.tls.clone();
    Ok(Box::new(source))
}

fn read(text: &str) -> Result<NatsSource, String> {
    let (scheme, rest) = match text.strip_prefix("tls://") {
        Some(rest) => ("tls", rest),
        None => ("nats", text.strip_prefix("nats://").unwrap_or(text)),
    };
    let mut parts = rest.split('/');
    let (Some(server), Some(stream), Some(consumer), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("--from nats:// takes nats://HOST:PORT/STREAM/CONSUMER".into());
    };
    for (what, name) in [("stream", stream), ("consumer", consumer)] {
        if !is_nats_name(name) {
            return Err(format!(
                "the {what} name {name:?} must be letters, digits, - and _ (JetStream's names)"
            ));
        }
    }
    if server.is_empty() {
        return Err("nats:// needs a server: nats://HOST:PORT/STREAM/CONSUMER".into());
    }
    Ok(NatsSource {
        server: format!("{scheme}://{server}").into(),
        stream: stream.to_string(),
        consumer: consumer.to_string(),
        tls: broker::tls::Settings::default(),
    })
}

/// How the relay reaches the server: TLS where the URL is `tls://` or a TLS setting is given
/// (refused where the server offers none), or where the server's INFO requires it.
fn tls_way(server: &str, settings: &broker::tls::Settings) -> anyhow::Result<relay::Upstream> {
    let demand = broker::nats::is_tls_url(server) || settings.wants_tls();
    let upstream = relay::upstream_of(server, 4222).ok_or_else(|| anyhow!("not a server"))?;
    let made = settings.client_config().and_then(|config| {
        Ok(relay::Tls {
            config: std::sync::Arc::new(config),
            name: broker::tls::server_name(relay::host_of(&upstream))?,
        })
    });
    Ok(match made {
        Ok(tls) => relay::Upstream::NatsTls {
            tls: Some(tls),
            demand,
            no_tls_why: None,
        },
        Err(e) if demand => return Err(anyhow!(e)),
        Err(e) => relay::Upstream::NatsTls {
            tls: None,
            demand,
            no_tls_why: Some(e),
        },
    })
}

/// A stream or consumer name JetStream accepts (and that cannot widen a subject).
fn is_nats_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Source for NatsSource {
    fn shown(&self) -> String {
        format!(
            "{}/{}/{}",
            broker::nats::shown(&self.server),
            self.stream,
            self.consumer
        )
    }

    fn connect(&self, options: Options) -> anyhow::Result<Box<dyn Feed>> {
        Ok(Box::new(NatsFeed::connect(
            &self.server,
            &self.stream,
            &self.consumer,
            options,
            &self.tls,
        )?))
    }
}

pub struct NatsFeed {
    runtime: tokio::runtime::Runtime,
    client: async_nats::Client,
    consumer: jetstream::consumer::PullConsumer,
    stream: String,
    server: String,
    /// What acknowledges each delivery handed out and not yet settled, by tag.
    ackers: HashMap<u64, jetstream::message::Acker>,
    next_tag: u64,
    /// Between the client and the server, for as long as the client lives.
    _relay: Relay,
}

impl NatsFeed {
    pub fn connect(
        server: &str,
        stream: &str,
        consumer: &str,
        options: Options,
        tls: &broker::tls::Settings,
    ) -> anyhow::Result<NatsFeed> {
        let shown = broker::nats::shown(server);
        let runtime = broker::runtime()?;
        let connect_options =
            broker::nats::authorised(broker::nats::options("consume"), server, false, tls)
                .map_err(|e| anyhow!(e))?;
        let way = tls_way(server, tls)?;
        let (client, consumer, relay) = runtime
            .block_on(async {
                let (relay, through) =
                    relay::start_for(server, 4222, way, "nats", frames::NatsFrames::default)
                        .await?;
                let client = connect_options
                    // The servers a cluster announces are reached directly, past the relay.
                    .ignore_discovered_servers()
                    .connect(broker::nats::without_credentials(&through))
                    .await
                    .map_err(|e| {
                        relay.explained(anyhow!(broker::nats::explained(&e, server, tls)), tls)
                    })?;
                let js = jetstream::new(client.clone());
                let s = js.get_stream(stream).await.with_context(|| {
                    format!("there is no JetStream stream {stream} (create it, capturing the subjects the gateway publishes to)")
                })?;
                let config = pull::Config {
                    durable_name: Some(consumer.to_string()),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: options.ack_wait.unwrap_or(DEFAULT_ACK_WAIT),
                    // Room for several hosts' batches at once (the server's default, 1,000,
                    // would cut one batch of 2,000 in half).
                    max_ack_pending: (options.batch as i64).saturating_mul(16).max(1000),
                    ..Default::default()
                };
                let c = s
                    .get_or_create_consumer(consumer, config)
                    .await
                    .with_context(|| format!("cannot find or create the consumer {consumer} on stream {stream}"))?;
                // `all` would have one host's acknowledgement take another's deliveries not yet
                // committed with it, and `none` acknowledges on delivery: either can lose one.
                let policy = c.cached_info().config.ack_policy;
                if policy != jetstream::consumer::AckPolicy::Explicit {
                    bail!(
                        "the consumer {consumer} on stream {stream} has the ack policy {policy:?}, not explicit: deliveries could be acknowledged before they are committed; give consume a consumer with explicit acknowledgements"
                    );
                }
                anyhow::Ok((client, c, relay))
            })
            .with_context(|| format!("cannot consume from {shown}/{stream}/{consumer}"))?;
        Ok(NatsFeed {
            runtime,
            client,
            consumer,
            stream: stream.to_string(),
            server: shown,
            ackers: HashMap::new(),
            next_tag: 0,
            _relay: relay,
        })
    }

    /// Takes one message: its acknowledgement kept under a new tag.
    fn take(&mut self, message: jetstream::Message) -> anyhow::Result<Delivery> {
        let (sequence, delivered) = {
            let info = message
                .info()
                .map_err(|e| anyhow!("a message without JetStream metadata: {e}"))?;
            (info.stream_sequence, info.delivered)
        };
        let (message, acker) = message.split();
        let filename = message
            .headers
            .as_ref()
            .and_then(|h| h.get(FILENAME_HEADER))
            .map(|v| v.as_str().to_string());
        self.next_tag += 1;
        self.ackers.insert(self.next_tag, acker);
        Ok(Delivery {
            filename,
            delivery_count: u32::try_from(delivered.max(1)).unwrap_or(u32::MAX),
            ..Delivery::new(
                self.next_tag,
                format!("nats:{}/{sequence}", self.stream),
                message.subject.to_string(),
                message.payload,
            )
        })
    }
}

impl Feed for NatsFeed {
    fn fetch(&mut self, max: usize, wait: Duration) -> anyhow::Result<Vec<Delivery>> {
        let consumer = self.consumer.clone();
        let server = self.server.clone();
        let pull = async move {
            // What is there now, without waiting; only when that is nothing, one pull that
            // waits. Every pull is read to its end: a message the server handed to a pull
            // nobody reads waits out the ack wait before it comes again.
            let mut taken = Vec::new();
            let mut ready = consumer
                .fetch()
                .max_messages(max)
                .messages()
                .await
                .map_err(|e| anyhow!("{server}: cannot pull: {e}"))?;
            while let Some(m) = ready.next().await {
                taken.push(m.map_err(|e| anyhow!("{server}: pull failed: {e}"))?);
            }
            if taken.is_empty() && !wait.is_zero() {
                let mut waited = consumer
                    .batch()
                    .max_messages(max)
                    .expires(wait)
                    .messages()
                    .await
                    .map_err(|e| anyhow!("{server}: cannot pull: {e}"))?;
                while let Some(m) = waited.next().await {
                    taken.push(m.map_err(|e| anyhow!("{server}: pull failed: {e}"))?);
                }
            }
            anyhow::Ok(taken)
        };
        // A pull without a wait has no timer of its own: one whose answer was lost with the
        // connection (a server restarting) would be waited for forever.
        let limit = wait + REQUEST_TIMEOUT;
        let messages = self
            .runtime
            .block_on(async { tokio::time::timeout(limit, pull).await })
            .map_err(|_| {
                anyhow!(
                    "{}: no answer to a pull within {} s",
                    self.server,
                    limit.as_secs()
                )
            })??;
        // A pull on a connection that is down ends quietly, with nothing: that is not idleness.
        if messages.is_empty()
            && self.client.connection_state() != async_nats::connection::State::Connected
        {
            return Err(anyhow!("{}: not connected", self.server));
        }
        messages.into_iter().map(|m| self.take(m)).collect()
    }

    fn settle(&mut self, settled: &[(u64, Settle)]) -> anyhow::Result<()> {
        let ackers: Vec<_> = settled
            .iter()
            .filter_map(|(tag, how)| self.ackers.remove(tag).map(|a| (a, *how)))
            .collect();
        let client = self.client.clone();
        let server = self.server.clone();
        let answer = async move {
            for (acker, how) in ackers {
                let kind = match how {
                    Settle::Ack => AckKind::Ack,
                    // Not redelivered; the server posts an advisory an operator can watch.
                    Settle::Reject => AckKind::Term,
                };
                acker
                    .ack_with(kind)
                    .await
                    .map_err(|e| anyhow!("{server}: cannot acknowledge: {e}"))?;
            }
            // The acknowledgements are on their way only once flushed; a process that ends
            // before would leave them unsent.
            client
                .flush()
                .await
                .map_err(|e| anyhow!("{server}: cannot acknowledge: {e}"))
        };
        self.runtime
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, answer).await })
            .map_err(|_| anyhow!("{}: acknowledgements not sent within 10 s", self.server))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_server_stream_and_consumer() {
        assert_eq!(
            read("nats://127.0.0.1:4222/EDI/inbox"),
            Ok(NatsSource {
                server: "nats://127.0.0.1:4222".into(),
                stream: "EDI".into(),
                consumer: "inbox".into(),
                tls: Default::default(),
            })
        );
        for bad in [
            "nats://h:4222/EDI",
            "nats://h:4222/EDI/a/b",
            "nats://h:4222/E.DI/c",
            "nats:///EDI/c",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        let s = read("nats://edi:s3cret@h:4222/S/C").unwrap();
        assert_eq!(s.shown(), "nats://h:4222/S/C");
    }
}
