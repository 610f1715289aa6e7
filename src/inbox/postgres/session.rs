//! A session with the server, and the statements it has prepared for the batches it decides.
//!
//! A statement given as text costs two round trips to the server (parse it, then bind and run
//! it) and a third message to close it; a batch runs the same few statements again and again,
//! so they are prepared once per session and each run costs one round trip. Everything else
//! (reports, migrations, `purge`) still passes its text: run once, it gains nothing.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use crate::inbox::InboxError;

/// A connection and the statements prepared on it: a statement belongs to its connection, and
/// goes with it (a new connection starts with none).
pub(super) struct Session {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Session {
    pub(super) fn new(client: Client) -> Session {
        Session {
            client,
            prepared: HashMap::new(),
        }
    }

    /// `sql`, prepared on this session the first time it is run. Only text written in the
    /// program (`'static`): the operator's and the partners' text is never kept here.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, InboxError> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs `sql`, prepared, with `run`. A statement the server no longer holds, or whose plan
    /// a change of the schema made stale (another host's migration: "cached plan must not
    /// change result type"), is forgotten and its failure a conflict: the batch, rolled back,
    /// is made again, preparing it anew.
    fn prepared<T>(
        &mut self,
        sql: &'static str,
        run: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, InboxError> {
        let s = self.statement(sql)?;
        run(&mut self.client, &s).map_err(|e| {
            if stale(&e) {
                self.prepared.remove(sql);
                return InboxError::Conflict(Box::new(super::error::PgError(e)));
            }
            e.into()
        })
    }

    /// Runs the prepared `sql` and returns its rows.
    pub(super) fn query_prepared(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, InboxError> {
        self.prepared(sql, |c, s| c.query(s, params))
    }

    /// Runs the prepared `sql`, which returns one row.
    pub(super) fn query_one_prepared(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, InboxError> {
        self.prepared(sql, |c, s| c.query_one(s, params))
    }

    /// Runs the prepared `sql`, which returns one row or none.
    pub(super) fn query_opt_prepared(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, InboxError> {
        self.prepared(sql, |c, s| c.query_opt(s, params))
    }

    /// Runs the prepared `sql` and returns how many rows it changed.
    pub(super) fn execute_prepared(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, InboxError> {
        self.prepared(sql, |c, s| c.execute(s, params))
    }

    /// How many statements this session holds prepared (for the tests).
    #[cfg(test)]
    pub(super) fn prepared_count(&self) -> usize {
        self.prepared.len()
    }
}

/// True where the server no longer holds a prepared statement, or no longer runs its plan.
fn stale(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::INVALID_SQL_STATEMENT_NAME
            || (*db.code() == SqlState::FEATURE_NOT_SUPPORTED
                && db.message().contains("cached plan"))
    })
}

impl Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}
