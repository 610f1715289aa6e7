//! Opening the inbox: a session, its schema brought up to date where it may be, and the
//! server's durability checked.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use postgres::Client;

use super::{PgInbox, Target};
use crate::inbox::postgres::migrations::MIGRATIONS;
use crate::inbox::postgres::migrations::applied_version;
use crate::inbox::postgres::migrations::migrate;
use crate::inbox::{Access, InboxError};

impl PgInbox {
    /// Opens the inbox: with [`Access::Create`] the schema is created or brought up to date
    /// under an advisory lock (two hosts starting at once do not both migrate); with
    /// [`Access::Write`] it is brought up to date but never created; with [`Access::Read`]
    /// nothing is created or changed, and the session is read-only.
    pub(crate) fn connect(
        target: &Target,
        busy_timeout: Duration,
        access: Access,
    ) -> Result<PgInbox, InboxError> {
        let mut client = target.connect()?;
        // A host never waits forever for another host's key or a purge's batch.
        client.batch_execute(&format!(
            "SET lock_timeout = {}; SET application_name = 'edi-inbox'",
            busy_timeout.as_millis().clamp(1, i32::MAX as u128)
        ))?;
        let version = applied_version(&mut client, target)?;
        let known = MIGRATIONS.len();
        match version {
            Some(v) if v as usize > known => {
                return Err(InboxError::TooNew {
                    path: target.shown(),
                    found: v,
                    known,
                });
            }
            None if access != Access::Create => {
                return Err(InboxError::Missing {
                    path: target.shown(),
                });
            }
            Some(v) if (v as usize) < known && access == Access::Read => {
                return Err(InboxError::Outdated {
                    path: target.shown(),
                    found: v,
                    known,
                });
            }
            Some(v) if v as usize == known => {}
            _ => migrate(&mut client, target)?,
        }
        client.batch_execute(&format!("SET search_path = {}", target.sql_schema()))?;
        if access == Access::Read {
            client.batch_execute("SET default_transaction_read_only = on")?;
        } else {
            warn_if_not_durable(&mut client);
        }
        let host = crate::inbox::host_name();
        Ok(PgInbox {
            client: RefCell::new(super::session::Session::new(client)),
            target: target.clone(),
            in_tx: false,
            pending_counts: BTreeMap::new(),
            pending_deliveries: Default::default(),
            rollbacks: 0,
            host,
            effects: None,
            try_transaction: false,
        })
    }
}

/// Says once, on standard error, where the server does not make a commit durable: then a crash
/// of the server can lose what was reported as decided.
pub(super) fn warn_if_not_durable(client: &mut Client) {
    for setting in ["synchronous_commit", "fsync"] {
        let value = client
            .query_one(&format!("SHOW {setting}"), &[])
            .ok()
            .map(|r| r.get::<_, String>(0));
        if value.as_deref() == Some("off") {
            crate::output::warn(&format!(
                "the PostgreSQL server runs with {setting}=off: a commit is not durable, and a crash of the server can lose interchanges reported as new (see the README)"
            ));
        }
    }
}
