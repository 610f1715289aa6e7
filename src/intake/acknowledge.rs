//! The CONTRL answering policy, built once from the command line (`--contrl`,
//! `--contrl-duplicates`): which interchanges are answered, with what, and the answer stored in
//! the decision's transaction. The CONTRL's bytes are [`crate::edifact::contrl`]'s.

use crate::edifact::contrl::{self, Action, Detail, Level, Mode, SyntaxError};
use crate::edifact::{EnvelopeError, Interchange, Message, RejectedContext, Unb};
use crate::envelopes;
use crate::inbox::{Decision, Inbox, InboxError, InterchangeKey, NewAcknowledgement, Resend};
use crate::standard::Standard;
use crate::x12::{self, ack as x12_ack};

/// How interchanges are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPolicy {
    mode: Mode,
    /// An exact duplicate is answered with a CONTRL rejecting it (0085 26), not the first one's
    /// again.
    reject_duplicates: bool,
    /// A refusal of the operator's side effects stops the run (`--on-effect-error halt`)
    /// instead of being reported: decided with the answers, since it is the same rule of the
    /// batch whatever brought it.
    halt_on_refusal: bool,
}

impl AckPolicy {
    /// Who is answered (`--contrl`), and whether an exact duplicate is answered with a CONTRL
    /// rejecting it instead of its first one again (`--contrl-duplicates reject`).
    pub fn new(mode: Mode, reject_duplicates: bool) -> AckPolicy {
        AckPolicy {
            mode,
            reject_duplicates,
            halt_on_refusal: false,
        }
    }

    /// The same, stopping the run at a refusal of the side effects.
    pub fn halting(self, halt_on_refusal: bool) -> AckPolicy {
        AckPolicy {
            halt_on_refusal,
            ..self
        }
    }

    /// True where a refusal of the side effects stops the run.
    pub fn halts_on_refusal(&self) -> bool {
        self.halt_on_refusal
    }

    /// The action a CONTRL for this interchange would state, where one is due. A CONTRL answers
    /// EDIFACT alone: an X12 interchange's answer (a 997 or 999) is X12's own, not this one.
    pub fn wanted(&self, i: &Interchange<'_>) -> Option<Action> {
        if i.standard != Standard::Edifact {
            return None;
        }
        let types: Vec<&str> = i.messages.iter().map(|m| m.message_type.as_str()).collect();
        contrl::wanted(self.mode, &i.unb, &types)
    }

    /// Whether `i` gets an answer of any standard: a CONTRL (see [`AckPolicy::wanted`]), or for
    /// X12 a TA1, 997 or 999 (see [`AckPolicy::wanted_x12`]).
    pub fn answers(&self, i: &Interchange<'_>) -> bool {
        match i.standard {
            Standard::Edifact => self.wanted(i).is_some(),
            Standard::X12 => self.wanted_x12(i).is_some(),
        }
    }

    /// What answers an X12 interchange under `--contrl` (one name for both standards, see
    /// docs/design.md, "Acknowledgements for ANSI X12"): `requested`, a TA1 where ISA14 asks
    /// for one; `always`, that and a 997 or 999 for every functional group (X12 has no field
    /// that asks for them: the agreement does); `never`, nothing. Returns whether a TA1 is due and whether 997/999 are.
    pub fn wanted_x12(&self, i: &Interchange<'_>) -> Option<(bool, bool)> {
        if i.standard != Standard::X12 {
            return None;
        }
        let ta1 = i.unb.ack_request.as_deref() == Some("1");
        match self.mode {
            Mode::Never => None,
            Mode::Requested => ta1.then_some((true, false)),
            Mode::Always => Some((ta1, true)),
        }
    }

    /// Whether a rejected interchange, as far as it was read, is answered: only where its
    /// header was read with its key (the partner could not tell which interchange an answer is
    /// for otherwise), and for EDIFACT where a CONTRL is due for it; an X12 interchange rejected
    /// at its envelope gets a TA1 whether or not ISA14 asked (X12.56), unless `--contrl never`.
    pub fn answers_rejected(&self, c: &envelopes::RejectedContext) -> bool {
        match c {
            envelopes::RejectedContext::Edifact(c) => {
                let types: Vec<&str> = c.message_types.iter().map(|t| t.as_str()).collect();
                c.unb.is_keyed() && contrl::wanted(self.mode, &c.unb, &types).is_some()
            }
            envelopes::RejectedContext::X12(r) => r.unb.is_keyed() && self.mode != Mode::Never,
        }
    }

    /// Whether the answer `d` would get (rejecting it as a duplicate: UCI 4/26, TA1
    /// `R`/`025`) went to this sending before: a drift, where this sending's drift was rejected
    /// before; a duplicate under `--contrl-duplicates reject`, where this sending was answered
    /// at all (the first copy's own file read again is not a copy). The same sending read again
    /// (a file not yet moved, a broker's redelivery) is ours, not the partner's.
    fn answered_before(
        &self,
        inbox: &mut dyn Inbox,
        i: &Interchange<'_>,
        d: &Decision,
        sending: &str,
    ) -> Result<bool, InboxError> {
        let drift = match d {
            Decision::Drift { .. } => true,
            Decision::Duplicate { .. } if self.reject_duplicates => false,
            _ => return Ok(false),
        };
        Ok(
            match inbox.answered_sending(InterchangeKey::of(i), sending)? {
                None => false,
                Some(rejected) => rejected || !drift,
            },
        )
    }

    /// The CONTRL that answers a decision, where one is due: built and stored in the open
    /// batch (new: acknowledged; drift, or a duplicate under `reject`: rejected with 0085 26),
    /// or for a duplicate the first one's again (see [`Inbox::resend_acknowledgement`]).
    /// `sending` is the partner's sending it came in (`None` for a broker's redelivery: the
    /// same sending again). Returns the control reference of the CONTRL queued.
    pub fn answer(
        &self,
        inbox: &mut dyn Inbox,
        i: &Interchange<'_>,
        d: &Decision,
        sending: (&str, bool),
        when: &str,
    ) -> Result<Option<String>, InboxError> {
        if i.standard == Standard::X12 {
            return self.answer_x12(inbox, i, d, sending, when);
        }
        let Some(action) = self.wanted(i) else {
            return Ok(None);
        };
        let duplicate = Some(SyntaxError {
            code: contrl::DUPLICATE_DETECTED,
            level: Level::Interchange,
            tag: None,
        });
        let u = &i.unb;
        let (name, redelivered) = sending;
        if self.answered_before(inbox, i, d, name)? {
            return Ok(None);
        }
        let (action, error) = match d {
            Decision::New { .. } => (action, None),
            Decision::Drift { .. } => (Action::Rejected, duplicate),
            Decision::Duplicate { .. } if self.reject_duplicates => (Action::Rejected, duplicate),
            // A partner that sends again most likely lost our answer: the same answer, once per
            // sending of theirs (where the first copy got none, one now). Our own redelivery
            // (the same file after a crash before its move, a broker's redelivery, another
            // host's copy) is not the partner asking again.
            Decision::Duplicate { .. } => {
                let key = InterchangeKey::of(i);
                match inbox.resend_acknowledgement(key, (!redelivered).then_some(name), when)? {
                    Resend::Queued(own_ref) => return Ok(Some(own_ref)),
                    Resend::AlreadySent => return Ok(None),
                    Resend::Unanswered => (action, None),
                }
            }
            Decision::Unstorable { .. } | Decision::Refused(_) => return Ok(None),
        };
        // Its empty groups are reported where the answer acknowledges it (see `Detail`).
        let detail = Detail {
            error,
            empty_groups: i.empty_groups().collect(),
            ..Detail::default()
        };
        let prepared = prepared_at(when);
        let build = |own_ref: &str| {
            contrl::build(
                u,
                &i.separators,
                i.has_una,
                action,
                &detail,
                own_ref,
                prepared,
            )
        };
        let answered = (i.standard, u);
        store(
            inbox,
            answered,
            action,
            error.map(|e| e.code),
            &build,
            name,
            when,
        )
        .map(Some)
    }

    /// The X12 answer to a decision, where one is due (see [`AckPolicy::wanted_x12`]): one
    /// interchange of ours with the TA1 and the 997s or 999s, built and stored in the open batch
    /// as a CONTRL is. New: accepted (TA104 `A`, every set `A`). Drift, or a duplicate under
    /// `--contrl-duplicates reject`: a TA1 rejecting it (TA104 `R`, TA105 `025`, duplicate
    /// interchange control number), whether or not ISA14 asked. A duplicate: the first answer
    /// again, as for EDIFACT.
    fn answer_x12(
        &self,
        inbox: &mut dyn Inbox,
        i: &Interchange<'_>,
        d: &Decision,
        (name, redelivered): (&str, bool),
        when: &str,
    ) -> Result<Option<String>, InboxError> {
        let Some((ta1, functional)) = self.wanted_x12(i) else {
            return Ok(None);
        };
        if self.answered_before(inbox, i, d, name)? {
            return Ok(None);
        }
        let rejected = x12_ack::Answer {
            ta1: Some((x12_ack::Status::Rejected, x12_ack::DUPLICATE_CONTROL_NUMBER)),
            groups: Vec::new(),
        };
        let answer = match d {
            Decision::New { .. } => x12_ack::Answer {
                ta1: ta1.then_some((x12_ack::Status::Accepted, x12_ack::NO_ERROR)),
                groups: if functional {
                    accepted_groups(i)
                } else {
                    Vec::new()
                },
            },
            Decision::Drift { .. } => rejected,
            Decision::Duplicate { .. } if self.reject_duplicates => rejected,
            Decision::Duplicate { .. } => {
                let key = InterchangeKey::of(i);
                match inbox.resend_acknowledgement(key, (!redelivered).then_some(name), when)? {
                    Resend::Queued(own_ref) => return Ok(Some(own_ref)),
                    Resend::AlreadySent => return Ok(None),
                    Resend::Unanswered => x12_ack::Answer {
                        ta1: ta1.then_some((x12_ack::Status::Accepted, x12_ack::NO_ERROR)),
                        groups: if functional {
                            accepted_groups(i)
                        } else {
                            Vec::new()
                        },
                    },
                }
            }
            Decision::Unstorable { .. } | Decision::Refused(_) => return Ok(None),
        };
        if answer.is_empty() {
            return Ok(None);
        }
        store_x12(inbox, &i.unb, &i.separators, &answer, name, when).map(Some)
    }

    /// The answer to an interchange a reader rejected (its header read). EDIFACT: a CONTRL,
    /// UCI 4, with the error's 0085 at the lowest level that can express it; X12: a TA1 and,
    /// under `--contrl always`, a 997 or 999 (see `answer_rejected_x12`). Returns its control
    /// reference; `None` where the error has no code (nothing of the interchange to answer).
    pub fn answer_rejected(
        &self,
        inbox: &mut dyn Inbox,
        c: &envelopes::RejectedContext,
        e: &EnvelopeError,
        sending: &str,
        when: &str,
    ) -> Result<Option<String>, InboxError> {
        match c {
            envelopes::RejectedContext::Edifact(c) => {
                self.answer_rejected_edifact(inbox, c, e, sending, when)
            }
            envelopes::RejectedContext::X12(r) => {
                self.answer_rejected_x12(inbox, &r.unb, &r.read, sending, when)
            }
        }
    }

    /// The X12 answer to an interchange the X12 reader rejected (its ISA read): a TA1 rejecting
    /// it (TA104 `R`), TA105 the error's note code, or `024` (invalid interchange content) for an
    /// error of a group or a set; under `--contrl always`, for such an error also a 997 or 999
    /// rejecting that group (AK9 `R`, AK905 a group's code) and naming the set (AK5/IK5 `R`,
    /// AK502/IK502 its code). Returns our ISA13 of the answer.
    fn answer_rejected_x12(
        &self,
        inbox: &mut dyn Inbox,
        u: &Unb,
        c: &x12::RejectedContext,
        sending: &str,
        when: &str,
    ) -> Result<Option<String>, InboxError> {
        let (ta105, group_error, set_error) = match c.ack {
            x12::AckCode::Interchange(code) => (code, None, None),
            x12::AckCode::Group(code) => (x12_ack::INVALID_CONTENT, Some(code), None),
            x12::AckCode::Set(code) => (x12_ack::INVALID_CONTENT, None, Some(code)),
        };
        let functional = self.mode == Mode::Always;
        let groups = match &c.group {
            Some(g) if functional && (group_error.is_some() || set_error.is_some()) => {
                let sets = match (set_error, &c.set) {
                    (Some(code), Some(s)) => vec![x12_ack::SetAnswer {
                        id: &s.id,
                        control_number: &s.control_number,
                        implementation: s.implementation.as_deref(),
                        status: x12_ack::Status::Rejected,
                        error: Some(code),
                    }],
                    _ => Vec::new(),
                };
                vec![x12_ack::GroupAnswer {
                    functional_id: &g.functional_id,
                    application_sender: &g.application_sender,
                    application_receiver: &g.application_receiver,
                    control_number: &g.control_number,
                    version: &g.version,
                    sets,
                    // The interchange is rejected whole: none of the group's sets is applied.
                    status: x12_ack::Status::Rejected,
                    error: group_error,
                    // The sets read of it up to the error, all received.
                    included: g.sets,
                    received: g.sets,
                }]
            }
            _ => Vec::new(),
        };
        let answer = x12_ack::Answer {
            ta1: Some((x12_ack::Status::Rejected, ta105)),
            groups,
        };
        let separators = envelopes::separators_of(c.separators);
        store_x12(inbox, u, &separators, &answer, sending, when).map(Some)
    }

    /// The CONTRL that rejects an EDIFACT interchange the parser could not accept: see
    /// [`AckPolicy::answer_rejected`].
    fn answer_rejected_edifact(
        &self,
        inbox: &mut dyn Inbox,
        c: &RejectedContext,
        e: &EnvelopeError,
        sending: &str,
        when: &str,
    ) -> Result<Option<String>, InboxError> {
        let Some(error) = contrl::syntax_error(&e.kind, e.tag) else {
            return Ok(None);
        };
        let s009 = c
            .message
            .as_ref()
            .map(|(r, s)| (r.as_str(), s.each_ref().map(|c| c.as_str())));
        let detail = Detail {
            error: Some(error),
            group_ref: c.group_ref.as_deref(),
            group_parties: [&c.group_parties[0], &c.group_parties[1]],
            message: s009,
            empty_groups: Vec::new(),
        };
        let u = &c.unb;
        let prepared = prepared_at(when);
        let build = |own_ref: &str| {
            contrl::build(
                u,
                &c.separators,
                c.has_una,
                Action::Rejected,
                &detail,
                own_ref,
                prepared,
            )
        };
        // The parser that read this far is EDIFACT's.
        store(
            inbox,
            (Standard::Edifact, u),
            Action::Rejected,
            Some(error.code),
            &build,
            sending,
            when,
        )
        .map(Some)
    }
}

/// Stores a CONTRL answering `u` (of its standard's key) under the next control reference of
/// its partner's counter.
fn store(
    inbox: &mut dyn Inbox,
    (standard, u): (Standard, &Unb),
    action: Action,
    error_code: Option<&str>,
    build: &dyn Fn(&str) -> Vec<u8>,
    sending: &str,
    when: &str,
) -> Result<String, InboxError> {
    let partner = partner(u);
    inbox.acknowledge(&NewAcknowledgement {
        standard,
        sender: &u.sender,
        recipient: &u.recipient,
        control_ref: &u.control_ref,
        partner: &partner,
        action: action.code(),
        error_code,
        build,
        created_at: when,
        sending,
        syntax_version: contrl::answer_version(u),
        event_type: crate::inbox::names::CONTRL_OUTBOUND,
    })
}

/// Whose counter numbers a CONTRL: the answered sender, with its qualifier. An X12 sender has
/// a counter of its own (our ISA13s to it), apart from its EDIFACT one where it sends both.
pub fn partner(u: &Unb) -> String {
    let standard = if u.syntax_id == crate::envelopes::X12_SYNTAX_ID {
        "x12:"
    } else {
        ""
    };
    format!(
        "{standard}{}:{}",
        u.sender,
        u.sender_qualifier.as_deref().unwrap_or("")
    )
}

/// Stores an X12 answer to the interchange of ISA `u` (in the shared model) written with
/// `seps`, under the next ISA13 of its partner's counter; its event names the last kind it
/// holds (`x12.999.outbound`). Returns that ISA13.
fn store_x12(
    inbox: &mut dyn Inbox,
    u: &Unb,
    seps: &crate::edifact::Separators,
    answer: &x12_ack::Answer<'_>,
    sending: &str,
    when: &str,
) -> Result<String, InboxError> {
    let to = answered(u, seps);
    let (ccyymmdd, hhmm) = x12_prepared(when);
    let prepared = x12_ack::Prepared {
        ccyymmdd: &ccyymmdd,
        hhmm: &hhmm,
    };
    let build = |own: &str| x12_ack::build(&to, answer, own, prepared);
    let (status, error_code) = match &answer.ta1 {
        Some((x12_ack::Status::Rejected, note)) => ("R", Some(*note)),
        _ => ("A", None),
    };
    let event_type = format!("x12.{}.outbound", answer.kinds().last().unwrap_or(&"TA1"));
    inbox.acknowledge(&NewAcknowledgement {
        standard: Standard::X12,
        sender: &u.sender,
        recipient: &u.recipient,
        control_ref: &u.control_ref,
        partner: &partner(u),
        action: status,
        error_code,
        build: &build,
        created_at: when,
        sending,
        syntax_version: to.version,
        event_type: &event_type,
    })
}

/// The answered interchange's ISA, as the X12 reader put it into the model (`envelopes`).
fn answered<'a>(u: &'a Unb, seps: &crate::edifact::Separators) -> x12_ack::Answered<'a> {
    x12_ack::Answered {
        sender_qualifier: u.sender_qualifier.as_deref().unwrap_or(""),
        sender: &u.sender,
        receiver_qualifier: u.recipient_qualifier.as_deref().unwrap_or(""),
        receiver: &u.recipient,
        date: &u.date,
        time: &u.time,
        version: &u.syntax_version,
        control_number: &u.control_ref,
        usage: if u.test_indicator.is_some() { "T" } else { "P" },
        element: seps.element,
        component: seps.component,
        repetition: seps.repetition,
        terminator: seps.terminator,
    }
}

/// Every group of an accepted interchange, each set accepted: `E` with AK502/IK502 `23` for a
/// set whose ST02 an earlier set of its group had (tolerated, applied, and said), and its group
/// `E` with it.
fn accepted_groups<'a>(i: &'a Interchange<'_>) -> Vec<x12_ack::GroupAnswer<'a>> {
    // The sets of each group, found in one pass: looking for each group's sets among all of
    // them made an interchange of many small groups take hours to answer.
    let mut of_group: Vec<Vec<&'a Message>> = vec![Vec::new(); i.groups.len()];
    for m in &i.messages {
        if let Some(sets) = m.group.and_then(|k| of_group.get_mut(k)) {
            sets.push(m);
        }
    }
    i.groups
        .iter()
        .zip(of_group)
        .map(|(g, members)| {
            let mut seen = std::collections::HashSet::new();
            let sets: Vec<x12_ack::SetAnswer<'a>> = members
                .iter()
                .map(|m| {
                    let repeated = !seen.insert(m.reference.as_str());
                    x12_ack::SetAnswer {
                        id: &m.message_type,
                        control_number: &m.reference,
                        implementation: m.association_code.as_deref(),
                        status: if repeated {
                            x12_ack::Status::AcceptedWithErrors
                        } else {
                            x12_ack::Status::Accepted
                        },
                        error: repeated.then_some(x12_ack::SET_CONTROL_NUMBER_NOT_UNIQUE),
                    }
                })
                .collect();
            let status = if sets
                .iter()
                .any(|s| s.status == x12_ack::Status::AcceptedWithErrors)
            {
                x12_ack::Status::AcceptedWithErrors
            } else {
                x12_ack::Status::Accepted
            };
            // GS08 is each set's version in the model; a group has at least one set.
            let version = members.first().map_or("", |m| m.version.as_str());
            x12_ack::GroupAnswer {
                functional_id: g.group_id.as_deref().unwrap_or(""),
                application_sender: g.sender.as_deref().unwrap_or(""),
                application_receiver: g.recipient.as_deref().unwrap_or(""),
                control_number: &g.reference,
                version,
                included: g.messages,
                received: g.messages,
                sets,
                status,
                error: None,
            }
        })
        .collect()
}

/// ISA09/ISA10 and GS04/GS05 of an X12 answer from a stored time
/// (`2026-11-30T09:05:00.000Z`): its digits, as a CONTRL's S004 is read from it.
fn x12_prepared(when: &str) -> (String, String) {
    let digits = |range: std::ops::Range<usize>| -> String {
        when.get(range)
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_digit)
            .collect()
    };
    (digits(0..10), digits(11..16))
}

/// UNB S004 of a CONTRL from a stored time (`2026-11-30T09:05:00.000Z`).
fn prepared_at(when: &str) -> contrl::Prepared {
    let n = |range: std::ops::Range<usize>| {
        when.get(range)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0)
    };
    contrl::Prepared {
        year: n(0..4),
        month: n(5..7) as u8,
        day: n(8..10) as u8,
        hour: n(11..13) as u8,
        minute: n(14..16) as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_x12_answers_date_and_time_are_read_from_the_stored_time() {
        assert_eq!(
            x12_prepared("2026-11-30T09:05:00.000Z"),
            ("20261130".to_string(), "0905".to_string())
        );
    }

    #[test]
    fn the_preparation_time_is_read_from_the_stored_time() {
        assert_eq!(
            prepared_at("2026-11-30T09:05:00.000Z"),
            contrl::Prepared {
                year: 2026,
                month: 11,
                day: 30,
                hour: 9,
                minute: 5
            }
        );
    }
}
