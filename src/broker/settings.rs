//! What a run gives every broker connection beside the URL, built once by the command from its
//! flags and the environment and handed to each URL's parser, which keeps what its broker reads:
//! the TLS and credential files, the Kafka client settings file, the SQS endpoint. No process
//! global holds them (a second run in one process, a test, gets its own).

use std::path::PathBuf;

/// The run's settings for the brokers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub tls: Tls,
    /// `--kafka-config FILE`: librdkafka's `key=value` settings (`EDI_INBOX_KAFKA_*` over them).
    pub kafka_config: Option<PathBuf>,
    /// `--sqs-endpoint URL` (or `AWS_ENDPOINT_URL_SQS`): where SQS is reached instead of AWS.
    pub sqs_endpoint: Option<String>,
}

/// The TLS and credential files given (`--tls-ca`, `--tls-cert`, `--tls-key`, `--nats-creds`,
/// `--nats-nkey`): only their names, never what they hold, are ever shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub nats_creds: Option<PathBuf>,
    pub nats_nkey: Option<PathBuf>,
}

impl Tls {
    /// True where a setting of TLS itself is given (a CA file, a client certificate).
    pub fn wants_tls(&self) -> bool {
        self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// The settings given, by their flags.
    pub fn given(&self) -> Vec<&'static str> {
        [
            (self.ca.is_some(), "--tls-ca"),
            (self.cert.is_some(), "--tls-cert"),
            (self.key.is_some(), "--tls-key"),
            (self.nats_creds.is_some(), "--nats-creds"),
            (self.nats_nkey.is_some(), "--nats-nkey"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }

    /// How the server is checked, for messages: the CA file tried, or the system's roots.
    pub fn roots_shown(&self) -> String {
        match &self.ca {
            Some(ca) => format!("the CA file {}", ca.display()),
            None => "the system's roots".to_string(),
        }
    }
}
