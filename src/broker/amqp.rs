//! RabbitMQ (AMQP 0-9-1), as `consume` and `publish` both reach it: a named connection, its
//! URL shown without the password, the driver's errors scrubbed of it.

use lapin::{Connection, ConnectionProperties};

/// How long a side's setup may take (connecting, opening a channel, declaring or subscribing):
/// a broker that takes the connection and then says nothing must not hold the run.
pub const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Connects to `url` under the name of `role` (see [`super::connection_name`]); an error
/// never holds the password. Bounded by the caller, with the rest of its setup
/// ([`super::within`] and [`SETUP_TIMEOUT`]).
pub async fn connect(
    url: &str,
    role: &str,
    settings: &super::tls::Settings,
) -> anyhow::Result<Connection> {
    let properties =
        ConnectionProperties::default().with_connection_name(super::connection_name(role).into());
    let connected = if is_tls(url) {
        connect_tls(url, properties, settings).await
    } else {
        Connection::connect(url, properties).await
    };
    // The driver's message may quote the URL, password and all.
    connected.map_err(|e| {
        let text = scrub(&e.to_string(), url);
        let host = super::host_of_url(url);
        match super::tls::explain(&text, settings, &host) {
            Some(why) => anyhow::anyhow!(why),
            None => anyhow::anyhow!(text),
        }
    })
}

/// True for `amqps://`: TLS from the first byte, never plain AMQP instead.
pub fn is_tls(url: &str) -> bool {
    url.starts_with("amqps://")
}

/// `amqps://`: rustls with this run's roots and client certificate (`broker/tls.rs`), the
/// broker's certificate checked against the URL's host.
async fn connect_tls(
    url: &str,
    properties: ConnectionProperties,
    settings: &super::tls::Settings,
) -> lapin::Result<Connection> {
    let invalid = |e: String| {
        lapin::Error::from(lapin::ErrorKind::IOError(std::sync::Arc::new(
            std::io::Error::other(e),
        )))
    };
    let uri: lapin::uri::AMQPUri = url.parse().map_err(invalid)?;
    let config = settings.client_config().map_err(invalid)?;
    let connector = std::sync::Arc::new(lapin::tcp::RustlsConnector::from(config));
    let runtime = lapin::runtime::default_runtime()?;
    Connection::connector(
        uri,
        runtime,
        async move |uri, runtime| {
            let host = uri.authority.host.clone();
            let io = |e: std::io::Error| {
                lapin::Error::from(lapin::ErrorKind::IOError(std::sync::Arc::new(e)))
            };
            let addr = tokio::net::lookup_host((host.as_str(), uri.authority.port))
                .await
                .map_err(io)?
                .next()
                .ok_or_else(|| io(std::io::Error::other(format!("{host}: no address"))))?;
            let stream = lapin::tcp::AsyncTcpStream::connect(&runtime, addr)
                .await
                .map_err(io)?;
            stream.into_rustls(&connector, &host).await.map_err(io)
        },
        properties,
    )
    .await
}

/// The URL without its password (the user kept).
pub fn shown(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = match authority.rsplit_once('@') {
                Some((user, host)) => {
                    let user = user.split(':').next().unwrap_or_default();
                    format!("{user}@{host}")
                }
                None => authority.to_string(),
            };
            format!("{scheme}://{host}{path}")
        }
        None => "amqp://?".to_string(),
    }
}

/// `text` without the password `url` holds.
pub fn scrub(text: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|auth| auth.rsplit_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty());
    match password {
        Some(p) => text.replace(p, "***"),
        None => text.to_string(),
    }
}

/// `amqp://USER:PASS@HOST:PORT/VHOST/NAME` as the connection's URL (up to the vhost, which
/// is `/` where only a name follows the host) and the name (a queue or an exchange, which
/// AMQP allows to hold nearly anything but `/` here).
pub fn split_last_segment(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = match url.strip_prefix("amqps://") {
        Some(rest) => ("amqps", rest),
        None => ("amqp", url.strip_prefix("amqp://")?),
    };
    let slash = rest.find('/')?;
    let (authority, path) = rest.split_at(slash);
    let (vhost, name) = path[1..].rsplit_once('/').unwrap_or(("", &path[1..]));
    if name.is_empty() || authority.is_empty() {
        return None;
    }
    let url = if vhost.is_empty() {
        format!("{scheme}://{authority}")
    } else {
        format!("{scheme}://{authority}/{vhost}")
    };
    Some((url, name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        assert_eq!(
            shown("amqp://guest:s3cret@h:5672/%2f"),
            "amqp://guest@h:5672/%2f"
        );
        assert_eq!(shown("amqp://h"), "amqp://h");
        assert_eq!(
            scrub("bad uri amqp://u:s3cret@h", "amqp://u:s3cret@h"),
            "bad uri amqp://u:***@h"
        );
    }
}
