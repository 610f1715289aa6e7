use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::migrations::{MIGRATIONS, Migration};
use super::wal::Checkpointer;
use super::{APPLICATION_ID, SqliteInbox};
use crate::inbox::{Access, Candidate, Decision, Decisions, InboxError, Transaction};

impl SqliteInbox {
    /// A batch of one.
    fn decide_single(
        &mut self,
        interchange: &crate::edifact::Interchange<'_>,
        compressed: Option<&[u8]>,
        source_file: &str,
        received_at: &str,
    ) -> Result<Decision, InboxError> {
        let c = Candidate {
            interchange,
            compressed,
            held: &[],
            source_file,
            source_path: None,
            received_at,
        };
        Ok(self.decide(&[c])?.remove(0))
    }
}

fn open(path: &Path) -> Result<SqliteInbox, InboxError> {
    SqliteInbox::connect(path, Duration::from_secs(60), Access::Create)
}
use crate::edifact::interchanges;

const ORDERS: &[u8] = b"UNB+UNOC:3+S:14+R:14+240101:1200+REF1'\
UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNZ+2+REF1'";

/// A writer that always has the next transaction open, as an ingest does, never lets the
/// WAL start over by itself. 400 commits of 32 KiB with a checkpointer beside: restarting
/// between commits once the WAL holds 64 frames keeps it near that; without the restart it
/// grows past 12 MB.
#[test]
fn restarts_keep_the_wal_bounded_under_a_busy_writer() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let inbox = SqliteInbox::connect(&path, Duration::from_secs(30), Access::Create).unwrap();
    inbox.set_auto_checkpoint(false).unwrap();
    inbox
        .connection()
        .execute_batch("CREATE TABLE filler (b BLOB)")
        .unwrap();
    let checkpointer = Checkpointer::open(&path).unwrap();
    let (done, frames) = (&AtomicBool::new(false), &AtomicI64::new(0));
    let rounds = &AtomicI64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let conn = inbox.connection();
            for n in 0..400 {
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                conn.execute("INSERT INTO filler VALUES (zeroblob(16384))", [])
                    .unwrap();
                // On a loaded machine the checkpointing thread may not run for a while (in
                // the program it runs every 250 ms whatever the load); here the writer lets
                // it catch up every eight commits, inside its transaction (as an ingest
                // always has the next batch open), so the test measures the restarts, not
                // the scheduler.
                if n % 8 == 0 {
                    let seen = rounds.load(Ordering::SeqCst);
                    while rounds.load(Ordering::SeqCst) < seen + 2 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
                conn.execute("INSERT INTO filler VALUES (zeroblob(16384))", [])
                    .unwrap();
                conn.execute_batch("COMMIT").unwrap();
                if frames.load(Ordering::SeqCst) >= 64 {
                    inbox.restart_wal().unwrap();
                    frames.store(0, Ordering::SeqCst);
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        while !done.load(Ordering::SeqCst) {
            frames.store(checkpointer.checkpoint().unwrap(), Ordering::SeqCst);
            rounds.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(100));
        }
    });
    let wal = std::fs::metadata(dir.path().join("inbox.db-wal"))
        .unwrap()
        .len();
    assert!(wal < 4_000_000, "WAL of {wal} bytes");
}

fn count(inbox: &SqliteInbox, table: &str) -> i64 {
    inbox
        .connection()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn new_then_duplicate_then_drift() {
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    let i = interchanges(ORDERS).next().unwrap().unwrap();
    let b = &mut inbox;
    assert!(matches!(
        b.decide_single(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
            .unwrap(),
        Decision::New { .. }
    ));
    assert_eq!(
        b.decide_single(&i, None, "b.edi", "2026-01-01T00:00:01.000Z")
            .unwrap(),
        Decision::Duplicate { sighting_id: 1 }
    );
    let changed = String::from_utf8_lossy(ORDERS).replace("PO1", "PO2");
    let j = interchanges(changed.as_bytes()).next().unwrap().unwrap();
    assert_eq!(
        b.decide_single(&j, None, "c.edi", "2026-01-01T00:00:02.000Z")
            .unwrap(),
        Decision::Drift {
            stored_sha256: i.sha256_hex(),
            sighting_id: 2
        }
    );
    b.commit().unwrap();
    assert_eq!(count(&inbox, "inbox"), 1);
    assert_eq!(count(&inbox, "interchanges"), 1);
    assert_eq!(count(&inbox, "messages"), 2);
    assert_eq!(count(&inbox, "outbox"), 2);
    assert_eq!(count(&inbox, "sightings"), 2);
    let payload: Vec<u8> = inbox
        .connection()
        .query_row(
            "SELECT payload FROM sightings WHERE status = 'drift'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(payload, changed.as_bytes());
    let (start, end): (usize, usize) = inbox
        .connection()
        .query_row(
            "SELECT raw_start, raw_end FROM messages WHERE position = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        &ORDERS[start..end],
        b"UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'"
    );
}

#[test]
fn an_uncommitted_batch_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    let i = interchanges(ORDERS).next().unwrap().unwrap();
    inbox
        .decide_single(&i, None, "a.edi", "2026-01-01T00:00:00.000Z")
        .unwrap();
    assert!(inbox.in_batch());
    inbox.rollback().unwrap();
    assert_eq!(count(&inbox, "inbox"), 0);
    assert_eq!(count(&inbox, "interchanges"), 0);
}

/// Without side effects a decision has no savepoint of its own: one that fails after its key
/// was taken (here a trigger left in the database refuses its second message row) must not
/// leave the batch open with that key and none of its messages, for a later commit to keep.
/// The whole batch is rolled back, the interchange decided before it too, and the error said.
/// Decides `x` alone, which must be new.
fn decided_new(inbox: &mut SqliteInbox, x: &crate::edifact::Interchange<'_>, name: &str) {
    assert!(matches!(
        inbox
            .decide_single(x, None, name, "2026-01-01T00:00:00.000Z")
            .unwrap(),
        Decision::New { .. }
    ));
}

/// The inbox rolled its batch back itself, once, and a commit after it has nothing to commit.
fn rolled_back_once(inbox: &mut SqliteInbox) {
    assert!(
        !inbox.in_batch(),
        "the batch was rolled back, not left open"
    );
    assert_eq!(inbox.rollbacks(), 1, "and the rollback is counted");
    inbox.commit().unwrap();
}

#[test]
fn a_decision_failing_without_side_effects_rolls_back_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    inbox
        .connection()
        .execute_batch(
            "CREATE TRIGGER no_second AFTER INSERT ON messages
             WHEN NEW.position = 2 AND NEW.reference = 'X'
             BEGIN SELECT RAISE(ABORT, 'no second message X'); END;",
        )
        .unwrap();
    let i = interchanges(ORDERS).next().unwrap().unwrap();
    let refused = String::from_utf8_lossy(ORDERS)
        .replace("REF1", "REF2")
        .replace("UNH+2+", "UNH+X+")
        .replace("UNT+2+2'", "UNT+2+X'");
    let j = interchanges(refused.as_bytes()).next().unwrap().unwrap();
    decided_new(&mut inbox, &i, "a.edi");
    let err = inbox
        .decide_single(&j, None, "b.edi", "2026-01-01T00:00:01.000Z")
        .expect_err("the trigger refuses the second interchange's message X");
    assert!(
        err.to_string().contains("no second message X"),
        "the error says why: {err}"
    );
    rolled_back_once(&mut inbox);
    for table in ["inbox", "interchanges", "messages", "outbox"] {
        assert_eq!(
            count(&inbox, table),
            0,
            "{table} keeps nothing of the batch"
        );
    }
    // The next batch starts afresh: the same interchanges are new again once the trigger is gone.
    inbox
        .connection()
        .execute_batch("DROP TRIGGER no_second")
        .unwrap();
    for (x, name) in [(&i, "a.edi"), (&j, "b.edi")] {
        assert!(matches!(
            inbox
                .decide_single(x, None, name, "2026-01-01T00:00:02.000Z")
                .unwrap(),
            Decision::New { .. }
        ));
    }
    inbox.commit().unwrap();
    assert_eq!(count(&inbox, "inbox"), 2);
    assert_eq!(count(&inbox, "outbox"), 4);
}

/// A decision's savepoint that cannot be rolled back to (here the statements released it
/// themselves, as an I/O error could also leave it) must not leave its writes in the batch,
/// to be committed with it: the whole batch goes, and the failure is the database's.
#[test]
fn a_savepoint_that_cannot_be_undone_rolls_back_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    inbox
        .connection()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let i = interchanges(ORDERS).next().unwrap().unwrap();
    decided_new(&mut inbox, &i, "a.edi");
    let err = inbox
        .in_savepoint(|c| -> Result<(), InboxError> {
            c.execute_batch("INSERT INTO t VALUES (1); RELEASE decision")?;
            Err(InboxError::Backend("the statement failed".into()))
        })
        .expect_err("the statement failed");
    let text = err.to_string();
    assert!(
        text.contains("the statement failed") && text.contains("whole batch was rolled back"),
        "the error says both what failed and what became of the batch: {text}"
    );
    rolled_back_once(&mut inbox);
    assert_eq!(
        count(&inbox, "t"),
        0,
        "the savepoint's write was not committed"
    );
    assert_eq!(
        count(&inbox, "inbox"),
        0,
        "nor the batch's earlier decision"
    );
}

/// A batch whose `ROLLBACK` failed may still be open: neither a commit nor the next batch may
/// build on it. The failed `ROLLBACK` is stood for by its mark, which only a failure sets.
#[test]
fn a_batch_whose_rollback_failed_is_never_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    let i = interchanges(ORDERS).next().unwrap().unwrap();
    let other = String::from_utf8_lossy(ORDERS).replace("REF1", "REF2");
    let j = interchanges(other.as_bytes()).next().unwrap().unwrap();
    decided_new(&mut inbox, &i, "a.edi");
    inbox.given_up = true;
    inbox.commit().unwrap();
    assert!(!inbox.in_batch());
    assert_eq!(count(&inbox, "inbox"), 0, "a commit rolls it back instead");
    decided_new(&mut inbox, &i, "a.edi");
    inbox.given_up = true;
    decided_new(&mut inbox, &j, "b.edi");
    inbox.commit().unwrap();
    let refs: Vec<String> = inbox
        .connection()
        .prepare("SELECT control_ref FROM inbox")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        refs,
        ["REF2"],
        "the next batch began afresh, without the one given up"
    );
}

#[test]
fn refuses_files_that_are_not_an_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.db");
    std::fs::write(
        &text,
        b"just some text, long enough to be a header of sorts......",
    )
    .unwrap();
    let before = std::fs::read(&text).unwrap();
    assert!(matches!(open(&text), Err(InboxError::NotAnInbox { .. })));
    assert_eq!(std::fs::read(&text).unwrap(), before);

    let other = dir.path().join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    assert!(matches!(open(&other), Err(InboxError::NotAnInbox { .. })));

    let newer = dir.path().join("newer.db");
    drop(open(&newer).unwrap());
    Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    assert!(matches!(open(&newer), Err(InboxError::TooNew { .. })));
}

/// A database made before migration 3 kept a copy of the file per error; opened now, the
/// copies become one record that the errors point at.
#[test]
fn rejected_bytes_are_migrated_to_one_record_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = Connection::open(&path).unwrap();
        for m in &MIGRATIONS[..3] {
            let Migration::Sql(sql) = m else {
                unreachable!()
            };
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        for offset in [10, 20] {
            conn.execute(
                "INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
                     first_seen_at, last_seen_at, file_size, bytes, truncated)
                 VALUES ('a.edi', 'abc', 'bad', 'unt-count', ?1, '2026-01-01', '2026-01-02', 3,
                     x'414243', 0)",
                [offset],
            )
            .unwrap();
        }
    }
    let inbox = open(&path).unwrap();
    assert_eq!(count(&inbox, "rejected_files"), 1);
    let (bytes, first, last): (Vec<u8>, String, String) = inbox
        .connection()
        .query_row(
            "SELECT bytes, first_seen_at, last_seen_at FROM rejected_files",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (bytes.as_slice(), first.as_str(), last.as_str()),
        (&b"ABC"[..], "2026-01-01", "2026-01-02")
    );
    assert_eq!(
        count(
            &inbox,
            "rejections r JOIN rejected_files f ON f.id = r.file_id"
        ),
        2
    );
    assert!(
        inbox
            .connection()
            .prepare("SELECT bytes FROM rejections")
            .is_err(),
        "the per-error copies are gone"
    );
}

/// Interchange ids come from the sequence, which an older database gets from the ids it
/// holds; ids of a rolled-back batch are simply not used.
#[test]
fn ids_come_from_the_sequence_and_continue_after_an_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let mut inbox = open(&path).unwrap();
    let first = interchanges(ORDERS).next().unwrap().unwrap();
    let new = |d| matches!(d, Decision::New { interchange_id } if interchange_id > 0);
    assert!(new(inbox
        .decide_single(&first, None, "a", "2026-01-01T00:00:00.000Z")
        .unwrap()));
    inbox.commit().unwrap();
    inbox
        .connection()
        .execute_batch(
            "DROP TABLE refusal_outbox; DROP TABLE answer_outbox;
             DROP TABLE id_sequences; DROP TABLE deliveries; DROP TABLE consumer_positions;
             DROP TABLE transport_messages; DROP TABLE message_effects;
             DROP TABLE refusals; DROP TABLE effect_migrations;
             DROP TABLE contrl_outbox; DROP TABLE acknowledgements; DROP TABLE contrl_counters;
             DROP INDEX rejected_files_sending; ALTER TABLE rejected_files DROP COLUMN sending;
             DROP INDEX rejections_key; ALTER TABLE rejections DROP COLUMN standard;
             ALTER TABLE rejections DROP COLUMN sender;
             ALTER TABLE rejections DROP COLUMN recipient;
             ALTER TABLE rejections DROP COLUMN control_ref;
             DROP INDEX outbox_failed; DROP INDEX outbox_unpublished;
             DROP INDEX outbox_message;
             ALTER TABLE outbox DROP COLUMN attempts;
             ALTER TABLE outbox DROP COLUMN last_error;
             ALTER TABLE outbox DROP COLUMN last_attempt_at;
             ALTER TABLE outbox DROP COLUMN last_attempt_pass;
             ALTER TABLE outbox DROP COLUMN failed_at;
             ALTER TABLE interchanges DROP COLUMN source_path;
             ALTER TABLE interchanges DROP COLUMN host;
             ALTER TABLE interchanges DROP COLUMN moved_to;
             ALTER TABLE sightings DROP COLUMN source_path;
             ALTER TABLE sightings DROP COLUMN host;
             ALTER TABLE sightings DROP COLUMN moved_to;
             DROP INDEX interchanges_key; ALTER TABLE interchanges DROP COLUMN standard;
             CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);
             DROP INDEX sightings_key; ALTER TABLE sightings DROP COLUMN standard;
             CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
             CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
             PRAGMA user_version = 5;",
        )
        .unwrap();
    drop(inbox);
    let mut inbox = open(&path).unwrap();
    let again = String::from_utf8_lossy(ORDERS).replace("REF1", "REF2");
    let second = interchanges(again.as_bytes()).next().unwrap().unwrap();
    assert_eq!(
        inbox
            .decide_single(&second, None, "b", "2026-01-01T00:00:01.000Z")
            .unwrap(),
        Decision::New { interchange_id: 2 }
    );
    inbox.rollback().unwrap();
    let third = String::from_utf8_lossy(ORDERS).replace("REF1", "REF3");
    let third = interchanges(third.as_bytes()).next().unwrap().unwrap();
    assert_eq!(
        inbox
            .decide_single(&third, None, "c", "2026-01-01T00:00:02.000Z")
            .unwrap(),
        Decision::New { interchange_id: 2 }
    );
    inbox.commit().unwrap();
    let next: i64 = inbox
        .connection()
        .query_row("SELECT next FROM id_sequences", [], |r| r.get(0))
        .unwrap();
    assert_eq!(next, 3);
}

#[test]
fn reopening_keeps_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    drop(open(&path).unwrap());
    let inbox = open(&path).unwrap();
    let version: i64 = inbox
        .connection()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);
    let mode: String = inbox
        .connection()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// A transport message id claimed: new; then the same message again (its answer given back,
/// its sightings counted); another party's message or other content under the id: `Other`, and
/// the row left as it was. A row from before the sender was stored is taken as it was.
#[test]
fn a_message_id_is_the_same_message_only_from_the_same_sender_with_the_same_content() {
    use crate::inbox::{Claim, TransportMessage, Transports};
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("t.db")).unwrap();
    let when = "2026-01-01T00:00:00.000Z";
    let m = TransportMessage {
        transport: "as4",
        message_id: "m1",
        sender: "PTE000001",
        content_sha256: "aa",
    };
    assert!(matches!(inbox.claim_message(&m, when).unwrap(), Claim::New));
    inbox.answer_message("as4", "m1", b"receipt").unwrap();
    inbox.commit().unwrap();
    match inbox.claim_message(&m, when).unwrap() {
        Claim::Seen(Some(answer)) => assert_eq!(answer, b"receipt"),
        other => panic!("the same message again: {other:?}"),
    }
    let other_party = TransportMessage {
        sender: "PTE000003",
        ..m
    };
    match inbox.claim_message(&other_party, when).unwrap() {
        Claim::Other { sender } => assert_eq!(sender.as_deref(), Some("PTE000001")),
        other => panic!("another party's message: {other:?}"),
    }
    let other_content = TransportMessage {
        content_sha256: "bb",
        ..m
    };
    assert!(matches!(
        inbox.claim_message(&other_content, when).unwrap(),
        Claim::Other { .. }
    ));
    inbox.commit().unwrap();
    let (sightings, sender, content): (i64, String, String) = inbox
        .connection()
        .query_row(
            "SELECT sightings, sender, content_sha256 FROM transport_messages",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (sightings, sender.as_str(), content.as_str()),
        (2, "PTE000001", "aa")
    );
    // Written before migration 0014: no sender, no content, the same message to every claim.
    inbox
        .connection()
        .execute_batch("UPDATE transport_messages SET sender = NULL, content_sha256 = NULL")
        .unwrap();
    assert!(matches!(
        inbox.claim_message(&other_content, when).unwrap(),
        Claim::Seen(Some(_))
    ));
    inbox.commit().unwrap();
}

/// Every table a fresh inbox has is either copied by `migrate` or said not to be
/// (`copying::NOT_COPIED`): a table a later migration adds and `copying::TABLES` forgets fails
/// here, instead of staying behind in a move to PostgreSQL.
#[test]
fn migrate_knows_every_table_of_the_schema() {
    use crate::inbox::copying::{CopySource, TABLES};
    let dir = tempfile::tempdir().unwrap();
    let mut inbox = open(&dir.path().join("inbox.db")).unwrap();
    let (tables, unknown) = inbox.tables().unwrap();
    assert!(
        unknown.is_empty(),
        "tables migrate neither copies nor names in NOT_COPIED: {unknown:?}"
    );
    let copied: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        copied, TABLES,
        "every table of TABLES is in the schema, in that order"
    );
}

/// An inbox from before the standard was kept (schema version 19): every key it holds becomes
/// EDIFACT's, a rejection under a key too (one without stays without), with its rows, its
/// indexes and its data whole; and the key table then holds the same triple under X12 beside.
#[test]
fn an_older_inbox_keys_become_edifact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = Connection::open(&path).unwrap();
        for m in &MIGRATIONS[..19] {
            match m {
                Migration::Sql(sql) => conn.execute_batch(sql).unwrap(),
                Migration::Code(f) => f(&conn).unwrap(),
            }
        }
        conn.pragma_update(None, "user_version", 19).unwrap();
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.execute_batch(
            "INSERT INTO inbox VALUES ('S', 'R', 'C1', 'h1', 'a.edi', '2026-01-01T00:00:00.000Z', 1);
             INSERT INTO interchanges (id, sender, recipient, control_ref, syntax_id,
                 syntax_version, prepared_date, prepared_time, sha256, source_file, source_offset,
                 received_at, raw)
             VALUES (1, 'S', 'R', 'C1', 'UNOC', '3', '240101', '1200', 'h1', 'a.edi', 0,
                 '2026-01-01T00:00:00.000Z', x'00');
             INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256,
                 source_file, seen_at)
             VALUES ('S', 'R', 'C1', 'duplicate', 'h1', 'h1', 'b.edi', '2026-01-02T00:00:00.000Z');
             INSERT INTO acknowledgements (sender, recipient, control_ref, partner, own_ref,
                 action, bytes, created_at)
             VALUES ('S', 'R', 'C1', 'S:14', '00000000000001', '7', x'00',
                 '2026-01-01T00:00:00.000Z');
             INSERT INTO refusals (sender, recipient, control_ref, sha256, source_file, raw,
                 statement, code, error, first_seen_at, last_seen_at)
             VALUES ('S', 'R', 'C2', 'h2', 'c.edi', x'00', 'x.sql statement 1', 'E', 'e',
                 '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');
             INSERT INTO rejected_files (id, source_file, file_sha256, file_size, truncated,
                 first_seen_at, last_seen_at)
             VALUES (1, 'd.edi', 'f', 1, 0, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');
             INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
                 first_seen_at, last_seen_at, file_size, truncated, file_id, sender, recipient,
                 control_ref)
             VALUES ('d.edi', 'f', 'bad', 'k', 0, '2026-01-01T00:00:00.000Z',
                     '2026-01-01T00:00:00.000Z', 1, 0, 1, 'S', 'R', 'C3'),
                    ('d.edi', 'f', 'bad', 'k', 9, '2026-01-01T00:00:00.000Z',
                     '2026-01-01T00:00:00.000Z', 1, 0, 1, NULL, NULL, NULL);",
        )
        .unwrap();
    }
    let inbox = open(&path).unwrap();
    let conn = inbox.connection();
    let standards = |table: &str| -> Vec<Option<String>> {
        conn.prepare(&format!("SELECT standard FROM {table} ORDER BY rowid"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let edifact = Some("edifact".to_string());
    for table in ["interchanges", "sightings", "acknowledgements", "refusals"] {
        assert_eq!(standards(table), std::slice::from_ref(&edifact), "{table}");
    }
    assert_eq!(standards("rejections"), [edifact.clone(), None]);
    let kept: (String, String, i64) = conn
        .query_row(
            "SELECT standard, received_at, interchange_id FROM inbox",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        kept,
        ("edifact".into(), "2026-01-01T00:00:00.000Z".into(), 1)
    );
    let index: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'inbox_received_at'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(index, 1, "the key table's index is made again");
    // The key is now the triple with its standard: X12's beside EDIFACT's, a second of
    // either refused, and no name but the two.
    conn.execute(
        "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file, received_at,
             interchange_id, standard)
         VALUES ('S', 'R', 'C1', 'h9', 'x.x12', '2026-01-03T00:00:00.000Z', 2, 'x12')",
        [],
    )
    .unwrap();
    for standard in ["x12", "edifact"] {
        assert!(
            conn.execute(
                "INSERT INTO inbox (sender, recipient, control_ref, sha256, source_file,
                     received_at, interchange_id, standard)
                 VALUES ('S', 'R', 'C1', 'h8', 'y', '2026-01-03T00:00:00.000Z', 3, ?1)",
                [standard],
            )
            .is_err(),
            "{standard}"
        );
    }
    assert!(
        conn.execute(
            "UPDATE interchanges SET standard = 'tradacoms' WHERE id = 1",
            []
        )
        .is_err()
    );
}

/// The side effects read a message's segments from what the reading threads held for it, by
/// its position, and not again from the interchange: a candidate whose second message is held
/// as another message's segments gets those (which no real reading thread would hand over), and
/// the first, not held, its own.
#[test]
fn the_side_effects_use_the_messages_held_ahead_by_position() {
    use crate::inbox::SideEffects;
    use crate::inbox::effects::{EffectSettings, HeldMessage, InstallMode};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let fx = dir.path().join("fx");
    std::fs::create_dir_all(fx.join("migrations")).unwrap();
    std::fs::write(
        fx.join("migrations/0001_seen.sql"),
        "CREATE TABLE seen (message_ref TEXT, document TEXT);",
    )
    .unwrap();
    std::fs::write(
        fx.join("INVOIC.sql"),
        "INSERT INTO seen SELECT :message_ref,
             (SELECT segment -> 2 ->> 0 FROM message_segments(:message) WHERE tag = 'BGM');",
    )
    .unwrap();
    let effects = Arc::new(crate::effects::Effects::load(&fx).unwrap());
    let mut inbox = open(&dir.path().join("inbox.db")).unwrap();
    let settings = EffectSettings {
        timeout: Duration::from_secs(5),
        role: None,
        mode: InstallMode::Keep,
        trace: false,
    };
    inbox
        .install_effects(effects, &settings, "2024-01-01T00:00:00Z")
        .unwrap();

    let text = b"UNB+UNOC:3+S:14+R:14+240101:1200+HELD'\
UNH+1+INVOIC:D:96A:UN'BGM+380+OWN1+9'UNT+3+1'UNH+2+INVOIC:D:96A:UN'BGM+380+OWN2+9'UNT+3+2'UNZ+2+HELD'";
    let i = interchanges(text).next().unwrap().unwrap();
    let other = b"UNB+UNOC:3+S:14+R:14+240101:1200+X'\
UNH+9+INVOIC:D:96A:UN'BGM+380+ELSEWHERE+9'UNT+3+9'UNZ+1+X'";
    let o = interchanges(other).next().unwrap().unwrap();
    let elsewhere = crate::edifact::message_segments(&o, &o.messages[0])
        .unwrap()
        .to_held();
    let held = vec![None, Some(Arc::new(HeldMessage::segments(elsewhere)))];
    let c = Candidate {
        interchange: &i,
        compressed: None,
        held: &held,
        source_file: "held.edi",
        source_path: None,
        received_at: "2024-01-01T00:00:00Z",
    };
    let decided = inbox.decide(&[c]).unwrap();
    assert!(matches!(decided[0], Decision::New { .. }), "{decided:?}");
    inbox.commit().unwrap();
    let seen: String = inbox
        .conn
        .query_row(
            "SELECT group_concat(message_ref || '=' || document, ' ')
             FROM (SELECT * FROM seen ORDER BY message_ref)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(seen, "1=OWN1 2=ELSEWHERE");
}

/// The bundled SQLite is built as `.cargo/config.toml` asks: without
/// `SQLITE_ENABLE_MEMORY_MANAGEMENT`, under which every connection of the process (the deciding
/// thread's, each reading thread's probe, the checkpointer's) takes one shared mutex for every
/// page it fetches, and without counting its memory under another (BENCHMARKS.md, issue 41).
#[test]
fn the_bundled_sqlite_shares_no_page_cache_between_connections() {
    let conn = Connection::open_in_memory().unwrap();
    let options: Vec<String> = conn
        .prepare("PRAGMA compile_options")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "SQLite built with ENABLE_MEMORY_MANAGEMENT (LIBSQLITE3_FLAGS of .cargo/config.toml not applied?): {options:?}"
    );
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "SQLite built counting its memory (LIBSQLITE3_FLAGS of .cargo/config.toml not applied?): {options:?}"
    );
}
