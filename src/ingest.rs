//! `edi-inbox ingest`: decide each interchange exactly once, then move its file.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::cli::IngestArgs;
use crate::edifact::{self, EnvelopeError, Interchange};
use crate::exit;
use crate::files::{self, Claim};
use crate::inbox::{Decision, Inbox};
use crate::input::{self, InputFile};
use crate::metrics::{Metrics, database_size, unix_now};
use crate::output::{Out, problem};

/// A batch never stays open longer than this, so an overlapping run or a purge waits little.
const MAX_BATCH_TIME: Duration = Duration::from_secs(1);

/// What happened to one interchange (or to a file that gave none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    New,
    Duplicate,
    Drift,
    Rejected,
    Skipped,
}

impl Status {
    fn is_problem(self) -> bool {
        matches!(self, Status::Drift | Status::Rejected)
    }
}

/// One line of the report, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub file: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For drift: the hash of the copy accepted first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
}

impl Outcome {
    fn bare(file: &str, status: Status) -> Outcome {
        Outcome {
            file: file.to_string(),
            status,
            sender: None,
            recipient: None,
            control_ref: None,
            messages: None,
            sha256: None,
            stored_sha256: None,
            error: None,
            offset: None,
        }
    }

    fn decided(file: &str, i: &Interchange<'_>, decision: &Decision) -> Outcome {
        let (status, stored) = match decision {
            Decision::New { .. } => (Status::New, None),
            Decision::Duplicate => (Status::Duplicate, None),
            Decision::Drift { stored_sha256 } => (Status::Drift, Some(stored_sha256.clone())),
        };
        Outcome {
            sender: Some(i.unb.sender.clone()),
            recipient: Some(i.unb.recipient.clone()),
            control_ref: Some(i.unb.control_ref.clone()),
            messages: Some(i.messages.len()),
            sha256: Some(i.sha256_hex()),
            stored_sha256: stored,
            ..Outcome::bare(file, status)
        }
    }

    fn rejected(file: &str, error: String, offset: Option<usize>) -> Outcome {
        Outcome {
            error: Some(error),
            offset,
            ..Outcome::bare(file, Status::Rejected)
        }
    }

    fn human(&self) -> String {
        match self.status {
            Status::New | Status::Duplicate | Status::Drift => {
                let key = format!(
                    "{} -> {}  ref {}  {} messages",
                    self.sender.as_deref().unwrap_or(""),
                    self.recipient.as_deref().unwrap_or(""),
                    self.control_ref.as_deref().unwrap_or(""),
                    self.messages.unwrap_or(0)
                );
                match self.status {
                    Status::New => format!("new        {}  {key}", self.file),
                    Status::Duplicate => format!("duplicate  {}  {key}", self.file),
                    _ => format!(
                        "DRIFT      {}  {key}: same key, other content (sha256 {}, first accepted {}); NOT applied, kept for review",
                        self.file,
                        self.sha256.as_deref().unwrap_or(""),
                        self.stored_sha256.as_deref().unwrap_or("")
                    ),
                }
            }
            Status::Rejected => format!(
                "rejected   {}  {}",
                self.file,
                self.error.as_deref().unwrap_or("")
            ),
            Status::Skipped => format!(
                "skipped    {}  {}",
                self.file,
                self.error.as_deref().unwrap_or("")
            ),
        }
    }
}

/// Counts for the summary line.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    pub files: usize,
    pub new: usize,
    pub duplicate: usize,
    pub drift: usize,
    pub rejected: usize,
    pub skipped: usize,
}

impl Summary {
    fn count(&mut self, status: Status) {
        match status {
            Status::New => self.new += 1,
            Status::Duplicate => self.duplicate += 1,
            Status::Drift => self.drift += 1,
            Status::Rejected => self.rejected += 1,
            Status::Skipped => self.skipped += 1,
        }
    }
}

/// A file whose decisions are made but not yet committed.
struct Decided {
    path: PathBuf,
    shown: String,
    outcomes: Vec<Outcome>,
    /// Held until the file is moved, so an overlapping run leaves it alone.
    _claim: Option<std::fs::File>,
    /// False for files left in place whatever happens (skipped ones).
    movable: bool,
}

struct Run<'a> {
    args: &'a IngestArgs,
    out: Out,
    summary: Summary,
    /// Problems outside the per-interchange outcomes (a file that could not be moved).
    other_problems: usize,
    progress: ProgressBar,
}

/// Runs `ingest`.
pub fn run(db: &Path, busy_timeout: Duration, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let mut inbox = Inbox::connect(db, busy_timeout, true)
        .with_context(|| format!("cannot open the inbox database {}", db.display()))?;
    let (inputs, problems) = input::collect(&args.paths);
    let progress = if std::io::stderr().is_terminal() && !args.json {
        let bar =
            ProgressBar::with_draw_target(Some(inputs.len() as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut run = Run {
        args,
        out: Out::default(),
        summary: Summary::default(),
        other_problems: 0,
        progress,
    };
    for p in &problems {
        let shown = input::display(&p.path);
        run.summary.files += 1;
        run.report(&Outcome::rejected(&shown, p.message.clone(), None))?;
    }

    let mut pending: Vec<Decided> = Vec::new();
    let mut in_batch = 0usize;
    let mut opened = Instant::now();
    for file in &inputs {
        run.progress.inc(1);
        if !inbox.in_batch() {
            opened = Instant::now();
        }
        let Some(decided) = decide_file(&mut inbox, file, args, &mut in_batch)? else {
            continue;
        };
        pending.push(decided);
        if in_batch >= args.batch as usize || opened.elapsed() >= MAX_BATCH_TIME {
            inbox
                .commit()
                .context("cannot commit to the inbox database")?;
            in_batch = 0;
            run.finish(std::mem::take(&mut pending))?;
        }
    }
    inbox
        .commit()
        .context("cannot commit to the inbox database")?;
    run.finish(pending)?;
    run.progress.finish_and_clear();

    let s = &run.summary;
    if args.json {
        #[derive(Serialize)]
        struct Last<'a> {
            summary: &'a Summary,
        }
        run.out.json(&Last { summary: s })?;
    } else {
        run.out.line(&format!(
            "{} files: {} new, {} duplicate, {} drift, {} rejected, {} skipped",
            s.files, s.new, s.duplicate, s.drift, s.rejected, s.skipped
        ))?;
    }
    run.out.flush()?;
    if let Some(path) = &args.metrics_file {
        write_metrics(path, &inbox, db, &run.summary, started)
            .with_context(|| format!("cannot write the metrics file {}", path.display()))?;
    }
    Ok(exit::from_problems(
        s.drift + s.rejected + run.other_problems,
    ))
}

/// The run's figures for Prometheus: cumulative counters from the database, the last run's
/// outcomes, its duration and end, and the inbox's size.
fn write_metrics(
    path: &Path,
    inbox: &Inbox,
    db: &Path,
    s: &Summary,
    started: Instant,
) -> anyhow::Result<()> {
    let mut m = Metrics::default();
    let name = "edi_inbox_ingest_interchanges_total";
    m.family(
        name,
        "counter",
        "Interchanges decided by edi-inbox ingest since the database was created, by outcome.",
    );
    for status in ["new", "duplicate", "drift", "rejected"] {
        let v = inbox.counter(&format!("ingest_{status}"))?;
        m.sample(name, &[("status", status)], v as f64);
    }
    let name = "edi_inbox_ingest_last_run_interchanges";
    m.family(
        name,
        "gauge",
        "Outcomes of the last ingest run (skipped and unreadable files count once each).",
    );
    for (status, v) in [
        ("new", s.new),
        ("duplicate", s.duplicate),
        ("drift", s.drift),
        ("rejected", s.rejected),
        ("skipped", s.skipped),
    ] {
        m.sample(name, &[("status", status)], v as f64);
    }
    m.single(
        "edi_inbox_ingest_last_run_files",
        "gauge",
        "Files the last ingest run read.",
        s.files as f64,
    )
    .single(
        "edi_inbox_ingest_last_run_duration_seconds",
        "gauge",
        "Wall time of the last ingest run.",
        started.elapsed().as_secs_f64(),
    )
    .single(
        "edi_inbox_ingest_last_success_timestamp_seconds",
        "gauge",
        "Unix time at which the last ingest run finished without a fatal error.",
        unix_now(),
    )
    .single(
        "edi_inbox_inbox_entries",
        "gauge",
        "Entries in the inbox, the duplicate-detection window.",
        inbox.stats()?.inbox as f64,
    )
    .single(
        "edi_inbox_database_size_bytes",
        "gauge",
        "Size of the inbox database file and its write-ahead log.",
        database_size(db) as f64,
    );
    m.write_to(path)?;
    Ok(())
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Claims one file and decides its interchanges in the open batch. `None` for a file another
/// run took.
fn decide_file(
    inbox: &mut Inbox,
    file: &InputFile,
    args: &IngestArgs,
    in_batch: &mut usize,
) -> anyhow::Result<Option<Decided>> {
    let shown = input::display(&file.path);
    let decided = |outcomes, claim, movable| Decided {
        path: file.path.clone(),
        shown: shown.clone(),
        outcomes,
        _claim: claim,
        movable,
    };
    let claimed = match files::claim(&file.path, file.named, args.min_age, args.max_size) {
        Ok(Claim::Taken(c)) => c,
        Ok(Claim::Gone) => return Ok(None),
        Ok(Claim::TooYoung(age)) => {
            let mut o = Outcome::bare(&shown, Status::Skipped);
            o.error = Some(format!(
                "modified {}s ago, more recently than --min-age {}s: left in place",
                age.as_secs(),
                args.min_age.as_secs()
            ));
            return Ok(Some(decided(vec![o], None, false)));
        }
        Ok(Claim::TooLarge(size)) => {
            let o = Outcome::rejected(
                &shown,
                format!(
                    "is {size} bytes, larger than --max-size {}: not read",
                    args.max_size
                ),
                None,
            );
            return Ok(Some(decided(vec![o], None, true)));
        }
        Err(e) => {
            let o = Outcome::rejected(&shown, input::describe(&e), None);
            return Ok(Some(decided(vec![o], None, false)));
        }
    };
    crash_point!("after-read");
    let mut outcomes = Vec::new();
    for item in edifact::interchanges(&claimed.bytes) {
        let when = now();
        let outcome = match item {
            Ok(i) => {
                let d = inbox
                    .decide(&i, &shown, &when)
                    .context("cannot write to the inbox database")?;
                Outcome::decided(&shown, &i, &d)
            }
            Err(e) => {
                reject(inbox, &shown, &claimed.bytes, &e, &when)?;
                Outcome::rejected(&shown, e.to_string(), Some(e.offset))
            }
        };
        *in_batch += 1;
        outcomes.push(outcome);
        crash_point!("mid-batch");
    }
    Ok(Some(decided(outcomes, Some(claimed.handle), true)))
}

fn reject(
    inbox: &mut Inbox,
    shown: &str,
    bytes: &[u8],
    e: &EnvelopeError,
    when: &str,
) -> anyhow::Result<()> {
    inbox
        .reject(shown, bytes, e, when)
        .context("cannot write to the inbox database")
}

impl Run<'_> {
    fn report(&mut self, o: &Outcome) -> anyhow::Result<()> {
        self.summary.count(o.status);
        if self.args.json {
            self.out.json(o)
        } else if !self.args.quiet || o.status.is_problem() {
            let line = o.human();
            self.progress.suspend(|| self.out.line(&line))
        } else {
            Ok(())
        }
    }

    /// After a commit: print each file's outcomes, then move it.
    fn finish(&mut self, decided: Vec<Decided>) -> anyhow::Result<()> {
        for d in decided {
            self.summary.files += 1;
            for o in &d.outcomes {
                self.report(o)?;
            }
            if d.movable {
                self.move_file(&d)?;
            }
        }
        Ok(())
    }

    fn move_file(&mut self, d: &Decided) -> anyhow::Result<()> {
        let bad = d.outcomes.iter().any(|o| o.status.is_problem());
        let target = if bad {
            self.args.quarantine.as_deref()
        } else {
            self.args.archive.as_deref()
        };
        let Some(dir) = target else { return Ok(()) };
        crash_point!("before-move");
        let reason = bad.then(|| {
            d.outcomes
                .iter()
                .filter(|o| o.status.is_problem())
                .map(|o| format!("{}\n", o.human()))
                .collect::<String>()
        });
        match files::move_into(&d.path, dir, reason.as_deref()) {
            Ok(_) => {
                crash_point!("after-move");
                Ok(())
            }
            // Another run moved it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                self.other_problems += 1;
                problem(
                    &mut self.out,
                    &format!(
                        "{}: decided and committed, but not moved to {}: {e}; the next run will find it again",
                        d.shown,
                        dir.display()
                    ),
                )
            }
        }
    }
}
