//! The checks of the envelope: UNB..UNZ, UNG..UNE and UNH..UNT, read and checked in one pass
//! as the segments come.

use std::borrow::Cow;
use std::collections::HashSet;

use compact_str::CompactString;

use super::charset::Charset;
use super::error::{EnvelopeError, ErrorKind, Tag};
use super::hash::{SegmentHasher, hash_preamble};
use super::lexer::{RawSegment, unescape};
use super::model::RejectedContext;
use super::model::{Group, Interchange, Message, Unb};
use super::segments::{self, Raw};
use super::syntax::Separators;
use crate::standard::Standard;

/// References seen so far, to find a duplicate. aHash rather than SipHash: one insert per message
/// made SipHash a twentieth of the parse, and aHash's keys are random per process too, so a
/// sender still cannot choose references that collide.
type RefSet = HashSet<CompactString, ahash::RandomState>;

/// State of one interchange while its segments are read.
pub(super) struct Builder {
    seps: Separators,
    charset: Charset,
    start: usize,
    has_una: bool,
    pub(super) unb: Unb,
    groups: Vec<Group>,
    messages: Vec<Message>,
    message_refs: RefSet,
    group_refs: RefSet,
    open_message: Option<OpenMessage>,
    open_group: Option<usize>,
    segments: usize,
    hasher: SegmentHasher,
    pub(super) first_error: Option<EnvelopeError>,
    /// What surrounded the first error, for an answer to the interchange (a CONTRL).
    pub(super) context: Option<Box<RejectedContext>>,
    /// The first group closed without a message (UNE 0060 `0`), and what surrounded it: an
    /// error only where the interchange holds no message at all, which only its UNZ can tell.
    /// An empty group beside groups that hold messages puts nothing at risk: the interchange
    /// is accepted, and the group reported (its CONTRL has a UCF with 0085 32 for it).
    empty_group: Option<(EnvelopeError, Box<RejectedContext>)>,
}

struct OpenMessage {
    message: Message,
    offset: usize,
}

/// True where a value holds a NUL byte, which no EDIFACT repertoire allows, and which a text
/// column of a PostgreSQL inbox cannot store.
fn has_nul(value: &str) -> bool {
    value.contains('\0')
}

/// The values of service segments, as the interchange's syntax identifier decodes them.
#[derive(Clone, Copy)]
struct Values {
    seps: Separators,
    charset: Charset,
}

impl Values {
    /// The decoded text, release characters and line breaks taken out; empty where absent.
    fn text(&self, raw: Raw<'_>) -> CompactString {
        self.charset.decode(&unescape(raw, &self.seps))
    }

    fn opt(&self, raw: Raw<'_>) -> Option<CompactString> {
        Some(self.text(raw)).filter(|s| !s.is_empty())
    }

    /// True where the text is `expected`. Checks run on every UNT, so plain ASCII (nearly every
    /// reference) is compared as it stands rather than decoded into a new string.
    fn is(&self, raw: Raw<'_>, expected: &str) -> bool {
        let bytes = unescape(raw, &self.seps);
        if bytes.is_ascii() {
            *bytes == *expected.as_bytes()
        } else {
            self.charset.decode(&bytes) == expected
        }
    }

    /// A count such as UNT 0074: digits only, leading zeros allowed; the text found otherwise.
    fn count(&self, raw: Raw<'_>) -> Result<u64, CompactString> {
        let bytes = unescape(raw, &self.seps);
        let digits = !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit);
        let n = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse().ok());
        match n {
            Some(n) if digits => Ok(n),
            _ => Err(self.text(raw)),
        }
    }
}

impl Builder {
    pub(super) fn new(
        unb: &RawSegment<'_>,
        seps: Separators,
        start: usize,
        hash_buf: Vec<u8>,
    ) -> Self {
        let raw = segments::Unb::parse(unb.body, seps);
        let charset = Charset::for_syntax(&Charset::Latin1.decode(&unescape(raw.s001[0], &seps)));
        let v = Values { seps, charset };
        let parsed = Unb {
            syntax_id: v.text(raw.s001[0]),
            syntax_version: v.text(raw.s001[1]),
            sender: v.text(raw.s002[0]),
            sender_qualifier: v.opt(raw.s002[1]),
            sender_routing: v.opt(raw.s002[2]),
            recipient: v.text(raw.s003[0]),
            recipient_qualifier: v.opt(raw.s003[1]),
            recipient_routing: v.opt(raw.s003[2]),
            date: v.text(raw.s004[0]),
            time: v.text(raw.s004[1]),
            control_ref: v.text(raw.e0020),
            recipient_ref: v.opt(raw.s005[0]),
            application_ref: v.opt(raw.e0026),
            priority: v.opt(raw.e0029),
            ack_request: v.opt(raw.e0031),
            agreement_id: v.opt(raw.e0032),
            test_indicator: v.opt(raw.e0035),
        };
        let mut b = Builder {
            seps,
            charset,
            start,
            has_una: start != unb.offset,
            unb: parsed,
            groups: Vec::new(),
            messages: Vec::new(),
            message_refs: RefSet::default(),
            group_refs: RefSet::default(),
            open_message: None,
            open_group: None,
            segments: 0,
            hasher: SegmentHasher::new(hash_buf),
            first_error: None,
            context: None,
            empty_group: None,
        };
        // The same bytes under other service characters decode to other values (a `?+` is a
        // released `+` under `?`, data and a separator under `!`), so the characters in force
        // go into the hash, ahead of the segments, wherever they are not the level A defaults:
        // a UNA stating the defaults and no UNA still hash the same, as do the hashes stored
        // before. The decimal mark and the repetition separator are left out: the envelope never
        // uses them, and syntax version 4 has `*` for the latter whether a UNA says so or not.
        if let Some(preamble) = hash_preamble(&seps) {
            b.hasher.push_exact(&preamble);
        }
        if let Some(element) = raw.missing(&seps) {
            b.fail(unb.error(ErrorKind::MissingElement { element }));
        } else if !matches!(b.unb.syntax_version.as_str(), "1" | "2" | "3" | "4") {
            // 0002 is one digit, and ISO 9735 defines versions 1 to 4 only: another number is a
            // syntax this parser (and the partner's CONTRL reader) cannot be sure it reads.
            let found = b.unb.syntax_version.to_string();
            b.fail(unb.error(ErrorKind::UnsupportedSyntaxVersion { found }));
        }
        let u = &b.unb;
        let values = [
            &u.syntax_id,
            &u.syntax_version,
            &u.sender,
            &u.recipient,
            &u.date,
            &u.time,
            &u.control_ref,
        ];
        let optional = [
            &u.sender_qualifier,
            &u.sender_routing,
            &u.recipient_qualifier,
            &u.recipient_routing,
            &u.recipient_ref,
            &u.application_ref,
            &u.priority,
            &u.ack_request,
            &u.agreement_id,
            &u.test_indicator,
        ];
        if values.iter().any(|v| has_nul(v))
            || optional.iter().flat_map(|v| v.as_deref()).any(has_nul)
        {
            b.fail(unb.error(ErrorKind::NulByte));
        }
        b
    }

    fn fail(&mut self, e: EnvelopeError) {
        self.fail_in(e, None);
    }

    /// An error of `message`, one no longer open (taken off to be closed).
    fn fail_in(&mut self, e: EnvelopeError, message: Option<&Message>) {
        if self.first_error.is_none() {
            self.first_error = Some(e);
            self.context = Some(self.context_in(message));
        }
    }

    /// The interchange's envelope as far as it was read: its UNB, and the message and group
    /// open (or last closed) where an error was found.
    pub(super) fn context_now(&self) -> Box<RejectedContext> {
        self.context_in(None)
    }

    fn context_in(&self, message: Option<&Message>) -> Box<RejectedContext> {
        let message = message
            .or(self.open_message.as_ref().map(|o| &o.message))
            .or(self.messages.last());
        let group = self
            .open_group
            .or(self.groups.len().checked_sub(1))
            .and_then(|g| self.groups.get(g));
        Box::new(RejectedContext {
            unb: self.unb.clone(),
            separators: self.seps,
            has_una: self.has_una,
            group_ref: group.map(|g| g.reference.clone()),
            group_parties: group.map(Group::parties).unwrap_or_default(),
            message: message.map(|m| {
                (
                    m.reference.clone(),
                    [
                        m.message_type.clone(),
                        m.version.clone(),
                        m.release.clone(),
                        m.agency.clone(),
                        m.association_code.clone().unwrap_or_default(),
                    ],
                )
            }),
            message_types: self
                .messages
                .iter()
                .chain(self.open_message.as_ref().map(|o| &o.message))
                .map(|m| m.message_type.clone())
                .collect(),
        })
    }

    /// Inlined into the loop of `interchanges` (another module, so another codegen unit, where
    /// `#[inline]` alone left it a call per segment: 1.5% of the parse).
    #[inline(always)]
    pub(super) fn hash(&mut self, data: &[u8], seg: &RawSegment<'_>) {
        self.segments += 1;
        if seg.has_line_breaks {
            self.hash_wrapped(seg);
        } else {
            self.hasher.push(data, seg.offset, seg.end());
        }
    }

    /// The segment without the line breaks a transport put inside it.
    #[cold]
    fn hash_wrapped(&mut self, seg: &RawSegment<'_>) {
        let seps = self.seps;
        for piece in seg.body.split(|b| seps.is_line_break(*b)) {
            self.hasher.push_exact(piece);
        }
        self.hasher.push_exact(&[self.seps.terminator]);
    }

    fn values(&self) -> Values {
        Values {
            seps: self.seps,
            charset: self.charset,
        }
    }

    /// Any segment but the UNB and the UNZ.
    pub(super) fn segment(&mut self, seg: &RawSegment<'_>) {
        match seg.tag {
            Tag::UNB => {} // the first segment, read by `new`
            Tag::UNH => self.unh(seg),
            Tag::UNT => self.unt(seg),
            Tag::UNG => self.ung(seg),
            Tag::UNE => self.une(seg),
            _ => match &mut self.open_message {
                Some(m) => m.message.segments += 1,
                // Security headers and trailers (ISO 9735-5) may enclose groups and messages.
                None if seg.tag.0.starts_with(b"US") => {}
                None => self.fail(seg.error(ErrorKind::OutsideMessage)),
            },
        }
    }

    fn unh(&mut self, seg: &RawSegment<'_>) {
        let raw = segments::Unh::parse(seg.body, self.seps);
        let v = self.values();
        let reference = v.text(raw.e0062);
        if let Some(open) = self.open_message.take() {
            let e = seg.error(ErrorKind::UnhWithoutUnt {
                reference: reference.to_string(),
                open: open.message.reference.to_string(),
            });
            self.fail_in(e, Some(&open.message));
        }
        if self.open_group.is_none() && !self.groups.is_empty() {
            self.fail(seg.error(ErrorKind::MixedGroups));
        }
        if let Some(element) = raw.missing(&self.seps) {
            self.fail(seg.error(ErrorKind::MissingElement { element }));
        } else if !self.message_refs.insert(reference.clone()) {
            let group = self
                .open_group
                .map(|g| self.groups[g].reference.to_string());
            self.fail(seg.error(ErrorKind::DuplicateMessage {
                reference: reference.to_string(),
                group,
            }));
        }
        let message = Message {
            reference,
            message_type: v.text(raw.s009[0]),
            version: v.text(raw.s009[1]),
            release: v.text(raw.s009[2]),
            agency: v.text(raw.s009[3]),
            association_code: v.opt(raw.s009[4]),
            segments: 1,
            group: self.open_group,
            span: 0..0,
            number: seg.number,
        };
        let m = &message;
        if [
            &m.reference,
            &m.message_type,
            &m.version,
            &m.release,
            &m.agency,
        ]
        .iter()
        .any(|v| has_nul(v))
            || m.association_code.as_deref().is_some_and(has_nul)
        {
            self.fail(seg.error(ErrorKind::NulByte));
        }
        self.open_message = Some(OpenMessage {
            message,
            offset: seg.offset,
        });
    }

    fn unt(&mut self, seg: &RawSegment<'_>) {
        let Some(OpenMessage {
            mut message,
            offset,
        }) = self.open_message.take()
        else {
            self.fail(seg.error(ErrorKind::UntWithoutUnh));
            return;
        };
        message.segments += 1;
        let t = segments::unt(seg.body, self.seps);
        let v = self.values();
        // Reported with the message, which is no longer open.
        let count = match v.count(t.count) {
            Ok(n) if n == message.segments as u64 => None,
            Ok(_) => Some(seg.error(ErrorKind::UntCount {
                declared: v.text(t.count).into(),
                actual: message.segments,
            })),
            Err(found) => Some(seg.error(ErrorKind::BadCount {
                element: "segment count (0074)",
                found: found.into(),
            })),
        };
        let reference = (!v.is(t.reference, &message.reference)).then(|| {
            seg.error(ErrorKind::UntReference {
                found: v.text(t.reference).into(),
                expected: message.reference.to_string(),
            })
        });
        for e in [count, reference].into_iter().flatten() {
            self.fail_in(e, Some(&message));
        }
        if let Some(g) = message.group.and_then(|g| self.groups.get_mut(g)) {
            g.messages += 1;
        }
        message.span = offset - self.start..seg.end() - self.start;
        self.messages.push(message);
    }

    fn close_open_message(&mut self, seg: &RawSegment<'_>) {
        if let Some(open) = self.open_message.take() {
            let e = seg.error(ErrorKind::MessageNotClosed {
                open: open.message.reference.to_string(),
            });
            self.fail_in(e, Some(&open.message));
        }
    }

    fn ung(&mut self, seg: &RawSegment<'_>) {
        self.close_open_message(seg);
        let raw = segments::Ung::parse(seg.body, self.seps);
        let v = self.values();
        let reference = v.text(raw.e0048);
        if let Some(open) = self.open_group.take() {
            let open = self.groups[open].reference.clone();
            self.fail(seg.error(ErrorKind::UngWithoutUne {
                reference: reference.to_string(),
                open: open.into(),
            }));
        }
        if !self.messages.is_empty() && self.groups.is_empty() {
            self.fail(seg.error(ErrorKind::MixedGroups));
        }
        if let Some(element) = raw.missing(&self.seps) {
            self.fail(seg.error(ErrorKind::MissingElement { element }));
        } else if !self.group_refs.insert(reference.clone()) {
            self.fail(seg.error(ErrorKind::DuplicateGroup {
                reference: reference.to_string(),
            }));
        }
        // ISO 9735: a message reference is unique within its group where groups are used
        // (and within the interchange otherwise); each group numbers its messages afresh.
        self.message_refs.clear();
        if has_nul(&reference) {
            self.fail(seg.error(ErrorKind::NulByte));
        }
        self.groups.push(Group {
            reference,
            group_id: v.opt(raw.e0038),
            sender: v.opt(raw.s006[0]),
            sender_qualifier: v.opt(raw.s006[1]),
            recipient: v.opt(raw.s007[0]),
            recipient_qualifier: v.opt(raw.s007[1]),
            messages: 0,
        });
        self.open_group = Some(self.groups.len() - 1);
    }

    fn une(&mut self, seg: &RawSegment<'_>) {
        self.close_open_message(seg);
        let Some(open) = self.open_group.take() else {
            self.fail(seg.error(ErrorKind::UneWithoutUng));
            return;
        };
        let actual = self.groups[open].messages;
        let t = segments::une(seg.body, self.seps);
        let v = self.values();
        if actual == 0 && self.empty_group.is_none() {
            let e = seg.error(ErrorKind::LowerLevelEmpty { what: "group" });
            self.empty_group = Some((e, self.context_in(None)));
        }
        match v.count(t.count) {
            Ok(n) if n == actual as u64 => {}
            Ok(_) => self.fail(seg.error(ErrorKind::UneCount {
                declared: v.text(t.count).into(),
                actual,
            })),
            Err(found) => self.fail(seg.error(ErrorKind::BadCount {
                element: "number of messages (0060)",
                found: found.into(),
            })),
        }
        if !v.is(t.reference, &self.groups[open].reference) {
            let expected = self.groups[open].reference.clone();
            self.fail(seg.error(ErrorKind::UneReference {
                found: v.text(t.reference).into(),
                expected: expected.into(),
            }));
        }
    }

    pub(super) fn unz(&mut self, seg: &RawSegment<'_>) {
        self.close_open_message(seg);
        // Groups, and not one message in any of them: the first empty group is the error,
        // unless one stands before it (an error after it, recorded while the group's fate was
        // open, is not the first).
        if self.messages.is_empty()
            && let Some((e, context)) = self.empty_group.take()
            && self
                .first_error
                .as_ref()
                .is_none_or(|f| f.offset > e.offset)
        {
            self.first_error = Some(e);
            self.context = Some(context);
        }
        if let Some(open) = self.open_group.take() {
            let open = self.groups[open].reference.clone();
            self.fail(seg.error(ErrorKind::GroupNotClosed { open: open.into() }));
        }
        let (actual, what) = if self.groups.is_empty() {
            (self.messages.len(), ("message", "messages"))
        } else {
            (self.groups.len(), ("group", "groups"))
        };
        let t = segments::unz(seg.body, self.seps);
        let v = self.values();
        if actual == 0 {
            self.fail(seg.error(ErrorKind::LowerLevelEmpty {
                what: "interchange",
            }));
        }
        match v.count(t.count) {
            Ok(n) if n == actual as u64 => {}
            Ok(_) => self.fail(seg.error(ErrorKind::UnzCount {
                declared: v.text(t.count).into(),
                actual,
                what,
            })),
            Err(found) => self.fail(seg.error(ErrorKind::BadCount {
                element: "interchange control count (0036)",
                found: found.into(),
            })),
        }
        if !v.is(t.reference, &self.unb.control_ref) {
            let expected = self.unb.control_ref.clone();
            self.fail(seg.error(ErrorKind::UnzReference {
                found: v.text(t.reference).into(),
                expected: expected.into(),
            }));
        }
    }

    /// The interchange, or its first error; and the hash buffer, for the next interchange.
    pub(super) fn finish<'a>(
        self,
        raw: &'a [u8],
    ) -> (Result<Interchange<'a>, EnvelopeError>, Vec<u8>) {
        if let Some(e) = self.first_error {
            return (Err(e), self.hasher.buf);
        }
        let (sha256, buf) = self.hasher.finalize();
        let interchange = Interchange {
            offset: self.start,
            raw: Cow::Borrowed(raw),
            separators: self.seps,
            has_una: self.has_una,
            unb: self.unb,
            groups: self.groups,
            messages: self.messages,
            segments: self.segments,
            sha256,
            standard: Standard::Edifact,
        };
        (Ok(interchange), buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edifact::interchanges;

    const ORDERS: &[u8] = b"UNB+UNOC:3+SENDER:14+RECIPIENT:14+240101:1200+REF1'\
UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'UNZ+1+REF1'";

    fn one(data: &[u8]) -> Interchange<'_> {
        let all: Vec<_> = interchanges(data).collect();
        assert_eq!(all.len(), 1, "{all:?}");
        all.into_iter().next().unwrap().unwrap()
    }

    fn err(data: &[u8]) -> EnvelopeError {
        interchanges(data)
            .find_map(Result::err)
            .expect("an envelope error")
    }

    fn replace(data: &[u8], from: &str, to: &str) -> Vec<u8> {
        String::from_utf8(data.to_vec())
            .unwrap()
            .replace(from, to)
            .into_bytes()
    }

    #[test]
    fn reads_the_envelope() {
        let i = one(ORDERS);
        assert_eq!(i.unb.sender, "SENDER");
        assert_eq!(i.unb.sender_qualifier.as_deref(), Some("14"));
        assert_eq!(i.unb.recipient, "RECIPIENT");
        assert_eq!(i.unb.control_ref, "REF1");
        assert_eq!(i.unb.syntax(), "UNOC:3");
        assert_eq!(i.unb.date, "240101");
        assert_eq!(i.unb.time, "1200");
        assert_eq!(i.messages.len(), 1);
        let m = &i.messages[0];
        assert_eq!(
            (m.reference.as_str(), m.message_type.as_str(), m.segments),
            ("1", "ORDERS", 3)
        );
        assert_eq!(
            &i.raw[m.span.clone()],
            b"UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'"
        );
        assert_eq!(i.segments, 5);
        assert_eq!(&*i.raw, ORDERS);
    }

    #[test]
    fn keys_are_unescaped() {
        let data = replace(ORDERS, "SENDER:14", "SEN?+DER?:X??:14");
        let data = String::from_utf8(data).unwrap().replace("REF1", "R?'1");
        let i = one(data.as_bytes());
        assert_eq!(i.unb.sender, "SEN+DER:X?");
        assert_eq!(i.unb.control_ref, "R'1");
    }

    #[test]
    fn text_is_decoded_by_syntax_identifier() {
        let data = replace(ORDERS, "SENDER", "M\u{fc}LLER");
        let latin1: Vec<u8> = String::from_utf8(data)
            .unwrap()
            .chars()
            .map(|c| c as u32 as u8)
            .collect();
        assert_eq!(one(&latin1).unb.sender, "MüLLER");
        let utf8 = replace(&replace(ORDERS, "UNOC", "UNOY"), "SENDER", "Łódź");
        assert_eq!(one(&utf8).unb.sender, "Łódź");
        let iata = replace(&replace(ORDERS, "UNOC:3", "IATA:1"), "SENDER", "1A");
        assert_eq!(one(&iata).unb.syntax(), "IATA:1");
    }

    #[test]
    fn several_interchanges_each_with_its_own_una() {
        let mut data = ORDERS.to_vec();
        data.extend_from_slice(b"\nUNA^|.! #UNB|UNOC^3|S2|R2|240101^1200|REF2#UNH|1|ORDERS^D^96A^UN#UNT|2|1#UNZ|1|REF2#\n");
        data.extend_from_slice(&replace(ORDERS, "REF1", "REF3"));
        let all: Vec<_> = interchanges(&data).collect::<Result<_, _>>().unwrap();
        let refs: Vec<_> = all.iter().map(|i| i.unb.control_ref.as_str()).collect();
        assert_eq!(refs, ["REF1", "REF2", "REF3"]);
        assert!(all[1].has_una && !all[2].has_una);
        assert_eq!(all[1].separators.terminator, b'#');
        assert_eq!(all[2].separators, Separators::LEVEL_A);
    }

    #[test]
    fn a_recoverable_error_does_not_stop_the_file() {
        let mut data = replace(ORDERS, "UNT+3", "UNT+4");
        data.extend_from_slice(&replace(ORDERS, "REF1", "REF2"));
        let all: Vec<_> = interchanges(&data).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(
            all[0].as_ref().unwrap_err().kind,
            ErrorKind::UntCount {
                declared: "4".into(),
                actual: 3
            }
        );
        assert_eq!(all[1].as_ref().unwrap().unb.control_ref, "REF2");
    }

    #[test]
    fn a_syntax_version_iso_9735_does_not_define_is_rejected_at_its_unb() {
        let mut data = ORDERS.to_vec();
        let second = data.len();
        data.extend_from_slice(&replace(
            &replace(ORDERS, "REF1", "REF2"),
            "UNOC:3",
            "UNOC:0",
        ));
        let all: Vec<_> = interchanges(&data).collect();
        assert_eq!(all[0].as_ref().unwrap().unb.syntax_version, "3");
        let e = all[1].as_ref().unwrap_err();
        assert_eq!(e.offset, second);
        assert_eq!(
            e.to_string(),
            format!(
                "UNB at byte {second} (segment 6) syntax version number (S001/0002) `0` is not one \
                 ISO 9735 defines (1 to 4)"
            )
        );
        for version in ["1", "2", "3", "4"] {
            let data = replace(ORDERS, "UNOC:3", &format!("UNOC:{version}"));
            assert_eq!(one(&data).unb.syntax_version, version);
        }
    }

    #[test]
    fn a_key_element_of_spaces_is_missing() {
        for (from, to, element) in [
            (
                "+SENDER:14",
                "+  :14",
                "interchange sender identification (0004)",
            ),
            (
                "+RECIPIENT:14",
                "+ :14",
                "interchange recipient identification (0010)",
            ),
            ("+REF1'", "+ '", "interchange control reference (0020)"),
        ] {
            let e = err(&replace(ORDERS, from, to));
            assert_eq!(e.kind, ErrorKind::MissingElement { element }, "{to}");
            assert_eq!(e.offset, 0);
        }
        // Spaces around a value are the partner's and stay part of it.
        assert_eq!(
            one(&replace(ORDERS, "+SENDER:14", "+ S :14")).unb.sender,
            " S "
        );
    }

    #[test]
    fn a_lexical_error_stops_the_file() {
        let mut data = ORDERS.to_vec();
        data.extend_from_slice(b"XX+1'");
        data.extend_from_slice(ORDERS);
        let all: Vec<_> = interchanges(&data).collect();
        assert_eq!(all.len(), 2);
        assert!(all[0].is_ok());
        assert!(matches!(
            all[1].as_ref().unwrap_err().kind,
            ErrorKind::BadTag { .. }
        ));
    }

    #[test]
    fn each_rule_has_its_own_error() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (replace(ORDERS, "UNT+3+1", "UNT+2+1"), "unt-count"),
            (replace(ORDERS, "UNT+3+1", "UNT+3+9"), "unt-reference"),
            (replace(ORDERS, "UNT+3+1", "UNT+three+1"), "bad-count"),
            (replace(ORDERS, "UNT+3+1", "UNT++1"), "bad-count"),
            (replace(ORDERS, "UNT+3+1", "UNT+?+3+1"), "bad-count"),
            (replace(ORDERS, "UNZ+1", "UNZ+2"), "unz-count"),
            (replace(ORDERS, "UNZ+1+REF1", "UNZ+1+REF9"), "unz-reference"),
            (replace(ORDERS, "+REF1'", "+'"), "missing-element"),
            (replace(ORDERS, "UNOC:3", "UNOC"), "missing-element"),
            (replace(ORDERS, "UNOC:3", ":3"), "missing-element"),
            (replace(ORDERS, "SENDER:14", "SEN\0DER:14"), "nul-byte"),
            (replace(ORDERS, "ORDERS:D", "ORD\0ERS:D"), "nul-byte"),
            (replace(ORDERS, "+SENDER:14", "+:14"), "missing-element"),
            (replace(ORDERS, "+SENDER:14", "+   :14"), "missing-element"),
            (replace(ORDERS, "+SENDER:14", "+? ? :14"), "missing-element"),
            (replace(ORDERS, "+RECIPIENT:14", "+ "), "missing-element"),
            (replace(ORDERS, "+REF1'", "+  '"), "missing-element"),
            (replace(ORDERS, "+RECIPIENT:14", "+"), "missing-element"),
            (replace(ORDERS, "UNH+1+", "UNH++"), "missing-element"),
            (replace(ORDERS, "UNH+1+ORDERS", "UNH+1+"), "missing-element"),
            (replace(ORDERS, "'UNH", "'FTX+X'UNH"), "outside-message"),
            (replace(ORDERS, "UNT+3+1'", ""), "unh-without-unt"),
            (
                replace(ORDERS, "BGM+220+PO1+9'", "BGM+220+PO1+9'UNH+2+X'"),
                "unh-without-unt",
            ),
            (replace(ORDERS, "'UNZ", "'UNT+1+1'UNZ"), "unt-without-unh"),
            (replace(ORDERS, "'UNZ", "'UNE+1+1'UNZ"), "une-without-ung"),
            (replace(ORDERS, "UNZ+1+REF1'", "UNZ+1+REF1"), "unterminated"),
            (replace(ORDERS, "UNZ+1+REF1'", ""), "missing-unz"),
            (
                replace(ORDERS, "UNZ+1+REF1'", "UNB+UNOC:3+S+R+1:1+2'"),
                "missing-unz",
            ),
            (
                replace(ORDERS, "UNZ+1+REF1'", "UNA:+.? 'UNB+UNOC:3+S+R+1:1+2'"),
                "missing-unz",
            ),
            (
                replace(ORDERS, "UNZ+1+REF1'", "UNZ+1+REF1?"),
                "dangling-release",
            ),
            (
                replace(ORDERS, "UNZ+1+REF1'", "UNZ+1+REF1'junk"),
                "trailing-data",
            ),
            (replace(ORDERS, "BGM+", "bgm+"), "bad-tag"),
            (b"UNA:+".to_vec(), "truncated-una"),
            (b"UNA::.? 'UNB".to_vec(), "bad-una"),
            (b"UNA:+.? '".to_vec(), "no-interchange"),
            (b"UNH+1+ORDERS:D:96A:UN'UNT+2+1'".to_vec(), "no-interchange"),
            (
                b"UNB+UNOC:3+S+R+1:1+X'UNZ+0+X'".to_vec(),
                "lower-level-empty",
            ),
            (
                b"UNB+UNOC:3+S+R+1:1+X'UNG+ORDERS+S+R+1:1+G1'UNE+0+G1'UNZ+1+X'".to_vec(),
                "lower-level-empty",
            ),
            (b"".to_vec(), "empty"),
            (b"\r\n \t".to_vec(), "empty"),
        ];
        let versions = ["UNOC:0", "UNOC:5", "UNOC:03", "UNOC:x"]
            .map(|v| (replace(ORDERS, "UNOC:3", v), "unsupported-syntax-version"));
        for (data, code) in cases.into_iter().chain(versions) {
            let e = err(&data);
            assert_eq!(e.code(), code, "{} -> {e}", String::from_utf8_lossy(&data));
        }
    }

    #[test]
    fn groups_are_counted_and_checked() {
        let grouped = b"UNB+UNOC:3+S+R+240101:1200+G'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNE+2+G1'\
UNG+ORDERS+S+R+240101:1200+G2+UN+D:96A'UNH+3+ORDERS:D:96A:UN'UNT+2+3'UNE+1+G2'UNZ+2+G'";
        let i = one(grouped);
        assert_eq!(i.groups.len(), 2);
        assert_eq!(i.groups[0].messages, 2);
        assert_eq!(i.messages[2].group, Some(1));
        let cases = [
            ("UNE+2+G1", "UNE+3+G1", "une-count"),
            ("UNE+2+G1", "UNE+2+GX", "une-reference"),
            ("UNZ+2+G", "UNZ+3+G", "unz-count"),
            ("+G2+", "+G1+", "duplicate-group-ref"),
            ("+G2+", "++", "missing-element"),
            ("UNE+1+G2'", "", "ung-without-une"),
            ("UNE+2+G1'", "", "ung-without-une"),
            (
                "UNG+ORDERS+S+R+240101:1200+G1",
                "UNH+0+X:D:1:UN'UNT+2+0'UNG+ORDERS+S+R+240101:1200+G1",
                "mixed-groups",
            ),
            (
                "UNE+1+G2'UNZ",
                "UNE+1+G2'UNH+4+X:D:1:UN'UNT+2+4'UNZ",
                "mixed-groups",
            ),
            ("UNT+2+3'UNE", "UNE", "unh-without-unt"),
        ];
        for (from, to, code) in cases {
            let e = err(&replace(grouped, from, to));
            assert_eq!(e.code(), code, "{from} -> {to}: {e}");
        }
        let e = err(&replace(
            ORDERS,
            "UNT+3+1'",
            "UNT+3+1'UNG+O+S+R+1:1+G1+UN+D:96A'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNE+1+G1'",
        ));
        assert_eq!(e.code(), "mixed-groups", "{e}");
    }

    /// An empty group (UNE 0060 `0`) beside groups that hold messages puts nothing at risk: the
    /// interchange is accepted with the group in it, which `empty_groups` names. Groups without
    /// any message in the interchange are rejected at the first empty group's UNE (0085 32 on
    /// its UCF), unless an error stands before it.
    #[test]
    fn an_empty_group_beside_groups_with_messages_is_accepted() {
        let three = b"UNB+UNOC:3+S+R+240101:1200+G'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNE+2+G1'\
UNG+INVOIC+A:ZZ+B:14+240101:1200+G2+UN+D:96A'UNE+0+G2'\
UNG+ORDERS+S+R+240101:1200+G3+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G3'UNZ+3+G'";
        let i = one(three);
        assert_eq!(i.groups.len(), 3);
        assert_eq!(i.messages.len(), 3);
        let empty: Vec<_> = i.empty_groups().map(|g| g.reference.as_str()).collect();
        assert_eq!(empty, ["G2"]);
        assert_eq!(i.messages[2].group, Some(2));
        // First or last, the same.
        let first = replace(three, "UNE+1+G3'", "UNE+1+G3'UNG+X+S+R+1:1+G4'UNE+0+G4'");
        let first = replace(&first, "UNZ+3", "UNZ+4");
        let empty: Vec<_> = one(&first)
            .empty_groups()
            .map(|g| g.reference.to_string())
            .collect();
        assert_eq!(empty, ["G2", "G4"]);
        // Its UNE is still checked.
        assert_eq!(
            err(&replace(three, "UNE+0+G2", "UNE+1+G2")).code(),
            "une-count"
        );
        assert_eq!(
            err(&replace(three, "UNE+0+G2", "UNE+0+GX")).code(),
            "une-reference"
        );
        assert_eq!(err(&replace(three, "UNZ+3", "UNZ+2")).code(), "unz-count");

        // No message in any group: rejected at the first empty group's UNE.
        let none = b"UNB+UNOC:3+S+R+240101:1200+G'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNE+0+G1'UNG+ORDERS+S+R+240101:1200+G2+UN+D:96A'UNE+0+G2'UNZ+2+G'";
        let at = |data: &[u8], needle: &str| {
            data.windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .unwrap()
        };
        let e = err(none);
        assert_eq!(
            (e.code(), e.offset),
            ("lower-level-empty", at(none, "UNE+0+G1"))
        );
        assert_eq!(
            e.to_string(),
            format!(
                "UNE at byte {} (segment 3) closes a group that holds no message",
                e.offset
            )
        );
        // What answers it names that group, for its UCF.
        let contexts = crate::edifact::rejected_contexts(none);
        assert_eq!(contexts[&e.offset].group_ref.as_deref(), Some("G1"));
        // An error after it (found first, the UNZ counting wrong) does not take its place; one
        // before it does.
        let e = err(&replace(none, "UNZ+2", "UNZ+5"));
        assert_eq!(e.code(), "lower-level-empty");
        let e = err(&replace(none, "+G1+UN+D:96A'", "+G1+UN+D:96A'FTX+X'"));
        assert_eq!(e.code(), "outside-message");
    }

    /// ISO 9735: with groups, a message reference is unique within its group; each group may
    /// number its messages from 1. Without groups, within the interchange.
    #[test]
    fn message_references_are_unique_within_their_group() {
        let grouped = b"UNB+UNOC:3+S+R+240101:1200+G'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNE+2+G1'\
UNG+ORDERS+S+R+240101:1200+G2+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G2'UNZ+2+G'";
        let i = one(grouped);
        let refs: Vec<_> = i.messages.iter().map(|m| m.reference.as_str()).collect();
        assert_eq!(refs, ["1", "2", "1"]);
        let e = err(&replace(
            grouped,
            "UNH+2+ORDERS:D:96A:UN'UNT+2+2'",
            "UNH+1+ORDERS:D:96A:UN'UNT+2+1'",
        ));
        assert_eq!(e.code(), "duplicate-message-ref");
        assert!(e.to_string().contains("within group G1"), "{e}");
        let e = err(&replace(
            ORDERS,
            "UNT+3+1'",
            "UNT+3+1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'",
        ));
        assert!(e.to_string().contains("within the interchange"), "{e}");
    }

    #[test]
    fn security_segments_may_stand_outside_messages() {
        let data = replace(ORDERS, "'UNH", "'USH+7+1+3+1+1+1'UNH");
        let data = replace(&data, "'UNZ", "'UST+1+1'UNZ");
        assert_eq!(one(&data).messages.len(), 1);
    }

    #[test]
    fn counts_may_have_leading_zeros() {
        let data = replace(&replace(ORDERS, "UNT+3", "UNT+0003"), "UNZ+1", "UNZ+01");
        one(&data);
    }

    #[test]
    fn byte_order_mark_and_padding_are_skipped() {
        let mut data = b"\xEF\xBB\xBF \r\n".to_vec();
        data.extend_from_slice(ORDERS);
        data.extend_from_slice(b"\r\n\r\n\t ");
        let i = one(&data);
        assert_eq!(i.offset, 6);
        assert_eq!(i.sha256, one(ORDERS).sha256);
    }

    #[test]
    fn level_b_is_read_without_una() {
        let data = String::from_utf8(ORDERS.to_vec())
            .unwrap()
            .replace('+', "\x1d")
            .replace(':', "\x1f")
            .replace('\'', "\x1c");
        let i = one(data.as_bytes());
        assert_eq!(i.separators, Separators::LEVEL_B);
        assert_eq!(i.unb.sender, "SENDER");
        // No release character at level B: '?' is data.
        let data = data.replace("PO1", "PO?1");
        assert_eq!(one(data.as_bytes()).messages.len(), 1);
    }

    #[test]
    fn error_offsets_and_segment_numbers_point_at_the_segment() {
        let data = replace(ORDERS, "UNT+3", "UNT+4");
        let e = err(&data);
        let at = data.windows(3).position(|w| w == b"UNT").unwrap();
        assert_eq!(e.offset, at);
        assert_eq!(e.segment, Some(4));
        assert_eq!(e.tag, Some(Tag::UNT));
        assert_eq!(
            e.to_string(),
            format!("UNT at byte {at} (segment 4) counts 4 segments; the message has 3")
        );
    }

    #[test]
    fn the_first_error_is_reported_even_when_the_file_ends_early() {
        let data = replace(ORDERS, "UNT+3", "UNT+4");
        let data = replace(&data, "UNZ+1+REF1'", "");
        assert_eq!(err(&data).code(), "unt-count");
        assert_eq!(interchanges(&data).count(), 1);
    }
}
