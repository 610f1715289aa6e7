//! Helpers shared by the integration tests, which drive the real binary.
#![allow(dead_code)]

/// A test that runs once per inbox backend from the same code: `NAME::sqlite` and
/// `NAME::postgres` (the latter on a fresh database of its own; see [`pg::PgDb`]).
macro_rules! per_backend {
    ($(#[doc = $doc:literal])* fn $name:ident($site:ident) $body:block) => {
        $(#[doc = $doc])*
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

pub mod brokers;
pub mod pg;
pub mod raw;
pub mod site;
pub mod synth;

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The `edi-inbox` binary built for this test run.
pub fn edi_inbox() -> Command {
    let mut cmd = Command::cargo_bin("edi-inbox").expect("the edi-inbox binary is built");
    for var in [
        "EDI_INBOX_DB",
        "EDI_INBOX_PUBLISH_TO",
        "EDI_INBOX_CONSUME_FROM",
        "EDI_INBOX_DEAD_LETTER",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// The project's `samples/` folder.
pub fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// `inspect --json` over `paths`: exit status and JSON Lines.
pub fn inspect_json(paths: &[&Path]) -> (Option<i32>, Vec<serde_json::Value>) {
    let out = edi_inbox()
        .args(["inspect", "--json"])
        .args(paths)
        .output()
        .unwrap();
    (out.status.code(), json_lines(&out.stdout))
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
pub fn run_together(commands: Vec<std::process::Command>) -> Vec<std::process::Output> {
    let children: Vec<_> = commands
        .into_iter()
        .map(|mut c| {
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let waiting: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || c.wait_with_output().unwrap()))
        .collect();
    waiting.into_iter().map(|t| t.join().unwrap()).collect()
}

/// SQL that takes an SQLite inbox back from schema 10 to before migration 6 (the publisher's
/// columns; and migrations 7 to 9, the deliveries and the acknowledgements), for the tests
/// that open an older inbox and see it brought up to date.
pub const UNDO_PUBLISH_COLUMNS: &str = "
    DROP TABLE deliveries; DROP TABLE contrl_outbox; DROP TABLE acknowledgements;
    DROP TABLE contrl_counters;
    DROP INDEX outbox_failed; DROP INDEX outbox_unpublished; DROP INDEX outbox_message;
    ALTER TABLE outbox DROP COLUMN attempts;
    ALTER TABLE outbox DROP COLUMN last_error;
    ALTER TABLE outbox DROP COLUMN last_attempt_at;
    ALTER TABLE outbox DROP COLUMN last_attempt_pass;
    ALTER TABLE outbox DROP COLUMN failed_at;
    CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;";

/// A child process (a long run of the binary) killed and reaped however the test ends.
pub struct Reaped(pub Option<std::process::Child>);

impl Reaped {
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
