//! The SQLite inbox read whole for `migrate` ([`CopySource`]): every table in one transaction
//! that holds the write lock, so that no run decides anything here while it is copied (a
//! decision made meanwhile would be in this file and not in the target).

use rusqlite::types::ValueRef;

use super::SqliteInbox;
use crate::inbox::InboxError;
use crate::inbox::copying::{
    self, CopySource, Figures, NOT_COPIED, TABLES, Table, Value, ident, idents,
};

impl SqliteInbox {
    /// Takes the write lock for the rest of the copy (released when the inbox is dropped).
    fn hold_for_copy(&mut self) -> Result<(), InboxError> {
        if self.conn.is_autocommit() {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
        }
        Ok(())
    }
}

impl CopySource for SqliteInbox {
    fn tables(&mut self) -> Result<(Vec<Table>, Vec<String>), InboxError> {
        self.hold_for_copy()?;
        let mut stmt = self.conn.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
        )?;
        let present = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?;
        drop(stmt);
        let mut tables = Vec::new();
        for name in TABLES {
            if !present.iter().any(|p| p == name) {
                continue;
            }
            let mut stmt = self
                .conn
                .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")?;
            let columns = stmt
                .query_map([name], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            tables.push(Table {
                name: name.to_string(),
                columns,
            });
        }
        let unknown = present
            .into_iter()
            .filter(|p| !TABLES.contains(&p.as_str()) && !NOT_COPIED.iter().any(|(n, _)| n == p))
            .collect();
        Ok((tables, unknown))
    }

    fn rows(
        &mut self,
        table: &Table,
        row: &mut dyn FnMut(Vec<Value>) -> Result<(), InboxError>,
    ) -> Result<(), InboxError> {
        self.hold_for_copy()?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {} FROM {}",
            idents(&table.columns),
            ident(&table.name)
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let mut values = Vec::with_capacity(table.columns.len());
            for i in 0..table.columns.len() {
                values.push(match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Integer(n),
                    ValueRef::Real(x) => Value::Real(x),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                });
            }
            row(values)?;
        }
        Ok(())
    }

    fn count(&mut self, table: &str) -> Result<i64, InboxError> {
        self.hold_for_copy()?;
        let present: bool = self.conn.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )?;
        if !present {
            return Ok(0);
        }
        Ok(self
            .conn
            .query_row(&format!("SELECT count(*) FROM {}", ident(table)), [], |r| {
                r.get(0)
            })?)
    }

    fn next_ids(&mut self) -> Result<Vec<(String, i64)>, InboxError> {
        self.hold_for_copy()?;
        let mut stmt = self.conn.prepare("SELECT name, next FROM id_sequences")?;
        let ids = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ids)
    }

    fn figures(&mut self) -> Result<Figures, InboxError> {
        use sha2::Digest as _;
        let (tables, _) = self.tables()?;
        let mut rows = Vec::new();
        for t in &tables {
            let n: i64 = self.conn.query_row(
                &format!("SELECT count(*) FROM {}", ident(&t.name)),
                [],
                |r| r.get(0),
            )?;
            rows.push((t.name.clone(), n));
        }
        let mut h = sha2::Sha256::new();
        let mut keys = 0;
        // BINARY collation: the byte order PostgreSQL's COLLATE "C" gives too.
        let mut stmt = self.conn.prepare(
            "SELECT sender, recipient, control_ref, sha256, standard FROM inbox
             ORDER BY sender, recipient, control_ref, standard",
        )?;
        let mut found = stmt.query([])?;
        while let Some(r) = found.next()? {
            let part = |i: usize| r.get::<_, String>(i);
            let key = crate::inbox::InterchangeKey {
                standard: r.get(4)?,
                sender: &part(0)?,
                recipient: &part(1)?,
                control_ref: &part(2)?,
            };
            copying::hash_key(&mut h, key, &part(3)?);
            keys += 1;
        }
        Ok(Figures {
            rows,
            keys,
            keys_sha256: hex::encode(h.finalize()),
        })
    }
}
