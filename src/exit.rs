//! Exit statuses, the same for every command, so that a monitor can tell them apart.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
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

impl Status {
    /// The status of a finished run with `problems` things that need a look.
    pub fn from_problems(problems: usize) -> Status {
        if problems == 0 {
            Status::Success
        } else {
            Status::Problems
        }
    }
}

impl From<Status> for ExitCode {
    fn from(s: Status) -> ExitCode {
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
                Status::Success,
                Status::Fatal,
                Status::Usage,
                Status::Problems
            ]
            .map(|s| s as u8),
            [0, 1, 2, 3]
        );
        assert_eq!(Status::from_problems(0), Status::Success);
        assert_eq!(Status::from_problems(7), Status::Problems);
    }
}
