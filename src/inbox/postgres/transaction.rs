//! The batch's transaction, and the counters it adds to when it commits; rolled back whole
//! after a conflict with another host, and counted so.

use super::PgInbox;
use super::decisions::PendingDeliveries;
use super::session::Session;
use crate::inbox::names::Counter;
use crate::inbox::postgres::error::retryable;
use crate::inbox::{Decision, InboxError, Transaction};
use std::collections::BTreeMap;

impl Transaction for PgInbox {
    fn start_run(&mut self) {}

    fn commit(&mut self) -> Result<(), InboxError> {
        if !self.in_tx {
            return Ok(());
        }
        let counts = std::mem::take(&mut self.pending_counts);
        let deliveries = std::mem::take(&mut self.pending_deliveries);
        let client = self.client.get_mut();
        let result = write_pending(client, &self.host, &counts, &deliveries)
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
        self.pending_deliveries = Default::default();
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

/// The batch's deliveries and its additions to this host's counters, in one statement just
/// before its COMMIT (one round trip for both, where the deliveries cost one of their own when
/// they were taken).
fn write_pending(
    client: &mut Session,
    host: &str,
    counts: &BTreeMap<&'static str, i64>,
    d: &PendingDeliveries,
) -> Result<(), InboxError> {
    if counts.is_empty() && d.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = counts.keys().copied().collect();
    let values: Vec<i64> = counts.values().copied().collect();
    client.execute_prepared(
        "WITH d AS (
             INSERT INTO deliveries
                 (source, filename, delivery_count, size, seen_at, record_key, produced_at)
             SELECT s, f, n, z, now(), k, p::timestamptz
             FROM unnest($4::text[], $5::text[], $6::int[], $7::bigint[], $8::text[],
                         $9::text[]) AS d (s, f, n, z, k, p))
         INSERT INTO counters (host, name, value)
         SELECT $1, n, v FROM unnest($2::text[], $3::bigint[]) AS t(n, v)
         ON CONFLICT (host, name) DO UPDATE SET value = counters.value + excluded.value",
        &[
            &host,
            &names,
            &values,
            &d.sources,
            &d.names,
            &d.counts,
            &d.sizes,
            &d.keys,
            &d.produced,
        ],
    )?;
    Ok(())
}
