//! `edi-inbox publish`: the relay of the transactional outbox. Claim a batch of unpublished
//! events (a read, no transaction left open), send it with the confirmations pipelined, then
//! mark exactly the confirmed events published in one short transaction. A crash between the
//! confirmation and the mark sends those events again with the same ids.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{PublishArgs, PublishKind};
use crate::exit::ExitStatus;
use crate::inbox::names::Counter;
use crate::inbox::{Access, Inbox, Location, Outbox, OutboxEvent};
use crate::metrics::{Metrics, unix_now};
use crate::output::{Out, count, problem};
use crate::publish::{self, Answer, Destination, Outgoing, Payload, SinkError, Template};

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

/// One JSON line per event (or interchange).
#[derive(Debug, Serialize)]
struct Line<'a> {
    status: &'static str,
    id: &'a str,
    subject: &'a str,
    event_type: &'a str,
    sender: &'a str,
    recipient: &'a str,
    control_ref: &'a str,
    message_refs: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<i64>,
    /// Attempts made before this one.
    #[serde(skip)]
    tried: i64,
    /// For a CONTRL: the answered interchange's 0020, and which sending of the answer this is
    /// (the human line says so where a message's line names its message).
    #[serde(skip)]
    answering: Option<(&'a str, i64)>,
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
        metrics_written: None,
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
    metrics_written: Option<Instant>,
}

/// How often `publish --follow` rewrites its metrics file, at most: a long run is watched
/// through it (backlog, last success) while it runs, not only when it ends.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// How long one step goes on taking batch after batch while the outbox has events: the service
/// loop writes the metrics in between.
const PIPELINE_SPAN: Duration = Duration::from_secs(5);

/// A batch of the messages' events as claimed, with their interchanges' bytes by id.
type Read = (Vec<OutboxEvent>, HashMap<i64, bytes::Bytes>);

/// A batch of the messages' events claimed and made ready to send.
struct Claimed {
    /// Events claimed.
    claimed: usize,
    units: Vec<Unit>,
    /// What goes out, one per unit that could be built (taken when it is sent).
    ready: Vec<Outgoing>,
}

impl Claimed {
    /// Its outbox rows, which the next claim passes over while this batch is in flight.
    fn rows(&self) -> Vec<i64> {
        self.units
            .iter()
            .flat_map(|u| u.events.iter().map(|e| e.row))
            .collect()
    }
}

/// The events as what goes out (one each, or one per interchange), from their interchanges'
/// bytes `raws`: done on a thread of its own while the batch before is marked.
fn ready(
    events: Vec<OutboxEvent>,
    raws: HashMap<i64, bytes::Bytes>,
    payload: Payload,
    template: &Template,
) -> Claimed {
    let claimed = events.len();
    let mut groups: Vec<Vec<OutboxEvent>> = Vec::new();
    // Where each interchange's group is: its events' ids need not be consecutive.
    let mut group_of: HashMap<i64, usize> = HashMap::new();
    for e in events {
        match group_of.get(&e.interchange_id) {
            Some(&g) if payload == Payload::Interchange => groups[g].push(e),
            _ => {
                group_of.insert(e.interchange_id, groups.len());
                groups.push(vec![e]);
            }
        }
    }
    let mut ready = Vec::with_capacity(groups.len());
    let empty = bytes::Bytes::new();
    let units = groups
        .into_iter()
        .map(|events| {
            let raw = raws.get(&events[0].interchange_id).unwrap_or(&empty);
            let (id, subject, sent) = match publish::outgoing(&events, raw, payload, template) {
                Ok(o) => {
                    let (id, subject) = (o.id.clone(), o.subject.clone());
                    ready.push(o);
                    (id, subject, Ok(ready.len() - 1))
                }
                Err(why) => (
                    publish::event_id(&events[0], payload),
                    template.render(&events[0]),
                    Err(why),
                ),
            };
            Unit {
                events,
                id,
                subject,
                sent,
            }
        })
        .collect();
    Claimed {
        claimed,
        units,
        ready,
    }
}

/// What goes out as one message: its events (one, or an interchange's), its id and subject,
/// and its place in the batch sent, or why it cannot be built.
struct Unit {
    events: Vec<OutboxEvent>,
    id: String,
    subject: String,
    sent: Result<usize, String>,
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

    /// Claims, sends and marks a batch of CONTRLs.
    fn contrl_batch(
        &mut self,
        inbox: &mut dyn Inbox,
        sink: &mut dyn publish::Sink,
    ) -> Result<usize, BatchError> {
        let events = inbox
            .pending_contrl(&self.pass, self.args.retry_after, self.args.batch)
            .context("cannot read the CONTRL outbox")
            .map_err(BatchError::Inbox)?;
        if events.is_empty() {
            return Ok(0);
        }
        let outgoing: Vec<Outgoing> = events
            .iter()
            .map(|e| publish::contrl_outgoing(e, &self.template))
            .collect();
        let named: Vec<(String, String)> = outgoing
            .iter()
            .map(|o| (o.id.clone(), o.subject.clone()))
            .collect();
        let (answers, lost) = sink.send(outgoing);
        crash_point!("publish-after-confirm");
        // Answers in order; those after a lost connection have none and are not marked.
        let published: Vec<i64> = events
            .iter()
            .zip(&answers)
            .filter(|(_, a)| matches!(a, Answer::Stored | Answer::Duplicate))
            .map(|(e, _)| e.row)
            .collect();
        inbox
            .mark_published(Outbox::Acknowledgements, &published)
            .context("cannot mark CONTRLs published")
            .map_err(BatchError::Inbox)?;
        for ((e, (id, subject)), answer) in events.iter().zip(&named).zip(&answers) {
            let parked = match answer {
                Answer::Refused(why) => inbox
                    .mark_failed(
                        Outbox::Acknowledgements,
                        &[e.row],
                        why,
                        &self.pass,
                        self.args.max_attempts,
                    )
                    .context("cannot record a failed CONTRL")
                    .map_err(BatchError::Inbox)?,
                _ => 0,
            };
            let line = Line {
                status: "",
                id,
                subject,
                event_type: &e.event_type,
                sender: &e.sender,
                recipient: &e.recipient,
                control_ref: &e.own_ref,
                message_refs: Vec::new(),
                error: None,
                attempts: None,
                tried: e.attempts,
                answering: Some((&e.control_ref, e.send)),
            };
            self.report_one(line, answer, parked > 0);
        }
        self.out.flush();
        match lost {
            Some(e) => Err(BatchError::Destination(e)),
            None => Ok(events.len()),
        }
    }

    /// Claims, sends and marks the messages' events, batch after batch while there are any (for
    /// [`PIPELINE_SPAN`] at most, or until a signal): while one batch is with the destination,
    /// the next is claimed (passing over the rows not marked yet) and made ready on a thread of
    /// its own while the one before is marked. The destination is given the batches in order;
    /// one that sends a batch on while the answers of the one before come (Kafka) has two in
    /// flight, and is asked for the older one's answers once it has the newer.
    fn message_batches(
        &mut self,
        inbox: &mut dyn Inbox,
        sink: &mut dyn publish::Sink,
        stop: &publish::Stop,
    ) -> Result<usize, BatchError> {
        let started = Instant::now();
        let payload = self.payload;
        let template = self.template.clone();
        let Some((events, raws)) = self.read_next(inbox, &[]).map_err(BatchError::Inbox)? else {
            return Ok(0);
        };
        let mut sending = ready(events, raws, payload, &template);
        let mut claimed = 0;
        // Batches handed over whose answers have not come, oldest first.
        let mut flying: VecDeque<Claimed> = VecDeque::new();
        // Batches answered: marked while the next one is sent.
        let mut answered: Vec<(Claimed, Vec<Answer>)> = Vec::new();
        loop {
            claimed += sending.claimed;
            let ahead = !publish::stopped(stop) && started.elapsed() < PIPELINE_SPAN;
            let batch = std::mem::take(&mut sending.ready);
            let before = flying.len();
            flying.push_back(sending);
            let unmarked: Vec<i64> = flying
                .iter()
                .chain(answered.iter().map(|(b, _)| b))
                .flat_map(Claimed::rows)
                .collect();
            let to_mark = std::mem::take(&mut answered);
            let to = &mut *sink;
            let template = &template;
            let (results, marked, next) = std::thread::scope(|scope| {
                // The answers of the batches handed over before it, in order, and its own
                // where the destination answers at once; Kafka's stays in flight.
                let confirming = scope.spawn(move || {
                    let handed = to.hand_over(batch);
                    let mut results = Vec::with_capacity(before + 1);
                    for _ in 0..before {
                        let answers = to.answers();
                        let lost = answers.1.is_some();
                        results.push(answers);
                        if lost {
                            return results;
                        }
                    }
                    results.extend(handed);
                    results
                });
                let read = if ahead {
                    self.read_next(inbox, &unmarked)
                } else {
                    Ok(None)
                };
                let building = read.map(|read| {
                    read.map(|(events, raws)| {
                        scope.spawn(move || ready(events, raws, payload, template))
                    })
                });
                let marked = self.mark_all(inbox, to_mark);
                let next = building
                    .map(|b| b.map(|b| b.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
                let results = confirming
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                (results, marked, next)
            });
            crash_point!("publish-after-confirm");
            marked?;
            for (answers, lost) in results {
                let Some(batch) = flying.pop_front() else {
                    break;
                };
                answered.push((batch, answers));
                if let Some(lost) = lost {
                    // What came before the loss is marked; the batches still in flight are
                    // not, and go out again with their ids.
                    self.mark_all(inbox, answered)?;
                    return Err(BatchError::Destination(lost));
                }
            }
            match next.map_err(BatchError::Inbox)? {
                Some(next) => sending = next,
                None => {
                    while let Some(batch) = flying.pop_front() {
                        let (answers, lost) = sink.answers();
                        answered.push((batch, answers));
                        if let Some(lost) = lost {
                            self.mark_all(inbox, answered)?;
                            return Err(BatchError::Destination(lost));
                        }
                    }
                    self.mark_all(inbox, answered)?;
                    return Ok(claimed);
                }
            }
        }
    }

    /// Marks batches answered, in order (see [`Run::marked`]).
    fn mark_all(
        &mut self,
        inbox: &mut dyn Inbox,
        batches: Vec<(Claimed, Vec<Answer>)>,
    ) -> Result<(), BatchError> {
        for (batch, answers) in batches {
            self.marked(inbox, batch, answers)?;
        }
        Ok(())
    }

    /// The next batch of the messages' events, leaving out `unmarked`, with their
    /// interchanges' bytes (each read once); `None` where there is none.
    fn read_next(&self, inbox: &dyn Inbox, unmarked: &[i64]) -> anyhow::Result<Option<Read>> {
        let events = self.claim(inbox, unmarked)?;
        if events.is_empty() {
            return Ok(None);
        }
        let mut ids: Vec<i64> = events.iter().map(|e| e.interchange_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let raws = inbox
            .interchange_bytes(&ids)
            .context("cannot read the interchanges' bytes")?
            .into_iter()
            .map(|(id, raw)| (id, bytes::Bytes::from(raw)))
            .collect();
        Ok(Some((events, raws)))
    }

    /// Marks what the destination stored of a batch published, and what it refused failed
    /// (parked after `--max-attempts`), and reports each; `answers` in the order of the units
    /// that could be built, those after a lost connection missing (not marked).
    fn marked(
        &mut self,
        inbox: &mut dyn Inbox,
        batch: Claimed,
        answers: Vec<Answer>,
    ) -> Result<(), BatchError> {
        let units = batch.units;
        let mut answers = answers.into_iter();
        let mut published = Vec::new();
        let mut outcomes = Vec::with_capacity(units.len());
        for unit in &units {
            let answer = match &unit.sent {
                Ok(_) => match answers.next() {
                    Some(a) => a,
                    // Sent, not confirmed: the connection went; not marked.
                    None => break,
                },
                Err(why) => Answer::Refused(why.clone()),
            };
            if matches!(answer, Answer::Stored | Answer::Duplicate) {
                published.extend(unit.events.iter().map(|e| e.row));
            }
            outcomes.push((unit, answer));
        }
        inbox
            .mark_published(Outbox::Messages, &published)
            .context("cannot mark events published")
            .map_err(BatchError::Inbox)?;
        for (unit, answer) in outcomes {
            let rows: Vec<i64> = unit.events.iter().map(|e| e.row).collect();
            let parked = match &answer {
                Answer::Refused(why) => inbox
                    .mark_failed(
                        Outbox::Messages,
                        &rows,
                        why,
                        &self.pass,
                        self.args.max_attempts,
                    )
                    .context("cannot record a failed event")
                    .map_err(BatchError::Inbox)?,
                _ => 0,
            };
            self.report(unit, &answer, parked > 0);
        }
        self.out.flush();
        Ok(())
    }

    /// The next events, whole interchanges where they go out whole, leaving out `in_flight`.
    fn claim(&self, inbox: &dyn Inbox, in_flight: &[i64]) -> anyhow::Result<Vec<OutboxEvent>> {
        inbox
            .pending_events(
                &self.pass,
                self.args.retry_after,
                self.args.batch,
                self.payload == Payload::Interchange,
                in_flight,
            )
            .context("cannot read the outbox")
    }

    fn report(&mut self, unit: &Unit, answer: &Answer, parked: bool) {
        let e = &unit.events[0];
        let line = Line {
            status: "",
            id: &unit.id,
            subject: &unit.subject,
            event_type: &e.event_type,
            sender: &e.envelope.sender,
            recipient: &e.envelope.recipient,
            control_ref: &e.envelope.control_ref,
            message_refs: unit.events.iter().map(|e| e.message_ref.as_str()).collect(),
            error: None,
            attempts: None,
            tried: e.attempts,
            answering: None,
        };
        self.report_one(line, answer, parked);
    }

    /// Counts and prints what became of one event (or interchange, or CONTRL): `e` says what it
    /// was, the answer what became of it.
    fn report_one<'a>(&mut self, mut e: Line<'a>, answer: &'a Answer, parked: bool) {
        let (id, subject) = (e.id, e.subject);
        let (status, error) = match answer {
            Answer::Stored => ("published", None),
            Answer::Duplicate => ("duplicate", None),
            Answer::Refused(why) if parked => ("parked", Some(why.as_str())),
            Answer::Refused(why) => ("failed", Some(why.as_str())),
        };
        match answer {
            Answer::Stored => self.summary.published += 1,
            Answer::Duplicate => {
                self.summary.published += 1;
                self.summary.duplicates += 1;
            }
            Answer::Refused(_) => {
                self.summary.failed += 1;
                self.summary.parked += usize::from(parked);
            }
        }
        (e.status, e.error, e.attempts) = (status, error, error.map(|_| e.tried + 1));
        if self.args.json {
            self.out.json(&e);
            return;
        }
        if self.args.quiet && error.is_none() {
            return;
        }
        let what = match e.answering {
            Some((answered, send)) => format!("CONTRL answering ref {answered} (sending {send})"),
            None => format!("message {}", e.message_refs.join(",")),
        };
        let mut line = format!(
            "{status:<9}  {subject}  {} -> {}  ref {}  {what}  id {id}",
            e.sender, e.recipient, e.control_ref,
        );
        if let Some(why) = error {
            line.push_str(&format!(
                ": {why} (attempt {} of {})",
                e.tried + 1,
                self.args.max_attempts
            ));
        }
        self.out.line(&line);
    }

    /// The run's figures so far, for the metrics file at `path`.
    fn figures(
        &self,
        inbox: &dyn Inbox,
        stats: &crate::inbox::Stats,
        path: &std::path::Path,
    ) -> anyhow::Result<Metrics> {
        metrics(
            inbox,
            &self.summary,
            stats,
            self.started,
            self.last_success,
            path,
        )
    }

    /// With --follow, rewrites the metrics file (at most every [`METRICS_EVERY`]); a file that
    /// cannot be written is said, and the run goes on.
    fn metrics_now(&mut self, inbox: &dyn Inbox) {
        let Some(path) = &self.args.metrics_file else {
            return;
        };
        if self
            .metrics_written
            .is_some_and(|t| t.elapsed() < METRICS_EVERY)
        {
            return;
        }
        self.metrics_written = Some(Instant::now());
        let written = inbox
            .stats()
            .map_err(anyhow::Error::from)
            .and_then(|stats| self.figures(inbox, &stats, path))
            .and_then(|m| Ok(m.write_to(path)?));
        if let Err(e) = written {
            problem(
                &mut self.out,
                &format!("cannot write the metrics file {}: {e:#}", path.display()),
            );
        }
    }

    /// The summary and metrics; the status. Stopped by a signal, the run ends as asked: 0 (its
    /// refusals were reported as they came, and are in the metrics).
    fn finish(
        mut self,
        inbox: &dyn Inbox,
        destination: &dyn Destination,
        stopped: bool,
    ) -> anyhow::Result<ExitStatus> {
        let stats = inbox.stats()?;
        let s = &self.summary;
        if self.args.json {
            #[derive(Serialize)]
            struct Last<'a> {
                summary: &'a Summary,
                unpublished: i64,
                failed_total: i64,
                oldest_unpublished_age_seconds: Option<i64>,
            }
            self.out.json(&Last {
                summary: s,
                unpublished: stats.outbox_unpublished,
                failed_total: stats.outbox_failed,
                oldest_unpublished_age_seconds: stats.outbox_oldest_unpublished_age_seconds,
            });
        } else {
            self.out.line(&format!(
                "{} to {}: {} published ({} already there), {} failed ({} parked); {} unpublished, {} parked in all",
                count(s.published as u64 + s.failed as u64, "event", "events"),
                destination.shown(),
                s.published,
                s.duplicates,
                s.failed,
                s.parked,
                stats.outbox_unpublished,
                stats.outbox_failed,
            ));
        }
        self.out.flush();
        let mut metrics_failed = false;
        if let Some(path) = &self.args.metrics_file {
            let m = self.figures(inbox, &stats, path)?;
            if let Err(e) = m.write_to(path) {
                metrics_failed = true;
                problem(
                    &mut self.out,
                    &format!("cannot write the metrics file {}: {e}", path.display()),
                );
            }
        }
        let refused = if stopped { 0 } else { self.summary.failed };
        Ok(ExitStatus::from_problems(
            refused + usize::from(metrics_failed) + usize::from(self.out.failed()),
        ))
    }
}

fn metrics(
    inbox: &dyn Inbox,
    s: &Summary,
    stats: &crate::inbox::Stats,
    started: Instant,
    last_success: Option<f64>,
    path: &std::path::Path,
) -> anyhow::Result<Metrics> {
    // A run that has not got through yet (a publisher waiting for its broker) keeps the last
    // success the file already holds, so the alert on a stalled publisher sees the real age.
    let name = "edi_inbox_publish_last_success_timestamp_seconds";
    let last_success = last_success
        .or_else(|| crate::metrics::previous_value(path, name))
        .unwrap_or(0.0);
    let mut m = Metrics::default();
    m.family(
        "edi_inbox_publish_events_total",
        "counter",
        "Outbox events published, refused, and parked by edi-inbox publish since the database was created.",
    );
    for (outcome, counter) in [
        ("published", Counter::PublishPublished),
        ("failed", Counter::PublishFailed),
        ("parked", Counter::PublishParked),
    ] {
        m.sample(
            "edi_inbox_publish_events_total",
            &[("outcome", outcome)],
            inbox.counter(counter)? as f64,
        );
    }
    m.family(
        "edi_inbox_publish_last_run_events",
        "gauge",
        "Events (or interchanges) by outcome in the last publish run.",
    );
    for (outcome, n) in [
        ("published", s.published),
        ("duplicate", s.duplicates),
        ("failed", s.failed),
        ("parked", s.parked),
    ] {
        m.sample(
            "edi_inbox_publish_last_run_events",
            &[("outcome", outcome)],
            n as f64,
        );
    }
    // By kind: the received messages' events and the CONTRLs to deliver, so that the alerts on
    // a backlog or on parked events fire for either.
    let kinds = stats.outbox_kinds.each();
    for (name, help, value) in [
        (
            "edi_inbox_outbox_unpublished",
            "Outbox events not yet published (parked ones not counted), by kind (message, contrl).",
            (|f: &crate::inbox::OutboxFigures| f.unpublished) as fn(&_) -> i64,
        ),
        (
            "edi_inbox_outbox_failed",
            "Outbox events parked after --max-attempts refusals, by kind (message, contrl).",
            |f| f.failed,
        ),
        (
            "edi_inbox_outbox_oldest_unpublished_age_seconds",
            "Age of the oldest unpublished outbox event (0 when there is none), by kind.",
            |f| f.oldest_unpublished_age_seconds.unwrap_or(0),
        ),
    ] {
        m.family(name, "gauge", help);
        for (kind, figures) in &kinds {
            m.sample(name, &[("kind", kind)], value(figures) as f64);
        }
    }
    m.single(
        "edi_inbox_publish_last_run_duration_seconds",
        "gauge",
        "Wall time of the last publish run.",
        started.elapsed().as_secs_f64(),
    )
    .single(
        name,
        "gauge",
        "Unix time at which publish last got a batch through (with --follow, also a look at an empty outbox) without a destination error.",
        last_success,
    );
    Ok(m)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    /// A destination that keeps each batch in flight until its answers are asked for (as
    /// Kafka's producer does) and logs what it was asked, in order; asked for the answers of
    /// batch `lose`, it stores that batch's first record and is lost.
    struct Flying {
        log: Arc<Mutex<Vec<String>>>,
        /// The ids of each batch handed over, in order.
        handed_ids: Vec<Vec<String>>,
        flights: VecDeque<(usize, usize)>,
        handed: usize,
        lose: Option<usize>,
    }

    impl publish::Sink for Flying {
        fn send(&mut self, _: Vec<Outgoing>) -> (Vec<Answer>, Option<SinkError>) {
            panic!("a destination that takes batches in flight is handed them, never sent one")
        }

        fn hand_over(&mut self, batch: Vec<Outgoing>) -> Option<(Vec<Answer>, Option<SinkError>)> {
            self.handed += 1;
            self.log
                .lock()
                .unwrap()
                .push(format!("hand {}", self.handed));
            self.handed_ids
                .push(batch.iter().map(|o| o.id.clone()).collect());
            self.flights.push_back((self.handed, batch.len()));
            None
        }

        fn answers(&mut self) -> (Vec<Answer>, Option<SinkError>) {
            let (n, len) = self
                .flights
                .pop_front()
                .expect("answers of a batch in flight");
            self.log.lock().unwrap().push(format!("answers {n}"));
            if self.lose == Some(n) {
                let lost = SinkError::Lost(anyhow::anyhow!("the destination went away"));
                return (vec![Answer::Stored], Some(lost));
            }
            (vec![Answer::Stored; len], None)
        }
    }

    /// An inbox holding the events of `samples/valid`, and how many there are.
    fn inbox_of_the_samples(dir: &std::path::Path) -> (Box<dyn Inbox>, usize) {
        let db = Location::Sqlite(dir.join("inbox.db"));
        // A copy of its own: two runs reading the same files at once share them out.
        let samples = dir.join("samples");
        std::fs::create_dir(&samples).unwrap();
        let valid = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/valid");
        for file in std::fs::read_dir(valid).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), samples.join(file.file_name())).unwrap();
        }
        let samples = samples.to_str().unwrap();
        let cli = Cli::try_parse_from(["edi-inbox", "ingest", "-q", samples]).unwrap();
        let Command::Ingest(args) = &cli.command else {
            unreachable!()
        };
        super::super::ingest::run(&db, true, Duration::from_secs(5), args).unwrap();
        let inbox = crate::inbox::open(&db, Access::Write, Duration::from_secs(5)).unwrap();
        let events = pending(&*inbox);
        (inbox, events)
    }

    fn pending(inbox: &dyn Inbox) -> usize {
        pending_ids(inbox).len()
    }

    /// The ids of the events not marked published.
    fn pending_ids(inbox: &dyn Inbox) -> std::collections::BTreeSet<String> {
        inbox
            .pending_events("a later pass", Duration::ZERO, 5000, false, &[])
            .unwrap()
            .iter()
            .map(|e| publish::event_id(e, Payload::Message))
            .collect()
    }

    /// Publishes the inbox's events in batches of two to `sink`.
    fn publish_to(inbox: &mut dyn Inbox, sink: &mut Flying) -> Result<usize, BatchError> {
        let cli = Cli::try_parse_from([
            "edi-inbox",
            "publish",
            "--to",
            "dir:/nowhere",
            "-q",
            "--batch",
            "2",
        ])
        .unwrap();
        let Command::Publish(args) = &cli.command else {
            unreachable!()
        };
        let mut run = Run {
            args,
            payload: Payload::Message,
            template: Template::parse(&args.subject, None).unwrap(),
            out: Out::default(),
            summary: Summary::default(),
            pass: new_pass(),
            started: Instant::now(),
            last_success: None,
            metrics_written: None,
        };
        run.message_batches(inbox, sink, &None)
    }

    fn flying(lose: Option<usize>) -> (Flying, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Flying {
            log: log.clone(),
            handed_ids: Vec::new(),
            flights: VecDeque::new(),
            handed: 0,
            lose,
        };
        (sink, log)
    }

    /// A destination that takes batches in flight is handed the next batch before it is asked
    /// for the answers of the one before, never has more than two, and every event is marked
    /// at the end.
    #[test]
    fn the_next_batch_is_handed_over_before_the_answers_of_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let (mut inbox, events) = inbox_of_the_samples(dir.path());
        assert!(events >= 5, "the samples hold {events} events");
        let all = pending_ids(&*inbox);
        let (mut sink, log) = flying(None);
        let published = publish_to(&mut *inbox, &mut sink).unwrap_or_else(|_| panic!("failed"));
        assert_eq!(published, events);
        let batches = events.div_ceil(2);
        let mut want = Vec::new();
        for k in 1..=batches {
            want.push(format!("hand {k}"));
            if k > 1 {
                want.push(format!("answers {}", k - 1));
            }
        }
        want.push(format!("answers {batches}"));
        assert_eq!(*log.lock().unwrap(), want);
        assert_eq!(pending(&*inbox), 0, "every event marked");
        let handed: Vec<&String> = sink.handed_ids.iter().flatten().collect();
        assert_eq!(handed.len(), events, "each event handed over once");
        assert_eq!(
            handed
                .into_iter()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            all
        );
    }

    /// Lost while the answers of batch 2 come: batch 1 is marked, batch 2 as far as its
    /// answers go, and batch 3, in flight, not at all.
    #[test]
    fn a_lost_destination_leaves_the_batch_in_flight_after_it_unmarked() {
        let dir = tempfile::tempdir().unwrap();
        let (mut inbox, events) = inbox_of_the_samples(dir.path());
        assert!(events >= 5, "the samples hold {events} events");
        let all = pending_ids(&*inbox);
        let (mut sink, log) = flying(Some(2));
        let ended = publish_to(&mut *inbox, &mut sink);
        assert!(matches!(
            ended,
            Err(BatchError::Destination(SinkError::Lost(_)))
        ));
        assert_eq!(
            *log.lock().unwrap(),
            ["hand 1", "hand 2", "answers 1", "hand 3", "answers 2"]
        );
        // Exactly batch 1 and the first record of batch 2 are marked.
        let mut left = all.clone();
        for id in sink.handed_ids[0].iter().chain(&sink.handed_ids[1][..1]) {
            assert!(left.remove(id), "{id} handed over once");
        }
        assert_eq!(pending_ids(&*inbox), left);
        assert_eq!(left.len(), events - 3);
    }

    /// The events of one interchange share its envelope, read once; each interchange has its
    /// own, as it stands in its UNB.
    #[test]
    fn an_interchanges_events_share_its_envelope() {
        let dir = tempfile::tempdir().unwrap();
        let (inbox, _) = inbox_of_the_samples(dir.path());
        let events = inbox
            .pending_events("a pass", Duration::ZERO, 5000, false, &[])
            .unwrap();
        let mut seen: HashMap<i64, &OutboxEvent> = HashMap::new();
        for e in &events {
            match seen.get(&e.interchange_id) {
                Some(first) => assert!(Arc::ptr_eq(&first.envelope, &e.envelope)),
                None => {
                    assert!(
                        seen.values()
                            .all(|o| !Arc::ptr_eq(&o.envelope, &e.envelope))
                    );
                    seen.insert(e.interchange_id, e);
                }
            }
        }
        let invoic = events
            .iter()
            .find(|e| e.message_type == "INVOIC")
            .expect("the INVOIC sample's event");
        let want = crate::inbox::EventEnvelope {
            sender: "5412345000013".into(),
            sender_qualifier: Some("14".into()),
            recipient: "4012345000023".into(),
            recipient_qualifier: Some("14".into()),
            control_ref: "INV0001".into(),
            syntax_id: "UNOC".into(),
            syntax_version: "3".into(),
        };
        assert_eq!(*invoic.envelope, want);
        assert!(seen.len() > 1, "{} interchanges", seen.len());
    }
}
