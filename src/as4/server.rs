//! The HTTP side of `receive`: a listener on its own thread, with a current-thread runtime kept
//! here, that reads each POST within `--max-size` and `--request-timeout` (at most
//! `--max-concurrent` in hand at once, at most [`MAX_CONNECTIONS`] connections), checks it on a
//! blocking thread (`message.rs`: reading, decrypting, verifying, signing are CPU work), and
//! hands what passes to the caller's thread, which decides it in the inbox and gives the answer
//! back. Every wait is bounded. A stop (SIGTERM) closes the listener and lets the requests in
//! flight finish: each is answered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};

use super::config::Config;
use super::errors::{EbmsError, Refusal};
use super::message::{self, Received, Rejected};
use super::receipt::{self, Signer};

/// The limits a request is read within.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_size: usize,
    pub max_inflated: usize,
    pub max_concurrent: usize,
    pub request_timeout: Duration,
}

/// What the server gives the deciding thread.
pub enum Job {
    /// A message that passed every check: decide it, and answer through `reply`. Its receipt is
    /// signed already (here, beside the other checks' CPU work): the deciding thread stores it
    /// with the decision, or answers the one stored before for a message sent again.
    Decide {
        received: Box<Received>,
        receipt: Vec<u8>,
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
}

/// The answer to one request.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The Content-Type of every answer: a bare SOAP 1.2 envelope.
const SOAP: &str = "application/soap+xml; charset=utf-8";

/// Connections open at once, at most: each holds a descriptor and a task. More wait in the
/// kernel's backlog until one closes.
const MAX_CONNECTIONS: usize = 512;

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
    config: Arc<Config>,
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
        let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_concurrent));
        let connections = Arc::new(tokio::sync::Semaphore::new(
            MAX_CONNECTIONS.max(limits.max_concurrent),
        ));
        loop {
            let slot = tokio::select! {
                s = connections.clone().acquire_owned() => s,
                () = stopped(&stop) => break,
            };
            let Ok(slot) = slot else { break };
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
            let config = config.clone();
            let jobs = jobs.clone();
            let permits = permits.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let config = config.clone();
                let jobs = jobs.clone();
                let permits = permits.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        answer(request, peer, config, limits, jobs, permits).await,
                    )
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.request_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let _ = conn.await;
                drop(slot);
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
    respond(status, body)
}

/// Reads one request, checks it, and answers: a receipt from the deciding thread, or an error.
/// Its turn among the `--max-concurrent` requests in hand and its body are had within
/// `--request-timeout`; the decision within [`DECISION_WAIT`] (or twice the request timeout).
async fn answer(
    request: Request<Incoming>,
    peer: SocketAddr,
    config: Arc<Config>,
    limits: Limits,
    jobs: std::sync::mpsc::Sender<Job>,
    permits: Arc<tokio::sync::Semaphore>,
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
    let deadline = tokio::time::Instant::now() + limits.request_timeout;
    // Held until the deciding thread is done with the message (see `Job::Decide`): what is read,
    // checked, or waits for its decision is bounded, and with it the memory its payloads take.
    let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, permits.acquire_owned()).await else {
        let why = format!(
            "the receiver had no turn for the request within --request-timeout ({} s): send it again",
            limits.request_timeout.as_secs()
        );
        return refuse_request(503, why).await;
    };
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = Limited::new(request.into_body(), limits.max_size).collect();
    let body = match tokio::time::timeout_at(deadline, body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            let too_large = e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some();
            let (status, why) = if too_large {
                (
                    413,
                    format!(
                        "the request is larger than --max-size ({} bytes)",
                        limits.max_size
                    ),
                )
            } else {
                (400, format!("the request body could not be read: {e}"))
            };
            return refuse_request(status, why).await;
        }
        Err(_) => {
            let why = format!(
                "the request did not arrive whole within --request-timeout ({} s)",
                limits.request_timeout.as_secs()
            );
            return refuse_request(408, why).await;
        }
    };
    let checked = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let received = message::read(&content_type, &body, &config, limits.max_inflated)?;
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
            received: Box::new(received),
            receipt,
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
        Ok(Ok(a)) => respond(a.status, a.body),
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

fn respond(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(SOAP),
    );
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
