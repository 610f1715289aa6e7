//! A message read whole: each of its segments, UNH through UNT (an X12 transaction set's ST
//! through SE), with every data element,
//! repetition and component as text. What `inspect --segments` and `show --segments` print, in
//! the one JSON form docs/parser.md describes ("A message as JSON").
//!
//! The envelope parser has checked the message already: this reads its bytes again with the
//! same lexer (`super::lexer`), splits each segment at the separators no release character makes
//! literal, and decodes each value by the interchange's repertoire without replacing a byte
//! ([`Charset::decode_exact`]). Nothing is looked up in a directory: elements are known by their
//! position alone, which stays the same across directory versions where names do not.
//!
//! The JSON form is this module's [`Serialize`] implementation, written once here: serde is the
//! parser's dependency already, while serde_json is the program's (a build without the `cli`
//! feature has none), and an implementation rather than a writer of our own leaves JSON's string
//! escapes to serde_json. It reads the bytes as it goes: what a message takes in memory beside
//! its bytes is its segments' places, never a tree of strings. (Its sequences do not state their
//! lengths before they are read, which JSON and the other self-describing formats do not need.)

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeSeq, Serializer};

use super::charset::Charset;
use super::error::{EnvelopeError, ErrorKind, Tag};
use super::lexer::{
    RawSegment, past_released, read_segment, read_x12_segment, skip_padding, unescape,
};
use super::model::{Interchange, Message};
use super::syntax::Separators;
use crate::standard::Standard;

/// The separators, repetition separator and repertoire a message is read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub separators: Separators,
    /// The repetition separator in force: only in syntax version 4, which brought repeated data
    /// elements, and there the UNA's (none where it gives a space), `*` without a UNA at level
    /// A, IS2 (0x1E) at level B. In versions 1 to 3 the UNA's fifth character is reserved, and
    /// nothing is split at it.
    pub repetition: Option<u8>,
    pub charset: Charset,
}

impl Reading {
    /// How the messages of `interchange` are read.
    pub fn of(interchange: &Interchange<'_>) -> Reading {
        let seps = interchange.separators;
        if interchange.standard == Standard::X12 {
            // X12's repetition separator is ISA11 from 00402 on, as its reader found it; its
            // text is read as UTF-8, of which X12's basic and extended sets (ASCII) are a part
            // and which later versions use: a byte that is not UTF-8 is counted as outside.
            return Reading {
                separators: seps,
                repetition: seps.repetition,
                charset: Charset::Utf8,
            };
        }
        let repetition = match interchange.unb.syntax_version.as_str() {
            "4" if interchange.has_una => seps.repetition,
            "4" => seps.repetition.or(Some(b'*')),
            _ => None,
        };
        Reading {
            separators: seps,
            repetition,
            charset: Charset::for_syntax(&interchange.unb.syntax_id),
        }
    }

    /// The text of a raw component: release characters and line breaks taken out, decoded,
    /// and how many of its bytes the repertoire does not define.
    fn text<'a>(&self, raw: &'a [u8]) -> (Cow<'a, str>, usize) {
        // Nearly every value is plain ASCII with nothing to take out: one look at each byte, not
        // one for the release characters, one for ASCII and one for UTF-8 (a fifth of the
        // rendering's time went there).
        let seps = &self.separators;
        if raw
            .iter()
            .all(|&b| b.is_ascii() && Some(b) != seps.release && !seps.is_line_break(b))
            && let Ok(text) = std::str::from_utf8(raw)
        {
            return (Cow::Borrowed(text), 0);
        }
        match unescape(raw, &self.separators) {
            Cow::Borrowed(bytes) => self.charset.decode_exact(bytes),
            Cow::Owned(bytes) => {
                let (text, outside) = self.charset.decode_exact(&bytes);
                (Cow::Owned(text.into_owned()), outside)
            }
        }
    }
}

/// The bytes of a message that its repertoire does not define, read as ISO 8859-1 (never
/// replaced): how many, and the first segment that holds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideRepertoire {
    pub bytes: usize,
    /// Byte offset of that segment in the bytes read.
    pub offset: usize,
    /// Its number in the bytes read (1-based, UNA not counted).
    pub segment: usize,
    pub tag: Tag,
}

/// One message's segments, read and split; [`Serialize`] gives the JSON form.
#[derive(Debug, Clone)]
pub struct MessageSegments<'a> {
    reading: Reading,
    segments: Vec<RawSegment<'a>>,
    outside: Option<OutsideRepertoire>,
}

/// Reads the segments of `message`, one of `interchange`'s, UNH through UNT (ST through SE for
/// an X12 interchange).
///
/// Fails where the message's span is not within the interchange's bytes (a detached
/// interchange), where a segment cannot be read (a message the parser did not accept), or where
/// its bytes do not run from a UNH to a UNT: each error with the byte offset in the bytes the
/// interchange was read from, the segment and its tag, as the envelope's are.
pub fn message_segments<'a>(
    interchange: &'a Interchange<'_>,
    message: &Message,
) -> Result<MessageSegments<'a>, EnvelopeError> {
    let span = message.span.clone();
    let base = interchange.offset;
    let Some(data) = interchange.raw.get(span.clone()) else {
        return Err(EnvelopeError::at(
            base.saturating_add(span.start),
            ErrorKind::MessageOutside {
                reference: message.reference.to_string(),
                start: span.start,
                end: span.end,
                len: interchange.raw.len(),
            },
        ));
    };
    let reading = Reading::of(interchange);
    let seps = reading.separators;
    let at = base.saturating_add(span.start);
    let x12 = interchange.standard == Standard::X12;
    let mut segments = Vec::with_capacity(message.segments.min(data.len() / 4 + 1));
    let mut pos = skip_padding(data, 0, &seps);
    while pos < data.len() {
        let number = message.number.saturating_add(segments.len());
        let read = if x12 { read_x12_segment } else { read_segment };
        let seg = read(data, pos, number, &seps).map_err(|mut e| {
            e.offset = e.offset.saturating_add(at);
            e
        })?;
        pos = skip_padding(data, seg.end(), &seps);
        segments.push(RawSegment {
            offset: seg.offset.saturating_add(at),
            ..seg
        });
    }
    let bound = |seg: Option<&RawSegment<'_>>, tag: Tag, expected: &'static str| match seg {
        Some(s) if s.tag == tag => Ok(()),
        found => {
            let kind = ErrorKind::NotMessageBound {
                reference: message.reference.to_string(),
                expected,
            };
            Err(match found {
                Some(s) => s.error(kind),
                None => EnvelopeError::at(at, kind),
            })
        }
    };
    if x12 {
        bound(segments.first(), Tag::ST, "ST")?;
        bound(segments.last(), Tag::SE, "SE")?;
    } else {
        bound(segments.first(), Tag::UNH, "UNH")?;
        bound(segments.last(), Tag::UNT, "UNT")?;
    }
    let outside = outside_repertoire(&reading, &segments);
    Ok(MessageSegments {
        reading,
        segments,
        outside,
    })
}

/// The bytes of `segments` their repertoire does not define, as read into values. Only a
/// message with a byte above 0x7F can have one: each of its segments with such a byte is read
/// and counted.
fn outside_repertoire(reading: &Reading, segments: &[RawSegment<'_>]) -> Option<OutsideRepertoire> {
    if reading.charset == Charset::Latin1 {
        return None;
    }
    let mut found: Option<OutsideRepertoire> = None;
    for seg in segments.iter().filter(|s| !s.body.is_ascii()) {
        let segment = Segment {
            raw: *seg,
            reading: *reading,
        };
        let bytes: usize = segment
            .all_elements()
            .flat_map(|e| e.repetitions())
            .flat_map(|r| r.raw_components())
            .map(|c| reading.text(c).1)
            .sum();
        if bytes == 0 {
            continue;
        }
        match &mut found {
            Some(f) => f.bytes += bytes,
            None => {
                found = Some(OutsideRepertoire {
                    bytes,
                    offset: seg.offset,
                    segment: seg.number,
                    tag: seg.tag,
                })
            }
        }
    }
    found
}

impl<'a> MessageSegments<'a> {
    /// The segments, UNH first, UNT last.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Segment<'a>> + '_ {
        self.segments.iter().map(|raw| Segment {
            raw: *raw,
            reading: self.reading,
        })
    }

    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// Never: a message has at least its UNH and UNT.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// How the message was read.
    pub fn reading(&self) -> Reading {
        self.reading
    }

    /// The bytes that its repertoire does not define, where there are any.
    pub fn outside_repertoire(&self) -> Option<OutsideRepertoire> {
        self.outside
    }
}

/// One segment of a message.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    raw: RawSegment<'a>,
    reading: Reading,
}

impl<'a> Segment<'a> {
    pub fn tag(&self) -> Tag {
        self.raw.tag
    }

    /// Byte offset of its first byte in the bytes read.
    pub fn offset(&self) -> usize {
        self.raw.offset
    }

    /// Its number in the bytes read (1-based, UNA not counted).
    pub fn number(&self) -> usize {
        self.raw.number
    }

    /// The element that holds the tag: its first component is the tag, and where there are
    /// more, they are the explicit nesting indicator of syntax versions 1 to 3 (`LIN:1:1`).
    pub fn tag_element(&self) -> Element<'a> {
        self.all_elements().next().unwrap_or(Element {
            raw: b"",
            reading: self.reading,
        })
    }

    /// The element that holds the tag, and its data elements.
    fn all_elements(&self) -> impl Iterator<Item = Element<'a>> + use<'a> {
        let reading = self.reading;
        Pieces::new(self.raw.body, reading.separators.element, reading)
            .map(move |raw| Element { raw, reading })
    }

    /// Its data elements, in order, the ones left empty included.
    pub fn elements(&self) -> impl Iterator<Item = Element<'a>> + use<'a> {
        self.all_elements().skip(1)
    }

    /// True where the tag's element holds more than the tag: components after it (the explicit
    /// nesting indicator of syntax versions 1 to 3, `LIN:1:1`) or a repetition.
    pub fn tag_has_more(&self) -> bool {
        // Nearly every tag stands alone: three letters or digits, none of them a service
        // character, then an element separator or the terminator.
        let seps = &self.reading.separators;
        if let Some((tag, rest)) = self.raw.body.split_first_chunk::<3>()
            && rest.first().is_none_or(|&b| b == seps.element)
            && !tag.iter().any(|&b| {
                b == seps.component || Some(b) == seps.release || Some(b) == self.reading.repetition
            })
        {
            return false;
        }
        let e = self.tag_element();
        e.is_repeated() || e.repetitions().any(|r| r.raw_components().nth(1).is_some())
    }
}

/// One data element: its repetitions, each of components.
#[derive(Debug, Clone, Copy)]
pub struct Element<'a> {
    raw: &'a [u8],
    reading: Reading,
}

impl<'a> Element<'a> {
    /// True where a repetition separator stands in it: then it renders as an array of its
    /// repetitions, each an array of components.
    pub fn is_repeated(&self) -> bool {
        self.reading
            .repetition
            .is_some_and(|r| Pieces::new(self.raw, r, self.reading).nth(1).is_some())
    }

    /// Its repetitions: one, where it is not repeated.
    pub fn repetitions(&self) -> impl Iterator<Item = Repetition<'a>> + use<'a> {
        let reading = self.reading;
        let pieces = match reading.repetition {
            Some(r) => Pieces::new(self.raw, r, reading),
            None => Pieces::whole(self.raw, reading),
        };
        pieces.map(move |raw| Repetition { raw, reading })
    }

    /// The components of its first (or only) repetition.
    pub fn components(&self) -> impl Iterator<Item = Cow<'a, str>> + use<'a> {
        self.repetitions().take(1).flat_map(|r| r.components())
    }
}

/// One occurrence of a data element: its components.
#[derive(Debug, Clone, Copy)]
pub struct Repetition<'a> {
    raw: &'a [u8],
    reading: Reading,
}

impl<'a> Repetition<'a> {
    fn raw_components(&self) -> Pieces<'a> {
        Pieces::new(self.raw, self.reading.separators.component, self.reading)
    }

    /// Its components as text, the ones left empty included.
    pub fn components(&self) -> impl Iterator<Item = Cow<'a, str>> + use<'a> {
        let reading = self.reading;
        self.raw_components().map(move |raw| reading.text(raw).0)
    }
}

/// The pieces of `rest` between the `sep` bytes that no release character makes literal: one
/// piece (perhaps empty) more than there are such separators.
#[derive(Debug, Clone)]
struct Pieces<'a> {
    rest: Option<&'a [u8]>,
    /// `None` where nothing splits it.
    sep: Option<u8>,
    reading: Reading,
}

impl<'a> Pieces<'a> {
    fn new(raw: &'a [u8], sep: u8, reading: Reading) -> Self {
        Pieces {
            rest: Some(raw),
            sep: Some(sep),
            reading,
        }
    }

    fn whole(raw: &'a [u8], reading: Reading) -> Self {
        Pieces {
            rest: Some(raw),
            sep: None,
            reading,
        }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let raw = self.rest.take()?;
        let Some(sep) = self.sep else {
            return Some(raw);
        };
        let seps = &self.reading.separators;
        let mut i = 0;
        while let Some(&b) = raw.get(i) {
            if Some(b) == seps.release {
                i = past_released(raw, i, seps);
                continue;
            }
            if b == sep {
                self.rest = raw.get(i + 1..);
                return raw.get(..i);
            }
            i += 1;
        }
        Some(raw)
    }
}

impl Serialize for MessageSegments<'_> {
    /// `[segment, ...]`, UNH through UNT.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for segment in self.iter() {
            seq.serialize_element(&segment)?;
        }
        seq.end()
    }
}

impl Serialize for Segment<'_> {
    /// `["TAG", element, ...]`: the tag, then each data element. Where the tag's element holds
    /// more than the tag, it stands first as any element does (`[["LIN", "1", "1"], ...]`).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        if self.tag_has_more() {
            for e in self.all_elements() {
                seq.serialize_element(&e)?;
            }
        } else {
            seq.serialize_element(self.tag().as_str())?;
            for e in self.elements() {
                seq.serialize_element(&e)?;
            }
        }
        seq.end()
    }
}

impl Serialize for Element<'_> {
    /// `["c1", "c2", ...]`, or `[["c1", ...], ["c1", ...]]` where it is repeated.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_repeated() {
            let mut seq = s.serialize_seq(None)?;
            for r in self.repetitions() {
                seq.serialize_element(&r)?;
            }
            seq.end()
        } else {
            match self.repetitions().next() {
                Some(r) => r.serialize(s),
                None => s.serialize_seq(Some(0))?.end(),
            }
        }
    }
}

impl Serialize for Repetition<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for c in self.components() {
            seq.serialize_element(c.as_ref())?;
        }
        seq.end()
    }
}

/// A message's JSON (docs/parser.md), written in one pass without serde, with the place of each
/// segment's array in it: what the side effects bind as `:message`, and from which SQLite's
/// `message_segments(:message)` serves a segment without parsing the JSON again.
/// Byte for byte what the [`Serialize`] implementation gives through serde_json (a test holds
/// the two together); reading and writing a message takes about 0.7 of serde's time
/// (BENCHMARKS.md), which a side effect pays for each message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageJson {
    pub text: String,
    /// Each segment in order: its tag and the bytes of `text` its array takes.
    pub segments: Vec<(Tag, std::ops::Range<usize>)>,
}

impl MessageSegments<'_> {
    /// The JSON form, written directly, with each segment's place (see [`MessageJson`]).
    pub fn to_json(&self) -> MessageJson {
        let bytes: usize = self.segments.iter().map(|s| s.body.len()).sum();
        // Each component takes its two quotes and a comma or bracket beside its bytes.
        let mut text = String::with_capacity(bytes + bytes / 2 + 16);
        let mut segments = Vec::with_capacity(self.segments.len());
        text.push('[');
        for (k, segment) in self.iter().enumerate() {
            if k > 0 {
                text.push(',');
            }
            let start = text.len();
            segment.write_json(&mut text);
            segments.push((segment.tag(), start..text.len()));
        }
        text.push(']');
        MessageJson { text, segments }
    }
}

/// A message's segments kept apart from the bytes they were read from, each written as JSON only
/// when asked for: what a side effect needs where it reads the message segment by segment
/// (SQLite's `message_segments`) and never as a whole. Writing the whole message as JSON was
/// most of what such a mapping cost per message (BENCHMARKS.md, issue 39); a lookup by tag
/// reads a handful of its segments.
#[derive(Debug, Clone)]
pub struct HeldSegments {
    reading: Reading,
    /// The segments' bodies (still escaped), one after the other.
    bytes: Vec<u8>,
    segments: Vec<HeldSegment>,
    /// Each segment's tag, by position, apart from the rest: a lookup by tag reads them all,
    /// and the tags side by side cost it a third of what reading them out of the segments did.
    tags: Vec<Tag>,
    /// Each segment's JSON once written: a statement may read a row's segment several times
    /// (`segment -> 1 ->> 0`, `segment -> 3 ->> 0`), and a sort or a window copies it.
    written: Vec<std::sync::OnceLock<String>>,
}

/// A segment of [`HeldSegments`]: a [`RawSegment`] whose body stands in the held bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldSegment {
    body: std::ops::Range<usize>,
    offset: usize,
    number: usize,
    has_line_breaks: bool,
}

impl HeldSegments {
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// About how many bytes of memory it holds, before any segment is written as JSON.
    pub fn size(&self) -> usize {
        self.bytes.len()
            + self.segments.len()
                * (std::mem::size_of::<HeldSegment>()
                    + std::mem::size_of::<Tag>()
                    + std::mem::size_of::<std::sync::OnceLock<String>>())
    }

    /// Never: a message has at least its UNH and UNT.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The `k`th segment's tag (0-based).
    pub fn tag(&self, k: usize) -> Option<&Tag> {
        self.tags.get(k)
    }

    /// The positions from `from` up to (not including) `to` of the segments tagged `tag`, in
    /// order, added to `out`.
    pub fn positions_of(&self, tag: Tag, from: usize, to: usize, out: &mut Vec<usize>) {
        let [a, b, c] = tag.0;
        let tags = self.tags.get(from..to).unwrap_or_default();
        for (k, Tag([x, y, z])) in tags.iter().enumerate() {
            if *x == a && *y == b && *z == c {
                out.push(from + k);
            }
        }
    }

    /// The `k`th segment (0-based) as JSON: the same text [`MessageSegments::to_json`] gives it.
    pub fn json(&self, k: usize) -> Option<&str> {
        let written = self.written.get(k)?;
        if let Some(json) = written.get() {
            return Some(json);
        }
        let json = self.write(k)?;
        Some(written.get_or_init(|| json))
    }

    fn write(&self, k: usize) -> Option<String> {
        let held = self.segments.get(k)?;
        let tag = *self.tags.get(k)?;
        let body = self.bytes.get(held.body.clone())?;
        let segment = Segment {
            raw: RawSegment {
                offset: held.offset,
                number: held.number,
                tag,
                body,
                // Not kept: the JSON is written from the body alone.
                with_terminator: body,
                has_line_breaks: held.has_line_breaks,
            },
            reading: self.reading,
        };
        let mut out = String::with_capacity(body.len() + body.len() / 2 + 8);
        segment.write_json(&mut out);
        Some(out)
    }
}

impl MessageSegments<'_> {
    /// The segments, owned, for [`HeldSegments::json`] to write one by one.
    pub fn to_held(&self) -> HeldSegments {
        let mut bytes = Vec::with_capacity(self.segments.iter().map(|s| s.body.len()).sum());
        let segments = self
            .segments
            .iter()
            .map(|s| {
                let start = bytes.len();
                bytes.extend_from_slice(s.body);
                HeldSegment {
                    body: start..bytes.len(),
                    offset: s.offset,
                    number: s.number,
                    has_line_breaks: s.has_line_breaks,
                }
            })
            .collect();
        HeldSegments {
            reading: self.reading,
            tags: self.segments.iter().map(|s| s.tag).collect(),
            bytes,
            written: (0..self.segments.len())
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            segments,
        }
    }
}

impl Segment<'_> {
    /// `["TAG", element, ...]`, as [`Serialize`] gives it.
    fn write_json(&self, out: &mut String) {
        if self.write_plain_json(out) {
            return;
        }
        out.push('[');
        if self.tag_has_more() {
            for (k, e) in self.all_elements().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                e.write_json(out);
            }
        } else {
            json_string(out, self.tag().as_str());
            for e in self.elements() {
                out.push(',');
                e.write_json(out);
            }
        }
        out.push(']');
    }

    /// The JSON of a segment as nearly every one is: ASCII, no release character, line break or
    /// repetition separator, the tag alone in its element. Its values are then its bytes, and
    /// one pass writes it, the separators turned into the brackets and commas between them.
    /// False (nothing written) for any other segment.
    fn write_plain_json(&self, out: &mut String) -> bool {
        let seps = &self.reading.separators;
        let body = self.raw.body;
        let plain = |b: u8| {
            b.is_ascii()
                && Some(b) != seps.release
                && Some(b) != self.reading.repetition
                && !seps.is_line_break(b)
        };
        let Some((tag, rest)) = body.split_first_chunk::<3>() else {
            return false;
        };
        if !body.iter().all(|&b| plain(b))
            || tag
                .iter()
                .any(|&b| b == seps.component || b == seps.element)
            || rest.first().is_some_and(|&b| b != seps.element)
        {
            return false;
        }
        let (Ok(tag), Ok(rest)) = (std::str::from_utf8(tag), std::str::from_utf8(rest)) else {
            return false;
        };
        out.push_str("[\"");
        out.push_str(tag);
        out.push('"');
        if let Some(elements) = rest.get(1..) {
            out.push_str(",[\"");
            let mut run = 0;
            for (i, b) in elements.bytes().enumerate() {
                let put = if b == seps.element {
                    "\"],[\""
                } else if b == seps.component {
                    "\",\""
                } else if b == b'"' || b == b'\\' || b < 0x20 {
                    ""
                } else {
                    continue;
                };
                out.push_str(&elements[run..i]);
                if put.is_empty() {
                    json_string_body(out, &elements[i..=i]);
                } else {
                    out.push_str(put);
                }
                run = i + 1;
            }
            out.push_str(&elements[run..]);
            out.push_str("\"]");
        }
        out.push(']');
        true
    }
}

impl Element<'_> {
    fn write_json(&self, out: &mut String) {
        if self.is_repeated() {
            out.push('[');
            for (k, r) in self.repetitions().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                r.write_json(out);
            }
            out.push(']');
        } else {
            match self.repetitions().next() {
                Some(r) => r.write_json(out),
                None => out.push_str("[]"),
            }
        }
    }
}

impl Repetition<'_> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (k, c) in self.components().enumerate() {
            if k > 0 {
                out.push(',');
            }
            json_string(out, &c);
        }
        out.push(']');
    }
}

/// `text` as a JSON string, escaped as serde_json escapes: `"`, `\` and the control characters
/// (`\b \t \n \f \r`, the others as `\u00xx`), nothing else.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    json_string_body(out, text);
    out.push('"');
}

/// `text` escaped as within a JSON string, without its quotes.
fn json_string_body(out: &mut String, text: &str) {
    let mut plain = 0;
    for (i, b) in text.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0C => "\\f",
            0x00..=0x1F => "",
            _ => continue,
        };
        out.push_str(&text[plain..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        } else {
            out.push_str(escape);
        }
        plain = i + 1;
    }
    out.push_str(&text[plain..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each transaction set of an X12 interchange, read through the crate's entry point (the
    /// X12 reader builds the model this reads), as JSON.
    fn x12_sets_json(data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for i in crate::envelopes::interchanges(data) {
            let i = i.unwrap();
            assert_eq!(i.standard, Standard::X12);
            for m in &i.messages {
                let read = message_segments(&i, m).unwrap();
                let direct = read.to_json();
                assert_held_gives_the_same(&read, &direct);
                let json = serde_json::to_string(&read).unwrap();
                assert_eq!(direct.text, json);
                out.push(json);
            }
        }
        out
    }

    #[test]
    fn an_x12_set_reads_st_through_se_with_its_components_and_two_letter_tags() {
        let sets = x12_sets_json(include_bytes!(
            "../../samples/x12/850-purchase-order-00401.x12"
        ));
        assert_eq!(sets.len(), 1);
        let json = &sets[0];
        assert!(
            json.starts_with(
                r#"[["ST",["850"],["0001"]],["BEG",["00"],["SA"],["PO-77120"],[""],["20261201"]]"#
            ),
            "{json}"
        );
        // ISA16 `>` splits components; 00401 has no repetition separator (ISA11 `U`).
        assert!(
            json.contains(
                r#"["PO1",["1"],["120"],["EA"],["4.25"],[""],["VN"],["WIDGET-9","BLUE"]]"#
            ),
            "{json}"
        );
        assert!(
            json.contains(r#"["PID",["F"],[""],[""],[""],["WIDGET, BLUE"]]"#),
            "{json}"
        );
        assert!(
            json.ends_with(r#"["CTT",["2"]],["SE",["10"],["0001"]]]"#),
            "{json}"
        );
    }

    #[test]
    fn an_x12_set_wrapped_at_80_columns_reads_as_if_unwrapped_and_splits_at_isa11() {
        let sets = x12_sets_json(include_bytes!(
            "../../samples/x12/810-856-00501-wrapped-80-bom.x12"
        ));
        assert_eq!(sets.len(), 3, "an 810, then two 856s in the second group");
        // The line break inside `ST` and inside `120` is the transport's, not the value's; ISA11
        // `^` (00501) repeats N104, ISA16 `:` splits components.
        assert!(
            sets[0].starts_with(r#"[["ST",["810"],["0001"]],["BIG","#),
            "{}",
            sets[0]
        );
        assert!(
            sets[0].contains(r#"["N1",["RE"],["ACME RETAIL"],["92"],[["0042"],["0043"]]]"#),
            "{}",
            sets[0]
        );
        assert!(
            sets[0].contains(
                r#"["IT1",["1"],["120"],["EA"],["4.25"],[""],["VN"],["WIDGET-9","BLUE"]]"#
            ),
            "{}",
            sets[0]
        );
        assert!(
            sets[1].starts_with(r#"[["ST",["856"],["0001"]]"#),
            "{}",
            sets[1]
        );
    }

    #[test]
    fn an_x12_set_whose_span_is_not_st_to_se_is_refused_with_its_offset() {
        let data = include_bytes!("../../samples/x12/850-purchase-order-00401.x12");
        let i = crate::envelopes::interchanges(data)
            .next()
            .unwrap()
            .unwrap();
        let mut m = i.messages[0].clone();
        // From BEG on: the first segment read is not the set's header.
        let beg = data.windows(4).position(|w| w == b"BEG*").unwrap();
        m.span.start = beg;
        let e = message_segments(&i, &m).unwrap_err();
        assert_eq!(e.offset, beg);
        assert!(e.to_string().contains("ST"), "{e}");
    }
    use crate::edifact::interchanges;

    /// The one interchange of `data`.
    fn one(data: &[u8]) -> Interchange<'_> {
        let mut all = interchanges(data);
        let i = all.next().expect("an interchange").expect("a valid one");
        assert!(all.next().is_none());
        i
    }

    /// Each segment written one by one from the held copy is the text the whole message's JSON
    /// gives it, and nothing past the last.
    fn assert_held_gives_the_same(read: &MessageSegments<'_>, direct: &MessageJson) {
        let held = read.to_held();
        assert_eq!(held.len(), direct.segments.len());
        for (k, (tag, span)) in direct.segments.iter().enumerate() {
            assert_eq!(held.tag(k), Some(tag), "segment {k}");
            assert_eq!(
                held.json(k),
                Some(&direct.text[span.clone()]),
                "segment {k}"
            );
            // Read again: the same, from what was written.
            assert_eq!(
                held.json(k),
                Some(&direct.text[span.clone()]),
                "segment {k} again"
            );
        }
        assert_eq!(held.tag(held.len()), None);
        assert_eq!(held.json(held.len()), None);
    }

    /// Each message of `data` as JSON.
    #[cfg(feature = "cli")]
    fn json(data: &[u8]) -> Vec<String> {
        let i = one(data);
        i.messages
            .iter()
            .map(|m| {
                let read = message_segments(&i, m).unwrap();
                let json = serde_json::to_string(&read).unwrap();
                // The writer without serde gives the same bytes, each segment's place in them.
                let direct = read.to_json();
                assert_eq!(direct.text, json);
                assert_eq!(direct.segments.len(), read.len());
                for ((tag, span), segment) in direct.segments.iter().zip(read.iter()) {
                    assert_eq!(*tag, segment.tag());
                    assert_eq!(
                        direct.text[span.clone()],
                        serde_json::to_string(&segment).unwrap()
                    );
                }
                assert_held_gives_the_same(&read, &direct);
                json
            })
            .collect()
    }

    fn wrap(syntax: &str, una: &str, body: &str) -> Vec<u8> {
        format!("{una}UNB+{syntax}+S+R+240101:1200+REF'{body}UNZ+1+REF'").into_bytes()
    }

    #[cfg(feature = "cli")]
    #[test]
    fn every_element_is_an_array_of_its_components() {
        let data = wrap(
            "UNOC:3",
            "",
            "UNH+1+INVOIC:D:96A:UN'BGM+380+INV?+1+9'DTM+137:20240315:102'NAD+BY+++ACME'\
             NAD+SU::+:'UNS'UNS+'UNT+8+1'",
        );
        assert_eq!(
            json(&data),
            [
                r#"[["UNH",["1"],["INVOIC","D","96A","UN"]],["BGM",["380"],["INV+1"],["9"]],["DTM",["137","20240315","102"]],["NAD",["BY"],[""],[""],["ACME"]],["NAD",["SU","",""],["",""]],["UNS"],["UNS",[""]],["UNT",["8"],["1"]]]"#
            ]
        );
    }

    /// Syntax version 4 repeats elements: a repeated one is an array of its repetitions, each
    /// an array of components, told from a plain one by the type of its first item.
    #[cfg(feature = "cli")]
    #[test]
    fn a_repeated_element_is_an_array_of_repetitions() {
        let body = "UNH+1+ORDERS:D:01B:UN'QTY+1:5*2:6+7'FTX+A?*B'UNT+4+1'";
        // UNA5 `*`, syntax version 4.
        let v4 = json(&wrap("UNOC:4", "UNA:+.?*'", body));
        assert_eq!(
            v4[0],
            r#"[["UNH",["1"],["ORDERS","D","01B","UN"]],["QTY",[["1","5"],["2","6"]],["7"]],["FTX",["A*B"]],["UNT",["4"],["1"]]]"#
        );
        // Version 4 without a UNA: `*` at level A.
        assert_eq!(json(&wrap("UNOC:4", "", body)), v4);
        // A UNA that gives none (a space), or version 3, whose UNA5 is reserved: `*` is data.
        for (syntax, una) in [
            ("UNOC:4", "UNA:+.? '"),
            ("UNOC:3", "UNA:+.?*'"),
            ("UNOC:3", ""),
        ] {
            assert!(
                json(&wrap(syntax, una, body))[0].contains(r#"["QTY",["1","5*2","6"],["7"]]"#),
                "{syntax} {una}"
            );
        }
        // Level B, version 4: IS2.
        let b = "UNH\x1d1\x1dX\x1fD\x1c\
                 QTY\x1d1\x1f5\x1e2\x1f6\x1cUNT\x1d3\x1d1\x1c";
        let data = format!("UNB\x1dUNOB\x1f4\x1dS\x1dR\x1d1\x1f1\x1dREF\x1c{b}UNZ\x1d1\x1dREF\x1c");
        assert!(json(data.as_bytes())[0].contains(r#"["QTY",[["1","5"],["2","6"]]]"#));
    }

    #[cfg(feature = "cli")]
    #[test]
    fn release_characters_and_line_breaks_are_taken_out() {
        let data = wrap(
            "UNOC:3",
            "",
            "UNH+1+X:D:1:UN'FTX+AAI+++A??B?:C?'D?+E?\r\n+F\r\nG'U\r\nNT+3+1'",
        );
        assert_eq!(
            json(&data)[0],
            r#"[["UNH",["1"],["X","D","1","UN"]],["FTX",["AAI"],[""],[""],["A?B:C'D+E+FG"]],["UNT",["3"],["1"]]]"#
        );
    }

    /// Values decoded by the repertoire; a byte it does not define read as ISO 8859-1, never
    /// replaced, and counted with the first segment that holds one.
    #[cfg(feature = "cli")]
    #[test]
    fn values_are_decoded_and_foreign_bytes_kept_and_counted() {
        let body = b"UNH+1+X:D:1:UN'NAD+SU+++M\xfcller'FTX+A+\xe4'UNT+4+1'";
        let mut data = b"UNB+UNOC:3+S+R+240101:1200+REF'".to_vec();
        data.extend_from_slice(body);
        data.extend_from_slice(b"UNZ+1+REF'");
        let unoc = one(&data);
        let m = message_segments(&unoc, &unoc.messages[0]).unwrap();
        assert!(
            serde_json::to_string(&m)
                .unwrap()
                .contains(r#"["NAD",["SU"],[""],[""],["Müller"]]"#)
        );
        assert_eq!(m.outside_repertoire(), None);
        // The same bytes under UNOA: outside its repertoire, read as ISO 8859-1 all the same.
        let unoa_data = String::from_utf8_lossy(&data).replace("UNOC", "UNOA");
        let mut unoa_bytes = data.clone();
        unoa_bytes[7] = b'A';
        assert!(unoa_data.starts_with("UNB+UNOA"));
        let unoa = one(&unoa_bytes);
        let m = message_segments(&unoa, &unoa.messages[0]).unwrap();
        assert!(serde_json::to_string(&m).unwrap().contains("Müller"));
        let nad = data.windows(3).position(|w| w == b"NAD").unwrap();
        assert_eq!(
            m.outside_repertoire(),
            Some(OutsideRepertoire {
                bytes: 2,
                offset: nad,
                segment: 3,
                tag: Tag(*b"NAD"),
            })
        );
        // UNOY: UTF-8, a stray byte as ISO 8859-1; a character a transport wrapped is whole.
        let mut y = b"UNB+UNOY:4+S+R+20240101:1200+REF'UNH+1+X:D:1:UN'FTX+M\xc3\r\n\xbcller\xff'UNT+3+1'UNZ+1+REF'".to_vec();
        let i = one(&y);
        let m = message_segments(&i, &i.messages[0]).unwrap();
        assert!(
            serde_json::to_string(&m)
                .unwrap()
                .contains(r#"["FTX",["Müllerÿ"]]"#)
        );
        assert_eq!(m.outside_repertoire().map(|o| o.bytes), Some(1));
        y.retain(|&b| b != 0xff);
        let i = one(&y);
        assert_eq!(
            message_segments(&i, &i.messages[0])
                .unwrap()
                .outside_repertoire(),
            None
        );
    }

    /// A tag that carries components (syntax versions 1 to 3's explicit nesting) keeps them: the
    /// tag's element stands first as any element does.
    #[cfg(feature = "cli")]
    #[test]
    fn a_tag_with_components_keeps_them() {
        let data = wrap("UNOA:2", "", "UNH+1+X:D:1:UN'LIN:1:2+5'UNT+3+1'");
        assert_eq!(
            json(&data)[0],
            r#"[["UNH",["1"],["X","D","1","UN"]],[["LIN","1","2"],["5"]],["UNT",["3"],["1"]]]"#
        );
    }

    #[test]
    fn the_typed_reading_gives_the_same_values() {
        let data = wrap("UNOC:4", "", "UNH+1+X:D:1:UN'QTY+1:5*2:6++?+'UNT+3+1'");
        let i = one(&data);
        let m = message_segments(&i, &i.messages[0]).unwrap();
        assert_eq!(m.len(), 3);
        let qty = m.iter().nth(1).unwrap();
        assert_eq!(qty.tag(), Tag(*b"QTY"));
        assert_eq!(qty.number(), 3);
        let elements: Vec<_> = qty.elements().collect();
        assert_eq!(elements.len(), 3);
        assert!(elements[0].is_repeated() && !elements[1].is_repeated());
        let reps: Vec<Vec<String>> = elements[0]
            .repetitions()
            .map(|r| r.components().map(|c| c.into_owned()).collect())
            .collect();
        assert_eq!(reps, [["1", "5"], ["2", "6"]]);
        assert_eq!(elements[1].components().collect::<Vec<_>>(), [""]);
        assert_eq!(elements[2].components().collect::<Vec<_>>(), ["+"]);
    }

    /// A message the parser did not make, or whose interchange lost its bytes, is an error
    /// naming the byte, never a panic.
    #[test]
    fn a_message_that_is_not_one_is_an_error() {
        let data = wrap("UNOC:3", "", "UNH+1+X:D:1:UN'BGM+1'UNT+3+1'");
        let i = one(&data);
        let m = &i.messages[0];
        let unh = data.windows(3).position(|w| w == b"UNH").unwrap();
        let mut short = m.clone();
        short.span.end -= 8;
        let e = message_segments(&i, &short).unwrap_err();
        assert_eq!(
            (e.code(), e.offset, e.tag),
            ("not-message-bound", unh + 15, Some(Tag(*b"BGM")))
        );
        assert_eq!(
            e.to_string(),
            format!(
                "BGM at byte {} (segment 3) stands where message 1's UNT must",
                unh + 15
            )
        );
        let mut inner = m.clone();
        inner.span.start += 15;
        assert_eq!(
            message_segments(&i, &inner).unwrap_err().code(),
            "not-message-bound"
        );
        let mut cut = m.clone();
        cut.span.end -= 1;
        let e = message_segments(&i, &cut).unwrap_err();
        assert_eq!(e.code(), "unterminated", "{e}");
        let mut empty = m.clone();
        empty.span = 3..3;
        assert_eq!(
            message_segments(&i, &empty).unwrap_err().code(),
            "not-message-bound"
        );
        // Offsets past the end of memory (an interchange the parser did not make) saturate.
        let mut far = i.clone();
        far.offset = usize::MAX - 4;
        let read = message_segments(&far, m).unwrap();
        assert!(read.iter().all(|s| s.offset() == usize::MAX));
        let mut far_short = short.clone();
        far_short.number = usize::MAX;
        assert_eq!(
            message_segments(&far, &far_short).unwrap_err().offset,
            usize::MAX
        );
        let (detached, _) = i.clone().detach();
        let e = message_segments(&detached, m).unwrap_err();
        assert_eq!(e.code(), "message-outside");
        assert_eq!(
            e.to_string(),
            format!(
                "at byte {unh}: message 1 spans bytes {unh}..{} of its interchange, which has 0",
                m.span.end
            )
        );
    }
}
