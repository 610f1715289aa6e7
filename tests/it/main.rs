//! The integration tests, one binary (as ripgrep's and cargo's suites are: one link instead of
//! nine, and helpers compiled once). Each module drives the real `edi-inbox` binary in temporary
//! folders; `parser_props` exercises the parser directly.

#[macro_use]
mod common;

#[cfg(feature = "as4")]
mod as2;
#[cfg(feature = "as4")]
mod as4;
#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
mod consume;
mod contrl;
mod corpus;
/// Needs the fail points: `cargo test --features failpoints --test it crash::`.
#[cfg(feature = "failpoints")]
mod crash;
mod docs;
mod drift;
mod effects;
mod effects_hard;
mod environment;
/// The examples name both an SQLite file and a PostgreSQL server.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
mod examples;
mod guarantees;
mod hostile_conditions;
#[cfg(feature = "postgres")]
mod hosts;
mod imports;
mod ingest;
mod inspect;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(all(feature = "postgres", feature = "sqlite"))]
mod migrate;
mod operator;
/// The Debian package is of the default build, every part in it.
#[cfg(all(
    feature = "postgres",
    feature = "nats",
    feature = "amqp",
    feature = "kafka",
    feature = "sqs"
))]
mod packaging;
mod parser_props;
#[cfg(feature = "postgres")]
mod postgres;
mod publish;
mod rejections;
mod samples;
mod segments;
mod sinks;
#[cfg(feature = "sqs")]
mod sqs;
#[cfg(any(feature = "nats", feature = "amqp"))]
mod tls;
mod x12;
mod x12_corpus;
