//! What `--db` names, and opening it: an SQLite file, or a PostgreSQL database told by its
//! connection string. Read without any backend, so that a build without one (`--features
//! sqlite` alone) still recognises the other's location and says it is not available.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::copying::{CopySource, CopyTarget};
#[cfg(feature = "postgres")]
use super::postgres;
#[cfg(feature = "sqlite")]
use super::sqlite;
use super::{Access, Inbox, InboxError};

/// Where an inbox is: what `--db` names.
#[derive(Debug, Clone)]
pub enum Location {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://...`, `postgresql://...` or `host=... dbname=...`),
    /// and the schema the inbox lives in there.
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Target>),
}

impl Location {
    /// What `--db` names: a PostgreSQL connection string, or else an SQLite path. `pg_schema`
    /// is the schema a PostgreSQL inbox lives in.
    pub fn parse(db: &std::ffi::OsStr, pg_schema: &str) -> Result<Location, InboxError> {
        match db.to_str() {
            #[cfg(feature = "postgres")]
            Some(text) if is_connection_string(text) => Ok(Location::Postgres(Box::new(
                postgres::Target::parse(text, pg_schema)?,
            ))),
            // Never taken for a file name (which would create it and show the password).
            #[cfg(not(feature = "postgres"))]
            Some(text) if is_connection_string(text) => {
                let _ = pg_schema;
                Err(unavailable("a PostgreSQL inbox", "postgres"))
            }
            // `postgress://...`, `sqlite://...`: a URL of a scheme --db does not take, never a
            // file named after it (which would be created, the password in its name).
            Some(text) if foreign_scheme(text).is_some() => Err(InboxError::BadLocation {
                reason: format!(
                    "{}:// is not a scheme --db takes: postgres:// or postgresql:// name a PostgreSQL database, anything else is an SQLite file's path",
                    foreign_scheme(text).unwrap_or_default()
                ),
            }),
            _ if cfg!(not(feature = "sqlite")) => Err(unavailable("an SQLite inbox", "sqlite")),
            _ => Ok(Location::Sqlite(PathBuf::from(db))),
        }
    }

    /// For messages: the path, or the server, database and schema, never a password.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            #[cfg(feature = "postgres")]
            Location::Postgres(target) => target.shown(),
        }
    }

    /// The SQLite file, where it is one (its files are never input).
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(path) => Some(path),
            #[cfg(feature = "postgres")]
            Location::Postgres(_) => None,
        }
    }
}

/// `--db` names a backend this build left out.
fn unavailable(what: &str, feature: &str) -> InboxError {
    InboxError::BadLocation {
        reason: format!(
            "{what} is not available in this build (it was built without the `{feature}` feature)"
        ),
    }
}

/// Opens the inbox at `db`, waiting up to `busy_timeout` for another run.
///
/// Something that is not an edi-inbox database, or one written by a newer edi-inbox, is an
/// error and is left untouched; with [`Access::Read`] nothing is created or changed.
pub fn open(
    db: &Location,
    access: Access,
    busy_timeout: Duration,
) -> Result<Box<dyn Inbox>, InboxError> {
    Ok(match db {
        #[cfg(feature = "sqlite")]
        Location::Sqlite(path) => {
            Box::new(sqlite::SqliteInbox::connect(path, busy_timeout, access)?)
        }
        #[cfg(not(feature = "sqlite"))]
        Location::Sqlite(_) => {
            let _ = (access, busy_timeout);
            return Err(unavailable("an SQLite inbox", "sqlite"));
        }
        #[cfg(feature = "postgres")]
        Location::Postgres(target) => {
            Box::new(postgres::PgInbox::connect(target, busy_timeout, access)?)
        }
    })
}

/// Opens the SQLite inbox at `db` as the source of a copy (`migrate --from`), brought up to
/// the current schema where it is older (as `purge` would), never created.
pub fn open_copy_source(
    db: &Location,
    busy_timeout: Duration,
) -> Result<Box<dyn CopySource>, InboxError> {
    match db {
        #[cfg(feature = "sqlite")]
        Location::Sqlite(path) => Ok(Box::new(sqlite::SqliteInbox::connect(
            path,
            busy_timeout,
            Access::Write,
        )?)),
        #[cfg(not(feature = "sqlite"))]
        Location::Sqlite(_) => {
            let _ = busy_timeout;
            Err(unavailable("an SQLite inbox", "sqlite"))
        }
        #[cfg(feature = "postgres")]
        Location::Postgres(_) => Err(InboxError::BadLocation {
            reason: "a copy is made from an SQLite inbox: --from names its file".into(),
        }),
    }
}

/// Opens the PostgreSQL inbox at `db` as the target of a copy (`migrate --to`), its schema
/// created or brought up to date.
pub fn open_copy_target(
    db: &Location,
    busy_timeout: Duration,
) -> Result<Box<dyn CopyTarget>, InboxError> {
    match db {
        #[cfg(feature = "postgres")]
        Location::Postgres(target) => Ok(Box::new(postgres::PgInbox::connect(
            target,
            busy_timeout,
            Access::Create,
        )?)),
        _ => {
            let _ = busy_timeout;
            Err(InboxError::BadLocation {
                reason: if cfg!(feature = "postgres") {
                    "a copy is made into a PostgreSQL inbox: --to names it (postgres://...)".into()
                } else {
                    "a PostgreSQL inbox is not available in this build (it was built without the `postgres` feature)".into()
                },
            })
        }
    }
}

/// True for what `--db` gives as a PostgreSQL connection: a `postgres://` or `postgresql://`
/// URL, or libpq's `key=value` form (`host=... dbname=...`), told by its first word being one of
/// libpq's keywords followed by `=` (spaces around it allowed, values quoted or not). A string
/// that starts so but does not parse is then refused as a connection string, never taken for a
/// SQLite file named after it (which would create the file and show the password).
pub fn is_connection_string(text: &str) -> bool {
    if is_url(text) {
        return true;
    }
    let text = text.trim_start();
    let word_end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(word_end);
    LIBPQ_KEYWORDS.contains(&word) && rest.trim_start().starts_with('=')
}

/// libpq's connection keywords (those a `key=value` string may start with).
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// The scheme of a URL (`SCHEME://...`, RFC 3986's letters, digits, `+`, `-` and `.`) that is
/// not PostgreSQL's.
fn foreign_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (well_formed && !is_url(text)).then_some(scheme)
}

/// A `postgres://` or `postgresql://` URL (rather than libpq's `key=value` form).
pub(crate) fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_another_scheme_is_told_from_a_path() {
        for (text, scheme) in [
            ("postgress://u:secret@h/db", Some("postgress")),
            ("sqlite://inbox.db", Some("sqlite")),
            ("postgres://u@h/db", None),
            ("postgresql://h/db", None),
            ("/srv/edi/inbox.db", None),
            ("./a://b.db", None),
            ("my inbox://x", None),
        ] {
            assert_eq!(foreign_scheme(text), scheme, "{text}");
        }
    }

    #[test]
    fn connection_strings_are_told_from_paths() {
        for yes in [
            "postgres://u@h/db",
            "postgresql://h:5433/db",
            "host=h dbname=db",
            "dbname=db",
            "password='top secret' host=h",
            "dbname = db",
            "  user =u",
            "port=5432 oops",
        ] {
            assert!(is_connection_string(yes), "{yes}");
        }
        for no in [
            "inbox.db",
            "/srv/edi/inbox.db",
            "my db.sqlite",
            "a=b",
            "",
            "hosts=x",
            "./dbname=x",
            "dbname",
        ] {
            assert!(!is_connection_string(no), "{no}");
        }
    }
}
