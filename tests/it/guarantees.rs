//! The promises of docs/guarantees.md, each tried hard: overlapping runs,
//! `kill -9` at random moments, hostile input, storage faults, and the drift defence.

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use crate::common::site::{Site, assert_same, copy_dir};
use crate::common::{Run, RunExt, Running, StartExt};

fn wait_all(children: Vec<Running>) -> Vec<Run> {
    children.into_iter().map(Running::wait).collect()
}

#[test]
fn four_overlapping_runs_apply_each_interchange_once() {
    overlapping_runs(Site::new());
}

/// The same, four processes on one PostgreSQL inbox.
#[test]
fn four_overlapping_runs_apply_each_interchange_once_on_postgres() {
    if let Some(site) = Site::postgres() {
        overlapping_runs(site);
    }
}

fn overlapping_runs(template: Site) {
    // Both standards in the same runs: a quarter of the new files are ANSI X12.
    let reference = Site::new();
    reference.fill_with(400, 5, true);
    reference.ingest(10);
    let want = reference.state();
    let x12 = want.keys.iter().filter(|k| k.0 == "X12SENDER").count();
    assert!(
        x12 > 20,
        "{x12} X12 interchanges applied of {}",
        want.keys.len()
    );
    for archive in [true, false] {
        for round in 0..3 {
            let site = template.fresh();
            copy_dir(
                &reference.path("drop").parent().unwrap().join("archive"),
                &site.drop(),
            );
            copy_dir(&reference.path("failed"), &site.drop());
            for e in fs::read_dir(site.drop()).unwrap() {
                let p = e.unwrap().path();
                if p.to_string_lossy().ends_with(".error.txt") {
                    fs::remove_file(p).unwrap();
                }
            }
            let runs: Vec<Running> = (0..4)
                .map(|_| {
                    let mut c = if archive {
                        site.ingest_command(7)
                    } else {
                        let mut c = site.command();
                        c.args(["ingest", "-q", "--batch", "7"]).arg(site.drop());
                        c
                    };
                    c.stdout(Stdio::piped()).stderr(Stdio::piped()).start()
                })
                .collect();
            for out in wait_all(runs) {
                let out = out.note(format!("archive={archive} round={round}"));
                let stderr = out.err();
                out.code_in(&[0, 3]);
                assert!(!stderr.contains("locked"), "{stderr}");
                assert!(stderr.is_empty(), "{stderr}");
            }
            let got = site.state();
            let what = format!("archive={archive} round={round}");
            let keys: Vec<_> = got.keys.symmetric_difference(&want.keys).collect();
            assert!(keys.is_empty(), "{what}: keys differ: {keys:?}");
            assert_eq!(got.messages, want.messages, "{what}");
            if archive {
                // Which of two copies with one key wins (new) and which drifts depends on which
                // run commits first; how many of each does not.
                site.assert_all_placed(&got, 400);
                assert_eq!(got.archived.len(), want.archived.len(), "{what}");
                assert_eq!(got.quarantined.len(), want.quarantined.len(), "{what}");
            }
        }
    }
}

#[test]
fn kill_9_at_random_moments_then_finish() {
    kill_9(Site::new());
}

/// The same on a PostgreSQL inbox: a killed run's connection goes, its transaction with it.
#[test]
fn kill_9_at_random_moments_then_finish_on_postgres() {
    if let Some(site) = Site::postgres() {
        kill_9(site);
    }
}

fn kill_9(site: Site) {
    // Both standards in the same runs: a quarter of the new files are ANSI X12.
    let reference = Site::new();
    reference.fill_with(2000, 21, true);
    reference.ingest(20);
    let want = reference.state();
    let x12 = want.keys.iter().filter(|k| k.0 == "X12SENDER").count();
    assert!(
        x12 > 100,
        "{x12} X12 interchanges applied of {}",
        want.keys.len()
    );

    site.fill_with(2000, 21, true);
    let mut rng = crate::common::synth::Synth::new(99);
    let mut kills = 0;
    for _ in 0..25 {
        let mut child = site
            .ingest_command(20)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(10 + rng.below(90)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // Whatever the moment, what is on disk is consistent.
        site.state();
    }
    let out = site.ingest(20);
    // 3 where rejected or drifted files were still left for this run, 0 where killed runs had
    // already quarantined them all.
    out.code_in(&[0, 3]);
    let got = site.state();
    site.assert_all_placed(&got, 2000);
    assert_same(&got, &want, "after kill -9");
    eprintln!("{kills} of 25 runs were killed mid-way");
    assert!(kills >= 5, "only {kills} runs were killed mid-way");
}

use crate::common::site::{Tmpfs, file_hash};

#[test]
fn a_full_disk_stops_the_run_and_the_next_run_with_room_completes() {
    let reference = Site::new();
    reference.fill(300, 8);
    reference.ingest(10);
    let want = reference.state();

    let mut site = Site::new();
    site.fill(300, 8);
    let Some(fs_) = Tmpfs::mount(&site.path("dbfs"), "600k") else {
        return;
    };
    site.set_db(fs_.path.join("inbox.db"));
    let out = site.ingest(10);
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.code(1);
    assert!(stderr.contains("full"), "{stderr}");
    let partial = site.state();
    assert!(partial.keys.is_subset(&want.keys));
    assert!(
        partial.keys.len() < want.keys.len(),
        "the disk never filled"
    );
    assert!(fs::read_dir(site.drop()).unwrap().count() > 0);

    fs_.remount("size=64m");
    let out = site.ingest(10);
    out.code(3);
    let got = site.state();
    site.assert_all_placed(&got, 300);
    assert_same(&got, &want, "after the disk had room again");
}

#[test]
fn a_read_only_database_is_a_clear_error_and_left_untouched() {
    let mut site = Site::new();
    let Some(fs_) = Tmpfs::mount(&site.path("dbfs"), "16m") else {
        return;
    };
    site.set_db(fs_.path.join("inbox.db"));
    site.fill(10, 1);
    site.ingest(10).code(0);
    site.fill(20, 2);
    let before = file_hash(&site.db());
    fs_.remount("ro");
    let out = site.ingest(10);
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.code(1);
    assert!(
        stderr.contains("read") || stderr.contains("unable to open"),
        "{stderr}"
    );
    assert_eq!(file_hash(&site.db()), before);
    assert_eq!(
        fs::read_dir(site.drop()).unwrap().count(),
        20,
        "a file moved"
    );
    fs_.remount("rw");
    site.ingest(10).code_in(&[0, 3]);
}

#[test]
fn a_lock_held_past_the_busy_timeout_is_a_clear_error() {
    let site = Site::new();
    site.fill(5, 3);
    site.ingest(10).code(0);
    site.fill(12, 4);
    let holder = rusqlite::Connection::open(site.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = site.ingest_command(10).args(["--busy-timeout", "1s"]).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.code(1);
    assert!(
        stderr.contains("locked") && stderr.contains("--busy-timeout"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_dir(site.drop()).unwrap().count(),
        12,
        "a file moved"
    );
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    site.ingest(10).code_in(&[0, 3]);
}

#[test]
fn a_corrupt_database_is_a_clear_error_and_left_untouched() {
    let site = Site::new();
    site.fill(40, 6);
    site.ingest(10);
    // Fold the write-ahead log into the file, then overwrite pages after the header.
    rusqlite::Connection::open(site.db())
        .unwrap()
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
        .unwrap();
    let mut bytes = fs::read(site.db()).unwrap();
    let len = bytes.len();
    for (i, b) in bytes[4096..len].iter_mut().enumerate() {
        *b = (i * 7 + 13) as u8;
    }
    fs::write(site.db(), &bytes).unwrap();
    let before = file_hash(&site.db());
    site.fill(45, 7);
    let out = site.ingest(10);
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.code(1);
    assert!(
        stderr.contains("malformed") || stderr.contains("not a database"),
        "{stderr}"
    );
    assert_eq!(file_hash(&site.db()), before);
}

use crate::common::{json_lines, samples};

per_backend! {
    fn hostile_input_is_rejected_with_file_and_byte_and_the_run_goes_on(site) {
        let d = site.drop();
        let good = fs::read(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        fs::write(d.join("a-empty.edi"), b"").unwrap();
        fs::write(d.join("b-truncated.edi"), &good[..good.len() / 2]).unwrap();
        fs::copy(
            samples().join("broken/binary-garbage.bin"),
            d.join("c-garbage.bin"),
        )
        .unwrap();
        fs::write(d.join("d-nul.edi"), b"UNB\0+UNOC:3+S+R+1:1+X'\0\0UNZ+0+X'").unwrap();
        let mut million = b"UNB+UNOC:3+S+R+240101:1200+MILLION'UNH+1+ORDERS:D:96A:UN'FTX".to_vec();
        million.extend(std::iter::repeat_n(&b"+E"[..], 1_000_000).flatten());
        million.extend_from_slice(b"'UNT+3+1'UNZ+1+MILLION'");
        fs::write(d.join("e-million-elements.edi"), &million).unwrap();
        fs::write(
            d.join("f-release-at-eof.edi"),
            b"UNB+UNOC:3+S+R+1:1+X'UNZ+0+X?",
        )
        .unwrap();
        fs::write(d.join("g-short-una.edi"), b"UNA:+.").unwrap();
        fs::copy(
            samples().join("broken/unt-count-wrong.edi"),
            d.join("h-counts.edi"),
        )
        .unwrap();
        fs::copy(
            samples().join("broken/empty-control-ref.edi"),
            d.join("i-no-ref.edi"),
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let name = std::ffi::OsStr::from_bytes(b"j-name-\xff\xfe.edi");
            fs::write(d.join(name), &good).unwrap();
            std::os::unix::fs::symlink(".", d.join("k-loop")).unwrap();
            let mkfifo = std::process::Command::new("mkfifo")
                .arg(site.path("fifo"))
                .status();
            assert!(mkfifo.unwrap().success());
        }
        let out = site
            .command()
            .args(["ingest", "--json", "--archive"])
            .arg(site.path("archive"))
            .arg("--quarantine")
            .arg(site.path("failed"))
            .arg(&d)
            .arg("/proc/self/mem")
            .arg(site.path("fifo"))
            .run();
        out.code(3);
        let lines = json_lines(&out.stdout);
        let by_file = |part: &str| -> Vec<&serde_json::Value> {
            lines
                .iter()
                .filter(|l| l["file"].as_str().is_some_and(|f| f.contains(part)))
                .collect()
        };
        for part in [
            "a-empty",
            "b-truncated",
            "c-garbage",
            "d-nul",
            "f-release-at-eof",
            "g-short-una",
            "h-counts",
            "i-no-ref",
        ] {
            let l = by_file(part);
            assert_eq!(l.len(), 1, "{part}: {l:?}");
            assert_eq!(l[0]["status"], "rejected", "{part}");
            let offset = l[0]["offset"].as_u64().unwrap();
            let error = l[0]["error"].as_str().unwrap();
            assert!(error.contains(&format!("byte {offset}")), "{part}: {error}");
        }
        assert_eq!(by_file("e-million")[0]["status"], "new");
        assert_eq!(by_file("j-name-")[0]["status"], "new");
        for unreadable in ["/proc/self/mem", "fifo"] {
            let l = by_file(unreadable);
            assert_eq!(l[0]["status"], "rejected", "{l:?}");
        }
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["new"], 2);
        assert_eq!(summary["rejected"], 10);
        // Everything that could be read is placed; the loop was never followed.
        let left: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["k-loop"]);
        assert_eq!(fs::read_dir(site.path("archive")).unwrap().count(), 2);
        assert_eq!(fs::read_dir(site.path("failed")).unwrap().count(), 16);
    }
}

#[test]
fn a_200_mb_endless_segment_is_rejected_without_hanging() {
    let site = Site::new();
    let path = site.drop().join("endless.edi");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(fs::File::create(&path).unwrap());
        f.write_all(b"UNB+UNOC:3+S+R+240101:1200+BIG'UNH+1+ORDERS:D:96A:UN'FTX+")
            .unwrap();
        let block = vec![b'A'; 1 << 20];
        for _ in 0..200 {
            f.write_all(&block).unwrap();
        }
    }
    // Over the default --max-size of 100 MiB: rejected without being read.
    let out = site
        .command()
        .args(["ingest", "--json"])
        .arg(site.drop())
        .run();
    out.code(3);
    let l = &json_lines(&out.stdout)[0];
    assert!(
        l["error"]
            .as_str()
            .unwrap()
            .contains("larger than --max-size"),
        "{l}"
    );
    // Allowed in, it is read and rejected for what it is.
    let out = site
        .command()
        .args(["ingest", "--json", "--max-size", "300MiB"])
        .arg(site.drop())
        .run();
    out.code(3);
    let l = &json_lines(&out.stdout)[0];
    let error = l["error"].as_str().unwrap();
    assert!(
        error.contains("FTX at byte 53 has no segment terminator"),
        "{error}"
    );
}

per_backend! {
    fn drift_is_never_applied_even_within_one_uncommitted_batch(site) {
        let original = fs::read_to_string(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        let changed = original.replace("QTY+21:5", "QTY+21:500");
        fs::write(site.drop().join("a.edi"), &original).unwrap();
        fs::write(site.drop().join("b.edi"), &changed).unwrap();
        // Both copies in one file, too.
        fs::write(site.drop().join("c.edi"), format!("{original}{changed}")).unwrap();
        let out = site
            .command()
            .args(["ingest", "--json", "--batch", "1000"])
            .arg(site.drop())
            .run();
        let statuses: Vec<String> = json_lines(&out.stdout)
            .iter()
            .filter_map(|l| l["status"].as_str().map(String::from))
            .collect();
        assert_eq!(statuses, ["new", "drift", "duplicate", "drift"]);
        out.code(3);
        assert_eq!(site.stat("interchanges"), 1);
        let raw = site
            .cmd()
            .args(["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--raw"])
            .run()
            .code(0)
            .stdout
            .clone();
        assert!(String::from_utf8_lossy(&raw).contains("QTY+21:5'"));
    }
}

#[test]
fn moved_files_never_leave_the_archive_folder_whatever_their_name() {
    let site = Site::new();
    let good = fs::read(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
    let names = [
        "-rf.edi",
        " spaced .edi",
        "new\nline.edi",
        "ünïcode.edi",
        "x..edi",
        "a..b",
    ];
    for n in names {
        fs::write(site.drop().join(n), &good).unwrap();
    }
    let out = site
        .command()
        .args(["ingest", "-q", "--archive"])
        .arg(site.path("archive"))
        .arg(site.drop())
        .run();
    out.code(0);
    let archived: Vec<String> = fs::read_dir(site.path("archive"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(archived.len(), names.len(), "{archived:?}");
    // Nothing else anywhere: only the drop folder (now empty), the archive and the database.
    let mut top: Vec<String> = fs::read_dir(site.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    top.retain(|n| !n.starts_with("inbox.db"));
    assert_eq!(top, ["archive", "drop"]);
}

/// Every statement built with `format!` (read whole, however many lines it spans) puts values
/// in bound parameters, never in its text: what it interpolates is a constant (a name in
/// capitals), a table name from the fixed list of outboxes (`Outbox::table`), the schema as
/// `Target::sql_schema` quotes it after checking it is a plain name, a number, or, for the
/// function PostgreSQL makes of a mapping file (issue 39), the operator's own statements as
/// start-up checked them and the names and types edi-inbox writes around them.
#[test]
fn all_sql_uses_bound_parameters() {
    let mut offenders = Vec::new();
    let mut statements = 0;
    for entry in walkdir::WalkDir::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")) {
        let entry = entry.unwrap();
        // A backend's tests.rs may build what it likes.
        if entry.path().extension().is_none_or(|e| e != "rs") || entry.file_name() == "tests.rs" {
            continue;
        }
        let text = fs::read_to_string(entry.path()).unwrap();
        let (n, found) = sql_offenders(&entry.path().display().to_string(), &text);
        statements += n;
        offenders.extend(found);
    }
    assert!(
        statements >= 8,
        "only {statements} statements built with format! were found"
    );
    assert!(
        offenders.is_empty(),
        "SQL built with format! from something else than constants, table and schema names:\n{}",
        offenders.join("\n")
    );
}

/// The guard itself: it finds a value put in a statement's text, also after a `#[cfg(test)]`
/// that only declares a module or marks a helper, and ignores the unit tests at a file's end.
#[test]
fn the_sql_guard_finds_what_it_must() {
    let text = r##"
#[cfg(test)]
mod tests;
fn a(c: &Connection, key: &str) {
    c.execute(&format!("SELECT 1 FROM inbox WHERE sender = '{key}'"), []);
    c.execute(&format!("DELETE FROM {} WHERE id = {}", Outbox::Messages.table(), id), []);
    c.execute(&format!("UPDATE {} SET n = {LIMIT}", outbox.table()), []);
    c.execute(&format!("SELECT {} FROM {}", idents(&columns), ident(name)), []);
}
#[cfg(test)]
mod tests {
    fn b() { format!("SELECT '{anything}'"); }
}
"##;
    let (statements, offenders) = sql_offenders("x.rs", text);
    assert_eq!(statements, 4, "{offenders:?}");
    assert_eq!(
        offenders,
        [
            "x.rs:5: {key} is not a constant",
            "x.rs:6: {} is Some(\" id\")",
        ]
    );
    // The holes of the operator's function pass in its own file only.
    let function = r#"
fn f() { format!("CREATE FUNCTION {function}({arguments}) AS $q$ {operator_sql} $q$"); }
"#;
    assert_eq!(
        sql_offenders("/src/inbox/postgres/effects.rs", function),
        (1, vec![])
    );
    assert_eq!(
        sql_offenders("/src/inbox/sqlite/effects.rs", function).1,
        [
            "/src/inbox/sqlite/effects.rs:2: {function} is not a constant",
            "/src/inbox/sqlite/effects.rs:2: {arguments} is not a constant",
            "/src/inbox/sqlite/effects.rs:2: {operator_sql} is not a constant",
        ]
    );
}

/// The holes of the statements that make a mapping file a PostgreSQL function and call it
/// (`inbox/postgres/effects.rs`): the operator's statements (their values `$N` placeholders,
/// the arguments), the function's name (a number), its argument types (`sql_type`'s), the
/// call's columns (numbered) and arrays (numbered, typed). None of them holds partner data.
const OPERATOR_FUNCTION: &[&str] = &["operator_sql", "function", "arguments", "columns", "arrays"];

/// The one file whose statements may fill those holes.
const OPERATOR_FUNCTION_FILE: &str = "src/inbox/postgres/effects.rs";

/// Whether `hole` in `file` is one of those.
fn operator_function(file: &str, hole: &str) -> bool {
    file.ends_with(OPERATOR_FUNCTION_FILE) && OPERATOR_FUNCTION.contains(&hole)
}

/// How many statements built with `format!` `text` holds before its unit tests, and each
/// place where one interpolates something else than a constant (a name in capitals), an
/// outbox's table name, the checked schema or a number of milliseconds.
fn sql_offenders(file: &str, text: &str) -> (usize, Vec<String>) {
    const KEYWORDS: &[&str] = &[
        "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "SET", "CREATE", "ALTER", "DROP", "PRAGMA",
        "REPLACE", "VACUUM", "ANALYZE", "TRUNCATE", "LOCK", "COPY",
    ];
    let safe_arg = |arg: &str| {
        let arg = arg.trim();
        arg.ends_with(".table()")
            || arg.ends_with(".sql_schema()")
            || arg.contains(".as_millis()")
            // A name quoted as an identifier (`migrate`'s tables and columns, from the
            // schema's catalogue): no parameter can stand for a name.
            || arg.starts_with("ident(")
            || arg.starts_with("idents(")
    };
    // The unit tests at a file's end (`mod tests { ... }`) may build what they like; a
    // `#[cfg(test)]` anywhere else (a `mod tests;` declaration, a test-only helper) ends nothing.
    let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
    let mut offenders = Vec::new();
    let mut statements = 0;
    for (at, _) in code.match_indices("format!(") {
        let (literal, args) = format_call(&code[at + "format!(".len()..]);
        let first = literal.split_whitespace().next().unwrap_or("");
        if !KEYWORDS.contains(&first) {
            continue;
        }
        statements += 1;
        let line = code[..at].lines().count();
        let place = format!("{file}:{line}");
        let mut positional = 0;
        for hole in literal.split('{').skip(1) {
            let name: String = hole
                .chars()
                .take_while(|c| *c != '}' && *c != ':')
                .collect();
            if name.is_empty() || name.chars().all(|c| c.is_ascii_digit()) {
                let k = name.parse().unwrap_or(positional);
                positional += usize::from(name.is_empty());
                match args.get(k) {
                    Some(arg) if safe_arg(arg) => {}
                    other => offenders.push(format!("{place}: {{{name}}} is {other:?}")),
                }
            } else if !name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && !operator_function(file, &name)
            {
                offenders.push(format!("{place}: {{{name}}} is not a constant"));
            }
        }
    }
    (statements, offenders)
}

/// The first string literal of a `format!(` call (its text, escapes as they stand) and the
/// arguments after it, split at the commas outside brackets and strings; `rest` starts right
/// after the opening parenthesis.
fn format_call(rest: &str) -> (String, Vec<String>) {
    let b = rest.as_bytes();
    let mut i = 0;
    let mut literal = String::new();
    let mut args = Vec::new();
    let mut current = String::new();
    let mut depth = 0;
    let mut in_literal_done = false;
    while i < b.len() {
        let c = b[i] as char;
        if c == '"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let s = &rest[start..i.min(rest.len())];
            if in_literal_done {
                current.push_str(s);
            } else {
                literal = s.to_string();
                in_literal_done = true;
            }
        } else if c == '/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if matches!(c, '(' | '[' | '{') {
            depth += 1;
            current.push(c);
        } else if matches!(c, ')' | ']' | '}') {
            if depth == 0 {
                break;
            }
            depth -= 1;
            current.push(c);
        } else if c == ',' && depth == 0 {
            if in_literal_done && !current.trim().is_empty() {
                args.push(std::mem::take(&mut current));
            }
            current.clear();
        } else if in_literal_done {
            current.push(c);
        }
        i += 1;
    }
    if !current.trim().is_empty() {
        args.push(current);
    }
    (literal, args)
}
