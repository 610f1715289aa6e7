//! The intake: what turns inputs into decisions, whatever brought them (a file, a broker's
//! delivery, an HTTP request). A command brings its inputs, [`prepare`]s them (parsing and
//! compressing ahead, off the deciding thread), hands them to [`decide()`] with the
//! [`AckPolicy`] it built from its command line, commits, and reports each [`Outcome`].
//!
//! Where a new thing goes: what every input needs before its decision, `prepare.rs` or
//! `preflight.rs`; the decision of a batch, `decide.rs`; what is answered with a CONTRL,
//! `acknowledge.rs`; what a run reports, `outcome.rs`. What is about files stays in
//! `commands/ingest/`, what is about deliveries in `commands/consume/`.

mod acknowledge;
mod decide;
mod outcome;
pub mod preflight;
pub mod prepare;

pub use acknowledge::AckPolicy;
pub use decide::{Parsed, decide, keep_refused};
pub use outcome::{Outcome, Source, Summary};
pub use prepare::{Attached, Detached};
