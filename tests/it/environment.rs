//! A cron host's day (issue 40, item 7): the environment file is the one configuration (the
//! binary reads every variable `packaging/env` sets, but the units' `*_ARGS`, so that a cron
//! host can source it and run the commands without flags); `-q` says nothing when nothing was
//! read; a report on a copy of the inbox creates nothing beside it.

use std::collections::BTreeSet;
use std::fs;

use crate::common::RunExt;
use crate::common::site::Site;

/// `NAME=value` of the environment file, commented or not.
fn variables() -> Vec<(String, String)> {
    let text = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/env")).unwrap();
    text.lines()
        .map(|l| l.trim_start_matches('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        })
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// Every variable some command's `--help` says it reads (`[env: NAME]`).
fn read_by_the_binary() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for command in [
        "ingest", "purge", "stats", "list", "show", "publish", "consume", "receive", "reapply",
        "migrate", "inspect",
    ] {
        let help = crate::common::edi_inbox().args([command, "--help"]).run();
        for part in help.out().split("[env: ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            names.insert(name);
        }
    }
    names
}

#[test]
fn every_variable_of_the_environment_file_is_read_by_the_binary() {
    let read = read_by_the_binary();
    let units: String = fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/systemd"))
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let mut unread = Vec::new();
    for (name, _) in variables() {
        let ours = name.starts_with("EDI_INBOX_");
        let of_the_units = name.ends_with("_ARGS") && units.contains(&format!("${name}"));
        // librdkafka's settings, each EDI_INBOX_KAFKA_<KEY> (docs/brokers.md#settings).
        let kafka_setting = name == "EDI_INBOX_KAFKA_SASL_PASSWORD";
        if ours && !of_the_units && !kafka_setting && !read.contains(&name) {
            unread.push(name);
        }
    }
    assert!(
        unread.is_empty(),
        "packaging/env sets variables no command reads: {unread:?} (read: {read:?})"
    );
}

/// A cron host that sources the file: `ingest` and `purge` without a flag read the drop,
/// archive and quarantine folders, the minimum age, the metrics folder and the retention from
/// it, and the documented metrics files appear.
#[test]
fn ingest_and_purge_run_from_the_environment_file_alone() {
    let site = Site::new();
    site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
    site.put_sample("broken/unt-count-wrong.edi", "b.edi");
    let base = site.path("");
    let base = base.to_str().unwrap().trim_end_matches('/');
    let env: Vec<(String, String)> = variables()
        .into_iter()
        .filter(|(n, _)| {
            [
                "EDI_INBOX_DB",
                "EDI_INBOX_DROP",
                "EDI_INBOX_ARCHIVE",
                "EDI_INBOX_QUARANTINE",
                "EDI_INBOX_MIN_AGE",
                "EDI_INBOX_METRICS",
                "EDI_INBOX_PURGE_DAYS",
            ]
            .contains(&n.as_str())
        })
        .map(|(n, v)| (n, v.replace("/var/lib/edi-inbox", base)))
        .collect();
    assert_eq!(env.len(), 7, "{env:?}");
    fs::create_dir_all(site.path("metrics")).unwrap();
    // The file's own minimum age (30 s) would leave the new files: a settled drop folder.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(120);
    for f in ["a.edi", "b.edi"] {
        fs::File::options()
            .write(true)
            .open(site.drop().join(f))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let run = |command: &str| {
        crate::common::edi_inbox()
            .env_remove("EDI_INBOX_DB")
            .envs(env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
            .args(if command == "ingest" {
                &["ingest", "-q"][..]
            } else {
                &["purge"][..]
            })
            .run()
    };
    let ingest = run("ingest");
    ingest.code(3);
    assert_eq!(site.files_in("archive"), ["a.edi"], "{ingest}");
    assert_eq!(
        site.files_in("quarantine"),
        ["b.edi", "b.edi.error.txt"],
        "{ingest}"
    );
    assert!(
        site.path("metrics/edi_inbox_ingest.prom").exists(),
        "{ingest}"
    );
    let purge = run("purge");
    purge.code(0);
    assert!(purge.out().contains("(30 days)"), "{purge}");
    // Its summary line says when it was said, as every summary line does.
    let line = purge.out().lines().next().unwrap_or_default().to_string();
    assert!(line.contains("  (at 20") && line.ends_with("Z)"), "{purge}");
    assert!(
        site.path("metrics/edi_inbox_purge.prom").exists(),
        "{purge}"
    );
    // A flag still wins over its variable.
    let other = site.path("elsewhere.prom");
    let purge = crate::common::edi_inbox()
        .env_remove("EDI_INBOX_DB")
        .envs(env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        .args(["purge", "--days", "7", "--metrics-file"])
        .arg(&other)
        .run();
    purge.code(0);
    assert!(
        purge.out().contains("(7 days)") && other.exists(),
        "{purge}"
    );
}

/// The cron recipe's `ingest -q` every minute: a run that read nothing (an empty drop folder,
/// or only files still being written) prints nothing at all; one that did prints its summary.
#[test]
fn a_quiet_run_that_read_nothing_says_nothing() {
    let site = Site::new();
    let quiet = |extra: &[&str]| {
        site.cmd()
            .args(["ingest", "-q"])
            .args(extra)
            .arg(site.drop())
            .run()
    };
    let empty = quiet(&[]);
    empty.code(0);
    assert_eq!(empty.out(), "", "an empty drop folder: {empty}");
    site.put_sample("valid/orders-d01b-no-una.edi", "young.edi");
    let young = quiet(&["--min-age", "1h"]);
    young.code(0);
    assert_eq!(young.out(), "", "only a file left for --min-age: {young}");
    let did = quiet(&[]);
    did.code(0);
    // The summary, with the time it was said (a cron log has none of its own).
    let summary = did.out();
    assert!(
        summary.starts_with("1 file: 1 new, 0 duplicate, 0 drift, 0 rejected, 0 skipped  (at 20")
            && summary.ends_with("Z)\n")
            && summary.lines().count() == 1,
        "{did}"
    );
    // Without -q the summary is always said.
    fs::create_dir_all(site.path("empty")).unwrap();
    let loud = site.cmd().args(["ingest"]).arg(site.path("empty")).run();
    loud.code(0);
    assert!(loud.out().starts_with("0 files: "), "{loud}");
}

/// A copy of the inbox (a backup, a file taken to another host to look at): `stats`, `list`
/// and `show` read it and create nothing beside it, as the docs say of every report (before,
/// SQLite made `-wal` and `-shm` next to the copy).
#[test]
fn reports_on_a_copied_database_create_nothing_beside_it() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    let copy_dir = site.path("copy");
    fs::create_dir_all(&copy_dir).unwrap();
    let copy = copy_dir.join("inbox.db");
    fs::copy(site.db(), &copy).unwrap();
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "PARTNERA", "HUB", "A1"],
    ] {
        let run = crate::common::edi_inbox()
            .arg("--db")
            .arg(&copy)
            .args(args)
            .run();
        run.code(0);
        let beside: Vec<String> = fs::read_dir(&copy_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            beside,
            ["inbox.db"],
            "{args:?} created files beside the copy\n{run}"
        );
    }
    let stats = crate::common::edi_inbox()
        .arg("--db")
        .arg(&copy)
        .args(["stats", "--json"])
        .run();
    assert_eq!(stats.json()[0]["interchanges"], 2, "{stats}");
}
