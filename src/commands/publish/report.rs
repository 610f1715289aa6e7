//! What the run says: a line per event, interchange or CONTRL as it is answered (JSON with
//! `--json`), and the summary at the end with the status. Apart so that the output's form,
//! which scripts read, is in one place whatever part of the run reports.

use serde::Serialize;

use super::batch::Unit;
use super::{Run, Summary};
use crate::exit::ExitStatus;
use crate::inbox::Inbox;
use crate::output::{count, problem};
use crate::publish::{Answer, Destination};

/// One JSON line per event (or interchange).
#[derive(Debug, Serialize)]
pub(super) struct Line<'a> {
    pub(super) status: &'static str,
    pub(super) id: &'a str,
    pub(super) subject: &'a str,
    pub(super) event_type: &'a str,
    pub(super) sender: &'a str,
    pub(super) recipient: &'a str,
    pub(super) control_ref: &'a str,
    pub(super) message_refs: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) attempts: Option<i64>,
    /// Attempts made before this one.
    #[serde(skip)]
    pub(super) tried: i64,
    /// For a CONTRL: the answered interchange's 0020, and which sending of the answer this is
    /// (the human line says so where a message's line names its message).
    #[serde(skip)]
    pub(super) answering: Option<(&'a str, i64)>,
}

impl Run<'_> {
    pub(super) fn report(&mut self, unit: &Unit, answer: &Answer, parked: bool) {
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
    pub(super) fn report_one<'a>(&mut self, mut e: Line<'a>, answer: &'a Answer, parked: bool) {
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
            Some((answered, send)) => format!(
                "{} answering ref {answered} (sending {send})",
                crate::inbox::names::answer_kind(e.event_type)
            ),
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

    /// The summary and metrics; the status. Stopped by a signal, the run ends as asked: 0 (its
    /// refusals were reported as they came, and are in the metrics).
    pub(super) fn finish(
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
            self.out.line(&crate::output::stamped(&format!(
                "{} to {}: {} published ({} already there), {} failed ({} parked); {} unpublished, {} parked in all",
                count(s.published as u64 + s.failed as u64, "event", "events"),
                destination.shown(),
                s.published,
                s.duplicates,
                s.failed,
                s.parked,
                stats.outbox_unpublished,
                stats.outbox_failed,
            )));
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
