//! The command line (clap only: no behaviour here).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The database used where neither `--db` nor `EDI_INBOX_DB` names one.
pub const DEFAULT_DB: &str = "edi-inbox.db";

/// Exactly-once inbox for UN/EDIFACT interchanges dropped in a folder.
///
/// Exit status, the same for every command: 0 all input was good; 3 the run finished, but
/// something needs a look (input rejected or drifted, a committed file not moved, the metrics
/// file or standard output failed); 1 a fatal error stopped the run; 2 a usage error.
// `about` (the package's description) and `long_about = None` below take precedence over this
// comment in --help and the manual pages; it documents the type.
#[derive(Debug, Parser)]
#[command(name = "edi-inbox", version, about, long_about = None)]
pub struct Cli {
    /// The inbox: an SQLite file, or a PostgreSQL database (postgres://USER@HOST:PORT/DBNAME,
    /// postgresql://..., or "host=... dbname=..."). `ingest` creates it on first use, only where it
    /// is named here or in EDI_INBOX_DB; without either, edi-inbox.db in the current folder is
    /// used if it exists, and its absence is a usage error (exit 2) that reads nothing. A file
    /// that is not an edi-inbox database (or is one from a newer edi-inbox) is a fatal error
    /// (exit 1) and is left untouched.
    // Its value is never shown in --help: a PostgreSQL URL may carry a password.
    #[arg(
        long,
        global = true,
        env = "EDI_INBOX_DB",
        hide_env_values = true,
        value_name = "PATH|URL"
    )]
    pub db: Option<PathBuf>,

    /// The schema a PostgreSQL inbox lives in (created on first use): a plain lower-case name,
    /// quoted in SQL (so a keyword such as select is a name too); another one for a second,
    /// separate inbox in the same database.
    #[arg(long, global = true, value_name = "NAME", default_value = "edi_inbox")]
    pub pg_schema: String,

    /// How long to wait for another run's lock on the database before giving up (exit 1), for
    /// any command; on PostgreSQL, the session's lock_timeout (no host waits longer for another
    /// host's keys or a purge's batch).
    #[arg(long, global = true, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub busy_timeout: Duration,

    /// node_exporter's textfile collector folder: where no --metrics-file is given, ingest,
    /// purge, publish, consume and receive write their figures to DIR/edi_inbox_COMMAND.prom
    /// (the file the units name).
    #[arg(
        long,
        global = true,
        env = "EDI_INBOX_METRICS",
        hide_env_values = true,
        value_name = "DIR"
    )]
    pub metrics_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Parse interchanges and print their envelopes, without touching any database.
    ///
    /// PATHs are files, or folders walked recursively (regular files only, no symbolic links
    /// followed, hidden names and names ending in .tmp, .part or .partial passed over).
    Inspect(InspectArgs),

    /// Apply each interchange exactly once: new ones are written, redeliveries reported as
    /// duplicates, the same key with other content (drift) kept apart and reported.
    ///
    /// Decisions are made in group commits: on SQLite, in the batch's transaction (each
    /// interchange the operator's side effects run for in a savepoint of its own); on
    /// PostgreSQL, a whole batch at once in one READ COMMITTED transaction and a few
    /// statements, with no savepoint per interchange (only a batch whose data the server refuses
    /// is halved in savepoints, all rolled back, to find the interchanges it refuses). Outcomes
    /// are printed, and files moved, only after the commit that makes them true.
    Ingest(IngestArgs),

    /// Decide again files of the quarantine, once corrected (or once a partner's resend is the
    /// fix): each as ingest decides a file, filed where ingest files it (the archive when all
    /// its interchanges are new or duplicate, else back into the quarantine under the next free
    /// name with a new NAME.error.txt), and its old note with it (beside it in the archive,
    /// removed when a new one replaces it).
    ///
    /// Takes ingest's options (EDI_INBOX_ARCHIVE and EDI_INBOX_QUARANTINE too, not
    /// EDI_INBOX_DROP); --archive and --quarantine are required, and each FILE must be a
    /// file of the --quarantine folder (else exit 2, nothing read). A drifted file drifts again:
    /// its key is taken by the copy applied first. Exit status as ingest's.
    #[command(
        mut_arg("paths", |a| a
            .value_name("QUARANTINED_FILE")
            // Named one by one: never the drop folder EDI_INBOX_DROP names for ingest.
            .env(None::<&'static str>)
            .help("Files of the --quarantine folder to decide again (not their .error.txt notes).")),
        mut_arg("archive", |a| a.required(true)),
        mut_arg("quarantine", |a| a.required(true)),
    )]
    Reprocess(IngestArgs),

    /// Delete inbox entries older than the retention window.
    ///
    /// Only the inbox (the duplicate-detection window) is purged; the business tables
    /// (interchanges, messages, outbox) are the record and stay. Once an entry is purged, a
    /// redelivery of that interchange is accepted as NEW. Choose N at least as long as the longest
    /// partner retry window, and shorter than the cycle after which a partner reuses control
    /// references. Sightings, rejected-file records and delivery records older than N days go too.
    Purge(PurgeArgs),

    /// Move an SQLite inbox into PostgreSQL, keys and all: after the move, an interchange the
    /// SQLite inbox had decided is a duplicate on PostgreSQL, and nothing it published is
    /// published again.
    ///
    /// Copies every table of edi-inbox (the keys with their hashes and times, the interchanges
    /// and messages, sightings, rejections, the outbox with what was published or parked, the
    /// CONTRLs and their counters, consumer positions, transport message ids, refusals) in one
    /// transaction on the target, with the source's write lock held; checks the rows of each
    /// table and a SHA-256 over the keys on both sides before it commits. Run again, it finds
    /// the target holding exactly the source and changes nothing. A target that holds anything
    /// else is refused (exit 1) unless --replace. The side effects' own tables are not copied
    /// (named on standard error). Stop every timer and service first (docs/operating.md).
    Migrate(MigrateArgs),

    /// Counts an operator checks first; with --by, the volumes of each day by sender, recipient
    /// or message type.
    Stats(StatsArgs),

    /// The most recent events (new, duplicate, drift, rejected, refused, failed), newest first;
    /// with --contrl, the CONTRLs sent.
    List(ListArgs),

    /// One interchange, by its key or its number: its envelope, messages, every sighting, its
    /// rejections and the CONTRLs that answered it. Exit 3 for an unknown key.
    Show(ShowArgs),

    /// Decide again the interchanges the side effects (--effects) refused, once the mapping or
    /// the data is fixed; or run the side effects again over messages already applied.
    ///
    /// With --refused, each kept refused interchange is decided exactly as ingest decides a
    /// file (its key, its rows, the side effects, the outbox, a CONTRL), and its refusal is
    /// marked resolved: new, or duplicate or drift where a resend was taken meanwhile. With
    /// --applied, the side effects of one message type run again over the messages stored.
    /// One transaction per batch: a crash leaves each batch done or not, and a second run of
    /// --refused finds nothing left. Exit 3 where one is refused again (it stays kept), drifted,
    /// or failed again.
    Reapply(ReapplyArgs),

    /// Check the side effects (--effects) against the inbox, or try them on a file: nothing is
    /// changed.
    ///
    /// `check` applies the folder's migrations and prepares every statement, as a run does at
    /// start-up, in a transaction that is rolled back; it says which files run for which
    /// messages with which parameters, and which migrations are applied or to apply, or what
    /// is wrong with the file and statement number (exit 1). `try FILE` does the same, then
    /// decides FILE's interchanges in that transaction as ingest would, prints each new
    /// message's JSON and the rows each statement changed, and rolls everything back.
    Effects(EffectsArgs),

    /// Deliver the outbox: publish each event to a broker or a folder, and mark it published
    /// only once the destination confirmed it.
    ///
    /// Events go out in the order their interchanges were decided, each with a stable id
    /// (the same from any host, at any time), so that a republish after a crash is known for
    /// one (by the destination or its consumer: --to says which). Exit 3 when an event failed
    /// this run; 0 with a notice when another publish holds the inbox.
    Publish(PublishArgs),

    /// Take interchanges from a broker and decide each exactly as ingest decides a file;
    /// acknowledge each delivery only after its decisions are committed.
    ///
    /// Each delivery is the bytes of one file, recorded under the broker's identity for it with
    /// its edi-filename header and how often it was delivered. A crash before the
    /// acknowledgement has the broker deliver again, and the inbox decides those as duplicates.
    /// A rejected delivery is recorded with its bytes, then settled so that the broker does not
    /// deliver it again, and with --dead-letter published there too (--from says, for each
    /// broker, what its source is, how it names a delivery and how it settles a rejected one).
    /// Runs until SIGTERM or SIGINT (which finish the open batch), or with --until-idle until
    /// nothing came for that long. Exit 3 when anything was rejected or drifted, 1 on a database
    /// error (nothing acknowledged).
    Consume(ConsumeArgs),

    /// Receive interchanges over AS4 (eDelivery, Peppol) and AS2 (RFC 4130): each message's id
    /// claimed, its interchanges decided, and its receipt or MDN stored in one transaction; the
    /// signed receipt or MDN sent only after the commit.
    ///
    /// One HTTP server for both: AS2 messages are POSTed to /as2 (--as2-config), AS4 messages to
    /// any other path (--as4-config); either configuration may be given alone. An AS2 message is
    /// decrypted (AES-CBC or 3DES, RSA or RSA-OAEP), inflated (RFC 3274) and its signature
    /// checked against the partner's pinned certificate, its interchange decided as ingest
    /// decides a file and recorded as as2:MESSAGE-ID; a message sent again (the same
    /// Message-ID) gets the same MDN again, byte for byte. A message that fails a check gets a
    /// negative MDN (processed/error: decryption-failed, authentication-failed, ...) and nothing
    /// of it is stored. An MDN asked for at a URL (Receipt-Delivery-Option, http or https) is
    /// queued in the decision's transaction and POSTed there after the commit, retried until the
    /// partner's server takes it; so is the negative MDN of a message the side effects refuse
    /// (other refusals are answered in the response; mailto: gets HTTP 501).
    ///
    /// An HTTP listener for AS4 user messages (ebMS 3.0 One-Way/Push, SOAP 1.2 with attachments)
    /// from the partners --as4-config names: each message's WS-Security signature checked against
    /// the partner's pinned certificate (RSA-SHA256, exclusive C14N), its payloads decrypted
    /// (AES-128-GCM, RSA-OAEP) and inflated (gzip), each interchange decided exactly as ingest
    /// decides a file, recorded as as4:MESSAGE-ID. A message sent again (the same eb:MessageId)
    /// gets the same receipt again, byte for byte, and nothing is decided twice. A message that
    /// fails a check is answered with its ebMS error (EBMS:0101 FailedAuthentication, ...) and
    /// nothing of it is stored; a database failure with HTTP 500, so that the sender tries again.
    /// Runs until SIGTERM or SIGINT, which finish the requests in flight.
    #[cfg(feature = "as4")]
    Receive(ReceiveArgs),

    /// `receive` in a build without the `as4` feature: taken with whatever follows it, so that it
    /// is answered "not available in this build" (exit 2) as every part left out is, rather than
    /// with clap's "unrecognized subcommand". Hidden from --help and the manual pages.
    #[cfg(not(feature = "as4"))]
    #[command(hide = true, disable_help_flag = true)]
    Receive(NotBuiltArgs),

    /// Print a shell completion script.
    Completions(CompletionsArgs),

    /// Write the manual pages, one per command (edi-inbox.1, edi-inbox-ingest.1, ...), from
    /// these very definitions, into a folder.
    Man(ManArgs),
}

impl Command {
    /// The command's name as its metrics say it, and its --metrics-file where one is asked for.
    pub fn metrics_file(&self) -> Option<(&'static str, &std::path::Path)> {
        let (name, path) = match self {
            Command::Ingest(a) => ("ingest", &a.metrics_file),
            Command::Purge(a) => ("purge", &a.metrics_file),
            Command::Publish(a) => ("publish", &a.metrics_file),
            Command::Consume(a) => ("consume", &a.metrics_file),
            #[cfg(feature = "as4")]
            Command::Receive(a) => ("receive", &a.metrics_file),
            _ => return None,
        };
        path.as_deref().map(|p| (name, p))
    }

    /// Where no --metrics-file is given, `dir/edi_inbox_COMMAND.prom` (--metrics-dir,
    /// EDI_INBOX_METRICS) for the commands that write metrics.
    pub fn default_metrics_file(&mut self, dir: &std::path::Path) {
        let (name, path) = match self {
            Command::Ingest(a) => ("ingest", &mut a.metrics_file),
            Command::Purge(a) => ("purge", &mut a.metrics_file),
            Command::Publish(a) => ("publish", &mut a.metrics_file),
            Command::Consume(a) => ("consume", &mut a.metrics_file),
            #[cfg(feature = "as4")]
            Command::Receive(a) => ("receive", &mut a.metrics_file),
            _ => return,
        };
        if path.is_none() {
            *path = Some(dir.join(format!("edi_inbox_{name}.prom")));
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// Where from (the brokers' forms are listed by `cli::command`, from the broker table).
    #[arg(
        long,
        value_name = "SOURCE",
        env = "EDI_INBOX_CONSUME_FROM",
        hide_env_values = true
    )]
    pub from: String,

    /// Take up to N deliveries at once, decide them in one transaction, commit, then
    /// acknowledge them (also the RabbitMQ prefetch); the next N are fetched while a batch is
    /// decided.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub batch: u32,

    /// Stop once nothing arrived for this long (e.g. 5s), for runs from cron; without it, run
    /// until SIGTERM or SIGINT.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub until_idle: Option<Duration>,

    /// Where rejected deliveries go too (the forms are listed by `cli::command`).
    #[arg(
        long,
        value_name = "DEST",
        env = "EDI_INBOX_DEAD_LETTER",
        hide_env_values = true
    )]
    pub dead_letter: Option<String>,

    /// How long a delivery fetched by a consume that died waits before it is delivered again:
    /// the ack wait of a JetStream consumer made where missing (default 2m; longer than a batch
    /// takes), the visibility timeout of each SQS receive (default: the queue's own; 2s or
    /// more, extended while a message is held).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ack_wait: Option<Duration>,

    /// The Kafka consumer group (or ?group=NAME in the URL): the inbox keeps its position in
    /// each partition, moved in the decisions' transaction.
    #[arg(
        long,
        value_name = "NAME",
        env = "EDI_INBOX_KAFKA_GROUP",
        hide_env_values = true
    )]
    pub group: Option<String>,

    /// Where the inbox's position of a Kafka partition is not in the partition's log any more
    /// (the topic emptied, truncated, or deleted and created again where the brokers keep no
    /// topic ids): fail ends the run (exit 1) naming each position; earliest decides the
    /// partition's records from the log's start (interchanges decided before are duplicates).
    /// A topic created again under a new topic id is read from its beginning either way.
    #[arg(
        long,
        value_enum,
        value_name = "RULE",
        default_value = "fail",
        env = "EDI_INBOX_ON_POSITION_LOST",
        hide_env_values = true
    )]
    pub on_position_lost: PositionLostRule,

    #[command(flatten)]
    pub broker: BrokerArgs,

    /// Print JSON Lines: one object per interchange, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// Print only problems (drift, rejected) and the summary; nothing at all when nothing was
    /// read (an empty drop folder, or only files left for --min-age).
    #[arg(short, long)]
    pub quiet: bool,

    /// Write the run's figures here in the Prometheus text format, atomically (after each
    /// batch, at most every 10 seconds, and at the end).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub acks: AckArgs,

    #[command(flatten)]
    pub effects: EffectArgs,
}

/// The arguments of a command this build does not have: whatever they are, unread.
#[cfg(not(feature = "as4"))]
#[derive(Debug, clap::Args)]
pub struct NotBuiltArgs {
    #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    _unread: Vec<std::ffi::OsString>,
}

#[cfg(feature = "as4")]
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("configuration").required(true).multiple(true).args(["as4_config", "as2_config"])))]
pub struct ReceiveArgs {
    /// The address to listen on for HTTP POSTs of AS4 and AS2 messages (plain HTTP: put a
    /// TLS-terminating proxy in front), e.g. 127.0.0.1:8080. AS2 at /as2, AS4 at any other path.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "EDI_INBOX_RECEIVE_LISTEN",
        hide_env_values = true
    )]
    pub listen: String,

    /// The AS4 configuration (TOML): [own] party_id, key (PKCS#8 RSA key that decrypts and
    /// signs receipts) and cert; one [[partner]] per sender with its party_id and its pinned
    /// signing cert. Without it (and with --as2-config), no AS4 message is taken.
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_AS4_CONFIG",
        hide_env_values = true
    )]
    pub as4_config: Option<PathBuf>,

    /// The AS2 configuration (TOML): [own] as2_id, key (PEM RSA key that decrypts and signs
    /// MDNs), cert, and mdn_roots (PEM roots for partners' https:// asynchronous-MDN URLs;
    /// default: the system's); one [[partner]] per AS2-From with its as2_id, its pinned signing
    /// cert, encryption_cert where it is another, require_signed (default true),
    /// require_encrypted, require_compressed, and mdn_urls (where its asynchronous MDNs may
    /// go). Asynchronous MDNs are POSTed by this process after
    /// the commit, retried until taken. Without it (and with --as4-config), POSTs to /as2 are
    /// answered 404.
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_AS2_CONFIG",
        hide_env_values = true
    )]
    pub as2_config: Option<PathBuf>,

    /// The largest request taken (larger: refused with HTTP 413, nothing more of it kept; from
    /// its Content-Length before its body is read), from 1KiB to 4GiB, e.g. 50MiB. The bodies
    /// being read take at most --max-concurrent times this together.
    #[arg(long, value_name = "SIZE", default_value = "50MiB", value_parser = parse_request_size)]
    pub max_size: usize,

    /// The most a message's payloads may inflate to, together, in bytes (more: refused as
    /// EBMS:0303, a decompression bomb).
    #[arg(long, value_name = "SIZE", default_value = "200MiB", value_parser = parse_request_size)]
    pub max_inflated: usize,

    /// How many requests are in hand at once, at most: checked, or waiting for their decision.
    /// A request takes its place once its body is whole (more wait for their turn).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_concurrent: u32,

    /// How long a request may take to arrive, whole, and wait for its turn (a slow sender is cut
    /// off), from 1s to 1h.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_request_timeout)]
    pub request_timeout: Duration,

    /// Print JSON Lines: one object per interchange and per refused message.
    #[arg(long)]
    pub json: bool,

    /// Print only problems (drift, rejected, refused).
    #[arg(short, long)]
    pub quiet: bool,

    /// Write the run's figures here in the Prometheus text format, atomically (at most every 10
    /// seconds, and at the end).
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub acks: AckArgs,

    #[command(flatten)]
    pub effects: EffectArgs,
}

/// The brokers' own settings (consume, publish, dead letters): one value, converted into the
/// brokers' settings by `commands/`, so that a command names no broker.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub sqs: SqsArgs,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The settings of the Kafka clients (consume, publish, dead letters).
#[derive(Debug, Clone, clap::Args)]
pub struct KafkaArgs {
    /// librdkafka settings for Kafka, one key=value per line (# for comments): security.protocol,
    /// sasl.mechanism, sasl.username, sasl.password, ssl.ca.location, ... Each may also be given
    /// as EDI_INBOX_KAFKA_<KEY> (sasl.password: EDI_INBOX_KAFKA_SASL_PASSWORD), which wins over
    /// the file. Secrets are never shown.
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_KAFKA_CONFIG",
        hide_env_values = true
    )]
    pub kafka_config: Option<PathBuf>,
}

/// Where the SQS clients go (consume, publish, dead letters).
#[derive(Debug, Clone, clap::Args)]
pub struct SqsArgs {
    /// The SQS endpoint, for ElasticMQ, LocalStack or moto (http://127.0.0.1:9324): by default
    /// AWS's own for the queue's region. Credentials come from the standard chain (AWS_*
    /// variables, ~/.aws files and profiles, web identity, ECS and EC2 roles).
    #[arg(
        long,
        value_name = "URL",
        env = "AWS_ENDPOINT_URL_SQS",
        hide_env_values = true
    )]
    pub sqs_endpoint: Option<String>,
}

/// TLS and credentials of the broker connections (publish, consume, dead letters): files only,
/// never a secret on the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct TlsArgs {
    /// PEM file of the CA certificates that the broker's certificate must chain to (the brokers
    /// it is for are filled in by `cli::command`, from the broker table); they replace the
    /// system's roots.
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_TLS_CA",
        hide_env_values = true
    )]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of the client certificate (with its chain) for mutual TLS; needs --tls-key (the
    /// brokers it is for are filled in by `cli::command`).
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_TLS_CERT",
        hide_env_values = true
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_TLS_KEY",
        hide_env_values = true
    )]
    pub tls_key: Option<PathBuf>,
    /// NATS credentials file (a user JWT and its NKey seed, as nsc and the nats tool write it).
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_NATS_CREDS",
        hide_env_values = true
    )]
    pub nats_creds: Option<PathBuf>,
    /// File holding a NATS user NKey seed (SU...).
    #[arg(
        long,
        value_name = "FILE",
        env = "EDI_INBOX_NATS_NKEY",
        hide_env_values = true
    )]
    pub nats_nkey: Option<PathBuf>,
}

/// The operator's side effects (ingest, consume, receive; docs/effects.md).
#[derive(Debug, Clone, clap::Args)]
pub struct EffectArgs {
    /// A folder of the operator's SQL, run in the decision's transaction for each new
    /// interchange, so that the business rows commit with its key or not at all: one file per
    /// message type (INVOIC.sql; INVOIC.D.96A.sql wins for that version and release), an
    /// optional _interchange.sql run once per interchange before its messages, and
    /// migrations/NNNN_name.sql applied once each at start-up. Values reach the SQL only as
    /// bound parameters (:sender, :control_ref, :message_ref, :message, ...). Never for a
    /// duplicate or drift.
    #[arg(
        long,
        value_name = "DIR",
        env = "EDI_INBOX_EFFECTS",
        hide_env_values = true
    )]
    pub effects: Option<PathBuf>,

    /// How long one statement of the side effects may run: longer fails the run (exit 1, the
    /// open batch rolled back), as a database that does not answer would; never a refusal.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "30s",
        value_parser = parse_duration,
        env = "EDI_INBOX_EFFECTS_TIMEOUT",
        hide_env_values = true
    )]
    pub effects_timeout: Duration,

    /// A side effect that fails on an interchange's data (a constraint, a trigger's RAISE, a
    /// value its column cannot take): refuse keeps the interchange whole and unapplied as
    /// refused (exit 3) and goes on; halt stops the run there (exit 1), nothing of the open
    /// batch committed.
    #[arg(
        long,
        value_enum,
        value_name = "RULE",
        default_value = "refuse",
        env = "EDI_INBOX_ON_EFFECT_ERROR",
        hide_env_values = true
    )]
    pub on_effect_error: OnEffectError,

    /// PostgreSQL: the role the side effects run as (SET LOCAL ROLE around them), so that they
    /// may be granted the business schema alone.
    #[arg(
        long,
        value_name = "ROLE",
        env = "EDI_INBOX_EFFECTS_ROLE",
        hide_env_values = true
    )]
    pub effects_role: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnEffectError {
    Refuse,
    Halt,
}

/// How interchanges are answered with a CONTRL (ingest and consume).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct AckArgs {
    /// Build a CONTRL acknowledgement in the decision's transaction and store it: where UNB 0031
    /// asks for one (requested), for every interchange (always), or never. Never for an
    /// interchange of CONTRL or APERAK messages.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "requested")]
    pub contrl: ContrlWhen,

    /// For an exact duplicate: its first CONTRL again, the same bytes (resend), or a CONTRL
    /// rejecting it as a duplicate (reject: UCI 0083 4, 0085 26). Either once per sending of
    /// the partner's (a file's name, a broker message): never again for one already answered.
    #[arg(long, value_enum, value_name = "HOW", default_value = "resend")]
    pub contrl_duplicates: ContrlDuplicates,
}

/// `list --standard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StandardArg {
    Edifact,
    X12,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PublishKind {
    All,
    Message,
    Contrl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContrlWhen {
    Requested,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContrlDuplicates {
    Resend,
    Reject,
}

/// The command line as clap reads it, with what the broker table says filled in: the forms of
/// `--from`, `--to` and `--dead-letter` with what each broker's side is, the brokers `consume`
/// takes from and `publish` delivers to, and the brokers each TLS setting is for (so that no
/// list of brokers is kept by hand). `--help`, the manual pages and the completions all come
/// from it.
pub fn command() -> clap::Command {
    use crate::brokers::{Flag, help, names, tls_brokers};
    use clap::CommandFactory as _;
    let environment = " Read from the environment where not given, so that a password stays out of the process list.";
    let tls = |c: clap::Command| {
        c.mut_arg("tls_ca", |a| {
            a.help(format!(
                "PEM file of the CA certificates that the broker's certificate must chain to, for {}; they replace the system's roots",
                tls_brokers(|t| t.ca)
            ))
        })
        .mut_arg("tls_cert", |a| {
            a.help(format!(
                "PEM file of the client certificate (with its chain) for mutual TLS, for {}; needs --tls-key",
                tls_brokers(|t| t.client_cert)
            ))
        })
    };
    Cli::command()
        .mut_subcommand("consume", |c| {
            let c = with_about(
                c,
                format!(
                    "Take interchanges from {} and decide each exactly as ingest decides a file; acknowledge each delivery only after its decisions are committed.",
                    names(Flag::From)
                ),
            );
            tls(c)
                .mut_arg("from", |a| {
                    a.help(format!("Where from: {}.{environment}", help(Flag::From)))
                })
                .mut_arg("dead_letter", |a| {
                    a.help(format!(
                        "Publish each rejected delivery here too, with the reason in the edi-inbox-reason header: {}.",
                        help(Flag::DeadLetter)
                    ))
                })
        })
        .mut_subcommand("publish", |c| {
            let c = with_about(
                c,
                format!(
                    "Deliver the outbox: publish each event to {}, and mark it published only once the destination confirmed it.",
                    names(Flag::To)
                ),
            );
            tls(c).mut_arg("to", |a| {
                a.help(format!("Where to: {}.{environment}", help(Flag::To)))
            })
        })
}

/// `c` with `about` in place of its doc comment's first paragraph, in `--help` and in the
/// long help, which keeps the paragraphs after it.
fn with_about(c: clap::Command, about: String) -> clap::Command {
    let rest = c
        .get_long_about()
        .map(|l| l.to_string())
        .and_then(|l| l.split_once("\n\n").map(|(_, rest)| rest.to_string()))
        .unwrap_or_default();
    c.about(about.clone())
        .long_about(format!("{about}\n\n{rest}"))
}

/// `publish --payload`: what one published message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PayloadArg {
    /// One EDIFACT message (UNH..UNT) per event.
    Message,
    /// A whole interchange (UNA/UNB..UNZ), once for its events.
    Interchange,
}

/// `consume --on-position-lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PositionLostRule {
    Fail,
    Earliest,
}

#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// Where to (the forms are listed by `cli::command`, from the broker table).
    #[arg(
        long,
        value_name = "DEST",
        env = "EDI_INBOX_PUBLISH_TO",
        hide_env_values = true
    )]
    pub to: String,

    /// The NATS subject, or AMQP routing key, of an event: dot-separated parts, each plain
    /// (letters, digits, -, _) or holding {type}, {sender}, {recipient}, {version}, {release},
    /// {standard} (edifact or x12), each escaped so that no value can split or widen it. The
    /// default names EDIFACT for every event: with ANSI X12 partners, '{standard}.{type}.{sender}'.
    #[arg(
        long,
        value_name = "TEMPLATE",
        default_value = "edifact.{type}.{sender}"
    )]
    pub subject: String,

    /// NATS: where no stream captures the subjects, create this one (file storage, a two-minute
    /// duplicate window).
    #[arg(long, value_name = "NAME")]
    pub create_stream: Option<String>,

    /// RabbitMQ: the durable topic exchange to publish to (declared if missing).
    #[arg(long, value_name = "NAME", default_value = "edifact")]
    pub exchange: String,

    /// What one published message holds: one EDIFACT message (UNH..UNT), or a whole
    /// interchange once.
    #[arg(long, value_enum, default_value = "message")]
    pub payload: PayloadArg,

    /// Which events: all, message (the received messages' events), or contrl (only the CONTRL
    /// acknowledgements, edifact.CONTRL.outbound, e.g. as files a partner connector picks up).
    #[arg(long, value_enum, default_value = "all")]
    pub kind: PublishKind,

    /// Keep running: publish new events as they are committed (within --poll), until SIGTERM
    /// or SIGINT, which finish the batch in flight.
    #[arg(long)]
    pub follow: bool,

    /// With --follow: how often to look for new events when there were none.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,

    /// Events claimed, published and marked together (at most 5000: what a NATS connection keeps
    /// unconfirmed at once).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub batch: u32,

    /// An event refused this many times is parked as failed (shown by list --status failed)
    /// and no longer tried.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,

    /// An event refused is tried again only on a later run, and not before this long after.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub retry_after: Duration,

    /// First make the parked events (refused --max-attempts times; list --status failed) of
    /// --kind due again, as if never tried, once their cause is fixed; then publish as usual.
    /// Where another publish holds the inbox, that one sends them. Exit 3 where none was parked
    /// (or none of --id).
    #[arg(long)]
    pub retry_parked: bool,

    /// With --retry-parked: only the parked event of this id (event_id in list --json), in the
    /// outbox --kind message or --kind contrl names (list says which).
    #[arg(long, value_name = "N", requires = "retry_parked")]
    pub id: Option<i64>,

    /// Print JSON Lines: one object per event (or interchange), then a summary object.
    #[arg(long)]
    pub json: bool,

    /// Print only problems (failed events) and the summary.
    #[arg(short, long)]
    pub quiet: bool,

    /// Write the run's figures here in the Prometheus text format, atomically.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub broker: BrokerArgs,
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Print JSON Lines: one object per interchange, or per file that cannot be parsed.
    #[arg(long)]
    pub json: bool,

    /// Print each message's segments, UNH through UNT, every data element and component,
    /// instead of the envelope; with --json one object per message, its `segments` in the JSON
    /// form of docs/parser.md ("A message as JSON").
    #[arg(long)]
    pub segments: bool,

    /// Files or folders to read.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    /// Print JSON Lines: one object per interchange, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// Print only problems (drift, rejected) and the summary.
    #[arg(short, long)]
    pub quiet: bool,

    /// After the commit, move each file whose interchanges were all new or duplicate here.
    #[arg(
        long,
        value_name = "DIR",
        env = "EDI_INBOX_ARCHIVE",
        hide_env_values = true
    )]
    pub archive: Option<PathBuf>,

    /// Move each file with a rejected or drifted interchange here, with NAME.error.txt beside it.
    #[arg(
        long,
        value_name = "DIR",
        env = "EDI_INBOX_QUARANTINE",
        hide_env_values = true
    )]
    pub quarantine: Option<PathBuf>,

    /// Skip files modified more recently than this (a partner may still be writing them),
    /// e.g. 30s, 5m; they are reported as skipped and left in place. A modification time in the
    /// future (another host's clock) counts as old enough, never as a reason to skip a file
    /// forever.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        value_parser = parse_duration,
        env = "EDI_INBOX_MIN_AGE",
        hide_env_values = true
    )]
    pub min_age: Duration,

    /// Commit every N interchanges or after one second, whichever comes first (group commit);
    /// each interchange is still atomic on its own. A crash loses at most the open batch, which
    /// the next run redoes.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,

    /// Reject files larger than this without reading them (bytes, or with K, M, G, KiB, MiB, GiB).
    #[arg(long, value_name = "SIZE", default_value = "100MiB", value_parser = parse_size)]
    pub max_size: u64,

    /// Write the run's figures here in the Prometheus text format (for node_exporter's textfile
    /// collector), atomically.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub acks: AckArgs,

    #[command(flatten)]
    pub effects: EffectArgs,

    /// Files or folders to read (without any, the folder EDI_INBOX_DROP names).
    #[arg(
        required = true,
        value_name = "PATH",
        env = "EDI_INBOX_DROP",
        hide_env_values = true
    )]
    pub paths: Vec<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["refused", "applied"])))]
pub struct ReapplyArgs {
    /// The refused interchanges (list --status refused): all that are kept, or those --id names.
    #[arg(long)]
    pub refused: bool,

    /// Only the refusal of this id (`refusal N` in list, `refusal_id` in list --json); again
    /// for several.
    #[arg(long = "id", value_name = "N", conflicts_with = "applied")]
    pub ids: Vec<i64>,

    /// The side effects of --type run again for messages already applied (with :reapply = 1),
    /// leaving the inbox, the outbox and the CONTRLs as they are: to run a new or changed
    /// mapping over history. The SQL must be idempotent (an upsert on a business key): each
    /// message's statements run again in full. A message whose statement fails on its data is
    /// rolled back alone and said (exit 3).
    #[arg(long, requires = "message_type")]
    pub applied: bool,

    /// With --applied: the message type (UNH 0065) whose messages run again.
    #[arg(long = "type", value_name = "TYPE", requires = "applied")]
    pub message_type: Option<String>,

    /// With --applied: only interchanges received at or after this time (2026-11-01, midnight
    /// UTC, or an RFC 3339 time).
    #[arg(long, value_name = "DATE", value_parser = parse_since, requires = "applied")]
    pub since: Option<String>,

    /// With --applied: only messages whose recorded mapping (the checksum of _interchange.sql
    /// and their type's file when they last ran) differs from the one named now.
    #[arg(long, requires = "applied")]
    pub changed: bool,

    /// Print JSON Lines: one object per interchange, then a summary object.
    #[arg(long)]
    pub json: bool,

    /// Commit every N interchanges.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,

    #[command(flatten)]
    pub acks: AckArgs,

    #[command(flatten)]
    pub effects: EffectArgs,
}

#[derive(Debug, clap::Args)]
pub struct EffectsArgs {
    #[command(subcommand)]
    pub action: EffectsAction,
}

#[derive(Debug, Subcommand)]
pub enum EffectsAction {
    /// Apply the migrations and prepare every statement in a transaction rolled back, and say
    /// what is covered or what is wrong.
    Check(EffectsCheckArgs),
    /// Decide FILE's interchanges with the side effects in a transaction rolled back: each new
    /// message's JSON and the rows each statement changed.
    Try(EffectsTryArgs),
}

#[derive(Debug, clap::Args)]
pub struct EffectsCheckArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub effects: EffectArgs,
}

#[derive(Debug, clap::Args)]
pub struct EffectsTryArgs {
    /// Print JSON Lines: one object per interchange.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub effects: EffectArgs,

    /// The file whose interchanges are tried.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite inbox to copy (its file).
    #[arg(long, value_name = "SQLITE_FILE")]
    pub from: PathBuf,

    /// The PostgreSQL inbox to copy it into (postgres://..., or host=... dbname=...), in the
    /// schema --pg-schema names; created where it does not exist. A password is best left to
    /// PGPASSWORD or a password file, or given in EDI_INBOX_MIGRATE_TO, out of the command line.
    #[arg(
        long,
        value_name = "POSTGRES_URL",
        env = "EDI_INBOX_MIGRATE_TO",
        hide_env_values = true
    )]
    pub to: std::ffi::OsString,

    /// Delete what the target holds of an inbox first (in the copy's transaction): for a
    /// target that was tried out before. Its keys are lost: a redelivery of one is then new.
    #[arg(long)]
    pub replace: bool,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct PurgeArgs {
    /// Purge inbox entries received more than this many days ago (a whole number, at least 1).
    #[arg(
        long,
        value_name = "N",
        value_parser = purge_days,
        allow_negative_numbers = true,
        env = "EDI_INBOX_PURGE_DAYS",
        hide_env_values = true
    )]
    pub days: u32,

    /// Count what would go; delete nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Rows deleted per short transaction, so a concurrent ingest waits little for the lock.
    #[arg(long, value_name = "B", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Write the run's figures here in the Prometheus text format, atomically.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
}

/// `--days N` of purge: a whole number of days, at least 1, refused in words otherwise (the
/// range clap would print says nothing of why).
fn purge_days(text: &str) -> Result<u32, String> {
    let why = "purge keeps the keys of the last N days to tell redeliveries from new \
               interchanges: with 0 days nothing would be kept, and every redelivery would be \
               applied again";
    match text.trim().parse::<i64>() {
        Ok(n) if n >= 1 => u32::try_from(n)
            .map_err(|_| format!("{n} days is more than this edi-inbox counts ({})", u32::MAX)),
        Ok(0) => Err(format!("0 days: {why}; give 1 or more")),
        Ok(n) => Err(format!(
            "{n} days: a number of days cannot be negative; {why}; give 1 or more"
        )),
        Err(_) => Err(format!(
            "{text:?} is not a whole number of days; give 1 or more"
        )),
    }
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Also the volumes of each day (UTC) for each sender, recipient or message type:
    /// interchanges and messages accepted, duplicates, drift and rejected interchanges
    /// (`volumes` in --json).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<ByArg>,

    /// With --by, only the days from this one: as list --since takes it (2026-11-01, 7d,
    /// yesterday...), counted from the start of its day (UTC).
    #[arg(long, value_name = "DATE", value_parser = parse_since, requires = "by")]
    pub since: Option<String>,

    /// The quarantine folder ingest moves files to: how many files are in it now (their
    /// NAME.error.txt notes not counted).
    #[arg(
        long,
        value_name = "DIR",
        env = "EDI_INBOX_QUARANTINE",
        hide_env_values = true
    )]
    pub quarantine: Option<PathBuf>,
}

/// `stats --by`: what the volumes are counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByArg {
    /// UNB 0004.
    Sender,
    /// UNB 0010.
    Recipient,
    /// UNH S009/0065, the message type.
    Type,
}

/// `list --status`: the outcomes an event is stored with, in the words of `status::Status`
/// (converted in `commands/reports.rs`), each with its help; `skipped` is never stored, so it is
/// not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    /// Applied: the key was new.
    New,
    /// Not applied: the same key with the same content was applied before.
    Duplicate,
    /// Not applied, kept for review: the same key with other content.
    Drift,
    /// Not applied: the input breaks a rule of the envelope, or cannot be read.
    Rejected,
    /// Not applied, kept whole: one of the operator's side effects (`--effects`) failed on its
    /// data; `reapply --refused` decides it again once the mapping or the data is fixed.
    Refused,
    /// An outbox event parked after `publish --max-attempts` failed attempts (never an
    /// interchange's outcome).
    Failed,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only events of this kind.
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,

    /// Only events of this sender (UNB 0004); a rejected interchange whose UNB was read is
    /// found by it too.
    #[arg(long, value_name = "ID")]
    pub sender: Option<String>,

    /// Only events of this recipient (UNB 0010).
    #[arg(long, value_name = "ID")]
    pub recipient: Option<String>,

    /// Only events of this interchange control reference (UNB 0020).
    #[arg(long = "ref", value_name = "REF")]
    pub control_ref: Option<String>,

    /// Only events of interchanges holding a message of this type (UNH 0065: INVOIC, ORDERS...;
    /// ANSI X12's ST01: 850, 810...).
    #[arg(long = "type", value_name = "TYPE")]
    pub message_type: Option<String>,

    /// Only events of interchanges of this standard (a rejected file whose envelope could not
    /// be read has none, and is not listed with this).
    #[arg(long, value_enum, value_name = "STANDARD")]
    pub standard: Option<StandardArg>,

    /// Only events of this file: its path as listed, or its name in any folder.
    #[arg(long, value_name = "NAME")]
    pub file: Option<String>,

    /// Only events at or after this time: 2026-11-01 (midnight UTC), 2026-11-01T08:00:00Z,
    /// 2026-11-01T10:00:00+02:00, or relative to now: 2h, 30m, 7d, today, yesterday (midnight
    /// UTC).
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub since: Option<String>,

    /// Only events before this time (the same forms as --since): `--since yesterday --until
    /// today` is yesterday's events.
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    pub until: Option<String>,

    /// At most this many events.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,

    /// Skip this many of the newest events that match first (the next page: --offset 50).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub offset: u32,

    /// List the CONTRLs sent instead: when, to which partner, for which interchange,
    /// acknowledged or rejected (with 0085), and whether delivered. Takes --sender (the
    /// partner answered), --recipient, --ref, --since, --until, --limit and --offset.
    #[arg(long, conflicts_with_all = ["status", "message_type", "file"])]
    pub contrl: bool,

    /// Print JSON Lines, each event with `total`: how many match, before --limit and --offset.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The interchange: SENDER RECIPIENT REF (UNB 0004, 0010, 0020: the three parts of the
    /// key list prints as `SENDER -> RECIPIENT ref REF`, each quoted there as a shell needs
    /// it), or the number it is stored as (`stored as #N` in show, `id` in show --json).
    #[arg(required = true, num_args = 1..=5, value_name = "ID | SENDER RECIPIENT REF")]
    pub key: Vec<String>,

    /// Print the stored bytes of the interchange (the copy the inbox holds, else the latest;
    /// for a rejected interchange, the file it was in, as far as it was kept).
    #[arg(long, conflicts_with = "json")]
    pub raw: bool,

    /// Print the bytes of the first CONTRL that answered it.
    #[arg(long, conflicts_with_all = ["json", "raw"])]
    pub contrl: bool,

    /// Set each drifted copy (same key, other content, not applied) beside the applied one,
    /// segment by segment: unchanged segments as context, changed ones marked `-` (applied)
    /// and `+` (drifted), each with its segment number; with --json one object per copy.
    #[arg(long, conflicts_with_all = ["raw", "contrl", "segments"])]
    pub diff: bool,

    /// With --raw: print the Nth drifted copy's bytes instead (as --diff numbers them, from 1).
    #[arg(long, value_name = "N", requires = "raw", value_parser = clap::value_parser!(u32).range(1..))]
    pub copy: Option<u32>,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Print each message's segments, UNH through UNT, from the stored bytes (the copy the
    /// inbox holds, else the latest), as `inspect --segments` does; with --json one object per
    /// message.
    #[arg(long, conflicts_with_all = ["raw", "contrl"])]
    pub segments: bool,

    /// The standard of the key: edifact or x12. Without it, the key of whichever standard
    /// holds it; where both do (an EDIFACT and an X12 interchange under the same sender,
    /// recipient and control reference), show says so and asks for this.
    #[arg(long, value_name = "STANDARD", value_parser = clap::value_parser!(crate::standard::Standard))]
    pub standard: Option<crate::standard::Standard>,
}

/// Shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The folder to write the pages into (created where missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    pub shell: CompletionShell,
}

/// `2026-11-01` (midnight UTC) or an RFC 3339 time (`Z`, an offset, or none for UTC), as the
/// RFC 3339 UTC text stored in the database, so that it compares as text.
pub fn parse_since(text: &str) -> Result<String, String> {
    crate::clock::parse_since(text)
}

/// `30s`, `5m`, `1h30m`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (try 30s, 5m or 1h)"))
}

/// `--request-timeout`: a duration from a second to an hour.
#[cfg(feature = "as4")]
fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
        return Err(format!("{text} is not between 1s and 1h"));
    }
    Ok(d)
}

/// `--max-size`, `--max-inflated`: a size from 1KiB to 4GiB.
#[cfg(feature = "as4")]
fn parse_request_size(text: &str) -> Result<usize, String> {
    let n = parse_size(text)?;
    if !(1024..=4 << 30).contains(&n) {
        return Err(format!("{text} is not between 1KiB and 4GiB"));
    }
    usize::try_from(n).map_err(|_| format!("{text} is more than this machine can address"))
}

/// `1048576`, `512K`, `100M`, `100MiB`, `1G`: binary multiples either way.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 100MiB)"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?} (try K, M or G)")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_size("100MiB"), Ok(100 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5T").is_err());
        assert_eq!(
            parse_since("2026-11-01"),
            Ok("2026-11-01T00:00:00.000Z".to_string())
        );
        assert_eq!(
            parse_since("2026-11-01T08:30:00Z"),
            Ok("2026-11-01T08:30:00.000Z".to_string())
        );
        assert!(parse_since("tuesday").is_err());
    }

    #[test]
    fn clap_definition_is_consistent() {
        command().debug_assert();
    }

    /// Each TLS setting's help names every broker whose connections take it, from the table:
    /// `--tls-ca` once left SQS out (and told Kafka "over SSL", though the files turn TLS on).
    #[test]
    fn the_tls_settings_help_names_the_brokers_of_the_table() {
        use crate::brokers::{BROKERS, TlsUse};
        let mut command = command();
        for sub in ["consume", "publish"] {
            let sub = command
                .find_subcommand_mut(sub)
                .expect("consume and publish are commands");
            for (arg, takes) in [
                ("tls_ca", (|t| t.ca) as fn(&TlsUse) -> bool),
                ("tls_cert", |t| t.client_cert),
            ] {
                let help = sub
                    .get_arguments()
                    .find(|a| a.get_id() == arg)
                    .and_then(|a| a.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                for b in BROKERS {
                    assert_eq!(
                        help.contains(&format!("{} ({})", b.name, b.tls.when)),
                        takes(&b.tls),
                        "{} --{}: {}: {help}",
                        sub.get_name(),
                        arg.replace('_', "-"),
                        b.name
                    );
                }
            }
        }
    }
}
