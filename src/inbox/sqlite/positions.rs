//! Where `consume` stands in a partitioned log: the positions table, read under the batch's
//! write lock (`BEGIN IMMEDIATE` holds the whole file, so a second run's batch waits) and moved
//! forward only.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension as _, params};

use super::SqliteInbox;
use crate::inbox::{Advance, InboxError, PositionReader, Positions, Stored, StoredPosition};

impl Positions for SqliteInbox {
    fn claim_positions(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError> {
        self.begin()?;
        read(&self.conn, group, partitions)
    }

    fn advance_positions(
        &mut self,
        group: &str,
        positions: &[Advance<'_>],
        at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        // Forward only, but for a position of another topic (its id known on both sides and
        // not the same) or one restarted: those are replaced.
        let mut advance = self.conn.prepare_cached(
            "INSERT INTO consumer_positions
                 (consumer_group, topic, partition, next_offset, updated_at, topic_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (consumer_group, topic, partition) DO UPDATE
             SET next_offset = CASE
                     WHEN ?7 OR (topic_id IS NOT NULL AND excluded.topic_id IS NOT NULL
                                 AND topic_id <> excluded.topic_id)
                     THEN excluded.next_offset
                     ELSE max(next_offset, excluded.next_offset) END,
                 topic_id = coalesce(excluded.topic_id, topic_id),
                 updated_at = excluded.updated_at
             WHERE ?7 OR excluded.next_offset > next_offset
                OR (excluded.topic_id IS NOT NULL AND topic_id IS NOT excluded.topic_id)",
        )?;
        for a in positions {
            advance.execute(params![
                group,
                a.topic,
                a.partition,
                a.next_offset,
                at,
                a.topic_id,
                a.restart
            ])?;
        }
        Ok(())
    }

    fn positions(&self, group: Option<&str>) -> Result<Vec<StoredPosition>, InboxError> {
        let mut select = self.conn.prepare_cached(
            "SELECT consumer_group, topic, partition, next_offset, updated_at, topic_id
             FROM consumer_positions WHERE ?1 IS NULL OR consumer_group = ?1
             ORDER BY consumer_group, topic, partition",
        )?;
        let rows = select.query_map([group], |r| {
            Ok(StoredPosition {
                group: r.get(0)?,
                topic: r.get(1)?,
                partition: r.get(2)?,
                next_offset: r.get(3)?,
                updated_at: r.get(4)?,
                topic_id: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn position_reader(&self) -> Option<Box<dyn PositionReader + Send>> {
        Reader::open(&self.path)
            .ok()
            .map(|r| Box::new(r) as Box<dyn PositionReader + Send>)
    }
}

fn read(
    conn: &Connection,
    group: &str,
    partitions: &[(&str, i32)],
) -> Result<Vec<Option<Stored>>, InboxError> {
    let mut select = conn.prepare_cached(
        "SELECT next_offset, topic_id FROM consumer_positions
         WHERE consumer_group = ?1 AND topic = ?2 AND partition = ?3",
    )?;
    let mut found = Vec::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        found.push(
            select
                .query_row(params![group, topic, partition], |r| {
                    Ok(Stored {
                        next_offset: r.get(0)?,
                        topic_id: r.get(1)?,
                    })
                })
                .optional()?,
        );
    }
    Ok(found)
}

/// A read-only connection for [`Positions::position_reader`]: what it reads is committed.
struct Reader {
    conn: Connection,
}

impl Reader {
    fn open(path: &Path) -> Result<Reader, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // A reader in WAL mode never waits on the writer; only a checkpoint's moment can.
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(Reader { conn })
    }
}

impl PositionReader for Reader {
    fn read(
        &mut self,
        group: &str,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<Option<Stored>>, InboxError> {
        read(&self.conn, group, partitions)
    }
}
