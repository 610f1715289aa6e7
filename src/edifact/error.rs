//! Typed envelope errors: each names the byte offset, the segment and what is wrong with it.

use std::fmt;

/// A three-character segment tag, such as `UNB` (ISO 9735 segment tag, element 0001 of the
/// segment's own tag composite).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tag(pub [u8; 3]);

impl Tag {
    pub const UNA: Tag = Tag(*b"UNA");
    pub const UNB: Tag = Tag(*b"UNB");
    pub const UNZ: Tag = Tag(*b"UNZ");
    pub const UNG: Tag = Tag(*b"UNG");
    pub const UNE: Tag = Tag(*b"UNE");
    pub const UNH: Tag = Tag(*b"UNH");
    pub const UNT: Tag = Tag(*b"UNT");
    /// X12's transaction set header and trailer, padded as [`Tag::x12`] pads them.
    pub const ST: Tag = Tag(*b"ST ");
    pub const SE: Tag = Tag(*b"SE ");

    pub fn as_str(&self) -> &str {
        // Tags are checked to be ASCII letters and digits before a `Tag` is made; an X12 tag
        // of two characters is padded with a space, which is not shown.
        std::str::from_utf8(&self.0).unwrap_or("???").trim_end()
    }

    /// Whether it is the tag `name` is (as [`Tag::as_str`] shows it), without reading it as
    /// text: a lookup by tag compares every segment's.
    pub fn is(&self, name: &[u8]) -> bool {
        Tag::named(name) == Some(*self)
    }

    /// The tag that shows as `name` (as [`Tag::as_str`] shows it), where one can: three bytes
    /// not ending in a space, or two (an X12 identifier, padded).
    pub fn named(name: &[u8]) -> Option<Tag> {
        match *name {
            [a, b, c] if c != b' ' => Some(Tag([a, b, c])),
            [a, b] => Some(Tag([a, b, b' '])),
            _ => None,
        }
    }

    /// An ANSI X12 segment identifier (two or three letters or digits) as a tag: `ST` is kept
    /// as `ST ` and shown as `ST`. `None` for anything else.
    pub fn x12(id: &str) -> Option<Tag> {
        let b = id.as_bytes();
        if !(2..=3).contains(&b.len()) || !b.iter().all(u8::is_ascii_alphanumeric) {
            return None;
        }
        let mut t = [b' '; 3];
        t[..b.len()].copy_from_slice(b);
        Some(Tag(t))
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Shows one byte for an error message: printable ASCII as itself, anything else in hex.
pub fn show_byte(b: u8) -> String {
    match b {
        b'\r' => "CR".to_string(),
        b'\n' => "LF".to_string(),
        b' ' => "space".to_string(),
        0x21..=0x7E => format!("'{}'", b as char),
        _ => format!("0x{b:02X}"),
    }
}

/// Shows a few bytes of input for an error message, never more than 16 of them.
pub fn show_bytes(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(16) {
        match b {
            0x20..=0x7E if b != b'`' => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02X}")),
        }
    }
    if bytes.len() > 16 {
        s.push_str("...");
    }
    s
}

/// The noun for a count as the file states it: `1 message`, `01 message`, `2 messages`.
fn noun(count: &str, one: &'static str, many: &'static str) -> &'static str {
    if count.trim_start_matches('0') == "1" {
        one
    } else {
        many
    }
}

/// What went wrong, one variant per rule of the envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    #[error("the file is empty: it holds no interchange")]
    Empty,
    #[error("stands where an interchange must begin: expected UNA or UNB")]
    NoInterchange,
    #[error("the UNA service string advice has {found} of its 6 characters")]
    TruncatedUna { found: usize },
    #[error("the UNA service string advice {reason}")]
    BadUna { reason: String },
    #[error("`{found}` is not a segment tag (three letters or digits)")]
    BadTag { found: String },
    #[error("release character {release} at the end of the file has nothing to release")]
    DanglingRelease { release: String },
    #[error("has no segment terminator {terminator} before the end of the file")]
    Unterminated { terminator: String },
    #[error("{len} bytes at the end of the file are not a terminated segment: `{found}`")]
    TrailingData { len: usize, found: String },
    #[error("the file ends before interchange {control_ref} has its UNZ")]
    MissingUnz { control_ref: String },
    #[error("starts an interchange before interchange {control_ref} has its UNZ")]
    UnbBeforeUnz { control_ref: String },
    #[error("has no {element}")]
    MissingElement { element: &'static str },
    #[error("syntax version number (S001/0002) `{found}` is not one ISO 9735 defines (1 to 4)")]
    UnsupportedSyntaxVersion { found: String },
    #[error("holds a NUL byte in a value: no EDIFACT character repertoire has one")]
    NulByte,
    #[error("{element} `{found}` is not a number")]
    BadCount {
        element: &'static str,
        found: String,
    },
    #[error("lies outside any message: only service segments may stand between UNH..UNT pairs")]
    OutsideMessage,
    #[error("opens message {reference} while message {open} has no UNT")]
    UnhWithoutUnt { reference: String, open: String },
    #[error("closes message {open}'s group or interchange, but the message has no UNT")]
    MessageNotClosed { open: String },
    #[error("closes a message, but no UNH opened one")]
    UntWithoutUnh,
    #[error("opens group {reference} while group {open} has no UNE")]
    UngWithoutUne { reference: String, open: String },
    #[error("closes the interchange, but group {open} has no UNE")]
    GroupNotClosed { open: String },
    #[error("closes a group, but no UNG opened one")]
    UneWithoutUng,
    #[error("message stands outside a group in an interchange that uses groups")]
    MixedGroups,
    #[error(
        "counts {declared} {}; the message has {actual}",
        noun(declared, "segment", "segments")
    )]
    UntCount { declared: String, actual: usize },
    #[error("names message {found}; its UNH names {expected}")]
    UntReference { found: String, expected: String },
    #[error("repeats message reference {reference} (0062) within {}", match group {
        Some(g) => format!("group {g}"),
        None => "the interchange".to_string(),
    })]
    DuplicateMessage {
        reference: String,
        /// The group (0048) within which references must be unique, where groups are used.
        group: Option<String>,
    },
    #[error("repeats group reference {reference} (0048) within the interchange")]
    DuplicateGroup { reference: String },
    #[error(
        "counts {declared} {}; the group has {actual}",
        noun(declared, "message", "messages")
    )]
    UneCount { declared: String, actual: usize },
    #[error("names group {found}; its UNG names {expected}")]
    UneReference { found: String, expected: String },
    #[error("counts {declared} {}; the interchange has {actual}", noun(declared, what.0, what.1))]
    UnzCount {
        declared: String,
        actual: usize,
        /// What UNZ 0036 counts: messages, or groups where groups are used.
        what: (&'static str, &'static str),
    },
    #[error("names interchange {found}; its UNB names {expected}")]
    UnzReference { found: String, expected: String },
    #[error("closes a{} {what} that holds no message", if *what == "interchange" { "n" } else { "" })]
    LowerLevelEmpty {
        /// `interchange` or `group`.
        what: &'static str,
    },
    /// A message handed to the segment reader (`super::message_segments`) whose span is not
    /// within its interchange's bytes: a detached interchange, or one the parser did not make.
    #[error("message {reference} spans bytes {start}..{end} of its interchange, which has {len}")]
    MessageOutside {
        reference: String,
        start: usize,
        end: usize,
        len: usize,
    },
    /// A message handed to the segment reader whose bytes do not run from a UNH to a UNT.
    #[error("stands where message {reference}'s {expected} must")]
    NotMessageBound {
        reference: String,
        /// `UNH` or `UNT`.
        expected: &'static str,
    },
    /// An ANSI X12 interchange's envelope error (`crate::x12`), carried in the same place as
    /// EDIFACT's so that a file of either standard is reported, stored and counted alike: the
    /// X12 reader's own kind code (`crate::x12::ErrorKind::code`) and its sentence.
    #[error("{detail}")]
    X12 {
        code: &'static str,
        detail: String,
        /// Whether the reader went on after it (a count or a control number that does not
        /// match: the interchange's structure is intact).
        recoverable: bool,
    },
}

/// An envelope error at a place in the file.
///
/// Displays as one sentence: `UNT at byte 412 (segment 11) counts 12 segments; the message has 11`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct EnvelopeError {
    /// Byte offset in the file: the first byte of the segment, or where the problem was found.
    pub offset: usize,
    /// 1-based number of the segment in the file (UNA not counted), where one is concerned.
    pub segment: Option<usize>,
    /// The tag of that segment, where it has a valid one.
    pub tag: Option<Tag>,
    pub kind: ErrorKind,
}

impl EnvelopeError {
    /// An error at a byte, concerning no particular segment.
    pub fn at(offset: usize, kind: ErrorKind) -> Self {
        EnvelopeError {
            offset,
            segment: None,
            tag: None,
            kind,
        }
    }

    /// True where the structure around the error is intact, so that the rest of the interchange
    /// can still be read up to its UNZ and later interchanges of the file can still be parsed.
    pub fn is_recoverable(&self) -> bool {
        if let ErrorKind::X12 { recoverable, .. } = self.kind {
            return recoverable;
        }
        !matches!(
            self.kind,
            ErrorKind::Empty
                | ErrorKind::NoInterchange
                | ErrorKind::TruncatedUna { .. }
                | ErrorKind::BadUna { .. }
                | ErrorKind::BadTag { .. }
                | ErrorKind::DanglingRelease { .. }
                | ErrorKind::Unterminated { .. }
                | ErrorKind::TrailingData { .. }
                | ErrorKind::MissingUnz { .. }
                | ErrorKind::UnbBeforeUnz { .. }
        )
    }

    /// A short stable name of the kind, for JSON and the database.
    pub fn code(&self) -> &'static str {
        match self.kind {
            ErrorKind::Empty => "empty",
            ErrorKind::NoInterchange => "no-interchange",
            ErrorKind::TruncatedUna { .. } => "truncated-una",
            ErrorKind::BadUna { .. } => "bad-una",
            ErrorKind::BadTag { .. } => "bad-tag",
            ErrorKind::DanglingRelease { .. } => "dangling-release",
            ErrorKind::Unterminated { .. } => "unterminated",
            ErrorKind::TrailingData { .. } => "trailing-data",
            ErrorKind::MissingUnz { .. } | ErrorKind::UnbBeforeUnz { .. } => "missing-unz",
            ErrorKind::MissingElement { .. } => "missing-element",
            ErrorKind::UnsupportedSyntaxVersion { .. } => "unsupported-syntax-version",
            ErrorKind::NulByte => "nul-byte",
            ErrorKind::BadCount { .. } => "bad-count",
            ErrorKind::OutsideMessage => "outside-message",
            ErrorKind::UnhWithoutUnt { .. } | ErrorKind::MessageNotClosed { .. } => {
                "unh-without-unt"
            }
            ErrorKind::UntWithoutUnh => "unt-without-unh",
            ErrorKind::UngWithoutUne { .. } | ErrorKind::GroupNotClosed { .. } => "ung-without-une",
            ErrorKind::UneWithoutUng => "une-without-ung",
            ErrorKind::MixedGroups => "mixed-groups",
            ErrorKind::UntCount { .. } => "unt-count",
            ErrorKind::UntReference { .. } => "unt-reference",
            ErrorKind::DuplicateMessage { .. } => "duplicate-message-ref",
            ErrorKind::DuplicateGroup { .. } => "duplicate-group-ref",
            ErrorKind::UneCount { .. } => "une-count",
            ErrorKind::UneReference { .. } => "une-reference",
            ErrorKind::UnzCount { .. } => "unz-count",
            ErrorKind::UnzReference { .. } => "unz-reference",
            ErrorKind::LowerLevelEmpty { .. } => "lower-level-empty",
            ErrorKind::MessageOutside { .. } => "message-outside",
            ErrorKind::NotMessageBound { .. } => "not-message-bound",
            ErrorKind::X12 { code, .. } => code,
        }
    }
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tag, self.segment) {
            (Some(tag), Some(n)) => write!(
                f,
                "{tag} at byte {} (segment {n}) {}",
                self.offset, self.kind
            ),
            (Some(tag), None) => write!(f, "{tag} at byte {} {}", self.offset, self.kind),
            (None, Some(n)) => write!(f, "segment {n} at byte {}: {}", self.offset, self.kind),
            _ => write!(f, "at byte {}: {}", self.offset, self.kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_the_name_it_shows() {
        for tag in [Tag::UNH, Tag::ST, Tag(*b"LIN"), Tag::x12("N1").unwrap()] {
            assert!(tag.is(tag.as_str().as_bytes()), "{}", tag.as_str());
        }
        assert!(Tag::ST.is(b"ST"));
        assert!(!Tag::ST.is(b"ST "));
        assert!(!Tag::ST.is(b"S"));
        assert!(!Tag::UNH.is(b"UN"));
        assert!(!Tag::UNH.is(b"UNHX"));
        assert!(!Tag::UNH.is(b"unh"));
        assert!(!Tag::UNH.is(b""));
    }

    #[test]
    fn reads_as_one_sentence() {
        let e = EnvelopeError {
            offset: 412,
            segment: Some(11),
            tag: Some(Tag::UNT),
            kind: ErrorKind::UntCount {
                declared: "12".into(),
                actual: 11,
            },
        };
        assert_eq!(
            e.to_string(),
            "UNT at byte 412 (segment 11) counts 12 segments; the message has 11"
        );
        let one = ErrorKind::UneCount {
            declared: "01".into(),
            actual: 2,
        };
        assert_eq!(one.to_string(), "counts 01 message; the group has 2");
        assert_eq!(
            EnvelopeError::at(9, ErrorKind::Empty).to_string(),
            "at byte 9: the file is empty: it holds no interchange"
        );
    }

    #[test]
    fn shows_bytes_safely() {
        assert_eq!(show_bytes(b"AB\x00\xff"), "AB\\x00\\xFF");
        assert_eq!(show_byte(b'\''), "'''");
        assert_eq!(show_byte(0x1c), "0x1C");
    }
}
