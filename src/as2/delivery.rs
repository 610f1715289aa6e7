//! AS2's asynchronous MDNs (RFC 4130 7.3): a partner that names a URL in
//! `Receipt-Delivery-Option` gets its MDN POSTed there, not in the HTTP response. The MDN is
//! stored with the message's claim and queued in the inbox's `answer_outbox` in the transaction
//! that decides the message, so that it is never sent for a message that was not committed; this
//! thread of `receive` delivers what is queued, after the commit, and tries a failed delivery
//! again with a growing wait (the first within 30 seconds, [`retry_in`]) until the partner's
//! server takes it. Each try is leased in the inbox, so that two receivers of a shared inbox never
//! POST one MDN at once, and a receiver killed in the middle of one leaves it due again.
//!
//! The partner's server "takes" an MDN when it answers 2xx; anything else (a refusal, no answer
//! within [`ATTEMPT_TIMEOUT`], a connection refused) is a failed try, counted and retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

use super::entity::Entity;
use crate::inbox::{AnswerOutbox, DueAnswer};

/// How often the outbox is looked at for MDNs due.
const POLL: Duration = Duration::from_millis(500);

/// The longest one try may take: connecting, TLS, sending, and the partner's status line.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// A try's lease: longer than the try, so that no other receiver takes its MDN meanwhile.
const LEASE: Duration = Duration::from_secs(60);

/// The wait before the first retry; each next one is twice the last, up to [`LONGEST_WAIT`].
const FIRST_RETRY: Duration = Duration::from_secs(10);
const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// The MDNs tried at once: a partner's server that is slow, or takes the connection and never
/// answers, holds one of them (for at most [`ATTEMPT_TIMEOUT`]), not the others behind it. Each
/// is taken when its try starts, so that its lease ([`LEASE`]) outlasts its try.
const AT_ONCE: usize = 8;

/// How often the backlog's figures are read for the metrics.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// The wait after the `attempts`-th failed try: 10 s, 20 s, 40 s, ... at most 10 minutes.
pub fn retry_in(attempts: i64) -> Duration {
    let doublings = (attempts.max(1) - 1).min(16) as u32;
    FIRST_RETRY.saturating_mul(1 << doublings).min(LONGEST_WAIT)
}

/// What the delivering thread tells the run.
#[derive(Debug, Clone)]
pub enum Sent {
    /// The partner's server took the MDN of `message_id` (HTTP `status`).
    /// `refusal`: the negative MDN of a message refused.
    Delivered {
        message_id: String,
        url: String,
        attempts: i64,
        status: u16,
        refusal: bool,
    },
    /// A try failed (`error`); the next comes after `retry_in`.
    Failed {
        message_id: String,
        url: String,
        attempts: i64,
        error: String,
        retry_in: Duration,
        refusal: bool,
    },
    /// The inbox failed (`error`): nothing was tried; the next look comes after a wait.
    InboxFailed { error: String },
    /// The MDNs waiting, and the age of the oldest in seconds.
    Backlog {
        undelivered: i64,
        oldest_age_seconds: Option<i64>,
    },
}

/// Delivers the MDNs due until `stop` is set, through `outbox` (the inbox's
/// [`crate::inbox::Transports::answer_outbox`]), up to [`AT_ONCE`] at a time. Every wait is
/// bounded: a stop is seen within [`POLL`], and the tries under way then end within
/// [`ATTEMPT_TIMEOUT`].
pub fn run(
    mut outbox: Box<dyn AnswerOutbox + Send>,
    roots: Option<std::path::PathBuf>,
    stop: &AtomicBool,
    mut report: impl FnMut(Sent),
) {
    // A worker thread of its own runs the tries, so that they go on (and their timeouts
    // measure the partner, not this thread) while this thread waits on the inbox: a lock held by
    // `purge`, a database restarting.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mdn-delivery")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            report(Sent::InboxFailed {
                error: format!("cannot start the MDN deliveries' runtime: {e}"),
            });
            return;
        }
    };
    // Made once; where it cannot be (no system roots), each HTTPS try fails saying why.
    let tls = mdn_tls(roots.as_deref()).map(Arc::new);
    let mut backlog_read: Option<Instant> = None;
    // The tries under way, each with its MDN, and which MDNs they are.
    let mut flying: tokio::task::JoinSet<(DueAnswer, Result<u16, String>)> =
        tokio::task::JoinSet::new();
    let mut under_way: std::collections::HashSet<(String, String, bool)> = Default::default();
    // After the inbox failed to give the MDNs due, the next look (said once, not every POLL).
    let mut next_take = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // Where the connection was lost (the server restarted), a new one; where that fails,
        // the next look says why.
        if let Err(e) = outbox.reconnect() {
            report(Sent::InboxFailed {
                error: format!("cannot connect to the inbox: {e}"),
            });
            pause(stop, Duration::from_secs(5));
            continue;
        }
        if backlog_read.is_none_or(|t| t.elapsed() >= BACKLOG_EVERY) {
            backlog_read = Some(Instant::now());
            if let Ok((undelivered, oldest_age_seconds)) = outbox.undelivered_answers() {
                report(Sent::Backlog {
                    undelivered,
                    oldest_age_seconds,
                });
            }
        }
        let free = AT_ONCE.saturating_sub(flying.len());
        if free > 0 && Instant::now() >= next_take {
            match outbox.take_due_answers(LEASE, free as u32) {
                Ok(due) => {
                    if !due.is_empty() {
                        // The figures read again after these tries, for the metrics to show
                        // them soon.
                        backlog_read = None;
                    }
                    let _entered = runtime.enter();
                    for d in due {
                        // Queued again (a sending again) while its try is under way: not tried
                        // twice at once. Taking it again made that try's outcome stale (its
                        // attempts changed), so it is tried again once this lease ends.
                        if !under_way.insert((d.transport.clone(), d.message_id.clone(), d.refusal))
                        {
                            continue;
                        }
                        let tls = tls.clone();
                        flying.spawn(async move {
                            let tried =
                                match tokio::time::timeout(ATTEMPT_TIMEOUT, post(&d, tls.as_ref()))
                                    .await
                                {
                                    Ok(tried) => tried,
                                    Err(_) => Err(format!(
                                        "no answer within {} s",
                                        ATTEMPT_TIMEOUT.as_secs()
                                    )),
                                };
                            (d, tried)
                        });
                    }
                }
                Err(e) => {
                    report(Sent::InboxFailed {
                        error: format!("cannot read the MDNs to deliver: {e}"),
                    });
                    next_take = Instant::now() + Duration::from_secs(5);
                }
            }
        }
        if flying.is_empty() {
            under_way.clear();
            pause(stop, POLL);
            continue;
        }
        // The tries run for at most POLL (so that MDNs newly due and a stop are seen), then
        // those that ended are recorded.
        let first =
            runtime.block_on(async { tokio::time::timeout(POLL, flying.join_next()).await });
        let mut ended: Vec<_> = first.ok().flatten().into_iter().collect();
        while let Some(r) = flying.try_join_next() {
            ended.push(r);
        }
        for r in ended {
            record(&mut *outbox, r, &mut under_way, &mut report);
        }
    }
    // Stopping: the tries under way end (each within ATTEMPT_TIMEOUT) and are recorded, so that
    // an MDN the partner took is not sent again by the next run.
    while let Some(r) = runtime.block_on(flying.join_next()) {
        record(&mut *outbox, r, &mut under_way, &mut report);
    }
    // A host name still being looked up (on a blocking thread no timeout cancels) is not
    // waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// Records a try's outcome in the outbox and reports it. Only where the row is still this
/// try's (its attempts unchanged: not taken again after its lease, nor queued again since by a
/// sending again, whose MDN is then tried afresh).
fn record(
    outbox: &mut dyn AnswerOutbox,
    ended: Result<(DueAnswer, Result<u16, String>), tokio::task::JoinError>,
    under_way: &mut std::collections::HashSet<(String, String, bool)>,
    report: &mut impl FnMut(Sent),
) {
    let (d, tried) = match ended {
        Ok(ended) => ended,
        Err(e) => {
            // Its lease ends and it is due again. (A task only ends so by a panic, which the
            // drop guard of `receive` reports; which MDN it was is lost with it, so the set of
            // those under way is cleared where no try is left.)
            report(Sent::InboxFailed {
                error: format!("a try of an MDN's delivery ended unexpectedly: {e}"),
            });
            return;
        }
    };
    under_way.remove(&(d.transport.clone(), d.message_id.clone(), d.refusal));
    let stored = match &tried {
        Ok(_) => outbox.answer_delivered(&d),
        Err(why) => outbox.answer_not_delivered(&d, why, retry_in(d.attempts)),
    };
    if let Err(e) = stored {
        // Its lease ends and it is due again: delivered twice at worst, never lost.
        report(Sent::InboxFailed {
            error: format!(
                "cannot record the delivery of the MDN of {}:{}: {e}",
                d.transport, d.message_id
            ),
        });
    }
    report(match tried {
        Ok(status) => Sent::Delivered {
            url: shown(&d.url),
            message_id: d.message_id,
            attempts: d.attempts,
            status,
            refusal: d.refusal,
        },
        Err(error) => Sent::Failed {
            retry_in: retry_in(d.attempts),
            url: shown(&d.url),
            message_id: d.message_id,
            attempts: d.attempts,
            error,
            refusal: d.refusal,
        },
    });
}

/// A URL as the run's lines and JSON show it: its scheme, host, port and path, never its
/// query (which may carry a partner's token).
fn shown(url: &str) -> String {
    match url.split_once('?') {
        Some((before, _)) => format!("{before}?..."),
        None => url.to_string(),
    }
}

/// The TLS client of the asynchronous MDNs' deliveries: the servers checked against `roots`,
/// or the system's roots.
pub fn mdn_tls(roots: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    let settings = crate::broker::tls::Settings {
        ca: roots.map(std::path::Path::to_path_buf),
        ..Default::default()
    };
    settings
        .client_config()
        .map_err(|e| e.trim_start_matches("--tls-ca: ").to_string())
}

/// Sleeps `wait`, or until `stop` is set.
fn pause(stop: &AtomicBool, wait: Duration) {
    let until = Instant::now() + wait;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50).min(wait));
    }
}

/// The URL of a delivery, read: `http` or `https`, its host, port and path.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    https: bool,
    host: String,
    port: u16,
    /// The path and query, as the request line takes it.
    path: String,
    /// The Host header's value.
    authority: String,
}

fn target(url: &str) -> Result<Target, String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| "the Receipt-Delivery-Option is not a URL".to_string())?;
    let https = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("https") => true,
        Some(s) if s.eq_ignore_ascii_case("http") => false,
        _ => {
            return Err(
                "the Receipt-Delivery-Option is not an http:// or https:// URL (mailto: is not supported)"
                    .into(),
            );
        }
    };
    let authority = uri
        .authority()
        .ok_or("the Receipt-Delivery-Option names no host")?;
    if authority.as_str().contains('@') {
        return Err("the Receipt-Delivery-Option carries credentials, which are not sent".into());
    }
    Ok(Target {
        https,
        host: authority.host().to_string(),
        port: authority.port_u16().unwrap_or(if https { 443 } else { 80 }),
        path: uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into()),
        authority: authority.as_str().to_string(),
    })
}

/// Checks that `url` can be delivered to (a scheme and host this thread takes): for the
/// receiving side, which refuses a message whose MDN could never go out.
pub fn check_url(url: &str) -> Result<(), String> {
    target(url).map(|_| ())
}

/// Whether `url` is under one of `prefixes` (a partner's `mdn_urls`): the same scheme, host
/// (in any case) and port, and a path that starts with the prefix's. Compared as read, never
/// as text, so that `https://acme.example.evil.test/` is not under `https://acme.example`.
pub fn allowed(url: &str, prefixes: &[String]) -> bool {
    let Ok(t) = target(url) else {
        return false;
    };
    prefixes.iter().any(|p| {
        target(p).is_ok_and(|p| {
            p.https == t.https
                && p.host.eq_ignore_ascii_case(&t.host)
                && p.port == t.port
                && t.path.starts_with(&p.path)
        })
    })
}

/// POSTs one MDN: its entity's headers as the request's, its body as the body. The status where
/// the server took it (2xx).
async fn post(
    d: &DueAnswer,
    tls: Result<&Arc<rustls::ClientConfig>, &String>,
) -> Result<u16, String> {
    let t = target(&d.url)?;
    let entity =
        Entity::parse(&d.answer).map_err(|_| "the stored MDN cannot be read".to_string())?;
    let mut request =
        hyper::Request::post(t.path.as_str()).header(hyper::header::HOST, &t.authority);
    for (name, value) in &entity.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(entity.body)))
        .map_err(|e| format!("the MDN's request cannot be made: {e}"))?;
    let tcp = tokio::net::TcpStream::connect((
        t.host.trim_start_matches('[').trim_end_matches(']'),
        t.port,
    ))
    .await
    .map_err(|e| format!("cannot connect to {}:{}: {e}", t.host, t.port))?;
    let _ = tcp.set_nodelay(true);
    let status = if t.https {
        let tls = tls.map_err(|e| format!("TLS: {e}"))?;
        let name = crate::broker::tls::server_name(&t.host)?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", t.host))?;
        send(TokioIo::new(stream), request).await?
    } else {
        send(TokioIo::new(tcp), request).await?
    };
    if (200..300).contains(&status) {
        Ok(status)
    } else {
        Err(format!("the partner's server answered HTTP {status}"))
    }
}

/// Sends `request` over `io` (HTTP/1.1) and reads the status line; the body is not read.
async fn send<I>(io: I, request: hyper::Request<Full<Bytes>>) -> Result<u16, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let driving = tokio::spawn(connection);
    let answered = sender.send_request(request).await;
    driving.abort();
    answered
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("HTTP: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_start_within_thirty_seconds_and_grow_to_ten_minutes() {
        assert_eq!(retry_in(1), Duration::from_secs(10));
        assert_eq!(retry_in(2), Duration::from_secs(20));
        assert_eq!(retry_in(3), Duration::from_secs(40));
        assert_eq!(retry_in(8), Duration::from_secs(600));
        assert_eq!(retry_in(i64::MAX), Duration::from_secs(600));
        assert_eq!(retry_in(0), Duration::from_secs(10));
    }

    #[test]
    fn a_partners_mdn_urls_are_compared_as_read() {
        let allowed_ = vec!["https://acme.example/as2/".to_string()];
        assert!(allowed("https://acme.example/as2/mdn", &allowed_));
        assert!(allowed("https://ACME.example:443/as2/mdn?x=1", &allowed_));
        for not in [
            "https://acme.example.evil.test/as2/mdn",
            "http://acme.example/as2/mdn",
            "https://acme.example:8443/as2/mdn",
            "https://acme.example/other",
            "https://evil.test/?https://acme.example/as2/",
            "not a url",
        ] {
            assert!(!allowed(not, &allowed_), "{not}");
        }
    }

    #[test]
    fn a_delivery_url_is_http_or_https_with_a_host() {
        let t = target("https://partner.example:8443/as2/mdn?x=1").unwrap();
        assert_eq!(
            t,
            Target {
                https: true,
                host: "partner.example".into(),
                port: 8443,
                path: "/as2/mdn?x=1".into(),
                authority: "partner.example:8443".into(),
            }
        );
        let t = target("http://10.0.0.1").unwrap();
        assert_eq!((t.port, t.path.as_str(), t.https), (80, "/", false));
        for bad in [
            "mailto:as2@partner.example",
            "ftp://partner.example/",
            "not a url",
            "http://user:secret@partner.example/",
            "/relative",
        ] {
            let e = target(bad).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
