//! The operator's side effects (`--effects`, docs/effects.md): SQL run in the decision's
//! transaction for new interchanges only, refusals kept whole, start-up checks, partner data
//! as bound parameters only; on both backends, through the real binary.

use std::fs;
use std::path::{Path, PathBuf};

use crate::common::site::Site;

/// The example mapping shipped for the site's backend (`examples/effects/sqlite` or
/// `examples/effects/postgres`).
pub(crate) fn example(site: &Site) -> PathBuf {
    let backend = if site.is_postgres() {
        "postgres"
    } else {
        "sqlite"
    };
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/effects")
        .join(backend)
}

/// The files of a folder of side effects: each name and its SQL.
type Files<'a> = Vec<(&'a str, &'a str)>;

/// A folder of side effects made of `files` (name, SQL), under the site.
pub(crate) fn mapping(site: &Site, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = site.path(name);
    for (file, sql) in files {
        let path = dir.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, sql).unwrap();
    }
    dir
}

/// Rows of a query on the inbox's database, each value as text (NULL as `None`).
fn rows(site: &Site, sql: &str) -> Vec<Vec<Option<String>>> {
    if let Some(pg) = site.pg() {
        return pg.rows(sql);
    }
    let conn = rusqlite::Connection::open(site.db()).unwrap();
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        (0..n)
            .map(|k| {
                Ok(match r.get_ref(k)? {
                    rusqlite::types::ValueRef::Null => None,
                    rusqlite::types::ValueRef::Integer(i) => Some(i.to_string()),
                    rusqlite::types::ValueRef::Real(f) => Some(f.to_string()),
                    rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
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

/// One number of a query.
fn count(site: &Site, sql: &str) -> i64 {
    rows(site, sql)[0][0].as_deref().unwrap().parse().unwrap()
}

/// Text rows, `None` shown as "NULL", for comparing with what a person reads.
fn texts(site: &Site, sql: &str) -> Vec<Vec<String>> {
    rows(site, sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect()
        })
        .collect()
}

/// The total as a person reads it, 2 decimals, on either backend.
fn total(site: &Site) -> &'static str {
    if site.is_postgres() {
        "total::text"
    } else {
        "printf('%.2f', total)"
    }
}

/// An interchange of INVOICs from S1 to R1 under `reference`, one per document number; an
/// empty number leaves its DTM 137 out (the example's NOT NULL invoice_date refuses it).
pub(crate) fn invoices(reference: &str, numbers: &[&str]) -> Vec<u8> {
    let mut text = format!("UNB+UNOC:3+S1:14+R1:14+240315:1030+{reference}'");
    for (k, number) in numbers.iter().enumerate() {
        let n = k + 1;
        let date = if number.is_empty() {
            String::new()
        } else {
            "DTM+137:20240316:102'".to_string()
        };
        let segments = if number.is_empty() { 7 } else { 8 };
        let number = if number.is_empty() { "NODATE" } else { number };
        text.push_str(&format!(
            "UNH+{n}+INVOIC:D:96A:UN'BGM+380+{number}+9'{date}LIN+1++4000862141404:SRS'QTY+47:{n}:PCE'UNS+S'MOA+77:{n}0.00'UNT+{segments}+{n}'"
        ));
    }
    text.push_str(&format!("UNZ+{}+{reference}'", numbers.len()));
    text.into_bytes()
}

per_backend! {
    /// The shipped example over every valid sample: the invoices' rows are what a person reads
    /// off samples/valid/invoic-d96a-unoc-crlf.edi (BGM 1004, DTM 137, MOA 77 after UNS, CUX),
    /// and its lines' (LIN, QTY 47); the other message types have no file and write nothing.
    fn the_example_gives_the_rows_read_off_the_sample_invoices(site) {
        for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
            let path = entry.unwrap().path();
            site.put(path.file_name().unwrap().to_str().unwrap(), &fs::read(&path).unwrap());
        }
        let fx = example(&site);
        let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
        run.code(0);
        let want = |n: &str| {
            vec![
                "5412345000013".to_string(),
                n.to_string(),
                "2024-03-15".to_string(),
                "142.80".to_string(),
                "EUR".to_string(),
            ]
        };
        let got = texts(
            &site,
            &format!(
                "SELECT sender, invoice_no, CAST(invoice_date AS TEXT), {}, currency
                 FROM partner_invoices ORDER BY invoice_no",
                total(&site)
            ),
        );
        assert_eq!(got, vec![want("INV00001"), want("INV00002")], "{run}");
        let lines = texts(
            &site,
            "SELECT invoice_no, line_no, gtin, CAST(quantity AS TEXT) FROM partner_invoice_lines
             ORDER BY invoice_no",
        );
        assert_eq!(
            lines,
            vec![
                vec!["INV00001", "1", "4000862141404", "10"],
                vec!["INV00002", "1", "4000862141404", "10"]
            ]
        );
        // Each invoice row points at its own message's row.
        assert_eq!(
            count(
                &site,
                "SELECT count(*) FROM partner_invoices p JOIN messages m ON m.id = p.message_id
                 WHERE m.reference = CASE p.invoice_no WHEN 'INV00001' THEN '1' ELSE '2' END
                   AND m.interchange_id = p.interchange_id"
            ),
            2
        );
        // The mapping each applied message ran is recorded, for reapply --applied --changed.
        assert_eq!(count(&site, "SELECT count(*) FROM message_effects"), 2);
    }
}

per_backend! {
    /// Each message's `:message_id` is its own row's and `:message` its own segments, in an
    /// interchange of more messages than one statement writes without side effects (eight),
    /// with a type without a mapping among them, and in a file of two smaller interchanges:
    /// on SQLite the messages are read ahead by the reading threads (the mapping reads
    /// `:message` only through `message_segments`) and the ids read off the statements that
    /// write the rows, eight at a time. Each applied message's mapping is recorded (eight
    /// records a statement where there are eight), and only theirs.
    fn each_message_gets_its_own_row_and_segments(site) {
        let fx = mapping(
            &site,
            "fx",
            &[
                (
                    "migrations/0001_seen.sql",
                    "CREATE TABLE seen (message_id BIGINT, message_ref TEXT, invoice_no TEXT);",
                ),
                (
                    "INVOIC.sql",
                    "INSERT INTO seen SELECT :message_id, :message_ref,
                         (SELECT segment -> 2 ->> 0 FROM message_segments(:message) WHERE tag = 'BGM');",
                ),
            ],
        );
        let mut many = String::from("UNB+UNOC:3+S1:14+R1:14+240315:1030+MANY'");
        for n in 1..=12 {
            if n == 5 {
                many.push_str("UNH+5+ORDERS:D:96A:UN'BGM+220+PO5+9'UNT+3+5'");
            } else {
                many.push_str(&format!(
                    "UNH+{n}+INVOIC:D:96A:UN'BGM+380+N{n}+9'DTM+137:20240316:102'UNT+4+{n}'"
                ));
            }
        }
        many.push_str("UNZ+12+MANY'");
        site.put("many.edi", many.as_bytes());
        let mut two = invoices("FEW", &["F1", "F2", "F3"]);
        two.extend(invoices("TWO", &["T1", "T2"]));
        site.put("few.edi", &two);
        let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
        run.code(0);
        let got = texts(
            &site,
            "SELECT i.control_ref, m.position, m.reference, s.invoice_no
             FROM seen s JOIN messages m ON m.id = s.message_id
             JOIN interchanges i ON i.id = m.interchange_id
             ORDER BY i.control_ref, m.position",
        );
        let mut want: Vec<Vec<String>> = (1..=3)
            .map(|n| vec!["FEW".into(), n.to_string(), n.to_string(), format!("F{n}")])
            .collect();
        want.extend((1..=12).filter(|n| *n != 5).map(|n| {
            vec!["MANY".into(), n.to_string(), n.to_string(), format!("N{n}")]
        }));
        want.extend((1..=2).map(|n| vec!["TWO".into(), n.to_string(), n.to_string(), format!("T{n}")]));
        assert_eq!(got, want, "{run}");
        // And each row's :message_ref is that message's own.
        assert_eq!(
            count(
                &site,
                "SELECT count(*) FROM seen s JOIN messages m ON m.id = s.message_id
                 WHERE m.reference = s.message_ref AND m.message_type = 'INVOIC'"
            ),
            16
        );
        assert_eq!(
            texts(
                &site,
                "SELECT m.message_type, CAST(count(*) AS TEXT) FROM message_effects e
                 JOIN messages m ON m.id = e.message_id GROUP BY m.message_type"
            ),
            vec![vec!["INVOIC".to_string(), "16".to_string()]],
            "one record per applied INVOIC, none for the ORDERS without a mapping"
        );
    }
}

per_backend! {
    /// The same files again and a drifted copy: no statement runs (a table counts every call),
    /// no new rows; only a new interchange runs them.
    fn duplicates_and_drift_run_no_statement(site) {
        let fx = mapping(
            &site,
            "fx",
            &[
                (
                    "migrations/0001_calls.sql",
                    "CREATE TABLE effect_calls (control_ref TEXT, message_ref TEXT);",
                ),
                (
                    "INVOIC.sql",
                    "INSERT INTO effect_calls VALUES (:control_ref, :message_ref);",
                ),
                (
                    "_interchange.sql",
                    "INSERT INTO effect_calls VALUES (:control_ref, NULL);",
                ),
            ],
        );
        let fx = fx.to_str().unwrap();
        site.put("a.edi", &invoices("A1", &["N1", "N2"]));
        site.ingest_json(&["--effects", fx]).code(0);
        let calls = |site: &Site| count(site, "SELECT count(*) FROM effect_calls");
        assert_eq!(calls(&site), 3, "one for the interchange, one per message");
        let run = site.ingest_json(&["--effects", fx]);
        run.code(0);
        assert_eq!(run.json()[0]["status"], "duplicate");
        let drifted = String::from_utf8(invoices("A1", &["N1", "N2"]))
            .unwrap()
            .replace("N2", "N9");
        site.put("a.edi", drifted.as_bytes());
        let run = site.ingest_json(&["--effects", fx]);
        run.code(3);
        assert_eq!(run.json()[0]["status"], "drift");
        assert_eq!(calls(&site), 3, "no statement ran for the duplicate or the drift");
        site.put("a.edi", &invoices("A2", &["N3"]));
        site.ingest_json(&["--effects", fx]).code(0);
        assert_eq!(calls(&site), 5);
    }
}

per_backend! {
    /// An interchange of three INVOICs whose second has no DTM 137 (NOT NULL invoice_date):
    /// none of it applied (no key, no rows, no outbox event), the rest of the batch applied,
    /// the refusal kept with its reason, the file quarantined, exit 3; an identical resend is
    /// refused again and counted.
    fn a_refused_interchange_applies_nothing_and_is_kept(site) {
        let fx = example(&site);
        let fx = fx.to_str().unwrap();
        site.put("bad.edi", &invoices("B1", &["I1", "", "I3"]));
        site.put("good.edi", &invoices("G1", &["I4"]));
        let quarantine = site.path("failed");
        let run = site.ingest_json(&[
            "--effects",
            fx,
            "--quarantine",
            quarantine.to_str().unwrap(),
        ]);
        run.code(3);
        let lines = run.json();
        let bad = lines.iter().find(|l| l["file"].as_str().is_some_and(|f| f.ends_with("bad.edi"))).unwrap();
        assert_eq!(bad["status"], "refused", "{bad}");
        let refusal = &bad["refusal"];
        assert_eq!(refusal["statement"], "INVOIC.sql statement 1 (line 5)", "{bad}");
        assert_eq!(refusal["message_ref"], "2", "{bad}");
        assert_eq!(refusal["times_seen"], 1);
        let code = refusal["code"].as_str().unwrap();
        assert!(code == "SQLITE_CONSTRAINT_NOTNULL" || code == "23502", "{bad}");
        assert!(bad["error"].as_str().unwrap().contains("invoice_date"), "{bad}");
        assert_eq!(bad["offset"], 0);
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!((summary["new"].as_i64(), summary["refused"].as_i64()), (Some(1), Some(1)), "{summary}");
        // Nothing of it applied; the good file all applied.
        assert_eq!(count(&site, "SELECT count(*) FROM inbox WHERE control_ref = 'B1'"), 0);
        assert_eq!(count(&site, "SELECT count(*) FROM interchanges WHERE control_ref = 'B1'"), 0);
        assert_eq!(count(&site, "SELECT count(*) FROM messages"), 1);
        assert_eq!(count(&site, "SELECT count(*) FROM outbox"), 1);
        assert_eq!(
            texts(&site, "SELECT invoice_no FROM partner_invoices ORDER BY invoice_no"),
            vec![vec!["I4"]]
        );
        // Kept whole, with its reason, and quarantined with it.
        let kept = texts(
            &site,
            "SELECT sender, control_ref, statement, message_ref, times_seen FROM refusals",
        );
        assert_eq!(kept, vec![vec!["S1", "B1", "INVOIC.sql statement 1 (line 5)", "2", "1"]]);
        let reason = fs::read_to_string(quarantine.join("bad.edi.error.txt")).unwrap();
        assert!(reason.contains("REFUSED") && reason.contains("invoice_date"), "{reason}");
        assert!(quarantine.join("bad.edi").exists());
        // The identical resend: refused again, counted.
        site.put("bad.edi", &invoices("B1", &["I1", "", "I3"]));
        let again = site.ingest_json(&["--effects", fx]);
        again.code(3);
        assert_eq!(again.json()[0]["refusal"]["times_seen"], 2, "{again}");
        assert_eq!(count(&site, "SELECT count(*) FROM refusals"), 1);
        assert_eq!(count(&site, "SELECT times_seen FROM refusals"), 2);
        // A corrected resend under the same key is new.
        site.put("bad.edi", &invoices("B1", &["I1", "I2", "I3"]));
        let fixed = site.ingest_json(&["--effects", fx]);
        fixed.code(0);
        assert_eq!(fixed.json()[0]["status"], "new", "{fixed}");
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 4);
    }
}

per_backend! {
    /// `--on-effect-error halt`: the first refusal stops the run, exit 1, nothing of the open
    /// batch committed (the good file before it neither), and the run says why.
    fn halt_stops_at_the_first_refusal(site) {
        let fx = example(&site);
        site.put("a-good.edi", &invoices("G1", &["I4"]));
        site.put("b-bad.edi", &invoices("B1", &["I1", ""]));
        let run = site.ingest_json(&[
            "--effects",
            fx.to_str().unwrap(),
            "--on-effect-error",
            "halt",
        ]);
        run.code(1);
        let err = run.err();
        assert!(err.contains("--on-effect-error halt") && err.contains("b-bad.edi"), "{err}");
        assert_eq!(site.stat("interchanges"), 0, "nothing of the batch committed");
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 0);
    }
}

per_backend! {
    /// Partner values that look like SQL, a parameter or a placeholder reach the SQL as values
    /// only: stored as they were sent, the table still there.
    fn partner_values_are_never_sql(site) {
        let fx = example(&site);
        // As written in the interchange (the release character before ' : ?), and as sent.
        let hostile = [
            ("x?'); DROP TABLE partner_invoices;--", "x'); DROP TABLE partner_invoices;--"),
            ("?:sender", ":sender"),
            ("$1", "$1"),
            ("??1", "?1"),
            ("?:message_id); DELETE FROM inbox;--", ":message_id); DELETE FROM inbox;--"),
        ];
        for (k, (written, _)) in hostile.iter().enumerate() {
            site.put(&format!("h{k}.edi"), &invoices(&format!("H{k}"), &[written]));
        }
        site.ingest_json(&["--effects", fx.to_str().unwrap()]).code(0);
        let got: Vec<String> = texts(&site, "SELECT invoice_no FROM partner_invoices ORDER BY invoice_no")
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
        let mut want: Vec<String> = hostile.iter().map(|(_, sent)| sent.to_string()).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(site.stat("inbox"), hostile.len() as i64, "the inbox's own rows are all there");
    }
}

per_backend! {
    /// What is wrong with the side effects is said before anything is read: exit 1, the file
    /// still in the drop folder, nothing decided.
    fn a_wrong_mapping_stops_the_start_up(site) {
        site.put("a.edi", &invoices("A1", &["N1"]));
        let migration = ("migrations/0001_t.sql", "CREATE TABLE t (v TEXT);");
        let cases: Vec<(&str, Files<'_>, &str)> = vec![
            ("missing table", vec![("INVOIC.sql", "INSERT INTO nowhere VALUES (:sender);")], "nowhere"),
            ("COMMIT", vec![migration, ("INVOIC.sql", "INSERT INTO t VALUES (:sender); COMMIT;")], "statement 2"),
            ("unknown name", vec![migration, ("INVOIC.sql", "INSERT INTO t VALUES (:sendr);")], ":sendr"),
            ("positional", vec![migration, ("INVOIC.sql", "INSERT INTO t VALUES (?);")], "INVOIC.sql"),
            ("own table", vec![("INVOIC.sql", "DELETE FROM inbox WHERE sender = :sender;")], "inbox"),
            ("own outbox", vec![("INVOIC.sql", "INSERT INTO outbox (message_id, event_type, created_at) VALUES (:message_id, 'x', 'y');")], "outbox"),
            ("failing migration", vec![("migrations/0001_bad.sql", "CREATE TABLE broken (;")], "0001_bad.sql"),
        ];
        for (what, files, said) in cases {
            let fx = mapping(&site, &format!("fx-{}", what.replace(' ', "-")), &files);
            let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
            run.code(1);
            assert!(run.err().contains(said), "{what}: {said} not said\n{run}");
            assert!(site.drop().join("a.edi").exists(), "{what}: the file was moved");
        }
        assert_eq!(site.stat("interchanges"), 0, "nothing decided");
    }
}

per_backend! {
    /// An operator's migration applied once, recorded with its checksum: the next start-up
    /// does not apply it again; an edit of it afterwards stops the start-up; a new one is
    /// applied after it.
    fn migrations_are_applied_once_and_never_edited(site) {
        let fx = mapping(
            &site,
            "fx",
            &[
                ("migrations/0001_t.sql", "CREATE TABLE t (v TEXT);"),
                ("INVOIC.sql", "INSERT INTO t VALUES (:message_ref);"),
            ],
        );
        let arg = fx.to_str().unwrap();
        site.put("a.edi", &invoices("A1", &["N1"]));
        site.ingest_json(&["--effects", arg]).code(0);
        site.put("b.edi", &invoices("A2", &["N1"]));
        site.ingest_json(&["--effects", arg]).code(0);
        assert_eq!(count(&site, "SELECT count(*) FROM t"), 2);
        fs::write(fx.join("migrations/0002_u.sql"), "CREATE TABLE u (v TEXT);").unwrap();
        site.ingest_json(&["--effects", arg]).code(0);
        assert_eq!(count(&site, "SELECT count(*) FROM effect_migrations"), 2);
        fs::write(fx.join("migrations/0001_t.sql"), "CREATE TABLE t (v TEXT, w TEXT);").unwrap();
        site.put("c.edi", &invoices("A3", &["N1"]));
        let run = site.ingest_json(&["--effects", arg]);
        run.code(1);
        assert!(run.err().contains("0001_t.sql") && run.err().contains("changed"), "{run}");
        assert!(site.drop().join("c.edi").exists());
    }
}

/// SQLite's authorizer keeps ATTACH and PRAGMA out of the side effects.
#[test]
fn sqlite_refuses_attach_and_pragma() {
    let site = Site::new();
    site.put("a.edi", &invoices("A1", &["N1"]));
    for (what, sql, said) in [
        ("attach", "ATTACH DATABASE 'other.db' AS other;", "ATTACH"),
        (
            "pragma",
            "PRAGMA foreign_keys = OFF;",
            "pragma (foreign_keys)",
        ),
        ("schema", "CREATE TABLE x (v TEXT);", "migrations/"),
    ] {
        let fx = mapping(&site, what, &[("INVOIC.sql", sql)]);
        let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
        run.code(1);
        assert!(run.err().contains(said), "{what}: {run}");
    }
}

/// A statement that runs past `--effects-timeout` fails the run (exit 1): an infrastructure
/// failure, nothing refused, nothing decided; the next run, with time enough, applies it. `slow`
/// writes `:message_ref` into the table `t` the migration makes.
fn past_the_timeout(site: &Site, table: &str, slow: &str) {
    let fx = mapping(
        site,
        "fx",
        &[("migrations/0001_t.sql", table), ("INVOIC.sql", slow)],
    );
    let fx = fx.to_str().unwrap();
    site.put("a.edi", &invoices("A1", &["N1"]));
    let run = site.ingest_json(&["--effects", fx, "--effects-timeout", "1s"]);
    run.code(1);
    assert!(
        run.err().contains("ran longer than --effects-timeout"),
        "{run}"
    );
    assert_eq!(count(site, "SELECT count(*) FROM refusals"), 0);
    assert_eq!(site.stat("interchanges"), 0);
    site.ingest_json(&["--effects", fx, "--effects-timeout", "10m"])
        .code(0);
    assert_eq!(count(site, "SELECT count(*) FROM t"), 1);
}

/// On SQLite the progress handler stops the statement.
#[test]
fn sqlite_a_statement_past_the_timeout_fails_the_run() {
    past_the_timeout(
        &Site::new(),
        "CREATE TABLE t (v TEXT);",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000000)
         INSERT INTO t SELECT :message_ref FROM n WHERE i = 50000000;",
    );
}

/// On PostgreSQL the server's `statement_timeout` stops it.
#[cfg(feature = "postgres")]
#[test]
fn postgres_a_statement_past_the_timeout_fails_the_run() {
    let Some(site) = Site::postgres() else { return };
    past_the_timeout(
        &site,
        "CREATE TABLE t (v text);",
        "INSERT INTO t SELECT :message_ref FROM pg_sleep(3);",
    );
}

/// An interchange whose document number holds a NUL byte.
fn with_nul(site: &Site) {
    let mut bytes = invoices("N1", &["AB"]);
    let at = bytes.windows(2).position(|w| w == b"AB").unwrap();
    bytes[at + 1] = 0;
    site.put("nul.edi", &bytes);
}

/// A NUL in a partner's value: SQLite stores it as sent, never cut short or run as SQL.
#[test]
fn sqlite_stores_a_nul_in_a_value_as_sent() {
    let site = Site::new();
    with_nul(&site);
    let fx = example(&site);
    site.ingest_json(&["--effects", fx.to_str().unwrap()])
        .code(0);
    let conn = rusqlite::Connection::open(site.db()).unwrap();
    let stored: Vec<u8> = conn
        .query_row(
            "SELECT CAST(invoice_no AS BLOB) FROM partner_invoices",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, b"A\0");
}

/// PostgreSQL's text and jsonb cannot hold a NUL: the interchange is refused (SQLSTATE class
/// 22), kept whole, never cut short.
#[cfg(feature = "postgres")]
#[test]
fn postgres_refuses_a_nul_in_a_value() {
    let Some(site) = Site::postgres() else { return };
    with_nul(&site);
    let fx = example(&site);
    let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
    run.code(3);
    let line = &run.json()[0];
    assert_eq!(line["status"], "refused", "{run}");
    assert!(
        line["refusal"]["code"].as_str().unwrap().starts_with("22"),
        "{line}"
    );
    assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 0);
    assert_eq!(count(&site, "SELECT count(*) FROM refusals"), 1);
}

/// The example mapping with its invoice date made optional (a date of 1970-01-01 where the
/// invoice has none): the operator's fix of a refusal for want of a DTM 137.
pub(crate) fn fixed_example(site: &Site) -> PathBuf {
    let from = example(site);
    let to = site.path("fixed");
    fs::create_dir_all(to.join("migrations")).unwrap();
    for name in ["INVOIC.sql", "migrations/0001_partner_invoices.sql"] {
        let mut sql = fs::read_to_string(from.join(name)).unwrap();
        if name == "INVOIC.sql" {
            // SQLite's looks the date up in message_segments, PostgreSQL's in the segments read
            // once (s).
            sql = sql
                .replacen("(SELECT substr(", "coalesce((SELECT substr(", 1)
                .replacen("(SELECT to_date(", "coalesce((SELECT to_date(", 1)
                .replacen(
                    "WHERE tag = 'DTM' AND segment ->> '$[1][0]' = '137')),",
                    "WHERE tag = 'DTM' AND segment ->> '$[1][0]' = '137')), '1970-01-01'),",
                    1,
                )
                .replacen(
                    "WHERE tag = 'DTM' AND qualifier = '137'),",
                    "WHERE tag = 'DTM' AND qualifier = '137'), '1970-01-01'),",
                    1,
                );
            assert!(
                sql.contains("'1970-01-01'"),
                "the example's date statement changed"
            );
        }
        fs::write(to.join(name), sql).unwrap();
    }
    to
}

per_backend! {
    /// A refusal decided again with `reapply --refused`: refused again while the mapping is
    /// wrong (kept, counted, exit 3); after the fix applied once, its outbox events and CONTRL
    /// written, its refusal resolved as new; a second run finds nothing; `list --status
    /// refused` names it until then.
    fn reapply_decides_a_refusal_again_once_the_mapping_is_fixed(site) {
        let fx = example(&site);
        site.put("bad.edi", &invoices("B1", &["I1", "", "I3"]));
        site.ingest_json(&["--effects", fx.to_str().unwrap()]).code(3);
        let listed = site.list(&["--status", "refused"]);
        assert_eq!(listed.len(), 1, "{listed:?}");
        let id = listed[0]["refusal_id"].as_i64().expect("the refusal's id");
        assert!(listed[0]["error"].as_str().unwrap().contains("INVOIC.sql statement 1"), "{listed:?}");
        assert_eq!(site.stat("refused"), 1);
        // show names it under its key, kept.
        let shown = site.show("S1", "R1", "B1");
        assert_eq!(shown["refusals"][0]["id"], id, "{shown}");
        assert_eq!(shown["refusals"][0]["message_ref"], "2", "{shown}");
        assert!(shown["refusals"][0]["resolved_at"].is_null(), "{shown}");
        let human = site.run(&["show", "S1", "R1", "B1"]);
        human.code(0);
        assert!(human.out().contains("kept, not applied (reapply --refused)"), "{human}");
        // Without --effects, reapply would apply it with no side effect at all: refused.
        site.run(&["reapply", "--refused"]).code(2);
        // The mapping still wrong: refused again, still kept.
        let again = site.run(&["reapply", "--refused", "--json", "--effects", fx.to_str().unwrap()]);
        again.code(3);
        assert_eq!(again.json()[0]["status"], "refused", "{again}");
        assert_eq!(site.stat("refused"), 1);
        let fixed = fixed_example(&site);
        let run = site.run(&[
            "reapply", "--refused", "--json", "--id", &id.to_string(), "--contrl", "always",
            "--effects", fixed.to_str().unwrap(),
        ]);
        run.code(0);
        let lines = run.json();
        assert_eq!(lines[0]["status"], "new", "{run}");
        assert_eq!(lines[0]["control_ref"], "B1");
        assert!(lines[0]["contrl"].is_string(), "a CONTRL with it: {run}");
        assert_eq!(lines.last().unwrap()["summary"]["new"], 1);
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 3);
        assert_eq!(count(&site, "SELECT count(*) FROM outbox"), 3);
        assert_eq!(
            texts(&site, "SELECT resolved_as FROM refusals"),
            vec![vec!["new"]]
        );
        assert_eq!(site.stat("refused"), 0);
        assert!(site.list(&["--status", "refused"]).is_empty());
        assert_eq!(site.show("S1", "R1", "B1")["refusals"][0]["resolved_as"], "new");
        let none = site.run(&["reapply", "--refused", "--json", "--effects", fixed.to_str().unwrap()]);
        none.code(0);
        assert_eq!(none.json().last().unwrap()["summary"]["files"], 0, "{none}");
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 3);
    }
}

per_backend! {
    /// A refusal whose partner sent a corrected copy meanwhile (taken as new): `reapply`
    /// finds the key taken, decides the kept copy as drift, and resolves the refusal so.
    fn reapply_after_a_corrected_resend_resolves_as_drift(site) {
        let fx = example(&site);
        let fx = fx.to_str().unwrap();
        site.put("bad.edi", &invoices("B1", &["I1", ""]));
        site.ingest_json(&["--effects", fx]).code(3);
        site.put("bad.edi", &invoices("B1", &["I1", "I2"]));
        site.ingest_json(&["--effects", fx]).code(0);
        let run = site.run(&["reapply", "--refused", "--json", "--effects", fx]);
        run.code(3);
        assert_eq!(run.json()[0]["status"], "drift", "{run}");
        assert_eq!(texts(&site, "SELECT resolved_as FROM refusals"), vec![vec!["drift"]]);
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 2);
    }
}

/// A delivery whose interchange the side effects refuse is settled as a rejected one is (and
/// dead-lettered with the reason); the good one beside it applied; nothing comes again.
#[cfg(feature = "nats")]
#[test]
fn consume_settles_a_refused_delivery_as_rejected() {
    use crate::common::brokers::{Jet, Put, TestBroker};
    let Some(broker) = Jet::create() else { return };
    let Some(dead) = Jet::create() else { return };
    let site = Site::new();
    let fx = example(&site);
    let bad = invoices("B1", &["I1", ""]);
    let good = invoices("G1", &["I4"]);
    broker.send(&[Put::new(&bad, "m1").named("bad.edi"), Put::new(&good, "m2")]);
    let run = crate::consume::consume(
        &site,
        "1s",
        &[
            "--from",
            &broker.source_url(),
            "--dead-letter",
            &dead.dead_letter_to(),
            "--effects",
            fx.to_str().unwrap(),
        ],
    );
    let lines = run.code(3).json();
    assert_eq!(
        crate::consume::statuses(&lines),
        ["refused", "new"],
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap()["summary"]["refused"], 1);
    let held = dead.dead_lettered();
    assert_eq!(held.len(), 1, "--dead-letter");
    assert_eq!(held[0].body, bad);
    let reason = &held[0].headers["edi-inbox-reason"];
    assert!(
        reason.contains("refused") && reason.contains("INVOIC.sql"),
        "{reason}"
    );
    assert_eq!(count(&site, "SELECT count(*) FROM refusals"), 1);
    assert_eq!(broker.unacknowledged(), Some(0));
    let again = crate::consume::consume(&site, "2s", &["--from", &broker.source_url()]);
    assert_eq!(
        again.code(0).json().last().unwrap()["summary"]["deliveries"],
        0
    );
}

/// A PostgreSQL dollar quote, which SQLite reads as a parameter of its own (bound by number
/// with one of the inbox's, or NULL), is refused at start-up on SQLite.
#[test]
fn sqlite_refuses_a_dollar_quote_it_would_read_as_a_parameter() {
    let site = Site::new();
    site.put("a.edi", &invoices("A1", &["N1"]));
    let fx = mapping(
        &site,
        "fx",
        &[
            ("migrations/0001_t.sql", "CREATE TABLE t (a TEXT, b TEXT);"),
            ("INVOIC.sql", "INSERT INTO t VALUES ($$x$$, :sender);"),
        ],
    );
    let run = site.ingest_json(&["--effects", fx.to_str().unwrap()]);
    run.code(1);
    assert!(run.err().contains("dollar quote"), "{run}");
    assert!(site.drop().join("a.edi").exists());
}

/// `--effects-role`: the side effects run as that role, planned as it at start-up: a table it
/// may write is written; one it may not stops the start-up (exit 1), nothing read.
#[cfg(feature = "postgres")]
#[test]
fn postgres_the_effects_role_holds_the_side_effects_to_its_grants() {
    let Some(site) = Site::postgres() else { return };
    let pg = site.pg().unwrap();
    let role = format!("fx_{}", pg.name);
    pg.batch_execute(&format!(
        "CREATE ROLE {role} NOLOGIN;
         CREATE SCHEMA business;
         CREATE TABLE business.seen (control_ref text, at timestamptz DEFAULT statement_timestamp());
         CREATE TABLE business.secret (v text);
         GRANT USAGE ON SCHEMA business TO {role};
         GRANT INSERT ON business.seen TO {role};"
    ));
    // Dropped whatever the test finds: a role outlives the test's database.
    struct Dropped(String, String);
    impl Drop for Dropped {
        fn drop(&mut self) {
            if let Ok(mut c) = postgres::Client::connect(
                &format!("host=127.0.0.1 port=5432 user=postgres dbname={}", self.1),
                postgres::NoTls,
            ) {
                let _ = c.batch_execute(&format!("DROP OWNED BY {0}; DROP ROLE {0}", self.0));
            }
        }
    }
    let _dropped = Dropped(role.clone(), pg.name.clone());
    site.put("a.edi", &invoices("A1", &["N1", "N2"]));
    let denied = mapping(
        &site,
        "denied",
        &[(
            "INVOIC.sql",
            "INSERT INTO business.secret VALUES (:control_ref);",
        )],
    );
    let run = site.ingest_json(&[
        "--effects",
        denied.to_str().unwrap(),
        "--effects-role",
        &role,
    ]);
    run.code(1);
    assert!(run.err().contains("permission denied"), "{run}");
    assert!(site.drop().join("a.edi").exists());
    let allowed = mapping(
        &site,
        "allowed",
        &[(
            "INVOIC.sql",
            "INSERT INTO business.seen VALUES (:control_ref);",
        )],
    );
    site.ingest_json(&[
        "--effects",
        allowed.to_str().unwrap(),
        "--effects-role",
        &role,
    ])
    .code(0);
    assert_eq!(count(&site, "SELECT count(*) FROM business.seen"), 2);
    assert_eq!(
        count(&site, "SELECT count(DISTINCT at) FROM business.seen"),
        1,
        "both messages in one statement, the mapping a function of the role's"
    );
}

per_backend! {
    /// `reapply --applied --type INVOIC`: a changed mapping run over the messages already
    /// applied, with `:reapply` = 1, nothing else changed (no new interchange, outbox event or
    /// CONTRL); `--changed` takes only the messages whose recorded mapping is not today's; a
    /// message whose statement fails on its data is rolled back alone and said (exit 3).
    fn reapply_applied_runs_a_changed_mapping_over_history(site) {
        let v1 = example(&site);
        site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "inv.edi");
        site.put_sample("valid/orders-d01b-no-una.edi", "ord.edi");
        site.ingest_json(&["--effects", v1.to_str().unwrap()]).code(0);
        let outbox = count(&site, "SELECT count(*) FROM outbox");
        // The mapping grows a table, fed on every run.
        let v2 = site.path("v2");
        fs::create_dir_all(v2.join("migrations")).unwrap();
        fs::copy(v1.join("migrations/0001_partner_invoices.sql"), v2.join("migrations/0001_partner_invoices.sql")).unwrap();
        fs::write(
            v2.join("migrations/0002_seen.sql"),
            "CREATE TABLE invoice_seen (message_id BIGINT PRIMARY KEY, reapply BIGINT NOT NULL,
                                        ref TEXT CHECK (ref <> 'BAD'));",
        )
        .unwrap();
        let mut sql = fs::read_to_string(v1.join("INVOIC.sql")).unwrap();
        sql.push_str(
            "\nINSERT INTO invoice_seen VALUES (:message_id, :reapply, :message_ref)
             ON CONFLICT (message_id) DO UPDATE SET reapply = excluded.reapply;\n",
        );
        fs::write(v2.join("INVOIC.sql"), &sql).unwrap();
        let v2 = v2.to_str().unwrap();
        let run = site.run(&["reapply", "--applied", "--type", "INVOIC", "--changed", "--json", "--effects", v2]);
        run.code(0);
        let lines = run.json();
        assert_eq!(lines.last().unwrap()["summary"]["reapplied"], 2, "{run}");
        assert!(lines[..2].iter().all(|l| l["status"] == "reapplied"), "{run}");
        assert_eq!(
            texts(&site, "SELECT CAST(reapply AS TEXT) FROM invoice_seen ORDER BY message_id"),
            vec![vec!["1"], vec!["1"]]
        );
        assert_eq!(count(&site, "SELECT count(*) FROM partner_invoices"), 2, "idempotent");
        assert_eq!(count(&site, "SELECT count(*) FROM outbox"), outbox, "the outbox left alone");
        assert_eq!(site.stat("interchanges"), 2);
        // The mapping each ran is recorded: --changed finds nothing more; without it, all again.
        let again = site.run(&["reapply", "--applied", "--type", "INVOIC", "--changed", "--json", "--effects", v2]);
        again.code(0);
        assert_eq!(again.json().last().unwrap()["summary"]["messages"], 0, "{again}");
        let all = site.run(&["reapply", "--applied", "--type", "INVOIC", "--json", "--effects", v2]);
        all.code(0);
        assert_eq!(all.json().last().unwrap()["summary"]["reapplied"], 2, "{all}");
        // A type the mapping has no file for is a usage error.
        site.run(&["reapply", "--applied", "--type", "DESADV", "--effects", v2]).code(2);
        // A message failing on its data: rolled back alone, said, exit 3.
        site.put("bad.edi", &invoices("B7", &["I1", "BAD"]));
        let v3 = site.path("v3");
        fs::create_dir_all(v3.join("migrations")).unwrap();
        for name in ["migrations/0001_partner_invoices.sql", "migrations/0002_seen.sql"] {
            fs::copy(Path::new(v2).join(name), v3.join(name)).unwrap();
        }
        site.ingest_json(&["--effects", v2]).code(0);
        // The invoice number where the CHECK sees it: B7's second message (invoice BAD) fails.
        fs::write(v3.join("INVOIC.sql"), "INSERT INTO invoice_seen VALUES (:message_id, :reapply, :message -> 1 -> 2 ->> 0)
             ON CONFLICT (message_id) DO UPDATE SET reapply = excluded.reapply, ref = excluded.ref;").unwrap();
        let failing = site.run(&[
            "reapply", "--applied", "--type", "INVOIC", "--json", "--effects", v3.to_str().unwrap(),
        ]);
        failing.code(3);
        let lines = failing.json();
        let failed: Vec<&serde_json::Value> = lines.iter().filter(|l| l["status"] == "failed").collect();
        assert_eq!(failed.len(), 1, "{failing}");
        assert_eq!((&failed[0]["control_ref"], &failed[0]["message_ref"]), (&"B7".into(), &"2".into()));
        assert_eq!(lines.last().unwrap()["summary"]["reapplied"], 3, "{failing}");
    }
}

per_backend! {
    /// `effects check`: every statement prepared and the migrations applied in a transaction
    /// rolled back; what runs for what, with which parameters, and which migrations are to
    /// apply; nothing changed. A wrong mapping is said with its file and statement, exit 1.
    fn effects_check_says_what_is_covered_and_changes_nothing(site) {
        site.ingest_json(&[]).code(0);
        let fx = example(&site);
        let fx = fx.to_str().unwrap();
        let run = site.run(&["effects", "check", "--json", "--effects", fx]);
        run.code(0);
        let report = &run.json()[0];
        let files = report["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{report}");
        assert_eq!(files[0]["file"], "INVOIC.sql");
        assert_eq!(files[0]["runs_for"], "INVOIC");
        let statements = files[0]["statements"].as_array().unwrap();
        assert_eq!(statements.len(), 2, "{report}");
        assert!(statements[0]["parameters"].as_array().unwrap().contains(&":message".into()));
        assert_eq!(report["migrations"][0]["state"], "to apply", "{report}");
        assert_eq!(count(&site, "SELECT count(*) FROM effect_migrations"), 0, "rolled back");
        // Applied by a run, said so.
        site.ingest_json(&["--effects", fx]).code(0);
        let run = site.run(&["effects", "check", "--effects", fx]);
        run.code(0);
        assert!(run.out().contains("migrations/0001_partner_invoices.sql  applied"), "{run}");
        assert!(run.out().contains("INVOIC.sql  2 statements: each INVOIC message"), "{run}");
        let wrong = mapping(
            &site,
            "wrong",
            &[("ORDERS.sql", "INSERT INTO nowhere VALUES (:sender);")],
        );
        let run = site.run(&["effects", "check", "--effects", wrong.to_str().unwrap()]);
        run.code(1);
        assert!(run.err().contains("ORDERS.sql statement 1") && run.err().contains("nowhere"), "{run}");
    }
}

per_backend! {
    /// `effects try FILE`: the file's interchanges decided with the side effects in a
    /// transaction rolled back: each new message's JSON and the rows each statement changed; a
    /// refusal said as a run would say it (exit 3); nothing kept.
    fn effects_try_shows_each_message_and_its_rows_and_keeps_nothing(site) {
        site.ingest_json(&[]).code(0);
        let fx = example(&site);
        let fx = fx.to_str().unwrap();
        let sample = crate::common::samples().join("valid/invoic-d96a-unoc-crlf.edi");
        let run = site.run(&["effects", "try", "--json", "--effects", fx, sample.to_str().unwrap()]);
        run.code(0);
        let line = &run.json()[0];
        assert_eq!(line["outcome"]["status"], "new", "{line}");
        let messages = line["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2, "{line}");
        assert_eq!(messages[0]["segments"][1][2][0], "INV00001", "{line}");
        // Each statement by its number (its line is the backend's example's), and its rows.
        let rows: Vec<(String, u64)> = messages[0]["statements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let place = s["statement"].as_str().unwrap();
                let numbered = place.split(" (line").next().unwrap().to_string();
                (numbered, s["rows"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("INVOIC.sql statement 1".to_string(), 1),
                ("INVOIC.sql statement 2".to_string(), 1)
            ]
        );
        assert_eq!(site.stat("interchanges"), 0, "rolled back");
        assert_eq!(count(&site, "SELECT count(*) FROM effect_migrations"), 0, "rolled back");
        // A refusal, as a run says it.
        let bad = site.path("bad.edi");
        fs::write(&bad, invoices("B1", &["I1", ""])).unwrap();
        let run = site.run(&["effects", "try", "--effects", fx, bad.to_str().unwrap()]);
        run.code(3);
        assert!(run.out().contains("REFUSED") && run.out().contains("invoice_date"), "{run}");
        assert!(run.out().contains("rolled back: nothing of this was kept"), "{run}");
        assert_eq!(count(&site, "SELECT count(*) FROM refusals"), 0);
    }
}

per_backend! {
    /// `message_segments(:message)`: each segment's position (0 for the UNH), tag and JSON,
    /// the same on both backends, and the same as the message's JSON read segment by segment
    /// (`inspect --segments --json`); a segment whose tag element holds more (`LIN:1:1`) has
    /// its tag; `tag = ...` and a bound on `n` pick what a plain filter would.
    fn message_segments_gives_each_segment_on_both_backends(site) {
        let body = "UNH+1+INVOIC:D:96A:UN'BGM+380+INV?+1+9'DTM+137:20240315:102'\
                    LIN+1++4000862141404:SRS'QTY+47:5:PCE'LIN:1:1+2++4000862141405:SRS'\
                    QTY+47:7:PCE'UNS+S'MOA+77:17'UNT+10+1'";
        let data = format!("UNB+UNOC:3+S1:14+R1:14+240315:1030+SEG1'{body}UNZ+1+SEG1'");
        site.put("seg.edi", data.as_bytes());
        let fx = mapping(
            &site,
            "segments",
            &[
                (
                    "migrations/0001_seen.sql",
                    "CREATE TABLE seen (n INTEGER, tag TEXT, segment TEXT, picked INTEGER);",
                ),
                (
                    "INVOIC.sql",
                    "INSERT INTO seen SELECT n, tag, segment, 0 FROM message_segments(:message);
                     INSERT INTO seen SELECT n, tag, segment, 1 FROM message_segments(:message)
                         WHERE tag = 'QTY' AND n > 4;",
                ),
            ],
        );
        site.ingest_json(&["--effects", fx.to_str().unwrap()]).code(0);
        // The JSON of each segment, as the message's own JSON has it.
        let inspected = site.run(&["inspect", "--segments", "--json", site.drop().join("seg.edi").to_str().unwrap()]);
        let message = &inspected.json()[0]["segments"];
        let want: Vec<Vec<String>> = message
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(n, s)| {
                let tag = s[0].as_str().or_else(|| s[0][0].as_str()).unwrap();
                vec![n.to_string(), tag.to_string(), s.to_string()]
            })
            .collect();
        assert_eq!(want.len(), 10);
        assert_eq!(want[5][1], "LIN", "the tag of LIN:1:1");
        // PostgreSQL's jsonb text has a space after each comma: compared as JSON.
        let got = |picked: i64| -> Vec<Vec<String>> {
            texts(&site, &format!("SELECT n, tag, segment FROM seen WHERE picked = {picked} ORDER BY n"))
                .into_iter()
                .map(|r| {
                    let json: serde_json::Value = serde_json::from_str(&r[2]).unwrap();
                    vec![r[0].clone(), r[1].clone(), json.to_string()]
                })
                .collect()
        };
        assert_eq!(got(0), want);
        assert_eq!(got(1), vec![want[6].clone()], "QTY after position 4");
    }
}

per_backend! {
    /// An X12 transaction set runs its set's mapping (`850.sql`), with `:message` in the same
    /// segment/element/component form as EDIFACT's and `message_segments` finding its segments
    /// by their two- or three-letter identifiers; `:standard` says `x12` (issue 41).
    fn an_x12_set_runs_its_mapping_with_the_message_as_json(site) {
        let fx = mapping(
            &site,
            "fx",
            &[
                (
                    "migrations/0001_po_lines.sql",
                    "CREATE TABLE po_lines (standard TEXT, po TEXT, line TEXT, qty TEXT, item TEXT, colour TEXT);",
                ),
                (
                    "850.sql",
                    "INSERT INTO po_lines
                     SELECT :standard,
                            (SELECT segment -> 3 ->> 0 FROM message_segments(:message) WHERE tag = 'BEG'),
                            segment -> 1 ->> 0, segment -> 2 ->> 0, segment -> 7 ->> 0, segment -> 7 ->> 1
                     FROM message_segments(:message) WHERE tag = 'PO1' ORDER BY n;",
                ),
            ],
        );
        site.put_sample("x12/850-purchase-order-00401.x12", "po.x12");
        site.ingest_json(&["--effects", fx.to_str().unwrap()]).code(0);
        assert_eq!(
            texts(&site, "SELECT standard, po, line, qty, item, colour FROM po_lines ORDER BY line"),
            vec![
                vec!["x12", "PO-77120", "1", "120", "WIDGET-9", "BLUE"],
                vec!["x12", "PO-77120", "2", "36", "GADGET-2", "NULL"],
            ],
            "PO1 read by position, ISA16 splitting PO107's components"
        );
    }
}

/// On PostgreSQL a batch's calls of one file's statements go to the server as one statement
/// (the file made a function, its parameters as arrays), in the order the messages come: the
/// interchange's statements first, then each message's, a file's statements in their order;
/// a run of one file's calls shares the statement's start time, and a change of file starts a
/// new run. A file without parameters is called as often as its messages; a file the server is
/// not given as a function (its SQL holds the quote of the functions' bodies) runs a statement at
/// a time in its place, as `effects check` says.
#[cfg(feature = "postgres")]
#[test]
fn postgres_sends_a_run_of_one_files_calls_as_one_statement_in_order() {
    let Some(site) = Site::postgres() else { return };
    let insert = |what: &str| {
        format!(
            "INSERT INTO calls (what, control_ref, at, seen)
             VALUES ({what}, :control_ref, statement_timestamp(), (SELECT count(*) FROM calls));"
        )
    };
    let invoic = format!(
        "{}\n{}",
        insert("'INVOIC ' || :message_ref"),
        insert("'INVOIC again ' || :message_ref")
    );
    let fx = mapping(
        &site,
        "fx",
        &[
            (
                "migrations/0001_calls.sql",
                "CREATE TABLE calls (seq bigserial, what text, control_ref text, at timestamptz, seen bigint);",
            ),
            ("_interchange.sql", &insert("'interchange'")),
            ("INVOIC.sql", &invoic),
            (
                "ORDERS.sql",
                &insert("'ORDERS ' || :message_ref || $edi_inbox_effects$$edi_inbox_effects$"),
            ),
            (
                "DESADV.sql",
                "INSERT INTO calls (what, control_ref, at, seen)
                 VALUES ('DESADV', 'RUN1', statement_timestamp(), (SELECT count(*) FROM calls));",
            ),
        ],
    );

    // Two interchanges in one file: one batch, in the file's order.
    let text = "UNB+UNOC:3+S1:14+R1:14+240315:1030+RUN1'\
                UNH+1+INVOIC:D:96A:UN'BGM+380+A1+9'UNT+3+1'\
                UNH+2+ORDERS:D:96A:UN'BGM+220+A2+9'UNT+3+2'\
                UNH+3+INVOIC:D:96A:UN'BGM+380+A3+9'UNT+3+3'\
                UNH+4+DESADV:D:96A:UN'BGM+351+A4+9'UNT+3+4'\
                UNZ+4+RUN1'\
                UNB+UNOC:3+S1:14+R1:14+240315:1030+RUN2'\
                UNH+1+INVOIC:D:96A:UN'BGM+380+B1+9'UNT+3+1'\
                UNH+2+INVOIC:D:96A:UN'BGM+380+B2+9'UNT+3+2'\
                UNZ+2+RUN2'";
    site.put("two.edi", text.as_bytes());
    site.ingest_json(&["--effects", fx.to_str().unwrap()])
        .code(0);
    let check = site.run(&[
        "effects",
        "check",
        "--json",
        "--effects",
        fx.to_str().unwrap(),
    ]);
    check.code(0);
    let files = check.json()[0]["files"].clone();
    let why: Vec<(String, Option<String>)> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["file"].as_str().unwrap().to_string(),
                f["one_at_a_time"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        why,
        [
            ("_interchange.sql".to_string(), None),
            ("DESADV.sql".to_string(), None),
            ("INVOIC.sql".to_string(), None),
            (
                "ORDERS.sql".to_string(),
                Some("its SQL holds $edi_inbox_effects$".to_string())
            ),
        ],
        "{check}"
    );
    let order: Vec<String> = texts(
        &site,
        "SELECT what || ' ' || control_ref FROM calls ORDER BY seq",
    )
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    assert_eq!(
        order,
        [
            "interchange RUN1",
            "INVOIC 1 RUN1",
            "INVOIC again 1 RUN1",
            "ORDERS 2 RUN1",
            "INVOIC 3 RUN1",
            "INVOIC again 3 RUN1",
            "DESADV RUN1",
            "interchange RUN2",
            "INVOIC 1 RUN2",
            "INVOIC again 1 RUN2",
            "INVOIC 2 RUN2",
            "INVOIC again 2 RUN2",
        ],
        "the calls in the order of the messages, as one at a time would make them"
    );
    assert_eq!(
        count(&site, "SELECT count(*) FROM calls WHERE seen <> seq - 1"),
        0,
        "each call sees the rows of every call before it, as one statement after another does"
    );
    // Runs: RUN1's interchange, its INVOIC 1, ORDERS 2, INVOIC 3, DESADV 4, RUN2's interchange,
    // then both of RUN2's INVOICs together; one statement at a time would have made twelve.
    assert_eq!(
        count(&site, "SELECT count(DISTINCT at) FROM calls"),
        7,
        "one statement per run of one file's calls"
    );
    assert_eq!(
        count(
            &site,
            "SELECT count(DISTINCT at) FROM calls WHERE control_ref = 'RUN2' AND what LIKE 'INVOIC%'"
        ),
        1,
        "RUN2's two INVOICs in one statement"
    );
}

/// On PostgreSQL a run whose calls together take longer than `--effects-timeout`, each of them
/// well within it, is run again a statement at a time under the timeout each: applied, not
/// failed.
#[cfg(feature = "postgres")]
#[test]
fn postgres_a_run_past_the_timeout_is_run_again_a_statement_at_a_time() {
    let Some(site) = Site::postgres() else { return };
    let fx = mapping(
        &site,
        "fx",
        &[
            (
                "migrations/0001_t.sql",
                "CREATE TABLE t (v text, at timestamptz);",
            ),
            (
                "INVOIC.sql",
                "INSERT INTO t SELECT :message_ref, statement_timestamp() FROM pg_sleep(0.4);",
            ),
        ],
    );
    site.put("a.edi", &invoices("SLOW1", &["N1", "N2", "N3", "N4"]));
    site.ingest_json(&["--effects", fx.to_str().unwrap(), "--effects-timeout", "1s"])
        .code(0);
    assert_eq!(
        texts(&site, "SELECT v FROM t ORDER BY v"),
        vec![vec!["1"], vec!["2"], vec!["3"], vec!["4"]]
    );
    assert_eq!(
        count(&site, "SELECT count(DISTINCT at) FROM t"),
        4,
        "each message's statement on its own once the run as a whole ran past the timeout"
    );
    assert_eq!(count(&site, "SELECT count(*) FROM refusals"), 0);
}

/// On PostgreSQL a run holds at most 256 calls: an interchange of 300 INVOICs is sent as two
/// statements, the first of 256 calls, in the messages' order across the split.
#[cfg(feature = "postgres")]
#[test]
fn postgres_splits_a_long_run_in_order() {
    let Some(site) = Site::postgres() else { return };
    let fx = mapping(
        &site,
        "fx",
        &[
            (
                "migrations/0001_calls.sql",
                "CREATE TABLE calls (seq bigserial, message_ref text, at timestamptz, seen bigint);",
            ),
            (
                "INVOIC.sql",
                "INSERT INTO calls (message_ref, at, seen)
                 VALUES (:message_ref, statement_timestamp(), (SELECT count(*) FROM calls));",
            ),
        ],
    );
    let numbers: Vec<String> = (1..=300).map(|n| format!("N{n}")).collect();
    let numbers: Vec<&str> = numbers.iter().map(String::as_str).collect();
    site.put("long.edi", &invoices("LONG1", &numbers));
    site.ingest_json(&["--effects", fx.to_str().unwrap()])
        .code(0);
    let refs: Vec<String> = texts(&site, "SELECT message_ref FROM calls ORDER BY seq")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let want: Vec<String> = (1..=300).map(|n| n.to_string()).collect();
    assert_eq!(refs, want, "the messages' order across the split");
    assert_eq!(
        count(&site, "SELECT count(*) FROM calls WHERE seen <> seq - 1"),
        0
    );
    assert_eq!(
        texts(
            &site,
            "SELECT count(*) FROM calls GROUP BY at ORDER BY min(seq)"
        ),
        vec![vec!["256"], vec!["44"]],
        "two statements: 256 calls, then the other 44"
    );
}
