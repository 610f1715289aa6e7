//! Transport messages claimed with their decisions, whatever the transport (AS4's
//! `eb:MessageId`, AS2's `Message-ID`): a message's id is claimed in the batch that decides its
//! payloads, with the answer its sender gets (a signed receipt, an MDN) stored beside it. A
//! message sent again finds its id and gets the stored answer, byte for byte, and nothing is
//! decided again; another message under a known id (another sender's, or other content) is
//! refused, never answered with the first one's answer. The transport says how a refusal is
//! worded; the inbox keeps the claims (`Transports`).

use std::collections::HashMap;

use anyhow::Context as _;

use super::acknowledge::AckPolicy;
use super::deliveries::{Delivered, Incoming, decide_deliveries};
use super::outcome::Outcome;
use crate::inbox::{Claim, Inbox, TransportMessage};

/// One message of a transport, as its id is claimed.
pub struct Message<'a> {
    /// Its transport, id, sender and content.
    pub claim: TransportMessage<'a>,
    /// What its sender is answered where it is new (made before the decision: it says the
    /// message arrived, and goes out only after the commit): stored with the claim.
    pub answer: &'a [u8],
    /// Where its answer is delivered apart from the request (AS2's asynchronous MDN, to the
    /// URL of `Receipt-Delivery-Option`): queued with the claim, sent after the commit.
    pub deliver_to: Option<&'a str>,
    /// Its payloads, each decided as a delivery.
    pub payloads: Vec<Incoming<'a>>,
}

/// What a batch's claims and decisions made of a message.
#[derive(Debug)]
pub enum Answered {
    /// New: its payloads decided now (each payload's outcomes), its answer stored.
    New(Vec<Vec<Outcome>>),
    /// Seen before: the answer stored then, to be sent again as it is.
    Resent(Vec<u8>),
    /// Sent again while its first sending waited in the same batch (at this place): answered
    /// as that one is.
    SameAs(usize),
    /// Its id is another message's, already received: another sender's (named where it is
    /// another), or other content. Refused; the transport words the refusal.
    Other { sender: Option<String> },
    /// New, but an interchange of it was refused by the operator's side effects (each
    /// payload's outcomes): its claim given back and no answer stored, so that its sending
    /// again (once the mapping or the data is fixed) is decided as new. The transport answers
    /// it with an error, never its receipt.
    NotApplied(Vec<Vec<Outcome>>),
}

/// How many times a batch starts over because other receivers decided its messages meanwhile.
const TRIES: u32 = 3;

/// Claims each message's id, decides the payloads of the new ones as deliveries, and stores
/// their answers: all in the open batch, nothing committed (the caller commits, and only then
/// answers). Where the inbox rolled the batch back to make it again (a deadlock with another
/// host, on PostgreSQL), the claims went with it: they are made again, and a message another
/// receiver committed meanwhile makes the whole batch start over.
pub fn decide_messages(
    inbox: &mut dyn Inbox,
    messages: &[Message<'_>],
    when: &str,
    acks: AckPolicy,
) -> anyhow::Result<Vec<Answered>> {
    let mut tries = 0;
    loop {
        let rollbacks = inbox.rollbacks();
        let claimed = claim(inbox, messages, when)?;
        let new: Vec<usize> = (0..messages.len())
            .filter(|&k| claimed[k].is_none())
            .collect();
        let delivered: Vec<Delivered<'_>> = new
            .iter()
            .flat_map(|&k| messages[k].payloads.iter().copied().map(Delivered::parse))
            .collect();
        let outcomes = decide_deliveries(inbox, delivered, when, acks)?;
        if inbox.rollbacks() != rollbacks {
            let again: Vec<(TransportMessage<'_>, Option<&[u8]>)> =
                by_id(messages, new.iter().copied())
                    .into_iter()
                    .map(|k| (messages[k].claim, Some(messages[k].answer)))
                    .collect();
            let lost = inbox
                .claim_messages(&again, when)
                .context("cannot write to the inbox database")?
                .iter()
                .any(|c| !matches!(c, Claim::New));
            if lost {
                inbox.abandon();
                tries += 1;
                anyhow::ensure!(
                    tries < TRIES,
                    "other receivers kept deciding the same messages"
                );
                continue;
            }
        }
        let mut outcomes = outcomes.into_iter();
        let mut answered = Vec::with_capacity(messages.len());
        for (m, c) in messages.iter().zip(claimed) {
            if let Some(c) = c {
                answered.push(c);
                continue;
            }
            let own: Vec<Vec<Outcome>> = outcomes.by_ref().take(m.payloads.len()).collect();
            let refused = own
                .iter()
                .flatten()
                .any(|o| o.status() == crate::status::Status::Refused);
            if refused {
                inbox
                    .release_message(m.claim.transport, m.claim.message_id)
                    .context("cannot write to the inbox database")?;
                answered.push(Answered::NotApplied(own));
            } else {
                // Its answer was stored with its claim.
                queue(inbox, m, when)?;
                answered.push(Answered::New(own));
            }
        }
        return Ok(answered);
    }
}

/// Each message's id claimed, in the order of the ids ([`by_id`]): `None` for a new one
/// (claimed now), else what answers it. A message sent again while its first sending waits in
/// the same batch is answered as that one is, where it is the same.
fn claim(
    inbox: &mut dyn Inbox,
    messages: &[Message<'_>],
    when: &str,
) -> anyhow::Result<Vec<Option<Answered>>> {
    // By transport and id: an AS4 and an AS2 message may carry the same id in one batch, and
    // each transport's ids are its own.
    let mut first: HashMap<(&str, &str), usize> = HashMap::new();
    let mut claimed: Vec<Option<Answered>> = (0..messages.len()).map(|_| None).collect();
    let order = by_id(messages, 0..messages.len());
    // The first sending of each id claimed at once (one round trip on PostgreSQL), each with
    // the answer stored where it is new; a sending again of an id within the batch (rare: a
    // sender's retry while its first sending waits) is claimed after them, on its own.
    let mut once: std::collections::HashSet<(&str, &str)> = std::collections::HashSet::new();
    let firsts: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&k| once.insert((messages[k].claim.transport, messages[k].claim.message_id)))
        .collect();
    let batch: Vec<(TransportMessage<'_>, Option<&[u8]>)> = firsts
        .iter()
        .map(|&k| (messages[k].claim, Some(messages[k].answer)))
        .collect();
    let mut claims: HashMap<usize, Claim> = firsts
        .iter()
        .copied()
        .zip(
            inbox
                .claim_messages(&batch, when)
                .context("cannot write to the inbox database")?,
        )
        .collect();
    for k in order {
        let m = &messages[k].claim;
        let claim = match claims.remove(&k) {
            Some(c) => c,
            None => inbox
                .claim_message(m, when)
                .context("cannot write to the inbox database")?,
        };
        claimed[k] = match (claim, first.get(&(m.transport, m.message_id))) {
            (Claim::Other { sender }, _) => Some(Answered::Other {
                sender: sender.filter(|s| s != m.sender),
            }),
            (_, Some(&j)) => {
                let q = &messages[j].claim;
                if (q.sender, q.content_sha256) == (m.sender, m.content_sha256) {
                    Some(Answered::SameAs(j))
                } else {
                    Some(Answered::Other {
                        sender: Some(q.sender.to_string()).filter(|s| s != m.sender),
                    })
                }
            }
            (Claim::New, None) => None,
            // Its sender did not get the answer (else it would not send again): where it is
            // delivered apart, delivered again.
            (Claim::Seen(Some(stored)), None) => {
                queue(inbox, &messages[k], when)?;
                Some(Answered::Resent(stored))
            }
            // Claimed and never answered (an inbox written by hand): answered now.
            (Claim::Seen(None), None) => {
                let answer = messages[k].answer;
                inbox
                    .answer_message(m.transport, m.message_id, answer)
                    .context("cannot write to the inbox database")?;
                queue(inbox, &messages[k], when)?;
                Some(Answered::Resent(answer.to_vec()))
            }
        };
        // A sending refused is not the one a later sending of its id is compared with.
        if !matches!(claimed[k], Some(Answered::Other { .. })) {
            first.entry((m.transport, m.message_id)).or_insert(k);
        }
    }
    Ok(claimed)
}

/// Queues `m`'s stored answer for its delivery apart, where it asks for one.
fn queue(inbox: &mut dyn Inbox, m: &Message<'_>, when: &str) -> anyhow::Result<()> {
    if let Some(url) = m.deliver_to {
        inbox
            .queue_answer(m.claim.transport, m.claim.message_id, url, when)
            .context("cannot write to the inbox database")?;
    }
    Ok(())
}

/// The places `of` the batch in the order of their transports and message ids, in which they are claimed (two
/// receivers of a shared inbox claiming the same ids in other orders would each wait on the
/// other's rows). Stable: of the sendings of one id, the earliest comes first.
fn by_id(messages: &[Message<'_>], of: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut order: Vec<usize> = of.collect();
    order.sort_by_key(|&k| (messages[k].claim.transport, messages[k].claim.message_id));
    order
}

// On an SQLite inbox of its own.
#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// A message `id` from `party` carrying `content`, as a transport hands it over.
    fn message<'a>(id: &'a str, party: &'a str, content: &'a str, answer: &'a [u8]) -> Message<'a> {
        Message {
            claim: TransportMessage {
                transport: "as4",
                message_id: id,
                sender: party,
                content_sha256: content,
            },
            answer,
            deliver_to: None,
            payloads: Vec::new(),
        }
    }

    fn kinds(claimed: &[Option<Answered>]) -> Vec<String> {
        claimed
            .iter()
            .map(|c| match c {
                None => "new".to_string(),
                Some(Answered::New(_)) => "decided".to_string(),
                Some(Answered::Resent(r)) => format!("resent {}", String::from_utf8_lossy(r)),
                Some(Answered::SameAs(k)) => format!("same as {k}"),
                Some(Answered::Other { .. }) => "refused".to_string(),
                Some(Answered::NotApplied(_)) => "not applied".to_string(),
            })
            .collect()
    }

    /// The claims of one batch: a sending again of a message of the batch answered as it is; a
    /// message of another party or with other content under its id refused, before or after it
    /// in the batch; and a forged sending refused without making the genuine retry that follows
    /// it in the batch look like another message.
    #[test]
    fn a_batchs_claims_tell_the_same_message_from_another_under_its_id() {
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        let batch = vec![
            message("b", "PTE000003", "other", b"receipt of b from PTE000003"),
            message("a", "PTE000001", "x", b"receipt of a from PTE000001"),
            message("a", "PTE000001", "x", b"receipt of a from PTE000001"),
            message("a", "PTE000001", "y", b"receipt of a from PTE000001"),
            message("b", "PTE000001", "x", b"receipt of b from PTE000001"),
        ];
        let claimed = claim(&mut *inbox, &batch, when).unwrap();
        assert_eq!(
            kinds(&claimed),
            ["new", "new", "same as 1", "refused", "refused"],
            "the first sending of each id is claimed; the rest compared with it"
        );
        for m in &batch[..2] {
            inbox
                .answer_message("as4", m.claim.message_id, m.answer)
                .unwrap();
        }
        inbox.commit().unwrap();
        // Then a forgery under "a" comes first in a batch, and the genuine retry after it.
        let batch = vec![
            message("a", "PTE000003", "x", b"receipt of a from PTE000003"),
            message("a", "PTE000001", "x", b"receipt of a from PTE000001"),
        ];
        let claimed = claim(&mut *inbox, &batch, when).unwrap();
        assert_eq!(
            kinds(&claimed),
            ["refused", "resent receipt of a from PTE000001"],
        );
        inbox.abandon();
    }

    /// The same id over AS4 and over AS2 in one batch: two messages, each claimed as new under
    /// its own transport (neither answered with the other's answer, nor refused for it).
    #[test]
    fn the_same_id_over_two_transports_is_two_messages() {
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        let mut over_as2 = message("a", "PARTNER", "y", b"the MDN of a");
        over_as2.claim.transport = "as2";
        let batch = vec![
            message("a", "PTE000001", "x", b"receipt of a"),
            over_as2,
            message("a", "PTE000001", "x", b"receipt of a"),
        ];
        let claimed = claim(&mut *inbox, &batch, when).unwrap();
        assert_eq!(kinds(&claimed), ["new", "new", "same as 0"]);
        inbox.abandon();
    }

    /// A new message's payloads are decided and its answer stored with its claim; the same
    /// message again gets that answer and decides nothing.
    #[test]
    fn a_new_messages_answer_is_stored_and_sent_again() {
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let when = "2026-01-01T00:00:00.000Z";
        let acks = AckPolicy::new(crate::edifact::contrl::Mode::Never, false);
        let bytes = super::super::testing::INTERCHANGE;
        let mut m = message("m1", "PTE000001", "x", b"the receipt");
        m.payloads = vec![Incoming::new("as4:m1", bytes)];
        let answered = decide_messages(&mut *inbox, std::slice::from_ref(&m), when, acks).unwrap();
        inbox.commit().unwrap();
        match &answered[..] {
            [Answered::New(outcomes)] => assert_eq!(
                outcomes[0][0].status(),
                crate::status::Status::New,
                "the payload is decided"
            ),
            other => panic!("a new message, decided: {other:?}"),
        }
        m.answer = b"another receipt, made for the second sending";
        let answered = decide_messages(&mut *inbox, std::slice::from_ref(&m), when, acks).unwrap();
        inbox.commit().unwrap();
        match &answered[..] {
            [Answered::Resent(stored)] => assert_eq!(stored, b"the receipt"),
            other => panic!("the same message again gets the stored answer: {other:?}"),
        }
    }

    /// An answer delivered apart (AS2's asynchronous MDN) is queued with the claim, and only
    /// where the batch commits; taken once while its lease runs; once delivered, never taken
    /// again, until a sending again of its message (whose sender did not get it) makes it due
    /// again; a failed delivery waits for its retry.
    #[test]
    fn an_answer_delivered_apart_is_queued_with_the_claim() {
        use std::time::Duration;
        let (_dir, mut inbox) = super::super::testing::scratch_inbox();
        let when = crate::clock::now();
        let acks = AckPolicy::new(crate::edifact::contrl::Mode::Never, false);
        let bytes = super::super::testing::INTERCHANGE;
        let mut m = message("m1", "PARTNER", "x", b"the MDN");
        m.claim.transport = "as2";
        m.deliver_to = Some("http://partner.example/mdn");
        m.payloads = vec![Incoming::new("as2:m1", bytes)];
        let lease = Duration::from_secs(60);
        let mut outbox = inbox.answer_outbox().unwrap();
        decide_messages(&mut *inbox, std::slice::from_ref(&m), &when, acks).unwrap();
        inbox.abandon();
        assert!(
            outbox.take_due_answers(lease, 10).unwrap().is_empty(),
            "nothing is queued by a batch rolled back"
        );
        decide_messages(&mut *inbox, std::slice::from_ref(&m), &when, acks).unwrap();
        inbox.commit().unwrap();
        let due = outbox.take_due_answers(lease, 10).unwrap();
        assert_eq!(due.len(), 1, "the committed message's MDN is due: {due:?}");
        assert_eq!(
            (
                due[0].url.as_str(),
                due[0].answer.as_slice(),
                due[0].attempts
            ),
            ("http://partner.example/mdn", &b"the MDN"[..], 1)
        );
        assert!(
            outbox.take_due_answers(lease, 10).unwrap().is_empty(),
            "an answer taken is not taken again while its lease runs"
        );
        outbox.answer_delivered(&due[0]).unwrap();
        // Its sending again: the stored MDN, due again (to the URL asked for now).
        m.deliver_to = Some("http://partner.example/mdn2");
        let answered = decide_messages(&mut *inbox, std::slice::from_ref(&m), &when, acks).unwrap();
        inbox.commit().unwrap();
        assert!(
            matches!(&answered[..], [Answered::Resent(_)]),
            "{answered:?}"
        );
        let due = outbox.take_due_answers(lease, 10).unwrap();
        assert_eq!(due.len(), 1, "delivered again for its sending again");
        assert_eq!(
            (due[0].url.as_str(), due[0].attempts),
            ("http://partner.example/mdn2", 2),
            "to the URL asked for now; its attempts never lowered"
        );
        // An earlier try's outcome, recorded late, is not this try's.
        let earlier = crate::inbox::DueAnswer {
            attempts: 1,
            ..due[0].clone()
        };
        outbox.answer_delivered(&earlier).unwrap();
        assert_eq!(outbox.undelivered_answers().unwrap().0, 1);
        outbox
            .answer_not_delivered(&due[0], "refused", Duration::from_secs(3600))
            .unwrap();
        assert!(
            outbox
                .take_due_answers(Duration::ZERO, 10)
                .unwrap()
                .is_empty(),
            "a failed delivery waits for its retry"
        );
        outbox
            .answer_not_delivered(&due[0], "refused", Duration::ZERO)
            .unwrap();
        let due = outbox.take_due_answers(lease, 10).unwrap();
        assert_eq!(due[0].attempts, 3, "tried again once due");
    }
}
