//! Helpers shared by the integration tests, which drive the real binary.
#![allow(dead_code)]

/// A test that runs once per inbox backend from the same code: `NAME::sqlite` and
/// `NAME::postgres` (the latter on a fresh database of its own; see [`pg::PgDb`]). Attributes
/// before `fn` (its documentation, a `cfg`) go on the module of both.
macro_rules! per_backend {
    ($(#[$attr:meta])* fn $name:ident($site:ident) $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($site: crate::common::site::Site) $body

            #[test]
            fn sqlite() {
                run(crate::common::site::Site::new())
            }

            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                if let Some(site) = crate::common::site::Site::postgres() {
                    run(site)
                }
            }
        }
    };
}

/// The test brokers, one line each (the feature that builds it, the test's name, the type
/// implementing [`brokers::TestBroker`]): a new broker's line here gives it every contract
/// written with [`per_broker!`].
#[allow(unused_macros)]
macro_rules! each_test_broker {
    ($how:ident) => {
        per_broker_case!($how, "nats", nats, Jet);
        per_broker_case!($how, "amqp", amqp, Rabbit);
        per_broker_case!($how, "kafka", kafka, Kafka);
        per_broker_case!($how, "sqs", sqs, Sqs);
    };
    // Brokers whose consumers share one queue, message by message (Kafka's share a topic by
    // partitions, as its group assigns them: tests/it/kafka.rs).
    (shared $how:ident) => {
        per_broker_case!($how, "nats", nats, Jet);
        per_broker_case!($how, "amqp", amqp, Rabbit);
        per_broker_case!($how, "sqs", sqs, Sqs);
    };
}

/// One broker's test(s) of a [`per_broker!`] contract: `NAME::BROKER` on an SQLite inbox, or
/// with `per_backend`, `NAME::BROKER::sqlite` and `NAME::BROKER::postgres`.
#[allow(unused_macros)]
macro_rules! per_broker_case {
    (single, $feature:literal, $test:ident, $ty:ident) => {
        #[cfg(feature = $feature)]
        #[test]
        fn $test() {
            use crate::common::brokers::{TestBroker, $ty};
            if let Some(broker) = <$ty as TestBroker>::create() {
                run(crate::common::site::Site::new(), broker)
            }
        }
    };
    (per_backend, $feature:literal, $test:ident, $ty:ident) => {
        #[cfg(feature = $feature)]
        mod $test {
            use crate::common::brokers::{TestBroker, $ty};
            use crate::common::site::Site;

            #[test]
            fn sqlite() {
                if let Some(broker) = <$ty as TestBroker>::create() {
                    super::run(Site::new(), broker)
                }
            }

            #[cfg(feature = "postgres")]
            #[test]
            fn postgres() {
                if let Some(site) = Site::postgres()
                    && let Some(broker) = <$ty as TestBroker>::create()
                {
                    super::run(site, broker)
                }
            }
        }
    };
}

/// A contract test that runs once per broker from the same code: `NAME::nats` (a JetStream
/// stream of its own, where the `nats` feature is built) and `NAME::amqp` (a RabbitMQ queue of
/// its own, where `amqp` is), each on an SQLite inbox; the body is generic over
/// [`brokers::TestBroker`], whose value it gets made (a test whose broker does not answer is
/// skipped with a notice outside CI). With `per_backend` before `fn`, each broker's test runs
/// once per inbox backend too: `NAME::nats::sqlite`, `NAME::nats::postgres`, `NAME::amqp::...`.
/// The brokers are listed once, in [`each_test_broker!`].
#[allow(unused_macros)]
macro_rules! per_broker {
    ($(#[doc = $doc:literal])* fn $name:ident($site:ident, $broker:ident) $body:block) => {
        per_broker!(@contract (single), [$(#[doc = $doc])*] $name($site, $broker) $body);
    };
    ($(#[doc = $doc:literal])* per_backend fn $name:ident($site:ident, $broker:ident) $body:block) => {
        per_broker!(@contract (per_backend), [$(#[doc = $doc])*] $name($site, $broker) $body);
    };
    ($(#[doc = $doc:literal])* shared fn $name:ident($site:ident, $broker:ident) $body:block) => {
        per_broker!(@contract (shared single), [$(#[doc = $doc])*] $name($site, $broker) $body);
    };
    (@contract $how:tt, [$($doc:tt)*] $name:ident($site:ident, $broker:ident) $body:block) => {
        $($doc)*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use crate::common::brokers::TestBroker as _;

            #[allow(unused_mut)]
            fn run<B: crate::common::brokers::TestBroker>(
                $site: crate::common::site::Site,
                mut $broker: B,
            ) $body

            each_test_broker! $how;
        }
    };
}

pub mod brokers;
pub mod pg;
#[macro_use]
pub mod sinks;
pub mod raw;
pub mod run;
pub mod site;
pub mod synth;

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub use run::{Run, RunExt, Running, StartExt};

/// What the processes the tests start get for SQS: the test server's made-up credentials,
/// never the machine's own files or instance role (brokers/sqs.rs).
pub const AWS_TEST_ENV: [(&str, &str); 5] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
    ("AWS_CONFIG_FILE", "/dev/null"),
    ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
];

/// Something a test needs is missing (`missing` says what, and what goes unchecked for want of
/// it): where `variable` is set (`.ci/run` sets an `EDI_INBOX_REQUIRE_*` for each server and tool
/// CI has), a failure that says both; elsewhere a notice on standard error, and the caller skips
/// what needs it. So a test passes over nothing quietly in CI, and runs where it can elsewhere.
#[track_caller]
pub fn require(missing: &str, variable: &str) {
    assert!(
        std::env::var_os(variable).is_none(),
        "{missing}, and {variable} is set: this may not be skipped"
    );
    eprintln!("{missing}: not checked ({variable} is not set)");
}

/// The `edi-inbox` binary built for this test run.
pub fn edi_inbox() -> Command {
    let mut cmd = Command::cargo_bin("edi-inbox").expect("the edi-inbox binary is built");
    // The test broker forms a Kafka group only once a session timeout went by (brokers/kafka.rs).
    cmd.env("EDI_INBOX_KAFKA_SESSION_TIMEOUT_MS", "6000");
    cmd.envs(AWS_TEST_ENV);
    for var in [
        "EDI_INBOX_DB",
        "EDI_INBOX_QUARANTINE",
        "EDI_INBOX_PUBLISH_TO",
        "EDI_INBOX_CONSUME_FROM",
        "EDI_INBOX_DEAD_LETTER",
        "EDI_INBOX_TLS_CA",
        "EDI_INBOX_TLS_CERT",
        "EDI_INBOX_TLS_KEY",
        "EDI_INBOX_NATS_CREDS",
        "EDI_INBOX_NATS_NKEY",
        // What the environment file sets for a cron host (packaging/env): never from the
        // environment the tests run in.
        "EDI_INBOX_DROP",
        "EDI_INBOX_ARCHIVE",
        "EDI_INBOX_QUARANTINE",
        "EDI_INBOX_MIN_AGE",
        "EDI_INBOX_METRICS",
        "EDI_INBOX_PURGE_DAYS",
        "EDI_INBOX_MIGRATE_TO",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// A port of 127.0.0.1 nothing listens on now (the system's pick), for a server of a test's own.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// The project's `samples/` folder.
pub fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// `inspect --json` over `paths`: the run (its JSON Lines in [`Run::json`]).
pub fn inspect_json(paths: &[&Path]) -> Run {
    edi_inbox().args(["inspect", "--json"]).args(paths).run()
}

/// Parses JSON Lines output.
pub fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Starts every command at once (their standard output and error kept), then waits for them
/// all: processes overlapping as hosts or cron runs do. Each is waited for on a thread of its
/// own, so that none blocks on a full pipe while another is waited for.
pub fn run_together(commands: Vec<std::process::Command>) -> Vec<Run> {
    let children: Vec<Running> = commands
        .into_iter()
        .map(|mut c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .start()
        })
        .collect();
    let waiting: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait()))
        .collect();
    waiting.into_iter().map(|t| t.join().unwrap()).collect()
}

/// SQL that undoes `0012_positions.sql` (the Kafka positions, a delivery's key and time),
/// `0013_transport_messages.sql` (AS4's message ids), `0016_effects.sql` (the side effects'
/// refusals, migrations and mappings), `0017_rejection_keys.sql`, `0018_filing.sql` (where each
/// sighting was read from and moved) and the columns of `0019_standard.sql` (its key table is
/// built again from the columns before it, whatever it holds), for a test that takes an SQLite inbox back to an older
/// version.
pub const UNDO_POSITIONS: &str = "
    DROP INDEX interchanges_key; ALTER TABLE interchanges DROP COLUMN standard;
    CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);
    DROP INDEX sightings_key; ALTER TABLE sightings DROP COLUMN standard;
    CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
    DROP INDEX acknowledgements_key; ALTER TABLE acknowledgements DROP COLUMN standard;
    CREATE INDEX acknowledgements_key ON acknowledgements (sender, recipient, control_ref);
    DROP TABLE message_effects; DROP TABLE refusals; DROP TABLE effect_migrations;
    DROP TABLE refusal_outbox; DROP TABLE answer_outbox; DROP TABLE consumer_positions; DROP TABLE transport_messages;
    ALTER TABLE deliveries DROP COLUMN record_key;
    ALTER TABLE deliveries DROP COLUMN produced_at;
    DROP INDEX rejected_files_sending; ALTER TABLE rejected_files DROP COLUMN sending;
    DROP INDEX rejections_key; ALTER TABLE rejections DROP COLUMN standard;
    ALTER TABLE rejections DROP COLUMN sender;
    ALTER TABLE rejections DROP COLUMN recipient; ALTER TABLE rejections DROP COLUMN control_ref;
    ALTER TABLE interchanges DROP COLUMN source_path;
    ALTER TABLE interchanges DROP COLUMN host; ALTER TABLE interchanges DROP COLUMN moved_to;
    ALTER TABLE sightings DROP COLUMN source_path;
    ALTER TABLE sightings DROP COLUMN host; ALTER TABLE sightings DROP COLUMN moved_to;";

/// SQL that takes an SQLite inbox back from schema 14 to before migration 6 (the publisher's
/// columns; and the later ones: the deliveries, the acknowledgements, the positions), for the
/// tests that open an older inbox and see it brought up to date.
pub const UNDO_PUBLISH_COLUMNS: &str = "
    DROP INDEX interchanges_key; ALTER TABLE interchanges DROP COLUMN standard;
    CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);
    DROP INDEX sightings_key; ALTER TABLE sightings DROP COLUMN standard;
    CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
    DROP INDEX rejected_files_sending; ALTER TABLE rejected_files DROP COLUMN sending;
    DROP INDEX rejections_key; ALTER TABLE rejections DROP COLUMN standard;
    ALTER TABLE rejections DROP COLUMN sender;
    ALTER TABLE rejections DROP COLUMN recipient; ALTER TABLE rejections DROP COLUMN control_ref;
    DROP TABLE message_effects; DROP TABLE refusals; DROP TABLE effect_migrations;
    DROP TABLE refusal_outbox; DROP TABLE answer_outbox; DROP TABLE consumer_positions; DROP TABLE transport_messages;
    DROP TABLE deliveries; DROP TABLE contrl_outbox; DROP TABLE acknowledgements;
    DROP TABLE contrl_counters;
    DROP INDEX outbox_failed; DROP INDEX outbox_unpublished; DROP INDEX outbox_message;
    ALTER TABLE outbox DROP COLUMN attempts;
    ALTER TABLE outbox DROP COLUMN last_error;
    ALTER TABLE outbox DROP COLUMN last_attempt_at;
    ALTER TABLE outbox DROP COLUMN last_attempt_pass;
    ALTER TABLE outbox DROP COLUMN failed_at;
    CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
    ALTER TABLE interchanges DROP COLUMN source_path;
    ALTER TABLE interchanges DROP COLUMN host; ALTER TABLE interchanges DROP COLUMN moved_to;
    ALTER TABLE sightings DROP COLUMN source_path;
    ALTER TABLE sightings DROP COLUMN host; ALTER TABLE sightings DROP COLUMN moved_to;";

/// The TCP connections process `pid` holds open (established) to `port` on this machine, by
/// their sockets' inodes: what a test that cuts a connection checks it did cut (each of them
/// gone afterwards), from the kernel's own tables (`/proc/PID/fd`, `/proc/net/tcp` and `tcp6`).
pub fn connections_to(pid: u32, port: u16) -> std::collections::BTreeSet<u64> {
    let held: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let mut open = std::collections::BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl, local address, remote address (HEX-IP:HEX-PORT), state (01: established),
            // ..., inode (the tenth).
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(p), "01", Ok(inode)) = (remote_port, *state, inode.parse::<u64>())
                && p == port
                && held.contains(&inode)
            {
                open.insert(inode);
            }
        }
    }
    open
}

/// The port of a broker URL (`scheme://[user[:password]@]host:port/...`), where it names one.
pub fn port_of(url: &str) -> Option<u16> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority.rsplit('@').next()?;
    host_port.rsplit_once(':')?.1.parse().ok()
}
