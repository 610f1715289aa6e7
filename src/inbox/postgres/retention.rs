//! The duplicate-detection window: what `purge` counts and deletes, in short batches that
//! take only rows no one holds.

use std::collections::BTreeMap;

use postgres::GenericClient;

use super::PgInbox;
use crate::inbox::names::Counter;
use crate::inbox::postgres::reports::add_counters;
use crate::inbox::{InboxError, PurgeTarget, Retention};

impl Retention for PgInbox {
    fn count_older(&self, target: PurgeTarget, cutoff: &str) -> Result<i64, InboxError> {
        count_older(&mut **self.client.borrow_mut(), target, cutoff)
    }

    fn purge_step(
        &mut self,
        target: PurgeTarget,
        cutoff: &str,
        limit: u32,
    ) -> Result<usize, InboxError> {
        // Whatever the server's default: under REPEATABLE READ a purge racing an ingest would
        // fail with serialization errors instead of deleting what it can.
        let mut tx = self
            .client
            .get_mut()
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::ReadCommitted)
            .start()?;
        let n = delete_older(&mut tx, target, cutoff, limit)?;
        if target == PurgeTarget::Inbox && n > 0 {
            let counts = BTreeMap::from([(Counter::PurgeEntries.name(), n as i64)]);
            add_counters(&mut tx, &self.host, &counts)?;
        }
        tx.commit()?;
        Ok(n)
    }

    fn oldest_entry(&self) -> Result<Option<String>, InboxError> {
        oldest_entry(&mut **self.client.borrow_mut())
    }
}

pub(super) fn count_older(
    c: &mut impl GenericClient,
    target: PurgeTarget,
    cutoff: &str,
) -> Result<i64, InboxError> {
    let sql = match target {
        PurgeTarget::Inbox => {
            "SELECT count(*) FROM inbox WHERE received_at < $1::text::timestamptz"
        }
        PurgeTarget::Sightings => {
            "SELECT count(*) FROM sightings WHERE seen_at < $1::text::timestamptz"
        }
        PurgeTarget::Rejections => {
            "SELECT count(*) FROM rejected_files WHERE last_seen_at < $1::text::timestamptz"
        }
        PurgeTarget::Deliveries => {
            "SELECT count(*) FROM deliveries WHERE seen_at < $1::text::timestamptz"
        }
        PurgeTarget::TransportMessages => {
            "SELECT count(*) FROM transport_messages WHERE received_at < $1::text::timestamptz"
        }
        PurgeTarget::RefusedAnswers => {
            "SELECT count(*) FROM refusal_outbox WHERE created_at < $1::text::timestamptz"
        }
    };
    Ok(c.query_one(sql, &[&cutoff])?.get(0))
}

/// Deletes up to `limit` rows older than `cutoff`, passing over rows another purge has locked
/// (it deletes those), so two purges at once neither wait for each other nor fail.
pub(super) fn delete_older(
    c: &mut impl GenericClient,
    target: PurgeTarget,
    cutoff: &str,
    limit: u32,
) -> Result<usize, InboxError> {
    let limit = i64::from(limit);
    let n = match target {
        PurgeTarget::Inbox => c.execute(
            "DELETE FROM inbox WHERE (sender, recipient, control_ref, standard) IN (
                 SELECT sender, recipient, control_ref, standard FROM inbox
                 WHERE received_at < $1::text::timestamptz ORDER BY received_at LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::Sightings => c.execute(
            "DELETE FROM sightings WHERE id IN (
                 SELECT id FROM sightings WHERE seen_at < $1::text::timestamptz ORDER BY seen_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::Deliveries => c.execute(
            "DELETE FROM deliveries WHERE id IN (
                 SELECT id FROM deliveries WHERE seen_at < $1::text::timestamptz ORDER BY seen_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::TransportMessages => c.execute(
            "DELETE FROM transport_messages WHERE (transport, message_id) IN (
                 SELECT transport, message_id FROM transport_messages
                 WHERE received_at < $1::text::timestamptz ORDER BY received_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        PurgeTarget::RefusedAnswers => c.execute(
            "DELETE FROM refusal_outbox WHERE (transport, message_id) IN (
                 SELECT transport, message_id FROM refusal_outbox
                 WHERE created_at < $1::text::timestamptz ORDER BY created_at
                 LIMIT $2 FOR UPDATE SKIP LOCKED)",
            &[&cutoff, &limit],
        )?,
        // A rejected file's errors go first (they point at it), in the same transaction.
        PurgeTarget::Rejections => {
            let ids: Vec<i64> = c
                .query(
                    "SELECT id FROM rejected_files WHERE last_seen_at < $1::text::timestamptz
                     ORDER BY last_seen_at LIMIT $2 FOR UPDATE SKIP LOCKED",
                    &[&cutoff, &limit],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            c.execute("DELETE FROM rejections WHERE file_id = ANY($1)", &[&ids])?;
            c.execute("DELETE FROM rejected_files WHERE id = ANY($1)", &[&ids])?
        }
    };
    Ok(n as usize)
}

pub(super) fn oldest_entry(c: &mut impl GenericClient) -> Result<Option<String>, InboxError> {
    Ok(c.query_one(
        concat!("SELECT ", ts!("(SELECT min(received_at) FROM inbox)")),
        &[],
    )?
    .get(0))
}
