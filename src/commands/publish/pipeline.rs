//! The messages' events, sent in batches with two in flight: while one batch is with the
//! destination, the next is claimed and built, and the one before is marked. Apart from the
//! run because its order is where events are lost or doubled if it goes wrong (answers taken
//! batch by batch in the order handed over, only the answered marked, the next claim passing
//! over the rows not marked yet), and its tests drive it alone, with a destination that keeps
//! its batches in flight.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::batch::{Claimed, Read, ready};
use super::{BatchError, Run};
use crate::inbox::{Inbox, Outbox, OutboxEvent};
use crate::publish::{self, Answer, Payload};

/// How long one step goes on taking batch after batch while the outbox has events: the service
/// loop writes the metrics in between.
const PIPELINE_SPAN: Duration = Duration::from_secs(5);

impl Run<'_> {
    /// Claims, sends and marks the messages' events, batch after batch while there are any (for
    /// [`PIPELINE_SPAN`] at most, or until a signal): while one batch is with the destination,
    /// the next is claimed (passing over the rows not marked yet) and made ready on a thread of
    /// its own while the one before is marked. The destination is given the batches in order;
    /// one that sends a batch on while the answers of the one before come (Kafka) has two in
    /// flight, and is asked for the older one's answers once it has the newer.
    pub(super) fn message_batches(
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
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use clap::Parser as _;

    use super::super::{Summary, new_pass};
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::inbox::{Access, Location};
    use crate::output::Out;
    use crate::publish::{Outgoing, SinkError, Template};

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
        crate::commands::ingest::run(&db, true, Duration::from_secs(5), args).unwrap();
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
            metrics: crate::commands::service::MetricsThrottle::default(),
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
            standard: crate::standard::Standard::Edifact,
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
