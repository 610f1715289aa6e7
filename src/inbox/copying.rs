//! Copying a whole inbox from one backend to another (`edi-inbox migrate`): an SQLite inbox
//! into a PostgreSQL one, so that the keys it holds stay keys (a redelivery after the move is a
//! duplicate, not a second application) and nothing it published is published again.
//!
//! The two backends keep the same tables under the same names, each in its own types (SQLite's
//! text times, PostgreSQL's `timestamptz`): the copy goes table by table, column by column by
//! name, in neutral [`Value`]s, and the target converts each to its column's type. What one
//! backend keeps and the other does not is said here, table by table ([`TABLES`],
//! [`NOT_COPIED`]), so that a table added by a later migration and forgotten here fails a test
//! rather than staying behind unnoticed.

use super::InboxError;

/// The tables `migrate` copies, in the order it writes them: a table before every table that
/// refers to it.
pub const TABLES: &[&str] = &[
    "interchanges",
    "inbox",
    "messages",
    "outbox",
    "sightings",
    "rejected_files",
    "rejections",
    "counters",
    "deliveries",
    "acknowledgements",
    "contrl_counters",
    "contrl_outbox",
    "consumer_positions",
    "transport_messages",
    "answer_outbox",
    "refusal_outbox",
    "refusals",
    "message_effects",
];

/// The source's own tables that are not copied as they stand, and why.
pub const NOT_COPIED: &[(&str, &str)] = &[
    (
        "id_sequences",
        "the next interchange id: the target's sequence is set past it",
    ),
    (
        "effect_migrations",
        "the side effects' migrations are the target's own: --effects applies its folder there",
    ),
];

/// A value on its way from one backend to the other, as the source stores it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A table of the source as it is copied: its name and its columns, in the source's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<String>,
}

/// How a copy is checked on both sides: the rows of each table, and a SHA-256 over the inbox's
/// keys with the hash of each one's accepted copy, in byte order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Figures {
    /// (table, rows), in the order of [`TABLES`].
    pub rows: Vec<(String, i64)>,
    /// The number of keys in the inbox.
    pub keys: i64,
    /// SHA-256 over `sender 0x1f recipient 0x1f control_ref 0x1f sha256 0x0a` of every key,
    /// `standard 0x1f` before it where the standard is not EDIFACT (so that an inbox of EDIFACT
    /// alone hashes as it did before the standard was kept).
    pub keys_sha256: String,
}

impl Figures {
    /// True where nothing of an inbox is there (a target never used, or only created).
    pub fn is_empty(&self) -> bool {
        self.keys == 0 && self.rows.iter().all(|(_, n)| *n == 0)
    }

    /// The rows of `table` (0 where the table is not counted).
    pub fn rows_of(&self, table: &str) -> i64 {
        self.rows
            .iter()
            .find(|(t, _)| t == table)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    }
}

/// An identifier (a table's or a column's name, from the schema's own catalogue) as SQL quotes
/// it: the one thing a statement of the copy puts in its text, as no parameter can stand for a
/// name.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Identifiers, quoted, with commas between.
pub fn idents<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .map(|n| ident(n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Adds one key to a running [`Figures::keys_sha256`].
pub fn hash_key(h: &mut sha2::Sha256, key: super::InterchangeKey<'_>, sha: &str) {
    use sha2::Digest as _;
    if key.standard != crate::standard::Standard::Edifact {
        h.update(key.standard.as_str().as_bytes());
        h.update([0x1f]);
    }
    let parts = [key.sender, key.recipient, key.control_ref, sha];
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            h.update([0x1f]);
        }
        h.update(part.as_bytes());
    }
    h.update([b'\n']);
}

/// An inbox read whole for a copy: everything is read in one snapshot that no other run
/// changes until the source is dropped.
pub trait CopySource {
    /// The tables it holds that [`TABLES`] names, in that order, with their columns; and the
    /// names of the tables it holds that edi-inbox does not know (the side effects' own),
    /// which are not copied.
    fn tables(&mut self) -> Result<(Vec<Table>, Vec<String>), InboxError>;

    /// Every row of `table`, in the order of its key, each handed to `row` with its values in
    /// the order of `table.columns`.
    fn rows(
        &mut self,
        table: &Table,
        row: &mut dyn FnMut(Vec<Value>) -> Result<(), InboxError>,
    ) -> Result<(), InboxError>;

    /// The rows of `table` (0 where it holds no such table).
    fn count(&mut self, table: &str) -> Result<i64, InboxError>;

    /// The next id each of these tables would give (`id_sequences`), where the source keeps one.
    fn next_ids(&mut self) -> Result<Vec<(String, i64)>, InboxError>;

    /// Its figures, in the same snapshot.
    fn figures(&mut self) -> Result<Figures, InboxError>;
}

/// An inbox a copy is written into, in one transaction that [`CopyTarget::finish`] commits; a
/// target dropped before then is left as it was.
pub trait CopyTarget {
    /// Opens the copy's transaction, with every table the copy writes locked against other
    /// runs, and says what the target holds now.
    fn begin_copy(&mut self) -> Result<Figures, InboxError>;

    /// Deletes everything the target holds of an inbox (`--replace`), in the copy's
    /// transaction.
    fn clear(&mut self) -> Result<(), InboxError>;

    /// Checks that every column of `table` has a column of the same name here to go to; says
    /// which does not.
    fn check_table(&mut self, table: &Table) -> Result<(), InboxError>;

    /// Writes rows of `table` (values in the order of its columns).
    fn write_rows(&mut self, table: &Table, rows: &[Vec<Value>]) -> Result<(), InboxError>;

    /// Sets every id sequence past the highest id copied, and past `next_ids` (the source's
    /// own sequences), so that the next new row takes an id no copied row has.
    fn set_sequences(&mut self, next_ids: &[(String, i64)]) -> Result<(), InboxError>;

    /// Its figures, in the copy's transaction.
    fn figures(&mut self) -> Result<Figures, InboxError>;

    /// Commits the copy.
    fn finish(&mut self) -> Result<(), InboxError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standard::Standard;

    fn hashed(standard: Standard, sender: &str, recipient: &str) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        let key = crate::inbox::InterchangeKey {
            standard,
            sender,
            recipient,
            control_ref: "1",
        };
        hash_key(&mut h, key, "x");
        hex::encode(h.finalize())
    }

    #[test]
    fn keys_hash_apart_where_their_parts_move() {
        assert_ne!(
            hashed(Standard::Edifact, "AB", "C"),
            hashed(Standard::Edifact, "A", "BC"),
            "the separator keeps AB|C apart from A|BC"
        );
    }

    #[test]
    fn keys_of_two_standards_hash_apart_and_edifact_as_before() {
        use sha2::Digest as _;
        assert_ne!(
            hashed(Standard::Edifact, "A", "B"),
            hashed(Standard::X12, "A", "B")
        );
        let mut h = sha2::Sha256::new();
        h.update(b"A\x1fB\x1f1\x1fx\n");
        assert_eq!(
            hashed(Standard::Edifact, "A", "B"),
            hex::encode(h.finalize())
        );
    }
}
