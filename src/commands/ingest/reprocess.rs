//! `edi-inbox reprocess QUARANTINED_FILE...`: files of the quarantine decided again, once they
//! are corrected (or a partner's resend is the fix), by ingest's own run: decided as ingest
//! decides them, filed where ingest files them (the archive when good, back into the
//! quarantine with a new note when not), each file's old note going with it. Here: only what
//! must hold of the files named before that run.

use std::path::Path;
use std::time::Duration;

use crate::cli::IngestArgs;
use crate::exit::ExitStatus;
use crate::filing::NOTE_SUFFIX;
use crate::inbox::Location;
use crate::walk;

/// Runs `reprocess`: each FILE must be a file directly in the `--quarantine` folder and not a
/// note; anything else is a usage error (exit 2) that reads nothing, since `ingest` is the
/// command for files elsewhere. Then the run is ingest's.
pub fn run(
    db: &Location,
    named: bool,
    busy_timeout: Duration,
    args: &IngestArgs,
) -> anyhow::Result<ExitStatus> {
    use anyhow::Context as _;
    // Its figures would replace those of ingest's file (node_exporter keeps one series of a
    // name per host); what it decides is counted in the inbox's counters all the same.
    if args.metrics_file.is_some() {
        return super::usage(
            "reprocess takes no --metrics-file: its figures would replace ingest's; what it decides shows in the counters of ingest's next metrics file",
        );
    }
    let (Some(quarantine), Some(_)) = (&args.quarantine, &args.archive) else {
        return super::usage("reprocess needs --archive and --quarantine, as ingest has them");
    };
    let folder = std::fs::canonicalize(quarantine)
        .with_context(|| format!("--quarantine {} cannot be read", quarantine.display()))?;
    for file in &args.paths {
        if let Some(problem) = not_quarantined(file, &folder) {
            return super::usage(&format!(
                "{} {problem}: reprocess takes files of the --quarantine folder {} (ingest reads the others)",
                walk::display(file),
                quarantine.display()
            ));
        }
    }
    super::run_files(db, named, busy_timeout, args, true)
}

/// Why `file` is not a quarantined file of `folder` (its real path), where it is not.
fn not_quarantined(file: &Path, folder: &Path) -> Option<&'static str> {
    let name = file.file_name()?.to_string_lossy();
    if name.ends_with(NOTE_SUFFIX) {
        return Some("is a quarantine note, not a file to decide");
    }
    match std::fs::symlink_metadata(file) {
        Err(_) => return Some("does not exist"),
        Ok(m) if !m.is_file() => return Some("is not a regular file"),
        Ok(_) => {}
    }
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::canonicalize(parent) {
        Ok(p) if p == folder => None,
        _ => Some("is not in the --quarantine folder"),
    }
}
