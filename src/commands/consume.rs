//! `edi-inbox consume`: the transactional inbox in front of a broker. Fetch a batch of
//! deliveries, decide their interchanges in one transaction exactly as `ingest` decides files,
//! commit, and only then acknowledge them. A crash anywhere before the acknowledgement has the
//! broker deliver them again, and the inbox decides them as duplicates.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::ConsumeArgs;
use crate::consume::{self, Delivery, Feed, Settle, Source};
use crate::exit::ExitStatus;
use crate::inbox::names::Counter;
use crate::inbox::{Access, DeliveryRecord, Inbox, KeyProbe, Location};
use crate::intake::{self, AckPolicy, Outcome, Parsed};
use crate::metrics::{Metrics, unix_now};
use crate::output::{Out, count, problem};
use crate::publish::{DeadLetter, Rejected};
use crate::status::Status;

use super::service::{self, Failure, Service, Step};

/// How long one fetch waits for deliveries, at most: the stop flag is looked at in between.
const FETCH_WAIT: Duration = Duration::from_secs(1);

/// How often a long run writes its metrics file, at most.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// The run's counts.
#[derive(Debug, Default, Serialize)]
struct Summary {
    deliveries: usize,
    new: usize,
    duplicate: usize,
    drift: usize,
    rejected: usize,
    /// Deliveries the broker had delivered before (after a crash or a lost acknowledgement).
    redelivered: usize,
}

struct Run<'a> {
    args: &'a ConsumeArgs,
    out: Out,
    summary: Summary,
    dead_letter: Option<DeadLetter>,
    started: Instant,
    metrics_written: Option<Instant>,
    /// Whether the feed is subscribed: false while the broker is away, the queue or consumer
    /// gone, and every try to subscribe again fails (the metrics say so, for the alert).
    subscribed: bool,
    /// Unix time of the last fetch that worked (a batch, or nothing to take).
    last_fetch: f64,
    /// Problems outside the outcomes (a metrics file not written).
    other_problems: usize,
    /// One look at the inbox's keys per preparing thread.
    probes: Vec<Option<Box<dyn KeyProbe + Send>>>,
    /// How interchanges are answered, from `--contrl` and `--contrl-duplicates`.
    acks: AckPolicy,
}

/// Runs `consume`.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &ConsumeArgs,
) -> anyhow::Result<ExitStatus> {
    let source = match consume::parse(&args.from) {
        Ok(s) => s,
        Err(e) => return super::usage(&format!("--from: {e}")),
    };
    // The dead-letter destination is read before anything is opened (a usage error), and
    // hears the stop flag once it exists.
    let mut dead_letter = match args
        .dead_letter
        .as_deref()
        .map(|t| DeadLetter::parse(t, None))
    {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return super::usage(&e),
    };
    if let Some(status) = intake::preflight::check(db, named, "consumed")? {
        return Ok(status);
    }
    let mut inbox = super::open_inbox(db, Access::Create, busy_timeout)?;
    let stop = super::stop_on_signals()?;
    if let Some(d) = &mut dead_letter {
        d.hear(Some(stop.clone()));
    }
    let options = consume::Options {
        batch: args.batch as usize,
        ack_wait: args.ack_wait,
    };
    let mut run = Run {
        args,
        out: Out::default(),
        summary: Summary::default(),
        dead_letter,
        started: Instant::now(),
        metrics_written: None,
        subscribed: false,
        last_fetch: unix_now(),
        other_problems: 0,
        acks: AckPolicy::from(&args.acks),
        probes: (0..std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4)))
            .map(|_| inbox.probe())
            .collect(),
    };
    inbox.start_run();
    // Not subscribed (the broker away, the queue or consumer gone): the loop subscribes again,
    // each try said, with backoff, for as long as it takes; a run with --until-idle gives up
    // once it has waited that long.
    let settings = service::Settings {
        reconnect: true,
        idle: service::Idle::Pause(Duration::ZERO),
        step_wait: FETCH_WAIT,
        until_idle: args.until_idle,
        ..service::Settings::default()
    };
    let mut consumer = Consumer {
        run: &mut run,
        inbox: &mut *inbox,
        source: &*source,
        options,
    };
    match service::run(&mut consumer, &settings, &stop) {
        Ok(_) => {}
        Err(Failure::Fatal(e)) => {
            run.out.flush();
            return Err(e);
        }
        // Idle because the broker is gone is not idle: that run failed.
        Err(Failure::Lost { error, .. }) => {
            run.out.flush();
            return Err(error.context(format!(
                "{} did not answer for --until-idle",
                source.shown()
            )));
        }
    }
    inbox.end_run();
    Ok(run.finish(&*inbox))
}

/// The run as the service loop drives it: a step is a fetch and its batch.
struct Consumer<'r, 'a> {
    run: &'r mut Run<'a>,
    inbox: &'r mut dyn Inbox,
    source: &'r dyn Source,
    options: consume::Options,
}

impl Service for Consumer<'_, '_> {
    type Connection = Box<dyn Feed>;

    fn connect(&mut self) -> anyhow::Result<Box<dyn Feed>> {
        self.source.connect(self.options)
    }

    fn step(&mut self, feed: &mut Box<dyn Feed>, wait: Duration) -> Result<Step, Failure> {
        let deliveries = feed
            .fetch(self.run.args.batch as usize, wait)
            .map_err(Failure::lost)?;
        self.run.last_fetch = unix_now();
        if deliveries.is_empty() {
            // An idle consumer's file stays fresh too (the heartbeat): its last-batch time
            // says it is alive, and the status of a run before it does not linger.
            return Ok(Step::Idle);
        }
        self.run.batch(&mut *self.inbox, &mut **feed, deliveries)?;
        Ok(Step::Progress)
    }

    fn heartbeat(&mut self) {
        self.run.metrics_now(&*self.inbox, false);
    }

    fn problem(&mut self, text: &str) {
        problem(&mut self.run.out, text);
    }

    fn connected(&mut self, yes: bool) {
        self.run.subscribed = yes;
    }
}

/// The inbox failed: nothing of the batch is kept, the run ends.
fn not_committed(e: anyhow::Error) -> Failure {
    Failure::Fatal(e.context(
        "nothing of the batch was committed or acknowledged; the broker delivers it again",
    ))
}

impl Run<'_> {
    /// Decides a batch of deliveries, commits, reports, dead-letters the rejected ones (with
    /// `--dead-letter`), then acknowledges them all.
    fn batch(
        &mut self,
        inbox: &mut dyn Inbox,
        feed: &mut dyn Feed,
        deliveries: Vec<Delivery>,
    ) -> Result<(), Failure> {
        let when = crate::clock::now();
        let bodies: Vec<&[u8]> = deliveries.iter().map(|d| &d.body[..]).collect();
        let items = intake::prepare::in_parallel(&bodies, &mut self.probes);
        // A delivery holding rejected input is recorded under its hash.
        let hashes: Vec<Option<String>> = bodies
            .iter()
            .zip(&items)
            .map(|(bytes, items)| intake::prepare::hash_if_rejected(bytes, items))
            .collect();
        let sources: Vec<Parsed<'_>> = deliveries
            .iter()
            .zip(items)
            .zip(&hashes)
            .map(|((d, items), sha256)| Parsed {
                source: intake::Source::Delivery {
                    name: d.source.clone(),
                    filename: d.filename.clone(),
                    delivery_count: d.delivery_count,
                },
                bytes: &d.body,
                items,
                sha256: sha256.as_deref(),
            })
            .collect();
        let outcomes = intake::decide(inbox, &sources, &when, self.acks).map_err(not_committed)?;
        // A delivery's bytes are kept nowhere but in the inbox.
        intake::keep_refused(inbox, &sources, &outcomes, &when).map_err(not_committed)?;
        drop(sources);
        let records: Vec<DeliveryRecord<'_>> = deliveries
            .iter()
            .map(|d| DeliveryRecord {
                source: &d.source,
                filename: d.filename.as_deref(),
                delivery_count: d.delivery_count,
                size: d.body.len(),
            })
            .collect();
        inbox
            .record_deliveries(&records, &when)
            .context("cannot write to the inbox database")
            .map_err(not_committed)?;
        inbox
            .commit()
            .context("cannot commit to the inbox database")
            .map_err(not_committed)?;
        crash_point!("consume-after-commit");
        let mut settled = Vec::with_capacity(deliveries.len());
        let mut rejected = Vec::new();
        let mut rejected_tags = Vec::new();
        for (d, outcomes) in deliveries.iter().zip(outcomes) {
            self.summary.deliveries += 1;
            if d.delivery_count > 1 {
                self.summary.redelivered += 1;
            }
            let reasons: Vec<String> = outcomes.iter().filter_map(Outcome::rejection).collect();
            for o in &outcomes {
                self.report(o);
            }
            if reasons.is_empty() {
                settled.push((d.tag, Settle::Ack));
            } else {
                rejected.push(Rejected {
                    source: &d.source,
                    subject: &d.subject,
                    filename: d.filename.as_deref(),
                    body: &d.body,
                    reason: reasons.join("; "),
                });
                rejected_tags.push(d.tag);
            }
        }
        self.out.flush();
        if let Some(dl) = &mut self.dead_letter
            && !rejected.is_empty()
            && let Err(e) = dl.send(&rejected)
        {
            // The others are done with (an acknowledgement lost here only brings them again);
            // the rejected ones come again, and are recorded again (a rejection counts its
            // sightings).
            let _ = feed.settle(&settled);
            return Err(Failure::Fatal(e.context(
                "the rejected deliveries were recorded but not acknowledged; the broker delivers them again",
            )));
        }
        settled.extend(rejected_tags.into_iter().map(|tag| (tag, Settle::Reject)));
        crash_point!("consume-before-ack");
        feed.settle(&settled).map_err(|e| Failure::Lost {
            error: e.context(
                "the batch was committed; the deliveries not acknowledged come again and are decided as duplicates",
            ),
            progressed: true,
        })
    }

    fn report(&mut self, o: &Outcome) {
        match o.status() {
            Status::New => self.summary.new += 1,
            Status::Duplicate => self.summary.duplicate += 1,
            Status::Drift => self.summary.drift += 1,
            Status::Rejected | Status::Failed | Status::Skipped => self.summary.rejected += 1,
        }
        if self.args.json {
            self.out.json(o);
        } else if !self.args.quiet || o.status().is_problem() {
            self.out.line(&o.human());
        }
    }

    /// Writes the metrics file where one is asked for: after a batch at most every
    /// [`METRICS_EVERY`], and at the end (`last`).
    fn metrics_now(&mut self, inbox: &dyn Inbox, last: bool) {
        let Some(path) = &self.args.metrics_file else {
            return;
        };
        if !last
            && self
                .metrics_written
                .is_some_and(|t| t.elapsed() < METRICS_EVERY)
        {
            return;
        }
        self.metrics_written = Some(Instant::now());
        let state = FeedState {
            subscribed: self.subscribed,
            last_fetch: self.last_fetch,
        };
        if let Err(e) = write_metrics(path, inbox, &self.summary, self.started, state, last) {
            self.other_problems += usize::from(last);
            problem(
                &mut self.out,
                &format!("cannot write the metrics file {}: {e:#}", path.display()),
            );
        }
    }

    /// The summary and metrics; the status: 3 where anything was rejected or drifted, else 0
    /// (also when a signal stopped the run).
    fn finish(mut self, inbox: &dyn Inbox) -> ExitStatus {
        self.metrics_now(inbox, true);
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else {
            self.out.line(&format!(
                "{}: {} new, {} duplicate, {} drift, {} rejected ({} redelivered)",
                count(s.deliveries as u64, "delivery", "deliveries"),
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
                s.redelivered
            ));
        }
        self.out.flush();
        ExitStatus::from_problems(
            s.drift + s.rejected + self.other_problems + usize::from(self.out.failed()),
        )
    }
}

/// Whether the feed is subscribed, and when a fetch last worked.
#[derive(Clone, Copy)]
struct FeedState {
    subscribed: bool,
    last_fetch: f64,
}

/// The run's figures for Prometheus: the inbox's cumulative delivery counters, this run's
/// outcomes so far, whether it is subscribed, and when a fetch last worked.
fn write_metrics(
    path: &std::path::Path,
    inbox: &dyn Inbox,
    s: &Summary,
    started: Instant,
    state: FeedState,
    last: bool,
) -> anyhow::Result<()> {
    let mut m = Metrics::default();
    m.single(
        "edi_inbox_consume_deliveries_total",
        "counter",
        "Deliveries edi-inbox consume took from a broker since the database was created.",
        inbox.counter(Counter::ConsumeDeliveries)? as f64,
    )
    .single(
        "edi_inbox_consume_redelivered_total",
        "counter",
        "Of those, deliveries the broker had delivered before (after a crash or a lost acknowledgement).",
        inbox.counter(Counter::ConsumeRedelivered)? as f64,
    )
    .outcomes(
        "edi_inbox_consume_run_interchanges",
        "Outcomes of the current (or last) consume run so far.",
        &[
            ("new", s.new),
            ("duplicate", s.duplicate),
            ("drift", s.drift),
            ("rejected", s.rejected),
        ],
    )
    .single(
        "edi_inbox_consume_run_deliveries",
        "gauge",
        "Deliveries the current (or last) consume run took.",
        s.deliveries as f64,
    )
    .single(
        "edi_inbox_consume_run_duration_seconds",
        "gauge",
        "Wall time of the current (or last) consume run so far.",
        started.elapsed().as_secs_f64(),
    )
    .single(
        "edi_inbox_consume_last_batch_timestamp_seconds",
        "gauge",
        "Unix time at which a fetch of consume last worked: a batch taken, or nothing there to take (not while it is not subscribed).",
        state.last_fetch,
    )
    .single(
        "edi_inbox_consume_subscribed",
        "gauge",
        "1 while consume is subscribed to its source, 0 while it is not (the broker away, the queue or consumer gone) and tries again.",
        if state.subscribed { 1.0 } else { 0.0 },
    );
    // Not the inbox's size: that is ingest's figure, and node_exporter drops a series that two
    // files on one host both hold.
    if last {
        m.single(
            "edi_inbox_consume_last_success_timestamp_seconds",
            "gauge",
            "Unix time at which the last consume run finished without a fatal error.",
            unix_now(),
        );
    }
    m.write_to(path)?;
    Ok(())
}
