//! SQLite's failures as the inbox's: told apart where they are converted, so that no caller
//! downcasts.

use crate::inbox::InboxError;

impl From<rusqlite::Error> for InboxError {
    /// "Busy" and "locked" (another process held the database past the busy timeout) are told
    /// apart from every other failure, so that the caller can say so without knowing SQLite.
    fn from(e: rusqlite::Error) -> InboxError {
        let busy = matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        if busy {
            InboxError::Busy(Box::new(e))
        } else {
            InboxError::Backend(Box::new(e))
        }
    }
}
