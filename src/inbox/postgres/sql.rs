//! Pieces of SQL the statements of several files share.

/// A stored time as RFC 3339 UTC text with milliseconds, as SQLite stores them and the reports
/// print them.
macro_rules! ts {
    ($col:literal) => {
        concat!(
            "to_char(",
            $col,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        )
    };
}
