//! `edi-inbox stats`, `list` and `show`: what the inbox holds, for the operator.

use std::time::Duration;

use serde::Serialize;

use crate::cli::{ListArgs, ShowArgs, StatsArgs, StatusArg};
use crate::commands::inspect::print_segments;
use crate::exit::ExitStatus;
use crate::inbox::{Access, EventFilter, Location};
use crate::output::{Out, problem};
use crate::status::Status;

#[derive(Debug, Serialize)]
struct StatsJson {
    #[serde(flatten)]
    stats: crate::inbox::Stats,
    database_bytes: u64,
}

/// Runs `stats`.
pub fn stats(
    db: &Location,
    busy_timeout: Duration,
    args: &StatsArgs,
) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let s = StatsJson {
        stats: inbox.stats()?,
        database_bytes: inbox.size_bytes(),
    };
    let mut out = Out::default();
    if args.json {
        out.json(&s);
    } else {
        let t = &s.stats;
        let none = || "-".to_string();
        for line in [
            format!(
                "database             {} ({} bytes)",
                db.shown(),
                s.database_bytes
            ),
            format!("inbox entries        {}", t.inbox),
            format!("interchanges         {}", t.interchanges),
            format!("messages             {}", t.messages),
            format!("duplicates seen      {}", t.duplicates),
            format!("drift                {}", t.drift),
            format!("rejected files       {}", t.rejected),
            format!("refused, kept        {}", t.refused),
            format!(
                "outbox unpublished   {} ({} of messages, {} CONTRLs)",
                t.outbox_unpublished,
                t.outbox_kinds.message.unpublished,
                t.outbox_kinds.contrl.unpublished
            ),
            format!(
                "outbox failed        {} ({} of messages, {} CONTRLs)",
                t.outbox_failed, t.outbox_kinds.message.failed, t.outbox_kinds.contrl.failed
            ),
            format!(
                "oldest unpublished   {}",
                t.outbox_oldest_unpublished_age_seconds
                    .map(|s| format!(
                        "{} ago",
                        humantime::format_duration(Duration::from_secs(s.max(0) as u64))
                    ))
                    .unwrap_or_else(none)
            ),
            format!(
                "oldest inbox entry   {}",
                t.oldest_entry.clone().unwrap_or_else(none)
            ),
            format!(
                "newest inbox entry   {}",
                t.newest_entry.clone().unwrap_or_else(none)
            ),
        ] {
            out.line(&line);
        }
    }
    out.flush();
    Ok(reported(&out))
}

/// Runs `list`.
pub fn list(db: &Location, busy_timeout: Duration, args: &ListArgs) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let events = inbox.events(&EventFilter {
        status: args.status.map(|s| match s {
            StatusArg::New => Status::New,
            StatusArg::Duplicate => Status::Duplicate,
            StatusArg::Drift => Status::Drift,
            StatusArg::Rejected => Status::Rejected,
            StatusArg::Refused => Status::Refused,
            StatusArg::Failed => Status::Failed,
        }),
        sender: args.sender.clone(),
        since: args.since.clone(),
        limit: args.limit,
    })?;
    let mut out = Out::default();
    for e in &events {
        if args.json {
            out.json(e);
        } else {
            let what = match (&e.sender, &e.recipient, &e.control_ref) {
                (Some(s), Some(r), Some(c)) if e.refusal_id.is_some() => format!(
                    "{s} {r} {c}  refusal {}: {}",
                    e.refusal_id.unwrap_or_default(),
                    e.error.as_deref().unwrap_or_default()
                ),
                (Some(s), Some(r), Some(c)) if e.event_id.is_some() => format!(
                    "{s} {r} {c}  {} event {}: {}",
                    e.event_kind.unwrap_or_default(),
                    e.event_id.unwrap_or_default(),
                    e.error.as_deref().unwrap_or_default()
                ),
                (Some(s), Some(r), Some(c)) => format!("{s} {r} {c}"),
                _ => match e.errors {
                    Some(n) if n > 1 => format!(
                        "{} (and {} more errors in the file)",
                        e.error.as_deref().unwrap_or_default(),
                        n - 1
                    ),
                    _ => e.error.clone().unwrap_or_default(),
                },
            };
            out.line(&format!(
                "{}  {}  {}  {what}",
                e.time,
                e.status.label(),
                e.file
            ));
        }
    }
    out.flush();
    Ok(reported(&out))
}

/// Runs `show`.
pub fn show(db: &Location, busy_timeout: Duration, args: &ShowArgs) -> anyhow::Result<ExitStatus> {
    let inbox = super::open_inbox(db, Access::Read, busy_timeout)?;
    let h = inbox.key_history(&args.sender, &args.recipient, &args.control_ref)?;
    let mut out = Out::default();
    if h.interchanges.is_empty() && h.sightings.is_empty() && h.refusals.is_empty() {
        problem(
            &mut out,
            &format!(
                "no interchange from {} to {} with control reference {} is stored in {}",
                args.sender,
                args.recipient,
                args.control_ref,
                db.shown()
            ),
        );
        return Ok(ExitStatus::Problems);
    }
    let acks = inbox.acknowledgements(&args.sender, &args.recipient, &args.control_ref)?;
    if args.contrl {
        match acks.first() {
            Some(a) => out.raw(&a.bytes),
            None => {
                problem(&mut out, "no CONTRL answered this interchange");
                out.flush();
                return Ok(ExitStatus::Problems);
            }
        }
        out.flush();
        return Ok(reported(&out));
    }
    if args.diff || args.copy.is_some() {
        let copies = inbox.drifted_copies(&args.sender, &args.recipient, &args.control_ref)?;
        return Ok(match args.copy {
            Some(n) => super::drift::raw_copy(&mut out, &copies, n as usize),
            None => super::drift::print(&mut out, &h.interchanges, &copies, args.json),
        });
    }
    if args.raw {
        let pick = h
            .interchanges
            .iter()
            .find(|i| i.in_inbox)
            .or(h.interchanges.last());
        if let Some(i) = pick {
            out.raw(&i.raw);
        }
        out.flush();
        return Ok(reported(&out));
    }
    if args.segments {
        return show_segments(&mut out, &h.interchanges, args.json);
    }
    if args.json {
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            #[serde(flatten)]
            history: &'a crate::inbox::KeyHistory,
            acknowledgements: &'a [crate::inbox::StoredAcknowledgement],
        }
        out.json(&Shown {
            history: &h,
            acknowledgements: &acks,
        });
        out.flush();
        return Ok(reported(&out));
    }
    for i in &h.interchanges {
        let q = |id: &str, q: &Option<String>| match q {
            Some(q) => format!("{id} (qualifier {q})"),
            None => id.to_string(),
        };
        for line in [
            format!(
                "interchange {} (stored as #{}{})",
                i.control_ref,
                i.id,
                if i.in_inbox {
                    ", in the inbox"
                } else {
                    ", purged from the inbox"
                }
            ),
            format!("  sender       {}", q(&i.sender, &i.sender_qualifier)),
            format!("  recipient    {}", q(&i.recipient, &i.recipient_qualifier)),
            format!("  syntax       {}", i.syntax),
            format!("  prepared     {} {}", i.date, i.time),
            format!("  test         {}", if i.test { "yes" } else { "no" }),
            format!("  sha256       {}", i.sha256),
            format!("  first seen   {} in {}", i.received_at, i.source_file),
        ] {
            out.line(&line);
        }
        if let Some(filed) = filed(&i.filed) {
            out.line(&format!("  filed        {filed}"));
        }
        out.line(&format!("  messages     {}", i.messages.len()));
        for m in &i.messages {
            out.line(&format!(
                "    {:<14} {} {}:{}:{}  {} segments  outbox {}",
                m.reference,
                m.message_type,
                m.version,
                m.release,
                m.agency,
                m.segments,
                m.outbox_published_at
                    .as_deref()
                    .map_or("unpublished".to_string(), |t| format!("published {t}"))
            ));
        }
    }
    out.line(&format!("sightings    {}", h.sightings.len()));
    for s in &h.sightings {
        let detail = if s.status == Status::Drift {
            format!("sha256 {} (first accepted {})", s.sha256, s.stored_sha256)
        } else {
            format!("sha256 {}", s.sha256)
        };
        out.line(&format!(
            "  {}  {}  {}  {detail}",
            s.seen_at,
            s.status.label(),
            s.source_file
        ));
        if let Some(filed) = filed(&s.filed) {
            out.line(&format!("    filed  {filed}"));
        }
    }
    for r in &h.refusals {
        let state = match (&r.resolved_at, &r.resolved_as) {
            (Some(at), Some(how)) => format!("decided again {at} as {how}"),
            _ => "kept, not applied (reapply --refused)".to_string(),
        };
        out.line(&format!(
            "refusal {}  {}  in {}  sha256 {}  seen {} times, first {}, last {}; {state}",
            r.id,
            r.refusal,
            r.source_file,
            r.sha256,
            r.refusal.times_seen,
            r.first_seen_at,
            r.last_seen_at
        ));
    }
    for a in &acks {
        out.line(&format!(
            "answered by CONTRL {}  UCI 0083 {}{}  at {}",
            a.own_ref,
            a.action,
            a.error_code
                .as_deref()
                .map(|c| format!(", 0085 {c}"))
                .unwrap_or_default(),
            a.created_at
        ));
    }
    out.flush();
    Ok(reported(&out))
}

/// Where a sighting was read from, on which host, and where its file went, in words; `None`
/// where nothing of it is known (a row from before edi-inbox kept them).
fn filed(f: &crate::inbox::Filed) -> Option<String> {
    if f.source_path.is_none() && f.host.is_none() && f.moved_to.is_none() {
        return None;
    }
    let mut text = match &f.source_path {
        Some(p) => format!("read from {p}"),
        None => "not read from a file".to_string(),
    };
    if let Some(h) = &f.host {
        text = format!("{text} on {h}");
    }
    Some(match (&f.moved_to, &f.source_path) {
        (Some(to), _) => format!("{text}, moved to {to}"),
        (None, Some(_)) => format!("{text}, not moved (or its move not recorded)"),
        (None, None) => text,
    })
}

/// `show --segments`: each message's segments, from the stored bytes of the copy the inbox
/// holds (else the latest), read again as `inspect --segments` reads a file; offsets are within
/// those bytes, and `file` names the file the copy came from.
fn show_segments(
    out: &mut Out,
    copies: &[crate::inbox::StoredInterchange],
    json: bool,
) -> anyhow::Result<ExitStatus> {
    let Some(copy) = copies.iter().find(|i| i.in_inbox).or(copies.last()) else {
        problem(out, "the inbox keeps no bytes of this interchange");
        return Ok(ExitStatus::Problems);
    };
    let mut failed = 0;
    for item in crate::edifact::interchanges(&copy.raw) {
        match item {
            Ok(i) => failed += print_segments(out, &copy.source_file, &i, json),
            Err(e) => {
                // The inbox stored only what the parser accepted: bytes that no longer parse
                // were changed after.
                failed += 1;
                problem(
                    out,
                    &format!(
                        "the stored bytes of interchange #{} do not parse: {e}",
                        copy.id
                    ),
                );
            }
        }
    }
    out.flush();
    Ok(if failed > 0 {
        ExitStatus::Problems
    } else {
        reported(out)
    })
}

/// The status of a report: its output is its whole work, so output that could not be written
/// (other than to a reader that went away, as `| head` does) is a failure.
fn reported(out: &Out) -> ExitStatus {
    if out.failed() {
        ExitStatus::Fatal
    } else {
        ExitStatus::Success
    }
}
