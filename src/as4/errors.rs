//! The ebMS 3.0 errors a receiver answers with (ebMS Core 6.7, AS4 profile): the code, its short
//! description and category, as the sender's MSH reads them.

/// One ebMS error, by its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EbmsError {
    /// EBMS:0001: a value the receiver does not know (no partner of that party id, not our id).
    ValueNotRecognized,
    /// EBMS:0003: values that contradict each other.
    ValueInconsistent,
    /// EBMS:0004: anything else (a payload that is not there, a database failure).
    Other,
    /// EBMS:0009: the header is not one this receiver can read.
    InvalidHeader,
    /// EBMS:0101: the signature is missing its mark: wrong, or by an unknown certificate.
    FailedAuthentication,
    /// EBMS:0102: the payload does not decrypt.
    FailedDecryption,
    /// EBMS:0103: the message is not secured as the profile asks (unsigned, unencrypted, other
    /// algorithms).
    PolicyNoncompliance,
    /// EBMS:0303: a payload does not inflate (or inflates past the bound).
    DecompressionFailure,
}

impl EbmsError {
    /// `EBMS:0101`.
    pub fn code(self) -> &'static str {
        match self {
            EbmsError::ValueNotRecognized => "EBMS:0001",
            EbmsError::ValueInconsistent => "EBMS:0003",
            EbmsError::Other => "EBMS:0004",
            EbmsError::InvalidHeader => "EBMS:0009",
            EbmsError::FailedAuthentication => "EBMS:0101",
            EbmsError::FailedDecryption => "EBMS:0102",
            EbmsError::PolicyNoncompliance => "EBMS:0103",
            EbmsError::DecompressionFailure => "EBMS:0303",
        }
    }

    /// `FailedAuthentication`.
    pub fn short(self) -> &'static str {
        match self {
            EbmsError::ValueNotRecognized => "ValueNotRecognized",
            EbmsError::ValueInconsistent => "ValueInconsistent",
            EbmsError::Other => "Other",
            EbmsError::InvalidHeader => "InvalidHeader",
            EbmsError::FailedAuthentication => "FailedAuthentication",
            EbmsError::FailedDecryption => "FailedDecryption",
            EbmsError::PolicyNoncompliance => "PolicyNoncompliance",
            EbmsError::DecompressionFailure => "DecompressionFailure",
        }
    }

    /// The error's category (ebMS Core table 6.7.1).
    pub fn category(self) -> &'static str {
        match self {
            EbmsError::ValueNotRecognized
            | EbmsError::ValueInconsistent
            | EbmsError::Other
            | EbmsError::DecompressionFailure => "Content",
            EbmsError::InvalidHeader => "Unpackaging",
            EbmsError::FailedAuthentication
            | EbmsError::FailedDecryption
            | EbmsError::PolicyNoncompliance => "Processing",
        }
    }
}

/// A message refused: the error, and what exactly was wrong (for the log and the error's
/// description).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub error: EbmsError,
    pub detail: String,
}

/// How much of a refusal's detail is kept: it may quote what a sender sent, and goes into the
/// log, the metrics' report and the signed error.
const MAX_DETAIL: usize = 400;

impl Refusal {
    pub fn new(error: EbmsError, detail: impl Into<String>) -> Refusal {
        let mut detail: String = detail.into();
        if detail.len() > MAX_DETAIL {
            let mut end = MAX_DETAIL;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            detail.truncate(end);
            detail.push_str("...");
        }
        Refusal { error, detail }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.error.code(),
            self.error.short(),
            self.detail
        )
    }
}
