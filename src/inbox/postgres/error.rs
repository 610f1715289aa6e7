//! The server's failures, in the inbox's terms: one line in the server's own words, and which
//! of them a batch may simply be tried again after, or refuse one interchange for.

use std::fmt;

use postgres::error::SqlState;

use crate::inbox::InboxError;

/// A key neither taken by this batch nor found stored: its holder was purged between the two
/// statements. Not a failure of the data: the batch is rolled back and tried again, whole.
#[derive(Debug)]
pub(super) struct KeyVanished;

impl fmt::Display for KeyVanished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key was neither taken nor found (purged meanwhile)")
    }
}

impl std::error::Error for KeyVanished {}

/// A failure of the server or the connection, told in one line with the server's own words
/// (the driver's own `Display` says only "db error" and keeps the reason in its source).
#[derive(Debug)]
pub(super) struct PgError(pub(super) postgres::Error);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(db) = self.0.as_db_error() {
            write!(f, "{}", db.message())?;
            if let Some(detail) = db.detail() {
                write!(f, " ({})", one_line(detail))?;
            }
            if let Some(hint) = db.hint() {
                write!(f, "; hint: {}", one_line(hint))?;
            }
            return write!(f, " [SQLSTATE {}]", db.code().code());
        }
        // "error connecting to server", then why: "Connection refused (os error 111)".
        let mut text = self.0.to_string();
        let mut cause = std::error::Error::source(&self.0);
        while let Some(c) = cause {
            let part = one_line(&c.to_string());
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            cause = c.source();
        }
        f.write_str(&text)
    }
}

impl std::error::Error for PgError {}

pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl From<postgres::Error> for InboxError {
    /// Told apart here, where the server's code is at hand, so that no caller need look inside:
    /// a lock not had within `lock_timeout` (another host's key, a purge's batch), as SQLite's
    /// "busy" is; a deadlock or a serialization failure, after which the batch is made again;
    /// the server refusing the data itself (class 22, data exception; 23, integrity constraint
    /// violation; 54, program limit exceeded, such as a key too long for its index), which
    /// refuses the one interchange that caused it. Anything else (a statement timeout, a full
    /// disk, the server out of memory, a cancel) fails the batch, so that the run exits 1 and
    /// the next one decides the interchange.
    fn from(e: postgres::Error) -> InboxError {
        let code = e.code().cloned();
        let words = e.as_db_error().map(|db| db.message().to_string());
        let boxed = Box::new(PgError(e));
        match code {
            Some(c) if c == SqlState::LOCK_NOT_AVAILABLE => InboxError::Busy(boxed),
            Some(c)
                if c == SqlState::T_R_DEADLOCK_DETECTED
                    || c == SqlState::T_R_SERIALIZATION_FAILURE =>
            {
                InboxError::Conflict(boxed)
            }
            Some(c) if matches!(&c.code()[..2], "22" | "23" | "54") => InboxError::Refused {
                reason: words.unwrap_or_else(|| boxed.to_string()),
                source: boxed,
            },
            _ => InboxError::Backend(boxed),
        }
    }
}

impl From<KeyVanished> for InboxError {
    fn from(e: KeyVanished) -> InboxError {
        InboxError::Conflict(Box::new(e))
    }
}

/// True for the failures after which a batch, rolled back, is simply tried again.
pub(super) fn retryable(e: &InboxError) -> bool {
    matches!(e, InboxError::Conflict(_))
}

/// True for the server refusing the data itself: the interchange that holds it is refused,
/// the rest of its batch decided.
pub(super) fn refusable(e: &InboxError) -> bool {
    matches!(e, InboxError::Refused { .. } | InboxError::EffectFailed(_))
}

/// The server's own words for a failure.
pub(super) fn describe(e: &InboxError) -> String {
    match e {
        InboxError::Refused { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}
