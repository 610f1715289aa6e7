//! A relay on loopback between a broker's client library and the broker, inside the process.
//! It is a stopgap: it exists only because two client libraries refuse deliveries that their
//! brokers hand out, and it goes where they take them.
//!
//! # Why
//!
//! A broker passes a delivery's metadata on as its publisher wrote it; the libraries read it as
//! text and, where it is not, fail the whole connection, not the one delivery:
//!
//! - async-nats (0.51, `connection.rs`) on a `MSG` or `HMSG` whose subject is not UTF-8, a
//!   header block that is not UTF-8, a header line without a colon, a header name that is not a
//!   token (`nats/frames.rs` says what it repairs);
//! - lapin (4.12, through amq-protocol 10.6, which reads every short string with
//!   `String::from_utf8`) on a short string that is not UTF-8 in a delivery's method frame or
//!   content header (a `message_id` of `\xff\xfe-1`), and on a header table holding a field
//!   type it does not know (`amqp/frames.rs`).
//!
//! The broker then hands the same delivery out again, the consumer reconnects forever and
//! decides nothing, not even the deliveries behind it. Neither library can be told to do
//! otherwise. So the client connects to this relay, which passes the client's bytes through
//! untouched and hands it the broker's frames repaired by the broker's module (what cannot be
//! read shown escaped, in a form the library takes): each delivery is decided on its bytes and
//! settled like any other. Every other source's feed goes straight to its broker, and so does
//! `publish` everywhere (it writes, and reads only the broker's answers).
//!
//! # What would retire it
//!
//! async-nats handing out such a message (its subject and headers as bytes, or an error for
//! that message alone) instead of dropping the connection: nats-io/nats.rs#1572, where a subject
//! that is not UTF-8 panicked the reader, was answered by #1573, which made it an error, and the
//! connection still drops. amq-protocol reading short strings as bytes and passing over a field
//! type it does not know: its maintainers hold that a short string that is not UTF-8 is outside
//! AMQP 0-9-1 (4.2.5.3; amqp-rs/amq-protocol#28), so that is not coming soon, although RabbitMQ
//! delivers such strings. The tests that show the need are
//! `consume::jetstream_messages_with_headers_the_client_refuses_are_decided` and
//! `consume::rabbitmq_deliveries_with_metadata_that_is_not_utf8_are_decided`: when they pass with
//! the client connected straight to the broker, that broker's relay can go.
//!
//! What it costs meanwhile: every byte from the broker is copied once more, over loopback; over
//! TLS the relay, not the library, speaks TLS to the broker (from the first byte for `amqps://`,
//! after the server's `INFO` for NATS, whose JSON it reads and writes again with the TLS flags
//! off for the client on loopback), so a NATS server that wants the handshake before its `INFO`
//! (`handshake_first`) is not supported; and a port on loopback is open for as long as the
//! client lives.
//!
//! # Whose connections it takes
//!
//! Over TLS (`amqps://`, and every NATS relay, since TLS may start after the `INFO`) the relay
//! lends each connection its TLS session and the client certificate. So it takes a connection
//! only where the kernel's table of TCP sockets (`/proc/net/tcp`) says that the socket at the
//! peer's address and port belongs to this process's effective user (`same_user`), and closes
//! any other without a word: the other users of the host cannot borrow the certificate through
//! the loopback port. What it does not cover:
//!
//! - another process of the same user: it may connect (it could read the key file too);
//! - root: refused where the program does not run as root, though root could read the key
//!   anyway; where the program runs as root, every process of root's is its user;
//! - namespaces: the table holds the sockets of the relay's own network namespace (the only
//!   ones that can reach its loopback address), their owners as this user namespace sees them,
//!   so a container sharing the network namespace under the same uid is the same user;
//! - the connection itself: the peer's address and port are looked up, not the whole
//!   connection, so a socket of this user's at that address and port would vouch for another's.
//!
//! Where the table cannot be read (no `/proc`), every connection is refused and the client sees
//! it closed. A relay to a plain broker (`amqp://`) takes anyone's connection: it lends nothing
//! (the credentials travel in the client's own bytes), and whoever reaches it could reach the
//! broker directly, unless a firewall lets only some users of the host do that.
//!
//! It runs on the feed's own runtime: it moves bytes only while the feed waits on the broker.
//! Each connection the client opens (again, after a reconnect) is one connection to the broker.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// What repairs the broker's bytes on their way to the client: whole frames taken off the
/// front of `input`, written to `output` as they are or repaired; an incomplete frame is left
/// in `input` for more bytes. An error ends the connection (bytes that are not the protocol).
pub(super) trait Repair: Send + 'static {
    fn repair(&mut self, input: &mut BytesMut, output: &mut Vec<u8>) -> io::Result<()>;
}

/// How the relay reaches the broker: as it is, or over TLS that the relay ends here, the client
/// on loopback speaking the broker's protocol in plain (so that the frames can still be
/// repaired, and the broker's certificate is checked against its own name, not loopback's).
#[derive(Clone)]
pub(super) enum Upstream {
    Plain,
    /// TLS from the first byte (`amqps://`).
    Tls(Tls),
    /// NATS: TLS after the server's `INFO`, where the server requires it or `demand` (a
    /// `tls://` URL, a TLS setting given) does; `tls` is `None` where no TLS configuration
    /// could be made (then a server that requires TLS is refused, said why).
    NatsTls {
        tls: Option<Tls>,
        demand: bool,
        no_tls_why: Option<String>,
    },
}

/// The rustls configuration and the name the broker's certificate must hold.
#[derive(Clone)]
pub(super) struct Tls {
    pub config: Arc<rustls::ClientConfig>,
    pub name: rustls::pki_types::ServerName<'static>,
}

/// A relay listening on `addr`; stopped when dropped.
pub(super) struct Relay {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    /// The last failure to reach the broker (a TLS handshake refused, say), which the client
    /// sees only as a connection closed.
    failure: Arc<Mutex<Option<String>>>,
    /// The broker's host, for messages.
    host: String,
}

impl Relay {
    /// The last failure to reach the broker, where there was one.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}

impl Relay {
    /// `e` (the client's failure to connect through the relay), said as the broker's failure
    /// where the relay saw one: a TLS handshake refused shows the client only a closed
    /// connection.
    pub fn explained(
        &self,
        e: anyhow::Error,
        settings: &crate::broker::tls::Settings,
    ) -> anyhow::Error {
        match self.failure() {
            Some(f) => {
                let host = self.host.as_str();
                anyhow::anyhow!(
                    "{}",
                    crate::broker::tls::explain(&f, settings, host)
                        .unwrap_or_else(|| format!("{host}: {f}"))
                )
            }
            None => e,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Starts a relay to `upstream` (`HOST:PORT`), each connection repaired by a new `make()`.
/// Must be called inside the runtime that drives the client.
pub(super) async fn start<R: Repair>(
    upstream: String,
    way: Upstream,
    make: fn() -> R,
) -> io::Result<Relay> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let failure = Arc::new(Mutex::new(None));
    let failed = failure.clone();
    let host = host_of(&upstream).to_string();
    let accept = tokio::spawn(async move {
        while let Ok((client, peer)) = listener.accept().await {
            // Over TLS the relay lends its connection the client certificate: no other user
            // of the host may borrow it through the loopback port.
            if !matches!(way, Upstream::Plain) && !same_user(peer) {
                continue;
            }
            let upstream = upstream.clone();
            let way = way.clone();
            let failed = failed.clone();
            tokio::spawn(async move {
                // A connection that fails is the client's to see: it ends, and the client
                // reports it (and reconnects) as it would without the relay; why is kept.
                match pipe(client, &upstream, &way, make()).await {
                    Err(Failure::Upstream(e)) => {
                        if let Ok(mut f) = failed.lock() {
                            *f = Some(e);
                        }
                    }
                    Err(Failure::Io) | Ok(()) => {}
                }
            });
        }
    });
    Ok(Relay {
        addr,
        accept,
        failure,
        host,
    })
}

/// True where the loopback connection from `peer` is this program's own user's, as the
/// kernel's table of TCP sockets says (`/proc/net/tcp`: the socket at `peer` and its uid); false
/// where the table cannot be read. What that covers and what not: the module's doc.
fn same_user(peer: SocketAddr) -> bool {
    let SocketAddr::V4(v4) = peer else {
        return false;
    };
    // The table shows an address as its 32 bits in the host's order, and the port.
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let me = rustix::process::geteuid().as_raw();
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|table| {
        table.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&local.as_str())
                && fields.get(7).and_then(|uid| uid.parse::<u32>().ok()) == Some(me)
        })
    })
}

/// Why a relayed connection ended: the broker not reached as it must be (kept, for the
/// client's error), or a connection that ended (the client's to see).
enum Failure {
    Upstream(String),
    Io,
}

impl From<io::Error> for Failure {
    fn from(_: io::Error) -> Failure {
        Failure::Io
    }
}

/// A connection to the broker, plain or TLS.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// How long the broker may take to send its first line or finish the TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn handshake(tls: &Tls, tcp: TcpStream) -> Result<Box<dyn Io>, Failure> {
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(tls.name.clone(), tcp)).await {
        Ok(Ok(stream)) => Ok(Box::new(stream)),
        Ok(Err(e)) => Err(Failure::Upstream(e.to_string())),
        Err(_) => Err(Failure::Upstream(format!(
            "no TLS handshake within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        ))),
    }
}

/// The server's first line (NATS's `INFO {...}`), read to its end and no further.
async fn first_line(tcp: &mut TcpStream) -> Result<Vec<u8>, Failure> {
    let mut line = Vec::with_capacity(1024);
    let read = async {
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if tcp.read(&mut byte).await? == 0 || line.len() > 64 * 1024 {
                return Err(Failure::Upstream(
                    "the server closed the connection before its INFO".into(),
                ));
            }
            line.push(byte[0]);
        }
        Ok(())
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, read).await {
        Ok(r) => r.map(|()| line),
        Err(_) => Err(Failure::Upstream(format!(
            "no INFO from the server within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        ))),
    }
}

/// What a NATS server's `INFO` says of TLS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct InfoTls {
    /// `tls_required`: the connection goes on in TLS after the `INFO`.
    pub required: bool,
    /// `tls_available`: the server takes TLS where the client asks for it.
    pub available: bool,
}

/// The JSON object of a NATS `INFO` line (`INFO {...}`, its `\r\n` or not); `None` where the
/// line is no `INFO` or what follows is not a JSON object.
fn info_object(line: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    let (op, rest) = line.split_at_checked(4)?;
    // The protocol's operation names are case-insensitive, its fields apart by spaces or tabs.
    if !op.eq_ignore_ascii_case(b"INFO") || !matches!(rest.first(), Some(b' ' | b'\t')) {
        return None;
    }
    serde_json::from_slice(rest).ok()
}

/// What the `INFO` `line` says of TLS, read as the JSON it is: a server may write
/// `"tls_required": true`, spaced as JSON allows, and the client library reads it so. `None`
/// where the line is no `INFO` with a JSON object.
pub(super) fn info_tls(line: &[u8]) -> Option<InfoTls> {
    let object = info_object(line)?;
    let yes = |flag: &str| object.get(flag) == Some(&serde_json::Value::Bool(true));
    Some(InfoTls {
        required: yes("tls_required"),
        available: yes("tls_available"),
    })
}

/// The server's `INFO`, as the client on loopback must see it: no TLS asked for (the relay
/// speaks it). Written again from its JSON, every other member as it was (the members in
/// another order, which JSON does not hold to); a line that is no `INFO` with a JSON object as
/// it is.
fn without_tls(info: &[u8]) -> Vec<u8> {
    let Some(mut object) = info_object(info) else {
        return info.to_vec();
    };
    for flag in ["tls_required", "tls_available"] {
        if let Some(value) = object.get_mut(flag)
            && *value == serde_json::Value::Bool(true)
        {
            *value = serde_json::Value::Bool(false);
        }
    }
    match serde_json::to_vec(&object) {
        Ok(json) => [b"INFO ".as_slice(), &json, b"\r\n"].concat(),
        Err(_) => info.to_vec(),
    }
}

async fn pipe(
    client: TcpStream,
    upstream: &str,
    way: &Upstream,
    mut repair: impl Repair,
) -> Result<(), Failure> {
    let mut tcp = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    tcp.set_nodelay(true)?;
    let (server, first): (Box<dyn Io>, Vec<u8>) = match way {
        Upstream::Plain => (Box::new(tcp), Vec::new()),
        Upstream::Tls(tls) => (handshake(tls, tcp).await?, Vec::new()),
        Upstream::NatsTls {
            tls,
            demand,
            no_tls_why,
        } => {
            let info = first_line(&mut tcp).await?;
            // An INFO that is no JSON object asks for nothing: it goes to the client as it is,
            // for the client to refuse.
            let asked = info_tls(&info).unwrap_or_default();
            let required = asked.required;
            let available = required || asked.available;
            if !required && !demand {
                (Box::new(tcp), info)
            } else if !available {
                return Err(Failure::Upstream(
                    "the server does not offer TLS (and TLS was asked for)".into(),
                ));
            } else {
                let Some(tls) = tls else {
                    return Err(Failure::Upstream(format!(
                        "the server requires TLS: {}",
                        no_tls_why.as_deref().unwrap_or("no TLS configuration")
                    )));
                };
                (handshake(tls, tcp).await?, without_tls(&info))
            }
        }
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = tokio::io::split(server);
    let up = async {
        tokio::io::copy(&mut from_client, &mut to_server).await?;
        to_server.shutdown().await
    };
    let down = async {
        let mut input = BytesMut::with_capacity(64 * 1024);
        let mut output = Vec::with_capacity(64 * 1024);
        input.extend_from_slice(&first);
        loop {
            if !input.is_empty() {
                repair.repair(&mut input, &mut output)?;
                to_client.write_all(&output).await?;
                output.clear();
            }
            // A TLS alert (a client certificate wanted or refused) comes after the handshake,
            // with the first read: kept, for the client's error.
            let read = from_server
                .read_buf(&mut input)
                .await
                .map_err(|e| match e.get_ref() {
                    Some(inner) if inner.is::<rustls::Error>() => Failure::Upstream(e.to_string()),
                    _ => Failure::Io,
                })?;
            if read == 0 {
                break;
            }
        }
        to_client.shutdown().await?;
        Ok::<(), Failure>(())
    };
    // Either side ending ends the connection, as a direct one would.
    tokio::select! {
        r = up => r?,
        r = down => r?,
    }
    Ok(())
}

/// A relay for the broker `url` names (`default_port` where it names none), and `url` made to
/// reach the broker through it (its scheme `client_scheme`: the plain one where the relay
/// speaks TLS).
pub(super) async fn start_for<R: Repair>(
    url: &str,
    default_port: u16,
    way: Upstream,
    client_scheme: &str,
    make: fn() -> R,
) -> anyhow::Result<(Relay, String)> {
    let unspecified = SocketAddr::from(([127, 0, 0, 1], 0));
    let (_, upstream) = through(url, unspecified, default_port)
        .ok_or_else(|| anyhow::anyhow!("not a broker address"))?;
    let relay = start(upstream, way, make).await?;
    let (url, _) = through(url, relay.addr, default_port)
        .ok_or_else(|| anyhow::anyhow!("not a broker address"))?;
    let url = match url.split_once("://") {
        Some((_, rest)) => format!("{client_scheme}://{rest}"),
        None => url,
    };
    Ok((relay, url))
}

/// The host of `HOST:PORT` (`[::1]:4222` gives `::1`).
pub(super) fn host_of(upstream: &str) -> &str {
    let host = match upstream.rfind(']') {
        Some(close) => &upstream[..=close],
        None => upstream.rsplit_once(':').map_or(upstream, |(h, _)| h),
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The upstream `HOST:PORT` of `url`.
pub(super) fn upstream_of(url: &str, default_port: u16) -> Option<String> {
    through(url, SocketAddr::from(([127, 0, 0, 1], 0)), default_port).map(|(_, u)| u)
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
        assert_eq!(host_of("rabbit:5671"), "rabbit");
        // A connection of this test's own is its own user's; one nobody made is not.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mine = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(same_user(mine.local_addr().unwrap()));
        assert!(!same_user("127.0.0.1:1".parse().unwrap()));
        assert_eq!(host_of("[::1]:4222"), "::1");
        assert_eq!(
            without_tls(b"INFO {\"tls_required\":true,\"x\":1}\r\n"),
            b"INFO {\"tls_required\":false,\"x\":1}\r\n"
        );
        assert_eq!(escaped(b"a\xff\\b\r"), "a\\xFF\\x5Cb\\x0D");
        assert_eq!(text_or_escaped("é".as_bytes()), "é");
    }

    /// Issue 38, item 9: the INFO was read for `"tls_required":true` as that very text; a
    /// server that spaces its JSON asks for TLS all the same, and words that only look like it
    /// do not.
    #[test]
    fn the_info_is_read_as_json_however_it_is_spaced() {
        let required = Some(InfoTls {
            required: true,
            available: false,
        });
        for line in [
            &b"INFO {\"tls_required\":true}\r\n"[..],
            b"INFO {\"server_id\": \"N1\", \"tls_required\": true}\r\n",
            b"INFO { \"tls_required\" :\ttrue }\r\n",
            b"info\t{\"tls_required\":true}",
            // The same name with a character escaped, as JSON allows.
            b"INFO {\"tls\\u005frequired\":true}\r\n",
        ] {
            assert_eq!(
                info_tls(line),
                required,
                "{:?} requires TLS",
                String::from_utf8_lossy(line)
            );
        }
        assert_eq!(
            info_tls(b"INFO {\"tls_available\": true, \"tls_required\": false}\r\n"),
            Some(InfoTls {
                required: false,
                available: true
            })
        );
        for line in [
            &b"INFO {\"x\": {\"tls_required\":true}, \"tls_required\":false}\r\n"[..],
            b"INFO {\"tls_required\":\"true\"}\r\n",
            b"INFO {}\r\n",
        ] {
            assert_eq!(
                info_tls(line),
                Some(InfoTls::default()),
                "{:?} asks for no TLS",
                String::from_utf8_lossy(line)
            );
        }
        for line in [
            &b"INFO {\"tls_required\":true\r\n"[..],
            b"INFO [true]\r\n",
            b"INFOX {}\r\n",
            b"-ERR 'Authorization Violation'\r\n",
        ] {
            assert_eq!(
                info_tls(line),
                None,
                "{:?} is no INFO with a JSON object",
                String::from_utf8_lossy(line)
            );
        }
    }

    /// Issue 38, item 9: the client on loopback must be told that no TLS follows whatever
    /// spelling the server's INFO has (it would start TLS with the relay); the other members
    /// kept.
    #[test]
    fn an_info_spaced_out_is_written_again_without_tls() {
        let out = without_tls(
            b"INFO {\"server_id\": \"N1\", \"tls_required\": true, \"tls_available\": true, \"max_payload\": 1048576, \"connect_urls\": [\"10.0.0.2:4222\"]}\r\n",
        );
        let text = String::from_utf8_lossy(&out);
        let json = text
            .strip_prefix("INFO ")
            .and_then(|t| t.strip_suffix("\r\n"))
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok());
        assert_eq!(
            json,
            Some(serde_json::json!({
                "server_id": "N1",
                "tls_required": false,
                "tls_available": false,
                "max_payload": 1048576,
                "connect_urls": ["10.0.0.2:4222"]
            })),
            "the INFO the client sees must say no TLS and keep the rest: {text}"
        );
        // What is no INFO with a JSON object passes as it is.
        assert_eq!(without_tls(b"INFO nonsense\r\n"), b"INFO nonsense\r\n");
    }
}
