//! `edi-inbox purge`: keep the inbox to its retention window.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::cli::PurgeArgs;
use crate::exit::ExitStatus;
use crate::inbox::names::Counter;
use crate::inbox::{Access, Location, PurgeTarget};
use crate::metrics::{Metrics, catalogue, unix_now};
use crate::output::{Out, count, problem};

/// What `purge --json` prints.
#[derive(Debug, Serialize)]
pub struct PurgeReport {
    /// Inbox entries purged (or, with `--dry-run`, that would be).
    pub purged: i64,
    pub days: u32,
    pub dry_run: bool,
    /// Entries received before this time go.
    pub cutoff: String,
    pub sightings_purged: i64,
    pub rejections_purged: i64,
    /// Records of deliveries `consume` took from a broker.
    pub deliveries_purged: i64,
    /// AS2 and AS4 message ids (with their receipts and MDNs) `receive` took, and the
    /// negative MDNs of refused AS2 messages queued for asynchronous delivery.
    pub transport_messages_purged: i64,
    /// `received_at` of the oldest entry kept.
    pub oldest_kept: Option<String>,
}

/// Runs `purge`.
pub fn run(db: &Location, busy_timeout: Duration, args: &PurgeArgs) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let mut inbox = super::open_inbox(db, Access::Write, busy_timeout)?;
    // Clamped at 1970: --days 36500 purges everything older than that, which is nothing.
    let cutoff = crate::clock::days_ago(args.days);
    let mut counts = [0i64; 6];
    let targets = [
        PurgeTarget::Inbox,
        PurgeTarget::Sightings,
        PurgeTarget::Rejections,
        PurgeTarget::Deliveries,
        PurgeTarget::TransportMessages,
        PurgeTarget::RefusedAnswers,
    ];
    for (target, count) in targets.iter().zip(counts.iter_mut()) {
        if args.dry_run {
            *count = inbox.count_older(*target, &cutoff)?;
            continue;
        }
        loop {
            let n = inbox
                .purge_step(*target, &cutoff, args.batch_size)
                .context("cannot purge the inbox database")?;
            *count += n as i64;
            if n < args.batch_size as usize {
                break;
            }
        }
    }
    if !args.dry_run {
        // The store then holds everything (a copy of the database file is a whole backup).
        inbox.end_run();
    }
    let oldest_kept = if args.dry_run {
        None
    } else {
        inbox.oldest_entry()?
    };
    let report = PurgeReport {
        purged: counts[0],
        days: args.days,
        dry_run: args.dry_run,
        cutoff,
        sightings_purged: counts[1],
        rejections_purged: counts[2],
        deliveries_purged: counts[3],
        // A refused message's queued MDN is the record that message id left.
        transport_messages_purged: counts[4] + counts[5],
        oldest_kept,
    };
    let mut out = Out::default();
    if args.json {
        out.json(&report);
    } else {
        let verb = if args.dry_run {
            "would purge"
        } else {
            "purged"
        };
        let n = |v: i64| v.max(0) as u64;
        // Deliveries are named only where there are any: most inboxes never consume.
        let deliveries = match n(report.deliveries_purged) {
            0 => String::new(),
            d => format!(", {}", count(d, "delivery record", "delivery records")),
        };
        // The same of AS4's message ids: only `receive` has them.
        let deliveries = match n(report.transport_messages_purged) {
            0 => deliveries,
            m => format!(
                "{deliveries}, {}",
                count(m, "AS2/AS4 message id", "AS2/AS4 message ids")
            ),
        };
        out.line(&crate::output::stamped(&format!(
            "{verb} {} received before {} ({} days), {}, {}{deliveries}",
            count(n(report.purged), "inbox entry", "inbox entries"),
            report.cutoff,
            report.days,
            count(n(report.sightings_purged), "sighting", "sightings"),
            count(
                n(report.rejections_purged),
                "rejected-file record",
                "rejected-file records"
            )
        )));
        if !args.dry_run {
            out.line(&match &report.oldest_kept {
                Some(t) => format!("oldest entry kept: {t}"),
                None => "the inbox is empty".to_string(),
            });
        }
    }
    out.flush();
    let mut metrics_failed = false;
    if let Some(path) = &args.metrics_file {
        let mut m = Metrics::default();
        m.single(
            &catalogue::PURGE_ENTRIES_TOTAL,
            inbox.counter(Counter::PurgeEntries)? as f64,
        )
        .single(&catalogue::PURGE_LAST_RUN_ENTRIES, report.purged as f64)
        .single(
            &catalogue::PURGE_LAST_RUN_DURATION_SECONDS,
            started.elapsed().as_secs_f64(),
        )
        .single(&catalogue::PURGE_LAST_SUCCESS_TIMESTAMP_SECONDS, unix_now());
        if let Err(e) = m.write_to(path) {
            metrics_failed = true;
            problem(
                &mut out,
                &format!("cannot write the metrics file {}: {e}", path.display()),
            );
        }
    }
    // The purge is done; a report or metrics file that could not be written is told by the
    // status (3), not taken for a failed purge (1).
    Ok(ExitStatus::from_problems(
        usize::from(out.failed()) + usize::from(metrics_failed),
    ))
}
