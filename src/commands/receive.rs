//! `edi-inbox receive`: the transactional inbox behind an AS4 endpoint. The HTTP side
//! (`crate::as4::server`) reads and checks each message on threads of its own; this thread owns
//! the inbox and decides each message that passed in one transaction: its `eb:MessageId`
//! claimed (a message sent again finds it, and gets the receipt stored with it, byte for byte),
//! its interchanges decided exactly as `ingest` decides files, its deliveries recorded as
//! `as4:MESSAGE-ID`, and the signed receipt stored; then commit, and only then the answer.

use std::collections::{BTreeMap, HashMap};
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
use crate::inbox::{Access, Claim, DeliveryRecord, Inbox, InboxError, Location, TransportMessage};
use crate::intake::{self, AckPolicy, Outcome, Parsed};
use crate::metrics::{Metrics, unix_now};
use crate::output::{Out, problem};
use crate::status::Status;

/// The transport's name in the inbox's table of messages, and its deliveries' prefix.
const TRANSPORT: &str = "as4";

/// How often the metrics file is written, at most.
const METRICS_EVERY: Duration = Duration::from_secs(10);

/// The most messages decided in one transaction.
const MAX_BATCH: usize = 64;

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
    config: &'a Config,
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
        config: &config,
        out: Out::default(),
        summary: Summary::default(),
        acks: super::ack_policy(&args.acks),
        started: Instant::now(),
        metrics_written: None,
        errors: BTreeMap::new(),
        last_request: 0.0,
        other_problems: 0,
    };
    loop {
        let first = match jobs.recv_timeout(Duration::from_secs(1)) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                run.metrics_now(&*inbox, false);
                continue;
            }
            // The listener ended (a stop, with every request in flight answered).
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // What waits already joins the batch: one transaction, one commit (one fsync, one
        // WAL flush) for the messages that arrived while the last batch was decided, and no
        // message waits for one that has not arrived.
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                // Its sender stopped waiting (it was told to send again, or went away): its
                // place is given back undecided, and its retry is decided.
                Job::Decide { reply, .. } if reply.is_closed() => {}
                Job::Decide {
                    received,
                    receipt,
                    peer,
                    reply,
                    permit,
                } => batch.push(Pending {
                    received,
                    receipt,
                    peer,
                    reply,
                    _permit: permit,
                }),
                Job::Refused { rejected, peer } => run.refused(&rejected, peer),
            }
            if batch.len() < MAX_BATCH {
                next = jobs.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            if inbox.is_lost() {
                // The server restarted or the network cut: connected again before deciding
                // (each try bounded by the connection's timeout); where it fails, the batch
                // fails on the lost connection and its senders send again.
                match super::open_inbox(db, Access::Create, busy_timeout) {
                    Ok(mut fresh) => {
                        fresh.start_run();
                        inbox = fresh;
                        crate::output::warn("the inbox's connection was lost: connected again");
                    }
                    Err(e) => problem(
                        &mut run.out,
                        &format!(
                            "the inbox's connection was lost, and connecting again failed: {}",
                            super::one_message(&e)
                        ),
                    ),
                }
            }
            run.decide(&mut *inbox, batch);
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

/// A message that passed every check, waiting for its decision.
struct Pending {
    received: Box<Received>,
    /// Its receipt, signed by the checking thread: stored with the decision.
    receipt: Vec<u8>,
    peer: SocketAddr,
    reply: tokio::sync::oneshot::Sender<Answer>,
    /// Its place among the requests in hand, given back once it is answered.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// What a decision made of a message.
enum Decided {
    /// New: decided now, its receipt stored; each payload's outcomes.
    New(Vec<Vec<Outcome>>),
    /// Seen before: its stored receipt.
    Resent(Vec<u8>),
    /// Sent again while its first sending waited in the same batch: that one's receipt.
    SameAs(usize),
    /// Its id is another message's (another sender's, or other content): refused.
    Refused(Refusal),
}

impl Run<'_> {
    /// Decides a batch of messages in one transaction, then answers each. Where the batch
    /// fails for something of its own, each of its messages is decided alone: one message the
    /// inbox cannot take fails alone, not the others that came with it. Not where the inbox
    /// itself failed (its connection lost, another run's lock held past `--busy-timeout`): each
    /// would only wait and fail in turn.
    fn decide(&mut self, inbox: &mut dyn Inbox, batch: Vec<Pending>) {
        self.last_request = unix_now();
        let decided = match self.decide_in_inbox(inbox, &batch) {
            Ok(decided) => decided,
            Err(e) if batch.len() > 1 && !inbox.is_lost() && !busy(&e) => {
                inbox.abandon();
                for p in batch {
                    self.decide(inbox, vec![p]);
                }
                return;
            }
            Err(e) => {
                inbox.abandon();
                let why = super::one_message(&e);
                let refusal = Refusal::new(
                    EbmsError::Other,
                    "the receiver could not store the message: send it again",
                );
                for p in batch {
                    self.summary.failed += 1;
                    let id = &p.received.message.message_id;
                    problem(
                        &mut self.out,
                        &format!(
                            "{TRANSPORT}:{id}: {why}; nothing of it was kept, and the sender was told to send it again"
                        ),
                    );
                    let _ = p.reply.send(Answer {
                        status: 500,
                        body: receipt::error(&self.signer(), Some(id), &refusal),
                    });
                }
                return;
            }
        };
        let mut receipts: Vec<Vec<u8>> = Vec::with_capacity(batch.len());
        for (p, d) in batch.iter().zip(&decided) {
            let receipt = match d {
                Decided::New(_) => p.receipt.clone(),
                Decided::Resent(stored) => stored.clone(),
                // An earlier one of the batch: its answer, whichever it was.
                Decided::SameAs(first) => receipts[*first].clone(),
                Decided::Refused(refusal) => receipt::error(
                    &self.signer(),
                    Some(&p.received.message.message_id),
                    refusal,
                ),
            };
            receipts.push(receipt);
        }
        for ((p, d), receipt) in batch.into_iter().zip(decided).zip(receipts) {
            match d {
                Decided::Refused(refusal) => {
                    let rejected = Rejected {
                        refusal,
                        message_id: Some(p.received.message.message_id.clone()),
                    };
                    self.refused(&rejected, p.peer);
                }
                Decided::New(outcomes) => {
                    self.summary.receipts += 1;
                    for o in outcomes.iter().flatten() {
                        self.report(o);
                    }
                }
                Decided::Resent(_) | Decided::SameAs(_) => {
                    self.summary.resent += 1;
                    let file = format!("{TRANSPORT}:{}", p.received.message.message_id);
                    if self.args.json {
                        self.out.json(&MessageLine {
                            status: "resent",
                            file,
                            error: None,
                            reason: None,
                            peer: p.peer.ip().to_string(),
                        });
                    } else if !self.args.quiet {
                        self.out.line(&format!(
                            "resent     {file}  sent again: its receipt answered again, nothing decided again"
                        ));
                    }
                }
            }
            let _ = p.reply.send(Answer {
                status: 200,
                body: receipt,
            });
        }
        self.out.flush();
    }

    fn signer(&self) -> Signer<'_> {
        Signer {
            key: &self.config.keys.own_key,
            cert: &self.config.keys.own_cert,
        }
    }

    /// Each message's id claimed, the interchanges of the new ones decided, their receipts
    /// stored: one transaction. Where the inbox rolled it back to make it again (a deadlock with
    /// another host, on PostgreSQL), the claims went with it: they are made again, and a
    /// message another receiver committed meanwhile makes the whole batch start over.
    fn decide_in_inbox(
        &mut self,
        inbox: &mut dyn Inbox,
        batch: &[Pending],
    ) -> anyhow::Result<Vec<Decided>> {
        let mut tries = 0;
        loop {
            let rollbacks = inbox.rollbacks();
            let when = crate::clock::now();
            let claimed = claim(inbox, batch, &when)?;
            let new: Vec<usize> = (0..batch.len()).filter(|&k| claimed[k].is_none()).collect();
            let outcomes = decide_new(inbox, batch, &new, &when, self.acks)?;
            if inbox.rollbacks() != rollbacks {
                let mut lost = false;
                for k in by_id(batch, new.iter().copied()) {
                    let again = inbox
                        .claim_message(&batch[k].claimed(), &when)
                        .context("cannot write to the inbox database")?;
                    lost |= !matches!(again, Claim::New);
                }
                if lost {
                    inbox.abandon();
                    tries += 1;
                    anyhow::ensure!(tries < 3, "other receivers kept deciding the same messages");
                    continue;
                }
            }
            for &k in &new {
                let p = &batch[k];
                inbox
                    .answer_message(TRANSPORT, &p.received.message.message_id, &p.receipt)
                    .context("cannot write to the inbox database")?;
            }
            crash_point!("receive-before-commit");
            inbox
                .commit()
                .context("cannot commit to the inbox database")?;
            crash_point!("receive-after-commit");
            let mut outcomes = outcomes.into_iter();
            return Ok(claimed
                .into_iter()
                .map(|c| c.unwrap_or_else(|| Decided::New(outcomes.next().unwrap_or_default())))
                .collect());
        }
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

impl Pending {
    /// The message as its id is claimed: who sent it, and what it carries.
    fn claimed(&self) -> TransportMessage<'_> {
        let r = &self.received;
        TransportMessage {
            transport: TRANSPORT,
            message_id: &r.message.message_id,
            sender: &r.message.from,
            content_sha256: &r.content_sha256,
        }
    }
}

/// Each message's id claimed, in the order of the ids ([`by_id`]): `None` for a new one
/// (claimed now), else what answers it. A message sent again while its first sending waits in
/// the same batch is answered as that one is, where it is the same.
fn claim(
    inbox: &mut dyn Inbox,
    batch: &[Pending],
    when: &str,
) -> anyhow::Result<Vec<Option<Decided>>> {
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut claimed: Vec<Option<Decided>> = (0..batch.len()).map(|_| None).collect();
    for k in by_id(batch, 0..batch.len()) {
        let p = &batch[k];
        let m = p.claimed();
        let claim = inbox
            .claim_message(&m, when)
            .context("cannot write to the inbox database")?;
        claimed[k] = match (claim, first.get(m.message_id)) {
            (Claim::Other { sender }, _) => Some(Decided::Refused(other_message(&m, sender))),
            (_, Some(&j)) => {
                let q = batch[j].claimed();
                if (q.sender, q.content_sha256) == (m.sender, m.content_sha256) {
                    Some(Decided::SameAs(j))
                } else {
                    Some(Decided::Refused(other_message(
                        &m,
                        Some(q.sender.to_string()),
                    )))
                }
            }
            (Claim::New, None) => None,
            (Claim::Seen(Some(stored)), None) => Some(Decided::Resent(stored)),
            // Claimed and never answered (an inbox written by hand): answered now.
            (Claim::Seen(None), None) => {
                inbox
                    .answer_message(TRANSPORT, m.message_id, &p.receipt)
                    .context("cannot write to the inbox database")?;
                Some(Decided::Resent(p.receipt.clone()))
            }
        };
        // A sending refused is not the one a later sending of its id is compared with.
        if !matches!(claimed[k], Some(Decided::Refused(_))) {
            first.entry(m.message_id).or_insert(k);
        }
    }
    Ok(claimed)
}

/// The places `of` the batch in the order of their message ids, in which they are claimed (two
/// receivers of a shared inbox claiming the same ids in other orders would each wait on the
/// other's rows). Stable: of the sendings of one id, the earliest comes first.
fn by_id(batch: &[Pending], of: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut order: Vec<usize> = of.collect();
    order.sort_by(|&a, &b| {
        batch[a]
            .received
            .message
            .message_id
            .cmp(&batch[b].received.message.message_id)
    });
    order
}

/// True where `e` is the inbox held by another run past `--busy-timeout`.
fn busy(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<InboxError>(), Some(InboxError::Busy(_))))
}

/// The refusal of a message whose id another message has: answering it with that one's receipt
/// would tell its sender it arrived, and it would be lost unseen. The other party is not named
/// to this one (the signal goes to whoever sent it); the operator's line names the id.
fn other_message(m: &TransportMessage<'_>, sender: Option<String>) -> Refusal {
    let whose = match sender {
        Some(s) if s != m.sender => "another party's message",
        _ => "a message with other content",
    };
    Refusal::new(
        EbmsError::Other,
        format!(
            "the MessageId {} is {whose}, already received: send this one under an id of its own",
            m.message_id
        ),
    )
}

/// The interchanges of the batch's new messages (`new`, their places in it) decided as `ingest`
/// decides files, each payload a delivery `as4:ID` (`as4:ID#2`, ...): each new message's
/// outcomes, by payload.
fn decide_new(
    inbox: &mut dyn Inbox,
    batch: &[Pending],
    new: &[usize],
    when: &str,
    acks: AckPolicy,
) -> anyhow::Result<Vec<Vec<Vec<Outcome>>>> {
    let mut payloads: Vec<(&Received, &str, &[u8], String)> = Vec::new();
    for &k in new {
        let r = &*batch[k].received;
        let id = &r.message.message_id;
        for (n, (cid, bytes)) in r.interchanges.iter().enumerate() {
            let name = if n == 0 {
                format!("{TRANSPORT}:{id}")
            } else {
                format!("{TRANSPORT}:{id}#{}", n + 1)
            };
            payloads.push((r, cid, bytes, name));
        }
    }
    let items: Vec<Vec<intake::Attached<'_>>> = payloads
        .iter()
        .map(|(_, _, bytes, _)| intake::prepare::interchanges(bytes, None).collect())
        .collect();
    let hashes: Vec<Option<String>> = payloads
        .iter()
        .zip(&items)
        .map(|((_, _, bytes, _), items)| intake::prepare::hash_if_rejected(bytes, items))
        .collect();
    let sources: Vec<Parsed<'_>> = payloads
        .iter()
        .zip(items)
        .zip(&hashes)
        .map(|(((_, cid, bytes, name), items), sha256)| Parsed {
            source: intake::Source::Delivery {
                name: name.clone(),
                filename: Some(cid.to_string()),
                delivery_count: 1,
            },
            bytes,
            items,
            sha256: sha256.as_deref(),
        })
        .collect();
    let outcomes = intake::decide(inbox, &sources, when, acks)?;
    intake::keep_refused(inbox, &sources, &outcomes, when)?;
    drop(sources);
    let records: Vec<DeliveryRecord<'_>> = payloads
        .iter()
        .map(|(r, cid, bytes, name)| DeliveryRecord {
            source: name,
            filename: Some(cid),
            delivery_count: 1,
            size: bytes.len(),
            key: Some(&r.message.conversation_id),
            produced_at: Some(&r.message.timestamp),
        })
        .collect();
    inbox
        .record_deliveries(&records, when)
        .context("cannot write to the inbox database")?;
    let mut outcomes = outcomes.into_iter();
    Ok(new
        .iter()
        .map(|&k| {
            outcomes
                .by_ref()
                .take(batch[k].received.interchanges.len())
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::as4::ebms::UserMessage;

    /// A message `id` from `party` carrying `content`, as the checking thread hands it over.
    fn pending(id: &str, party: &str, content: &str) -> Pending {
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
        Pending {
            received: Box::new(Received {
                message: UserMessage {
                    message_id: id.into(),
                    timestamp: "2026-01-01T00:00:00Z".into(),
                    conversation_id: "c".into(),
                    from: party.into(),
                    to: "PTE000002".into(),
                    service: "s".into(),
                    action: "a".into(),
                    parts: Vec::new(),
                },
                interchanges: Vec::new(),
                references: Vec::new(),
                content_sha256: content.into(),
            }),
            receipt: format!("receipt of {id} from {party}").into_bytes(),
            peer: "127.0.0.1:1".parse().unwrap(),
            reply: tokio::sync::oneshot::channel().0,
            _permit: permits.try_acquire_owned().unwrap(),
        }
    }

    fn kinds(claimed: &[Option<Decided>]) -> Vec<String> {
        claimed
            .iter()
            .map(|c| match c {
                None => "new".to_string(),
                Some(Decided::New(_)) => "decided".to_string(),
                Some(Decided::Resent(r)) => format!("resent {}", String::from_utf8_lossy(r)),
                Some(Decided::SameAs(k)) => format!("same as {k}"),
                Some(Decided::Refused(_)) => "refused".to_string(),
            })
            .collect()
    }

    /// The claims of one batch: a sending again of a message of the batch answered as it is; a
    /// message of another party or with other content under its id refused, before or after it
    /// in the batch; and a forged sending refused without making the genuine retry that follows
    /// it in the batch look like another message.
    #[test]
    fn a_batchs_claims_tell_the_same_message_from_another_under_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = crate::inbox::open(
            &Location::Sqlite(dir.path().join("inbox.db")),
            Access::Create,
            Duration::from_secs(5),
        )
        .unwrap();
        let when = "2026-01-01T00:00:00.000Z";
        let batch = vec![
            pending("b", "PTE000003", "other"),
            pending("a", "PTE000001", "x"),
            pending("a", "PTE000001", "x"),
            pending("a", "PTE000001", "y"),
            pending("b", "PTE000001", "x"),
        ];
        let claimed = claim(&mut *inbox, &batch, when).unwrap();
        assert_eq!(
            kinds(&claimed),
            ["new", "new", "same as 1", "refused", "refused"],
            "the first sending of each id is claimed; the rest compared with it"
        );
        for k in [0, 1] {
            let m = &batch[k].received.message.message_id;
            inbox
                .answer_message(TRANSPORT, m, &batch[k].receipt)
                .unwrap();
        }
        inbox.commit().unwrap();
        // Then a forgery under "a" comes first in a batch, and the genuine retry after it.
        let batch = vec![
            pending("a", "PTE000003", "x"),
            pending("a", "PTE000001", "x"),
        ];
        let claimed = claim(&mut *inbox, &batch, when).unwrap();
        assert_eq!(
            kinds(&claimed),
            ["refused", "resent receipt of a from PTE000001"],
        );
        inbox.abandon();
    }
}
