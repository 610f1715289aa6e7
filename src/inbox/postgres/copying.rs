//! A PostgreSQL inbox written by `migrate` ([`CopyTarget`]): every table the copy writes locked
//! against other runs, the rows converted to each column's type, the id sequences set past
//! what was copied, all in one transaction.

use postgres::types::ToSql;

use super::PgInbox;
use crate::inbox::InboxError;
use crate::inbox::copying::{self, CopyTarget, Figures, TABLES, Table, Value, ident, idents};

/// The most parameters one statement binds (the protocol counts them in 16 bits).
const MAX_PARAMETERS: usize = 60_000;

/// A column of the target, as the copy writes it.
struct Column {
    name: String,
    /// `format_type()` of its type: `text`, `bigint`, `timestamp with time zone`, ...
    sql_type: String,
    /// NOT NULL without a default: a source without it cannot be copied (but for `host`).
    required: bool,
}

impl PgInbox {
    /// The tables of [`TABLES`] the schema holds.
    fn present_tables(&mut self) -> Result<Vec<&'static str>, InboxError> {
        let mut present = Vec::new();
        for name in TABLES {
            let row = self
                .client
                .get_mut()
                .query_one("SELECT to_regclass($1::text) IS NOT NULL", &[name])?;
            if row.get::<_, bool>(0) {
                present.push(*name);
            }
        }
        Ok(present)
    }

    fn columns(&mut self, table: &str) -> Result<Vec<Column>, InboxError> {
        let rows = self.client.get_mut().query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
                    a.attnotnull AND NOT a.atthasdef
             FROM pg_attribute a
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            &[&table],
        )?;
        Ok(rows
            .iter()
            .map(|r| Column {
                name: r.get(0),
                sql_type: r.get(1),
                required: r.get(2),
            })
            .collect())
    }
}

impl CopyTarget for PgInbox {
    fn begin_copy(&mut self) -> Result<Figures, InboxError> {
        self.begin()?;
        let present = self.present_tables()?;
        // EXCLUSIVE: others may still read, but no run writes until the copy commits (a host
        // started too early waits, up to its lock timeout, and then fails rather than deciding
        // what the copy is about to bring).
        self.client.get_mut().batch_execute(&format!(
            "LOCK TABLE {} IN EXCLUSIVE MODE",
            idents(&present)
        ))?;
        self.figures()
    }

    fn clear(&mut self) -> Result<(), InboxError> {
        let present = self.present_tables()?;
        for name in present.iter().rev() {
            self.client
                .get_mut()
                .batch_execute(&format!("DELETE FROM {}", ident(name)))?;
        }
        Ok(())
    }

    fn check_table(&mut self, table: &Table) -> Result<(), InboxError> {
        let target = self.columns(&table.name)?;
        if target.is_empty() {
            return Err(cannot(&table.name, "the target has no such table"));
        }
        for c in &table.columns {
            if !target.iter().any(|t| &t.name == c) {
                return Err(cannot(
                    &table.name,
                    &format!("the target has no column {c} for it"),
                ));
            }
        }
        for t in &target {
            if t.required && t.name != "host" && !table.columns.contains(&t.name) {
                return Err(cannot(
                    &table.name,
                    &format!("the source has no column {} for it", t.name),
                ));
            }
        }
        Ok(())
    }

    fn write_rows(&mut self, table: &Table, rows: &[Vec<Value>]) -> Result<(), InboxError> {
        if rows.is_empty() {
            return Ok(());
        }
        let target = self.columns(&table.name)?;
        let mut columns: Vec<&Column> = Vec::new();
        for c in &table.columns {
            match target.iter().find(|t| &t.name == c) {
                Some(t) => columns.push(t),
                None => {
                    return Err(cannot(
                        &table.name,
                        &format!("the target has no column {c} for it"),
                    ));
                }
            }
        }
        // A host's own rows (the counters) where the source keeps one set: this host's, the
        // one that goes on counting from them.
        let host = target
            .iter()
            .find(|t| t.name == "host" && !table.columns.contains(&t.name));
        let width = columns.len() + usize::from(host.is_some());
        let per_statement = (MAX_PARAMETERS / width.max(1)).clamp(1, 1000);
        for chunk in rows.chunks(per_statement) {
            let mut sql = format!(
                "INSERT INTO {} ({}) VALUES ",
                ident(&table.name),
                idents(&table.columns)
            );
            if host.is_some() {
                sql.insert_str(sql.len() - ") VALUES ".len(), ", host");
            }
            let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::with_capacity(chunk.len() * width);
            for (i, row) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push('(');
                for (j, (value, column)) in row.iter().zip(&columns).enumerate() {
                    if j > 0 {
                        sql.push_str(", ");
                    }
                    params.push(bound(value, column).map_err(|why| {
                        cannot(&table.name, &format!("column {}: {why}", column.name))
                    })?);
                    sql.push_str(&cast(params.len(), column));
                }
                if host.is_some() {
                    params.push(Box::new(self.host.clone()));
                    sql.push_str(&format!(", ${}::text", params.len()));
                }
                sql.push(')');
            }
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            self.client.get_mut().execute(&sql, &refs)?;
        }
        Ok(())
    }

    fn set_sequences(&mut self, next_ids: &[(String, i64)]) -> Result<(), InboxError> {
        for name in self.present_tables()? {
            if !self.columns(name)?.iter().any(|c| c.name == "id") {
                continue;
            }
            let row = self
                .client
                .get_mut()
                .query_one("SELECT pg_get_serial_sequence($1::text, 'id')", &[&name])?;
            let Some(sequence) = row.get::<_, Option<String>>(0) else {
                continue;
            };
            let copied: Option<i64> = self
                .client
                .get_mut()
                .query_one(&format!("SELECT max(id)::int8 FROM {}", ident(name)), &[])?
                .get(0);
            let source_next = next_ids.iter().find(|(t, _)| t == name).map(|(_, n)| n - 1);
            let last = copied.into_iter().chain(source_next).max();
            if let Some(last) = last.filter(|n| *n >= 1) {
                // Never back: a sequence already past `last` stays where it is.
                self.client.get_mut().execute(
                    "SELECT setval($1::text::regclass, greatest($2::int8,
                         coalesce(pg_sequence_last_value($1::text::regclass), 0)))",
                    &[&sequence, &last],
                )?;
            }
        }
        Ok(())
    }

    fn figures(&mut self) -> Result<Figures, InboxError> {
        use sha2::Digest as _;
        let mut rows = Vec::new();
        for name in self.present_tables()? {
            let n: i64 = self
                .client
                .get_mut()
                .query_one(&format!("SELECT count(*) FROM {}", ident(name)), &[])?
                .get(0);
            rows.push((name.to_string(), n));
        }
        let mut h = sha2::Sha256::new();
        let mut keys = 0;
        // COLLATE "C": byte order, as SQLite's BINARY collation sorts the source's keys.
        for r in self.client.get_mut().query(
            "SELECT sender, recipient, control_ref, sha256, standard FROM inbox
             ORDER BY sender COLLATE \"C\", recipient COLLATE \"C\", control_ref COLLATE \"C\",
                      standard COLLATE \"C\"",
            &[],
        )? {
            let key = crate::inbox::InterchangeKey {
                standard: r.get(4),
                sender: r.get(0),
                recipient: r.get(1),
                control_ref: r.get(2),
            };
            copying::hash_key(&mut h, key, r.get(3));
            keys += 1;
        }
        Ok(Figures {
            rows,
            keys,
            keys_sha256: hex::encode(h.finalize()),
        })
    }

    fn finish(&mut self) -> Result<(), InboxError> {
        self.client.get_mut().batch_execute("COMMIT")?;
        self.in_tx = false;
        Ok(())
    }
}

/// The parameter placeholder `$n` for `column`, cast from the type it is bound as to the
/// column's.
fn cast(n: usize, column: &Column) -> String {
    let bound_as = binding(&column.sql_type);
    match (bound_as, column.sql_type.as_str()) {
        (Binding::Boolean, _) => format!("${n}::boolean"),
        (Binding::Bytes, _) => format!("${n}::bytea"),
        (Binding::Integer, t) => format!("${n}::int8::{t}"),
        (Binding::Real, t) => format!("${n}::float8::{t}"),
        (Binding::Text, t) => format!("${n}::text::{t}"),
    }
}

#[derive(Clone, Copy)]
enum Binding {
    Boolean,
    Bytes,
    Integer,
    Real,
    Text,
}

/// How a value goes to a column of this type.
fn binding(sql_type: &str) -> Binding {
    match sql_type {
        "boolean" => Binding::Boolean,
        "bytea" => Binding::Bytes,
        "bigint" | "integer" | "smallint" => Binding::Integer,
        "double precision" | "real" => Binding::Real,
        // text, timestamp with time zone, jsonb, ...: PostgreSQL reads them from their text.
        _ => Binding::Text,
    }
}

/// `value` bound for `column`; why not where the source's value cannot go there.
fn bound(value: &Value, column: &Column) -> Result<Box<dyn ToSql + Sync>, String> {
    Ok(match (binding(&column.sql_type), value) {
        (Binding::Boolean, Value::Null) => Box::new(None::<bool>),
        (Binding::Bytes, Value::Null) => Box::new(None::<Vec<u8>>),
        (Binding::Integer, Value::Null) => Box::new(None::<i64>),
        (Binding::Real, Value::Null) => Box::new(None::<f64>),
        (Binding::Text, Value::Null) => Box::new(None::<String>),
        (Binding::Boolean, Value::Integer(n)) => Box::new(*n != 0),
        (Binding::Bytes, Value::Blob(b)) => Box::new(b.clone()),
        (Binding::Bytes, Value::Text(t)) => Box::new(t.as_bytes().to_vec()),
        (Binding::Integer, Value::Integer(n)) => Box::new(*n),
        (Binding::Real, Value::Real(x)) => Box::new(*x),
        (Binding::Real, Value::Integer(n)) => Box::new(*n as f64),
        (Binding::Text, Value::Text(t)) => Box::new(super::storable(t).into_owned()),
        (Binding::Text, Value::Integer(n)) => Box::new(n.to_string()),
        (Binding::Text, Value::Real(x)) => Box::new(x.to_string()),
        (_, other) => {
            return Err(format!(
                "a {} value cannot go to a column of type {}",
                match other {
                    Value::Null => "NULL",
                    Value::Integer(_) => "integer",
                    Value::Real(_) => "real",
                    Value::Text(_) => "text",
                    Value::Blob(_) => "blob",
                },
                column.sql_type
            ));
        }
    })
}

fn cannot(table: &str, why: &str) -> InboxError {
    InboxError::Copy {
        table: table.to_string(),
        reason: why.to_string(),
    }
}
