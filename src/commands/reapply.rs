//! `reapply --refused`: the interchanges the side effects refused, decided again by the intake
//! exactly as a file is (with the side effects as they are now), each refusal resolved in the
//! same transaction as its decision. `reapply --applied`: the side effects of one message type
//! run again over the messages stored, batch by batch, nothing else changed.

use std::time::Duration;

use anyhow::Context as _;

use crate::cli::ReapplyArgs;
use crate::exit::ExitStatus;
use crate::inbox::{Access, Location};
use crate::intake::{self, Outcome, Parsed, Source, Summary};
use crate::output::{Out, count};
use crate::status::Status;

/// Runs `reapply`.
pub fn run(
    db: &Location,
    busy_timeout: Duration,
    args: &ReapplyArgs,
) -> anyhow::Result<ExitStatus> {
    if args.effects.effects.is_none() {
        return super::usage(
            "reapply decides with the side effects: name them with --effects DIR (or EDI_INBOX_EFFECTS)",
        );
    }
    let plan = super::effect_plan(&args.effects)?;
    if let (true, Some(t), Some(plan)) = (args.applied, &args.message_type, &plan)
        && !plan
            .effects
            .by_type
            .keys()
            .any(|k| k.split('.').next() == Some(t.as_str()))
    {
        return super::usage(&format!(
            "--type {t}: the side effects in --effects {} have no file for {t}",
            plan.dir.display()
        ));
    }
    let mut inbox = super::open_with_effects(db, Access::Write, busy_timeout, plan.as_ref())?;
    if args.applied {
        return applied(&mut *inbox, args);
    }
    let acks = super::ack_policy(&args.acks, &args.effects);
    let mut out = Out::default();
    let mut summary = Summary::default();
    let mut after = 0;
    loop {
        let kept = inbox
            .open_refusals(&args.ids, after, args.batch)
            .context("cannot read the refused interchanges from the inbox database")?;
        let Some(last) = kept.last() else { break };
        after = last.id;
        let when = crate::clock::now();
        // The bytes are read again by their standard's reader: EDIFACT's is the only one yet,
        // so a refusal of another standard is left kept, and said, rather than misread.
        let (kept, unread): (Vec<_>, Vec<_>) = kept
            .iter()
            .partition(|k| k.standard == crate::standard::Standard::Edifact);
        for k in unread {
            crate::output::warn(&format!(
                "note: refusal {} ({} {} {}) is of {}, which this edi-inbox cannot read again: left kept",
                k.id,
                k.sender,
                k.recipient,
                k.control_ref,
                k.standard.as_str().to_uppercase()
            ));
        }
        let inputs: Vec<Parsed<'_>> = kept
            .iter()
            .map(|k| Parsed {
                source: Source::File(k.source_file.clone()),
                bytes: &k.raw,
                items: intake::prepare::interchanges(&k.raw, None, None).collect(),
                sha256: None,
                source_path: None,
            })
            .collect();
        let outcomes = intake::decide(&mut *inbox, &inputs, &when, acks)?;
        for (k, own) in kept.iter().zip(&outcomes) {
            // A kept interchange is one whole interchange: its one outcome says how it went.
            let resolved = own
                .iter()
                .map(Outcome::status)
                .find(|s| matches!(s, Status::New | Status::Duplicate | Status::Drift));
            if let Some(status) = resolved {
                let ours = inbox
                    .resolve_refusal(k.id, status, &when)
                    .context("cannot write to the inbox database")?;
                if !ours {
                    crate::output::warn(&format!(
                        "note: refusal {} ({} {} {}) was resolved by another run meanwhile",
                        k.id, k.sender, k.recipient, k.control_ref
                    ));
                }
            }
        }
        inbox
            .commit()
            .context("cannot commit to the inbox database")?;
        for o in outcomes.iter().flatten() {
            summary.count(o.status());
            summary.files += 1;
            if args.json {
                out.json(o);
            } else {
                for line in o.human_lines() {
                    out.line(&line);
                }
            }
        }
        out.flush();
    }
    inbox.end_run();
    if args.json {
        out.json_summary(&summary);
    } else {
        out.line(&crate::output::stamped(&format!(
            "{} decided again: {} new, {} duplicate, {} drift, {} refused again",
            count(
                summary.files as u64,
                "refused interchange",
                "refused interchanges"
            ),
            summary.new,
            summary.duplicate,
            summary.drift,
            summary.refused,
        )));
    }
    out.flush();
    Ok(ExitStatus::from_problems(
        summary.drift + summary.refused + summary.rejected + usize::from(out.failed()),
    ))
}

/// One message `reapply --applied` ran the side effects again for, as a line.
#[derive(serde::Serialize)]
struct AppliedLine<'a> {
    file: &'a str,
    status: &'a str,
    interchange_id: i64,
    sender: &'a str,
    recipient: &'a str,
    control_ref: &'a str,
    message_ref: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `reapply --applied` did.
#[derive(Default, serde::Serialize)]
struct AppliedSummary {
    messages: usize,
    reapplied: usize,
    failed: usize,
}

/// `reapply --applied`: batch after batch of interchanges, each committed.
fn applied(inbox: &mut dyn crate::inbox::Inbox, args: &ReapplyArgs) -> anyhow::Result<ExitStatus> {
    let filter = crate::inbox::ReapplyFilter {
        message_type: args.message_type.clone().unwrap_or_default(),
        since: args.since.clone(),
        changed: args.changed,
    };
    let mut out = Out::default();
    let mut summary = AppliedSummary::default();
    let mut after = 0;
    loop {
        let when = crate::clock::now();
        let batch = inbox
            .reapply_effects(&filter, after, args.batch, &when)
            .context("cannot run the side effects again in the inbox database")?;
        let Some(last) = batch.last else { break };
        after = last;
        inbox
            .commit()
            .context("cannot commit to the inbox database")?;
        for m in &batch.messages {
            summary.messages += 1;
            let error = m.failure.as_ref().map(ToString::to_string);
            let word = match error {
                Some(_) => {
                    summary.failed += 1;
                    "failed"
                }
                None => {
                    summary.reapplied += 1;
                    "reapplied"
                }
            };
            if args.json {
                out.json(&AppliedLine {
                    file: &m.source_file,
                    status: word,
                    interchange_id: m.interchange_id,
                    sender: &m.sender,
                    recipient: &m.recipient,
                    control_ref: &m.control_ref,
                    message_ref: &m.message_ref,
                    error,
                });
            } else {
                let why = error
                    .map(|e| format!(": {e}; rolled back alone"))
                    .unwrap_or_default();
                out.line(&format!(
                    "{word:<9}  {}  {} -> {}  ref {}  message {}{why}",
                    m.source_file, m.sender, m.recipient, m.control_ref, m.message_ref
                ));
            }
        }
        out.flush();
    }
    inbox.end_run();
    if args.json {
        out.json_summary(&summary);
    } else {
        out.line(&crate::output::stamped(&format!(
            "{} run again: {} reapplied, {} failed",
            count(summary.messages as u64, "message", "messages"),
            summary.reapplied,
            summary.failed
        )));
    }
    out.flush();
    Ok(ExitStatus::from_problems(
        summary.failed + usize::from(out.failed()),
    ))
}
