//! `--to nats://HOST:PORT[/PREFIX]`: NATS JetStream. Each event is published with its id as
//! `Nats-Msg-Id`, so that JetStream drops one published again within the stream's duplicate
//! window (and says so: that answer counts as stored), and with the CloudEvents attributes as
//! `ce-` headers (the NATS binding's binary content mode).

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use async_nats::HeaderName;
use async_nats::jetstream::{self, context::PublishErrorKind};

use super::{Answer, CONTENT_TYPE, Options, Outgoing, SetupError, Sink, without_userinfo};

/// How long the server may take to confirm one message before the connection counts as lost.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the duplicate window of a stream `--create-stream` makes is: JetStream's default.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

pub struct NatsSink {
    runtime: tokio::runtime::Runtime,
    client: async_nats::Client,
    js: jetstream::Context,
    server: String,
    options: Options,
    /// Subjects a stream was found (or made) for, this run.
    captured: HashSet<String>,
}

impl NatsSink {
    pub fn connect(server: &str, options: &Options) -> anyhow::Result<NatsSink> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = runtime
            .block_on(
                async_nats::ConnectOptions::new()
                    .connection_timeout(Duration::from_secs(10))
                    .request_timeout(Some(ACK_TIMEOUT))
                    .connect(server),
            )
            .with_context(|| format!("cannot connect to {}", without_userinfo(server)))?;
        // The context spawns its acknowledgement reader on the runtime (run while a batch is
        // awaited).
        let mut js = {
            let _inside = runtime.enter();
            jetstream::new(client.clone())
        };
        js.set_timeout(ACK_TIMEOUT);
        Ok(NatsSink {
            runtime,
            client,
            js,
            server: without_userinfo(server),
            options: options.clone(),
            captured: HashSet::new(),
        })
    }

    /// Makes sure a stream captures `subject`: without one, every publish would be refused
    /// ("no responders") and nothing could go out, which is a setup error, not the events'.
    fn ensure_stream(&mut self, subject: &str) -> anyhow::Result<()> {
        if self.captured.contains(subject) {
            return Ok(());
        }
        use jetstream::context::GetStreamByNameErrorKind as Kind;
        match self.runtime.block_on(self.js.stream_by_subject(subject)) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), Kind::NotFound) => match &self.options.create_stream {
                Some(name) => {
                    let config = jetstream::stream::Config {
                        name: name.clone(),
                        subjects: self.options.stream_subjects.clone(),
                        storage: jetstream::stream::StorageType::File,
                        duplicate_window: DUPLICATE_WINDOW,
                        ..Default::default()
                    };
                    self.runtime
                        .block_on(self.js.get_or_create_stream(config))
                        .map_err(|e| {
                            SetupError(format!("{}: cannot create stream {name}: {e}", self.server))
                        })?;
                    // A stream of that name that was there already may capture other subjects.
                    self.runtime
                        .block_on(self.js.stream_by_subject(subject))
                        .map_err(|_| {
                            SetupError(format!(
                                "{}: stream {name} exists but does not capture subject {subject}: add the subjects {} to it, or name another stream",
                                self.server,
                                self.options.stream_subjects.join(" ")
                            ))
                        })?;
                }
                None => {
                    return Err(SetupError(format!(
                        "{}: no JetStream stream captures subject {subject}: create one, e.g. `nats stream add EDIFACT --subjects '{}' --storage file --dupe-window 2m`, or run publish with --create-stream NAME",
                        self.server,
                        self.options.stream_subjects.join(" ")
                    ))
                    .into());
                }
            },
            Err(e) => {
                return Err(anyhow!(
                    "{}: cannot look up the stream for subject {subject}: {e}",
                    self.server
                ));
            }
        }
        self.captured.insert(subject.to_string());
        Ok(())
    }
}

impl Sink for NatsSink {
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<anyhow::Error>) {
        for o in &batch {
            if let Err(e) = self.ensure_stream(&o.subject) {
                return (Vec::new(), Some(e));
            }
        }
        let js = self.js.clone();
        let server = self.server.clone();
        let client = self.client.clone();
        self.runtime.block_on(async move {
            // Every message goes out first; the confirmations are read after, in order. The
            // names are static and the values moved: building headers was a fifth of the time.
            let mut pending = Vec::with_capacity(batch.len());
            let mut subjects = Vec::with_capacity(batch.len());
            for o in batch {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(HeaderName::from_static("Nats-Msg-Id"), o.id);
                headers.insert(HeaderName::from_static("content-type"), CONTENT_TYPE);
                for (attr, value) in o.attributes {
                    headers.insert(HeaderName::from_static(attr.nats), value);
                }
                pending.push(
                    js.publish_with_headers(o.subject.clone(), headers, o.body)
                        .await,
                );
                subjects.push(o.subject);
            }
            let mut answers = Vec::with_capacity(subjects.len());
            for (subject, sent) in subjects.iter().zip(pending) {
                let confirmed = match sent {
                    Ok(ack) => ack.await,
                    Err(e) => Err(e),
                };
                let answer = match confirmed {
                    Ok(ack) if ack.duplicate => Answer::Duplicate,
                    Ok(_) => Answer::Stored,
                    Err(e) => match e.kind() {
                        // Not confirmed on a connection that is up: the server dropped this
                        // message alone (a publish permission it does not have is answered
                        // with an -ERR the acknowledgement never sees).
                        PublishErrorKind::TimedOut
                            if client.connection_state()
                                == async_nats::connection::State::Connected =>
                        {
                            Answer::Refused(format!(
                                "no confirmation within {} s for subject {} (is publishing to it permitted?)",
                                ACK_TIMEOUT.as_secs(),
                                subject
                            ))
                        }
                        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => {
                            return (
                                answers,
                                Some(anyhow!(
                                    "{server}: no confirmation for subject {}: {e}",
                                    subject
                                )),
                            );
                        }
                        PublishErrorKind::StreamNotFound => Answer::Refused(format!(
                            "no JetStream stream captures subject {}",
                            subject
                        )),
                        // The stream is full (or the server out of resources): no event can go
                        // in, and none is to blame for it.
                        _ if is_stream_full(&e.to_string()) => {
                            return (
                                answers,
                                Some(anyhow!("{server}: subject {}: {e}", subject)),
                            );
                        }
                        _ => Answer::Refused(format!("{e} (subject {})", subject)),
                    },
                };
                answers.push(answer);
            }
            (answers, None)
        })
    }
}

/// JetStream's refusals that concern the stream, not the message: its limits with the discard
/// policy `new`, or the server's resources.
fn is_stream_full(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "maximum messages",
        "maximum bytes",
        "insufficient resources",
        "resource limits",
    ]
    .iter()
    .any(|p| text.contains(p))
}
