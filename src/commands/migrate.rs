//! `edi-inbox migrate --from SQLITE_FILE --to postgres://...`: an SQLite inbox moved into
//! PostgreSQL whole, in one transaction on the target, checked on both sides before it commits.
//!
//! What is copied, and what is not, is [`crate::inbox::copying`]'s; here is the order of the
//! steps and what the operator is told.

use std::time::Duration;

use serde::Serialize;

use crate::cli::MigrateArgs;
use crate::exit::ExitStatus;
use crate::inbox::copying::{Figures, NOT_COPIED, Value};
use crate::inbox::{self, InboxError, Location};
use crate::output::{Out, warn};

/// Rows written to the target at once, at most (and no more bytes than [`BATCH_BYTES`]).
const BATCH_ROWS: usize = 1000;
const BATCH_BYTES: usize = 8 << 20;

#[derive(Debug, Serialize)]
struct Report {
    from: String,
    to: String,
    /// "copied", or "unchanged" where the target held exactly the source already.
    outcome: &'static str,
    keys: i64,
    keys_sha256: String,
    /// Rows per table, as both sides count them.
    tables: Vec<TableRows>,
    /// The source's tables edi-inbox does not know (the side effects' own): not copied.
    not_copied: Vec<String>,
    /// Where the target held another inbox's data that --replace deleted.
    replaced: bool,
}

#[derive(Debug, Serialize)]
struct TableRows {
    table: String,
    rows: i64,
}

/// Runs `migrate`.
pub fn run(
    pg_schema: &str,
    busy_timeout: Duration,
    args: &MigrateArgs,
) -> anyhow::Result<ExitStatus> {
    use anyhow::Context as _;
    // Told apart by what each is, not by matching the kinds: a build without PostgreSQL has
    // only the one.
    let from = match Location::parse(args.from.as_os_str(), pg_schema) {
        Ok(from) if from.sqlite_path().is_some() => from,
        Ok(_) => {
            return super::usage_of(
                "--from",
                "names the SQLite inbox to copy (its file); a copy is made from SQLite into PostgreSQL",
            );
        }
        Err(e) => return super::usage_of("--from", &e.to_string()),
    };
    let to = match Location::parse(&args.to, pg_schema) {
        Ok(to) if to.sqlite_path().is_none() => to,
        Ok(_) => {
            return super::usage_of(
                "--to",
                "names the PostgreSQL inbox to copy into (postgres://... or host=... dbname=...)",
            );
        }
        Err(e) => return super::usage_of("--to", &e.to_string()),
    };
    let mut source = match inbox::open_copy_source(&from, busy_timeout) {
        Ok(s) => s,
        Err(InboxError::Missing { path }) => {
            warn(&format!(
                "error: --from {path}: there is no inbox database there: check the path"
            ));
            return Ok(ExitStatus::Fatal);
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot open --from {}", from.shown()));
        }
    };
    let mut target = inbox::open_copy_target(&to, busy_timeout)
        .with_context(|| format!("cannot open --to {}", to.shown()))?;

    let (tables, unknown) = source
        .tables()
        .with_context(|| format!("cannot read --from {}", from.shown()))?;
    let wanted = source
        .figures()
        .with_context(|| format!("cannot read --from {}", from.shown()))?;
    let before = target
        .begin_copy()
        .with_context(|| format!("cannot lock the inbox tables of --to {}", to.shown()))?;
    for name in &unknown {
        warn(&format!(
            "warning: --from {}: the table {name} is not edi-inbox's (the side effects' own?): not copied; move it yourself",
            from.shown()
        ));
    }
    for (name, why) in NOT_COPIED {
        if *name == "effect_migrations" && source.count(name).unwrap_or(0) > 0 {
            warn(&format!(
                "warning: --from {}: {why} (their tables are not copied either)",
                from.shown()
            ));
        }
    }
    let mut replaced = false;
    let outcome = if !before.is_empty() && same(&before, &wanted) {
        // Run again after a move: nothing to do, and nothing is changed.
        "unchanged"
    } else {
        if !before.is_empty() {
            if !args.replace {
                warn(&format!(
                    "error: --to {} already holds an inbox other than --from {} ({} keys; {}): nothing copied. Name another --to (or --pg-schema), or give --replace to delete what it holds first",
                    to.shown(),
                    from.shown(),
                    before.keys,
                    held(&before)
                ));
                return Ok(ExitStatus::Fatal);
            }
            target
                .clear()
                .with_context(|| format!("cannot empty --to {}", to.shown()))?;
            replaced = true;
        }
        for table in &tables {
            target.check_table(table).with_context(|| {
                format!(
                    "cannot copy --from {} into --to {}",
                    from.shown(),
                    to.shown()
                )
            })?;
        }
        for (n, table) in tables.iter().enumerate() {
            let mut batch: Vec<Vec<Value>> = Vec::new();
            let mut bytes = 0;
            source
                .rows(table, &mut |row| {
                    bytes += row.iter().map(size_of_value).sum::<usize>();
                    batch.push(row);
                    if batch.len() >= BATCH_ROWS || bytes >= BATCH_BYTES {
                        bytes = 0;
                        target.write_rows(table, &std::mem::take(&mut batch))?;
                    }
                    Ok(())
                })
                .and_then(|()| target.write_rows(table, &batch))
                .with_context(|| {
                    format!(
                        "cannot copy the table {} from --from {} into --to {}",
                        table.name,
                        from.shown(),
                        to.shown()
                    )
                })?;
            if n == 0 {
                crash_point!("migrate-after-first-table");
            }
        }
        let next_ids = source
            .next_ids()
            .with_context(|| format!("cannot read --from {}", from.shown()))?;
        target
            .set_sequences(&next_ids)
            .with_context(|| format!("cannot set the id sequences of --to {}", to.shown()))?;
        let after = target
            .figures()
            .with_context(|| format!("cannot count what was copied into --to {}", to.shown()))?;
        if !same(&after, &wanted) {
            warn(&format!(
                "error: the copy in --to {} does not match --from {}: {}; nothing committed",
                to.shown(),
                from.shown(),
                differences(&wanted, &after)
            ));
            return Ok(ExitStatus::Fatal);
        }
        crash_point!("migrate-before-commit");
        target
            .finish()
            .with_context(|| format!("cannot commit the copy into --to {}", to.shown()))?;
        "copied"
    };
    let report = Report {
        from: from.shown(),
        to: to.shown(),
        outcome,
        keys: wanted.keys,
        keys_sha256: wanted.keys_sha256.clone(),
        tables: wanted
            .rows
            .iter()
            .map(|(table, rows)| TableRows {
                table: table.clone(),
                rows: *rows,
            })
            .collect(),
        not_copied: unknown,
        replaced,
    };
    let mut out = Out::default();
    if args.json {
        out.json(&report);
    } else {
        out.line(&crate::output::stamped(&match outcome {
            "unchanged" => format!(
                "--to {} already holds exactly --from {}: nothing changed ({} keys, keys SHA-256 {})",
                report.to, report.from, report.keys, report.keys_sha256
            ),
            _ => format!(
                "copied --from {} into --to {}{}: {} keys, keys SHA-256 {}, the same on both sides",
                report.from,
                report.to,
                if replaced {
                    " (what it held deleted first)"
                } else {
                    ""
                },
                report.keys,
                report.keys_sha256
            ),
        }));
        for t in &report.tables {
            out.line(&format!("  {:<20} {} rows", t.table, t.rows));
        }
    }
    out.flush();
    Ok(ExitStatus::from_problems(usize::from(out.failed())))
}

/// True where both sides hold the same: every table's rows and the keys.
fn same(a: &Figures, b: &Figures) -> bool {
    a.keys == b.keys
        && a.keys_sha256 == b.keys_sha256
        && b.rows.iter().all(|(t, n)| a.rows_of(t) == *n)
        && a.rows.iter().all(|(t, n)| b.rows_of(t) == *n)
}

/// What a target holds, for the operator: its tables that have rows.
fn held(f: &Figures) -> String {
    let tables: Vec<String> = f
        .rows
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    if tables.is_empty() {
        "no rows".into()
    } else {
        format!("rows: {}", tables.join(", "))
    }
}

/// Where two sides' figures differ, in words.
fn differences(wanted: &Figures, found: &Figures) -> String {
    let mut said = Vec::new();
    if wanted.keys != found.keys || wanted.keys_sha256 != found.keys_sha256 {
        said.push(format!(
            "keys: {} (SHA-256 {}) in the source, {} (SHA-256 {}) in the target",
            wanted.keys, wanted.keys_sha256, found.keys, found.keys_sha256
        ));
    }
    for (t, n) in &wanted.rows {
        let m = found.rows_of(t);
        if m != *n {
            said.push(format!("{t}: {n} rows in the source, {m} in the target"));
        }
    }
    said.join("; ")
}

fn size_of_value(v: &Value) -> usize {
    match v {
        Value::Null | Value::Integer(_) | Value::Real(_) => 8,
        Value::Text(t) => t.len(),
        Value::Blob(b) => b.len(),
    }
}
