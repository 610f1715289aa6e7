//! The syntax and service report message (CONTRL) that answers an interchange: whether one is
//! due, which action (UCI 0083) and syntax error (0085) a decision maps to and at which level,
//! and the bytes of the CONTRL interchange. Pure, like the rest of this module: the caller
//! supplies the CONTRL's own control reference (0020) and the time.
//!
//! Syntax versions 1 to 3 are answered with `CONTRL:D:3:UN` (UCI, UCF, UCM as in the D.3
//! directory); version 4 with `CONTRL:4:1:UN` (ISO 9735-4: UNH with 0062 and S009 only, UCI and
//! UCM with the service segment tag as 0135).

use compact_str::CompactString;

use super::charset::Charset;
use super::error::{ErrorKind, Tag};
use super::model::{Group, Unb};
use super::syntax::Separators;

/// When `--contrl` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Where the sender asked in UNB 0031.
    Requested,
    Always,
    Never,
}

/// UCI 0083, the action the report states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `7`: this level and all lower levels acknowledged.
    Acknowledged,
    /// `8`: interchange received (syntax 4, where 0031 asked for an indication of receipt).
    Received,
    /// `4`: this level and all lower levels rejected.
    Rejected,
}

impl Action {
    pub const fn code(self) -> &'static str {
        match self {
            Action::Acknowledged => "7",
            Action::Received => "8",
            Action::Rejected => "4",
        }
    }
}

/// The level that reports an error: the lowest one that can express it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// UCI: the interchange (UNB, UNZ, and what stands outside any message or group).
    Interchange,
    /// UCF: a group (its UNE).
    Group,
    /// UCM: a message (its UNT).
    Message,
}

/// What a syntax error is reported as: 0085, the level, and the service segment tag (0135 in
/// syntax 4, 0013 before) where one is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntaxError {
    pub code: &'static str,
    pub level: Level,
    pub tag: Option<Tag>,
}

/// 0085 `26`: duplicate detected (a drift: the same key with other content).
pub const DUPLICATE_DETECTED: &str = "26";

/// The report of one parser error: one row per kind of [`ErrorKind`], the only place the kinds
/// meet the codes of ISO 9735 (0085). `None` where no UNB was read (nothing to answer). `at` is
/// the tag of the segment the error was found in: a missing element or a count that is not a
/// number in a UNT or UNE is reported at its message's or group's level; in a UNH or UNG (whose
/// own identification may be what is missing) on the UCI, with the tag.
pub fn syntax_error(kind: &ErrorKind, at: Option<Tag>) -> Option<SyntaxError> {
    use ErrorKind as K;
    use Level::{Group, Interchange, Message};
    let level_of = |tag: Option<Tag>| match tag {
        Some(Tag::UNT) => Message,
        Some(Tag::UNE) => Group,
        _ => Interchange,
    };
    let (code, level, tag) = match kind {
        // No interchange to answer: the rejection stays in the inbox's own report.
        K::Empty | K::NoInterchange | K::TruncatedUna { .. } | K::BadUna { .. } => return None,
        // The segment reader's, of a message already accepted: never an interchange's answer.
        K::MessageOutside { .. } | K::NotMessageBound { .. } => return None,
        // An X12 interchange is answered by a TA1 or a 997/999, never by a CONTRL.
        K::X12 { .. } => return None,
        // 29: control count does not match the number of instances received.
        K::UntCount { .. } => ("29", Message, Some(Tag::UNT)),
        K::UneCount { .. } => ("29", Group, Some(Tag::UNE)),
        K::UnzCount { .. } => ("29", Interchange, Some(Tag::UNZ)),
        // 28: references do not match.
        K::UntReference { .. } => ("28", Message, Some(Tag::UNT)),
        K::UneReference { .. } => ("28", Group, Some(Tag::UNE)),
        K::UnzReference { .. } => ("28", Interchange, Some(Tag::UNZ)),
        // 13: missing (a mandatory element, or the segment that closes a level).
        K::MissingElement { .. } => ("13", level_of(at), at.or(Some(Tag::UNB))),
        K::UnhWithoutUnt { .. } | K::MessageNotClosed { .. } => ("13", Message, Some(Tag::UNT)),
        K::UngWithoutUne { .. } | K::GroupNotClosed { .. } => ("13", Group, Some(Tag::UNE)),
        K::MissingUnz { .. } | K::UnbBeforeUnz { .. } | K::Unterminated { .. } => {
            ("13", Interchange, Some(Tag::UNZ))
        }
        // 32: lower level empty (an interchange, or a group, without a message).
        K::LowerLevelEmpty { what: "group" } => ("32", Group, Some(Tag::UNE)),
        K::LowerLevelEmpty { .. } => ("32", Interchange, Some(Tag::UNZ)),
        // 2: syntax version or level not supported.
        K::UnsupportedSyntaxVersion { .. } => ("2", Interchange, Some(Tag::UNB)),
        // 12: invalid value.
        K::BadCount { .. } => ("12", level_of(at), at),
        // 21: invalid character.
        K::NulByte | K::DanglingRelease { .. } => ("21", Interchange, None),
        // 33: invalid occurrence outside message, package or group.
        K::OutsideMessage | K::UntWithoutUnh | K::UneWithoutUng => ("33", Interchange, None),
        // 30: groups and messages/packages mixed.
        K::MixedGroups => ("30", Interchange, None),
        // 26: duplicate detected (a message or group reference used twice).
        K::DuplicateMessage { .. } => ("26", Message, Some(Tag::UNH)),
        K::DuplicateGroup { .. } => ("26", Group, Some(Tag::UNG)),
        // 18: unspecified error, the last resort.
        K::BadTag { .. } | K::TrailingData { .. } => ("18", Interchange, None),
    };
    Some(SyntaxError { code, level, tag })
}

/// Whether an interchange is answered with a CONTRL, and with which action when it is new:
/// the one place the decision is made (a per-partner setting would come in here).
///
/// Never for an interchange whose messages are all CONTRL or APERAK: an acknowledgement is not
/// acknowledged.
pub fn wanted(mode: Mode, unb: &Unb, message_types: &[&str]) -> Option<Action> {
    let answers_only = !message_types.is_empty()
        && message_types
            .iter()
            .all(|t| *t == "CONTRL" || *t == "APERAK");
    if answers_only || mode == Mode::Never {
        return None;
    }
    let syntax_4 = unb.syntax_version == "4";
    match (mode, unb.ack_request.as_deref()) {
        (_, Some("2")) if syntax_4 => Some(Action::Received),
        (Mode::Always, _) | (Mode::Requested, Some("1")) => Some(Action::Acknowledged),
        _ => None,
    }
}

/// What the CONTRL reports beyond its UCI's action: an error, and the identifiers of the group
/// or message it concerns (UCF needs 0048, UCM 0062 and S009; where they are not known, the
/// error is reported on the UCI).
#[derive(Debug, Clone, Default)]
pub struct Detail<'a> {
    pub error: Option<SyntaxError>,
    /// UNG 0048, for a UCF.
    pub group_ref: Option<&'a str>,
    /// UNG S006 and S007, for a UCF, each copied whole as the group stated it (0040 : 0007,
    /// 0044 : 0007).
    pub group_parties: [&'a [CompactString]; 2],
    /// UNH 0062 and S009 (0065, 0052, 0054, 0051, 0057), for a UCM.
    pub message: Option<(&'a str, [&'a str; 5])>,
    /// The groups of an accepted interchange that hold no message: each reported on a UCF of
    /// its own, rejected with 0085 `32` (lower level empty), where the UCI acknowledges (`7`:
    /// every group not reported rejected is acknowledged). A receipt (`8`) reports nothing
    /// below the interchange, and a rejection (`4`) rejects them with the rest.
    pub empty_groups: Vec<&'a Group>,
}

/// The time a CONTRL is prepared (UNB S004), in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    pub year: u16,
    pub month: u8,
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
}

/// The syntax version (UNB 0002) of the CONTRL that answers `subject`: the subject's own. An
/// interchange in a version ISO 9735 does not define (rejected with 0085 2) is answered in
/// version 3, which any reader of CONTRL D:3 takes, rather than in a version no parser reads.
pub fn answer_version(subject: &Unb) -> &str {
    match subject.syntax_version.as_str() {
        v @ ("1" | "2" | "3" | "4") => v,
        _ => "3",
    }
}

/// The CONTRL interchange answering `subject` (its UNB, separators, and whether it began with a
/// UNA), under the CONTRL's own control reference `own_ref` (at most 14 characters).
///
/// Its UNB has the subject's syntax identifier, sender and recipient swapped (each with its
/// qualifier and routing), the date in the form of the syntax version, and no 0031; the UCI
/// copies the subject's 0020, S002 and S003 unswapped.
pub fn build(
    subject: &Unb,
    separators: &Separators,
    has_una: bool,
    action: Action,
    detail: &Detail<'_>,
    own_ref: &str,
    when: Prepared,
) -> Vec<u8> {
    let version = answer_version(subject);
    let syntax_4 = version == "4";
    let mut s = *separators;
    // Syntax 4 without a UNA has `*` as its repetition separator: a value holding one is
    // released.
    if syntax_4 && !has_una && s.release.is_some() && s.repetition.is_none() {
        s.repetition = Some(b'*');
    }
    // In the repertoire the subject declares (its syntax identifier, which the CONTRL's UNB
    // repeats): a partner `MÜLLER` under UNOC is the byte 0xDC, as the partner sent it.
    let w = Writer {
        s,
        charset: Charset::for_syntax(&subject.syntax_id),
    };
    let date = if syntax_4 {
        format!("{:04}{:02}{:02}", when.year, when.month, when.day)
    } else {
        format!("{:02}{:02}{:02}", when.year % 100, when.month, when.day)
    };
    let time = format!("{:02}{:02}", when.hour, when.minute);
    let sender = party(
        &subject.sender,
        subject.sender_qualifier.as_deref(),
        subject.sender_routing.as_deref(),
    );
    let recipient = party(
        &subject.recipient,
        subject.recipient_qualifier.as_deref(),
        subject.recipient_routing.as_deref(),
    );
    let mut segments: Vec<Vec<Vec<String>>> = Vec::new();
    let mut unb = vec![
        vec!["UNB".into()],
        vec![subject.syntax_id.to_string(), version.to_string()],
        recipient.clone(),
        sender.clone(),
        vec![date, time],
        vec![own_ref.to_string()],
    ];
    // The answer to a test interchange is a test too (0035), so that it never counts as
    // production on the partner's side; S005, 0026, 0029, 0031 and 0032 stay empty.
    if subject.is_test() {
        unb.extend([vec![], vec![], vec![], vec![], vec![], vec!["1".into()]]);
    }
    segments.push(unb);
    let message_id: Vec<String> = if syntax_4 {
        ["CONTRL", "4", "1", "UN"].map(String::from).to_vec()
    } else {
        ["CONTRL", "D", "3", "UN"].map(String::from).to_vec()
    };
    segments.push(vec![vec!["UNH".into()], vec!["1".into()], message_id]);
    let error = detail.error;
    // The level the error is reported at, where its identifiers are known.
    let level = match (error.map(|e| e.level), detail.group_ref, detail.message) {
        (Some(Level::Message), _, Some(_)) => Level::Message,
        (Some(Level::Group), Some(_), _) => Level::Group,
        _ => Level::Interchange,
    };
    let error_elements = |e: &SyntaxError| -> Vec<Vec<String>> {
        let mut v = vec![vec![e.code.to_string()]];
        if let Some(t) = e.tag {
            v.push(vec![t.as_str().to_string()]);
        }
        v
    };
    let mut uci = vec![
        vec!["UCI".into()],
        vec![subject.control_ref.to_string()],
        sender,
        recipient,
        vec![action.code().into()],
    ];
    if let Some(e) = error.as_ref().filter(|_| level == Level::Interchange) {
        uci.extend(error_elements(e));
    }
    segments.push(uci);
    // UCF: the group's S006 and S007 whole, and its action: rejected (4), with the error where
    // the group is what is wrong; a message's error is nested under its group's UCF (the D.3
    // and 4:1 CONTRLs have UCM within the UCF's group where groups are used).
    let ucf = |reference: &str, parties: [&[CompactString]; 2], error: Option<&SyntaxError>| {
        let mut ucf = vec![
            vec!["UCF".into()],
            vec![reference.to_string()],
            parties[0].iter().map(|c| c.to_string()).collect(),
            parties[1].iter().map(|c| c.to_string()).collect(),
            vec![Action::Rejected.code().into()],
        ];
        if let Some(e) = error {
            ucf.extend(error_elements(e));
        }
        ucf
    };
    let group_ref = detail.group_ref.unwrap_or("");
    // An accepted interchange's empty groups, each rejected on its own UCF (0085 32 at its
    // UNE), so that the partner knows which groups went unacknowledged: under UCI 7 every group
    // not reported is acknowledged.
    if action == Action::Acknowledged && error.is_none() {
        let empty = syntax_error(&ErrorKind::LowerLevelEmpty { what: "group" }, None);
        for g in &detail.empty_groups {
            let [sender, recipient] = g.parties();
            segments.push(ucf(&g.reference, [&sender, &recipient], empty.as_ref()));
        }
    }
    if let Some(e) = error.as_ref() {
        match level {
            Level::Interchange => {}
            Level::Group => segments.push(ucf(group_ref, detail.group_parties, Some(e))),
            Level::Message => {
                if detail.group_ref.is_some() {
                    segments.push(ucf(group_ref, detail.group_parties, None));
                }
                let (reference, s009) = detail.message.unwrap_or(("", [""; 5]));
                let mut ucm = vec![
                    vec!["UCM".into()],
                    vec![reference.to_string()],
                    s009.iter().map(|s| s.to_string()).collect(),
                    vec![Action::Rejected.code().into()],
                ];
                ucm.extend(error_elements(e));
                segments.push(ucm);
            }
        }
    }
    // UNT 0074 counts UNH..UNT: all but the UNB, and the UNT itself.
    let in_message = segments.len();
    segments.push(vec![
        vec!["UNT".into()],
        vec![in_message.to_string()],
        vec!["1".into()],
    ]);
    segments.push(vec![
        vec!["UNZ".into()],
        vec!["1".into()],
        vec![own_ref.to_string()],
    ]);
    let mut out = Vec::new();
    if has_una {
        out.extend_from_slice(b"UNA");
        out.extend_from_slice(&separators.una_string());
    }
    for seg in &segments {
        w.segment(&mut out, seg);
    }
    out
}

/// S002 or S003: the identification, its qualifier (0007) and routing address where given.
fn party(id: &str, qualifier: Option<&str>, routing: Option<&str>) -> Vec<String> {
    let mut c = vec![id.to_string()];
    if qualifier.is_some() || routing.is_some() {
        c.push(qualifier.unwrap_or("").to_string());
    }
    if let Some(r) = routing {
        c.push(r.to_string());
    }
    c
}

/// Writes segments with the subject's separators and repertoire, releasing the service
/// characters in values.
struct Writer {
    s: Separators,
    charset: Charset,
}

impl Writer {
    fn segment(&self, out: &mut Vec<u8>, elements: &[Vec<String>]) {
        // Trailing empty elements are left out, as ISO 9735 asks.
        let last = elements
            .iter()
            .rposition(|e| e.iter().any(|c| !c.is_empty()))
            .unwrap_or(0);
        for (n, element) in elements[..=last].iter().enumerate() {
            if n > 0 {
                out.push(self.s.element);
            }
            let used = element
                .iter()
                .rposition(|c| !c.is_empty())
                .map_or(0, |i| i + 1);
            for (k, component) in element[..used].iter().enumerate() {
                if k > 0 {
                    out.push(self.s.component);
                }
                self.value(out, &self.charset.encode(component));
            }
        }
        out.push(self.s.terminator);
    }

    fn value(&self, out: &mut Vec<u8>, v: &[u8]) {
        for &b in v {
            if self.s.is_service(b)
                && let Some(r) = self.s.release
            {
                out.push(r);
            }
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edifact::interchanges;

    const WHEN: Prepared = Prepared {
        year: 2026,
        month: 11,
        day: 30,
        hour: 9,
        minute: 5,
    };

    fn subject(text: &str) -> crate::edifact::Interchange<'static> {
        interchanges(text.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .into_owned()
    }

    const V3: &str = "UNA:+.? 'UNB+UNOC:3+SENDER?+1:14+RECIP:ZZZ+240101:1200+REF42++++1'UNH+M1+INVOIC:D:96A:UN'BGM+380+1'UNT+3+M1'UNZ+1+REF42'";
    const V4: &str = "UNB+UNOC:4+S4:14+R4:14+20240101:1200+R4REF++++2'UNH+1+ORDERS:D:01B:UN'UNT+2+1'UNZ+1+R4REF'";

    #[test]
    fn an_acknowledgement_swaps_the_parties_and_copies_the_key() {
        let s = subject(V3);
        let bytes = build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Acknowledged,
            &Detail::default(),
            "C00000000001",
            WHEN,
        );
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "UNA:+.? 'UNB+UNOC:3+RECIP:ZZZ+SENDER?+1:14+261130:0905+C00000000001'UNH+1+CONTRL:D:3:UN'UCI+REF42+SENDER?+1:14+RECIP:ZZZ+7'UNT+3+1'UNZ+1+C00000000001'"
        );
        // Our own parser reads it back as one valid CONTRL.
        let back = subject(std::str::from_utf8(&bytes).unwrap());
        assert_eq!(back.unb.sender, "RECIP");
        assert_eq!(back.unb.recipient, "SENDER+1");
        assert_eq!(back.messages.len(), 1);
        assert_eq!(back.messages[0].message_type, "CONTRL");
        assert_eq!(back.unb.ack_request, None);
    }

    #[test]
    fn syntax_4_has_its_own_version_and_date_form() {
        let s = subject(V4);
        assert_eq!(
            wanted(Mode::Requested, &s.unb, &["ORDERS"]),
            Some(Action::Received)
        );
        let bytes = build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Received,
            &Detail::default(),
            "C1",
            WHEN,
        );
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "UNB+UNOC:4+R4:14+S4:14+20261130:0905+C1'UNH+1+CONTRL:4:1:UN'UCI+R4REF+S4:14+R4:14+8'UNT+3+1'UNZ+1+C1'"
        );
    }

    #[test]
    fn errors_are_reported_at_the_lowest_level_that_knows_them() {
        let s = subject(V3);
        let unt = syntax_error(
            &ErrorKind::UntCount {
                declared: "3".into(),
                actual: 4,
            },
            Some(Tag::UNT),
        );
        let detail = Detail {
            error: unt,
            message: Some(("M1", ["INVOIC", "D", "96A", "UN", ""])),
            ..Detail::default()
        };
        let bytes = build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Rejected,
            &detail,
            "C2",
            WHEN,
        );
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains(
                "'UCI+REF42+SENDER?+1:14+RECIP:ZZZ+4'UCM+M1+INVOIC:D:96A:UN+4+29+UNT'UNT+4+1'"
            ),
            "{text}"
        );
        // Without the message's identifiers, the UCI says it.
        let detail = Detail {
            error: unt,
            ..Detail::default()
        };
        let bytes = build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Rejected,
            &detail,
            "C2",
            WHEN,
        );
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains("'UCI+REF42+SENDER?+1:14+RECIP:ZZZ+4+29+UNT'UNT+3+1'"),
            "{text}"
        );
    }

    /// One row per kind of parser error: its 0085, level and tag.
    #[test]
    fn every_error_kind_maps_to_one_code() {
        use ErrorKind as K;
        let s = String::new;
        type Row = (&'static str, Level, Option<&'static str>);
        let rows: Vec<(K, Option<Row>)> = vec![
            (K::Empty, None),
            (K::NoInterchange, None),
            (K::TruncatedUna { found: 3 }, None),
            (K::BadUna { reason: s() }, None),
            (
                K::BadTag { found: s() },
                Some(("18", Level::Interchange, None)),
            ),
            (
                K::DanglingRelease { release: s() },
                Some(("21", Level::Interchange, None)),
            ),
            (
                K::Unterminated { terminator: s() },
                Some(("13", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::TrailingData { len: 1, found: s() },
                Some(("18", Level::Interchange, None)),
            ),
            (
                K::MissingUnz { control_ref: s() },
                Some(("13", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::UnbBeforeUnz { control_ref: s() },
                Some(("13", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::MissingElement { element: "0020" },
                Some(("13", Level::Interchange, Some("UNB"))),
            ),
            (K::NulByte, Some(("21", Level::Interchange, None))),
            (
                K::BadCount {
                    element: "0074",
                    found: s(),
                },
                Some(("12", Level::Interchange, None)),
            ),
            (K::OutsideMessage, Some(("33", Level::Interchange, None))),
            (
                K::UnhWithoutUnt {
                    reference: s(),
                    open: s(),
                },
                Some(("13", Level::Message, Some("UNT"))),
            ),
            (
                K::MessageNotClosed { open: s() },
                Some(("13", Level::Message, Some("UNT"))),
            ),
            (K::UntWithoutUnh, Some(("33", Level::Interchange, None))),
            (
                K::UngWithoutUne {
                    reference: s(),
                    open: s(),
                },
                Some(("13", Level::Group, Some("UNE"))),
            ),
            (
                K::GroupNotClosed { open: s() },
                Some(("13", Level::Group, Some("UNE"))),
            ),
            (K::UneWithoutUng, Some(("33", Level::Interchange, None))),
            (K::MixedGroups, Some(("30", Level::Interchange, None))),
            (
                K::UntCount {
                    declared: s(),
                    actual: 1,
                },
                Some(("29", Level::Message, Some("UNT"))),
            ),
            (
                K::UntReference {
                    found: s(),
                    expected: s(),
                },
                Some(("28", Level::Message, Some("UNT"))),
            ),
            (
                K::DuplicateMessage {
                    reference: s(),
                    group: None,
                },
                Some(("26", Level::Message, Some("UNH"))),
            ),
            (
                K::DuplicateGroup { reference: s() },
                Some(("26", Level::Group, Some("UNG"))),
            ),
            (
                K::UneCount {
                    declared: s(),
                    actual: 1,
                },
                Some(("29", Level::Group, Some("UNE"))),
            ),
            (
                K::UneReference {
                    found: s(),
                    expected: s(),
                },
                Some(("28", Level::Group, Some("UNE"))),
            ),
            (
                K::UnzCount {
                    declared: s(),
                    actual: 1,
                    what: ("message", "messages"),
                },
                Some(("29", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::UnzReference {
                    found: s(),
                    expected: s(),
                },
                Some(("28", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::UnsupportedSyntaxVersion { found: s() },
                Some(("2", Level::Interchange, Some("UNB"))),
            ),
            (
                K::LowerLevelEmpty {
                    what: "interchange",
                },
                Some(("32", Level::Interchange, Some("UNZ"))),
            ),
            (
                K::LowerLevelEmpty { what: "group" },
                Some(("32", Level::Group, Some("UNE"))),
            ),
        ];
        for (kind, want) in rows {
            let got = syntax_error(&kind, None)
                .map(|e| (e.code, e.level, e.tag.map(|t| t.as_str().to_string())));
            let want = want.map(|(c, l, t)| (c, l, t.map(str::to_string)));
            assert_eq!(got, want, "{kind:?}");
        }
    }

    /// A message's error in a grouped interchange: its UCM nested under its group's UCF (the
    /// group rejected with it, S006 and S007 whole), S009 with 0057; a group's own error on the
    /// UCF alone.
    #[test]
    fn a_message_in_a_group_is_reported_under_its_group() {
        let s = subject(V3);
        let parties = [
            vec![CompactString::from("APPSEND"), CompactString::from("ZZ")],
            vec![CompactString::from("APPRECV"), CompactString::from("14")],
        ];
        let unt = syntax_error(
            &ErrorKind::UntCount {
                declared: "3".into(),
                actual: 4,
            },
            Some(Tag::UNT),
        );
        let detail = Detail {
            error: unt,
            group_ref: Some("G1"),
            group_parties: [&parties[0], &parties[1]],
            message: Some(("M1", ["INVOIC", "D", "96A", "UN", "EAN008"])),
            empty_groups: Vec::new(),
        };
        let text = String::from_utf8(build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Rejected,
            &detail,
            "C3",
            WHEN,
        ))
        .unwrap();
        assert!(
            text.contains(
                "'UCI+REF42+SENDER?+1:14+RECIP:ZZZ+4'UCF+G1+APPSEND:ZZ+APPRECV:14+4'UCM+M1+INVOIC:D:96A:UN:EAN008+4+29+UNT'UNT+5+1'"
            ),
            "{text}"
        );
        let une = syntax_error(
            &ErrorKind::UneCount {
                declared: "3".into(),
                actual: 4,
            },
            Some(Tag::UNE),
        );
        let detail = Detail {
            error: une,
            ..detail
        };
        let text = String::from_utf8(build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Rejected,
            &detail,
            "C4",
            WHEN,
        ))
        .unwrap();
        assert!(
            text.contains(
                "'UCI+REF42+SENDER?+1:14+RECIP:ZZZ+4'UCF+G1+APPSEND:ZZ+APPRECV:14+4+29+UNE'UNT+4+1'"
            ),
            "{text}"
        );
    }

    /// An accepted interchange with an empty group: UCI 7 (every group not reported rejected is
    /// acknowledged) and a UCF rejecting the empty group, 0085 32 at its UNE, S006 and S007
    /// whole. A receipt (8) and a rejection (4) carry no such UCF.
    #[test]
    fn an_empty_group_of_an_accepted_interchange_is_reported_on_its_ucf() {
        let grouped = |version: &str, ack: &str| {
            subject(&format!(
                "UNB+UNOC:{version}+S:14+R:14+240101:1200+G++++{ack}'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G1'\
UNG+INVOIC+APPSEND:ZZ+APPRECV:14+240101:1200+G2+UN+D:96A'UNE+0+G2'\
UNG+ORDERS+S+R+240101:1200+G3+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G3'UNZ+3+G'"
            ))
        };
        let answer = |s: &crate::edifact::Interchange<'_>, action, error| {
            let detail = Detail {
                error,
                empty_groups: s.empty_groups().collect(),
                ..Detail::default()
            };
            let bytes = build(
                &s.unb,
                &s.separators,
                s.has_una,
                action,
                &detail,
                "C5",
                WHEN,
            );
            String::from_utf8(bytes).unwrap()
        };
        let s = grouped("3", "1");
        assert_eq!(
            wanted(Mode::Requested, &s.unb, &["ORDERS"]),
            Some(Action::Acknowledged)
        );
        assert_eq!(
            answer(&s, Action::Acknowledged, None),
            "UNB+UNOC:3+R:14+S:14+261130:0905+C5'UNH+1+CONTRL:D:3:UN'UCI+G+S:14+R:14+7'UCF+G2+APPSEND:ZZ+APPRECV:14+4+32+UNE'UNT+4+1'UNZ+1+C5'"
        );
        let back = subject(&answer(&s, Action::Acknowledged, None));
        assert_eq!(back.messages[0].segments, 4);
        // Syntax 4: the same UCF under CONTRL 4:1.
        let v4 = grouped("4", "1");
        assert!(
            answer(&v4, Action::Acknowledged, None)
                .contains("'UCI+G+S:14+R:14+7'UCF+G2+APPSEND:ZZ+APPRECV:14+4+32+UNE'UNT+4+1'"),
        );
        // A receipt reports the interchange alone.
        let receipt = grouped("4", "2");
        assert_eq!(
            wanted(Mode::Requested, &receipt.unb, &["ORDERS"]),
            Some(Action::Received)
        );
        assert!(answer(&receipt, Action::Received, None).contains("'UCI+G+S:14+R:14+8'UNT+3+1'"),);
        // A drift rejects the interchange, its groups with it.
        let drift = Some(SyntaxError {
            code: DUPLICATE_DETECTED,
            level: Level::Interchange,
            tag: None,
        });
        assert!(answer(&s, Action::Rejected, drift).contains("'UCI+G+S:14+R:14+4+26'UNT+3+1'"),);
    }

    #[test]
    fn a_test_interchange_gets_a_test_answer_and_releases_are_kept() {
        let s = subject(
            "UNB+UNOC:4+A?*B:14+R:14+20240101:1200+T1++++1++1'UNH+1+ORDERS:D:01B:UN'UNT+2+1'UNZ+1+T1'",
        );
        assert!(s.unb.is_test());
        let bytes = build(
            &s.unb,
            &s.separators,
            s.has_una,
            Action::Acknowledged,
            &Detail::default(),
            "C9",
            WHEN,
        );
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "UNB+UNOC:4+R:14+A?*B:14+20261130:0905+C9++++++1'UNH+1+CONTRL:4:1:UN'UCI+T1+A?*B:14+R:14+7'UNT+3+1'UNZ+1+C9'"
        );
    }

    /// A missing element or a count that is not a number: at the level of its segment.
    #[test]
    fn missing_and_invalid_values_are_reported_where_they_stand() {
        let rows = [
            (
                ErrorKind::MissingElement { element: "0062" },
                Tag::UNH,
                "13",
                Level::Interchange,
            ),
            (
                ErrorKind::MissingElement { element: "0048" },
                Tag::UNG,
                "13",
                Level::Interchange,
            ),
            (
                ErrorKind::MissingElement { element: "0020" },
                Tag::UNB,
                "13",
                Level::Interchange,
            ),
            (
                ErrorKind::BadCount {
                    element: "0074",
                    found: "x".into(),
                },
                Tag::UNT,
                "12",
                Level::Message,
            ),
            (
                ErrorKind::BadCount {
                    element: "0060",
                    found: "x".into(),
                },
                Tag::UNE,
                "12",
                Level::Group,
            ),
            (
                ErrorKind::BadCount {
                    element: "0036",
                    found: "x".into(),
                },
                Tag::UNZ,
                "12",
                Level::Interchange,
            ),
        ];
        for (kind, tag, code, level) in rows {
            assert_eq!(
                syntax_error(&kind, Some(tag)),
                Some(SyntaxError {
                    code,
                    level,
                    tag: Some(tag)
                }),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn who_gets_an_answer() {
        let v3 = subject(V3);
        assert_eq!(
            wanted(Mode::Requested, &v3.unb, &["INVOIC"]),
            Some(Action::Acknowledged)
        );
        assert_eq!(wanted(Mode::Never, &v3.unb, &["INVOIC"]), None);
        assert_eq!(wanted(Mode::Requested, &v3.unb, &["CONTRL"]), None);
        assert_eq!(wanted(Mode::Always, &v3.unb, &["APERAK", "CONTRL"]), None);
        let unasked =
            subject("UNB+UNOC:3+A+B+240101:1200+R'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+R'");
        assert_eq!(wanted(Mode::Requested, &unasked.unb, &["ORDERS"]), None);
        assert_eq!(
            wanted(Mode::Always, &unasked.unb, &["ORDERS"]),
            Some(Action::Acknowledged)
        );
    }
}
