//! The promises in the README's "Guarantees" section, each tried hard: overlapping runs,
//! `kill -9` at random moments, hostile input, storage faults, and the drift defence.

mod common;

use std::fs;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::site::{Site, assert_same, copy_dir};

fn wait_all(children: Vec<Child>) -> Vec<std::process::Output> {
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

#[test]
fn four_overlapping_runs_apply_each_interchange_once() {
    let reference = Site::new();
    reference.fill(400, 5);
    reference.ingest(10);
    let want = reference.state();
    for archive in [true, false] {
        for round in 0..3 {
            let site = Site::new();
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
            let runs: Vec<Child> = (0..4)
                .map(|_| {
                    let mut c = if archive {
                        site.ingest_command(7)
                    } else {
                        let mut c = site.command();
                        c.args(["ingest", "-q", "--batch", "7"]).arg(site.drop());
                        c
                    };
                    c.stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            for out in wait_all(runs) {
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    matches!(out.status.code(), Some(0) | Some(3)),
                    "archive={archive} round={round}: {stderr}"
                );
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
    let reference = Site::new();
    reference.fill(1500, 21);
    reference.ingest(20);
    let want = reference.state();

    let site = Site::new();
    site.fill(1500, 21);
    let mut rng = edi_inbox::synth::Synth::new(99);
    let mut kills = 0;
    for _ in 0..25 {
        let mut child = site
            .ingest_command(20)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.below(250)));
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
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = site.state();
    site.assert_all_placed(&got, 1500);
    assert_same(&got, &want, "after kill -9");
    assert!(kills >= 5, "only {kills} runs were killed mid-way");
}

use common::site::{Tmpfs, file_hash};

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
    assert_eq!(out.status.code(), Some(1), "{stderr}");
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
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    assert_eq!(site.ingest(10).status.code(), Some(0));
    site.fill(20, 2);
    let before = file_hash(&site.db());
    fs_.remount("ro");
    let out = site.ingest(10);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
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
    assert!(matches!(site.ingest(10).status.code(), Some(0) | Some(3)));
}

#[test]
fn a_lock_held_past_the_busy_timeout_is_a_clear_error() {
    let site = Site::new();
    site.fill(5, 3);
    assert_eq!(site.ingest(10).status.code(), Some(0));
    site.fill(12, 4);
    let holder = rusqlite::Connection::open(site.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = site
        .ingest_command(10)
        .args(["--busy-timeout", "1s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
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
    assert!(matches!(site.ingest(10).status.code(), Some(0) | Some(3)));
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
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("malformed") || stderr.contains("not a database"),
        "{stderr}"
    );
    assert_eq!(file_hash(&site.db()), before);
}
