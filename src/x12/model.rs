//! What comes out of an X12 interchange: its ISA, its functional groups (GS..GE) and transaction
//! sets (ST..SE), its bytes and its hash.

use std::borrow::Cow;
use std::ops::Range;

use compact_str::CompactString;
use serde::Serialize;

use super::error::AckCode;

/// The delimiters an interchange states in its ISA (X12.5): the element separator is the ISA's
/// fourth byte, the component separator ISA16, the segment terminator the byte after ISA16, the
/// repetition separator ISA11 from version 00402 on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Separators {
    pub element: u8,
    pub component: u8,
    /// ISA11 from 00402 on; `None` before it, and where a sender kept the older `U` there.
    pub repetition: Option<u8>,
    pub terminator: u8,
}

/// ISA, the interchange control header: its 16 fixed-width elements, text decoded byte for byte
/// (X12's basic and extended character sets are single bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Isa {
    /// ISA01 authorization information qualifier.
    pub authorization_qualifier: CompactString,
    /// ISA02 authorization information.
    pub authorization: CompactString,
    /// ISA03 security information qualifier.
    pub security_qualifier: CompactString,
    /// ISA04 security information (a password: never shown).
    #[serde(skip)]
    pub security: CompactString,
    /// ISA05 interchange ID qualifier of the sender.
    pub sender_qualifier: CompactString,
    /// ISA06 interchange sender ID, trailing spaces trimmed.
    pub sender: CompactString,
    /// ISA07 interchange ID qualifier of the receiver.
    pub receiver_qualifier: CompactString,
    /// ISA08 interchange receiver ID, trailing spaces trimmed.
    pub receiver: CompactString,
    /// ISA09 interchange date, YYMMDD.
    pub date: CompactString,
    /// ISA10 interchange time, HHMM.
    pub time: CompactString,
    /// ISA11: the repetition separator from 00402 on, the standards identifier (`U`) before.
    pub isa11: CompactString,
    /// ISA12 interchange control version number, such as `00401` or `00501`.
    pub version: CompactString,
    /// ISA13 interchange control number, nine digits.
    pub control_number: CompactString,
    /// ISA14 acknowledgment requested: `1` asks for a TA1.
    pub ack_requested: CompactString,
    /// ISA15 usage indicator: `P` production, `T` test.
    pub usage: CompactString,
}

impl Isa {
    /// True where ISA15 marks the interchange as a test.
    pub fn is_test(&self) -> bool {
        self.usage == "T"
    }

    /// True where ISA14 asks for a TA1.
    pub fn wants_ta1(&self) -> bool {
        self.ack_requested == "1"
    }
}

/// GS..GE, a functional group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// GS01 functional identifier code, such as `PO` (850) or `IN` (810).
    pub functional_id: CompactString,
    /// GS02 application sender's code.
    pub application_sender: CompactString,
    /// GS03 application receiver's code.
    pub application_receiver: CompactString,
    /// GS04 date, CCYYMMDD.
    pub date: CompactString,
    /// GS05 time.
    pub time: CompactString,
    /// GS06 group control number.
    pub control_number: CompactString,
    /// GS07 responsible agency code, `X` for ASC X12.
    pub agency: CompactString,
    /// GS08 version / release / industry identifier code, such as `004010` or `005010X222A1`.
    pub version: CompactString,
    /// The number of transaction sets in it (GE01 was checked against it).
    pub sets: usize,
}

/// ST..SE, one transaction set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransactionSet {
    /// ST01 transaction set identifier code, such as `850`.
    pub id: CompactString,
    /// ST02 transaction set control number.
    pub control_number: CompactString,
    /// ST03 implementation convention reference (005010 on), such as `005010X222A1`.
    pub implementation: Option<CompactString>,
    /// Segments from ST to SE inclusive (SE01 was checked against it).
    pub segments: usize,
    /// Index into [`Interchange::groups`] of its group.
    pub group: usize,
    /// Where ST..SE stand within [`Interchange::raw`], terminator of SE included.
    pub span: Range<usize>,
    /// The number of its ST among the data's segments (1-based).
    #[serde(skip)]
    pub number: usize,
}

/// One interchange, valid in every rule of its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interchange<'a> {
    /// Byte offset in the data of its ISA.
    pub offset: usize,
    /// Its bytes as they stand, from ISA to the terminator of IEA.
    pub raw: Cow<'a, [u8]>,
    pub separators: Separators,
    pub isa: Isa,
    pub groups: Vec<Group>,
    pub sets: Vec<TransactionSet>,
    /// Interchange-level segments outside the groups (TA1, TA3, ISB, ISE), by identifier.
    pub outside: Vec<CompactString>,
    /// Segments from ISA to IEA inclusive.
    pub segments: usize,
    /// SHA-256 over its segments from ISA to IEA, each with its terminator; white space between
    /// segments and line breaks inside them (where the terminator is not one) left out, as a
    /// transport's wrapping and line breaks are not the interchange's content.
    pub sha256: [u8; 32],
}

impl Interchange<'_> {
    /// The same interchange owning its bytes.
    pub fn into_owned(self) -> Interchange<'static> {
        Interchange {
            raw: Cow::Owned(self.raw.into_owned()),
            ..self
        }
    }

    /// The SHA-256 as 64 lower-case hex digits.
    pub fn sha256_hex(&self) -> String {
        crate::segment_hash::sha256_hex(&self.sha256)
    }
}

/// What the reader had read of an interchange it rejected, where it had read the ISA: enough to
/// answer it (a TA1 rejecting the interchange, and a 997 or 999 naming the group and the set
/// the error stands in) and to store the rejection under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedContext {
    pub isa: Isa,
    pub separators: Separators,
    /// The functional group the error stands in, or closes (GE) or leaves open (IEA, a second
    /// GS), with the number of sets read in it up to the error.
    pub group: Option<Group>,
    /// The transaction set the error stands in or closes (SE), or leaves open.
    pub set: Option<TransactionSet>,
    /// The code an acknowledgement reports the error with ([`crate::x12::X12Error::ack_code`]).
    pub ack: AckCode,
}
