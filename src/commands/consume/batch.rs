//! One batch of deliveries on its way into the inbox: prepared on the fetching thread (parsed,
//! hashed, compressed where new) while the batch before it is decided, then decided and
//! committed on a thread of its own, with the consumer group's positions where the inbox keeps
//! them (a feed over a partitioned log). What follows the commit (the reports, dead letters and acknowledgements) is the
//! run's, in `mod.rs`.

use anyhow::Context as _;

use crate::consume::{Delivery, Unreadable};
use crate::inbox::effects::HoldAhead;
use crate::inbox::{Inbox, KeyProbe};
use crate::intake::{self, AckPolicy, Delivered, Detached, Outcome};
use crate::publish::{DeadLetter, Rejected};

use super::super::service::Failure;

/// A batch fetched and prepared: its deliveries, and each one's interchanges detached from its
/// bytes, so that the batch can wait beside the one being decided.
pub(super) struct Prepared {
    deliveries: Vec<Delivery>,
    items: Vec<Vec<Detached>>,
    /// The SHA-256 of each delivery holding rejected input (its record is keyed by it).
    hashes: Vec<Option<String>>,
    /// Why a delivery's body cannot be read as its broker says it is written, where it cannot:
    /// not parsed, rejected for that.
    unreadable: Vec<Option<Unreadable>>,
}

/// Parses (and compresses, where the inbox does not hold the key yet) each delivery's
/// interchanges on a few threads, one per look at the inbox in `probes`; a delivery whose body
/// `unreadable` says cannot be read (by its tag) is not parsed: what its bytes hold is not what
/// its sender meant.
pub(super) fn prepare(
    deliveries: Vec<Delivery>,
    unreadable: impl Fn(u64) -> Option<Unreadable>,
    probes: &mut Vec<Option<Box<dyn KeyProbe + Send>>>,
    hold: Option<&HoldAhead>,
) -> Prepared {
    let unreadable: Vec<Option<Unreadable>> =
        deliveries.iter().map(|d| unreadable(d.tag)).collect();
    let bodies: Vec<&[u8]> = deliveries
        .iter()
        .zip(&unreadable)
        .map(|(d, u)| if u.is_some() { &[][..] } else { &d.body[..] })
        .collect();
    let mut items = intake::prepare::in_parallel(&bodies, probes, hold);
    for (items, u) in items.iter_mut().zip(&unreadable) {
        if u.is_some() {
            items.clear();
        }
    }
    let hashes = bodies
        .iter()
        .zip(&items)
        .map(|(bytes, items)| intake::prepare::hash_if_rejected(bytes, items))
        .collect();
    let items = items
        .into_iter()
        .map(|items| items.into_iter().map(intake::prepare::detach).collect())
        .collect();
    drop(bodies);
    Prepared {
        deliveries,
        items,
        hashes,
        unreadable,
    }
}

/// A batch committed: what the run reports and settles.
pub(super) struct Committed {
    /// The deliveries decided, each with its outcomes.
    pub decided: Vec<(Delivery, Vec<Outcome>)>,
    /// The tags of the records below their partition's position: decided before (by this group
    /// before a crash, or by the consumer that had the partition until a rebalance), only to
    /// settle.
    pub skipped: Vec<u64>,
}

/// Decides the batch in one transaction exactly as `ingest` decides files, records its
/// deliveries, moves the group's positions past it where the inbox keeps them, and commits.
/// Runs on a thread of its own while the next batch is fetched; touches the inbox alone.
pub(super) fn decide_and_commit(
    inbox: &mut dyn Inbox,
    acks: AckPolicy,
    group: Option<&str>,
    batch: Prepared,
    dead_letter: Option<&mut DeadLetter>,
) -> Result<Committed, Failure> {
    let when = crate::clock::now();
    let Prepared {
        deliveries,
        items,
        hashes,
        unreadable,
    } = batch;
    let rollbacks = inbox.rollbacks();
    let (below, advance) = match group {
        Some(group) => positioned(inbox, group, &deliveries).map_err(not_committed)?,
        None => (vec![false; deliveries.len()], Vec::new()),
    };
    let mut skipped = Vec::new();
    let mut kept = Vec::with_capacity(deliveries.len());
    let mut kept_items = Vec::with_capacity(deliveries.len());
    let mut kept_hashes = Vec::with_capacity(deliveries.len());
    let mut kept_unreadable = Vec::with_capacity(deliveries.len());
    for ((((d, items), hash), below), unreadable) in deliveries
        .into_iter()
        .zip(items)
        .zip(hashes)
        .zip(below)
        .zip(unreadable)
    {
        if below {
            skipped.push(d.tag);
        } else {
            kept.push(d);
            kept_items.push(items);
            kept_hashes.push(hash);
            kept_unreadable.push(unreadable);
        }
    }
    let delivered: Vec<Delivered<'_>> = kept
        .iter()
        .zip(kept_items)
        .zip(kept_hashes)
        .zip(kept_unreadable)
        .map(|(((d, items), sha256), unreadable)| {
            let incoming = d.incoming();
            match unreadable {
                Some(why) => Delivered::unreadable(incoming, why),
                None => Delivered::prepared(
                    incoming,
                    items
                        .into_iter()
                        .map(|item| intake::prepare::reattach(&d.body, item))
                        .collect(),
                    sha256,
                ),
            }
        })
        .collect();
    let outcomes =
        intake::decide_deliveries(inbox, delivered, &when, acks).map_err(not_committed)?;
    if let Some(group) = group {
        // Where the inbox rolled the batch back to make it again (a deadlock with another
        // host), the positions' locks went with it: taken again, and checked.
        let again = inbox.rollbacks() != rollbacks;
        advanced(inbox, group, &kept, &advance, &when, again).map_err(not_committed)?;
    }
    let decided: Vec<(Delivery, Vec<Outcome>)> = kept.into_iter().zip(outcomes).collect();
    // Where the positions move in this transaction (a partitioned log), they are the
    // acknowledgement: a rejected record must be in the dead letters before its position moves
    // past it, or a dead-letter destination that fails loses it (no run would take it again).
    // Sent before the commit, under ids that are the same every time: a crash between the two
    // sends one again, never none.
    if let Some(dl) = dead_letter {
        let rejected = rejected_of(&decided);
        if !rejected.is_empty()
            && let Err(e) = dl.send(&rejected)
        {
            inbox.abandon();
            return Err(Failure::Fatal(e.context(
                "the rejected records could not be dead-lettered, so nothing of the batch was committed and no position moved; the next run takes its records again from the inbox's positions",
            )));
        }
    }
    inbox
        .commit()
        .context("cannot commit to the inbox database")
        .map_err(not_committed)?;
    crash_point!("consume-after-commit");
    Ok(Committed { decided, skipped })
}

/// The rejected deliveries of a batch decided, each with its reasons, as they go to the dead
/// letters.
pub(super) fn rejected_of(decided: &[(Delivery, Vec<Outcome>)]) -> Vec<Rejected<'_>> {
    decided
        .iter()
        .filter_map(|(d, outcomes)| {
            let reasons: Vec<String> = outcomes.iter().filter_map(Outcome::rejection).collect();
            (!reasons.is_empty()).then(|| Rejected {
                source: &d.source,
                subject: &d.subject,
                filename: d.filename.as_deref(),
                body: &d.body,
                reason: reasons.join("; "),
            })
        })
        .collect()
}

/// A partition's place after a batch: its topic, number, the offset after its last record, the
/// topic id its records came from, and whether its stored position was lost and is replaced.
struct Advance {
    topic: String,
    partition: i32,
    next: i64,
    topic_id: Option<std::sync::Arc<str>>,
    restart: bool,
}

impl Advance {
    /// Where the stored position of this partition is the one to judge the batch's records
    /// against: the next offset to decide, `None` where none is stored, the stored one is of
    /// another topic (deleted and created again), or it was lost and is replaced.
    fn start(&self, stored: Option<crate::inbox::Stored>) -> Option<i64> {
        stored
            .filter(|s| !self.restart && s.is_of(self.topic_id.as_deref()))
            .map(|s| s.next_offset)
    }
}

/// Takes the inbox's positions of the batch's partitions (held until the commit) and says of
/// each delivery whether it is below its partition's position (decided before, so only
/// settled), and where each partition's position goes.
fn positioned(
    inbox: &mut dyn Inbox,
    group: &str,
    deliveries: &[Delivery],
) -> anyhow::Result<(Vec<bool>, Vec<Advance>)> {
    let mut advance: Vec<Advance> = Vec::new();
    for p in deliveries.iter().filter_map(|d| d.position.as_ref()) {
        match advance
            .iter_mut()
            .find(|a| a.topic == p.topic && a.partition == p.partition)
        {
            Some(a) => {
                a.next = a.next.max(p.offset + 1);
                a.restart |= p.restart;
                if p.topic_id.is_some() {
                    a.topic_id.clone_from(&p.topic_id);
                }
            }
            None => advance.push(Advance {
                topic: p.topic.clone(),
                partition: p.partition,
                next: p.offset + 1,
                topic_id: p.topic_id.clone(),
                restart: p.restart,
            }),
        }
    }
    advance.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let partitions: Vec<(&str, i32)> = advance
        .iter()
        .map(|a| (a.topic.as_str(), a.partition))
        .collect();
    let stored = inbox
        .claim_positions(group, &partitions)
        .context("cannot read the consumer's positions from the inbox database")?;
    let start: std::collections::HashMap<(&str, i32), i64> = advance
        .iter()
        .zip(stored)
        .filter_map(|(a, s)| a.start(s).map(|s| ((a.topic.as_str(), a.partition), s)))
        .collect();
    let below = deliveries
        .iter()
        .map(|d| {
            d.position.as_ref().is_some_and(|p| {
                start
                    .get(&(p.topic.as_str(), p.partition))
                    .is_some_and(|&s| p.offset < s)
            })
        })
        .collect();
    Ok((below, advance))
}

/// Moves the positions past the batch, in its transaction, once its records are decided. With
/// `again` (the inbox made the batch again meanwhile, and let go of the positions' locks), they
/// are taken again and checked first: had another consumer decided any of these records in
/// between, nothing of the batch may be committed.
fn advanced(
    inbox: &mut dyn Inbox,
    group: &str,
    decided: &[Delivery],
    advance: &[Advance],
    when: &str,
    again: bool,
) -> anyhow::Result<()> {
    let partitions: Vec<(&str, i32)> = advance
        .iter()
        .map(|a| (a.topic.as_str(), a.partition))
        .collect();
    if again {
        let stored = inbox
            .claim_positions(group, &partitions)
            .context("cannot read the consumer's positions from the inbox database")?;
        for (a, stored) in advance.iter().zip(stored) {
            let first = decided
                .iter()
                .filter_map(|d| d.position.as_ref())
                .filter(|p| p.topic == a.topic && p.partition == a.partition)
                .map(|p| p.offset)
                .min();
            if let (Some(first), Some(stored)) = (first, a.start(stored))
                && first < stored
            {
                anyhow::bail!(
                    "another consumer of group {group} decided {}/{} up to offset {stored} while this batch was made",
                    a.topic,
                    a.partition
                );
            }
        }
    }
    let positions: Vec<crate::inbox::Advance<'_>> = advance
        .iter()
        .map(|a| crate::inbox::Advance {
            topic: &a.topic,
            partition: a.partition,
            next_offset: a.next,
            topic_id: a.topic_id.as_deref(),
            restart: a.restart,
        })
        .collect();
    inbox
        .advance_positions(group, &positions, when)
        .context("cannot write the consumer's positions to the inbox database")?;
    Ok(())
}

/// The inbox failed: nothing of the batch is kept, the run ends.
fn not_committed(e: anyhow::Error) -> Failure {
    Failure::Fatal(e.context(
        "nothing of the batch was committed or acknowledged; the broker delivers it again",
    ))
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::consume::Position;
    use crate::inbox::{Access, Location};
    use std::time::Duration;

    fn record(tag: u64, offset: i64) -> Delivery {
        Delivery {
            position: Some(Position {
                topic: "t".into(),
                partition: 0,
                offset,
                topic_id: None,
                restart: false,
            }),
            ..Delivery::new(
                tag,
                format!("kafka:t/0/{offset}"),
                "t".into(),
                bytes::Bytes::new(),
            )
        }
    }

    /// Partition t/0 moved to `next`.
    fn to(next: i64) -> crate::inbox::Advance<'static> {
        crate::inbox::Advance {
            topic: "t",
            partition: 0,
            next_offset: next,
            topic_id: None,
            restart: false,
        }
    }

    fn places(advance: &[Advance]) -> Vec<(&str, i32, i64)> {
        advance
            .iter()
            .map(|a| (a.topic.as_str(), a.partition, a.next))
            .collect()
    }

    /// An SQLite inbox of its own, in a folder that goes with the first.
    fn fresh_inbox() -> (tempfile::TempDir, Box<dyn Inbox>) {
        let dir = tempfile::tempdir().unwrap();
        let db = Location::Sqlite(dir.path().join("t.db"));
        let inbox = crate::inbox::open(&db, Access::Create, Duration::from_secs(5)).unwrap();
        (dir, inbox)
    }

    /// No CONTRL for anything.
    fn no_contrl() -> AckPolicy {
        AckPolicy::new(crate::edifact::contrl::Mode::Never, false)
    }

    #[test]
    fn records_below_the_stored_position_are_only_settled_and_a_late_batch_commits_nothing() {
        let (_dir, mut inbox) = fresh_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        inbox.advance_positions("g", &[to(5)], when).unwrap();
        inbox.commit().unwrap();
        // Offsets 3..8: 3 and 4 were decided before; the position goes to 8.
        let batch: Vec<Delivery> = (3..8).map(|o| record(o as u64, o)).collect();
        let (below, advance) = positioned(&mut *inbox, "g", &batch).unwrap();
        assert_eq!(below, [true, true, false, false, false]);
        assert_eq!(places(&advance), [("t", 0, 8)]);
        let kept: Vec<Delivery> = batch.into_iter().skip(2).collect();
        advanced(&mut *inbox, "g", &kept, &advance, when, false).unwrap();
        inbox.commit().unwrap();
        let stored = inbox.positions(Some("g")).unwrap();
        assert_eq!(stored[0].next_offset, 8);
        // A batch made again while another consumer moved the position past it (a rebalance
        // while the inbox made the batch again) may not be committed.
        let late: Vec<Delivery> = (6..9).map(|o| record(o as u64, o)).collect();
        let past = Advance {
            topic: "t".into(),
            partition: 0,
            next: 9,
            topic_id: None,
            restart: false,
        };
        assert!(advanced(&mut *inbox, "g", &late, &[past], when, true).is_err());
        // Never moved back.
        inbox.advance_positions("g", &[to(2)], when).unwrap();
        inbox.commit().unwrap();
        assert_eq!(inbox.positions(Some("g")).unwrap()[0].next_offset, 8);
    }

    /// Records of t/0 at `offsets`, from the topic of id `topic_id`.
    fn of_topic(topic_id: &str, offsets: std::ops::Range<i64>, restart: bool) -> Vec<Delivery> {
        offsets
            .map(|o| {
                let mut d = record(o as u64, o);
                if let Some(p) = d.position.as_mut() {
                    p.topic_id = Some(std::sync::Arc::from(topic_id));
                    p.restart = restart;
                }
                d
            })
            .collect()
    }

    fn stored(inbox: &dyn Inbox) -> (i64, Option<String>) {
        let p = &inbox.positions(Some("g")).unwrap()[0];
        (p.next_offset, p.topic_id.clone())
    }

    #[test]
    fn a_position_of_another_topic_id_or_a_restart_is_replaced_not_judged_by() {
        let (_dir, mut inbox) = fresh_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        // A position stored before topic ids were kept.
        inbox.advance_positions("g", &[to(5)], when).unwrap();
        inbox.commit().unwrap();
        let mut decide = |batch: Vec<Delivery>| {
            let (below, advance) = positioned(&mut *inbox, "g", &batch).unwrap();
            let kept: Vec<Delivery> = batch
                .into_iter()
                .zip(&below)
                .filter(|(_, b)| !**b)
                .map(|(d, _)| d)
                .collect();
            advanced(&mut *inbox, "g", &kept, &advance, when, false).unwrap();
            inbox.commit().unwrap();
            (below, stored(&*inbox))
        };
        // It is the topic's own: judged by, and given the id.
        let (below, now) = decide(of_topic("A", 3..7, false));
        assert_eq!(below, [true, true, false, false]);
        assert_eq!(now, (7, Some("A".into())));
        // The topic deleted and created again (id B): its records are below the old
        // position, and none of them was decided; the position is the new topic's.
        let (below, now) = decide(of_topic("B", 0..3, false));
        assert_eq!(
            below,
            [false, false, false],
            "the old topic's position judged B"
        );
        assert_eq!(now, (3, Some("B".into())));
        // Forward only within a topic.
        let (below, now) = decide(of_topic("B", 1..2, false));
        assert_eq!((below, now), (vec![true], (3, Some("B".into()))));
        // A position lost and started again from the log's start: replaced, lower or not.
        let (below, now) = decide(of_topic("B", 0..2, true));
        assert_eq!((below, now), (vec![false, false], (2, Some("B".into()))));
    }

    #[test]
    fn a_batch_decided_on_its_thread_skips_what_was_decided_before() {
        let (_dir, mut inbox) = fresh_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        inbox.advance_positions("g", &[to(1)], when).unwrap();
        inbox.commit().unwrap();
        let body = |r: &str| {
            bytes::Bytes::from(format!(
                "UNB+UNOA:2+S+R+260101:1200+{r}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+{r}'"
            ))
        };
        let batch: Vec<Delivery> = (0..3)
            .map(|o| Delivery {
                body: body(&format!("R{o}")),
                ..record(o as u64 + 10, o)
            })
            .collect();
        let acks = no_contrl();
        let mut probes = vec![inbox.probe(), None];
        let prepared = prepare(batch, |_| None, &mut probes, None);
        assert_eq!(probes.len(), 2, "the probes are given back");
        let committed = std::thread::scope(|s| {
            s.spawn(|| decide_and_commit(&mut *inbox, acks, Some("g"), prepared, None))
                .join()
                .unwrap()
        });
        let Ok(committed) = committed else {
            panic!("the batch was not committed");
        };
        assert_eq!(committed.skipped, [10], "offset 0 is below the position");
        let refs: Vec<String> = committed
            .decided
            .iter()
            .flat_map(|(_, o)| o.iter().map(|o| o.human()))
            .collect();
        assert_eq!(refs.len(), 2, "{refs:?}");
        assert!(refs[0].contains("R1") && refs[1].contains("R2"), "{refs:?}");
        assert_eq!(inbox.positions(Some("g")).unwrap()[0].next_offset, 3);
    }

    #[test]
    fn an_unreadable_delivery_is_rejected_for_it_with_its_bytes_and_never_parsed() {
        let (_dir, mut inbox) = fresh_inbox();
        // Valid EDIFACT, but not what its sender said it was: never decided as it stands.
        let text = "UNB+UNOA:2+S+R+260101:1200+R9'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+R9'";
        let batch: Vec<Delivery> = [(1, text), (2, text.replace("R9", "R8").as_str())]
            .iter()
            .map(|(tag, body)| Delivery {
                source: format!("sqs:q/m{tag}"),
                body: bytes::Bytes::from(body.to_string()),
                position: None,
                ..record(*tag, 0)
            })
            .collect();
        let acks = no_contrl();
        let mut probes = vec![None];
        let unreadable = |tag| {
            (tag == 1).then(|| Unreadable {
                reason: "not base64".into(),
                offset: Some(3),
            })
        };
        let prepared = prepare(batch, unreadable, &mut probes, None);
        let Ok(committed) = decide_and_commit(&mut *inbox, acks, None, prepared, None) else {
            panic!("the batch was not committed");
        };
        let outcomes: Vec<&Vec<Outcome>> = committed.decided.iter().map(|(_, o)| o).collect();
        assert_eq!(outcomes[0].len(), 1);
        assert_eq!(
            outcomes[0][0].rejection().as_deref(),
            Some("not base64 (byte 3)")
        );
        assert_eq!(outcomes[1][0].status(), crate::status::Status::New);
        let stats = inbox.stats().unwrap();
        assert_eq!((stats.interchanges, stats.rejected), (1, 1), "{stats:?}");
    }
}
