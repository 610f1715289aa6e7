//! The HTTP side of `receive`: a listener on its own thread, with a current-thread runtime kept
//! here, that reads each POST within `--max-size` and `--request-timeout`, checks it on a
//! blocking thread (`message.rs`: reading, decrypting, verifying, signing are CPU work), and
//! hands what passes to the caller's thread, which decides it in the inbox and gives the answer
//! back. Every wait is bounded. A stop (SIGTERM) closes the listener and lets the requests in
//! flight finish: each is answered.
//!
//! What one who reaches the endpoint can hold, and for how long: a request declared larger than
//! `--max-size` is answered 413 from its head (what it still sends thrown away, for at most
//! [`LINGER`]). A body is read before the request takes one of
//! the `--max-concurrent` places (which only requests whole hold, while they are checked and
//! decided), so slow senders keep no partner from a place; the bodies being read share a budget
//! of `--max-concurrent` × `--max-size` bytes ([`read_body`]). At most [`MAX_CONNECTIONS`]
//! connections are open; at the cap, the one that has gone longest without a place is closed
//! for a new one ([`Connections`]), so idle connections keep no partner out either.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::config::Config;
use super::errors::{EbmsError, Refusal};
use super::message::{self, Received, Rejected};
use super::receipt::{self, Signer};
use crate::as2;

/// The limits a request is read within.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_size: usize,
    pub max_inflated: usize,
    pub max_concurrent: usize,
    pub request_timeout: Duration,
}

/// The endpoints one server answers: AS4 at any path but `/as2`, AS2 at `/as2`; either may be
/// left out.
pub struct Endpoints {
    pub as4: Option<Arc<Config>>,
    pub as2: Option<Arc<as2::config::Config>>,
}

/// The path AS2 messages are POSTed to.
pub const AS2_PATH: &str = "/as2";

/// A message that passed every check, with the answer that tells its sender it arrived, made
/// here (beside the other checks' CPU work): the deciding thread stores it with the decision,
/// or answers the one stored before for a message sent again.
pub enum Carried {
    As4 {
        received: Box<Received>,
        receipt: Vec<u8>,
    },
    As2 {
        received: Box<as2::message::Received>,
        /// The `processed` MDN, a whole MIME entity (made even where this sending asked for
        /// none, which is then answered with an empty 200).
        mdn: Vec<u8>,
    },
}

/// What the server gives the deciding thread.
pub enum Job {
    /// A message that passed every check: decide it, and answer through `reply`.
    Decide {
        carried: Carried,
        peer: SocketAddr,
        reply: tokio::sync::oneshot::Sender<Answer>,
        /// The request's place among the `--max-concurrent` in hand, given back when the
        /// deciding thread is done with it (not when its sender stopped waiting): what waits
        /// for a decision, payloads and all, stays bounded however long the inbox stalls.
        permit: tokio::sync::OwnedSemaphorePermit,
    },
    /// A message refused (already answered): for the report and the metrics.
    Refused {
        rejected: Rejected,
        peer: SocketAddr,
    },
    /// An AS2 message refused (already answered).
    RefusedAs2 {
        refused: as2::message::Refused,
        peer: SocketAddr,
    },
    /// What the thread that delivers asynchronous MDNs did: for the report and the metrics.
    AnswerSent(as2::delivery::Sent),
}

/// The answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub format: Format,
    pub body: Vec<u8>,
}

/// What an answer's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A SOAP envelope (AS4).
    Soap,
    /// A MIME entity whose headers are the response's (an AS2 MDN).
    Mime,
    /// Plain text.
    Text,
}

impl Answer {
    pub fn soap(status: u16, body: Vec<u8>) -> Answer {
        Answer {
            status,
            format: Format::Soap,
            body,
        }
    }

    /// A negative MDN (`processed/error: MODIFIER`) where the sender asked for an MDN and one can
    /// be made; else an HTTP error with the reason.
    pub fn as2_refusal(
        config: Option<&as2::config::Config>,
        requested: &as2::mdn::Requested,
        modifier: &'static str,
        detail: &str,
    ) -> Answer {
        if requested.wanted
            && let Some(config) = config
            && let Ok(mdn) = as2::mdn::build(
                config,
                requested,
                as2::mdn::Disposition::refusing(modifier),
                None,
                &format!("The AS2 message was not processed: {detail}"),
            )
        {
            return Answer {
                status: 200,
                format: Format::Mime,
                body: mdn,
            };
        }
        Answer::text(400, &format!("processed/error: {modifier}: {detail}\n"))
    }

    pub fn text(status: u16, text: &str) -> Answer {
        Answer {
            status,
            format: Format::Text,
            body: text.as_bytes().to_vec(),
        }
    }
}

/// The Content-Type of every answer: a bare SOAP 1.2 envelope.
const SOAP: &str = "application/soap+xml; charset=utf-8";

/// Connections open at once, at most (or `--max-concurrent`, where that is more): each holds a
/// descriptor, a task and hyper's buffer. At the cap, the connection that has gone longest
/// without a place is closed for a new one ([`Connections::make_room`]).
const MAX_CONNECTIONS: usize = 512;

/// The most hyper buffers of a connection (a request's head, and body bytes not yet taken by
/// [`read_body`]): with [`MAX_CONNECTIONS`], what the connections hold outside the bodies'
/// budget. Heads larger than this are refused by hyper (431).
const MAX_BUFFER: usize = 64 * 1024;

/// How long the rest of a request refused for its size is read and thrown away, at most, after
/// its 413 is answered: a sender that sends its whole body before it reads the answer (most do)
/// then reads the 413, not a connection reset under its feet (a lingering close, as nginx's).
const LINGER: Duration = Duration::from_secs(5);

/// How long a request waits for its decision, at least: the deciding thread may wait on the
/// inbox's locks (`--busy-timeout`) and decide a batch. Past it the sender is told to send
/// again, which is safe: a decision committed meanwhile answers the retry with its receipt.
const DECISION_WAIT: Duration = Duration::from_secs(120);

/// How long a request waits for its decision: [`DECISION_WAIT`], or twice the request timeout
/// where that is longer.
pub fn decision_wait(limits: &Limits) -> Duration {
    DECISION_WAIT.max(limits.request_timeout.saturating_mul(2))
}

/// Serves `listener` until `stop`, then until the requests in flight are answered (each within
/// its request timeout and its decision's wait). Each message that passes goes to `jobs`.
pub fn serve(
    listener: std::net::TcpListener,
    config: Arc<Endpoints>,
    limits: Limits,
    stop: Arc<AtomicBool>,
    jobs: std::sync::mpsc::Sender<Job>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let shared = Arc::new(Shared {
            places: Arc::new(Semaphore::new(limits.max_concurrent)),
            budget: Arc::new(Semaphore::new(
                limits
                    .max_concurrent
                    .max(1)
                    .saturating_mul(limits.max_size)
                    .min(Semaphore::MAX_PERMITS),
            )),
            connections: Arc::new(Connections::new(MAX_CONNECTIONS.max(limits.max_concurrent))),
        });
        'accepting: loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = stopped(&stop) => break,
            };
            let Ok((stream, peer)) = accepted else {
                // A connection that failed before it was taken (reset, out of descriptors):
                // the next one is waited for, after a breath.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            // Where every connection holds a place (only where --max-concurrent is at least
            // the cap), this one waits for one to close; more wait in the kernel's backlog.
            loop {
                let closed = shared.connections.closed.notified();
                if shared.connections.make_room() {
                    break;
                }
                tokio::select! {
                    () = closed => {}
                    () = stopped(&stop) => break 'accepting,
                }
            }
            let (id, evicted) = shared.connections.open();
            let config = config.clone();
            let jobs = jobs.clone();
            let for_requests = shared.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let config = config.clone();
                let jobs = jobs.clone();
                let shared = for_requests.clone();
                async move {
                    let response = if request.uri().path() == AS2_PATH {
                        match &config.as2 {
                            Some(as2) => {
                                answer_as2(request, peer, as2.clone(), limits, jobs, shared, id)
                                    .await
                            }
                            None => plain(404, "this receiver takes no AS2 messages\n"),
                        }
                    } else {
                        match &config.as4 {
                            Some(as4) => {
                                answer(request, peer, as4.clone(), limits, jobs, shared, id).await
                            }
                            None => plain(
                                404,
                                "this receiver takes no AS4 messages; AS2 messages are POSTed to /as2\n",
                            ),
                        }
                    };
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.request_timeout)
                .max_buf_size(MAX_BUFFER)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = conn => {}
                    // Closed for a new connection: dropped, with what it had read.
                    _ = evicted => {}
                }
                shared.connections.close(id);
            });
        }
        // No new connection is taken (the kernel refuses them) while the requests in flight
        // finish; idle connections are closed.
        drop(listener);
        let _ = tokio::time::timeout(
            limits
                .request_timeout
                .saturating_add(decision_wait(&limits)),
            graceful.shutdown(),
        )
        .await;
        Ok(())
    })
}

/// What the requests of every connection share.
struct Shared {
    /// The `--max-concurrent` places: a request whole holds one while it is checked and waits
    /// for its decision (see `Job::Decide`).
    places: Arc<Semaphore>,
    /// The bytes the bodies being read, or read and not yet checked, may take together:
    /// `--max-concurrent` × `--max-size` (see [`read_body`]).
    budget: Arc<Semaphore>,
    connections: Arc<Connections>,
}

/// The connections open, and which of them may be closed for a new one: those that hold no
/// place (waiting for a request, reading its head or its body, or waiting for a place). A
/// connection holding a place (its message checked or decided) is never closed for another.
struct Connections {
    cap: usize,
    open: Mutex<Open>,
    /// Told when a connection closes (for an accept that waits for room).
    closed: tokio::sync::Notify,
}

#[derive(Default)]
struct Open {
    next: u64,
    by_id: HashMap<u64, Connection>,
}

struct Connection {
    /// Since when it has held no place; `None` while a request of it holds one.
    placeless_since: Option<Instant>,
    /// Dropped to close it (its task ends the connection).
    _evict: tokio::sync::oneshot::Sender<()>,
}

impl Connections {
    fn new(cap: usize) -> Connections {
        Connections {
            cap,
            open: Mutex::new(Open::default()),
            closed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True where a connection more may be opened: below the cap, or once the connection that
    /// has gone longest without a place is closed. False where every one holds a place.
    ///
    /// Why the longest without a place: a partner's request, read at the speed of its link,
    /// holds its connection placeless for moments; to close it, a flood must open
    /// [`MAX_CONNECTIONS`] connections in those moments. Connections that send nothing or
    /// little grow old, and go first.
    fn make_room(&self) -> bool {
        let mut open = self.lock();
        if open.by_id.len() < self.cap {
            return true;
        }
        let oldest = open
            .by_id
            .iter()
            .filter_map(|(id, c)| c.placeless_since.map(|since| (since, *id)))
            .min();
        match oldest {
            Some((_, id)) => {
                open.by_id.remove(&id);
                true
            }
            None => false,
        }
    }

    /// A new connection: its id, and what resolves when it is to be closed.
    fn open(&self) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        let (evict, evicted) = tokio::sync::oneshot::channel();
        let mut open = self.lock();
        open.next += 1;
        let id = open.next;
        open.by_id.insert(
            id,
            Connection {
                placeless_since: Some(Instant::now()),
                _evict: evict,
            },
        );
        (id, evicted)
    }

    /// Connection `id` closed (by its peer, a timeout, or [`Connections::make_room`]).
    fn close(&self, id: u64) {
        if self.lock().by_id.remove(&id).is_some() {
            self.closed.notify_one();
        }
    }

    /// Connection `id` holds a place until the guard is dropped (its request answered, or
    /// dropped).
    fn hold(self: &Arc<Self>, id: u64) -> Holding {
        if let Some(c) = self.lock().by_id.get_mut(&id) {
            c.placeless_since = None;
        }
        Holding {
            connections: self.clone(),
            id,
        }
    }
}

/// A connection's hold on a place, for [`Connections::make_room`].
struct Holding {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(c) = self.connections.lock().by_id.get_mut(&self.id) {
            c.placeless_since = Some(Instant::now());
        }
    }
}

/// Why a request's body was not read whole.
#[derive(Debug)]
enum Unread {
    /// Past `--max-size` (413).
    TooLarge,
    /// Not whole by the deadline (408).
    TooSlow,
    /// No room in the bodies' budget by the deadline (503).
    NoRoom,
    /// The connection failed, or the body is malformed (400): why.
    Broken(String),
}

impl Unread {
    /// The HTTP status and the reason a body not read whole is answered with (past the size,
    /// 413, which each transport answers itself, closing the connection).
    fn why(&self, limits: &Limits) -> (u16, String) {
        let seconds = limits.request_timeout.as_secs();
        match self {
            Unread::TooLarge => (
                413,
                format!(
                    "the request is larger than --max-size ({} bytes)",
                    limits.max_size
                ),
            ),
            Unread::TooSlow => (
                408,
                format!("the request did not arrive whole within --request-timeout ({seconds} s)"),
            ),
            Unread::NoRoom => (
                503,
                format!(
                    "the receiver had no room for the request's body within --request-timeout ({seconds} s): send it again"
                ),
            ),
            Unread::Broken(e) => (400, format!("the request body could not be read: {e}")),
        }
    }
}

/// Reads `body` whole, by `deadline`, at most `max_size` bytes, without a place among
/// `--max-concurrent`: the memory it takes is counted against `budget` as it grows (by capacity,
/// doubling as bytes come, never past the length declared or `max_size`), and held by the
/// permit returned with it. A body that finds no room waits (its sender with it, by TCP's flow
/// control) until the deadline. So the bodies being read take at most the budget together
/// (`--max-concurrent` × `--max-size`), however many connections send them, and a slow
/// sender holds only what it sent.
async fn read_body<B>(
    body: &mut B,
    max_size: usize,
    budget: &Arc<Semaphore>,
    deadline: Instant,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), Unread>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let declared = body
        .size_hint()
        .exact()
        .and_then(|n| usize::try_from(n).ok());
    let limit = declared.map_or(max_size, |n| n.min(max_size));
    let mut bytes: Vec<u8> = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(Unread::TooSlow),
            Ok(None) => return Ok((bytes, held)),
            Ok(Some(Err(e))) => return Err(Unread::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers (of a chunked body) are not kept.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = bytes.len().saturating_add(data.len());
        if len > max_size {
            return Err(Unread::TooLarge);
        }
        if len > bytes.capacity() {
            let grown = len.max(bytes.capacity().saturating_mul(2).min(limit));
            let more = u32::try_from(grown - bytes.capacity()).map_err(|_| Unread::TooLarge)?;
            let permit = tokio::time::timeout_at(deadline, budget.clone().acquire_many_owned(more))
                .await
                .map_err(|_| Unread::NoRoom)?
                .map_err(|_| Unread::NoRoom)?;
            match &mut held {
                Some(h) => h.merge(permit),
                None => held = Some(permit),
            }
            bytes.reserve_exact(grown - bytes.len());
        }
        bytes.extend_from_slice(&data);
    }
}

/// A signed ebMS error, answered with `status`; signed on a blocking thread (an RSA signature
/// is CPU work the connections' thread must not wait on).
async fn signed_error(
    config: Arc<Config>,
    status: u16,
    refusal: Refusal,
    id: Option<String>,
) -> Response<Full<Bytes>> {
    let body = tokio::task::spawn_blocking(move || {
        let signer = Signer {
            key: &config.keys.own_key,
            cert: &config.keys.own_cert,
        };
        receipt::error(&signer, id.as_deref(), &refusal)
    })
    .await
    .unwrap_or_default();
    respond(Answer::soap(status, body))
}

/// Reads one request, checks it, and answers: a receipt from the deciding thread, or an error.
/// Its body and then its turn among the `--max-concurrent` places are had within
/// `--request-timeout`; the decision within [`DECISION_WAIT`] (or twice the request timeout).
async fn answer(
    request: Request<Incoming>,
    peer: SocketAddr,
    config: Arc<Config>,
    limits: Limits,
    jobs: std::sync::mpsc::Sender<Job>,
    shared: Arc<Shared>,
    connection: u64,
) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::POST {
        return plain(405, "AS4 messages are POSTed\n");
    }
    let refused = |refusal: &Refusal, id: Option<String>| {
        let _ = jobs.send(Job::Refused {
            rejected: Rejected {
                refusal: refusal.clone(),
                message_id: id,
            },
            peer,
        });
    };
    // A request refused before its message id is read (EBMS:0004, with an HTTP status).
    let refuse_request = |status: u16, why: String| {
        let refusal = Refusal::new(EbmsError::Other, why);
        refused(&refusal, None);
        signed_error(config.clone(), status, refusal, None)
    };
    let too_large = || {
        format!(
            "the request is larger than --max-size ({} bytes)",
            limits.max_size
        )
    };
    // Its Content-Length says it at once: answered before a byte of the body is read, and
    // the connection closed after the answer; nothing of the body is kept.
    if request.body().size_hint().lower() > limits.max_size as u64 {
        tokio::spawn(linger(request.into_body()));
        return closing(refuse_request(413, too_large()).await);
    }
    let deadline = Instant::now() + limits.request_timeout;
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut incoming = request.into_body();
    let (body, room) =
        match read_body(&mut incoming, limits.max_size, &shared.budget, deadline).await {
            Ok(read) => read,
            Err(unread) => {
                if let Unread::TooLarge = unread {
                    tokio::spawn(linger(incoming));
                    return closing(refuse_request(413, too_large()).await);
                }
                let (status, why) = unread.why(&limits);
                return refuse_request(status, why).await;
            }
        };
    // Held until the deciding thread is done with the message (see `Job::Decide`): what is
    // checked, or waits for its decision, is bounded, and with it the memory its payloads take.
    // Taken only now that the body is whole: a slow sender holds none.
    let Ok(Ok(permit)) =
        tokio::time::timeout_at(deadline, shared.places.clone().acquire_owned()).await
    else {
        let why = format!(
            "the receiver had no turn for the request within --request-timeout ({} s): send it again",
            limits.request_timeout.as_secs()
        );
        return refuse_request(503, why).await;
    };
    let _holding = shared.connections.hold(connection);
    let checked = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let received = message::read(&content_type, &body, &config, limits.max_inflated)?;
            // The body's bytes and their room in the budget go together.
            drop((body, room));
            let signer = Signer {
                key: &config.keys.own_key,
                cert: &config.keys.own_cert,
            };
            let id = &received.message.message_id;
            match receipt::receipt(&signer, id, &received.references) {
                Ok(receipt) => Ok((received, receipt)),
                Err(why) => Err(Rejected {
                    refusal: Refusal::new(
                        EbmsError::Other,
                        format!("no receipt could be made for the message's signature: {why}"),
                    ),
                    message_id: Some(id.clone()),
                }),
            }
        })
        .await
    };
    let (received, receipt) = match checked {
        Ok(Ok(checked)) => checked,
        Ok(Err(rejected)) => {
            let id = rejected.message_id.clone();
            let refusal = rejected.refusal.clone();
            let _ = jobs.send(Job::Refused { rejected, peer });
            return signed_error(config, 200, refusal, id).await;
        }
        Err(_) => {
            return signed_error(
                config,
                500,
                Refusal::new(EbmsError::Other, "the message could not be checked"),
                None,
            )
            .await;
        }
    };
    let id = received.message.message_id.clone();
    let (reply, answered) = tokio::sync::oneshot::channel();
    if jobs
        .send(Job::Decide {
            carried: Carried::As4 {
                received: Box::new(received),
                receipt,
            },
            peer,
            reply,
            permit,
        })
        .is_err()
    {
        return signed_error(
            config,
            503,
            Refusal::new(EbmsError::Other, "the receiver is stopping: send it again"),
            Some(id),
        )
        .await;
    }
    match tokio::time::timeout(decision_wait(&limits), answered).await {
        Ok(Ok(a)) => respond(a),
        Ok(Err(_)) => {
            signed_error(
                config,
                503,
                Refusal::new(
                    EbmsError::Other,
                    "the receiver stopped before deciding: send it again",
                ),
                Some(id),
            )
            .await
        }
        Err(_) => {
            signed_error(
                config,
                503,
                Refusal::new(
                    EbmsError::Other,
                    "the receiver did not decide the message in time: send it again",
                ),
                Some(id),
            )
            .await
        }
    }
}

/// Reads one AS2 request, checks it, and answers: its MDN from the deciding thread (after the
/// commit), a negative MDN, or an HTTP error. The same limits as an AS4 request's.
async fn answer_as2(
    request: Request<Incoming>,
    peer: SocketAddr,
    config: Arc<as2::config::Config>,
    limits: Limits,
    jobs: std::sync::mpsc::Sender<Job>,
    shared: Arc<Shared>,
    connection: u64,
) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::POST {
        return plain(405, "AS2 messages are POSTed\n");
    }
    let refuse = |status: u16, why: String| {
        let refused = as2::message::Refused {
            requested: None,
            modifier: "http",
            status: Some(status),
            detail: why.clone(),
            message_id: None,
        };
        let _ = jobs.send(Job::RefusedAs2 { refused, peer });
        respond(Answer::text(status, &format!("{why}\n")))
    };
    let too_large = || {
        format!(
            "the request is larger than --max-size ({} bytes)",
            limits.max_size
        )
    };
    if request.body().size_hint().lower() > limits.max_size as u64 {
        tokio::spawn(linger(request.into_body()));
        return closing(refuse(413, too_large()));
    }
    let deadline = Instant::now() + limits.request_timeout;
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut incoming = request.into_body();
    let (body, room) =
        match read_body(&mut incoming, limits.max_size, &shared.budget, deadline).await {
            Ok(read) => read,
            Err(unread) => {
                if let Unread::TooLarge = unread {
                    tokio::spawn(linger(incoming));
                    return closing(refuse(413, too_large()));
                }
                let (status, why) = unread.why(&limits);
                return refuse(status, why);
            }
        };
    let Ok(Ok(permit)) =
        tokio::time::timeout_at(deadline, shared.places.clone().acquire_owned()).await
    else {
        return refuse(
            503,
            format!(
                "the receiver had no turn for the request within --request-timeout ({} s): send it again",
                limits.request_timeout.as_secs()
            ),
        );
    };
    let _holding = shared.connections.hold(connection);
    // Reading, decrypting, verifying and signing the MDN are CPU work: on a blocking thread.
    let checked = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let read = as2::message::read(&headers, &body, &config, limits.max_inflated);
            drop((body, room));
            // A refusal's answer (a negative MDN is signed) is made here too, off the
            // connections' thread.
            let refuse = |refused: Box<as2::message::Refused>| {
                let answer = match (&refused.requested, refused.status) {
                    (Some(requested), None) => Answer::as2_refusal(
                        Some(&config),
                        requested,
                        refused.modifier,
                        &refused.detail,
                    ),
                    (_, status) => {
                        Answer::text(status.unwrap_or(400), &format!("{}\n", refused.detail))
                    }
                };
                Err((refused, answer))
            };
            let received = match read {
                Ok(r) => r,
                Err(refused) => return refuse(refused),
            };
            // An asynchronous MDN goes where it can: a URL it could never be POSTed to is
            // refused before anything is applied.
            if let Some(url) = received.receipt_delivery.as_deref()
                && let Some(allowed) = config
                    .partner(&received.requested.as2_from)
                    .and_then(|p| p.mdn_urls.as_deref())
                && !as2::delivery::allowed(url, allowed)
            {
                return refuse(Box::new(as2::message::Refused {
                    requested: None,
                    modifier: "unsupported-receipt-delivery",
                    status: Some(403),
                    detail: "the Receipt-Delivery-Option is not among this partner's mdn_urls: ask for an MDN there, or a synchronous one; nothing was applied".into(),
                    message_id: Some(received.requested.message_id.clone()),
                }));
            }
            if let Some(Err(why)) = received
                .receipt_delivery
                .as_deref()
                .map(as2::delivery::check_url)
            {
                return refuse(Box::new(as2::message::Refused {
                    requested: None,
                    modifier: "unsupported-receipt-delivery",
                    status: Some(501),
                    detail: format!("{why}: ask for a synchronous MDN, or for one by HTTP(S); nothing was applied"),
                    message_id: Some(received.requested.message_id.clone()),
                }));
            }
            // Made and stored even where this sending asked for no MDN: a sending again that
            // asks for one gets it, signed (SHA-256), which any sender takes.
            let mut requested = received.requested.clone();
            if !requested.wanted && requested.signed_with.is_none() {
                requested.signed_with = Some(as2::smime::Digest::Sha256);
            }
            match as2::mdn::build(
                &config,
                &requested,
                as2::mdn::Disposition::Processed,
                Some(&received.mic),
                "The AS2 message was received and committed.",
            ) {
                Ok(mdn) => Ok((received, mdn)),
                Err(why) => refuse(Box::new(as2::message::Refused {
                    requested: None,
                    modifier: "unexpected-processing-error",
                    status: Some(500),
                    detail: format!("no MDN could be signed: {why}"),
                    message_id: Some(received.requested.message_id.clone()),
                })),
            }
        })
        .await
    };
    let (received, mdn) = match checked {
        Ok(Ok(checked)) => checked,
        Ok(Err((refused, answer))) => {
            let _ = jobs.send(Job::RefusedAs2 {
                refused: *refused,
                peer,
            });
            return respond(answer);
        }
        Err(_) => return plain(500, "the message could not be checked\n"),
    };
    let (reply, answered) = tokio::sync::oneshot::channel();
    if jobs
        .send(Job::Decide {
            carried: Carried::As2 {
                received: Box::new(received),
                mdn,
            },
            peer,
            reply,
            permit,
        })
        .is_err()
    {
        return plain(503, "the receiver is stopping: send it again\n");
    }
    match tokio::time::timeout(decision_wait(&limits), answered).await {
        Ok(Ok(a)) => respond(a),
        Ok(Err(_)) => plain(503, "the receiver stopped before deciding: send it again\n"),
        Err(_) => plain(
            503,
            "the receiver did not decide the message in time: send it again\n",
        ),
    }
}

/// Reads the rest of a request refused for its size and throws it away, for at most [`LINGER`]
/// (what arrives holds no place and no room in the budget); then drops it, and hyper closes the
/// connection.
async fn linger(mut body: Incoming) {
    let _ = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
}

/// `response` with `Connection: close`: the connection ends once it is sent.
fn closing(mut response: Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    response.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    response
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = match answer.format {
        Format::Soap | Format::Text => {
            let mut r = Response::new(Full::new(Bytes::from(answer.body)));
            let kind = if answer.format == Format::Soap {
                SOAP
            } else {
                "text/plain; charset=utf-8"
            };
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(kind),
            );
            r
        }
        // The MDN's headers (made by us, printable ASCII) become the response's.
        Format::Mime => match as2::entity::Entity::parse(&answer.body) {
            Ok(entity) => {
                let mut r = Response::new(Full::new(Bytes::copy_from_slice(entity.body)));
                for (name, value) in &entity.headers {
                    if let (Ok(n), Ok(v)) = (
                        hyper::header::HeaderName::from_bytes(name.as_bytes()),
                        hyper::header::HeaderValue::from_str(value),
                    ) {
                        r.headers_mut().append(n, v);
                    }
                }
                r
            }
            Err(_) => {
                let mut r = Response::new(Full::new(Bytes::from_static(b"no MDN\n")));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                return r;
            }
        },
    };
    *r.status_mut() = status;
    r
}

fn plain(status: u16, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r
}

/// Resolves once `stop` is set (SIGTERM, SIGINT).
async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A request body of `frames`, its length `declared` or not; where `stall`, a sender that
    /// sends nothing more after them.
    struct Frames {
        frames: VecDeque<Bytes>,
        declared: Option<u64>,
        stall: bool,
    }

    impl Frames {
        fn new(sizes: &[usize], declared: Option<u64>, stall: bool) -> Frames {
            Frames {
                frames: sizes.iter().map(|&n| Bytes::from(vec![b'x'; n])).collect(),
                declared,
                stall,
            }
        }
    }

    impl hyper::body::Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            match self.frames.pop_front() {
                Some(b) => Poll::Ready(Some(Ok(hyper::body::Frame::data(b)))),
                // The deadline's timer wakes the reader.
                None if self.stall => Poll::Pending,
                None => Poll::Ready(None),
            }
        }

        fn size_hint(&self) -> hyper::body::SizeHint {
            self.declared.map_or_else(
                hyper::body::SizeHint::default,
                hyper::body::SizeHint::with_exact,
            )
        }
    }

    /// The bodies being read share the budget, by what they take (never past their declared
    /// length), and give it back with their bytes or when they fail; one that finds no room
    /// waits until its deadline; one past the size is refused.
    #[tokio::test]
    async fn bodies_being_read_take_their_bytes_from_one_budget() {
        let budget = Arc::new(Semaphore::new(100));
        let soon = || Instant::now() + Duration::from_millis(200);
        let (bytes, held) = read_body(
            &mut Frames::new(&[10, 20, 30], Some(60), false),
            100,
            &budget,
            soon(),
        )
        .await
        .unwrap();
        assert_eq!((bytes.len(), bytes.capacity()), (60, 60));
        assert_eq!(held.as_ref().map(|h| h.num_permits()), Some(60));
        assert_eq!(budget.available_permits(), 40);
        // 50 bytes more do not fit beside them: the body waits, then finds no room.
        let unread = read_body(&mut Frames::new(&[50], None, true), 100, &budget, soon()).await;
        assert!(matches!(unread, Err(Unread::NoRoom)), "{unread:?}");
        assert_eq!(budget.available_permits(), 40);
        drop((bytes, held));
        assert_eq!(budget.available_permits(), 100);
        // Past the size, without a length declared: refused, its room given back.
        let unread = read_body(
            &mut Frames::new(&[60, 60], None, false),
            100,
            &budget,
            soon(),
        )
        .await;
        assert!(matches!(unread, Err(Unread::TooLarge)), "{unread:?}");
        assert_eq!(budget.available_permits(), 100);
        // A sender that stops: too slow, its room given back.
        let unread = read_body(
            &mut Frames::new(&[10], Some(90), true),
            100,
            &budget,
            soon(),
        )
        .await;
        assert!(matches!(unread, Err(Unread::TooSlow)), "{unread:?}");
        assert_eq!(budget.available_permits(), 100);
        // Byte by byte: room taken doubling, never past the length declared.
        let (bytes, held) = read_body(
            &mut Frames::new(&[1; 30], Some(30), false),
            100,
            &budget,
            soon(),
        )
        .await
        .unwrap();
        assert_eq!((bytes.len(), bytes.capacity()), (30, 30));
        assert_eq!(held.map(|h| h.num_permits()), Some(30));
    }

    /// At the cap, the connection longest without a place is closed for a new one (told through
    /// its receiver), one holding a place never; where every one holds a place there is no room
    /// until one is let go.
    #[test]
    fn the_connection_longest_without_a_place_makes_room() {
        let connections = Arc::new(Connections::new(3));
        let (a, mut a_evicted) = connections.open();
        let (b, mut b_evicted) = connections.open();
        let (c, mut c_evicted) = connections.open();
        let _ = (a, c);
        let b_holds = connections.hold(b);
        assert!(connections.make_room());
        assert!(a_evicted.try_recv().is_err(), "the oldest, a, closed");
        assert!(
            matches!(
                c_evicted.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty)
            ),
            "c kept"
        );
        let (d, _d_evicted) = connections.open();
        let _d_holds = connections.hold(d);
        assert!(connections.make_room());
        assert!(
            c_evicted.try_recv().is_err(),
            "c, the oldest without a place"
        );
        let (e, _e_evicted) = connections.open();
        let _e_holds = connections.hold(e);
        assert!(!connections.make_room(), "every one holds a place");
        assert!(matches!(
            b_evicted.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        ));
        drop(b_holds);
        assert!(connections.make_room());
        assert!(b_evicted.try_recv().is_err(), "b, its place let go");
        // A connection that closed by itself makes room too.
        connections.close(e);
        assert!(connections.make_room());
    }
}
