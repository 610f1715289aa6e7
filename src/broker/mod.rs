//! What a source and a sink of one broker share, so that `consume` and `publish` (and a
//! dead-letter publisher) reach a broker the same way: the current-thread runtime each keeps to
//! itself, connecting under a timeout with a name an operator can find in the broker's list,
//! URLs shown without their passwords and errors scrubbed of them, and a stop signal raced
//! against every wait. One module per broker (`nats.rs`, `amqp.rs`, `kafka.rs`, `sqs.rs`); what is only a source's
//! is under `consume/`, only a sink's under `publish/`.
//!
//! Where a new thing goes: a new broker's connection, naming and display in a file of its
//! name here; its source in `consume/`, its sink in `publish/`, each one file.

#[cfg(feature = "amqp")]
pub mod amqp;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
pub mod settings;
#[cfg(feature = "sqs")]
pub mod sqs;
#[cfg(feature = "broker")]
pub mod tls;

pub use settings::Settings;

#[cfg(feature = "broker")]
use std::sync::Arc;
#[cfg(feature = "broker")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "broker")]
use std::time::Duration;

#[cfg(feature = "broker")]
/// The runtime a broker's client runs on: one thread, the caller's, while it waits.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

#[cfg(feature = "broker")]
/// The name a connection shows in the broker's list: `edi-inbox consume 4242`.
pub fn connection_name(role: &str) -> String {
    format!("edi-inbox {role} {}", std::process::id())
}

/// A broker's URL as a source or destination keeps it: the whole of it for connecting, but
/// its `Debug` (which a derived `Debug` of the type holding it uses) without the password.
#[cfg(feature = "broker")]
#[derive(Clone, PartialEq, Eq)]
pub struct Url(String);

#[cfg(feature = "broker")]
impl std::ops::Deref for Url {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

#[cfg(feature = "broker")]
impl From<String> for Url {
    fn from(url: String) -> Url {
        Url(url)
    }
}

#[cfg(feature = "broker")]
impl From<&str> for Url {
    fn from(url: &str) -> Url {
        Url(url.to_string())
    }
}

#[cfg(feature = "broker")]
impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Url")
            .field(&without_userinfo(&self.0))
            .finish()
    }
}

#[cfg(feature = "broker")]
/// A URL without its `user:password@`, for messages.
pub fn without_userinfo(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

#[cfg(feature = "broker")]
/// The host a URL names (no user part, no port), for messages and for checking a certificate.
pub fn host_of_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match hostport.rfind(']') {
        Some(close) => &hostport[..=close],
        None => hostport.rsplit_once(':').map_or(hostport, |(h, _)| h),
    };
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

#[cfg(feature = "broker")]
/// Resolves once `stop` is set (never without one): raced against a broker's answers.
pub async fn stopped(stop: Option<Arc<AtomicBool>>) {
    let Some(stop) = stop else {
        return std::future::pending().await;
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(feature = "broker")]
/// `fut`, or an error saying nothing came within `limit`: no wait on a broker is unbounded.
pub async fn within<T>(
    limit: Duration,
    fut: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!("no answer within {} s", limit.as_secs())),
    }
}

#[cfg(all(test, feature = "broker"))]
mod tests {
    use super::*;

    #[test]
    fn a_url_held_by_a_source_or_sink_never_debugs_its_password() {
        for url in [
            "nats://edi:s3cret@h:4222/edi",
            "amqp://edi:s3cret@h:5672/%2f",
            "amqps://edi:s3cret@h/vh",
        ] {
            let held = Url::from(url);
            let debug = format!("{held:?}");
            assert!(!debug.contains("s3cret") && debug.contains("h"), "{debug}");
            assert_eq!(&*held, url, "connecting uses the whole URL");
        }
        assert_eq!(
            host_of_url("amqps://u:p@mq.example:5671/vh/q"),
            "mq.example"
        );
        assert_eq!(host_of_url("tls://[::1]:4222"), "::1");
        assert_eq!(host_of_url("nats://h"), "h");
    }
}
