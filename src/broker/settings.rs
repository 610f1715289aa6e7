//! What a run gives every broker connection beside the URL, built once by the command from its
//! flags and the environment and handed to each URL's parser, which keeps what its broker reads:
//! the TLS and credential files, the Kafka client settings file and variables, the SQS endpoint.
//! No process global holds them, and no broker reads the environment itself (a second run in one
//! process, a test, gets its own).

use std::ffi::OsString;
use std::path::PathBuf;

/// The run's settings for the brokers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub tls: Tls,
    /// `--kafka-config FILE`: librdkafka's `key=value` settings (`EDI_INBOX_KAFKA_*` over them).
    pub kafka_config: Option<PathBuf>,
    /// The `EDI_INBOX_KAFKA_<KEY>` variables of the run's environment: librdkafka's settings
    /// over those of `kafka_config`.
    pub kafka_variables: KafkaVariables,
    /// `--sqs-endpoint URL` (or `AWS_ENDPOINT_URL_SQS`): where SQS is reached instead of AWS.
    pub sqs_endpoint: Option<String>,
}

/// The prefix of the variables that set a librdkafka property: `EDI_INBOX_KAFKA_SASL_PASSWORD`
/// sets `sasl.password` (the rest of the name in lower case, `_` for `.`).
pub const KAFKA_ENV_PREFIX: &str = "EDI_INBOX_KAFKA_";

/// The `EDI_INBOX_KAFKA_<KEY>` variables of an environment as `(KEY, value)`, in its order; a
/// name or value that is not Unicode is left out. `Debug` shows the keys alone: a value may be a
/// password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KafkaVariables(pub Vec<(String, String)>);

impl KafkaVariables {
    /// Those of `vars`, the command's environment (`std::env::vars_os()`).
    pub fn of(vars: impl IntoIterator<Item = (OsString, OsString)>) -> KafkaVariables {
        KafkaVariables(
            vars.into_iter()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter_map(|(k, v)| Some((k.strip_prefix(KAFKA_ENV_PREFIX)?.to_string(), v)))
                .collect(),
        )
    }
}

impl std::fmt::Debug for KafkaVariables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k))
            .finish()
    }
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
