//! ASC X12 envelopes (X12.5, X12.6), read from raw bytes: ISA..IEA interchanges, GS..GE
//! functional groups, ST..SE transaction sets.
//!
//! Pure functions over `&[u8]`, beside [`crate::edifact`] and sharing nothing with it but the
//! shape of what comes out: `read` walks the interchanges of some data (the fixed-width ISA,
//! its delimiters, each envelope rule), `model` is what comes out, `error` what is wrong, with
//! the code a TA1, 997 or 999 reports it by. The rules are those `shared/corpus/x12/`'s manifest
//! was judged by (its `x12_manifest.py` states each); where X12 leaves a reader room (a `U` kept
//! in ISA11 under 00501, a repeated ST02 within a group, a transport's line breaks inside
//! segments and inside the ISA, white space between segments) this reader tolerates it.
//!
//! Where a new thing goes: a rule of the envelope, `read.rs`, with its kind and its
//! acknowledgement code in `error.rs`; what an acknowledgement (TA1, 997, 999) is built of,
//! a file of its own here.

pub mod ack;
pub mod error;
mod model;
mod read;
#[cfg(test)]
mod tests;

pub use error::{AckCode, ErrorKind, X12Error};
pub use model::{Group, Interchange, Isa, RejectedContext, Separators, TransactionSet};
pub use read::{
    Interchanges, interchanges, interchanges_from, rejected_contexts, starts_interchange,
};
