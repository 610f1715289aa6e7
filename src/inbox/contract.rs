//! Contracts every backend keeps, written once against `&mut dyn Inbox` and run once per
//! backend (`per_backend!`): an SQLite file, and a schema of its own on the machine's
//! PostgreSQL server (127.0.0.1:5432, user `postgres`, trust), dropped at the end. Here rather
//! than in `tests/it/` where what is checked needs a value the command line cannot make yet (an
//! X12 interchange, before X12 has a reader).

use std::time::Duration;

use crate::edifact::{Interchange, interchanges};
use crate::inbox::{
    Access, Candidate, Decision, EventFilter, Inbox, InterchangeKey, Location, open,
};
use crate::standard::Standard;

/// A contract run on each backend: `NAME::sqlite` and `NAME::postgres` (skipped with a notice
/// where the server does not answer, a failure where `EDI_INBOX_REQUIRE_POSTGRES` is set).
macro_rules! per_backend {
    ($(#[$attr:meta])* fn $name:ident($inbox:ident) $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($inbox: &mut dyn Inbox) $body

            #[cfg(feature = "sqlite")]
            #[test]
            fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let db = Location::Sqlite(dir.path().join("inbox.db"));
                let mut inbox = open(&db, Access::Create, Duration::from_secs(30)).unwrap();
                run(&mut *inbox);
            }

            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                if let Some(schema) = PgSchema::create() {
                    let mut inbox = open(&schema.location(), Access::Create, Duration::from_secs(30))
                        .unwrap();
                    run(&mut *inbox);
                }
            }
        }
    };
}

/// The server's own database, which each contract's schema is made in.
#[cfg(feature = "postgres")]
const SERVER: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=5";

/// A schema of the contract's own, dropped with everything in it at the end.
#[cfg(feature = "postgres")]
struct PgSchema {
    name: String,
}

#[cfg(feature = "postgres")]
impl PgSchema {
    fn create() -> Option<PgSchema> {
        if let Err(e) = ::postgres::Client::connect(SERVER, ::postgres::NoTls) {
            assert!(
                std::env::var_os("EDI_INBOX_REQUIRE_POSTGRES").is_none(),
                "PostgreSQL does not answer on 127.0.0.1:5432: {e}"
            );
            eprintln!("PostgreSQL does not answer on 127.0.0.1:5432 ({e}): not checked");
            return None;
        }
        // A name no other run on the server takes (this process's, the time, and a count),
        // short enough for an identifier (63 bytes), which a test's own name may not be.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Some(PgSchema {
            name: format!("contract_{}_{nanos}_{n}", std::process::id()),
        })
    }

    fn location(&self) -> Location {
        Location::parse(std::ffi::OsStr::new(SERVER), &self.name).unwrap()
    }
}

#[cfg(feature = "postgres")]
impl Drop for PgSchema {
    fn drop(&mut self) {
        use crate::inbox::copying::ident;
        if let Ok(mut c) = ::postgres::Client::connect(SERVER, ::postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                ident(&self.name)
            ));
        }
    }
}

const ORDERS: &[u8] = b"UNB+UNOC:3+SENDER:14+RECIPIENT:14+240101:1200+REF1'\
UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'UNZ+1+REF1'";

/// The EDIFACT sample, parsed; with `X12`, the same model as an X12 reader would build it (no
/// X12 reader is wired in yet): same sender, recipient and control reference.
fn sample(standard: Standard) -> Interchange<'static> {
    let mut i = interchanges(ORDERS)
        .next()
        .and_then(Result::ok)
        .expect("the sample parses")
        .into_owned();
    i.standard = standard;
    i
}

fn decide(inbox: &mut dyn Inbox, i: &Interchange<'_>, file: &str) -> Decision {
    let c = Candidate {
        interchange: i,
        compressed: None,
        held: &[],
        source_file: file,
        source_path: None,
        received_at: "2026-01-01T00:00:00.000Z",
    };
    let d = inbox.decide(&[c]).unwrap().remove(0);
    inbox.commit().unwrap();
    d
}

fn key(standard: Standard) -> InterchangeKey<'static> {
    InterchangeKey {
        standard,
        sender: "SENDER",
        recipient: "RECIPIENT",
        control_ref: "REF1",
    }
}

per_backend! {
    /// The same sender, recipient and control reference under two standards are two
    /// interchanges, each new: never a duplicate or a drift of the other. Each one's copy is a
    /// duplicate of its own standard's; each is found under its own key alone.
    fn one_triple_under_two_standards_is_two_interchanges(inbox) {
        let edifact = sample(Standard::Edifact);
        let x12 = sample(Standard::X12);
        let probe = inbox.probe();
        assert!(matches!(decide(inbox, &edifact, "a.edi"), Decision::New { .. }));
        if let Some(p) = &probe {
            assert!(p.has(key(Standard::Edifact)));
            assert!(!p.has(key(Standard::X12)), "the probe keeps the standards apart");
        }
        assert!(
            matches!(decide(inbox, &x12, "a.x12"), Decision::New { .. }),
            "an X12 interchange is not a duplicate or drift of the EDIFACT one"
        );
        assert!(matches!(decide(inbox, &x12, "b.x12"), Decision::Duplicate { .. }));
        assert!(matches!(decide(inbox, &edifact, "b.edi"), Decision::Duplicate { .. }));

        for standard in Standard::ALL {
            let h = inbox.key_history(key(standard)).unwrap();
            assert_eq!(h.interchanges.len(), 1, "{standard}");
            assert_eq!(h.interchanges[0].standard, standard);
            assert!(h.interchanges[0].in_inbox);
            assert_eq!(h.sightings.len(), 1, "{standard}: its own copy only");
            assert!(inbox.drifted_copies(key(standard)).unwrap().is_empty());
            let id = h.interchanges[0].id;
            let stored = inbox.interchange_key(id).unwrap().unwrap();
            assert_eq!(stored.standard, standard);
        }

        let events = inbox
            .events(&EventFilter { limit: 10, ..Default::default() })
            .unwrap();
        let mut seen: Vec<(String, Option<Standard>)> = events
            .iter()
            .map(|e| (e.status.as_str().to_string(), e.standard))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("duplicate".to_string(), Some(Standard::Edifact)),
                ("duplicate".to_string(), Some(Standard::X12)),
                ("new".to_string(), Some(Standard::Edifact)),
                ("new".to_string(), Some(Standard::X12)),
            ]
        );

        // Each interchange's event says its standard; its envelope carries it for the content
        // type.
        let mut types: Vec<(String, Standard)> = inbox
            .pending_events("pass", Duration::ZERO, 10, false, &[])
            .unwrap()
            .iter()
            .map(|e| (e.event_type.clone(), e.envelope.standard))
            .collect();
        types.sort();
        assert_eq!(
            types,
            [
                ("edifact.ORDERS.received".to_string(), Standard::Edifact),
                ("x12.ORDERS.received".to_string(), Standard::X12),
            ]
        );
    }
}

per_backend! {
    /// A batch of transport messages claimed at once (one statement on PostgreSQL): the new ones
    /// claimed with their answers stored; again, each answered with its stored answer and its
    /// sighting counted; another sender's or other content under a known id refused, its row
    /// unchanged; and the answer outbox queued with a claim, taken once under its lease, and
    /// done with once delivered.
    fn transport_messages_are_claimed_in_one_batch_and_their_answers_queued(inbox) {
        use crate::inbox::{Claim, TransportMessage};
        let when = crate::clock::now();
        let m = |id: &'static str, sender: &'static str, content: &'static str| TransportMessage {
            transport: "as2",
            message_id: id,
            sender,
            content_sha256: content,
        };
        let first = [
            (m("a", "P1", "x"), Some(&b"MDN a"[..])),
            (m("b", "P1", "y"), Some(&b"MDN b"[..])),
        ];
        let claims = inbox.claim_messages(&first, &when).unwrap();
        assert_eq!(claims, [Claim::New, Claim::New]);
        inbox.queue_answer("as2", "b", "http://partner.example/mdn", &when).unwrap();
        inbox.commit().unwrap();
        let again = [
            (m("a", "P1", "x"), Some(&b"another MDN"[..])),
            (m("b", "P2", "y"), None),
            (m("c", "P1", "z"), None),
        ];
        let claims = inbox.claim_messages(&again, &when).unwrap();
        assert_eq!(
            claims,
            [
                Claim::Seen(Some(b"MDN a".to_vec())),
                Claim::Other { sender: Some("P1".into()) },
                Claim::New,
            ]
        );
        inbox.commit().unwrap();
        assert_eq!(
            inbox.claim_message(&m("b", "P1", "other"), &when).unwrap(),
            Claim::Other { sender: Some("P1".into()) }
        );
        assert_eq!(
            inbox.claim_message(&m("b", "P1", "y"), &when).unwrap(),
            Claim::Seen(Some(b"MDN b".to_vec())),
            "the refusals left b's row as it was"
        );
        inbox.commit().unwrap();
        let mut outbox = inbox.answer_outbox().unwrap();
        let lease = Duration::from_secs(60);
        let due = outbox.take_due_answers(lease, 10).unwrap();
        assert_eq!(due.len(), 1, "{due:?}");
        assert_eq!(
            (due[0].message_id.as_str(), due[0].answer.as_slice(), due[0].attempts),
            ("b", &b"MDN b"[..], 1)
        );
        assert!(outbox.take_due_answers(lease, 10).unwrap().is_empty(), "leased");
        assert_eq!(outbox.undelivered_answers().unwrap().0, 1);
        outbox.answer_delivered(&due[0]).unwrap();
        assert_eq!(outbox.undelivered_answers().unwrap(), (0, None));
    }
}

per_backend! {
    /// A refused message's negative answer queued apart (AS2's asynchronous MDN of a refusal):
    /// only once its batch commits; taken with its own bytes, marked a refusal, beside the
    /// claims' answers and counted with them; recorded as delivered on its own row (the claim's
    /// answer under the same id untouched); refused again, replaced and due again, its attempts
    /// counted on so that a try of the one replaced does not record it; superseded, undelivered,
    /// where its id is claimed again (its message then accepted, with a synchronous answer);
    /// and purged by when it was queued.
    fn a_refusals_answer_is_queued_apart_and_superseded_by_the_messages_own(inbox) {
        use crate::inbox::{PurgeTarget, TransportMessage};
        let when = crate::clock::now();
        let lease = Duration::from_secs(60);
        let mut outbox = inbox.answer_outbox().unwrap();
        inbox
            .queue_refusal("as2", "r1", "http://partner.example/mdn", b"no to r1", &when)
            .unwrap();
        inbox.abandon();
        assert!(
            outbox.take_due_answers(lease, 10).unwrap().is_empty(),
            "nothing is queued by a batch rolled back"
        );
        // r1 refused; a1 accepted with its own MDN queued.
        inbox
            .queue_refusal("as2", "r1", "http://partner.example/mdn", b"no to r1", &when)
            .unwrap();
        let a1 = TransportMessage {
            transport: "as2",
            message_id: "a1",
            sender: "P1",
            content_sha256: "x",
        };
        inbox.claim_messages(&[(a1, Some(&b"yes to a1"[..]))], &when).unwrap();
        inbox.queue_answer("as2", "a1", "http://partner.example/mdn", &when).unwrap();
        inbox.commit().unwrap();
        assert_eq!(outbox.undelivered_answers().unwrap().0, 2);
        let mut due = outbox.take_due_answers(lease, 10).unwrap();
        due.sort_by(|a, b| a.message_id.cmp(&b.message_id));
        let seen: Vec<(&str, &[u8], bool, i64)> = due
            .iter()
            .map(|d| (d.message_id.as_str(), d.answer.as_slice(), d.refusal, d.attempts))
            .collect();
        assert_eq!(
            seen,
            [
                ("a1", &b"yes to a1"[..], false, 1),
                ("r1", &b"no to r1"[..], true, 1)
            ]
        );
        assert!(outbox.take_due_answers(lease, 10).unwrap().is_empty(), "leased");
        // The refusal delivered: its row, not a1's.
        outbox.answer_delivered(&due[1]).unwrap();
        assert_eq!(outbox.undelivered_answers().unwrap().0, 1);
        // r1 refused again (its sender sent it again): the new MDN, due again.
        inbox
            .queue_refusal("as2", "r1", "http://partner.example/mdn2", b"no again", &when)
            .unwrap();
        inbox.commit().unwrap();
        let again = outbox.take_due_answers(Duration::ZERO, 10).unwrap();
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(
            (again[0].url.as_str(), again[0].answer.as_slice(), again[0].attempts),
            ("http://partner.example/mdn2", &b"no again"[..], 3),
            "replaced, counted as an attempt; its attempts never lowered"
        );
        // Replaced once more while that try is under way: the try's outcome is not the new one's.
        inbox
            .queue_refusal("as2", "r1", "http://partner.example/mdn", b"no, third", &when)
            .unwrap();
        inbox.commit().unwrap();
        outbox.answer_delivered(&again[0]).unwrap();
        assert_eq!(
            outbox.undelivered_answers().unwrap().0,
            2,
            "the third still waits, with a1's (leased)"
        );
        // Then r1 sent again and accepted, asking for its MDN in the response: its refusal,
        // undelivered, is superseded by the claim, never sent.
        let r1 = TransportMessage {
            transport: "as2",
            message_id: "r1",
            sender: "P1",
            content_sha256: "y",
        };
        inbox.claim_messages(&[(r1, Some(&b"yes to r1"[..]))], &when).unwrap();
        inbox.commit().unwrap();
        assert!(outbox.take_due_answers(Duration::ZERO, 10).unwrap().is_empty());
        assert_eq!(outbox.undelivered_answers().unwrap().0, 1, "a1's alone");
        // Purged by when it was queued.
        inbox
            .queue_refusal("as2", "r2", "http://partner.example/mdn", b"no to r2", &when)
            .unwrap();
        inbox.commit().unwrap();
        assert_eq!(inbox.count_older(PurgeTarget::RefusedAnswers, "2000-01-01T00:00:00.000Z").unwrap(), 0);
        let later = crate::clock::rfc3339(std::time::SystemTime::now() + Duration::from_secs(60));
        // r1's (superseded, kept for the record) and r2's.
        assert_eq!(inbox.count_older(PurgeTarget::RefusedAnswers, &later).unwrap(), 2);
        assert_eq!(inbox.purge_step(PurgeTarget::RefusedAnswers, &later, 100).unwrap(), 2);
        inbox.commit().unwrap();
        assert_eq!(inbox.count_older(PurgeTarget::RefusedAnswers, &later).unwrap(), 0);
    }
}
