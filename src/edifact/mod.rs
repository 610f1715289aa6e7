//! UN/EDIFACT (ISO 9735) envelopes, read from raw bytes.
//!
//! Pure functions over `&[u8]`: nothing here knows of files, databases or output. [`syntax`] reads
//! the UNA, [`lexer`] finds segments, [`envelope`] checks UNB..UNZ and hashes the interchange.

pub mod charset;
pub mod envelope;
pub mod error;
pub mod lexer;
pub mod syntax;

pub use charset::Charset;
pub use envelope::{Group, Interchange, Interchanges, Message, Unb, hex, interchanges};
pub use error::{EnvelopeError, ErrorKind, Tag};
pub use syntax::Separators;
