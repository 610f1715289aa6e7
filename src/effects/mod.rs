//! Side effects the operator declares as SQL, run inside the inbox's decision transaction
//! (`--effects DIR`): the folder, read and checked once at start-up, and what it holds.
//!
//! The folder:
//! - `TYPE.sql`: the statements run for each new message of that type (0065), such as
//!   `INVOIC.sql`; `TYPE.VERSION.RELEASE.sql` (0052, 0054), such as `INVOIC.D.96A.sql`, is
//!   run instead of it for that version and release;
//! - `_interchange.sql`: run once for each new interchange, before its messages' files;
//! - `migrations/NNNN_name.sql`: the operator's schema, each applied once, by number;
//! - names beginning with `.` (editors' files, `.git`), and `*.md` and `*.txt` files, are let
//!   be. Anything else is an error: a misspelt name would otherwise never run.
//!
//! A mapping file holds one or more statements (see [`sql`] for how they are split), and must
//! hold at least one. Values reach them only as bound parameters, `:sender` and the others of
//! [`Param`]; a message's own (see [`Param::per_message`]) are refused in `_interchange.sql`.
//! Migrations are run as written, not split and without parameters.
//!
//! Pure: nothing here opens a database; the backends prepare and run what [`Effects`] holds.

pub mod sql;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A value an effects statement may take, written `:name` in it; the same names on every
/// backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Param {
    /// Interchange sender identification (0004).
    Sender,
    /// Its identification code qualifier (0007).
    SenderQualifier,
    /// Interchange recipient identification (0010).
    Recipient,
    /// Its identification code qualifier (0007).
    RecipientQualifier,
    /// Interchange control reference (0020).
    ControlRef,
    /// The inbox's id of the interchange.
    InterchangeId,
    /// The inbox's id of the message.
    MessageId,
    /// Message reference number (0062).
    MessageRef,
    /// Message type (0065).
    MessageType,
    /// Message version number (0052).
    MessageVersion,
    /// Message release number (0054).
    MessageRelease,
    /// Controlling agency (0051).
    Agency,
    /// Association assigned code (0057).
    AssociationCode,
    /// Group reference number (0048), where the message stands in a group.
    GroupRef,
    /// Test indicator (0035).
    Test,
    /// When the inbox received the interchange.
    ReceivedAt,
    /// Where the interchange came from.
    Source,
    /// The interchange's SHA-256.
    Sha256,
    /// The message's segments as JSON.
    Message,
    /// 1 when the effects are run again over the inbox's history, else 0.
    Reapply,
    /// The standard the interchange is in (`edifact`, `x12`): part of its key.
    Standard,
}

impl Param {
    pub const ALL: [Param; 21] = [
        Param::Sender,
        Param::SenderQualifier,
        Param::Recipient,
        Param::RecipientQualifier,
        Param::ControlRef,
        Param::InterchangeId,
        Param::MessageId,
        Param::MessageRef,
        Param::MessageType,
        Param::MessageVersion,
        Param::MessageRelease,
        Param::Agency,
        Param::AssociationCode,
        Param::GroupRef,
        Param::Test,
        Param::ReceivedAt,
        Param::Source,
        Param::Sha256,
        Param::Message,
        Param::Reapply,
        Param::Standard,
    ];

    /// Its name as written after the colon: `sender` for `:sender`.
    pub fn name(self) -> &'static str {
        match self {
            Param::Sender => "sender",
            Param::SenderQualifier => "sender_qualifier",
            Param::Recipient => "recipient",
            Param::RecipientQualifier => "recipient_qualifier",
            Param::ControlRef => "control_ref",
            Param::InterchangeId => "interchange_id",
            Param::MessageId => "message_id",
            Param::MessageRef => "message_ref",
            Param::MessageType => "message_type",
            Param::MessageVersion => "message_version",
            Param::MessageRelease => "message_release",
            Param::Agency => "agency",
            Param::AssociationCode => "association_code",
            Param::GroupRef => "group_ref",
            Param::Test => "test",
            Param::ReceivedAt => "received_at",
            Param::Source => "source",
            Param::Sha256 => "sha256",
            Param::Message => "message",
            Param::Reapply => "reapply",
            Param::Standard => "standard",
        }
    }

    /// The parameter of that name (without the colon), exactly as [`Param::name`] spells it.
    pub fn from_name(name: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether it is a message's value: `_interchange.sql` runs once for the interchange,
    /// where there is no message to take it from.
    pub fn per_message(self) -> bool {
        (Param::MessageId..=Param::GroupRef).contains(&self) || self == Param::Message
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ":{}", self.name())
    }
}

/// A part of a statement: its own text, or a parameter to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Sql(String),
    Param(Param),
}

/// One statement of a mapping file.
#[derive(Debug, Clone)]
pub struct Statement {
    /// The file's name in the folder, such as `INVOIC.sql` or `_interchange.sql`.
    pub file: String,
    /// Its 1-based number in the file.
    pub index: usize,
    /// The 1-based line where it starts (its first character outside blanks and comments).
    pub line: usize,
    pub pieces: Vec<Piece>,
}

impl Statement {
    /// Its parameters in the order they appear, each as often as it appears.
    pub fn params(&self) -> impl Iterator<Item = Param> + '_ {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Param(p) => Some(*p),
            Piece::Sql(_) => None,
        })
    }

    /// True where each `:message` it holds is the whole argument of `message_segments`
    /// (`message_segments(:message)`, the name in any case, blanks around the argument): then
    /// the message is only read segment by segment, and SQLite's table can serve it without
    /// the message's JSON being written. Anything else (a comment inside the parentheses, a
    /// qualified or quoted name, `:message` in an expression) counts as reading it whole.
    pub fn reads_message_only_by_segments(&self) -> bool {
        const NAME: &[u8] = b"message_segments";
        let opens = |before: Option<&Piece>| {
            let Some(Piece::Sql(sql)) = before else {
                return false;
            };
            let Some(call) = sql.trim_end().strip_suffix('(') else {
                return false;
            };
            // A line comment ending in `message_segments(` is no call: a line holding `--` at
            // all counts as reading the message whole (a `--` in a string too, which only
            // costs the JSON).
            let call = call.trim_end();
            if call
                .rsplit('\n')
                .next()
                .is_some_and(|line| line.contains("--"))
            {
                return false;
            }
            let call = call.as_bytes();
            call.len() >= NAME.len()
                && call[call.len() - NAME.len()..].eq_ignore_ascii_case(NAME)
                && call[..call.len() - NAME.len()].last().is_none_or(|&b| {
                    !(b.is_ascii_alphanumeric() || !b.is_ascii() || b"_.\"$`]".contains(&b))
                })
        };
        let closes = |after: Option<&Piece>| matches!(after, Some(Piece::Sql(sql)) if sql.trim_start().starts_with(')'));
        self.pieces.iter().enumerate().all(|(k, piece)| {
            *piece != Piece::Param(Param::Message)
                || (opens(k.checked_sub(1).and_then(|b| self.pieces.get(b)))
                    && closes(self.pieces.get(k + 1)))
        })
    }

    /// Its SQL with each parameter written as `placeholder` says: `?1` for SQLite, `$1` for
    /// PostgreSQL.
    pub fn render(&self, mut placeholder: impl FnMut(Param) -> String) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Sql(sql) => out.push_str(sql),
                Piece::Param(p) => out.push_str(&placeholder(*p)),
            }
        }
        out
    }

    /// Its SQL as written, each parameter as `:name`.
    pub fn text(&self) -> String {
        self.render(|p| p.to_string())
    }

    /// Where it is, for messages: `INVOIC.sql statement 2 (line 7)`.
    pub fn place(&self) -> String {
        format!(
            "{} statement {} (line {})",
            self.file, self.index, self.line
        )
    }
}

/// A mapping file: `_interchange.sql` or a message type's.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub file: String,
    pub statements: Vec<Statement>,
    /// The SHA-256 of the file's bytes, in lower-case hex.
    pub sha256: String,
    /// Whether a statement uses `:message`: its JSON or segments are made only then.
    pub uses_message: bool,
    /// Whether every statement reads `:message` only as `message_segments(:message)`
    /// ([`Statement::reads_message_only_by_segments`]). Both are known once, at load: the side
    /// effects ask for every message.
    pub message_only_by_segments: bool,
}

/// One of the operator's migrations, `migrations/NNNN_name.sql`.
#[derive(Debug, Clone)]
pub struct Migration {
    pub number: u32,
    /// Its name in `migrations/`, such as `0001_invoices.sql`.
    pub file: String,
    /// Its text, run as written (a byte order mark left out).
    pub sql: String,
    /// The SHA-256 of the file's bytes, in lower-case hex.
    pub sha256: String,
}

/// What an effects folder holds, read and checked.
#[derive(Debug, Clone)]
pub struct Effects {
    pub dir: PathBuf,
    pub interchange: Option<Mapping>,
    /// Each message type's mapping by its key: `INVOIC`, or `INVOIC.D.96A` for a version and
    /// release.
    pub by_type: BTreeMap<String, Mapping>,
    /// In the order of their numbers.
    pub migrations: Vec<Migration>,
    /// Recorded for every message applied, so made once:
    /// [`Effects::checksum_for`] of each message type's mapping, by its file and SHA-256.
    checksums: BTreeMap<(String, String), String>,
}

/// The largest file the folder may hold: effects are statements, not data.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The folder holding the migrations.
const MIGRATIONS: &str = "migrations";

/// The file run once per interchange.
const INTERCHANGE: &str = "_interchange.sql";

/// Why an effects folder cannot be used: each names the file (by its name in the folder) and
/// says what to change.
#[derive(Debug, thiserror::Error)]
pub enum EffectsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the effects folder is not a folder", path.display())]
    NotAFolder { path: PathBuf },
    #[error("{file}: {reason}")]
    BadFileName { file: String, reason: String },
    #[error("{file}: {size} bytes, larger than the {max} an effects file may be")]
    TooLarge { file: String, size: u64, max: u64 },
    #[error("{file}: line {line}, column {column}: not UTF-8 text")]
    NotUtf8 {
        file: String,
        line: usize,
        column: usize,
    },
    #[error(
        "{file}: holds no statement (only blanks and comments); remove it if nothing is to run"
    )]
    Empty { file: String },
    #[error("{file} statement {statement}, line {line}, column {column}: {kind}")]
    Sql {
        file: String,
        statement: usize,
        line: usize,
        column: usize,
        kind: sql::SqlErrorKind,
    },
    #[error(
        "{file} statement {statement}, line {line}, column {column}: {param} is a message's, and \
         {file} runs once per interchange, before its messages: use it in a message type's file, \
         such as INVOIC.sql"
    )]
    PerMessageInInterchange {
        file: String,
        statement: usize,
        line: usize,
        column: usize,
        param: Param,
    },
    #[error("{file}: {reason}")]
    BadMigrationName { file: String, reason: String },
    #[error("{first} and {second}: both are migration {number}; give each its own number")]
    DuplicateMigrationNumber {
        number: u32,
        first: String,
        second: String,
    },
}

impl Effects {
    /// Reads and checks the folder: every mapping file split into statements, every parameter
    /// known, every migration numbered once. The first fault found (in the order of the
    /// files' names) is the error.
    pub fn load(dir: &Path) -> Result<Effects, EffectsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EffectsError::Io { path, source }
        };
        if !std::fs::metadata(dir).map_err(io(dir))?.is_dir() {
            return Err(EffectsError::NotAFolder {
                path: dir.to_path_buf(),
            });
        }
        let mut effects = Effects {
            dir: dir.to_path_buf(),
            interchange: None,
            by_type: BTreeMap::new(),
            migrations: Vec::new(),
            checksums: BTreeMap::new(),
        };
        for (name, path) in entries(dir, "")? {
            if std::fs::metadata(&path).map_err(io(&path))?.is_dir() {
                if name != MIGRATIONS {
                    return Err(EffectsError::BadFileName {
                        file: name,
                        reason: format!(
                            "a folder; the only folder an effects folder holds is {MIGRATIONS}/"
                        ),
                    });
                }
                effects.migrations = migrations(&path)?;
                continue;
            }
            let Some(kind) = FileKind::of(&name)? else {
                continue;
            };
            let (bytes, text) = read(&path, &name)?;
            match kind {
                FileKind::Interchange => {
                    effects.interchange = Some(mapping(&name, &bytes, &text, true)?);
                }
                FileKind::Type(key) => {
                    let mapping = mapping(&name, &bytes, &text, false)?;
                    effects.by_type.insert(key, mapping);
                }
            }
        }
        effects.checksums = effects
            .by_type
            .values()
            .map(|m| {
                let key = (m.file.clone(), m.sha256.clone());
                (key, effects.checksum_of(Some(m)))
            })
            .collect();
        Ok(effects)
    }

    /// The mapping for a message: `TYPE.VERSION.RELEASE` if the folder has it, else `TYPE`,
    /// else none.
    pub fn for_message(
        &self,
        message_type: &str,
        version: &str,
        release: &str,
    ) -> Option<&Mapping> {
        // A key for the version and release is made only where the type has one: this runs
        // for every new message, of every type.
        let versioned = self
            .by_type
            .range::<str, _>((
                std::ops::Bound::Excluded(message_type),
                std::ops::Bound::Unbounded,
            ))
            .map_while(|(k, _)| k.strip_prefix(message_type))
            .any(|rest| rest.starts_with('.'));
        versioned
            .then(|| {
                self.by_type
                    .get(&format!("{message_type}.{version}.{release}"))
            })
            .flatten()
            .or_else(|| self.by_type.get(message_type))
    }

    /// Every statement of every mapping: `_interchange.sql`'s first, then by key.
    pub fn statements(&self) -> impl Iterator<Item = &Statement> {
        self.interchange
            .iter()
            .chain(self.by_type.values())
            .flat_map(|m| m.statements.iter())
    }

    /// The checksum recorded for a message the effects were applied to, so that a later change
    /// of the files shows: the SHA-256, in lower-case hex, of `_interchange.sql`'s SHA-256
    /// (hex, or empty without the file), a line feed, and the message's mapping's SHA-256 (hex,
    /// or empty without one).
    pub fn checksum_for(&self, mapping: Option<&Mapping>) -> String {
        let key = mapping.map(|m| (m.file.clone(), m.sha256.clone()));
        match key.and_then(|k| self.checksums.get(&k)) {
            Some(known) => known.clone(),
            None => self.checksum_of(mapping),
        }
    }

    fn checksum_of(&self, mapping: Option<&Mapping>) -> String {
        let interchange = self.interchange.as_ref().map_or("", |m| m.sha256.as_str());
        let message = mapping.map_or("", |m| m.sha256.as_str());
        sha256_hex(format!("{interchange}\n{message}").as_bytes())
    }

    /// Whether nothing would ever run: neither `_interchange.sql` nor a message type's file.
    pub fn is_empty(&self) -> bool {
        self.interchange.is_none() && self.by_type.is_empty()
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What a file at the top of the folder is.
#[derive(Debug, PartialEq, Eq)]
enum FileKind {
    Interchange,
    /// A message type's, with its key in [`Effects::by_type`].
    Type(String),
}

impl FileKind {
    /// What the file named `name` is: none for one to let be, an error for one that has no
    /// place in the folder.
    fn of(name: &str) -> Result<Option<FileKind>, EffectsError> {
        let bad = |reason: String| EffectsError::BadFileName {
            file: name.to_string(),
            reason,
        };
        if is_let_be(name) {
            return Ok(None);
        }
        if name == INTERCHANGE {
            return Ok(Some(FileKind::Interchange));
        }
        let Some(stem) = name.strip_suffix(".sql") else {
            let reason = match name.rsplit_once('.') {
                Some((_, ext)) if ext.eq_ignore_ascii_case("sql") => {
                    "the extension is written .sql, in lower case".to_string()
                }
                _ => "not an effects file: they are named TYPE.sql or TYPE.VERSION.RELEASE.sql \
                      (INVOIC.sql, INVOIC.D.96A.sql), _interchange.sql, or hold notes (*.md, \
                      *.txt)"
                    .to_string(),
            };
            return Err(bad(reason));
        };
        if stem.starts_with('_') {
            return Err(bad(format!(
                "the only file whose name begins with _ is {INTERCHANGE}"
            )));
        }
        let parts: Vec<&str> = stem.split('.').collect();
        let [message_type, rest @ ..] = parts.as_slice() else {
            return Err(bad("has no message type before .sql".to_string()));
        };
        code(message_type, 6, "message type (0065)").map_err(bad)?;
        match rest {
            [] => {}
            [version, release] => {
                code(version, 3, "message version number (0052)").map_err(bad)?;
                code(release, 3, "message release number (0054)").map_err(bad)?;
            }
            _ => {
                return Err(bad(format!(
                    "name the message type alone ({message_type}.sql) or with its version and \
                     release both ({message_type}.D.96A.sql)"
                )));
            }
        }
        Ok(Some(FileKind::Type(stem.to_string())))
    }
}

/// Whether a name at the top of the folder or in `migrations/` is let be: hidden ones
/// (editors' swap files, `.git`) and notes.
fn is_let_be(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".md") || name.ends_with(".txt")
}

/// Checks one part of a mapping file's name: up to `max` upper-case letters and digits, as
/// the message header writes them.
fn code(part: &str, max: usize, what: &str) -> Result<(), String> {
    if part.is_empty() {
        return Err(format!("the {what} is missing from the name"));
    }
    if part.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "the {what} {part} is written in upper case, as in the message header: {}",
            part.to_ascii_uppercase()
        ));
    }
    if part.len() > max
        || !part
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Err(format!(
            "the {what} {part} is not up to {max} upper-case letters and digits"
        ));
    }
    Ok(())
}

/// A folder's entries, hidden ones left out, as `(name relative to the effects folder, path)`,
/// sorted by name so that the first fault is the same on every host.
fn entries(dir: &Path, prefix: &str) -> Result<Vec<(String, PathBuf)>, EffectsError> {
    let io = |source| EffectsError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(EffectsError::BadFileName {
                file: format!("{prefix}{}", name.to_string_lossy()),
                reason: "the name is not UTF-8".to_string(),
            });
        };
        if !name.starts_with('.') {
            out.push((format!("{prefix}{name}"), entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a file of at most [`MAX_FILE_BYTES`]: its bytes, and its text without a byte order
/// mark (editors on Windows write one; neither engine takes it).
fn read(path: &Path, file: &str) -> Result<(Vec<u8>, String), EffectsError> {
    let io = |source| EffectsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    // One byte more than allowed tells a file too large, even one that grows while read.
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        let size = std::fs::metadata(path).map_err(io)?.len();
        return Err(EffectsError::TooLarge {
            file: file.to_string(),
            size: size.max(MAX_FILE_BYTES + 1),
            max: MAX_FILE_BYTES,
        });
    }
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text.strip_prefix('\u{FEFF}').unwrap_or(text).to_string(),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            // `good` is valid UTF-8 up to its end, so this slice of it is too.
            let column = std::str::from_utf8(&good[line_start..]).map_or(0, |s| s.chars().count());
            return Err(EffectsError::NotUtf8 {
                file: file.to_string(),
                line,
                column: column + 1,
            });
        }
    };
    Ok((bytes, text))
}

/// A mapping file, split and checked; `_interchange.sql` (`interchange`) takes no message's
/// parameter.
fn mapping(
    file: &str,
    bytes: &[u8],
    text: &str,
    interchange: bool,
) -> Result<Mapping, EffectsError> {
    let splits = sql::split(text).map_err(|e| EffectsError::Sql {
        file: file.to_string(),
        statement: e.statement,
        line: e.line,
        column: e.column,
        kind: e.kind,
    })?;
    if splits.is_empty() {
        return Err(EffectsError::Empty {
            file: file.to_string(),
        });
    }
    let mut statements = Vec::with_capacity(splits.len());
    for (i, split) in splits.into_iter().enumerate() {
        let statement = Statement {
            file: file.to_string(),
            index: i + 1,
            line: split.line,
            pieces: split.pieces,
        };
        if interchange {
            let found = statement
                .params()
                .zip(&split.params_at)
                .find(|(p, _)| p.per_message());
            if let Some((param, &(line, column))) = found {
                return Err(EffectsError::PerMessageInInterchange {
                    file: file.to_string(),
                    statement: statement.index,
                    line,
                    column,
                    param,
                });
            }
        }
        statements.push(statement);
    }
    Ok(Mapping {
        file: file.to_string(),
        uses_message: statements
            .iter()
            .any(|s| s.params().any(|p| p == Param::Message)),
        message_only_by_segments: statements
            .iter()
            .all(Statement::reads_message_only_by_segments),
        statements,
        sha256: sha256_hex(bytes),
    })
}

/// The migrations in `dir`, sorted by number.
fn migrations(dir: &Path) -> Result<Vec<Migration>, EffectsError> {
    let prefix = format!("{MIGRATIONS}/");
    let mut out: Vec<Migration> = Vec::new();
    for (file, path) in entries(dir, &prefix)? {
        let name = &file[prefix.len()..];
        if is_let_be(name) {
            continue;
        }
        let bad = |reason: &str| EffectsError::BadMigrationName {
            file: file.clone(),
            reason: reason.to_string(),
        };
        if std::fs::metadata(&path)
            .map_err(|source| EffectsError::Io {
                path: path.clone(),
                source,
            })?
            .is_dir()
        {
            return Err(bad("a folder; migrations/ holds files only"));
        }
        let number = migration_number(name).map_err(bad)?;
        let (bytes, sql) = read(&path, &file)?;
        if let Some(first) = out.iter().find(|m| m.number == number) {
            return Err(EffectsError::DuplicateMigrationNumber {
                number,
                first: format!("{prefix}{}", first.file),
                second: file,
            });
        }
        out.push(Migration {
            number,
            file: name.to_string(),
            sql,
            sha256: sha256_hex(&bytes),
        });
    }
    out.sort_by_key(|m| m.number);
    Ok(out)
}

/// The number of a migration named `NNNN_name.sql`.
fn migration_number(name: &str) -> Result<u32, &'static str> {
    const FORM: &str =
        "a migration is named NNNN_name.sql: its number, _, a name of letters, digits, _ and -";
    let stem = name.strip_suffix(".sql").ok_or(FORM)?;
    let (digits, rest) = stem.split_once('_').ok_or(FORM)?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || rest.is_empty()
        || !rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(FORM);
    }
    digits
        .parse()
        .map_err(|_| "the migration's number is larger than 4294967295")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder holding `files` (`name`, text); a name with a `/` makes its folder first.
    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary folder");
        for (name, text) in files {
            let path = dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("a folder");
            }
            std::fs::write(path, text).expect("a file");
        }
        dir
    }

    fn load(files: &[(&str, &str)]) -> Result<Effects, EffectsError> {
        Effects::load(folder(files).path())
    }

    fn loaded(files: &[(&str, &str)]) -> Effects {
        load(files).unwrap_or_else(|e| panic!("{e}"))
    }

    fn refused(files: &[(&str, &str)]) -> EffectsError {
        match load(files) {
            Ok(e) => panic!("loaded {e:?}"),
            Err(e) => e,
        }
    }

    /// A mapping's statements as written.
    fn texts(mapping: &Mapping) -> Vec<String> {
        mapping.statements.iter().map(Statement::text).collect()
    }

    #[test]
    fn names_are_unique_and_read_back() {
        let mut names: Vec<&str> = Param::ALL.iter().map(|p| p.name()).collect();
        for p in Param::ALL {
            assert_eq!(Param::from_name(p.name()), Some(p));
            assert_eq!(p.to_string(), format!(":{}", p.name()));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Param::ALL.len());
        assert_eq!(Param::from_name("Sender"), None);
        assert_eq!(Param::from_name(":sender"), None);
        assert_eq!(Param::from_name(""), None);
    }

    #[test]
    fn all_is_in_declaration_order() {
        assert!(Param::ALL.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_per_message_parameters() {
        let per_message: Vec<&str> = Param::ALL
            .into_iter()
            .filter(|p| p.per_message())
            .map(Param::name)
            .collect();
        assert_eq!(
            per_message.join(" "),
            "message_id message_ref message_type message_version message_release agency \
             association_code group_ref message"
        );
    }

    fn statement(source: &str) -> Statement {
        let effects = loaded(&[("INVOIC.sql", source)]);
        let mut statements = effects.by_type["INVOIC"].statements.clone();
        statements.remove(0)
    }

    #[test]
    fn a_message_read_only_through_message_segments_is_told_apart() {
        let only = |sql: &str| statement(sql).reads_message_only_by_segments();
        // No :message at all: nothing is read whole.
        assert!(only("INSERT INTO t VALUES (:sender)"));
        assert!(only(
            "INSERT INTO t SELECT segment FROM message_segments(:message) WHERE tag = 'BGM'"
        ));
        assert!(only(
            "INSERT INTO t SELECT (SELECT n FROM Message_Segments ( :message\n) AS s), \
             (SELECT n FROM message_segments(:message) WHERE tag = 'UNS')"
        ));
        // Read whole somewhere: a path, a JSON function, a value, or another table's argument.
        assert!(!only(
            "INSERT INTO t SELECT :message -> 1 FROM message_segments(:message)"
        ));
        assert!(!only("INSERT INTO t SELECT value FROM json_each(:message)"));
        assert!(!only("INSERT INTO t VALUES (:message)"));
        assert!(!only(
            "INSERT INTO t SELECT n FROM my_message_segments(:message)"
        ));
        assert!(!only(
            "INSERT INTO t SELECT n FROM main.message_segments(:message)"
        ));
        assert!(!only(
            "INSERT INTO t SELECT n FROM message_segments(:message || '')"
        ));
        assert!(!only(
            "INSERT INTO t SELECT n FROM message_segments(/* here */ :message)"
        ));
        // A line comment that ends as the call would: the message is a value here.
        assert!(!only(
            "INSERT INTO t (body) VALUES ( -- keep it, not message_segments(\n :message)"
        ));
        assert!(!only(
            "INSERT INTO t SELECT n FROM émessage_segments(:message)"
        ));
        // A comment on an earlier line is no matter.
        assert!(only(
            "INSERT INTO t -- the BGM\nSELECT n FROM message_segments(:message) WHERE tag = 'BGM'"
        ));
    }

    #[test]
    fn render_numbers_placeholders_as_the_backend_says() {
        let s = statement("INSERT INTO t VALUES (:sender, :recipient, :sender, :message::jsonb)");
        assert_eq!(
            s.params().collect::<Vec<_>>(),
            [
                Param::Sender,
                Param::Recipient,
                Param::Sender,
                Param::Message
            ]
        );
        // SQLite: one number per distinct parameter, reused.
        let mut order: Vec<Param> = Vec::new();
        let sqlite = s.render(|p| {
            let i = order.iter().position(|&q| q == p).unwrap_or_else(|| {
                order.push(p);
                order.len() - 1
            });
            format!("?{}", i + 1)
        });
        assert_eq!(sqlite, "INSERT INTO t VALUES (?1, ?2, ?1, ?3::jsonb)");
        // PostgreSQL: each parameter cast to text.
        let pg = s.render(|p| format!("${}::text", p as usize + 1));
        assert_eq!(
            pg,
            "INSERT INTO t VALUES ($1::text, $3::text, $1::text, $19::text::jsonb)"
        );
        assert_eq!(
            s.text(),
            "INSERT INTO t VALUES (:sender, :recipient, :sender, :message::jsonb)"
        );
    }

    #[test]
    fn a_statement_knows_its_place() {
        let effects = loaded(&[("INVOIC.sql", "SELECT 1;\n\n-- two\nSELECT 2 ;\n")]);
        let m = &effects.by_type["INVOIC"];
        assert_eq!(m.file, "INVOIC.sql");
        let s = &m.statements[1];
        assert_eq!((s.file.as_str(), s.index, s.line), ("INVOIC.sql", 2, 4));
        assert_eq!(s.place(), "INVOIC.sql statement 2 (line 4)");
        assert_eq!(texts(m), ["SELECT 1", "SELECT 2"]);
    }

    #[test]
    fn the_most_specific_file_wins() {
        let effects = loaded(&[
            ("INVOIC.sql", "SELECT 'any invoice'"),
            ("INVOIC.D.96A.sql", "SELECT 'D.96A'"),
            ("ORDERS.D.01B.sql", "SELECT 'orders D.01B'"),
        ]);
        let file = |t, v, r| effects.for_message(t, v, r).map(|m| m.file.as_str());
        assert_eq!(file("INVOIC", "D", "96A"), Some("INVOIC.D.96A.sql"));
        assert_eq!(file("INVOIC", "D", "01B"), Some("INVOIC.sql"));
        assert_eq!(file("ORDERS", "D", "01B"), Some("ORDERS.D.01B.sql"));
        assert_eq!(file("ORDERS", "D", "96A"), None);
        assert_eq!(file("DESADV", "D", "96A"), None);
        // Exact: the header's values as they are.
        assert_eq!(file("invoic", "D", "96A"), None);
        assert_eq!(file("INVOIC", "d", "96a"), Some("INVOIC.sql"));
        // No value with a dot in it finds a file of another's.
        assert_eq!(file("INVOIC.D", "96A", ""), None);
        assert_eq!(
            effects.by_type.keys().collect::<Vec<_>>(),
            ["INVOIC", "INVOIC.D.96A", "ORDERS.D.01B"]
        );
    }

    #[test]
    fn statements_come_interchange_first_then_by_key() {
        let effects = loaded(&[
            ("ORDERS.sql", "SELECT 'orders'"),
            ("INVOIC.sql", "SELECT 'invoic 1'; SELECT 'invoic 2'"),
            ("_interchange.sql", "SELECT :sender"),
        ]);
        let all: Vec<String> = effects.statements().map(Statement::text).collect();
        assert_eq!(
            all,
            [
                "SELECT :sender",
                "SELECT 'invoic 1'",
                "SELECT 'invoic 2'",
                "SELECT 'orders'"
            ]
        );
        assert_eq!(
            effects.interchange.as_ref().map(|m| m.file.as_str()),
            Some("_interchange.sql")
        );
        assert!(!effects.is_empty());
    }

    #[test]
    fn a_folder_with_only_migrations_runs_nothing() {
        let effects = loaded(&[
            ("migrations/0001_t.sql", "CREATE TABLE t (x)"),
            ("README.md", "notes"),
        ]);
        assert!(effects.is_empty());
        assert_eq!(effects.migrations.len(), 1);
        assert!(loaded(&[]).is_empty());
        assert!(!loaded(&[("_interchange.sql", "SELECT 1")]).is_empty());
    }

    #[test]
    fn the_checksum_joins_both_files_hashes() {
        let effects = loaded(&[("_interchange.sql", "SELECT 1"), ("INVOIC.sql", "SELECT 2")]);
        let interchange = sha256_hex(b"SELECT 1");
        let invoic = sha256_hex(b"SELECT 2");
        assert_eq!(
            effects.interchange.as_ref().map(|m| &m.sha256),
            Some(&interchange)
        );
        let mapping = effects.for_message("INVOIC", "D", "96A");
        assert_eq!(mapping.map(|m| &m.sha256), Some(&invoic));
        assert_eq!(
            effects.checksum_for(mapping),
            sha256_hex(format!("{interchange}\n{invoic}").as_bytes())
        );
        assert_eq!(
            effects.checksum_for(None),
            sha256_hex(format!("{interchange}\n").as_bytes())
        );
        // Known values, so that a change of the recipe shows.
        assert_eq!(
            sha256_hex(b"SELECT 1"),
            "e004ebd5b5532a4b85984a62f8ad48a81aa3460c1ca07701f386135d72cdecf5"
        );
        let none = loaded(&[("INVOIC.sql", "SELECT 2")]);
        assert_eq!(
            none.checksum_for(none.for_message("INVOIC", "D", "96A")),
            sha256_hex(format!("\n{invoic}").as_bytes())
        );
        assert_eq!(none.checksum_for(None), sha256_hex(b"\n"));
    }

    #[test]
    fn a_byte_order_mark_is_hashed_but_not_run() {
        let effects = loaded(&[
            ("INVOIC.sql", "\u{FEFF}SELECT :sender"),
            ("migrations/0001_a.sql", "\u{FEFF}CREATE TABLE a (x)"),
        ]);
        let m = &effects.by_type["INVOIC"];
        assert_eq!(texts(m), ["SELECT :sender"]);
        assert_eq!(m.sha256, sha256_hex("\u{FEFF}SELECT :sender".as_bytes()));
        assert_eq!(effects.migrations[0].sql, "CREATE TABLE a (x)");
        // Columns on the first line count from after it.
        let e = refused(&[("INVOIC.sql", "\u{FEFF}SELECT ?")]);
        assert_eq!(
            e.to_string().split(':').next(),
            Some("INVOIC.sql statement 1, line 1, column 8")
        );
    }

    #[test]
    fn sql_errors_name_the_file_statement_line_and_column() {
        let e = refused(&[("ORDERS.sql", "SELECT 1;\nINSERT INTO t VALUES (:sendr)")]);
        assert!(matches!(
            &e,
            EffectsError::Sql { file, statement: 2, line: 2, column: 23, .. } if file == "ORDERS.sql"
        ));
        assert_eq!(
            e.to_string(),
            "ORDERS.sql statement 2, line 2, column 23: unknown parameter :sendr (did you mean :sender?)"
        );
        let e = refused(&[("_interchange.sql", "SELECT '")]);
        assert_eq!(
            e.to_string(),
            "_interchange.sql statement 1, line 1, column 8: a string opened here with ' is never \
             closed (a ' inside one is written '')"
        );
    }

    #[test]
    fn a_file_without_statements_is_refused() {
        for text in ["", "  \n", "-- nothing yet\n", "/* later */ ;;"] {
            let e = refused(&[("INVOIC.sql", text)]);
            assert!(
                matches!(&e, EffectsError::Empty { file } if file == "INVOIC.sql"),
                "{text:?}"
            );
            assert_eq!(
                e.to_string(),
                "INVOIC.sql: holds no statement (only blanks and comments); remove it if nothing \
                 is to run"
            );
        }
        assert!(matches!(
            refused(&[("_interchange.sql", "")]),
            EffectsError::Empty { .. }
        ));
    }

    #[test]
    fn message_parameters_are_refused_in_interchange_sql() {
        let e = refused(&[(
            "_interchange.sql",
            "INSERT INTO i VALUES (:sender, :control_ref);\n\nINSERT INTO j\n  VALUES (:test, :message_ref)",
        )]);
        assert!(matches!(
            e,
            EffectsError::PerMessageInInterchange {
                statement: 2,
                line: 4,
                column: 18,
                param: Param::MessageRef,
                ..
            }
        ));
        assert!(e.to_string().starts_with(
            "_interchange.sql statement 2, line 4, column 18: :message_ref is a message's"
        ));
        for p in Param::ALL.into_iter().filter(|p| p.per_message()) {
            let source = format!("SELECT :{}", p.name());
            assert!(
                matches!(refused(&[("_interchange.sql", &source)]), EffectsError::PerMessageInInterchange { param, .. } if param == p)
            );
            // The same in a message type's file is what it is for.
            loaded(&[("INVOIC.sql", &source)]);
        }
    }

    #[test]
    fn interchange_parameters_are_taken_in_interchange_sql() {
        let interchange: Vec<String> = Param::ALL
            .into_iter()
            .filter(|p| !p.per_message())
            .map(|p| p.to_string())
            .collect();
        let source = format!("SELECT {}", interchange.join(", "));
        let effects = loaded(&[("_interchange.sql", &source)]);
        let params: Vec<Param> = effects
            .statements()
            .flat_map(|s| s.params().collect::<Vec<_>>())
            .collect();
        assert_eq!(params.len(), 12);
        assert!(params.contains(&Param::Reapply) && params.contains(&Param::Sha256));
        assert!(params.contains(&Param::Standard));
    }

    fn bad_name(files: &[(&str, &str)]) -> (String, String) {
        match refused(files) {
            EffectsError::BadFileName { file, reason } => (file, reason),
            e => panic!("not a bad name: {e}"),
        }
    }

    #[test]
    fn file_names_are_checked() {
        let cases = [
            ("invoic.sql", "upper case"),
            ("INVOIC.d.96a.sql", "upper case"),
            ("INVOIC.SQL", "lower case"),
            ("INVOIC.D.sql", "version and release both"),
            ("INVOIC.D.96A.X.sql", "version and release both"),
            ("INVOICE1.sql", "not up to 6"),
            ("INVOIC.DDDD.96A.sql", "not up to 3"),
            ("INV-IC.sql", "not up to 6"),
            ("INVOIC..sql", "version and release both"),
            ("INVOIC.D..sql", "missing"),
            ("_other.sql", "_interchange.sql"),
            ("_Interchange.sql", "_interchange.sql"),
            ("INVOIC.sql~", "not an effects file"),
            ("README", "not an effects file"),
            ("INVOIC.sql.bak", "not an effects file"),
        ];
        for (name, reason) in cases {
            let (file, why) = bad_name(&[(name, "SELECT 1")]);
            assert_eq!(file, name);
            assert!(why.contains(reason), "{name}: {why}");
        }
        let (file, why) = bad_name(&[("invoic.sql", "SELECT 1")]);
        assert_eq!(
            format!("{file}: {why}"),
            "invoic.sql: the message type (0065) invoic is written in upper case, as in the \
             message header: INVOIC"
        );
    }

    #[test]
    fn good_names_of_every_shape() {
        let effects = loaded(&[
            ("APERAK.sql", "SELECT 1"),
            ("X1.sql", "SELECT 1"),
            ("IFTMIN.S.93A.sql", "SELECT 1"),
            ("ORDERS.1.911.sql", "SELECT 1"),
        ]);
        assert_eq!(
            effects.by_type.keys().collect::<Vec<_>>(),
            ["APERAK", "IFTMIN.S.93A", "ORDERS.1.911", "X1"]
        );
    }

    #[test]
    fn notes_and_hidden_files_are_let_be() {
        let effects = loaded(&[
            ("README.md", "?"),
            ("notes.txt", "$1"),
            (".INVOIC.sql.swp", "\u{0}"),
            (".git/HEAD", "ref"),
            ("migrations/README.md", "?"),
            ("migrations/.0001_x.sql.swp", "?"),
        ]);
        assert!(effects.is_empty() && effects.migrations.is_empty());
    }

    #[test]
    fn a_folder_other_than_migrations_is_refused() {
        let (file, why) = bad_name(&[("invoices/INVOIC.sql", "SELECT 1")]);
        assert_eq!(file, "invoices");
        assert!(why.contains("the only folder"), "{why}");
    }

    #[cfg(unix)]
    #[test]
    fn a_name_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let dir = folder(&[]);
        let name = std::ffi::OsStr::from_bytes(b"INV\xFFIC.sql");
        std::fs::write(dir.path().join(name), "SELECT 1").expect("a file");
        let e = Effects::load(dir.path()).map(|_| ()).expect_err("refused");
        assert!(matches!(e, EffectsError::BadFileName { .. }), "{e}");
        assert_eq!(e.to_string(), "INV\u{FFFD}IC.sql: the name is not UTF-8");
    }

    #[test]
    fn the_folder_must_be_a_folder() {
        let dir = folder(&[("INVOIC.sql", "SELECT 1")]);
        let file = dir.path().join("INVOIC.sql");
        assert!(
            matches!(Effects::load(&file), Err(EffectsError::NotAFolder { path }) if path == file)
        );
        let missing = dir.path().join("nowhere");
        let e = Effects::load(&missing).map(|_| ()).expect_err("refused");
        assert!(matches!(&e, EffectsError::Io { path, .. } if *path == missing));
        assert!(
            e.to_string().starts_with(&missing.display().to_string()),
            "{e}"
        );
        let effects = Effects::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(effects.dir, dir.path());
    }

    #[test]
    fn files_are_capped_at_one_mebibyte() {
        let max = usize::try_from(MAX_FILE_BYTES).expect("fits");
        let fits = format!("SELECT 1{}", " ".repeat(max - 8));
        assert_eq!(fits.len(), max);
        loaded(&[("INVOIC.sql", &fits)]);
        let over = format!("{fits} ");
        let e = refused(&[("INVOIC.sql", &over)]);
        assert!(
            matches!(&e, EffectsError::TooLarge { file, size, .. } if file == "INVOIC.sql" && *size == MAX_FILE_BYTES + 1)
        );
        assert_eq!(
            e.to_string(),
            "INVOIC.sql: 1048577 bytes, larger than the 1048576 an effects file may be"
        );
        let e = refused(&[("migrations/0001_big.sql", &over)]);
        assert!(
            matches!(&e, EffectsError::TooLarge { file, .. } if file == "migrations/0001_big.sql")
        );
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_where_it_stops_being() {
        let dir = folder(&[]);
        std::fs::write(
            dir.path().join("INVOIC.sql"),
            b"SELECT 1;\nSELECT '\xC3\xA9\xFF'",
        )
        .expect("a file");
        let e = Effects::load(dir.path()).map(|_| ()).expect_err("refused");
        assert!(
            matches!(
                &e,
                EffectsError::NotUtf8 {
                    line: 2,
                    column: 10,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "INVOIC.sql: line 2, column 10: not UTF-8 text"
        );
    }

    #[test]
    fn migrations_in_the_order_of_their_numbers() {
        let effects = loaded(&[
            ("migrations/0010_later.sql", "ALTER TABLE a ADD y"),
            ("migrations/0002_b.sql", "CREATE TABLE b (x)"),
            ("migrations/0001_a-first.sql", "CREATE TABLE a (x)"),
            ("migrations/0003_c.sql", ""),
        ]);
        let order: Vec<(u32, &str)> = effects
            .migrations
            .iter()
            .map(|m| (m.number, m.file.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                (1, "0001_a-first.sql"),
                (2, "0002_b.sql"),
                (3, "0003_c.sql"),
                (10, "0010_later.sql")
            ]
        );
        assert_eq!(effects.migrations[1].sql, "CREATE TABLE b (x)");
        assert_eq!(
            effects.migrations[1].sha256,
            sha256_hex(b"CREATE TABLE b (x)")
        );
    }

    #[test]
    fn migrations_are_run_as_written() {
        // Not split and not read for parameters: a trigger's body holds `;`, a PostgreSQL view may
        // use jsonb's `?`, a function `$1`.
        let trigger = "CREATE TRIGGER t AFTER INSERT ON a BEGIN INSERT INTO b VALUES (1); END;\nCREATE VIEW v AS SELECT d ? 'k' FROM a";
        let effects = loaded(&[("migrations/0001_t.sql", trigger)]);
        assert_eq!(effects.migrations[0].sql, trigger);
    }

    #[test]
    fn migration_names_are_checked() {
        for name in [
            "1.sql",
            "_a.sql",
            "0001_.sql",
            "0001_a.SQL",
            "0001_a b.sql",
            "00x1_a.sql",
            "0001-a.sql",
            "0001_a.sql~",
            "99999999999_a.sql",
        ] {
            let e = refused(&[(&format!("migrations/{name}"), "SELECT 1")]);
            assert!(
                matches!(&e, EffectsError::BadMigrationName { file, .. } if *file == format!("migrations/{name}")),
                "{name}: {e}"
            );
        }
        let e = refused(&[("migrations/1.sql", "")]);
        assert_eq!(
            e.to_string(),
            "migrations/1.sql: a migration is named NNNN_name.sql: its number, _, a name of \
             letters, digits, _ and -"
        );
        let e = refused(&[("migrations/0001_a/x.sql", "")]);
        assert!(matches!(e, EffectsError::BadMigrationName { .. }), "{e}");
    }

    #[test]
    fn two_migrations_of_one_number_are_refused() {
        let e = refused(&[
            ("migrations/0001_a.sql", "CREATE TABLE a (x)"),
            ("migrations/001_b.sql", "CREATE TABLE b (x)"),
        ]);
        assert!(
            matches!(e, EffectsError::DuplicateMigrationNumber { number: 1, .. }),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "migrations/0001_a.sql and migrations/001_b.sql: both are migration 1; give each its own \
             number"
        );
    }

    #[test]
    fn migrations_must_be_a_folder() {
        let (file, why) = bad_name(&[("migrations", "CREATE TABLE a (x)")]);
        assert_eq!(file, "migrations");
        assert!(why.contains("not an effects file"), "{why}");
    }
}
