//! Where `consume` stands in a partitioned log: the positions table, its rows locked for the
//! batch (`SELECT ... FOR UPDATE`, in the order of their keys, so that two hosts never deadlock
//! over them) and moved forward only. A consumer that lost its partitions to another host and
//! still decides a batch of them waits on these rows, then finds the position past its records.

use postgres::Client;

use super::PgInbox;
use crate::inbox::{Advance, InboxError, PositionReader, Positions, Stored, StoredPosition};

impl Positions for PgInbox {
    fn claim_positions(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError> {
        self.begin()?;
        let client = self.client.get_mut();
        let (topics, numbers) = columns(partitions);
        // A row for each partition first, so that there is one to lock where none was stored
        // (a second host inserting the same one waits, then finds it there).
        client.execute_prepared(
            "INSERT INTO consumer_positions (consumer_group, topic, partition)
             SELECT $1, t, p FROM unnest($2::text[], $3::int[]) AS x (t, p)
             ORDER BY t, p
             ON CONFLICT DO NOTHING",
            &[&group, &topics, &numbers],
        )?;
        let rows = client.query_prepared(
            "SELECT topic, partition, next_offset, topic_id FROM consumer_positions
             WHERE consumer_group = $1
               AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))
             ORDER BY topic, partition
             FOR UPDATE",
            &[&group, &topics, &numbers],
        )?;
        Ok(in_order(partitions, rows))
    }

    fn advance_positions(
        &mut self,
        group: &str,
        positions: &[Advance<'_>],
        _at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        let topics: Vec<&str> = positions.iter().map(|p| p.topic).collect();
        let numbers: Vec<i32> = positions.iter().map(|p| p.partition).collect();
        let next: Vec<i64> = positions.iter().map(|p| p.next_offset).collect();
        let ids: Vec<Option<&str>> = positions.iter().map(|p| p.topic_id).collect();
        let restart: Vec<bool> = positions.iter().map(|p| p.restart).collect();
        // Forward only, but for a position of another topic (its id known on both sides and
        // not the same) or one restarted: those are replaced.
        self.client.get_mut().execute_prepared(
            "INSERT INTO consumer_positions
                 (consumer_group, topic, partition, next_offset, topic_id)
             SELECT $1, t, p, n, i
             FROM unnest($2::text[], $3::int[], $4::bigint[], $5::text[]) AS x (t, p, n, i)
             ORDER BY t, p
             ON CONFLICT (consumer_group, topic, partition) DO UPDATE
             SET next_offset = CASE
                     WHEN consumer_positions.next_offset IS NULL
                       OR (consumer_positions.topic_id IS NOT NULL
                           AND EXCLUDED.topic_id IS NOT NULL
                           AND consumer_positions.topic_id <> EXCLUDED.topic_id)
                       OR (EXCLUDED.topic, EXCLUDED.partition) IN
                          (SELECT t, p FROM unnest($2::text[], $3::int[], $6::bool[]) AS r (t, p, y)
                           WHERE y)
                     THEN EXCLUDED.next_offset
                     ELSE GREATEST(consumer_positions.next_offset, EXCLUDED.next_offset) END,
                 topic_id = COALESCE(EXCLUDED.topic_id, consumer_positions.topic_id),
                 updated_at = now()",
            &[&group, &topics, &numbers, &next, &ids, &restart],
        )?;
        Ok(())
    }

    fn positions(&self, group: Option<&str>) -> Result<Vec<StoredPosition>, InboxError> {
        let rows = self.client.borrow_mut().query(
            concat!(
                "SELECT consumer_group, topic, partition, next_offset, topic_id, ",
                ts!("updated_at"),
                " FROM consumer_positions
                 WHERE next_offset IS NOT NULL AND ($1::text IS NULL OR consumer_group = $1)
                 ORDER BY consumer_group, topic, partition"
            ),
            &[&group],
        )?;
        Ok(rows
            .iter()
            .map(|r| StoredPosition {
                group: r.get(0),
                topic: r.get(1),
                partition: r.get(2),
                next_offset: r.get(3),
                topic_id: r.get(4),
                updated_at: r.get(5),
            })
            .collect())
    }

    fn position_reader(&self) -> Option<Box<dyn PositionReader + Send>> {
        let mut client = self.target.connect().ok()?;
        client
            .batch_execute(&format!(
                "SET search_path = {}; SET default_transaction_read_only = on;
                 SET statement_timeout = 10000",
                self.target.sql_schema()
            ))
            .ok()?;
        Some(Box::new(Reader { client }))
    }
}

fn columns<'a>(partitions: &[(&'a str, i32)]) -> (Vec<&'a str>, Vec<i32>) {
    partitions.iter().copied().unzip()
}

/// The positions of `rows` (topic, partition, next offset, topic id) in the order of
/// `partitions`; `None` where none is stored (or only the row of a batch's lock).
fn in_order(partitions: &[(&str, i32)], rows: Vec<postgres::Row>) -> Vec<Option<Stored>> {
    let mut found: std::collections::HashMap<(String, i32), Stored> = rows
        .iter()
        .filter_map(|r| {
            let next_offset: Option<i64> = r.get(2);
            next_offset.map(|next_offset| {
                (
                    (r.get(0), r.get(1)),
                    Stored {
                        next_offset,
                        topic_id: r.get(3),
                    },
                )
            })
        })
        .collect();
    partitions
        .iter()
        .map(|(t, p)| found.remove(&(t.to_string(), *p)))
        .collect()
}

/// A connection of its own for [`Positions::position_reader`].
struct Reader {
    client: Client,
}

impl PositionReader for Reader {
    fn read(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError> {
        let (topics, numbers) = columns(partitions);
        let rows = self.client.query(
            "SELECT topic, partition, next_offset, topic_id FROM consumer_positions
             WHERE consumer_group = $1
               AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))",
            &[&group, &topics, &numbers],
        )?;
        Ok(in_order(partitions, rows))
    }
}
