//! The refused interchanges kept whole: read back for `reapply --refused`, and resolved in the
//! batch that decides them again.

use super::PgInbox;
use crate::inbox::{InboxError, KeptRefusal, Refusals};
use crate::status::Status;

impl Refusals for PgInbox {
    fn open_refusals(
        &self,
        ids: &[i64],
        after: i64,
        limit: u32,
    ) -> Result<Vec<KeptRefusal>, InboxError> {
        let wanted: Option<&[i64]> = (!ids.is_empty()).then_some(ids);
        let rows = self.client.borrow_mut().query(
            "SELECT id, sender, recipient, control_ref, source_file, raw, raw_codec, standard
             FROM refusals
             WHERE resolved_at IS NULL AND id > $1
               AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
             ORDER BY id LIMIT $3",
            &[&after, &wanted, &i64::from(limit)],
        )?;
        rows.into_iter()
            .map(|r| {
                let codec: String = r.get(6);
                let mut raw: Vec<u8> = r.get(5);
                if codec == "zstd" {
                    raw = crate::inbox::decompress(&raw)?;
                }
                Ok(KeptRefusal {
                    id: r.get(0),
                    sender: r.get(1),
                    recipient: r.get(2),
                    control_ref: r.get(3),
                    source_file: r.get(4),
                    raw,
                    standard: r.get(7),
                })
            })
            .collect()
    }

    fn resolve_refusal(
        &mut self,
        id: i64,
        resolved_as: Status,
        _when: &str,
    ) -> Result<bool, InboxError> {
        self.begin()?;
        let n = self.client.get_mut().execute(
            "UPDATE refusals SET resolved_at = now(), resolved_as = $2
             WHERE id = $1 AND resolved_at IS NULL",
            &[&id, &resolved_as.as_str()],
        )?;
        Ok(n == 1)
    }
}
