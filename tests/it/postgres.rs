//! What only a PostgreSQL inbox has: connection strings, passwords and TLS, the schema of its
//! own beside other tables, migrations when hosts start at once, the server's durability
//! settings, the column types, per-host counters, and hosts reading one shared drop folder.

use std::fs;

use predicates::prelude::*;

use crate::common::site::{Site, State, copy_dir};
use crate::common::{RunExt, StartExt};

const PASSWORD: &str = "Sup3rS3cretPw";

/// A PostgreSQL inbox holding the two interchanges of one sample, ingested.
fn ingested() -> Option<Site> {
    let site = Site::postgres()?;
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    Some(site)
}

/// Every way a connection can fail says which server and why, exits 1 (2 for a connection
/// string that does not parse), and never shows the password, wherever it came from.
#[test]
fn connection_failures_say_why_and_never_show_the_password() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let name = &site.pg().unwrap().name;
    let cases: [(String, Option<&str>, i32, &str); 6] = [
        // Nothing listens on port 1.
        (
            format!("postgres://postgres:{PASSWORD}@127.0.0.1:1/{name}"),
            None,
            1,
            "Connection refused",
        ),
        (
            format!("host=127.0.0.1 port=5432 user=postgres password={PASSWORD} dbname=nosuchdb"),
            None,
            1,
            "database \"nosuchdb\" does not exist",
        ),
        (
            "postgresql://postgres@127.0.0.1/nosuchdb".to_string(),
            Some(PASSWORD),
            1,
            "database \"nosuchdb\" does not exist",
        ),
        (
            format!("postgres://nobody:{PASSWORD}@127.0.0.1/{name}"),
            None,
            1,
            "role \"nobody\" does not exist",
        ),
        (
            format!("postgres://postgres:{PASSWORD}@127.0.0.1/{name}?sslmode=bogus"),
            None,
            2,
            "invalid value for option `sslmode`",
        ),
        (
            format!("host=127.0.0.1 password='{PASSWORD}"),
            None,
            2,
            "invalid connection string",
        ),
    ];
    for (db, env_password, code, why) in cases {
        for command in [
            &["stats"][..],
            &["ingest", "--json"],
            &["purge", "--days", "1"],
        ] {
            let mut c = crate::common::edi_inbox();
            c.env_remove("PGPASSWORD")
                .arg("--db")
                .arg(&db)
                .args(command);
            if command[0] == "ingest" {
                c.arg(site.drop());
            }
            if let Some(p) = env_password {
                c.env("PGPASSWORD", p);
            }
            let out = c.run();
            out.code(code);
            let (stderr, stdout) = (out.err(), out.out());
            assert!(stderr.contains(why), "{db} {command:?}: {stderr}");
            assert!(
                !stderr.contains(PASSWORD) && !stdout.contains(PASSWORD),
                "{db} {command:?}: {stderr}{stdout}"
            );
            if code == 1 {
                assert!(stderr.contains("127.0.0.1"), "names the server: {stderr}");
            }
        }
    }
    // A password the server does not need (trust): the run works, and no output shows it.
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let db = format!("postgres://postgres:{PASSWORD}@127.0.0.1:5432/{name}");
    for command in [
        &["ingest", "--json"][..],
        &["ingest"],
        &["stats"],
        &["stats", "--json"],
        &["list"],
        &["show", "PARTNERA", "HUB", "A1"],
    ] {
        let mut c = crate::common::edi_inbox();
        c.arg("--db").arg(&db).args(command);
        if command[0] == "ingest" {
            c.arg(site.drop());
        }
        let out = c.run();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.code(0);
        assert!(!all.contains(PASSWORD), "{command:?}: {all}");
    }
    let stats = site.json(&["stats", "--json"]).json();
    assert_eq!(stats[0]["inbox"], 2);
}

/// libpq's `sslmode`: `disable` talks in the clear, `require` encrypts (where the server offers
/// TLS), `verify-ca` / `verify-full` with no roots to check against are a usage error (exit 2),
/// and with `sslrootcert=system` (the web's roots) refuse this server's self-signed certificate
/// with the reason, exit 1. With `sslrootcert` naming the server's own
/// certificate as the root, `verify-ca` (and `require`, as libpq does) accept it, and
/// `verify-full` accepts it only under the name it was made for; `PGSSLMODE` and
/// `PGSSLROOTCERT` stand in for them. A root file that is missing or holds no certificate is a
/// usage error. The part against the server's own certificate needs Debian's (`ssl on`, the
/// snakeoil certificate for localhost): without it the test says so and passes, unless
/// `EDI_INBOX_REQUIRE_POSTGRES_TLS` is set (`.ci/run` sets it): then it fails.
#[test]
fn sslmode_is_honoured() {
    let Some(site) = Site::postgres() else {
        return;
    };
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let name = &site.pg().unwrap().name;
    let ssl_on = site.rows("SHOW ssl")[0][0].as_deref() == Some("on");
    let url =
        |host: &str, options: &str| format!("postgres://postgres@{host}:5432/{name}?{options}");
    let stats = |db: &str, env: &[(&str, &str)]| {
        let mut c = crate::common::edi_inbox();
        c.env_remove("PGSSLMODE")
            .env_remove("PGSSLROOTCERT")
            .env("HOME", "/nonexistent");
        for (k, v) in env {
            c.env(k, v);
        }
        c.arg("--db").arg(db).args(["stats", "--json"]).run()
    };
    crate::common::edi_inbox()
        .arg("--db")
        .arg(url("127.0.0.1", "sslmode=disable"))
        .args(["ingest", "-q"])
        .arg(site.drop())
        .assert()
        .code(0);
    let run = stats(&url("127.0.0.1", "sslmode=require"), &[]);
    if ssl_on {
        run.code(0);
    } else {
        eprintln!("this server does not offer TLS: sslmode=require must fail");
        run.code(1);
    }
    for mode in ["verify-ca", "verify-full"] {
        // No roots named and none in ~/.postgresql/root.crt: a usage error, as libpq's, never
        // a check against other roots (which would pass any certificate they vouch for).
        let stderr = stats(&url("127.0.0.1", &format!("sslmode={mode}")), &[])
            .code(2)
            .err();
        assert!(
            stderr.contains(&format!("sslmode={mode} checks the server's certificate"))
                && stderr.contains("sslrootcert"),
            "{stderr}"
        );
        // The web's roots do not vouch for this server's self-signed certificate.
        let stderr = stats(
            &url("127.0.0.1", &format!("sslmode={mode}&sslrootcert=system")),
            &[],
        )
        .code(1)
        .err();
        assert!(
            stderr.contains("cannot connect to postgres://postgres@127.0.0.1:5432/"),
            "{stderr}"
        );
        if ssl_on {
            assert!(stderr.contains("certificate"), "{stderr}");
        }
    }
    for bad in ["/nonexistent/root.pem", "/etc/hostname"] {
        let stderr = stats(
            &url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={bad}")),
            &[],
        )
        .code(2)
        .err();
        assert!(stderr.contains(&format!("sslrootcert {bad}")), "{stderr}");
    }
    let cert = site.rows("SHOW ssl_cert_file")[0][0]
        .clone()
        .unwrap_or_default();
    if !(ssl_on && cert.ends_with("ssl-cert-snakeoil.pem") && fs::metadata(&cert).is_ok()) {
        let missing = format!(
            "the server does not offer TLS with the Debian self-signed certificate for localhost \
             (ssl {}, ssl_cert_file {cert:?})",
            if ssl_on { "on" } else { "off" }
        );
        // CI's PostgreSQL is Debian's, which serves it: there the part that checks a
        // certificate against sslrootcert must run.
        crate::common::require(
            &format!("{missing} for verify-ca and verify-full against sslrootcert"),
            "EDI_INBOX_REQUIRE_POSTGRES_TLS",
        );
        return;
    }
    let root = format!("sslrootcert={cert}");
    for (host, options, want) in [
        ("127.0.0.1", format!("sslmode=verify-ca&{root}"), 0),
        ("127.0.0.1", format!("{root}&sslmode=require"), 0),
        ("localhost", format!("sslmode=verify-full&{root}"), 0),
        ("127.0.0.1", format!("sslmode=verify-full&{root}"), 1),
    ] {
        let stderr = stats(&url(host, &options), &[]).code(want).err();
        if want == 1 {
            assert!(stderr.contains("not valid for name"), "{stderr}");
        }
    }
    let env = [
        ("PGSSLMODE", "verify-full"),
        ("PGSSLROOTCERT", cert.as_str()),
    ];
    stats(&url("localhost", "").replace('?', ""), &env).code(0);
    stats(&url("127.0.0.1", "").replace('?', ""), &env).code(1);
    let kv = format!("host=localhost user=postgres dbname={name} sslmode=verify-full {root}");
    stats(&kv, &[]).code(0);
}

/// The inbox lives in a schema of its own: the database's other tables are left alone, and two
/// inboxes (`--pg-schema`) in one database do not see each other. A name that is not a plain
/// identifier is refused before anything is touched.
#[test]
fn the_inbox_keeps_to_its_own_schema() {
    let Some(site) = Site::postgres() else {
        return;
    };
    site.sql(
        "CREATE TABLE public.invoices (id bigint PRIMARY KEY, note text);
         INSERT INTO public.invoices VALUES (1, 'not edi-inbox''s');
         CREATE TABLE public.inbox (x int);",
    );
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "b.edi");
    site.ingest_quietly(&["--pg-schema", "tenant_b"]).code(0);
    assert_eq!(site.count("SELECT count(*) FROM edi_inbox.inbox"), 2);
    assert_eq!(site.count("SELECT count(*) FROM tenant_b.inbox"), 3);
    assert_eq!(site.count("SELECT count(*) FROM public.inbox"), 0);
    assert_eq!(
        site.rows("SELECT note FROM public.invoices"),
        [[Some("not edi-inbox's".to_string())]]
    );
    let a = site.json(&["stats", "--json"]).json();
    assert_eq!(a[0]["inbox"], 2);
    let b = site
        .json(&["--pg-schema", "tenant_b", "stats", "--json"])
        .json();
    assert_eq!(b[0]["inbox"], 3);
    // A report on a schema that was never created: no inbox there, nothing created.
    site.cmd()
        .args(["--pg-schema", "tenant_c", "stats"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("there is no inbox database"));
    assert_eq!(
        site.count("SELECT count(*) FROM pg_namespace WHERE nspname = 'tenant_c'"),
        0
    );
    for bad in ["x;drop", "Tenant", "1abc", "", "a-b"] {
        site.cmd()
            .args(["--pg-schema", bad, "ingest"])
            .arg(site.drop())
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--pg-schema"));
    }
    assert_eq!(site.files_in("drop"), ["a.edi", "b.edi"]);
}

/// A schema written by a newer edi-inbox is refused, exit 1, and left exactly as it was; the
/// input is not touched.
#[test]
fn a_schema_from_a_newer_edi_inbox_is_refused_and_untouched() {
    let Some(site) = ingested() else {
        return;
    };
    site.sql("INSERT INTO schema_migrations (version) VALUES (99)");
    let snapshot = || {
        site.rows(
            "SELECT (SELECT count(*) FROM inbox), (SELECT count(*) FROM interchanges),
                    (SELECT count(*) FROM sightings), (SELECT count(*) FROM counters),
                    (SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations),
                    (SELECT count(*) FROM pg_tables WHERE schemaname = 'edi_inbox')",
        )
    };
    let before = snapshot();
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "b.edi");
    for command in [&["ingest"][..], &["purge", "--days", "1"], &["stats"]] {
        let mut c = site.cmd();
        c.args(command);
        if command[0] == "ingest" {
            c.arg(site.drop());
        }
        c.assert().code(1).stderr(
            predicate::str::contains("schema version 99")
                .and(predicate::str::contains("newer edi-inbox")),
        );
    }
    assert_eq!(snapshot(), before);
    assert_eq!(site.files_in("drop"), ["a.edi", "b.edi"]);
}

/// Six hosts starting at once on a database with no inbox yet: the advisory lock lets one
/// create the schema, the others wait and find it made. Every migration is recorded once and
/// every run succeeds.
#[test]
fn hosts_starting_at_once_create_the_schema_once() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let dirs: Vec<tempfile::TempDir> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
    for (n, d) in dirs.iter().enumerate() {
        fs::write(
            d.path().join("a.edi"),
            format!("UNB+UNOC:3+S{n}+R+240101:1200+K{n}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+K{n}'"),
        )
        .unwrap();
    }
    let runs = dirs.iter().map(|d| {
        let mut c = site.command();
        c.args(["ingest", "-q"]).arg(d.path());
        c
    });
    for out in crate::common::run_together(runs.collect()) {
        out.code(0);
    }
    assert_eq!(site.stat("inbox"), 6);
    assert_eq!(
        site.count("SELECT count(*) FROM schema_migrations"),
        site.count("SELECT max(version) FROM schema_migrations")
    );
    assert!(site.count("SELECT count(*) FROM schema_migrations") >= 1);
}

/// Where the server does not make a commit durable (`synchronous_commit=off` here, set for
/// this database alone), a run that writes says so once on standard error, and still works;
/// a report, which writes nothing, does not.
#[test]
fn a_server_without_durable_commits_is_warned_about_once() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let name = site.pg().unwrap().name.clone();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.sql(&format!(
        "ALTER DATABASE {name} SET synchronous_commit = off"
    ));
    let out = site
        .command()
        .args(["ingest", "-q", "--batch", "1"])
        .arg(site.drop())
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.code(0);
    assert_eq!(
        stderr.matches("synchronous_commit=off").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("not durable"), "{stderr}");
    site.cmd()
        .arg("stats")
        .assert()
        .stderr(predicate::str::contains("synchronous_commit").not());
    site.sql(&format!("ALTER DATABASE {name} RESET synchronous_commit"));
    site.ingest_quietly(&[])
        .stderr(predicate::str::contains("synchronous_commit").not());
}

/// The PostgreSQL inbox has the SQLite inbox's tables and columns, in PostgreSQL's types:
/// times are `timestamptz`, bytes `bytea`, ids `bigint`. Its own differences: counters per
/// host, ids from sequences (no `id_sequences` table), and its migrations in a table.
#[test]
fn the_tables_and_columns_are_the_sqlite_inboxs_in_postgresql_types() {
    let Some(pg) = Site::postgres() else {
        return;
    };
    let lite = Site::new();
    for site in [&pg, &lite] {
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.ingest_quietly(&[]).code(0);
    }
    let sqlite_columns = lite.rows(
        "SELECT m.name, p.name, p.type FROM sqlite_master m, pragma_table_info(m.name) p
         WHERE m.type = 'table' AND m.name NOT IN ('id_sequences', 'sqlite_sequence')
         ORDER BY 1, 2",
    );
    let pg_columns = pg.rows(
        "SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
         WHERE table_schema = 'edi_inbox' ORDER BY 1, 2",
    );
    let pg_types: std::collections::BTreeMap<(String, String), String> = pg_columns
        .iter()
        .map(|r| {
            (
                (r[0].clone().unwrap(), r[1].clone().unwrap()),
                r[2].clone().unwrap(),
            )
        })
        .collect();
    assert!(sqlite_columns.len() > 50);
    for r in &sqlite_columns {
        let (table, column, lite_type) = (
            r[0].clone().unwrap(),
            r[1].clone().unwrap(),
            r[2].clone().unwrap(),
        );
        let Some(pg_type) = pg_types.get(&(table.clone(), column.clone())) else {
            panic!("{table}.{column} is not in the PostgreSQL inbox");
        };
        let expected: &[&str] = if column.ends_with("_at") {
            &["timestamp with time zone"]
        } else if lite_type == "INTEGER"
            && (column == "id" || column.ends_with("_id") || column.starts_with("raw_"))
        {
            &["bigint"]
        } else {
            match lite_type.as_str() {
                "TEXT" => &["text"],
                "BLOB" => &["bytea"],
                "INTEGER" => &["bigint", "integer", "boolean"],
                other => panic!("{table}.{column}: SQLite type {other}"),
            }
        };
        assert!(
            expected.contains(&pg_type.as_str()),
            "{table}.{column}: {pg_type}, expected one of {expected:?}"
        );
    }
    let extra: Vec<_> = pg_types
        .keys()
        .filter(|(t, c)| {
            !sqlite_columns
                .iter()
                .any(|r| r[0].as_deref() == Some(t) && r[1].as_deref() == Some(c))
        })
        .collect();
    assert_eq!(
        extra,
        [
            &("counters".to_string(), "host".to_string()),
            &("schema_migrations".to_string(), "applied_at".to_string()),
            &("schema_migrations".to_string(), "version".to_string()),
        ]
    );
    // The same content reads the same way from both.
    let q = "SELECT sender, recipient, control_ref, sha256 FROM inbox ORDER BY 3";
    assert_eq!(pg.rows(q), lite.rows(q));
}

/// Counters are one row per host and summed when read, so that hosts never queue on one row:
/// another host's counts (a row of its own) add to this host's in the metrics.
#[test]
fn counters_are_kept_per_host_and_summed() {
    let Some(site) = ingested() else {
        return;
    };
    site.sql("INSERT INTO counters (host, name, value) VALUES ('another-host', 'ingest_new', 40)");
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "b.edi");
    let metrics = site.path("ingest.prom");
    site.cmd()
        .args(["ingest", "-q", "--metrics-file"])
        .arg(&metrics)
        .arg(site.drop())
        .assert()
        .code(0);
    let text = fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains("edi_inbox_ingest_interchanges_total{status=\"new\"} 43\n"),
        "{text}"
    );
    assert!(
        text.contains("edi_inbox_ingest_interchanges_total{status=\"duplicate\"} 2\n"),
        "{text}"
    );
    // This host's counts are in one row per name, whatever the number of runs.
    assert_eq!(
        site.count(
            "SELECT count(*) FROM counters WHERE host <> 'another-host' AND name = 'ingest_new'"
        ),
        1
    );
}

/// Three hosts reading one shared drop folder (a network share), archiving into one shared
/// folder: each file is taken by one host, a file another host moved away is skipped quietly,
/// and the inbox holds what one run makes of the folder. Which copy of a drifted key comes
/// first is a race between the hosts, so the file archived and the one quarantined for it may
/// swap; every key with two contents is still reported as drift.
#[test]
fn hosts_reading_one_shared_folder_take_each_file_once() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let reference = Site::new();
    reference.fill(400, 31);
    copy_dir(&reference.drop(), &site.drop());
    reference.ingest(20);
    let want: State = reference.state();
    let runs = (0..3).map(|_| site.ingest_command(10)).collect();
    for out in crate::common::run_together(runs) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        out.code_in(&[0, 3]);
        assert!(!stderr.contains("error"), "{stderr}");
    }
    let got = site.state();
    site.assert_all_placed(&got, 400);
    assert_eq!(got.keys, want.keys);
    assert_eq!((got.messages, got.outbox), (want.messages, want.outbox));
    let drifted = "SELECT count(*) FROM (SELECT DISTINCT sender, recipient, control_ref
                   FROM sightings WHERE status = 'drift') AS d";
    assert!(reference.count(drifted) > 0);
    assert_eq!(site.count(drifted), reference.count(drifted));
    let stats = site.json(&["stats", "--json"]).json();
    assert_eq!(stats[0]["inbox"], stats[0]["interchanges"]);
}

/// `--pg-schema public` where another tool (golang-migrate) keeps a `schema_migrations` of its
/// own, `bigint` versions and a `dirty` flag: not an inbox, exit 1, nothing created or changed
/// (read as ours, its version would have made the inbox look newer than this edi-inbox).
#[test]
fn another_tools_schema_migrations_is_not_taken_for_the_inboxs() {
    let Some(site) = Site::postgres() else {
        return;
    };
    site.sql(
        "CREATE TABLE public.schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL);
         INSERT INTO public.schema_migrations VALUES (20230101120000, false);",
    );
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let tables = || site.count("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
    for command in [&["ingest"][..], &["stats"], &["purge", "--days", "1"]] {
        let mut c = site.cmd();
        c.args(["--pg-schema", "public"]).args(command);
        if command[0] == "ingest" {
            c.arg(site.drop());
        }
        c.assert().code(1).stderr(
            predicate::str::contains("is not an edi-inbox database")
                .and(predicate::str::contains(
                    "schema_migrations table of another tool",
                ))
                .and(predicate::str::contains("panicked").not()),
        );
        assert_eq!(tables(), 1, "{command:?}");
    }
    assert_eq!(
        site.rows("SELECT version::text, dirty::text FROM public.schema_migrations"),
        [[
            Some("20230101120000".to_string()),
            Some("false".to_string())
        ]]
    );
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

/// A `key=value` connection string with a quoted password holding a space, or spaces around
/// `=`, is a connection string: never a SQLite file created under that name (which would also
/// show the password in its path); one that does not parse is a usage error that does not
/// quote it.
#[test]
fn key_value_strings_with_spaces_are_connection_strings() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let name = &site.pg().unwrap().name;
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let cwd = site.path("cwd");
    fs::create_dir_all(&cwd).unwrap();
    let run = |db: &str, args: &[&str]| {
        let out = crate::common::edi_inbox()
            .current_dir(&cwd)
            .arg("--db")
            .arg(db)
            .args(args)
            .run();
        let stderr = out.err();
        assert!(!stderr.contains("Sup3r"), "{stderr}");
        out
    };
    let quoted = format!("password='Sup3r secret' host = 127.0.0.1 user=postgres dbname={name}");
    run(&quoted, &["ingest", "-q", site.drop().to_str().unwrap()]).code(0);
    assert_eq!(site.stat("inbox"), 2);
    let stderr = run(
        &format!("dbname = {name} host=127.0.0.1 port=1"),
        &["stats"],
    )
    .code(1)
    .err();
    assert!(stderr.contains("Connection refused"), "{stderr}");
    let stderr = run("password='Sup3r secret' oops", &["stats"])
        .code(2)
        .err();
    assert!(stderr.contains("invalid connection string"), "{stderr}");
    assert_eq!(
        fs::read_dir(&cwd).unwrap().count(),
        0,
        "no SQLite file made"
    );
}

/// Only the server refusing the data itself (SQLSTATE classes 22, 23, 54) makes one interchange
/// be refused alone; any other failure in the middle of a batch (here a full disk, 53100, raised
/// by a trigger for one key) fails the run, exit 1, nothing recorded, and the next run, the
/// disk freed, applies everything.
#[test]
fn only_data_errors_refuse_an_interchange() {
    let Some(site) = ingested() else {
        return;
    };
    for n in 0..5 {
        site.put(
            &format!("f{n}.edi"),
            format!("UNB+UNOC:3+S{n}+R+240101:1200+K{n}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+K{n}'")
                .as_bytes(),
        );
    }
    let trigger = |code: &str| {
        site.sql(&format!(
            "CREATE OR REPLACE FUNCTION edi_inbox.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF NEW.sender = 'S2' THEN
                     RAISE EXCEPTION 'cannot take S2' USING ERRCODE = '{code}';
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE OR REPLACE TRIGGER refuse BEFORE INSERT ON edi_inbox.inbox
                 FOR EACH ROW EXECUTE FUNCTION edi_inbox.refuse();"
        ))
    };
    let recorded = || {
        site.count(
            "SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM sightings)
                  + (SELECT count(*) FROM rejections)",
        )
    };
    let before = recorded();
    trigger("53100");
    site.ingest_json(&[]).code(1);
    assert_eq!(recorded(), before, "nothing recorded");
    trigger("22023");
    let lines = site.ingest_json(&[]).code(3).json();
    let refused: Vec<_> = lines
        .iter()
        .filter(|l| l["status"] == "rejected")
        .map(|l| {
            (
                l["file"].as_str().unwrap_or_default().to_string(),
                l["error"].clone(),
            )
        })
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert!(refused[0].0.ends_with("f2.edi"), "{refused:?}");
    assert!(
        refused[0]
            .1
            .as_str()
            .unwrap_or_default()
            .contains("cannot take S2"),
        "{refused:?}"
    );
    assert_eq!(
        site.count("SELECT count(*) FROM inbox WHERE sender LIKE 'S_'"),
        4
    );
}

/// Issue 22, 5: over a Unix-domain socket (`host=/var/run/postgresql`) the default
/// `sslmode=prefer` failed with "TLS handshake: invalid dns name"; libpq never tries TLS over
/// a socket, whatever sslmode says, and neither does edi-inbox now.
#[test]
fn a_unix_socket_connection_uses_no_tls() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let socket = "/var/run/postgresql";
    if !std::path::Path::new(socket).join(".s.PGSQL.5432").exists() {
        crate::common::require(
            &format!("no PostgreSQL socket in {socket}"),
            "EDI_INBOX_REQUIRE_POSTGRES",
        );
        return;
    }
    let name = &site.pg().unwrap().name;
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    for mode in ["", " sslmode=prefer", " sslmode=require"] {
        let db = format!("host={socket} port=5432 user=postgres dbname={name}{mode}");
        let out = crate::common::edi_inbox()
            .args(["--db", &db, "ingest", "-q"])
            .arg(site.drop())
            .run();
        out.code(0);
    }
    assert_eq!(site.stat("inbox"), 2);
}

/// Issue 22, 5: `--pg-schema select` passed the name check and then failed with an SQL
/// syntax error. A schema named by a keyword is quoted wherever SQL names it.
#[test]
fn a_schema_named_by_a_keyword_works() {
    let Some(site) = Site::postgres() else {
        return;
    };
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    for schema in ["select", "user", "order"] {
        site.ingest_quietly(&["--pg-schema", schema]).code(0);
        let stats = site
            .json(&["--pg-schema", schema, "stats", "--json"])
            .code(0)
            .json();
        assert_eq!(stats[0]["inbox"], 2, "{schema}");
        assert_eq!(
            site.count(&format!("SELECT count(*) FROM \"{schema}\".inbox")),
            2
        );
        let out = site
            .cmd()
            .args(["--pg-schema", schema, "purge", "--days", "1"])
            .run();
        out.code(0);
    }
}

/// Issue 22, 5: a PostgreSQL server that went away under `ingest` was reported as "connection
/// closed", naming no database. The error names the inbox (server, database, schema, never a
/// password).
#[test]
fn a_connection_lost_under_ingest_names_the_inbox() {
    let Some(site) = Site::postgres() else {
        return;
    };
    site.fill(3000, 61);
    let child = site
        .command()
        .args(["ingest", "-q", "--batch", "20"])
        .arg(site.drop())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .start();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let started = site.count(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'interchanges'",
        ) > 0
            && site.count("SELECT count(*) FROM interchanges") > 0;
        if started {
            break;
        }
        assert!(std::time::Instant::now() < until, "ingest did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let name = site.pg().unwrap().name.clone();
    site.sql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = '{name}' AND application_name = 'edi-inbox'"
    ));
    let out = child.wait();
    let stderr = out.err();
    out.code(1);
    assert!(
        stderr.contains(&format!("postgres://postgres@127.0.0.1:5432/{name}")),
        "the inbox is not named: {stderr}"
    );
}

/// Issue 22, 4: on PostgreSQL an acknowledgement's `created_at` was the server's clock while
/// the CONTRL's UNB S004 was written from the host's. One clock, the host's, for both: under a
/// host clock two years ahead (faketime) both say that year. Needs `faketime`.
#[test]
fn an_acknowledgement_is_stamped_with_the_clock_its_contrl_is_dated_by() {
    let found = std::process::Command::new("faketime")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        crate::common::require("faketime is not installed", "EDI_INBOX_REQUIRE_FAKETIME");
        return;
    }
    let Some(site) = Site::postgres() else {
        return;
    };
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let out = std::process::Command::new("faketime")
        .arg("2031-06-15 12:00:00")
        .arg(assert_cmd::cargo::cargo_bin("edi-inbox"))
        .arg("--db")
        .arg(site.db_arg())
        .args(["ingest", "-q", "--contrl", "always"])
        .arg(site.drop())
        .run();
    out.code(0);
    let rows = site.rows(
        "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), convert_from(bytes, 'LATIN1')
         FROM acknowledgements",
    );
    assert_eq!(rows.len(), 2);
    for r in rows {
        let (stamped, bytes) = (r[0].clone().unwrap(), r[1].clone().unwrap());
        assert_eq!(stamped, "2031-06-15", "{bytes}");
        // UNB S004 (in each interchange's own separators).
        assert!(
            bytes.contains("310615") && bytes.contains("1200"),
            "dated by the same clock: {bytes}"
        );
    }
    assert_eq!(
        site.count(
            "SELECT count(*) FROM contrl_outbox
             WHERE to_char(created_at AT TIME ZONE 'UTC', 'YYYY') = '2031'"
        ),
        2
    );
}
