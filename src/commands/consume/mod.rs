//! `edi-inbox consume`: the transactional inbox in front of a broker. Fetch a batch of
//! deliveries, decide their interchanges in one transaction exactly as `ingest` decides files,
//! commit, and only then acknowledge them. A crash anywhere before the acknowledgement has the
//! broker deliver them again, and the inbox decides them as duplicates.

mod batch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::ConsumeArgs;
use crate::consume::{self, Feed, Settle, Source};
use crate::exit::ExitStatus;
use crate::inbox::effects::HoldAhead;
use crate::inbox::names::Counter;
use crate::inbox::{Inbox, KeyProbe, Location};
use crate::intake::{self, AckPolicy, Outcome};
use crate::metrics::{Metrics, catalogue, unix_now};
use crate::output::{Out, count, problem};
use crate::publish::DeadLetter;
use crate::status::Status;

use super::service::{self, Failure, MetricsThrottle, Service, Step};

/// How long one fetch waits for deliveries, at most: the stop flag is looked at in between.
const FETCH_WAIT: Duration = Duration::from_secs(1);

/// How long one step goes on taking batch after batch while deliveries keep coming: the
/// service loop writes the metrics in between.
const PIPELINE_SPAN: Duration = Duration::from_secs(5);

/// How long a batch may wait on the inbox before the feed is told to keep its consumer alive
/// without taking deliveries (a consumer group's limit between polls).
const SLOW_INBOX: Duration = Duration::from_secs(1);

/// The run's counts.
#[derive(Debug, Default, Serialize)]
struct Summary {
    deliveries: usize,
    new: usize,
    duplicate: usize,
    drift: usize,
    rejected: usize,
    /// Interchanges the operator's side effects refused (kept whole for `reapply --refused`).
    refused: usize,
    /// Deliveries the broker had delivered before (after a crash or a lost acknowledgement).
    redelivered: usize,
    /// Records below the position the inbox keeps for their partition (a partitioned log): decided
    /// before, by this consumer before a crash or by another of its group, so not again.
    skipped: usize,
}

struct Run<'a> {
    args: &'a ConsumeArgs,
    out: Out,
    summary: Summary,
    dead_letter: Option<DeadLetter>,
    started: Instant,
    metrics: MetricsThrottle,
    /// Whether the feed is subscribed: false while the broker is away, the queue or consumer
    /// gone, and every try to subscribe again fails (the metrics say so, for the alert).
    subscribed: bool,
    /// Unix time of the last fetch that worked (a batch, or nothing to take).
    last_fetch: f64,
    /// Problems outside the outcomes (a metrics file not written).
    other_problems: usize,
    /// One look at the inbox's keys per preparing thread.
    probes: Vec<Option<Box<dyn KeyProbe + Send>>>,
    /// What the preparing threads hold of new messages for the side effects.
    hold: Option<HoldAhead>,
    /// How interchanges are answered, from `--contrl` and `--contrl-duplicates`.
    acks: AckPolicy,
    /// What the run keeps of the partitioned log it reads, once a feed has one.
    log: Option<consume::LogFigures>,
}

/// Runs `consume`.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &ConsumeArgs,
) -> anyhow::Result<ExitStatus> {
    let urls: Vec<&str> = std::iter::once(args.from.as_str())
        .chain(args.dead_letter.as_deref())
        .collect();
    let settings = match super::broker_settings(&args.broker, &urls) {
        Ok(s) => s,
        Err(e) => return super::usage(&e),
    };
    let source = match crate::brokers::source(&args.from, &settings) {
        Ok(s) => s,
        Err(e) => return super::usage_of("--from", &e),
    };
    // The dead-letter destination is read before anything is opened (a usage error), and
    // hears the stop flag once it exists.
    let mut dead_letter = match args
        .dead_letter
        .as_deref()
        .map(|t| DeadLetter::parse(t, &settings, None))
    {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return super::usage(&e),
    };
    if let Some(status) = intake::preflight::check(db, named, "consumed")? {
        return Ok(status);
    }
    let effects = super::effect_plan(&args.effects)?;
    let mut inbox = super::open_deciding(db, busy_timeout, effects.as_ref())?;
    let stop = super::stop_on_signals()?;
    if let Some(d) = &mut dead_letter {
        d.hear(Some(stop.clone()));
    }
    let positions = if source.keeps_positions() {
        let reader = inbox
            .position_reader()
            .context("cannot open a second connection to the inbox for the consumer's positions")?;
        Some(consume::PositionLookup(std::sync::Arc::new(
            std::sync::Mutex::new(reader),
        )))
    } else {
        None
    };
    let options = consume::Options {
        batch: args.batch as usize,
        ack_wait: args.ack_wait,
        group: args.group.clone(),
        positions,
        on_position_lost: match args.on_position_lost {
            crate::cli::PositionLostRule::Fail => consume::OnPositionLost::Fail,
            crate::cli::PositionLostRule::Earliest => consume::OnPositionLost::Earliest,
        },
    };
    let mut run = Run {
        args,
        out: Out::default(),
        summary: Summary::default(),
        dead_letter,
        started: Instant::now(),
        metrics: MetricsThrottle::default(),
        subscribed: false,
        last_fetch: unix_now(),
        other_problems: 0,
        acks: super::ack_policy(&args.acks, &args.effects),
        log: None,
        probes: (0..std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4)))
            .map(|_| inbox.probe())
            .collect(),
        hold: inbox.hold_ahead(),
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
        stop: &stop,
    };
    match service::run(&mut consumer, &settings, &stop) {
        Ok(_) => {}
        Err(Failure::Fatal(e)) => {
            run.out.flush();
            // The figures up to the failure (a position lost among them) for the alerts.
            run.metrics_now(&*inbox, Written::Failed);
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
    /// Set by a signal: no batch is fetched ahead once it is.
    stop: &'r AtomicBool,
}

impl Service for Consumer<'_, '_> {
    type Connection = Box<dyn Feed>;

    fn connect(&mut self) -> anyhow::Result<Box<dyn Feed>> {
        self.source.connect(self.options.clone())
    }

    /// A fetch, and while deliveries keep coming (for [`PIPELINE_SPAN`] at most, or until a
    /// signal), batch after batch: each decided and committed on a thread of its own while the
    /// next is fetched and prepared, as `ingest`'s readers read ahead of its decisions; each
    /// settled only once committed.
    fn step(&mut self, feed: &mut Box<dyn Feed>, wait: Duration) -> Result<Step, Failure> {
        let Consumer {
            run, inbox, stop, ..
        } = self;
        let max = run.args.batch as usize;
        // Known from the start, decided anything or not: the positions' series are written
        // every time (also where the first fetch ends the run).
        let group = feed.log().map(|log| log.group().to_string());
        if let Some(group) = &group
            && run.log.is_none()
        {
            run.log = Some(consume::LogFigures::new(group));
        }
        let fetched = feed.fetch(max, wait);
        run.take_log_counts(&mut **feed);
        let deliveries = match fetched {
            Ok(deliveries) => deliveries,
            Err(e) => {
                // The lag too, for the metrics the failure writes.
                run.look_at_watermarks(&mut **feed);
                return Err(run.fetch_failed(e, false));
            }
        };
        run.last_fetch = unix_now();
        if deliveries.is_empty() {
            run.look_at_watermarks(&mut **feed);
            if feed.log().is_some_and(|log| log.joining()) {
                return Ok(Step::Waiting);
            }
            // An idle consumer's file stays fresh too (the heartbeat): its last-batch time
            // says it is alive, and the status of a run before it does not linger.
            return Ok(Step::Idle);
        }
        let started = Instant::now();
        let mut next = Some(batch::prepare(
            deliveries,
            |tag| feed.unreadable(tag),
            &mut run.probes,
            run.hold.as_ref(),
        ));
        while let Some(current) = next.take() {
            let ahead = !stop.load(Ordering::Relaxed) && started.elapsed() < PIPELINE_SPAN;
            let acks = run.acks;
            let inbox: &mut dyn Inbox = &mut **inbox;
            let group = group.as_deref();
            // Where the inbox keeps the positions, the dead letters go out before the commit
            // (`batch::decide_and_commit`); elsewhere after it, before the acknowledgements.
            let mut early = match group {
                Some(_) => run.dead_letter.take(),
                None => None,
            };
            let (committed, fetched) = std::thread::scope(|scope| {
                let dead_letter = early.as_mut();
                let deciding = scope.spawn(move || {
                    batch::decide_and_commit(inbox, acks, group, current, dead_letter)
                });
                // Only what is there already: the batch being decided is not kept waiting.
                let fetched = ahead.then(|| feed.fetch(max, Duration::ZERO));
                let fetched = fetched.map(|f| {
                    f.map(|d| {
                        (!d.is_empty()).then(|| {
                            batch::prepare(
                                d,
                                |tag| feed.unreadable(tag),
                                &mut run.probes,
                                run.hold.as_ref(),
                            )
                        })
                    })
                });
                if let Err(e) = run.wait_for(&mut **feed, &deciding) {
                    // The feed failed while it only kept the consumer alive: the batch is
                    // still committed, and its acknowledgements tried.
                    problem(&mut run.out, &super::one_message(&e));
                }
                let committed = deciding
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                (committed, fetched)
            });
            let dead_lettered = early.is_some();
            if early.is_some() {
                run.dead_letter = early;
            }
            let settled = run.settle(&mut **feed, committed?, dead_lettered);
            run.take_log_counts(&mut **feed);
            settled?;
            match fetched {
                None | Some(Ok(None)) => {}
                Some(Ok(Some(prepared))) => {
                    run.last_fetch = unix_now();
                    next = Some(prepared);
                }
                // Committed and settled so far: what was fetched ahead comes again.
                Some(Err(e)) => return Err(run.fetch_failed(e, true)),
            }
        }
        run.look_at_watermarks(&mut **feed);
        Ok(Step::Progress)
    }

    fn heartbeat(&mut self) {
        self.run.metrics_now(&*self.inbox, Written::Progress);
    }

    fn problem(&mut self, text: &str) {
        problem(&mut self.run.out, text);
    }

    fn connected(&mut self, yes: bool) {
        self.run.subscribed = yes;
    }
}

impl Run<'_> {
    /// What a failed fetch means: positions the log no longer holds end the run
    /// (`--on-position-lost fail`); anything else is a connection to make again.
    fn fetch_failed(&mut self, error: anyhow::Error, progressed: bool) -> Failure {
        if error.downcast_ref::<consume::PositionsLost>().is_some() {
            return Failure::Fatal(error);
        }
        Failure::Lost { error, progressed }
    }

    /// Takes the log's counts since it was last asked, where the feed reads one.
    fn take_log_counts(&mut self, feed: &mut dyn Feed) {
        if let (Some(figures), Some(log)) = (&mut self.log, feed.log()) {
            figures.take_counts(log);
        }
    }

    /// Takes the log's high watermarks of its partitions, where a metrics file is written.
    fn look_at_watermarks(&mut self, feed: &mut dyn Feed) {
        if self.args.metrics_file.is_none() {
            return;
        }
        if let (Some(figures), Some(log)) = (&mut self.log, feed.log()) {
            figures.look_at_watermarks(log);
        }
    }

    /// Waits for the batch being decided; when the inbox is slow, the feed keeps its consumer
    /// alive meanwhile without taking deliveries (and says so once).
    fn wait_for<T>(
        &mut self,
        feed: &mut dyn Feed,
        deciding: &std::thread::ScopedJoinHandle<'_, T>,
    ) -> anyhow::Result<()> {
        let waiting = Instant::now();
        while !deciding.is_finished() && waiting.elapsed() < SLOW_INBOX {
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut held = false;
        while !deciding.is_finished() {
            if let Some(said) = feed.hold(Duration::from_millis(100))? {
                problem(&mut self.out, &said);
            }
            held = true;
        }
        if held {
            feed.release()?;
        }
        Ok(())
    }

    /// Reports a committed batch, dead-letters its rejected deliveries (with `--dead-letter`),
    /// then acknowledges them all.
    fn settle(
        &mut self,
        feed: &mut dyn Feed,
        committed: batch::Committed,
        dead_lettered: bool,
    ) -> Result<(), Failure> {
        let batch::Committed { decided, skipped } = committed;
        let mut settled = Vec::with_capacity(decided.len() + skipped.len());
        self.summary.skipped += skipped.len();
        settled.extend(skipped.iter().map(|tag| (*tag, Settle::Ack)));
        let mut rejected_tags = Vec::new();
        for (d, outcomes) in &decided {
            self.summary.deliveries += 1;
            if d.delivery_count > 1 {
                self.summary.redelivered += 1;
            }
            for o in outcomes {
                self.report(o);
            }
            if outcomes.iter().any(|o| o.rejection().is_some()) {
                rejected_tags.push(d.tag);
            } else {
                settled.push((d.tag, Settle::Ack));
            }
        }
        self.out.flush();
        let rejected = if dead_lettered {
            Vec::new()
        } else {
            batch::rejected_of(&decided)
        };
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
            Status::Refused => self.summary.refused += 1,
        }
        if self.args.json {
            self.out.json(o);
        } else if !self.args.quiet || o.status().is_problem() {
            for line in o.human_lines() {
                self.out.line(&line);
            }
        }
    }

    /// Writes the metrics file where one is asked for: after a batch at most every
    /// [`service::METRICS_EVERY`], and at the end.
    fn metrics_now(&mut self, inbox: &dyn Inbox, when: Written) {
        let Some(path) = &self.args.metrics_file else {
            return;
        };
        if !self.metrics.due(when != Written::Progress) {
            return;
        }
        let state = FeedState {
            subscribed: self.subscribed,
            last_fetch: self.last_fetch,
            log: self.log.as_ref(),
        };
        let last = when == Written::Last;
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
        self.metrics_now(inbox, Written::Last);
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else {
            let refused = match s.refused {
                0 => String::new(),
                n => format!(", {n} refused"),
            };
            self.out.line(&crate::output::stamped(&format!(
                "{}: {} new, {} duplicate, {} drift, {} rejected{refused} ({} redelivered{})",
                count(s.deliveries as u64, "delivery", "deliveries"),
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
                s.redelivered,
                if s.skipped > 0 {
                    format!(", {} skipped as decided before", s.skipped)
                } else {
                    String::new()
                }
            )));
        }
        self.out.flush();
        ExitStatus::from_problems(
            s.drift + s.rejected + s.refused + self.other_problems + usize::from(self.out.failed()),
        )
    }
}

/// When the metrics file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// After a batch, or while idle: at most every [`service::METRICS_EVERY`].
    Progress,
    /// At the end of a run that did not fail (its success time with it).
    Last,
    /// As a fatal failure ends the run.
    Failed,
}

/// Whether the feed is subscribed, when a fetch last worked, and what the run keeps of the
/// partitioned log it reads, where it reads one.
#[derive(Clone, Copy)]
struct FeedState<'a> {
    subscribed: bool,
    last_fetch: f64,
    log: Option<&'a consume::LogFigures>,
}

/// The run's figures for Prometheus: the inbox's cumulative delivery counters, this run's
/// outcomes so far, whether it is subscribed, and when a fetch last worked.
fn write_metrics(
    path: &std::path::Path,
    inbox: &dyn Inbox,
    s: &Summary,
    started: Instant,
    state: FeedState<'_>,
    last: bool,
) -> anyhow::Result<()> {
    let mut m = Metrics::default();
    if let Some(log) = state.log {
        log.write(inbox, s.skipped, &mut m)?;
    }
    m.single(
        &catalogue::CONSUME_DELIVERIES_TOTAL,
        inbox.counter(Counter::ConsumeDeliveries)? as f64,
    )
    .single(
        &catalogue::CONSUME_REDELIVERED_TOTAL,
        inbox.counter(Counter::ConsumeRedelivered)? as f64,
    )
    .outcomes(
        &catalogue::CONSUME_RUN_INTERCHANGES,
        &[
            ("new", s.new),
            ("duplicate", s.duplicate),
            ("drift", s.drift),
            ("rejected", s.rejected),
            ("refused", s.refused),
        ],
    )
    .single(&catalogue::CONSUME_RUN_DELIVERIES, s.deliveries as f64)
    .single(
        &catalogue::CONSUME_RUN_DURATION_SECONDS,
        started.elapsed().as_secs_f64(),
    )
    .single(
        &catalogue::CONSUME_LAST_BATCH_TIMESTAMP_SECONDS,
        state.last_fetch,
    )
    .single(
        &catalogue::CONSUME_SUBSCRIBED,
        if state.subscribed { 1.0 } else { 0.0 },
    );
    // Not the inbox's size: that is ingest's figure, and node_exporter drops a series that two
    // files on one host both hold.
    if last {
        m.single(
            &catalogue::CONSUME_LAST_SUCCESS_TIMESTAMP_SECONDS,
            unix_now(),
        );
    }
    m.write_to(path)?;
    Ok(())
}
