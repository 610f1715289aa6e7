//! The operator's side effects (`--effects`, docs/effects.md) tried hard: `kill -9` at random
//! moments of an ingest and of a `reapply --refused`, two hosts at once on one PostgreSQL inbox
//! whose business table has no unique constraint, and a full file system under an SQLite inbox.
//! What each must leave: one business row per applied message, none for a refused interchange,
//! each refusal kept once and resolved once, nothing refused for a failure that is not the data's.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::site::Site;
use crate::common::synth::Synth;
use crate::common::{Run, RunExt, StartExt};
use crate::effects::{example, fixed_example, invoices, mapping};

/// How many files the kill test drops.
const FILES: usize = 300;

/// What becomes of a file of the kill test.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// Its interchange is new: applied, its file archived.
    Applied,
    /// One of its INVOICs has no DTM 137: the example's NOT NULL invoice_date refuses it.
    Refused,
    /// The same bytes as an applied file before it: a duplicate, which runs no statement.
    Resent,
}

/// A file of the kill test: its name, its bytes, its interchange's control reference, the
/// document numbers of its INVOICs (as the mapping writes them, `REF-N` for UNH N), its fate.
struct Dropped {
    name: String,
    bytes: Vec<u8>,
    reference: String,
    numbers: Vec<String>,
    fate: Fate,
}

/// `FILES` files of one interchange each, of 1 to 3 INVOICs: every fifth refused (its last
/// INVOIC without a date, so that the ones before it ran their statements before the refusal
/// rolled them back), every tenth an exact copy of an applied file before it.
fn corpus() -> Vec<Dropped> {
    let mut files: Vec<Dropped> = Vec::with_capacity(FILES);
    for n in 0..FILES {
        let name = format!("f{n:05}.edi");
        if n % 10 == 9 {
            let first = &files[n - 4];
            assert_eq!(first.fate, Fate::Applied);
            files.push(Dropped {
                name,
                bytes: first.bytes.clone(),
                reference: first.reference.clone(),
                numbers: first.numbers.clone(),
                fate: Fate::Resent,
            });
            continue;
        }
        let reference = format!("K{n:04}");
        let numbers: Vec<String> = (1..=1 + n % 3)
            .map(|k| format!("{reference}-{k}"))
            .collect();
        let refused = n % 5 == 2;
        let last = numbers.len() - 1;
        let written: Vec<&str> = numbers
            .iter()
            .enumerate()
            .map(|(k, number)| if refused && k == last { "" } else { number })
            .collect();
        // invoices() names a message without a date NODATE: its own number here, so that
        // once the mapping is fixed it gets a row of its own.
        let bytes = String::from_utf8(invoices(&reference, &written))
            .unwrap()
            .replacen("BGM+380+NODATE+", &format!("BGM+380+{}+", numbers[last]), 1)
            .into_bytes();
        files.push(Dropped {
            name,
            bytes,
            reference,
            numbers,
            fate: if refused {
                Fate::Refused
            } else {
                Fate::Applied
            },
        });
    }
    files
}

/// The document numbers of the files of `fates`, sorted (a resent file's are its first's).
fn numbers_of(files: &[Dropped], fates: &[Fate]) -> Vec<String> {
    let mut v: Vec<String> = files
        .iter()
        .filter(|f| fates.contains(&f.fate))
        .flat_map(|f| f.numbers.iter().cloned())
        .collect();
    v.sort();
    v
}

/// The migration and the statement a mapping gets so that every run of it shows: a table
/// with no key, one row per message each time the mapping runs for it.
const LOG_MIGRATION: &str =
    "CREATE TABLE effect_log (control_ref TEXT NOT NULL, message_ref TEXT NOT NULL);\n";
const LOG_STATEMENT: &str =
    "\n-- Every run of this file for a message, kept: no key, so a second run shows.
INSERT INTO effect_log (control_ref, message_ref) VALUES (:control_ref, :message_ref);\n";

/// Adds the log to the mapping in `dir` (its INVOIC.sql's statements before it keep their
/// numbers).
fn with_log(dir: &Path) -> PathBuf {
    fs::write(dir.join("migrations/0002_effect_log.sql"), LOG_MIGRATION).unwrap();
    let mut sql = fs::read_to_string(dir.join("INVOIC.sql")).unwrap();
    sql.push_str(LOG_STATEMENT);
    fs::write(dir.join("INVOIC.sql"), sql).unwrap();
    dir.to_path_buf()
}

/// The shipped example, copied under the site, with the log.
fn example_with_log(site: &Site) -> PathBuf {
    let from = example(site);
    let to = site.path("fx");
    fs::create_dir_all(to.join("migrations")).unwrap();
    for name in ["INVOIC.sql", "migrations/0001_partner_invoices.sql"] {
        fs::copy(from.join(name), to.join(name)).unwrap();
    }
    with_log(&to)
}

/// Text values of a query's first column, sorted.
fn column(site: &Site, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = site
        .rows(sql)
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_else(|| "NULL".into()))
        .collect();
    v.sort();
    v
}

/// What holds whatever the moment a run was killed: each business row belongs to the message
/// it was written for, one row per message the inbox holds, and the mapping ran once for each
/// of those messages and for no other. The messages held, as `REF-N`, sorted.
fn one_row_per_message(site: &Site, when: &str) -> Vec<String> {
    let messages = column(
        site,
        "SELECT i.control_ref || '-' || m.reference
         FROM messages m JOIN interchanges i ON i.id = m.interchange_id",
    );
    let rows = column(
        site,
        "SELECT p.invoice_no FROM partner_invoices p
         JOIN messages m ON m.id = p.message_id AND m.interchange_id = p.interchange_id
         JOIN interchanges i ON i.id = m.interchange_id
         WHERE p.invoice_no = i.control_ref || '-' || m.reference",
    );
    assert_eq!(
        site.count("SELECT count(*) FROM partner_invoices"),
        rows.len() as i64,
        "{when}: a business row points at another message than its own, or at none"
    );
    assert_eq!(rows, messages, "{when}: not one business row per message");
    let runs = column(
        site,
        "SELECT control_ref || '-' || message_ref FROM effect_log",
    );
    assert_eq!(
        runs, messages,
        "{when}: the mapping did not run exactly once for each message held"
    );
    messages
}

/// Interchanges the inbox holds, read straight from its database while a process writes it
/// (a `stats` run per look would take longer than a batch); 0 before its schema exists.
struct Look<'a> {
    site: &'a Site,
    sqlite: Option<rusqlite::Connection>,
    #[cfg(feature = "postgres")]
    pg: Option<postgres::Client>,
}

impl<'a> Look<'a> {
    fn new(site: &'a Site) -> Look<'a> {
        Look {
            site,
            sqlite: None,
            #[cfg(feature = "postgres")]
            pg: None,
        }
    }

    fn interchanges(&mut self) -> i64 {
        const SQL: &str = "SELECT count(*) FROM interchanges";
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.site.pg() {
            let client = self.pg.get_or_insert_with(|| pg.client());
            return client.query_one(SQL, &[]).map_or(0, |r| r.get(0));
        }
        if self.sqlite.is_none() {
            self.sqlite = rusqlite::Connection::open_with_flags(
                self.site.db(),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .ok();
        }
        self.sqlite
            .as_ref()
            .and_then(|c| c.query_row(SQL, [], |r| r.get(0)).ok())
            .unwrap_or(0)
    }
}

/// Starts `command` and kills it with SIGKILL once the inbox holds more than `from`
/// interchanges, within the first quarter of what is left up to `total` (and a random few
/// milliseconds more): so that it lands mid-work however fast the machine is. Asserts that it
/// did: the signal ended the run, and the inbox holds more than `from` interchanges but fewer
/// than `total`. What it holds after.
fn kill_mid_work(
    site: &Site,
    command: &mut Command,
    from: i64,
    total: i64,
    rng: &mut Synth,
    what: &str,
) -> i64 {
    let target = from + 1 + rng.below(((total - from) / 4) as u64) as i64;
    let mut look = Look::new(site);
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).start();
    let until = Instant::now() + Duration::from_secs(60);
    while look.interchanges() < target {
        if child.child().try_wait().unwrap().is_some() {
            panic!(
                "{what}: the run ended before the inbox held {target} interchanges\n{}",
                child.wait()
            );
        }
        assert!(
            Instant::now() < until,
            "{what}: the inbox did not reach {target} interchanges in 60 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(rng.below(8)));
    child.signal(libc::SIGKILL);
    let run: Run = child.wait();
    // Counted afresh, with none of the test's connections open: on SQLite, a process killed
    // after writing its commit to the write-ahead log but before marking it in the shared
    // index leaves a commit that a connection already open does not see (it was seen here
    // one short), until the next first connection rebuilds the index from the log.
    drop(look);
    let held = site.count("SELECT count(*) FROM interchanges");
    assert!(
        run.status.code().is_none() && held > from && held < total,
        "{what}: the kill did not land mid-work: {held} of {total} interchanges held (from {from})\n{run}"
    );
    eprintln!("{what}: killed at {held} of {total} interchanges");
    held
}

per_backend! {
    /// `kill -9` at random moments of an ingest with the example mapping (300 files of 1 to 3
    /// INVOICs, every fifth refused for an INVOIC without DTM 137, every tenth a resend), each
    /// kill landing mid-work, then a run to the end: one business row per applied message and
    /// the mapping run once for each (a log table without a key counts every run), none for a
    /// refused interchange or a resend; each refused interchange kept once. Then `reapply
    /// --refused` with the mapping fixed, killed mid-work too, and run to the end: each refusal
    /// resolved once, as new (a refusal decided in a killed run but left open would come back
    /// as a duplicate); a second reapply finds nothing.
    fn kill_9_mid_ingest_and_mid_reapply_leaves_one_business_row_per_message(site) {
        let files = corpus();
        for f in &files {
            site.put(&f.name, &f.bytes);
        }
        let fx = example_with_log(&site);
        let fx = fx.to_str().unwrap();
        let applied = numbers_of(&files, &[Fate::Applied]);
        let keys: BTreeSet<(String, String, String)> = files
            .iter()
            .filter(|f| f.fate == Fate::Applied)
            .map(|f| ("S1".to_string(), "R1".to_string(), f.reference.clone()))
            .collect();
        let refused: Vec<&Dropped> = files.iter().filter(|f| f.fate == Fate::Refused).collect();
        let total = keys.len() as i64;
        let mut rng = Synth::new(39);
        let mut held = 0;
        for round in 0..4 {
            let what = format!("ingest, kill {round}");
            held = kill_mid_work(
                &site,
                site.ingest_command(5).args(["--effects", fx]),
                held,
                total,
                &mut rng,
                &what,
            );
            // Whatever the moment, what is in the inbox is whole.
            site.state();
            let messages = one_row_per_message(&site, &what);
            assert!(messages.iter().all(|m| applied.binary_search(m).is_ok()), "{what}");
        }
        site.ingest_command(5)
            .args(["--effects", fx])
            .run()
            .code_in(&[0, 3]);
        let state = site.state();
        site.assert_all_placed(&state, FILES);
        assert_eq!(state.keys, keys);
        let quarantined: BTreeSet<String> = refused.iter().map(|f| f.name.clone()).collect();
        assert_eq!(state.quarantined, quarantined, "the refused files, and only they");
        assert_eq!(one_row_per_message(&site, "after the run to the end"), applied);
        // Each refused interchange kept, once, open; no other.
        let open = site.rows(
            "SELECT control_ref, count(*) FROM refusals WHERE resolved_at IS NULL
             GROUP BY control_ref ORDER BY control_ref",
        );
        let want: Vec<Vec<Option<String>>> = refused
            .iter()
            .map(|f| vec![Some(f.reference.clone()), Some("1".to_string())])
            .collect();
        assert_eq!(open, want);
        assert_eq!(site.count("SELECT count(*) FROM refusals"), refused.len() as i64);

        // The mapping fixed: each refusal decided again, the reapply killed mid-work.
        let fixed = with_log(&fixed_example(&site));
        let fixed = fixed.to_str().unwrap();
        let all = keys.len() + refused.len();
        // From what the run to the end left: each kill must land in the reapply's own work.
        held = total;
        let reapply = || {
            let mut c = site.command();
            c.args(["reapply", "--refused", "--batch", "1", "--effects", fixed]);
            c
        };
        for round in 0..3 {
            let what = format!("reapply, kill {round}");
            held = kill_mid_work(&site, &mut reapply(), held, all as i64, &mut rng, &what);
            site.state();
            one_row_per_message(&site, &what);
            // A refusal is resolved in its decision's transaction: as many resolved as taken.
            assert_eq!(
                site.count("SELECT count(*) FROM refusals WHERE resolved_at IS NOT NULL"),
                held - total,
                "{what}"
            );
        }
        let run = reapply().arg("--json").run();
        run.code(0);
        let lines = run.json();
        let summary = &lines.last().unwrap()["summary"];
        let left = all as i64 - held;
        assert_eq!(
            (summary["new"].as_i64(), summary["duplicate"].as_i64(), summary["files"].as_i64()),
            (Some(left), Some(0), Some(left)),
            "{run}"
        );
        assert_eq!(
            site.rows("SELECT resolved_as, count(*) FROM refusals GROUP BY resolved_as"),
            vec![vec![Some("new".to_string()), Some(refused.len().to_string())]],
            "each refusal resolved once, as new"
        );
        assert_eq!(
            one_row_per_message(&site, "after reapply"),
            numbers_of(&files, &[Fate::Applied, Fate::Refused])
        );
        assert_eq!(site.state().keys.len(), all);
        let again = reapply().arg("--json").run();
        again.code(0);
        assert_eq!(again.json().last().unwrap()["summary"]["files"], 0, "{again}");
    }
}

/// Two hosts at once on one PostgreSQL inbox, each with its own copy of the same 200 files
/// (host B's names sort the other way), with a mapping whose business table has no unique
/// constraint: a plain INSERT of the sender, the control reference and the message reference.
/// The key alone keeps it once. Host A's first batch is held open (its `_interchange.sql` waits
/// on an advisory lock the test holds) with its ten keys taken, uncommitted, while host B takes
/// the other 190 and comes to those ten last: B is seen waiting on A's transaction, then the
/// lock is given up, A commits, and B's copies become duplicates, running no statement (as do
/// A's copies of B's keys). One business row per message.
#[cfg(feature = "postgres")]
#[test]
fn two_hosts_with_a_business_table_without_a_unique_key_write_one_row_per_message() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    let fx = mapping(
        &inbox,
        "fx",
        &[
            (
                "migrations/0001_business_rows.sql",
                "CREATE TABLE business_rows (sender text, control_ref text, message_ref text);",
            ),
            (
                "_interchange.sql",
                "SELECT pg_advisory_xact_lock(39, 0) WHERE :control_ref = 'H0000';",
            ),
            (
                "INVOIC.sql",
                "INSERT INTO business_rows VALUES (:sender, :control_ref, :message_ref);",
            ),
        ],
    );
    const N: usize = 200;
    let mut messages = 0;
    for host in ["a", "b"] {
        fs::create_dir_all(inbox.path(&format!("{host}/drop"))).unwrap();
    }
    for n in 0..N {
        let numbers: Vec<String> = (1..=1 + n % 3).map(|k| format!("N{k}")).collect();
        let numbers: Vec<&str> = numbers.iter().map(String::as_str).collect();
        messages += numbers.len() as i64;
        let data = invoices(&format!("H{n:04}"), &numbers);
        fs::write(inbox.path(&format!("a/drop/f{n:04}.edi")), &data).unwrap();
        fs::write(inbox.path(&format!("b/drop/f{:04}.edi", N - 1 - n)), &data).unwrap();
    }
    let mut watch = inbox.pg().unwrap().client();
    watch
        .batch_execute("SELECT pg_advisory_lock(39, 0)")
        .unwrap();
    let start = |host: &str| {
        let out = fs::File::create(inbox.path(&format!("{host}.jsonl"))).unwrap();
        inbox
            .command()
            .args(["ingest", "--json", "--batch", "10", "--effects"])
            .arg(&fx)
            .arg("--archive")
            .arg(inbox.path(&format!("{host}/archive")))
            .arg(inbox.path(&format!("{host}/drop")))
            .stdout(out)
            .stderr(Stdio::piped())
            .start()
    };
    let mut hosts = [start("a"), start("b")];
    // Host A waiting on the test's lock, and a backend waiting on another's transaction: B's
    // key insert on A's uncommitted keys.
    let waiting = |watch: &mut postgres::Client, on: &str| -> i64 {
        watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'
                   AND wait_event = ANY(string_to_array($1, ','))",
                &[&on],
            )
            .unwrap()
            .get(0)
    };
    let until = Instant::now() + Duration::from_secs(60);
    while waiting(&mut watch, "advisory") == 0
        || waiting(&mut watch, "transactionid,speculative token") == 0
    {
        if let Some(k) = hosts
            .iter_mut()
            .position(|h| h.child().try_wait().unwrap().is_some())
        {
            let [a, b] = hosts;
            let run = if k == 0 { a.wait() } else { b.wait() };
            panic!("host {k} ended before B waited on A's keys\n{run}");
        }
        assert!(
            Instant::now() < until,
            "host B was not seen waiting on host A's keys in 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    watch
        .batch_execute("SELECT pg_advisory_unlock(39, 0)")
        .unwrap();
    let mut new = Vec::new();
    let mut duplicates = 0;
    for (host, run) in ["a", "b"].iter().zip(hosts) {
        let run = run.wait().note(format!("host {host}"));
        run.code(0);
        let lines =
            crate::common::json_lines(&fs::read(inbox.path(&format!("{host}.jsonl"))).unwrap());
        let summary = &lines.last().unwrap()["summary"];
        new.push(summary["new"].as_i64().unwrap());
        duplicates += summary["duplicate"].as_i64().unwrap();
    }
    assert_eq!(
        (new, duplicates),
        (vec![10, N as i64 - 10], N as i64),
        "A's first batch new on A, the rest on B, each a duplicate on the other"
    );
    let state = inbox.state();
    assert_eq!((state.keys.len(), state.messages), (N, messages));
    assert_eq!(
        inbox.count("SELECT count(*) FROM business_rows"),
        messages,
        "not one business row per message"
    );
    // Each row is its own message's.
    assert_eq!(
        inbox.count(
            "SELECT count(DISTINCT m.id) FROM business_rows b
             JOIN interchanges i ON i.sender = b.sender AND i.control_ref = b.control_ref
             JOIN messages m ON m.interchange_id = i.id AND m.reference = b.message_ref"
        ),
        messages
    );
}

/// Side effects that fill the file system of an SQLite inbox (an 8 MiB tmpfs): the mapping
/// writes a 20 MiB attachment per message, more than the 16 MiB page cache holds, so that the
/// statement itself meets the full disk as SQLite spills its pages to the write-ahead log. An
/// infrastructure failure, not the data's: the run exits 1, refuses nothing, decides nothing
/// (none of edi-inbox's rows, none of the operator's), moves no file; with room again the next
/// run applies both.
#[test]
fn sqlite_side_effects_that_fill_the_disk_fail_the_run_and_refuse_nothing() {
    let mut site = Site::new();
    let Some(disk) = crate::common::site::Tmpfs::mount(&site.path("dbfs"), "8m") else {
        return;
    };
    site.set_db(disk.path.join("inbox.db"));
    let fx = mapping(
        &site,
        "fx",
        &[
            (
                "migrations/0001_attachments.sql",
                "CREATE TABLE attachments (control_ref TEXT, message_ref TEXT, body BLOB);",
            ),
            (
                "INVOIC.sql",
                "INSERT INTO attachments VALUES (:control_ref, :message_ref, randomblob(20971520));",
            ),
        ],
    );
    site.put("a.edi", &invoices("A1", &["N1"]));
    site.put("b.edi", &invoices("B1", &["N2"]));
    let ingest = || {
        site.cmd()
            .args(["ingest", "--json", "--effects"])
            .arg(&fx)
            .arg("--quarantine")
            .arg(site.path("failed"))
            .arg(site.drop())
            .run()
    };
    let run = ingest();
    run.code(1);
    let err = run.err();
    assert!(err.contains("full"), "{run}");
    assert!(!run.out().contains("refused"), "{run}");
    assert_eq!(site.count("SELECT count(*) FROM refusals"), 0, "{run}");
    for table in ["inbox", "interchanges", "messages", "outbox", "attachments"] {
        let n = site.count(&format!("SELECT count(*) FROM {table}"));
        assert_eq!(n, 0, "{n} rows in {table}\n{run}");
    }
    assert_eq!(site.files_in("drop"), ["a.edi", "b.edi"], "a file moved");
    assert!(site.files_in("failed").is_empty(), "a file quarantined");
    disk.remount("size=160m");
    let run = ingest();
    run.code(0);
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 2, "{run}");
    assert_eq!(site.count("SELECT count(*) FROM attachments"), 2);
    assert_eq!(site.count("SELECT count(*) FROM refusals"), 0);
}
