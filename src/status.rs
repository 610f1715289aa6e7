//! What happened to an interchange (or to a file that gave none): one vocabulary for the JSON,
//! the human lines, the database and `list --status` (whose words, `cli::StatusArg`, the command
//! line keeps: nothing here reads clap), and one way to show it.

use serde::Serialize;

/// An outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Applied: the key was new.
    New,
    /// Not applied: the same key with the same content was applied before.
    Duplicate,
    /// Not applied, kept for review: the same key with other content.
    Drift,
    /// Not applied: the input breaks a rule of the envelope, or cannot be read.
    Rejected,
    /// Not applied, kept whole: one of the operator's side effects (`--effects`) failed on its
    /// data; `reapply --refused` decides it again once the mapping or the data is fixed.
    Refused,
    /// An outbox event parked after `publish --max-attempts` failed attempts (never an
    /// interchange's outcome).
    Failed,
    /// Not read this run (too young); never stored, so `list` never shows it.
    Skipped,
}

impl Status {
    /// The word in JSON and in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Duplicate => "duplicate",
            Status::Drift => "drift",
            Status::Rejected => "rejected",
            Status::Refused => "refused",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }

    /// The status a stored word stands for.
    pub fn from_stored(word: &str) -> Option<Status> {
        [
            Status::New,
            Status::Duplicate,
            Status::Drift,
            Status::Rejected,
            Status::Refused,
            Status::Failed,
            Status::Skipped,
        ]
        .into_iter()
        .find(|s| s.as_str() == word)
    }

    /// True for what an operator must look at (and what makes the exit status 3).
    pub fn is_problem(self) -> bool {
        matches!(
            self,
            Status::Drift | Status::Rejected | Status::Refused | Status::Failed
        )
    }

    /// How a human line shows it, in a column of one width: drift in capitals, to be seen.
    pub fn label(self) -> &'static str {
        match self {
            Status::New => "new      ",
            Status::Duplicate => "duplicate",
            Status::Drift => "DRIFT    ",
            Status::Rejected => "rejected ",
            Status::Refused => "REFUSED  ",
            Status::Failed => "FAILED   ",
            Status::Skipped => "skipped  ",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_each_and_one_width() {
        for s in [
            Status::New,
            Status::Duplicate,
            Status::Drift,
            Status::Rejected,
            Status::Refused,
            Status::Failed,
            Status::Skipped,
        ] {
            assert_eq!(Status::from_stored(s.as_str()), Some(s));
            assert_eq!(s.label().len(), 9);
            assert_eq!(s.label().trim().to_lowercase(), s.as_str());
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(Status::from_stored("other"), None);
    }
}
