//! `--to nats://HOST:PORT[/PREFIX]`: NATS JetStream. Each event is published with its id as
//! `Nats-Msg-Id`, so that JetStream drops one published again within the stream's duplicate
//! window (and says so: that answer counts as stored), and with the CloudEvents attributes as
//! `ce-` headers (the NATS binding's binary content mode).

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use async_nats::HeaderName;
use async_nats::jetstream::{self, context::PublishErrorKind};

use super::{Answer, Destination, Outgoing, Sink, SinkError, Stop, Template};
use crate::broker;

/// How long the server may take to confirm the next message, from the last sign of progress,
/// before the connection counts as stalled.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the duplicate window of a stream `--create-stream` makes is: JetStream's default.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// `--to nats://HOST:PORT[/SUBJECT-PREFIX]`, and `--create-stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsDestination {
    server: broker::Url,
    prefix: Option<String>,
    /// `--create-stream NAME`: create a JetStream stream capturing the subjects if none does.
    create_stream: Option<String>,
    /// Subjects (with `*` for each placeholder) the created stream captures.
    stream_subjects: Vec<String>,
    /// The run's TLS and credential files.
    tls: broker::tls::Settings,
}

/// Reads `--to nats://...` (the broker table's line for NATS).
pub fn parse(text: &str, settings: &broker::Settings) -> Result<Box<dyn Destination>, String> {
    let mut d = read(text)?;
    d.tls = settings.tls.clone();
    Ok(Box::new(d))
}

/// Reads `--dead-letter nats://HOST:PORT/SUBJECT`: the subject is where every dead letter goes
/// (a JetStream stream must capture it).
pub fn dead_letter(
    text: &str,
    settings: &broker::Settings,
) -> Result<Box<dyn Destination>, String> {
    match read(text) {
        Ok(mut d) if d.prefix.is_some() => {
            d.stream_subjects = d.prefix.iter().cloned().collect();
            d.tls = settings.tls.clone();
            Ok(Box::new(d))
        }
        _ => Err(
            "--dead-letter nats:// takes nats://HOST:PORT/SUBJECT (or tls://HOST:PORT/SUBJECT)"
                .into(),
        ),
    }
}

fn read(text: &str) -> Result<NatsDestination, String> {
    let (scheme, rest) = match text.strip_prefix("tls://") {
        Some(rest) => ("tls", rest),
        None => ("nats", text.strip_prefix("nats://").unwrap_or(text)),
    };
    let (server, prefix) = match rest.split_once('/') {
        Some((s, p)) => (s, Some(p.trim_matches('.')).filter(|p| !p.is_empty())),
        None => (rest, None),
    };
    if server.is_empty() {
        return Err("nats:// needs a server: nats://HOST:PORT[/SUBJECT-PREFIX]".into());
    }
    if let Some(p) = prefix
        && !p.split('.').all(super::is_plain_token)
    {
        return Err(format!(
            "the subject prefix {p:?} must be dot-separated tokens of letters, digits, - and _"
        ));
    }
    Ok(NatsDestination {
        server: format!("{scheme}://{server}").into(),
        prefix: prefix.map(str::to_string),
        create_stream: None,
        stream_subjects: Vec::new(),
        tls: broker::tls::Settings::default(),
    })
}

impl Destination for NatsDestination {
    fn shown(&self) -> String {
        let server = broker::nats::shown(&self.server);
        match &self.prefix {
            Some(p) => format!("{server}/{p}"),
            None => server,
        }
    }

    fn subject_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    fn configure(&mut self, settings: &super::DestinationSettings, subjects: &Template) {
        self.create_stream.clone_from(&settings.create_stream);
        self.stream_subjects = vec![subjects.wildcard()];
    }

    fn connect(&self, stop: &Stop) -> anyhow::Result<Box<dyn Sink>> {
        Ok(Box::new(NatsSink::connect(
            &self.server,
            self.create_stream.clone(),
            self.stream_subjects.clone(),
            stop.clone(),
            &self.tls,
        )?))
    }
}

pub struct NatsSink {
    runtime: tokio::runtime::Runtime,
    js: jetstream::Context,
    server: String,
    /// `--create-stream NAME`, and the subjects such a stream captures.
    create_stream: Option<String>,
    stream_subjects: Vec<String>,
    stop: Stop,
    /// Subjects a stream was found (or made) for, this run.
    captured: HashSet<String>,
    denied: Denied,
    /// Streams other than `--create-stream`'s found capturing the subjects, said once each.
    warned_other_stream: HashSet<String>,
}

impl NatsSink {
    pub fn connect(
        server: &str,
        create_stream: Option<String>,
        stream_subjects: Vec<String>,
        stop: Stop,
        tls: &broker::tls::Settings,
    ) -> anyhow::Result<NatsSink> {
        let runtime = broker::runtime()?;
        let denied = Denied::default();
        let options = broker::nats::authorised(broker::nats::options("publish"), server, true, tls)
            .map_err(|e| anyhow::anyhow!(e))?;
        let client = runtime
            .block_on({
                let denied = denied.clone();
                options
                    .event_callback(move |event| {
                        let denied = denied.clone();
                        async move {
                            if let async_nats::Event::ServerError(async_nats::ServerError::Other(
                                text,
                            )) = event
                                && let Some(subject) = denied_subject(&text)
                                && let Ok(mut d) = denied.lock()
                            {
                                d.insert(subject.to_string());
                            }
                        }
                    })
                    .connect(broker::nats::without_credentials(server))
            })
            .map_err(|e| anyhow::anyhow!(broker::nats::explained(&e, server, tls)))
            .with_context(|| format!("cannot connect to {}", broker::nats::shown(server)))?;
        // The context spawns its acknowledgement reader on the runtime (run while a batch is
        // awaited).
        let mut js = {
            let _inside = runtime.enter();
            jetstream::new(client.clone())
        };
        js.set_timeout(ACK_TIMEOUT);
        Ok(NatsSink {
            runtime,
            js,
            server: broker::nats::shown(server),
            create_stream,
            stream_subjects,
            stop,
            captured: HashSet::new(),
            denied,
            warned_other_stream: HashSet::new(),
        })
    }

    /// Makes sure a stream captures `subject`: without one, every publish would be refused
    /// ("no responders") and nothing could go out, which is a setup error, not the events'.
    fn ensure_stream(&mut self, subject: &str) -> Result<(), SinkError> {
        if self.captured.contains(subject) {
            return Ok(());
        }
        use jetstream::context::GetStreamByNameErrorKind as Kind;
        match self.runtime.block_on(self.js.stream_by_subject(subject)) {
            // `--create-stream` makes a stream only where none captures the subjects: another
            // one that does takes the events, and the operator is told which.
            Ok(found) => {
                if let Some(name) = &self.create_stream
                    && *name != found
                    && self.warned_other_stream.insert(found.clone())
                {
                    crate::output::warn(&format!(
                        "{}: stream {found} already captures subject {subject}, so --create-stream {name} made no stream: the events go to {found}",
                        self.server
                    ));
                }
            }
            Err(e) if matches!(e.kind(), Kind::NotFound) => match &self.create_stream {
                Some(name) => {
                    let config = jetstream::stream::Config {
                        name: name.clone(),
                        subjects: self.stream_subjects.clone(),
                        storage: jetstream::stream::StorageType::File,
                        duplicate_window: DUPLICATE_WINDOW,
                        ..Default::default()
                    };
                    self.runtime
                        .block_on(self.js.get_or_create_stream(config))
                        .map_err(|e| {
                            SinkError::Setup(format!(
                                "{}: cannot create stream {name}: {e}",
                                self.server
                            ))
                        })?;
                    // A stream of that name that was there already may capture other subjects.
                    self.runtime
                        .block_on(self.js.stream_by_subject(subject))
                        .map_err(|_| {
                            SinkError::Setup(format!(
                                "{}: stream {name} exists but does not capture subject {subject}: add the subjects {} to it, or name another stream",
                                self.server,
                                self.stream_subjects.join(" ")
                            ))
                        })?;
                }
                None => {
                    return Err(SinkError::Setup(format!(
                        "{}: no JetStream stream captures subject {subject}: create one, e.g. `nats stream add EDIFACT --subjects '{}' --storage file --dupe-window 2m`, or run publish with --create-stream NAME",
                        self.server,
                        self.stream_subjects.join(" ")
                    )));
                }
            },
            Err(e) => {
                return Err(SinkError::Lost(anyhow!(
                    "{}: cannot look up the stream for subject {subject}: {e}",
                    self.server
                )));
            }
        }
        self.captured.insert(subject.to_string());
        Ok(())
    }
}

impl Sink for NatsSink {
    fn send(&mut self, batch: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
        for o in &batch {
            if let Err(e) = self.ensure_stream(&o.subject) {
                return (Vec::new(), Some(e));
            }
        }
        let js = self.js.clone();
        let server = self.server.clone();
        let denied = self.denied.clone();
        let stop = self.stop.clone();
        self.runtime.block_on(async move {
            let mut answers = Vec::with_capacity(batch.len());
            let work = confirm(&js, &server, &denied, batch, &mut answers);
            tokio::select! {
                lost = work => (answers, lost.map(SinkError::Lost)),
                // Stopped: the answers so far; what is unconfirmed stays unmarked.
                () = broker::stopped(stop) => (answers, None),
            }
        })
    }
}

/// Sends `batch`, then reads the confirmations in order into `answers`. The server has
/// [`ACK_TIMEOUT`] from the last sign of progress (the last message out, or the last
/// confirmation in) to confirm the next one: a server that stops confirming (it died under the
/// batch and the connection came back without the requests it held, say) ends the batch as a
/// lost connection does, with nothing counted against the events. Only a definite answer
/// refuses an event: JetStream's, or the server's permissions violation for its subject.
async fn confirm(
    js: &jetstream::Context,
    server: &str,
    denied: &Denied,
    batch: Vec<Outgoing>,
    answers: &mut Vec<Answer>,
) -> Option<anyhow::Error> {
    // Every message goes out first; the confirmations are read after, in order. The names
    // are static and the values moved: building headers was a fifth of the time.
    let mut pending = Vec::with_capacity(batch.len());
    let mut subjects = Vec::with_capacity(batch.len());
    for o in batch {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(HeaderName::from_static("Nats-Msg-Id"), o.id);
        headers.insert(HeaderName::from_static("content-type"), o.content_type);
        for (attr, value) in o.attributes.iter() {
            headers.insert(HeaderName::from_static(header(attr)), value);
        }
        pending.push(
            js.publish_with_headers(o.subject.clone(), headers, o.body)
                .await,
        );
        subjects.push(o.subject);
    }
    let mut deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
    for (subject, sent) in subjects.iter().zip(pending) {
        let not_permitted = || {
            denied
                .lock()
                .is_ok_and(|d| d.contains(subject.as_str()))
                .then(|| {
                    Answer::Refused(format!(
                        "the server does not permit publishing to subject {subject}"
                    ))
                })
        };
        // A refusal the server already announced: its confirmation never comes.
        if let Some(refused) = not_permitted() {
            answers.push(refused);
            continue;
        }
        let confirmed = match sent {
            Ok(ack) => match tokio::time::timeout_at(deadline, ack.into_future()).await {
                Ok(confirmed) => confirmed,
                Err(_) => {
                    if let Some(refused) = not_permitted() {
                        answers.push(refused);
                        deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
                        continue;
                    }
                    return Some(anyhow!(
                        "{server}: no confirmation within {} s (subject {subject}): the connection is stalled",
                        ACK_TIMEOUT.as_secs()
                    ));
                }
            },
            Err(e) => Err(e),
        };
        let answer = match confirmed {
            Ok(ack) if ack.duplicate => Answer::Duplicate,
            Ok(_) => Answer::Stored,
            Err(e) => match e.kind() {
                PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => {
                    if let Some(refused) = not_permitted() {
                        refused
                    } else {
                        return Some(anyhow!(
                            "{server}: no confirmation for subject {subject}: {e}"
                        ));
                    }
                }
                PublishErrorKind::StreamNotFound => {
                    Answer::Refused(format!("no JetStream stream captures subject {subject}"))
                }
                // The stream is full (or the server out of resources): no event can go in,
                // and none is to blame for it.
                _ if is_stream_full(&e.to_string()) => {
                    return Some(anyhow!("{server}: subject {subject}: {e}"));
                }
                _ => Answer::Refused(format!("{e} (subject {subject})")),
            },
        };
        deadline = tokio::time::Instant::now() + ACK_TIMEOUT;
        answers.push(answer);
    }
    None
}

/// The subjects the server refused a publish to for want of permission (its `-ERR
/// 'Permissions Violation for Publish to "SUBJECT"'`, which no confirmation ever reports).
type Denied = std::sync::Arc<std::sync::Mutex<HashSet<String>>>;

/// The subject of a permissions violation for a publish, as the server words it.
fn denied_subject(text: &str) -> Option<&str> {
    let rest = text.split("Permissions Violation for Publish to").nth(1)?;
    let rest = rest.trim_start().trim_start_matches('"');
    let end = rest.find('"').unwrap_or(rest.len());
    Some(rest[..end].trim()).filter(|s| !s.is_empty())
}

/// An attribute's NATS header: the CloudEvents NATS binding's `ce-` and its name.
fn header(a: super::Attr) -> &'static str {
    attr_binding!(a, "ce-")
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
