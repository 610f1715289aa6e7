//! The read-ahead pipeline: up to four reading threads claim, read, parse, hash and compress
//! files ahead of the thread that decides them in their order, commits each batch, and then
//! prints and moves its files.

use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::budget::{Budget, CloseOnDrop, IN_FLIGHT_BYTES};
use super::{Decided, Run};
use crate::cli::IngestArgs;
use crate::filing::{self, Claim, Claimed};
use crate::inbox::effects::HoldAhead;
use crate::inbox::{Inbox, KeyProbe};
use crate::intake::{self, AckPolicy, Attached, Detached, Outcome, Parsed, Source};
use crate::walk::{self, InputFile};

/// A batch never stays open longer than this, so an overlapping run or a purge waits little.
const MAX_BATCH_TIME: Duration = Duration::from_secs(1);

/// Reads the files ahead on up to four reading threads and decides them in their order on this
/// thread.
///
/// Reader k claims, reads, parses, hashes and compresses files k, k + readers, k + 2 readers...
/// and hands each over on a
/// channel of its own, so that this thread takes them back in order; bounded channels and the
/// byte budget keep memory flat whatever the run's length. This thread decides each file, commits
/// a batch every `--batch` interchanges or second, and after each commit prints and moves the
/// batch's files.
pub(super) fn read_and_decide(
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
    let hold = inbox.hold_ahead();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let budget = &budget;
        let hold = hold.as_ref();
        let mut channels = Vec::with_capacity(readers);
        for (k, probe) in probes.into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Prepared, usize)>(32);
            channels.push(rx);
            scope.spawn(move || {
                for (n, file) in inputs.iter().enumerate().skip(k).step_by(readers) {
                    let Some(prepared) =
                        prepare_file(n, file, args, exclude, probe.as_deref(), hold, budget)
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
            batch.add(inbox, prepared, size, budget, run.acks)?;
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
pub(super) struct Batch {
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
        acks: AckPolicy,
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
    decided.extend(decide_files(inbox, undecided, run.acks)?);
    inbox
        .commit()
        .context("cannot commit to the inbox database")?;
    let moves = run.finish(decided);
    // Where the files went, in a short transaction after the moves (see `Run::finish`).
    if let Err(e) = inbox.record_moves(&moves) {
        run.not_recorded(&e);
    }
    budget.release(bytes);
    Ok(())
}

fn now() -> String {
    crate::clock::now()
}

/// A file as the reading thread hands it to the deciding one.
pub(super) enum Prepared {
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
        items: Vec<Detached>,
        /// The file's SHA-256, where it holds rejected input (its record is keyed by it).
        sha256: Option<String>,
        /// The absolute path it was read from, recorded with its sightings.
        source_path: String,
    },
}

/// What a file read ahead holds in memory: its bytes, and each interchange compressed (and its
/// messages held).
fn held_bytes(bytes: &[u8], items: &[Detached]) -> usize {
    bytes.len()
        + items
            .iter()
            .flatten()
            .map(|(_, _, ahead)| ahead.size())
            .sum::<usize>()
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
    hold: Option<&HoldAhead>,
    budget: &Budget,
) -> Option<(Prepared, usize)> {
    let shown = walk::display(&file.path);
    let source = || Source::File(shown.clone());
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
            let o = Outcome::skipped(
                source(),
                format!(
                    "modified {}s ago, more recently than --min-age {}s: left in place",
                    age.as_secs(),
                    args.min_age.as_secs()
                ),
            );
            return pass(settled(o, None));
        }
        Ok(Claim::TooLarge(c)) => {
            let o = Outcome::rejected(
                source(),
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
                Outcome::rejected(source(), walk::describe(&e), None),
                Some(c),
            ));
        }
        // Anything else (an I/O error, a lock the file system refuses): left where it is.
        Err(e) => {
            return pass(settled(
                Outcome::rejected(source(), walk::describe(&e), None),
                None,
            ));
        }
    };
    // Room for the bytes and, at worst, as much again compressed, and where its messages are
    // held, their segments: each one's place beside its bytes, up to a dozen times the bytes
    // of a message of the shortest segments (`UNS+S'`); settled once known.
    let len = claimed.identity.len as usize;
    let holds = hold.is_some() && intake::prepare::holds_ahead(len);
    let taken = len.saturating_mul(if holds { 16 } else { 2 });
    if !budget.admit(n, taken) {
        return None;
    }
    let bytes = match claimed.read() {
        Ok(filing::Contents::Bytes(bytes)) => bytes,
        Ok(filing::Contents::Changed) => {
            budget.release(taken);
            let o = Outcome::skipped(
                source(),
                "changed while it was read (still being written?): left in place".into(),
            );
            return Some((settled(o, None), 0));
        }
        Err(e) => {
            budget.release(taken);
            let o = Outcome::rejected(source(), walk::describe(&e), None);
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
    let items: Vec<_> = intake::prepare::interchanges(&bytes, probe, hold)
        .map(intake::prepare::detach)
        .collect();
    let kept = held_bytes(&bytes, &items);
    budget.settle(taken, kept);
    let sha256 = items
        .iter()
        .any(Result::is_err)
        .then(|| hex::encode(Sha256::digest(&bytes)));
    // Absolute, so that two hosts' (or two folders') `drop/inv1.edi` are told apart; made here
    // on the reading thread, without resolving links (the path it was read from, as named).
    let source_path =
        walk::display(&std::path::absolute(&file.path).unwrap_or_else(|_| file.path.clone()));
    let prepared = Prepared::Parsed {
        path: file.path.clone(),
        shown,
        claim: claimed,
        bytes,
        items,
        sha256,
        source_path,
    };
    Some((prepared, kept))
}

/// A file of a batch, as its outcomes are made.
enum Part {
    Settled(Decided),
    Parsed {
        path: PathBuf,
        shown: String,
        claim: Claimed,
        bytes: Vec<u8>,
        sha256: Option<String>,
        source_path: String,
    },
}

/// Decides the interchanges of a batch's files in one call to the inbox, records their rejected
/// pieces, and returns each file with its outcomes in order (nothing is committed yet).
fn decide_files(
    inbox: &mut dyn Inbox,
    files: Vec<Prepared>,
    acks: AckPolicy,
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
                source_path,
            } => {
                parts.push(Part::Parsed {
                    path,
                    shown,
                    claim,
                    bytes,
                    sha256,
                    source_path,
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
                .map(|item| intake::prepare::reattach(bytes, item))
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
                source_path,
                ..
            } => Some(Parsed {
                source: Source::File(shown.clone()),
                bytes,
                items,
                sha256: sha256.as_deref(),
                source_path: Some(source_path),
            }),
            Part::Settled(_) => None,
        })
        .collect();
    let mut decided = intake::decide(inbox, &sources, &now(), acks)?.into_iter();
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
