//! The refused interchanges kept whole: read back for `reapply --refused`, and resolved in the
//! batch that decides them again.

use rusqlite::params;

use super::SqliteInbox;
use crate::inbox::{InboxError, KeptRefusal, Refusals};
use crate::status::Status;

impl Refusals for SqliteInbox {
    fn open_refusals(
        &self,
        ids: &[i64],
        after: i64,
        limit: u32,
    ) -> Result<Vec<KeptRefusal>, InboxError> {
        // The ids as a JSON array: one statement for any number of them.
        let wanted = (!ids.is_empty())
            .then(|| serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_string()));
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, sender, recipient, control_ref, source_file, raw, raw_codec, standard
             FROM refusals
             WHERE resolved_at IS NULL AND id > ?1
               AND (?2 IS NULL OR id IN (SELECT value FROM json_each(?2)))
             ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![after, wanted, limit], |r| {
                Ok((
                    KeptRefusal {
                        id: r.get(0)?,
                        sender: r.get(1)?,
                        recipient: r.get(2)?,
                        control_ref: r.get(3)?,
                        source_file: r.get(4)?,
                        raw: r.get(5)?,
                        standard: r.get(7)?,
                    },
                    r.get::<_, String>(6)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(mut k, codec)| {
                if codec == "zstd" {
                    k.raw = crate::inbox::decompress(&k.raw)?;
                }
                Ok(k)
            })
            .collect()
    }

    fn resolve_refusal(
        &mut self,
        id: i64,
        resolved_as: Status,
        when: &str,
    ) -> Result<bool, InboxError> {
        self.begin()?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE refusals SET resolved_at = ?2, resolved_as = ?3
                 WHERE id = ?1 AND resolved_at IS NULL",
            )?
            .execute(params![id, when, resolved_as.as_str()])?;
        Ok(n == 1)
    }
}
