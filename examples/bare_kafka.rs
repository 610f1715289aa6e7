//! The floors for `benches/scripts/kafka.sh`: a bare librdkafka consumer that reads records and
//! does nothing with them, and a bare idempotent producer of the records `edi-inbox publish`
//! sends (each message's bytes from an inbox, the same `ce_` headers and key, made here from the
//! same columns), with no claim, no mark and no output. Also what the benchmark needs to set a
//! topic up: creating and deleting it, and loading a folder's files into it as a gateway would.
//!
//! `bare_kafka create SERVERS TOPIC PARTITIONS`
//! `bare_kafka delete SERVERS TOPIC`
//! `bare_kafka files SERVERS TOPIC DIR [TIMES]`  each file of DIR (name order) as one record,
//!                                               with its name in `edi-filename`, TIMES over
//! `bare_kafka read SERVERS TOPIC N`             prints the seconds reading N records took
//! `bare_kafka produce SERVERS TOPIC DB`         prints the seconds producing the outbox took

use std::time::{Duration, Instant};

use anyhow::anyhow;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use rdkafka::{Offset, TopicPartitionList};

#[path = "support/outbox.rs"]
mod outbox;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        ["create", servers, topic, partitions] => {
            let admin = admin(servers)?;
            let topic = NewTopic::new(topic, partitions.parse()?, TopicReplication::Fixed(1));
            let done = block_on(admin.create_topics(&[topic], &AdminOptions::new()))??;
            for result in done {
                result.map_err(|(t, e)| anyhow!("{t}: {e}"))?;
            }
            Ok(())
        }
        ["delete", servers, topic] => {
            let admin = admin(servers)?;
            let _ = block_on(admin.delete_topics(&[topic], &AdminOptions::new()));
            Ok(())
        }
        ["files", servers, topic, dir] | ["files", servers, topic, dir, _] => {
            let times: usize = args.get(4).map_or(Ok(1), |t| t.parse())?;
            let mut paths: Vec<_> = std::fs::read_dir(dir)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            paths.sort();
            let producer = producer(servers)?;
            for _ in 0..times {
                for path in &paths {
                    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                    let body = std::fs::read(path)?;
                    let headers = OwnedHeaders::new().insert(Header {
                        key: "edi-filename",
                        value: name.as_deref(),
                    });
                    let record: BaseRecord<'_, str, [u8]> =
                        BaseRecord::to(topic).payload(&body[..]).headers(headers);
                    send(&producer, record)?;
                }
            }
            producer.flush(Duration::from_secs(120))?;
            Ok(())
        }
        ["read", servers, topic, n] => {
            let n: usize = n.parse()?;
            // A group id, never joined: librdkafka wants one to assign by hand.
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", servers)
                .set("group.id", "bare-reader")
                .set("enable.partition.eof", "false")
                .create()?;
            let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
            let partitions = metadata
                .topics()
                .first()
                .map_or(0, |t| t.partitions().len());
            let mut tpl = TopicPartitionList::new();
            for p in 0..partitions {
                tpl.add_partition_offset(topic, p as i32, Offset::Beginning)?;
            }
            consumer.assign(&tpl)?;
            let started = Instant::now();
            let mut read = 0;
            let mut bytes = 0usize;
            while read < n {
                if started.elapsed() > Duration::from_secs(600) {
                    return Err(anyhow!("only {read} of {n} records in 10 minutes"));
                }
                if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                    bytes += m?.payload_len();
                    read += 1;
                }
            }
            println!("{:.3}", started.elapsed().as_secs_f64());
            eprintln!("{read} records, {bytes} bytes");
            Ok(())
        }
        ["produce", servers, topic, db] => {
            let records = load(db)?;
            let producer = producer(servers)?;
            let started = Instant::now();
            for (key, headers, body) in &records {
                // Headers made as they are sent, as any producer of them must.
                let mut h = OwnedHeaders::new_with_capacity(headers.len());
                for (name, value) in headers {
                    h = h.insert(Header {
                        key: name,
                        value: Some(value.as_str()),
                    });
                }
                let record: BaseRecord<'_, str, [u8]> = BaseRecord::to(topic)
                    .key(key.as_str())
                    .payload(&body[..])
                    .headers(h);
                send(&producer, record)?;
            }
            producer.flush(Duration::from_secs(300))?;
            println!("{:.3}", started.elapsed().as_secs_f64());
            Ok(())
        }
        _ => Err(anyhow!(
            "usage: bare_kafka create SERVERS TOPIC PARTITIONS | delete SERVERS TOPIC | files SERVERS TOPIC DIR [TIMES] | read SERVERS TOPIC N | produce SERVERS TOPIC DB"
        )),
    }
}

fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), f).await })
        .map_err(|_| anyhow!("no answer within 30 s"))
}

fn admin(servers: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", servers)
        .create()?)
}

/// The producer `publish` uses, set up the same way.
fn producer(servers: &str) -> anyhow::Result<BaseProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()?)
}

/// Sends, waiting on the producer's reports while its queue is full.
fn send(producer: &BaseProducer, mut record: BaseRecord<'_, str, [u8]>) -> anyhow::Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::QueueFull,
                ),
                back,
            )) => {
                producer.poll(Duration::from_millis(10));
                record = back;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

type Headers = Vec<(&'static str, String)>;

/// The Kafka header of each attribute (`ce_` and its name).
fn header(bare: &str) -> &'static str {
    match bare {
        "type" => "ce_type",
        "time" => "ce_time",
        "edisender" => "ce_edisender",
        "edirecipient" => "ce_edirecipient",
        "edicontrolref" => "ce_edicontrolref",
        "edisyntax" => "ce_edisyntax",
        "edisenderqualifier" => "ce_edisenderqualifier",
        "edimessageref" => "ce_edimessageref",
        "edimessagetype" => "ce_edimessagetype",
        _ => "ce_edimessageversion",
    }
}

/// Every message of the inbox's outbox: its key, its headers and its bytes, in order.
fn load(db: &str) -> anyhow::Result<Vec<(String, Headers, Vec<u8>)>> {
    let mut out = Vec::new();
    for e in outbox::events(db)? {
        let mut h: Headers = vec![
            ("content-type", "application/EDIFACT".into()),
            ("ce_specversion", "1.0".into()),
            ("ce_id", format!("{:032x}", e.id)),
            ("ce_source", format!("/edi-inbox/{}", e.sender)),
        ];
        for (name, value) in e.attributes {
            h.push((header(name), value));
        }
        if let Some(una) = e.una {
            h.push(("ce_ediuna", una));
        }
        out.push((format!("{}/{}", e.sender, e.recipient), h, e.body));
    }
    Ok(out)
}
