//! edi-inbox: the receiving half of the transactional inbox pattern for UN/EDIFACT interchanges.
//!
//! [`edifact`] reads envelopes from raw bytes, and [`effects`] reads and checks an `--effects`
//! folder of the operator's SQL (no database: the fuzz target drives its lexer); that is all
//! the library offers: the rest is the program (`main`), built with the `cli` feature, which each part's feature brings: `sqlite`
//! and `postgres` (the inbox backends), each broker's (the `feature` of its line in the broker
//! table, `brokers.rs`) and `as4` (`receive`), all on by default. The fuzz target leaves them
//! all out, and with them the command line, the progress bar and SQLite.
//!
//! Where a new thing goes: reading a standard's bytes, `edifact/` (pure functions); reading the
//! operator's side effects, `effects/`; storage, behind the traits of `inbox/`; what every input needs before and at its decision, `intake/`;
//! a broker's connection, `broker/`, its source `consume/`, its sink `publish/`; a command,
//! `commands/` with its options in `cli.rs`.

// A build that leaves a backend or a broker out (`--no-default-features --features sqlite`)
// leaves some shared code without a caller; only the full build is held to having none.
#![cfg_attr(
    all(
        feature = "cli",
        not(all(
            feature = "sqlite",
            feature = "postgres",
            feature = "nats",
            feature = "amqp",
            feature = "kafka"
        ))
    ),
    allow(dead_code, unused_imports, unused_macros, unreachable_code)
)]

/// A place where the crash tests may stop the process dead (abort, not unwind), as a power cut
/// or `kill -9` would. Armed by `FAILPOINTS=<name>=return` (or `<n>*off->return` for the n+1th
/// pass) in a build with the `failpoints` feature; compiled to nothing otherwise.
#[cfg(feature = "cli")]
macro_rules! crash_point {
    ($name:expr) => {
        #[cfg(feature = "failpoints")]
        {
            if fail::eval($name, |_| ()).is_some() {
                std::process::abort();
            }
        }
    };
}

pub mod edifact;
pub mod effects;
pub mod envelopes;
mod segment_hash;
pub mod standard;
pub mod x12;

#[cfg(feature = "as4")]
mod as2;
#[cfg(feature = "as4")]
mod as4;
#[cfg(feature = "cli")]
#[macro_use]
mod broker;
#[cfg(feature = "cli")]
mod brokers;
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod clock;
#[cfg(feature = "cli")]
mod commands;
#[cfg(feature = "cli")]
mod consume;
#[cfg(feature = "cli")]
mod exit;
#[cfg(feature = "cli")]
mod filing;
#[cfg(feature = "cli")]
mod inbox;
#[cfg(feature = "cli")]
mod intake;
#[cfg(feature = "cli")]
mod metrics;
#[cfg(feature = "cli")]
mod output;
#[cfg(feature = "cli")]
mod publish;
#[cfg(feature = "cli")]
mod status;
#[cfg(feature = "cli")]
mod walk;

#[cfg(feature = "cli")]
pub use commands::main;
