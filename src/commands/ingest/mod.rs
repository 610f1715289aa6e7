//! `edi-inbox ingest`: decide each interchange of the files given exactly once, then move each
//! file. What is about files is here: the run and its report (`mod.rs`), the read-ahead pipeline
//! and its byte budget (`pipeline.rs`, `budget.rs`). The decision itself is the intake's
//! ([`crate::intake`]), shared with `consume`.
//!
//! Where a new thing goes: how files are found or moved, `crate::filing`; how they are read
//! ahead, `pipeline.rs`; anything that a delivery also needs, the intake, not here.

mod budget;
mod pipeline;
pub mod reprocess;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

// The commands' usage error, for reprocess.rs beside this file (through here, not up two
// levels: commands/mod.rs runs reprocess, and the two must not use each other).
use super::usage;
use crate::cli::IngestArgs;
use crate::exit::ExitStatus;
use crate::filing::{self, Claimed};
use crate::inbox::SightingRow;
use crate::inbox::names::Counter;
use crate::inbox::{Inbox, Location};
use crate::intake::{AckPolicy, Event, Outcome, Source, Summary};
use crate::metrics::{Metrics, catalogue, unix_now};
use crate::output::{Out, count, escape, problem};
use crate::walk;

/// A file whose decisions are made but not yet committed.
struct Decided {
    path: PathBuf,
    shown: String,
    outcomes: Vec<Outcome>,
    /// Held until the file is moved, so an overlapping run leaves it alone; and what the path
    /// named when it was read, to move only those very bytes.
    claim: Option<Claimed>,
    /// False for files left in place whatever happens (skipped ones, and those that could not
    /// be claimed).
    movable: bool,
}

struct Run<'a> {
    args: &'a IngestArgs,
    out: Out,
    summary: Summary,
    /// Problems outside the per-interchange outcomes (a file that could not be moved).
    other_problems: usize,
    progress: ProgressBar,
    /// How interchanges are answered, from `--contrl` and `--contrl-duplicates`.
    acks: AckPolicy,
    /// `reprocess`: the files are in the quarantine, each with its note, which goes with it.
    reprocess: bool,
}

/// Runs `ingest`, in stages: check what must hold before anything is read; open the inbox;
/// walk the paths; then read ahead and decide (readers claim, read, parse, hash and compress
/// while this thread decides, commits each batch, and moves its files); then report.
///
/// `named` is true where `--db` or `EDI_INBOX_DB` named the database: only then may it be
/// created. A new inbox knows no interchange, so every redelivery in the drop folder would be
/// applied again; a cron job started in the wrong folder must not do that silently.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &IngestArgs,
) -> anyhow::Result<ExitStatus> {
    run_files(db, named, busy_timeout, args, false)
}

/// [`run`], or with `reprocess` the run of `reprocess` over quarantined files (checked by
/// [`reprocess::run`]): the same decisions and moves, and each file's note moved with it.
fn run_files(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &IngestArgs,
    reprocess: bool,
) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    if let Some(status) = check_before_reading(db, named, args)? {
        return Ok(status);
    }
    let effects = super::effect_plan(&args.effects)?;
    let mut inbox = super::open_deciding(db, busy_timeout, effects.as_ref())?;
    let exclude = exclusions(db, args);
    let (inputs, problems) = walk::collect(&args.paths, &exclude);
    let mut run = Run::new(args, inputs.len());
    run.reprocess = reprocess;
    for p in &problems {
        run.summary.files += 1;
        run.report(&Outcome::rejected(
            Source::File(walk::display(&p.path)),
            p.message.clone(),
            None,
        ));
    }
    inbox.start_run();
    pipeline::read_and_decide(&mut *inbox, &mut run, &inputs, &exclude)?;
    inbox.end_run();
    run.progress.finish_and_clear();
    run.summarise();
    // The run is done and committed; a metrics file that cannot be written is a problem to
    // report, not a failure of the run (exit 3, not 1).
    if let Some(path) = &args.metrics_file
        && let Err(e) = write_metrics(path, &*inbox, &run.summary, started)
    {
        run.other_problems += 1;
        problem(
            &mut run.out,
            &format!("cannot write the metrics file {}: {e:#}", path.display()),
        );
    }
    let s = &run.summary;
    Ok(ExitStatus::from_problems(
        s.drift + s.rejected + s.refused + run.other_problems + usize::from(run.out.failed()),
    ))
}

/// What must hold before anything is read: a database that may be created or exists, a clock
/// after 1970, archive and quarantine folders that can take files. `Some` status to stop with.
fn check_before_reading(
    db: &Location,
    named: bool,
    args: &IngestArgs,
) -> anyhow::Result<Option<ExitStatus>> {
    if let Some(status) = crate::intake::preflight::check(db, named, "read")? {
        return Ok(Some(status));
    }
    check_paths_exist(&args.paths, args.metrics_file.as_deref())?;
    for (dir, option) in [
        (&args.archive, "--archive"),
        (&args.quarantine, "--quarantine"),
    ] {
        if let Some(dir) = dir {
            filing::check_target(dir).with_context(|| {
                format!(
                    "{option} {} cannot take files; nothing was read or decided",
                    dir.display()
                )
            })?;
        }
    }
    Ok(None)
}

/// Every PATH named must exist: one that does not (an unmounted drop folder, a shell pattern
/// that matched nothing) is a configuration failure, exit 1 with nothing read, and said in the
/// metrics file (`edi_inbox_ingest_paths_missing`, its own alert) beside the previous run's
/// figures. Reading the other paths and reporting this one as rejected would hide it among the
/// partners' broken files, where `list` cannot show it.
pub(crate) fn check_paths_exist(
    paths: &[PathBuf],
    metrics_file: Option<&Path>,
) -> anyhow::Result<()> {
    let missing = walk::missing(paths);
    if missing.is_empty() {
        return Ok(());
    }
    for (path, why) in &missing {
        crate::output::warn(&format!(
            "error: {} does not exist ({why})",
            walk::display(path)
        ));
    }
    if let Some(path) = metrics_file {
        let mut m = Metrics::default();
        m.single(&catalogue::INGEST_PATHS_MISSING, missing.len() as f64);
        if let Err(e) =
            crate::metrics::replace_families(path, &[&catalogue::INGEST_PATHS_MISSING], &m)
        {
            crate::output::warn(&format!(
                "cannot write the metrics file {}: {e}",
                path.display()
            ));
        }
    }
    anyhow::bail!(
        "{} named to read {} not exist; nothing was read or decided",
        count(missing.len() as u64, "path", "paths"),
        if missing.len() == 1 { "does" } else { "do" }
    )
}

/// What the walk passes over: the inbox's own files, what this run moves files into or writes.
fn exclusions(db: &Location, args: &IngestArgs) -> walk::Exclusions {
    let mut exclude = walk::Exclusions::default();
    if let Some(path) = db.sqlite_path() {
        exclude.database(path);
    }
    if let Some(m) = &args.metrics_file {
        exclude.file(m, "the --metrics-file");
    }
    if let Some(a) = &args.archive {
        exclude.folder(a, "the --archive folder");
    }
    if let Some(q) = &args.quarantine {
        exclude.folder(q, "the --quarantine folder");
    }
    exclude
}

/// The run's figures for Prometheus: cumulative counters from the database, the last run's
/// outcomes, its duration and end, and the inbox's size.
fn write_metrics(
    path: &Path,
    inbox: &dyn Inbox,
    s: &Summary,
    started: Instant,
) -> anyhow::Result<()> {
    let mut m = Metrics::default();
    let name = &catalogue::INGEST_INTERCHANGES_TOTAL;
    m.family(name);
    for (status, c) in [
        ("new", Counter::IngestNew),
        ("duplicate", Counter::IngestDuplicate),
        ("drift", Counter::IngestDrift),
        ("rejected", Counter::IngestRejected),
        ("refused", Counter::IngestRefused),
    ] {
        m.sample(name, &[status], inbox.counter(c)? as f64);
    }
    m.outcomes(
        &catalogue::INGEST_LAST_RUN_INTERCHANGES,
        &[
            ("new", s.new),
            ("duplicate", s.duplicate),
            ("drift", s.drift),
            ("rejected", s.rejected),
            ("refused", s.refused),
            ("skipped", s.skipped),
        ],
    )
    .single(&catalogue::INGEST_LAST_RUN_FILES, s.files as f64)
    .single(
        &catalogue::INGEST_LAST_RUN_DURATION_SECONDS,
        started.elapsed().as_secs_f64(),
    )
    .single(
        &catalogue::INGEST_LAST_SUCCESS_TIMESTAMP_SECONDS,
        unix_now(),
    )
    .single(&catalogue::INGEST_PATHS_MISSING, 0.0);
    let stats = inbox.stats()?;
    m.single(&catalogue::INBOX_ENTRIES, stats.inbox as f64)
        .single(&catalogue::DATABASE_SIZE_BYTES, inbox.size_bytes() as f64);
    // The answers a run built are counted with those before it, by kind and answer.
    m.family(&catalogue::ACKNOWLEDGEMENTS);
    for a in &stats.acknowledgements {
        for (answer, n) in [("positive", a.positive), ("negative", a.negative)] {
            m.sample(
                &catalogue::ACKNOWLEDGEMENTS,
                &[answer, a.kind, a.standard.as_str()],
                n as f64,
            );
        }
    }
    m.write_to(path)?;
    Ok(())
}

impl<'a> Run<'a> {
    fn new(args: &'a IngestArgs, files: usize) -> Run<'a> {
        let progress = if std::io::stderr().is_terminal() && !args.json {
            let bar =
                ProgressBar::with_draw_target(Some(files as u64), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg}") {
                bar.set_style(style);
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        Run {
            args,
            out: Out::default(),
            summary: Summary::default(),
            other_problems: 0,
            progress,
            acks: super::ack_policy(&args.acks, &args.effects),
            reprocess: false,
        }
    }

    /// The summary line (or object), last.
    fn summarise(&mut self) {
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else if self.args.quiet && s.files == s.skipped && self.other_problems == 0 {
            // -q from cron every minute: a run that read nothing (an empty drop folder, or only
            // files still being written) says nothing, so that cron mails only what happened.
        } else {
            // Refusals are said where there are any: without --effects there never are.
            let refused = match s.refused {
                0 => String::new(),
                n => format!(", {n} refused"),
            };
            self.out.line(&crate::output::stamped(&format!(
                "{}: {} new, {} duplicate, {} drift, {} rejected{refused}, {} skipped",
                count(s.files as u64, "file", "files"),
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
                s.skipped
            )));
        }
        self.out.flush();
    }

    fn report(&mut self, o: &Outcome) {
        self.summary.count(o.status());
        if self.args.json {
            self.out.json(o);
        } else if !self.args.quiet || o.status().is_problem() {
            let lines = o.human_lines();
            self.progress.suspend(|| {
                for line in &lines {
                    self.out.line(line);
                }
            });
        }
    }

    /// After a commit: print each file's outcomes, then move it. Returns where each moved
    /// file's sightings went, for the inbox to record after the moves: the destination (with
    /// the suffix the move gave it) is only known once the file is there, and recorded before
    /// (in the decision's transaction) it would be a lie after a crash between the commit and
    /// the move, which leaves the file in the drop folder for the next run.
    fn finish(&mut self, decided: Vec<Decided>) -> Vec<(SightingRow, String)> {
        let mut moves = Vec::new();
        for d in decided {
            self.summary.files += 1;
            for o in &d.outcomes {
                self.report(o);
            }
            if d.movable
                && let Some(to) = self.move_file(&d)
            {
                let to = walk::display(&std::path::absolute(&to).unwrap_or(to));
                moves.extend(d.outcomes.iter().filter_map(|o| match &o.event {
                    Event::Decided(decided) => decided.row.map(|row| (row, to.clone())),
                    _ => None,
                }));
            }
        }
        moves
    }

    /// Where files went could not be recorded: they are where they are, and the inbox says it
    /// does not know (`moved_to` empty); a problem to look at, not a failure of the run.
    fn not_recorded(&mut self, e: &crate::inbox::InboxError) {
        self.other_problems += 1;
        problem(
            &mut self.out,
            &format!(
                "the files of this batch were moved, but where to could not be recorded in the inbox: {e}"
            ),
        );
    }

    /// Moves a decided file; returns where it is now, where it was moved (or already there).
    fn move_file(&mut self, d: &Decided) -> Option<PathBuf> {
        let bad = d.outcomes.iter().any(|o| o.status().is_problem());
        let target = if bad {
            self.args.quarantine.as_deref()
        } else {
            self.args.archive.as_deref()
        };
        let dir = target?;
        crash_point!("before-move");
        // Escaped like every human line: the reason file is read on a terminal too.
        let reason = bad.then(|| {
            d.outcomes
                .iter()
                .filter(|o| o.status().is_problem())
                .flat_map(|o| o.human_lines())
                .map(|line| format!("{}\n", escape(&line)))
                .collect::<String>()
        });
        match filing::move_into(&d.path, dir, reason.as_deref(), d.claim.as_ref()) {
            Ok(filing::Moved::Gone) => None,
            Ok(filing::Moved::To(to) | filing::Moved::AlreadyThere(to)) => {
                crash_point!("after-move");
                if self.reprocess
                    && let Err(e) = filing::carry_note(&d.path, &to, bad)
                {
                    self.other_problems += 1;
                    let what = if bad { "removed" } else { "moved with it" };
                    problem(
                        &mut self.out,
                        &format!(
                            "{}: moved to {}, but its old note {} could not be {what}: {e}",
                            d.shown,
                            to.display(),
                            filing::reason_path(&d.path).display()
                        ),
                    );
                }
                Some(to)
            }
            // Nothing is lost and nothing is wrong: the new bytes are read by the next run.
            Ok(filing::Moved::Changed) => {
                problem(
                    &mut self.out,
                    &format!(
                        "{}: note: the file changed after it was read (a new upload under the same name?); not moved to {}, the next run reads it",
                        d.shown,
                        dir.display()
                    ),
                );
                None
            }
            Err(e) => {
                self.other_problems += 1;
                problem(
                    &mut self.out,
                    &format!(
                        "{}: decided and committed, but not moved to {}: {e}; the next run will find it again",
                        d.shown,
                        dir.display()
                    ),
                );
                None
            }
        }
    }
}
