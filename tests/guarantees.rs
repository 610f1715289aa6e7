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
