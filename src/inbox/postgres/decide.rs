//! A batch's decision, set-based: a handful of statements whatever the batch's size, inside the
//! caller's transaction (never committed here).
//!
//! 1. The first copy of each key in the batch goes into `inbox`, the keys sorted (so that two
//!    hosts taking the same keys lock them in the same order and never deadlock), with
//!    `ON CONFLICT ON CONSTRAINT inbox_key DO NOTHING`: a key another host holds uncommitted
//!    makes this one wait for it, then count as taken.
//! 2. The keys not taken are read back with their stored hash: duplicate or drift.
//! 3. Later copies of a key in the same batch are decided against its first copy (taken) or the
//!    stored hash.
//! 4. The new interchanges, their messages and outbox events, and the sightings, go in with one
//!    statement each, from arrays.

use std::collections::HashMap;

use postgres::Client;

use crate::edifact::Interchange;
use crate::inbox::{Candidate, Decision, InboxError};

type Key<'a> = (&'a str, &'a str, &'a str);

fn key<'a>(i: &'a Interchange<'_>) -> Key<'a> {
    (
        i.unb.sender.as_str(),
        i.unb.recipient.as_str(),
        i.unb.control_ref.as_str(),
    )
}

/// Decides `batch` in its order; see the module's comment.
pub(super) fn decide(
    client: &mut Client,
    batch: &[Candidate<'_>],
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
    let taken: HashMap<(String, String, String), i64> = client
        .query(
            "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at,
                                interchange_id)
             SELECT s, r, c, h, f, now(), nextval('interchanges_id_seq')
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                  WITH ORDINALITY AS t(s, r, c, h, f, o)
             ORDER BY o
             ON CONFLICT ON CONSTRAINT inbox_key DO NOTHING
             RETURNING sender, recipient, control_ref, interchange_id",
            &[&senders, &recipients, &refs, &shas, &files],
        )?
        .into_iter()
        .map(|r| ((r.get(0), r.get(1), r.get(2)), r.get(3)))
        .collect();
    // The stored hash of every key that was there already.
    let missing: Vec<usize> = contenders
        .iter()
        .copied()
        .filter(|&n| !taken.contains_key(&owned(key(batch[n].interchange))))
        .collect();
    let mut stored: HashMap<(String, String, String), String> = HashMap::new();
    if !missing.is_empty() {
        let (s, r, c) = (
            column(&missing, |n| batch[n].interchange.unb.sender.as_str()),
            column(&missing, |n| batch[n].interchange.unb.recipient.as_str()),
            column(&missing, |n| batch[n].interchange.unb.control_ref.as_str()),
        );
        for row in client.query(
            "SELECT i.sender, i.recipient, i.control_ref, i.sha256
             FROM inbox i
             JOIN unnest($1::text[], $2::text[], $3::text[]) AS t(s, r, c)
               ON (i.sender, i.recipient, i.control_ref) = (t.s, t.r, t.c)",
            &[&s, &r, &c],
        )? {
            stored.insert((row.get(0), row.get(1), row.get(2)), row.get(3));
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
            (None, None) => return Err(InboxError::Backend(Box::new(KeyVanished))),
        };
        decisions.push(decision);
    }
    write_new(client, batch, &decisions, &hashes)?;
    write_sightings(client, batch, &decisions, &hashes)?;
    Ok(decisions)
}

/// A key neither taken by this batch nor found stored: its holder was purged between the two
/// statements. Not a failure of the data: the batch is rolled back and tried again, whole.
#[derive(Debug)]
pub(super) struct KeyVanished;

impl std::fmt::Display for KeyVanished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key was neither taken nor found (purged meanwhile)")
    }
}

impl std::error::Error for KeyVanished {}

/// One column of rows `rows`, for an array parameter.
fn column<'a, T>(rows: &[usize], f: impl Fn(usize) -> T + 'a) -> Vec<T> {
    rows.iter().map(|&n| f(n)).collect()
}

fn owned((s, r, c): Key<'_>) -> (String, String, String) {
    (s.to_string(), r.to_string(), c.to_string())
}

fn compare(sha: &str, accepted: &str) -> Decision {
    if sha == accepted {
        Decision::Duplicate
    } else {
        Decision::Drift {
            stored_sha256: accepted.to_string(),
        }
    }
}

/// The business rows of the new interchanges: the interchanges, then their messages with an
/// outbox event each; two statements.
fn write_new(
    client: &mut Client,
    batch: &[Candidate<'_>],
    decisions: &[Decision],
    hashes: &[String],
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
    client.execute(
        "INSERT INTO interchanges (id, sender, sender_qualifier, sender_routing, recipient,
             recipient_qualifier, recipient_routing, control_ref, syntax_id, syntax_version,
             prepared_date, prepared_time, recipient_ref, application_ref, priority, ack_request,
             agreement_id, test_indicator, sha256, source_file, source_offset, received_at, raw,
             raw_codec)
         SELECT id, s, sq, sr, r, rq, rr, c, si, sv, d, tm, rref, app, pri, ack, agr, test, sha,
                file, off, now(), raw, 'zstd'
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                     $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
                     $19::text[], $20::text[], $21::bigint[], $22::bytea[])
              AS t(id, s, sq, sr, r, rq, rr, c, si, sv, d, tm, rref, app, pri, ack, agr, test,
                   sha, file, off, raw)",
        &[
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
        ],
    )?;
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
    // The outbox events from the rows just written, not from a second look at the table.
    client.execute(
        "WITH m AS (
             INSERT INTO messages (interchange_id, position, reference, message_type, version,
                 release, agency, association_code, group_ref, segments, raw_start, raw_end)
             SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::text[], $9::text[], $10::int[],
                                  $11::bigint[], $12::bigint[])
             RETURNING id, message_type)
         INSERT INTO outbox (message_id, event_type, created_at)
         SELECT id, 'edifact.' || message_type || '.received', now() FROM m ORDER BY id",
        &[
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
        ],
    )?;
    Ok(())
}

/// The columns of the message rows, as arrays.
#[derive(Default)]
struct MessageColumns<'a> {
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
fn write_sightings(
    client: &mut Client,
    batch: &[Candidate<'_>],
    decisions: &[Decision],
    hashes: &[String],
) -> Result<(), InboxError> {
    let seen: Vec<(usize, &str, &str)> = decisions
        .iter()
        .enumerate()
        .filter_map(|(n, d)| match d {
            Decision::Duplicate => Some((n, "duplicate", hashes[n].as_str())),
            Decision::Drift { stored_sha256 } => Some((n, "drift", stored_sha256.as_str())),
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
    client.execute(
        "INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256,
             source_file, seen_at, payload)
         SELECT s, r, c, st, h, sh, f, now(), p
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::bytea[]) AS t(s, r, c, st, h, sh, f, p)",
        &[
            &column(&rows, |n| batch[n].interchange.unb.sender.as_str()),
            &column(&rows, |n| batch[n].interchange.unb.recipient.as_str()),
            &column(&rows, |n| batch[n].interchange.unb.control_ref.as_str()),
            &statuses,
            &column(&rows, |n| hashes[n].as_str()),
            &stored,
            &column(&rows, |n| batch[n].source_file),
            &payloads,
        ],
    )?;
    Ok(())
}
