use super::*;

#[test]
fn the_password_is_never_shown() {
    let t = Target::parse("postgres://alice:s3cret@db.example:5433/edi", "edi_inbox").unwrap();
    assert_eq!(
        t.shown(),
        "postgres://alice@db.example:5433/edi (schema edi_inbox)"
    );
    let t = Target::parse("host=db.example user=bob password=hunter2 dbname=x", "s").unwrap();
    assert!(!t.shown().contains("hunter2"), "{}", t.shown());
    assert!(!format!("{t:?}").contains("hunter2"));
    assert!(Target::parse("postgres://u@h/db", "Bad-Name").is_err());
    for text in [
        "postgres://alice:p@zq@db.example/edi",
        "postgres://alice:p:zq@db.example/edi",
    ] {
        match Target::parse(text, "s") {
            Ok(t) => assert!(!t.shown().contains("zq"), "{}", t.shown()),
            Err(e) => assert!(!e.to_string().contains("zq"), "{e}"),
        }
    }
    let e = Target::parse("password='top secret' oops", "s").unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}

/// The server the test's schema is made in, as the contracts use it.
const SERVER: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=5";

/// A batch's statements are prepared once per session, so that a batch after the first parses
/// nothing: each of its statements is one round trip (bind and run), not two and a close. Read
/// from the server's own list of the session's prepared statements, with how often each ran.
#[test]
fn a_batchs_statements_are_prepared_once_per_session() {
    use crate::inbox::{Candidate, Decisions, DeliveryRecord, Transaction};
    use std::time::Duration;

    if let Err(e) = postgres::Client::connect(SERVER, postgres::NoTls) {
        assert!(
            std::env::var_os("EDI_INBOX_REQUIRE_POSTGRES").is_none(),
            "PostgreSQL does not answer on 127.0.0.1:5432: {e}"
        );
        eprintln!("PostgreSQL does not answer on 127.0.0.1:5432 ({e}): not checked");
        return;
    }
    let schema = format!("prepared_{}", std::process::id());
    let target = Target::parse(SERVER, &schema).unwrap();
    let mut inbox = PgInbox::connect(
        &target,
        Duration::from_secs(30),
        crate::inbox::Access::Create,
    )
    .unwrap();
    let texts = [
        &b"UNB+UNOC:3+S:14+R:14+240101:1200+REF1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+REF1'"[..],
        &b"UNB+UNOC:3+S:14+R:14+240101:1200+REF2'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+REF2'"[..],
        &b"UNB+UNOC:3+S:14+R:14+240101:1200+REF3'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+REF3'"[..],
    ];
    let parsed: Vec<_> = texts
        .iter()
        .map(|t| crate::edifact::interchanges(t).next().unwrap().unwrap())
        .collect();
    // Each batch: a new interchange, a copy of the first (a duplicate of the stored one from
    // the second batch on), and a delivery.
    let batch = |inbox: &mut PgInbox, new: usize| {
        let candidates: Vec<Candidate<'_>> = [&parsed[new], &parsed[0]]
            .into_iter()
            .map(|i| Candidate {
                interchange: i,
                compressed: None,
                held: &[],
                source_file: "f",
                source_path: None,
                received_at: "2026-01-01T00:00:00.000Z",
            })
            .collect();
        let decisions = inbox.decide(&candidates).unwrap();
        inbox
            .record_deliveries(
                &[DeliveryRecord {
                    source: "stream/1",
                    filename: None,
                    delivery_count: 1,
                    size: 10,
                    key: None,
                    produced_at: None,
                }],
                "",
            )
            .unwrap();
        inbox.commit().unwrap();
        decisions
    };
    let runs = |inbox: &PgInbox| -> std::collections::BTreeMap<String, i64> {
        let rows = inbox
            .client
            .borrow_mut()
            .query(
                // Not this statement itself, prepared to run it.
                "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements
                 WHERE NOT from_sql AND statement NOT LIKE '%pg_prepared_statements%'",
                &[],
            )
            .unwrap();
        let runs: std::collections::BTreeMap<String, i64> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(runs.len(), rows.len(), "a statement prepared twice");
        runs
    };
    batch(&mut inbox, 0);
    batch(&mut inbox, 1);
    let first = runs(&inbox);
    let second_decisions = batch(&mut inbox, 2);
    let second = runs(&inbox);
    assert!(
        matches!(second_decisions[0], crate::inbox::Decision::New { .. })
            && matches!(
                second_decisions[1],
                crate::inbox::Decision::Duplicate { .. }
            ),
        "{second_decisions:?}"
    );
    let _ = inbox
        .client
        .borrow_mut()
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
    assert!(
        first.len() >= 5,
        "the batch's statements (the keys, the business rows, the sightings, the \
         deliveries with the counters) were not prepared: {first:#?}"
    );
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>(),
        "the third batch prepared statements of its own"
    );
    for (statement, n) in &second {
        assert_eq!(
            *n,
            first[statement] + 1,
            "a statement did not run once more in the third batch: {statement}"
        );
    }
    assert_eq!(inbox.client.borrow().prepared_count(), second.len());
}

/// A prepared statement whose plan another host's migration made stale (its result changed)
/// fails once as a conflict, which the batch's retry makes again, and is prepared anew.
#[test]
fn a_statement_a_migration_made_stale_is_a_conflict_then_prepared_again() {
    use super::session::Session;
    let Ok(client) = postgres::Client::connect(SERVER, postgres::NoTls) else {
        assert!(
            std::env::var_os("EDI_INBOX_REQUIRE_POSTGRES").is_none(),
            "PostgreSQL does not answer on 127.0.0.1:5432"
        );
        return;
    };
    let schema = format!("stale_{}", std::process::id());
    let mut session = Session::new(client);
    session
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path = {schema};
             CREATE TABLE probe (a int); INSERT INTO probe VALUES (1)"
        ))
        .unwrap();
    const SQL: &str = "SELECT * FROM probe";
    assert_eq!(session.query_prepared(SQL, &[]).unwrap()[0].len(), 1);
    session
        .batch_execute("ALTER TABLE probe ADD COLUMN b int")
        .unwrap();
    let stale = session.query_prepared(SQL, &[]);
    let again = session.query_prepared(SQL, &[]);
    let _ = session.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
    assert!(
        matches!(stale, Err(crate::inbox::InboxError::Conflict(_))),
        "{stale:?}"
    );
    assert_eq!(
        again.unwrap()[0].len(),
        2,
        "prepared anew, with the new column"
    );
}
