//! The batch's transaction, and the counters it adds to when it commits; rolled back whole
//! after a conflict with another host, and counted so.

use super::PgInbox;
use crate::inbox::names::Counter;
use crate::inbox::postgres::error::retryable;
use crate::inbox::postgres::reports::add_counters;
use crate::inbox::{Decision, InboxError, Transaction};

impl Transaction for PgInbox {
    fn start_run(&mut self) {}

    fn commit(&mut self) -> Result<(), InboxError> {
        if !self.in_tx {
            return Ok(());
        }
        let counts = std::mem::take(&mut self.pending_counts);
        let client = self.client.get_mut();
        let result = add_counters(client, &self.host, &counts)
            .and_then(|()| Ok(client.batch_execute("COMMIT")?));
        self.in_tx = false;
        if result.is_err() {
            // The counters' statement failed inside the transaction (a COMMIT that failed has
            // ended it already): ended here, so that the next batch's BEGIN is not refused.
            let _ = client.batch_execute("ROLLBACK");
            self.rollbacks += 1;
        }
        result
    }

    fn abandon(&mut self) {
        self.rollback();
    }

    /// A deadlock with another host over the rows a batch writes after its decision (the
    /// rejected files, the CONTRLs), or a serialization failure: the batch goes back whole.
    fn rolled_back_for_retry(&mut self, e: &InboxError) -> bool {
        if retryable(e) {
            self.rollback();
            true
        } else {
            false
        }
    }

    fn rollbacks(&self) -> u64 {
        self.rollbacks
    }

    fn is_lost(&self) -> bool {
        self.client.borrow().is_closed()
    }

    fn end_run(&mut self) {}
}

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
        self.try_transaction = false;
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
