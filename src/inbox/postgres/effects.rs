//! The operator's side effects on PostgreSQL (docs/effects.md): their migrations applied under
//! the lock edi-inbox's own take, with a checksum each; every statement checked (data
//! statements only, no write to edi-inbox's own tables, seen in its plan) and prepared before
//! the first input; run for each new interchange in the batch's transaction with
//! `statement_timeout` at `--effects-timeout` and, with `--effects-role`, as that role: each
//! file made a function of the session, a batch's consecutive calls of one file sent as one
//! statement over arrays, and run again a statement at a time where that fails.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use postgres::Client;
use postgres::types::{ToSql, Type};

use super::PgInbox;
use super::migrations::MIGRATIONS;
use crate::edifact::Message;
use crate::effects::{Effects, Param, Statement};
use crate::inbox::effects::{
    EffectSettings, InstallMode, Installation, MessageScope, Scope, Trace, Traced, Value,
    to_reapply,
};
use crate::inbox::{InboxError, Reapplied, ReapplyBatch, ReapplyFilter, Refusal, SideEffects};

/// A statement as the server runs it: `:name` written `$N` with its type's cast, numbered in the
/// order the names first appear.
pub(super) struct Prepared {
    place: String,
    statement: postgres::Statement,
    params: Vec<Param>,
}

/// A mapping file's statements made one function of the session (`pg_temp`, SQL, in the
/// file's order), called once for a run of the batch's messages with their parameters as
/// arrays: a round trip per run, not one per statement and message.
pub(super) struct Batched {
    /// The function's arguments: each parameter the file's statements name, once.
    params: Vec<Param>,
    /// `SELECT f(...) FROM unnest(the arrays)`, prepared.
    call: postgres::Statement,
}

/// The side effects installed on this inbox's connection.
pub(super) struct Installed {
    effects: Arc<Effects>,
    files: BTreeMap<String, Vec<Prepared>>,
    /// The files made functions, by name; a file whose function the server would not make
    /// runs statement by statement.
    batched: BTreeMap<String, Batched>,
    timeout: Duration,
    role: Option<String>,
    /// The session's `statement_timeout`, put back after the side effects of a batch.
    session_timeout: String,
    /// What each statement did, where the settings asked (`effects try`).
    trace: Option<Trace>,
}

/// The SQL type a parameter is bound as.
fn sql_type(p: Param) -> &'static str {
    match p {
        Param::InterchangeId | Param::MessageId | Param::Test | Param::Reapply => "bigint",
        // Bound as jsonb itself: parsed once when bound, however often the statement names it.
        Param::Message => "jsonb",
        _ => "text",
    }
}

/// How a parameter's placeholder is written: its number and its type's cast.
fn placeholder(p: Param, n: usize) -> String {
    format!("${n}::{}", sql_type(p))
}

fn render(s: &Statement) -> (String, Vec<Param>) {
    let mut order: Vec<Param> = Vec::new();
    let sql = render_in(s, &mut order);
    (sql, order)
}

/// `s` with its parameters numbered in `order`, a name not in it yet added at its end (the
/// statements of one file share the numbers of the function they make).
fn render_in(s: &Statement, order: &mut Vec<Param>) -> String {
    s.render(|p| {
        let n = match order.iter().position(|q| *q == p) {
            Some(at) => at + 1,
            None => {
                order.push(p);
                order.len()
            }
        };
        placeholder(p, n)
    })
}

/// The statements a decision may run: data, never a transaction's control, a session's
/// settings or the schema (which belongs in migrations/).
const DATA_STATEMENTS: &[&str] = &[
    "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "WITH", "VALUES",
];

/// The first word of `sql` after white space, comments and opening parentheses, upper case.
fn first_word(sql: &str) -> String {
    let mut rest = sql;
    loop {
        let t = rest.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
        if let Some(after) = t.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = t.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            rest = t;
            break;
        }
    }
    rest.chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase()
}

/// edi-inbox's own tables: those its migrations create.
fn own_tables() -> HashSet<String> {
    let mut own: HashSet<String> = HashSet::from(["schema_migrations".to_string()]);
    for m in MIGRATIONS {
        let upper = m.to_ascii_uppercase();
        let mut from = 0;
        while let Some(at) = upper[from..].find("CREATE TABLE ") {
            let start = from + at + "CREATE TABLE ".len();
            let rest = m[start..].trim_start();
            let rest = rest
                .strip_prefix("IF NOT EXISTS ")
                .map_or(rest, str::trim_start);
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            own.insert(name.to_ascii_lowercase());
            from = start;
        }
    }
    own
}

/// The tables a plan writes (`ModifyTable` nodes, writable CTEs included), as schema and name.
fn written(plan: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match plan {
        serde_json::Value::Object(o) => {
            if o.get("Node Type").and_then(|v| v.as_str()) == Some("ModifyTable")
                && let (Some(s), Some(r)) = (
                    o.get("Schema").and_then(|v| v.as_str()),
                    o.get("Relation Name").and_then(|v| v.as_str()),
                )
            {
                out.push((s.to_string(), r.to_string()));
            }
            for v in o.values() {
                written(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| written(v, out)),
        _ => {}
    }
}

fn setup(place: &str, reason: impl std::fmt::Display) -> InboxError {
    InboxError::Effects {
        place: place.to_string(),
        reason: reason.to_string(),
    }
}

/// The server's own words for a failure of one of the operator's statements.
fn words(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_string(),
        },
        None => e.to_string(),
    }
}

impl SideEffects for PgInbox {
    fn install_effects(
        &mut self,
        effects: Arc<Effects>,
        settings: &EffectSettings,
        _when: &str,
    ) -> Result<Installation, InboxError> {
        let schema = self.target.schema.clone();
        let session_timeout: String = self
            .client
            .get_mut()
            .query_one("SELECT current_setting('statement_timeout')", &[])?
            .get(0);
        self.begin()?;
        let result = install(
            self.client.get_mut(),
            &effects,
            settings.role.as_deref(),
            &schema,
        );
        let (files, batched, installation) = match result {
            Ok(done) => done,
            Err(e) => {
                self.rollback();
                return Err(e);
            }
        };
        match settings.mode {
            InstallMode::Keep => {
                self.client.get_mut().batch_execute("COMMIT")?;
                self.in_tx = false;
            }
            InstallMode::Check => self.rollback(),
            // The transaction stays open: the decisions of `effects try` go in it, then it is
            // rolled back whole.
            InstallMode::Try => self.try_transaction = true,
        }
        self.effects = Some(Arc::new(Installed {
            effects,
            files,
            batched,
            timeout: settings.timeout,
            role: settings.role.clone(),
            session_timeout,
            trace: settings.trace.then(Default::default),
        }));
        Ok(installation)
    }

    fn take_trace(&mut self) -> Vec<Traced> {
        Trace::take(self.effects.as_ref().and_then(|fx| fx.trace.as_ref()))
    }

    fn reapply_effects(
        &mut self,
        filter: &ReapplyFilter,
        after: i64,
        limit: u32,
        _when: &str,
    ) -> Result<ReapplyBatch, InboxError> {
        let Some(fx) = self.effects.clone() else {
            return Err(InboxError::no_effects());
        };
        self.begin()?;
        let client = self.client.get_mut();
        // Everything read first, as edi-inbox: the side effects may run as a role that may
        // not read the inbox's tables.
        let rows = client.query(
            concat!(
                "SELECT i.id, i.raw, i.raw_codec, i.sha256, i.source_file, ",
                ts!("i.received_at"),
                ",
                        (SELECT array_agg(m.id ORDER BY m.position) FROM messages m
                         WHERE m.interchange_id = i.id),
                        (SELECT array_agg(e.mapping ORDER BY m.position) FROM messages m
                         LEFT JOIN message_effects e ON e.message_id = m.id
                         WHERE m.interchange_id = i.id)
                 FROM interchanges i
                 WHERE i.id > $1
                   AND ($2::text IS NULL OR i.received_at >= $2::text::timestamptz)
                   AND EXISTS (SELECT 1 FROM messages m
                               WHERE m.interchange_id = i.id AND m.message_type = $3)
                 ORDER BY i.id LIMIT $4"
            ),
            &[
                &after,
                &filter.since,
                &filter.message_type,
                &i64::from(limit),
            ],
        )?;
        let mut batch = ReapplyBatch {
            last: rows.last().map(|r| r.get(0)),
            messages: Vec::new(),
        };
        fx.enter(client)?;
        let mut applied = Vec::new();
        for r in &rows {
            let id: i64 = r.get(0);
            let codec: String = r.get(2);
            let mut raw: Vec<u8> = r.get(1);
            if codec == "zstd" {
                raw = crate::inbox::decompress(&raw)?;
            }
            let (sha256, source_file, received_at): (String, String, String) =
                (r.get(3), r.get(4), r.get(5));
            let ids: Vec<i64> = r.get::<_, Option<Vec<i64>>>(6).unwrap_or_default();
            let recorded: Vec<Option<String>> = r
                .get::<_, Option<Vec<Option<String>>>>(7)
                .unwrap_or_default();
            let i = crate::inbox::effects::read_again(&raw, id)?;
            let scope = Scope {
                interchange: &i,
                interchange_id: id,
                sha256: &sha256,
                source: &source_file,
                received_at: &received_at,
                reapply: true,
                held: &[],
            };
            for (n, m) in i.messages.iter().enumerate() {
                let Some(mapping) = to_reapply(&fx.effects, filter, m, || {
                    Ok(recorded.get(n).cloned().flatten())
                })?
                else {
                    continue;
                };
                client.batch_execute("SAVEPOINT reapply")?;
                let failure = match fx.run_message(client, &scope, n, m, &ids, mapping) {
                    Ok(done) => {
                        client.batch_execute("RELEASE reapply")?;
                        applied.push(done);
                        None
                    }
                    Err(InboxError::EffectFailed(refusal)) => {
                        client.batch_execute("ROLLBACK TO reapply; RELEASE reapply")?;
                        Some(refusal)
                    }
                    Err(e) => return Err(e),
                };
                batch.messages.push(Reapplied {
                    interchange_id: id,
                    sender: i.unb.sender.to_string(),
                    recipient: i.unb.recipient.to_string(),
                    control_ref: i.unb.control_ref.to_string(),
                    message_ref: m.reference.to_string(),
                    source_file: source_file.clone(),
                    failure,
                });
            }
        }
        fx.leave(client)?;
        fx.record(client, &applied)?;
        Ok(batch)
    }
}

/// The operator's migrations not applied yet, then every statement checked and prepared, in
/// the open transaction; what was applied.
fn install(
    tx: &mut Client,
    effects: &Effects,
    role: Option<&str>,
    schema: &str,
) -> Result<Made, InboxError> {
    let own = own_tables();
    // The lock edi-inbox's own migrations take: hosts starting together apply each of the
    // operator's migrations once.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('edi-inbox ' || $1, 0))",
        &[&schema],
    )?;
    let applied: BTreeMap<i32, (String, String)> = tx
        .query(
            concat!(
                "SELECT number, sha256, ",
                ts!("applied_at"),
                " FROM effect_migrations"
            ),
            &[],
        )?
        .into_iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let last = applied.keys().max().copied();
    let mut installation = Installation::default();
    for m in &effects.migrations {
        let place = format!("migrations/{}", m.file);
        let number = m.number as i32;
        match applied.get(&number) {
            Some((sha, at)) if *sha != m.sha256 => {
                return Err(setup(
                    &place,
                    format!(
                        "was applied at {at} and has changed since: an applied migration is never edited; write a new one"
                    ),
                ));
            }
            Some(_) => {
                installation.migrations.push((m.file.clone(), false));
                continue;
            }
            None => {}
        }
        if let Some(last) = last.filter(|l| *l > number) {
            return Err(setup(
                &place,
                format!(
                    "is numbered below migration {last}, already applied: migrations are applied in their order; number it after {last}"
                ),
            ));
        }
        let first = first_word(&m.sql);
        if ["BEGIN", "COMMIT", "ROLLBACK", "START", "END", "ABORT"].contains(&first.as_str()) {
            return Err(setup(
                &place,
                "transaction control: each migration runs in edi-inbox's transaction",
            ));
        }
        tx.batch_execute("SAVEPOINT migration")?;
        if let Err(e) = tx.batch_execute(&m.sql) {
            return Err(setup(&place, words(&e)));
        }
        tx.batch_execute("RELEASE migration")?;
        tx.execute(
            "INSERT INTO effect_migrations (number, file, sha256) VALUES ($1, $2, $3)",
            &[&number, &m.file, &m.sha256],
        )?;
        installation.migrations.push((m.file.clone(), true));
    }
    if let Some(role) = role {
        // SET LOCAL ROLE, with the name bound: the statements are planned as the role.
        tx.execute("SELECT set_config('role', $1, true)", &[&role])
            .map_err(|e| setup("--effects-role", words(&e)))?;
    }
    let mut files = BTreeMap::new();
    for mapping in effects.interchange.iter().chain(effects.by_type.values()) {
        let mut own_file = Vec::with_capacity(mapping.statements.len());
        for s in &mapping.statements {
            let place = s.place();
            let first = first_word(&s.text());
            if !DATA_STATEMENTS.contains(&first.as_str()) {
                return Err(setup(
                    &place,
                    format!(
                        "may not run in the decision's transaction: {first} is not a data statement (SELECT, INSERT, UPDATE, DELETE, MERGE, WITH, VALUES); a change of schema belongs in migrations/"
                    ),
                ));
            }
            let (sql, params) = render(s);
            let statement = tx.prepare(&sql).map_err(|e| setup(&place, words(&e)))?;
            check_writes(tx, &sql, &params, schema, &own).map_err(|why| setup(&place, why))?;
            own_file.push(Prepared {
                place,
                statement,
                params,
            });
        }
        files.insert(mapping.file.clone(), own_file);
    }
    // Made as the role that runs them (`--effects-role`), whose grants their bodies are
    // checked against and who owns them.
    let mut batched = BTreeMap::new();
    let mappings = effects.interchange.iter().chain(effects.by_type.values());
    for (k, mapping) in mappings.enumerate() {
        match batch_function(tx, k, mapping)? {
            Ok(b) => {
                batched.insert(mapping.file.clone(), b);
            }
            Err(why) => installation.one_at_a_time.push((mapping.file.clone(), why)),
        }
    }
    // edi-inbox's own again, for what follows in the transaction (`effects try` decides in it).
    tx.execute("SELECT set_config('role', 'none', true)", &[])?;
    Ok((files, batched, installation))
}

/// What [`install`] makes: each file's statements, the files made functions, the migrations.
type Made = (
    BTreeMap<String, Vec<Prepared>>,
    BTreeMap<String, Batched>,
    Installation,
);

/// Quotes a function's body; a file whose SQL holds it is not made a function.
const BODY_QUOTE: &str = "$edi_inbox_effects$";

/// `mapping`'s statements as the `k`th function of the session, and the statement that calls
/// it over arrays; or why the server would not make it (the login or `--effects-role` may not
/// create temporary objects, say): that file then runs a statement at a time, as `effects
/// check` says.
fn batch_function(
    tx: &mut Client,
    k: usize,
    mapping: &crate::effects::Mapping,
) -> Result<Result<Batched, String>, InboxError> {
    let mut params = Vec::new();
    let body: Vec<String> = mapping
        .statements
        .iter()
        .map(|s| render_in(s, &mut params))
        .collect();
    let operator_sql = body.join("\n;\n");
    if operator_sql.contains(BODY_QUOTE) {
        return Ok(Err(format!("its SQL holds {BODY_QUOTE}")));
    }
    // What edi-inbox writes around the operator's SQL is made of a number and the types of
    // `sql_type`; the operator's statements were checked and prepared above, and partner data
    // only ever comes as the function's arguments, bound as arrays.
    let function = format!("pg_temp.edi_inbox_effects_{k}");
    let types: Vec<&str> = params.iter().map(|p| sql_type(*p)).collect();
    let arguments = types.join(", ");
    let create = format!(
        "CREATE OR REPLACE FUNCTION {function}({arguments}) RETURNS void LANGUAGE sql VOLATILE
         AS {BODY_QUOTE}\n{operator_sql}\n{BODY_QUOTE}"
    );
    let call = if params.is_empty() {
        format!("SELECT {function}() FROM generate_series(1, $1::int)")
    } else {
        let columns: Vec<String> = (1..=params.len()).map(|n| format!("c{n}")).collect();
        let columns = columns.join(", ");
        let arrays: Vec<String> = types
            .iter()
            .enumerate()
            .map(|(n, t)| format!("${}::{t}[]", n + 1))
            .collect();
        let arrays = arrays.join(", ");
        format!("SELECT {function}({columns}) FROM unnest({arrays}) AS u({columns})")
    };
    tx.batch_execute("SAVEPOINT batched")?;
    let made = tx.batch_execute(&create).and_then(|()| tx.prepare(&call));
    match made {
        Ok(call) => {
            tx.batch_execute("RELEASE batched")?;
            Ok(Ok(Batched { params, call }))
        }
        Err(e) => {
            tx.batch_execute("ROLLBACK TO batched; RELEASE batched")?;
            Ok(Err(words(&e)))
        }
    }
}

/// Refuses a statement whose plan writes one of edi-inbox's own tables: planned with every
/// parameter NULL (EXPLAIN never runs it; it checks the role's privileges).
fn check_writes(
    tx: &mut Client,
    sql: &str,
    params: &[Param],
    schema: &str,
    own: &HashSet<String>,
) -> Result<(), String> {
    let nulls_text: Option<&str> = None;
    let nulls_int: Option<i64> = None;
    let nulls_json: Option<Jsonb<'_>> = None;
    let values: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| {
            let typed = placeholder(*p, 1);
            if typed.ends_with("bigint") {
                &nulls_int as &(dyn ToSql + Sync)
            } else if typed.ends_with("jsonb") {
                &nulls_json as &(dyn ToSql + Sync)
            } else {
                &nulls_text as &(dyn ToSql + Sync)
            }
        })
        .collect();
    let rows = tx
        .query(&format!("EXPLAIN (VERBOSE, FORMAT JSON) {sql}"), &values)
        .map_err(|e| words(&e))?;
    let plan: serde_json::Value = match rows.first() {
        Some(r) => {
            let JsonText(text) = r.try_get(0).map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| e.to_string())?
        }
        None => return Ok(()),
    };
    let mut out = Vec::new();
    written(&plan, &mut out);
    for (s, t) in out {
        if s == schema && own.contains(&t.to_ascii_lowercase()) {
            return Err(format!(
                "may not run in the decision's transaction: {t} is one of edi-inbox's own tables: read it, never change it"
            ));
        }
    }
    Ok(())
}

/// About how many bytes of messages a run of calls holds before it is sent: a batch of large
/// messages is sent in several.
const RUN_BYTES: usize = 16 << 20;

/// The most calls a run sends at once: a round trip per 256 calls is a small part of them, and
/// a run that the clock stops (each call well within `--effects-timeout`, together past it)
/// wastes the time of that many at most before they are run one at a time.
const RUN_CALLS: usize = 256;

/// One call of a file's function: the interchange (its place in the batch) and, but for
/// `_interchange.sql`, the message.
struct Call<'a> {
    scope: usize,
    mapping: &'a crate::effects::Mapping,
    message: Option<MessageScope<'a>>,
}

/// A parameter's values over a run of calls, as the array its function's argument is unnested
/// from.
enum Column<'a> {
    Int(Vec<Option<i64>>),
    Text(Vec<Option<&'a str>>),
    Json(Vec<Option<Jsonb<'a>>>),
}

impl<'a> Column<'a> {
    fn push(&mut self, value: Value<'a>) -> Result<(), InboxError> {
        match (self, value) {
            (Column::Int(v), Value::Int(n)) => v.push(Some(n)),
            (Column::Int(v), Value::Null) => v.push(None),
            (Column::Text(v), Value::Text(t) | Value::Json(t)) => v.push(Some(t)),
            (Column::Text(v), Value::Null) => v.push(None),
            (Column::Json(v), Value::Json(t) | Value::Text(t)) => v.push(Some(Jsonb(t))),
            (Column::Json(v), Value::Null) => v.push(None),
            _ => {
                return Err(InboxError::Backend(
                    "a side effect's parameter came as another type than its argument's".into(),
                ));
            }
        }
        Ok(())
    }

    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Column::Int(v) => v,
            Column::Text(v) => v,
            Column::Json(v) => v,
        }
    }
}

/// Whether a run's failure is worth running its statements one at a time: the data's (which
/// that names), the clock's (which each statement then gets for itself), or anything else the
/// server said of the statement; not a lost connection or a conflict with another host, which
/// the batch is retried or failed for as before.
fn worth_one_at_a_time(e: &postgres::Error) -> bool {
    // A FATAL or PANIC ends the session: there is nothing to roll back to.
    let Some(db) = e.as_db_error() else {
        return false;
    };
    let code = db.code().code();
    db.parsed_severity()
        .is_none_or(|s| s == postgres::error::Severity::Error)
        && (code == "57014" || !matches!(code.get(..2), Some("08" | "40" | "57" | "58" | "XX")))
}

/// JSON text bound as `jsonb`: its binary form is a version byte (1) and the text.
#[derive(Debug)]
struct Jsonb<'a>(&'a str);

impl postgres::types::ToSql for Jsonb<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&[1]);
        out.extend_from_slice(self.0.as_bytes());
        Ok(postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB
    }

    postgres::types::to_sql_checked!();
}

/// A `json` value as its text (what the server sends for the type, in either format).
struct JsonText(String);

impl<'a> postgres::types::FromSql<'a> for JsonText {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> Result<JsonText, Box<dyn std::error::Error + Sync + Send>> {
        Ok(JsonText(String::from_utf8(raw.to_vec())?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSON || *ty == Type::TEXT
    }
}

impl Installed {
    /// Before the batch's side effects: the statement timeout, and the role (SET LOCAL, the
    /// values bound).
    pub(super) fn enter(&self, client: &mut Client) -> Result<(), InboxError> {
        let millis = self.timeout.as_millis().max(1).to_string();
        // The session's own role where none is named ('none' is SET ROLE NONE).
        let role = self.role.as_deref().unwrap_or("none");
        client.execute(
            "SELECT set_config('statement_timeout', $1, true), set_config('role', $2, true)",
            &[&millis, &role],
        )?;
        Ok(())
    }

    /// After them: the session's own again.
    pub(super) fn leave(&self, client: &mut Client) -> Result<(), InboxError> {
        client.execute(
            "SELECT set_config('statement_timeout', $1, true), set_config('role', 'none', true)",
            &[&self.session_timeout],
        )?;
        Ok(())
    }

    /// Runs the side effects of a new interchange whose rows are written (`ids`: its messages'
    /// rows in order), between [`Installed::enter`] and [`Installed::leave`]; adds each message
    /// a mapping ran for, with the mapping's checksum, to `applied` (recorded by
    /// [`Installed::record`] after `leave`, as edi-inbox, not as `--effects-role`). A failure
    /// of the data is [`InboxError::EffectFailed`].
    pub(super) fn run(
        &self,
        client: &mut Client,
        scope: &Scope<'_>,
        ids: &[i64],
        applied: &mut Vec<(i64, String)>,
    ) -> Result<(), InboxError> {
        if let Some(m) = &self.effects.interchange {
            for p in self.files.get(&m.file).into_iter().flatten() {
                self.execute(client, p, scope, None)?;
            }
        }
        for (n, message) in scope.interchange.messages.iter().enumerate() {
            let Some(mapping) =
                self.effects
                    .for_message(&message.message_type, &message.version, &message.release)
            else {
                continue;
            };
            applied.push(self.run_message(client, scope, n, message, ids, mapping)?);
        }
        Ok(())
    }

    /// Runs the side effects of a batch's new interchanges (each with its messages' row ids),
    /// in the order [`Installed::run`] would, between [`Installed::enter`] and
    /// [`Installed::leave`]: each run of calls to one file's function sent whole. Where that
    /// fails for the data or the clock, the batch's side effects are rolled back and run again
    /// one statement at a time, which names the message and statement at fault (or, a
    /// statement at a time under `--effects-timeout` each, succeeds).
    pub(super) fn run_all(
        &self,
        client: &mut Client,
        scopes: &[(Scope<'_>, Vec<i64>)],
        applied: &mut Vec<(i64, String)>,
    ) -> Result<(), InboxError> {
        // `effects try` tells each statement's rows apart.
        if self.trace.is_some() || self.batched.is_empty() {
            for (scope, ids) in scopes {
                self.run(client, scope, ids, applied)?;
            }
            return Ok(());
        }
        let start = applied.len();
        client.batch_execute("SAVEPOINT effects")?;
        match self.run_batched(client, scopes, applied)? {
            Ok(()) => {
                client.batch_execute("RELEASE effects")?;
                Ok(())
            }
            Err(e) if worth_one_at_a_time(&e) => {
                client.batch_execute("ROLLBACK TO effects; RELEASE effects")?;
                applied.truncate(start);
                for (scope, ids) in scopes {
                    self.run(client, scope, ids, applied)?;
                }
                Ok(())
            }
            Err(e) => Err(InboxError::from(e)),
        }
    }

    /// [`Installed::run_all`]'s calls, a run of one file's at a time: the server's error
    /// apart from ours.
    fn run_batched(
        &self,
        client: &mut Client,
        scopes: &[(Scope<'_>, Vec<i64>)],
        applied: &mut Vec<(i64, String)>,
    ) -> Result<Result<(), postgres::Error>, InboxError> {
        let mut run: Vec<Call<'_>> = Vec::new();
        let mut held = 0;
        for (s, (scope, ids)) in scopes.iter().enumerate() {
            let mut calls: Vec<(&crate::effects::Mapping, Option<(usize, &Message)>)> = Vec::new();
            if let Some(m) = &self.effects.interchange {
                calls.push((m, None));
            }
            for (n, message) in scope.interchange.messages.iter().enumerate() {
                if let Some(mapping) = self.effects.for_message(
                    &message.message_type,
                    &message.version,
                    &message.release,
                ) {
                    calls.push((mapping, Some((n, message))));
                }
            }
            for (mapping, message) in calls {
                if run.first().is_some_and(|c| c.mapping.file != mapping.file)
                    || held > RUN_BYTES
                    || run.len() >= RUN_CALLS
                {
                    if let Err(e) = self.send(client, scopes, &run)? {
                        return Ok(Err(e));
                    }
                    run.clear();
                    held = 0;
                }
                let message = match message {
                    Some((n, m)) => {
                        let ms = MessageScope::of(scope, n, m, ids, mapping, false)?;
                        applied.push((ms.id, self.effects.checksum_for(Some(mapping))));
                        held += ms.held.as_ref().map_or(0, |h| h.size());
                        Some(ms)
                    }
                    None => None,
                };
                run.push(Call {
                    scope: s,
                    mapping,
                    message,
                });
            }
        }
        self.send(client, scopes, &run)
    }

    /// One run of calls to one file: its function over the calls' parameters as arrays, or
    /// (a file not made a function) its statements one at a time.
    fn send(
        &self,
        client: &mut Client,
        scopes: &[(Scope<'_>, Vec<i64>)],
        run: &[Call<'_>],
    ) -> Result<Result<(), postgres::Error>, InboxError> {
        let Some(first) = run.first() else {
            return Ok(Ok(()));
        };
        let Some(batched) = self.batched.get(&first.mapping.file) else {
            for c in run {
                for p in self.files.get(&c.mapping.file).into_iter().flatten() {
                    self.execute(client, p, &scopes[c.scope].0, c.message.as_ref())?;
                }
            }
            return Ok(Ok(()));
        };
        if batched.params.is_empty() {
            let calls = i32::try_from(run.len()).unwrap_or(i32::MAX);
            return Ok(client.execute(&batched.call, &[&calls]).map(|_| ()));
        }
        let mut columns: Vec<Column<'_>> = batched
            .params
            .iter()
            .map(|p| match sql_type(*p) {
                "bigint" => Column::Int(Vec::with_capacity(run.len())),
                "jsonb" => Column::Json(Vec::with_capacity(run.len())),
                _ => Column::Text(Vec::with_capacity(run.len())),
            })
            .collect();
        for c in run {
            let scope = &scopes[c.scope].0;
            for (p, column) in batched.params.iter().zip(columns.iter_mut()) {
                column.push(scope.value(*p, c.message.as_ref()))?;
            }
        }
        let refs: Vec<&(dyn ToSql + Sync)> = columns.iter().map(Column::as_sql).collect();
        Ok(client.execute(&batched.call, &refs).map(|_| ()))
    }

    /// The `n`th message's statements (of `mapping`): its row's id and the mapping it ran, to
    /// be recorded.
    fn run_message(
        &self,
        client: &mut Client,
        scope: &Scope<'_>,
        n: usize,
        message: &Message,
        ids: &[i64],
        mapping: &crate::effects::Mapping,
    ) -> Result<(i64, String), InboxError> {
        // PostgreSQL's `message_segments` is a function over the `jsonb`: it needs the JSON.
        let ms = MessageScope::of(scope, n, message, ids, mapping, false)?;
        for p in self.files.get(&mapping.file).into_iter().flatten() {
            self.execute(client, p, scope, Some(&ms))?;
        }
        Ok((ms.id, self.effects.checksum_for(Some(mapping))))
    }

    /// Records the mapping each message ran (for `reapply --applied --changed`).
    pub(super) fn record(
        &self,
        client: &mut Client,
        applied: &[(i64, String)],
    ) -> Result<(), InboxError> {
        if applied.is_empty() {
            return Ok(());
        }
        let (ids, mappings): (Vec<i64>, Vec<&str>) =
            applied.iter().map(|(id, m)| (*id, m.as_str())).unzip();
        client.execute(
            "INSERT INTO message_effects (message_id, mapping)
             SELECT * FROM unnest($1::bigint[], $2::text[])
             ON CONFLICT (message_id) DO UPDATE SET mapping = excluded.mapping,
                 applied_at = now()",
            &[&ids, &mappings],
        )?;
        Ok(())
    }

    fn execute(
        &self,
        client: &mut Client,
        p: &Prepared,
        scope: &Scope<'_>,
        message: Option<&MessageScope<'_>>,
    ) -> Result<u64, InboxError> {
        let values: Vec<Value<'_>> = p.params.iter().map(|q| scope.value(*q, message)).collect();
        let bound: Vec<Box<dyn ToSql + Sync + '_>> = values
            .iter()
            .zip(p.statement.params())
            .map(|(v, ty)| -> Box<dyn ToSql + Sync + '_> {
                match v {
                    Value::Null if *ty == Type::INT8 => Box::new(None::<i64>),
                    Value::Null if *ty == Type::JSONB => Box::new(None::<Jsonb<'_>>),
                    Value::Null => Box::new(None::<&str>),
                    Value::Json(t) if *ty == Type::JSONB => Box::new(Jsonb(t)),
                    Value::Text(t) | Value::Json(t) => Box::new(*t),
                    Value::Int(n) => Box::new(*n),
                }
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| &**b as _).collect();
        match client.execute(&p.statement, &refs) {
            Ok(n) => {
                if let Some(trace) = &self.trace {
                    trace.push(scope, message, &p.place, n);
                }
                Ok(n)
            }
            Err(e) => Err(self.failure(p, message, e)),
        }
    }

    /// A failure told apart: the data's (class 22 data exception, 23 integrity constraint, 54
    /// program limit, P0 a PL/pgSQL RAISE) refuses the interchange; the timeout, a conflict
    /// with another host, or anything else is the run's.
    fn failure(
        &self,
        p: &Prepared,
        message: Option<&MessageScope<'_>>,
        e: postgres::Error,
    ) -> InboxError {
        let Some(code) = e.code().map(|c| c.code().to_string()) else {
            return InboxError::from(e);
        };
        if code == "57014" {
            return InboxError::EffectTimeout {
                statement: p.place.clone(),
                seconds: self.timeout.as_secs(),
            };
        }
        if matches!(&code[..2], "22" | "23" | "54" | "P0") {
            return InboxError::EffectFailed(Refusal {
                statement: p.place.clone(),
                message_ref: message.map(|m| m.message.reference.to_string()),
                code,
                error: words(&e),
                times_seen: 1,
            });
        }
        InboxError::from(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_is_read_past_comments_and_parentheses() {
        assert_eq!(first_word("  -- x\n /* y */ (select 1)"), "SELECT");
        assert_eq!(first_word("commit"), "COMMIT");
        assert_eq!(first_word("/* unterminated"), "");
    }

    #[test]
    fn own_tables_are_read_from_the_migrations() {
        let own = own_tables();
        for t in [
            "inbox",
            "interchanges",
            "messages",
            "outbox",
            "refusals",
            "schema_migrations",
        ] {
            assert!(own.contains(t), "{t} in {own:?}");
        }
        assert!(!own.contains("partner_invoices"));
    }
}
