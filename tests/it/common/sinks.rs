//! The destinations `publish` delivers the outbox to, for the contracts every one of them keeps
//! (`tests/it/sinks.rs`), each written once in [`per_destination!`] and run on the folder,
//! JetStream, RabbitMQ, Kafka and SQS (a FIFO and a standard queue): what a contract needs of a destination, whichever it is
//! ([`TestDestination`]), implemented by the folder here ([`Folder`]) and by each test broker in
//! its file of `brokers/`; the outbox's events as the inbox holds them, each with the id it must
//! go out under ([`events`]); and what a destination holds ([`Got`]), checked against them
//! ([`assert_held`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::run::{Run, RunExt};
use super::site::Site;

/// The test destinations, one line each (the `cfg` that builds it, the test's name, the type
/// implementing [`TestDestination`]): a new destination's line here gives it every contract
/// written with [`per_destination!`].
#[allow(unused_macros)]
macro_rules! each_test_destination {
    ($how:ident) => {
        per_destination_case!($how, all(), folder, crate::common::sinks::Folder);
        per_destination_case!($how, feature = "nats", nats, crate::common::brokers::Jet);
        per_destination_case!($how, feature = "amqp", amqp, crate::common::brokers::Rabbit);
        per_destination_case!(
            $how,
            feature = "kafka",
            kafka,
            crate::common::brokers::Kafka
        );
        per_destination_case!($how, feature = "sqs", sqs, crate::common::brokers::Sqs);
        per_destination_case!(
            $how,
            feature = "sqs",
            sqs_standard,
            crate::common::brokers::sqs::Standard
        );
    };
}

/// One destination's test(s) of a [`per_destination!`] contract: `NAME::DESTINATION` on an
/// SQLite inbox, or with `per_backend`, `NAME::DESTINATION::sqlite` and
/// `NAME::DESTINATION::postgres`.
#[allow(unused_macros)]
macro_rules! per_destination_case {
    (single, $cfg:meta, $test:ident, $ty:ty) => {
        #[cfg($cfg)]
        #[test]
        fn $test() {
            run::<$ty>(crate::common::site::Site::new())
        }
    };
    (per_backend, $cfg:meta, $test:ident, $ty:ty) => {
        #[cfg($cfg)]
        mod $test {
            #[test]
            fn sqlite() {
                super::run::<$ty>(crate::common::site::Site::new())
            }

            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                if let Some(site) = crate::common::site::Site::postgres() {
                    super::run::<$ty>(site)
                }
            }
        }
    };
}

/// A contract test that runs once per destination from the same code: `NAME::folder`,
/// `NAME::nats`, `NAME::amqp`, `NAME::kafka`, `NAME::sqs` (a FIFO queue) and `NAME::sqs_standard`
/// (each where its feature is built),
/// on an SQLite inbox; with `per_backend` before `fn`, once per inbox backend too
/// (`NAME::nats::sqlite`, `NAME::nats::postgres`, ...). The body is generic over the type named
/// in the parentheses, a [`TestDestination`], and makes the destination it needs (of its own,
/// removed at the end; a test whose broker does not answer is skipped with a notice outside
/// CI). The destinations are listed once, in [`each_test_destination!`].
#[allow(unused_macros)]
macro_rules! per_destination {
    ($(#[doc = $doc:literal])* fn $name:ident($site:ident, $d:ident) $body:block) => {
        per_destination!(@contract single, [$(#[doc = $doc])*] $name($site, $d) $body);
    };
    ($(#[doc = $doc:literal])* per_backend fn $name:ident($site:ident, $d:ident) $body:block) => {
        per_destination!(@contract per_backend, [$(#[doc = $doc])*] $name($site, $d) $body);
    };
    (@contract $how:ident, [$($doc:tt)*] $name:ident($site:ident, $d:ident) $body:block) => {
        $($doc)*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run<$d: crate::common::sinks::TestDestination>(
                $site: crate::common::site::Site,
            ) $body

            each_test_destination!($how);
        }
    };
}

/// What order a destination keeps the events it holds in (docs/brokers.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// None: a folder is a set of files, `ID.edi`, in no order whoever picks them up.
    Unordered,
    /// Each partner's events (SENDER/RECIPIENT, 0004/0010) in the order they were written, and
    /// none between partners: a Kafka topic's partitions (a partner's records under one key, in
    /// one partition), an SQS FIFO queue's message groups (one per partner).
    PerPartner,
    /// Every event in the order written: one JetStream stream, one RabbitMQ queue (which keeps
    /// the order of what one channel publishes to it).
    Total,
}

/// One event of the outbox (a received message's), as the inbox holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The id it must go out under ([`event_id`]).
    pub id: String,
    pub sender: String,
    pub recipient: String,
    pub control_ref: String,
    /// UNH 0062.
    pub message_ref: String,
}

impl Event {
    /// Its partner, as the destinations that group by partner name it: `SENDER/RECIPIENT`.
    pub fn partner(&self) -> String {
        format!("{}/{}", self.sender, self.recipient)
    }
}

/// Every received message's event of the outbox, in the order written (the order they must go
/// out in), each with the id it must go out under.
pub fn events(site: &Site) -> Vec<Event> {
    site.rows(
        "SELECT i.sender, i.recipient, i.control_ref, m.group_ref, m.reference FROM outbox o
         JOIN messages m ON m.id = o.message_id JOIN interchanges i ON i.id = m.interchange_id
         ORDER BY o.id",
    )
    .into_iter()
    .map(|r| {
        let v = |n: usize| r[n].clone().unwrap_or_default();
        Event {
            id: event_id(&[&v(0), &v(1), &v(2), &v(3), &v(4)]),
            sender: v(0),
            recipient: v(1),
            control_ref: v(2),
            message_ref: v(4),
        }
    })
    .collect()
}

/// A message event's id as docs/brokers.md states it (128 bits of SHA-256 over the interchange's
/// key, 0004, 0010 and 0020, the group's reference, 0048, and the message's, 0062, in hex; each
/// value's length first), worked out here again rather than read from the publisher: an id that
/// changed would defeat every destination's deduplication of what an older version published.
pub fn event_id(values: &[&str]) -> String {
    let mut h = Sha256::new();
    for v in std::iter::once("edi-inbox message").chain(values.iter().copied()) {
        h.update((v.len() as u64).to_be_bytes());
        h.update(v.as_bytes());
    }
    hex::encode(&h.finalize()[..16])
}

/// A message as a destination holds it.
#[derive(Debug, Clone)]
pub struct Got {
    /// The event id it carries: a file's name, `Nats-Msg-Id`, `message_id`, `ce_id`, `ce-id`.
    pub id: String,
    /// The partner the destination groups it under, where it groups (a Kafka record's key, an
    /// SQS FIFO queue's message group).
    pub partner: Option<String>,
    pub body: Vec<u8>,
}

impl Got {
    /// What a broker holds (`held`), each under the event id in its header `id` and the
    /// partner in its header `partner`, where the broker groups by one.
    pub fn all(held: Vec<super::brokers::Held>, id: &str, partner: Option<&str>) -> Vec<Got> {
        held.into_iter()
            .map(|h| Got {
                id: h.headers.get(id).cloned().unwrap_or_default(),
                partner: partner.and_then(|p| h.headers.get(p).cloned()),
                body: h.body,
            })
            .collect()
    }
}

/// `consume --json --until-idle IDLE --from FROM` into `second`, with `args`: how a broker's
/// [`TestDestination::take_into`] takes what was published.
pub fn consume_into(second: &Site, idle: &str, from: &str, args: &[&str]) -> Run {
    second
        .cmd()
        .args(["consume", "--json", "--until-idle", idle, "--from", from])
        .args(args)
        .run()
}

/// How many copies of each event a destination may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// Exactly one.
    Once,
    /// One or more, each under the event's one id (a destination that cannot drop a copy sent
    /// again after a crash between the delivery and the mark).
    AtLeastOnce,
}

/// What a contract needs of a destination, whichever it is: one of the test's own (removed at
/// the end), what `publish` is given to reach it, and what it holds.
pub trait TestDestination: Sized {
    /// Whether an event sent again, after a publisher died between its delivery and its mark,
    /// may be held twice. docs/brokers.md: RabbitMQ cannot drop it (a consumer drops a
    /// `message_id` it has seen), nor Kafka across producer sessions, nor an SQS standard queue
    /// (a consumer drops a `ce_id`, a `ce-id`); JetStream drops it within its duplicate window,
    /// an SQS FIFO queue by its deduplication id, and the folder finds its file there.
    const DUPLICATES: bool;

    /// The order it keeps.
    const ORDER: Order;

    /// Words of the reason `publish` gives for the refusal of [`TestDestination::refusing`].
    const REFUSAL: &'static str;

    /// One of the test's own; `None` (with a notice) where its broker does not answer, unless
    /// its `EDI_INBOX_REQUIRE_*` is set: then it panics (`common::require`).
    fn destination() -> Option<Self>;

    /// One that refuses `poison` for itself (a refusal of that event, counted against it), and
    /// takes every one of `others`.
    fn refusing(poison: &Event, others: &[Event]) -> Option<Self>;

    /// What `publish` is given to reach it (`--to URL`, and an exchange).
    fn publish_args(&self) -> Vec<String>;

    /// The environment `publish` is given for it, beside its arguments.
    fn publish_env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Every message it holds, in its order (a Kafka topic's partitions one after the other);
    /// taken off it where reading takes (a RabbitMQ or SQS queue), so read once, at the end.
    fn taken(&self) -> Vec<Got>;

    /// What was published to it whole (`--payload interchange`) decided into `second` as its
    /// operators would take it, with `args` (`consume --json` from it, or `ingest --json` of the
    /// folder): the run.
    fn take_into(&self, second: &Site, args: &[&str]) -> Run;

    /// How many of `n` events a contract sends it: all of them, but for a test server that slows
    /// down with every message a queue holds (moto's SQS), where a tenth shows the same.
    fn many(n: usize) -> usize {
        n
    }
}

/// `publish` to `destination` with `args`: the run (with `--json`, its JSON Lines in
/// [`Run::json`]).
pub fn publish_to<D: TestDestination>(site: &Site, destination: &D, args: &[&str]) -> Run {
    site.cmd()
        .arg("publish")
        .args(destination.publish_args())
        .envs(destination.publish_env())
        .args(args)
        .run()
}

/// Checks what a destination holds against the events that must be there: every message is an
/// event's, under its id, its body that event's message (UNH with its reference), grouped under
/// its partner where the destination groups; each event there as often as `copies` allows; and
/// the first copy of each in the order the destination keeps.
#[track_caller]
pub fn assert_held(events: &[Event], got: &[Got], copies: Copies, order: Order) {
    let index: BTreeMap<&str, usize> = events
        .iter()
        .enumerate()
        .map(|(k, e)| (e.id.as_str(), k))
        .collect();
    assert_eq!(
        index.len(),
        events.len(),
        "the events' ids are not distinct"
    );
    let mut seen = vec![0usize; events.len()];
    let mut first = Vec::new();
    for g in got {
        let Some(&k) = index.get(g.id.as_str()) else {
            panic!(
                "the destination holds {:?}, not an event of the outbox: {}",
                g.id,
                String::from_utf8_lossy(&g.body)
            );
        };
        let e = &events[k];
        assert!(
            message_of(&g.body, &e.message_ref),
            "{} is not the message {} of {}: {}",
            g.id,
            e.message_ref,
            e.control_ref,
            String::from_utf8_lossy(&g.body)
        );
        if let Some(partner) = &g.partner {
            assert_eq!(*partner, e.partner(), "the partner {} is held under", g.id);
        }
        if seen[k] == 0 {
            first.push(k);
        }
        seen[k] += 1;
    }
    let missing: Vec<&str> = (0..events.len())
        .filter(|&k| seen[k] == 0)
        .map(|k| events[k].id.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events missing, the first: {:?}",
        missing.len(),
        events.len(),
        &missing[..missing.len().min(10)]
    );
    if copies == Copies::Once {
        let twice: Vec<(&str, usize)> = (0..events.len())
            .filter(|&k| seen[k] > 1)
            .map(|k| (events[k].id.as_str(), seen[k]))
            .collect();
        assert!(
            twice.is_empty(),
            "{} events held more than once, the first (id, copies): {:?}",
            twice.len(),
            &twice[..twice.len().min(10)]
        );
    }
    match order {
        Order::Unordered => {}
        Order::Total => {
            let out_of_order = first.windows(2).position(|w| w[0] > w[1]);
            assert!(
                out_of_order.is_none(),
                "not in the order written: event {:?} after {:?} (as written, from 0: {:?})",
                out_of_order.map(|k| &events[first[k + 1]].id),
                out_of_order.map(|k| &events[first[k]].id),
                out_of_order.map(|k| (first[k], first[k + 1]))
            );
        }
        Order::PerPartner => {
            let mut by_partner: BTreeMap<String, Vec<usize>> = BTreeMap::new();
            for &k in &first {
                by_partner.entry(events[k].partner()).or_default().push(k);
            }
            for (partner, ks) in by_partner {
                let out_of_order = ks.windows(2).find(|w| w[0] > w[1]);
                assert!(
                    out_of_order.is_none(),
                    "{partner}'s events not in the order written: number {} (as written, from 0) \
                     came after number {}",
                    out_of_order.map_or(0, |w| w[1]),
                    out_of_order.map_or(0, |w| w[0]),
                );
            }
        }
    }
}

/// Whether `body` is a message (UNH..UNT) whose reference (UNH 0062) is `reference`, whatever its
/// separators (the element separator is the byte after `UNH`).
fn message_of(body: &[u8], reference: &str) -> bool {
    let Some((&separator, rest)) = body.strip_prefix(b"UNH").and_then(|r| r.split_first()) else {
        return false;
    };
    rest.strip_prefix(reference.as_bytes())
        .and_then(|r| r.first())
        .is_some_and(|&b| b == separator)
}

/// A value as a subject token: letters, digits, - and _ as they are, other bytes %XX (as
/// `publish` makes the subjects and routing keys of `--subject`).
pub fn token(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A folder of the test's own, `dir:PATH`: one file per event, `ID.edi`.
pub struct Folder {
    dir: tempfile::TempDir,
}

impl Folder {
    /// The folder `publish` writes to (made by it).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("out")
    }
}

impl TestDestination for Folder {
    const DUPLICATES: bool = false;
    const ORDER: Order = Order::Unordered;
    const REFUSAL: &'static str = "with other content: not published, not replaced";

    fn destination() -> Option<Folder> {
        Some(Folder {
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// A file with other bytes at the poison's name, which `publish` never replaces. Nothing
    /// else makes a folder refuse one event: one it cannot write to (read-only, full) is the
    /// folder's failure, which ends the run (exit 1) and is counted against no event.
    fn refusing(poison: &Event, _others: &[Event]) -> Option<Folder> {
        let folder = Folder::destination()?;
        fs::create_dir(folder.path()).unwrap();
        fs::write(
            folder.path().join(format!("{}.edi", poison.id)),
            b"someone else's file",
        )
        .unwrap();
        Some(folder)
    }

    fn publish_args(&self) -> Vec<String> {
        vec!["--to".into(), format!("dir:{}", self.path().display())]
    }

    /// Every file, in name order (the folder keeps none): a name that is not `ID.edi` (a
    /// temporary file left) is held under its whole name, which no event has.
    fn taken(&self) -> Vec<Got> {
        let mut names: Vec<String> = fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|name| Got {
                body: fs::read(self.path().join(&name)).unwrap(),
                id: name.strip_suffix(".edi").unwrap_or(&name).to_string(),
                partner: None,
            })
            .collect()
    }

    /// `ingest --json` of the folder, as a system that picks files up would hand them over.
    fn take_into(&self, second: &Site, args: &[&str]) -> Run {
        second
            .cmd()
            .args(["ingest", "--json"])
            .args(args)
            .arg(self.path())
            .run()
    }
}
