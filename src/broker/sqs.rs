//! Amazon SQS, as `consume`, `publish` and a dead-letter publisher reach it: the queue a URL
//! names (`sqs://REGION/ACCOUNT/QUEUE`, or the queue's URL), the client (the AWS SDK for Rust,
//! on this program's rustls with ring), the credentials (aws-config's standard chain: the
//! environment, the shared config and credentials files with their profiles, web identity, ECS
//! and EC2 instance roles; never in a URL), the endpoint (`--sqs-endpoint`, or
//! `AWS_ENDPOINT_URL_SQS`, for ElasticMQ, LocalStack or moto), and what the queue itself says
//! of its settings when it is reached. The SDK is asynchronous: its calls run on the
//! current-thread runtime of the source or sink that makes them.

use std::time::Duration;

use anyhow::anyhow;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::types::QueueAttributeName;

/// How long one call to SQS may take, retries included (a receive's long poll comes on top): an
/// endpoint that takes the connection and then says nothing must not hold the run.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting to the endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The forms of the URL, for errors.
pub const FORM: &str =
    "sqs://REGION/ACCOUNT/QUEUE or a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE)";

/// The most entries one batch call takes (`SendMessageBatch`, `DeleteMessageBatch`,
/// `ChangeMessageVisibilityBatch`), and the most messages one receive gives.
pub const BATCH: usize = 10;

/// The message attribute that says how a body is encoded: `base64` for bytes that SQS cannot
/// carry as text (a body is XML text: Latin-1 or binary bytes are not), else absent or `text`.
pub const ENCODING_ATTRIBUTE: &str = "edi-body-encoding";

/// The region where neither the URL nor the environment names one: a local endpoint (ElasticMQ,
/// LocalStack, moto) takes any.
const FALLBACK_REGION: &str = "us-east-1";

/// The queue a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The region, where the URL names it (`sqs://REGION/...`, an AWS queue URL's host).
    pub region: Option<String>,
    /// The owning account, where named by `sqs://`.
    pub account: Option<String>,
    pub name: String,
    /// The queue's URL where given (otherwise asked of SQS by name and account).
    pub url: Option<String>,
    /// The endpoint a queue URL that is not AWS's names (its scheme, host and port).
    pub endpoint: Option<String>,
    /// The run's `--sqs-endpoint`, over the URL's own.
    pub endpoint_given: Option<String>,
    /// The run's `--tls-ca`: the roots the endpoint's certificate is checked against.
    pub ca: Option<std::path::PathBuf>,
}

impl Queue {
    /// For messages: the URL as given (it holds no secret).
    pub fn shown(&self) -> String {
        match &self.url {
            Some(url) => url.clone(),
            None => format!(
                "sqs://{}/{}/{}",
                self.region.as_deref().unwrap_or(""),
                self.account.as_deref().unwrap_or(""),
                self.name
            ),
        }
    }

    /// The queue, reached with the run's endpoint and roots.
    pub fn with(mut self, settings: &crate::broker::Settings) -> Queue {
        self.endpoint_given.clone_from(&settings.sqs_endpoint);
        self.ca.clone_from(&settings.tls.ca);
        self
    }

    /// True for a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }
}

/// Reads `sqs://REGION/ACCOUNT/QUEUE` or a queue URL (`https://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE`,
/// or `http(s)://HOST:PORT/ACCOUNT/QUEUE` of another endpoint); the error names `flag` and what
/// is taken.
pub fn queue(text: &str, flag: &str, form: &str) -> Result<Queue, String> {
    if let Some(rest) = text.strip_prefix("sqs://") {
        let parts: Vec<&str> = rest.split('/').collect();
        let [region, account, name] = parts[..] else {
            return Err(format!("{flag} takes {form}"));
        };
        if region.is_empty() || account.is_empty() || !is_queue_name(name) {
            return Err(format!("{flag} takes {form}"));
        }
        if region.contains('@') {
            return Err(format!(
                "{flag} sqs://: credentials come from the environment, the shared credentials file or the instance's role, never the URL"
            ));
        }
        return Ok(Queue {
            region: Some(region.to_string()),
            account: Some(account.to_string()),
            name: name.to_string(),
            url: None,
            endpoint: None,
            endpoint_given: None,
            ca: None,
        });
    }
    let (scheme, rest) = text
        .split_once("://")
        .filter(|(s, _)| *s == "https" || *s == "http")
        .ok_or_else(|| format!("{flag} takes {form}"))?;
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| format!("{flag} takes {form}"))?;
    if host.contains('@') {
        return Err(format!(
            "{flag}: credentials come from the environment, the shared credentials file or the instance's role, never the URL"
        ));
    }
    let parts: Vec<&str> = path.split('/').collect();
    let [account, name] = parts[..] else {
        return Err(format!("{flag} takes {form}"));
    };
    if host.is_empty() || account.is_empty() || !is_queue_name(name) {
        return Err(format!("{flag} takes {form}"));
    }
    // sqs.REGION.amazonaws.com (and .com.cn): AWS's own endpoint for the region.
    let aws_region = host
        .strip_prefix("sqs.")
        .and_then(|h| {
            h.strip_suffix(".amazonaws.com")
                .or_else(|| h.strip_suffix(".amazonaws.com.cn"))
        })
        .filter(|r| !r.is_empty() && !r.contains('.'));
    Ok(Queue {
        region: aws_region.map(str::to_string),
        account: Some(account.to_string()),
        name: name.to_string(),
        url: Some(text.to_string()),
        endpoint: aws_region.is_none().then(|| format!("{scheme}://{host}")),
        endpoint_given: None,
        ca: None,
    })
}

/// A queue name as SQS takes it: 1 to 80 letters, digits, `-` and `_`, with `.fifo` at the end
/// of a FIFO queue's.
pub fn is_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    !base.is_empty()
        && name.len() <= 80
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A queue reached: the client, the queue's URL and what the queue says of itself.
pub struct Reached {
    pub client: Client,
    pub url: String,
    /// How long a message received stays invisible to others (the queue's
    /// `VisibilityTimeout`).
    pub visibility: Duration,
    /// The largest message the queue takes (`MaximumMessageSize`), in bytes.
    pub max_size: usize,
    pub fifo: bool,
}

/// Makes the client and reaches the queue: its URL (asked by name where `sqs://` names it) and
/// its settings, each call bounded. A queue that does not exist is an error that says so.
pub async fn reach(queue: &Queue) -> anyhow::Result<Reached> {
    let shown = queue.shown();
    let client = client(queue)
        .await
        .map_err(|e| anyhow!("cannot connect to {shown}: {e}"))?;
    let url = match &queue.url {
        Some(url) => url.clone(),
        None => {
            let mut ask = client.get_queue_url().queue_name(&queue.name);
            if let Some(account) = &queue.account {
                ask = ask.queue_owner_aws_account_id(account);
            }
            let answer = crate::broker::within(TIMEOUT, async {
                ask.send().await.map_err(|e| anyhow!(explain(&e)))
            })
            .await
            .map_err(|e| anyhow!("{shown}: {e}"))?;
            answer
                .queue_url
                .ok_or_else(|| anyhow!("{shown}: SQS gave no URL for the queue"))?
        }
    };
    let attributes = crate::broker::within(TIMEOUT, async {
        client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| anyhow!(explain(&e)))
    })
    .await
    .map_err(|e| anyhow!("{shown}: {e}"))?;
    let attributes = attributes.attributes.unwrap_or_default();
    let number = |name: QueueAttributeName, default: u64| {
        attributes
            .get(&name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(default)
    };
    Ok(Reached {
        client,
        url,
        visibility: Duration::from_secs(number(QueueAttributeName::VisibilityTimeout, 30)),
        max_size: number(QueueAttributeName::MaximumMessageSize, 262_144) as usize,
        fifo: attributes
            .get(&QueueAttributeName::FifoQueue)
            .is_some_and(|v| v == "true")
            || queue.is_fifo(),
    })
}

/// The SDK's client for `queue`: the standard credential chain, the region of the URL (else of
/// the environment or profile, else `us-east-1` for a local endpoint), the endpoint of
/// `--sqs-endpoint` or the queue URL's, rustls with the CA file of `--tls-ca` where given. Each
/// client has connections (and credential providers) of its own: a pooled connection is served
/// by the runtime that opened it, so a client used on another thread's runtime is made anew.
pub async fn client(queue: &Queue) -> Result<Client, String> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http_client(queue.ca.as_deref())?)
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_timeout(TIMEOUT)
                .build(),
        );
    let endpoint = queue
        .endpoint_given
        .clone()
        .or_else(|| queue.endpoint.clone());
    if let Some(endpoint) = &endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    loader = match &queue.region {
        Some(region) => loader.region(aws_config::Region::new(region.clone())),
        // Only a queue URL of another endpoint names no region: the environment's or the
        // profile's, else any (never the EC2 instance's, asked over the network).
        None => loader.region(
            aws_config::meta::region::RegionProviderChain::first_try(
                aws_config::environment::EnvironmentVariableRegionProvider::new(),
            )
            .or_else(aws_config::profile::ProfileFileRegionProvider::new())
            .or_else(FALLBACK_REGION),
        ),
    };
    let shared = loader.load().await;
    Ok(Client::new(&shared))
}

/// HTTPS on this program's rustls (ring): the system's roots, or those of `--tls-ca`.
fn http_client(
    ca: Option<&std::path::Path>,
) -> Result<aws_sdk_sqs::config::SharedHttpClient, String> {
    use aws_smithy_http_client::tls::{self, TlsContext, TrustStore};
    let builder = aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    let builder = match ca {
        Some(ca) => {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("--tls-ca: cannot read {}: {e}", ca.display()))?;
            let context = TlsContext::builder()
                .with_trust_store(TrustStore::empty().with_pem_certificate(pem))
                .build()
                .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
            builder.tls_context(context)
        }
        None => builder,
    };
    Ok(builder.build_https())
}

/// What a failed call says, in words an operator can act on: the service's code and message,
/// or why nothing reached it (no credentials, the endpoint away).
pub fn explain<E>(e: &aws_sdk_sqs::error::SdkError<E>) -> String
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
{
    use aws_sdk_sqs::error::SdkError;
    match e {
        SdkError::ServiceError(s) => {
            let err = s.err();
            let code = err.code().unwrap_or("an error");
            let message = err.message().unwrap_or_default();
            match code {
                "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist" => {
                    "the queue does not exist".to_string()
                }
                _ if message.is_empty() => format!("SQS answered {code}"),
                _ => format!("SQS answered {code}: {}", without_receipt_handles(message)),
            }
        }
        SdkError::TimeoutError(_) => format!("no answer from SQS within {} s", TIMEOUT.as_secs()),
        other => {
            let text = DisplayErrorContext(other).to_string();
            if text.contains("no credentials") || text.contains("credentials provider") {
                "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID, AWS_PROFILE), the shared credentials file, web identity, or an ECS or EC2 role".to_string()
            } else {
                format!("cannot reach SQS: {text}")
            }
        }
    }
}

/// The length from which a token of a message's text is taken for a receipt handle (SQS's are
/// 200 characters and more; moto's 185): message ids, queue names and ARNs are shorter, or cut
/// by their colons and slashes.
const RECEIPT_HANDLE_LENGTH: usize = 64;

/// `text` with each receipt handle in it (a long run of base64 or letters) in its short form
/// ([`short_receipt_handle`]): SQS names the handle in some of its errors, and a handle is a
/// capability to delete the message or hide it, for hours, that no log should hold.
pub fn without_receipt_handles(text: &str) -> String {
    let in_handle = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_');
    let mut out = String::with_capacity(text.len().min(256));
    let mut rest = text;
    while let Some(start) = rest.find(in_handle) {
        out.push_str(&rest[..start]);
        let token = &rest[start..];
        let len = token.find(|c: char| !in_handle(c)).unwrap_or(token.len());
        if len >= RECEIPT_HANDLE_LENGTH {
            out.push_str(&short_receipt_handle(&token[..len]));
        } else {
            out.push_str(&token[..len]);
        }
        rest = &token[len..];
    }
    out.push_str(rest);
    out
}

/// A receipt handle's first eight characters, enough to tell two apart in a log, and its
/// length: never the whole handle.
pub fn short_receipt_handle(handle: &str) -> String {
    let head: String = handle.chars().take(8).collect();
    format!("{head}... ({} characters)", handle.chars().count())
}

/// True where a failed call's error is the queue's own (it does not exist, access denied): a
/// setup only an operator can fix, not a connection to make again.
pub fn is_setup<E>(e: &aws_sdk_sqs::error::SdkError<E>) -> bool
where
    E: ProvideErrorMetadata,
{
    e.as_service_error()
        .and_then(ProvideErrorMetadata::code)
        .is_some_and(|code| {
            matches!(
                code,
                "AWS.SimpleQueueService.NonExistentQueue"
                    | "QueueDoesNotExist"
                    | "AccessDenied"
                    | "AccessDeniedException"
                    | "InvalidAddress"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORM: &str = "sqs://REGION/ACCOUNT/QUEUE or a queue URL";

    #[test]
    fn a_queue_is_named_by_sqs_url_or_by_its_url() {
        let q = queue("sqs://eu-west-1/123456789012/edi-in", "--from", FORM).unwrap();
        assert_eq!(
            (q.region.as_deref(), q.account.as_deref(), q.name.as_str()),
            (Some("eu-west-1"), Some("123456789012"), "edi-in")
        );
        assert_eq!(q.shown(), "sqs://eu-west-1/123456789012/edi-in");
        let aws = "https://sqs.eu-central-1.amazonaws.com/123456789012/edi.fifo";
        let q = queue(aws, "--from", FORM).unwrap();
        assert_eq!(q.region.as_deref(), Some("eu-central-1"));
        assert_eq!(q.endpoint, None, "AWS's own endpoint");
        assert!(q.is_fifo());
        let local = queue("http://127.0.0.1:9324/000000000000/edi", "--from", FORM).unwrap();
        assert_eq!(local.endpoint.as_deref(), Some("http://127.0.0.1:9324"));
        assert_eq!(local.region, None);
        for bad in [
            "sqs://eu-west-1/edi-in",
            "sqs://eu-west-1/1/a b",
            "sqs://eu-west-1/1/q/extra",
            "https://sqs.eu-west-1.amazonaws.com/edi-in",
            "ftp://h/1/q",
        ] {
            assert!(queue(bad, "--from", FORM).is_err(), "{bad}");
        }
        let e = queue(
            "https://AKIA:s3cret@sqs.eu-west-1.amazonaws.com/1/q",
            "--to",
            FORM,
        )
        .unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("never the URL"), "{e}");
    }

    #[test]
    fn queue_names_are_sqs_names() {
        assert!(is_queue_name("edi-in_1"));
        assert!(is_queue_name("edi.fifo"));
        assert!(!is_queue_name(".fifo"));
        assert!(!is_queue_name("edi.in"));
        assert!(!is_queue_name(&"q".repeat(81)));
    }

    #[test]
    fn a_receipt_handle_is_shown_short() {
        let handle = "AQEB".to_string() + &"xY9+/z".repeat(40) + "==";
        let text = format!(
            "The input receipt handle \"{handle}\" is not a valid receipt handle. (sqs:q/0c6b2a5e-9f5e-4e3a-8d59-2f2b1c7a6e11, arn:aws:sqs:eu-west-1:123456789012:edi-in)"
        );
        let shown = without_receipt_handles(&text);
        assert_eq!(
            shown,
            "The input receipt handle \"AQEBxY9+... (246 characters)\" is not a valid receipt handle. (sqs:q/0c6b2a5e-9f5e-4e3a-8d59-2f2b1c7a6e11, arn:aws:sqs:eu-west-1:123456789012:edi-in)"
        );
        assert_eq!(
            without_receipt_handles("no handle: é, 42"),
            "no handle: é, 42"
        );
    }
}
