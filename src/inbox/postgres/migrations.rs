//! The schema, as an append-only list of migrations in `migrations/`, applied in one
//! transaction under an advisory lock, so that hosts starting at once do not both migrate.

use postgres::{Client, GenericClient};

use super::Target;
use crate::inbox::InboxError;

/// The schema, as an append-only list of migrations: entry N-1 brings the inbox to version N
/// (recorded in `schema_migrations`).
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_schema.sql"),
    include_str!("migrations/0002_publish.sql"),
    include_str!("migrations/0003_deliveries.sql"),
    include_str!("migrations/0004_acknowledgements.sql"),
    include_str!("migrations/0005_contrl_outbox.sql"),
    include_str!("migrations/0006_contrl_sendings.sql"),
    include_str!("migrations/0007_contrl_syntax.sql"),
    include_str!("migrations/0008_positions.sql"),
    include_str!("migrations/0009_transport_messages.sql"),
    include_str!("migrations/0010_transport_message_sender.sql"),
    include_str!("migrations/0011_position_topic_ids.sql"),
    include_str!("migrations/0012_effects.sql"),
    include_str!("migrations/0013_message_segments.sql"),
    include_str!("migrations/0014_rejection_keys.sql"),
    include_str!("migrations/0015_filing.sql"),
    include_str!("migrations/0016_standard.sql"),
    include_str!("migrations/0017_answer_outbox.sql"),
    include_str!("migrations/0018_refusal_outbox.sql"),
    include_str!("migrations/0019_rejected_sending.sql"),
];

/// The version the inbox's schema has, or `None` where there is none yet.
pub(super) fn applied_version(
    client: &mut Client,
    target: &Target,
) -> Result<Option<i64>, InboxError> {
    let version = stored_version(client, target)?;
    if version.is_some() {
        // The schema's name is a plain identifier (checked), never a value from the input.
        client.batch_execute(&format!("SET search_path = {}", target.sql_schema()))?;
    }
    Ok(version)
}

/// The highest version in the schema's `schema_migrations`, `None` where it has no such table,
/// and "not an inbox" where the table is another tool's (golang-migrate keeps one of the same
/// name, with `bigint` versions and a `dirty` flag, in whatever schema it is given): read as
/// ours, its versions would make the inbox look newer than this edi-inbox.
pub(super) fn stored_version(
    client: &mut impl GenericClient,
    target: &Target,
) -> Result<Option<i64>, InboxError> {
    let columns: Vec<(String, String)> = client
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = 'schema_migrations'
             ORDER BY ordinal_position",
            &[&target.schema],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if columns.is_empty() {
        return Ok(None);
    }
    let ours = [
        ("version", "integer"),
        ("applied_at", "timestamp with time zone"),
    ];
    let not_ours = || InboxError::NotAnInbox {
        path: target.shown(),
        reason: format!(
            ": its schema {} holds a schema_migrations table of another tool; give edi-inbox a schema of its own with --pg-schema",
            target.schema
        ),
    };
    if columns.len() != ours.len()
        || columns
            .iter()
            .zip(ours)
            .any(|((n, t), (on, ot))| n != on || t != ot)
    {
        return Err(not_ours());
    }
    let v: Option<i32> = client
        .query_one(
            &format!(
                "SELECT max(version) FROM {}.schema_migrations",
                target.sql_schema()
            ),
            &[],
        )?
        .try_get(0)
        .map_err(|_| not_ours())?;
    Ok(Some(i64::from(v.unwrap_or(0))))
}

/// Creates the schema or brings it up to date, in one transaction, under an advisory lock that
/// makes a second host starting at once wait, then find the work done. A schema from a newer
/// edi-inbox, or one whose `schema_migrations` is another tool's, is refused and left as it is.
pub(super) fn migrate(client: &mut Client, target: &Target) -> Result<(), InboxError> {
    let mut tx = client.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('edi-inbox ' || $1, 0))",
        &[&target.schema],
    )?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {0};
         SET LOCAL search_path = {0};
         CREATE TABLE IF NOT EXISTS schema_migrations (
             version     integer PRIMARY KEY,
             applied_at  timestamptz NOT NULL DEFAULT now()
         );",
        target.sql_schema()
    ))?;
    let version = stored_version(&mut tx, target)?.unwrap_or(0);
    if version as usize > MIGRATIONS.len() {
        return Err(InboxError::TooNew {
            path: target.shown(),
            found: version,
            known: MIGRATIONS.len(),
        });
    }
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(migration)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&(n as i32 + 1)],
        )?;
    }
    tx.commit()?;
    Ok(())
}
