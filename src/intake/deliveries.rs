//! The decision of a batch of deliveries, whatever transport brought them (a broker's records,
//! an AS4 message's payloads, and the transports after them): each delivery's interchanges
//! decided as `ingest` decides files, the bytes of a refused one kept in the inbox (a delivery
//! leaves nothing behind but what the inbox keeps), and every delivery recorded, all in the open
//! batch. What is the transport's (which deliveries a batch holds, when it commits, how it
//! acknowledges) stays with it.

use anyhow::Context as _;

use super::acknowledge::AckPolicy;
use super::decide::{Parsed, decide, keep_refused};
use super::outcome::{Outcome, Source};
use super::prepare::{self, Attached};
use crate::inbox::{DeliveryRecord, Inbox};

/// One delivery as it came, whatever transport brought it: what the intake needs of it.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// What it is reported and recorded under: the transport's name for it
    /// (`nats:STREAM/SEQUENCE`, `as4:MESSAGE-ID#2`, ...), the same every time it comes again.
    pub name: &'a str,
    /// The file name its sender gave it (an `edi-filename` header, an AS4 part's Content-ID).
    pub filename: Option<&'a str>,
    /// How many times it was delivered, this time included.
    pub delivery_count: u32,
    /// `name` is this delivery's alone, not kept for a redelivery (RabbitMQ's without a
    /// `message_id`): only the count then tells our own redelivery from the partner's copy.
    pub named_per_delivery: bool,
    /// Its key at the transport (a Kafka record's key, an AS4 ConversationId).
    pub key: Option<&'a str>,
    /// When its sender says it was produced, RFC 3339 UTC.
    pub produced_at: Option<&'a str>,
    pub bytes: &'a [u8],
}

impl<'a> Incoming<'a> {
    /// A delivery under `name` holding `bytes`, delivered once, with nothing else said of it.
    pub fn new(name: &'a str, bytes: &'a [u8]) -> Incoming<'a> {
        Incoming {
            name,
            filename: None,
            delivery_count: 1,
            named_per_delivery: false,
            key: None,
            produced_at: None,
            bytes,
        }
    }
}

/// Why a delivery's body cannot be read as its transport says it is written (a broker's
/// message marked `edi-body-encoding: base64` whose body is not base64): the delivery is
/// rejected with this reason, its bytes kept as they came, never taken for something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub reason: String,
    /// The byte of the body as it came where the reading failed, where one is concerned.
    pub offset: Option<usize>,
}

/// A delivery with its interchanges read, ready for [`decide_deliveries`].
pub struct Delivered<'a> {
    pub incoming: Incoming<'a>,
    items: Vec<Attached<'a>>,
    /// Its SHA-256, where it holds rejected input (its record is keyed by it).
    sha256: Option<String>,
    unreadable: Option<Unreadable>,
}

impl<'a> Delivered<'a> {
    /// Reads the delivery's interchanges now, on the deciding thread.
    pub fn parse(incoming: Incoming<'a>) -> Delivered<'a> {
        let items: Vec<Attached<'a>> = prepare::interchanges(incoming.bytes, None, None).collect();
        let sha256 = prepare::hash_if_rejected(incoming.bytes, &items);
        Delivered {
            incoming,
            items,
            sha256,
            unreadable: None,
        }
    }

    /// A delivery whose interchanges were read ahead (`prepare::in_parallel`, on other
    /// threads while the batch before it was decided), with the hash that goes with them.
    pub fn prepared(
        incoming: Incoming<'a>,
        items: Vec<Attached<'a>>,
        sha256: Option<String>,
    ) -> Delivered<'a> {
        Delivered {
            incoming,
            items,
            sha256,
            unreadable: None,
        }
    }

    /// A delivery whose body cannot be read as its transport says it is written: nothing of it
    /// is decided; it is rejected for that, its bytes kept as they came.
    pub fn unreadable(incoming: Incoming<'a>, why: Unreadable) -> Delivered<'a> {
        Delivered {
            incoming,
            items: Vec::new(),
            sha256: None,
            unreadable: Some(why),
        }
    }
}

/// Decides the interchanges of a batch of deliveries in the open batch, exactly as `ingest`
/// decides files: each delivery's outcomes, in its order. A delivery rejected without a parse
/// error recording its bytes (a value the database cannot hold, an unreadable body) has its
/// bytes kept in the inbox, and every delivery is recorded (its name, file name, delivery
/// count, size, key and time). Nothing is committed here.
pub fn decide_deliveries(
    inbox: &mut dyn Inbox,
    deliveries: Vec<Delivered<'_>>,
    when: &str,
    acks: AckPolicy,
) -> anyhow::Result<Vec<Vec<Outcome>>> {
    let mut incoming = Vec::with_capacity(deliveries.len());
    let mut hashes = Vec::with_capacity(deliveries.len());
    let mut unreadable = Vec::with_capacity(deliveries.len());
    let mut items = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        incoming.push(d.incoming);
        hashes.push(d.sha256);
        unreadable.push(d.unreadable);
        items.push(d.items);
    }
    let sources: Vec<Parsed<'_>> = incoming
        .iter()
        .zip(items)
        .zip(&hashes)
        .map(|((d, items), sha256)| Parsed {
            source: Source::Delivery {
                name: d.name.to_string(),
                filename: d.filename.map(str::to_string),
                delivery_count: d.delivery_count,
                named_per_delivery: d.named_per_delivery,
            },
            bytes: d.bytes,
            items,
            sha256: sha256.as_deref(),
            source_path: None,
        })
        .collect();
    let mut outcomes = decide(inbox, &sources, when, acks)?;
    // An unreadable body, given no interchange to decide, is rejected for what is wrong with
    // it, and its bytes recorded as they came (below, as for any rejection the parser did not
    // find).
    for ((o, u), p) in outcomes.iter_mut().zip(unreadable).zip(&sources) {
        if let Some(Unreadable { reason, offset }) = u {
            *o = vec![Outcome::rejected(p.source.clone(), reason, offset).quoting(p.bytes)];
        }
    }
    keep_refused(inbox, &sources, &outcomes, when)?;
    drop(sources);
    let records: Vec<DeliveryRecord<'_>> = incoming
        .iter()
        .map(|d| DeliveryRecord {
            source: d.name,
            filename: d.filename,
            delivery_count: d.delivery_count,
            size: d.bytes.len(),
            key: d.key,
            produced_at: d.produced_at,
        })
        .collect();
    inbox
        .record_deliveries(&records, when)
        .context("cannot write to the inbox database")?;
    Ok(outcomes)
}

// On an SQLite inbox of its own.
#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::status::Status;

    use super::super::testing::INTERCHANGE;

    /// The same delivery decided twice (a redelivery) is new, then a duplicate; an unreadable
    /// one is rejected with its reason and its bytes kept; every one is recorded.
    #[test]
    fn deliveries_are_decided_kept_and_recorded() {
        let (dir, mut inbox) = super::super::testing::scratch_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        let acks = AckPolicy::new(crate::edifact::contrl::Mode::Never, false);
        let first = Incoming {
            key: Some("k"),
            ..Incoming::new("test:q/1", INTERCHANGE)
        };
        let garbled = Incoming::new("test:q/2", b"not base64 at all");
        let outcomes = decide_deliveries(
            &mut *inbox,
            vec![
                Delivered::parse(first),
                Delivered::unreadable(
                    garbled,
                    Unreadable {
                        reason: "its body is not base64".into(),
                        offset: Some(3),
                    },
                ),
            ],
            when,
            acks,
        )
        .unwrap();
        inbox.commit().unwrap();
        let statuses: Vec<Vec<Status>> = outcomes
            .iter()
            .map(|o| o.iter().map(Outcome::status).collect())
            .collect();
        assert_eq!(statuses, [vec![Status::New], vec![Status::Rejected]]);
        assert_eq!(
            outcomes[1][0].rejection().as_deref(),
            Some("its body is not base64 (byte 3)"),
            "an unreadable body is rejected for what is wrong with it"
        );
        let again = Incoming {
            delivery_count: 2,
            ..first
        };
        let outcomes =
            decide_deliveries(&mut *inbox, vec![Delivered::parse(again)], when, acks).unwrap();
        inbox.commit().unwrap();
        assert_eq!(outcomes[0][0].status(), Status::Duplicate);
        drop(inbox);
        let db = rusqlite::Connection::open(dir.path().join("inbox.db")).unwrap();
        let recorded: Vec<(String, i64)> = db
            .prepare("SELECT source, delivery_count FROM deliveries ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            recorded,
            [
                ("test:q/1".to_string(), 1),
                ("test:q/2".to_string(), 1),
                ("test:q/1".to_string(), 2)
            ],
            "every delivery is recorded, a redelivery with its count"
        );
        let kept: Vec<u8> = db
            .query_row(
                "SELECT bytes FROM rejected_files WHERE source_file = 'test:q/2'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            kept, b"not base64 at all",
            "the unreadable body is kept as it came"
        );
    }

    /// Decides `bytes` delivered under `name` (its count, whether the name is the delivery's
    /// alone) with every interchange answered, and commits: its status and answer.
    fn answered(
        inbox: &mut dyn Inbox,
        bytes: &[u8],
        (name, delivery_count, named_per_delivery): (&str, u32, bool),
    ) -> (Status, Option<String>) {
        let acks = AckPolicy::new(crate::edifact::contrl::Mode::Always, false);
        let d = Incoming {
            delivery_count,
            named_per_delivery,
            ..Incoming::new(name, bytes)
        };
        let outcomes = decide_deliveries(
            inbox,
            vec![Delivered::parse(d)],
            "2026-01-01T00:00:00.000Z",
            acks,
        )
        .unwrap();
        inbox.commit().unwrap();
        (outcomes[0][0].status(), outcomes[0][0].contrl.clone())
    }

    /// A redelivery is told by its name where the broker keeps one (SQS, JetStream, Kafka, a
    /// `message_id`), by its count only where the name is one delivery's (RabbitMQ's without a
    /// `message_id`). A partner's copy as a new message whose first receive never committed
    /// (an SQS receive count of 2) is the partner asking again, and gets the first answer.
    #[test]
    fn a_redelivery_is_told_by_its_name_where_the_broker_keeps_one() {
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let mut answered = |sending| answered(&mut *inbox, INTERCHANGE, sending);
        let (status, first) = answered(("sqs:q/m1", 1, false));
        assert_eq!(status, Status::New);
        assert!(first.is_some(), "a new interchange is answered");
        assert_eq!(
            answered(("sqs:q/m2", 2, false)),
            (Status::Duplicate, first.clone()),
            "the partner's copy as a new message, received a second time because the first \
             receive never committed, is the partner asking again: the first answer again"
        );
        assert_eq!(
            answered(("sqs:q/m2", 3, false)),
            (Status::Duplicate, None),
            "a name already answered is not answered again"
        );
        assert_eq!(
            answered(("sqs:q/m1", 2, false)),
            (Status::Duplicate, None),
            "our own redelivery of the first message is not answered again"
        );
        assert_eq!(
            answered(("amqp:q/delivery-c1-5", 2, true)),
            (Status::Duplicate, None),
            "a redelivery under a name of its own is told by its count"
        );
        assert_eq!(
            answered(("amqp:q/delivery-c1-6", 1, true)),
            (Status::Duplicate, first),
            "a new message under a name of its own is the partner asking again"
        );
    }

    /// A rejected delivery redelivered under a name of its own (RabbitMQ's without a
    /// `message_id`) is answered: neither its name nor its count tells whether its first
    /// delivery ever committed (a stopped consumer's fetched deliveries come again flagged
    /// redelivered), and a rejection lost is worse than one sent twice. Under a name the broker
    /// keeps, our own redelivery is told by the name, and not answered again.
    #[test]
    fn a_rejected_redelivery_is_answered_again_only_under_a_name_of_its_own() {
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let text = std::str::from_utf8(INTERCHANGE).unwrap();
        assert!(text.contains("UNT+3+1'"));
        let broken = text.replace("UNT+3+1'", "UNT+2+1'");
        let mut answered = |sending| answered(&mut *inbox, broken.as_bytes(), sending);
        let (status, first) = answered(("amqp:q/delivery-c1-1", 1, true));
        assert_eq!(status, Status::Rejected);
        assert!(first.is_some(), "a rejected interchange is answered");
        let (status, again) = answered(("amqp:q/delivery-c2-1", 2, true));
        assert_eq!(status, Status::Rejected);
        assert!(
            again.is_some() && again != first,
            "a redelivery under a name of its own, which may never have been decided, is \
             answered: {again:?}"
        );
        let (_, first) = answered(("nats:EDI/7", 1, false));
        assert!(first.is_some(), "a new message is answered");
        assert_eq!(
            answered(("nats:EDI/7", 2, false)),
            (Status::Rejected, None),
            "our own redelivery under a name the broker keeps is not answered again"
        );
    }
}
