//! NATS, as `consume` and `publish` both reach it: a named connection with bounded waits, its
//! URL shown without credentials.

use std::time::Duration;

/// How long connecting, and a request (a stream or consumer lookup), may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The options every connection of the program starts from: named for `role`, connecting and
/// every request bounded by [`TIMEOUT`].
pub fn options(role: &str) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::new()
        .name(super::connection_name(role))
        .connection_timeout(TIMEOUT)
        .request_timeout(Some(TIMEOUT))
}

/// For messages: the server without credentials.
pub fn shown(server: &str) -> String {
    super::without_userinfo(server)
}
