//! The metrics file: the run's figures beside the outbox's (backlog by kind, parked, last
//! success), written at the end and, with `--follow`, every few seconds while the run goes on.
//! Apart because the alert rules and the dashboard read these names.

use std::time::{Duration, Instant};

use super::{Run, Summary};
use crate::inbox::Inbox;
use crate::inbox::names::Counter;
use crate::metrics::Metrics;
use crate::output::problem;

/// How often `publish --follow` rewrites its metrics file, at most: a long run is watched
/// through it (backlog, last success) while it runs, not only when it ends.
const METRICS_EVERY: Duration = Duration::from_secs(10);

impl Run<'_> {
    /// The run's figures so far, for the metrics file at `path`.
    pub(super) fn figures(
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
    pub(super) fn metrics_now(&mut self, inbox: &dyn Inbox) {
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
