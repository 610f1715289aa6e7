//! A PostgreSQL database of a test's own on the machine's server (127.0.0.1:5432, trust
//! authentication, user `postgres`), created fresh and dropped at the end, so that tests run in
//! parallel and leave nothing behind. In a build without the `postgres` feature there is no
//! such database (the type has no values), so the sites' code compiles unchanged and no test
//! can make one.

#[cfg(feature = "postgres")]
pub use real::PgDb;

#[cfg(not(feature = "postgres"))]
pub enum PgDb {}

#[cfg(not(feature = "postgres"))]
impl PgDb {
    pub fn create() -> Option<PgDb> {
        eprintln!("this build has no PostgreSQL inbox (the `postgres` feature): not checked");
        None
    }
    pub fn url(&self) -> String {
        match *self {}
    }
    pub fn rows(&self, _sql: &str) -> Vec<Vec<Option<String>>> {
        match *self {}
    }
    pub fn batch_execute(&self, _sql: &str) {
        match *self {}
    }
    pub fn count(&self, _sql: &str) -> i64 {
        match *self {}
    }
    pub fn triples(&self, _sql: &str) -> std::collections::BTreeSet<(String, String, String)> {
        match *self {}
    }
}

#[cfg(feature = "postgres")]
mod real {

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
                    crate::common::require(
                        &format!("PostgreSQL does not answer on 127.0.0.1:5432 ({e})"),
                        "EDI_INBOX_REQUIRE_POSTGRES",
                    );
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

        /// Rows as text (numbers in decimal, NULL as `None`).
        pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
            self.client()
                .simple_query(sql)
                .unwrap()
                .into_iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(r) => {
                        Some((0..r.len()).map(|k| r.get(k).map(str::to_string)).collect())
                    }
                    _ => None,
                })
                .collect()
        }

        /// One number.
        pub fn count(&self, sql: &str) -> i64 {
            self.client()
                .query_one(&format!("SELECT ({sql})::bigint"), &[])
                .unwrap()
                .get(0)
        }

        /// Rows of three text columns.
        pub fn triples(&self, sql: &str) -> std::collections::BTreeSet<(String, String, String)> {
            self.client()
                .query(sql, &[])
                .unwrap()
                .into_iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        }

        /// Runs statements with the inbox's schema first in the search path.
        pub fn batch_execute(&self, sql: &str) {
            self.client().batch_execute(sql).unwrap()
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
}
