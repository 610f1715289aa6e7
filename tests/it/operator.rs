//! `purge`, `stats`, `list`, `show`, `--metrics-file` and `completions`, driven as an operator
//! runs them.

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::common::site::Site;
use crate::common::{RunExt, StartExt};
use crate::common::{edi_inbox, json_lines, samples};
use predicates::prelude::*;
use serde_json::Value;

/// `ingest --json` over the drop folder: the run.
fn ingest(site: &Site) -> crate::common::Run {
    site.ingest_json(&[])
}

/// RFC 3339 UTC, as the database stores times, `ago` before now.
fn ago(ago: Duration) -> String {
    humantime::format_rfc3339_millis(SystemTime::now() - ago).to_string()
}

const DAY: Duration = Duration::from_secs(86_400);

/// Makes every inbox entry look received `ago` before now.
fn age_inbox(site: &Site, ago_by: Duration) {
    site.sql(&format!("UPDATE inbox SET received_at = '{}'", ago(ago_by)));
}

per_backend! {
    fn purge_rejects_bad_days_and_deletes_nothing(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        ingest(&site);
        age_inbox(&site, 400 * DAY);
        for bad in [
            &["--days", "0"][..],
            &["--days", "-3"],
            &["--days", "ten"],
            &["--days"],
            &[],
            &["--days", "1.5"],
        ] {
            site.cmd().arg("purge").args(bad).assert().code(2);
        }
        assert_eq!(site.stat("inbox"), 1);
    }
}

per_backend! {
    fn purge_keeps_entries_just_inside_the_window(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        site.put_sample("valid/invrpt-level-b.edi", "b.edi");
        site.put_sample("broken/unt-count-wrong.edi", "c.edi");
        ingest(&site);
        ingest(&site); // a duplicate sighting of each, and the rejection seen twice
        let just_outside = ago(30 * DAY + Duration::from_secs(60));
        let just_inside = ago(30 * DAY - Duration::from_secs(60));
        site.sql(&format!(
            "UPDATE inbox SET received_at = '{just_outside}' WHERE control_ref = 'ORD''0042';
             UPDATE inbox SET received_at = '{just_inside}' WHERE control_ref = 'LB0001';
             UPDATE sightings SET seen_at = '{just_outside}' WHERE control_ref = 'ORD''0042';
             UPDATE rejections SET last_seen_at = '{just_outside}';
             UPDATE rejected_files SET last_seen_at = '{just_outside}';"
        ));

        let lines = site.json(&["purge", "--days", "30", "--dry-run", "--json"]).code(0).json();
        assert_eq!(lines[0]["purged"], 1);
        assert_eq!(lines[0]["dry_run"], true);
        assert_eq!(site.stat("inbox"), 2);

        let lines = site.json(&["purge", "--days", "30", "--json", "--batch-size", "1"]).code(0).json();
        let r = &lines[0];
        assert_eq!(r["purged"], 1);
        assert_eq!(r["days"], 30);
        assert_eq!(r["dry_run"], false);
        assert_eq!(r["sightings_purged"], 1);
        assert_eq!(r["rejections_purged"], 1);
        assert_eq!(site.stat("rejected"), 0);
        assert_eq!(site.count("SELECT count(*) FROM rejections"), 0);
        let cutoff = r["cutoff"].as_str().unwrap();
        assert!(cutoff.ends_with('Z') && cutoff.len() == 24, "{cutoff}");
        assert!(just_outside.as_str() < cutoff && cutoff < just_inside.as_str());
        assert_eq!(r["oldest_kept"], just_inside.as_str());
        let kept = &site.show("LEVELBSENDER", "LEVELBRCPT", "LB0001")["interchanges"];
        let in_inbox = kept
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["in_inbox"] == true)
            .count();
        assert_eq!(in_inbox, 1, "{kept}");
        // The record stays: purge empties only the duplicate-detection window.
        assert_eq!(site.stat("interchanges"), 2);
        assert_eq!(site.stat("messages"), 2);
        // Their events too (none published).
        assert_eq!(site.unpublished(), 2);
    }
}

per_backend! {
    fn a_redelivery_after_purge_is_new(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        ingest(&site);
        age_inbox(&site, 10 * DAY);
        site.cmd()
            .args(["purge", "--days", "7"])
            .assert()
            .code(0)
            .stdout(
                predicate::str::contains("purged 1 inbox entry received")
                    .and(predicate::str::contains("the inbox is empty")),
            );
        let lines = site.json(&["ingest", "--json", site.path("drop").to_str().unwrap()]).code(0).json();
        assert_eq!(lines[0]["status"], "new");
        assert_eq!(site.stat("interchanges"), 2);
        let shown = site.json(&["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--json"]).json();
        let copies = shown[0]["interchanges"].as_array().unwrap();
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0]["in_inbox"], false);
        assert_eq!(copies[1]["in_inbox"], true);
    }
}

per_backend! {
    fn purge_and_ingest_at_the_same_time_both_finish(site) {
        let mut g = crate::common::synth::Synth::new(3);
        for n in 0..400 {
            let layout = g.layout();
            let data = g.interchange("OLD", "RECIPIENT", &format!("O{n}"), 1, layout);
            fs::write(site.path("drop").join(format!("old{n:04}.edi")), data).unwrap();
        }
        ingest(&site);
        age_inbox(&site, 90 * DAY);
        fs::remove_dir_all(site.path("drop")).unwrap();
        fs::create_dir_all(site.path("drop")).unwrap();
        for n in 0..400 {
            let layout = g.layout();
            let data = g.interchange("NEW", "RECIPIENT", &format!("N{n}"), 2, layout);
            fs::write(site.path("drop").join(format!("new{n:04}.edi")), data).unwrap();
        }
        let bin = assert_cmd::cargo::cargo_bin("edi-inbox");
        let ingest = Command::new(&bin)
            .arg("--db")
            .arg(site.db_arg())
            .args(["ingest", "-q", "--batch", "5"])
            .arg(site.path("drop"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start();
        let purge = Command::new(&bin)
            .arg("--db")
            .arg(site.db_arg())
            .args(["purge", "--days", "30", "--batch-size", "7", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start();
        let (i, p) = (ingest.wait(), purge.wait());
        i.code(0);
        p.code(0);
        assert_eq!(json_lines(&p.stdout)[0]["purged"], 400);
        assert_eq!(site.stat("inbox"), 400);
        assert_eq!(
            site.count("SELECT count(*) FROM inbox WHERE sender = 'NEW'"),
            400
        );
        assert_eq!(site.stat("interchanges"), 800);
    }
}

per_backend! {
    /// Two purges at once (two hosts' cron lines): each entry is deleted by one of them, the
    /// counts they report add up, and neither fails.
    fn two_purges_at_once_delete_each_entry_once(site) {
        let mut g = crate::common::synth::Synth::new(4);
        for n in 0..300 {
            let layout = g.layout();
            let data = g.interchange("OLD", "RECIPIENT", &format!("O{n}"), 1, layout);
            fs::write(site.path("drop").join(format!("old{n:04}.edi")), data).unwrap();
        }
        ingest(&site);
        age_inbox(&site, 90 * DAY);
        let purges: Vec<Command> = (0..2)
            .map(|_| {
                let mut c = site.command();
                c.args(["purge", "--days", "30", "--batch-size", "7", "--json"]);
                c
            })
            .collect();
        let mut purged = 0;
        for out in crate::common::run_together(purges) {
            out.code(0);
            purged += json_lines(&out.stdout)[0]["purged"].as_i64().unwrap();
        }
        assert_eq!(purged, 300);
        assert_eq!(site.stat("inbox"), 0);
        assert_eq!(site.stat("interchanges"), 300);
    }
}

per_backend! {
    fn stats_counts_what_an_operator_checks_first(site) {
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.put_sample("broken/unz-count-wrong.edi", "b.edi");
        ingest(&site);
        ingest(&site);
        let lines = site.json(&["stats", "--json"]).code(0).json();
        let s = &lines[0];
        assert_eq!(s["inbox"], 2);
        assert_eq!(s["interchanges"], 2);
        assert_eq!(s["messages"], 2);
        assert_eq!(s["duplicates"], 2);
        assert_eq!(s["drift"], 0);
        assert_eq!(s["rejected"], 1);
        assert_eq!(s["outbox_unpublished"], 2);
        assert!(s["database_bytes"].as_u64().unwrap() > 0);
        assert!(s["oldest_entry"].as_str().unwrap() <= s["newest_entry"].as_str().unwrap());
        site.cmd()
            .arg("stats")
            .assert()
            .code(0)
            .stdout(predicate::str::contains("inbox entries        2"));
    }
}

#[test]
fn reports_need_an_existing_database() {
    let site = Site::new();
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "a", "b", "c"],
        &["purge", "--days", "3"],
    ] {
        site.cmd()
            .args(args)
            .assert()
            .code(1)
            .stderr(predicate::str::contains("there is no inbox database"));
    }
    assert!(!site.db().exists());
}

/// Errors that name the fix (issue 40, item 6): no inbox where nothing named one is a usage
/// error for every command, saying how to name one; a named one that is not there says to
/// check the path; a database in a folder that does not exist says so (not SQLite's "Error
/// code 14"); a misspelt scheme is refused as one, never created as a file named after the URL
/// (its password in the name); purge's days refused in words.
#[test]
fn errors_name_the_fix() {
    let site = Site::new();
    let folder = site.path("empty");
    fs::create_dir_all(&folder).unwrap();
    for args in [
        &["stats"][..],
        &["list"],
        &["show", "a", "b", "c"],
        &["purge", "--days", "3"],
        &["ingest", "."],
    ] {
        let out = edi_inbox()
            .current_dir(&folder)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--db or EDI_INBOX_DB"), "{args:?}: {err}");
    }
    let named = site.path("none.db");
    let out = edi_inbox()
        .arg("--db")
        .arg(&named)
        .arg("stats")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("check the path named by --db") && err.contains("run ingest once"),
        "{err}"
    );

    let nowhere = site.path("no-such-folder/inbox.db");
    let out = edi_inbox()
        .arg("--db")
        .arg(&nowhere)
        .args(["ingest", "."])
        .current_dir(&folder)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no-such-folder does not exist") && !err.contains("Error code"),
        "{err}"
    );

    let out = edi_inbox()
        .current_dir(&folder)
        .args(["--db", "postgress://edi:s3cret@db.example/edi", "stats"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("postgress:// is not a scheme --db takes"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "the password shown: {err}");
    assert_eq!(
        fs::read_dir(&folder).unwrap().count(),
        0,
        "a file was made after the URL"
    );

    for (days, why) in [
        ("0", "0 days: purge keeps the keys"),
        ("-1", "cannot be negative"),
    ] {
        let out = site.cmd().args(["purge", "--days", days]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{days}: {err}");
        assert!(
            err.contains(why) && !err.contains("4294967295"),
            "{days}: {err}"
        );
    }
}

per_backend! {
    fn list_shows_recent_events_newest_first_with_filters(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        site.put_sample("valid/invrpt-level-b.edi", "b.edi");
        site.put_sample("broken/empty.edi", "c.edi");
        ingest(&site);
        fs::remove_file(site.path("drop/b.edi")).unwrap();
        ingest(&site);
        let all = site.json(&["list", "--json"]).json();
        let statuses: Vec<&str> = all.iter().map(|e| e["status"].as_str().unwrap()).collect();
        // The second run saw a.edi again (duplicate) and c.edi again (rejected, counted again);
        // events of the same millisecond may come in either order.
        let mut sorted = statuses.clone();
        sorted.sort();
        assert_eq!(sorted, ["duplicate", "new", "new", "rejected"], "{all:?}");
        assert_eq!(statuses[2..], ["new", "new"], "{all:?}");
        let times: Vec<&str> = all.iter().map(|e| e["time"].as_str().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");

        let rejected = site.json(&["list", "--json", "--status", "rejected"]).json();
        assert_eq!(rejected.len(), 1);
        assert!(rejected[0]["error"].as_str().unwrap().contains("empty"));
        let by_sender = site.json(&["list", "--json", "--sender", "LEVELBSENDER"]).json();
        assert_eq!(by_sender.len(), 1);
        assert_eq!(by_sender[0]["control_ref"], "LB0001");
        let limited = site.json(&["list", "--json", "--limit", "2"]).json();
        assert_eq!(limited.len(), 2);
        let future = site.json(&["list", "--json", "--since", "2999-01-01"]).json();
        assert!(future.is_empty());
        let past = site.json(&["list", "--json", "--since", "2000-01-01T00:00:00Z"]).json();
        assert_eq!(past.len(), 4);
        site.cmd()
            .args(["list", "--status", "lost"])
            .assert()
            .code(2);
        site.cmd()
            .args(["list", "--since", "tuesday"])
            .assert()
            .code(2);
        site.cmd().args(["list", "--limit", "0"]).assert().code(2);
        site.cmd()
            .args(["list", "--status", "new"])
            .assert()
            .code(0)
            .stdout(
                predicate::str::contains("  new  ").and(predicate::str::contains(
                    r"SENDER+ONE -> RECEIVER ref 'ORD'\''0042'",
                )),
            );
    }
}

/// Three valid samples (four interchanges: PARTNERA -> HUB A1 and A2, ORDERS each;
/// LEVELBSENDER -> LEVELBRCPT LB0001, INVRPT; SENDER+ONE -> RECEIVER ORD'0042, ORDERS) and one
/// rejected interchange whose UNB was read (BROKENSENDER -> RECIPIENT B0001), ingested with
/// CONTRLs, then once again (a duplicate of each valid one).
fn find_site(site: &Site) {
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.put_sample("valid/invrpt-level-b.edi", "b.edi");
    site.put_sample("valid/orders-d01b-no-una.edi", "c.edi");
    site.put_sample("broken/unt-count-wrong.edi", "bad.edi");
    site.ingest_json(&[
        "--contrl",
        "always",
        "--quarantine",
        site.path("q").to_str().unwrap(),
    ])
    .code(3);
    site.ingest_json(&[]).code(0);
}

per_backend! {
    /// Issue 40, item 4: `list` finds by every part of the key, the message type, the file,
    /// times relative to now and a time before which; pages with --offset; and says how many
    /// match in all (`total` on each event in --json). On the code before, --recipient, --ref,
    /// --type, --file, --until, --offset and `--since 2h` were refused (exit 2).
    fn list_finds_by_key_type_file_and_time_and_pages_with_a_total(site) {
        find_site(&site);
        let refs = |args: &[&str]| -> (Vec<String>, Vec<u64>) {
            let events = site.list(args);
            (
                events.iter().map(|e| e["control_ref"].as_str().unwrap_or("-").to_string()).collect(),
                events.iter().map(|e| e["total"].as_u64().unwrap()).collect(),
            )
        };
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let (all, totals) = refs(&[]);
        assert_eq!(all.len(), 9, "{all:?}");
        assert!(totals.iter().all(|t| *t == 9), "{totals:?}");
        let (hub, totals) = refs(&["--recipient", "HUB"]);
        assert_eq!(sorted(hub), ["A1", "A1", "A2", "A2"]);
        assert_eq!(totals, [4, 4, 4, 4]);
        assert_eq!(refs(&["--ref", "LB0001", "--status", "new"]).0, ["LB0001"]);
        let invrpt = site.list(&["--type", "INVRPT"]);
        assert_eq!(invrpt.len(), 2, "{invrpt:?}");
        for e in &invrpt {
            assert_eq!(e["message_types"], serde_json::json!(["INVRPT"]), "{e}");
            assert_eq!(e["messages"], 1, "{e}");
        }
        assert_eq!(refs(&["--type", "ORDERS"]).0.len(), 6);
        assert_eq!(sorted(refs(&["--file", "a.edi"]).0), ["A1", "A1", "A2", "A2"]);
        assert_eq!(refs(&["--file", "drop/a.edi"]).0.len(), 4);
        assert!(refs(&["--file", "a"]).0.is_empty(), "a name matches whole");
        assert_eq!(refs(&["--since", "2h"]).0.len(), 9);
        assert_eq!(refs(&["--since", "today"]).0.len(), 9);
        assert!(refs(&["--until", "30m"]).0.is_empty());
        assert!(refs(&["--since", "yesterday", "--until", "today"]).0.is_empty());
        assert_eq!(refs(&["--until", "2999-01-01"]).0.len(), 9);
        // Pages: the same events, in the same order, whatever the page size.
        let (page2, totals) = refs(&["--limit", "4", "--offset", "4"]);
        assert_eq!(page2, all[4..8]);
        assert_eq!(totals, [9, 9, 9, 9]);
        assert!(refs(&["--offset", "9"]).0.is_empty());
        for bad in [&["--since", "2x"][..], &["--until", "tuesday"], &["--offset", "-1"]] {
            site.cmd().arg("list").args(bad).assert().code(2);
        }
    }
}

per_backend! {
    /// Issue 40, item 4: `list`'s human form has a header, columns that line up, the key as
    /// ingest prints it (each part quoted as a shell needs it, to paste into `show`), the
    /// message type and count, a last line with the total and the next page, and "no events
    /// match" where none does. On the code before: no header, the key as `S R C`, no type, no
    /// total, and nothing at all for no events.
    fn list_prints_a_header_aligned_columns_the_key_and_a_total(site) {
        find_site(&site);
        let out = site.run(&["list", "--limit", "3"]).success().out();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert!(lines[0].starts_with("time "), "{out}");
        for column in ["status", "file", "key", "type"] {
            let at = lines[0].find(column).unwrap_or_else(|| panic!("no {column}: {out}"));
            for row in &lines[1..4] {
                assert_eq!(row.as_bytes()[at - 2..at], *b"  ", "{column} at {at}: {out}");
                assert_ne!(row.as_bytes()[at], b' ', "{column} at {at}: {out}");
            }
        }
        assert_eq!(lines[4], "events 1 to 3 of 9; --offset 3 for the next", "{out}");
        let out = site.run(&["list", "--ref", "ORD'0042", "--status", "new"]).success().out();
        assert!(
            out.contains(r"SENDER+ONE -> RECEIVER ref 'ORD'\''0042'  ORDERS  ")
                && out.ends_with("\n1 event\n"),
            "{out}"
        );
        let out = site.run(&["list", "--sender", "BROKENSENDER"]).success().out();
        assert!(
            out.contains("BROKENSENDER -> RECIPIENT ref B0001") && out.contains("UNT at byte"),
            "{out}"
        );
        assert_eq!(site.run(&["list", "--sender", "NOBODY"]).success().out(), "no events match\n");
        assert_eq!(
            site.run(&["list", "--offset", "20"]).success().out(),
            "no events past --offset 20: 9 match\n"
        );
    }
}

per_backend! {
    /// Issue 40, items 2 and 4: a rejected interchange whose UNB was read is found by its
    /// sender (`list --sender`, its key in --json rather than `"sender": null`) and `show`n:
    /// its error, the bytes of its file (`--raw`) and the negative CONTRL that answered it.
    /// `list --contrl` lists the CONTRLs sent, positive and negative. On the code before,
    /// `list --sender BROKENSENDER` found nothing and `show` answered exit 3.
    fn a_rejected_interchange_is_found_by_its_sender_and_shown_with_its_contrl(site) {
        find_site(&site);
        let found = site.list(&["--sender", "BROKENSENDER"]);
        assert_eq!(found.len(), 1, "{found:?}");
        let e = &found[0];
        assert_eq!(
            (&e["status"], &e["sender"], &e["recipient"], &e["control_ref"]),
            (&"rejected".into(), &"BROKENSENDER".into(), &"RECIPIENT".into(), &"B0001".into())
        );
        assert!(e["error"].as_str().unwrap().contains("UNT at byte 118"), "{e}");
        assert_eq!(site.list(&["--status", "rejected", "--ref", "B0001"]).len(), 1);
        assert!(site.list(&["--status", "rejected", "--ref", "A1"]).is_empty());

        let out = site.run(&["show", "BROKENSENDER", "RECIPIENT", "B0001"]).success().out();
        assert!(
            out.starts_with("interchange B0001 from BROKENSENDER to RECIPIENT: rejected, never stored\n")
                && out.contains("rejected     in ")
                && out.contains("bad.edi at byte 118: UNT at byte 118")
                && out.contains("UCI 0083 4, 0085 "),
            "{out}"
        );
        let shown = site.show("BROKENSENDER", "RECIPIENT", "B0001");
        assert_eq!(shown["rejections"][0]["byte_offset"], 118, "{shown}");
        assert_eq!(shown["acknowledgements"][0]["action"], "4", "{shown}");
        let raw = site.run(&["show", "BROKENSENDER", "RECIPIENT", "B0001", "--raw"]);
        raw.success();
        assert_eq!(raw.stdout, fs::read(samples().join("broken/unt-count-wrong.edi")).unwrap());

        let sent = site.list(&["--contrl"]);
        assert_eq!(sent.len(), 5, "{sent:?}");
        let negative: Vec<&Value> = sent.iter().filter(|s| s["answer"] == "negative").collect();
        assert_eq!(negative.len(), 1, "{sent:?}");
        assert_eq!(
            (&negative[0]["sender"], &negative[0]["control_ref"], &negative[0]["action"]),
            (&"BROKENSENDER".into(), &"B0001".into(), &"4".into())
        );
        assert!(sent.iter().all(|s| s["total"] == 5 && s["time"].is_string()), "{sent:?}");
        assert_eq!(site.list(&["--contrl", "--sender", "PARTNERA"]).len(), 2);
        let out = site.run(&["list", "--contrl", "--sender", "PARTNERA"]).success().out();
        assert!(
            out.starts_with("time ")
                && out.contains("PARTNERA -> HUB ref A1")
                && out.contains("positive (7 acknowledged)")
                && out.ends_with("\n2 CONTRLs\n"),
            "{out}"
        );
    }
}

per_backend! {
    /// Issue 40, item 4: `show ID` takes the number `show` prints (`stored as #N`, `id` in
    /// --json) and shows that interchange's key; an unknown number is exit 3, a word that is
    /// no number exit 2, and the key pasted unquoted (the shell's redirection at `->`) is
    /// explained. On the code before, `show N` was a usage error (three arguments wanted).
    fn show_takes_the_number_show_prints(site) {
        find_site(&site);
        let shown = site.show("LEVELBSENDER", "LEVELBRCPT", "LB0001");
        let id = shown["interchanges"][0]["id"].as_i64().unwrap().to_string();
        let by_key = site.run(&["show", "LEVELBSENDER", "LEVELBRCPT", "LB0001"]).success().out();
        assert!(by_key.contains(&format!("(stored as #{id}, in the inbox)")), "{by_key}");
        assert_eq!(site.run(&["show", &id]).success().out(), by_key);
        let json = site.json(&["show", &id, "--json"]).success().json();
        assert_eq!(json[0], shown);
        site.run(&["show", "987654"]).code(3);
        site.run(&["show", "LB0001"]).code(2);
        site.run(&["show", "LEVELBSENDER", "LEVELBRCPT"]).code(2);
        let pasted = site.run(&["show", "LEVELBSENDER", "-", "ref", "LB0001"]);
        pasted.code(2);
        assert!(pasted.err().contains("redirection"), "{}", pasted.err());
    }
}

per_backend! {
    /// Issue 40, item 4: `stats --by sender|recipient|type [--since]`: the volumes of each day
    /// for each partner or type, and with --quarantine (or EDI_INBOX_QUARANTINE) the files in
    /// quarantine now, their notes not counted. On the code before, --by and --quarantine were
    /// refused (exit 2).
    fn stats_by_partner_gives_each_days_volumes_and_the_quarantine_now(site) {
        find_site(&site);
        let today = humantime::format_rfc3339(SystemTime::now()).to_string()[..10].to_string();
        let stats = site.json(&["stats", "--json", "--by", "sender"]).success().json().remove(0);
        assert_eq!(stats["by"], "sender");
        let volumes = stats["volumes"].as_array().unwrap();
        let of = |key: &str| -> Vec<i64> {
            let v = volumes.iter().find(|v| v["key"] == key).unwrap_or_else(|| panic!("{key}: {stats}"));
            assert_eq!(v["day"], today.as_str(), "{v}");
            ["interchanges", "messages", "duplicates", "drift", "rejected"]
                .map(|f| v[f].as_i64().unwrap())
                .to_vec()
        };
        assert_eq!(volumes.len(), 4, "{stats}");
        assert_eq!(of("PARTNERA"), [2, 2, 2, 0, 0]);
        assert_eq!(of("LEVELBSENDER"), [1, 1, 1, 0, 0]);
        assert_eq!(of("BROKENSENDER"), [0, 0, 0, 0, 1]);
        assert!(stats.get("quarantined_now").is_none(), "{stats}");
        let by_type = site.json(&["stats", "--json", "--by", "type", "--since", "7d"]).success().json().remove(0);
        let orders = by_type["volumes"].as_array().unwrap().iter().find(|v| v["key"] == "ORDERS").unwrap().clone();
        assert_eq!((&orders["interchanges"], &orders["messages"], &orders["duplicates"]), (&3.into(), &3.into(), &Value::Null));
        let later = site.json(&["stats", "--json", "--by", "recipient", "--since", "2999-01-01"]).success().json().remove(0);
        assert_eq!(later["volumes"], serde_json::json!([]));

        assert_eq!(site.files_in("q").len(), 2, "the file and its note");
        let q = site.path("q");
        let stats = site.json(&["stats", "--json", "--quarantine", q.to_str().unwrap()]).success().json().remove(0);
        assert_eq!(stats["quarantined_now"], 1, "{stats}");
        let out = site.cmd().env("EDI_INBOX_QUARANTINE", &q).args(["stats", "--by", "sender"]).output().unwrap();
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.contains("in quarantine now    1 ("), "{out}");
        assert!(out.contains("day         sender        interchanges  messages  duplicates  drift  rejected"), "{out}");
        assert!(out.contains(&format!("{today}  PARTNERA                 2         2           2      0         0")), "{out}");
        site.run(&["stats", "--since", "7d"]).code(2);
    }
}

/// Issue 40, item 7: the commands' list in `--help` said `list` shows "new, duplicate, drift,
/// rejected" events, leaving out `failed` (and `refused`), which it lists too.
#[test]
fn the_help_names_every_kind_of_event_list_shows() {
    let out = edi_inbox().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("list "))
        .unwrap_or_else(|| panic!("{help}"));
    for kind in ["new", "duplicate", "drift", "rejected", "refused", "failed"] {
        assert!(line.contains(kind), "{kind}: {line}");
    }
}

per_backend! {
    fn show_prints_envelope_messages_sightings_and_raw_bytes(site) {
        site.put_sample("valid/orders-d01b-no-una.edi", "a.edi");
        ingest(&site);
        let changed = fs::read_to_string(samples().join("valid/orders-d01b-no-una.edi"))
            .unwrap()
            .replace("PO-4712", "PO-4713");
        fs::write(site.path("drop/b.edi"), changed).unwrap();
        ingest(&site);
        site.cmd()
            .args(["show", "SENDER+ONE", "RECEIVER", "ORD'0042"])
            .assert()
            .code(0)
            .stdout(
                predicate::str::contains("interchange ORD'0042")
                    .and(predicate::str::contains(
                        "sender       SENDER+ONE (qualifier ZZ)",
                    ))
                    .and(predicate::str::contains(
                        "ORDERS D:01B:UN  10 segments  outbox unpublished",
                    ))
                    .and(predicate::str::contains("sightings    2"))
                    .and(predicate::str::contains("duplicate"))
                    .and(
                        predicate::str::contains("DRIFT")
                            .and(predicate::str::contains("first accepted")),
                    ),
            );
        // The JSON names the same things as `inspect --json` does.
        let shown = site.json(&["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--json"]).json();
        let i = &shown[0]["interchanges"][0];
        let m = &i["messages"][0];
        assert_eq!(
            (&m["ref"], &m["type"], &m["group"]),
            (&"ORD1".into(), &"ORDERS".into(), &Value::Null)
        );
        assert_eq!(i["test"], false);
        assert!(i["file"].as_str().unwrap().ends_with("a.edi"));
        assert_eq!(shown[0]["sightings"][1]["status"], "drift");
        let raw = site
            .cmd()
            .args(["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--raw"])
            .output()
            .unwrap();
        let original = fs::read(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        assert_eq!(raw.stdout, original.strip_suffix(b"\n").unwrap());
        site.cmd()
            .args(["show", "SENDER+ONE", "RECEIVER", "NOPE"])
            .assert()
            .code(3)
            .stderr(predicate::str::contains(
                "no interchange from SENDER+ONE to RECEIVER with control reference NOPE",
            ));
        site.cmd()
            .args(["show", "only-two", "args"])
            .assert()
            .code(2);
    }
}

/// Checks what promtool would: HELP and TYPE before samples, counters named `_total`, sample
/// lines of the form `name{labels} value`.
fn check_exposition(text: &str) {
    let mut typed = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            } else {
                assert!(!name.ends_with("_total"), "{name}");
            }
            typed.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with("# HELP ") {
            let (series, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
            let name = series.split('{').next().unwrap();
            assert!(typed.contains_key(name), "{name} has no TYPE line");
            assert!(name.starts_with("edi_inbox_"), "{name}");
        }
    }
}

fn promtool_check(path: &std::path::Path) {
    let Some(promtool) = promtool() else {
        return;
    };
    let out = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(fs::File::open(path).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

per_backend! {
    fn metrics_files_follow_the_prometheus_conventions(site) {
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.put_sample("broken/empty.edi", "b.edi");
        let textfile = site.path("textfile");
        site.cmd()
            .args(["ingest", "-q", "--metrics-file"])
            .arg(textfile.join("edi_inbox_ingest.prom"))
            .arg(site.path("drop"))
            .assert()
            .code(3);
        site.cmd()
            .args(["ingest", "-q", "--metrics-file"])
            .arg(textfile.join("edi_inbox_ingest.prom"))
            .arg(site.path("drop"))
            .assert()
            .code(3);
        let text = fs::read_to_string(textfile.join("edi_inbox_ingest.prom")).unwrap();
        check_exposition(&text);
        assert!(
            text.contains("edi_inbox_ingest_interchanges_total{status=\"new\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("edi_inbox_ingest_interchanges_total{status=\"duplicate\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("edi_inbox_ingest_interchanges_total{status=\"rejected\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("edi_inbox_ingest_last_run_interchanges{status=\"duplicate\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("edi_inbox_inbox_entries 2\n"), "{text}");
        assert!(
            text.contains("edi_inbox_ingest_last_success_timestamp_seconds 1"),
            "{text}"
        );
        promtool_check(&textfile.join("edi_inbox_ingest.prom"));

        site.cmd()
            .args(["purge", "--days", "1", "--metrics-file"])
            .arg(textfile.join("edi_inbox_purge.prom"))
            .assert()
            .code(0);
        let text = fs::read_to_string(textfile.join("edi_inbox_purge.prom")).unwrap();
        check_exposition(&text);
        assert!(text.contains("edi_inbox_purge_entries_total 0\n"), "{text}");
        promtool_check(&textfile.join("edi_inbox_purge.prom"));
        // Only the two files: no temporary file is left behind.
        assert_eq!(fs::read_dir(&textfile).unwrap().count(), 2);
        node_exporter_reads(&textfile);
    }
}

/// Every run records how it ended; a fatal run keeps the figures (and the last success) of the
/// run before it, so that the alert on "no success for a while" still sees the real age.
#[test]
fn a_run_that_fails_records_its_exit_status_and_keeps_the_last_success() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    let prom = site.path("metrics/edi_inbox_ingest.prom");
    let stamp = |code: u8| format!("\nedi_inbox_last_run_exit_code{{command=\"ingest\"}} {code}\n");
    let success = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("edi_inbox_ingest_last_success_timestamp_seconds "))
            .map(str::to_string)
    };
    site.cmd()
        .args(["ingest", "-q", "--metrics-file"])
        .arg(&prom)
        .arg(site.drop())
        .assert()
        .code(0);
    let first = fs::read_to_string(&prom).unwrap();
    assert!(first.contains(&stamp(0)), "{first}");
    let last_success = success(&first).expect("a last success");

    // A fatal error before anything is decided: the archive folder is a file.
    let not_a_folder = site.put("archive", b"x");
    site.cmd()
        .args(["ingest", "-q", "--archive"])
        .arg(&not_a_folder)
        .arg("--metrics-file")
        .arg(&prom)
        .arg(site.drop())
        .assert()
        .code(1);
    let failed = fs::read_to_string(&prom).unwrap();
    assert!(failed.contains(&stamp(1)), "{failed}");
    assert!(!failed.contains(&stamp(0)), "{failed}");
    assert_eq!(success(&failed), Some(last_success), "{failed}");
    assert!(
        failed.contains("edi_inbox_ingest_interchanges_total{status=\"new\"} 2\n"),
        "{failed}"
    );
    check_exposition(&failed);
    promtool_check(&prom);

    // A usage error (no database where none is named) is recorded too, as 2.
    let fresh = Site::new();
    let prom = fresh.path("edi_inbox_ingest.prom");
    edi_inbox()
        .current_dir(fresh.path(""))
        .args(["ingest", "--metrics-file"])
        .arg(&prom)
        .arg(fresh.drop())
        .assert()
        .code(2);
    let text = fs::read_to_string(&prom).unwrap();
    assert!(text.contains(&stamp(2)), "{text}");
    assert!(
        text.contains("\nedi_inbox_last_run_timestamp_seconds{command=\"ingest\"} 1"),
        "{text}"
    );
}

per_backend! {
    /// A drop folder that does not exist (unmounted, misnamed), or a shell pattern that matched
    /// nothing (it arrives as itself), is a configuration failure (issue 40, item 6): exit 1,
    /// nothing read, not even from the paths that exist, nothing recorded as rejected; each
    /// path named on standard error, and `edi_inbox_ingest_paths_missing` in the metrics file
    /// beside the previous run's figures, set back to 0 by the next good run.
    fn a_drop_folder_that_does_not_exist_is_a_configuration_failure(site) {
        let prom = site.path("metrics/edi_inbox_ingest.prom");
        // `ingest -q --metrics-file PROM DROP` and the PATHs that follow.
        let ingest = |more: &[&std::path::Path]| {
            let mut c = site.command();
            c.args(["ingest", "-q", "--metrics-file"]).arg(&prom).arg(site.drop()).args(more);
            c.output().unwrap()
        };
        assert_eq!(ingest(&[]).status.code(), Some(0));
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        let missing_gauge = |text: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix("edi_inbox_ingest_paths_missing "))
                .map(str::to_string)
        };
        let unmounted = site.path("mnt/drop");
        let pattern = site.path("drop/*.xml");
        let out = ingest(&[&unmounted, &pattern]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{} does not exist (a drop folder not mounted, or misnamed?)", unmounted.display()))
                && err.contains(&format!("{} does not exist (a shell pattern that matched nothing?)", pattern.display()))
                && err.contains("2 paths named to read do not exist; nothing was read or decided"),
            "{err}"
        );
        assert!(site.drop().join("a.edi").exists(), "nothing read or moved");
        let text = fs::read_to_string(&prom).unwrap();
        assert_eq!(missing_gauge(&text).as_deref(), Some("2"), "{text}");
        assert!(text.contains("\nedi_inbox_last_run_exit_code{command=\"ingest\"} 1\n"), "{text}");
        check_exposition(&text);
        assert!(text.contains("edi_inbox_ingest_last_success_timestamp_seconds "), "{text}");
        // Nothing was recorded: no rejection for list to show, no decision.
        let list = site.cmd().args(["list", "--json"]).output().unwrap();
        assert_eq!(list.status.code(), Some(0), "{list:?}");
        assert!(list.stdout.is_empty(), "{list:?}");

        // Mounted again: the next run reads, and says so in the figure.
        assert_eq!(ingest(&[]).status.code(), Some(0));
        let text = fs::read_to_string(&prom).unwrap();
        assert_eq!(missing_gauge(&text).as_deref(), Some("0"), "{text}");
    }
}

/// `publish --follow` writes its figures while it runs; waiting for a broker that does not
/// answer, it keeps the last success the file held, so the alert sees the publisher stalled.
#[test]
fn a_following_publisher_that_cannot_connect_keeps_its_last_success() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    let prom = site.path("edi_inbox_publish.prom");
    let before = "# HELP edi_inbox_publish_last_success_timestamp_seconds When.\n\
                  # TYPE edi_inbox_publish_last_success_timestamp_seconds gauge\n\
                  edi_inbox_publish_last_success_timestamp_seconds 1234\n";
    fs::write(&prom, before).unwrap();
    // Nothing listens on port 1 of the loopback address: every connection is refused.
    let publisher = std::process::Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
        .arg("--db")
        .arg(site.db_arg())
        .args([
            "publish",
            "--follow",
            "--to",
            "nats://127.0.0.1:1",
            "--metrics-file",
        ])
        .arg(&prom)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = fs::read_to_string(&prom).unwrap();
        if text.contains("edi_inbox_outbox_unpublished{") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no figures written: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    publisher.signal(libc::SIGTERM);
    let status = publisher.wait();
    assert!(
        text.contains("\nedi_inbox_outbox_unpublished{kind=\"message\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("\nedi_inbox_publish_last_success_timestamp_seconds 1234\n"),
        "{text}"
    );
    // Stopped while it never got through: the run ends as asked, and says how.
    status.code(0);
    let text = fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("\nedi_inbox_last_run_exit_code{command=\"publish\"} 0\n"),
        "{text}"
    );
}

/// Where prometheus-node-exporter is installed (`.ci/run` installs it), it serves both files.
fn node_exporter_reads(textfile: &std::path::Path) {
    let Some(body) = node_exporter_serves(textfile) else {
        return;
    };
    assert!(
        body.contains("edi_inbox_ingest_interchanges_total{status=\"new\"} 2"),
        "{body}"
    );
    assert!(body.contains("edi_inbox_purge_entries_total 0"), "{body}");
}

/// promtool, where it is installed; `None` with a notice where it is not, unless
/// `EDI_INBOX_REQUIRE_PROMETHEUS` is set (`.ci/run` sets it): then a failure.
pub(crate) fn promtool() -> Option<&'static str> {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return Some("promtool");
    }
    crate::common::require("promtool is not installed", "EDI_INBOX_REQUIRE_PROMETHEUS");
    None
}

/// What node_exporter's textfile collector serves of the metrics files in `textfile`, having
/// read them without an error; `None` (with a notice) where it is not installed, unless
/// `EDI_INBOX_REQUIRE_PROMETHEUS` is set.
pub(crate) fn node_exporter_serves(textfile: &std::path::Path) -> Option<String> {
    use std::io::{Read, Write};
    let bin = [
        "/usr/bin/prometheus-node-exporter",
        "/usr/bin/node_exporter",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        crate::common::require(
            "prometheus-node-exporter is not installed to serve the metrics files",
            "EDI_INBOX_REQUIRE_PROMETHEUS",
        );
        return None;
    };
    let port = crate::common::free_port();
    let mut child = Command::new(bin)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!(
            "--collector.textfile.directory={}",
            textfile.display()
        ))
        .args(["--collector.disable-defaults", "--collector.textfile"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut body = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        body.clear();
        let _ = s.read_to_string(&mut body);
        if body.contains("edi_inbox_") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(body.contains("\nnode_textfile_scrape_error 0\n"), "{body}");
    Some(body)
}

#[test]
fn completions_for_three_shells() {
    for shell in ["bash", "zsh", "fish"] {
        edi_inbox()
            .args(["completions", shell])
            .assert()
            .code(0)
            .stdout(predicate::str::contains("ingest").and(predicate::str::contains("purge")));
    }
    edi_inbox()
        .args(["completions", "powershell"])
        .assert()
        .code(2);
}

/// `man --out DIR` writes one page per command, from the clap definitions (as ripgrep does), and
/// each renders with `groff -man -ww` without a warning. (`.ci/run` installs groff; without it
/// outside CI, only the pages are checked.)
#[test]
fn man_writes_one_page_per_command_that_groff_renders_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    edi_inbox()
        .args(["man", "--out"])
        .arg(&out)
        .assert()
        .code(0);
    let mut pages: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    // Every command `--help` lists has its page.
    let help = edi_inbox().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        // A command's line, not the wrapped rest of a description.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{commands:?}");
    for c in &commands {
        assert!(
            pages.contains(&format!("edi-inbox-{c}.1")),
            "{c}: {pages:?}"
        );
    }
    assert!(pages.contains(&"edi-inbox.1".to_string()));
    let consume = fs::read_to_string(out.join("edi-inbox-consume.1")).unwrap();
    assert!(consume.contains("\\-\\-until\\-idle"), "{consume}");
    let Ok(groff) = Command::new("groff").arg("-v").output() else {
        // No variable of its own: CI (which sets EDI_INBOX_REQUIRE_POSTGRES) has groff.
        crate::common::require(
            "no groff to render the manual pages",
            "EDI_INBOX_REQUIRE_POSTGRES",
        );
        return;
    };
    assert!(groff.status.success());
    for page in &pages {
        let rendered = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .arg(out.join(page))
            .run();
        rendered.success();
        assert!(
            rendered.stderr.is_empty(),
            "{page}: {}",
            String::from_utf8_lossy(&rendered.stderr)
        );
    }
}

/// `--help` names every kind of destination `publish` delivers to (Kafka and SQS were missing
/// from its line), and `publish --help` and `consume --help` every broker they take.
#[test]
fn help_names_every_broker_publish_and_consume_take() {
    let words = |args: &[&str]| {
        let out = edi_inbox().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        // Wrapped to the terminal's width: one line of words.
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let top = words(&["--help"]);
    let publish = top
        .split_once(" publish ")
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split(" consume ").next())
        .unwrap_or_else(|| panic!("no publish line in --help: {top}"));
    let brokers = [
        "NATS JetStream",
        "RabbitMQ",
        "Kafka",
        "Amazon SQS",
        "a folder",
    ];
    for broker in brokers {
        assert!(
            publish.contains(broker),
            "--help on publish: {broker}: {publish}"
        );
    }
    let publish = words(&["publish", "--help"]);
    let consume = words(&["consume", "--help"]);
    for broker in ["JetStream", "RabbitMQ", "Kafka", "Amazon SQS"] {
        assert!(
            publish.contains(broker),
            "publish --help: {broker}: {publish}"
        );
        assert!(
            consume.contains(broker),
            "consume --help: {broker}: {consume}"
        );
    }
}

/// An X12 key says so where it is listed (issue 41): `X12 ` before it on list's line, and
/// `"standard"` in each JSON line; EDIFACT's lines as they were. No X12 reader is wired in yet,
/// so the inbox is given an X12 interchange by hand.
#[test]
fn list_says_an_x12_keys_standard() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    ingest(&site).code(0);
    site.sql("UPDATE interchanges SET standard = 'x12' WHERE control_ref = 'A2';");
    let run = site.run(&["list"]);
    run.code(0);
    let out = run.out();
    let line = |r: &str| {
        out.lines()
            .find(|l| l.contains(&format!("ref {r}")))
            .unwrap_or_else(|| panic!("no line of {r}:\n{out}"))
            .to_string()
    };
    assert!(line("A2").contains("X12 PARTNERA -> HUB"), "{out}");
    assert!(
        !line("A1").contains("X12") && line("A1").contains("PARTNERA -> HUB"),
        "{out}"
    );
    let run = site.json(&["list", "--json"]);
    run.code(0);
    let mut standards: Vec<(String, String)> = run
        .json()
        .iter()
        .filter(|l| l["control_ref"].is_string())
        .map(|l| {
            (
                l["control_ref"].as_str().unwrap().to_string(),
                l["standard"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    standards.sort();
    assert_eq!(
        standards,
        [("A1".into(), "edifact".into()), ("A2".into(), "x12".into())]
    );
}

/// A key held under two standards (an EDIFACT interchange, and an X12 copy of the same sender,
/// recipient and control reference, made by hand) is not shown as if it were one: `show` asks
/// for `--standard` (exit 2), and shows each with it.
#[test]
fn show_asks_for_the_standard_of_a_key_held_under_two() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    ingest(&site).code(0);
    site.sql(
        "INSERT INTO sightings (sender, recipient, control_ref, status, sha256, stored_sha256,
             source_file, seen_at, standard)
         VALUES ('PARTNERA', 'HUB', 'A1', 'duplicate', 'h', 'h', 'b.x12',
                 '2026-01-01T00:00:00.000Z', 'x12');",
    );
    let run = site.run(&["show", "PARTNERA", "HUB", "A1"]);
    run.code(2);
    assert!(
        run.err().contains("--standard edifact or --standard x12"),
        "{run}"
    );
    site.run(&["show", "--standard", "edifact", "PARTNERA", "HUB", "A1"])
        .code(0);
    let run = site.json(&[
        "show",
        "--json",
        "--standard",
        "x12",
        "PARTNERA",
        "HUB",
        "A1",
    ]);
    run.code(0);
    let shown = run.json().remove(0);
    assert_eq!(shown["standard"], "x12", "{run}");
    assert_eq!(
        shown["sightings"].as_array().map(Vec::len),
        Some(1),
        "{run}"
    );
    // The other key of the file, under one standard, needs no --standard.
    site.run(&["show", "PARTNERA", "HUB", "A2"]).code(0);
}
