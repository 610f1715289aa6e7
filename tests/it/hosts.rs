//! Several ingest hosts sharing one PostgreSQL inbox: each with its own drop folder holding
//! copies of the same interchanges (some with other line breaks, some drifted), some killed at
//! random, a connection cut in the middle of a batch, and two hosts taking the same keys in
//! opposite orders. Each host is a process of its own with its own folders; the inbox is the
//! one thing they share.

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use crate::common::site::{Site, State, copy_dir};
use crate::common::{Running, StartExt};

/// A host: its own drop, archive and quarantine folders, on the shared inbox of `inbox`.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let h = Host {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::create_dir_all(h.dir.path().join("drop")).unwrap();
        h
    }

    fn spawn(&self, inbox: &Site, batch: u32) -> Running {
        let d = self.dir.path();
        inbox
            .command()
            .args(["ingest", "-q", "--batch", &batch.to_string(), "--archive"])
            .arg(d.join("archive"))
            .arg("--quarantine")
            .arg(d.join("failed"))
            .arg(d.join("drop"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start()
    }

    /// Files left in its drop folder.
    fn left(&self) -> usize {
        fs::read_dir(self.dir.path().join("drop")).unwrap().count()
    }
}

/// The corpus every host gets a copy of, and what one uninterrupted SQLite run makes of it (the
/// inbox, and its state).
fn corpus(files: usize, seed: u64) -> (Site, Site, State) {
    let reference = Site::new();
    reference.fill(files, seed);
    let master = Site::new();
    copy_dir(&reference.drop(), &master.drop());
    reference.ingest(20);
    let want = reference.state();
    (master, reference, want)
}

/// Each interchange's key and number of messages.
const MESSAGES_PER_KEY: &str = "SELECT i.sender, i.recipient, i.control_ref, count(m.id)
     FROM interchanges i LEFT JOIN messages m ON m.interchange_id = i.id
     GROUP BY i.sender, i.recipient, i.control_ref ORDER BY 1, 2, 3";

/// Three hosts, each with its own copy of the drop folder (host 1's with other line breaks,
/// host 2's with some interchanges drifted), two of them killed once at random moments, then
/// every host run again: every key applied once, the inbox and the business tables agree, the
/// drift reported, and every file of every host placed. Each kill falls once its host has
/// placed a file, and must land mid-work: the signal ends it, with files left in its drop.
#[test]
fn three_hosts_with_their_own_copies_apply_each_interchange_once() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    let (master, reference, want) = corpus(300, 17);
    let hosts: Vec<Host> = (0..3).map(|_| Host::new()).collect();
    let mut drifted = 0;
    for (k, host) in hosts.iter().enumerate() {
        for e in fs::read_dir(master.drop()).unwrap() {
            let e = e.unwrap();
            let mut data = fs::read(e.path()).unwrap();
            let name = e.file_name();
            if k == 1 {
                // Other line breaks: the same interchanges.
                data = String::from_utf8_lossy(&data)
                    .replace('\'', "'\r\n")
                    .into_bytes();
            } else if k == 2 && name.to_string_lossy().ends_with("7.edi") {
                let text = String::from_utf8_lossy(&data).into_owned();
                if text.contains("BGM+") {
                    data = text.replacen("BGM+", "BGM+7", 1).into_bytes();
                    drifted += 1;
                }
            }
            fs::write(host.dir.path().join("drop").join(name), data).unwrap();
        }
    }
    assert!(drifted > 0);
    let mut rng = crate::common::synth::Synth::new(5);
    let files = master.files_in("drop").len();
    let runs: Vec<Running> = hosts.iter().map(|h| h.spawn(&inbox, 10)).collect();
    for (k, (run, host)) in runs.into_iter().zip(&hosts).enumerate() {
        if k < 2 {
            let started = std::time::Instant::now();
            while host.left() == files && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(rng.below(200)));
            run.signal(libc::SIGKILL);
        }
        let out = run.wait().note(format!("host {k}"));
        let stderr = out.err();
        assert!(!stderr.contains("deadlock"), "{stderr}");
        if k < 2 {
            let left = host.left();
            assert!(
                out.status.code().is_none() && left > 0 && left < files,
                "the kill of host {k} did not land mid-work: {left} of {files} files left\n{out}"
            );
        }
    }
    for host in &hosts {
        let out = host.spawn(&inbox, 10).wait();
        out.code_in(&[0, 3]);
        assert_eq!(host.left(), 0, "a host left files in its drop folder");
    }
    let got = inbox.state();
    let keys: Vec<_> = got.keys.symmetric_difference(&want.keys).collect();
    assert!(keys.is_empty(), "keys differ: {keys:?}");
    assert_eq!(got.messages, want.messages);
    // Every interchange has its messages, no more, no fewer (the drifted copies have as many).
    assert_eq!(
        inbox.rows(MESSAGES_PER_KEY),
        reference.rows(MESSAGES_PER_KEY)
    );
    // Whichever copy of a drifted key was committed first, the other was seen as drift.
    assert!(
        inbox.count("SELECT count(DISTINCT (sender, recipient, control_ref)) FROM sightings WHERE status = 'drift'")
            >= drifted,
        "a drift went unreported"
    );
    let stats = inbox.json(&["stats", "--json"]).json();
    assert_eq!(stats[0]["inbox"], stats[0]["interchanges"]);
    assert_eq!(stats[0]["messages"], got.messages);
}

/// The connection cut in the middle of a batch (the server terminates it, as a restart or a
/// network fault would): the run exits 1 with a clear message, nothing is half-applied, no file
/// of an uncommitted batch is moved, and the next run finishes the work. The cut must happen:
/// the server says it terminated a connection of the run, and the run fails on it.
#[test]
fn a_connection_cut_in_the_middle_of_a_batch_leaves_nothing_half_done() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    let (master, _, want) = corpus(600, 23);
    copy_dir(&master.drop(), &inbox.drop());
    let run = inbox
        .ingest_command(50)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .start();
    let db = inbox.db_arg().to_string_lossy().into_owned();
    let name = db.rsplit('/').next().unwrap().to_string();
    let mut admin = postgres::Client::connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=postgres",
        postgres::NoTls,
    )
    .unwrap();
    // Cut it once it has committed something.
    let started = std::time::Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let archived = fs::read_dir(inbox.path("archive")).map_or(0, |d| d.count());
        if archived > 0 || started.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    // The cut happened: the server terminated a connection of the run (11 of its 12 batches
    // were still to come), and the run ended on it.
    let cut = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'edi-inbox' AND pid <> pg_backend_pid()",
            &[&name],
        )
        .unwrap();
    assert!(
        cut.iter().any(|r| r.get::<_, bool>(0)),
        "no connection of the run was there to cut"
    );
    let out = run.wait();
    let stderr = out.err();
    out.code(1);
    assert!(
        // The cut lands while the batch is written or while it commits.
        (stderr.contains("cannot write to the inbox")
            || stderr.contains("cannot commit to the inbox"))
            && stderr.contains("connection"),
        "{stderr}"
    );
    // Whatever was committed is whole, and only committed files moved.
    let partial = inbox.state();
    assert!(partial.keys.is_subset(&want.keys));
    let out = inbox.ingest(50);
    out.code_in(&[0, 3]);
    let got = inbox.state();
    inbox.assert_all_placed(&got, 600);
    crate::common::site::assert_same(&got, &want, "after a connection cut");
}

/// Two hosts taking the same 600 keys in opposite orders (each file holds one interchange; host
/// B's names sort the other way): each batch locks its keys sorted, so neither deadlocks on the
/// other, and every key is applied once.
#[test]
fn two_hosts_taking_the_same_keys_in_opposite_orders_do_not_deadlock() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    let mut g = crate::common::synth::Synth::new(9);
    let (a, b) = (Host::new(), Host::new());
    for n in 0..600 {
        let layout = g.layout();
        let data = g.interchange("SENDER", "RECIPIENT", &format!("D{n:04}"), 1, layout);
        fs::write(a.dir.path().join("drop").join(format!("{n:04}.edi")), &data).unwrap();
        fs::write(
            b.dir
                .path()
                .join("drop")
                .join(format!("{:04}.edi", 599 - n)),
            &data,
        )
        .unwrap();
    }
    for round in 0..2 {
        let runs = [a.spawn(&inbox, 40), b.spawn(&inbox, 40)];
        for run in runs {
            run.wait().note(format!("round {round}")).code(0);
        }
    }
    assert_eq!(inbox.stat("inbox"), 600);
    assert_eq!(inbox.stat("interchanges"), 600);
    assert_eq!(inbox.stat("duplicates"), 600);
    assert_eq!(a.left() + b.left(), 0);
}

/// Issue 22, 4: four hosts on copies of the same files queued a CONTRL for every copy (60,000
/// for 12,500 interchanges). Another host's copy of a file is the same sending of the partner:
/// one CONTRL event per interchange, whichever host decided it, and none more when every host
/// runs over its copies again.
#[test]
fn four_hosts_on_copies_of_the_same_files_queue_one_contrl_each() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    // Distinct interchanges, one per file (the partner sends each once).
    let master = Site::new();
    let mut g = crate::common::synth::Synth::new(23);
    for n in 0..200 {
        let layout = g.layout();
        master.put(
            &format!("f{n:04}.edi"),
            &g.interchange("SENDER", "HUB", &format!("C{n:05}"), 1 + n % 2, layout),
        );
    }
    let hosts: Vec<Host> = (0..4).map(|_| Host::new()).collect();
    for host in &hosts {
        copy_dir(&master.drop(), &host.dir.path().join("drop"));
    }
    let ingest = |host: &Host| {
        let mut c = inbox.command();
        c.args(["ingest", "-q", "--batch", "25", "--contrl", "always"])
            .arg(host.dir.path().join("drop"));
        c
    };
    for _ in 0..2 {
        let outs = crate::common::run_together(hosts.iter().map(ingest).collect());
        for out in &outs {
            out.code_in(&[0, 3]);
        }
    }
    let interchanges = inbox.stat("interchanges");
    assert_eq!(interchanges, 200);
    let answered = inbox.count("SELECT count(*) FROM acknowledgements WHERE action = '7'");
    assert_eq!(
        answered, interchanges,
        "one acknowledgement per interchange"
    );
    let queued = inbox.count(
        "SELECT count(*) FROM contrl_outbox o JOIN acknowledgements a ON a.id = o.acknowledgement_id
         WHERE a.action = '7'",
    );
    assert_eq!(
        queued, interchanges,
        "one CONTRL event per interchange, not one per copy"
    );
}

/// Issue 22, 5: two hosts rejecting the same files (the same names, the same bytes: one
/// shared folder, or the same names in each host's own) in opposite orders within one batch
/// could deadlock in the rejected-file rows, and that run failed (exit 1). A batch that loses
/// a deadlock is rolled back and made again, as one losing it on the keys is: both runs end
/// with the files rejected (exit 3), each file recorded once and seen by both.
#[test]
fn two_hosts_rejecting_the_same_files_in_opposite_orders_both_finish() {
    let Some(inbox) = Site::postgres() else {
        return;
    };
    let (a, b) = (Host::new(), Host::new());
    let names: Vec<String> = (0..300).map(|n| format!("drop/{n:04}.edi")).collect();
    for (n, name) in names.iter().enumerate() {
        let data = format!(
            "UNB+UNOC:3+BROKEN+HUB+240101:1200+R{n}'UNH+1+ORDERS:D:96A:UN'UNT+9+1'UNZ+1+R{n}'"
        );
        for host in [&a, &b] {
            fs::write(host.dir.path().join(name), &data).unwrap();
        }
    }
    let run = |host: &Host, reversed: bool| {
        let mut c = inbox.command();
        c.current_dir(host.dir.path())
            .args(["ingest", "-q", "--batch", "1000"]);
        if reversed {
            c.args(names.iter().rev());
        } else {
            c.args(&names);
        }
        c
    };
    for round in 0..3 {
        let outs = crate::common::run_together(vec![run(&a, false), run(&b, true)]);
        for out in outs {
            out.note(format!("round {round}")).code(3);
        }
    }
    assert_eq!(inbox.stat("rejected"), 300);
    assert_eq!(
        inbox.count("SELECT min(times_seen) FROM rejected_files"),
        6,
        "every file seen by both hosts, three times each"
    );
}
