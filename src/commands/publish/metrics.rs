//! The metrics file: the run's figures beside the outbox's (backlog by kind, parked, last
//! success), written at the end and, with `--follow`, every few seconds while the run goes on.
//! Apart because the alert rules and the dashboard read these names.

use std::time::Instant;

use super::{Run, Summary};
use crate::inbox::Inbox;
use crate::inbox::names::Counter;
use crate::metrics::{Metrics, catalogue};
use crate::output::problem;

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

    /// With --follow, rewrites the metrics file (at most every
    /// [`super::super::service::METRICS_EVERY`]): a long run is watched through it (backlog, last
    /// success) while it runs, not only when it ends; a file that cannot be written is said, and
    /// the run goes on.
    pub(super) fn metrics_now(&mut self, inbox: &dyn Inbox) {
        let Some(path) = &self.args.metrics_file else {
            return;
        };
        if !self.metrics.due(false) {
            return;
        }
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
    let last_success = last_success
        .or_else(|| {
            crate::metrics::previous_value(
                path,
                catalogue::PUBLISH_LAST_SUCCESS_TIMESTAMP_SECONDS.name,
            )
        })
        .unwrap_or(0.0);
    let mut m = Metrics::default();
    m.family(&catalogue::PUBLISH_EVENTS_TOTAL);
    for (outcome, counter) in [
        ("published", Counter::PublishPublished),
        ("failed", Counter::PublishFailed),
        ("parked", Counter::PublishParked),
    ] {
        m.sample(
            &catalogue::PUBLISH_EVENTS_TOTAL,
            &[outcome],
            inbox.counter(counter)? as f64,
        );
    }
    m.family(&catalogue::PUBLISH_LAST_RUN_EVENTS);
    for (outcome, n) in [
        ("published", s.published),
        ("duplicate", s.duplicates),
        ("failed", s.failed),
        ("parked", s.parked),
    ] {
        m.sample(&catalogue::PUBLISH_LAST_RUN_EVENTS, &[outcome], n as f64);
    }
    // By kind: the received messages' events and the CONTRLs to deliver, so that the alerts on
    // a backlog or on parked events fire for either.
    let kinds = stats.outbox_kinds.each();
    for (family, value) in [
        (
            &catalogue::OUTBOX_UNPUBLISHED,
            (|f: &crate::inbox::OutboxFigures| f.unpublished) as fn(&_) -> i64,
        ),
        (&catalogue::OUTBOX_FAILED, |f| f.failed),
        (&catalogue::OUTBOX_OLDEST_UNPUBLISHED_AGE_SECONDS, |f| {
            f.oldest_unpublished_age_seconds.unwrap_or(0)
        }),
    ] {
        m.family(family);
        for (kind, figures) in &kinds {
            m.sample(family, &[kind], value(figures) as f64);
        }
    }
    m.single(
        &catalogue::PUBLISH_LAST_RUN_DURATION_SECONDS,
        started.elapsed().as_secs_f64(),
    )
    .single(
        &catalogue::PUBLISH_LAST_SUCCESS_TIMESTAMP_SECONDS,
        last_success,
    );
    Ok(m)
}
