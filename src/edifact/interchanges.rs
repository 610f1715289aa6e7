//! Iteration over the interchanges of a file: where each begins (its UNA or UNB), how its
//! segments are fed to the checks, and where the next one starts.

use super::envelope::Builder;
use super::error::{EnvelopeError, ErrorKind, Tag};
use super::lexer::{read_segment, skip_padding};
use super::model::{Interchange, RejectedContext};
use super::syntax::{Separators, parse_una};

/// A UTF-8 byte-order mark, skipped before the first segment.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads the interchanges of a file one after another.
///
/// Yields each interchange, or the first envelope error within it. After an error that leaves
/// the structure intact (a wrong count or reference) it goes on with the next interchange; after
/// one that does not (a lexical error, a missing UNZ) it stops.
pub fn interchanges(data: &[u8]) -> Interchanges<'_> {
    interchanges_from(data, 0)
}

/// As [`interchanges`], from byte `start` of `data` (where an interchange of another standard
/// handed over): offsets stay those of `data`, segments are counted from `start`.
pub fn interchanges_from(data: &[u8], start: usize) -> Interchanges<'_> {
    Interchanges {
        data,
        pos: start,
        segment_number: 0,
        started: false,
        done: false,
        spare: Vec::new(),
        context: None,
        handover: None,
    }
}

/// What the parser had read of each rejected interchange of `data` (its UNB, the message and
/// group around the error), where it had read a UNB, by the byte offset of the error: for
/// answering rejected interchanges. Parses `data` again, once however many errors it holds (a
/// file of 4,000 broken interchanges was parsed 4,000 times when this went one error at a time).
pub fn rejected_contexts(data: &[u8]) -> std::collections::HashMap<usize, RejectedContext> {
    let mut found = std::collections::HashMap::new();
    let mut all = interchanges(data);
    while let Some(item) = all.next() {
        if let Err(e) = item
            && let Some(c) = all.context.take()
        {
            found.entry(e.offset).or_insert(*c);
        }
    }
    found
}

/// Iterator returned by [`interchanges`].
#[derive(Debug, Clone)]
pub struct Interchanges<'a> {
    data: &'a [u8],
    pos: usize,
    /// Number of the last segment read, counted from the start of the file.
    segment_number: usize,
    started: bool,
    done: bool,
    /// The hash buffer of the last interchange, handed to the next rather than made anew.
    spare: Vec<u8>,
    /// What was read of the interchange of the last error returned, where a UNB was.
    context: Option<Box<RejectedContext>>,
    /// Where an ANSI X12 interchange (`ISA`) starts after the last EDIFACT one: the reading
    /// stopped there, for the X12 reader to go on.
    handover: Option<usize>,
}

impl Interchanges<'_> {
    /// Where an interchange of another standard (ANSI X12's `ISA`) starts after the last
    /// EDIFACT one: the reading stopped there.
    pub fn handover(&self) -> Option<usize> {
        self.handover
    }

    /// What was read of the interchange of the error just returned (its UNB, the group and
    /// message around the error), where its UNB was read; taken, so asked once per error.
    pub fn take_context(&mut self) -> Option<Box<RejectedContext>> {
        self.context.take()
    }
}

impl<'a> Iterator for Interchanges<'a> {
    type Item = Result<Interchange<'a>, EnvelopeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.read_one() {
            Ok(Some(i)) => Some(Ok(i)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                if !e.is_recoverable() {
                    self.done = true;
                }
                Some(Err(e))
            }
        }
    }
}

impl<'a> Interchanges<'a> {
    fn read_one(&mut self) -> Result<Option<Interchange<'a>>, EnvelopeError> {
        self.context = None;
        let data = self.data;
        let mut pos = self.pos;
        if pos == 0 && data.starts_with(BOM) {
            pos = BOM.len();
        }
        pos = skip_padding(data, pos, &Separators::LEVEL_A);
        if pos >= data.len() {
            if self.started {
                return Ok(None);
            }
            self.done = true;
            return Err(EnvelopeError::at(pos, ErrorKind::Empty));
        }
        // An X12 interchange next, also where a transport's wrap splits its `ISA`.
        if self.started && crate::x12::starts_interchange(data, pos) {
            self.handover = Some(pos);
            return Ok(None);
        }
        self.started = true;
        let start = pos;
        let seps = if data[pos..].starts_with(b"UNA") {
            let (seps, _) = parse_una(&data[pos..], pos)?;
            pos = skip_padding(data, pos + 9, &seps);
            seps
        } else {
            Separators::default_for(&data[pos..])
        };
        if pos >= data.len() {
            return Err(EnvelopeError {
                offset: start,
                segment: None,
                tag: Some(Tag::UNA),
                kind: ErrorKind::NoInterchange,
            });
        }
        let unb = read_segment(data, pos, self.segment_number + 1, &seps)?;
        if unb.tag != Tag::UNB {
            return Err(unb.error(ErrorKind::NoInterchange));
        }
        let mut b = Builder::new(&unb, seps, start, std::mem::take(&mut self.spare));
        b.hash(data, &unb);
        let (mut number, mut end) = (unb.number, unb.end());
        loop {
            pos = skip_padding(data, end, &seps);
            let fatal = if pos >= data.len() {
                Some(EnvelopeError::at(
                    data.len(),
                    ErrorKind::MissingUnz {
                        control_ref: b.unb.control_ref.to_string(),
                    },
                ))
            } else if data[pos..].starts_with(b"UNA") {
                Some(EnvelopeError {
                    offset: pos,
                    segment: None,
                    tag: Some(Tag::UNA),
                    kind: ErrorKind::UnbBeforeUnz {
                        control_ref: b.unb.control_ref.to_string(),
                    },
                })
            } else {
                // Looked at where it was returned rather than moved into a variable that
                // outlives the iteration: that move read the freshly stored tag back as part of
                // a wider word, and the stalled load cost a tenth of the parse.
                let next = read_segment(data, pos, number + 1, &seps);
                match &next {
                    Ok(seg) if seg.tag == Tag::UNB => Some(seg.error(ErrorKind::UnbBeforeUnz {
                        control_ref: b.unb.control_ref.to_string(),
                    })),
                    Ok(seg) => {
                        (number, end) = (seg.number, seg.end());
                        b.hash(data, seg);
                        if seg.tag == Tag::UNZ {
                            b.unz(seg);
                            break;
                        }
                        b.segment(seg);
                        None
                    }
                    Err(_) => next.err(),
                }
            };
            if let Some(e) = fatal {
                // The first error found is the one reported; the iterator stops either way.
                self.segment_number = number;
                self.done = true;
                self.context = Some(b.context.take().unwrap_or_else(|| b.context_now()));
                return Err(b.first_error.unwrap_or(e));
            }
        }
        self.segment_number = number;
        self.pos = end;
        self.context = b.context.take();
        let (result, spare) = b.finish(&data[start..end]);
        self.spare = spare;
        result.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rejected_interchange_has_its_context_by_the_offset_of_its_error() {
        let mut data = Vec::new();
        for n in 0..3 {
            data.extend_from_slice(
                format!(
                    "UNB+UNOC:3+S+R+240101:1200+R{n}'UNH+{n}+ORDERS:D:96A:UN'BGM+220'UNT+9+{n}'UNZ+1+R{n}'"
                )
                .as_bytes(),
            );
        }
        let errors: Vec<usize> = interchanges(&data)
            .filter_map(|i| i.err().map(|e| e.offset))
            .collect();
        assert_eq!(errors.len(), 3);
        let contexts = rejected_contexts(&data);
        assert_eq!(contexts.len(), 3);
        for (n, offset) in errors.iter().enumerate() {
            let c = &contexts[offset];
            assert_eq!(c.unb.control_ref.as_str(), format!("R{n}"));
            let (reference, s009) = c.message.as_ref().unwrap();
            assert_eq!(reference.as_str(), n.to_string());
            assert_eq!(s009[0].as_str(), "ORDERS");
        }
    }
}
