//! The lexer of an effects file: splits it into statements and finds the `:name` parameters in
//! them, the same way for SQLite and PostgreSQL.
//!
//! It is not a parser: it knows just enough of both dialects to tell where a literal, a quoted
//! identifier or a comment begins and ends, so that a `;` or a `:sender` inside one is left
//! alone, and to refuse every other style of placeholder either engine would bind (SQLite binds
//! `?`, `?NNN`, `:name`, `@name`, `$name` and `#name`; PostgreSQL `$N`). A placeholder the
//! backend does not bind would read as NULL, silently: refusing them at start-up is the point.
//!
//! What is skipped whole, copied verbatim and never searched for parameters:
//! - `'...'` strings (`''` is a quote inside), and PostgreSQL's `E'...'` strings, in which a
//!   backslash escapes the next character too;
//! - `"..."` identifiers (`""` inside), and SQLite's backquoted ones (a doubled backquote
//!   inside) and `[...]`;
//! - `-- ...` comments to the end of the line and `/* ... */` comments, which nest as in
//!   PostgreSQL (`/* a /* b */ c */` is one comment). SQLite does not nest them: there the
//!   same text ends at the first `*/`, and what follows is a syntax error, never a statement
//!   run in secret;
//! - PostgreSQL's dollar quotes `$$...$$` and `$tag$...$tag$` (the tag is made of letters,
//!   digits and `_`, and does not begin with a digit).
//!
//! A `[` right after a name, a `)`, a `]` or a `"` (`ARRAY[:sender]`, `tags[1]`, `text[]`) is
//! PostgreSQL's subscript or array constructor and is read through; anywhere else it opens a
//! SQLite `[identifier]`.
//!
//! `?` is refused everywhere outside those, even where PostgreSQL would read it as one of its
//! jsonb operators `?`, `?|` and `?&`: the functions `jsonb_exists`, `jsonb_exists_any` and
//! `jsonb_exists_all` say the same. `@`, `#` and `:` followed by a letter, a digit, `_` or `$`
//! are refused (unless `:name` names a parameter): SQLite reads them as placeholders. The
//! operators `@>`, `<@`, `@@`, `@-@`, `#>`, `#>>`, `#-`, `::` and `:=` are fine; one followed
//! at once by a name (`<@tags`) wants a space (`<@ tags`). For the same reason a PostgreSQL
//! array slice is written `a[1 : 2]`, with spaces.
//!
//! A statement ends at a `;` outside all of the above, or at the end of the text; one that
//! holds nothing but blanks and comments is no statement. Lines end at LF (a CR before it is a
//! blank); lines and columns count from 1, columns in characters.

use super::{Param, Piece};

/// One statement of a file, as [`split`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The 1-based line of its first character that is neither blank nor part of a comment.
    pub line: usize,
    /// Its text from that character to the end of its last token (comments before and after
    /// are dropped, those inside kept), each parameter apart.
    pub pieces: Vec<Piece>,
    /// Where each [`Piece::Param`] stands, `(line, column)`, in the order of `pieces`.
    pub params_at: Vec<(usize, usize)>,
}

/// Where a file's SQL is wrong: the statement it is in (1-based, counting statements only),
/// and the line and column where the fault begins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("statement {statement}, line {line}, column {column}: {kind}")]
pub struct SqlError {
    pub statement: usize,
    pub line: usize,
    pub column: usize,
    pub kind: SqlErrorKind,
}

/// What is wrong, in the words an operator reading an effects file needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlErrorKind {
    #[error("a string opened here with ' is never closed (a ' inside one is written '')")]
    UnterminatedString,
    #[error("an E'...' string opened here is never closed (a ' inside one is written \\' or '')")]
    UnterminatedEscapeString,
    #[error("an identifier opened here with {open} is never closed by {close}")]
    UnterminatedIdentifier { open: char, close: char },
    #[error("a /* comment opened here is never closed by */ (comments nest: each /* needs its */)")]
    UnterminatedComment,
    #[error("a dollar quote opened here with {tag} is never closed by {tag}")]
    UnterminatedDollarQuote { tag: String },
    #[error("unknown parameter :{name}{}", suggest(*.suggestion))]
    UnknownParameter {
        name: String,
        suggestion: Option<Param>,
    },
    #[error(
        "{found} is a positional parameter: effects take named parameters only, such as :sender{}",
        jsonb_hint(found)
    )]
    PositionalParameter { found: String },
    #[error(
        "{found} is another style of parameter (SQLite would bind it): effects take :name \
         parameters only, such as :sender; if an operator stands before it, put a space after \
         the operator"
    )]
    OtherParameterStyle { found: String },
    #[error(
        "{found} is refused: it is PostgreSQL's jsonb operator, but a ? is a placeholder to \
         SQLite; write {function}(a, b) instead"
    )]
    QuestionMarkOperator {
        found: String,
        function: &'static str,
    },
}

fn suggest(suggestion: Option<Param>) -> String {
    match suggestion {
        Some(p) => format!(" (did you mean :{}?)", p.name()),
        None => format!(
            " (the parameters are {})",
            Param::ALL.map(|p| format!(":{}", p.name())).join(", ")
        ),
    }
}

fn jsonb_hint(found: &str) -> &'static str {
    if found == "?" {
        " (for PostgreSQL's jsonb operator ?, write jsonb_exists(a, b))"
    } else {
        ""
    }
}

/// How much of an offending name an error keeps: a hostile file may hold a megabyte of one.
const SHOWN: usize = 64;

fn shown(text: &str) -> String {
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// The known parameter closest to `name`, if it is at most two edits away.
fn closest(name: &str) -> Option<Param> {
    // Longer names are farther than two edits from every parameter: skip the work.
    let longest = Param::ALL.iter().map(|p| p.name().len()).max().unwrap_or(0);
    if name.chars().count() > longest + 2 {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    Param::ALL
        .iter()
        .map(|&p| (edit_distance(&lower, p.name()), p))
        .filter(|&(d, _)| d <= 2)
        .min_by_key(|&(d, _)| d)
        .map(|(_, p)| p)
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// Splits `source` into its statements, each with its parameters apart.
///
/// The first fault ends the work: an unclosed literal or comment (where it opens), an unknown
/// `:name`, or a placeholder of another style.
pub fn split(source: &str) -> Result<Vec<Split>, SqlError> {
    Lexer::new(source).run()
}

/// A byte that may stand inside a name: what SQLite's tokenizer takes after `:`, `@`, `$` and
/// `#` (letters, digits, `_`, `$` and every byte of a non-ASCII character), which covers
/// PostgreSQL's names too.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// A byte that may begin a name (and a dollar quote's tag).
fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// A byte that may stand inside a dollar quote's tag: a name's, but `$`.
fn is_tag_byte(b: u8) -> bool {
    is_name_byte(b) && b != b'$'
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    /// The byte offset of each line's first character.
    line_starts: Vec<usize>,
    pos: usize,
    done: Vec<Split>,
    /// The statement under way: where its first significant character is, if it has one yet.
    start: Option<usize>,
    /// Where the text not yet in a piece begins.
    sql_from: usize,
    /// Where the last significant token ends.
    last_end: usize,
    pieces: Vec<Piece>,
    params_at: Vec<(usize, usize)>,
    /// The last offset [`Lexer::line_column`] placed, with its line and column.
    last_place: std::cell::Cell<(usize, usize, usize)>,
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        let bytes = src.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|&(_, &b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lexer {
            src,
            bytes,
            line_starts,
            pos: 0,
            done: Vec::new(),
            start: None,
            sql_from: 0,
            last_end: 0,
            pieces: Vec::new(),
            params_at: Vec::new(),
            last_place: std::cell::Cell::new((0, 1, 1)),
        }
    }

    fn at(&self, offset: usize) -> Option<u8> {
        self.bytes.get(offset).copied()
    }

    /// The 1-based line and column (in characters) of a byte offset. Every offset asked about
    /// is that of an ASCII byte, so the slices below are on character boundaries.
    fn line_column(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&s| s <= offset);
        // Counting from the last place asked about, when it is earlier on the same line, keeps
        // a megabyte-long line of parameters from being counted over once for each of them.
        let (from, counted) = match self.last_place.get() {
            (at, l, column) if l == line && at <= offset => (at, column - 1),
            _ => (self.line_starts[line - 1], 0),
        };
        let column = counted
            + self
                .src
                .get(from..offset)
                .map_or(offset - from, |s| s.chars().count())
            + 1;
        self.last_place.set((offset, line, column));
        (line, column)
    }

    fn error(&self, offset: usize, kind: SqlErrorKind) -> SqlError {
        let (line, column) = self.line_column(offset);
        SqlError {
            statement: self.done.len() + 1,
            line,
            column,
            kind,
        }
    }

    /// A significant token begins at `offset`: the statement has begun, if it had not.
    fn begin(&mut self, offset: usize) {
        if self.start.is_none() {
            self.start = Some(offset);
            self.sql_from = offset;
        }
    }

    /// A significant token of the plain text spans `from..to`.
    fn token(&mut self, from: usize, to: usize) {
        self.begin(from);
        self.last_end = to;
        self.pos = to;
    }

    fn push_sql(&mut self, to: usize) {
        if self.sql_from < to {
            self.pieces
                .push(Piece::Sql(self.src[self.sql_from..to].to_string()));
        }
    }

    /// Ends the statement under way, if one began.
    fn finish(&mut self) {
        if let Some(start) = self.start.take() {
            self.push_sql(self.last_end);
            let (line, _) = self.line_column(start);
            self.done.push(Split {
                line,
                pieces: std::mem::take(&mut self.pieces),
                params_at: std::mem::take(&mut self.params_at),
            });
        }
    }

    fn run(mut self) -> Result<Vec<Split>, SqlError> {
        while let Some(b) = self.at(self.pos) {
            let next = self.at(self.pos + 1);
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C => self.pos += 1,
                b'-' if next == Some(b'-') => {
                    self.pos = self.find_byte(b'\n', self.pos).unwrap_or(self.bytes.len());
                }
                b'/' if next == Some(b'*') => self.pos = self.block_comment()?,
                b';' => {
                    self.finish();
                    self.pos += 1;
                }
                b'\'' => {
                    let end = self.doubled(b'\'', self.pos)?;
                    self.token(self.pos, end);
                }
                b'"' | b'`' => {
                    let end = self.doubled(b, self.pos)?;
                    self.token(self.pos, end);
                }
                b'[' if self.subscript() => self.token(self.pos, self.pos + 1),
                b'[' => {
                    let end = self.find_byte(b']', self.pos + 1).ok_or_else(|| {
                        self.error(
                            self.pos,
                            SqlErrorKind::UnterminatedIdentifier {
                                open: '[',
                                close: ']',
                            },
                        )
                    })?;
                    self.token(self.pos, end + 1);
                }
                b'$' => self.dollar()?,
                b':' => self.colon()?,
                b'?' => return Err(self.question_mark()),
                // `@@` and `##` are PostgreSQL operators, whichever name follows them. To SQLite
                // an `@` or `#` before a sign is a syntax error, not a placeholder, so what
                // follows cannot be bound in secret.
                b'@' | b'#' if next == Some(b) => self.token(self.pos, self.pos + 2),
                b'@' | b'#' if next.is_some_and(is_name_byte) => {
                    let end = self.name_end(self.pos + 1);
                    let found = shown(&self.src[self.pos..end]);
                    return Err(self.error(self.pos, SqlErrorKind::OtherParameterStyle { found }));
                }
                b if is_name_byte(b) => self.word()?,
                _ => self.token(self.pos, self.pos + 1),
            }
        }
        self.finish();
        Ok(self.done)
    }

    fn find_byte(&self, byte: u8, from: usize) -> Option<usize> {
        self.bytes
            .get(from..)?
            .iter()
            .position(|&b| b == byte)
            .map(|i| from + i)
    }

    fn name_end(&self, from: usize) -> usize {
        let mut end = from;
        while self.at(end).is_some_and(is_name_byte) {
            end += 1;
        }
        end
    }

    /// A `/* ... */` comment at `self.pos`, nested: the offset after its last `*/`.
    fn block_comment(&self) -> Result<usize, SqlError> {
        let mut depth = 0usize;
        let mut i = self.pos;
        while i < self.bytes.len() {
            match (self.bytes[i], self.at(i + 1)) {
                (b'/', Some(b'*')) => {
                    depth += 1;
                    i += 2;
                }
                (b'*', Some(b'/')) => {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        return Ok(i);
                    }
                }
                _ => i += 1,
            }
        }
        Err(self.error(self.pos, SqlErrorKind::UnterminatedComment))
    }

    /// A literal or identifier quoted by `quote` at `open`, in which the quote doubled stands
    /// for itself: the offset after its closing quote.
    fn doubled(&self, quote: u8, open: usize) -> Result<usize, SqlError> {
        let mut i = open + 1;
        loop {
            match self.find_byte(quote, i) {
                Some(close) if self.at(close + 1) == Some(quote) => i = close + 2,
                Some(close) => return Ok(close + 1),
                None => {
                    let kind = match quote {
                        b'\'' => SqlErrorKind::UnterminatedString,
                        _ => SqlErrorKind::UnterminatedIdentifier {
                            open: char::from(quote),
                            close: char::from(quote),
                        },
                    };
                    return Err(self.error(open, kind));
                }
            }
        }
    }

    /// Whether the `[` at `self.pos` follows a name, `)`, `]` or `"` directly: a PostgreSQL
    /// subscript or array constructor (`ARRAY[...]`), not a SQLite `[identifier]`.
    fn subscript(&self) -> bool {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.at(i))
            .is_some_and(|b| is_name_byte(b) || matches!(b, b')' | b']' | b'"'))
    }

    /// A name (or a number) at `self.pos`; an `E'...'` string if the name is `E` alone before
    /// a quote.
    fn word(&mut self) -> Result<(), SqlError> {
        let from = self.pos;
        let end = self.name_end(from);
        if end == from + 1 && matches!(self.bytes[from], b'E' | b'e') && self.at(end) == Some(b'\'')
        {
            let close = self.escape_string(from)?;
            self.token(from, close);
        } else {
            self.token(from, end);
        }
        Ok(())
    }

    /// The `E'...'` string whose `E` is at `from`: the offset after its closing quote.
    fn escape_string(&self, from: usize) -> Result<usize, SqlError> {
        let mut i = from + 2;
        while let Some(b) = self.at(i) {
            match b {
                b'\\' => i += 2,
                b'\'' if self.at(i + 1) == Some(b'\'') => i += 2,
                b'\'' => return Ok(i + 1),
                _ => i += 1,
            }
        }
        Err(self.error(from, SqlErrorKind::UnterminatedEscapeString))
    }

    /// A `$` at `self.pos`: a dollar quote, a placeholder (refused) or a lone sign.
    fn dollar(&mut self) -> Result<(), SqlError> {
        let open = self.pos;
        let mut tag_end = open + 1;
        if self.at(tag_end).is_some_and(is_name_start) {
            while self.at(tag_end).is_some_and(is_tag_byte) {
                tag_end += 1;
            }
        }
        match self.at(tag_end) {
            Some(b'$') => {
                let tag = &self.src[open..=tag_end];
                let body = tag_end + 1;
                let close = self.src[body..].find(tag).ok_or_else(|| {
                    self.error(
                        open,
                        SqlErrorKind::UnterminatedDollarQuote { tag: shown(tag) },
                    )
                })?;
                self.token(open, body + close + tag.len());
                Ok(())
            }
            Some(b) if b.is_ascii_digit() && tag_end == open + 1 => {
                let mut end = tag_end;
                while self.at(end).is_some_and(|b| b.is_ascii_digit()) {
                    end += 1;
                }
                let found = shown(&self.src[open..end]);
                Err(self.error(open, SqlErrorKind::PositionalParameter { found }))
            }
            _ if tag_end > open + 1 => {
                let found = shown(&self.src[open..self.name_end(open + 1)]);
                Err(self.error(open, SqlErrorKind::OtherParameterStyle { found }))
            }
            _ => {
                self.token(open, open + 1);
                Ok(())
            }
        }
    }

    /// A `:` at `self.pos`: `::`, `:=`, a parameter, a placeholder of SQLite's (refused) or a
    /// lone sign.
    fn colon(&mut self) -> Result<(), SqlError> {
        let at = self.pos;
        match self.at(at + 1) {
            Some(b':' | b'=') => self.token(at, at + 2),
            Some(b) if is_name_byte(b) => {
                let end = self.name_end(at + 1);
                let name = &self.src[at + 1..end];
                if b.is_ascii_digit() {
                    let found = shown(&self.src[at..end]);
                    return Err(self.error(at, SqlErrorKind::OtherParameterStyle { found }));
                }
                let Some(param) = Param::from_name(name) else {
                    let kind = SqlErrorKind::UnknownParameter {
                        name: shown(name),
                        suggestion: closest(name),
                    };
                    return Err(self.error(at, kind));
                };
                self.begin(at);
                self.push_sql(at);
                self.pieces.push(Piece::Param(param));
                let place = self.line_column(at);
                self.params_at.push(place);
                self.sql_from = end;
                self.token(at, end);
            }
            _ => self.token(at, at + 1),
        }
        Ok(())
    }

    /// The error for a `?` at `self.pos`: every `?` outside literals is refused.
    fn question_mark(&self) -> SqlError {
        let at = self.pos;
        let kind = match self.at(at + 1) {
            Some(b'|') => SqlErrorKind::QuestionMarkOperator {
                found: "?|".to_string(),
                function: "jsonb_exists_any",
            },
            Some(b'&') => SqlErrorKind::QuestionMarkOperator {
                found: "?&".to_string(),
                function: "jsonb_exists_all",
            },
            _ => {
                let mut end = at + 1;
                while self.at(end).is_some_and(|b| b.is_ascii_digit()) {
                    end += 1;
                }
                SqlErrorKind::PositionalParameter {
                    found: shown(&self.src[at..end]),
                }
            }
        };
        self.error(at, kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement's text, parameters as `:name`.
    fn text(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .map(|p| match p {
                Piece::Sql(sql) => sql.clone(),
                Piece::Param(p) => p.to_string(),
            })
            .collect()
    }

    /// Each statement's line and text.
    fn statements(source: &str) -> Vec<(usize, String)> {
        split(source)
            .unwrap_or_else(|e| panic!("{source:?}: {e}"))
            .into_iter()
            .map(|s| (s.line, text(&s.pieces)))
            .collect()
    }

    fn params(source: &str) -> Vec<Param> {
        split(source)
            .unwrap_or_else(|e| panic!("{source:?}: {e}"))
            .iter()
            .flat_map(|s| s.pieces.iter())
            .filter_map(|p| match p {
                Piece::Param(p) => Some(*p),
                Piece::Sql(_) => None,
            })
            .collect()
    }

    fn error(source: &str) -> SqlError {
        match split(source) {
            Ok(s) => panic!("{source:?} split into {s:?}"),
            Err(e) => e,
        }
    }

    fn at(e: &SqlError) -> (usize, usize, usize) {
        (e.statement, e.line, e.column)
    }

    #[test]
    fn one_statement_needs_no_semicolon() {
        assert_eq!(statements("SELECT 1"), [(1, "SELECT 1".to_string())]);
        assert_eq!(statements("SELECT 1;"), [(1, "SELECT 1".to_string())]);
    }

    #[test]
    fn statements_end_at_semicolons_with_their_lines() {
        let source =
            "INSERT INTO a VALUES (1);\n\n  -- the second\n  UPDATE b SET x = 2;\nDELETE FROM c";
        assert_eq!(
            statements(source),
            [
                (1, "INSERT INTO a VALUES (1)".to_string()),
                (4, "UPDATE b SET x = 2".to_string()),
                (5, "DELETE FROM c".to_string()),
            ]
        );
    }

    #[test]
    fn empty_statements_are_dropped() {
        assert_eq!(
            statements(";;\n ; -- nothing\n; /* nor here */ ;SELECT 1;;"),
            [(3, "SELECT 1".to_string())]
        );
        assert!(statements("").is_empty());
        assert!(statements("  \n\t\r\n").is_empty());
        assert!(statements("-- only a comment").is_empty());
        assert!(statements("/* only */ -- comments\n;").is_empty());
    }

    #[test]
    fn comments_around_a_statement_are_dropped_and_inside_kept() {
        assert_eq!(
            statements("/* head */ -- more\n SELECT 1 /* in */ + 2 -- tail\n /* after */ ;"),
            [(2, "SELECT 1 /* in */ + 2".to_string())]
        );
    }

    #[test]
    fn crlf_lines() {
        assert_eq!(
            statements("SELECT 1;\r\n\r\nSELECT :sender\r\n;\r\n"),
            [
                (1, "SELECT 1".to_string()),
                (3, "SELECT :sender".to_string())
            ]
        );
    }

    #[test]
    fn parameters_are_pieces_of_their_own() {
        let s = split("INSERT INTO t VALUES (:sender, :recipient)").expect("splits");
        assert_eq!(
            s[0].pieces,
            [
                Piece::Sql("INSERT INTO t VALUES (".to_string()),
                Piece::Param(Param::Sender),
                Piece::Sql(", ".to_string()),
                Piece::Param(Param::Recipient),
                Piece::Sql(")".to_string()),
            ]
        );
        assert_eq!(s[0].params_at, [(1, 23), (1, 32)]);
    }

    #[test]
    fn parameters_at_the_edges_and_side_by_side() {
        let s = split(":sender||:recipient").expect("splits");
        assert_eq!(
            s[0].pieces,
            [
                Piece::Param(Param::Sender),
                Piece::Sql("||".to_string()),
                Piece::Param(Param::Recipient),
            ]
        );
        assert_eq!(
            params("SELECT :message_ref,:message_ref;SELECT :reapply"),
            [Param::MessageRef, Param::MessageRef, Param::Reapply]
        );
    }

    #[test]
    fn every_parameter_is_known_by_its_name() {
        for p in Param::ALL {
            assert_eq!(params(&format!("SELECT :{}", p.name())), [p]);
        }
    }

    #[test]
    fn a_parameter_name_is_the_whole_name() {
        // `:sender_qualifier` is not `:sender` followed by `_qualifier`.
        assert_eq!(params("SELECT :sender_qualifier"), [Param::SenderQualifier]);
        assert_eq!(
            params("SELECT :message, :message_id"),
            [Param::Message, Param::MessageId]
        );
    }

    #[test]
    fn no_parameter_inside_a_string() {
        assert_eq!(
            statements("SELECT ':sender; still', :sender"),
            [(1, "SELECT ':sender; still', :sender".to_string())]
        );
        assert_eq!(params("SELECT ':sender; still', :sender"), [Param::Sender]);
    }

    #[test]
    fn doubled_quotes_inside_a_string() {
        assert_eq!(
            statements("SELECT 'it''s; :sender', :recipient; SELECT ''''"),
            [
                (1, "SELECT 'it''s; :sender', :recipient".to_string()),
                (1, "SELECT ''''".to_string()),
            ]
        );
        assert_eq!(params("SELECT 'it''s', :recipient"), [Param::Recipient]);
    }

    #[test]
    fn backslash_is_no_escape_in_a_plain_string() {
        // Standard strings (PostgreSQL's standard_conforming_strings, SQLite): '\' is whole.
        assert_eq!(params(r"SELECT '\' || :sender"), [Param::Sender]);
        // An `E` ending a longer name does not begin an escape string.
        assert_eq!(params(r"SELECT some'\' || :sender"), [Param::Sender]);
    }

    #[test]
    fn escape_strings_take_backslashes() {
        assert_eq!(
            params(r"SELECT E'it\'s :sender;', :recipient"),
            [Param::Recipient]
        );
        assert_eq!(params(r"SELECT e'\\', :recipient"), [Param::Recipient]);
        assert_eq!(
            params(r"SELECT E'a''b :sender', :recipient"),
            [Param::Recipient]
        );
        assert_eq!(
            statements(r"SELECT E'x\';y'; SELECT 2"),
            [
                (1, r"SELECT E'x\';y'".to_string()),
                (1, "SELECT 2".to_string())
            ]
        );
    }

    #[test]
    fn no_parameter_inside_a_quoted_identifier() {
        assert_eq!(
            params(r#"SELECT ":sender;""x" FROM t WHERE a = :sender"#),
            [Param::Sender]
        );
        assert_eq!(
            params("SELECT `:sender;``x` FROM t WHERE a = :sender"),
            [Param::Sender]
        );
        assert_eq!(
            params("SELECT [:sender; x] FROM t WHERE a = :sender"),
            [Param::Sender]
        );
        assert_eq!(
            statements("INSERT INTO [my;table] VALUES (1)"),
            [(1, "INSERT INTO [my;table] VALUES (1)".to_string())]
        );
    }

    #[test]
    fn a_bracket_after_a_name_is_a_postgresql_subscript() {
        assert_eq!(
            params("INSERT INTO t (who) VALUES (ARRAY[:sender, :recipient])"),
            [Param::Sender, Param::Recipient]
        );
        assert_eq!(
            params("SELECT tags[1], (f(x))[2], a[1][2], '{}'::text[], :test"),
            [Param::Test]
        );
        assert_eq!(params(r#"SELECT "t"[:reapply]"#), [Param::Reapply]);
        // A bracket standing alone is SQLite's identifier, even at the start of a statement.
        assert_eq!(params("[x:y] = 1; SELECT :test"), [Param::Test]);
    }

    #[test]
    fn no_parameter_inside_a_line_comment() {
        assert_eq!(
            statements("SELECT 1 -- :sender; not a split\n, :recipient"),
            [(
                1,
                "SELECT 1 -- :sender; not a split\n, :recipient".to_string()
            )]
        );
        assert_eq!(
            statements("SELECT 1 -- to the end"),
            [(1, "SELECT 1".to_string())]
        );
    }

    #[test]
    fn no_parameter_inside_a_block_comment() {
        assert_eq!(
            params("SELECT /* :sender; */ :recipient"),
            [Param::Recipient]
        );
        assert_eq!(params("SELECT /* a\n -- b\n :sender */ 1"), []);
    }

    #[test]
    fn block_comments_nest() {
        assert_eq!(
            statements("SELECT /* a /* b; */ :sender; */ :recipient; SELECT 2"),
            [
                (1, "SELECT /* a /* b; */ :sender; */ :recipient".to_string()),
                (1, "SELECT 2".to_string()),
            ]
        );
        assert_eq!(params("/*/ :sender */ SELECT 1"), []);
        assert_eq!(params("/**/ SELECT :test"), [Param::Test]);
    }

    #[test]
    fn an_unclosed_nested_comment_is_an_error_where_it_opens() {
        let e = error("SELECT 1;\n  /* a /* b */ c");
        assert_eq!(e.kind, SqlErrorKind::UnterminatedComment);
        assert_eq!(at(&e), (2, 2, 3));
    }

    #[test]
    fn no_parameter_inside_a_dollar_quote() {
        assert_eq!(
            params("SELECT $$ :sender; ' $$, :recipient"),
            [Param::Recipient]
        );
        assert_eq!(
            statements("DO $body$ BEGIN PERFORM 1; END $body$; SELECT 2"),
            [
                (1, "DO $body$ BEGIN PERFORM 1; END $body$".to_string()),
                (1, "SELECT 2".to_string()),
            ]
        );
    }

    #[test]
    fn a_tagged_dollar_quote_ends_only_at_its_tag() {
        assert_eq!(
            params("SELECT $fn$ $$ :sender $x$ ; $fn$, :recipient"),
            [Param::Recipient]
        );
        assert_eq!(params("SELECT $_1$ :sender $_1$, :test"), [Param::Test]);
    }

    #[test]
    fn an_unclosed_dollar_quote_is_an_error_where_it_opens() {
        let e = error("SELECT\n $fn$ body $$ ;");
        assert_eq!(
            e.kind,
            SqlErrorKind::UnterminatedDollarQuote {
                tag: "$fn$".to_string()
            }
        );
        assert_eq!(at(&e), (1, 2, 2));
        assert_eq!(
            error("SELECT $$").kind,
            SqlErrorKind::UnterminatedDollarQuote {
                tag: "$$".to_string()
            }
        );
    }

    #[test]
    fn unclosed_literals_are_errors_where_they_open() {
        let cases = [
            (
                "SELECT 1;\nSELECT 'a'';",
                SqlErrorKind::UnterminatedString,
                (2, 2, 8),
            ),
            (
                r"SELECT E'a\'",
                SqlErrorKind::UnterminatedEscapeString,
                (1, 1, 8),
            ),
            (
                "SELECT \"a\"\"",
                SqlErrorKind::UnterminatedIdentifier {
                    open: '"',
                    close: '"',
                },
                (1, 1, 8),
            ),
            (
                "SELECT `a",
                SqlErrorKind::UnterminatedIdentifier {
                    open: '`',
                    close: '`',
                },
                (1, 1, 8),
            ),
            (
                "SELECT [a",
                SqlErrorKind::UnterminatedIdentifier {
                    open: '[',
                    close: ']',
                },
                (1, 1, 8),
            ),
            (
                "SELECT 1 /* a",
                SqlErrorKind::UnterminatedComment,
                (1, 1, 10),
            ),
        ];
        for (source, kind, place) in cases {
            let e = error(source);
            assert_eq!((e.kind.clone(), at(&e)), (kind, place), "{source:?}");
        }
    }

    #[test]
    fn casts_and_assignments_are_not_parameters() {
        assert_eq!(params("SELECT x::jsonb, y :: int, z:=1"), []);
        assert_eq!(
            statements("SELECT :message::jsonb"),
            [(1, "SELECT :message::jsonb".to_string())]
        );
        assert_eq!(params("SELECT :message::jsonb -> 'a'"), [Param::Message]);
        assert_eq!(params("SELECT f(a := :test)"), [Param::Test]);
    }

    #[test]
    fn a_lone_colon_is_plain_sql() {
        assert_eq!(params("SELECT a[1 : 2], b : c, :"), []);
    }

    #[test]
    fn unknown_parameters_are_refused_with_a_suggestion() {
        let e = error("SELECT 1;\nSELECT  :sendr");
        assert_eq!(
            e.kind,
            SqlErrorKind::UnknownParameter {
                name: "sendr".to_string(),
                suggestion: Some(Param::Sender)
            }
        );
        assert_eq!(at(&e), (2, 2, 9));
        assert_eq!(
            e.to_string(),
            "statement 2, line 2, column 9: unknown parameter :sendr (did you mean :sender?)"
        );
        // Names are case-sensitive; the suggestion is not.
        assert_eq!(
            error("SELECT :Sender").kind,
            SqlErrorKind::UnknownParameter {
                name: "Sender".to_string(),
                suggestion: Some(Param::Sender)
            }
        );
        assert_eq!(
            error("SELECT :controlref").kind,
            SqlErrorKind::UnknownParameter {
                name: "controlref".to_string(),
                suggestion: Some(Param::ControlRef)
            }
        );
    }

    #[test]
    fn an_unknown_parameter_far_from_all_lists_them() {
        let e = error("SELECT :partner");
        assert_eq!(
            e.kind,
            SqlErrorKind::UnknownParameter {
                name: "partner".to_string(),
                suggestion: None
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("(the parameters are :sender, :sender_qualifier,"),
            "{text}"
        );
        assert!(text.ends_with(":message, :reapply, :standard)"), "{text}");
    }

    #[test]
    fn a_parameter_name_runs_on_through_what_sqlite_takes() {
        // SQLite would read `:senderé` and `:sender$x` as one name each: so do we, and refuse it.
        for (source, name) in [
            ("SELECT :senderé", "senderé"),
            ("SELECT :sender$x", "sender$x"),
        ] {
            assert!(
                matches!(error(source).kind, SqlErrorKind::UnknownParameter { name: n, .. } if n == name),
                "{source}"
            );
        }
    }

    #[test]
    fn a_huge_unknown_name_is_shown_cut() {
        let source = format!("SELECT :{}", "x".repeat(100_000));
        let SqlErrorKind::UnknownParameter { name, suggestion } = error(&source).kind else {
            panic!("not an unknown parameter");
        };
        assert_eq!(name, format!("{}...", "x".repeat(SHOWN)));
        assert_eq!(suggestion, None);
    }

    #[test]
    fn positional_parameters_are_refused() {
        for (source, found, column) in [
            ("SELECT ?", "?", 8),
            ("SELECT a, ?12", "?12", 11),
            ("SELECT $1", "$1", 8),
            ("SELECT 1 + $23::int", "$23", 12),
        ] {
            let e = error(source);
            assert_eq!(
                e.kind,
                SqlErrorKind::PositionalParameter {
                    found: found.to_string()
                },
                "{source}"
            );
            assert_eq!(at(&e), (1, 1, column), "{source}");
        }
        assert!(error("SELECT ?").to_string().contains("jsonb_exists(a, b)"));
        assert!(!error("SELECT $1").to_string().contains("jsonb"));
    }

    #[test]
    fn other_parameter_styles_are_refused() {
        for (source, found) in [
            ("SELECT $name", "$name"),
            ("SELECT $é", "$é"),
            ("SELECT @name", "@name"),
            ("SELECT @1", "@1"),
            ("SELECT #name", "#name"),
            ("SELECT :1", ":1"),
            ("SELECT a[1:2]", ":2"),
            ("SELECT tags <@tags", "@tags"),
        ] {
            assert_eq!(
                error(source).kind,
                SqlErrorKind::OtherParameterStyle {
                    found: found.to_string()
                },
                "{source}"
            );
        }
    }

    #[test]
    fn jsonb_question_mark_operators_are_refused_with_their_functions() {
        let e = error("SELECT d ?| array['a']");
        assert_eq!(
            e.kind,
            SqlErrorKind::QuestionMarkOperator {
                found: "?|".to_string(),
                function: "jsonb_exists_any"
            }
        );
        assert!(e.to_string().contains("write jsonb_exists_any(a, b)"));
        assert_eq!(
            error("SELECT d ?& array['a']").kind,
            SqlErrorKind::QuestionMarkOperator {
                found: "?&".to_string(),
                function: "jsonb_exists_all"
            }
        );
        assert!(matches!(
            error("SELECT d ? 'a'").kind,
            SqlErrorKind::PositionalParameter { .. }
        ));
    }

    #[test]
    fn placeholders_inside_literals_and_comments_are_fine() {
        assert_eq!(
            params("SELECT '?', \"$1\", '@x', E'#y', $$ ?| $$ -- ?\n /* $2 */, :test"),
            [Param::Test]
        );
    }

    #[test]
    fn operators_with_at_and_hash_are_fine() {
        assert_eq!(
            params(
                "SELECT a @> b, a <@ b, t @@ q, t @@to_tsquery('x'), @-@ p, @ -1, j #> '{a}', j #>> '{a}', j #- '{a}', a ## b, :test"
            ),
            [Param::Test]
        );
    }

    #[test]
    fn dollar_signs_inside_names_are_not_parameters() {
        assert_eq!(
            statements("SELECT a$b, a$1, x$$ FROM t$"),
            [(1, "SELECT a$b, a$1, x$$ FROM t$".to_string())]
        );
        // A lone dollar sign is plain SQL (an error for the engine, not a placeholder).
        assert_eq!(params("SELECT $ , $"), []);
    }

    #[test]
    fn signs_at_the_end_of_the_text() {
        for source in [
            "SELECT E", "SELECT $", "SELECT :", "SELECT @", "SELECT #", "SELECT -", "SELECT /",
        ] {
            assert_eq!(statements(source).len(), 1, "{source}");
        }
    }

    #[test]
    fn columns_count_characters() {
        let e = error("SELECT 'é', 'ü', :sendr");
        assert_eq!(at(&e), (1, 1, 18));
        let e = error("-- ééé\nSELECT 'ö' || ?");
        assert_eq!(at(&e), (1, 2, 15));
    }

    #[test]
    fn errors_name_the_statement_they_are_in() {
        let e = error("SELECT 1;\n;\n-- c\nSELECT 2; SELECT ?");
        assert_eq!(at(&e), (3, 4, 18));
        // An error before a statement's first token counts for the statement to come.
        let e = error("SELECT 1; /* never closed");
        assert_eq!(at(&e), (2, 1, 11));
    }

    #[test]
    fn a_long_line_of_parameters_is_placed_in_linear_time() {
        // 300,000 parameters on one line of 1.8 MB: counted from the line's start for each
        // parameter, their columns took some 10 s (hundreds of billions of characters counted);
        // counted on from the last, a few hundred milliseconds in a debug build.
        let source = format!("SELECT é{}", "+:test".repeat(300_000));
        let started = std::time::Instant::now();
        let s = split(&source).expect("splits");
        let took = started.elapsed();
        assert_eq!(s[0].params_at.len(), 300_000);
        assert_eq!(s[0].params_at[0], (1, 10));
        assert_eq!(s[0].params_at[299_999], (1, 10 + 299_999 * 6));
        assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn columns_after_a_parameter_on_later_lines() {
        let s = split(
            "SELECT :test,
  :reapply, :test;
SELECT :sender",
        )
        .expect("splits");
        assert_eq!(s[0].params_at, [(1, 8), (2, 3), (2, 13)]);
        assert_eq!(s[1].params_at, [(3, 8)]);
        let e = error("SELECT :test, ?");
        assert_eq!(at(&e), (1, 1, 15));
    }

    #[test]
    fn names_in_other_scripts_are_names() {
        assert_eq!(params("SELECT größe, :sender FROM straße"), [Param::Sender]);
    }

    #[test]
    fn the_closest_name_within_two_edits() {
        assert_eq!(closest("sendr"), Some(Param::Sender));
        assert_eq!(closest("recipent"), Some(Param::Recipient));
        assert_eq!(closest("messagetype"), Some(Param::MessageType));
        assert_eq!(closest("sha265"), Some(Param::Sha256));
        assert_eq!(closest("xyz"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("é", "e"), 1);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Mostly the signs the lexer cares about, so that the odd cases meet.
        const TOKENS: &[&str] = &[
            "'", "''", "\"", "`", "[", "]", "E'", "\\", "$$", "$a$", "$", "$1", ":sender",
            ":message", "::", ":=", ":", "--", "/*", "*/", "\n", ";", " ", "x", "é", "@>", "#>",
            "1", "(", ")", "@", "#", "-", "/", "*", "?", "e",
        ];

        fn sqlish() -> impl Strategy<Value = String> {
            proptest::collection::vec(proptest::sample::select(TOKENS), 0..40)
                .prop_map(|v| v.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]

            /// Never a panic; and a statement's own text, split again, is that statement.
            #[test]
            fn a_statement_splits_again_into_itself(source in sqlish()) {
                if let Ok(splits) = split(&source) {
                    for s in splits {
                        prop_assert!(!s.pieces.is_empty());
                        prop_assert!(!s.pieces.contains(&Piece::Sql(String::new())));
                        let params = s.pieces.iter().filter(|p| matches!(p, Piece::Param(_)));
                        prop_assert_eq!(params.count(), s.params_at.len());
                        let text = text(&s.pieces);
                        prop_assert!(source.contains(&text));
                        prop_assert_eq!(text.trim_matches(|c: char| c == ' ' || c == '\n'), &text);
                        let again = split(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
                        prop_assert_eq!(again.len(), 1, "{:?}", text);
                        prop_assert_eq!(&again[0].pieces, &s.pieces);
                    }
                }
            }

            #[test]
            fn any_text_neither_panics_nor_points_outside(source in any::<String>()) {
                match split(&source) {
                    Ok(splits) => for s in splits {
                        prop_assert!(s.line >= 1 && s.line <= source.lines().count().max(1));
                    },
                    Err(e) => {
                        prop_assert!(e.line >= 1 && e.column >= 1);
                        let _ = e.to_string();
                    }
                }
            }
        }
    }
}
