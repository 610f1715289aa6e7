//! Hostile conditions, in the input and around the run: what hostile testing broke the inbox
//! with (issue 10), each a test that failed before its fix. Files that hang a run or fill memory
//! or the disk (a large file, thousands of errors in one); an inbox asked to ingest itself or
//! its archive; envelopes valid or not by ISO 9735's letter; clocks before 1970 and files from
//! the future; file systems that refuse a copy or a removal; names too long or not UTF-8;
//! standard output closed or full; control characters in what is shown; a database that is not
//! one, a folder, or read by a user who may only read.

use std::fs;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::site::{Site, Tmpfs};
use crate::common::synth::{Layout, Synth};
use crate::common::{Run, RunExt, StartExt};
use crate::common::{json_lines, samples};

/// Runs `cmd` to its end, or kills it after `limit` and fails: a hang must fail the test, not
/// stop the suite. Returns the output and the child's peak resident memory in bytes, as
/// `VmHWM` showed it while it ran (`ru_maxrss` would count the test process itself: the child
/// shares its memory until exec, and Linux keeps that high-water mark across exec).
// The child is reaped with wait4 by its pid, which the lint cannot see.
#[allow(clippy::zombie_processes)]
fn run_limited(cmd: &mut Command, limit: Duration) -> (Run, u64) {
    let command = crate::common::run::shown_std(cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // Drained meanwhile, so that a full pipe never stops the child.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let (tx, rx) = std::sync::mpsc::channel();
    let (tx_done, rx_done) = std::sync::mpsc::channel::<()>();
    let waiter = std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: rusage is plain data, written by the kernel; pid is our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // WNOWAIT: the child stays a zombie, its /proc entry readable, until it is reaped below.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0);
        let _ = tx.send(());
        let _ = rx_done.recv();
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(r, pid);
        status
    });
    let started = Instant::now();
    let mut peak = 0;
    let hwm = || -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    loop {
        peak = peak.max(hwm().unwrap_or(0));
        if rx.try_recv().is_ok() {
            break;
        }
        if started.elapsed() > limit {
            // SAFETY: pid is our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = tx_done.send(());
            let _ = waiter.join();
            panic!("the run did not finish within {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = tx_done.send(());
    let status = waiter.join().unwrap();
    use std::os::unix::process::ExitStatusExt;
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (Run::new(command, output), peak)
}

/// A valid interchange of about `mib` MiB.
fn large_interchange(control_ref: &str, mib: usize) -> Vec<u8> {
    let layout = Layout {
        una: true,
        crlf: false,
        group: false,
    };
    // About 1,450 bytes a message.
    Synth::new(3).interchange("SENDER", "RECIPIENT", control_ref, mib * 724, layout)
}

fn stderr(out: &Run) -> String {
    out.err()
}

/// Item 1: a file larger than half the read-ahead budget, followed by others, deadlocked the
/// run at 0% CPU with its write lock held.
#[test]
fn a_large_file_followed_by_others_is_ingested_without_hanging() {
    let site = Site::new();
    let big = large_interchange("BIG1", 36);
    assert!(big.len() > 34 << 20);
    site.put("a-big.edi", &big);
    for n in 0..3 {
        site.put_sample("valid/orders-d01b-no-una.edi", &format!("b{n}.edi"));
    }
    // Garbage over the budget, then another file: the same deadlock without an interchange.
    site.put("c-garbage.edi", &vec![b'x'; 65 << 20]);
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "d.edi");
    let (out, _) = run_limited(
        site.command()
            .args(["ingest", "--json", "--archive"])
            .arg(site.path("archive"))
            .arg(site.drop()),
        Duration::from_secs(300),
    );
    out.code(3);
    let lines = json_lines(&out.stdout);
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["files"], 6, "{lines:?}");
    assert_eq!(summary["new"], 3);
    assert_eq!(summary["duplicate"], 2);
    assert_eq!(summary["rejected"], 1);
    assert_eq!(site.files_in("drop"), ["c-garbage.edi"]);
}

/// Item 1: the budget bounds what is in memory, not only what was handed over: the files are
/// admitted before they are read, and one large file is in memory at a time.
#[test]
fn reading_ahead_holds_one_large_file_at_a_time() {
    let site = Site::new();
    let mut size = 0;
    for n in 0..4 {
        let data = large_interchange(&format!("BIG{n}"), 48);
        size = size.max(data.len() as u64);
        site.put(&format!("big{n}.edi"), &data);
    }
    let (out, peak) = run_limited(
        site.command().args(["ingest", "-q"]).arg(site.drop()),
        Duration::from_secs(300),
    );
    out.code(0);
    // One file, its compressed copy and SQLite's copies of that, beside the 64 MiB budget
    // and the program itself; four files in memory at once are far past it.
    let bound = 2 * size + (96 << 20);
    assert!(
        peak < bound,
        "peak memory {} MiB with files of {} MiB (bound {} MiB)",
        peak >> 20,
        size >> 20,
        bound >> 20
    );
}

/// Item 3: `ingest .` beside the database, with the archive and quarantine inside the scanned
/// folder: neither the database (nor its -wal and -shm) nor what earlier runs moved is input.
#[test]
fn the_inbox_never_ingests_its_own_files_or_its_archive() {
    let site = Site::new();
    let here = site.dir.path();
    fs::copy(
        samples().join("valid/orders-d01b-no-una.edi"),
        here.join("a.edi"),
    )
    .unwrap();
    fs::copy(
        samples().join("broken/unt-count-wrong.edi"),
        here.join("b.edi"),
    )
    .unwrap();
    let run = || {
        crate::common::edi_inbox()
            .current_dir(here)
            .args([
                "--db",
                "edi-inbox.db",
                "ingest",
                "--json",
                "--archive",
                "done",
                "--quarantine",
                "failed",
                "--metrics-file",
                "run.prom",
                ".",
            ])
            .run()
    };
    let out = run();
    out.code(3);
    let files: Vec<String> = json_lines(&out.stdout)
        .iter()
        .filter_map(|l| l["file"].as_str().map(String::from))
        .collect();
    assert_eq!(files, ["./a.edi", "./b.edi"]);
    assert!(here.join("edi-inbox.db").is_file());
    assert_eq!(fs::read_dir(here.join("failed")).unwrap().count(), 2);

    // A redelivery, and two runs more: the archive, the quarantine (with its reasons), the
    // database and the metrics file stay where they are and are not read.
    fs::copy(
        samples().join("valid/orders-d01b-no-una.edi"),
        here.join("c.edi"),
    )
    .unwrap();
    for round in 0..2 {
        let out = run().note(format!("round {round}"));
        out.code(0);
        let lines = json_lines(&out.stdout);
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["files"], 1 - round, "{lines:?}");
        assert_eq!(summary["rejected"], 0, "{lines:?}");
    }
    let mut failed: Vec<String> = fs::read_dir(here.join("failed"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    failed.sort();
    assert_eq!(failed, ["b.edi", "b.edi.error.txt"]);
    assert_eq!(fs::read_dir(here.join("done")).unwrap().count(), 2);

    // Through a symbolic link, the database and its -wal and -shm are known beside the file the
    // link names, wherever a walk finds them.
    fs::create_dir(here.join("etc")).unwrap();
    std::os::unix::fs::symlink(here.join("edi-inbox.db"), here.join("etc/inbox.db")).unwrap();
    let out = crate::common::edi_inbox()
        .current_dir(here)
        .args([
            "--db",
            "etc/inbox.db",
            "ingest",
            "--json",
            "--archive",
            "done",
        ])
        .args(["--quarantine", "failed", "--metrics-file", "run.prom", "."])
        .run();
    out.code(0);
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.last().unwrap()["summary"]["files"], 0, "{lines:?}");
    assert!(here.join("edi-inbox.db").is_file());

    // Named on the command line, the database is refused, not read.
    let out = crate::common::edi_inbox()
        .current_dir(here)
        .args(["--db", "edi-inbox.db", "ingest", "edi-inbox.db"])
        .run();
    out.code(3);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is the inbox database: not read"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(here.join("edi-inbox.db").is_file());
}

/// Item 4: every error of a file stored another copy of the whole file (and hashed it again):
/// 4,000 wrong counts in a 386 KB file grew the database by 1.55 GB. Now the bytes are kept
/// once, the errors listed against them, and `stats` counts the file once.
#[test]
fn a_file_with_thousands_of_errors_is_stored_once() {
    let site = Site::new();
    let mut data = Vec::new();
    for n in 0..4000 {
        data.extend_from_slice(
            format!(
                "UNB+UNOC:3+S+R+240101:1200+R{n}'UNH+1+ORDERS:D:96A:UN'BGM+220+PO{n}+9'UNT+9+1'UNZ+1+R{n}'\n"
            )
            .as_bytes(),
        );
    }
    assert!(data.len() > 300_000);
    site.put("many.edi", &data);
    let out = site.command().args(["ingest", "-q"]).arg(site.drop()).run();
    out.code(3);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("rejected")).count(),
        4000
    );
    let size: u64 = ["inbox.db", "inbox.db-wal"]
        .iter()
        .filter_map(|n| fs::metadata(site.path(n)).ok())
        .map(|m| m.len())
        .sum();
    assert!(size < 8 << 20, "the database takes {size} bytes");
    assert_eq!(site.count("SELECT count(*) FROM rejected_files"), 1);
    assert_eq!(site.count("SELECT count(*) FROM rejections"), 4000);
    let stats = site.json(&["stats", "--json"]).json();
    assert_eq!(stats[0]["rejected"], 1);
    // `list` shows the file once, with its first error and how many more there are.
    let events = site.json(&["list", "--json"]).json();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["errors"], 4000);
    let first = events[0]["error"].as_str().unwrap();
    assert!(first.starts_with("UNT at byte 66 "), "{first}");
}

/// Item 5: with functional groups, UNH 0062 is unique within its group (ISO 9735), so two groups
/// that both number their first message `1` make a valid interchange; within one group, and
/// without groups within the interchange, a repeated reference is still rejected.
#[test]
fn message_references_repeat_across_groups_but_not_within_one() {
    let site = Site::new();
    let grouped = "UNB+UNOC:3+S+R+240101:1200+G'\
UNG+ORDERS+S+R+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G1'\
UNG+ORDERS+S+R+240101:1200+G2+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+1+G2'UNZ+2+G'";
    site.put("a.edi", grouped.as_bytes());
    let twice = grouped
        .replace("+G'", "+H'")
        .replace("UNZ+2+G'", "UNZ+2+H'")
        .replace(
            "UNT+2+1'UNE+1+G1'",
            "UNT+2+1'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+2+G1'",
        );
    site.put("b.edi", twice.as_bytes());
    let lines = site
        .json(&["ingest", "--json", site.drop().to_str().unwrap()])
        .code(3)
        .json();
    assert_eq!(lines[0]["status"], "new", "{lines:?}");
    assert_eq!(lines[0]["messages"], 2);
    assert_eq!(lines[1]["status"], "rejected");
    let error = lines[1]["error"].as_str().unwrap();
    assert!(
        error.contains("repeats message reference 1 (0062) within group G1"),
        "{error}"
    );
    assert_eq!(
        lines[1]["offset"],
        twice.find("UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+2").unwrap()
    );
}

/// Item 6: S001/0002, the syntax version number, is mandatory; `UNB+UNOC+...` was accepted and
/// shown as `UNOC:`.
#[test]
fn a_unb_without_its_syntax_version_is_rejected_with_its_offset() {
    let site = Site::new();
    site.put(
        "a.edi",
        b"\r\nUNB+UNOC+S+R+240101:1200+X'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+X'",
    );
    let lines = site
        .json(&["ingest", "--json", site.drop().to_str().unwrap()])
        .code(3)
        .json();
    assert_eq!(lines[0]["status"], "rejected");
    assert_eq!(lines[0]["offset"], 2);
    assert_eq!(
        lines[0]["error"],
        "UNB at byte 2 (segment 1) has no syntax version number (S001/0002)"
    );
    assert_eq!(site.stat("inbox"), 0);
}

/// Item 9: the service characters in force are part of the content. The same bytes under
/// another release character decode to other values, so they are drift, not a duplicate; a UNA
/// stating the defaults and no UNA stay the same.
#[test]
fn the_same_bytes_under_other_service_characters_are_not_a_duplicate() {
    let site = Site::new();
    let body = "UNB+UNOC:3+S+R+240101:1200+REL1'UNH+1+ORDERS:D:96A:UN'FTX+AAA+++NET 30?+!+ DAYS'UNT+3+1'UNZ+1+REL1'";
    site.put("a.edi", format!("UNA:+.? '{body}").as_bytes());
    site.put("b.edi", body.as_bytes());
    site.put("c.edi", format!("UNA:+.! '{body}").as_bytes());
    let lines = site
        .json(&["ingest", "--json", site.drop().to_str().unwrap()])
        .code(3)
        .json();
    let statuses: Vec<_> = lines[..3].iter().map(|l| l["status"].clone()).collect();
    assert_eq!(statuses, ["new", "duplicate", "drift"]);
}

/// Item 9: an inbox written before the service characters went into the hash has its stored
/// hashes computed again from the stored bytes when it is opened (migration 4), so that a
/// redelivery under non-default separators is still a duplicate, not false drift.
#[test]
fn stored_hashes_are_computed_again_so_no_false_drift() {
    use sha2::Digest;
    let site = Site::new();
    let sample = samples().join("valid/two-interchanges.edi");
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.put_sample("valid/invrpt-level-b.edi", "b.edi");
    site.json(&["ingest", "--json", site.drop().to_str().unwrap()])
        .code(0);
    let now: Vec<(String, String)> = {
        let conn = rusqlite::Connection::open(site.db()).unwrap();
        let mut stmt = conn
            .prepare("SELECT control_ref, sha256 FROM inbox ORDER BY control_ref")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    // Back to what an inbox of schema 4 held (later migrations undone), with the hash as it
    // was before: SHA-256 of the segments alone (these files have no line breaks
    // inside an interchange's segments; the second interchange of a.edi follows its own UNA).
    let text = fs::read(&sample).unwrap();
    let second = text.windows(3).rposition(|w| w == b"UNA").unwrap() + 9;
    let end = text.iter().rposition(|&b| b == b'#').unwrap() + 1;
    let old = hex::encode(sha2::Sha256::digest(&text[second..end]));
    let (control_ref, new) = &now[1];
    assert_ne!(
        new, &old,
        "{control_ref}: the hash should differ for '^|.! #'"
    );
    site.sql(&format!(
        "UPDATE inbox SET sha256 = '{old}' WHERE sha256 = '{new}';
         UPDATE interchanges SET sha256 = '{old}' WHERE sha256 = '{new}';
         DROP TABLE id_sequences;
         {}
         PRAGMA user_version = 4;",
        crate::common::UNDO_PUBLISH_COLUMNS
    ));
    site.put_sample("valid/two-interchanges.edi", "again.edi");
    site.put_sample("valid/invrpt-level-b.edi", "again-b.edi");
    let lines = site
        .json(&["ingest", "--json", site.drop().to_str().unwrap()])
        .code(0)
        .json();
    let statuses: Vec<_> = lines[..3].iter().map(|l| l["status"].clone()).collect();
    assert_eq!(statuses, ["duplicate", "duplicate", "duplicate"]);
    assert_eq!(
        site.count(&format!(
            "SELECT count(*) FROM interchanges WHERE sha256 = '{new}'"
        )),
        1
    );
}

/// Item 7: `purge --days N` past 1970 panicked (exit 101); the cutoff is clamped at 1970 and
/// nothing is purged.
#[test]
fn purge_days_past_1970_purges_nothing_and_does_not_panic() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    site.json(&["ingest", "--json", site.drop().to_str().unwrap()]);
    for days in ["36500", "4294967295"] {
        let lines = site
            .json(&["purge", "--days", days, "--json"])
            .code(0)
            .json();
        assert_eq!(lines[0]["cutoff"], "1970-01-01T00:00:00.000Z");
        assert_eq!(lines[0]["purged"], 0);
    }
    assert_eq!(site.stat("inbox"), 1);
}

/// Item 7: under a clock before 1970, `ingest` panicked. It now refuses to decide anything
/// (recorded as 1970, every decision would be purged at once) with a clear message, exit 1.
/// Needs `faketime` (Debian's package, which `.ci/run` installs).
#[test]
fn ingest_under_a_clock_before_1970_refuses_clearly() {
    let found = Command::new("faketime").arg("--version").output().is_ok();
    if !found {
        crate::common::require("faketime is not installed", "EDI_INBOX_REQUIRE_FAKETIME");
        return;
    }
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    let out = Command::new("faketime")
        .arg("1960-01-01 00:00:00")
        .arg(assert_cmd::cargo::cargo_bin("edi-inbox"))
        .arg("--db")
        .arg(site.db())
        .arg("ingest")
        .arg(site.drop())
        .run();
    out.code(1);
    assert!(
        stderr(&out).contains("clock reads a time before 1970"),
        "{}",
        stderr(&out)
    );
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

/// Item 8: a file whose modification time is in the future was skipped forever as "modified 0s
/// ago", hidden by `-q`, exit 0. It is old enough.
#[test]
fn a_file_modified_in_the_future_is_not_skipped() {
    let site = Site::new();
    let path = site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() + Duration::from_secs(86_400))
        .unwrap();
    let lines = site
        .json(&[
            "ingest",
            "--json",
            "--min-age",
            "30s",
            site.drop().to_str().unwrap(),
        ])
        .code(0)
        .json();
    assert_eq!(lines[0]["status"], "new", "{lines:?}");
}

/// Item 17: `list --since` refused RFC 3339 offsets (`+02:00`).
#[test]
fn list_since_takes_an_rfc3339_offset() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    site.json(&["ingest", "--json", site.drop().to_str().unwrap()]);
    let lines = site
        .json(&["list", "--json", "--since", "2000-01-01T10:00:00+02:00"])
        .code(0)
        .json();
    assert_eq!(lines.len(), 1);
    let lines = site
        .json(&["list", "--json", "--since", "2999-01-01T00:00:00-05:00"])
        .code(0)
        .json();
    assert!(lines.is_empty());
}

fn names(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Item 10: across file systems, a source that cannot be removed (a read-only drop folder) left
/// the file in both places, and every run archived it again. Now the copy is taken back, the
/// message says so, and the archive stays as it was, run after run.
#[test]
fn a_file_that_cannot_be_removed_after_its_copy_is_not_archived_again_and_again() {
    let site = Site::new();
    let Some(dropfs) = Tmpfs::mount(&site.path("dropfs"), "4m") else {
        return;
    };
    fs::copy(
        samples().join("valid/orders-d01b-no-una.edi"),
        dropfs.path.join("a.edi"),
    )
    .unwrap();
    dropfs.remount("ro");
    for round in 0..2 {
        let out = site
            .command()
            .args(["ingest", "-q", "--archive"])
            .arg(site.path("archive"))
            .arg(&dropfs.path)
            .run()
            .note(format!("round {round}"));
        let err = stderr(&out);
        out.code(3);
        assert!(
            err.contains("the original cannot be removed")
                && err.contains("the copy was taken back"),
            "{round}: {err}"
        );
        assert_eq!(
            names(&site.path("archive")),
            Vec::<std::ffi::OsString>::new(),
            "{round}"
        );
    }
    assert_eq!(names(&dropfs.path), ["a.edi"]);
}

/// Item 10: a copy that fails (a full archive file system) left a hidden temporary file that
/// no run ever removed. Now it is removed at once, and one that a killed run left is removed by
/// the next run.
#[test]
fn a_failed_copy_leaves_no_temporary_file() {
    let site = Site::new();
    let Some(archive) = Tmpfs::mount(&site.path("archivefs"), "64k") else {
        return;
    };
    // Left by a run killed while it copied: nobody holds its lock.
    let stale = archive.path.join(".edi-inbox-4242-0.tmp");
    fs::write(&stale, b"half a copy").unwrap();
    fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let big = large_interchange("FULL1", 1);
    assert!(big.len() > 256 << 10);
    site.put("a.edi", &big);
    let out = site
        .command()
        .args(["ingest", "-q", "--archive"])
        .arg(&archive.path)
        .arg(site.drop())
        .run();
    let err = stderr(&out);
    out.code(3);
    assert!(
        err.contains("cannot copy it into") && err.contains("No space left"),
        "{err}"
    );
    assert_eq!(names(&archive.path), Vec::<std::ffi::OsString>::new());
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

/// Item 11: a name of 246 bytes or more could never be quarantined (`NAME.error.txt` is too
/// long for the file system); it is shortened, keeping its extension, with a hash of the whole
/// name so that two long names stay apart.
#[test]
fn a_long_name_is_quarantined_under_a_shortened_name() {
    let site = Site::new();
    let broken = fs::read(samples().join("broken/unt-count-wrong.edi")).unwrap();
    let long_a = format!("{}a.edi", "x".repeat(246));
    let long_b = format!("{}b.edi", "x".repeat(246));
    site.put(&long_a, &broken);
    site.put(&long_b, &broken);
    let out = site.ingest(10);
    out.code(3);
    assert!(!stderr(&out).contains("not moved"), "{}", stderr(&out));
    assert_eq!(site.files_in("drop"), Vec::<String>::new());
    let failed = site.files_in("failed");
    assert_eq!(failed.len(), 4, "{failed:?}");
    for name in &failed {
        assert!(name.len() <= 255, "{name}");
        assert!(name.starts_with("xxxxxxxx") && name.contains('~'), "{name}");
        assert!(
            name.ends_with(".edi") || name.ends_with(".edi.error.txt"),
            "{name}"
        );
    }
}

/// Item 11: names that are not UTF-8 were rewritten with U+FFFD, so two names became one (and
/// one got a suffix). They keep their bytes.
#[test]
fn names_that_are_not_utf8_keep_their_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let site = Site::new();
    let good = fs::read(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
    let a = std::ffi::OsStr::from_bytes(b"a\xff.edi");
    let b = std::ffi::OsStr::from_bytes(b"a\xfe.edi");
    fs::write(site.drop().join(a), &good).unwrap();
    fs::write(site.drop().join(b), &good).unwrap();
    let out = site.ingest(10);
    out.code(0);
    assert_eq!(names(&site.path("archive")), [b, a]);
}

/// `cmd` again, to run as an unprivileged user where the tests run as root (who reads every
/// file), so that permissions apply; as anyone else, as that user. Its program is a link to
/// (or a copy of) the binary inside `site`, which the test opens to that user: the build's own
/// binary may lie under a folder only its owner may enter (root's home is mode 0700).
fn unprivileged(site: &Site, cmd: &Command) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let mut same = Command::new(cmd.get_program());
        copy_settings(cmd, &mut same);
        return same;
    }
    let bin = site.path("bin");
    let program = bin.join("edi-inbox");
    if !program.exists() {
        fs::create_dir_all(&bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        if fs::hard_link(cmd.get_program(), &program).is_err() {
            fs::copy(cmd.get_program(), &program).unwrap();
        }
        fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut other = Command::new(&program);
    copy_settings(cmd, &mut other);
    other.uid(65534).gid(65534);
    other
}

/// The arguments, environment and working folder of `from`, onto `to`.
fn copy_settings(from: &Command, to: &mut Command) {
    to.args(from.get_args());
    for (key, value) in from.get_envs() {
        match value {
            Some(v) => to.env(key, v),
            None => to.env_remove(key),
        };
    }
    if let Some(dir) = from.get_current_dir() {
        to.current_dir(dir);
    }
}

/// Opens a temporary site to every user (the tests' folders are private to their owner).
fn open_to_all(site: &Site) {
    use std::os::unix::fs::PermissionsExt;
    for dir in [site.dir.path().to_path_buf(), site.drop()] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    }
}

/// Item 11: a file that cannot be read, in a folder that can be written, was reported on every
/// run and never moved. It is quarantined with its reason.
#[test]
fn an_unreadable_file_is_quarantined() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new();
    open_to_all(&site);
    let path = site.put_sample("valid/orders-d01b-no-una.edi", "secret.edi");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
    // Still young, it may still be uploading (as another user, before a chmod): left alone.
    let out = unprivileged(&site, site.ingest_command(10).args(["--min-age", "1h"])).run();
    out.code(0);
    assert_eq!(site.files_in("drop"), ["secret.edi"]);
    let out = unprivileged(&site, &site.ingest_command(10)).run();
    out.code(3);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(site.files_in("drop"), Vec::<String>::new());
    assert_eq!(
        site.files_in("failed"),
        ["secret.edi", "secret.edi.error.txt"]
    );
}

/// Item 17: a misconfigured `--archive` was noticed file by file, after every decision was
/// committed. It is checked before anything is read.
#[test]
fn a_misconfigured_archive_is_noticed_before_anything_is_decided() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    fs::write(site.path("archive"), b"a file, not a folder").unwrap();
    let out = site.ingest(10);
    let err = stderr(&out);
    out.code(1);
    assert!(
        err.contains("--archive") && err.contains("nothing was read or decided"),
        "{err}"
    );
    assert!(
        !site.db().exists(),
        "the database was opened before the check"
    );
    assert_eq!(site.files_in("drop"), ["a.edi"]);
}

/// Item 12: a standard output closed by its reader (`ingest | head`, a dead logger) ended the
/// run after its first batch with exit 0: most files unread, drift found later never reported.
/// The run now goes on without printing, and its exit status tells the truth.
#[test]
fn a_closed_standard_output_does_not_end_the_run() {
    let reference = Site::new();
    reference.fill(120, 4);
    // The corpus has drift and broken files.
    reference.ingest(5).code(3);
    let want = reference.state();

    let site = Site::new();
    site.fill(120, 4);
    let mut child = site
        .command()
        .args(["ingest", "--batch", "5", "--archive"])
        .arg(site.path("archive"))
        .arg("--quarantine")
        .arg(site.path("failed"))
        .arg(site.drop())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    drop(child.child().stdout.take());
    let out = child.wait();
    // As without a closed standard output.
    out.code(3);
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let got = site.state();
    site.assert_all_placed(&got, 120);
    crate::common::site::assert_same(&got, &want, "with standard output closed");
}

/// Item 12: a full standard output (a log on a full disk) was a bare "No space left on device"
/// and exit 1, with the decided files left unmoved. Now the run finishes, says what failed, and
/// exits 3.
#[test]
fn a_full_standard_output_is_named_and_the_run_finishes() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    let out = site
        .ingest_command(5)
        .stdout(fs::File::create("/dev/full").unwrap())
        .run();
    let err = stderr(&out);
    out.code(3);
    assert!(
        err.contains("cannot write to standard output (No space left on device"),
        "{err}"
    );
    assert_eq!(site.files_in("archive"), ["a.edi"]);
}

/// Item 12: `completions bash | head` panicked and `show --raw | head -c` exited 1; a reader
/// that stops reading is not an error.
#[test]
fn reports_to_a_closed_pipe_exit_0() {
    let site = Site::new();
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "a.edi");
    site.ingest(5);
    let closed = |args: &[&str]| {
        let mut child = site
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start();
        drop(child.child().stdout.take());
        child.wait()
    };
    for args in [
        &["completions", "bash"][..],
        &["show", "--raw", "5412345000013", "4012345000023", "INV0001"],
        &["list"],
        &["stats"],
        &["inspect", "--json", site.path("archive").to_str().unwrap()],
    ] {
        let out = closed(args);
        out.code(0);
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
}

/// Item 13: file names and UNB identifiers were printed raw: a newline in a name forged an
/// outcome line in the cron log, an ESC in a sender id drove the operator's terminal. Every
/// human output escapes control characters: the lines, `list`, `show`, and `NAME.error.txt`.
#[test]
fn control_characters_from_the_input_are_escaped_in_human_output() {
    let site = Site::new();
    let good = fs::read_to_string(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
    site.put("evil\nnew        forged.edi", good.as_bytes());
    let escaped_sender = good.replace("SENDER?+ONE", "EVIL\x1b[2J");
    site.put(
        "sender.edi",
        escaped_sender.replace("ORD?'0042", "ESC1").as_bytes(),
    );
    let broken = fs::read(samples().join("broken/unt-count-wrong.edi")).unwrap();
    site.put("bad\x1b[31m.edi", &broken);
    let out = site
        .command()
        .args(["ingest", "--quarantine"])
        .arg(site.path("failed"))
        .arg(site.drop())
        .run();
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let all = [text.as_str(), &stderr(&out)].concat();
    assert!(!all.contains('\x1b'), "{all:?}");
    // Three outcomes, the two lines of the rejection's quote under its line, the summary.
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("new        forged")),
        "{text}"
    );
    assert!(text.contains("evil\\x0Anew        forged.edi"), "{text}");
    assert!(text.contains("EVIL\\x1B[2J"), "{text}");
    let reason = fs::read_to_string(site.path("failed").join("bad\x1b[31m.edi.error.txt")).unwrap();
    assert!(
        reason.contains("bad\\x1B[31m.edi") && !reason.contains('\x1b'),
        "{reason}"
    );
    for args in [
        &["list"][..],
        &["show", "EVIL\x1b[2J", "RECEIVER", "ESC1"],
        &["stats"],
    ] {
        let out = site.cmd().args(args).run();
        out.code(0);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            !text.contains('\x1b') && !text.contains("\nnew        forged"),
            "{args:?}: {text}"
        );
    }
}

/// Item 15: a one-byte file that is not SQLite was overwritten by `ingest`; `stats` and `list`
/// wrote the schema into an empty file. The header is checked before SQLite sees the file, and
/// the reports never create or change a database.
#[test]
fn a_file_that_is_not_a_database_is_never_written() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    fs::write(site.db(), b"x").unwrap();
    let out = site.ingest(10);
    out.code(1);
    assert!(
        stderr(&out).contains("is not an SQLite database"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read(site.db()).unwrap(), b"x");

    fs::write(site.db(), b"").unwrap();
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "A", "B", "C"],
        &["purge", "--days", "1"],
    ] {
        let out = site.cmd().args(args).run();
        out.code(1);
        assert!(
            stderr(&out).contains("there is no inbox database"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(
            fs::metadata(site.db()).unwrap().len(),
            0,
            "{args:?} wrote to it"
        );
    }
    let beside: Vec<_> = names(site.dir.path())
        .into_iter()
        .filter(|n| n.to_string_lossy().starts_with("inbox.db"))
        .collect();
    assert_eq!(beside, ["inbox.db"], "no -wal or -shm either");
}

/// Item 15: the reports open the database read-only: they work for a user who may only read it
/// (they failed with SQLITE_READONLY_DIRECTORY), and never migrate or change it.
#[test]
fn reports_work_for_a_user_who_may_only_read() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new();
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "a.edi");
    site.ingest(10).code(0);
    // Everyone may enter the folder and read the database; only its owner may write there.
    fs::set_permissions(site.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let before = crate::common::site::file_hash(&site.db());
    let reports = |what: &str| {
        for args in [
            &["stats", "--json"][..],
            &["list"],
            &["show", "5412345000013", "4012345000023", "INV0001"],
        ] {
            let mut cmd = site.command();
            let out = unprivileged(&site, cmd.args(args)).run().note(what);
            out.code(0);
        }
    };
    reports("beside its -wal and -shm");
    // As an older edi-inbox left it (or a copy): no -wal, no -shm beside it.
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(site.path(&format!("inbox.db{suffix}")));
    }
    reports("alone");
    // Or with an empty -wal kept, and no -shm.
    fs::write(site.path("inbox.db-wal"), b"").unwrap();
    reports("beside an empty -wal");
    assert_eq!(crate::common::site::file_hash(&site.db()), before);

    // A database from an older edi-inbox is not migrated by a report.
    site.sql("PRAGMA user_version = 3");
    let before = crate::common::site::file_hash(&site.db());
    let out = site.cmd().args(["stats"]).run();
    out.code(1);
    assert!(
        stderr(&out).contains("run ingest or purge once"),
        "{}",
        stderr(&out)
    );
    assert_eq!(crate::common::site::file_hash(&site.db()), before);
}

/// Item 16: the WAL was left holding the run's commits (whenever the run's connection was not
/// the last one open: its checkpointing thread's, or a monitoring tool's), so `cp inbox.db
/// backup/` copied an empty shell. A run ends with the WAL copied into the database file.
#[test]
fn the_database_file_alone_holds_every_commit_after_a_run() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "first.edi");
    site.ingest(1000).code(0);
    // Another reader of the database, idle while the run goes on, as a dashboard would be.
    let reader = rusqlite::Connection::open(site.db()).unwrap();
    reader
        .query_row("SELECT count(*) FROM inbox", [], |r| r.get::<_, i64>(0))
        .unwrap();
    site.fill(300, 12);
    let out = site.ingest(1000);
    out.code(3);
    let want = site.count("SELECT count(*) FROM interchanges");
    assert!(want > 200);
    let backup = site.path("backup.db");
    fs::copy(site.db(), &backup).unwrap();
    let got: i64 = rusqlite::Connection::open(&backup)
        .unwrap()
        .query_row("SELECT count(*) FROM interchanges", [], |r| r.get(0))
        .unwrap();
    assert_eq!(got, want);
    drop(reader);
}

/// Item 17: `--db` naming a folder said "unable to open database file".
#[test]
fn a_db_that_is_a_folder_is_named_as_such() {
    let site = Site::new();
    for args in [&["stats"][..], &["ingest", "drop"]] {
        let out = crate::common::edi_inbox()
            .current_dir(site.dir.path())
            .args(["--db", "drop"])
            .args(args)
            .run();
        out.code(1);
        assert!(
            stderr(&out).contains("drop is a folder"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

/// Item 17: a `--metrics-file` that could not be written turned a finished, committed ingest
/// into exit 1 ("the job broke"); it is said, and the status is 3. The same for purge.
#[test]
fn a_metrics_file_that_cannot_be_written_is_exit_3() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    fs::write(site.path("not-a-folder"), b"").unwrap();
    let metrics = site.path("not-a-folder/edi.prom");
    let out = site
        .ingest_command(10)
        .arg("--metrics-file")
        .arg(&metrics)
        .run();
    let err = stderr(&out);
    out.code(3);
    assert!(err.contains("cannot write the metrics file"), "{err}");
    assert_eq!(site.files_in("archive"), ["a.edi"]);
    let out = site
        .command()
        .args(["purge", "--days", "1", "--metrics-file"])
        .arg(&metrics)
        .run();
    out.code(3);
}
