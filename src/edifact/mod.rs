//! UN/EDIFACT (ISO 9735) envelopes, read from raw bytes.
//!
//! Pure functions over `&[u8]`: nothing here knows of files, databases or output. [`syntax`] reads
//! the UNA, [`lexer`] finds segments, `interchanges` walks a file's interchanges, `envelope`
//! checks UNB..UNZ, `hash` hashes each interchange, `model` is what comes out, [`message`] reads
//! a message's own segments whole (the JSON form of docs/parser.md).
//!
//! Where a new thing goes: a check of the envelope, `envelope.rs`, with its error kind in
//! `error.rs`; a character repertoire (0001), `charset.rs`; what an answer is built of,
//! `contrl.rs`; another standard (ANSI X12) beside this module, not inside it.

pub mod charset;
pub mod contrl;
mod envelope;
pub mod error;
mod hash;
mod interchanges;
pub mod lexer;
pub mod message;
mod model;
pub mod quote;
mod segments;
pub mod syntax;

pub use charset::Charset;
pub use error::{EnvelopeError, ErrorKind, Tag};
pub use interchanges::rejected_contexts;
pub use interchanges::{Interchanges, interchanges, interchanges_from};
pub use message::{HeldSegments, MessageJson, MessageSegments, message_segments};
pub use model::{Group, Interchange, Message, RejectedContext, Unb};
pub use syntax::Separators;
