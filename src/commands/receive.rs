//! `edi-inbox receive`: the transactional inbox behind an AS4 endpoint. The HTTP side
//! (`crate::as4::server`) reads and checks each message on threads of its own; this thread owns
//! the inbox and decides each message that passed in one transaction: its `eb:MessageId`
//! claimed (a message sent again finds it, and gets the receipt stored with it, byte for byte),
//! its interchanges decided exactly as `ingest` decides files, its deliveries recorded as
//! `as4:MESSAGE-ID`, and the signed receipt stored; then commit, and only then the answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::as4::config::Config;
use crate::as4::errors::{EbmsError, Refusal};
use crate::as4::message::{Received, Rejected};
use crate::as4::receipt::{self, Signer};
use crate::as4::server::{self, Answer, Job, Limits};
use crate::cli::ReceiveArgs;
use crate::exit::ExitStatus;
use crate::inbox::{Access, Claim, DeliveryRecord, Inbox, Location};
use crate::intake::{self, AckPolicy, Outcome, Parsed};
use crate::metrics::{Metrics, unix_now};
use crate::output::{Out, problem};
use crate::status::Status;

/// The transport's name in the inbox's table of messages, and its deliveries' prefix.
const TRANSPORT: &str = "as4";

/// How often the metrics file is written, at most.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// The run's counts.
#[derive(Debug, Default, Serialize)]
struct Summary {
    /// Messages answered with a receipt (new ones).
    receipts: usize,
    /// Messages sent again, answered with their stored receipt.
    resent: usize,
    /// Messages refused with an ebMS error.
    refused: usize,
    /// Messages the inbox failed to store (answered with HTTP 500: the sender tries again).
    failed: usize,
    new: usize,
    duplicate: usize,
    drift: usize,
    rejected: usize,
}

/// One line for a message refused or answered again.
#[derive(Debug, Serialize)]
struct MessageLine<'a> {
    status: &'static str,
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    peer: String,
}

struct Run<'a> {
    args: &'a ReceiveArgs,
    out: Out,
    summary: Summary,
    acks: AckPolicy,
    started: Instant,
    metrics_written: Option<Instant>,
    /// Refusals by ebMS error code, for the metrics.
    errors: BTreeMap<&'static str, usize>,
    last_request: f64,
    other_problems: usize,
}

/// Runs `receive`.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &ReceiveArgs,
) -> anyhow::Result<ExitStatus> {
    let config = match crate::as4::config::read(&args.as4_config) {
        Ok(c) => Arc::new(c),
        Err(e) => return super::usage(&e),
    };
    if let Some(status) = intake::preflight::check(db, named, "received")? {
        return Ok(status);
    }
    let listener = std::net::TcpListener::bind(&args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let mut inbox = super::open_inbox(db, Access::Create, busy_timeout)?;
    let stop = super::stop_on_signals()?;
    inbox.start_run();
    let limits = Limits {
        max_size: args.max_size,
        max_inflated: args.max_inflated,
        max_concurrent: args.max_concurrent as usize,
        request_timeout: args.request_timeout,
    };
    let (jobs_tx, jobs) = std::sync::mpsc::channel();
    let server = {
        let config = config.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("as4-http".into())
            .spawn(move || server::serve(listener, config, limits, stop, jobs_tx))
            .context("cannot start the HTTP listener")?
    };
    crate::output::warn(&format!(
        "receiving AS4 messages for {} on http://{address}",
        config.party_id
    ));
    let mut run = Run {
        args,
        out: Out::default(),
        summary: Summary::default(),
        acks: AckPolicy::from(&args.acks),
        started: Instant::now(),
        metrics_written: None,
        errors: BTreeMap::new(),
        last_request: 0.0,
        other_problems: 0,
    };
    loop {
        match jobs.recv_timeout(Duration::from_secs(1)) {
            Ok(Job::Decide {
                received,
                peer,
                reply,
            }) => {
                let answer = run.decide(&mut *inbox, &config, &received, peer);
                let _ = reply.send(answer);
            }
            Ok(Job::Refused { rejected, peer }) => run.refused(&rejected, peer),
            Err(RecvTimeoutError::Timeout) => {}
            // The listener ended (a stop, with every request in flight answered).
            Err(RecvTimeoutError::Disconnected) => break,
        }
        run.metrics_now(&*inbox, false);
    }
    let served = server
        .join()
        .map_err(|_| anyhow::anyhow!("the HTTP listener failed"))?;
    served.with_context(|| format!("the HTTP listener on {address} failed"))?;
    inbox.end_run();
    Ok(run.finish(&*inbox))
}

/// What a decision made of a message.
enum Decided {
    /// New: decided now, its receipt stored.
    New {
        receipt: Vec<u8>,
        outcomes: Vec<Vec<Outcome>>,
    },
    /// Seen before: its stored receipt.
    Resent(Vec<u8>),
}

impl Run<'_> {
    /// Decides a message in one transaction and gives its answer.
    fn decide(
        &mut self,
        inbox: &mut dyn Inbox,
        config: &Config,
        received: &Received,
        peer: SocketAddr,
    ) -> Answer {
        self.last_request = unix_now();
        let signer = Signer {
            key: &config.keys.own_key,
            cert: &config.keys.own_cert,
        };
        let id = &received.message.message_id;
        let file = format!("{TRANSPORT}:{id}");
        match self.decide_in_inbox(inbox, &signer, received) {
            Ok(Decided::New { receipt, outcomes }) => {
                self.summary.receipts += 1;
                for o in outcomes.iter().flatten() {
                    self.report(o);
                }
                self.out.flush();
                Answer {
                    status: 200,
                    body: receipt,
                }
            }
            Ok(Decided::Resent(receipt)) => {
                self.summary.resent += 1;
                if self.args.json {
                    self.out.json(&MessageLine {
                        status: "resent",
                        file,
                        error: None,
                        reason: None,
                        peer: peer.ip().to_string(),
                    });
                } else if !self.args.quiet {
                    self.out.line(&format!(
                        "resent     {file}  sent again: its receipt answered again, nothing decided again"
                    ));
                }
                self.out.flush();
                Answer {
                    status: 200,
                    body: receipt,
                }
            }
            Err(e) => {
                inbox.abandon();
                self.summary.failed += 1;
                problem(
                    &mut self.out,
                    &format!(
                        "{file}: {}; nothing of it was kept, and the sender was told to send it again",
                        super::one_message(&e)
                    ),
                );
                let refusal = Refusal::new(
                    EbmsError::Other,
                    "the receiver could not store the message: send it again",
                );
                Answer {
                    status: 500,
                    body: receipt::error(&signer, Some(id), &refusal),
                }
            }
        }
    }

    /// The message's id claimed, its interchanges decided, its receipt stored: one transaction.
    fn decide_in_inbox(
        &mut self,
        inbox: &mut dyn Inbox,
        signer: &Signer<'_>,
        received: &Received,
    ) -> anyhow::Result<Decided> {
        let when = crate::clock::now();
        let id = &received.message.message_id;
        let stored = inbox
            .claim_message(TRANSPORT, id, &when)
            .context("cannot write to the inbox database")?;
        if let Claim::Seen(answer) = stored {
            let answer = match answer {
                Some(a) => a,
                // Claimed and never answered (an inbox written by hand): answered now.
                None => {
                    let r = receipt::receipt(signer, id, &received.references);
                    inbox
                        .answer_message(TRANSPORT, id, &r)
                        .context("cannot write to the inbox database")?;
                    r
                }
            };
            inbox
                .commit()
                .context("cannot commit to the inbox database")?;
            return Ok(Decided::Resent(answer));
        }
        let names: Vec<String> = (0..received.interchanges.len())
            .map(|k| {
                if k == 0 {
                    format!("{TRANSPORT}:{id}")
                } else {
                    format!("{TRANSPORT}:{id}#{}", k + 1)
                }
            })
            .collect();
        let items: Vec<Vec<intake::Attached<'_>>> = received
            .interchanges
            .iter()
            .map(|(_, bytes)| intake::prepare::interchanges(bytes, None).collect())
            .collect();
        let hashes: Vec<Option<String>> = received
            .interchanges
            .iter()
            .zip(&items)
            .map(|((_, bytes), items)| intake::prepare::hash_if_rejected(bytes, items))
            .collect();
        let sources: Vec<Parsed<'_>> = received
            .interchanges
            .iter()
            .zip(items)
            .zip(&hashes)
            .zip(&names)
            .map(|((((cid, bytes), items), sha256), name)| Parsed {
                source: intake::Source::Delivery {
                    name: name.clone(),
                    filename: Some(cid.clone()),
                    delivery_count: 1,
                },
                bytes,
                items,
                sha256: sha256.as_deref(),
            })
            .collect();
        let outcomes = intake::decide(inbox, &sources, &when, self.acks)?;
        intake::keep_refused(inbox, &sources, &outcomes, &when)?;
        drop(sources);
        let records: Vec<DeliveryRecord<'_>> = received
            .interchanges
            .iter()
            .zip(&names)
            .map(|((cid, bytes), name)| DeliveryRecord {
                source: name,
                filename: Some(cid),
                delivery_count: 1,
                size: bytes.len(),
                key: Some(&received.message.conversation_id),
                produced_at: Some(&received.message.timestamp),
            })
            .collect();
        inbox
            .record_deliveries(&records, &when)
            .context("cannot write to the inbox database")?;
        let answer = receipt::receipt(signer, id, &received.references);
        inbox
            .answer_message(TRANSPORT, id, &answer)
            .context("cannot write to the inbox database")?;
        crash_point!("receive-before-commit");
        inbox
            .commit()
            .context("cannot commit to the inbox database")?;
        crash_point!("receive-after-commit");
        Ok(Decided::New {
            receipt: answer,
            outcomes,
        })
    }

    fn refused(&mut self, rejected: &Rejected, peer: SocketAddr) {
        self.last_request = unix_now();
        self.summary.refused += 1;
        let code = rejected.refusal.error.code();
        *self.errors.entry(code).or_default() += 1;
        let file = format!(
            "{TRANSPORT}:{}",
            rejected.message_id.as_deref().unwrap_or("-")
        );
        if self.args.json {
            self.out.json(&MessageLine {
                status: "refused",
                file,
                error: Some(code),
                reason: Some(&rejected.refusal.detail),
                peer: peer.ip().to_string(),
            });
        } else {
            self.out.line(&format!(
                "refused    {file}  {} (from {})",
                rejected.refusal,
                peer.ip()
            ));
        }
        self.out.flush();
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

    /// Writes the metrics file where one is asked for: at most every [`METRICS_EVERY`], and at
    /// the end (`last`).
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
        let _ = inbox;
        let s = &self.summary;
        let mut m = Metrics::default();
        m.outcomes(
            "edi_inbox_receive_run_requests",
            "AS4 requests of the current (or last) receive run, by how they were answered: receipt (decided now), resent (sent again: its stored receipt), refused (an ebMS error), failed (the inbox failed: HTTP 500, the sender tries again).",
            &[
                ("receipt", s.receipts),
                ("resent", s.resent),
                ("refused", s.refused),
                ("failed", s.failed),
            ],
        )
        .outcomes(
            "edi_inbox_receive_run_interchanges",
            "Outcomes of the interchanges the current (or last) receive run decided.",
            &[
                ("new", s.new),
                ("duplicate", s.duplicate),
                ("drift", s.drift),
                ("rejected", s.rejected),
            ],
        );
        if !self.errors.is_empty() {
            m.family(
                "edi_inbox_receive_run_errors",
                "gauge",
                "AS4 messages the current (or last) receive run refused, by ebMS error code.",
            );
            for (code, n) in &self.errors {
                m.sample("edi_inbox_receive_run_errors", &[("code", code)], *n as f64);
            }
        }
        m.single(
            "edi_inbox_receive_last_request_timestamp_seconds",
            "gauge",
            "Unix time at which receive last answered a request (0: none yet this run).",
            self.last_request,
        )
        .single(
            "edi_inbox_receive_run_duration_seconds",
            "gauge",
            "Wall time of the current (or last) receive run so far.",
            self.started.elapsed().as_secs_f64(),
        );
        if last {
            m.single(
                "edi_inbox_receive_last_success_timestamp_seconds",
                "gauge",
                "Unix time at which the last receive run ended without a fatal error.",
                unix_now(),
            );
        }
        if let Err(e) = m.write_to(path) {
            self.other_problems += usize::from(last);
            problem(
                &mut self.out,
                &format!("cannot write the metrics file {}: {e:#}", path.display()),
            );
        }
    }

    /// The summary and metrics; the status: 3 where anything was rejected, drifted or refused,
    /// else 0 (also when a signal stopped the run).
    fn finish(mut self, inbox: &dyn Inbox) -> ExitStatus {
        self.metrics_now(inbox, true);
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else {
            self.out.line(&format!(
                "{} receipts ({} sent again), {} refused, {} failed; {} new, {} duplicate, {} drift, {} rejected",
                s.receipts + s.resent,
                s.resent,
                s.refused,
                s.failed,
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
            ));
        }
        self.out.flush();
        ExitStatus::from_problems(
            s.drift
                + s.rejected
                + s.refused
                + s.failed
                + self.other_problems
                + usize::from(self.out.failed()),
        )
    }
}
