//! `edi-inbox ingest` driven as cron runs it, in a temporary folder.

use std::fs;
use std::path::Path;
use std::process::Stdio;

use crate::common::site::Site;
use crate::common::synth::{Layout, Synth};
use crate::common::{RunExt, StartExt};
use crate::common::{edi_inbox, samples};
use predicates::prelude::*;
use serde_json::Value;

fn statuses(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["status"].as_str().map(str::to_string))
        .collect()
}

fn summary(lines: &[Value]) -> &Value {
    &lines.last().unwrap()["summary"]
}

per_backend! {
    fn new_duplicate_drift_and_rejected(site) {
        site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "a.edi");
        let lines = site.ingest_json(&[]).code(0).json();
        assert_eq!(statuses(&lines), ["new"]);
        let l = &lines[0];
        assert_eq!(l["sender"], "5412345000013");
        assert_eq!(l["recipient"], "4012345000023");
        assert_eq!(l["control_ref"], "INV0001");
        assert_eq!(l["messages"], 2);
        assert_eq!(l["sha256"].as_str().unwrap().len(), 64);
        assert_eq!(
            summary(&lines),
            &serde_json::json!({"files": 1, "new": 1, "duplicate": 0, "drift": 0, "rejected": 0, "refused": 0, "skipped": 0})
        );
        assert_eq!(site.stat("interchanges"), 1);
        assert_eq!(site.stat("messages"), 2);
        assert_eq!(
            site.unpublished(),
            2
        );

        // The same file again: a duplicate, nothing written but the sighting.
        let lines = site.ingest_json(&[]).code(0).json();
        assert_eq!(statuses(&lines), ["duplicate"]);
        assert_eq!(site.stat("interchanges"), 1);
        assert_eq!(site.unpublished(), 2, "no event more");
        assert_eq!(
            site.stat("duplicates"),
            1
        );

        // Same key, other content: drift, never applied, bytes kept, exit 3.
        let changed = String::from_utf8_lossy(
            &fs::read(samples().join("valid/invoic-d96a-unoc-crlf.edi")).unwrap(),
        )
        .replace("PO-4711", "PO-4712");
        fs::remove_file(site.drop().join("a.edi")).unwrap();
        site.put("b.edi", changed.as_bytes());
        let lines = site.ingest_json(&[]).code(3).json();
        assert_eq!(statuses(&lines), ["drift"]);
        assert_ne!(lines[0]["sha256"], lines[0]["stored_sha256"]);
        assert_eq!(site.stat("interchanges"), 1);
        assert_eq!(
            site.count("SELECT count(*) FROM sightings WHERE status = 'drift' AND length(payload) > 0"),
            1
        );

        // A broken file: rejected with its reason and offset, recorded with its bytes.
        fs::remove_file(site.drop().join("b.edi")).unwrap();
        site.put_sample("broken/unt-count-wrong.edi", "c.edi");
        let lines = site.ingest_json(&[]).code(3).json();
        assert_eq!(statuses(&lines), ["rejected"]);
        assert_eq!(lines[0]["offset"], 118);
        assert!(
            lines[0]["error"]
                .as_str()
                .unwrap()
                .contains("UNT at byte 118")
        );
        assert_eq!(
            site.count(
                "SELECT count(*) FROM rejections r JOIN rejected_files f ON f.id = r.file_id
                 WHERE r.byte_offset = 118 AND length(f.bytes) > 0"
            ),
            1
        );
        // Seen again, it is counted, not stored twice.
        site.ingest_json(&[]);
        assert_eq!(site.count("SELECT count(*) FROM rejections"), 1);
        assert_eq!(site.count("SELECT times_seen FROM rejections"), 2);
        assert_eq!(site.stat("rejected"), 1);
        assert_eq!(site.count("SELECT times_seen FROM rejected_files"), 2);
    }
}

per_backend! {
    fn a_redelivery_with_other_line_breaks_is_a_duplicate(site) {
        let crlf = fs::read(samples().join("valid/invoic-d96a-unoc-crlf.edi")).unwrap();
        site.put("first.edi", &crlf);
        assert_eq!(statuses(&site.ingest_json(&[]).json()), ["new"]);
        fs::remove_file(site.drop().join("first.edi")).unwrap();
        // No line breaks and no UNA at all: the same payload.
        let bare: Vec<u8> = crlf[b"UNA:+.? '".len()..]
            .iter()
            .copied()
            .filter(|&b| b != b'\r' && b != b'\n')
            .collect();
        assert!(bare.starts_with(b"UNB+"));
        site.put("again.edi", &bare);
        let lines = site.ingest_json(&[]).code(0).json();
        assert_eq!(statuses(&lines), ["duplicate"]);
    }
}

per_backend! {
    fn several_interchanges_in_one_file_each_decided(site) {
        site.put_sample("valid/two-interchanges.edi", "two.edi");
        site.put_sample("broken/good-then-bad.edi", "mixed.edi");
        let (archive, failed) = (site.path("archive"), site.path("failed"));
        let lines = site.ingest_json(&[
            "--archive",
            archive.to_str().unwrap(),
            "--quarantine",
            failed.to_str().unwrap(),
        ]).code(3).json();
        let got: Vec<(String, String)> = lines
            .iter()
            .filter(|l| l.get("status").is_some())
            .map(|l| {
                (
                    l["file"]
                        .as_str()
                        .unwrap()
                        .rsplit('/')
                        .next()
                        .unwrap()
                        .to_string(),
                    l["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want = [
            ("mixed.edi", "new"),
            ("mixed.edi", "rejected"),
            ("two.edi", "new"),
            ("two.edi", "new"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(site.stat("inbox"), 3);
        // A file with any rejected interchange goes to quarantine; its good one stays applied.
        assert_eq!(
            site.files_in("failed"),
            ["mixed.edi", "mixed.edi.error.txt"]
        );
        assert_eq!(site.files_in("archive"), ["two.edi"]);
    }
}

per_backend! {
    fn archive_and_quarantine_never_overwrite(site) {
        fs::create_dir_all(site.path("archive")).unwrap();
        fs::create_dir_all(site.path("failed")).unwrap();
        fs::write(site.path("archive/in.edi"), "older file").unwrap();
        fs::write(site.path("failed/bad.edi"), "older bad file").unwrap();
        site.put_sample("valid/orders-d01b-no-una.edi", "in.edi");
        site.put_sample("broken/truncated-no-unz.edi", "bad.edi");
        site.ingest_json(&[
            "--archive",
            &site.path("archive").to_string_lossy(),
            "--quarantine",
            &site.path("failed").to_string_lossy(),
        ]).code(3);
        assert_eq!(site.files_in("drop"), Vec::<String>::new());
        assert_eq!(site.files_in("archive"), ["in.1.edi", "in.edi"]);
        assert_eq!(
            fs::read_to_string(site.path("archive/in.edi")).unwrap(),
            "older file"
        );
        assert_eq!(
            site.files_in("failed"),
            ["bad.1.edi", "bad.1.edi.error.txt", "bad.edi"]
        );
        let reason = fs::read_to_string(site.path("failed/bad.1.edi.error.txt")).unwrap();
        assert!(
            reason.contains("the file ends before interchange B0001 has its UNZ"),
            "{reason}"
        );
        assert!(reason.contains("at byte 127"), "{reason}");
        // The same interchange delivered again is a duplicate, archived beside the first.
        site.put_sample("valid/orders-d01b-no-una.edi", "in.edi");
        let lines = site
            .ingest_json(&["--archive", &site.path("archive").to_string_lossy()])
            .code(0)
            .json();
        assert_eq!(statuses(&lines), ["duplicate"]);
        assert_eq!(site.files_in("archive"), ["in.1.edi", "in.2.edi", "in.edi"]);
    }
}

per_backend! {
    fn a_corrected_resend_after_a_rejection_is_accepted(site) {
        site.put_sample("broken/unt-count-wrong.edi", "po.edi");
        assert_eq!(statuses(&site.ingest_json(&[]).json()), ["rejected"]);
        assert_eq!(site.stat("inbox"), 0);
        let fixed =
            String::from_utf8_lossy(&fs::read(samples().join("broken/unt-count-wrong.edi")).unwrap())
                .replace("UNT+5+1", "UNT+4+1");
        site.put("po.edi", fixed.as_bytes());
        let lines = site.ingest_json(&[]).code(0).json();
        assert_eq!(statuses(&lines), ["new"]);
    }
}

per_backend! {
    fn young_files_are_skipped_and_left_in_place(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "fresh.edi");
        let archive = site.path("archive");
        let lines = site.ingest_json(&["--min-age", "1h", "--archive", archive.to_str().unwrap()]).code(0).json();
        assert_eq!(statuses(&lines), ["skipped"]);
        assert_eq!(summary(&lines)["skipped"], 1);
        assert_eq!(site.files_in("drop"), ["fresh.edi"]);
        assert_eq!(site.stat("inbox"), 0);
    }
}

per_backend! {
    fn partial_and_hidden_uploads_are_not_touched(site) {
        for name in ["x.tmp", "y.part", "z.partial", ".hidden.edi"] {
            site.put_sample("valid/orders-d01b-no-una.edi", name);
        }
        let archive = site.path("archive");
        let lines = site.ingest_json(&["--archive", archive.to_str().unwrap()]).code(0).json();
        assert_eq!(summary(&lines)["files"], 0);
        assert_eq!(site.files_in("drop").len(), 4);
    }
}

per_backend! {
    /// A quarantined file moved back to the drop folder with its note (issue 40, item 5): the
    /// file is decided again, and applied once fixed; the note (`NAME.error.txt`) is no
    /// interchange and is passed over, not rejected and quarantined in its turn.
    fn a_quarantined_file_goes_back_with_its_note_and_only_the_file_is_read(site) {
        site.put_sample("broken/unz-count-wrong.edi", "inv.edi");
        let quarantine = site.path("failed");
        let q = quarantine.to_str().unwrap();
        let lines = site.ingest_json(&["--quarantine", q]).code(3).json();
        assert_eq!(summary(&lines)["rejected"], 1);
        let note = quarantine.join("inv.edi.error.txt");
        assert!(note.exists(), "the quarantine's note");
        // Fixed, and moved back with its note, as an operator does.
        site.put_sample("valid/orders-d01b-no-una.edi", "inv.edi");
        fs::rename(&note, site.drop().join("inv.edi.error.txt")).unwrap();
        fs::remove_file(quarantine.join("inv.edi")).unwrap();
        let lines = site.ingest_json(&["--quarantine", q]).code(0).json();
        assert_eq!(summary(&lines)["files"], 1, "the note was read as input: {lines:?}");
        assert_eq!(statuses(&lines), ["new"]);
        assert!(site.drop().join("inv.edi.error.txt").exists(), "the note is left alone");
        assert!(!quarantine.join("inv.edi.error.txt.error.txt").exists());
    }
}

#[test]
fn a_file_that_is_not_a_database_is_fatal_and_untouched() {
    let site = Site::new();
    fs::write(site.db(), "these are my tax records, not a database").unwrap();
    site.put_sample("valid/orders-d01b-no-una.edi", "in.edi");
    edi_inbox()
        .arg("--db")
        .arg(site.db())
        .args(["ingest", "--archive"])
        .arg(site.path("archive"))
        .arg(site.drop())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("not an edi-inbox database"));
    assert_eq!(
        fs::read_to_string(site.db()).unwrap(),
        "these are my tax records, not a database"
    );
    assert_eq!(site.files_in("drop"), ["in.edi"]);
    assert!(!site.path("inbox.db-wal").exists());
}

/// Issue 10, item 14: leaving out `--db` silently started a new inbox in the current folder,
/// which applied every redelivery as new. A database is created only where `--db` or
/// `EDI_INBOX_DB` names it; without either, `edi-inbox.db` in the current folder is used if it
/// is there, and its absence is a usage error that touches nothing.
#[test]
fn the_database_comes_from_edi_inbox_db_or_the_current_folder() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "in.edi");
    edi_inbox()
        .current_dir(site.dir.path())
        .args(["ingest", "drop"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(
            "a new one is created only where --db or EDI_INBOX_DB names it",
        ));
    assert!(!site.path("edi-inbox.db").exists());
    edi_inbox()
        .current_dir(site.dir.path())
        .env("EDI_INBOX_DB", site.path("other.db"))
        .args(["ingest", "-q", "drop"])
        .assert()
        .code(0)
        .stdout(predicates::str::starts_with(
            "1 file: 1 new, 0 duplicate, 0 drift, 0 rejected, 0 skipped  (at 20",
        ));
    edi_inbox()
        .current_dir(site.dir.path())
        .args(["--db", "edi-inbox.db", "ingest", "-q", "drop"])
        .assert()
        .code(0);
    // Once it is there, the current folder's database is used without naming it.
    edi_inbox()
        .current_dir(site.dir.path())
        .args(["ingest", "-q", "drop"])
        .assert()
        .code(0)
        .stdout(predicates::str::starts_with(
            "1 file: 0 new, 1 duplicate, 0 drift, 0 rejected, 0 skipped  (at 20",
        ));
}

per_backend! {
    fn human_output_has_a_line_per_interchange_and_quiet_only_problems(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        site.put_sample("broken/unz-count-wrong.edi", "b.edi");
        let run = |q: bool| {
            let mut cmd = edi_inbox();
            cmd.arg("--db").arg(site.db_arg()).arg("ingest");
            if q {
                cmd.arg("-q");
            }
            cmd.arg(site.drop()).run()
        };
        let out = run(false);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("new        ")
                && text.contains("SENDER+ONE -> RECEIVER  ref ORD'0042  1 message"),
            "{text}"
        );
        assert!(
            text.contains("rejected   ") && text.contains("UNZ at byte 127"),
            "{text}"
        );
        assert!(
            text.contains("\n2 files: 1 new, 0 duplicate, 0 drift, 1 rejected, 0 skipped  (at 20"),
            "{text}"
        );
        let out = run(true);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("duplicate  "), "{text}");
        assert!(text.contains("rejected   "), "{text}");
        out.code(3);
    }
}

fn synth_drop(dir: &Path, files: usize, seed: u64) -> usize {
    let mut g = Synth::new(seed);
    let mut interchanges = 0;
    for n in 0..files {
        let layout: Layout = g.layout();
        let messages = 1 + g.below(4) as usize;
        let data = g.interchange("SENDER", "RECIPIENT", &format!("C{n:06}"), messages, layout);
        fs::write(dir.join(format!("f{n:05}.edi")), data).unwrap();
        interchanges += 1;
    }
    interchanges
}

#[test]
fn two_overlapping_runs_write_each_interchange_once() {
    for archive in [true, false] {
        let site = Site::new();
        let n = synth_drop(&site.drop(), 300, 7);
        let spawn = || {
            let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"));
            cmd.arg("--db")
                .arg(site.db())
                .args(["ingest", "--json", "--batch", "7"]);
            if archive {
                cmd.arg("--archive").arg(site.path("archive"));
            }
            cmd.arg(site.drop())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .start()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait(), b.wait());
        for out in [&a, &b] {
            out.code(0);
        }
        let new: usize = [&a, &b]
            .iter()
            .map(|o| summary(&o.json())["new"].as_u64().unwrap() as usize)
            .sum();
        assert_eq!(new, n, "archive={archive}");
        assert_eq!(site.stat("interchanges") as usize, n);
        assert_eq!(site.stat("inbox") as usize, n);
        assert_eq!(
            site.count("SELECT count(DISTINCT control_ref) FROM interchanges") as usize,
            n
        );
        if archive {
            assert_eq!(site.files_in("drop").len(), 0);
            assert_eq!(site.files_in("archive").len(), n);
        }
    }
}

#[test]
fn bad_arguments_are_usage_errors_and_touch_nothing() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    for bad in [
        &["--min-age", "soon"][..],
        &["--batch", "0"],
        &["--batch", "-1"],
        &["--max-size", "lots"],
        &["--max-size", "5T"],
        &["--bogus"],
    ] {
        edi_inbox()
            .arg("--db")
            .arg(site.db())
            .arg("ingest")
            .args(bad)
            .arg(site.drop())
            .assert()
            .code(2);
    }
    edi_inbox()
        .arg("--db")
        .arg(site.db())
        .arg("ingest")
        .assert()
        .code(2);
    edi_inbox()
        .args(["--busy-timeout", "never", "ingest"])
        .arg(site.drop())
        .assert()
        .code(2);
    assert!(!site.db().exists());
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

#[test]
fn a_database_from_a_newer_edi_inbox_is_fatal_and_untouched() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    site.ingest_json(&[]).code(0);
    site.sql("PRAGMA user_version = 99; PRAGMA wal_checkpoint(TRUNCATE);");
    let before = crate::common::site::file_hash(&site.db());
    site.cmd()
        .args(["ingest", "--archive"])
        .arg(site.path("archive"))
        .arg(site.drop())
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("schema version 99")
                .and(predicate::str::contains("newer edi-inbox")),
        );
    assert_eq!(crate::common::site::file_hash(&site.db()), before);
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

per_backend! {
    /// Messages go in eight rows a statement and the rest one by one: for every count from 1 to 20,
    /// each message has its row (position, reference, type, group, byte range) and one event, in order.
    fn every_message_gets_its_row_and_its_event_however_many(site) {
        let mut g = Synth::new(7);
        let mut expected = Vec::new();
        for count in 1..=20 {
            let layout = Layout {
                una: count % 2 == 0,
                crlf: count % 3 == 0,
                group: count % 4 == 0,
            };
            let control_ref = format!("M{count:03}");
            let data = g.interchange("SENDER", "RECIPIENT", &control_ref, count, layout);
            let i = edi_inbox::edifact::interchanges(&data)
                .next()
                .unwrap()
                .unwrap();
            for (n, m) in i.messages.iter().enumerate() {
                let group = m.group.map(|k| i.groups[k].reference.to_string());
                expected.push(vec![
                    Some(control_ref.clone()),
                    Some((n + 1).to_string()),
                    Some(m.reference.to_string()),
                    Some(m.message_type.to_string()),
                    group,
                    Some(m.span.start.to_string()),
                    Some(m.span.end.to_string()),
                    Some(format!("edifact.{}.received", m.message_type)),
                ]);
            }
            site.put(&format!("{control_ref}.edi"), &data);
        }
        site.ingest_json(&[]).code(0);
        let got = site.rows(
            "SELECT i.control_ref, m.position, m.reference, m.message_type, m.group_ref,
                    m.raw_start, m.raw_end, o.event_type
             FROM messages m JOIN interchanges i ON i.id = m.interchange_id
             JOIN outbox o ON o.message_id = m.id
             ORDER BY i.control_ref, o.id",
        );
        assert_eq!(expected.len(), 210);
        assert_eq!(got, expected);
        // One event each, none published.
        assert_eq!(site.unpublished(), 210);
    }
}

/// An inbox written by an older edi-inbox (schema version 2: before compressed bytes, rejected
/// files of their own, hashes with the service characters, and id sequences) is brought up to
/// date when `ingest` opens it, and keeps its meaning: a redelivery of what it holds is a
/// duplicate, its rejected file is kept once, and new interchanges get ids after its own.
#[test]
fn an_inbox_from_an_older_schema_is_upgraded_and_keeps_its_meaning() {
    use sha2::Digest;
    let site = Site::new();
    let sample = fs::read(samples().join("valid/two-interchanges.edi")).unwrap();
    // The second interchange, under `^|.! #`, as the old version stored it: plain bytes, hashed
    // without its service characters.
    let start = sample.windows(3).rposition(|w| w == b"UNA").unwrap();
    let raw = &sample[start..];
    let segments: Vec<u8> = raw[9..]
        .iter()
        .copied()
        .filter(|&b| b != b'\r' && b != b'\n')
        .collect();
    let old_hash = hex::encode(sha2::Sha256::digest(&segments));
    {
        let migrations = concat!(env!("CARGO_MANIFEST_DIR"), "/src/inbox/sqlite/migrations/");
        let conn = rusqlite::Connection::open(site.db()).unwrap();
        for m in ["0000_schema.sql", "0001_counters.sql"] {
            conn.execute_batch(&fs::read_to_string(format!("{migrations}{m}")).unwrap())
                .unwrap();
        }
        conn.execute_batch(&format!(
            "PRAGMA user_version = 2; PRAGMA application_id = 1162103160;
             INSERT INTO interchanges (id, sender, recipient, control_ref, syntax_id,
                 syntax_version, prepared_date, prepared_time, sha256, source_file,
                 source_offset, received_at, raw)
             VALUES (41, 'PARTNERA', 'HUB', 'A2', 'UNOB', '3', '240318', '0901', '{old_hash}',
                 'old/x.edi', {start}, '2026-01-01T00:00:00.000Z', x'{raw_hex}');
             INSERT INTO inbox VALUES ('PARTNERA', 'HUB', 'A2', '{old_hash}', 'old/x.edi',
                 '2026-01-01T00:00:00.000Z', 41);
             INSERT INTO rejections (source_file, file_sha256, error, kind, byte_offset,
                 first_seen_at, last_seen_at, file_size, bytes, truncated)
             VALUES ('old/bad.edi', 'abc', 'bad', 'unt-count', 7, '2026-01-01T00:00:00.000Z',
                 '2026-01-01T00:00:00.000Z', 3, x'414243', 0),
                    ('old/bad.edi', 'abc', 'worse', 'unz-count', 9, '2026-01-01T00:00:00.000Z',
                 '2026-01-01T00:00:00.000Z', 3, x'414243', 0);",
            raw_hex = hex::encode(raw),
        ))
        .unwrap();
    }
    site.put_sample("valid/two-interchanges.edi", "again.edi");
    let lines = site.ingest_json(&[]).code(0).json();
    assert_eq!(statuses(&lines), ["new", "duplicate"]);
    assert_eq!(
        site.count("SELECT max(id) FROM interchanges"),
        42,
        "ids go on after the old ones"
    );
    assert_eq!(site.count("SELECT count(*) FROM rejected_files"), 1);
    assert_eq!(site.count("SELECT count(*) FROM rejections"), 2);
    let stats = site.json(&["stats", "--json"]).json();
    assert_eq!(stats[0]["rejected"], 1);
    let shown = site
        .cmd()
        .args(["show", "PARTNERA", "HUB", "A2", "--raw"])
        .output()
        .unwrap();
    assert_eq!(shown.stdout, raw, "the old plain bytes still read back");
}

per_backend! {
    /// A NUL byte in a value of the envelope is rejected with its offset on both backends (no
    /// EDIFACT repertoire has one, and a PostgreSQL text column cannot store one), and the rest
    /// of the batch goes on.
    fn a_nul_byte_in_a_value_is_rejected_and_the_rest_applied(site) {
        site.put(
            "a.edi",
            b"UNB+UNOC:3+SEN\0DER+R+240101:1200+N1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+N1'",
        );
        site.put_sample("valid/orders-d01b-no-una.edi", "b.edi");
        let lines = site.ingest_json(&[]).code(3).json();
        assert_eq!(statuses(&lines), ["rejected", "new"]);
        assert_eq!(
            lines[0]["error"],
            "UNB at byte 0 (segment 1) holds a NUL byte in a value: no EDIFACT character repertoire has one"
        );
        assert_eq!(site.stat("inbox"), 1);
    }
}

per_backend! {
    /// A NUL byte in a trailer's value (UNT's reference, UNZ's count) quoted in the reason is
    /// stored on both backends (on PostgreSQL as `\x00`, which a text column takes): the file is
    /// rejected with its offset, and the run goes on.
    fn a_nul_byte_in_a_trailer_is_rejected_and_the_run_goes_on(site) {
        site.put(
            "a.edi",
            b"UNB+UNOC:3+S+R+240101:1200+N2'UNH+1+ORDERS:D:96A:UN'UNT+2+1\0'UNZ+1\0+N2'",
        );
        site.put_sample("valid/orders-d01b-no-una.edi", "b.edi");
        let lines = site.ingest_json(&[]).code(3).json();
        assert_eq!(statuses(&lines), ["rejected", "new"]);
        assert!(lines[0]["error"].as_str().unwrap().contains("UNT at byte"), "{lines:?}");
        assert!(site.count("SELECT count(*) FROM rejections") >= 1);
        assert_eq!(site.stat("inbox"), 1);
        // Seen again: the same rejection counted again, not a second failure.
        site.ingest_json(&[]).code(3);
    }
}

/// On PostgreSQL, an interchange the server refuses (a key too long for its index) is found by
/// halving the batch in savepoints and rejected alone with the server's reason; the rest of the
/// batch is applied.
#[test]
fn an_interchange_the_server_refuses_is_rejected_alone_on_postgres() {
    let Some(site) = Site::postgres() else {
        return;
    };
    // Too long for a B-tree index entry (about 2.7 KB), and not compressible below it.
    let mut g = Synth::new(5);
    let long: String = (0..9000)
        .map(|_| char::from(b'A' + g.below(26) as u8))
        .collect();
    for n in 0..5 {
        site.put(
            &format!("f{n}.edi"),
            format!("UNB+UNOC:3+S{n}+R+240101:1200+K{n}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+K{n}'")
                .as_bytes(),
        );
    }
    site.put(
        "f2a.edi",
        format!("UNB+UNOC:3+{long}+R+240101:1200+LONG'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+LONG'")
            .as_bytes(),
    );
    let lines = site.ingest_json(&[]).code(3).json();
    assert_eq!(
        statuses(&lines),
        ["new", "new", "new", "rejected", "new", "new"]
    );
    let error = lines[3]["error"].as_str().unwrap();
    assert!(
        error.contains("the PostgreSQL inbox cannot store it") && error.contains("index row"),
        "{error}"
    );
    assert_eq!(site.stat("inbox"), 5);
    assert_eq!(site.stat("interchanges"), 5);
}

/// Issue 22, 5: `--json` carried C1 and bidi controls unescaped (U+0085, U+009B, U+202E in a
/// file name or a partner's identification), which a terminal or a log viewer acts on. They
/// are written as `\u` escapes, and the JSON reads back to the same text.
#[test]
fn json_lines_escape_c1_and_bidi_controls() {
    let site = Site::new();
    // A sender with the byte 0x9B (CSI in C1, `\u{9B}` under UNOC), in a file whose name holds
    // U+202E (right-to-left override) and U+0085 (next line).
    let name = "inv\u{202E}fdp.\u{85}edi";
    site.put(
        name,
        b"UNB+UNOC:3+SEND\x9bER+RECIPIENT+240101:1200+J1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+J1'",
    );
    for command in [&["ingest", "--json"][..], &["inspect", "--json"]] {
        let out = site.cmd().args(command).arg(site.drop()).run();
        let raw = String::from_utf8(out.stdout.clone()).unwrap();
        for c in ['\u{202E}', '\u{85}', '\u{9B}'] {
            assert!(!raw.contains(c), "{command:?}: {c:?} unescaped in {raw:?}");
        }
        assert!(raw.contains("\\u202E") && raw.contains("\\u009B"), "{raw}");
        let lines = out.json();
        assert!(
            lines[0]["file"].as_str().unwrap().ends_with(name),
            "{lines:?}"
        );
        assert_eq!(lines[0]["sender"], "SEND\u{9B}ER", "{lines:?}");
    }
}

per_backend! {
    /// Where each sighting was read from, where its file went and which host decided it (issue
    /// 40, item 3): two hosts' `drop/inv1.edi` (each run in its own folder, the second under
    /// another host name where `unshare --uts` may give it one) are told apart by their
    /// absolute paths and hosts, the first moved to `archive/inv1.1.edi` (its name taken),
    /// a drift to the quarantine; `show` and `list` print them.
    fn each_sighting_records_its_path_its_move_and_its_host(site) {
        let sample = fs::read(samples().join("valid/two-interchanges.edi")).unwrap();
        for host in ["a", "b"] {
            fs::create_dir_all(site.path(host).join("drop")).unwrap();
            fs::write(site.path(host).join("drop/inv1.edi"), &sample).unwrap();
        }
        let drifted = String::from_utf8_lossy(&sample).replace("A-1", "A-9");
        fs::write(site.path("b/drop/inv2.edi"), drifted.split("UNA^").next().unwrap()).unwrap();
        fs::create_dir_all(site.path("a/archive")).unwrap();
        fs::write(site.path("a/archive/inv1.edi"), b"an earlier file of that name").unwrap();
        let ingest = ["ingest", "-q", "--archive", "archive", "--quarantine", "failed", "drop"];
        site.command().current_dir(site.path("a")).args(ingest).run().code(0);
        let this_host = String::from_utf8(std::process::Command::new("uname").arg("-n").output().unwrap().stdout)
            .unwrap().trim().to_string();
        // The second host: another name where this machine lets a process have one.
        let renamed = std::process::Command::new("unshare")
            .args(["--uts", "sh", "-c", "hostname edi-inbox-host-b"])
            .status()
            .is_ok_and(|s| s.success());
        let mut b = site.command();
        if renamed {
            let program = b.get_program().to_owned();
            let args: Vec<_> = b.get_args().map(|a| a.to_owned()).collect();
            let envs: Vec<_> = b.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
            let mut u = std::process::Command::new("unshare");
            u.args(["--uts", "sh", "-c", "hostname edi-inbox-host-b && exec \"$0\" \"$@\""]).arg(program).args(args);
            for (k, v) in envs {
                match v {
                    Some(v) => u.env(k, v),
                    None => u.env_remove(k),
                };
            }
            b = u;
        } else {
            eprintln!("NOTE: unshare --uts is not allowed here: both hosts are named {this_host}");
        }
        b.current_dir(site.path("b")).args(ingest).run().code(3);
        let host_b = if renamed { "edi-inbox-host-b" } else { this_host.as_str() };
        let a = fs::canonicalize(site.path("a")).unwrap();
        let bdir = fs::canonicalize(site.path("b")).unwrap();
        let at = |dir: &Path, rel: &str| dir.join(rel).display().to_string();

        let shown = site.json(&["show", "PARTNERA", "HUB", "A1", "--json"]).success().json();
        let first = &shown[0]["interchanges"][0];
        assert_eq!(first["file"], "drop/inv1.edi", "{first}");
        assert_eq!(first["source_path"], at(&a, "drop/inv1.edi"), "{first}");
        assert_eq!(first["host"], this_host, "{first}");
        assert_eq!(first["moved_to"], at(&a, "archive/inv1.1.edi"), "{first}");
        assert!(a.join("archive/inv1.1.edi").exists());
        let sightings = shown[0]["sightings"].as_array().unwrap();
        assert_eq!(sightings.len(), 2, "{sightings:?}");
        let dup = sightings.iter().find(|s| s["status"] == "duplicate").unwrap();
        assert_eq!(dup["file"], "drop/inv1.edi", "{dup}");
        assert_eq!(dup["source_path"], at(&bdir, "drop/inv1.edi"), "{dup}");
        assert_eq!(dup["host"], host_b, "{dup}");
        assert_eq!(dup["moved_to"], at(&bdir, "archive/inv1.edi"), "{dup}");
        let drift = sightings.iter().find(|s| s["status"] == "drift").unwrap();
        assert_eq!(drift["source_path"], at(&bdir, "drop/inv2.edi"), "{drift}");
        assert_eq!(drift["moved_to"], at(&bdir, "failed/inv2.edi"), "{drift}");

        let human = site.cmd().args(["show", "PARTNERA", "HUB", "A1"]).run().code(0).out();
        for want in [
            format!("  filed        read from {} on {this_host}, moved to {}", at(&a, "drop/inv1.edi"), at(&a, "archive/inv1.1.edi")),
            format!("    filed  read from {} on {host_b}, moved to {}", at(&bdir, "drop/inv1.edi"), at(&bdir, "archive/inv1.edi")),
        ] {
            assert!(human.contains(&want), "{want}\nin\n{human}");
        }
        let listed = site.json(&["list", "--json"]).success().json();
        let from_b: Vec<_> = listed
            .iter()
            .filter(|l| l["file"] == "drop/inv1.edi" && l["host"] == host_b && l["source_path"] == at(&bdir, "drop/inv1.edi"))
            .collect();
        assert_eq!(from_b.len(), 2, "A1 and A2 seen again by the second host: {listed:?}");
        assert!(from_b.iter().all(|l| l["status"] == "duplicate" && l["moved_to"] == at(&bdir, "archive/inv1.edi")), "{from_b:?}");
        // list's human form says it too, in each sighting's detail: the two hosts told apart.
        let human = site.cmd().args(["list"]).run().code(0).out();
        for want in [
            format!("read from {} on {this_host}, moved to {}", at(&a, "drop/inv1.edi"), at(&a, "archive/inv1.1.edi")),
            format!("read from {} on {host_b}, moved to {}", at(&bdir, "drop/inv1.edi"), at(&bdir, "archive/inv1.edi")),
        ] {
            assert!(human.contains(&want), "list does not say {want}\nin\n{human}");
        }
    }
}

per_backend! {
    /// `reprocess QUARANTINED_FILE...` (issue 40, item 5): a quarantined file decided again as
    /// ingest decides it and filed where ingest files it; unchanged, it is rejected again and
    /// goes back into the quarantine under the next name with a new note, the old note removed;
    /// corrected, it is applied and archived with its old note beside it, and its sighting says
    /// where it was read from and went. Files outside the quarantine, and notes, are refused
    /// (exit 2) and left alone.
    fn reprocess_decides_a_quarantined_file_again_and_files_it_with_its_note(site) {
        site.put_sample("broken/unt-count-wrong.edi", "x.edi");
        site.ingest(1000).code(3);
        let failed = site.path("failed");
        let archive = site.path("archive");
        assert!(failed.join("x.edi.error.txt").exists());
        let reprocess = |file: &Path| {
            let mut c = site.command();
            c.arg("reprocess")
                .arg("--archive")
                .arg(&archive)
                .arg("--quarantine")
                .arg(&failed)
                .arg(file);
            c.run()
        };

        // Refused: a note, a file outside the quarantine; nothing read, nothing moved.
        let other = site.put_sample("valid/orders-d01b-no-una.edi", "y.edi");
        for (file, why) in [
            (failed.join("x.edi.error.txt"), "is a quarantine note"),
            (other.clone(), "is not in the --quarantine folder"),
        ] {
            let out = reprocess(&file);
            out.code(2);
            assert!(out.err().contains(why), "{}", out.err());
        }
        assert!(other.exists() && failed.join("x.edi").exists());
        fs::remove_file(&other).unwrap();

        // Unchanged: rejected again, back into the quarantine with a new note.
        let out = reprocess(&failed.join("x.edi"));
        out.code(3);
        assert!(out.out().contains("rejected   "), "{}", out.out());
        let mut names: Vec<String> = fs::read_dir(&failed)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["x.1.edi", "x.1.edi.error.txt"]);
        let note = fs::read_to_string(failed.join("x.1.edi.error.txt")).unwrap();
        assert!(note.contains("failed/x.edi") && note.contains("UNT at byte 118"), "{note}");

        // Corrected: applied, archived, its old note beside it; the sighting says so.
        fs::copy(samples().join("valid/orders-d01b-no-una.edi"), failed.join("x.1.edi")).unwrap();
        let out = reprocess(&failed.join("x.1.edi"));
        out.code(0);
        assert!(out.out().contains("1 new"), "{}", out.out());
        assert_eq!(fs::read_dir(&failed).unwrap().count(), 0, "the quarantine is empty");
        assert_eq!(
            fs::read_to_string(archive.join("x.1.edi.error.txt")).unwrap(),
            note,
            "the old note went with the file"
        );
        assert!(archive.join("x.1.edi").exists());
        let shown = site.json(&["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--json"]).success().json();
        let first = &shown[0]["interchanges"][0];
        // Absolute paths as the run was given them (these are absolute already).
        assert_eq!(first["source_path"], failed.join("x.1.edi").display().to_string(), "{first}");
        assert_eq!(first["moved_to"], archive.join("x.1.edi").display().to_string(), "{first}");
    }
}
