//! edi-inbox: the receiving half of the transactional inbox pattern for UN/EDIFACT interchanges.
//!
//! [`edifact`] reads envelopes from raw bytes; the commands live beside it.

pub mod cli;
pub mod edifact;
pub mod exit;
pub mod files;
pub mod inbox;
pub mod ingest;
pub mod input;
pub mod inspect;
pub mod output;
pub mod synth;

use std::process::ExitCode;

use clap::Parser;

/// Parses the command line, runs the command and turns its outcome into an exit status.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match &cli.command {
        cli::Command::Inspect(args) => inspect::run(args),
        cli::Command::Ingest(args) => ingest::run(&cli.db, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("edi-inbox: error: {e:#}");
            ExitCode::from(exit::FATAL)
        }
    }
}
