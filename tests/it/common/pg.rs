//! A PostgreSQL database of a test's own on the machine's server (127.0.0.1:5432, trust
//! authentication, user `postgres`), created fresh and dropped at the end, so that tests run in
//! parallel and leave nothing behind.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The server's own database, to create and drop the tests' ones from.
const ADMIN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=5";

pub struct PgDb {
    pub name: String,
}

impl PgDb {
    /// A fresh database; `None` (with a notice) where the server does not answer, which is a
    /// failure where `EDI_INBOX_REQUIRE_POSTGRES` is set (`.ci/run` sets it): in CI a PostgreSQL
    /// test is never skipped quietly.
    pub fn create() -> Option<PgDb> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let mut admin = match postgres::Client::connect(ADMIN, postgres::NoTls) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("EDI_INBOX_REQUIRE_POSTGRES").is_none(),
                    "PostgreSQL does not answer on 127.0.0.1:5432 ({e}), and EDI_INBOX_REQUIRE_POSTGRES is set"
                );
                eprintln!("PostgreSQL does not answer on 127.0.0.1:5432 ({e}): not checked");
                return None;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "edi_t_{}_{}_{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        Some(PgDb { name })
    }

    /// As `--db` takes it.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }

    /// A connection with the inbox's schema first in the search path.
    pub fn client(&self) -> postgres::Client {
        let mut c = postgres::Client::connect(
            &format!(
                "host=127.0.0.1 port=5432 user=postgres dbname={}",
                self.name
            ),
            postgres::NoTls,
        )
        .unwrap();
        c.batch_execute("SET search_path = edi_inbox, public")
            .unwrap();
        c
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(ADMIN, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
