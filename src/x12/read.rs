//! Reading the interchanges of some data one after another: the fixed-width ISA and its
//! delimiters, then segments up to the IEA, each envelope rule checked as it is read.

use std::borrow::Cow;

use compact_str::CompactString;

use crate::segment_hash::SegmentHasher;

use super::error::{AckCode, ErrorKind, X12Error, show_byte, show_bytes};
use super::model::{Group, Interchange, Isa, RejectedContext, Separators, TransactionSet};

/// A UTF-8 byte-order mark, passed over before the first interchange.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The widths X12.5 fixes for ISA01 to ISA16.
const ISA_WIDTHS: [usize; 16] = [2, 10, 2, 10, 2, 15, 2, 15, 6, 4, 1, 5, 9, 1, 1, 1];

/// How far an ISA may run before its 15th element separator: 106 bytes unwrapped, more with
/// the line breaks of a transport's wrapping, never the rest of a large file.
const ISA_MAX_SPAN: usize = 250;

/// Reads the X12 interchanges of `data`, from its start.
///
/// Yields each interchange, or the first envelope error within it. After an error that leaves
/// the structure intact (a count or a control number that does not match) it reads on to the
/// interchange's IEA and goes on with the next; after one that does not, it stops. Where the
/// next thing after an IEA is the start of a UN/EDIFACT interchange (`UNA` or `UNB`) it stops
/// too, and [`Interchanges::handover`] says where, for a reader of that standard to go on.
pub fn interchanges(data: &[u8]) -> Interchanges<'_> {
    interchanges_from(data, 0)
}

/// As [`interchanges`], from byte `start` of `data` (offsets stay those of `data`).
pub fn interchanges_from(data: &[u8], start: usize) -> Interchanges<'_> {
    Interchanges {
        data,
        pos: start,
        segment_number: 0,
        read_any: false,
        done: false,
        handover: None,
        context: None,
        spare: Vec::new(),
    }
}

/// True where `data` at `pos` (after white space) starts an X12 interchange: `ISA`, with any
/// line breaks of a transport's wrapping between its letters (a VAN's 80-column wrap falls
/// where it falls, also inside the tag of a file's second interchange).
pub fn starts_interchange(data: &[u8], pos: usize) -> bool {
    tag_end(data, pos, b"ISA").is_some()
}

/// Where `tag` ends when it stands at `pos` of `data`, line breaks between its bytes passed
/// over; `None` where it does not stand there.
pub fn tag_end(data: &[u8], pos: usize, tag: &[u8]) -> Option<usize> {
    let mut q = pos;
    for (k, &b) in tag.iter().enumerate() {
        if k > 0 {
            q = skip_line_breaks(data, q);
        }
        if data.get(q) != Some(&b) {
            return None;
        }
        q += 1;
    }
    Some(q)
}

fn skip_line_breaks(data: &[u8], mut q: usize) -> usize {
    while data.get(q).is_some_and(|b| matches!(b, b'\r' | b'\n')) {
        q += 1;
    }
    q
}

/// Iterator returned by [`interchanges`].
#[derive(Debug, Clone)]
pub struct Interchanges<'a> {
    data: &'a [u8],
    pos: usize,
    /// Number of the last segment read, counted from the start of the reading.
    segment_number: usize,
    read_any: bool,
    done: bool,
    handover: Option<usize>,
    /// What was read of the interchange of the last error returned, where its ISA was.
    context: Option<Box<RejectedContext>>,
    /// The hash buffer of the last interchange, handed to the next rather than made anew.
    spare: Vec<u8>,
}

impl Interchanges<'_> {
    /// Where an interchange of another standard starts, after the last X12 one: the reading
    /// stopped there.
    pub fn handover(&self) -> Option<usize> {
        self.handover
    }

    /// What was read of the interchange of the error just returned (its ISA, the group and the
    /// set the error stands in), where its ISA was read; taken, so asked once per error.
    pub fn take_context(&mut self) -> Option<Box<RejectedContext>> {
        self.context.take()
    }
}

/// What the reader had read of each rejected interchange of `data` whose ISA it read, by the
/// byte offset of the error: for answering rejected interchanges and keying their rejections.
pub fn rejected_contexts(data: &[u8]) -> std::collections::HashMap<usize, RejectedContext> {
    let mut found = std::collections::HashMap::new();
    let mut all = interchanges(data);
    while let Some(item) = all.next() {
        if let Err(e) = item
            && let Some(c) = all.take_context()
        {
            found.entry(e.offset).or_insert(*c);
        }
    }
    found
}

impl<'a> Iterator for Interchanges<'a> {
    type Item = Result<Interchange<'a>, X12Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.context = None;
        if self.done {
            return None;
        }
        let d = self.data;
        if self.pos == 0 && d.starts_with(BOM) {
            self.pos = BOM.len();
        }
        while self.pos < d.len() && matches!(d[self.pos], b'\r' | b'\n' | b' ' | b'\t') {
            self.pos += 1;
        }
        if self.pos >= d.len() {
            self.done = true;
            return (!self.read_any)
                .then(|| Err(X12Error::at(self.pos, d.len(), ErrorKind::Empty)));
        }
        let rest = &d[self.pos..];
        if !starts_interchange(d, self.pos) {
            self.done = true;
            if tag_end(d, self.pos, b"UNA").is_some() || tag_end(d, self.pos, b"UNB").is_some() {
                self.handover = Some(self.pos);
                return None;
            }
            let end = d[self.pos..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(d.len(), |k| self.pos + k + 1);
            let found = show_bytes(&rest[..rest.len().min(16)]);
            let kind = if self.read_any {
                ErrorKind::DataAfterIea { found }
            } else {
                ErrorKind::NoInterchange { found }
            };
            return Some(Err(X12Error::at(self.pos, end, kind)));
        }
        self.read_any = true;
        let start = self.pos;
        let mut reader = Reader {
            d,
            start,
            segment_number: self.segment_number,
            hash: SegmentHasher::new(std::mem::take(&mut self.spare)),
        };
        let mut context = None;
        let result = reader.interchange(&mut context);
        self.segment_number = reader.segment_number;
        self.spare = reader.hash.into_buffer();
        self.context = context;
        match result {
            Ok((interchange, end)) => {
                self.pos = end;
                Some(Ok(interchange))
            }
            Err((error, Some(end))) => {
                self.pos = end;
                Some(Err(*error))
            }
            Err((error, None)) => {
                self.done = true;
                Some(Err(*error))
            }
        }
    }
}

/// One segment as read: where it stands, its identifier and elements (line breaks of a
/// transport's wrapping taken out).
struct Segment<'d> {
    start: usize,
    end: usize,
    number: usize,
    /// Its identifier: two or three ASCII letters or digits, padded with a space.
    tag: [u8; 3],
    body: Cow<'d, [u8]>,
}

impl Segment<'_> {
    /// Its identifier as text (`ST`, `BEG`).
    fn tag(&self) -> &str {
        let len = if self.tag[2] == b' ' { 2 } else { 3 };
        // Checked to be ASCII letters and digits when read.
        std::str::from_utf8(&self.tag[..len]).unwrap_or_default()
    }

    /// Element `i` (1-based, as X12 numbers them) as text, spaces around it trimmed; empty
    /// where the segment has fewer.
    fn element(&self, separator: u8, i: usize) -> CompactString {
        let Some(e) = self.body.split(|b| *b == separator).nth(i) else {
            return CompactString::default();
        };
        let start = e.iter().position(|b| *b != b' ').unwrap_or(e.len());
        let end = e.iter().rposition(|b| *b != b' ').map_or(start, |k| k + 1);
        let e = &e[start..end];
        // ASCII, as envelope values are, is its own text: no decoding, no allocation.
        match std::str::from_utf8(e) {
            Ok(text) if e.is_ascii() => CompactString::from(text),
            _ => CompactString::from(latin1(e)),
        }
    }

    fn error(&self, kind: ErrorKind, control_number: &str) -> X12Error {
        X12Error {
            offset: self.start,
            end: self.end,
            segment: Some(self.number),
            tag: Some(self.tag().into()),
            kind,
            control_number: Some(control_number.into()),
        }
    }
}

/// Bytes as text, one character per byte (X12's character sets are single bytes; anything
/// else is shown, never refused here).
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| b as char).collect()
}

/// A count as X12 writes it (digits only); `None` for anything else, or one too large.
fn count(text: &str) -> Option<usize> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

struct Reader<'d> {
    d: &'d [u8],
    start: usize,
    segment_number: usize,
    hash: SegmentHasher,
}

/// An error, and where the reading may go on after it (`None`: it may not).
type Failure = (Box<X12Error>, Option<usize>);

/// What the walk of one interchange has read so far, kept outside it so that an error can say
/// where it stands (its [`RejectedContext`]).
#[derive(Default)]
struct Walked {
    isa: Option<(Isa, Separators)>,
    groups: Vec<Group>,
    sets: Vec<TransactionSet>,
    open_group: Option<usize>,
    /// Index in `sets` of the open set, and its segment count so far.
    open_set: Option<(usize, usize)>,
}

/// Where an error stands: the index of the group and of the set it is in, or closes.
type Place = (Option<usize>, Option<usize>);

impl Walked {
    fn here(&self) -> Place {
        (self.open_group, self.open_set.map(|(k, _)| k))
    }

    fn context(&self, (group, set): Place, ack: AckCode) -> Option<Box<RejectedContext>> {
        let (isa, separators) = self.isa.as_ref()?;
        Some(Box::new(RejectedContext {
            isa: isa.clone(),
            separators: *separators,
            group: group.and_then(|g| self.groups.get(g)).cloned(),
            set: set.and_then(|k| self.sets.get(k)).cloned(),
            ack,
        }))
    }
}

impl<'d> Reader<'d> {
    /// The interchange from its ISA to its IEA; for an error, `context` gets what was read of
    /// it, where its ISA was.
    fn interchange(
        &mut self,
        context: &mut Option<Box<RejectedContext>>,
    ) -> Result<(Interchange<'d>, usize), Failure> {
        let mut walked = Walked::default();
        let mut first_error = None;
        let mut first_at = (None, None);
        let result = self.walk(&mut walked, &mut first_error, &mut first_at);
        let Err((e, resume)) = result else {
            return result;
        };
        // A broken structure after a count that did not match: the first error is the one
        // the interchange is rejected for, and the reading still stops.
        let (e, at) = match first_error {
            Some(first) => (Box::new(first), first_at),
            None if resume.is_some() => (e, first_at),
            None => (e, walked.here()),
        };
        *context = walked.context(at, e.ack_code());
        Err((e, resume))
    }

    /// The interchange from its ISA to its IEA. An error that leaves the structure intact is
    /// put in `first_error` (the first one only, where it stands in `first_at`) and the walk
    /// goes on to the IEA.
    fn walk(
        &mut self,
        w: &mut Walked,
        first_error: &mut Option<X12Error>,
        first_at: &mut Place,
    ) -> Result<(Interchange<'d>, usize), Failure> {
        let (isa, separators, isa_end, wrong_value) =
            self.isa().map_err(|e| (Box::new(e), None))?;
        if let Some(e) = wrong_value {
            w.isa = Some((isa, separators));
            return Err((Box::new(e), None));
        }
        let mut outside = Vec::new();
        let mut segments = 1;
        let mut pos = isa_end;
        let es = separators.element;
        let isa13 = isa.control_number.clone();
        // A copy for an error's context (its elements are short: no allocation).
        w.isa = Some((isa.clone(), separators));
        let structural = |e: X12Error| (Box::new(e), None);
        loop {
            let seg = self.segment(pos, separators, &isa13).map_err(structural)?;
            pos = seg.end;
            segments += 1;
            let element = |i| seg.element(es, i);
            let here = w.here();
            let mut note = |e: X12Error| {
                if first_error.is_none() {
                    *first_error = Some(e);
                    *first_at = here;
                }
            };
            if let Some((k, n)) = w.open_set {
                let n = n + 1;
                w.open_set = Some((k, n));
                match &seg.tag {
                    b"SE " => {
                        let set = &mut w.sets[k];
                        let declared = element(1);
                        if count(&declared) != Some(n) {
                            note(seg.error(
                                ErrorKind::SeCount {
                                    declared: declared.to_string(),
                                    actual: n,
                                },
                                &isa13,
                            ));
                        }
                        let found = element(2);
                        if found != set.control_number {
                            note(seg.error(
                                ErrorKind::SeReference {
                                    found: found.to_string(),
                                    expected: set.control_number.to_string(),
                                },
                                &isa13,
                            ));
                        }
                        set.segments = n;
                        set.span.end = seg.end - self.start;
                        w.open_set = None;
                    }
                    b"ST " | b"GS " | b"GE " | b"IEA" | b"ISA" => {
                        let open = w.sets[k].control_number.to_string();
                        return Err(structural(
                            seg.error(ErrorKind::SetNotClosed { open }, &isa13),
                        ));
                    }
                    _ => {}
                }
                continue;
            }
            match &seg.tag {
                b"ST " => {
                    let Some(g) = w.open_group else {
                        return Err(structural(seg.error(ErrorKind::SetOutsideGroup, &isa13)));
                    };
                    w.groups[g].sets += 1;
                    let implementation = Some(element(3)).filter(|v| !v.is_empty());
                    w.sets.push(TransactionSet {
                        id: element(1),
                        control_number: element(2),
                        implementation,
                        segments: 1,
                        group: g,
                        span: seg.start - self.start..seg.end - self.start,
                        number: seg.number,
                    });
                    w.open_set = Some((w.sets.len() - 1, 1));
                }
                b"GS " => {
                    if let Some(g) = w.open_group {
                        let open = w.groups[g].control_number.to_string();
                        return Err(structural(
                            seg.error(ErrorKind::GroupNotClosed { open }, &isa13),
                        ));
                    }
                    w.groups.push(Group {
                        functional_id: element(1),
                        application_sender: element(2),
                        application_receiver: element(3),
                        date: element(4),
                        time: element(5),
                        control_number: element(6),
                        agency: element(7),
                        version: element(8),
                        sets: 0,
                    });
                    w.open_group = Some(w.groups.len() - 1);
                }
                b"GE " => {
                    let Some(g) = w.open_group else {
                        return Err(structural(seg.error(ErrorKind::GeWithoutGs, &isa13)));
                    };
                    let group = &w.groups[g];
                    let declared = element(1);
                    if count(&declared) != Some(group.sets) {
                        note(seg.error(
                            ErrorKind::GeCount {
                                declared: declared.to_string(),
                                actual: group.sets,
                            },
                            &isa13,
                        ));
                    }
                    let found = element(2);
                    if found != group.control_number {
                        note(seg.error(
                            ErrorKind::GeReference {
                                found: found.to_string(),
                                expected: group.control_number.to_string(),
                            },
                            &isa13,
                        ));
                    }
                    w.open_group = None;
                }
                b"IEA" => {
                    if let Some(g) = w.open_group {
                        let open = w.groups[g].control_number.to_string();
                        return Err(structural(
                            seg.error(ErrorKind::IeaInsideGroup { open }, &isa13),
                        ));
                    }
                    let declared = element(1);
                    if count(&declared) != Some(w.groups.len()) {
                        note(seg.error(
                            ErrorKind::IeaCount {
                                declared: declared.to_string(),
                                actual: w.groups.len(),
                            },
                            &isa13,
                        ));
                    }
                    let found = element(2);
                    if found != isa13.trim_matches(' ') {
                        note(seg.error(
                            ErrorKind::IeaReference {
                                found: found.to_string(),
                                expected: isa13.to_string(),
                            },
                            &isa13,
                        ));
                    }
                    if let Some(e) = first_error.take() {
                        return Err((Box::new(e), Some(pos)));
                    }
                    let hash = self.hash.finish();
                    let interchange = Interchange {
                        offset: self.start,
                        raw: Cow::Borrowed(&self.d[self.start..pos]),
                        separators,
                        isa,
                        groups: std::mem::take(&mut w.groups),
                        sets: std::mem::take(&mut w.sets),
                        outside,
                        segments,
                        sha256: hash,
                    };
                    return Ok((interchange, pos));
                }
                b"TA1" | b"TA3" | b"ISB" | b"ISE" => {
                    if let Some(g) = w.open_group {
                        let open = w.groups[g].control_number.to_string();
                        return Err(structural(
                            seg.error(ErrorKind::InsideGroup { open }, &isa13),
                        ));
                    }
                    outside.push(CompactString::from(seg.tag()));
                }
                b"ISA" => {
                    let control_number = isa13.to_string();
                    return Err(structural(
                        seg.error(ErrorKind::IsaBeforeIea { control_number }, &isa13),
                    ));
                }
                _ => return Err(structural(seg.error(ErrorKind::OutsideSet, &isa13))),
            }
        }
    }

    /// The next segment from `pos`: white space before it passed over, its terminator found,
    /// its identifier checked, and its bytes added to the hash.
    fn segment(
        &mut self,
        mut pos: usize,
        separators: Separators,
        isa13: &str,
    ) -> Result<Segment<'d>, X12Error> {
        let d = self.d;
        let term = separators.terminator;
        while pos < d.len() && d[pos] != term && matches!(d[pos], b'\r' | b'\n' | b' ' | b'\t') {
            pos += 1;
        }
        let with_number = |e: X12Error| X12Error {
            control_number: Some(isa13.into()),
            ..e
        };
        if pos >= d.len() {
            let kind = ErrorKind::MissingIea {
                control_number: isa13.to_string(),
            };
            return Err(with_number(X12Error::at(d.len(), d.len(), kind)));
        }
        // The terminator, and whether a transport's line break stands before it (looked for
        // in the same pass: most segments have none, and are then read in place).
        let rest = &d[pos..];
        let (found, wrapped) = if matches!(term, b'\r' | b'\n') {
            (memchr::memchr(term, rest), false)
        } else {
            match memchr::memchr3(term, b'\r', b'\n', rest) {
                Some(k) if rest[k] == term => (Some(k), false),
                Some(k) => (memchr::memchr(term, &rest[k..]).map(|t| k + t), true),
                None => (None, false),
            }
        };
        let Some(k) = found else {
            let kind = ErrorKind::Unterminated {
                terminator: show_byte(term),
            };
            return Err(with_number(X12Error::at(pos, d.len(), kind)));
        };
        let end = pos + k + 1;
        let raw = &d[pos..pos + k];
        let body: Cow<'d, [u8]> = if wrapped {
            Cow::Owned(
                raw.iter()
                    .copied()
                    .filter(|b| !matches!(b, b'\r' | b'\n'))
                    .collect(),
            )
        } else {
            Cow::Borrowed(raw)
        };
        self.segment_number += 1;
        let tag_bytes = body
            .split(|b| *b == separators.element)
            .next()
            .unwrap_or_default();
        let tag_ok = (2..=3).contains(&tag_bytes.len())
            && tag_bytes[0].is_ascii_uppercase()
            && tag_bytes
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
        if !tag_ok {
            let found = show_bytes(&tag_bytes[..tag_bytes.len().min(20)]);
            return Err(X12Error {
                segment: Some(self.segment_number),
                ..with_number(X12Error::at(pos, end, ErrorKind::BadTag { found }))
            });
        }
        // Byte by byte (two or three, checked above): a copy of a length known only here
        // would be a call, and reading the tag back after it a stall.
        let tag = [
            tag_bytes[0],
            tag_bytes[1],
            tag_bytes.get(2).copied().unwrap_or(b' '),
        ];
        if wrapped {
            self.hash.push_exact(&body);
            self.hash.push_exact(&[term]);
        } else {
            // The body and its terminator stand together, in place.
            self.hash.push(d, pos, end);
        }
        Ok(Segment {
            start: pos,
            end,
            number: self.segment_number,
            tag,
            body,
        })
    }

    /// The ISA at `self.start`: its 16 elements (line breaks of a transport's wrapping taken
    /// out), the delimiters it states, and each of its rules. A rule of its values (ISA13,
    /// ISA15) broken in an ISA otherwise read comes back beside it, as the interchange's error.
    #[allow(clippy::type_complexity)]
    fn isa(&mut self) -> Result<(Isa, Separators, usize, Option<X12Error>), X12Error> {
        let (d, s) = (self.d, self.start);
        let n = d.len();
        self.segment_number += 1;
        let number = self.segment_number;
        let fail = |end: usize, kind: ErrorKind| X12Error {
            segment: Some(number),
            tag: Some("ISA".into()),
            ..X12Error::at(s, end, kind)
        };
        // The tag, and the element separator after it: a wrap may fall between any two.
        let tag = tag_end(d, s, b"ISA").unwrap_or(s + 3);
        let at = skip_line_breaks(d, tag);
        if at >= n {
            return Err(fail(n, ErrorKind::TruncatedIsa { elements: 0 }));
        }
        let es = d[at];
        // After a line break, a letter or a digit is the first element's: the line break
        // itself was meant as the separator.
        if at > tag && (es.is_ascii_alphanumeric() || es == b' ') {
            return Err(fail((s + 106).min(n), ErrorKind::LineBreakSeparator));
        }
        let mut fields: Vec<Vec<u8>> = Vec::with_capacity(16);
        let mut current = Vec::new();
        let mut q = at + 1;
        while fields.len() < 15 {
            if q >= n {
                return Err(fail(
                    n,
                    ErrorKind::TruncatedIsa {
                        elements: fields.len() + 1,
                    },
                ));
            }
            if q - s > ISA_MAX_SPAN {
                let kind = ErrorKind::IsaTooLong {
                    elements: fields.len() + 1,
                    separator: show_byte(es),
                };
                return Err(fail((s + 106).min(n), kind));
            }
            match d[q] {
                b if b == es => fields.push(std::mem::take(&mut current)),
                b'\r' | b'\n' => {}
                b => current.push(b),
            }
            q += 1;
        }
        while q < n && matches!(d[q], b'\r' | b'\n') {
            q += 1;
        }
        if q >= n {
            return Err(fail(n, ErrorKind::TruncatedIsa { elements: 16 }));
        }
        let cs = d[q];
        fields.push(vec![cs]);
        q += 1;
        if q >= n {
            return Err(fail(n, ErrorKind::NoTerminator));
        }
        if matches!(d[q], b'\r' | b'\n') {
            // A line break right after ISA16 is the terminator, unless it is a wrap and the
            // terminator follows it: the next byte that is not a line break cannot start a
            // segment.
            let mut k = q;
            while k < n && matches!(d[k], b'\r' | b'\n') {
                k += 1;
            }
            if k < n && !d[k].is_ascii_alphanumeric() && !matches!(d[k], b' ' | b'\t') {
                q = k;
            }
        }
        let term = d[q];
        let isa_end = q + 1;
        for (i, (field, width)) in fields.iter().zip(ISA_WIDTHS).enumerate() {
            if field.len() != width {
                let kind = ErrorKind::IsaWidth {
                    element: i + 1,
                    found: field.len(),
                    width,
                };
                return Err(fail(isa_end, kind));
            }
        }
        let text = |i: usize| CompactString::from(latin1(&fields[i]));
        let version = text(11);
        let repetition = Some(fields[10][0])
            .filter(|_| version.as_str() >= "00402")
            .filter(|r| !r.is_ascii_alphanumeric() && *r != b' ');
        let mut named = vec![
            ("element separator", es),
            ("component separator (ISA16)", cs),
            ("segment terminator", term),
        ];
        named.extend(repetition.map(|r| ("repetition separator (ISA11)", r)));
        for (which, b) in &named {
            if b.is_ascii_alphanumeric() || *b == b' ' {
                let separator = show_byte(*b);
                return Err(fail(isa_end, ErrorKind::BadSeparator { which, separator }));
            }
        }
        let distinct = named
            .iter()
            .enumerate()
            .all(|(i, (_, a))| named[..i].iter().all(|(_, b)| a != b));
        if !distinct {
            let separators = named
                .iter()
                .map(|(which, b)| format!("{which} {}", show_byte(*b)))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(fail(isa_end, ErrorKind::SameSeparators { separators }));
        }
        // Wrong values in an ISA read whole: the interchange is rejected, but its sender,
        // receiver and control number were read, so its rejection is keyed and answered.
        let wrong_value = if !(fields[12].len() == 9 && fields[12].iter().all(u8::is_ascii_digit)) {
            let found = latin1(&fields[12]);
            Some(fail(isa_end, ErrorKind::ControlNumber { found }))
        } else if !matches!(fields[14].as_slice(), b"P" | b"T") {
            let found = latin1(&fields[14]);
            Some(fail(isa_end, ErrorKind::UsageIndicator { found }))
        } else {
            None
        };
        // The ISA hashed as it stands without a transport's line breaks.
        self.hash.push_exact(b"ISA");
        for f in &fields[..15] {
            self.hash.push_exact(&[es]);
            self.hash.push_exact(f);
        }
        self.hash.push_exact(&[es, cs, term]);
        let trimmed = |i: usize| CompactString::from(latin1(&fields[i]).trim_end_matches(' '));
        let isa = Isa {
            authorization_qualifier: text(0),
            authorization: text(1),
            security_qualifier: text(2),
            security: text(3),
            sender_qualifier: text(4),
            sender: trimmed(5),
            receiver_qualifier: text(6),
            receiver: trimmed(7),
            date: text(8),
            time: text(9),
            isa11: text(10),
            version,
            control_number: text(12),
            ack_requested: text(13),
            usage: text(14),
        };
        let separators = Separators {
            element: es,
            component: cs,
            repetition,
            terminator: term,
        };
        Ok((isa, separators, isa_end, wrong_value))
    }
}
