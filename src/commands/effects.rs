//! `effects check` and `effects try FILE`: the side effects installed in a transaction that is
//! rolled back, to see what they cover, or what they do to a file's interchanges, before a run
//! does it for good.

use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{EffectArgs, EffectsAction, EffectsArgs, EffectsCheckArgs, EffectsTryArgs};
use crate::effects::{Effects, Param};
use crate::exit::ExitStatus;
use crate::inbox::effects::{InstallMode, Traced};
use crate::inbox::{Access, Inbox, Location};
use crate::intake::{self, Outcome, Parsed, Source};
use crate::output::{Out, count};
use crate::status::Status;

/// Runs `effects`.
pub fn run(
    db: &Location,
    busy_timeout: Duration,
    args: &EffectsArgs,
) -> anyhow::Result<ExitStatus> {
    match &args.action {
        EffectsAction::Check(a) => check(db, busy_timeout, a),
        EffectsAction::Try(a) => try_file(db, busy_timeout, a),
    }
}

/// The side effects installed on an inbox: the folder, the inbox, and what installing found
/// (each migration with whether it is still to apply; the files run a statement at a time).
type Installed = (
    super::EffectPlan,
    Box<dyn Inbox>,
    crate::inbox::effects::Installation,
);

/// The folder, read and checked, and the inbox with it installed in `mode`; `Err` with the
/// status to end with where `--effects` names none.
fn installed(
    db: &Location,
    busy_timeout: Duration,
    args: &EffectArgs,
    mode: InstallMode,
) -> anyhow::Result<Result<Installed, ExitStatus>> {
    let Some(plan) = super::effect_plan(args)? else {
        return Ok(Err(super::usage(
            "name the side effects with --effects DIR (or EDI_INBOX_EFFECTS)",
        )?));
    };
    let plan = plan.installed(mode, mode == InstallMode::Try);
    let mut inbox = super::open_inbox(db, Access::Write, busy_timeout)?;
    let installation = inbox
        .install_effects(plan.effects.clone(), &plan.settings, &crate::clock::now())
        .with_context(|| {
            format!(
                "the side effects of --effects {} do not hold against the inbox database {}",
                plan.dir.display(),
                db.shown()
            )
        })?;
    Ok(Ok((plan, inbox, installation)))
}

/// One file of the folder as `check` says it.
#[derive(Serialize)]
struct FileLine {
    file: String,
    /// What it runs for: `interchange`, or a message type (with version and release).
    runs_for: String,
    statements: Vec<StatementLine>,
    /// On PostgreSQL, why the file runs a statement at a time rather than as one function
    /// called once per run of a batch's messages (docs/effects.md); absent where it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    one_at_a_time: Option<String>,
}

#[derive(Serialize)]
struct StatementLine {
    statement: usize,
    line: usize,
    parameters: Vec<String>,
}

#[derive(Serialize)]
struct MigrationLine {
    file: String,
    /// `applied` (before), or `to apply` (by the next run).
    state: &'static str,
}

#[derive(Serialize)]
struct CheckReport {
    effects: String,
    files: Vec<FileLine>,
    migrations: Vec<MigrationLine>,
}

/// What each file of `effects` runs for, and each statement's parameters; `one_at_a_time`:
/// the files the inbox runs a statement at a time, and why.
fn files(effects: &Effects, one_at_a_time: &[(String, String)]) -> Vec<FileLine> {
    let interchange = effects
        .interchange
        .iter()
        .map(|m| (m, "interchange".to_string()));
    let types = effects.by_type.iter().map(|(k, m)| {
        let mut parts = k.splitn(3, '.');
        let t = parts.next().unwrap_or_default();
        let runs_for = match (parts.next(), parts.next()) {
            (Some(v), Some(r)) => format!("{t} {v}:{r}"),
            _ => t.to_string(),
        };
        (m, runs_for)
    });
    interchange
        .chain(types)
        .map(|(m, runs_for)| FileLine {
            one_at_a_time: one_at_a_time
                .iter()
                .find(|(f, _)| *f == m.file)
                .map(|(_, why)| why.clone()),
            file: m.file.clone(),
            runs_for,
            statements: m
                .statements
                .iter()
                .map(|s| {
                    let mut parameters: Vec<Param> = s.params().collect();
                    parameters.sort();
                    parameters.dedup();
                    StatementLine {
                        statement: s.index,
                        line: s.line,
                        parameters: parameters.iter().map(ToString::to_string).collect(),
                    }
                })
                .collect(),
        })
        .collect()
}

fn check(
    db: &Location,
    busy_timeout: Duration,
    args: &EffectsCheckArgs,
) -> anyhow::Result<ExitStatus> {
    let (plan, mut inbox, installation) =
        match installed(db, busy_timeout, &args.effects, InstallMode::Check)? {
            Ok(done) => done,
            Err(status) => return Ok(status),
        };
    inbox.end_run();
    let report = CheckReport {
        effects: plan.dir.display().to_string(),
        files: files(&plan.effects, &installation.one_at_a_time),
        migrations: installation
            .migrations
            .into_iter()
            .map(|(file, now)| MigrationLine {
                file: format!("migrations/{file}"),
                state: if now { "to apply" } else { "applied" },
            })
            .collect(),
    };
    let mut out = Out::default();
    if args.json {
        out.json(&report);
    } else {
        let statements: usize = report.files.iter().map(|f| f.statements.len()).sum();
        out.line(&format!(
            "--effects {}: {}, {}, every statement prepared against {}",
            report.effects,
            count(report.files.len() as u64, "file", "files"),
            count(statements as u64, "statement", "statements"),
            db.shown()
        ));
        for f in &report.files {
            let runs = if f.runs_for == "interchange" {
                "once per new interchange".to_string()
            } else {
                format!("each {} message", f.runs_for)
            };
            out.line(&format!(
                "  {}  {}: {runs}",
                f.file,
                count(f.statements.len() as u64, "statement", "statements")
            ));
            for s in &f.statements {
                out.line(&format!(
                    "    statement {} (line {}): {}",
                    s.statement,
                    s.line,
                    if s.parameters.is_empty() {
                        "no parameter".to_string()
                    } else {
                        s.parameters.join(" ")
                    }
                ));
            }
            if let Some(why) = &f.one_at_a_time {
                out.line(&format!("    run a statement at a time: {why}"));
            }
        }
        for m in &report.migrations {
            out.line(&format!("  {}  {}", m.file, m.state));
        }
        out.line("  every other message type: no side effect");
    }
    out.flush();
    Ok(ExitStatus::from_problems(usize::from(out.failed())))
}

/// One new message of the file as `try` shows it.
#[derive(Serialize)]
struct MessageLine {
    message_ref: String,
    message_type: String,
    segments: serde_json::Value,
    statements: Vec<RowsLine>,
}

#[derive(Serialize)]
struct RowsLine {
    statement: String,
    rows: u64,
}

#[derive(Serialize)]
struct TryLine<'a> {
    outcome: &'a Outcome,
    interchange_statements: Vec<RowsLine>,
    messages: Vec<MessageLine>,
}

fn try_file(
    db: &Location,
    busy_timeout: Duration,
    args: &EffectsTryArgs,
) -> anyhow::Result<ExitStatus> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let (plan, mut inbox, _) = match installed(db, busy_timeout, &args.effects, InstallMode::Try)? {
        Ok(done) => done,
        Err(status) => return Ok(status),
    };
    let shown = crate::walk::display(&args.file);
    let items: Vec<_> = intake::prepare::interchanges(&bytes, None, None).collect();
    let parsed = [Parsed {
        source: Source::File(shown),
        bytes: &bytes,
        items,
        sha256: None,
        source_path: None,
    }];
    // No CONTRL: nothing of this is kept.
    let acks = intake::AckPolicy::new(crate::edifact::contrl::Mode::Never, false);
    let decided = intake::decide(&mut *inbox, &parsed, &crate::clock::now(), acks);
    let trace = inbox.take_trace();
    inbox.abandon();
    let outcomes = decided?.remove(0);
    let mut out = Out::default();
    let mut problems = 0;
    let mut interchanges = parsed[0].items.iter().filter_map(|i| i.as_ref().ok());
    for o in &outcomes {
        problems += usize::from(o.status().is_problem());
        let i = match o.status() {
            Status::Rejected | Status::Skipped => None,
            _ => interchanges.next().map(|(i, _)| i),
        };
        let mine = |message: Option<&str>| -> Vec<RowsLine> {
            trace
                .iter()
                .filter(|t: &&Traced| {
                    i.is_some_and(|i| t.control_ref == i.unb.control_ref.as_str())
                        && t.message_ref.as_deref() == message
                })
                .map(|t| RowsLine {
                    statement: t.statement.clone(),
                    rows: t.rows,
                })
                .collect()
        };
        let mut messages = Vec::new();
        if let Some(i) = i.filter(|_| matches!(o.status(), Status::New | Status::Refused)) {
            for m in &i.messages {
                if plan
                    .effects
                    .for_message(&m.message_type, &m.version, &m.release)
                    .is_none()
                {
                    continue;
                }
                let segments = crate::edifact::message_segments(i, m)
                    .ok()
                    .and_then(|s| serde_json::to_value(&s).ok())
                    .unwrap_or(serde_json::Value::Null);
                messages.push(MessageLine {
                    message_ref: m.reference.to_string(),
                    message_type: m.message_type.to_string(),
                    segments,
                    statements: mine(Some(&m.reference)),
                });
            }
        }
        let line = TryLine {
            outcome: o,
            interchange_statements: mine(None),
            messages,
        };
        if args.json {
            out.json(&line);
            continue;
        }
        for line in o.human_lines() {
            out.line(&line);
        }
        for s in &line.interchange_statements {
            out.line(&format!(
                "  {}: {}",
                s.statement,
                count(s.rows, "row", "rows")
            ));
        }
        for m in &line.messages {
            out.line(&format!(
                "  message {} ({}): {}",
                m.message_ref, m.message_type, m.segments
            ));
            for s in &m.statements {
                out.line(&format!(
                    "    {}: {}",
                    s.statement,
                    count(s.rows, "row", "rows")
                ));
            }
        }
    }
    if !args.json {
        out.line("rolled back: nothing of this was kept");
    }
    out.flush();
    Ok(ExitStatus::from_problems(
        problems + usize::from(out.failed()),
    ))
}
