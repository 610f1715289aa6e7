//! Deciding a batch set-based, in one READ COMMITTED transaction and a few statements; the
//! rejected input and the deliveries taken; the key probe of the reading threads.

use std::collections::HashMap;
use std::time::Duration;

use super::session::Session;
use super::{PgInbox, storable};
use crate::edifact::{EnvelopeError, Interchange};
use crate::inbox::names::{Counter, delivery_counts, received_around};
use crate::inbox::postgres::error::{KeyVanished, describe, refusable, retryable};
use crate::inbox::{
    Candidate, Decision, Decisions, DeliveryRecord, InboxError, InterchangeKey, KeyProbe,
    REJECTED_BYTES_LIMIT, RejectedFile, SightingRow,
};
use crate::standard::Standard;

/// The message rows of new interchanges, from twelve arrays ($1..$12).
macro_rules! insert_messages {
    () => {
        "INSERT INTO messages (interchange_id, position, reference, message_type, version,
             release, agency, association_code, group_ref, segments, raw_start, raw_end)
         SELECT * FROM unnest($26::bigint[], $27::int[], $28::text[], $29::text[], $30::text[],
                              $31::text[], $32::text[], $33::text[], $34::text[], $35::int[],
                              $36::bigint[], $37::bigint[])"
    };
}

/// The new interchanges' rows, $1 to $25 (see [`write_new`]): in the statement that writes their
/// messages, one round trip for both (the messages' references to them are checked at the
/// statement's end, when both are written).
macro_rules! insert_interchanges {
    () => {
        "INSERT INTO interchanges (id, sender, sender_qualifier, sender_routing, recipient,
             recipient_qualifier, recipient_routing, control_ref, syntax_id, syntax_version,
             prepared_date, prepared_time, recipient_ref, application_ref, priority, ack_request,
             agreement_id, test_indicator, sha256, source_file, source_offset, received_at, raw,
             raw_codec, source_path, host, standard)
         SELECT id, s, sq, sr, r, rq, rr, c, si, sv, d, tm, rref, app, pri, ack, agr, test, sha,
                file, off, now(), raw, 'zstd', path, $24, st
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                     $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
                     $19::text[], $20::text[], $21::bigint[], $22::bytea[], $23::text[],
                     $25::text[])
              AS t(id, s, sq, sr, r, rq, rr, c, si, sv, d, tm, rref, app, pri, ack, agr, test,
                   sha, file, off, raw, path, st)"
    };
}

/// How many times a batch is tried again after a deadlock or a serialization failure.
pub(super) const RETRIES: usize = 5;

impl Decisions for PgInbox {
    fn decide(&mut self, batch: &[Candidate<'_>]) -> Result<Vec<Decision>, InboxError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // The batch's decision is the first thing its transaction does (ingest records the
        // rejected pieces after it), so a failed try is rolled back whole and made again.
        let mut tries = 0;
        loop {
            self.begin()?;
            let effects = self.effects.clone();
            // Where the transaction holds writes of its own before the decision (`effects try`:
            // the operator's migrations, not committed), a refusal goes back to here, not to
            // the transaction's start.
            let kept = self.try_transaction;
            if kept {
                self.client.get_mut().batch_execute("SAVEPOINT batch")?;
            }
            let result = match decide(self.client.get_mut(), batch, &self.host, effects.as_deref())
            {
                Err(e) if refusable(&e) && kept => {
                    self.client.get_mut().batch_execute("ROLLBACK TO batch")?;
                    self.decide_around_refused(batch)
                }
                Err(e) if refusable(&e) => {
                    self.rollback();
                    self.begin()?;
                    self.decide_around_refused(batch)
                }
                other => other,
            };
            match result {
                Ok(decisions) => {
                    self.count(&decisions);
                    return Ok(decisions);
                }
                Err(e) if retryable(&e) && tries < RETRIES => {
                    tries += 1;
                    self.rollback();
                    std::thread::sleep(Duration::from_millis(20 * tries as u64));
                }
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
            }
        }
    }

    /// The decision costs a round trip to the server per statement: a whole batch at once.
    fn decides_whole_batches(&self) -> bool {
        true
    }

    fn rejected_file(
        &mut self,
        source_file: &str,
        sending: &str,
        bytes: &[u8],
        sha256: &str,
        _seen_at: &str,
    ) -> Result<RejectedFile, InboxError> {
        self.begin()?;
        let (id, seen_before) =
            record_rejected_file(self.client.get_mut(), source_file, sending, bytes, sha256)?;
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
        _seen_at: &str,
    ) -> Result<(), InboxError> {
        self.begin()?;
        record_rejection(self.client.get_mut(), file, source_file, error, key)?;
        *self
            .pending_counts
            .entry(Counter::IngestRejected.name())
            .or_default() += 1;
        Ok(())
    }

    fn record_deliveries(
        &mut self,
        deliveries: &[DeliveryRecord<'_>],
        _seen_at: &str,
    ) -> Result<(), InboxError> {
        if deliveries.is_empty() {
            return Ok(());
        }
        self.begin()?;
        self.pending_deliveries.add(deliveries);
        for (counter, n) in delivery_counts(deliveries) {
            *self.pending_counts.entry(counter.name()).or_default() += n;
        }
        Ok(())
    }

    /// One statement for both tables, committed at once (no batch is open after a commit,
    /// when files are moved).
    fn record_moves(&mut self, moves: &[(SightingRow, String)]) -> Result<(), InboxError> {
        if moves.is_empty() {
            return Ok(());
        }
        let (mut ids, mut to, mut sighting) = (Vec::new(), Vec::new(), Vec::new());
        for (row, path) in moves {
            let (id, is_sighting) = match row {
                SightingRow::Interchange(id) => (*id, false),
                SightingRow::Sighting(id) => (*id, true),
            };
            ids.push(id);
            to.push(storable(path).into_owned());
            sighting.push(is_sighting);
        }
        self.client.get_mut().execute_prepared(
            "WITH u AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::bool[])
                            AS u(id, to_path, sighting)),
                  i AS (UPDATE interchanges t SET moved_to = u.to_path FROM u
                        WHERE NOT u.sighting AND t.id = u.id)
             UPDATE sightings t SET moved_to = u.to_path FROM u
             WHERE u.sighting AND t.id = u.id",
            &[&ids, &to, &sighting],
        )?;
        Ok(())
    }

    fn probe(&self) -> Option<Box<dyn KeyProbe + Send>> {
        let mut client = self.target.connect().ok()?;
        client
            .batch_execute(&format!(
                // A lookup is only a hint (an answer of "not known" makes the reader read the
                // file whole): it never waits on a lock or a slow server.
                "SET search_path = {}; SET default_transaction_read_only = on;
                 SET lock_timeout = 1000; SET statement_timeout = 5000",
                self.target.sql_schema()
            ))
            .ok()?;
        // Prepared once: parsed and planned per file, the lookup cost more than it saved.
        let has = client
            .prepare(
                "SELECT 1 FROM inbox
                 WHERE sender = $1 AND recipient = $2 AND control_ref = $3 AND standard = $4",
            )
            .ok()?;
        Some(Box::new(PgProbe {
            client: std::sync::Mutex::new(client),
            has,
        }))
    }
}

impl PgInbox {
    /// Finds the interchanges of `batch` that the server refuses to store (a key too long for
    /// its index, say), halving the batch in savepoints around a data error. Every savepoint is
    /// rolled back, whatever it found: a released subtransaction that wrote keeps its place in
    /// the server's cache of 64 per transaction, a rolled-back one does not, so isolating many
    /// bad interchanges never overflows it. Only after the batch as a whole failed.
    pub(super) fn refused(
        &mut self,
        batch: &[Candidate<'_>],
        refused: &mut Vec<Option<Decision>>,
        at: usize,
    ) -> Result<(), InboxError> {
        let effects = self.effects.clone();
        let client = self.client.get_mut();
        client.batch_execute("SAVEPOINT part")?;
        let result = decide(client, batch, &self.host, effects.as_deref());
        client.batch_execute("ROLLBACK TO part; RELEASE part")?;
        match result {
            Ok(_) => Ok(()),
            Err(e) if !refusable(&e) => Err(e),
            Err(InboxError::EffectFailed(r)) if batch.len() == 1 => {
                refused[at] = Some(Decision::Refused(r));
                Ok(())
            }
            Err(e) if batch.len() == 1 => {
                refused[at] = Some(Decision::Unstorable {
                    reason: format!("the PostgreSQL inbox cannot store it: {}", describe(&e)),
                });
                Ok(())
            }
            Err(_) => {
                let half = batch.len() / 2;
                let (left, right) = batch.split_at(half);
                self.refused(left, refused, at)?;
                self.refused(right, refused, at + half)
            }
        }
    }

    /// Decides `batch` once the interchanges the server refuses are found: the others together,
    /// in the batch's own transaction, the refused ones refused (an interchange the operator's
    /// side effects refused kept whole). Found again where the others together still fail: a
    /// second copy of a refused interchange in the same batch is new once the first is out.
    pub(super) fn decide_around_refused(
        &mut self,
        batch: &[Candidate<'_>],
    ) -> Result<Vec<Decision>, InboxError> {
        let mut refused: Vec<Option<Decision>> = vec![None; batch.len()];
        let effects = self.effects.clone();
        let decided = loop {
            let open: Vec<usize> = (0..batch.len()).filter(|&n| refused[n].is_none()).collect();
            let rest: Vec<Candidate<'_>> = open.iter().map(|&n| batch[n]).collect();
            let mut found = vec![None; rest.len()];
            self.refused(&rest, &mut found, 0)?;
            let none_found = found.iter().all(Option::is_none);
            for (n, f) in open.iter().zip(found) {
                refused[*n] = f;
            }
            let rest: Vec<Candidate<'_>> = (0..batch.len())
                .filter(|&n| refused[n].is_none())
                .map(|n| batch[n])
                .collect();
            let client = self.client.get_mut();
            client.batch_execute("SAVEPOINT rest")?;
            match decide(client, &rest, &self.host, effects.as_deref()) {
                Ok(d) => {
                    client.batch_execute("RELEASE rest")?;
                    break d;
                }
                Err(e) if refusable(&e) && !none_found => {
                    client.batch_execute("ROLLBACK TO rest; RELEASE rest")?;
                }
                Err(e) => return Err(e),
            }
        };
        let mut decided = decided.into_iter();
        let mut out = Vec::with_capacity(batch.len());
        for (c, r) in batch.iter().zip(refused) {
            out.push(match r {
                Some(Decision::Refused(mut refusal)) => {
                    refusal.times_seen = keep_refused(self.client.get_mut(), c, &refusal)?;
                    Decision::Refused(refusal)
                }
                Some(d) => d,
                None => decided.next().ok_or_else(|| {
                    InboxError::Backend("a batch's decisions came back short".into())
                })?,
            });
        }
        Ok(out)
    }
}

/// Keeps a refused interchange whole in the open batch, or counts an identical one again; how
/// many times it has been refused.
pub(super) fn keep_refused(
    client: &mut Session,
    c: &Candidate<'_>,
    r: &crate::inbox::Refusal,
) -> Result<i64, InboxError> {
    let i = c.interchange;
    let raw = c.stored_bytes()?;
    let u = &i.unb;
    let n: i32 = client
        .query_one_prepared(
            "INSERT INTO refusals (sender, recipient, control_ref, sha256, source_file, raw,
                 statement, message_ref, code, error, standard)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (sender, recipient, control_ref, standard, sha256)
                 WHERE resolved_at IS NULL
             DO UPDATE SET times_seen = refusals.times_seen + 1, last_seen_at = now(),
                 source_file = excluded.source_file, statement = excluded.statement,
                 message_ref = excluded.message_ref, code = excluded.code, error = excluded.error
             RETURNING times_seen",
            &[
                &u.sender.as_str(),
                &u.recipient.as_str(),
                &u.control_ref.as_str(),
                &i.sha256_hex(),
                &c.source_file,
                &&*raw,
                &r.statement,
                &r.message_ref,
                &r.code,
                &super::storable(&r.error).as_ref(),
                &i.standard.as_str(),
            ],
        )?
        .get(0);
    Ok(i64::from(n))
}

/// A reading thread's connection, for [`Decisions::probe`].
pub(super) struct PgProbe {
    client: std::sync::Mutex<postgres::Client>,
    has: postgres::Statement,
}

impl KeyProbe for PgProbe {
    fn has(&self, key: InterchangeKey<'_>) -> bool {
        let Ok(mut client) = self.client.lock() else {
            return false;
        };
        client
            .query_opt(
                &self.has,
                &[
                    &key.sender,
                    &key.recipient,
                    &key.control_ref,
                    &key.standard.as_str(),
                ],
            )
            .is_ok_and(|r| r.is_some())
    }
}

/// A stored standard read back; a name the schema's CHECK would not hold is an error of the
/// row, never taken for EDIFACT.
impl<'a> postgres::types::FromSql<'a> for Standard {
    fn from_sql(
        ty: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = <&str as postgres::types::FromSql>::from_sql(ty, raw)?;
        Ok(text.parse::<Standard>()?)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        <&str as postgres::types::FromSql>::accepts(ty)
    }
}

/// A key in the order of the inbox's primary key (the standard last), which the batch's keys
/// are taken in, so that two hosts deciding the same keys lock them in one order.
pub(super) type Key<'a> = (&'a str, &'a str, &'a str, Standard);

pub(super) fn key<'a>(i: &'a Interchange<'_>) -> Key<'a> {
    (
        i.unb.sender.as_str(),
        i.unb.recipient.as_str(),
        i.unb.control_ref.as_str(),
        i.standard,
    )
}

/// Decides `batch` in its order; see the module's comment.
pub(super) fn decide(
    client: &mut Session,
    batch: &[Candidate<'_>],
    host: &str,
    effects: Option<&super::effects::Installed>,
) -> Result<Vec<Decision>, InboxError> {
    let hashes: Vec<String> = batch.iter().map(|c| c.interchange.sha256_hex()).collect();
    // The first copy of each key, sorted by key.
    let mut first: HashMap<Key<'_>, usize> = HashMap::new();
    for (n, c) in batch.iter().enumerate() {
        first.entry(key(c.interchange)).or_insert(n);
    }
    let mut contenders: Vec<usize> = first.values().copied().collect();
    contenders.sort_by_key(|&n| key(batch[n].interchange));
    let senders = column(&contenders, |n| batch[n].interchange.unb.sender.as_str());
    let recipients = column(&contenders, |n| batch[n].interchange.unb.recipient.as_str());
    let refs = column(&contenders, |n| {
        batch[n].interchange.unb.control_ref.as_str()
    });
    let shas = column(&contenders, |n| hashes[n].as_str());
    let files = column(&contenders, |n| batch[n].source_file);
    let standards = column(&contenders, |n| batch[n].interchange.standard.as_str());
    let mut taken: HashMap<OwnedKey, i64> = HashMap::new();
    for r in client.query_prepared(
        "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at,
                            interchange_id, standard)
         SELECT s, r, c, h, f, now(), nextval('interchanges_id_seq'), st
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
              WITH ORDINALITY AS t(s, r, c, h, f, st, o)
         ORDER BY o
         ON CONFLICT ON CONSTRAINT inbox_key DO NOTHING
         RETURNING sender, recipient, control_ref, standard, interchange_id",
        &[&senders, &recipients, &refs, &shas, &files, &standards],
    )? {
        taken.insert(
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?),
            r.try_get(4)?,
        );
    }
    // The stored hash of every key that was there already.
    let missing: Vec<usize> = contenders
        .iter()
        .copied()
        .filter(|&n| !taken.contains_key(&owned(key(batch[n].interchange))))
        .collect();
    let mut stored: HashMap<OwnedKey, String> = HashMap::new();
    if !missing.is_empty() {
        let (s, r, c, st) = (
            column(&missing, |n| batch[n].interchange.unb.sender.as_str()),
            column(&missing, |n| batch[n].interchange.unb.recipient.as_str()),
            column(&missing, |n| batch[n].interchange.unb.control_ref.as_str()),
            column(&missing, |n| batch[n].interchange.standard.as_str()),
        );
        for row in client.query_prepared(
            "SELECT i.sender, i.recipient, i.control_ref, i.standard, i.sha256
             FROM inbox i
             JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(s, r, c, st)
               ON (i.sender, i.recipient, i.control_ref, i.standard) = (t.s, t.r, t.c, t.st)",
            &[&s, &r, &c, &st],
        )? {
            stored.insert(
                (
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                ),
                row.try_get(4)?,
            );
        }
    }
    // Each candidate against the copy accepted for its key.
    let mut decisions = Vec::with_capacity(batch.len());
    for (n, c) in batch.iter().enumerate() {
        let k = owned(key(c.interchange));
        let first_n = first[&key(c.interchange)];
        let decision = match (taken.get(&k), stored.get(&k)) {
            (Some(&id), _) if first_n == n => Decision::New { interchange_id: id },
            (Some(_), _) => compare(&hashes[n], &hashes[first_n]),
            (None, Some(h)) => compare(&hashes[n], h),
            // Neither taken nor there: the key's holder was purged in between, or rolled back
            // after this statement had looked. The batch is tried again, whole.
            (None, None) => return Err(KeyVanished.into()),
        };
        decisions.push(decision);
    }
    write_new(client, batch, &decisions, &hashes, host, effects)?;
    write_sightings(client, batch, &mut decisions, &hashes, host)?;
    Ok(decisions)
}

/// One column of rows `rows`, for an array parameter.
pub(super) fn column<'a, T>(rows: &[usize], f: impl Fn(usize) -> T + 'a) -> Vec<T> {
    rows.iter().map(|&n| f(n)).collect()
}

/// A [`Key`] as the server returns it.
pub(super) type OwnedKey = (String, String, String, Standard);

pub(super) fn owned((s, r, c, st): Key<'_>) -> OwnedKey {
    (s.to_string(), r.to_string(), c.to_string(), st)
}

/// Duplicate or drift; its sighting's id is the row [`write_sightings`] writes for it.
pub(super) fn compare(sha: &str, accepted: &str) -> Decision {
    if sha == accepted {
        Decision::Duplicate { sighting_id: 0 }
    } else {
        Decision::Drift {
            stored_sha256: accepted.to_string(),
            sighting_id: 0,
        }
    }
}

/// The business rows of the new interchanges: the interchanges, then their messages with an
/// outbox event each; two statements.
pub(super) fn write_new(
    client: &mut Session,
    batch: &[Candidate<'_>],
    decisions: &[Decision],
    hashes: &[String],
    host: &str,
    effects: Option<&super::effects::Installed>,
) -> Result<(), InboxError> {
    let new: Vec<(usize, i64)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(n, d)| match d {
            Decision::New { interchange_id } => Some((n, *interchange_id)),
            _ => None,
        })
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let mut own = Vec::new();
    for &(n, _) in &new {
        if batch[n].compressed.is_none() {
            own.push((n, crate::inbox::compress(&batch[n].interchange.raw)?));
        }
    }
    let raw = |n: usize| -> &[u8] {
        batch[n].compressed.unwrap_or_else(|| {
            own.iter()
                .find(|(m, _)| *m == n)
                .map_or(&[][..], |(_, c)| c.as_slice())
        })
    };
    let unb = |n: usize| &batch[n].interchange.unb;
    let rows: Vec<usize> = new.iter().map(|&(n, _)| n).collect();
    let ids: Vec<i64> = new.iter().map(|&(_, id)| id).collect();
    let offsets: Vec<i64> = new
        .iter()
        .map(|&(n, _)| batch[n].interchange.offset as i64)
        .collect();
    let raws: Vec<&[u8]> = new.iter().map(|&(n, _)| raw(n)).collect();
    // The interchanges' columns, $1 to $25 of the statement that writes them with their
    // messages.
    let host = storable(host);
    let interchange_columns: [&(dyn postgres::types::ToSql + Sync); 25] = [
        &ids,
        &column(&rows, |n| unb(n).sender.as_str()),
        &column(&rows, |n| unb(n).sender_qualifier.as_deref()),
        &column(&rows, |n| unb(n).sender_routing.as_deref()),
        &column(&rows, |n| unb(n).recipient.as_str()),
        &column(&rows, |n| unb(n).recipient_qualifier.as_deref()),
        &column(&rows, |n| unb(n).recipient_routing.as_deref()),
        &column(&rows, |n| unb(n).control_ref.as_str()),
        &column(&rows, |n| unb(n).syntax_id.as_str()),
        &column(&rows, |n| unb(n).syntax_version.as_str()),
        &column(&rows, |n| unb(n).date.as_str()),
        &column(&rows, |n| unb(n).time.as_str()),
        &column(&rows, |n| unb(n).recipient_ref.as_deref()),
        &column(&rows, |n| unb(n).application_ref.as_deref()),
        &column(&rows, |n| unb(n).priority.as_deref()),
        &column(&rows, |n| unb(n).ack_request.as_deref()),
        &column(&rows, |n| unb(n).agreement_id.as_deref()),
        &column(&rows, |n| unb(n).test_indicator.as_deref()),
        &column(&rows, |n| hashes[n].as_str()),
        &column(&rows, |n| batch[n].source_file),
        &offsets,
        &raws,
        &column(&rows, |n| {
            batch[n].source_path.map(|p| storable(p).into_owned())
        }),
        &host.as_ref(),
        &column(&rows, |n| batch[n].interchange.standard.as_str()),
    ];
    // Each new interchange's event type around its messages' types, by its standard.
    let befores = column(&rows, |n| received_around(batch[n].interchange.standard).0);
    let afters = column(&rows, |n| received_around(batch[n].interchange.standard).1);
    // One row per message of every new interchange.
    let mut m = MessageColumns::default();
    for &(n, id) in &new {
        let i = batch[n].interchange;
        for (k, msg) in i.messages.iter().enumerate() {
            m.interchange_id.push(id);
            m.position.push(k as i32 + 1);
            m.reference.push(msg.reference.as_str());
            m.message_type.push(msg.message_type.as_str());
            m.version.push(msg.version.as_str());
            m.release.push(msg.release.as_str());
            m.agency.push(msg.agency.as_str());
            m.association_code.push(msg.association_code.as_deref());
            m.group_ref.push(
                msg.group
                    .and_then(|g| i.groups.get(g))
                    .map(|g| g.reference.as_str()),
            );
            m.segments.push(msg.segments as i32);
            m.raw_start.push(msg.span.start as i64);
            m.raw_end.push(msg.span.end as i64);
        }
    }
    let message_columns: [&(dyn postgres::types::ToSql + Sync); 12] = [
        &m.interchange_id,
        &m.position,
        &m.reference,
        &m.message_type,
        &m.version,
        &m.release,
        &m.agency,
        &m.association_code,
        &m.group_ref,
        &m.segments,
        &m.raw_start,
        &m.raw_end,
    ];
    let params = [&interchange_columns[..], &message_columns[..]].concat();
    let Some(effects) = effects else {
        // One statement, one round trip: the interchanges, their messages, and the outbox
        // events from the rows just written (not from a second look at the table).
        client.execute_prepared(
            concat!(
                "WITH i AS (",
                insert_interchanges!(),
                "), m AS (",
                insert_messages!(),
                " RETURNING id, message_type, interchange_id)
                 INSERT INTO outbox (message_id, event_type, created_at)
                 SELECT m.id, p.before || m.message_type || p.after, now()
                 FROM m JOIN unnest($38::bigint[], $39::text[], $40::text[]) AS p(iid, before, after)
                   ON p.iid = m.interchange_id
                 ORDER BY m.id"
            ),
            &[&params[..], &[&ids, &befores, &afters]].concat(),
        )?;
        return Ok(());
    };
    // With the operator's side effects: the messages' rows first (their ids are parameters),
    // then the side effects of each new interchange, then the outbox events.
    let mut rows: HashMap<i64, Vec<(i32, i64)>> = HashMap::new();
    for r in client.query_prepared(
        concat!(
            "WITH i AS (",
            insert_interchanges!(),
            ") ",
            insert_messages!(),
            " RETURNING interchange_id, position, id"
        ),
        &params,
    )? {
        rows.entry(r.get(0)).or_default().push((r.get(1), r.get(2)));
    }
    let mut scopes = Vec::with_capacity(new.len());
    for &(n, id) in &new {
        let mut own = rows.remove(&id).unwrap_or_default();
        own.sort_unstable();
        let ids: Vec<i64> = own.into_iter().map(|(_, m)| m).collect();
        let scope = crate::inbox::effects::Scope {
            interchange: batch[n].interchange,
            interchange_id: id,
            sha256: &hashes[n],
            source: batch[n].source_file,
            received_at: batch[n].received_at,
            reapply: false,
            held: batch[n].held,
        };
        scopes.push((scope, ids));
    }
    effects.enter(client)?;
    let mut applied = Vec::new();
    effects.run_all(client, &scopes, &mut applied)?;
    effects.leave(client)?;
    effects.record(client, &applied)?;
    client.execute_prepared(
        "INSERT INTO outbox (message_id, event_type, created_at)
         SELECT m.id, p.before || m.message_type || p.after, now()
         FROM messages m JOIN unnest($1::bigint[], $2::text[], $3::text[]) AS p(iid, before, after)
           ON p.iid = m.interchange_id
         ORDER BY m.id",
        &[&ids, &befores, &afters],
    )?;
    Ok(())
}

/// The columns of the message rows, as arrays.
#[derive(Default)]
pub(super) struct MessageColumns<'a> {
    interchange_id: Vec<i64>,
    position: Vec<i32>,
    reference: Vec<&'a str>,
    message_type: Vec<&'a str>,
    version: Vec<&'a str>,
    release: Vec<&'a str>,
    agency: Vec<&'a str>,
    association_code: Vec<Option<&'a str>>,
    group_ref: Vec<Option<&'a str>>,
    segments: Vec<i32>,
    raw_start: Vec<i64>,
    raw_end: Vec<i64>,
}

/// A sighting for every duplicate and drift, drift with its bytes; one statement.
pub(super) fn write_sightings(
    client: &mut Session,
    batch: &[Candidate<'_>],
    decisions: &mut [Decision],
    hashes: &[String],
    host: &str,
) -> Result<(), InboxError> {
    let seen: Vec<(usize, &str, &str)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(n, d)| match d {
            Decision::Duplicate { .. } => Some((n, "duplicate", hashes[n].as_str())),
            Decision::Drift { stored_sha256, .. } => Some((n, "drift", stored_sha256.as_str())),
            _ => None,
        })
        .collect();
    if seen.is_empty() {
        return Ok(());
    }
    let rows: Vec<usize> = seen.iter().map(|&(n, _, _)| n).collect();
    let statuses: Vec<&str> = seen.iter().map(|&(_, s, _)| s).collect();
    let stored: Vec<&str> = seen.iter().map(|&(_, _, h)| h).collect();
    let payloads: Vec<Option<&[u8]>> = seen
        .iter()
        .map(|&(n, s, _)| (s == "drift").then(|| &*batch[n].interchange.raw))
        .collect();
    let stored: Vec<String> = stored.into_iter().map(str::to_string).collect();
    // The rows are inserted in the order of the arrays (ORDER BY o), each taking the next value
    // of the id's sequence as it is inserted: sorted, the ids returned are the rows' in order.
    let mut ids: Vec<i64> = client
        .query_prepared(
            "INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256,
                 source_file, seen_at, payload, source_path, host, standard)
             SELECT s, r, c, st, h, sh, f, now(), p, path, $10, std
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::bytea[], $9::text[], $11::text[])
                  WITH ORDINALITY AS t(s, r, c, st, h, sh, f, p, path, std, o)
             ORDER BY o
             RETURNING id",
            &[
                &column(&rows, |n| batch[n].interchange.unb.sender.as_str()),
                &column(&rows, |n| batch[n].interchange.unb.recipient.as_str()),
                &column(&rows, |n| batch[n].interchange.unb.control_ref.as_str()),
                &statuses,
                &column(&rows, |n| hashes[n].as_str()),
                &stored,
                &column(&rows, |n| batch[n].source_file),
                &payloads,
                &column(&rows, |n| {
                    batch[n].source_path.map(|p| storable(p).into_owned())
                }),
                &storable(host).as_ref(),
                &column(&rows, |n| batch[n].interchange.standard.as_str()),
            ],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.sort_unstable();
    if ids.len() != rows.len() {
        return Err(InboxError::Backend(
            "the sightings written came back short".into(),
        ));
    }
    for (&n, id) in rows.iter().zip(ids) {
        match &mut decisions[n] {
            Decision::Duplicate { sighting_id } | Decision::Drift { sighting_id, .. } => {
                *sighting_id = id;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Deliveries taken from a broker in the open batch, as columns: written when it commits, in
/// the statement that adds to the counters (one round trip for both; see `transaction.rs`).
#[derive(Default)]
pub(super) struct PendingDeliveries {
    pub(super) sources: Vec<String>,
    pub(super) names: Vec<Option<String>>,
    pub(super) counts: Vec<i32>,
    pub(super) sizes: Vec<i64>,
    pub(super) keys: Vec<Option<String>>,
    pub(super) produced: Vec<Option<String>>,
}

impl PendingDeliveries {
    pub(super) fn add(&mut self, deliveries: &[DeliveryRecord<'_>]) {
        for d in deliveries {
            self.sources.push(storable(d.source).into_owned());
            self.names
                .push(d.filename.map(|f| storable(f).into_owned()));
            self.counts
                .push(i32::try_from(d.delivery_count).unwrap_or(i32::MAX));
            self.sizes.push(d.size as i64);
            self.keys.push(d.key.map(|k| storable(k).into_owned()));
            self.produced.push(d.produced_at.map(str::to_string));
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

/// Records a rejected file's bytes once; the same file with the same content only counts again.
/// Returns its record's id, and whether the same bytes of the same sending were recorded before
/// (under this name, where another host's record of it is waited for by its key, or another
/// folder's).
pub(super) fn record_rejected_file(
    c: &mut Session,
    source_file: &str,
    sending: &str,
    bytes: &[u8],
    sha256: &str,
) -> Result<(i64, bool), InboxError> {
    let kept = &bytes[..bytes.len().min(REJECTED_BYTES_LIMIT)];
    let row = c.query_one_prepared(
        "INSERT INTO rejected_files (source_file, file_sha256, file_size, bytes, truncated,
             first_seen_at, last_seen_at, sending)
         VALUES ($1, $2, $3, $4, $5, now(), now(), $6)
         ON CONFLICT (source_file, file_sha256)
         DO UPDATE SET last_seen_at = excluded.last_seen_at,
                       times_seen = rejected_files.times_seen + 1,
                       sending = coalesce(rejected_files.sending, excluded.sending)
         RETURNING id, times_seen::bigint",
        &[
            &storable(source_file),
            &sha256,
            &(bytes.len() as i64),
            &kept,
            &(kept.len() < bytes.len()),
            &storable(sending),
        ],
    )?;
    let (id, times_seen): (i64, i64) = (row.get(0), row.get(1));
    if times_seen > 1 {
        return Ok((id, true));
    }
    let elsewhere: bool = c
        .query_one_prepared(
            "SELECT EXISTS (SELECT 1 FROM rejected_files
                            WHERE sending = $1 AND file_sha256 = $2 AND id <> $3)",
            &[&storable(sending), &sha256, &id],
        )?
        .get(0);
    Ok((id, elsewhere))
}

/// Records one error of a rejected file; the same error of the same file only counts again.
pub(super) fn record_rejection(
    c: &mut Session,
    file: &RejectedFile,
    source_file: &str,
    error: &EnvelopeError,
    key: Option<InterchangeKey<'_>>,
) -> Result<(), InboxError> {
    c.execute_prepared(
        "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
             first_seen_at, last_seen_at, file_size, truncated, file_id, sender, recipient,
             control_ref, standard)
         VALUES ($1, $2, $3, $4, $5, now(), now(), $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (source_file, file_sha256, kind, byte_offset)
         DO UPDATE SET last_seen_at = excluded.last_seen_at,
                       times_seen = rejections.times_seen + 1",
        &[
            &storable(source_file),
            &file.sha256,
            &storable(&error.to_string()),
            &error.code(),
            &(error.offset as i64),
            &(file.size as i64),
            &(file.size > REJECTED_BYTES_LIMIT),
            &file.id,
            &key.map(|k| storable(k.sender)),
            &key.map(|k| storable(k.recipient)),
            &key.map(|k| storable(k.control_ref)),
            &key.map(|k| k.standard.as_str()),
        ],
    )?;
    Ok(())
}
