//! The command line (clap only: no behaviour here).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Exactly-once inbox for UN/EDIFACT interchanges dropped in a folder.
///
/// Exit status: 0 all input was good; 3 the run finished but some input was rejected;
/// 1 a fatal error stopped the run; 2 a usage error.
#[derive(Debug, Parser)]
#[command(name = "edi-inbox", version, about, long_about = None)]
pub struct Cli {
    /// The inbox database (SQLite), created with its schema on first use.
    #[arg(
        long,
        global = true,
        env = "EDI_INBOX_DB",
        default_value = "edi-inbox.db",
        value_name = "PATH"
    )]
    pub db: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse interchanges and print their envelopes, without touching any database.
    ///
    /// PATHs are files, or folders walked recursively (regular files only, no symbolic links
    /// followed, hidden names and names ending in .tmp, .part or .partial passed over).
    Inspect(InspectArgs),

    /// Apply each interchange exactly once: new ones are written, redeliveries reported as
    /// duplicates, the same key with other content (drift) kept apart and reported.
    ///
    /// Each decision is one SQLite transaction (a savepoint within a group commit); outcomes are
    /// printed, and files moved, only after the commit that makes them true.
    Ingest(IngestArgs),
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Print JSON Lines: one object per interchange, or per file that cannot be parsed.
    #[arg(long)]
    pub json: bool,

    /// Files or folders to read.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    /// Print JSON Lines: one object per interchange, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// Print only problems (drift, rejected) and the summary.
    #[arg(short, long)]
    pub quiet: bool,

    /// After the commit, move each file whose interchanges were all new or duplicate here.
    #[arg(long, value_name = "DIR")]
    pub archive: Option<PathBuf>,

    /// Move each file with a rejected or drifted interchange here, with NAME.error.txt beside it.
    #[arg(long, value_name = "DIR")]
    pub quarantine: Option<PathBuf>,

    /// Skip files modified more recently than this (a partner may still be writing them),
    /// e.g. 30s, 5m; they are reported as skipped and left in place.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub min_age: Duration,

    /// Commit every N interchanges (group commit); each interchange is still atomic on its own.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,

    /// Reject files larger than this without reading them (bytes, or with K, M, G, KiB, MiB, GiB).
    #[arg(long, value_name = "SIZE", default_value = "100MiB", value_parser = parse_size)]
    pub max_size: u64,

    /// Files or folders to read.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// `30s`, `5m`, `1h30m`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (try 30s, 5m or 1h)"))
}

/// `1048576`, `512K`, `100M`, `100MiB`, `1G`: binary multiples either way.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 100MiB)"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} (try K, M or G)")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_size("100MiB"), Ok(100 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5T").is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
