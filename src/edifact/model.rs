//! The data model of an interchange: UNB, its groups and messages, and the interchange itself,
//! with its bytes and hash.

use std::borrow::Cow;
use std::ops::Range;

use compact_str::CompactString;
use serde::Serialize;

use super::syntax::Separators;
use crate::standard::Standard;

/// UNB, the interchange header (ISO 9735 syntax versions 1 to 4). Text is decoded by the syntax
/// identifier and has its release characters removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unb {
    /// S001/0001 syntax identifier, such as `UNOC`.
    pub syntax_id: CompactString,
    /// S001/0002 syntax version number, `1` to `4`.
    pub syntax_version: CompactString,
    /// S002/0004 interchange sender identification.
    pub sender: CompactString,
    /// S002/0007 partner identification code qualifier of the sender.
    pub sender_qualifier: Option<CompactString>,
    /// S002/0008 address for reverse routing.
    pub sender_routing: Option<CompactString>,
    /// S003/0010 interchange recipient identification.
    pub recipient: CompactString,
    /// S003/0007 partner identification code qualifier of the recipient.
    pub recipient_qualifier: Option<CompactString>,
    /// S003/0014 routing address.
    pub recipient_routing: Option<CompactString>,
    /// S004/0017 date of preparation: YYMMDD before version 4, CCYYMMDD in version 4.
    pub date: CompactString,
    /// S004/0019 time of preparation, HHMM.
    pub time: CompactString,
    /// 0020 interchange control reference.
    pub control_ref: CompactString,
    /// S005/0022 recipient's reference or password.
    pub recipient_ref: Option<CompactString>,
    /// 0026 application reference.
    pub application_ref: Option<CompactString>,
    /// 0029 processing priority code.
    pub priority: Option<CompactString>,
    /// 0031 acknowledgement request.
    pub ack_request: Option<CompactString>,
    /// 0032 interchange agreement identifier.
    pub agreement_id: Option<CompactString>,
    /// 0035 test indicator (`1` marks a test interchange).
    pub test_indicator: Option<CompactString>,
}

impl Unb {
    /// `UNOC:3`, as the syntax identifier and version stand in S001.
    pub fn syntax(&self) -> String {
        format!("{}:{}", self.syntax_id, self.syntax_version)
    }

    /// True where 0035 marks the interchange as a test.
    pub fn is_test(&self) -> bool {
        self.test_indicator.as_deref() == Some("1")
    }

    /// True where each part of the key (0004, 0010, 0020) has a value: not empty, not only
    /// spaces (the parser rejects either as missing).
    pub fn is_keyed(&self) -> bool {
        [&self.sender, &self.recipient, &self.control_ref]
            .iter()
            .all(|v| v.bytes().any(|b| b != b' '))
    }
}

/// UNG..UNE, a functional group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// 0048 group reference number.
    pub reference: CompactString,
    /// 0038 message group identification.
    pub group_id: Option<CompactString>,
    /// S006/0040 application sender identification.
    pub sender: Option<CompactString>,
    /// S006/0007 its identification code qualifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_qualifier: Option<CompactString>,
    /// S007/0044 application recipient identification.
    pub recipient: Option<CompactString>,
    /// S007/0007 its identification code qualifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient_qualifier: Option<CompactString>,
    /// The number of messages in the group (UNE 0060 was checked against it). `0` for an
    /// empty group, which an interchange may hold beside groups that hold messages (see
    /// [`Interchange::empty_groups`]).
    pub messages: usize,
}

impl Group {
    /// S006 and S007, the application sender and recipient, each as its components stand: the
    /// identification, and its qualifier (0007) where given (what a CONTRL's UCF copies).
    pub fn parties(&self) -> [Vec<CompactString>; 2] {
        let party = |id: &Option<CompactString>, qualifier: &Option<CompactString>| {
            let mut c = vec![id.clone().unwrap_or_default()];
            c.extend(qualifier.clone());
            c
        };
        [
            party(&self.sender, &self.sender_qualifier),
            party(&self.recipient, &self.recipient_qualifier),
        ]
    }
}

/// UNH..UNT, one message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// 0062 message reference number.
    pub reference: CompactString,
    /// S009/0065 message type, such as `INVOIC`.
    pub message_type: CompactString,
    /// S009/0052 message version number, such as `D`.
    pub version: CompactString,
    /// S009/0054 message release number, such as `96A`.
    pub release: CompactString,
    /// S009/0051 controlling agency, such as `UN`.
    pub agency: CompactString,
    /// S009/0057 association assigned code, such as `EAN008`.
    pub association_code: Option<CompactString>,
    /// Segments from UNH to UNT inclusive (UNT 0074 was checked against it).
    pub segments: usize,
    /// Index into [`Interchange::groups`] of the group it belongs to.
    pub group: Option<usize>,
    /// Where UNH..UNT stand within [`Interchange::raw`], terminator of UNT included.
    pub span: Range<usize>,
    /// The number of its UNH in the bytes read (1-based, UNA not counted), so that what is
    /// said later of one of its segments (`super::message_segments`) names it as the envelope's
    /// errors do.
    #[serde(skip)]
    pub number: usize,
}

/// One interchange, valid in every rule of its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interchange<'a> {
    /// Byte offset in the file of its first byte (its UNA, or its UNB).
    pub offset: usize,
    /// Its bytes as they stand in the file, from UNA (or UNB) to the terminator of UNZ: borrowed
    /// from the input, or owned once [`Interchange::into_owned`] has detached it.
    pub raw: Cow<'a, [u8]>,
    pub separators: Separators,
    /// True where a UNA stated the separators.
    pub has_una: bool,
    pub unb: Unb,
    pub groups: Vec<Group>,
    pub messages: Vec<Message>,
    /// Segments from UNB to UNZ inclusive.
    pub segments: usize,
    /// SHA-256 over its segments from UNB to UNZ, each with its terminator, CR and LF left out.
    pub sha256: [u8; 32],
    /// The standard it is written in, part of its key in the inbox: [`Standard::Edifact`] from
    /// this parser; another standard's reader builds the same model with its own.
    pub standard: Standard,
}

impl Interchange<'_> {
    /// The same interchange owning its bytes, so that it can outlive the input (and be handed
    /// to another thread).
    pub fn into_owned(self) -> Interchange<'static> {
        Interchange {
            raw: Cow::Owned(self.raw.into_owned()),
            ..self
        }
    }

    /// The same interchange without its bytes, and where they stand in the input it was read
    /// from, so that it can be handed to another thread beside that input rather than with a
    /// copy of its bytes (a copy doubled the memory a large file takes).
    pub fn detach(self) -> (Interchange<'static>, Range<usize>) {
        let span = self.offset..self.offset + self.raw.len();
        (
            Interchange {
                raw: Cow::Borrowed(&[]),
                ..self
            },
            span,
        )
    }

    /// The interchange with its bytes again: `span` of `data`, as [`Interchange::detach`] gave
    /// them.
    pub fn reattach<'b>(self, data: &'b [u8], span: Range<usize>) -> Interchange<'b> {
        Interchange {
            raw: Cow::Borrowed(data.get(span).unwrap_or_default()),
            ..self
        }
    }

    /// Its groups that hold no message (UNE 0060 `0`), in their order: accepted beside the
    /// groups that hold messages (an interchange with no message at all is rejected), and
    /// reported (ISO 9735 0085 `32`, lower level empty).
    pub fn empty_groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.messages == 0)
    }

    /// The SHA-256 as 64 lower-case hex digits.
    pub fn sha256_hex(&self) -> String {
        crate::segment_hash::sha256_hex(&self.sha256)
    }
}

/// What the parser had read of an interchange it rejected: enough to answer it (a CONTRL
/// reporting the error at the lowest level that can express it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedContext {
    pub unb: Unb,
    pub separators: Separators,
    pub has_una: bool,
    /// UNG 0048 of the group open (or last closed) at the error.
    pub group_ref: Option<CompactString>,
    /// Its UNG S006 and S007, the application sender and recipient, each with its qualifier
    /// (0040 : 0007, 0044 : 0007) as far as given.
    pub group_parties: [Vec<CompactString>; 2],
    /// UNH 0062 and S009 (0065, 0052, 0054, 0051, 0057) of the message open (or last closed).
    pub message: Option<(CompactString, [CompactString; 5])>,
    /// S009 0065 of every message read.
    pub message_types: Vec<CompactString>,
}
