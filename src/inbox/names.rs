//! The business words the inbox stores, written once here and bound as values by both backends
//! (never spelled in their SQL): the outboxes' event types, the cumulative counters and which
//! decision counts where, and which stored CONTRL a duplicate is answered with again.

use crate::edifact::contrl::{Action, DUPLICATE_DETECTED};

use super::{Decision, DeliveryRecord};
use crate::standard::Standard;

/// A received message's event type is `edifact.TYPE.received` (`x12.TYPE.received` for an X12
/// interchange's): what goes around the type, by its interchange's standard.
pub fn received_around(standard: Standard) -> (&'static str, &'static str) {
    match standard {
        Standard::Edifact => ("edifact.", ".received"),
        Standard::X12 => ("x12.", ".received"),
    }
}

/// The event type of a CONTRL to deliver.
pub const CONTRL_OUTBOUND: &str = "edifact.CONTRL.outbound";

/// The event type of a received message of `message_type` (`edifact.INVOIC.received`).
pub fn received(standard: Standard, message_type: &str) -> String {
    let (before, after) = received_around(standard);
    format!("{before}{message_type}{after}")
}

/// A stored CONTRL that is not sent again for a duplicate: one that rejected an interchange as a
/// duplicate (UCI 0083 `4`, 0085 `26`), whose answer is never the first copy's.
pub const NOT_RESENT: (&str, &str) = (Action::Rejected.code(), DUPLICATE_DETECTED);

/// The same for an X12 answer: a TA1 rejecting the interchange (TA104 `R`) with TA105 `025`,
/// duplicate interchange control number.
pub const NOT_RESENT_X12: (&str, &str) = ("R", crate::x12::ack::DUPLICATE_CONTROL_NUMBER);

/// The actions of an answer that rejected what it answers (EDIFACT's UCI 0083 `4`, X12's TA104
/// `R`): never the answer a duplicate gets again. Its key's applied copy was answered otherwise
/// (`7` or `8`, `A`); a rejection of the key is of a broken copy or of a duplicate.
pub const REJECTING: (&str, &str) = (Action::Rejected.code(), "R");

/// What `list` says of an event parked unpublished: `message 1 (edifact.ORDERS.received) not
/// published: ...`, or for an answer, which sending it answers (`send`).
pub fn not_published(reference: &str, event_type: &str, send: Option<i64>, error: &str) -> String {
    match send {
        None => format!("message {reference} ({event_type}) not published: {error}"),
        Some(send) => format!(
            "{} {reference} ({event_type}, sending {send}) not published: {error}",
            answer_kind(event_type)
        ),
    }
}

/// The document an answer's event carries, from its type: `CONTRL` (`edifact.CONTRL.outbound`),
/// or X12's `997`, `999` or `TA1` (`x12.997.outbound`): what a human line calls it.
pub fn answer_kind(event_type: &str) -> &str {
    event_type
        .split('.')
        .nth(1)
        .filter(|k| !k.is_empty())
        .unwrap_or("CONTRL")
}

/// A cumulative counter of the inbox, as the metrics read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Counter {
    IngestNew,
    IngestDuplicate,
    IngestDrift,
    IngestRejected,
    IngestRefused,
    PurgeEntries,
    PublishPublished,
    PublishFailed,
    PublishParked,
    ConsumeDeliveries,
    ConsumeRedelivered,
}

impl Counter {
    /// Its name where it is stored.
    pub fn name(self) -> &'static str {
        match self {
            Counter::IngestNew => "ingest_new",
            Counter::IngestDuplicate => "ingest_duplicate",
            Counter::IngestDrift => "ingest_drift",
            Counter::IngestRejected => "ingest_rejected",
            Counter::IngestRefused => "ingest_refused",
            Counter::PurgeEntries => "purge_entries",
            Counter::PublishPublished => "publish_published",
            Counter::PublishFailed => "publish_failed",
            Counter::PublishParked => "publish_parked",
            Counter::ConsumeDeliveries => "consume_deliveries",
            Counter::ConsumeRedelivered => "consume_redelivered",
        }
    }

    /// The counter a decision adds one to.
    pub fn of(d: &Decision) -> Counter {
        match d {
            Decision::New { .. } => Counter::IngestNew,
            Decision::Duplicate { .. } => Counter::IngestDuplicate,
            Decision::Drift { .. } => Counter::IngestDrift,
            Decision::Unstorable { .. } => Counter::IngestRejected,
            Decision::Refused(_) => Counter::IngestRefused,
        }
    }
}

/// What a batch of deliveries adds to the counters: one for each delivery, and one for each
/// the broker had delivered before (after a crash or a lost acknowledgement).
pub fn delivery_counts(deliveries: &[DeliveryRecord<'_>]) -> [(Counter, i64); 2] {
    let redelivered = deliveries.iter().filter(|d| d.delivery_count > 1).count();
    [
        (Counter::ConsumeDeliveries, deliveries.len() as i64),
        (Counter::ConsumeRedelivered, redelivered as i64),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words() {
        assert_eq!(
            received(Standard::Edifact, "INVOIC"),
            "edifact.INVOIC.received"
        );
        assert_eq!(received(Standard::X12, "810"), "x12.810.received");
        for standard in Standard::ALL {
            assert_eq!(
                received_around(standard).0,
                format!("{}.", standard.event_prefix()),
                "the event type begins with the standard's prefix"
            );
        }
        assert_eq!(NOT_RESENT, ("4", "26"));
        assert_eq!(
            Counter::of(&Decision::Duplicate { sighting_id: 1 }).name(),
            "ingest_duplicate"
        );
        assert_eq!(
            not_published("1", "edifact.ORDERS.received", None, "no stream"),
            "message 1 (edifact.ORDERS.received) not published: no stream"
        );
        assert_eq!(
            not_published("C7", "edifact.CONTRL.outbound", Some(2), "too large"),
            "CONTRL C7 (edifact.CONTRL.outbound, sending 2) not published: too large"
        );
        assert_eq!(
            not_published("000000007", "x12.997.outbound", Some(1), "too large"),
            "997 000000007 (x12.997.outbound, sending 1) not published: too large"
        );
        assert_eq!(answer_kind("x12.TA1.outbound"), "TA1");
        assert_eq!(answer_kind("edifact.CONTRL.outbound"), "CONTRL");
        let delivery = |delivery_count| DeliveryRecord {
            source: "nats:S/1",
            filename: None,
            delivery_count,
            size: 1,
            key: None,
            produced_at: None,
        };
        assert_eq!(
            delivery_counts(&[delivery(1), delivery(3), delivery(1)]),
            [
                (Counter::ConsumeDeliveries, 3),
                (Counter::ConsumeRedelivered, 1)
            ]
        );
    }
}
