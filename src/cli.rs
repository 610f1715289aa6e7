//! The command line (clap only: no behaviour here).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exactly-once inbox for UN/EDIFACT interchanges dropped in a folder.
///
/// Exit status: 0 all input was good; 3 the run finished but some input was rejected;
/// 1 a fatal error stopped the run; 2 a usage error.
#[derive(Debug, Parser)]
#[command(name = "edi-inbox", version, about, long_about = None)]
pub struct Cli {
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
