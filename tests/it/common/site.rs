//! A drop folder, an archive, a quarantine and a database in a temporary folder, and the
//! invariants every run must leave behind.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::run::{Run, RunExt};
use super::synth::Synth;

pub struct Site {
    pub dir: tempfile::TempDir,
    db: Option<PathBuf>,
    /// Where the inbox is a PostgreSQL one, its database.
    pg: Option<super::pg::PgDb>,
}

/// What a finished run leaves: keys applied, messages, and where each input file went.
#[derive(Debug, PartialEq, Eq)]
pub struct State {
    pub keys: BTreeSet<(String, String, String)>,
    pub messages: i64,
    pub outbox: i64,
    pub archived: BTreeSet<String>,
    pub quarantined: BTreeSet<String>,
}

impl Site {
    /// A site whose inbox is an SQLite file.
    pub fn new() -> Site {
        let s = Site {
            dir: tempfile::tempdir().unwrap(),
            db: None,
            pg: None,
        };
        fs::create_dir_all(s.drop()).unwrap();
        s
    }

    /// A site whose inbox is a PostgreSQL database of its own; `None` where the server does not
    /// answer outside CI (see [`super::pg::PgDb::create`]).
    pub fn postgres() -> Option<Site> {
        let pg = super::pg::PgDb::create()?;
        let mut s = Site::new();
        s.pg = Some(pg);
        Some(s)
    }

    /// A new site with an inbox of the same kind as this one's.
    pub fn fresh(&self) -> Site {
        if self.is_postgres() {
            Site::postgres().expect("the server answered a moment ago")
        } else {
            Site::new()
        }
    }

    /// True for a PostgreSQL inbox.
    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    /// The PostgreSQL database of a PostgreSQL site.
    pub fn pg(&self) -> Option<&super::pg::PgDb> {
        self.pg.as_ref()
    }

    /// What `--db` gets: the SQLite file, or the PostgreSQL URL.
    pub fn db_arg(&self) -> std::ffi::OsString {
        match &self.pg {
            Some(pg) => pg.url().into(),
            None => self.db().into_os_string(),
        }
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub fn drop(&self) -> PathBuf {
        self.path("drop")
    }
    pub fn db(&self) -> PathBuf {
        self.db.clone().unwrap_or_else(|| self.path("inbox.db"))
    }
    /// Puts the database elsewhere (on a small file system, say).
    pub fn set_db(&mut self, path: PathBuf) {
        self.db = Some(path);
    }

    /// `files` synthetic files: some with two interchanges, exact redeliveries, drifts, and a
    /// broken one every 50 files. Deterministic by seed.
    pub fn fill(&self, files: usize, seed: u64) {
        self.fill_with(files, seed, false)
    }

    /// As [`Site::fill`]; where `x12`, about a quarter of the new files are ANSI X12
    /// interchanges instead (their redeliveries and drift as the EDIFACT ones'), so that a
    /// contract is tried on both standards in the same runs.
    pub fn fill_with(&self, files: usize, seed: u64, x12: bool) {
        let mut g = Synth::new(seed);
        let mut written: Vec<Vec<u8>> = Vec::new();
        // The files that are no copy of another and have none yet. With `x12`, a redelivery or
        // drift copies one of them only, once: a copy of a copy, or a redelivery and a drift of
        // one file, make chains whose counts (how many new, how many drift) depend on the order
        // overlapping runs take them in.
        let mut originals: Vec<usize> = Vec::new();
        let earlier = |g: &mut Synth, written: usize, originals: &mut Vec<usize>| {
            if x12 && !originals.is_empty() {
                originals.swap_remove(g.below(originals.len() as u64) as usize)
            } else {
                g.below(written as u64) as usize
            }
        };
        for n in 0..files {
            let roll = g.below(100);
            let copy = roll < 8 && !written.is_empty();
            let data = if n % 50 == 49 {
                b"UNB+UNOC:3+BROKEN+R+1:1+X'UNH+1+ORDERS:D:96A:UN'UNT+9+1'UNZ+1+X'".to_vec()
            } else if roll < 5 && !written.is_empty() {
                // An exact redelivery, with other line breaks.
                let k = earlier(&mut g, written.len(), &mut originals);
                let mut copy = written[k].clone();
                copy.extend_from_slice(b"\r\n");
                copy
            } else if copy {
                // Drift: the same key (the first interchange of an earlier file), other content.
                let k = earlier(&mut g, written.len(), &mut originals);
                let text = String::from_utf8_lossy(&written[k]).into_owned();
                text.replacen("BGM+", "BGM+9", 1)
                    .replacen("BEG*", "BEG*0", 1)
                    .into_bytes()
            } else if x12 && roll.is_multiple_of(4) {
                let crlf = g.chance(50);
                g.x12_interchange("X12SENDER", "X12RECEIVER", n as u64 + 1, 1 + n % 3, crlf)
            } else {
                let layout = g.layout();
                let mut data = g.interchange(
                    "SENDER",
                    "RECIPIENT",
                    &format!("K{n:06}"),
                    1 + n % 3,
                    layout,
                );
                if roll < 20 {
                    data.extend(g.interchange(
                        "SENDER",
                        "RECIPIENT",
                        &format!("K{n:06}B"),
                        1,
                        layout,
                    ));
                }
                data
            };
            if n % 50 != 49 && !copy {
                originals.push(n);
            }
            fs::write(self.drop().join(format!("f{n:05}.edi")), &data).unwrap();
            written.push(data);
        }
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"));
        c.env_remove("FAILPOINTS")
            .env_remove("EDI_INBOX_DB")
            .env_remove("EDI_INBOX_PUBLISH_TO")
            .env_remove("EDI_INBOX_CONSUME_FROM")
            .env_remove("EDI_INBOX_DEAD_LETTER")
            .env_remove("EDI_INBOX_TLS_CA")
            .env_remove("EDI_INBOX_TLS_CERT")
            .env_remove("EDI_INBOX_TLS_KEY")
            .env_remove("EDI_INBOX_NATS_CREDS")
            .env_remove("EDI_INBOX_NATS_NKEY")
            .env_remove("EDI_INBOX_DROP")
            .env_remove("EDI_INBOX_ARCHIVE")
            .env_remove("EDI_INBOX_QUARANTINE")
            .env_remove("EDI_INBOX_MIN_AGE")
            .env_remove("EDI_INBOX_METRICS")
            .env_remove("EDI_INBOX_PURGE_DAYS")
            // The test broker forms a Kafka group only once a session timeout went by.
            .env("EDI_INBOX_KAFKA_SESSION_TIMEOUT_MS", "6000")
            .envs(crate::common::AWS_TEST_ENV)
            .arg("--db")
            .arg(self.db_arg());
        c
    }

    /// `ingest` with archive and quarantine, small batches.
    pub fn ingest_command(&self, batch: u32) -> Command {
        let mut c = self.command();
        c.args(["ingest", "-q", "--batch", &batch.to_string(), "--archive"])
            .arg(self.path("archive"))
            .arg("--quarantine")
            .arg(self.path("failed"))
            .arg(self.drop());
        c
    }

    pub fn ingest(&self, batch: u32) -> Run {
        self.ingest_command(batch).run()
    }

    /// Writes a file into the drop folder.
    pub fn put(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.drop().join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    /// Copies a file of `samples/` into the drop folder under `name`.
    pub fn put_sample(&self, sample: &str, name: &str) -> PathBuf {
        self.put(name, &fs::read(super::samples().join(sample)).unwrap())
    }

    /// `ingest -q` of the drop folder (after the global options `global`), for assertions.
    pub fn ingest_quietly(&self, global: &[&str]) -> assert_cmd::assert::Assert {
        self.cmd()
            .args(global)
            .args(["ingest", "-q"])
            .arg(self.drop())
            .assert()
    }

    /// The binary with `--db` set, for assertions.
    pub fn cmd(&self) -> assert_cmd::Command {
        let mut c = super::edi_inbox();
        c.arg("--db").arg(self.db_arg());
        c
    }

    /// `ingest --json` over the drop folder with `extra` options: the run (its JSON Lines in
    /// [`Run::json`]). A run that exits 0 says nothing on standard error.
    pub fn ingest_json(&self, extra: &[&str]) -> Run {
        let run = self
            .cmd()
            .args(["ingest", "--json"])
            .args(extra)
            .arg(self.drop())
            .run();
        assert!(
            run.stderr.is_empty() || run.status.code() != Some(0),
            "exit 0 with something on standard error\n{run}"
        );
        run
    }

    /// Runs the binary with `args` (after `--db`): the run.
    pub fn run(&self, args: &[&str]) -> Run {
        self.cmd().args(args).run()
    }

    /// Runs the binary with `args` (after `--db`), for its JSON Lines ([`Run::json`]).
    pub fn json(&self, args: &[&str]) -> Run {
        self.run(args)
    }

    /// `stats --json`, which must exit 0: its one object.
    pub fn stats(&self) -> serde_json::Value {
        self.json(&["stats", "--json"]).success().json().remove(0)
    }

    /// One figure of `stats --json` (`interchanges`, `inbox`, `messages`, `duplicates`,
    /// `drift`, `rejected`, ...): what the operator sees, rather than SQL on the tables.
    pub fn stat(&self, name: &str) -> i64 {
        let stats = self.stats();
        stats[name]
            .as_i64()
            .unwrap_or_else(|| panic!("no figure {name} in {stats}"))
    }

    /// The received messages' events not published yet, parked ones included, as `stats
    /// --json` counts them (`outbox_kinds.message`: still tried, and parked).
    pub fn unpublished(&self) -> i64 {
        let stats = self.stats();
        let kind = &stats["outbox_kinds"]["message"];
        kind["unpublished"].as_i64().unwrap() + kind["failed"].as_i64().unwrap()
    }

    /// `show SENDER RECIPIENT CONTROL_REF --json`, which must exit 0: the key's history
    /// (`interchanges`, each `in_inbox` or purged; `sightings`; `acknowledgements`).
    pub fn show(&self, sender: &str, recipient: &str, control_ref: &str) -> serde_json::Value {
        self.json(&["show", sender, recipient, control_ref, "--json"])
            .success()
            .json()
            .remove(0)
    }

    /// `list --json` with `args`, which must exit 0: its events, the newest first.
    pub fn list(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut all = vec!["list", "--json"];
        all.extend_from_slice(args);
        self.json(&all).success().json()
    }

    /// One number from the database, whichever backend holds it.
    pub fn count(&self, sql: &str) -> i64 {
        match &self.pg {
            Some(pg) => pg.count(sql),
            None => rusqlite::Connection::open(self.db())
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
        }
    }

    /// Runs SQL against the database (to age entries, say).
    pub fn sql(&self, sql: &str) {
        match &self.pg {
            Some(pg) => pg.batch_execute(sql),
            None => rusqlite::Connection::open(self.db())
                .unwrap()
                .execute_batch(sql)
                .unwrap(),
        }
    }

    /// Rows as text, as both backends give them (numbers in decimal, NULL as `None`).
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        match &self.pg {
            Some(pg) => pg.rows(sql),
            None => {
                use rusqlite::types::ValueRef;
                let conn = rusqlite::Connection::open(self.db()).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                let n = stmt.column_count();
                stmt.query_map([], |r| {
                    (0..n)
                        .map(|k| {
                            Ok(match r.get_ref(k)? {
                                ValueRef::Null => None,
                                ValueRef::Integer(i) => Some(i.to_string()),
                                ValueRef::Real(f) => Some(f.to_string()),
                                ValueRef::Text(t) | ValueRef::Blob(t) => {
                                    Some(String::from_utf8_lossy(t).into_owned())
                                }
                            })
                        })
                        .collect()
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
            }
        }
    }

    /// Rows of three text columns (keys, say).
    pub fn triples(&self, sql: &str) -> BTreeSet<(String, String, String)> {
        match &self.pg {
            Some(pg) => pg.triples(sql),
            None => {
                let conn = rusqlite::Connection::open(self.db()).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap()
            }
        }
    }

    /// File names in a folder of the site, sorted; empty where it does not exist.
    pub fn files_in(&self, rel: &str) -> Vec<String> {
        self.names(rel)
    }

    fn names(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.path(rel))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Reads the state, checking on the way every invariant that holds whatever happened:
    /// each key applied once, the inbox matching the business tables, one outbox event per
    /// message, no file in two places or twice in one, no temporary file left.
    pub fn state(&self) -> State {
        let one = |sql: &str| -> i64 { self.count(sql) };
        // A run killed before it created the schema leaves a database with none.
        let schema = if self.is_postgres() {
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'edi_inbox' AND table_name = 'interchanges'"
        } else {
            "SELECT count(*) FROM sqlite_schema WHERE name = 'interchanges'"
        };
        if one(schema) == 0 {
            assert!(self.names("archive").is_empty() && self.names("failed").is_empty());
            return State {
                keys: BTreeSet::new(),
                messages: 0,
                outbox: 0,
                archived: BTreeSet::new(),
                quarantined: BTreeSet::new(),
            };
        }
        assert_eq!(
            one("SELECT count(*) FROM interchanges"),
            one(
                "SELECT count(*) FROM (SELECT DISTINCT sender, recipient, control_ref FROM interchanges) k"
            ),
            "an interchange was applied twice"
        );
        assert_eq!(
            one("SELECT count(*) FROM inbox"),
            one("SELECT count(*) FROM inbox i JOIN interchanges c ON c.id = i.interchange_id
                 AND c.sender = i.sender AND c.recipient = i.recipient AND c.control_ref = i.control_ref
                 AND c.sha256 = i.sha256"),
            "an inbox entry does not match its interchange"
        );
        assert_eq!(
            one("SELECT count(*) FROM inbox"),
            one("SELECT count(*) FROM interchanges")
        );
        assert_eq!(
            one("SELECT count(*) FROM outbox"),
            one("SELECT count(*) FROM messages")
        );
        let keys = self.triples("SELECT sender, recipient, control_ref FROM interchanges");
        // A crash after a reason was written but before its file moved leaves an orphan reason,
        // and the file, moved by the next run, gets the next free name (f00018.1.edi). Map names
        // back to their input and check that none is there twice.
        let inputs = |dir: &str| -> Vec<String> {
            self.names(dir)
                .into_iter()
                .filter(|n| !n.ends_with(".error.txt"))
                .map(|n| {
                    let input = match n.split('.').collect::<Vec<_>>()[..] {
                        [stem, suffix, "edi"] if suffix.bytes().all(|b| b.is_ascii_digit()) => {
                            format!("{stem}.edi")
                        }
                        _ => n.clone(),
                    };
                    assert!(
                        input.starts_with('f') && input.ends_with(".edi") && input.len() == 10,
                        "stray file {n} in {dir}"
                    );
                    input
                })
                .collect()
        };
        let (archived_list, quarantined_list) = (inputs("archive"), inputs("failed"));
        let archived: BTreeSet<String> = archived_list.iter().cloned().collect();
        let quarantined: BTreeSet<String> = quarantined_list.iter().cloned().collect();
        assert_eq!(
            archived.len(),
            archived_list.len(),
            "a file is twice in the archive"
        );
        assert_eq!(
            quarantined.len(),
            quarantined_list.len(),
            "a file is twice in the quarantine"
        );
        assert!(
            archived.is_disjoint(&quarantined),
            "a file is in both places"
        );
        State {
            keys,
            messages: one("SELECT count(*) FROM messages"),
            outbox: one("SELECT count(*) FROM outbox"),
            archived,
            quarantined,
        }
    }

    /// Every input file is in the archive or the quarantine; the drop folder is empty.
    pub fn assert_all_placed(&self, state: &State, inputs: usize) {
        assert_eq!(
            self.names("drop"),
            Vec::<String>::new(),
            "files left in the drop folder"
        );
        assert_eq!(
            state.archived.len() + state.quarantined.len(),
            inputs,
            "a file is missing"
        );
        for name in self.names("failed") {
            if !name.ends_with(".error.txt") {
                let mut reason = self.path("failed").join(&name).into_os_string();
                reason.push(".error.txt");
                assert!(
                    Path::new(&reason).exists(),
                    "{name} has no reason beside it"
                );
            }
        }
    }
}

/// Copies every file of `from` into `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Files in a folder, by name.
pub fn listing(dir: &Path) -> BTreeMap<String, u64> {
    fs::read_dir(dir)
        .map(|d| {
            d.map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect()
        })
        .unwrap_or_default()
}

/// Compares two states, printing only what differs (a full state is thousands of lines).
pub fn assert_same(got: &State, want: &State, what: &str) {
    let diff = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Vec<String> {
        a.symmetric_difference(b).cloned().collect()
    };
    let keys: Vec<_> = got.keys.symmetric_difference(&want.keys).collect();
    assert!(keys.is_empty(), "{what}: keys differ: {keys:?}");
    assert_eq!(
        (got.messages, got.outbox),
        (want.messages, want.outbox),
        "{what}"
    );
    let a = diff(&got.archived, &want.archived);
    assert!(a.is_empty(), "{what}: archive differs: {a:?}");
    let q = diff(&got.quarantined, &want.quarantined);
    assert!(q.is_empty(), "{what}: quarantine differs: {q:?}");
}

/// A tmpfs mounted for a test (needs root), unmounted when dropped.
pub struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (such as `1m`) at `path`. `None` where mounting is not allowed;
    /// where `EDI_INBOX_REQUIRE_MOUNT` is set (`.ci/run` sets it) that is a failure instead.
    pub fn mount(path: &Path, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(path).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            super::require(
                "cannot mount a tmpfs here (not root?)",
                "EDI_INBOX_REQUIRE_MOUNT",
            );
            return None;
        }
        Some(Tmpfs {
            path: path.to_path_buf(),
        })
    }

    /// `mount -o remount,<options>`, e.g. `ro`, `rw`, `size=64m`.
    pub fn remount(&self, options: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).output();
    }
}

/// SHA-256 of a file, to show it was left untouched.
pub fn file_hash(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(fs::read(path).unwrap()))
}
