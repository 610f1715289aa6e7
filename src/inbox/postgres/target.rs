//! Where a PostgreSQL inbox is: the connection settings (a URL or libpq's key=value string,
//! with libpq's environment variables and defaults) and the schema, never shown with a password.

use std::time::Duration;

use postgres::{Client, Config, NoTls};

use super::tls::{Verify, take_tls};
use crate::inbox::InboxError;
use crate::inbox::postgres::error::PgError;
use crate::inbox::postgres::tls;

/// How long a connection may take where neither the string nor `PGCONNECT_TIMEOUT` says.
pub(super) const CONNECT_TIMEOUT_SECONDS: u64 = 30;

/// Where a PostgreSQL inbox is: the connection settings and the schema.
#[derive(Clone)]
pub struct Target {
    pub(super) config: Config,
    pub(super) verify: Verify,
    pub(super) schema: String,
    pub(super) shown: String,
}

/// Shown without the connection settings, which hold the password.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    /// Reads a connection string, with the usual `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
    /// `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT` and `PGCONNECT_TIMEOUT` where it leaves them
    /// out, as libpq does.
    pub fn parse(text: &str, schema: &str) -> Result<Target, InboxError> {
        if let Some((_, rest)) = text.split_once("://") {
            let authority = rest.split(['/', '?']).next().unwrap_or_default();
            // The first `@` ends the password; another would make the rest of the password
            // the host's name, shown in every message.
            if authority.matches('@').count() > 1 {
                return Err(InboxError::BadLocation {
                    reason: "the URL holds more than one '@' before the host: write an '@' in the user name or password as %40".into(),
                });
            }
        }
        let (text, verify) = take_tls(text)?;
        let mut config: Config = text.parse().map_err(|e: postgres::Error| {
            // The parser's messages name the option, never the string (which may hold a
            // password).
            let why = std::error::Error::source(&e).map(ToString::to_string);
            // "unexpected character at byte 12: expected `=` but got `x`": the character may
            // be one of the password's.
            let why = why.map(|w| w.split(": expected").next().unwrap_or_default().to_string());
            InboxError::BadLocation {
                reason: match why {
                    Some(why) => format!("invalid connection string: {why}"),
                    None => "invalid connection string".to_string(),
                },
            }
        })?;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if config.get_hosts().is_empty() {
            let host = env("PGHOST").unwrap_or_else(|| "localhost".into());
            if host.starts_with('/') {
                config.host_path(&host);
            } else {
                config.host(&host);
            }
        }
        if config.get_ports().is_empty()
            && let Some(port) = env("PGPORT").and_then(|p| p.parse().ok())
        {
            config.port(port);
        }
        if config.get_user().is_none() {
            let user = env("PGUSER")
                .or_else(|| env("USER"))
                .unwrap_or_else(|| "postgres".into());
            config.user(&user);
        }
        if config.get_password().is_none()
            && let Some(password) = env("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_dbname().is_none() {
            let db = env("PGDATABASE")
                .or_else(|| config.get_user().map(str::to_string))
                .unwrap_or_default();
            config.dbname(&db);
        }
        // A server that drops packets must not hold a cron run forever (libpq waits forever).
        if config.get_connect_timeout().is_none() {
            let seconds = env("PGCONNECT_TIMEOUT")
                .and_then(|s| s.parse().ok())
                .unwrap_or(CONNECT_TIMEOUT_SECONDS);
            config.connect_timeout(Duration::from_secs(seconds));
        }
        if !is_identifier(schema) {
            return Err(InboxError::BadLocation {
                reason: format!(
                    "--pg-schema {schema:?} is not a plain lower-case name (letters, digits, _)"
                ),
            });
        }
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".into(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let shown = format!(
            "postgres://{}@{host}:{port}/{} (schema {schema})",
            config.get_user().unwrap_or(""),
            config.get_dbname().unwrap_or(""),
        );
        Ok(Target {
            config,
            verify,
            schema: schema.to_string(),
            shown,
        })
    }

    /// For messages: user, server, database and schema, never the password.
    pub fn shown(&self) -> String {
        self.shown.clone()
    }

    /// The schema as SQL names it: quoted, so that a name that is also a keyword (`select`,
    /// `user`) is still a name. It holds nothing to escape (checked to be a plain name).
    pub(super) fn sql_schema(&self) -> String {
        format!("\"{}\"", self.schema)
    }

    /// A connection: TLS with rustls where `sslmode` asks for it (or, with the default
    /// `prefer`, where the server offers it).
    pub(super) fn connect(&self) -> Result<Client, InboxError> {
        // libpq never uses TLS over a Unix-domain socket, whatever sslmode says (the socket
        // file's permissions guard it): a TLS attempt there failed on the path as a host name.
        let sockets_only = !self.config.get_hosts().is_empty()
            && self.config.get_hosts().iter().all(|h| match h {
                postgres::config::Host::Tcp(_) => false,
                #[cfg(unix)]
                postgres::config::Host::Unix(_) => true,
            });
        let client = match self.config.get_ssl_mode() {
            _ if sockets_only => {
                let mut plain = self.config.clone();
                plain.ssl_mode(postgres::config::SslMode::Disable);
                plain.connect(NoTls)
            }
            postgres::config::SslMode::Disable => self.config.connect(NoTls),
            _ => match tls::connector(&self.verify) {
                Ok(tls) => self.config.connect(tls),
                Err(e) => {
                    return Err(InboxError::Connect {
                        path: self.shown.clone(),
                        source: Box::new(e),
                    });
                }
            },
        };
        client.map_err(|e| InboxError::Connect {
            path: self.shown.clone(),
            source: Box::new(PgError(e)),
        })
    }
}

/// A schema name that needs no quoting.
pub(super) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}
