//! Crash consistency: the process is stopped dead (abort, not unwind) at each fail point between
//! reading a file and moving it, then ingest runs again. Every interchange must end up applied
//! exactly once and every file in the archive or the quarantine, as after a run never
//! interrupted. Needs the fail points: `cargo test --features failpoints --test it crash::`.

use crate::common::site::{Site, assert_same};
use crate::common::{RunExt, StartExt};

const FILES: usize = 60;

/// `(fail point, FAILPOINTS action)`: `n*off->return` aborts on the n+1th pass, so that some
/// batches commit (and some files move) before the crash.
const POINTS: &[(&str, &str)] = &[
    ("after-read", "return"),
    ("after-read", "17*off->return"),
    ("after-key-insert", "return"),
    ("after-key-insert", "9*off->return"),
    ("after-business-rows", "return"),
    ("after-business-rows", "13*off->return"),
    ("mid-batch", "2*off->return"),
    ("mid-batch", "23*off->return"),
    ("before-commit", "return"),
    ("before-commit", "3*off->return"),
    ("after-commit", "return"),
    ("after-commit", "4*off->return"),
    ("before-move", "return"),
    ("before-move", "11*off->return"),
    ("after-reason", "return"),
    ("after-reason", "1*off->return"),
    ("after-move", "return"),
    ("after-move", "19*off->return"),
];

#[test]
fn a_crash_at_any_point_then_a_rerun_applies_everything_exactly_once() {
    let reference = Site::new();
    reference.fill(FILES, 11);
    let out = reference.ingest(5);
    out.code(3);
    let want = reference.state();
    reference.assert_all_placed(&want, FILES);
    assert!(!want.quarantined.is_empty() && want.keys.len() > FILES / 2);
    // A run never interrupted records where every file of every sighting went.
    assert_eq!(
        moves_recorded(&reference),
        (0, 0),
        "sightings without moved_to"
    );

    for (point, action) in POINTS {
        let site = Site::new();
        site.fill(FILES, 11);
        // The fail point stops the run.
        site.ingest_command(5)
            .env("FAILPOINTS", format!("{point}={action}"))
            .run()
            .signalled();
        // What the crash left must already be consistent.
        let partial = site.state();
        assert!(partial.keys.is_subset(&want.keys), "{point}={action}");
        moves_recorded(&site);

        site.ingest(5)
            .note(format!("after {point}={action}"))
            .code(3);
        let got = site.state();
        site.assert_all_placed(&got, FILES);
        assert_same(&got, &want, &format!("{point}={action}"));
        moves_recorded(&site);
    }
}

/// Where the files of the sightings went (issue 40, item 3), as a crash may leave it: every
/// `moved_to` recorded names a file that is there (never a place the file did not reach; it is
/// written after the move); returns how many rows of `interchanges` and `sightings` have none
/// (a crash between the commit and that record leaves some).
fn moves_recorded(site: &Site) -> (usize, usize) {
    let mut unrecorded = Vec::new();
    for table in ["interchanges", "sightings"] {
        let rows = site.rows(&format!("SELECT moved_to FROM {table}"));
        for to in rows.iter().filter_map(|r| r[0].as_deref()) {
            assert!(
                std::path::Path::new(to).is_file(),
                "{table}: moved_to {to} is not there"
            );
        }
        unrecorded.push(rows.iter().filter(|r| r[0].is_none()).count());
    }
    (unrecorded[0], unrecorded[1])
}

/// Waits until the inbox at `db` holds `n` entries (the run has committed them).
fn wait_for_entries(db: &std::path::Path, n: i64) {
    let started = std::time::Instant::now();
    loop {
        let count =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM inbox", [], |r| r.get::<_, i64>(0))
                });
        if count.is_ok_and(|c| c >= n) {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the run never committed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Issue 10, item 2: a partner reusing a fixed name replaces the file between its read and its
/// move (by an atomic upload, an overwrite in place, or an append). The new bytes were never
/// decided, so the file must stay in the drop folder for the next run, which applies them.
/// The run is held just before its move by a fail point that sleeps.
#[test]
fn a_file_replaced_between_its_read_and_its_move_is_left_for_the_next_run() {
    let first =
        std::fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap();
    let second =
        std::fs::read(crate::common::samples().join("valid/invoic-d96a-unoc-crlf.edi")).unwrap();
    for how in ["rename", "overwrite", "append"] {
        let site = Site::new();
        let path = site.put("ORDERS.EDI", &first);
        let run = site
            .ingest_command(5)
            .env("FAILPOINTS", "before-move=sleep(2000)")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .start();
        wait_for_entries(&site.db(), 1);
        let replaced = match how {
            "rename" => {
                let tmp = site.drop().join(".ORDERS.EDI.part");
                std::fs::write(&tmp, &second).unwrap();
                std::fs::rename(&tmp, &path).unwrap();
                second.clone()
            }
            "overwrite" => {
                std::fs::write(&path, &second).unwrap();
                second.clone()
            }
            _ => {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                f.write_all(&second).unwrap();
                [first.clone(), second.clone()].concat()
            }
        };
        let out = run.wait().note(how);
        let stderr = out.err();
        out.code(0);
        assert!(
            stderr.contains("changed after it was read"),
            "{how}: {stderr}"
        );
        assert_eq!(site.files_in("archive"), Vec::<String>::new(), "{how}");
        assert_eq!(std::fs::read(&path).unwrap(), replaced, "{how}");

        site.ingest(5).note(format!("the run after: {how}")).code(0);
        assert_eq!(site.files_in("archive"), ["ORDERS.EDI"], "{how}");
        assert_eq!(
            site.count("SELECT count(*) FROM inbox WHERE control_ref = 'INV0001'"),
            1,
            "{how}: the new interchange was never applied"
        );
    }
}

/// Issue 10, item 10: across file systems, a kill between placing the copy and removing the
/// source left the file in both places, and the next run archived it a second time. The next run
/// now finds its copy already there and only removes the source.
#[test]
fn a_kill_between_placing_a_copy_and_removing_its_source_leaves_one_file() {
    let site = Site::new();
    let Some(dropfs) = crate::common::site::Tmpfs::mount(&site.path("dropfs"), "4m") else {
        return;
    };
    std::fs::copy(
        crate::common::samples().join("valid/orders-d01b-no-una.edi"),
        dropfs.path.join("a.edi"),
    )
    .unwrap();
    let run = |failpoints: &str| {
        site.command()
            .env("FAILPOINTS", failpoints)
            .args(["ingest", "-q", "--archive"])
            .arg(site.path("archive"))
            .arg(&dropfs.path)
            .run()
    };
    // The fail point stops the run.
    run("after-copy-placed=return").signalled();
    assert_eq!(site.files_in("archive"), ["a.edi"]);
    assert!(dropfs.path.join("a.edi").exists());
    let out = run("");
    out.code(0);
    assert_eq!(site.files_in("archive"), ["a.edi"]);
    assert!(!dropfs.path.join("a.edi").exists());
}

/// `publish` stopped dead after the destination confirmed a batch and before the mark (the
/// second batch, so that the first was marked): the rerun sends those events again with the
/// same ids, the folder writer finds them there (JetStream drops them the same way), and every
/// event ends up published once, one file each.
#[test]
fn a_publisher_stopped_between_confirmation_and_mark_sends_nothing_twice() {
    let site = Site::new();
    for sample in [
        "two-interchanges.edi",
        "desadv-d07a-groups-v4.edi",
        "invrpt-level-b.edi",
    ] {
        site.put_sample(&format!("valid/{sample}"), sample);
    }
    site.ingest_quietly(&[]).code(0);
    let events = site.count("SELECT count(*) FROM outbox");
    let out = site.path("out");
    let to = format!("dir:{}", out.display());
    let crashed = site
        .command()
        .args(["publish", "-q", "--batch", "2", "--to", &to])
        .env("FAILPOINTS", "publish-after-confirm=1*off->return")
        .run();
    // The fail point stopped it.
    crashed.signalled();
    let written = std::fs::read_dir(&out).unwrap().count() as i64;
    let marked = site.count("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL");
    assert_eq!((written, marked), (4, 2), "confirmed 4, marked 2");
    let again = site.cmd().args(["publish", "--json", "--to", &to]).run();
    again.code(0);
    let lines = crate::common::json_lines(&again.stdout);
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == "duplicate").count(), 2);
    assert_eq!(statuses.len() as i64, events - 2);
    assert_eq!(std::fs::read_dir(&out).unwrap().count() as i64, events);
    assert_eq!(
        site.count("SELECT count(*) FROM outbox WHERE published_at IS NULL"),
        0
    );
}

/// `consume` stopped dead after a batch committed and before its acknowledgement (the second
/// batch, so that the first was acknowledged), on RabbitMQ and on JetStream: the broker
/// delivers that batch again (and the next, where it was fetched ahead), the rerun decides it as
/// duplicates (counted as redelivered), and
/// every interchange is applied once with every delivery acknowledged in the end; and answered
/// by one CONTRL event, the broker's redelivery not being the partner's asking again.
#[test]
fn a_consumer_stopped_between_commit_and_ack_applies_nothing_twice() {
    use crate::common::brokers::{Jet, Rabbit};
    use crate::common::synth::{Layout, Synth};
    let mut synth = Synth::new(5);
    let bodies: Vec<Vec<u8>> = (0..12)
        .map(|k| synth.interchange("GW", "HUB", &format!("K{k}"), 1, Layout::default()))
        .collect();
    for point in ["consume-after-commit", "consume-before-ack"] {
        let rabbit = Rabbit::create(Some("#"));
        let jet = Jet::create();
        let mut sources = Vec::new();
        if let Some(r) = &rabbit {
            let all: Vec<_> = bodies
                .iter()
                .enumerate()
                .map(|(k, b)| (b.clone(), Some(format!("m{k}")), None))
                .collect();
            r.put(&all);
            sources.push(r.from());
        }
        if let Some(j) = &jet {
            j.put(&bodies.iter().map(|b| (b.clone(), None)).collect::<Vec<_>>());
            sources.push(j.from("c"));
        }
        for from in sources {
            let site = Site::new();
            let crashed = site
                .command()
                .args([
                    "consume",
                    "-q",
                    "--batch",
                    "3",
                    "--ack-wait",
                    "1s",
                    "--contrl",
                    "always",
                ])
                .args(["--until-idle", "2s", "--from", &from])
                .env("FAILPOINTS", format!("{point}=1*off->return"))
                .run();
            // The fail point stopped it.
            crashed.signalled();
            assert_eq!(
                site.count("SELECT count(*) FROM interchanges"),
                6,
                "{point} {from}"
            );
            let metrics = site.path("consume.prom");
            let again = site
                .cmd()
                .args(["consume", "--json", "--until-idle", "3s", "--from", &from])
                .args(["--contrl", "always"])
                .arg("--metrics-file")
                .arg(&metrics)
                .run()
                .note(format!("after {point}"));
            again.code(0);
            let lines = crate::common::json_lines(&again.stdout);
            let summary = &lines.last().unwrap()["summary"];
            assert_eq!(summary["duplicate"], 3, "{point} {from}: {summary}");
            assert_eq!(summary["new"], 6, "{point} {from}: {summary}");
            // RabbitMQ: exactly the batch, 3. Its prefetch is --batch, so nothing past the
            // batch not yet acknowledged was delivered before the crash. JetStream alone may
            // say 6: a pull made while a batch is decided (consume's read-ahead) is given what
            // the stream holds, so the batch after it may have been fetched before the crash,
            // and comes again too, redelivered, and new.
            let redelivered = summary["redelivered"].as_i64().unwrap();
            if from.starts_with("amqp") {
                assert_eq!(redelivered, 3, "{point} {from}: {summary}");
            } else {
                assert!(
                    redelivered == 3 || redelivered == 6,
                    "{point} {from}: {summary}"
                );
            }
            assert_eq!(site.count("SELECT count(*) FROM interchanges"), 12);
            assert_eq!(
                site.count("SELECT count(*) FROM deliveries WHERE delivery_count = 2"),
                redelivered
            );
            assert_eq!(
                site.count("SELECT count(*) FROM contrl_outbox"),
                12,
                "{point} {from}: one CONTRL event per interchange"
            );
            let prom = std::fs::read_to_string(&metrics).unwrap();
            assert!(
                prom.contains(&format!(
                    "edi_inbox_consume_redelivered_total {redelivered}\n"
                )) && prom.contains("edi_inbox_consume_deliveries_total 15\n"),
                "{prom}"
            );
        }
        if let Some(r) = &rabbit {
            assert_eq!(r.ready(), 0);
        }
        if let Some(j) = &jet {
            assert_eq!(j.backlog("c"), Some((0, 0)));
        }
    }
}

/// A CONTRL is part of its decision: a run stopped dead before a commit (the third batch) keeps
/// the acknowledgements of the batches committed before it and none of the lost batch, and its
/// partner's counter did not move for them; the rerun answers the rest, and every control
/// reference is used once, 1 to N without a gap or a repeat.
#[test]
fn acknowledgements_commit_with_their_decisions_or_not_at_all() {
    use crate::common::synth::{Layout, Synth};
    let site = Site::new();
    let mut synth = Synth::new(21);
    for k in 0..12 {
        site.put(
            &format!("a{k:02}.edi"),
            &synth.interchange("ACKPARTNER", "HUB", &format!("A{k}"), 1, Layout::default()),
        );
    }
    let args = ["ingest", "-q", "--batch", "4", "--contrl", "always"];
    let crashed = site
        .command()
        .args(args)
        .arg(site.drop())
        .env("FAILPOINTS", "before-commit=2*off->return")
        .run();
    // The fail point stopped it.
    crashed.signalled();
    let decided = site.count("SELECT count(*) FROM interchanges");
    let answered = site.count("SELECT count(*) FROM acknowledgements");
    assert_eq!(
        answered, decided,
        "an acknowledgement for each committed decision only"
    );
    assert_eq!(decided, 8, "two batches of 4 committed, the third lost");
    site.cmd().args(args).arg(site.drop()).assert().code(0);
    assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 12);
    assert_eq!(
        site.count("SELECT count(DISTINCT own_ref) FROM acknowledgements"),
        12
    );
    assert_eq!(
        site.count("SELECT max(CAST(own_ref AS INTEGER)) FROM acknowledgements"),
        12,
        "no reference skipped or reused"
    );
}

/// The CONTRLs' delivery stopped dead between the folder's confirmation and the mark (the
/// second batch): the rerun finds the same ids there, so every acknowledgement is one file, and
/// all are marked published.
#[test]
fn contrls_stopped_between_confirmation_and_mark_go_out_once() {
    let site = Site::new();
    for entry in std::fs::read_dir(crate::common::samples().join("valid")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
    }
    site.cmd()
        .args(["ingest", "-q", "--contrl", "always"])
        .arg(site.drop())
        .assert()
        .code(0);
    let out = site.path("contrl-out");
    let to = format!("dir:{}", out.display());
    let crashed = site
        .command()
        .args([
            "publish", "-q", "--kind", "contrl", "--batch", "2", "--to", &to,
        ])
        .env("FAILPOINTS", "publish-after-confirm=1*off->return")
        .run();
    // The fail point stopped it.
    crashed.signalled();
    let written = std::fs::read_dir(&out).unwrap().count();
    let marked = site.count("SELECT count(*) FROM contrl_outbox WHERE published_at IS NOT NULL");
    assert_eq!((written, marked), (4, 2), "confirmed 4, marked 2");
    let again = site
        .cmd()
        .args(["publish", "--json", "--kind", "contrl", "--to", &to])
        .run();
    again.code(0);
    let lines = crate::common::json_lines(&again.stdout);
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == "duplicate").count(), 2);
    assert_eq!(statuses.len(), 5);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 7);
    assert_eq!(
        site.count("SELECT count(*) FROM contrl_outbox WHERE published_at IS NULL"),
        0
    );
}

/// Kafka: a consumer stopped dead between the inbox's commit and Kafka's offset commit (after
/// its second batch, so that Kafka's committed offsets trail the inbox's positions): the rerun
/// starts at the inbox's positions, so no record is decided twice (each record's delivery
/// recorded once, nothing a duplicate), and Kafka's offsets catch up with the inbox's once the
/// member that died has left the group (issue 36, item 9: a broker evicts it after its session
/// timeout when the group is next joined; until then it refuses the commits of a run with its
/// partitions given by hand, which `consume` says: see
/// `kafka::a_by_hand_run_says_why_kafka_refused_its_offsets`).
#[cfg(feature = "kafka")]
#[test]
fn a_kafka_consumer_stopped_between_its_two_commits_decides_no_record_twice() {
    use crate::common::brokers::{Kafka, Put, TestBroker as _};
    use crate::common::synth::{Layout, Synth};
    let Some(kafka) = Kafka::create() else { return };
    let mut synth = Synth::new(8);
    let bodies: Vec<Put> = (0..12)
        .map(|k| {
            let body = synth.interchange("GW", "HUB", &format!("Q{k}"), 1, Layout::default());
            Put::new(&body, format!("k{k}"))
        })
        .collect();
    kafka.send(&bodies);
    let site = Site::new();
    let crashed = site
        .command()
        .args(["consume", "-q", "--batch", "3", "--until-idle", "3s"])
        .args(["--from", &kafka.group_url()])
        .env("FAILPOINTS", "consume-after-commit=1*off->return")
        .run();
    crashed.signalled();
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 6);
    let committed = kafka.committed().unwrap()[0];
    assert!(
        committed < 6,
        "Kafka's offsets trail the inbox's: {committed}"
    );
    // The member that died stays in the group until its session (6 s, see common::edi_inbox)
    // has timed out and the group is joined again (the test broker evicts only then, having no
    // timer: issue 36, item 9): while it stays, Kafka refuses the commits of a run with its
    // partitions given by hand, which is no member. So the session is waited out and a member
    // joins and leaves, as another host starting would; the group is then empty.
    std::thread::sleep(std::time::Duration::from_secs(7));
    kafka.join_and_leave();
    let again = site
        .cmd()
        .args(["consume", "--json", "--until-idle", "3s"])
        .args(["--from", &kafka.by_hand_url()])
        .run()
        .note("after the crash");
    again.code(0);
    let lines = crate::common::json_lines(&again.stdout);
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["new"], 6, "{summary}");
    assert_eq!(summary["duplicate"], 0, "{summary}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 12);
    assert_eq!(
        site.count("SELECT count(DISTINCT source) FROM deliveries"),
        site.count("SELECT count(*) FROM deliveries"),
        "no record decided twice"
    );
    assert_eq!(site.count("SELECT count(*) FROM deliveries"), 12);
    assert_eq!(site.count("SELECT next_offset FROM consumer_positions"), 12);
    assert!(
        !again.err().contains("refused the offsets"),
        "the group was empty, yet its offsets were refused: {again}"
    );
    assert_eq!(
        kafka.committed(),
        Some(vec![12]),
        "Kafka's offsets did not catch up with the inbox's after the rerun"
    );
}

/// `migrate` stopped dead in the middle of its copy (after its first table) and just before its
/// commit: the target holds nothing of the source (one transaction), the source is as it was,
/// and the run after it copies everything, checked on both sides (issue 40, item 1).
#[cfg(all(feature = "postgres", feature = "sqlite"))]
#[test]
fn a_migration_stopped_dead_leaves_nothing_half_copied() {
    let Some(pg) = Site::postgres() else {
        return;
    };
    let sqlite = Site::new();
    sqlite.fill(40, 7);
    sqlite.ingest(10).code(3);
    let keys = sqlite.stat("inbox");
    assert!(keys > 30);
    let migrate = |failpoints: &str| {
        let mut c = sqlite.command();
        c.env("FAILPOINTS", failpoints)
            .args(["migrate", "--json", "--from"])
            .arg(sqlite.db())
            .arg("--to")
            .arg(pg.db_arg());
        c.run()
    };
    for point in ["migrate-after-first-table", "migrate-before-commit"] {
        migrate(&format!("{point}=return"))
            .note(format!("stopped at {point}"))
            .signalled();
        assert_eq!(
            pg.count("SELECT count(*) FROM interchanges"),
            0,
            "a copy stopped at {point} left rows in the target"
        );
        assert_eq!(sqlite.stat("inbox"), keys, "the source changed");
    }
    let done = migrate("");
    done.code(0);
    let report = done.json().remove(0);
    assert_eq!(report["outcome"], "copied", "{done}");
    assert_eq!(report["keys"], keys, "{done}");
    assert_eq!(pg.stat("inbox"), keys);
    // The rerun of ingest over the same files on PostgreSQL decides nothing new.
    let again = pg
        .command()
        .args(["ingest", "-q"])
        .arg(sqlite.path("archive"))
        .run();
    assert_eq!(
        pg.stat("interchanges"),
        sqlite.stat("interchanges"),
        "{again}"
    );
}
