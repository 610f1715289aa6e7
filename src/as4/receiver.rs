//! The deciding side of an AS4 endpoint: the messages the HTTP side ([`super::server`]) checked
//! are gathered into batches, each batch decided in one transaction by the intake (the message
//! ids claimed, the new messages' payloads decided as deliveries `as4:MESSAGE-ID`, the signed
//! receipts stored), and only after the commit each sender gets its answer: its receipt, the
//! one stored for a message sent again, or an ebMS error. What a run reports is the command's,
//! through [`Report`].

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::errors::{EbmsError, Refusal};
use super::message::{Received, Rejected};
use super::receipt::{self, Signer};
use super::server::{Answer, Carried, Format, Job};
use crate::as2;
use crate::inbox::{Inbox, InboxError, TransportMessage};
use crate::intake::{self, AckPolicy, Answered, Incoming, Outcome};

/// The transport's name in the inbox's table of messages, and its deliveries' prefix.
pub const TRANSPORT: &str = "as4";

/// The most messages decided in one transaction.
const MAX_BATCH: usize = 64;

/// How long the deciding thread waits for a message before it says it is idle.
const IDLE_EVERY: Duration = Duration::from_secs(1);

/// What the receiver tells the run it serves, as it happens.
pub trait Report {
    /// A message refused with an ebMS error (already answered).
    fn refused(&mut self, rejected: &Rejected, peer: SocketAddr);
    /// An AS2 message refused with a negative MDN or an HTTP error (already answered).
    fn refused_as2(&mut self, refused: &as2::message::Refused, peer: SocketAddr);
    /// A new message decided and answered with its receipt: each payload's outcomes.
    fn decided(&mut self, message_id: &str, outcomes: &[Vec<Outcome>]);
    /// A new message decided with an interchange the side effects refused: answered with an
    /// ebMS error, its id free for its sending again; each payload's outcomes.
    fn not_applied(&mut self, message_id: &str, outcomes: &[Vec<Outcome>]);
    /// A message sent again (over `transport`), answered with its stored receipt or MDN;
    /// nothing decided again.
    fn resent(&mut self, transport: &str, message_id: &str, peer: SocketAddr);
    /// A message the inbox failed to store (`why`): its sender was told to send it again.
    fn failed(&mut self, transport: &str, message_id: &str, why: &str);
    /// What the delivery of an asynchronous MDN came to.
    fn answer_sent(&mut self, sent: &as2::delivery::Sent);
    /// The inbox's connection was lost; `Ok` where a new one was made.
    fn reconnected(&mut self, outcome: Result<(), String>);
    /// After each batch, and while nothing arrives (at least every [`IDLE_EVERY`]).
    fn tick(&mut self);
}

/// A message that passed every check, waiting for its decision.
struct Pending {
    /// The message, and its answer (an AS4 receipt, an AS2 MDN) made by the checking thread:
    /// stored with the decision.
    carried: Carried,
    peer: SocketAddr,
    reply: tokio::sync::oneshot::Sender<Answer>,
    /// Its place among the requests in hand, given back once it is answered.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Decides what the HTTP side hands over (`jobs`) until it ends (a stop, with every request in
/// flight answered). `reopen` connects to the inbox again where its connection was lost.
pub fn run(
    inbox: &mut Box<dyn Inbox>,
    jobs: &Receiver<Job>,
    signer: Signers<'_>,
    acks: AckPolicy,
    mut reopen: impl FnMut() -> anyhow::Result<Box<dyn Inbox>>,
    report: &mut dyn Report,
) {
    loop {
        let first = match jobs.recv_timeout(IDLE_EVERY) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                report.tick();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // What waits already joins the batch: one transaction, one commit (one fsync, one
        // WAL flush) for the messages that arrived while the last batch was decided, and no
        // message waits for one that has not arrived.
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                // Its sender stopped waiting (it was told to send again, or went away): its
                // place is given back undecided, and its retry is decided.
                Job::Decide { reply, .. } if reply.is_closed() => {}
                Job::Decide {
                    carried,
                    peer,
                    reply,
                    permit,
                } => batch.push(Pending {
                    carried,
                    peer,
                    reply,
                    _permit: permit,
                }),
                Job::Refused { rejected, peer } => report.refused(&rejected, peer),
                Job::RefusedAs2 { refused, peer } => report.refused_as2(&refused, peer),
                Job::AnswerSent(sent) => report.answer_sent(&sent),
            }
            if batch.len() < MAX_BATCH {
                next = jobs.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            if inbox.is_lost() {
                // The server restarted or the network cut: connected again before deciding
                // (each try bounded by the connection's timeout); where it fails, the batch
                // fails on the lost connection and its senders send again.
                match reopen() {
                    Ok(mut fresh) => {
                        fresh.start_run();
                        *inbox = fresh;
                        report.reconnected(Ok(()));
                    }
                    Err(e) => report.reconnected(Err(crate::output::one_message(&e))),
                }
            }
            decide(&mut **inbox, batch, signer, acks, report);
        }
        report.tick();
    }
}

/// What signs the answers: AS4's receipts and errors, AS2's MDNs (each where configured).
#[derive(Clone, Copy)]
pub struct Signers<'a> {
    pub as4: Option<Signer<'a>>,
    pub as2: Option<&'a as2::config::Config>,
}

/// Decides a batch of messages in one transaction, then answers each. Where the batch fails
/// for something of its own, each of its messages is decided alone: one message the inbox
/// cannot take fails alone, not the others that came with it. Not where the inbox itself
/// failed (its connection lost, another run's lock held past `--busy-timeout`): each would only
/// wait and fail in turn.
fn decide(
    inbox: &mut dyn Inbox,
    batch: Vec<Pending>,
    signer: Signers<'_>,
    acks: AckPolicy,
    report: &mut dyn Report,
) {
    let (answered, queued) = match decide_in_inbox(inbox, &batch, signer, acks) {
        Ok(decided) => decided,
        Err(e) if batch.len() > 1 && !inbox.is_lost() && !busy(&e) => {
            inbox.abandon();
            for p in batch {
                decide(inbox, vec![p], signer, acks, report);
            }
            return;
        }
        Err(e) => {
            inbox.abandon();
            let why = crate::output::one_message(&e);
            for p in batch {
                report.failed(p.carried.transport(), p.carried.message_id(), &why);
                let _ = p.reply.send(p.carried.not_stored(&signer));
            }
            return;
        }
    };
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    for (k, (p, a)) in batch.iter().zip(&answered).enumerate() {
        let answer = match a {
            // Its negative MDN stored with the decision, for its asynchronous delivery.
            Answered::NotApplied(_) if queued[k] => Answer::text(200, ""),
            Answered::New(_) => p.carried.answer_new(),
            Answered::Resent(stored) => p.carried.answer_stored(stored.clone()),
            // A sending again of a message the side effects refused whose negative MDN was
            // queued: this sending's own answer (an empty 200 where it asks for its MDN apart,
            // which is queued; the negative MDN itself where it asks for one in the response).
            Answered::SameAs(first)
                if queued[*first] && matches!(answered[*first], Answered::NotApplied(_)) =>
            {
                match &p.carried {
                    Carried::As2 { received, .. } if received.receipt_delivery.is_some() => {
                        Answer::text(200, "")
                    }
                    _ => p.carried.refusal(&signer, Refusing::NotApplied),
                }
            }
            // An earlier one of the batch: its answer, whichever it was.
            Answered::SameAs(first) => answers[*first].clone(),
            Answered::Other { sender } => p.carried.refusal(
                &signer,
                Refusing::Other {
                    another_party: sender.is_some(),
                },
            ),
            Answered::NotApplied(_) => p.carried.refusal(&signer, Refusing::NotApplied),
        };
        answers.push(answer);
    }
    for ((p, a), answer) in batch.into_iter().zip(answered).zip(answers) {
        let id = p.carried.message_id().to_string();
        match a {
            Answered::Other { sender } => match &p.carried {
                Carried::As4 { .. } => {
                    let rejected = Rejected {
                        refusal: other_message(&id, sender.is_some()),
                        message_id: Some(id.clone()),
                    };
                    report.refused(&rejected, p.peer);
                }
                Carried::As2 { received, .. } => {
                    let refused = as2::message::Refused {
                        requested: Some(received.requested.clone()),
                        modifier: "unexpected-processing-error",
                        status: None,
                        detail: other_message(&id, sender.is_some()).detail,
                        message_id: Some(id.clone()),
                    };
                    report.refused_as2(&refused, p.peer);
                }
            },
            Answered::New(outcomes) => report.decided(&id, &outcomes),
            Answered::NotApplied(outcomes) => report.not_applied(&id, &outcomes),
            Answered::Resent(_) | Answered::SameAs(_) => {
                report.resent(p.carried.transport(), &id, p.peer);
            }
        }
        let _ = p.reply.send(answer);
    }
}

/// Why a message is answered with a refusal at its decision.
#[derive(Clone, Copy)]
enum Refusing {
    /// Its id is another message's (another party's, or other content).
    Other { another_party: bool },
    /// The operator's side effects refused an interchange of it.
    NotApplied,
}

impl Carried {
    fn transport(&self) -> &'static str {
        match self {
            Carried::As4 { .. } => TRANSPORT,
            Carried::As2 { .. } => as2::TRANSPORT,
        }
    }

    fn message_id(&self) -> &str {
        match self {
            Carried::As4 { received, .. } => &received.message.message_id,
            Carried::As2 { received, .. } => &received.requested.message_id,
        }
    }

    /// What is stored with the claim, and answered to a new message.
    fn stored(&self) -> &[u8] {
        match self {
            Carried::As4 { receipt, .. } => receipt,
            Carried::As2 { mdn, .. } => mdn,
        }
    }

    fn answer_new(&self) -> Answer {
        self.answer_stored(self.stored().to_vec())
    }

    fn answer_stored(&self, stored: Vec<u8>) -> Answer {
        match self {
            Carried::As4 { .. } => Answer::soap(200, stored),
            // A sending that asked for no MDN, or for an asynchronous one (POSTed after the
            // commit), is answered with an empty 200.
            Carried::As2 { received, .. }
                if !received.requested.wanted || received.receipt_delivery.is_some() =>
            {
                Answer::text(200, "")
            }
            Carried::As2 { .. } => Answer {
                status: 200,
                format: Format::Mime,
                body: stored,
            },
        }
    }

    /// The answer to a message the inbox could not store: send it again.
    fn not_stored(&self, signer: &Signers<'_>) -> Answer {
        match self {
            Carried::As4 { received, .. } => {
                let refusal = Refusal::new(
                    EbmsError::Other,
                    "the receiver could not store the message: send it again",
                );
                match signer.as4 {
                    Some(s) => Answer::soap(
                        500,
                        receipt::error(&s, Some(&received.message.message_id), &refusal),
                    ),
                    None => Answer::text(500, "the receiver could not store the message"),
                }
            }
            // No MDN: a negative one would be final. A 5xx has the sender send it again.
            Carried::As2 { .. } => Answer::text(
                503,
                "the receiver could not store the message: send it again\n",
            ),
        }
    }

    fn refusal(&self, signer: &Signers<'_>, why: Refusing) -> Answer {
        let id = self.message_id().to_string();
        let refusal = match why {
            Refusing::Other { another_party } => other_message(&id, another_party),
            Refusing::NotApplied => not_applied(&id),
        };
        match self {
            Carried::As4 { .. } => match signer.as4 {
                Some(s) => Answer::soap(200, receipt::error(&s, Some(&id), &refusal)),
                None => Answer::text(500, "no AS4 configuration"),
            },
            Carried::As2 { received, .. } => Answer::as2_refusal(
                signer.as2,
                &received.requested,
                "unexpected-processing-error",
                &refusal.detail,
            ),
        }
    }
}

/// The batch's messages claimed and decided by the intake, and committed: what each came to,
/// and whether its negative MDN was stored for its asynchronous delivery: an AS2 message the
/// side effects refused whose sender asked for its MDN apart. It passed every check, so its URL
/// is as trusted as an accepted message's, and its id is no other message's. Never a message
/// under another's id (`Answered::Other`): its request's headers are not signed, so a negative
/// MDN POSTed to the partner could be about the partner's own message, accepted; it is
/// answered in the HTTP response. Nor one refused by a check, for the same reason (and its
/// sender is not proven).
fn decide_in_inbox(
    inbox: &mut dyn Inbox,
    batch: &[Pending],
    signer: Signers<'_>,
    acks: AckPolicy,
) -> anyhow::Result<(Vec<Answered>, Vec<bool>)> {
    use anyhow::Context as _;
    let when = crate::clock::now();
    let names: Vec<Vec<String>> = batch
        .iter()
        .map(|p| match &p.carried {
            Carried::As4 { received, .. } => payload_names(received),
            Carried::As2 { received, .. } => {
                vec![format!(
                    "{}:{}",
                    as2::TRANSPORT,
                    received.requested.message_id
                )]
            }
        })
        .collect();
    let messages: Vec<intake::Message<'_>> = batch
        .iter()
        .zip(&names)
        .map(|(p, names)| match &p.carried {
            Carried::As4 { received, receipt } => {
                let r = &**received;
                intake::Message {
                    claim: claimed(r),
                    answer: receipt,
                    deliver_to: None,
                    payloads: r
                        .interchanges
                        .iter()
                        .zip(names)
                        .map(|((cid, bytes), name)| Incoming {
                            filename: Some(cid),
                            key: Some(&r.message.conversation_id),
                            produced_at: Some(&r.message.timestamp),
                            ..Incoming::new(name, bytes)
                        })
                        .collect(),
                }
            }
            Carried::As2 { received, mdn } => intake::Message {
                claim: TransportMessage {
                    transport: as2::TRANSPORT,
                    message_id: &received.requested.message_id,
                    sender: &received.requested.as2_from,
                    content_sha256: &received.content_sha256,
                },
                answer: mdn,
                deliver_to: received.receipt_delivery.as_deref(),
                payloads: vec![Incoming {
                    filename: received.filename.as_deref(),
                    ..Incoming::new(&names[0], &received.payload)
                }],
            },
        })
        .collect();
    let answered = intake::decide_messages(inbox, &messages, &when, acks)?;
    let mut queued = vec![false; batch.len()];
    for ((p, a), queued) in batch.iter().zip(&answered).zip(queued.iter_mut()) {
        if !matches!(a, Answered::NotApplied(_)) {
            continue;
        }
        if let Carried::As2 { received, .. } = &p.carried
            && received.requested.wanted
            && let Some(url) = received.receipt_delivery.as_deref()
        {
            let answer = p.carried.refusal(&signer, Refusing::NotApplied);
            if answer.format == Format::Mime {
                inbox
                    .queue_refusal(
                        as2::TRANSPORT,
                        &received.requested.message_id,
                        url,
                        &answer.body,
                        &when,
                    )
                    .context("cannot write to the inbox database")?;
                *queued = true;
            }
        }
    }
    crash_point!("receive-before-commit");
    inbox
        .commit()
        .context("cannot commit to the inbox database")?;
    crash_point!("receive-after-commit");
    Ok((answered, queued))
}

/// The message as its id is claimed: who sent it, and what it carries.
fn claimed(r: &Received) -> TransportMessage<'_> {
    TransportMessage {
        transport: TRANSPORT,
        message_id: &r.message.message_id,
        sender: &r.message.from,
        content_sha256: &r.content_sha256,
    }
}

/// Each payload's delivery name: `as4:ID`, then `as4:ID#2`, ...
fn payload_names(r: &Received) -> Vec<String> {
    let id = &r.message.message_id;
    (0..r.interchanges.len())
        .map(|n| match n {
            0 => format!("{TRANSPORT}:{id}"),
            n => format!("{TRANSPORT}:{id}#{}", n + 1),
        })
        .collect()
}

/// True where `e` is the inbox held by another run past `--busy-timeout`.
fn busy(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<InboxError>(), Some(InboxError::Busy(_))))
}

/// The refusal of a message whose id another message has (`another_party`'s, or one with other
/// content): answering it with that one's receipt would tell its sender it arrived, and it
/// would be lost unseen. The other party is not named to this one (the signal goes to whoever
/// sent it); the operator's line names the id.
fn other_message(message_id: &str, another_party: bool) -> Refusal {
    let whose = if another_party {
        "another party's message"
    } else {
        "a message with other content"
    };
    Refusal::new(
        EbmsError::Other,
        format!(
            "the MessageId {message_id} is {whose}, already received: send this one under an id of its own"
        ),
    )
}

/// The error for a message whose interchange the receiver's own processing (the operator's
/// side effects) refused: it did not arrive as far as the sender is concerned, so no receipt;
/// it is kept for review, and its sending again is decided anew. The receiver's reasons (its
/// tables, its database's words) stay in its own report.
fn not_applied(message_id: &str) -> Refusal {
    Refusal::new(
        EbmsError::Other,
        format!(
            "the message {message_id} could not be applied by the receiver's processing and was not accepted; it is kept for review: send it again later under the same MessageId"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal says which of the two it is, and never names the other party.
    #[test]
    fn a_refusal_under_a_known_id_says_whose_it_is() {
        let other = other_message("m1", true);
        assert_eq!(
            other.detail,
            "the MessageId m1 is another party's message, already received: send this one under an id of its own"
        );
        assert_eq!(other.error.code(), "EBMS:0004");
        assert!(other_message("m1", false).detail.contains("other content"));
    }
}
