//! The CONTRL answering policy, built once from the command line (`--contrl`,
//! `--contrl-duplicates`): which interchanges are answered, with what, and the answer stored in
//! the decision's transaction. The CONTRL's bytes are [`crate::edifact::contrl`]'s.

use crate::edifact::contrl::{self, Action, Detail, Level, Mode, SyntaxError};
use crate::edifact::{EnvelopeError, Interchange, RejectedContext, Unb};
use crate::inbox::{Decision, Inbox, InboxError, InterchangeKey, NewAcknowledgement, Resend};
use crate::standard::Standard;

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

    /// Whether a rejected interchange, as far as it was read, is answered: only where its UNB
    /// was read with its key (the partner could not tell which interchange an answer is for
    /// otherwise) and a CONTRL is due for it.
    pub fn answers_rejected(&self, c: &RejectedContext) -> bool {
        let types: Vec<&str> = c.message_types.iter().map(|t| t.as_str()).collect();
        c.unb.is_keyed() && contrl::wanted(self.mode, &c.unb, &types).is_some()
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

    /// The CONTRL that rejects an interchange the parser could not accept (its UNB read): UCI
    /// 4, with the error's 0085 at the lowest level that can express it. Returns its control
    /// reference; `None` where the error has no code (nothing of the interchange to answer).
    pub fn answer_rejected(
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
    })
}

/// Whose counter numbers a CONTRL: the answered sender, with its qualifier.
pub fn partner(u: &Unb) -> String {
    format!(
        "{}:{}",
        u.sender,
        u.sender_qualifier.as_deref().unwrap_or("")
    )
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
