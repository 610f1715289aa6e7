//! The intake: what turns inputs into decisions, whatever brought them (a file, a broker's
//! delivery, an HTTP request). A command brings its inputs, [`prepare`]s them (parsing and
//! compressing ahead, off the deciding thread), hands them to [`decide()`] with the
//! [`AckPolicy`] it built from its command line, commits, and reports each [`Outcome`].
//!
//! Where a new thing goes: what every input needs before its decision, `prepare.rs` or
//! `preflight.rs`; the decision of a batch, `decide.rs`; of a batch of deliveries, whatever
//! transport brought them, `deliveries.rs`; a transport's message ids claimed with the
//! decisions and their answers stored (AS4, AS2), `messages.rs`; what is answered with a
//! CONTRL, `acknowledge.rs`; what a run reports, `outcome.rs`. What is about files stays in
//! `commands/ingest/`, what is about a broker's deliveries in `commands/consume/`, what is a
//! transport's own in its module (`as4/`).

mod acknowledge;
mod decide;
mod deliveries;
mod messages;
mod outcome;
pub mod preflight;
pub mod prepare;

pub use acknowledge::AckPolicy;
pub use decide::{Parsed, decide};
pub use deliveries::{Delivered, Incoming, Unreadable, decide_deliveries};
pub use messages::{Answered, Message, decide_messages};
pub use outcome::{Event, Outcome, Source, Summary};
pub use prepare::{Attached, Detached};

/// What the intake's tests share.
#[cfg(all(test, feature = "sqlite"))]
mod testing {
    use crate::inbox::{Access, Inbox, Location};

    /// An SQLite inbox in a folder of its own (kept while the folder is).
    pub fn scratch_inbox() -> (tempfile::TempDir, Box<dyn Inbox>) {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let inbox = crate::inbox::open(
            &Location::Sqlite(dir.path().join("inbox.db")),
            Access::Create,
            std::time::Duration::from_secs(5),
        )
        .expect("an SQLite inbox in a temporary folder");
        (dir, inbox)
    }

    /// One interchange with one message, for tests that decide something.
    pub const INTERCHANGE: &[u8] = b"UNB+UNOC:3+SENDER+RECIPIENT+260101:1200+REF1'UNH+1+ORDERS:D:96A:UN'BGM+220+PO1'UNT+3+1'UNZ+1+REF1'";
}
