//! The decision of a batch of parsed inputs, whatever brought them: one call to the inbox for
//! all their interchanges, their rejected pieces recorded (each input's bytes once), and the
//! CONTRLs due stored with them, all in the open batch (nothing is committed here).

use anyhow::Context as _;

use super::acknowledge::{AckPolicy, partner};
use super::outcome::{Outcome, Source};
use super::prepare::Attached;
use crate::envelopes::{self, RejectedContext};
use crate::inbox::{Candidate, Inbox, InboxError, InterchangeKey};

/// One input's interchanges as the inbox decides them: a file's, or a delivery's.
pub struct Parsed<'a> {
    /// Where it came from: what it is reported and recorded under.
    pub source: Source,
    pub bytes: &'a [u8],
    pub items: Vec<Attached<'a>>,
    /// Its SHA-256, where it holds rejected input (its record is keyed by it).
    pub sha256: Option<&'a str>,
    /// The absolute path of the file it was read from; `None` for a delivery or a request.
    pub source_path: Option<&'a str>,
}

impl Source {
    /// Which of the partner's sendings an input is, for a duplicate's CONTRL (sent again once
    /// per sending): a file by its name alone (the same file seen again after a crash, or
    /// another host's copy of it, is the same sending), a delivery by its name at its broker;
    /// and whether it is our own redelivery that its name cannot tell (never answered again).
    /// A name the broker keeps for every redelivery (a stream's sequence, an SQS message id, a
    /// `message_id`) tells it by itself: a name already answered is not answered again, and a
    /// redelivery whose first delivery never committed is that sending's first answer, also
    /// where it is the partner's copy of an interchange seen before. Only a name of one
    /// delivery (RabbitMQ's without a `message_id`) needs the broker's count.
    pub fn sending(&self) -> (&str, bool) {
        match self {
            Source::File(shown) => (shown.rsplit('/').next().unwrap_or(shown), false),
            Source::Delivery {
                name,
                delivery_count,
                named_per_delivery,
                ..
            } => (name, *named_per_delivery && *delivery_count > 1),
        }
    }
}

/// Records the bytes of each input that the inbox rejected (a value the database cannot hold)
/// without a parse error, which is what records an input's bytes otherwise: for inputs that
/// leave nothing behind but what the inbox keeps (a broker's delivery, a request), so that
/// none is answered as rejected with its bytes kept nowhere. A file needs none of it: it goes
/// to the quarantine.
pub fn keep_refused(
    inbox: &mut dyn Inbox,
    inputs: &[Parsed<'_>],
    outcomes: &[Vec<Outcome>],
    when: &str,
) -> anyhow::Result<()> {
    for (p, outcomes) in inputs.iter().zip(outcomes) {
        if p.sha256.is_none()
            && outcomes
                .iter()
                .any(|o| o.status() == crate::status::Status::Rejected)
        {
            use sha2::{Digest, Sha256};
            let sha256 = hex::encode(Sha256::digest(p.bytes));
            inbox
                .rejected_file(
                    p.source.name(),
                    p.source.sending().0,
                    p.bytes,
                    &sha256,
                    when,
                )
                .context("cannot write to the inbox database")?;
        }
    }
    Ok(())
}

/// How many times a batch that lost a deadlock to another host is made again.
const RETRIES: u32 = 10;

/// Decides the interchanges of several inputs in one call to the inbox, records their
/// rejected pieces, and returns each input's outcomes in its order (nothing is committed).
/// A batch that loses a deadlock to another host (over its rejected files, say, taken in
/// another order) is rolled back and made again, as the inbox does for its decisions alone.
pub fn decide(
    inbox: &mut dyn Inbox,
    inputs: &[Parsed<'_>],
    when: &str,
    acks: AckPolicy,
) -> anyhow::Result<Vec<Vec<Outcome>>> {
    let mut tries = 0;
    loop {
        match decide_once(inbox, inputs, when, acks) {
            Err(e) if tries < RETRIES && inbox.rolled_back_for_retry(&e) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * u64::from(tries)));
            }
            Err(e @ InboxError::Halted(_)) => return Err(e.into()),
            other => return other.context("cannot write to the inbox database"),
        }
    }
}

fn decide_once(
    inbox: &mut dyn Inbox,
    inputs: &[Parsed<'_>],
    when: &str,
    acks: AckPolicy,
) -> Result<Vec<Vec<Outcome>>, InboxError> {
    let candidates: Vec<Candidate<'_>> = inputs
        .iter()
        .flat_map(|p| {
            p.items.iter().flatten().map(|(i, ahead)| Candidate {
                interchange: i,
                compressed: ahead.compressed.as_deref(),
                held: &ahead.held,
                source_file: p.source.name(),
                source_path: p.source_path,
                received_at: when,
            })
        })
        .collect();
    let decisions = inbox.decide(&candidates)?;
    if acks.halts_on_refusal() {
        for (c, d) in candidates.iter().zip(&decisions) {
            if let crate::inbox::Decision::Refused(r) = d {
                let i = c.interchange;
                return Err(InboxError::Halted(format!(
                    "{}: interchange {} from {} at byte {}: {r}; stopped (--on-effect-error halt), nothing of the open batch committed",
                    c.source_file, i.unb.control_ref, i.unb.sender, i.offset
                )));
            }
        }
    }
    let mut decisions = decisions.into_iter();
    // What the parser had read of each rejected interchange (an input with errors parsed
    // again, once): its key, which the rejection is stored under so that `list --sender` and
    // `show` find it, and what its CONTRL answers, where one is due.
    let contexts: Vec<Vec<Option<RejectedContext>>> = inputs
        .iter()
        .map(|p| {
            let mut read = if p.items.iter().any(|item| item.is_err()) {
                envelopes::rejected_contexts(p.bytes)
            } else {
                Default::default()
            };
            p.items
                .iter()
                .map(|item| match item {
                    Err(e) => read.remove(&e.offset),
                    _ => None,
                })
                .collect()
        })
        .collect();
    // The partners this batch may answer, their counters taken in one order.
    let mut partners: Vec<String> = candidates
        .iter()
        .filter(|c| acks.answers(c.interchange))
        .map(|c| partner(&c.interchange.unb))
        .chain(
            contexts
                .iter()
                .flatten()
                .flatten()
                .filter(|c| acks.answers_rejected(c))
                .map(|c| partner(c.unb())),
        )
        .collect();
    partners.sort_unstable();
    partners.dedup();
    inbox.lock_partners(&partners)?;
    drop(candidates);
    // The outcomes in each input's order; its bytes are recorded once, at its first error,
    // and every error points at them.
    let mut outcomes: Vec<Vec<Outcome>> = Vec::with_capacity(inputs.len());
    for (p, contexts) in inputs.iter().zip(&contexts) {
        let shown = p.source.name();
        let sending = p.source.sending();
        let mut record = None;
        let mut own = Vec::with_capacity(p.items.len());
        for (item, context) in p.items.iter().zip(contexts) {
            own.push(match item {
                Ok((i, _)) => {
                    let d = decisions.next().ok_or_else(|| {
                        InboxError::Backend(
                            "the inbox returned fewer decisions than it was given".into(),
                        )
                    })?;
                    let mut o = Outcome::decided(p.source.clone(), i, &d);
                    o.contrl = acks.answer(inbox, i, &d, sending, when)?;
                    o
                }
                Err(e) => {
                    let file = match record.take() {
                        Some(file) => file,
                        None => inbox.rejected_file(
                            shown,
                            sending.0,
                            p.bytes,
                            p.sha256.unwrap_or(""),
                            when,
                        )?,
                    };
                    // What the reader of its standard read of it: that standard's key.
                    let key =
                        context
                            .as_ref()
                            .filter(|c| c.unb().is_keyed())
                            .map(|c| InterchangeKey {
                                standard: c.standard(),
                                sender: &c.unb().sender,
                                recipient: &c.unb().recipient,
                                control_ref: &c.unb().control_ref,
                            });
                    inbox.reject(&file, shown, e, key, when)?;
                    let seen_before = file.seen_before;
                    record = Some(file);
                    let mut o = Outcome::rejected(p.source.clone(), e.to_string(), Some(e.offset))
                        .quoting(p.bytes)
                        .keyed(key);
                    // The same input read again (a file seen again before its move, a
                    // broker's redelivery) was answered when it was first recorded: our own
                    // redelivery is not the partner sending again, and a second answer would
                    // reject one interchange under two of our control references. A
                    // redelivery under a name of its own (RabbitMQ's without a `message_id`)
                    // is answered: its count cannot tell whether its first delivery ever
                    // committed (RabbitMQ flags as redelivered what a stopped consumer had
                    // only fetched), and a rejection lost is worse than one sent twice.
                    if let Some(c) = context
                        && acks.answers_rejected(c)
                        && !seen_before
                    {
                        o.contrl = acks.answer_rejected(inbox, c, e, sending.0, when)?;
                    }
                    o
                }
            });
        }
        outcomes.push(own);
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sending_is_a_files_name_or_a_deliverys() {
        assert_eq!(
            Source::File("drop/sub/inv.edi".into()).sending(),
            ("inv.edi", false)
        );
        assert_eq!(Source::File("inv.edi".into()).sending(), ("inv.edi", false));
        let d = |name: &str, n, named_per_delivery| Source::Delivery {
            name: name.into(),
            filename: Some("x/y.edi".into()),
            delivery_count: n,
            named_per_delivery,
        };
        // A name the broker keeps tells a redelivery by itself (see `answered_sending`).
        assert_eq!(d("nats:EDI/9", 1, false).sending(), ("nats:EDI/9", false));
        assert_eq!(d("nats:EDI/9", 2, false).sending(), ("nats:EDI/9", false));
        // A name of one delivery cannot: its count must.
        let amqp = "amqp:q/delivery-1-7";
        assert_eq!(d(amqp, 1, true).sending(), (amqp, false));
        assert_eq!(d(amqp, 2, true).sending(), (amqp, true));
    }
}
