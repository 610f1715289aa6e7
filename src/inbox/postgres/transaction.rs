//! The batch's transaction, and the counters it adds to when it commits.

use super::PgInbox;
use crate::inbox::names::Counter;
use crate::inbox::{Decision, InboxError};

impl PgInbox {
    /// Opens the batch's transaction if none is open.
    pub(super) fn begin(&mut self) -> Result<(), InboxError> {
        if !self.in_tx {
            self.client
                .get_mut()
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")?;
            self.in_tx = true;
        }
        Ok(())
    }

    pub(super) fn rollback(&mut self) {
        if self.in_tx {
            let _ = self.client.get_mut().batch_execute("ROLLBACK");
            self.in_tx = false;
            self.rollbacks += 1;
        }
        self.pending_counts.clear();
    }

    pub(super) fn count(&mut self, decisions: &[Decision]) {
        for d in decisions {
            *self
                .pending_counts
                .entry(Counter::of(d).name())
                .or_default() += 1;
        }
    }
}
