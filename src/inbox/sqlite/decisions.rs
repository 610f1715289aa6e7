//! Deciding: the SQL of a decision (new, duplicate, drift), of rejected input and of the
//! deliveries taken, and the key probe the reading threads use. Every helper takes a connection
//! inside the caller's transaction (or savepoint) and never commits; all values are bound
//! parameters.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use super::SqliteInbox;
use crate::edifact::{EnvelopeError, Interchange, Message};
use crate::inbox::names::{Counter, delivery_counts, received_around};
use crate::inbox::{
    Candidate, Decision, Decisions, DeliveryRecord, InboxError, InterchangeKey, KeyProbe,
    REJECTED_BYTES_LIMIT, RejectedFile, SightingRow,
};
use crate::standard::Standard;

impl Decisions for SqliteInbox {
    fn decide(&mut self, batch: &[Candidate<'_>]) -> Result<Vec<Decision>, InboxError> {
        let mut decisions = Vec::with_capacity(batch.len());
        for c in batch {
            decisions.push(self.decide_one(c)?);
            crash_point!("mid-batch");
        }
        Ok(decisions)
    }

    /// Each file as it comes: a decision here is a few calls into a library in this process,
    /// and deciding meanwhile keeps the reading threads busy (deciding whole batches at the end
    /// was 14% slower, or took four times the memory with longer queues).
    fn decides_whole_batches(&self) -> bool {
        false
    }

    fn rejected_file(
        &mut self,
        source_file: &str,
        sending: &str,
        bytes: &[u8],
        sha256: &str,
        seen_at: &str,
    ) -> Result<RejectedFile, InboxError> {
        let (id, seen_before) = self.in_savepoint(|c| {
            record_rejected_file(c, source_file, sending, bytes, sha256, seen_at)
        })?;
        Ok(RejectedFile {
            id,
            sha256: sha256.to_string(),
            size: bytes.len(),
            seen_before,
        })
    }

    fn reject(
        &mut self,
        file: &RejectedFile,
        source_file: &str,
        error: &EnvelopeError,
        key: Option<InterchangeKey<'_>>,
        seen_at: &str,
    ) -> Result<(), InboxError> {
        self.in_savepoint(|c| record_rejection(c, file, source_file, error, key, seen_at))?;
        *self
            .pending_counts
            .entry(Counter::IngestRejected.name())
            .or_default() += 1;
        Ok(())
    }

    fn record_deliveries(
        &mut self,
        deliveries: &[DeliveryRecord<'_>],
        seen_at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        self.in_savepoint(|c| record_deliveries(c, deliveries, seen_at))?;
        for (counter, n) in delivery_counts(deliveries) {
            *self.pending_counts.entry(counter.name()).or_default() += n;
        }
        Ok(())
    }

    fn record_moves(&mut self, moves: &[(SightingRow, String)]) -> Result<(), InboxError> {
        if moves.is_empty() {
            return Ok(());
        }
        record_moves(&mut self.conn, moves)
    }

    fn probe(&self) -> Option<Box<dyn KeyProbe + Send>> {
        SqliteProbe::open(&self.path)
            .ok()
            .map(|p| Box::new(p) as Box<dyn KeyProbe + Send>)
    }
}

impl SqliteInbox {
    /// One interchange: the key insert decides, and a new key's business rows go with it or
    /// not at all.
    ///
    /// Where the operator's statements run for it, in a savepoint of the batch, so that one
    /// failing on the interchange's data rolls back that interchange alone. Where none runs,
    /// nothing but the database itself (the disk full, an I/O error) can fail a decision, and
    /// that fails the whole batch: its writes are rolled back with the batch, here, and the
    /// savepoint, which journalled every page the decision changed, is left out (a tenth of
    /// the deciding thread: BENCHMARKS.md, issue 41).
    pub(super) fn decide_one(&mut self, c: &Candidate<'_>) -> Result<Decision, InboxError> {
        self.begin()?;
        let id = self.next_id()?;
        let effects = self.effects.clone();
        let host = std::mem::take(&mut self.host);
        let guarded = effects
            .as_deref()
            .is_some_and(|fx| fx.runs_any(c.interchange));
        let decided = if guarded {
            self.in_savepoint(|conn| decide(conn, id, c, &host, effects.as_deref()))
        } else {
            let decided = decide(&self.conn, id, c, &host, effects.as_deref());
            if decided.is_err() {
                // No caller may commit what is left of the batch after this.
                self.rollbacks += 1;
                let _ = self.rollback();
            }
            decided
        };
        self.host = host;
        let d = match decided {
            Err(InboxError::EffectFailed(mut refusal)) => {
                // A trigger's RAISE(ROLLBACK) ends the batch's transaction itself: what the
                // batch decided before is gone, so the run cannot go on as if it were not.
                if self.conn.is_autocommit() {
                    return Err(InboxError::Backend(
                        format!(
                            "{refusal}, and ended the batch's transaction (RAISE(ROLLBACK)): use RAISE(ABORT) in the operator's triggers"
                        )
                        .into(),
                    ));
                }
                refusal.times_seen = self.keep_refused(c, &refusal)?;
                Decision::Refused(refusal)
            }
            other => other?,
        };
        if let Decision::New { .. } = d {
            self.next_id = Some(id + 1);
        }
        *self
            .pending_counts
            .entry(Counter::of(&d).name())
            .or_default() += 1;
        Ok(d)
    }

    /// The id the next new interchange gets: the sequence's, read once a batch.
    pub(super) fn next_id(&mut self) -> Result<i64, InboxError> {
        if let Some(id) = self.next_id {
            return Ok(id);
        }
        let id = self.conn.query_row(
            "SELECT next FROM id_sequences WHERE name = 'interchanges'",
            [],
            |r| r.get(0),
        )?;
        self.next_id = Some(id);
        Ok(id)
    }
}

/// A read-only connection of a reading thread, for [`Decisions::probe`].
pub(super) struct SqliteProbe {
    conn: Connection,
}

impl SqliteProbe {
    pub(super) fn open(path: &Path) -> Result<SqliteProbe, InboxError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_millis(100))?;
        Ok(SqliteProbe { conn })
    }
}

impl KeyProbe for SqliteProbe {
    fn has(&self, key: InterchangeKey<'_>) -> bool {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM inbox
                 WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4",
            )
            .and_then(|mut s| {
                s.exists(params![
                    key.sender,
                    key.recipient,
                    key.control_ref,
                    key.standard
                ])
            })
            .unwrap_or(false)
    }
}

/// A standard binds as its stored name (`'edifact'`, `'x12'`).
impl rusqlite::ToSql for Standard {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
    }
}

/// A stored standard read back; a name the schema's CHECK would not hold is an error of the
/// row, never taken for EDIFACT.
impl rusqlite::types::FromSql for Standard {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
    }
}

/// The decision for one interchange: take the key, or find who has it.
pub(super) fn decide(
    conn: &Connection,
    id: i64,
    c: &Candidate<'_>,
    host: &str,
    effects: Option<&super::effects::Installed>,
) -> Result<Decision, InboxError> {
    let (i, source_file, received_at) = (c.interchange, c.source_file, c.received_at);
    let u = &i.unb;
    let sha = i.sha256_hex();
    // `id` is the sequence's next: the interchange row gets it if the key is new, and an
    // unused one costs nothing.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at, interchange_id,
                 standard)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            u.sender.as_str(),
            u.recipient.as_str(),
            u.control_ref.as_str(),
            sha,
            source_file,
            received_at,
            id,
            i.standard,
        ])?;
    if inserted == 1 {
        crash_point!("after-key-insert");
        // The messages' ids, for the side effects, as their rows are written.
        let mut ids = Vec::new();
        let wanted = effects.is_some_and(|fx| fx.runs_for(i));
        write_interchange(conn, id, c, &sha, host, wanted.then_some(&mut ids))?;
        if let Some(effects) = effects {
            let scope = crate::inbox::effects::Scope {
                interchange: i,
                interchange_id: id,
                sha256: &sha,
                source: source_file,
                received_at,
                reapply: false,
                held: c.held,
            };
            effects.run(conn, &scope, &ids)?;
        }
        write_outbox(conn, id, i.standard, received_at)?;
        crash_point!("after-business-rows");
        return Ok(Decision::New { interchange_id: id });
    }
    let stored: String = conn
        .prepare_cached(
            "SELECT sha256 FROM inbox
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3 AND standard = ?4",
        )?
        .query_row(
            params![
                u.sender.as_str(),
                u.recipient.as_str(),
                u.control_ref.as_str(),
                i.standard
            ],
            |r| r.get(0),
        )?;
    let drift = stored != sha;
    let sighting_id: i64 = conn.prepare_cached(
        "INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256, source_file, seen_at, payload,
             source_path, host, standard)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         RETURNING id",
    )?
    .query_row(params![
        u.sender.as_str(),
        u.recipient.as_str(),
        u.control_ref.as_str(),
        if drift { "drift" } else { "duplicate" },
        sha,
        stored,
        source_file,
        received_at,
        drift.then_some(&*i.raw),
        c.source_path,
        host,
        i.standard,
    ], |r| r.get(0))?;
    Ok(if drift {
        Decision::Drift {
            stored_sha256: stored,
            sighting_id,
        }
    } else {
        Decision::Duplicate { sighting_id }
    })
}

/// Where the files of committed sightings were moved, in one short transaction.
pub(super) fn record_moves(
    conn: &mut Connection,
    moves: &[(SightingRow, String)],
) -> Result<(), InboxError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut interchange =
            tx.prepare_cached("UPDATE interchanges SET moved_to = ?2 WHERE id = ?1")?;
        let mut sighting = tx.prepare_cached("UPDATE sightings SET moved_to = ?2 WHERE id = ?1")?;
        for (row, to) in moves {
            match row {
                SightingRow::Interchange(id) => interchange.execute(params![id, to])?,
                SightingRow::Sighting(id) => sighting.execute(params![id, to])?,
            };
        }
    }
    tx.commit()?;
    Ok(())
}

/// The business rows of a new interchange: the interchange and its messages (its outbox events
/// follow the operator's side effects, [`write_outbox`]).
pub(super) fn write_interchange(
    conn: &Connection,
    id: i64,
    c: &Candidate<'_>,
    sha: &str,
    host: &str,
    mut ids: Option<&mut Vec<i64>>,
) -> Result<(), InboxError> {
    let (i, compressed) = (c.interchange, c.compressed);
    let u = &i.unb;
    let own;
    let stored = match compressed {
        Some(c) => c,
        None => {
            own = crate::inbox::compress(&i.raw)?;
            &own[..]
        }
    };
    conn.prepare_cached(
        "INSERT INTO interchanges (id, sender, sender_qualifier, sender_routing, recipient, recipient_qualifier,
             recipient_routing, control_ref, syntax_id, syntax_version, prepared_date, prepared_time,
             recipient_ref, application_ref, priority, ack_request, agreement_id, test_indicator,
             sha256, source_file, source_offset, received_at, raw, raw_codec, source_path, host,
             standard)
         VALUES (?23, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, 'zstd',
             ?24, ?25, ?26)",
    )?
    .execute(params![
        u.sender.as_str(),
        u.sender_qualifier.as_deref(),
        u.sender_routing.as_deref(),
        u.recipient.as_str(),
        u.recipient_qualifier.as_deref(),
        u.recipient_routing.as_deref(),
        u.control_ref.as_str(),
        u.syntax_id.as_str(),
        u.syntax_version.as_str(),
        u.date.as_str(),
        u.time.as_str(),
        u.recipient_ref.as_deref(),
        u.application_ref.as_deref(),
        u.priority.as_deref(),
        u.ack_request.as_deref(),
        u.agreement_id.as_deref(),
        u.test_indicator.as_deref(),
        sha,
        c.source_file,
        i.offset as i64,
        c.received_at,
        stored,
        id,
        c.source_path,
        host,
        i.standard,
    ])?;
    // Eight rows a statement where there are eight: one statement per message was most of the
    // deciding thread's time, which is what the whole run waits on.
    // Where the side effects want the rows' ids, they are read off the statement: SQLite gives
    // a new row the largest rowid plus one, in the order of VALUES, so the eight rows are the
    // last id and the seven before it. Writing each row alone to take its id cost a new
    // interchange with side effects more than its side effects' own record; a query for them
    // afterwards more still, and `RETURNING` (an ephemeral table a statement) as much again.
    if let Some(ids) = ids.as_deref_mut() {
        ids.clear();
    }
    let mut rest = i.messages.iter().enumerate();
    if i.messages.len() >= MESSAGE_ROWS {
        let mut eight = conn.prepare_cached(INSERT_EIGHT_MESSAGES)?;
        for _ in 0..i.messages.len() / MESSAGE_ROWS {
            for (k, (n, m)) in rest.by_ref().take(MESSAGE_ROWS).enumerate() {
                bind_message(&mut eight, k * MESSAGE_COLUMNS, id, n, m, i)?;
            }
            eight.raw_execute()?;
            if let Some(ids) = ids.as_deref_mut() {
                let last = conn.last_insert_rowid();
                ids.extend(last - (MESSAGE_ROWS as i64 - 1)..=last);
            }
        }
    }
    let mut one = conn.prepare_cached(INSERT_ONE_MESSAGE)?;
    for (n, m) in rest {
        bind_message(&mut one, 0, id, n, m, i)?;
        one.raw_execute()?;
        if let Some(ids) = ids.as_deref_mut() {
            ids.push(conn.last_insert_rowid());
        }
    }
    Ok(())
}

/// A new interchange's outbox events, one per message, after the operator's side effects.
pub(super) fn write_outbox(
    conn: &Connection,
    id: i64,
    standard: Standard,
    received_at: &str,
) -> Result<(), InboxError> {
    let (before, after) = received_around(standard);
    // One statement for the interchange's events rather than one per message: per-message
    // statements were most of the deciding thread's time (the floor writes no outbox at all).
    conn.prepare_cached(
        "INSERT INTO outbox (message_id, event_type, created_at)
         SELECT id, ?3 || message_type || ?4, ?2
         FROM messages WHERE interchange_id = ?1 ORDER BY id",
    )?
    .execute(params![id, received_at, before, after])?;
    Ok(())
}

/// Rows a multi-row message insert takes, and the columns of each.
pub(super) const MESSAGE_ROWS: usize = 8;

pub(super) const MESSAGE_COLUMNS: usize = 12;

macro_rules! insert_messages {
    ($($row:literal),+) => {
        concat!(
            "INSERT INTO messages (interchange_id, position, reference, message_type, version, ",
            "release, agency, association_code, group_ref, segments, raw_start, raw_end) VALUES ",
            $($row),+
        )
    };
}

pub(super) const INSERT_ONE_MESSAGE: &str =
    insert_messages!("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");

pub(super) const INSERT_EIGHT_MESSAGES: &str = insert_messages!(
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), ",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// Binds the `n`th message (0-based) of `i` to the row of parameters after `before`.
pub(super) fn bind_message(
    stmt: &mut rusqlite::Statement<'_>,
    before: usize,
    id: i64,
    n: usize,
    m: &Message,
    i: &Interchange<'_>,
) -> rusqlite::Result<()> {
    let group = m
        .group
        .and_then(|g| i.groups.get(g))
        .map(|g| g.reference.as_str());
    stmt.raw_bind_parameter(before + 1, id)?;
    stmt.raw_bind_parameter(before + 2, n as i64 + 1)?;
    stmt.raw_bind_parameter(before + 3, m.reference.as_str())?;
    stmt.raw_bind_parameter(before + 4, m.message_type.as_str())?;
    stmt.raw_bind_parameter(before + 5, m.version.as_str())?;
    stmt.raw_bind_parameter(before + 6, m.release.as_str())?;
    stmt.raw_bind_parameter(before + 7, m.agency.as_str())?;
    stmt.raw_bind_parameter(before + 8, m.association_code.as_deref())?;
    stmt.raw_bind_parameter(before + 9, group)?;
    stmt.raw_bind_parameter(before + 10, m.segments as i64)?;
    stmt.raw_bind_parameter(before + 11, m.span.start as i64)?;
    stmt.raw_bind_parameter(before + 12, m.span.end as i64)?;
    Ok(())
}

/// Records deliveries taken from a broker.
pub(super) fn record_deliveries(
    conn: &Connection,
    deliveries: &[DeliveryRecord<'_>],
    seen_at: &str,
) -> Result<(), InboxError> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO deliveries
             (source, filename, delivery_count, size, seen_at, record_key, produced_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for d in deliveries {
        insert.execute(params![
            d.source,
            d.filename,
            d.delivery_count,
            d.size as i64,
            seen_at,
            d.key,
            d.produced_at
        ])?;
    }
    Ok(())
}

/// Records a rejected file's bytes once; the same file with the same content only counts again.
/// Returns its record's id, and whether the same bytes of the same sending were recorded before
/// (under this name or another folder's).
pub(super) fn record_rejected_file(
    conn: &Connection,
    source_file: &str,
    sending: &str,
    bytes: &[u8],
    sha256: &str,
    seen_at: &str,
) -> Result<(i64, bool), InboxError> {
    let kept = &bytes[..bytes.len().min(REJECTED_BYTES_LIMIT)];
    let (id, times_seen): (i64, i64) = conn
        .prepare_cached(
            "INSERT INTO rejected_files (source_file, file_sha256, file_size, bytes, truncated,
                 first_seen_at, last_seen_at, sending)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7)
             ON CONFLICT (source_file, file_sha256)
             DO UPDATE SET last_seen_at = excluded.last_seen_at, times_seen = times_seen + 1,
                           sending = coalesce(sending, excluded.sending)
             RETURNING id, times_seen",
        )?
        .query_row(
            params![
                source_file,
                sha256,
                bytes.len() as i64,
                kept,
                kept.len() < bytes.len(),
                seen_at,
                sending,
            ],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
    if times_seen > 1 {
        return Ok((id, true));
    }
    let elsewhere = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM rejected_files
                            WHERE sending = ?1 AND file_sha256 = ?2 AND id <> ?3)",
        )?
        .query_row(params![sending, sha256, id], |r| r.get(0))?;
    Ok((id, elsewhere))
}

/// Records one error of a rejected file; the same error of the same file only counts again.
pub(super) fn record_rejection(
    conn: &Connection,
    file: &RejectedFile,
    source_file: &str,
    error: &EnvelopeError,
    key: Option<InterchangeKey<'_>>,
    seen_at: &str,
) -> Result<(), InboxError> {
    conn.prepare_cached(
        "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset, first_seen_at,
             last_seen_at, file_size, truncated, file_id, sender, recipient, control_ref, standard)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (source_file, file_sha256, kind, byte_offset)
         DO UPDATE SET last_seen_at = excluded.last_seen_at, times_seen = times_seen + 1",
    )?
    .execute(params![
        source_file,
        file.sha256,
        error.to_string(),
        error.code(),
        error.offset as i64,
        seen_at,
        file.size as i64,
        file.size > REJECTED_BYTES_LIMIT,
        file.id,
        key.map(|k| k.sender),
        key.map(|k| k.recipient),
        key.map(|k| k.control_ref),
        key.map(|k| k.standard),
    ])?;
    Ok(())
}
