//! The interchanges of an input, whatever their standard: each one starting `ISA` is read by
//! the ANSI X12 reader ([`crate::x12`]), each starting `UNA` or `UNB` by the EDIFACT parser
//! ([`crate::edifact`]), and both come out in one model ([`edifact::Interchange`], with its
//! [`Standard`]) and one error ([`EnvelopeError`]), so that whatever brought the input
//! (`ingest`, `consume`, `receive`, `inspect`) decides, stores and reports either alike.
//!
//! A file may mix the standards: after an X12 interchange's IEA the next may be EDIFACT, and
//! after an EDIFACT UNZ the next may be X12; each is read by its own reader, at its own offset.
//! What begins no interchange of either is an error of the reader of the interchange before it
//! (or, at the start, of EDIFACT's, whose `expected UNA or UNB` names both kinds of start).
//!
//! Pure, over `&[u8]`, as the two readers are. Where a new thing goes: a third standard, a
//! reader beside `edifact/` and `x12/`, its start told apart in [`Interchanges::next`], its
//! interchange made into the model in a function like [`from_x12`].

use compact_str::CompactString;

use crate::edifact::{self, EnvelopeError, ErrorKind, Tag};
use crate::standard::Standard;
use crate::x12;

/// A UTF-8 byte-order mark, which either reader skips before the first segment.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads the interchanges of `data`, of either standard, one after another. Each yields its
/// interchange, or the first envelope error within it; after an error that leaves the structure
/// intact, the next interchange is read.
pub fn interchanges(data: &[u8]) -> Interchanges<'_> {
    let reader = if starts_x12(data) {
        Reader::X12(x12::interchanges(data))
    } else {
        Reader::Edifact(edifact::interchanges(data))
    };
    Interchanges { data, reader }
}

/// True where the first interchange of `data` is an ANSI X12 one (after a byte-order mark and
/// white space).
pub fn starts_x12(data: &[u8]) -> bool {
    let mut pos = if data.starts_with(BOM) { BOM.len() } else { 0 };
    while data
        .get(pos)
        .is_some_and(|b| matches!(b, b'\r' | b'\n' | b' ' | b'\t'))
    {
        pos += 1;
    }
    x12::starts_interchange(data, pos)
}

/// Iterator returned by [`interchanges`].
pub struct Interchanges<'a> {
    data: &'a [u8],
    reader: Reader<'a>,
}

enum Reader<'a> {
    Edifact(edifact::Interchanges<'a>),
    X12(x12::Interchanges<'a>),
    Done,
}

impl<'a> Iterator for Interchanges<'a> {
    type Item = Result<edifact::Interchange<'a>, EnvelopeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let handover = match &mut self.reader {
                Reader::Edifact(r) => match r.next() {
                    Some(item) => return Some(item),
                    None => r
                        .handover()
                        .map(|at| Reader::X12(x12::interchanges_from(self.data, at))),
                },
                Reader::X12(r) => match r.next() {
                    Some(item) => return Some(item.map(from_x12).map_err(error_of)),
                    None => r
                        .handover()
                        .map(|at| Reader::Edifact(edifact::interchanges_from(self.data, at))),
                },
                Reader::Done => return None,
            };
            self.reader = handover.unwrap_or(Reader::Done);
        }
    }
}

impl Interchanges<'_> {
    /// What was read of the interchange of the error just returned, by the reader of its
    /// standard, where it read the interchange's header (UNB, ISA); taken, so asked once.
    pub fn take_context(&mut self) -> Option<RejectedContext> {
        match &mut self.reader {
            Reader::Edifact(r) => r.take_context().map(RejectedContext::Edifact),
            Reader::X12(r) => r.take_context().map(|c| {
                RejectedContext::X12(Box::new(X12Rejected {
                    unb: unb_of(&c.isa),
                    read: *c,
                }))
            }),
            Reader::Done => None,
        }
    }
}

/// What the reader of its standard had read of a rejected interchange: enough to key its
/// rejection and to answer it (a CONTRL, a TA1 or a 997/999).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectedContext {
    Edifact(Box<edifact::RejectedContext>),
    X12(Box<X12Rejected>),
}

/// What the X12 reader had read of a rejected interchange, with its ISA in the model both
/// standards share (see [`from_x12`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X12Rejected {
    pub unb: edifact::Unb,
    pub read: x12::RejectedContext,
}

impl RejectedContext {
    pub fn standard(&self) -> Standard {
        match self {
            RejectedContext::Edifact(_) => Standard::Edifact,
            RejectedContext::X12(_) => Standard::X12,
        }
    }

    /// Its header in the shared model: the key its rejection is stored under and whose
    /// counter numbers its answer.
    pub fn unb(&self) -> &edifact::Unb {
        match self {
            RejectedContext::Edifact(c) => &c.unb,
            RejectedContext::X12(r) => &r.unb,
        }
    }
}

/// What each rejected interchange of `data`, of either standard, had read before its error
/// (where its UNB or ISA was read), by the byte offset of the error. Parses `data` again,
/// once however many errors it holds.
pub fn rejected_contexts(data: &[u8]) -> std::collections::HashMap<usize, RejectedContext> {
    let mut found = std::collections::HashMap::new();
    let mut all = interchanges(data);
    while let Some(item) = all.next() {
        if let Err(e) = item
            && let Some(c) = all.take_context()
        {
            found.entry(e.offset).or_insert(c);
        }
    }
    found
}

/// What an X12 interchange's model states as its syntax identifier (EDIFACT's 0001 place).
pub const X12_SYNTAX_ID: &str = "X12";

/// An X12 interchange in the model both standards share: ISA06/ISA08/ISA13 as the key's
/// sender, recipient and control reference (ISA05/ISA07 beside them as the qualifiers), ISA15
/// `T` as a test interchange (as EDIFACT's 0035 `1`), each functional group (GS) a group and
/// each transaction set (ST) a message of type ST01 (`850`), version GS08 (`004010`), agency
/// GS07 and association ST03.
pub fn from_x12(i: x12::Interchange<'_>) -> edifact::Interchange<'_> {
    let separators = separators_of(i.separators);
    let unb = unb_of(&i.isa);
    let groups = i
        .groups
        .iter()
        .map(|g| edifact::Group {
            reference: g.control_number.clone(),
            group_id: Some(g.functional_id.clone()),
            sender: Some(g.application_sender.clone()),
            sender_qualifier: None,
            recipient: Some(g.application_receiver.clone()),
            recipient_qualifier: None,
            messages: g.sets,
        })
        .collect();
    let messages = i
        .sets
        .into_iter()
        .map(|s| {
            let group = i.groups.get(s.group);
            edifact::Message {
                reference: s.control_number,
                message_type: s.id,
                version: group.map(|g| g.version.clone()).unwrap_or_default(),
                release: CompactString::default(),
                agency: group.map(|g| g.agency.clone()).unwrap_or_default(),
                association_code: s.implementation,
                segments: s.segments,
                group: Some(s.group),
                span: s.span,
                number: s.number,
            }
        })
        .collect();
    edifact::Interchange {
        offset: i.offset,
        raw: i.raw,
        separators,
        has_una: false,
        unb,
        groups,
        messages,
        segments: i.segments,
        sha256: i.sha256,
        standard: Standard::X12,
    }
}

/// An X12 interchange's delimiters in the shared model: X12 has no release character (a
/// delimiter never stands in a value) and no decimal mark of its own.
pub fn separators_of(s: x12::Separators) -> edifact::Separators {
    edifact::Separators {
        component: s.component,
        element: s.element,
        decimal: b'.',
        release: None,
        repetition: s.repetition,
        terminator: s.terminator,
    }
}

/// An ISA in the shared model's place of a UNB: ISA06/ISA08/ISA13 as sender, recipient and
/// control reference, ISA05/ISA07 as their qualifiers, ISA15 `T` as a test interchange.
fn unb_of(isa: &x12::Isa) -> edifact::Unb {
    edifact::Unb {
        syntax_id: CompactString::const_new(X12_SYNTAX_ID),
        syntax_version: isa.version.clone(),
        sender: isa.sender.clone(),
        sender_qualifier: Some(isa.sender_qualifier.trim_end().into()),
        sender_routing: None,
        recipient: isa.receiver.clone(),
        recipient_qualifier: Some(isa.receiver_qualifier.trim_end().into()),
        recipient_routing: None,
        date: isa.date.clone(),
        time: isa.time.clone(),
        control_ref: isa.control_number.clone(),
        recipient_ref: None,
        application_ref: None,
        priority: None,
        // ISA14 `1` asks for a TA1: kept where EDIFACT's 0031 is (and stored as it is), read
        // by the answering policy for X12 alone, never as a request for a CONTRL.
        ack_request: isa.wants_ta1().then(|| CompactString::const_new("1")),
        agreement_id: None,
        test_indicator: isa.is_test().then(|| CompactString::const_new("1")),
    }
}

/// The segments of `raw` (one stored interchange of either standard), each with its
/// terminator, as they stand, for a person to set a drifted copy beside the applied one
/// segment by segment: an X12 one split at its own terminator (the byte after ISA16), an
/// EDIFACT one as [`edifact::quote::split_segments`] does. Never failing: an X12 interchange
/// whose ISA does not read is one piece, as it stands.
pub fn split_segments(raw: &[u8]) -> Vec<&[u8]> {
    if !starts_x12(raw) {
        return edifact::quote::split_segments(raw);
    }
    let terminator = match x12::interchanges(raw).next() {
        Some(Ok(i)) => Some(i.separators.terminator),
        _ => x12::rejected_contexts(raw)
            .into_values()
            .next()
            .map(|c| c.separators.terminator),
    };
    let Some(terminator) = terminator else {
        return vec![raw];
    };
    let mut pieces = Vec::new();
    let mut pos = if raw.starts_with(BOM) { BOM.len() } else { 0 };
    loop {
        while raw
            .get(pos)
            .is_some_and(|&b| b != terminator && matches!(b, b'\r' | b'\n' | b' ' | b'\t'))
        {
            pos += 1;
        }
        let Some(rest) = raw.get(pos..).filter(|r| !r.is_empty()) else {
            break;
        };
        match memchr::memchr(terminator, rest) {
            Some(k) => {
                pieces.push(&rest[..=k]);
                pos += k + 1;
            }
            None => {
                pieces.push(rest);
                break;
            }
        }
    }
    pieces
}

/// The segment of `data` that holds byte `offset`, for a person to read under a rejection
/// ([`edifact::quote::quote_at`]): split by the X12 delimiters where the last interchange
/// begun before it is an X12 one, else by EDIFACT's separators.
pub fn quote_at(data: &[u8], offset: usize) -> Option<edifact::quote::Quote> {
    match x12_separators_at(data, offset) {
        Some(seps) => edifact::quote::quote_with(data, offset, &|_| seps),
        None => edifact::quote::quote_at(data, offset),
    }
}

/// The delimiters of the X12 interchange that `offset` stands in (its ISA at or before it, after
/// any UNA or UNB), read from the ISA's fixed places; `None` where it stands in no X12 one.
fn x12_separators_at(data: &[u8], offset: usize) -> Option<edifact::Separators> {
    let head = data.get(..offset.saturating_add(3).min(data.len()))?;
    let isa = head
        .windows(4)
        .rposition(|w| &w[..3] == b"ISA" && !w[3].is_ascii_alphanumeric())?;
    let edifact = head.windows(3).rposition(|w| w == b"UNA" || w == b"UNB");
    if edifact.is_some_and(|e| e > isa) {
        return None;
    }
    // ISA is 106 bytes: its element separator the 4th, ISA16 the 105th, the terminator after.
    let isa = data.get(isa..isa + 106)?;
    Some(edifact::Separators {
        component: isa[104],
        element: isa[3],
        decimal: b'.',
        release: None,
        repetition: None,
        terminator: isa[105],
    })
}

/// An X12 envelope error as the error both standards share: its offset, segment and
/// identifier, and its kind as [`ErrorKind::X12`] with the X12 reader's code.
pub fn error_of(e: x12::X12Error) -> EnvelopeError {
    EnvelopeError {
        offset: e.offset,
        segment: e.segment,
        tag: e.tag.as_deref().and_then(Tag::x12),
        kind: ErrorKind::X12 {
            code: e.code(),
            detail: e.kind.to_string(),
            recoverable: e.is_recoverable(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An X12 interchange: one group of one 850, control number `n`.
    fn x12(n: u32) -> String {
        format!(
            "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *210101*1200*U*00401*{n:09}*0*T*>~\
             GS*PO*APPSEND*APPRECV*20210101*1200*7*X*004010~\
             ST*850*0001~BEG*00*SA*PO1**20210101~SE*3*0001~\
             GE*1*7~IEA*1*{n:09}~\n"
        )
    }

    fn edifact(r: &str) -> String {
        format!("UNB+UNOC:3+S+R+260101:1200+{r}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+{r}'\n")
    }

    #[test]
    fn an_x12_interchange_comes_out_in_the_shared_model() {
        let data = x12(42);
        let all: Vec<_> = interchanges(data.as_bytes()).collect();
        assert_eq!(all.len(), 1);
        let i = all[0].as_ref().expect("read");
        assert_eq!(i.standard, Standard::X12);
        assert_eq!(
            (
                i.unb.sender.as_str(),
                i.unb.recipient.as_str(),
                i.unb.control_ref.as_str()
            ),
            ("SENDER", "RECEIVER", "000000042")
        );
        assert_eq!(i.unb.sender_qualifier.as_deref(), Some("ZZ"));
        assert!(i.unb.is_test(), "ISA15 T is a test interchange");
        assert_eq!(i.unb.syntax(), "X12:00401");
        assert_eq!(i.groups.len(), 1);
        assert_eq!(i.groups[0].reference, "7");
        assert_eq!(i.groups[0].group_id.as_deref(), Some("PO"));
        assert_eq!(i.messages.len(), 1);
        let m = &i.messages[0];
        assert_eq!(
            (
                m.message_type.as_str(),
                m.reference.as_str(),
                m.version.as_str()
            ),
            ("850", "0001", "004010")
        );
        assert_eq!(&i.raw[m.span.clone()][..7], b"ST*850*");
        assert_eq!(i.separators.element, b'*');
        assert_eq!(i.separators.terminator, b'~');
        assert_eq!(i.separators.release, None);
    }

    #[test]
    fn a_file_mixing_the_standards_is_read_by_each_reader_in_turn() {
        let data = format!("{}{}{}{}", x12(1), edifact("E1"), x12(2), edifact("E2"));
        let keys: Vec<(Standard, String, usize)> = interchanges(data.as_bytes())
            .map(|i| {
                let i = i.expect("each interchange reads");
                (i.standard, i.unb.control_ref.to_string(), i.offset)
            })
            .collect();
        let x = x12(1).len();
        let e = edifact("E1").len();
        assert_eq!(
            keys,
            vec![
                (Standard::X12, "000000001".into(), 0),
                (Standard::Edifact, "E1".into(), x),
                (Standard::X12, "000000002".into(), x + e),
                (Standard::Edifact, "E2".into(), 2 * x + e),
            ]
        );
    }

    /// A transport's fixed-width wrap falls where it falls: inside the tag of a later
    /// interchange (`IS⏎A`), between `ISA` and its element separator, or inside `UNB`. At
    /// every width from 40 to 100 columns, with CRLF and LF, a file of the two standards in
    /// turn reads as unwrapped, each interchange with the same hash.
    #[test]
    fn a_wrap_inside_a_later_interchanges_tag_is_a_wrap() {
        let data = format!("{}{}{}{}", x12(1), edifact("E1"), x12(2), x12(3)).replace('\n', "");
        let unwrapped: Vec<(Standard, String, [u8; 32])> = interchanges(data.as_bytes())
            .map(|i| {
                let i = i.expect("each interchange reads unwrapped");
                (i.standard, i.unb.control_ref.to_string(), i.sha256)
            })
            .collect();
        assert_eq!(unwrapped.len(), 4);
        let mut split_tags = 0;
        for eol in ["\r\n", "\n"] {
            for width in 40..=100 {
                let lines: Vec<&str> = data
                    .as_bytes()
                    .chunks(width)
                    .map(|c| std::str::from_utf8(c).expect("ASCII"))
                    .collect();
                let wrapped = lines.join(eol) + eol;
                split_tags += ["I{eol}SA", "IS{eol}A", "ISA{eol}*", "U{eol}NB", "UN{eol}B"]
                    .iter()
                    .filter(|t| wrapped.contains(&t.replace("{eol}", eol)))
                    .count();
                let read: Vec<(Standard, String, [u8; 32])> = interchanges(wrapped.as_bytes())
                    .map(|i| {
                        let i = i.unwrap_or_else(|e| panic!("wrapped at {width} ({eol:?}): {e}"));
                        (i.standard, i.unb.control_ref.to_string(), i.sha256)
                    })
                    .collect();
                assert_eq!(read, unwrapped, "wrapped at {width} ({eol:?})");
            }
        }
        assert!(
            split_tags >= 10,
            "the widths split tags of later interchanges ({split_tags} times)"
        );
    }

    /// A line break where the element separator belongs, before the ISA's first element, is
    /// still no separator.
    #[test]
    fn a_line_break_before_the_first_isa_element_is_no_separator() {
        let data = x12(1).replacen("ISA*00*", "ISA\n00*", 1);
        let e = interchanges(data.as_bytes())
            .next()
            .expect("one")
            .expect_err("a line break is no element separator");
        assert_eq!(e.code(), "bad-separator", "{e}");
        assert_eq!(e.offset, 0);
    }

    /// A drifted copy is set beside the applied one segment by segment, whichever the
    /// standard: an X12 interchange is split at its own terminator, never at EDIFACT's `'`.
    #[test]
    fn an_interchange_splits_into_its_segments_by_its_own_terminator() {
        let data = x12(7).replace("PO1", "PO'1");
        let pieces: Vec<&str> = split_segments(data.as_bytes())
            .into_iter()
            .map(|p| std::str::from_utf8(p).expect("ASCII"))
            .collect();
        assert_eq!(pieces.len(), 7, "{pieces:?}");
        assert!(pieces[0].starts_with("ISA*00*") && pieces[0].ends_with(">~"));
        assert_eq!(pieces[3], "BEG*00*SA*PO'1**20210101~");
        assert_eq!(pieces[6], "IEA*1*000000007~");
        let wrapped = data.replace("~", "~\r\n");
        assert_eq!(
            split_segments(wrapped.as_bytes()).len(),
            7,
            "line breaks between segments are no segment"
        );
        let e = edifact("E1");
        assert_eq!(
            split_segments(e.as_bytes()),
            edifact::quote::split_segments(e.as_bytes())
        );
    }

    #[test]
    fn an_x12_error_keeps_its_offset_code_and_tag() {
        let good = x12(1);
        let bad = x12(2).replace("SE*3*0001", "SE*4*0001");
        let data = format!("{good}{bad}{}", x12(3));
        let all: Vec<_> = interchanges(data.as_bytes()).collect();
        assert_eq!(all.len(), 3, "a wrong count is read past: {all:?}");
        let e = all[1].as_ref().expect_err("SE01 counts 4");
        assert_eq!(e.code(), "se-count");
        assert!(e.is_recoverable());
        assert_eq!(e.tag.map(|t| t.to_string()).as_deref(), Some("SE"));
        let se = data.find("SE*4*").expect("the wrong SE");
        assert_eq!(e.offset, se);
        assert!(
            e.to_string()
                .starts_with(&format!("SE at byte {se} (segment ")),
            "{e}"
        );
        assert!(all[2].is_ok());
    }

    #[test]
    fn what_begins_no_interchange_after_an_x12_one_is_its_readers_error() {
        let data = format!("{}garbage~", x12(1));
        let all: Vec<_> = interchanges(data.as_bytes()).collect();
        assert_eq!(all.len(), 2);
        assert_eq!(
            all[1].as_ref().expect_err("garbage").code(),
            "data-after-iea"
        );
    }

    #[test]
    fn a_rejection_in_an_x12_interchange_is_quoted_by_its_own_delimiters() {
        let data = format!(
            "{}{}",
            edifact("E1"),
            x12(2).replace("SE*3*0001", "SE*4*0001")
        );
        let at = data.find("SE*4").expect("the wrong SE");
        let q = quote_at(data.as_bytes(), at).expect("a quote");
        assert_eq!(q.text, "SE*4*0001~");
        assert_eq!(q.column, 0);
        let at = data.find("UNH").expect("UNH");
        let q = quote_at(data.as_bytes(), at).expect("a quote");
        assert_eq!(q.text, "UNH+1+ORDERS:D:96A:UN'");
    }

    #[test]
    fn a_bom_and_white_space_before_an_x12_interchange_are_skipped() {
        let data = format!("\u{feff}\r\n  {}", x12(5));
        assert!(starts_x12(data.as_bytes()));
        let i = interchanges(data.as_bytes())
            .next()
            .expect("one")
            .expect("read");
        assert_eq!(i.standard, Standard::X12);
        assert!(!starts_x12(edifact("E").as_bytes()));
    }

    #[test]
    fn a_rejected_interchange_of_either_standard_has_its_context_under_its_standard() {
        let bad_edifact = edifact("E1").replace("UNT+2+1", "UNT+3+1");
        let bad_x12 = x12(9).replace("SE*3*0001", "SE*4*0001");
        let data = format!("{bad_edifact}{bad_x12}");
        let contexts = rejected_contexts(data.as_bytes());
        assert_eq!(contexts.len(), 2, "{contexts:?}");
        let e = &contexts[&data.find("UNT+3").expect("UNT")];
        assert_eq!(e.standard(), Standard::Edifact);
        assert_eq!(e.unb().control_ref, "E1");
        let x = &contexts[&data.find("SE*4").expect("SE")];
        assert_eq!(x.standard(), Standard::X12);
        assert_eq!(
            (x.unb().sender.as_str(), x.unb().control_ref.as_str()),
            ("SENDER", "000000009")
        );
        assert_eq!(
            x.unb().syntax_id,
            X12_SYNTAX_ID,
            "its answers counted apart"
        );
        let RejectedContext::X12(r) = x else {
            panic!("an X12 context: {x:?}")
        };
        assert_eq!(r.read.ack, x12::AckCode::Set("4"));
    }
}
