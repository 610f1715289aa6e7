//! The integration tests, one binary (as ripgrep's and cargo's suites are: one link instead of
//! nine, and helpers compiled once). Each module drives the real `edi-inbox` binary in temporary
//! folders; `parser_props` exercises the parser directly.

#[macro_use]
mod common;

mod consume;
mod contrl;
mod corpus;
/// Needs the fail points: `cargo test --features failpoints --test it crash::`.
#[cfg(feature = "failpoints")]
mod crash;
mod guarantees;
mod holes;
mod hosts;
mod ingest;
mod inspect;
mod operator;
mod packaging;
mod parser_props;
mod postgres;
mod publish;
mod samples;
