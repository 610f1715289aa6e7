//! The SQL of a decision (new, duplicate, drift, rejected input) and of migration 4. Every
//! helper takes a connection inside the caller's transaction (or savepoint) and never commits;
//! all values are bound parameters.

use rusqlite::{Connection, OptionalExtension, params};

use crate::edifact::{EnvelopeError, Interchange, Message};
use crate::inbox::{
    Decision, DeliveryRecord, InboxError, NewAcknowledgement, REJECTED_BYTES_LIMIT, RejectedFile,
    Resend,
};

/// The decision for one interchange: take the key, or find who has it.
pub(super) fn decide(
    conn: &Connection,
    id: i64,
    i: &Interchange<'_>,
    compressed: Option<&[u8]>,
    source_file: &str,
    received_at: &str,
) -> Result<Decision, InboxError> {
    let u = &i.unb;
    let sha = i.sha256_hex();
    // `id` is the sequence's next: the interchange row gets it if the key is new, and an
    // unused one costs nothing.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at, interchange_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            u.sender.as_str(),
            u.recipient.as_str(),
            u.control_ref.as_str(),
            sha,
            source_file,
            received_at,
            id
        ])?;
    if inserted == 1 {
        crash_point!("after-key-insert");
        write_interchange(conn, id, i, compressed, &sha, source_file, received_at)?;
        crash_point!("after-business-rows");
        return Ok(Decision::New { interchange_id: id });
    }
    let stored: String = conn
        .prepare_cached(
            "SELECT sha256 FROM inbox WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3",
        )?
        .query_row(
            params![
                u.sender.as_str(),
                u.recipient.as_str(),
                u.control_ref.as_str()
            ],
            |r| r.get(0),
        )?;
    let drift = stored != sha;
    conn.prepare_cached(
        "INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256, source_file, seen_at, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        u.sender.as_str(),
        u.recipient.as_str(),
        u.control_ref.as_str(),
        if drift { "drift" } else { "duplicate" },
        sha,
        stored,
        source_file,
        received_at,
        drift.then_some(&*i.raw),
    ])?;
    Ok(if drift {
        Decision::Drift {
            stored_sha256: stored,
        }
    } else {
        Decision::Duplicate
    })
}

/// The business rows of a new interchange: the interchange, its messages, an outbox event each.
fn write_interchange(
    conn: &Connection,
    id: i64,
    i: &Interchange<'_>,
    compressed: Option<&[u8]>,
    sha: &str,
    source_file: &str,
    received_at: &str,
) -> Result<(), InboxError> {
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
             sha256, source_file, source_offset, received_at, raw, raw_codec)
         VALUES (?23, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, 'zstd')",
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
        source_file,
        i.offset as i64,
        received_at,
        stored,
        id,
    ])?;
    // Eight rows a statement where there are eight: one statement per message was most of the
    // deciding thread's time, which is what the whole run waits on.
    let mut rest = i.messages.iter().enumerate();
    if i.messages.len() >= MESSAGE_ROWS {
        let mut eight = conn.prepare_cached(INSERT_EIGHT_MESSAGES)?;
        for _ in 0..i.messages.len() / MESSAGE_ROWS {
            for (k, (n, m)) in rest.by_ref().take(MESSAGE_ROWS).enumerate() {
                bind_message(&mut eight, k * MESSAGE_COLUMNS, id, n, m, i)?;
            }
            eight.raw_execute()?;
        }
    }
    let mut one = conn.prepare_cached(INSERT_ONE_MESSAGE)?;
    for (n, m) in rest {
        bind_message(&mut one, 0, id, n, m, i)?;
        one.raw_execute()?;
    }
    // One statement for the interchange's events rather than one per message: per-message
    // statements were most of the deciding thread's time (the floor writes no outbox at all).
    conn.prepare_cached(
        "INSERT INTO outbox (message_id, event_type, created_at)
         SELECT id, 'edifact.' || message_type || '.received', ?2
         FROM messages WHERE interchange_id = ?1 ORDER BY id",
    )?
    .execute(params![id, received_at])?;
    Ok(())
}

/// Rows a multi-row message insert takes, and the columns of each.
const MESSAGE_ROWS: usize = 8;
const MESSAGE_COLUMNS: usize = 12;

macro_rules! insert_messages {
    ($($row:literal),+) => {
        concat!(
            "INSERT INTO messages (interchange_id, position, reference, message_type, version, ",
            "release, agency, association_code, group_ref, segments, raw_start, raw_end) VALUES ",
            $($row),+
        )
    };
}
const INSERT_ONE_MESSAGE: &str = insert_messages!("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
const INSERT_EIGHT_MESSAGES: &str = insert_messages!(
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
fn bind_message(
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

/// Allocates the partner's next CONTRL control reference and stores the CONTRL under it.
pub(super) fn record_acknowledgement(
    conn: &Connection,
    ack: &NewAcknowledgement<'_>,
) -> Result<String, InboxError> {
    let n: i64 = conn
        .prepare_cached(
            "INSERT INTO contrl_counters (partner, next) VALUES (?1, 2)
             ON CONFLICT (partner) DO UPDATE SET next = next + 1
             RETURNING next - 1",
        )?
        .query_row([ack.partner], |r| r.get(0))?;
    let own_ref = crate::inbox::contrl_reference(n);
    let bytes = (ack.build)(&own_ref);
    conn.prepare_cached(
        "INSERT INTO acknowledgements (sender, recipient, control_ref, partner, own_ref, action,
             error_code, bytes, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        ack.sender,
        ack.recipient,
        ack.control_ref,
        ack.partner,
        own_ref,
        ack.action,
        ack.error_code,
        bytes,
        ack.created_at
    ])?;
    conn.prepare_cached(
        "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
         VALUES (last_insert_rowid(), 1, 'edifact.CONTRL.outbound', ?1, ?2)",
    )?
    .execute([ack.created_at, ack.sending])?;
    Ok(own_ref)
}

/// The first CONTRL of a key (not a rejection as a duplicate) queued again for `sending`,
/// where no event of it was queued for that sending before.
pub(super) fn resend_acknowledgement(
    conn: &Connection,
    (sender, recipient, control_ref): (&str, &str, &str),
    sending: Option<&str>,
    created_at: &str,
) -> Result<Resend, InboxError> {
    let first: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, own_ref FROM acknowledgements
             WHERE sender = ?1 AND recipient = ?2 AND control_ref = ?3
               AND (action <> '4' OR error_code IS NULL OR error_code <> '26')
             ORDER BY id LIMIT 1",
        )?
        .query_row([sender, recipient, control_ref], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let Some((id, own_ref)) = first else {
        return Ok(Resend::Unanswered);
    };
    let Some(sending) = sending else {
        return Ok(Resend::AlreadySent);
    };
    let queued = conn
        .prepare_cached(
            "INSERT INTO contrl_outbox (acknowledgement_id, send, event_type, created_at, source)
             SELECT ?1, max(send) + 1, 'edifact.CONTRL.outbound', ?2, ?3
             FROM contrl_outbox WHERE acknowledgement_id = ?1
             ON CONFLICT (acknowledgement_id, source) DO NOTHING",
        )?
        .execute(params![id, created_at, sending])?;
    Ok(if queued == 1 {
        Resend::Queued(own_ref)
    } else {
        Resend::AlreadySent
    })
}

/// Records deliveries taken from a broker.
pub(super) fn record_deliveries(
    conn: &Connection,
    deliveries: &[DeliveryRecord<'_>],
    seen_at: &str,
) -> Result<(), InboxError> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO deliveries (source, filename, delivery_count, size, seen_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for d in deliveries {
        insert.execute(params![
            d.source,
            d.filename,
            d.delivery_count,
            d.size as i64,
            seen_at
        ])?;
    }
    Ok(())
}

/// Records a rejected file's bytes once; the same file with the same content only counts again.
pub(super) fn record_rejected_file(
    conn: &Connection,
    source_file: &str,
    bytes: &[u8],
    sha256: &str,
    seen_at: &str,
) -> Result<i64, InboxError> {
    let kept = &bytes[..bytes.len().min(REJECTED_BYTES_LIMIT)];
    Ok(conn
        .prepare_cached(
            "INSERT INTO rejected_files (source_file, file_sha256, file_size, bytes, truncated,
                 first_seen_at, last_seen_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
             ON CONFLICT (source_file, file_sha256)
             DO UPDATE SET last_seen_at = excluded.last_seen_at, times_seen = times_seen + 1
             RETURNING id",
        )?
        .query_row(
            params![
                source_file,
                sha256,
                bytes.len() as i64,
                kept,
                kept.len() < bytes.len(),
                seen_at,
            ],
            |r| r.get(0),
        )?)
}

/// Records one error of a rejected file; the same error of the same file only counts again.
pub(super) fn record_rejection(
    conn: &Connection,
    file: &RejectedFile,
    source_file: &str,
    error: &EnvelopeError,
    seen_at: &str,
) -> Result<(), InboxError> {
    conn.prepare_cached(
        "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset, first_seen_at,
             last_seen_at, file_size, truncated, file_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9)
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
    ])?;
    Ok(())
}

/// Migration 4: every stored hash computed again from the stored bytes, now that the service
/// characters in force go into it where they are not the defaults. Only interchanges with other
/// service characters get another hash; without this, their redeliveries would be false drift.
pub(super) fn rehash(conn: &Connection) -> Result<(), InboxError> {
    let mut changed: Vec<(i64, String, String)> = Vec::new();
    {
        let mut stmt = conn.prepare("SELECT id, sha256, raw, raw_codec FROM interchanges")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (id, old, raw, codec): (i64, String, Vec<u8>, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let raw = if codec == "zstd" {
                crate::inbox::decompress(&raw)?
            } else {
                raw
            };
            if let Some(new) = hash_of(&raw).filter(|new| *new != old) {
                changed.push((id, old, new));
            }
        }
    }
    for (id, old, new) in &changed {
        conn.execute(
            "UPDATE interchanges SET sha256 = ?2 WHERE id = ?1",
            params![id, new],
        )?;
        conn.execute(
            "UPDATE inbox SET sha256 = ?2 WHERE interchange_id = ?1 AND sha256 = ?3",
            params![id, new, old],
        )?;
        // Sightings of that key: what they were compared with, and the duplicates' own hash
        // (they were the same bytes).
        conn.execute(
            "UPDATE sightings SET stored_sha256 = ?2
             WHERE stored_sha256 = ?3 AND (sender, recipient, control_ref) =
                   (SELECT sender, recipient, control_ref FROM interchanges WHERE id = ?1)",
            params![id, new, old],
        )?;
        conn.execute(
            "UPDATE sightings SET sha256 = ?2
             WHERE status = 'duplicate' AND sha256 = ?3 AND (sender, recipient, control_ref) =
                   (SELECT sender, recipient, control_ref FROM interchanges WHERE id = ?1)",
            params![id, new, old],
        )?;
    }
    // Drifted copies keep their bytes: their own hash is computed again too.
    let mut drifted: Vec<(i64, String)> = Vec::new();
    {
        let mut stmt =
            conn.prepare("SELECT id, sha256, payload FROM sightings WHERE payload IS NOT NULL")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let (id, old, payload): (i64, String, Vec<u8>) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if let Some(new) = hash_of(&payload).filter(|new| *new != old) {
                drifted.push((id, new));
            }
        }
    }
    for (id, new) in drifted {
        conn.execute(
            "UPDATE sightings SET sha256 = ?2 WHERE id = ?1",
            params![id, new],
        )?;
    }
    Ok(())
}

/// The hash of the first interchange in `raw`, as the parser makes it now.
fn hash_of(raw: &[u8]) -> Option<String> {
    crate::edifact::interchanges(raw)
        .next()?
        .ok()
        .map(|i| i.sha256_hex())
}
