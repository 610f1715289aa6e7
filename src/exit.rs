//! Exit statuses, the same for every command, so that a monitor can tell them apart.

use std::process::ExitCode;

/// Every input was good.
pub const SUCCESS: u8 = 0;
/// A fatal error stopped the run (a database that cannot be opened or written).
pub const FATAL: u8 = 1;
/// A usage error; clap exits with it for bad arguments.
pub const USAGE: u8 = 2;
/// The run finished, but some input was rejected (or drifted, for `ingest`).
pub const REJECTED: u8 = 3;

/// The status of a finished run.
pub fn from_problems(problems: usize) -> ExitCode {
    ExitCode::from(if problems == 0 { SUCCESS } else { REJECTED })
}
