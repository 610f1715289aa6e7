//! The floor for `benches/scripts/publish.sh`: a bare async publisher of the same messages
//! `edi-inbox publish` sends (each message's bytes from an inbox, a `Nats-Msg-Id` header), to
//! JetStream, in batches with the acknowledgements pipelined, and nothing else: no claim, no
//! mark, no CloudEvents headers. The messages are read into memory first; only publishing is
//! timed.
//!
//! `bare_nats_publish reset STREAM SUBJECTS`   (re)create a file stream capturing SUBJECTS
//! `bare_nats_publish delete STREAM`
//! `bare_nats_publish publish DB SUBJECT BATCH` prints the seconds publishing took

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use async_nats::jetstream;

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
        ["publish", db, subject, batch] => {
            let batch: usize = batch.parse()?;
            let messages = load(db)?;
            let started = Instant::now();
            rt.block_on(async {
                for chunk in messages.chunks(batch) {
                    let mut acks = Vec::with_capacity(chunk.len());
                    for (id, body) in chunk {
                        let mut headers = async_nats::HeaderMap::new();
                        headers.insert("Nats-Msg-Id", id.as_str());
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
        _ => Err(anyhow!(
            "usage: bare_nats_publish reset STREAM SUBJECTS | delete STREAM | publish DB SUBJECT BATCH"
        )),
    }
}

/// Every message of the inbox's outbox, with an id, in order.
fn load(db: &str) -> anyhow::Result<Vec<(String, bytes::Bytes)>> {
    let conn = rusqlite::Connection::open(db).context("the inbox")?;
    let mut stmt = conn.prepare(
        "SELECT o.id, i.raw, i.raw_codec, m.raw_start, m.raw_end FROM outbox o
         JOIN messages m ON m.id = o.message_id JOIN interchanges i ON i.id = m.interchange_id
         ORDER BY o.id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, Vec<u8>>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, raw, codec, start, end) = row?;
        let raw = if codec == "zstd" {
            zstd::stream::decode_all(raw.as_slice())?
        } else {
            raw
        };
        let body = raw
            .get(start as usize..end as usize)
            .ok_or_else(|| anyhow!("event {id}: bad offsets"))?;
        out.push((format!("bare-{id}"), bytes::Bytes::copy_from_slice(body)));
    }
    Ok(out)
}
