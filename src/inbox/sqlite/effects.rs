//! The operator's side effects on SQLite (docs/effects.md): their migrations applied with a
//! checksum each, every statement prepared before the first input under an authorizer that
//! keeps them from transaction control, ATTACH, PRAGMA, schema changes and edi-inbox's own
//! tables, and run for each new interchange inside its decision's savepoint, each statement
//! stopped by a progress handler after `--effects-timeout`.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::SqliteInbox;
use super::message_segments::{Current, holding};
use super::migrations::{MIGRATIONS, Migration};
use crate::effects::{Effects, Param, Statement};
use crate::inbox::effects::{
    EffectSettings, HoldAhead, InstallMode, Installation, MessageScope, Scope, Trace, Traced,
    Value, to_reapply,
};
use crate::inbox::{InboxError, Reapplied, ReapplyBatch, ReapplyFilter, Refusal, SideEffects};

/// What the authorizer lets through, as a number an atomic holds.
const OFF: u8 = 0;
const MIGRATION: u8 = 1;
const EFFECT: u8 = 2;

/// How many virtual machine steps SQLite runs between two looks at the clock.
const STEPS_PER_LOOK: i32 = 1000;

/// Shared by the connection's hooks and the inbox: whose statements are being prepared or run,
/// until when they may run, and why the authorizer last said no.
struct Guard {
    mode: AtomicU8,
    /// Milliseconds after `start` when the running statement is stopped; 0 for never.
    deadline: AtomicU64,
    start: Instant,
    own: HashSet<String>,
    denied: Mutex<Option<String>>,
}

impl Guard {
    fn judge(&self, ctx: AuthContext<'_>) -> Authorization {
        let mode = self.mode.load(Ordering::Relaxed);
        if mode == OFF {
            return Authorization::Allow;
        }
        let own = |t: &str| self.own.contains(&t.to_ascii_lowercase());
        let why = match ctx.action {
            AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => Some(
                "transaction control: the statements run inside the decision's transaction, which edi-inbox commits or rolls back"
                    .to_string(),
            ),
            AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
                Some("ATTACH and DETACH: the side effects stay in the inbox's database".into())
            }
            AuthAction::Pragma { pragma_name, .. } => Some(format!(
                "a pragma ({pragma_name}): the connection's settings are edi-inbox's"
            )),
            AuthAction::Insert { table_name }
            | AuthAction::Delete { table_name }
            | AuthAction::Update { table_name, .. }
            | AuthAction::CreateIndex { table_name, .. }
            | AuthAction::CreateTrigger { table_name, .. }
            | AuthAction::DropIndex { table_name, .. }
            | AuthAction::DropTrigger { table_name, .. }
            | AuthAction::DropTable { table_name }
            | AuthAction::CreateTable { table_name }
            | AuthAction::AlterTable { table_name, .. }
                if own(table_name) =>
            {
                Some(format!(
                    "{table_name} is one of edi-inbox's own tables: read it, never change it"
                ))
            }
            a if mode == EFFECT && changes_schema(&a) => Some(
                "a change of schema: it belongs in migrations/, applied once at start-up".into(),
            ),
            _ => None,
        };
        match why {
            None => Authorization::Allow,
            Some(why) => {
                if let Ok(mut d) = self.denied.lock() {
                    d.get_or_insert(why);
                }
                Authorization::Deny
            }
        }
    }

    fn expired(&self) -> bool {
        let d = self.deadline.load(Ordering::Relaxed);
        d != 0 && self.start.elapsed().as_millis() as u64 >= d
    }

    /// The operator's statements from now until the returned value is dropped: judged, and
    /// stopped after `timeout` (`None` while preparing).
    fn operator(&self, mode: u8, timeout: Option<Duration>) -> Armed<'_> {
        if let Ok(mut d) = self.denied.lock() {
            *d = None;
        }
        self.mode.store(mode, Ordering::Relaxed);
        if let Some(t) = timeout {
            let at = self.start.elapsed() + t;
            self.deadline
                .store((at.as_millis() as u64).max(1), Ordering::Relaxed);
        }
        Armed(self)
    }

    fn denial(&self) -> Option<String> {
        self.denied.lock().ok().and_then(|d| d.clone())
    }
}

/// Back to edi-inbox's own statements when dropped.
struct Armed<'g>(&'g Guard);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.mode.store(OFF, Ordering::Relaxed);
        self.0.deadline.store(0, Ordering::Relaxed);
    }
}

fn changes_schema(a: &AuthAction<'_>) -> bool {
    matches!(
        a,
        AuthAction::CreateIndex { .. }
            | AuthAction::CreateTable { .. }
            | AuthAction::CreateTempIndex { .. }
            | AuthAction::CreateTempTable { .. }
            | AuthAction::CreateTempTrigger { .. }
            | AuthAction::CreateTempView { .. }
            | AuthAction::CreateTrigger { .. }
            | AuthAction::CreateView { .. }
            | AuthAction::DropIndex { .. }
            | AuthAction::DropTable { .. }
            | AuthAction::DropTempIndex { .. }
            | AuthAction::DropTempTable { .. }
            | AuthAction::DropTempTrigger { .. }
            | AuthAction::DropTempView { .. }
            | AuthAction::DropTrigger { .. }
            | AuthAction::DropView { .. }
            | AuthAction::AlterTable { .. }
            | AuthAction::Reindex { .. }
            | AuthAction::Analyze { .. }
            | AuthAction::CreateVtable { .. }
            | AuthAction::DropVtable { .. }
    )
}

/// One statement as SQLite runs it: `:name` written `?N`, N the parameter's place in
/// [`Param::ALL`], so that each value is bound by number.
struct Prepared {
    place: String,
    sql: String,
    params: Vec<Param>,
}

/// The side effects installed on this inbox.
pub(super) struct Installed {
    effects: Arc<Effects>,
    /// By file name, each file's statements in order.
    files: BTreeMap<String, Vec<Prepared>>,
    /// By a message type's file name, what is recorded of a message it applied.
    checksums: BTreeMap<String, String>,
    timeout: Duration,
    guard: Arc<Guard>,
    /// What each statement did, where the settings asked (`effects try`).
    trace: Option<Trace>,
    /// The message whose statements run, for `message_segments(:message)`.
    current: Current,
}

fn number(p: Param) -> usize {
    Param::ALL.iter().position(|q| *q == p).unwrap_or(0) + 1
}

fn prepared(s: &Statement) -> Prepared {
    let mut params: Vec<Param> = s.params().collect();
    params.sort();
    params.dedup();
    Prepared {
        place: s.place(),
        sql: s.render(|p| format!("?{}", number(p))),
        params,
    }
}

/// The names of edi-inbox's own tables: the schema its migrations make, made in memory.
fn own_tables() -> Result<HashSet<String>, InboxError> {
    let conn = Connection::open_in_memory()?;
    for m in MIGRATIONS {
        match m {
            Migration::Sql(sql) => conn.execute_batch(sql)?,
            Migration::Code(f) => f(&conn)?,
        }
    }
    let mut stmt = conn.prepare("SELECT lower(name) FROM sqlite_master WHERE type = 'table'")?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<HashSet<_>, _>>()?;
    Ok(names)
}

impl SideEffects for SqliteInbox {
    fn install_effects(
        &mut self,
        effects: Arc<Effects>,
        settings: &EffectSettings,
        when: &str,
    ) -> Result<Installation, InboxError> {
        if settings.role.is_some() {
            return Err(InboxError::Effects {
                place: "--effects-role".into(),
                reason: "is PostgreSQL's: an SQLite inbox has no roles (its authorizer keeps the side effects to the business tables)".into(),
            });
        }
        let timeout = settings.timeout;
        let guard = Arc::new(Guard {
            mode: AtomicU8::new(OFF),
            deadline: AtomicU64::new(0),
            start: Instant::now(),
            own: own_tables()?,
            denied: Mutex::new(None),
        });
        let judge = guard.clone();
        self.conn
            .authorizer(Some(move |ctx: AuthContext<'_>| judge.judge(ctx)));
        let clock = guard.clone();
        self.conn
            .progress_handler(STEPS_PER_LOOK, Some(move || clock.expired()));
        let count = effects.statements().count();
        self.conn.set_prepared_statement_cache_capacity(64 + count);
        let current = Current::default();
        super::message_segments::register(&self.conn, current.clone())?;
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let result = install(&self.conn, &effects, &guard, when);
        match result {
            Ok((files, installation)) => {
                match settings.mode {
                    InstallMode::Keep => self.conn.execute_batch("COMMIT")?,
                    InstallMode::Check => self.conn.execute_batch("ROLLBACK")?,
                    // The transaction stays open: the decisions of `effects try` go in it
                    // (the batch's own BEGIN finds it open), then it is rolled back whole.
                    InstallMode::Try => {}
                }
                let checksums = effects
                    .by_type
                    .values()
                    .map(|m| (m.file.clone(), effects.checksum_for(Some(m))))
                    .collect();
                self.effects = Some(Arc::new(Installed {
                    effects,
                    files,
                    checksums,
                    timeout,
                    guard,
                    trace: settings.trace.then(Default::default),
                    current,
                }));
                Ok(installation)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    // This backend's `message_segments` serves a message held as its segments.
    fn hold_ahead(&self) -> Option<HoldAhead> {
        HoldAhead::of(self.effects.as_ref()?.effects.clone())
    }

    fn take_trace(&mut self) -> Vec<Traced> {
        Trace::take(self.effects.as_ref().and_then(|fx| fx.trace.as_ref()))
    }

    fn reapply_effects(
        &mut self,
        filter: &ReapplyFilter,
        after: i64,
        limit: u32,
        when: &str,
    ) -> Result<ReapplyBatch, InboxError> {
        let Some(fx) = self.effects.clone() else {
            return Err(InboxError::no_effects());
        };
        self.reapply_batch(&fx, filter, after, limit, when)
    }
}

/// The migrations not applied yet, then every statement prepared (and kept in the cache).
fn install(
    conn: &Connection,
    effects: &Effects,
    guard: &Guard,
    when: &str,
) -> Result<(BTreeMap<String, Vec<Prepared>>, Installation), InboxError> {
    let applied: BTreeMap<i64, (String, String, String)> = conn
        .prepare("SELECT number, file, sha256, applied_at FROM effect_migrations")?
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?))))?
        .collect::<Result<_, _>>()?;
    let last = applied.keys().max().copied();
    let mut installation = Installation::default();
    for m in &effects.migrations {
        let place = format!("migrations/{}", m.file);
        match applied.get(&i64::from(m.number)) {
            Some((_, sha, at)) if *sha != m.sha256 => {
                return Err(InboxError::Effects {
                    place,
                    reason: format!(
                        "was applied at {at} and has changed since: an applied migration is never edited; write a new one"
                    ),
                });
            }
            Some(_) => {
                installation.migrations.push((m.file.clone(), false));
                continue;
            }
            None => {}
        }
        if let Some(last) = last.filter(|l| *l > i64::from(m.number)) {
            return Err(InboxError::Effects {
                place,
                reason: format!(
                    "is numbered below migration {last}, already applied: migrations are applied in their order; number it after {last}"
                ),
            });
        }
        let run = {
            let _armed = guard.operator(MIGRATION, None);
            conn.execute_batch(&m.sql)
        };
        run.map_err(|e| setup_error(&place, e, guard))?;
        conn.execute(
            "INSERT INTO effect_migrations (number, file, sha256, applied_at) VALUES (?1, ?2, ?3, ?4)",
            params![m.number, m.file, m.sha256, when],
        )?;
        installation.migrations.push((m.file.clone(), true));
    }
    let mut files = BTreeMap::new();
    let mappings = effects.interchange.iter().chain(effects.by_type.values());
    for mapping in mappings {
        let mut own = Vec::with_capacity(mapping.statements.len());
        for s in &mapping.statements {
            let p = prepared(s);
            let made = {
                let _armed = guard.operator(EFFECT, None);
                conn.prepare_cached(&p.sql)
                    .map(|st| foreign_placeholder(&st))
            };
            if let Some(found) = made.map_err(|e| setup_error(&p.place, e, guard))? {
                // SQLite reads a PostgreSQL dollar quote ($$...$$) as a parameter of its own,
                // which would be bound by number with one of ours, or be NULL.
                return Err(InboxError::Effects {
                    place: p.place.clone(),
                    reason: format!(
                        "SQLite reads {found} as a parameter (a PostgreSQL dollar quote?): values come only as :name"
                    ),
                });
            }
            own.push(p);
        }
        files.insert(mapping.file.clone(), own);
    }
    Ok((files, installation))
}

/// The first parameter SQLite found in a prepared statement that is not one of the `?N` the
/// statement was rendered with.
fn foreign_placeholder(st: &rusqlite::Statement<'_>) -> Option<String> {
    // A number between that no ?N took has no name, and is left NULL.
    (1..=st.parameter_count()).find_map(|i| {
        st.parameter_name(i)
            .filter(|name| *name != format!("?{i}"))
            .map(str::to_string)
    })
}

/// A statement that does not prepare, or a migration that fails, in the operator's words: the
/// authorizer's reason where it said no.
fn setup_error(place: &str, e: rusqlite::Error, guard: &Guard) -> InboxError {
    let reason = match (e.sqlite_error_code(), guard.denial()) {
        (Some(ErrorCode::AuthorizationForStatementDenied), Some(why)) => {
            format!("may not run in the decision's transaction: {why}")
        }
        _ => e.to_string(),
    };
    InboxError::Effects {
        place: place.to_string(),
        reason,
    }
}

impl Installed {
    /// Runs the side effects of a new interchange, whose rows are written (`ids`: its messages'
    /// rows in order, as written where [`Installed::runs_for`] it): `_interchange.sql`,
    /// then each message's type's statements, each message's mapping recorded. A failure of
    /// the data is [`InboxError::EffectFailed`]; the caller rolls the interchange back.
    pub(super) fn run(
        &self,
        conn: &Connection,
        scope: &Scope<'_>,
        ids: &[i64],
    ) -> Result<(), InboxError> {
        let mut open = Open::new(conn);
        let mut applied = Vec::new();
        if let Some(m) = &self.effects.interchange {
            for p in self.files.get(&m.file).into_iter().flatten() {
                self.execute(&mut open, p, scope, None)?;
            }
        }
        for (n, message) in scope.interchange.messages.iter().enumerate() {
            let Some(mapping) =
                self.effects
                    .for_message(&message.message_type, &message.version, &message.release)
            else {
                continue;
            };
            let id = self.run_message(&mut open, scope, n, ids, mapping)?;
            applied.push((id, self.checksum(mapping)));
        }
        open.record(&applied, scope.received_at)
    }

    /// What is recorded of a message applied with `mapping`: the checksum of the files that
    /// ran (made once at start-up).
    fn checksum(&self, mapping: &crate::effects::Mapping) -> std::borrow::Cow<'_, str> {
        match self.checksums.get(&mapping.file) {
            Some(known) => std::borrow::Cow::Borrowed(known.as_str()),
            None => std::borrow::Cow::Owned(self.effects.checksum_for(Some(mapping))),
        }
    }

    /// True where any of the operator's statements runs for `interchange` (its
    /// `_interchange.sql`, or a message's mapping): only then may its decision fail on its data
    /// alone, which is what the decision's savepoint is for.
    pub(super) fn runs_any(&self, interchange: &crate::edifact::Interchange<'_>) -> bool {
        self.effects
            .interchange
            .as_ref()
            .is_some_and(|m| self.files.get(&m.file).is_some_and(|f| !f.is_empty()))
            || self.runs_for(interchange)
    }

    /// True where a message of `interchange` has a mapping: [`Installed::run`] then needs its
    /// messages' ids.
    pub(super) fn runs_for(&self, interchange: &crate::edifact::Interchange<'_>) -> bool {
        interchange.messages.iter().any(|m| {
            self.effects
                .for_message(&m.message_type, &m.version, &m.release)
                .is_some()
        })
    }

    /// The `n`th message's statements (of `mapping`); its row's id, for the caller to record
    /// the mapping it ran with ([`Open::record`]).
    fn run_message(
        &self,
        open: &mut Open<'_>,
        scope: &Scope<'_>,
        n: usize,
        ids: &[i64],
        mapping: &crate::effects::Mapping,
    ) -> Result<i64, InboxError> {
        let Some(message) = scope.interchange.messages.get(n) else {
            return Err(InboxError::Backend(
                format!("the interchange has no message {}", n + 1).into(),
            ));
        };
        // This connection's `message_segments` serves a message held as its segments alone.
        let ms = MessageScope::of(scope, n, message, ids, mapping, true)?;
        let _held = holding(&self.current, ms.held.clone());
        for p in self.files.get(&mapping.file).into_iter().flatten() {
            self.execute(open, p, scope, Some(&ms))?;
        }
        Ok(ms.id)
    }

    /// One statement, its parameters bound by number; how many rows it changed.
    fn execute(
        &self,
        open: &mut Open<'_>,
        p: &Prepared,
        scope: &Scope<'_>,
        message: Option<&MessageScope<'_>>,
    ) -> Result<u64, InboxError> {
        let armed = self.guard.operator(EFFECT, Some(self.timeout));
        let conn = open.conn;
        let result = (|| {
            let st = open.statement(p)?;
            for &param in &p.params {
                let at = number(param);
                match scope.value(param, message) {
                    Value::Null => st.raw_bind_parameter(at, rusqlite::types::Null)?,
                    Value::Text(t) | Value::Json(t) => st.raw_bind_parameter(at, t)?,
                    Value::Int(n) => st.raw_bind_parameter(at, n)?,
                }
            }
            let mut rows = st.raw_query();
            while rows.next()?.is_some() {}
            Ok(conn.changes())
        })();
        drop(armed);
        if let (Ok(n), Some(trace)) = (&result, &self.trace) {
            trace.push(scope, message, &p.place, *n);
        }
        result.map_err(|e| self.failure(p, message, e))
    }

    /// A failure told apart: the data's (a constraint, a trigger's RAISE, a value of the wrong
    /// type or size) refuses the interchange; a statement stopped by the clock, or anything
    /// else (the disk full, the file read-only), fails the run.
    fn failure(
        &self,
        p: &Prepared,
        message: Option<&MessageScope<'_>>,
        e: rusqlite::Error,
    ) -> InboxError {
        let rusqlite::Error::SqliteFailure(f, text) = &e else {
            return InboxError::from(e);
        };
        match f.code {
            ErrorCode::ConstraintViolation | ErrorCode::TypeMismatch | ErrorCode::TooBig => {
                InboxError::EffectFailed(Refusal {
                    statement: p.place.clone(),
                    message_ref: message.map(|m| m.message.reference.to_string()),
                    code: code_name(f.extended_code).to_string(),
                    error: text.clone().unwrap_or_else(|| f.to_string()),
                    times_seen: 1,
                })
            }
            ErrorCode::OperationInterrupted => InboxError::EffectTimeout {
                statement: p.place.clone(),
                seconds: self.timeout.as_secs(),
            },
            _ => InboxError::from(e),
        }
    }
}

/// The statements of one call of the side effects (an interchange's, or a message's again),
/// each taken from the connection's cache once: a lookup there hashes the statement's whole
/// text going out and coming back, which for a message's two statements and its record cost as
/// much as a sixth of the statements themselves (BENCHMARKS.md, issue 39).
struct Open<'c> {
    conn: &'c Connection,
    /// By the address of the statement in [`Installed::files`], which lives as long.
    statements: Vec<(*const Prepared, rusqlite::CachedStatement<'c>)>,
    record_one: Option<rusqlite::CachedStatement<'c>>,
    record_eight: Option<rusqlite::CachedStatement<'c>>,
}

impl<'c> Open<'c> {
    fn new(conn: &'c Connection) -> Open<'c> {
        Open {
            conn,
            statements: Vec::new(),
            record_one: None,
            record_eight: None,
        }
    }

    fn statement(&mut self, p: &Prepared) -> rusqlite::Result<&mut rusqlite::CachedStatement<'c>> {
        let at = match self
            .statements
            .iter()
            .position(|(q, _)| std::ptr::eq(*q, p))
        {
            Some(at) => at,
            None => {
                let st = self.conn.prepare_cached(&p.sql)?;
                self.statements.push((p, st));
                self.statements.len() - 1
            }
        };
        // Just found or pushed: never out of range.
        match self.statements.get_mut(at) {
            Some((_, st)) => Ok(st),
            None => Err(rusqlite::Error::InvalidQuery),
        }
    }

    /// Records the mapping each message (by its row's id) was applied with, eight rows a
    /// statement where there are eight: a statement a message was most of what a side effect
    /// costs edi-inbox itself, its page copied to the statement journal each time.
    fn record(
        &mut self,
        applied: &[(i64, std::borrow::Cow<'_, str>)],
        at: &str,
    ) -> Result<(), InboxError> {
        let mut eights = applied.chunks_exact(RECORD_ROWS);
        for eight in eights.by_ref() {
            let st = Self::held(self.conn, &mut self.record_eight, RECORD_EIGHT)?;
            for (k, (id, mapping)) in eight.iter().enumerate() {
                st.raw_bind_parameter(3 * k + 1, id)?;
                st.raw_bind_parameter(3 * k + 2, mapping.as_ref())?;
                st.raw_bind_parameter(3 * k + 3, at)?;
            }
            st.raw_execute()?;
        }
        for (id, mapping) in eights.remainder() {
            let st = Self::held(self.conn, &mut self.record_one, RECORD_ONE)?;
            st.execute(params![id, mapping.as_ref(), at])?;
        }
        Ok(())
    }

    fn held<'o>(
        conn: &'c Connection,
        slot: &'o mut Option<rusqlite::CachedStatement<'c>>,
        sql: &str,
    ) -> rusqlite::Result<&'o mut rusqlite::CachedStatement<'c>> {
        if slot.is_none() {
            *slot = Some(conn.prepare_cached(sql)?);
        }
        match slot.as_mut() {
            Some(st) => Ok(st),
            None => Err(rusqlite::Error::InvalidQuery),
        }
    }
}

/// Rows a statement of [`Open::record`] takes.
const RECORD_ROWS: usize = 8;

macro_rules! record_rows {
    ($($row:literal),+) => {
        concat!(
            "INSERT INTO message_effects (message_id, mapping, applied_at) VALUES ",
            $($row),+,
            " ON CONFLICT (message_id) DO UPDATE SET mapping = excluded.mapping, ",
            "applied_at = excluded.applied_at"
        )
    };
}

const RECORD_ONE: &str = record_rows!("(?, ?, ?)");

const RECORD_EIGHT: &str = record_rows!(
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?), ",
    "(?, ?, ?)"
);

/// SQLite's name of an extended result code a refusal carries.
fn code_name(extended: i32) -> &'static str {
    use rusqlite::ffi;
    match extended {
        ffi::SQLITE_CONSTRAINT_NOTNULL => "SQLITE_CONSTRAINT_NOTNULL",
        ffi::SQLITE_CONSTRAINT_CHECK => "SQLITE_CONSTRAINT_CHECK",
        ffi::SQLITE_CONSTRAINT_UNIQUE => "SQLITE_CONSTRAINT_UNIQUE",
        ffi::SQLITE_CONSTRAINT_PRIMARYKEY => "SQLITE_CONSTRAINT_PRIMARYKEY",
        ffi::SQLITE_CONSTRAINT_FOREIGNKEY => "SQLITE_CONSTRAINT_FOREIGNKEY",
        ffi::SQLITE_CONSTRAINT_TRIGGER => "SQLITE_CONSTRAINT_TRIGGER",
        ffi::SQLITE_CONSTRAINT_DATATYPE => "SQLITE_CONSTRAINT_DATATYPE",
        ffi::SQLITE_MISMATCH => "SQLITE_MISMATCH",
        ffi::SQLITE_TOOBIG => "SQLITE_TOOBIG",
        _ => "SQLITE_CONSTRAINT",
    }
}

/// An interchange stored in the inbox, read back for `reapply --applied`.
struct Stored {
    id: i64,
    raw: Vec<u8>,
    sha256: String,
    source_file: String,
    received_at: String,
}

impl SqliteInbox {
    /// `reapply --applied`: see [`SideEffects::reapply_effects`].
    fn reapply_batch(
        &mut self,
        fx: &Installed,
        filter: &ReapplyFilter,
        after: i64,
        limit: u32,
        when: &str,
    ) -> Result<ReapplyBatch, InboxError> {
        self.begin()?;
        let stored: Vec<(Stored, String)> = self
            .conn
            .prepare_cached(
                "SELECT i.id, i.raw, i.raw_codec, i.sha256, i.source_file, i.received_at
                 FROM interchanges i
                 WHERE i.id > ?1 AND (?2 IS NULL OR i.received_at >= ?2)
                   AND EXISTS (SELECT 1 FROM messages m
                               WHERE m.interchange_id = i.id AND m.message_type = ?3)
                 ORDER BY i.id LIMIT ?4",
            )?
            .query_map(
                params![after, filter.since, filter.message_type, limit],
                |r| {
                    Ok((
                        Stored {
                            id: r.get(0)?,
                            raw: r.get(1)?,
                            sha256: r.get(3)?,
                            source_file: r.get(4)?,
                            received_at: r.get(5)?,
                        },
                        r.get(2)?,
                    ))
                },
            )?
            .collect::<rusqlite::Result<_>>()?;
        let mut batch = ReapplyBatch {
            last: stored.last().map(|(s, _)| s.id),
            messages: Vec::new(),
        };
        for (mut s, codec) in stored {
            if codec == "zstd" {
                s.raw = crate::inbox::decompress(&s.raw)?;
            }
            let i = crate::inbox::effects::read_again(&s.raw, s.id)?;
            let ids: Vec<i64> = self
                .conn
                .prepare_cached(
                    "SELECT id FROM messages WHERE interchange_id = ?1 ORDER BY position",
                )?
                .query_map([s.id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let scope = Scope {
                interchange: &i,
                interchange_id: s.id,
                sha256: &s.sha256,
                source: &s.source_file,
                received_at: &s.received_at,
                reapply: true,
                held: &[],
            };
            for (n, m) in i.messages.iter().enumerate() {
                let recorded = || {
                    Ok(self
                        .conn
                        .prepare_cached(
                            "SELECT mapping FROM message_effects WHERE message_id = ?1",
                        )?
                        .query_row([ids.get(n).copied().unwrap_or_default()], |r| r.get(0))
                        .optional()?)
                };
                let Some(mapping) = to_reapply(&fx.effects, filter, m, recorded)? else {
                    continue;
                };
                let failure = match self.in_savepoint(|conn| {
                    let mut open = Open::new(conn);
                    let id = fx.run_message(&mut open, &scope, n, &ids, mapping)?;
                    open.record(&[(id, fx.checksum(mapping))], when)
                }) {
                    Ok(()) => None,
                    Err(InboxError::EffectFailed(r)) if !self.conn.is_autocommit() => Some(r),
                    Err(e) => return Err(e),
                };
                batch.messages.push(Reapplied {
                    interchange_id: s.id,
                    sender: i.unb.sender.to_string(),
                    recipient: i.unb.recipient.to_string(),
                    control_ref: i.unb.control_ref.to_string(),
                    message_ref: m.reference.to_string(),
                    source_file: s.source_file.clone(),
                    failure,
                });
            }
        }
        Ok(batch)
    }

    /// Keeps a refused interchange whole in the open batch, or counts an identical one again;
    /// how many times it has been refused.
    pub(super) fn keep_refused(
        &mut self,
        c: &crate::inbox::Candidate<'_>,
        r: &Refusal,
    ) -> Result<i64, InboxError> {
        let i = c.interchange;
        let raw = c.stored_bytes()?;
        let u = &i.unb;
        Ok(self
            .conn
            .prepare_cached(
                "INSERT INTO refusals (sender, recipient, control_ref, sha256, source_file, raw,
                     statement, message_ref, code, error, first_seen_at, last_seen_at, standard)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12)
                 ON CONFLICT (sender, recipient, control_ref, standard, sha256)
                     WHERE resolved_at IS NULL
                 DO UPDATE SET times_seen = times_seen + 1, last_seen_at = excluded.last_seen_at,
                     source_file = excluded.source_file, statement = excluded.statement,
                     message_ref = excluded.message_ref, code = excluded.code,
                     error = excluded.error
                 RETURNING times_seen",
            )?
            .query_row(
                params![
                    u.sender.as_str(),
                    u.recipient.as_str(),
                    u.control_ref.as_str(),
                    i.sha256_hex(),
                    c.source_file,
                    &*raw,
                    r.statement,
                    r.message_ref,
                    r.code,
                    r.error,
                    c.received_at,
                    i.standard,
                ],
                |row| row.get(0),
            )?)
    }
}
