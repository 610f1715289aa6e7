//! `message_segments(:message)` on SQLite: a message's segments as rows (n, tag, segment), the
//! same table PostgreSQL's function of that name gives (migration 0013 there, docs/effects.md).
//!
//! Why a virtual table: a mapping that looks for a segment by its tag with `json_each` makes
//! SQLite render every segment of the message as text again and parse it at each `->`: a third
//! of a millisecond per invoice, ten times the ingest's own cost (BENCHMARKS.md, issue 39). The
//! side effects already hold the message split (the JSON they bind as `:message`, with each
//! segment's place in it): where the argument is that JSON, its rows come from there without a
//! parse, and `tag = '...'` is answered by the table, not by a filter over every row. Where
//! every statement of a mapping reads `:message` only as this table's argument, the message's
//! JSON is not written at all: `:message` binds a short stand-in for the held segments, and a
//! segment is written as JSON only when its row is read. Any other JSON array of segments is
//! parsed and served the same way, only slower.

use std::os::raw::c_int;
use std::sync::{Arc, Mutex};

use rusqlite::types::Value;
use rusqlite::vtab::{
    Context, IndexConstraintOp, IndexInfo, VTab, VTabConfig, VTabConnection, VTabCursor, Values,
    eponymous_only_module, sqlite3_vtab, sqlite3_vtab_cursor,
};
use rusqlite::{Connection, Error};

use crate::inbox::effects::HeldMessage;

/// The message whose statements are running, shared by the side effects and the table.
pub(super) type Current = Arc<Mutex<Option<Arc<HeldMessage>>>>;

/// The table's name, as a mapping writes it.
pub(super) const NAME: &str = "message_segments";

/// Makes `message_segments(...)` known to `conn`, its fast path reading `current`.
pub(super) fn register(conn: &Connection, current: Current) -> rusqlite::Result<()> {
    conn.create_module(NAME, eponymous_only_module::<SegmentsTab>(), Some(current))
}

/// `current` holds `message` until the returned value is dropped.
pub(super) fn holding(current: &Current, message: Option<Arc<HeldMessage>>) -> Held<'_> {
    if let Ok(mut c) = current.lock() {
        *c = message;
    }
    Held(current)
}

/// Empties the cell when dropped, whatever the statements did.
pub(super) struct Held<'c>(&'c Current);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.0.lock() {
            *c = None;
        }
    }
}

// The columns, in the order of the declaration in `connect`.
const COLUMN_N: c_int = 0;
const COLUMN_TAG: c_int = 1;
const COLUMN_SEGMENT: c_int = 2;
const COLUMN_MESSAGE: c_int = 3;

// What `best_index` found usable, as `filter` receives it.
const WITH_MESSAGE: c_int = 1;
const WITH_TAG: c_int = 2;

#[repr(C)]
struct SegmentsTab {
    /// SQLite's part: must come first.
    base: sqlite3_vtab,
    current: Current,
}

// SAFETY: `SegmentsTab` is `repr(C)` with SQLite's `sqlite3_vtab` as its first field, as
// rusqlite's module requires; it holds no pointer of SQLite's.
unsafe impl<'vtab> VTab<'vtab> for SegmentsTab {
    type Aux = Current;
    type Cursor = SegmentsCursor;

    fn connect(
        db: &mut VTabConnection,
        aux: Option<&Current>,
        _args: &[&[u8]],
    ) -> rusqlite::Result<(String, SegmentsTab)> {
        db.config(VTabConfig::Innocuous)?;
        let tab = SegmentsTab {
            base: sqlite3_vtab::default(),
            current: aux.cloned().unwrap_or_default(),
        };
        Ok((
            "CREATE TABLE x(n INTEGER, tag TEXT, segment TEXT, message HIDDEN)".to_owned(),
            tab,
        ))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<()> {
        use IndexConstraintOp::*;
        let (mut message, mut tag, mut unusable_message) = (None, None, false);
        let mut bounds = Vec::new();
        for (i, c) in info.constraints().enumerate() {
            let op = c.operator();
            match c.column() {
                COLUMN_MESSAGE if op == SQLITE_INDEX_CONSTRAINT_EQ && c.is_usable() => {
                    message = Some(i)
                }
                COLUMN_MESSAGE => unusable_message = true,
                // Only where the comparison is the plain one: `tag = 'lin' COLLATE NOCASE`
                // is SQLite's to judge.
                COLUMN_TAG
                    if op == SQLITE_INDEX_CONSTRAINT_EQ
                        && c.is_usable()
                        && info
                            .collation(i)
                            .is_ok_and(|c| c.eq_ignore_ascii_case("BINARY")) =>
                {
                    tag = Some(i)
                }
                COLUMN_N if c.is_usable() => {
                    let code = match op {
                        SQLITE_INDEX_CONSTRAINT_EQ => 'e',
                        SQLITE_INDEX_CONSTRAINT_GT => 'g',
                        SQLITE_INDEX_CONSTRAINT_GE => 'G',
                        SQLITE_INDEX_CONSTRAINT_LT => 'l',
                        SQLITE_INDEX_CONSTRAINT_LE => 'L',
                        _ => continue,
                    };
                    bounds.push((i, code));
                }
                _ => {}
            }
        }
        // The message given but not usable yet (a join's other side first): not this plan.
        if unusable_message && message.is_none() {
            return Err(Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
                None,
            ));
        }
        let mut plan = 0;
        let mut argv = 0;
        // The message is the function's argument, never a value of the column: SQLite must
        // not compare it again. A tag or a position is only a first pick: SQLite still checks
        // each row it gets (not omitted), so a value this table reads otherwise than SQLite
        // would (another type, say) can cost a row, never add one.
        for (flag, found, omit) in [(WITH_MESSAGE, message, true), (WITH_TAG, tag, false)] {
            if let Some(i) = found {
                plan |= flag;
                argv += 1;
                let mut usage = info.constraint_usage(i);
                usage.set_argv_index(argv);
                usage.set_omit(omit);
            }
        }
        let mut ops = String::new();
        for (i, code) in &bounds {
            argv += 1;
            info.constraint_usage(*i).set_argv_index(argv);
            ops.push(*code);
        }
        let rows: i64 = match (message.is_some(), tag.is_some(), bounds.is_empty()) {
            // Without the message there is nothing to read: `filter` says so.
            (false, ..) => 1_000_000_000,
            (true, true, false) => 1,
            (true, true, true) => 2,
            (true, false, false) => 20,
            (true, false, true) => 50,
        };
        info.set_estimated_cost(rows as f64);
        info.set_estimated_rows(rows);
        info.set_idx_num(plan);
        info.set_idx_str(&ops);
        Ok(())
    }

    fn open(&'vtab mut self) -> rusqlite::Result<SegmentsCursor> {
        Ok(SegmentsCursor {
            base: sqlite3_vtab_cursor::default(),
            current: self.current.clone(),
            rows: Rows::None,
            picked: Vec::new(),
            at: 0,
        })
    }
}

/// The segments a cursor reads: the side effects' own message, or JSON it parsed.
enum Rows {
    None,
    Current(Arc<HeldMessage>),
    Parsed(Vec<(Option<String>, String)>),
}

impl Rows {
    fn tag(&self, k: usize) -> Option<&str> {
        match self {
            Rows::None => None,
            Rows::Current(m) => m.tag(k),
            Rows::Parsed(p) => p.get(k).and_then(|(tag, _)| tag.as_deref()),
        }
    }

    fn tag_is(&self, k: usize, name: &[u8]) -> bool {
        match self {
            Rows::None => false,
            Rows::Current(m) => m.tag(k).is_some_and(|t| t.as_bytes() == name),
            Rows::Parsed(p) => p
                .get(k)
                .is_some_and(|(tag, _)| tag.as_deref().map(str::as_bytes) == Some(name)),
        }
    }

    fn segment(&self, k: usize) -> Option<&str> {
        match self {
            Rows::None => None,
            Rows::Current(m) => m.segment(k),
            Rows::Parsed(p) => p.get(k).map(|(_, json)| json.as_str()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Rows::None => 0,
            Rows::Current(m) => m.len(),
            Rows::Parsed(p) => p.len(),
        }
    }
}

#[repr(C)]
struct SegmentsCursor {
    /// SQLite's part: must come first.
    base: sqlite3_vtab_cursor,
    current: Current,
    rows: Rows,
    /// The segments that meet the constraints, by position.
    picked: Vec<usize>,
    at: usize,
}

impl SegmentsCursor {
    fn row(&self) -> Option<usize> {
        self.picked.get(self.at).copied()
    }
}

// SAFETY: `SegmentsCursor` is `repr(C)` with SQLite's `sqlite3_vtab_cursor` first, as rusqlite
// requires; it holds no pointer of SQLite's.
unsafe impl VTabCursor for SegmentsCursor {
    fn filter(
        &mut self,
        plan: c_int,
        ops: Option<&str>,
        args: &Values<'_>,
    ) -> rusqlite::Result<()> {
        self.at = 0;
        self.picked.clear();
        if plan & WITH_MESSAGE == 0 {
            return Err(Error::ModuleError(format!(
                "{NAME} reads one message, given as its argument: FROM {NAME}(:message)"
            )));
        }
        let current = self.current.lock().ok().and_then(|c| c.clone());
        // The held message is told by its text, compared where SQLite keeps it: a copy of a
        // message for each lookup was a third of what the table cost.
        let held = {
            let _compared = Compared::with(current.clone());
            args.get::<IsHeld>(0).map(|h| h.0).unwrap_or(false)
        };
        let message: Option<String> = if held {
            None
        } else {
            args.get(0).map_err(|_| {
                Error::ModuleError(format!(
                    "{NAME}: the argument is not a message's JSON text (an array of segments, as :message)"
                ))
            })?
        };
        let mut next = 1;
        let tag = if plan & WITH_TAG != 0 {
            next += 1;
            args.get::<Wanted>(1).ok().and_then(|w| w.0)
        } else {
            None
        };
        // Each bound on the position, where it is a number; any other value is left to SQLite.
        let mut low = f64::NEG_INFINITY;
        let mut high = f64::INFINITY;
        for (k, op) in ops.unwrap_or("").chars().enumerate() {
            let v = match args.get::<Value>(next + k) {
                Ok(Value::Integer(i)) => i as f64,
                Ok(Value::Real(r)) => r,
                _ => continue,
            };
            match op {
                'e' => {
                    low = low.max(v);
                    high = high.min(v);
                }
                'g' => low = low.max(v.floor() + 1.0),
                'G' => low = low.max(v.ceil()),
                'l' => high = high.min(v.ceil() - 1.0),
                'L' => high = high.min(v.floor()),
                _ => {}
            }
        }
        self.rows = match (held, current, message) {
            (true, Some(m), _) => Rows::Current(m),
            (_, _, Some(message)) => Rows::Parsed(parse(&message)?),
            _ => Rows::None,
        };
        let rows = &self.rows;
        let from = if low > 0.0 { low as usize } else { 0 };
        let to = if high < 0.0 {
            0
        } else if high >= rows.len() as f64 {
            rows.len()
        } else {
            high as usize + 1
        };
        match (rows, &tag) {
            // The held message compares its segments' tags as bytes.
            (Rows::Current(m), Some(want)) => {
                m.positions_of(want.name(), from, to, &mut self.picked)
            }
            _ => self.picked.extend(
                (from..to.max(from))
                    .filter(|&k| tag.as_ref().is_none_or(|want| rows.tag_is(k, want.name()))),
            ),
        }
        Ok(())
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        self.at += 1;
        Ok(())
    }

    fn eof(&self) -> bool {
        self.at >= self.picked.len()
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        let Some(k) = self.row() else {
            return ctx.set_result(&rusqlite::types::Null);
        };
        match i {
            COLUMN_N => ctx.set_result(&(k as i64)),
            COLUMN_TAG => ctx.set_result(&self.rows.tag(k)),
            COLUMN_SEGMENT => ctx.set_result(&self.rows.segment(k)),
            _ => ctx.set_result(&rusqlite::types::Null),
        }
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        Ok(self.row().unwrap_or(0) as i64)
    }
}

thread_local! {
    /// The held message for [`IsHeld`], which SQLite's value alone reaches: set by `filter`
    /// around that one read, on the connection's thread, and emptied after it.
    static COMPARED: std::cell::RefCell<Option<Arc<HeldMessage>>> =
        const { std::cell::RefCell::new(None) };
}

/// [`COMPARED`] holding a message until dropped.
struct Compared;

impl Compared {
    fn with(message: Option<Arc<HeldMessage>>) -> Compared {
        COMPARED.with(|c| *c.borrow_mut() = message);
        Compared
    }
}

impl Drop for Compared {
    fn drop(&mut self) {
        COMPARED.with(|c| *c.borrow_mut() = None);
    }
}

/// The tag a lookup wants, read without copying it into a `String` (a sixth of a lookup's
/// time): text of one to three bytes; any other text or value picks no segments by tag, SQLite
/// then checking each row itself.
struct Wanted(Option<WantedTag>);

struct WantedTag {
    bytes: [u8; 3],
    len: usize,
}

impl WantedTag {
    fn name(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl rusqlite::types::FromSql for Wanted {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let rusqlite::types::ValueRef::Text(text) = value else {
            return Ok(Wanted(None));
        };
        let mut bytes = [0; 3];
        match bytes.get_mut(..text.len()) {
            Some(b) if !text.is_empty() => b.copy_from_slice(text),
            _ => return Ok(Wanted(None)),
        }
        Ok(Wanted(Some(WantedTag {
            bytes,
            len: text.len(),
        })))
    }
}

/// Whether an argument is the held message's text, read without copying it.
struct IsHeld(bool);

impl rusqlite::types::FromSql for IsHeld {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let rusqlite::types::ValueRef::Text(text) = value else {
            return Ok(IsHeld(false));
        };
        Ok(IsHeld(COMPARED.with(|c| {
            c.borrow()
                .as_ref()
                .is_some_and(|m| m.argument().as_bytes() == text)
        })))
    }
}

/// Any JSON array of segments (each an array: its tag first, or the tag's element `["LIN",
/// "1", "1"]`): each segment's tag, where it has one, and its JSON.
fn parse(text: &str) -> rusqlite::Result<Vec<(Option<String>, String)>> {
    let not = |why: &str| {
        Error::ModuleError(format!(
            "{NAME}: the argument is not a message's JSON (an array of segments, as :message): {why}"
        ))
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| not(&e.to_string()))?;
    let serde_json::Value::Array(segments) = value else {
        return Err(not("not an array"));
    };
    segments
        .iter()
        .map(|s| {
            let first = s.get(0);
            let tag = first
                .and_then(|t| t.as_str().or_else(|| t.get(0).and_then(|t| t.as_str())))
                .map(str::to_string);
            let json = serde_json::to_string(s).map_err(|e| not(&e.to_string()))?;
            Ok((tag, json))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edifact::{interchanges, message_segments};

    const INVOIC: &[u8] = b"UNB+UNOC:3+S+R+240101:1200+REF'UNH+1+INVOIC:D:96A:UN'BGM+380+INV?+1+9'\
        DTM+137:20240315:102'LIN+1++4000862141404:SRS'QTY+47:5:PCE'MOA+203:10'\
        LIN:1:1+2++4000862141405:SRS'QTY+47:7:PCE'UNS+S'MOA+77:17'UNT+11+1'UNZ+1+REF'";

    /// The message held as its JSON, and as its segments alone; each with what `:message`
    /// binds for it.
    fn forms() -> [(Arc<HeldMessage>, String); 2] {
        let i = interchanges(INVOIC).next().unwrap().unwrap();
        let read = message_segments(&i, &i.messages[0]).unwrap();
        let json = Arc::new(HeldMessage::json(read.to_json()));
        let segments = Arc::new(HeldMessage::segments(read.to_held()));
        [json, segments].map(|m| {
            let argument = m.argument().to_string();
            (m, argument)
        })
    }

    /// The message's JSON.
    fn text() -> String {
        forms()[0].1.clone()
    }

    fn conn(current: &Current) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn, current.clone()).unwrap();
        conn
    }

    fn rows(conn: &Connection, sql: &str, message: &str) -> Vec<(i64, Option<String>, String)> {
        conn.prepare(sql)
            .unwrap()
            .query_map([message], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The table gives what `json_each` gives of the same message (position, tag, segment),
    /// whether it serves the side effects' own message or parses the JSON given; a tag picks
    /// its segments in order; a segment whose tag element holds more (`LIN:1:1`) has the tag.
    #[test]
    fn it_gives_what_json_each_gives_served_or_parsed() {
        let current = Current::default();
        let conn = conn(&current);
        let text = text();
        let want = rows(
            &conn,
            "SELECT key, CASE json_type(value, '$[0]') WHEN 'array' THEN value ->> '$[0][0]'
                    ELSE value ->> 0 END, value FROM json_each(?1)",
            &text,
        );
        assert_eq!(want.len(), 11);
        let all = "SELECT n, tag, segment FROM message_segments(?1)";
        let parsed = rows(&conn, all, &text);
        assert_eq!(parsed, want, "parsed");
        for (k, (m, argument)) in forms().into_iter().enumerate() {
            let _held = holding(&current, Some(m));
            let served = rows(&conn, all, &argument);
            assert_eq!(served, want, "served, form {k}");
            // The JSON given while the segments alone are held: parsed, the same rows.
            assert_eq!(rows(&conn, all, &text), want, "form {k}, the JSON given");
        }
        // Held as its segments alone, the argument that stands for it is nothing once the
        // message is no longer held.
        let argument = forms()[1].1.clone();
        let e = conn
            .query_row(all, [&argument], |r| r.get::<_, i64>(0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a message's JSON"), "{e}");
        let _held = holding(&current, Some(forms()[1].0.clone()));
        let lines = rows(
            &conn,
            "SELECT n, tag, segment FROM message_segments(?1) WHERE tag = 'LIN' ORDER BY n",
            &argument,
        );
        assert_eq!(
            lines,
            [
                (
                    3,
                    Some("LIN".into()),
                    r#"["LIN",["1"],[""],["4000862141404","SRS"]]"#.into()
                ),
                (
                    6,
                    Some("LIN".into()),
                    r#"[["LIN","1","1"],["2"],[""],["4000862141405","SRS"]]"#.into()
                ),
            ]
        );
        // Another message's JSON while one is held: parsed, not taken for the held one.
        let other = r#"[["UNH",["9"]],["BGM",["381"]]]"#;
        assert_eq!(
            rows(
                &conn,
                "SELECT n, tag, segment FROM message_segments(?1) WHERE tag = 'BGM'",
                other
            ),
            [(1, Some("BGM".into()), r#"["BGM",["381"]]"#.into())]
        );
    }

    /// What a mapping reads with it: the total after UNS, each line's quantity.
    #[test]
    fn a_mapping_reads_the_total_after_uns_and_each_lines_quantity() {
        for (m, argument) in forms() {
            let current = Current::default();
            let conn = conn(&current);
            let _held = holding(&current, Some(m));
            reads_the_total_and_quantities(&conn, &argument);
        }
    }

    fn reads_the_total_and_quantities(conn: &Connection, argument: &str) {
        let total: String = conn
            .query_row(
                "SELECT segment -> 1 ->> 1 FROM message_segments(?1)
                 WHERE tag = 'MOA' AND segment -> 1 ->> 0 = '77'
                   AND n > (SELECT n FROM message_segments(?1) WHERE tag = 'UNS')",
                [argument],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(total, "17");
        let quantities: Vec<(String, String)> = conn
            .prepare(
                "SELECT l.segment -> 1 ->> 0, q.segment -> 1 ->> 1
                 FROM message_segments(?1) AS l JOIN message_segments(?1) AS q
                   ON q.tag = 'QTY' AND q.n > l.n
                  AND q.n < coalesce((SELECT min(x.n) FROM message_segments(?1) AS x
                                      WHERE x.tag IN ('LIN', 'UNS') AND x.n > l.n), 1e9)
                 WHERE l.tag = 'LIN' ORDER BY l.n",
            )
            .unwrap()
            .query_map([argument], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            quantities,
            [("1".into(), "5".into()), ("2".into(), "7".into())]
        );
    }

    /// A position's bounds and a tag only narrow what SQLite then checks itself: whatever the
    /// comparison, the rows are those of the same query over a table of the same rows.
    #[test]
    fn bounds_and_tags_give_what_sqlite_would() {
        for (m, argument) in forms() {
            let current = Current::default();
            let conn = conn(&current);
            let _held = holding(&current, Some(m));
            gives_what_sqlite_would(&conn, &argument);
        }
    }

    fn gives_what_sqlite_would(conn: &Connection, argument: &str) {
        let text = text();
        // The same rows in a table of the same declared types (so the same affinities).
        conn.execute_batch("CREATE TEMP TABLE each (n INTEGER, tag TEXT, segment TEXT)")
            .unwrap();
        conn.execute(
            "INSERT INTO each SELECT key, CASE json_type(value, '$[0]') WHEN 'array'
                 THEN value ->> '$[0][0]' ELSE value ->> 0 END, value FROM json_each(?1)",
            [&text],
        )
        .unwrap();
        let each = "(SELECT *, ?1 AS unused FROM each)";
        for filter in [
            "n > 2.5",
            "n >= 3 AND n < 7",
            "n <= 4.0",
            "n = 3.0",
            "n = 3.5",
            "n < -1",
            "n > 1e18",
            "n BETWEEN 2 AND 9 AND tag = 'QTY'",
            "n < '5'",
            "n IS NULL",
            "tag = 'qty' COLLATE NOCASE",
            "tag = 'QTY' AND n > 4",
            "tag IN ('LIN', 'UNS')",
            "tag = 1",
            "tag = ''",
            "tag = 'LI'",
            "tag = 'LINX'",
            "tag = 'LIN '",
        ] {
            let ours = rows(
                conn,
                &format!(
                    "SELECT n, tag, segment FROM message_segments(?1) WHERE {filter} ORDER BY n"
                ),
                argument,
            );
            let want = rows(
                conn,
                &format!("SELECT n, tag, segment FROM {each} WHERE {filter} ORDER BY n"),
                argument,
            );
            assert_eq!(ours, want, "{filter}");
        }
    }

    /// Without its argument, or given what is not a message, it says what it wants.
    #[test]
    fn a_wrong_argument_is_said() {
        let conn = conn(&Current::default());
        let no_arg = conn
            .prepare("SELECT n FROM message_segments")
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
            .unwrap_err()
            .to_string();
        assert!(no_arg.contains("message_segments(:message)"), "{no_arg}");
        for bad in ["{\"a\": 1}", "not json"] {
            let e = conn
                .query_row("SELECT n FROM message_segments(?1)", [bad], |r| {
                    r.get::<_, i64>(0)
                })
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a message's JSON"), "{bad}: {e}");
        }
        let none: i64 = conn
            .query_row("SELECT count(*) FROM message_segments(NULL)", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(none, 0);
    }
}
