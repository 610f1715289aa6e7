//! A message as JSON (issue 37, docs/parser.md "A message as JSON"): `inspect --segments` and
//! `show --segments` as a user runs them, the golden JSON of every valid sample, the round trip
//! over every message of the samples and of the shared corpus, and the same segments and values
//! as pydifact, an independent reader, reads them.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use edi_inbox::edifact::message::Reading;
use edi_inbox::edifact::{Interchange, interchanges, message_segments};
use serde_json::{Value, json};

use crate::common::synth::{Layout, Synth};
use crate::common::{RunExt, edi_inbox, samples};
use crate::corpus::corpus;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/segments");
const PYDIFACT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/segments/pydifact_read.py"
);

/// Every file of `samples/valid` reads as its golden JSON Lines (`tests/fixtures/segments/`,
/// reviewed by eye once): release characters, UNOC umlauts, level B, a wrapped file with a
/// byte-order mark, UNOY, groups, two interchanges under other separators.
#[test]
fn every_valid_sample_reads_as_its_golden_json() {
    let dir = samples().join("valid");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut golden: Vec<String> = fs::read_dir(GOLDEN)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    golden.sort();
    let stems = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|n| {
                n.rsplit_once('.')
                    .map_or(n.as_str(), |(s, _)| s)
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        stems(&names),
        stems(&golden),
        "a golden file for each valid sample"
    );
    for name in &names {
        let run = edi_inbox()
            .current_dir(&dir)
            .args(["inspect", "--segments", "--json", name])
            .run();
        run.code(0);
        let stem = name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s);
        let want = fs::read_to_string(Path::new(GOLDEN).join(format!("{stem}.jsonl"))).unwrap();
        assert_eq!(run.out(), want, "{name}: inspect --segments --json");
    }
}

/// The human lines escape what a partner's value could do to a terminal, and say which bytes
/// the repertoire does not define; the JSON keeps both (the control character escaped by JSON).
#[test]
fn human_lines_are_escaped_and_foreign_bytes_said() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.edi");
    let data = b"UNB+UNOA:3+S+R+240101:1200+R1'UNH+1+ORDERS:D:96A:UN'BGM+220+1'\
FTX+AAI+++red \x1b[31m text+K\xc4SE'UNT+4+1'UNZ+1+R1'";
    fs::write(&path, data).unwrap();
    let ftx = data.windows(3).position(|w| w == b"FTX").unwrap();

    let run = edi_inbox().args(["inspect", "--segments"]).arg(&path).run();
    run.code(0);
    assert!(!run.stdout.contains(&0x1b), "{}", run.out());
    let out = run.out();
    assert!(
        out.contains("  FTX+AAI+++red \\x1B[31m text+KÄSE\n"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  1 byte outside UNOA, read as ISO 8859-1: the first in FTX at byte {ftx} (segment 4)\n"
        )),
        "{out}"
    );

    let run = edi_inbox()
        .args(["inspect", "--segments", "--json"])
        .arg(&path)
        .run();
    run.code(0);
    assert!(run.out().contains(r"red \u001b[31m text"), "{}", run.out());
    let m = &run.json()[0];
    assert_eq!(
        m["segments"][2],
        json!([
            "FTX",
            ["AAI"],
            [""],
            [""],
            ["red \u{1b}[31m text"],
            ["KÄSE"]
        ])
    );
    assert_eq!(
        m["outside_repertoire"],
        json!({"bytes": 1, "offset": ftx, "segment": 4, "tag": "FTX"})
    );
    for (field, want) in [
        ("sender", "S"),
        ("recipient", "R"),
        ("control_ref", "R1"),
        ("ref", "1"),
        ("type", "ORDERS"),
    ] {
        assert_eq!(m[field], want, "{field}");
    }
    assert_eq!(m["group"], Value::Null);
}

/// A rejected file is said as `inspect` says it, and no message of it is printed.
#[test]
fn a_rejected_file_prints_no_segments() {
    let run = edi_inbox()
        .args(["inspect", "--segments", "--json"])
        .arg(samples().join("broken/unt-count-wrong.edi"))
        .run();
    run.code(3);
    let lines = run.json();
    assert_eq!(lines.len(), 1, "{}", run.out());
    assert_eq!(lines[0]["kind"], "unt-count");
}

per_backend! {
    /// `show --segments` reads the stored bytes as `inspect --segments` reads the file.
    fn show_segments_reads_the_stored_interchange(site) {
        site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "inv.edi");
        site.ingest(100).code(0);
        let key = ["show", "5412345000013", "4012345000023", "INV0001"];
        let shown = site.run(&[&key[..], &["--segments", "--json"]].concat());
        shown.code(0);
        let shown = shown.json();
        let inspected = edi_inbox()
            .args(["inspect", "--segments", "--json"])
            .arg(samples().join("valid/invoic-d96a-unoc-crlf.edi"))
            .run()
            .json();
        assert_eq!(shown.len(), 2);
        for (s, i) in shown.iter().zip(&inspected) {
            assert!(s["file"].as_str().unwrap().ends_with("inv.edi"), "{s}");
            for field in ["ref", "type", "sender", "control_ref", "segments"] {
                assert_eq!(s[field], i[field], "{field}");
            }
        }
        let human = site.run(&[&key[..], &["--segments"]].concat());
        human.code(0);
        assert!(
            human
                .out()
                .contains("  NAD+SU+5412345000013::9++Müller GmbH+Hauptstra?+e 1+Köln++50667+DE\n"),
            "{}",
            human.out()
        );
        site.run(&["show", "5412345000013", "4012345000023", "NOPE", "--segments"])
            .code(3);
    }
}

/// Every interchange the parser accepts in the samples (valid and broken), in the shared
/// corpus (when it is there: `EDI_INBOX_CORPUS`, as tests/it/corpus.rs finds it) and in
/// synthetic traffic of every layout: the bytes and where they came from.
fn accepted_files() -> Vec<(String, Vec<u8>)> {
    let mut roots = vec![samples()];
    if let Some(root) = corpus() {
        roots.push(root.join("real"));
        roots.push(root.join("broken"));
    }
    let mut files = Vec::new();
    for root in roots {
        for e in walkdir::WalkDir::new(&root).sort_by_file_name() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy();
            if !e.file_type().is_file() || name.ends_with(".md") || name.ends_with(".tsv") {
                continue;
            }
            files.push((e.path().display().to_string(), fs::read(e.path()).unwrap()));
        }
    }
    let mut g = Synth::new(37);
    for n in 0..40 {
        let layout = Layout {
            una: n % 2 == 0,
            crlf: n % 3 == 0,
            group: n % 5 == 0,
        };
        let data = g.interchange("SENDER", "RECIPIENT", &format!("S{n}"), 1 + n % 4, layout);
        files.push((format!("synthetic {n}"), data));
    }
    files
}

/// The service characters in force for `reading`.
fn is_service(reading: &Reading, b: u8) -> bool {
    let s = reading.separators;
    b == s.component
        || b == s.element
        || b == s.terminator
        || Some(b) == s.release
        || Some(b) == reading.repetition
}

/// The JSON of a message joined again with its interchange's separators, a release character
/// before each service character in a value.
fn rejoin(segments: &Value, reading: &Reading) -> String {
    let s = reading.separators;
    let ch = |b: u8| char::from(b);
    let component = |text: &str, out: &mut String| {
        for c in text.chars() {
            if let (Some(release), true) = (s.release, c.is_ascii() && is_service(reading, c as u8))
            {
                out.push(ch(release));
            }
            out.push(c);
        }
    };
    let components = |items: &[Value], out: &mut String| {
        for (k, c) in items.iter().enumerate() {
            if k > 0 {
                out.push(ch(s.component));
            }
            component(c.as_str().expect("a component is text"), out);
        }
    };
    let mut out = String::new();
    for seg in segments.as_array().expect("a message is an array") {
        for (k, item) in seg
            .as_array()
            .expect("a segment is an array")
            .iter()
            .enumerate()
        {
            if k > 0 {
                out.push(ch(s.element));
            }
            match item {
                Value::String(tag) if k == 0 => out.push_str(tag),
                Value::Array(e) if e.first().is_some_and(Value::is_array) => {
                    let rep = reading.repetition.expect("repetitions only where in force");
                    for (r, rep_items) in e.iter().enumerate() {
                        if r > 0 {
                            out.push(ch(rep));
                        }
                        components(rep_items.as_array().unwrap(), &mut out);
                    }
                }
                Value::Array(e) => components(e, &mut out),
                other => panic!("an element is an array, not {other}"),
            }
        }
        out.push(ch(s.terminator));
    }
    out
}

/// A message's bytes as the rejoined JSON must give them back: transport line breaks (never
/// data) and the padding between segments taken out, a release character kept only before a
/// service character (before any other it only drops itself), decoded.
fn expected(raw: &[u8], reading: &Reading) -> String {
    let s = reading.separators;
    let bytes: Vec<u8> = raw
        .iter()
        .copied()
        .filter(|&b| !s.is_line_break(b))
        .collect();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        if Some(b) == s.release
            && let Some(&next) = bytes.get(i)
        {
            if is_service(reading, next) {
                out.push(b);
            }
            out.push(next);
            i += 1;
            continue;
        }
        out.push(b);
        if b == s.terminator {
            while bytes.get(i).is_some_and(|&b| s.is_padding(b)) {
                i += 1;
            }
        }
    }
    reading.charset.decode_exact(&out).0.into_owned()
}

/// Each message of `i` with its JSON.
fn messages_as_json(i: &Interchange<'_>) -> Vec<(String, Value, Reading)> {
    i.messages
        .iter()
        .map(|m| {
            let segments = message_segments(i, m).unwrap_or_else(|e| {
                panic!("message {} of an accepted interchange: {e}", m.reference)
            });
            let value = serde_json::to_value(&segments).unwrap();
            (m.reference.to_string(), value, segments.reading())
        })
        .collect()
}

/// Lossless: the JSON of every message the parser accepts, joined again with its
/// interchange's separators and release character, gives back the message's bytes (decoded,
/// without transport line breaks, release characters only where they release something).
#[test]
fn rejoining_the_json_gives_back_every_message() {
    let (mut messages, mut corpus_messages) = (0, 0);
    let mut failures = Vec::new();
    for (name, data) in accepted_files() {
        for i in interchanges(&data).filter_map(Result::ok) {
            for ((reference, value, reading), m) in
                messages_as_json(&i).into_iter().zip(&i.messages)
            {
                messages += 1;
                corpus_messages += usize::from(name.contains("corpus"));
                let back = rejoin(&value, &reading);
                let want = expected(&i.raw[m.span.clone()], &reading);
                if back != want {
                    let at = back
                        .chars()
                        .zip(want.chars())
                        .take_while(|(a, b)| a == b)
                        .count();
                    let near = |s: &str| {
                        s.chars()
                            .skip(at.saturating_sub(20))
                            .take(60)
                            .collect::<String>()
                    };
                    failures.push(format!(
                        "{name}: message {reference}: rejoined differs at character {at}:\n  \
                         rejoined {:?}\n  message  {:?}",
                        near(&back),
                        near(&want)
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} messages differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{messages} messages joined again, {corpus_messages} of the shared corpus");
    assert!(messages >= 60, "only {messages} messages read");
    if corpus().is_some() {
        assert!(
            corpus_messages >= 100,
            "only {corpus_messages} messages of the corpus read"
        );
    }
}

/// The Python with pydifact; `None` (with a notice) where none is named, unless required
/// (`EDI_INBOX_REQUIRE_PYDIFACT`, which `.ci/run` sets).
fn pydifact_python() -> Option<String> {
    match std::env::var("EDI_INBOX_PYDIFACT_PYTHON") {
        Ok(p) if Path::new(&p).exists() => Some(p),
        _ => {
            crate::common::require(
                "EDI_INBOX_PYDIFACT_PYTHON names no Python with pydifact",
                "EDI_INBOX_REQUIRE_PYDIFACT",
            );
            None
        }
    }
}

/// An element as both readers can be compared on: its components, a repeated one's
/// repetitions joined again at their separator (pydifact has no repetitions), without the empty
/// components at its end (pydifact leaves them out).
fn comparable(element: &Value, reading: &Reading) -> Vec<String> {
    let mut out: Vec<String> = match element {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) if items.first().is_some_and(Value::is_array) => {
            let rep = reading.repetition.map(char::from).unwrap_or('*');
            let mut out: Vec<String> = Vec::new();
            for (r, rep_items) in items.iter().enumerate() {
                let mut parts = rep_items
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string());
                if r > 0
                    && let (Some(last), Some(first)) = (out.last_mut(), parts.next())
                {
                    last.push(rep);
                    last.push_str(&first);
                }
                out.extend(parts);
            }
            out
        }
        Value::Array(items) => items
            .iter()
            .map(|c| c.as_str().unwrap_or_default().to_string())
            .collect(),
        other => panic!("not an element: {other}"),
    };
    while out.last().is_some_and(String::is_empty) {
        out.pop();
    }
    out
}

/// The same tags and values as pydifact (PyPI, in the venv `.ci/run` makes) reads, for every
/// message of the valid samples and of the shared corpus: each interchange given to it with
/// its transport line breaks taken out (pydifact keeps them as data), decoded by Python's own
/// codecs.
#[test]
fn pydifact_reads_the_same_segments_and_values() {
    let Some(python) = pydifact_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = String::new();
    let mut ours = Vec::new();
    for (name, data) in accepted_files() {
        if name.starts_with("synthetic") || name.contains("/broken") {
            continue;
        }
        for i in interchanges(&data).filter_map(Result::ok) {
            let path: PathBuf = dir.path().join(format!("{}.edi", ours.len()));
            let seps = i.separators;
            let bytes: Vec<u8> = i
                .raw
                .iter()
                .copied()
                .filter(|&b| !seps.is_line_break(b))
                .collect();
            fs::write(&path, bytes).unwrap();
            jobs.push_str(&json!({"path": path, "syntax": i.unb.syntax_id.as_str()}).to_string());
            jobs.push('\n');
            ours.push((name.clone(), messages_as_json(&i)));
        }
    }
    let mut child = Command::new(&python)
        .arg(PYDIFACT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(jobs.as_bytes()));
    let theirs: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    writer.join().unwrap().unwrap();
    assert!(child.wait().unwrap().success(), "{PYDIFACT} failed");
    assert_eq!(theirs.len(), ours.len(), "one answer per interchange");

    let mut failures = Vec::new();
    let mut compared = 0;
    for ((name, messages), segments) in ours.iter().zip(&theirs) {
        // pydifact's messages: each run of segments from a UNH to its UNT.
        let mut runs: Vec<Vec<&Value>> = Vec::new();
        let mut open: Option<Vec<&Value>> = None;
        for seg in segments.as_array().unwrap() {
            let tag = seg[0].as_str().or(seg[0][0].as_str()).unwrap_or_default();
            if tag == "UNH" {
                open = Some(Vec::new());
            }
            if let Some(run) = open.as_mut() {
                run.push(seg);
            }
            if tag == "UNT" {
                runs.extend(open.take());
            }
        }
        if runs.len() != messages.len() {
            failures.push(format!(
                "{name}: pydifact reads {} messages, we {}",
                runs.len(),
                messages.len()
            ));
            continue;
        }
        for ((reference, value, reading), run) in messages.iter().zip(&runs) {
            compared += 1;
            let ours = value.as_array().unwrap();
            if ours.len() != run.len() {
                failures.push(format!(
                    "{name}: message {reference}: {} segments, pydifact {}",
                    ours.len(),
                    run.len()
                ));
                continue;
            }
            for (k, (a, b)) in ours.iter().zip(run).enumerate() {
                let a: Vec<Vec<String>> = a
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| comparable(e, reading))
                    .collect();
                let b: Vec<Vec<String>> = b
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| comparable(e, reading))
                    .collect();
                if a != b {
                    failures.push(format!("{name}: message {reference}, segment {k}:\n  ours     {a:?}\n  pydifact {b:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{compared} messages read alike by pydifact");
    assert!(compared >= 10, "only {compared} messages compared");
}

/// One ```sql block of docs/parser.md's "A message as JSON": the backends it is for, its
/// statements, and the result rows its last one shows (`-- → a | b`).
struct DocSql {
    sqlite: bool,
    postgres: bool,
    statements: Vec<String>,
    result: Vec<String>,
}

/// The section "A message as JSON" of docs/parser.md, and its SQL blocks.
fn documented_sql() -> (String, Vec<DocSql>) {
    let doc = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/parser.md")).unwrap();
    let start = doc.find("\n## A message as JSON\n").expect("the section");
    let rest = &doc[start + 1..];
    let section = rest[3..]
        .find("\n## ")
        .map_or(rest, |end| &rest[..end + 3])
        .to_string();
    let mut blocks = Vec::new();
    for block in section.split("```sql\n").skip(1) {
        let body = block.split("```").next().unwrap();
        let mut lines = body.lines();
        let backends = lines.next().unwrap_or_default();
        let (sqlite, postgres) = match backends {
            "-- SQLite" => (true, false),
            "-- PostgreSQL" => (false, true),
            "-- SQLite and PostgreSQL" => (true, true),
            other => panic!("an SQL block of docs/parser.md names no backend: {other}"),
        };
        let mut sql = String::new();
        let mut result = Vec::new();
        for line in lines {
            match line.strip_prefix("-- → ") {
                Some(row) => result.push(row.to_string()),
                None => {
                    sql.push_str(line);
                    sql.push('\n');
                }
            }
        }
        let statements = sql
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        blocks.push(DocSql {
            sqlite,
            postgres,
            statements,
            result,
        });
    }
    (section, blocks)
}

/// The JSON Lines the documented queries read: the sample INVOIC's two messages and the
/// section's made-up message of syntax version 4, as `inspect --segments --json` prints them.
fn documented_rows(section: &str) -> Vec<String> {
    let start = section.find("`UNA:+.?*'UNB").expect("the made-up message") + 1;
    let message = &section[start..start + section[start..].find('`').unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let made_up = dir.path().join("repeated.edi");
    fs::write(&made_up, message).unwrap();
    let run = edi_inbox()
        .args(["inspect", "--segments", "--json"])
        .arg(samples().join("valid/invoic-d96a-unoc-crlf.edi"))
        .arg(&made_up)
        .run();
    run.code(0);
    let lines: Vec<String> = run.out().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{}", run.out());
    assert!(
        lines[2].contains(r#"["QTY",[["1","5"],["2","6"]],["7"]]"#),
        "{}",
        lines[2]
    );
    lines
}

/// Every statement of docs/parser.md's "A message as JSON" runs on SQLite (the one rusqlite
/// builds, as the inbox's) and on the machine's PostgreSQL, over the JSON the program prints,
/// and gives the results the section shows: the document number, date, total and a repeated
/// element's type read with the same paths on both.
#[test]
fn the_documented_sql_reads_the_sample_invoice_on_both_backends() {
    let (section, blocks) = documented_sql();
    let rows = documented_rows(&section);
    let show = |row: Vec<Option<String>>| {
        row.into_iter()
            .map(|v| v.unwrap_or_else(|| "NULL".into()))
            .collect::<Vec<_>>()
            .join(" | ")
    };

    let db = rusqlite::Connection::open_in_memory().unwrap();
    let mut checked = 0;
    for block in blocks.iter().filter(|b| b.sqlite) {
        for (k, sql) in block.statements.iter().enumerate() {
            let last = k + 1 == block.statements.len();
            if sql.contains(":line") {
                for line in &rows {
                    db.execute(sql, rusqlite::named_params! {":line": line})
                        .unwrap_or_else(|e| panic!("SQLite: {sql}: {e}"));
                }
            } else if last && !block.result.is_empty() {
                let mut stmt = db
                    .prepare(sql)
                    .unwrap_or_else(|e| panic!("SQLite: {sql}: {e}"));
                let n = stmt.column_count();
                let got: Vec<String> = stmt
                    .query_map([], |r| {
                        (0..n)
                            .map(|c| {
                                Ok(match r.get::<_, rusqlite::types::Value>(c)? {
                                    rusqlite::types::Value::Text(s) => Some(s),
                                    rusqlite::types::Value::Integer(i) => Some(i.to_string()),
                                    rusqlite::types::Value::Real(f) => Some(f.to_string()),
                                    rusqlite::types::Value::Null => None,
                                    rusqlite::types::Value::Blob(b) => Some(format!("{b:?}")),
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .unwrap()
                    .map(|r| show(r.unwrap()))
                    .collect();
                assert_eq!(got, block.result, "SQLite: {sql}");
                checked += 1;
            } else {
                db.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("SQLite: {sql}: {e}"));
            }
        }
    }
    assert!(checked >= 5, "only {checked} SQLite results checked");

    let Some(pg) = crate::common::pg::PgDb::create() else {
        return;
    };
    let mut checked = 0;
    for block in blocks.iter().filter(|b| b.postgres) {
        for (k, sql) in block.statements.iter().enumerate() {
            let last = k + 1 == block.statements.len();
            if sql.contains("$1") {
                // The line as a literal where the statement takes it: a build without the
                // `postgres` feature has no client to bind it with.
                for line in &rows {
                    pg.batch_execute(
                        &sql.replace("$1", &format!("'{}'", line.replace('\'', "''"))),
                    );
                }
            } else if last && !block.result.is_empty() {
                let got: Vec<String> = pg.rows(sql).into_iter().map(show).collect();
                assert_eq!(got, block.result, "PostgreSQL: {sql}");
                checked += 1;
            } else {
                pg.batch_execute(sql);
            }
        }
    }
    assert!(checked >= 4, "only {checked} PostgreSQL results checked");
}
