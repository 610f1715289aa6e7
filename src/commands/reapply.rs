//! `reapply --refused`: the interchanges the side effects refused, decided again by the intake
//! exactly as a file is (with the side effects as they are now), each refusal resolved in the
//! same transaction as its decision.

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
    let mut inbox = super::open_with_effects(db, Access::Write, busy_timeout, plan.as_ref())?;
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
        let inputs: Vec<Parsed<'_>> = kept
            .iter()
            .map(|k| Parsed {
                source: Source::File(k.source_file.clone()),
                bytes: &k.raw,
                items: intake::prepare::interchanges(&k.raw, None).collect(),
                sha256: None,
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
                out.line(&o.human());
            }
        }
        out.flush();
    }
    inbox.end_run();
    if args.json {
        out.json_summary(&summary);
    } else {
        out.line(&format!(
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
        ));
    }
    out.flush();
    Ok(ExitStatus::from_problems(
        summary.drift + summary.refused + summary.rejected + usize::from(out.failed()),
    ))
}
