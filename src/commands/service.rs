//! The loop a long run is driven by (`publish`, `consume`, and each transport after them): it
//! connects, runs steps, backs off and connects again when a connection goes, pauses when there
//! is nothing to do, ends when asked (a signal), when done, or after a while without progress,
//! and writes the metrics in between. Written once so that every command retries, throttles and
//! stops the same way, and a new transport only writes its [`Service`]. Every wait in it is
//! bounded: each step by [`Settings::step_wait`], each pause by the backoff or the poll.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the first wait after a failure is; it doubles with each failure in a row.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// How long to wait before connecting again, at most.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It took something in or sent something out.
    Progress,
    /// There was nothing to do.
    Idle,
    /// Nothing yet, and not idle: the peer has not given it its work yet (a Kafka consumer
    /// waiting for its group to give it partitions). `--until-idle` counts from its end; the
    /// service says it for a bounded time only.
    Waiting,
}

/// How a step (or a connection) failed: the only distinction the loop makes.
#[derive(Debug)]
pub enum Failure {
    /// The inbox, or a peer that cannot take what it is sent as it is set up: the run ends,
    /// retrying would not mend it.
    Fatal(anyhow::Error),
    /// The connection went (a restart, a network failure, a queue deleted): nothing unconfirmed
    /// was kept, and a run that reconnects makes it again.
    Lost {
        error: anyhow::Error,
        /// Whether the step got something done before (a batch committed, its acknowledgement
        /// lost): that counts as progress for [`Settings::until_idle`].
        progressed: bool,
    },
}

impl Failure {
    /// A lost connection, before anything of the step was done.
    pub fn lost(error: anyhow::Error) -> Failure {
        Failure::Lost {
            error,
            progressed: false,
        }
    }
}

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Nothing left to do (an empty outbox without `--follow`, `--until-idle` gone by).
    Done,
    /// A signal asked it to.
    Stopped,
}

/// What a step does when it finds nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// The run is done.
    End,
    /// Wait this long (nothing, when the step itself waited for input) and step again.
    Pause(Duration),
}

/// A command as the loop drives it.
pub trait Service {
    /// The connection a step works on: a feed, a sink.
    type Connection;

    /// Connects (each wait bounded by the broker's own timeout).
    fn connect(&mut self) -> anyhow::Result<Self::Connection>;

    /// Does one batch, waiting at most `wait` for input.
    fn step(&mut self, connection: &mut Self::Connection, wait: Duration) -> Result<Step, Failure>;

    /// After each step and each failed connection: the metrics, written as often as the
    /// command's throttle lets them be.
    fn heartbeat(&mut self);

    /// Says a problem the run goes on after (with the wait before it tries again).
    fn problem(&mut self, text: &str);

    /// Whether the run is connected, for a gauge: false from a lost connection until a new one
    /// is made.
    fn connected(&mut self, _yes: bool) {}

    /// The time `--until-idle` and the pauses are measured by: the machine's monotonic clock.
    /// A unit test gives a clock of its own, so that what it proves does not hang on how fast
    /// a loaded machine runs it.
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// How a command is driven.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Whether a first connection that fails is tried again (a service), or ends the run with
    /// its error (a run from cron, which says at once what is wrong).
    pub retry_first_connect: bool,
    /// Whether a lost connection is made again, or ends the run with [`Failure::Lost`].
    pub reconnect: bool,
    /// What a step that found nothing to do leads to.
    pub idle: Idle,
    /// How long one step may wait for input, at most: the stop flag is looked at in between.
    pub step_wait: Duration,
    /// With no progress for this long, the run is done; if the connection was down all the
    /// while, it ends with [`Failure::Lost`] instead: idle because the peer is gone is not idle.
    pub until_idle: Option<Duration>,
    /// Said after "reconnecting in ..." (what a lost connection left behind).
    pub lost_note: &'static str,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            retry_first_connect: false,
            reconnect: false,
            idle: Idle::End,
            step_wait: Duration::from_secs(1),
            until_idle: None,
            lost_note: "",
            first_backoff: FIRST_BACKOFF,
            max_backoff: MAX_BACKOFF,
        }
    }
}

/// How often a long run writes its metrics file, at most: a scrape every 15 s or more sees a
/// fresh one, and a busy run does not spend itself on rewriting it.
pub const METRICS_EVERY: Duration = Duration::from_secs(10);

/// When the metrics file is written next: every long run (`publish --follow`, `consume`,
/// `receive`) asks it after each step, and writes only when it says so.
#[derive(Debug, Default)]
pub struct MetricsThrottle {
    written: Option<Instant>,
}

impl MetricsThrottle {
    /// Whether to write now: always at the end of the run (`last`) and the first time, else
    /// where [`METRICS_EVERY`] has gone by since the last write. Saying yes counts as a write.
    pub fn due(&mut self, last: bool) -> bool {
        if !last && self.written.is_some_and(|t| t.elapsed() < METRICS_EVERY) {
            return false;
        }
        self.written = Some(Instant::now());
        true
    }
}

/// The wait before the next try: doubling from the first, up to the most.
struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The wait now; the next one is twice as long.
    fn take(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A pause that never outlasts what is left of `--until-idle` (`quiet` of it gone since the
/// last progress), so that such a run ends on time.
fn capped(pause: Duration, settings: &Settings, quiet: Duration) -> Duration {
    match settings.until_idle {
        Some(idle) => pause.min(idle.saturating_sub(quiet)),
        None => pause,
    }
}

/// Runs `service` until it is done, stopped, or fails.
pub fn run<S: Service>(
    service: &mut S,
    settings: &Settings,
    stop: &AtomicBool,
) -> Result<End, Failure> {
    let mut backoff = Backoff::new(settings.first_backoff, settings.max_backoff);
    let mut connection = None;
    // The last failure to reach the peer, until a step works again.
    let mut down: Option<anyhow::Error> = None;
    let mut first = true;
    let mut last_progress = service.now();
    let quiet = |service: &S, last_progress: Instant| {
        service.now().saturating_duration_since(last_progress)
    };
    while !stop.load(Ordering::Relaxed) {
        let wait = match settings.until_idle {
            Some(idle) => idle
                .saturating_sub(quiet(service, last_progress))
                .min(settings.step_wait),
            None => settings.step_wait,
        };
        if settings.until_idle.is_some() && wait.is_zero() {
            return match down {
                Some(error) => Err(Failure::lost(error)),
                None => Ok(End::Done),
            };
        }
        let Some(c) = connection.as_mut() else {
            match service.connect() {
                Ok(c) => {
                    connection = Some(c);
                    service.connected(true);
                }
                // Stopped while waiting for the peer: the run ends as asked.
                Err(_) if stop.load(Ordering::Relaxed) => break,
                Err(e) if first && !settings.retry_first_connect => return Err(Failure::Fatal(e)),
                Err(e) => {
                    let pause = capped(backoff.take(), settings, quiet(service, last_progress));
                    service.problem(&format!(
                        "{}; trying again in {}",
                        super::one_message(&e),
                        humantime::format_duration(pause)
                    ));
                    down = Some(e);
                    service.heartbeat();
                    super::sleep_unless(stop, pause);
                }
            }
            first = false;
            continue;
        };
        match service.step(c, wait) {
            Ok(Step::Progress) => {
                down = None;
                last_progress = service.now();
                backoff.reset();
                service.heartbeat();
            }
            Ok(Step::Waiting) => {
                down = None;
                last_progress = service.now();
                backoff.reset();
                service.heartbeat();
            }
            Ok(Step::Idle) => {
                // The peer answered: a failure after this one starts from the first wait.
                down = None;
                backoff.reset();
                service.heartbeat();
                match settings.idle {
                    Idle::End => return Ok(End::Done),
                    Idle::Pause(d) => super::sleep_unless(stop, d),
                }
            }
            Err(Failure::Fatal(e)) => return Err(Failure::Fatal(e)),
            Err(Failure::Lost { error, progressed }) => {
                if !settings.reconnect {
                    return Err(Failure::Lost { error, progressed });
                }
                if progressed {
                    last_progress = service.now();
                }
                let pause = capped(backoff.take(), settings, quiet(service, last_progress));
                service.problem(&format!(
                    "{}; reconnecting in {}{}",
                    super::one_message(&error),
                    humantime::format_duration(pause),
                    settings.lost_note
                ));
                down = Some(error);
                connection = None;
                service.connected(false);
                service.heartbeat();
                super::sleep_unless(stop, pause);
            }
        }
    }
    Ok(End::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A service that plays a script: each connect and each step takes the next answer.
    #[derive(Default)]
    struct Script {
        connects: VecDeque<bool>,
        steps: VecDeque<Result<Step, &'static str>>,
        said: Vec<String>,
        heartbeats: usize,
        gauge: Vec<bool>,
        /// Set when the script runs out, so a run that would go on forever ends.
        stop_at_end: Option<std::sync::Arc<AtomicBool>>,
        /// A clock of the script's own (its start, and the time gone by on it), where given:
        /// each connect takes [`CONNECT_TAKES`] of it and nothing else any, so that what a test
        /// of `--until-idle` proves does not depend on how fast the machine runs it.
        clock: Option<(Instant, Duration)>,
    }

    /// How long a connect takes on a script's own clock.
    const CONNECT_TAKES: Duration = Duration::from_millis(10);

    impl Service for Script {
        type Connection = ();
        fn connect(&mut self) -> anyhow::Result<()> {
            if let Some((_, gone)) = &mut self.clock {
                *gone += CONNECT_TAKES;
            }
            match self.connects.pop_front() {
                Some(true) | None => Ok(()),
                Some(false) => anyhow::bail!("connection refused"),
            }
        }
        fn step(&mut self, _: &mut (), wait: Duration) -> Result<Step, Failure> {
            assert!(
                wait <= Duration::from_secs(1),
                "every wait bounded: {wait:?}"
            );
            match self.steps.pop_front() {
                Some(Ok(s)) => Ok(s),
                Some(Err("fatal")) => Err(Failure::Fatal(anyhow::anyhow!("disk full"))),
                Some(Err("lost after")) => Err(Failure::Lost {
                    error: anyhow::anyhow!("ack lost"),
                    progressed: true,
                }),
                Some(Err(_)) => Err(Failure::lost(anyhow::anyhow!("broker gone"))),
                None => {
                    if let Some(s) = &self.stop_at_end {
                        s.store(true, Ordering::Relaxed);
                    }
                    Ok(Step::Idle)
                }
            }
        }
        fn heartbeat(&mut self) {
            self.heartbeats += 1;
        }
        fn problem(&mut self, text: &str) {
            self.said.push(text.to_string());
        }
        fn connected(&mut self, yes: bool) {
            self.gauge.push(yes);
        }
        fn now(&self) -> Instant {
            match self.clock {
                Some((start, gone)) => start + gone,
                None => Instant::now(),
            }
        }
    }

    fn quick() -> Settings {
        Settings {
            first_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(4),
            step_wait: Duration::from_millis(10),
            ..Settings::default()
        }
    }

    #[test]
    fn a_run_from_cron_ends_when_idle_and_fails_on_the_first_error() {
        let stop = AtomicBool::new(false);
        let mut s = Script {
            steps: [Ok(Step::Progress), Ok(Step::Progress), Ok(Step::Idle)].into(),
            ..Script::default()
        };
        assert_eq!(run(&mut s, &quick(), &stop).unwrap(), End::Done);
        assert_eq!(s.heartbeats, 3);
        assert!(s.steps.is_empty() && s.said.is_empty());

        let mut s = Script {
            connects: [false].into(),
            ..Script::default()
        };
        assert!(matches!(
            run(&mut s, &quick(), &stop),
            Err(Failure::Fatal(_))
        ));
        let mut s = Script {
            steps: [Ok(Step::Progress), Err("lost")].into(),
            ..Script::default()
        };
        assert!(matches!(
            run(&mut s, &quick(), &stop),
            Err(Failure::Lost { .. })
        ));
        let mut s = Script {
            steps: [Err("fatal"), Ok(Step::Progress)].into(),
            ..Script::default()
        };
        let reconnecting = Settings {
            reconnect: true,
            ..quick()
        };
        match run(&mut s, &reconnecting, &stop) {
            Err(Failure::Fatal(e)) => assert_eq!(e.to_string(), "disk full"),
            other => panic!("a fatal failure ends even a reconnecting run: {other:?}"),
        }
    }

    #[test]
    fn a_service_backs_off_doubling_reconnects_and_resets_after_progress() {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut s = Script {
            // Up, then the broker goes; three refused connections; back.
            connects: [true, false, false, false, false, true].into(),
            steps: [
                Ok(Step::Progress),
                Err("lost"),
                Ok(Step::Progress),
                Err("lost"),
            ]
            .into(),
            stop_at_end: Some(stop.clone()),
            ..Script::default()
        };
        let settings = Settings {
            retry_first_connect: true,
            reconnect: true,
            idle: Idle::Pause(Duration::ZERO),
            lost_note: " (nothing unconfirmed was marked)",
            ..quick()
        };
        assert_eq!(run(&mut s, &settings, &stop).unwrap(), End::Stopped);
        assert_eq!(
            s.said,
            [
                "broker gone; reconnecting in 1ms (nothing unconfirmed was marked)",
                "connection refused; trying again in 2ms",
                "connection refused; trying again in 4ms",
                "connection refused; trying again in 4ms",
                "connection refused; trying again in 4ms",
                // Progress since: the backoff starts again from the first wait.
                "broker gone; reconnecting in 1ms (nothing unconfirmed was marked)",
            ]
        );
        assert_eq!(s.gauge, [true, false, true, false, true]);
    }

    #[test]
    fn no_pause_outlasts_what_is_left_of_until_idle() {
        let stop = AtomicBool::new(false);
        let settings = Settings {
            retry_first_connect: true,
            reconnect: true,
            first_backoff: Duration::from_secs(20),
            max_backoff: Duration::from_secs(30),
            until_idle: Some(Duration::from_millis(40)),
            ..quick()
        };
        let mut s = Script {
            connects: std::iter::repeat_n(false, 1000).collect(),
            ..Script::default()
        };
        assert!(matches!(
            run(&mut s, &settings, &stop),
            Err(Failure::Lost { .. })
        ));
        assert!(!s.said.is_empty());
        for said in &s.said {
            let pause = said.rsplit("trying again in ").next().unwrap_or_default();
            let pause = humantime::parse_duration(pause).unwrap_or(Duration::MAX);
            assert!(pause <= Duration::from_millis(40), "{said}");
        }
    }

    #[test]
    fn until_idle_is_done_when_quiet_and_fails_when_the_peer_stayed_away() {
        let stop = AtomicBool::new(false);
        let settings = Settings {
            reconnect: true,
            idle: Idle::Pause(Duration::from_millis(5)),
            until_idle: Some(Duration::from_millis(60)),
            ..quick()
        };
        let mut s = Script::default();
        assert_eq!(run(&mut s, &settings, &stop).unwrap(), End::Done);
        assert!(s.said.is_empty());

        // Connected, then gone for good: the run does not call that idle. On the script's own
        // clock (each connect takes 10 ms of the 60): connected at 10 ms, the connection lost,
        // refused at 20, 30, 40, 50 and 60 ms, each try said, the last pause cut to what is left
        // of --until-idle; the run ends with the last failure to reach the peer, the refusal.
        let mut s = Script {
            connects: std::iter::once(true)
                .chain(std::iter::repeat_n(false, 1000))
                .collect(),
            steps: [Err("lost")].into(),
            clock: Some((Instant::now(), Duration::ZERO)),
            ..Script::default()
        };
        match run(&mut s, &settings, &stop) {
            Err(Failure::Lost { error, .. }) => assert_eq!(error.to_string(), "connection refused"),
            other => panic!("expected the peer's failure: {other:?}"),
        }
        assert_eq!(
            s.said,
            [
                "broker gone; reconnecting in 1ms",
                "connection refused; trying again in 2ms",
                "connection refused; trying again in 4ms",
                "connection refused; trying again in 4ms",
                "connection refused; trying again in 4ms",
                "connection refused; trying again in 0s",
            ]
        );
        assert_eq!(s.connects.len(), 1000 - 5, "five connects refused");
    }

    #[test]
    fn a_stop_ends_the_run_before_the_next_step() {
        let stop = AtomicBool::new(true);
        let mut s = Script {
            steps: [Ok(Step::Progress)].into(),
            ..Script::default()
        };
        assert_eq!(run(&mut s, &quick(), &stop).unwrap(), End::Stopped);
        assert_eq!(s.steps.len(), 1, "no step once stopped");
    }

    #[test]
    fn a_lost_connection_after_progress_counts_as_progress_for_until_idle() {
        let stop = AtomicBool::new(false);
        let settings = Settings {
            reconnect: true,
            idle: Idle::Pause(Duration::from_millis(20)),
            until_idle: Some(Duration::from_millis(50)),
            ..quick()
        };
        // Idle, idle, then a batch committed whose acknowledgement was lost: the idle clock
        // starts again there, so the run goes on past the first 50 ms and ends done.
        let mut s = Script {
            steps: [Ok(Step::Idle), Ok(Step::Idle), Err("lost after")].into(),
            ..Script::default()
        };
        let started = Instant::now();
        assert_eq!(run(&mut s, &settings, &stop).unwrap(), End::Done);
        assert!(s.steps.is_empty(), "all three steps ran");
        assert!(started.elapsed() >= Duration::from_millis(90));
    }

    /// The first write and the last are always due; one in between waits for its turn.
    #[test]
    fn the_metrics_are_written_first_last_and_no_more_often_than_the_throttle_lets() {
        let mut t = MetricsThrottle::default();
        assert!(t.due(false), "the first write");
        assert!(!t.due(false), "not again within METRICS_EVERY");
        assert!(t.due(true), "the last write, whenever it comes");
        t.written = Instant::now().checked_sub(METRICS_EVERY);
        assert!(t.due(false), "again once METRICS_EVERY has gone by");
    }
}
