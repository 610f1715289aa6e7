//! A batch of the messages' events as claimed, grouped into what goes out (one message per
//! event, or one per interchange) and built. Apart from the pipeline because it touches neither
//! the inbox nor the destination: the pipeline builds the next batch with it on a thread of its
//! own while the batch before is marked.

use std::collections::HashMap;

use crate::inbox::OutboxEvent;
use crate::publish::{self, Outgoing, Payload, Template};

/// A batch of the messages' events as claimed, with their interchanges' bytes by id.
pub(super) type Read = (Vec<OutboxEvent>, HashMap<i64, bytes::Bytes>);

/// A batch of the messages' events claimed and made ready to send.
pub(super) struct Claimed {
    /// Events claimed.
    pub(super) claimed: usize,
    pub(super) units: Vec<Unit>,
    /// What goes out, one per unit that could be built (taken when it is sent).
    pub(super) ready: Vec<Outgoing>,
}

impl Claimed {
    /// Its outbox rows, which the next claim passes over while this batch is in flight.
    pub(super) fn rows(&self) -> Vec<i64> {
        self.units
            .iter()
            .flat_map(|u| u.events.iter().map(|e| e.row))
            .collect()
    }
}

/// The events as what goes out (one each, or one per interchange), from their interchanges'
/// bytes `raws`: done on a thread of its own while the batch before is marked.
pub(super) fn ready(
    events: Vec<OutboxEvent>,
    raws: HashMap<i64, bytes::Bytes>,
    payload: Payload,
    template: &Template,
) -> Claimed {
    let claimed = events.len();
    let mut groups: Vec<Vec<OutboxEvent>> = Vec::new();
    // Where each interchange's group is: its events' ids need not be consecutive.
    let mut group_of: HashMap<i64, usize> = HashMap::new();
    for e in events {
        match group_of.get(&e.interchange_id) {
            Some(&g) if payload == Payload::Interchange => groups[g].push(e),
            _ => {
                group_of.insert(e.interchange_id, groups.len());
                groups.push(vec![e]);
            }
        }
    }
    let mut ready = Vec::with_capacity(groups.len());
    let empty = bytes::Bytes::new();
    let units = groups
        .into_iter()
        .map(|events| {
            let raw = raws.get(&events[0].interchange_id).unwrap_or(&empty);
            let (id, subject, sent) = match publish::outgoing(&events, raw, payload, template) {
                Ok(o) => {
                    let (id, subject) = (o.id.clone(), o.subject.clone());
                    ready.push(o);
                    (id, subject, Ok(ready.len() - 1))
                }
                Err(why) => (
                    publish::event_id(&events[0], payload),
                    template.render(&events[0]),
                    Err(why),
                ),
            };
            Unit {
                events,
                id,
                subject,
                sent,
            }
        })
        .collect();
    Claimed {
        claimed,
        units,
        ready,
    }
}

/// What goes out as one message: its events (one, or an interchange's), its id and subject,
/// and its place in the batch sent, or why it cannot be built.
pub(super) struct Unit {
    pub(super) events: Vec<OutboxEvent>,
    pub(super) id: String,
    pub(super) subject: String,
    pub(super) sent: Result<usize, String>,
}
