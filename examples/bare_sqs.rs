//! The floor `consume --from sqs://` is measured against (`benches/scripts/sqs.sh`): a bare
//! receive-and-delete loop of the AWS SDK on the same queue (ten a receive, deleted ten a call,
//! nothing decided), and what the benchmark needs to set a queue up.
//!
//! `bare_sqs create ENDPOINT QUEUE`           prints the queue's URL
//! `bare_sqs delete ENDPOINT QUEUE`
//! `bare_sqs files ENDPOINT QUEUE DIR`        each file of DIR (name order) as one message,
//!                                            with its name in `edi-filename` (base64 where
//!                                            SQS cannot carry it as text)
//! `bare_sqs read ENDPOINT QUEUE N`           prints the seconds receiving and deleting N took

use std::time::{Duration, Instant};

use anyhow::anyhow;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (endpoint, queue) = match args[..] {
        [_, endpoint, queue, ..] => (endpoint, queue),
        _ => return Err(usage()),
    };
    let client = client(endpoint);
    rt.block_on(async {
        match args[..] {
            ["create", ..] => {
                let out = client.create_queue().queue_name(queue).send().await?;
                println!("{}", out.queue_url.unwrap_or_default());
                Ok(())
            }
            ["delete", ..] => {
                let url = url(&client, queue).await?;
                client.delete_queue().queue_url(url).send().await?;
                Ok(())
            }
            ["files", _, _, dir] => {
                let url = url(&client, queue).await?;
                let mut paths: Vec<_> = std::fs::read_dir(dir)?
                    .map(|e| e.map(|e| e.path()))
                    .collect::<Result<_, _>>()?;
                paths.sort();
                for chunk in paths.chunks(10) {
                    let mut entries = Vec::with_capacity(chunk.len());
                    for (k, path) in chunk.iter().enumerate() {
                        let bytes = std::fs::read(path)?;
                        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                        let text = |v: &str| {
                            MessageAttributeValue::builder()
                                .data_type("String")
                                .string_value(v)
                                .build()
                        };
                        let mut e = SendMessageBatchRequestEntry::builder().id(k.to_string());
                        e = match String::from_utf8(bytes) {
                            Ok(t) if t.chars().all(|c| c >= ' ' || "\t\n\r".contains(c)) => {
                                e.message_body(t)
                            }
                            Ok(t) => e
                                .message_body(encode(t.as_bytes()))
                                .message_attributes("edi-body-encoding", text("base64")?),
                            Err(b) => e
                                .message_body(encode(b.as_bytes()))
                                .message_attributes("edi-body-encoding", text("base64")?),
                        };
                        if let Some(name) = &name {
                            e = e.message_attributes("edi-filename", text(name)?);
                        }
                        entries.push(e.build()?);
                    }
                    let out = client
                        .send_message_batch()
                        .queue_url(&url)
                        .set_entries(Some(entries))
                        .send()
                        .await?;
                    if !out.failed.is_empty() {
                        return Err(anyhow!("not stored: {:?}", out.failed));
                    }
                }
                Ok(())
            }
            ["read", _, _, n] => {
                let n: usize = n.parse()?;
                let url = url(&client, queue).await?;
                let started = Instant::now();
                let mut read = 0;
                while read < n {
                    if started.elapsed() > Duration::from_secs(3600) {
                        return Err(anyhow!("only {read} of {n} messages in an hour"));
                    }
                    let out = client
                        .receive_message()
                        .queue_url(&url)
                        .max_number_of_messages(10)
                        .wait_time_seconds(1)
                        .send()
                        .await?;
                    let messages = out.messages.unwrap_or_default();
                    read += messages.len();
                    if messages.is_empty() {
                        continue;
                    }
                    let entries: Vec<DeleteMessageBatchRequestEntry> = messages
                        .iter()
                        .enumerate()
                        .filter_map(|(k, m)| {
                            DeleteMessageBatchRequestEntry::builder()
                                .id(k.to_string())
                                .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                                .build()
                                .ok()
                        })
                        .collect();
                    client
                        .delete_message_batch()
                        .queue_url(&url)
                        .set_entries(Some(entries))
                        .send()
                        .await?;
                }
                println!("{:.3}", started.elapsed().as_secs_f64());
                Ok(())
            }
            _ => Err(usage()),
        }
    })
}

fn usage() -> anyhow::Error {
    anyhow!(
        "usage: bare_sqs create|delete ENDPOINT QUEUE | files ENDPOINT QUEUE DIR | read ENDPOINT QUEUE N"
    )
}

fn encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A client of a local endpoint (moto), with its made-up credentials.
fn client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "bench"))
        .endpoint_url(endpoint)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

async fn url(client: &Client, queue: &str) -> anyhow::Result<String> {
    client
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await?
        .queue_url
        .ok_or_else(|| anyhow!("no URL for {queue}"))
}
