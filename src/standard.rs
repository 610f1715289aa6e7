//! The standard an interchange is written in: UN/EDIFACT or ANSI X12. It is part of the
//! inbox's key, so that an X12 interchange never collides with an EDIFACT one that happens to
//! carry the same sender, recipient and control number (issue 41).
//!
//! Nothing here reads bytes: each standard's reader (`edifact/`, and X12's beside it) says
//! which standard what it read is in.

use std::fmt;
use std::str::FromStr;

/// The standard of an interchange, stored in the inbox as [`Standard::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Standard {
    /// UN/EDIFACT (ISO 9735): every interchange stored before the standard was kept is one.
    #[default]
    Edifact,
    /// ANSI ASC X12.
    X12,
}

impl Standard {
    /// Every standard, in the order they are listed.
    pub const ALL: [Standard; 2] = [Standard::Edifact, Standard::X12];

    /// Its name as the inbox stores it, the JSON says it and `--standard` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Standard::Edifact => "edifact",
            Standard::X12 => "x12",
        }
    }

    /// The first part of its outbox events' type (`edifact.INVOIC.received`,
    /// `x12.810.received`).
    pub fn event_prefix(self) -> &'static str {
        match self {
            Standard::Edifact => "edifact",
            Standard::X12 => "x12",
        }
    }
}

impl fmt::Display for Standard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no standard's ([`Standard::from_str`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown standard {found:?}: expected one of edifact, x12")]
pub struct UnknownStandard {
    /// What was given, as given.
    pub found: String,
}

impl FromStr for Standard {
    type Err = UnknownStandard;

    /// The stored name exactly (`edifact`, `x12`), as the schema's CHECK allows; any case, for
    /// what a person types.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Standard::ALL
            .into_iter()
            .find(|standard| standard.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStandard {
                found: s.to_string(),
            })
    }
}

impl serde::Serialize for Standard {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_standard_reads_back_from_its_name() {
        for standard in Standard::ALL {
            assert_eq!(standard.as_str().parse::<Standard>(), Ok(standard));
            assert_eq!(standard.to_string(), standard.as_str());
        }
        assert_eq!("X12".parse::<Standard>(), Ok(Standard::X12));
        assert_eq!("EDIFACT".parse::<Standard>(), Ok(Standard::Edifact));
    }

    #[test]
    fn an_unknown_name_is_a_typed_error_that_says_what_was_given() {
        let e = "tradacoms".parse::<Standard>().unwrap_err();
        assert_eq!(
            e,
            UnknownStandard {
                found: "tradacoms".into()
            }
        );
        assert!(e.to_string().contains("\"tradacoms\""), "{e}");
        assert!("".parse::<Standard>().is_err());
        assert!(" x12".parse::<Standard>().is_err());
    }

    #[test]
    fn the_default_is_edifact_which_every_older_row_is() {
        assert_eq!(Standard::default(), Standard::Edifact);
    }

    #[test]
    fn event_prefixes_and_names() {
        assert_eq!(Standard::Edifact.event_prefix(), "edifact");
        assert_eq!(Standard::X12.event_prefix(), "x12");
        assert_eq!(Standard::X12.as_str(), "x12");
    }

    // serde_json is the program's (the `cli` feature), not the parser's.
    #[cfg(feature = "cli")]
    #[test]
    fn it_serializes_as_its_lowercase_name() {
        assert_eq!(
            serde_json::to_string(&Standard::X12).ok().as_deref(),
            Some("\"x12\"")
        );
        assert_eq!(
            serde_json::to_string(&Standard::Edifact).ok().as_deref(),
            Some("\"edifact\"")
        );
    }
}
