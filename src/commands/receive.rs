//! `edi-inbox receive`: the transactional inbox behind an AS4 endpoint. The HTTP side
//! (`crate::as4::server`) reads and checks each message on threads of its own; this thread owns
//! the inbox, and `crate::as4::receiver` decides each message that passed through the intake in
//! one transaction (its `eb:MessageId` claimed, its interchanges decided exactly as `ingest`
//! decides files, its deliveries recorded as `as4:MESSAGE-ID`, the signed receipt stored), then
//! commits, and only then answers. What is here is the command's: its settings, its report and
//! its metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;

use crate::as4::message::Rejected;
use crate::as4::receipt::Signer;
use crate::as4::receiver::{self, TRANSPORT};
use crate::as4::server::{self, Limits};
use crate::cli::ReceiveArgs;
use crate::exit::ExitStatus;
use crate::inbox::Location;
use crate::intake::{self, Outcome};
use crate::metrics::{Metrics, catalogue, unix_now};
use crate::output::{Out, problem};
use crate::status::Status;

use super::service::MetricsThrottle;

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
    /// Interchanges the operator's side effects refused (their messages answered with an ebMS
    /// error; kept whole for `reapply --refused`).
    interchanges_refused: usize,
    /// Asynchronous MDNs the partners' servers took.
    mdns_delivered: usize,
    /// Tries at delivering an asynchronous MDN that failed (each tried again later).
    mdn_failures: usize,
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

/// Runs `receive`.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: std::time::Duration,
    args: &ReceiveArgs,
) -> anyhow::Result<ExitStatus> {
    let as4 = match args.as4_config.as_deref().map(crate::as4::config::read) {
        None => None,
        Some(Ok(c)) => Some(Arc::new(c)),
        Some(Err(e)) => return super::usage(&e),
    };
    let as2 = match args.as2_config.as_deref().map(crate::as2::config::read) {
        None => None,
        Some(Ok(c)) => Some(Arc::new(c)),
        Some(Err(e)) => return super::usage(&e),
    };
    let config = Arc::new(server::Endpoints { as4, as2 });
    let certificates = certificates(&config);
    warn_of_expiries(&certificates, unix_now());
    if let Some(status) = intake::preflight::check(db, named, "received")? {
        return Ok(status);
    }
    let listener = std::net::TcpListener::bind(&args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let effects = super::effect_plan(&args.effects)?;
    let mut inbox = super::open_deciding(db, busy_timeout, effects.as_ref())?;
    let stop = super::stop_on_signals()?;
    inbox.start_run();
    let limits = Limits {
        max_size: args.max_size,
        max_inflated: args.max_inflated,
        max_concurrent: args.max_concurrent as usize,
        request_timeout: args.request_timeout,
    };
    let (jobs_tx, jobs) = std::sync::mpsc::channel();
    // AS2's asynchronous MDNs, delivered by a thread of their own on a connection of its own,
    // from what the deciding thread committed. It ends once the HTTP side has (on a stop, or
    // where it failed), so that the deciding thread, which runs until both are gone, ends too.
    let served_all = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deliveries = match &config.as2 {
        Some(as2) => {
            let outbox = inbox
                .answer_outbox()
                .context("cannot connect to the inbox for the asynchronous MDNs")?;
            let roots = as2.mdn_roots.clone();
            let stop = served_all.clone();
            let jobs = jobs_tx.clone();
            Some(
                std::thread::Builder::new()
                    .name("as2-mdn".into())
                    .spawn(move || {
                        crate::as2::delivery::run(outbox, roots, &stop, |sent| {
                            let _ = jobs.send(server::Job::AnswerSent(sent));
                        })
                    })
                    .context("cannot start the asynchronous MDNs' deliveries")?,
            )
        }
        None => None,
    };
    let server = {
        let config = config.clone();
        std::thread::Builder::new()
            .name("as4-http".into())
            .spawn(move || {
                // Set however `serve` ends, a panic included: else the deliveries' thread would
                // run on, holding its sender of the jobs, and the deciding loop never end.
                let _ended = SetOnDrop(served_all);
                server::serve(listener, config, limits, stop, jobs_tx)
            })
            .context("cannot start the HTTP listener")?
    };
    if let Some(as4) = &config.as4 {
        crate::output::warn(&format!(
            "receiving AS4 messages for {} on http://{address}",
            as4.party_id
        ));
    }
    if let Some(as2) = &config.as2 {
        crate::output::warn(&format!(
            "receiving AS2 messages for {} on http://{address}{}",
            as2.as2_id,
            server::AS2_PATH
        ));
    }
    let mut run = Run {
        args,
        out: Out::default(),
        summary: Summary::default(),
        started: Instant::now(),
        metrics: MetricsThrottle::default(),
        errors: BTreeMap::new(),
        last_request: 0.0,
        other_problems: 0,
        mdn_backlog: None,
        certificates,
    };
    let signer = receiver::Signers {
        as4: config.as4.as_deref().map(|c| Signer {
            key: &c.keys.own_key,
            cert: &c.keys.own_cert,
        }),
        as2: config.as2.as_deref(),
    };
    receiver::run(
        &mut inbox,
        &jobs,
        signer,
        super::ack_policy(&args.acks, &args.effects),
        || super::open_deciding(db, busy_timeout, effects.as_ref()),
        &mut run,
    );
    if let Some(d) = deliveries {
        d.join()
            .map_err(|_| anyhow::anyhow!("the asynchronous MDNs' deliveries failed"))?;
    }
    let served = server
        .join()
        .map_err(|_| anyhow::anyhow!("the HTTP listener failed"))?;
    served.with_context(|| format!("the HTTP listener on {address} failed"))?;
    inbox.end_run();
    Ok(run.finish())
}

/// How long before a certificate's notAfter `receive` starts warning of it at start-up (the
/// alert `EdiInboxCertificateExpiring` fires from 14 days on).
const EXPIRY_WARNING_DAYS: i64 = 30;

/// The certificates of both configurations, each with its transport.
fn certificates(config: &server::Endpoints) -> Vec<(&'static str, crate::as4::config::Expiry)> {
    let as4 = config.as4.iter().flat_map(|c| c.certificates.iter());
    let as2 = config.as2.iter().flat_map(|c| c.certificates.iter());
    as4.map(|e| ("as4", e.clone()))
        .chain(as2.map(|e| ("as2", e.clone())))
        .collect()
}

/// Says, at start-up, each certificate that has expired or expires within
/// [`EXPIRY_WARNING_DAYS`] (`now` in seconds since 1970): a partner's signatures are still
/// checked against it, but the partner (or we) will soon sign with another.
fn warn_of_expiries(certificates: &[(&'static str, crate::as4::config::Expiry)], now: f64) {
    let now = now as i64;
    for (transport, e) in certificates {
        let day = crate::clock::rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(e.not_after.max(0) as u64),
        );
        let day = day.get(..10).unwrap_or(&day);
        let flag = format!("--{transport}-config");
        if e.not_after <= now {
            crate::output::warn(&format!(
                "{flag}: the certificate of {} expired on {day}: renew it, or get the partner's new one",
                e.certificate
            ));
        } else if e.not_after - now <= EXPIRY_WARNING_DAYS * 86_400 {
            crate::output::warn(&format!(
                "{flag}: the certificate of {} expires on {day}, in {} days",
                e.certificate,
                (e.not_after - now + 43_200) / 86_400
            ));
        }
    }
}

/// One line for an asynchronous MDN's delivery (`--json`).
#[derive(Debug, Serialize)]
struct MdnLine<'a> {
    status: &'static str,
    file: String,
    url: &'a str,
    attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_in_seconds: Option<u64>,
    /// The negative MDN of a message refused (said only where it is one).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    refused: bool,
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A receive run: what it has reported so far, and its metrics.
struct Run<'a> {
    args: &'a ReceiveArgs,
    out: Out,
    summary: Summary,
    started: Instant,
    metrics: MetricsThrottle,
    /// Refusals by ebMS error code, for the metrics.
    errors: BTreeMap<&'static str, usize>,
    last_request: f64,
    other_problems: usize,
    /// The asynchronous MDNs waiting for delivery and the age of the oldest, as last read.
    mdn_backlog: Option<(i64, Option<i64>)>,
    /// The configurations' certificates and when each expires, for the metrics.
    certificates: Vec<(&'static str, crate::as4::config::Expiry)>,
}

impl receiver::Report for Run<'_> {
    fn refused(&mut self, rejected: &Rejected, peer: SocketAddr) {
        self.count_refused(rejected, peer);
    }

    fn decided(&mut self, _message_id: &str, outcomes: &[Vec<Outcome>]) {
        self.last_request = unix_now();
        self.summary.receipts += 1;
        for o in outcomes.iter().flatten() {
            self.report(o);
        }
        self.out.flush();
    }

    fn not_applied(&mut self, _message_id: &str, outcomes: &[Vec<Outcome>]) {
        self.last_request = unix_now();
        self.summary.refused += 1;
        for o in outcomes.iter().flatten() {
            self.report(o);
        }
        self.out.flush();
    }

    fn refused_as2(&mut self, refused: &crate::as2::message::Refused, peer: SocketAddr) {
        self.last_request = unix_now();
        self.summary.refused += 1;
        *self.errors.entry(refused.modifier).or_default() += 1;
        let file = format!(
            "{}:{}",
            crate::as2::TRANSPORT,
            refused.message_id.as_deref().unwrap_or("-")
        );
        let how = match (refused.status, &refused.requested) {
            (Some(status), _) => format!("HTTP {status}"),
            (None, Some(r)) if r.wanted => {
                crate::as2::mdn::Disposition::refusing(refused.modifier).shown()
            }
            (None, _) => "HTTP 400".to_string(),
        };
        if self.args.json {
            self.out.json(&MessageLine {
                status: "refused",
                file,
                error: Some(refused.modifier),
                reason: Some(&refused.detail),
                peer: peer.ip().to_string(),
            });
        } else {
            self.out.line(&format!(
                "refused    {file}  {how}: {} (from {})",
                refused.detail,
                peer.ip()
            ));
        }
        self.out.flush();
    }

    fn resent(&mut self, transport: &str, message_id: &str, peer: SocketAddr) {
        self.last_request = unix_now();
        self.summary.resent += 1;
        let file = format!("{transport}:{message_id}");
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
    }

    fn failed(&mut self, transport: &str, message_id: &str, why: &str) {
        self.last_request = unix_now();
        self.summary.failed += 1;
        problem(
            &mut self.out,
            &format!(
                "{transport}:{message_id}: {why}; nothing of it was kept, and the sender was told to send it again"
            ),
        );
    }

    fn answer_sent(&mut self, sent: &crate::as2::delivery::Sent) {
        use crate::as2::delivery::Sent;
        let transport = crate::as2::TRANSPORT;
        match sent {
            Sent::Delivered {
                message_id,
                url,
                attempts,
                status,
                refusal,
            } => {
                self.summary.mdns_delivered += 1;
                let which = if *refusal { "negative MDN" } else { "MDN" };
                if self.args.json {
                    self.out.json(&MdnLine {
                        status: "mdn-delivered",
                        file: format!("{transport}:{message_id}"),
                        url,
                        attempts: *attempts,
                        http_status: Some(*status),
                        error: None,
                        retry_in_seconds: None,
                        refused: *refusal,
                    });
                } else if !self.args.quiet {
                    self.out.line(&format!(
                        "mdn-sent   {transport}:{message_id}  its asynchronous {which} delivered to {url} (HTTP {status}, try {attempts})"
                    ));
                }
            }
            Sent::Failed {
                message_id,
                url,
                attempts,
                error,
                retry_in,
                refusal,
            } => {
                self.summary.mdn_failures += 1;
                let which = if *refusal { "negative MDN" } else { "MDN" };
                if self.args.json {
                    self.out.json(&MdnLine {
                        status: "mdn-failed",
                        file: format!("{transport}:{message_id}"),
                        url,
                        attempts: *attempts,
                        http_status: None,
                        error: Some(error),
                        retry_in_seconds: Some(retry_in.as_secs()),
                        refused: *refusal,
                    });
                } else {
                    self.out.line(&format!(
                        "mdn-failed {transport}:{message_id}  its asynchronous {which} was not delivered to {url} (try {attempts}): {error}; tried again in {} s",
                        retry_in.as_secs()
                    ));
                }
            }
            Sent::InboxFailed { error } => problem(
                &mut self.out,
                &format!("asynchronous MDNs: {error}; tried again shortly"),
            ),
            Sent::Backlog {
                undelivered,
                oldest_age_seconds,
            } => {
                self.mdn_backlog = Some((*undelivered, *oldest_age_seconds));
            }
        }
        self.out.flush();
    }

    fn reconnected(&mut self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => crate::output::warn("the inbox's connection was lost: connected again"),
            Err(why) => problem(
                &mut self.out,
                &format!("the inbox's connection was lost, and connecting again failed: {why}"),
            ),
        }
    }

    fn tick(&mut self) {
        self.metrics_now(false);
    }
}

impl Run<'_> {
    fn count_refused(&mut self, rejected: &Rejected, peer: SocketAddr) {
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
            Status::Refused => self.summary.interchanges_refused += 1,
        }
        if self.args.json {
            self.out.json(o);
        } else if !self.args.quiet || o.status().is_problem() {
            for line in o.human_lines() {
                self.out.line(&line);
            }
        }
    }

    /// Writes the metrics file where one is asked for: at most every
    /// [`super::service::METRICS_EVERY`], and at the end (`last`).
    fn metrics_now(&mut self, last: bool) {
        let Some(path) = &self.args.metrics_file else {
            return;
        };
        if !self.metrics.due(last) {
            return;
        }
        let s = &self.summary;
        let mut m = Metrics::default();
        m.outcomes(
            &catalogue::RECEIVE_RUN_REQUESTS,
            &[
                ("receipt", s.receipts),
                ("resent", s.resent),
                ("refused", s.refused),
                ("failed", s.failed),
            ],
        )
        .outcomes(
            &catalogue::RECEIVE_RUN_INTERCHANGES,
            &[
                ("new", s.new),
                ("duplicate", s.duplicate),
                ("drift", s.drift),
                ("rejected", s.rejected),
                ("refused", s.interchanges_refused),
            ],
        );
        if !self.errors.is_empty() {
            m.family(&catalogue::RECEIVE_RUN_ERRORS);
            for (code, n) in &self.errors {
                m.sample(&catalogue::RECEIVE_RUN_ERRORS, &[code], *n as f64);
            }
        }
        if self.args.as2_config.is_some() {
            m.outcomes(
                &catalogue::RECEIVE_RUN_MDN_DELIVERIES,
                &[("delivered", s.mdns_delivered), ("failed", s.mdn_failures)],
            );
            if let Some((undelivered, oldest)) = self.mdn_backlog {
                m.single(&catalogue::RECEIVE_MDNS_UNDELIVERED, undelivered as f64)
                    .single(
                        &catalogue::RECEIVE_MDN_OLDEST_UNDELIVERED_AGE_SECONDS,
                        oldest.unwrap_or(0) as f64,
                    );
            }
        }
        if !self.certificates.is_empty() {
            m.family(&catalogue::RECEIVE_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS);
        }
        for (transport, e) in &self.certificates {
            m.sample(
                &catalogue::RECEIVE_CERTIFICATE_EXPIRY_TIMESTAMP_SECONDS,
                &[&e.certificate, transport],
                e.not_after as f64,
            );
        }
        m.single(
            &catalogue::RECEIVE_LAST_REQUEST_TIMESTAMP_SECONDS,
            self.last_request,
        )
        .single(
            &catalogue::RECEIVE_RUN_DURATION_SECONDS,
            self.started.elapsed().as_secs_f64(),
        );
        if last {
            m.single(
                &catalogue::RECEIVE_LAST_SUCCESS_TIMESTAMP_SECONDS,
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
    fn finish(mut self) -> ExitStatus {
        self.metrics_now(true);
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else {
            self.out.line(&crate::output::stamped(&format!(
                "{} receipts ({} sent again), {} refused, {} failed; {} new, {} duplicate, {} drift, {} rejected",
                s.receipts + s.resent,
                s.resent,
                s.refused,
                s.failed,
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
            )));
        }
        self.out.flush();
        ExitStatus::from_problems(
            s.drift
                + s.rejected
                + s.interchanges_refused
                + s.refused
                + s.failed
                + self.other_problems
                + usize::from(self.out.failed()),
        )
    }
}
