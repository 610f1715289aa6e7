//! A relay on loopback between a broker's client library and the broker, for what the libraries
//! cannot be told to do: take a delivery whose metadata they refuse. async-nats drops the
//! connection on a header that is not UTF-8 or a header line without a colon, lapin on a
//! property that is not UTF-8 (a `message_id` of `\xff\xfe-1`); either way the broker hands the
//! same delivery out again and the consumer reconnects forever, deciding nothing. The relay
//! passes the client's bytes through untouched and hands it the broker's frames repaired by the
//! broker's module (what cannot be read shown escaped, in a form the library takes), so that
//! each delivery is decided on its bytes and settled like any other.
//!
//! It runs on the feed's own runtime: it moves bytes only while the feed waits on the broker.
//! Each connection the client opens (again, after a reconnect) is one connection to the broker.

use std::io;
use std::net::SocketAddr;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// What repairs the broker's bytes on their way to the client: whole frames taken off the
/// front of `input`, written to `output` as they are or repaired; an incomplete frame is left
/// in `input` for more bytes. An error ends the connection (bytes that are not the protocol).
pub(super) trait Repair: Send + 'static {
    fn repair(&mut self, input: &mut BytesMut, output: &mut Vec<u8>) -> io::Result<()>;
}

/// A relay listening on `addr`; stopped when dropped.
pub(super) struct Relay {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Starts a relay to `upstream` (`HOST:PORT`), each connection repaired by a new `make()`.
/// Must be called inside the runtime that drives the client.
pub(super) async fn start<R: Repair>(upstream: String, make: fn() -> R) -> io::Result<Relay> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let accept = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                // A connection that fails is the client's to see: it ends, and the client
                // reports it (and reconnects) as it would without the relay.
                let _ = pipe(client, &upstream, make()).await;
            });
        }
    });
    Ok(Relay { addr, accept })
}

async fn pipe(client: TcpStream, upstream: &str, mut repair: impl Repair) -> io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let up = async {
        tokio::io::copy(&mut from_client, &mut to_server).await?;
        to_server.shutdown().await
    };
    let down = async {
        let mut input = BytesMut::with_capacity(64 * 1024);
        let mut output = Vec::with_capacity(64 * 1024);
        loop {
            if from_server.read_buf(&mut input).await? == 0 {
                break;
            }
            repair.repair(&mut input, &mut output)?;
            to_client.write_all(&output).await?;
            output.clear();
        }
        to_client.shutdown().await
    };
    // Either side ending ends the connection, as a direct one would.
    tokio::select! {
        r = up => r,
        r = down => r,
    }
}

/// A relay for the broker `url` names (`default_port` where it names none), and `url` made to
/// reach the broker through it.
pub(super) async fn start_for<R: Repair>(
    url: &str,
    default_port: u16,
    make: fn() -> R,
) -> anyhow::Result<(Relay, String)> {
    let unspecified = SocketAddr::from(([127, 0, 0, 1], 0));
    let (_, upstream) = through(url, unspecified, default_port)
        .ok_or_else(|| anyhow::anyhow!("not a broker address"))?;
    let relay = start(upstream, make).await?;
    let (url, _) = through(url, relay.addr, default_port)
        .ok_or_else(|| anyhow::anyhow!("not a broker address"))?;
    Ok((relay, url))
}

/// `bytes` as text a client library takes: printable ASCII as it is, every other byte (and
/// the backslash, so that nothing reads as an escape it is not) as `\xNN`.
pub(super) fn escaped(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            0x20..=0x7E if b != b'\\' => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02X}")),
        }
    }
    s
}

/// The text of `bytes` where they are UTF-8, else [`escaped`].
pub(super) fn text_or_escaped(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(escaped(bytes)),
    }
}

/// `url`'s authority (after any `user:pass@`) as `HOST:PORT`, with `default_port` where it
/// names none, and `url` with that authority replaced by `addr`: the client connects to the
/// relay with its credentials as they were.
pub(super) fn through(url: &str, addr: SocketAddr, default_port: u16) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if hostport.is_empty() {
        return None;
    }
    // `[::1]:4222`, `host:4222`, `host`.
    let has_port = match hostport.rfind(']') {
        Some(close) => hostport[close..].contains(':'),
        None => hostport.contains(':'),
    };
    let upstream = if has_port {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    Some((format!("{scheme}://{user}{addr}{path}"), upstream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_go_through_the_relay_with_their_credentials() {
        let addr: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(
            through("amqp://u:p@rabbit:5673/%2f", addr, 5672),
            Some((
                "amqp://u:p@127.0.0.1:40000/%2f".to_string(),
                "rabbit:5673".to_string()
            ))
        );
        assert_eq!(
            through("nats://nats.example", addr, 4222),
            Some((
                "nats://127.0.0.1:40000".to_string(),
                "nats.example:4222".to_string()
            ))
        );
        assert_eq!(
            through("nats://[::1]", addr, 4222).map(|t| t.1),
            Some("[::1]:4222".to_string())
        );
        assert_eq!(through("nats://", addr, 4222), None);
        assert_eq!(escaped(b"a\xff\\b\r"), "a\\xFF\\x5Cb\\x0D");
        assert_eq!(text_or_escaped("é".as_bytes()), "é");
    }
}
