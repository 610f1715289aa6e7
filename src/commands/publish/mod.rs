//! `edi-inbox publish`: the relay of the transactional outbox. Claim a batch of unpublished
//! events (a read, no transaction left open), send it with the confirmations pipelined, then
//! mark exactly the confirmed events published in one short transaction. A crash between the
//! confirmation and the mark sends those events again with the same ids.
//!
//! Here: the run (its checks, the publisher's lock and the standby, the service loop driving
//! it, one step's batches) and what the other files share (`Run`, `Summary`, `BatchError`).
//! Each part of a step has its file: the messages' events, two batches in flight
//! (`pipeline.rs`), built into what goes out (`batch.rs`); the CONTRLs (`contrl.rs`); the lines
//! and the summary (`report.rs`); the metrics file (`metrics.rs`). They add their methods to
//! `Run` and import from this file; this file imports nothing of theirs, and none of them
//! imports from a file that imports from it.
//!
//! Where a new thing goes: how an event looks on the wire or a destination works,
//! [`crate::publish`]; how batches follow each other, `pipeline.rs`; what a person or a
//! program reads of the run, `report.rs` and `metrics.rs`.

mod batch;
mod contrl;
mod metrics;
mod pipeline;
mod report;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{PublishArgs, PublishKind};
use crate::exit::ExitStatus;
use crate::inbox::{Access, Inbox, Location};
use crate::metrics::unix_now;
use crate::output::{Out, problem};
use crate::publish::{self, Destination, Payload, SinkError, Template};

use super::service::{self, End, Failure, Service, Step};

/// The run's counts.
#[derive(Debug, Default, Serialize)]
struct Summary {
    /// Events (or interchanges) the destination stored this run.
    published: usize,
    /// Of those, ones it had already (a republish after a crash): not sent twice.
    duplicates: usize,
    /// Refused this run (tried again later).
    failed: usize,
    /// Refused for the last time this run: parked.
    parked: usize,
}

/// Runs `publish`.
pub fn run(
    db: &Location,
    busy_timeout: Duration,
    args: &PublishArgs,
) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let settings = match super::broker_settings(&args.broker, &[args.to.as_str()]) {
        Ok(s) => s,
        Err(e) => return super::usage(&e),
    };
    let mut destination = match crate::brokers::destination(&args.to, &settings) {
        Ok(d) => d,
        Err(e) => return super::usage_of("--to", &e),
    };
    let template = match destination.subject_template() {
        Some(topic) => Template::parse(topic, None),
        None => Template::parse(&args.subject, destination.subject_prefix()),
    };
    let template = match template {
        Ok(t) => t,
        Err(e) => return super::usage(&e),
    };
    let mut inbox = super::open_inbox(db, Access::Write, busy_timeout)?;
    if args.retry_parked
        && let Some(status) = retry_parked(&mut *inbox, args, db)?
    {
        return Ok(status);
    }
    // A second signal, while a batch is stuck on a broker that does not answer, ends the
    // process: nothing unconfirmed is marked.
    let stop = super::stop_on_signals()?;
    destination.configure(
        &publish::DestinationSettings {
            create_stream: args.create_stream.clone(),
            exchange: args.exchange.clone(),
        },
        &template,
    );
    let mut run = Run {
        args,
        payload: match args.payload {
            crate::cli::PayloadArg::Message => Payload::Message,
            crate::cli::PayloadArg::Interchange => Payload::Interchange,
        },
        template,
        out: Out::default(),
        summary: Summary::default(),
        pass: new_pass(),
        started,
        last_success: None,
        metrics: super::service::MetricsThrottle::default(),
    };
    let take_lock = |inbox: &mut dyn Inbox| {
        inbox
            .lock_publisher()
            .with_context(|| format!("cannot take the publisher's lock of {}", db.shown()))
    };
    if !take_lock(&mut *inbox)? {
        let text = format!(
            "another edi-inbox publish is running on {}; it publishes these events, so this run does nothing",
            db.shown()
        );
        if !args.follow {
            if args.json {
                #[derive(Serialize)]
                struct Locked<'a> {
                    status: &'static str,
                    message: &'a str,
                }
                run.out.json(&Locked {
                    status: "locked",
                    message: &text,
                });
            } else {
                run.out.line(&text);
            }
            run.out.flush();
            return Ok(ExitStatus::Success);
        }
        // With --follow, a standby (a second host's service): it waits, healthy, and takes
        // over once the other one stops.
        problem(
            &mut run.out,
            &format!("{text} until it stops; this one takes over then"),
        );
        loop {
            run.last_success = Some(unix_now());
            run.metrics_now(&*inbox);
            super::sleep_unless(&stop, args.poll.max(Duration::from_secs(1)));
            if stop.load(Ordering::Relaxed) {
                return run.finish(&*inbox, &*destination, true);
            }
            if take_lock(&mut *inbox)? {
                run.last_success = None;
                break;
            }
        }
    }
    // With --follow a service: a destination that is away is waited for, each try said, and
    // made again when it goes; stopped while waiting, the run ends as asked, having marked
    // nothing.
    let settings = service::Settings {
        retry_first_connect: args.follow,
        reconnect: args.follow,
        idle: if args.follow {
            service::Idle::Pause(args.poll)
        } else {
            service::Idle::End
        },
        lost_note: " (nothing unconfirmed was marked)",
        ..service::Settings::default()
    };
    let stop_flag: publish::Stop = Some(stop.clone());
    let mut publisher = Publisher {
        run: &mut run,
        inbox: &mut *inbox,
        destination: &*destination,
        stop: &stop_flag,
    };
    let ended = service::run(&mut publisher, &settings, &stop);
    run.out.flush();
    match ended {
        Ok(end) => run.finish(&*inbox, &*destination, end == End::Stopped),
        Err(Failure::Fatal(e)) => Err(e),
        Err(Failure::Lost { error, .. }) => Err(not_sent(error, &*destination)),
    }
}

/// `--retry-parked [--id N]`: the parked events of `--kind` made due again, each said (`retried`
/// lines, or objects with `--json`), before the run publishes. `Some` status to end with at
/// once: a usage error (`--id` needs one outbox), or exit 3 where nothing was parked (or not the
/// event `--id` names), which publishes nothing: the operator expected otherwise.
fn retry_parked(
    inbox: &mut dyn Inbox,
    args: &PublishArgs,
    db: &Location,
) -> anyhow::Result<Option<ExitStatus>> {
    use crate::inbox::Outbox;
    let outboxes: &[(Outbox, &str)] = match args.kind {
        PublishKind::All if args.id.is_some() => {
            return super::usage(
                "--retry-parked --id N needs --kind message or --kind contrl: each outbox numbers its events (list --status failed says which an event is in)",
            )
            .map(Some);
        }
        PublishKind::All => &[
            (Outbox::Acknowledgements, "contrl"),
            (Outbox::Messages, "message"),
        ],
        PublishKind::Message => &[(Outbox::Messages, "message")],
        PublishKind::Contrl => &[(Outbox::Acknowledgements, "contrl")],
    };
    let mut out = Out::default();
    let mut made_due = 0;
    for &(outbox, kind) in outboxes {
        let ids = inbox.retry_parked(outbox, args.id).with_context(|| {
            format!("cannot make the parked events of {} due again", db.shown())
        })?;
        made_due += ids.len();
        for id in ids {
            if args.json {
                #[derive(Serialize)]
                struct Retried<'a> {
                    status: &'static str,
                    kind: &'a str,
                    event_id: i64,
                }
                out.json(&Retried {
                    status: "retried",
                    kind,
                    event_id: id,
                });
            } else if !args.quiet {
                out.line(&format!(
                    "retried  {kind} event {id}: parked, now due again"
                ));
            }
        }
    }
    if made_due == 0 {
        let what = match args.id {
            Some(id) => format!("no parked event of id {id} in that outbox"),
            None => "no parked event".to_string(),
        };
        problem(
            &mut out,
            &format!(
                "--retry-parked: {what} (list --status failed shows the parked ones); nothing published"
            ),
        );
        out.flush();
        return Ok(Some(ExitStatus::Problems));
    }
    out.flush();
    Ok(None)
}

/// The run as the service loop drives it: a step is a batch of each kind asked for.
struct Publisher<'r, 'a> {
    run: &'r mut Run<'a>,
    inbox: &'r mut dyn Inbox,
    destination: &'r dyn Destination,
    stop: &'r publish::Stop,
}

impl Service for Publisher<'_, '_> {
    type Connection = Box<dyn publish::Sink>;

    fn connect(&mut self) -> anyhow::Result<Box<dyn publish::Sink>> {
        self.destination.connect(self.stop)
    }

    fn step(&mut self, sink: &mut Box<dyn publish::Sink>, _: Duration) -> Result<Step, Failure> {
        let claimed = self
            .run
            .one_batch(&mut *self.inbox, &mut **sink, self.stop)
            .map_err(|e| match e {
                BatchError::Inbox(e) => Failure::Fatal(e),
                BatchError::Destination(SinkError::Lost(e)) => Failure::lost(e),
                // What only an operator can fix ends the run, --follow too.
                BatchError::Destination(setup) => {
                    Failure::Fatal(not_sent(setup.into_error(), self.destination))
                }
            })?;
        self.run.last_success = Some(unix_now());
        if claimed > 0 {
            return Ok(Step::Progress);
        }
        // A new pass: events refused in the last one may be tried again (once --retry-after
        // has gone by).
        self.run.pass = new_pass();
        Ok(Step::Idle)
    }

    fn heartbeat(&mut self) {
        if self.run.args.follow {
            self.run.metrics_now(&*self.inbox);
        }
    }

    fn problem(&mut self, text: &str) {
        problem(&mut self.run.out, text);
    }
}

/// A batch the destination did not take, for a run that ends on it.
fn not_sent(e: anyhow::Error, destination: &dyn Destination) -> anyhow::Error {
    e.context(format!(
        "publishing to {} failed; nothing unconfirmed was marked, the next run sends it again",
        destination.shown()
    ))
}

/// A name for one pass over the outbox: an event is tried at most once per pass.
fn new_pass() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    format!("{host}:{}:{}", std::process::id(), crate::clock::now())
}

enum BatchError {
    /// The inbox failed: the run ends (exit 1).
    Inbox(anyhow::Error),
    /// The destination went away (with --follow, reconnect), or cannot take events as it is
    /// set up: exit 1.
    Destination(SinkError),
}

struct Run<'a> {
    args: &'a PublishArgs,
    /// `--payload`.
    payload: Payload,
    template: Template,
    out: Out,
    summary: Summary,
    pass: String,
    started: Instant,
    /// When a batch (or, with --follow, a look at an empty outbox) last went through without a
    /// destination error: what the alert on a stalled publisher watches.
    last_success: Option<f64>,
    metrics: super::service::MetricsThrottle,
}

impl Run<'_> {
    /// Claims, sends and marks one batch of each kind asked for: the CONTRLs first (a partner
    /// waits for them), then the messages' events (batch after batch while there are any);
    /// returns how many events it claimed.
    fn one_batch(
        &mut self,
        inbox: &mut dyn Inbox,
        sink: &mut dyn publish::Sink,
        stop: &publish::Stop,
    ) -> Result<usize, BatchError> {
        let mut claimed = 0;
        if self.args.kind != PublishKind::Message {
            claimed += self.contrl_batch(inbox, sink)?;
        }
        if self.args.kind != PublishKind::Contrl {
            claimed += self.message_batches(inbox, sink, stop)?;
        }
        Ok(claimed)
    }
}
