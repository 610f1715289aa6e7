//! The schema, as an append-only list of migrations in `migrations/`.

use rusqlite::{Connection, TransactionBehavior, params};

use super::SqliteInbox;
use crate::inbox::InboxError;
use crate::inbox::sqlite::APPLICATION_ID;

/// One step of the schema: SQL, or code where rows must be computed again.
pub(super) enum Migration {
    Sql(&'static str),
    Code(fn(&Connection) -> Result<(), InboxError>),
}

/// The schema, as an append-only list of migrations in `migrations/`: entry N takes
/// `user_version` from N to N+1.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration::Sql(include_str!("migrations/0000_schema.sql")),
    Migration::Sql(include_str!("migrations/0001_counters.sql")),
    Migration::Sql(include_str!("migrations/0002_raw_codec.sql")),
    Migration::Sql(include_str!("migrations/0003_rejected_files.sql")),
    // 4: the hash takes the service characters in force where they are not the defaults.
    Migration::Code(rehash),
    Migration::Sql(include_str!("migrations/0005_id_sequences.sql")),
    Migration::Sql(include_str!("migrations/0006_publish.sql")),
    Migration::Sql(include_str!("migrations/0007_deliveries.sql")),
    Migration::Sql(include_str!("migrations/0008_acknowledgements.sql")),
    Migration::Sql(include_str!("migrations/0009_contrl_outbox.sql")),
    Migration::Sql(include_str!("migrations/0010_contrl_sendings.sql")),
    Migration::Sql(include_str!("migrations/0011_contrl_syntax.sql")),
    Migration::Sql(include_str!("migrations/0012_positions.sql")),
    Migration::Sql(include_str!("migrations/0013_transport_messages.sql")),
    Migration::Sql(include_str!("migrations/0014_transport_message_sender.sql")),
    Migration::Sql(include_str!("migrations/0015_position_topic_ids.sql")),
    Migration::Sql(include_str!("migrations/0016_effects.sql")),
    Migration::Sql(include_str!("migrations/0017_rejection_keys.sql")),
    Migration::Sql(include_str!("migrations/0018_filing.sql")),
    // 19: the standard in the key, the key table built again (`migrations/0019_standard.sql`).
    Migration::Code(standard),
    Migration::Sql(include_str!("migrations/0020_answer_outbox.sql")),
    Migration::Sql(include_str!("migrations/0021_refusal_outbox.sql")),
    Migration::Sql(include_str!("migrations/0022_rejected_sending.sql")),
];

impl SqliteInbox {
    /// Applies the migrations this database has not had, in one transaction, so that two runs
    /// starting on a new file at once cannot both create the schema.
    pub(super) fn migrate(&mut self, shown: &str) -> Result<(), InboxError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > MIGRATIONS.len() {
            return Err(InboxError::TooNew {
                path: shown.to_string(),
                found: version,
                known: MIGRATIONS.len(),
            });
        }
        for (n, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            match migration {
                Migration::Sql(sql) => tx.execute_batch(sql)?,
                Migration::Code(f) => f(&tx)?,
            }
            tx.pragma_update(None, "user_version", n as i64 + 1)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.commit()?;
        Ok(())
    }
}

/// Migration 4: every stored hash computed again from the stored bytes, now that the service
/// characters in force go into it where they are not the defaults. Only interchanges with other
/// service characters get another hash; without this, their redeliveries would be false drift.
pub(super) fn rehash(conn: &Connection) -> Result<(), InboxError> {
    let mut changed: Vec<(i64, String, String)> = Vec::new();
    {
        let mut stmt = conn.prepare("SELECT id, sha256, raw, raw_codec FROM interchanges")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (id, old, raw, codec): (i64, String, Vec<u8>, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let raw = if codec == "zstd" {
                crate::inbox::decompress(&raw)?
            } else {
                raw
            };
            if let Some(new) = hash_of(&raw).filter(|new| *new != old) {
                changed.push((id, old, new));
            }
        }
    }
    for (id, old, new) in &changed {
        conn.execute(
            "UPDATE interchanges SET sha256 = ?2 WHERE id = ?1",
            params![id, new],
        )?;
        conn.execute(
            "UPDATE inbox SET sha256 = ?2 WHERE interchange_id = ?1 AND sha256 = ?3",
            params![id, new, old],
        )?;
        // Sightings of that key: what they were compared with, and the duplicates' own hash
        // (they were the same bytes).
        conn.execute(
            "UPDATE sightings SET stored_sha256 = ?2
             WHERE stored_sha256 = ?3 AND (sender, recipient, control_ref) =
                   (SELECT sender, recipient, control_ref FROM interchanges WHERE id = ?1)",
            params![id, new, old],
        )?;
        conn.execute(
            "UPDATE sightings SET sha256 = ?2
             WHERE status = 'duplicate' AND sha256 = ?3 AND (sender, recipient, control_ref) =
                   (SELECT sender, recipient, control_ref FROM interchanges WHERE id = ?1)",
            params![id, new, old],
        )?;
    }
    // Drifted copies keep their bytes: their own hash is computed again too.
    let mut drifted: Vec<(i64, String)> = Vec::new();
    {
        let mut stmt =
            conn.prepare("SELECT id, sha256, payload FROM sightings WHERE payload IS NOT NULL")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (id, old, payload): (i64, String, Vec<u8>) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if let Some(new) = hash_of(&payload).filter(|new| *new != old) {
                drifted.push((id, new));
            }
        }
    }
    for (id, new) in drifted {
        conn.execute(
            "UPDATE sightings SET sha256 = ?2 WHERE id = ?1",
            params![id, new],
        )?;
    }
    Ok(())
}

/// Migration 19 (`migrations/0019_standard.sql`): the standard in every key. The key table is
/// built again for its new primary key: its indexes (and any trigger, though the side effects
/// may put none on it) are read before it is dropped, which drops them, and made again after.
/// The rename runs as SQLite's older ALTER TABLE did, which leaves the operator's views over
/// `inbox` as they are: today's checks every view of the schema first, and would refuse the
/// rename over a view of the table it has just dropped.
pub(super) fn standard(conn: &Connection) -> Result<(), InboxError> {
    let kept: Vec<String> = conn
        .prepare(
            "SELECT sql FROM sqlite_master
             WHERE tbl_name = 'inbox' AND type IN ('index', 'trigger') AND sql IS NOT NULL
             ORDER BY type, name",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let legacy: bool = conn.query_row("PRAGMA legacy_alter_table", [], |r| r.get(0))?;
    conn.pragma_update(None, "legacy_alter_table", true)?;
    let rebuilt = conn.execute_batch(include_str!("migrations/0019_standard.sql"));
    conn.pragma_update(None, "legacy_alter_table", legacy)?;
    rebuilt?;
    for sql in kept {
        conn.execute_batch(&sql)?;
    }
    Ok(())
}

/// The hash of the first interchange in `raw`, as the parser makes it now.
pub(super) fn hash_of(raw: &[u8]) -> Option<String> {
    crate::edifact::interchanges(raw)
        .next()?
        .ok()
        .map(|i| i.sha256_hex())
}
