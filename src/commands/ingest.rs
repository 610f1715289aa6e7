//! `edi-inbox ingest`: decide each interchange exactly once, then move its file.

use std::io::IsTerminal;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::cli::{AckArgs, ContrlDuplicates, ContrlWhen, IngestArgs};
use crate::edifact::{self, EnvelopeError, Interchange, RejectedContext};
use crate::exit::ExitStatus;
use crate::filing::{self, Claim, Claimed};
use crate::inbox::{Access, Candidate, Decision, Inbox, KeyProbe, Location};
use crate::metrics::{Metrics, unix_now};
use crate::output::{Out, count, escape, problem};
use crate::status::Status;
use crate::walk::{self, InputFile};

/// A batch never stays open longer than this, so an overlapping run or a purge waits little.
const MAX_BATCH_TIME: Duration = Duration::from_secs(1);

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
    /// `consume`: the delivery's edi-filename header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// `consume`: how many times the broker delivered it, this time included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_count: Option<u32>,
    /// The control reference (0020) of the CONTRL that answers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contrl: Option<String>,
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
            filename: None,
            delivery_count: None,
            contrl: None,
        }
    }

    fn decided(file: &str, i: &Interchange<'_>, decision: &Decision) -> Outcome {
        let (status, stored) = match decision {
            Decision::New { .. } => (Status::New, None),
            Decision::Duplicate => (Status::Duplicate, None),
            Decision::Drift { stored_sha256 } => (Status::Drift, Some(stored_sha256.clone())),
            Decision::Refused { reason } => {
                let what = format!(
                    "interchange {} from {}: {reason}",
                    i.unb.control_ref, i.unb.sender
                );
                return Outcome::rejected(file, what, Some(i.offset));
            }
        };
        Outcome {
            sender: Some(i.unb.sender.to_string()),
            recipient: Some(i.unb.recipient.to_string()),
            control_ref: Some(i.unb.control_ref.to_string()),
            messages: Some(i.messages.len()),
            sha256: Some(i.sha256_hex()),
            stored_sha256: stored,
            ..Outcome::bare(file, status)
        }
    }

    pub(super) fn rejected(file: &str, error: String, offset: Option<usize>) -> Outcome {
        Outcome {
            error: Some(error),
            offset,
            ..Outcome::bare(file, Status::Rejected)
        }
    }

    pub(super) fn human(&self) -> String {
        match self.status {
            Status::New | Status::Duplicate | Status::Drift => {
                let key = format!(
                    "{} -> {}  ref {}  {}",
                    self.sender.as_deref().unwrap_or(""),
                    self.recipient.as_deref().unwrap_or(""),
                    self.control_ref.as_deref().unwrap_or(""),
                    count(self.messages.unwrap_or(0) as u64, "message", "messages")
                );
                // The CONTRL that answers it, where one does.
                let key = match &self.contrl {
                    Some(r) => format!("{key}  CONTRL {r}"),
                    None => key,
                };
                match self.status {
                    Status::New | Status::Duplicate => {
                        format!("{}  {}  {key}", self.status.label(), self.file)
                    }
                    _ => format!(
                        "{}  {}  {key}: same key, other content (sha256 {}, first accepted {}); NOT applied, kept for review",
                        self.status.label(),
                        self.file,
                        self.sha256.as_deref().unwrap_or(""),
                        self.stored_sha256.as_deref().unwrap_or("")
                    ),
                }
            }
            Status::Rejected | Status::Skipped | Status::Failed => format!(
                "{}  {}  {}",
                self.status.label(),
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
            Status::Rejected | Status::Failed => self.rejected += 1,
            Status::Skipped => self.skipped += 1,
        }
    }
}

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
    let started = Instant::now();
    if let Some(status) = check_before_reading(db, named, args)? {
        return Ok(status);
    }
    let mut inbox = super::open_inbox(db, Access::Create, busy_timeout)?;
    let exclude = exclusions(db, args);
    let (inputs, problems) = walk::collect(&args.paths, &exclude);
    let mut run = Run::new(args, inputs.len());
    for p in &problems {
        run.summary.files += 1;
        run.report(&Outcome::rejected(
            &walk::display(&p.path),
            p.message.clone(),
            None,
        ));
    }
    inbox.start_run();
    read_and_decide(&mut *inbox, &mut run, &inputs, &exclude)?;
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
        s.drift + s.rejected + run.other_problems + usize::from(run.out.failed()),
    ))
}

/// What must hold before anything is read: a database that may be created or exists, a clock
/// after 1970, archive and quarantine folders that can take files. `Some` status to stop with.
fn check_before_reading(
    db: &Location,
    named: bool,
    args: &IngestArgs,
) -> anyhow::Result<Option<ExitStatus>> {
    if !named && db.sqlite_path().is_some_and(|p| !p.exists()) {
        crate::output::warn(&format!(
            "there is no inbox database {} in this folder, and a new one is created only where --db or EDI_INBOX_DB names it (a new inbox would apply every redelivery again); nothing was read",
            db.shown()
        ));
        return Ok(Some(ExitStatus::Usage));
    }
    // Every decision records when it was made, and purge goes by those times: recorded as 1970,
    // they would all be purged at once, and every redelivery applied again.
    if crate::clock::before_1970() {
        anyhow::bail!(
            "the system clock reads a time before 1970; nothing was read or decided: set the clock, then run again"
        );
    }
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

/// Reads the files ahead on up to four reading threads and decides them in their order on this
/// thread.
///
/// Reader k claims, reads, parses, hashes and compresses files k, k + readers, k + 2 readers...
/// and hands each over on a
/// channel of its own, so that this thread takes them back in order; bounded channels and the
/// byte budget keep memory flat whatever the run's length. This thread decides each file, commits
/// a batch every `--batch` interchanges or second, and after each commit prints and moves the
/// batch's files.
fn read_and_decide(
    inbox: &mut dyn Inbox,
    run: &mut Run<'_>,
    inputs: &[InputFile],
    exclude: &walk::Exclusions,
) -> anyhow::Result<()> {
    let args = run.args;
    let readers = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4));
    let budget = Budget::new(IN_FLIGHT_BYTES);
    // One look at the inbox per reader, made here: the inbox itself stays on this thread.
    let probes: Vec<_> = (0..readers).map(|_| inbox.probe()).collect();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let budget = &budget;
        let mut channels = Vec::with_capacity(readers);
        for (k, probe) in probes.into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Prepared, usize)>(32);
            channels.push(rx);
            scope.spawn(move || {
                for (n, file) in inputs.iter().enumerate().skip(k).step_by(readers) {
                    let Some(prepared) =
                        prepare_file(n, file, args, exclude, probe.as_deref(), budget)
                    else {
                        break;
                    };
                    if tx.send(prepared).is_err() {
                        break;
                    }
                }
            });
        }
        // Whatever way this thread leaves, the readers must not wait for room forever.
        let _close = CloseOnDrop(budget);
        let mut batch = Batch::default();
        for n in 0..inputs.len() {
            budget.needed(n);
            // While the next file is still being read (a large one, a slow disk), a batch that
            // is due is decided and committed meanwhile.
            let received = loop {
                let wait = batch.opened.map_or(MAX_BATCH_TIME, |t| {
                    MAX_BATCH_TIME.saturating_sub(t.elapsed())
                });
                match channels[n % readers].recv_timeout(wait) {
                    Ok(r) => break Some(r),
                    Err(RecvTimeoutError::Disconnected) => break None,
                    Err(RecvTimeoutError::Timeout) => flush(inbox, run, &mut batch, budget)?,
                }
            };
            let Some((prepared, size)) = received else {
                break;
            };
            run.progress.inc(1);
            batch.add(inbox, prepared, size, budget, &args.acks)?;
            if batch.due(args.batch as usize) {
                flush(inbox, run, &mut batch, budget)?;
            }
        }
        flush(inbox, run, &mut batch, budget)
    })
}

/// The files of the open batch: decided (where the inbox decides each file as it comes) or
/// waiting to be decided with the rest of the batch.
#[derive(Default)]
struct Batch {
    decided: Vec<Decided>,
    undecided: Vec<Prepared>,
    /// Interchanges (and rejected pieces) in it.
    interchanges: usize,
    /// Bytes of the read-ahead budget its undecided files hold.
    bytes: usize,
    /// When its first file came.
    opened: Option<Instant>,
}

impl Batch {
    /// Takes a file into the batch: decided at once, or kept for the batch's decision.
    fn add(
        &mut self,
        inbox: &mut dyn Inbox,
        prepared: Prepared,
        bytes: usize,
        budget: &Budget,
        acks: &AckArgs,
    ) -> anyhow::Result<()> {
        if let Prepared::Parsed { items, .. } = &prepared {
            self.interchanges += items.len();
        }
        self.opened.get_or_insert_with(Instant::now);
        if inbox.decides_whole_batches() {
            self.bytes += bytes;
            self.undecided.push(prepared);
        } else {
            self.decided
                .extend(decide_files(inbox, vec![prepared], acks)?);
            budget.release(bytes);
        }
        Ok(())
    }

    /// True once it holds `--batch` interchanges, is a second old, or holds half the read-ahead
    /// budget (so that the readers always have the other half).
    fn due(&self, size: usize) -> bool {
        self.interchanges >= size
            || self.opened.is_some_and(|t| t.elapsed() >= MAX_BATCH_TIME)
            || self.bytes >= IN_FLIGHT_BYTES / 2
    }
}

/// Decides what the batch holds undecided, commits it, then prints and moves its files, and
/// gives their bytes back to the read-ahead budget.
fn flush(
    inbox: &mut dyn Inbox,
    run: &mut Run<'_>,
    batch: &mut Batch,
    budget: &Budget,
) -> anyhow::Result<()> {
    let Batch {
        mut decided,
        undecided,
        bytes,
        ..
    } = std::mem::take(batch);
    if decided.is_empty() && undecided.is_empty() {
        return Ok(());
    }
    decided.extend(decide_files(inbox, undecided, &run.args.acks)?);
    inbox
        .commit()
        .context("cannot commit to the inbox database")?;
    run.finish(decided);
    budget.release(bytes);
    Ok(())
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
    m.outcomes(
        "edi_inbox_ingest_last_run_interchanges",
        "Outcomes of the last ingest run (skipped and unreadable files count once each).",
        &[
            ("new", s.new),
            ("duplicate", s.duplicate),
            ("drift", s.drift),
            ("rejected", s.rejected),
            ("skipped", s.skipped),
        ],
    )
    .single(
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
        inbox.size_bytes() as f64,
    );
    m.write_to(path)?;
    Ok(())
}

fn now() -> String {
    crate::clock::now()
}

/// At most this many bytes of files read ahead and not yet decided (the file the deciding thread
/// needs next is read even beyond it, so memory stays within this plus one file).
const IN_FLIGHT_BYTES: usize = 64 << 20;

/// An interchange detached from its file's bytes (with where it stands in them), and those bytes
/// compressed where it is likely to be new.
type Ready = (Interchange<'static>, Range<usize>, Option<Vec<u8>>);

/// A file as the reading thread hands it to the deciding one.
enum Prepared {
    /// Gone since the walk, or held by another run, or one of the inbox's own files under
    /// another name.
    Gone,
    /// Settled without the database: skipped, too large, or unreadable.
    Settled(Decided),
    /// Read and parsed; each interchange with its bytes already compressed where it is likely
    /// to be new.
    Parsed {
        path: PathBuf,
        shown: String,
        claim: Claimed,
        bytes: Vec<u8>,
        items: Vec<Result<Ready, EnvelopeError>>,
        /// The file's SHA-256, where it holds rejected input (its record is keyed by it).
        sha256: Option<String>,
    },
}

/// What a file read ahead holds in memory: its bytes, and each interchange compressed.
fn held_bytes(bytes: &[u8], items: &[Result<Ready, EnvelopeError>]) -> usize {
    bytes.len()
        + items
            .iter()
            .flatten()
            .map(|(_, _, c)| c.as_ref().map_or(0, Vec::len))
            .sum::<usize>()
}

/// Bytes read ahead and not yet decided, bounded.
///
/// A file takes room before it is read, so the bound holds for what is in memory, not only for
/// what was handed over. The file the deciding thread needs next always gets through, room or
/// not: it waits for no other file, and every file before it has been decided and given its room
/// back. (Without that, a later small file could take the room that an earlier large one waited
/// for while the deciding thread waited for the large one: a deadlock, at 0% CPU, with the
/// batch's write lock held.) So memory stays within the budget plus one file, and a file larger
/// than the budget is admitted only once it is needed. Admitting files strictly in their order would do too, but
/// ties the readers to each other's pace: 11% slower on 20,000 files.
struct Budget {
    state: std::sync::Mutex<BudgetState>,
    room: std::sync::Condvar,
    cap: usize,
}

struct BudgetState {
    in_flight: usize,
    /// The index of the file the deciding thread waits for (or decides) now.
    needed: usize,
    closed: bool,
}

impl Budget {
    fn new(cap: usize) -> Self {
        Budget {
            state: std::sync::Mutex::new(BudgetState {
                in_flight: 0,
                needed: 0,
                closed: false,
            }),
            room: std::sync::Condvar::new(),
            cap,
        }
    }

    /// Waits for room for `bytes` of file `n` (or for `n` to be the file the deciding thread
    /// needs: a file larger than the budget is admitted only then), then takes it. False
    /// once the deciding thread has gone.
    fn admit(&self, n: usize, bytes: usize) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        while !s.closed && bytes > 0 && n > s.needed && s.in_flight + bytes > self.cap {
            s = match self.room.wait(s) {
                Ok(s) => s,
                Err(_) => return false,
            };
        }
        s.in_flight += bytes;
        !s.closed
    }

    /// The deciding thread now waits for file `n`.
    fn needed(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.needed = n;
        }
        self.room.notify_all();
    }

    /// Gives back `taken - kept` bytes of an admitted file: it needed less than was set aside.
    fn settle(&self, taken: usize, kept: usize) {
        if kept < taken {
            self.release(taken - kept);
        } else if let Ok(mut s) = self.state.lock() {
            s.in_flight += kept - taken;
        }
    }

    fn release(&self, n: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.in_flight = s.in_flight.saturating_sub(n);
        }
        self.room.notify_all();
    }

    fn close(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.closed = true;
        }
        self.room.notify_all();
    }
}

struct CloseOnDrop<'a>(&'a Budget);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Claims, reads and parses file number `n`, and compresses the interchanges the inbox does
/// not hold yet; touches no database but to look. Returns the file and the bytes of the budget
/// it holds.
fn prepare_file(
    n: usize,
    file: &InputFile,
    args: &IngestArgs,
    exclude: &walk::Exclusions,
    probe: Option<&(dyn KeyProbe + Send)>,
    budget: &Budget,
) -> Option<(Prepared, usize)> {
    let shown = walk::display(&file.path);
    // Settled without reading: moved (as it was claimed) only where a claim is given.
    let settled = |outcome, claim: Option<Claimed>| {
        Prepared::Settled(Decided {
            path: file.path.clone(),
            shown: shown.clone(),
            outcomes: vec![outcome],
            movable: claim.is_some(),
            claim,
        })
    };
    let pass = |prepared: Prepared| Some((prepared, 0));
    let claim = filing::claim(&file.path, file.named, args.min_age, args.max_size);
    // The inbox's own files under another name (a link, a hard link, a bind mount).
    if let Ok(Claim::Taken(c) | Claim::TooLarge(c) | Claim::Unreadable(c, _)) = &claim
        && exclude.excluded_id(c.identity.file_id()).is_some()
    {
        return pass(Prepared::Gone);
    }
    let mut claimed = match claim {
        Ok(Claim::Taken(c)) => c,
        Ok(Claim::Gone) => return pass(Prepared::Gone),
        Ok(Claim::TooYoung(age)) => {
            let mut o = Outcome::bare(&shown, Status::Skipped);
            o.error = Some(format!(
                "modified {}s ago, more recently than --min-age {}s: left in place",
                age.as_secs(),
                args.min_age.as_secs()
            ));
            return pass(settled(o, None));
        }
        Ok(Claim::TooLarge(c)) => {
            let o = Outcome::rejected(
                &shown,
                format!(
                    "is {} bytes, larger than --max-size {}: not read",
                    c.identity.len, args.max_size
                ),
                None,
            );
            return pass(settled(o, Some(c)));
        }
        // A file that may not be read can still be moved where its folder allows it: into the
        // quarantine, with its reason, rather than reported on every run for ever.
        Ok(Claim::Unreadable(c, e)) => {
            return pass(settled(
                Outcome::rejected(&shown, walk::describe(&e), None),
                Some(c),
            ));
        }
        // Anything else (an I/O error, a lock the file system refuses): left where it is.
        Err(e) => {
            return pass(settled(
                Outcome::rejected(&shown, walk::describe(&e), None),
                None,
            ));
        }
    };
    // Room for the bytes and, at worst, as much again compressed; settled once known.
    let len = claimed.identity.len as usize;
    let taken = len.saturating_mul(2);
    if !budget.admit(n, taken) {
        return None;
    }
    let bytes = match claimed.read() {
        Ok(filing::Contents::Bytes(bytes)) => bytes,
        Ok(filing::Contents::Changed) => {
            budget.release(taken);
            let mut o = Outcome::bare(&shown, Status::Skipped);
            o.error =
                Some("changed while it was read (still being written?): left in place".into());
            return Some((settled(o, None), 0));
        }
        Err(e) => {
            budget.release(taken);
            let o = Outcome::rejected(&shown, walk::describe(&e), None);
            let d = Decided {
                path: file.path.clone(),
                shown,
                outcomes: vec![o],
                claim: Some(claimed),
                movable: true,
            };
            return Some((Prepared::Settled(d), 0));
        }
    };
    crash_point!("after-read");
    let items: Vec<_> = edifact::interchanges(&bytes)
        .map(|item| {
            item.map(|i| {
                let u = &i.unb;
                let known = probe.is_some_and(|p| p.has(&u.sender, &u.recipient, &u.control_ref));
                // A failure here only means the deciding thread compresses it itself.
                let compressed = if known {
                    None
                } else {
                    crate::inbox::compress(&i.raw).ok()
                };
                let (i, span) = i.detach();
                (i, span, compressed)
            })
        })
        .collect();
    let kept = held_bytes(&bytes, &items);
    budget.settle(taken, kept);
    let sha256 = items
        .iter()
        .any(Result::is_err)
        .then(|| hex::encode(Sha256::digest(&bytes)));
    let prepared = Prepared::Parsed {
        path: file.path.clone(),
        shown,
        claim: claimed,
        bytes,
        items,
        sha256,
    };
    Some((prepared, kept))
}

/// An interchange with its bytes again (and them compressed, where done ahead), or the error in
/// its place.
pub(super) type Attached<'a> = Result<(Interchange<'a>, Option<Vec<u8>>), EnvelopeError>;

/// A file of a batch, as its outcomes are made.
enum Part {
    Settled(Decided),
    Parsed {
        path: PathBuf,
        shown: String,
        claim: Claimed,
        bytes: Vec<u8>,
        sha256: Option<String>,
    },
}

/// Decides the interchanges of a batch's files in one call to the inbox, records their rejected
/// pieces, and returns each file with its outcomes in order (nothing is committed yet).
fn decide_files(
    inbox: &mut dyn Inbox,
    files: Vec<Prepared>,
    acks: &AckArgs,
) -> anyhow::Result<Vec<Decided>> {
    let mut parts = Vec::with_capacity(files.len());
    let mut all_items = Vec::with_capacity(files.len());
    for f in files {
        match f {
            Prepared::Gone => {}
            Prepared::Settled(d) => {
                parts.push(Part::Settled(d));
                all_items.push(Vec::new());
            }
            Prepared::Parsed {
                path,
                shown,
                claim,
                bytes,
                items,
                sha256,
            } => {
                parts.push(Part::Parsed {
                    path,
                    shown,
                    claim,
                    bytes,
                    sha256,
                });
                all_items.push(items);
            }
        }
    }
    // Each interchange with its bytes again, borrowed from its file's.
    let attached: Vec<Vec<Attached<'_>>> = parts
        .iter()
        .zip(all_items)
        .map(|(part, items)| match part {
            Part::Parsed { bytes, .. } => items
                .into_iter()
                .map(|item| item.map(|(i, span, c)| (i.reattach(bytes, span), c)))
                .collect(),
            Part::Settled(_) => Vec::new(),
        })
        .collect();
    let sources: Vec<Parsed<'_>> = parts
        .iter()
        .zip(attached)
        .filter_map(|(part, items)| match part {
            Part::Parsed {
                shown,
                bytes,
                sha256,
                ..
            } => Some(Parsed {
                shown,
                bytes,
                items,
                sha256: sha256.as_deref(),
                sending: shown.rsplit('/').next().unwrap_or(shown),
                redelivered: false,
            }),
            Part::Settled(_) => None,
        })
        .collect();
    let mut decided = decide_parsed(inbox, &sources, &now(), acks)?.into_iter();
    drop(sources);
    let mut outcomes = Vec::with_capacity(parts.len());
    for part in &parts {
        outcomes.push(match part {
            Part::Parsed { .. } => decided.next().unwrap_or_default(),
            Part::Settled(_) => Vec::new(),
        });
    }
    Ok(parts
        .into_iter()
        .zip(outcomes)
        .map(|(part, outcomes)| match part {
            Part::Settled(d) => d,
            Part::Parsed {
                path, shown, claim, ..
            } => Decided {
                path,
                shown,
                outcomes,
                claim: Some(claim),
                movable: true,
            },
        })
        .collect())
}

/// One input's interchanges as the inbox decides them: a file's, or a delivery's.
pub(super) struct Parsed<'a> {
    /// The name it is reported and recorded under.
    pub shown: &'a str,
    pub bytes: &'a [u8],
    pub items: Vec<Attached<'a>>,
    /// Its SHA-256, where it holds rejected input (its record is keyed by it).
    pub sha256: Option<&'a str>,
    /// Which of the partner's sendings it is, for a duplicate's CONTRL (sent again once per
    /// sending): a file's name (the same file seen again after a crash, or another host's
    /// copy of it, is the same sending), or a delivery's name at its broker.
    pub sending: &'a str,
    /// A broker's redelivery of a delivery: the same sending again, not answered again.
    pub redelivered: bool,
}

/// Decides the interchanges of several inputs in one call to the inbox, records their
/// rejected pieces, and returns each input's outcomes in its order (nothing is committed).
/// A batch that loses a deadlock to another host (over its rejected files, say, taken in
/// another order) is rolled back and made again, as the inbox does for its decisions alone.
pub(super) fn decide_parsed(
    inbox: &mut dyn Inbox,
    sources: &[Parsed<'_>],
    when: &str,
    acks: &AckArgs,
) -> anyhow::Result<Vec<Vec<Outcome>>> {
    const RETRIES: u32 = 10;
    let mut tries = 0;
    loop {
        match decide_parsed_once(inbox, sources, when, acks) {
            Err(e)
                if tries < RETRIES
                    && e.downcast_ref::<crate::inbox::InboxError>()
                        .is_some_and(|ie| inbox.rolled_back_for_retry(ie)) =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * u64::from(tries)));
            }
            other => return other,
        }
    }
}

fn decide_parsed_once(
    inbox: &mut dyn Inbox,
    sources: &[Parsed<'_>],
    when: &str,
    acks: &AckArgs,
) -> anyhow::Result<Vec<Vec<Outcome>>> {
    let candidates: Vec<Candidate<'_>> = sources
        .iter()
        .flat_map(|p| {
            p.items.iter().flatten().map(|(i, c)| Candidate {
                interchange: i,
                compressed: c.as_deref(),
                source_file: p.shown,
                received_at: when,
            })
        })
        .collect();
    let mut decisions = inbox
        .decide(&candidates)
        .context("cannot write to the inbox database")?
        .into_iter();
    // What the parser had read of each rejected interchange, where its answer is due (a file
    // with errors parsed again, once, and only where a CONTRL may be).
    let contexts: Vec<Vec<Option<RejectedContext>>> = sources
        .iter()
        .map(|p| {
            let mut read =
                if acks.contrl != ContrlWhen::Never && p.items.iter().any(|item| item.is_err()) {
                    edifact::rejected_contexts(p.bytes)
                } else {
                    Default::default()
                };
            p.items
                .iter()
                .map(|item| match item {
                    Err(e) => read.remove(&e.offset).filter(|c| {
                        let types: Vec<&str> = c.message_types.iter().map(|t| t.as_str()).collect();
                        // A UNB without its key cannot be answered: the partner could
                        // not tell which interchange the answer is for.
                        let u = &c.unb;
                        u.is_keyed() && wanted_for(u, &types, acks).is_some()
                    }),
                    _ => None,
                })
                .collect()
        })
        .collect();
    // The partners this batch may answer, their counters taken in one order.
    let mut partners: Vec<String> = candidates
        .iter()
        .filter(|c| wanted(c.interchange, acks).is_some())
        .map(|c| partner(&c.interchange.unb))
        .chain(contexts.iter().flatten().flatten().map(|c| partner(&c.unb)))
        .collect();
    partners.sort_unstable();
    partners.dedup();
    inbox
        .lock_partners(&partners)
        .context("cannot write to the inbox database")?;
    drop(candidates);
    // The outcomes in each input's order; its bytes are recorded once, at its first error,
    // and every error points at them.
    let mut outcomes: Vec<Vec<Outcome>> = Vec::with_capacity(sources.len());
    for (p, contexts) in sources.iter().zip(&contexts) {
        let shown = p.shown;
        let mut record = None;
        let mut own = Vec::with_capacity(p.items.len());
        for (item, context) in p.items.iter().zip(contexts) {
            own.push(match item {
                Ok((i, _)) => {
                    let d = decisions
                        .next()
                        .context("the inbox returned fewer decisions than it was given")?;
                    let mut o = Outcome::decided(shown, i, &d);
                    o.contrl = answer(inbox, i, &d, acks, p, when)
                        .context("cannot write to the inbox database")?;
                    o
                }
                Err(e) => {
                    let file = match record.take() {
                        Some(file) => file,
                        None => inbox
                            .rejected_file(shown, p.bytes, p.sha256.unwrap_or(""), when)
                            .context("cannot write to the inbox database")?,
                    };
                    inbox
                        .reject(&file, shown, e, when)
                        .context("cannot write to the inbox database")?;
                    record = Some(file);
                    let mut o = Outcome::rejected(shown, e.to_string(), Some(e.offset));
                    if let Some(c) = context {
                        o.contrl = answer_rejected(inbox, c, e, p.sending, when)
                            .context("cannot write to the inbox database")?;
                    }
                    o
                }
            });
        }
        outcomes.push(own);
    }
    Ok(outcomes)
}

/// The CONTRL that answers a decision, where one is due: built and stored in the open batch
/// (new: acknowledged; drift, or a duplicate with `--contrl-duplicates reject`: rejected with
/// 0085 26), or for a duplicate the first one's again. Returns its control reference.
fn answer(
    inbox: &mut dyn Inbox,
    i: &Interchange<'_>,
    d: &Decision,
    acks: &AckArgs,
    source: &Parsed<'_>,
    when: &str,
) -> Result<Option<String>, crate::inbox::InboxError> {
    use crate::edifact::contrl::{self, Action, Detail, Level, SyntaxError};
    use crate::inbox::Resend;
    let Some(action) = wanted(i, acks) else {
        return Ok(None);
    };
    let duplicate = Some(SyntaxError {
        code: contrl::DUPLICATE_DETECTED,
        level: Level::Interchange,
        tag: None,
    });
    let u = &i.unb;
    let (action, error) = match d {
        Decision::New { .. } => (action, None),
        Decision::Drift { .. } => (Action::Rejected, duplicate),
        Decision::Duplicate if acks.contrl_duplicates == ContrlDuplicates::Reject => {
            (Action::Rejected, duplicate)
        }
        // A partner that sends again most likely lost our answer: the same answer, once per
        // sending of theirs (where the first copy got none, one now). Our own redelivery (the
        // same file after a crash before its move, a broker's redelivery, another host's copy)
        // is not the partner asking again.
        Decision::Duplicate => {
            let sending = (!source.redelivered).then_some(source.sending);
            let key = (
                u.sender.as_str(),
                u.recipient.as_str(),
                u.control_ref.as_str(),
            );
            match inbox.resend_acknowledgement(key, sending, when)? {
                Resend::Queued(own_ref) => return Ok(Some(own_ref)),
                Resend::AlreadySent => return Ok(None),
                Resend::Unanswered => (action, None),
            }
        }
        Decision::Refused { .. } => return Ok(None),
    };
    let detail = Detail {
        error,
        ..Detail::default()
    };
    let partner = partner(u);
    let sending = source.sending;
    let prepared = prepared_at(when);
    let build = |own_ref: &str| {
        contrl::build(
            u,
            &i.separators,
            i.has_una,
            action,
            &detail,
            own_ref,
            prepared,
        )
    };
    let own_ref = inbox.acknowledge(&crate::inbox::NewAcknowledgement {
        sender: &u.sender,
        recipient: &u.recipient,
        control_ref: &u.control_ref,
        partner: &partner,
        action: action.code(),
        error_code: error.map(|e| e.code),
        build: &build,
        created_at: when,
        sending,
    })?;
    Ok(Some(own_ref))
}

/// The action a CONTRL for this interchange would state, where one is due.
fn wanted(i: &Interchange<'_>, acks: &AckArgs) -> Option<crate::edifact::contrl::Action> {
    let types: Vec<&str> = i.messages.iter().map(|m| m.message_type.as_str()).collect();
    wanted_for(&i.unb, &types, acks)
}

fn wanted_for(
    unb: &crate::edifact::Unb,
    types: &[&str],
    acks: &AckArgs,
) -> Option<crate::edifact::contrl::Action> {
    use crate::edifact::contrl::{self, Mode};
    let mode = match acks.contrl {
        ContrlWhen::Requested => Mode::Requested,
        ContrlWhen::Always => Mode::Always,
        ContrlWhen::Never => Mode::Never,
    };
    contrl::wanted(mode, unb, types)
}

/// The CONTRL that rejects an interchange the parser could not accept (its UNB read): UCI 4,
/// with the error's 0085 at the lowest level that can express it. Returns its control
/// reference; `None` where the error has no code (nothing of the interchange to answer).
fn answer_rejected(
    inbox: &mut dyn Inbox,
    c: &RejectedContext,
    e: &EnvelopeError,
    sending: &str,
    when: &str,
) -> Result<Option<String>, crate::inbox::InboxError> {
    use crate::edifact::contrl::{self, Action, Detail};
    let Some(error) = contrl::syntax_error(&e.kind, e.tag) else {
        return Ok(None);
    };
    let s009 = c
        .message
        .as_ref()
        .map(|(r, s)| (r.as_str(), s.each_ref().map(|c| c.as_str())));
    let detail = Detail {
        error: Some(error),
        group_ref: c.group_ref.as_deref(),
        group_parties: [&c.group_parties[0], &c.group_parties[1]],
        message: s009,
    };
    let u = &c.unb;
    let prepared = prepared_at(when);
    let build = |own_ref: &str| {
        contrl::build(
            u,
            &c.separators,
            c.has_una,
            Action::Rejected,
            &detail,
            own_ref,
            prepared,
        )
    };
    let partner = partner(u);
    let own_ref = inbox.acknowledge(&crate::inbox::NewAcknowledgement {
        sender: &u.sender,
        recipient: &u.recipient,
        control_ref: &u.control_ref,
        partner: &partner,
        action: Action::Rejected.code(),
        error_code: Some(error.code),
        build: &build,
        created_at: when,
        sending,
    })?;
    Ok(Some(own_ref))
}

/// Whose counter numbers a CONTRL: the answered sender, with its qualifier.
fn partner(u: &crate::edifact::Unb) -> String {
    format!(
        "{}:{}",
        u.sender,
        u.sender_qualifier.as_deref().unwrap_or("")
    )
}

/// UNB S004 of a CONTRL from a stored time (`2026-11-30T09:05:00.000Z`).
fn prepared_at(when: &str) -> crate::edifact::contrl::Prepared {
    let n = |range: std::ops::Range<usize>| {
        when.get(range)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0)
    };
    crate::edifact::contrl::Prepared {
        year: n(0..4),
        month: n(5..7) as u8,
        day: n(8..10) as u8,
        hour: n(11..13) as u8,
        minute: n(14..16) as u8,
    }
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
        }
    }

    /// The summary line (or object), last.
    fn summarise(&mut self) {
        let s = &self.summary;
        if self.args.json {
            self.out.json_summary(s);
        } else {
            self.out.line(&format!(
                "{}: {} new, {} duplicate, {} drift, {} rejected, {} skipped",
                count(s.files as u64, "file", "files"),
                s.new,
                s.duplicate,
                s.drift,
                s.rejected,
                s.skipped
            ));
        }
        self.out.flush();
    }

    fn report(&mut self, o: &Outcome) {
        self.summary.count(o.status);
        if self.args.json {
            self.out.json(o);
        } else if !self.args.quiet || o.status.is_problem() {
            let line = o.human();
            self.progress.suspend(|| self.out.line(&line));
        }
    }

    /// After a commit: print each file's outcomes, then move it.
    fn finish(&mut self, decided: Vec<Decided>) {
        for d in decided {
            self.summary.files += 1;
            for o in &d.outcomes {
                self.report(o);
            }
            if d.movable {
                self.move_file(&d);
            }
        }
    }

    fn move_file(&mut self, d: &Decided) {
        let bad = d.outcomes.iter().any(|o| o.status.is_problem());
        let target = if bad {
            self.args.quarantine.as_deref()
        } else {
            self.args.archive.as_deref()
        };
        let Some(dir) = target else { return };
        crash_point!("before-move");
        // Escaped like every human line: the reason file is read on a terminal too.
        let reason = bad.then(|| {
            d.outcomes
                .iter()
                .filter(|o| o.status.is_problem())
                .map(|o| format!("{}\n", escape(&o.human())))
                .collect::<String>()
        });
        match filing::move_into(&d.path, dir, reason.as_deref(), d.claim.as_ref()) {
            Ok(filing::Moved::Gone) => {}
            Ok(filing::Moved::To(_) | filing::Moved::AlreadyThere(_)) => {
                crash_point!("after-move");
            }
            // Nothing is lost and nothing is wrong: the new bytes are read by the next run.
            Ok(filing::Moved::Changed) => problem(
                &mut self.out,
                &format!(
                    "{}: note: the file changed after it was read (a new upload under the same name?); not moved to {}, the next run reads it",
                    d.shown,
                    dir.display()
                ),
            ),
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
            }
        }
    }
}
