//! The machine's brokers for the publish tests: a JetStream stream (NATS on 127.0.0.1:4222) or
//! a RabbitMQ exchange and queue (127.0.0.1:5672, guest/guest) of a test's own, under unique
//! names, removed at the end, so that tests run in parallel and leave nothing behind. Where a
//! broker does not answer, the test is skipped with a notice, unless `EDI_INBOX_REQUIRE_NATS` /
//! `EDI_INBOX_REQUIRE_RABBITMQ` is set (`.ci/run` sets both): then it fails.

use std::collections::BTreeMap;

#[cfg(feature = "amqp")]
mod amqp;
#[cfg(feature = "nats")]
mod nats;

#[cfg(feature = "amqp")]
pub use amqp::{AMQP, Rabbit, close_rabbitmq_connection};
#[cfg(feature = "nats")]
pub use nats::{Jet, NATS, OwnNats};

#[cfg(any(feature = "nats", feature = "amqp"))]
pub(super) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(any(feature = "nats", feature = "amqp"))]
pub(super) fn unreachable(what: &str, variable: &str, e: &dyn std::fmt::Display) {
    assert!(
        std::env::var_os(variable).is_none(),
        "{what} does not answer ({e}), and {variable} is set"
    );
    eprintln!("{what} does not answer ({e}): not checked");
}

#[cfg(any(feature = "nats", feature = "amqp"))]
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A message as a broker holds it.
#[derive(Debug, Clone)]
pub struct Held {
    pub subject: String,
    /// Headers (NATS) or properties and application properties (AMQP), by name.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}
