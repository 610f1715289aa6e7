//! The floor for `benches/scripts/publish.sh`: a bare async publisher of the same messages
//! `edi-inbox publish` sends (each message's bytes from an inbox, with a `Nats-Msg-Id` and the
//! same CloudEvents headers, made here from the same columns), to JetStream, in batches with the
//! acknowledgements pipelined, and nothing else: no claim, no mark, no escaping, no output. The
//! messages and their header values are read into memory first; publishing (headers made as
//! each message is sent) is timed. With `--bare`
//! after BATCH, only the `Nats-Msg-Id` header is sent.
//!
//! `bare_nats_publish reset STREAM SUBJECTS`   (re)create a file stream capturing SUBJECTS
//! `bare_nats_publish delete STREAM`
//! `bare_nats_publish publish DB SUBJECT BATCH` prints the seconds publishing took
//! `bare_nats_publish files DIR SUBJECT`        each file of DIR (in name order) as one message,
//!                                              with its name in `edi-filename`: what a gateway
//!                                              publishes for `consume` (`benches/scripts/consume.sh`)

use std::time::{Duration, Instant};

use anyhow::anyhow;
use async_nats::jetstream;

#[path = "support/outbox.rs"]
mod outbox;

const SERVER: &str = "nats://127.0.0.1:4222";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt.block_on(async_nats::connect(SERVER))?;
    let js = {
        let _inside = rt.enter();
        let mut js = jetstream::new(client);
        js.set_timeout(Duration::from_secs(10));
        js
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["reset", stream, subjects] => rt.block_on(async {
            let _ = js.delete_stream(stream).await;
            js.create_stream(jetstream::stream::Config {
                name: stream.to_string(),
                subjects: vec![subjects.to_string()],
                storage: jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("{e}"))?;
            anyhow::Ok(())
        }),
        ["delete", stream] => {
            let _ = rt.block_on(js.delete_stream(stream));
            Ok(())
        }
        ["publish", db, subject, batch] | ["publish", db, subject, batch, "--bare"] => {
            let batch: usize = batch.parse()?;
            let messages = load(db, args.len() == 5)?;
            let started = Instant::now();
            rt.block_on(async {
                for chunk in messages.chunks(batch) {
                    let mut acks = Vec::with_capacity(chunk.len());
                    for (pairs, body) in chunk {
                        // Headers made as they are sent, as any publisher of them must.
                        let mut headers = async_nats::HeaderMap::new();
                        for (name, value) in pairs {
                            headers
                                .insert(async_nats::HeaderName::from_static(name), value.clone());
                        }
                        acks.push(
                            js.publish_with_headers(subject.to_string(), headers, body.clone())
                                .await?,
                        );
                    }
                    for ack in acks {
                        ack.await?;
                    }
                }
                anyhow::Ok(())
            })?;
            println!("{:.3}", started.elapsed().as_secs_f64());
            Ok(())
        }
        ["files", dir, subject] => {
            let mut paths: Vec<_> = std::fs::read_dir(dir)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            paths.sort();
            rt.block_on(async {
                for chunk in paths.chunks(1000) {
                    let mut acks = Vec::with_capacity(chunk.len());
                    for path in chunk {
                        let mut headers = async_nats::HeaderMap::new();
                        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                        headers.insert("edi-filename", name.unwrap_or_default().as_str());
                        let body = std::fs::read(path)?;
                        acks.push(
                            js.publish_with_headers(subject.to_string(), headers, body.into())
                                .await?,
                        );
                    }
                    for a in acks {
                        a.await?;
                    }
                }
                anyhow::Ok(())
            })
        }
        _ => Err(anyhow!(
            "usage: bare_nats_publish reset STREAM SUBJECTS | delete STREAM | publish DB SUBJECT BATCH | files DIR SUBJECT"
        )),
    }
}

/// Every message of the inbox's outbox with its headers, in order.
type Headers = Vec<(&'static str, String)>;

/// The NATS header of each attribute (`ce-` and its name).
fn header(bare: &str) -> &'static str {
    match bare {
        "type" => "ce-type",
        "time" => "ce-time",
        "edisender" => "ce-edisender",
        "edirecipient" => "ce-edirecipient",
        "edicontrolref" => "ce-edicontrolref",
        "edisyntax" => "ce-edisyntax",
        "edisenderqualifier" => "ce-edisenderqualifier",
        "edimessageref" => "ce-edimessageref",
        "edimessagetype" => "ce-edimessagetype",
        _ => "ce-edimessageversion",
    }
}

fn load(db: &str, bare: bool) -> anyhow::Result<Vec<(Headers, bytes::Bytes)>> {
    let mut out = Vec::new();
    for e in outbox::events(db)? {
        let mut h: Headers = Vec::new();
        let msg_id = format!("{:032x}", e.id);
        h.push(("Nats-Msg-Id", msg_id.clone()));
        if !bare {
            h.push(("content-type", "application/EDIFACT".into()));
            h.push(("ce-specversion", "1.0".into()));
            h.push(("ce-id", msg_id));
            h.push(("ce-source", format!("/edi-inbox/{}", e.sender)));
            for (name, value) in e.attributes {
                h.push((header(name), value));
            }
            if let Some(una) = e.una {
                h.push(("ce-ediuna", una));
            }
        }
        out.push((h, bytes::Bytes::from(e.body)));
    }
    Ok(out)
}
