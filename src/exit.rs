//! Exit statuses, the same for every command, so that a monitor can tell them apart.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitStatus {
    /// Every input was good.
    Success = 0,
    /// A fatal error stopped the run (a database that cannot be opened or written).
    Fatal = 1,
    /// A usage error; clap exits with it for bad arguments.
    Usage = 2,
    /// The run finished, but something needs a look: input rejected or drifted, a file not
    /// moved, a metrics file or standard output not written.
    Problems = 3,
}

impl ExitStatus {
    /// The status of a finished run with `problems` things that need a look.
    pub fn from_problems(problems: usize) -> ExitStatus {
        if problems == 0 {
            ExitStatus::Success
        } else {
            ExitStatus::Problems
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> ExitCode {
        ExitCode::from(s as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_documented_numbers() {
        assert_eq!(
            [
                ExitStatus::Success,
                ExitStatus::Fatal,
                ExitStatus::Usage,
                ExitStatus::Problems
            ]
            .map(|s| s as u8),
            [0, 1, 2, 3]
        );
        assert_eq!(ExitStatus::from_problems(0), ExitStatus::Success);
        assert_eq!(ExitStatus::from_problems(7), ExitStatus::Problems);
    }
}
