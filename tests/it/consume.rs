//! `consume`: interchanges from JetStream and RabbitMQ, against the machine's real brokers, on
//! both inbox backends: each delivery decided as its file would be; the same payload twice is
//! new then duplicate; a poison delivery terminated and dead-lettered, never redelivered;
//! `kill -9` at random moments, then a rerun: every interchange applied exactly once and every
//! delivery acknowledged; a broker restart mid-run; three consumers on one inbox; and the
//! outbox of one inbox, published, consumed into another.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::Reaped;
use crate::common::brokers::{Jet, NATS, OwnNats, Rabbit};
use crate::common::site::Site;
use crate::common::synth::{Layout, Synth};

/// `consume --json --until-idle IDLE` with `args`: exit status, JSON Lines, standard error.
fn consume(
    site: &Site,
    idle: &str,
    args: &[&str],
) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let out = site
        .cmd()
        .args(["consume", "--json", "--until-idle", idle])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        crate::common::json_lines(&out.stdout),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `consume --json` with `args` as a child, its JSON Lines written to `out`, its standard
/// error beside it (`.err`).
fn consume_child(site: &Site, args: &[&str], out: &std::path::Path) -> Reaped {
    Reaped(Some(
        Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
            .env_remove("FAILPOINTS")
            .arg("--db")
            .arg(site.db_arg())
            .args(["consume", "--json"])
            .args(args)
            .stdout(fs::File::create(out).unwrap())
            .stderr(fs::File::create(out.with_extension("err")).unwrap())
            .spawn()
            .unwrap(),
    ))
}

/// Every sample, valid and broken, by name, in name order.
fn all_samples() -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for dir in ["valid", "broken"] {
        for entry in fs::read_dir(crate::common::samples().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            all.push((name, fs::read(&path).unwrap()));
        }
    }
    all.sort();
    all
}

/// `n` distinct interchanges (one message each), deterministic by `seed`.
fn synthetic(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut s = Synth::new(seed);
    (0..n)
        .map(|k| {
            s.interchange(
                "GATEWAY",
                "HUB",
                &format!("S{seed}N{k}"),
                1,
                Layout::default(),
            )
        })
        .collect()
}

/// Each line's (status, control reference, byte offset), grouped by a field of the line.
fn by(lines: &[serde_json::Value], field: &str) -> BTreeMap<String, Vec<(String, String, i64)>> {
    let mut m: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.get("status").is_some()) {
        let key = l[field].as_str().unwrap_or_default();
        let key = key.rsplit('/').next().unwrap_or_default().to_string();
        m.entry(key).or_default().push((
            l["status"].as_str().unwrap().to_string(),
            l["control_ref"].as_str().unwrap_or_default().to_string(),
            l["offset"].as_i64().unwrap_or(-1),
        ));
    }
    m
}

/// The (sender, control reference, sha256) of every interchange applied, and how many rows.
fn applied(site: &Site) -> (BTreeSet<(String, String, String)>, i64) {
    (
        site.triples("SELECT sender, control_ref, sha256 FROM interchanges"),
        site.count("SELECT count(*) FROM interchanges"),
    )
}

/// Waits until `f` holds (or 60 s went by); whether it does.
fn within(f: impl Fn() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while !f() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

per_backend! {
    /// Every sample as a delivery (with its name in edi-filename), consumed from JetStream:
    /// each decided exactly as ingest decides it as a file, the rejected ones recorded with
    /// their bytes; every delivery acknowledged (the rejected ones terminated), so a second
    /// run gets nothing.
    fn jetstream_deliveries_are_decided_as_their_files(site) {
        let Some(jet) = Jet::create() else { return };
        let samples = all_samples();
        for (name, bytes) in &samples {
            fs::write(site.drop().join(name), bytes).unwrap();
        }
        let files = site.fresh();
        for (name, bytes) in &samples {
            fs::write(files.drop().join(name), bytes).unwrap();
        }
        let (code, want) = files.ingest_json(&[]);
        assert_eq!(code, Some(3));
        jet.put(&samples.iter().map(|(n, b)| (b.clone(), Some(n.clone()))).collect::<Vec<_>>());
        let metrics = site.path("consume.prom");
        let (code, lines, stderr) = consume(
            &site,
            "2s",
            &["--from", &jet.from("inbox"), "--metrics-file", metrics.to_str().unwrap()],
        );
        assert_eq!(code, Some(3), "{stderr}");
        assert_eq!(by(&lines, "filename"), by(&want, "file"));
        assert_eq!(applied(&site), applied(&files));
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["deliveries"], samples.len());
        assert_eq!(summary["redelivered"], 0);
        // Each delivery under the broker's identity, with its file name and count.
        assert_eq!(
            site.count("SELECT count(*) FROM deliveries WHERE delivery_count = 1 AND filename IS NOT NULL"),
            samples.len() as i64
        );
        let source = lines[0]["file"].as_str().unwrap();
        assert!(source.starts_with(&format!("nats:{}/", jet.stream)), "{source}");
        assert_eq!(
            site.count("SELECT count(*) FROM rejected_files"),
            files.count("SELECT count(*) FROM rejected_files")
        );
        assert_eq!(site.count("SELECT count(*) FROM rejected_files WHERE bytes IS NULL"), 0);
        let prom = fs::read_to_string(&metrics).unwrap();
        for want in [
            format!("edi_inbox_consume_deliveries_total {}\n", samples.len()),
            "edi_inbox_consume_redelivered_total 0\n".to_string(),
            "edi_inbox_consume_last_success_timestamp_seconds ".to_string(),
        ] {
            assert!(prom.contains(&want), "{want} in {prom}");
        }
        assert_eq!(jet.backlog("inbox"), Some((0, 0)));
        let (code, lines, stderr) = consume(&site, "1s", &["--from", &jet.from("inbox")]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(lines.last().unwrap()["summary"]["deliveries"], 0);
    }
}

per_backend! {
    /// The same payload delivered twice under different broker ids (a gateway that sent it
    /// again): new, then duplicate; on JetStream and on RabbitMQ.
    fn the_same_payload_twice_is_new_then_duplicate(site) {
        let body = fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        let jetstream = Jet::create();
        if let Some(jet) = &jetstream {
            jet.put(&[(body.clone(), None), (body.clone(), None)]);
            let (code, lines, stderr) = consume(&site, "1s", &["--from", &jet.from("c")]);
            assert_eq!(code, Some(0), "{stderr}");
            let statuses: Vec<_> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
            assert_eq!(statuses, ["new", "duplicate"]);
            assert_ne!(lines[0]["file"], lines[1]["file"]);
        }
        if let Some(rabbit) = Rabbit::create(Some("#")) {
            rabbit.put(&[
                (body.clone(), Some("first".into()), Some("a.edi".into())),
                (body.clone(), Some("second".into()), Some("b.edi".into())),
            ]);
            let (code, lines, stderr) = consume(&site, "1s", &["--from", &rabbit.from()]);
            assert_eq!(code, Some(0), "{stderr}");
            let statuses: Vec<_> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
            // Where JetStream's copy came first, both are duplicates now.
            let first = if jetstream.is_some() { "duplicate" } else { "new" };
            assert_eq!(statuses, [first, "duplicate"]);
            let q = rabbit.queue.as_deref().unwrap();
            assert_eq!(lines[0]["file"], format!("amqp:{q}/first"));
            assert_eq!(lines[1]["filename"], "b.edi");
            assert_eq!(rabbit.ready(), 0);
        }
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
    }
}

/// A poison delivery on JetStream: recorded with its bytes, terminated (not redelivered),
/// and with --dead-letter published to a stream with the reason in a header; the good
/// delivery in the same batch is applied and acknowledged.
#[test]
fn a_poison_delivery_is_terminated_and_dead_lettered_on_jetstream() {
    let (Some(jet), Some(dead)) = (Jet::create(), Jet::create()) else {
        return;
    };
    let site = Site::new();
    let good = fs::read(crate::common::samples().join("valid/invrpt-level-b.edi")).unwrap();
    let poison = fs::read(crate::common::samples().join("broken/unz-count-wrong.edi")).unwrap();
    jet.put(&[(poison.clone(), Some("bad.edi".into())), (good, None)]);
    let dl = format!("{NATS}/{}.dead", dead.prefix);
    let mut terminated = jet.watch_terminated("c");
    let (code, lines, stderr) = consume(
        &site,
        "1s",
        &["--from", &jet.from("c"), "--dead-letter", &dl],
    );
    // Terminated, not merely acknowledged: the server says so.
    assert_eq!(jet.count(&mut terminated), 1);
    assert_eq!(code, Some(3), "{stderr}");
    let statuses: Vec<_> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(statuses, ["rejected", "new"]);
    assert!(lines[0]["offset"].is_i64(), "{:?}", lines[0]);
    let held = dead.messages();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].body, poison);
    assert_eq!(held[0].subject, format!("{}.dead", dead.prefix));
    let reason = &held[0].headers["edi-inbox-reason"];
    assert!(reason.contains("UNZ"), "{reason}");
    assert_eq!(held[0].headers["edi-filename"], "bad.edi");
    assert_eq!(site.count("SELECT count(*) FROM rejected_files"), 1);
    // Terminated: nothing pending, nothing comes again.
    assert_eq!(jet.backlog("c"), Some((0, 0)));
    let (code, lines, _) = consume(&site, "2s", &["--from", &jet.from("c")]);
    assert_eq!(code, Some(0));
    assert_eq!(lines.last().unwrap()["summary"]["deliveries"], 0);
}

/// The same on RabbitMQ: rejected without requeue, so the queue's dead-letter exchange gets
/// it, and --dead-letter to an exchange gets it with the reason.
#[test]
fn a_poison_delivery_is_dead_lettered_on_rabbitmq() {
    let (Some(rabbit), Some(dead)) = (Rabbit::with_dead_letters(), Rabbit::create(Some("#")))
    else {
        return;
    };
    let site = Site::new();
    let poison = b"UNB+UNOC:3+A+B+240101:1200+R1'UNH+1+X:D:96A:UN'UNT+9+1'UNZ+1+R1'".to_vec();
    rabbit.put(&[(poison.clone(), Some("m1".into()), None)]);
    let dl = format!("{}/{}", crate::common::brokers::AMQP, dead.exchange);
    let (code, lines, stderr) = consume(
        &site,
        "1s",
        &["--from", &rabbit.from(), "--dead-letter", &dl],
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(lines[0]["status"], "rejected");
    let by_queue = rabbit.take_dead();
    assert_eq!(by_queue.len(), 1, "the queue's dead-letter exchange");
    assert_eq!(by_queue[0].body, poison);
    let by_option = dead.take();
    assert_eq!(by_option.len(), 1, "--dead-letter");
    assert_eq!(by_option[0].subject, "edi.in");
    assert!(
        by_option[0].headers["edi-inbox-reason"].contains("UNT"),
        "{:?}",
        by_option[0].headers
    );
    assert_eq!(rabbit.ready(), 0);
}

per_backend! {
    /// Thousands of deliveries on JetStream (each payload twice), a consumer killed with
    /// SIGKILL at random moments, then a run to the end: every interchange applied exactly
    /// once, and every delivery acknowledged (nothing pending on the consumer).
    fn jetstream_after_random_kills_applies_each_interchange_once(site) {
        let Some(jet) = Jet::create() else { return };
        let bodies = synthetic(1500, 7);
        let mut all: Vec<_> = bodies.iter().map(|b| (b.clone(), None)).collect();
        all.extend(bodies.iter().rev().map(|b| (b.clone(), None)));
        jet.put(&all);
        let from = jet.from("c");
        let args = ["--from", from.as_str(), "--batch", "100", "--ack-wait", "2s"];
        let mut rng = Synth::new(11);
        let mut killed_mid_work = 0;
        for round in 0..4 {
            let out = site.path(&format!("run{round}.jsonl"));
            let mut child = consume_child(&site, &args, &out);
            std::thread::sleep(Duration::from_millis(150 + rng.below(500)));
            let pid = child.id() as i32;
            unsafe { libc::kill(pid, libc::SIGKILL) };
            drop(child.0.take().map(|mut c| c.wait()));
            if fs::metadata(&out).map_or(0, |m| m.len()) > 0 {
                killed_mid_work += 1;
            }
        }
        assert!(killed_mid_work > 0, "no kill fell in the middle of the work");
        // Longer than the ack wait: what the killed ones held comes again.
        let (code, lines, stderr) = consume(&site, "5s", &args);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(lines.iter().filter_map(|l| l["status"].as_str()).all(|s| s == "new" || s == "duplicate"));
        let (keys, rows) = applied(&site);
        assert_eq!(rows, 1500);
        assert_eq!(keys.len(), 1500);
        assert_eq!(site.count("SELECT count(*) FROM outbox"), 1500);
        assert_eq!(jet.backlog("c"), Some((0, 0)));
        assert!(site.count("SELECT count(*) FROM deliveries") >= 3000);
    }
}

/// RabbitMQ with kills at random moments, then a run to the end: exactly once, and the queue
/// empty (every delivery acknowledged; what a killed consumer held went back at once).
#[test]
fn rabbitmq_after_random_kills_applies_each_interchange_once() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(1500, 8);
    let mut all: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(k, b)| (b.clone(), Some(format!("a{k}")), None))
        .collect();
    all.extend(
        bodies
            .iter()
            .enumerate()
            .map(|(k, b)| (b.clone(), Some(format!("b{k}")), None)),
    );
    rabbit.put(&all);
    let from = rabbit.from();
    let args = ["--from", from.as_str(), "--batch", "100"];
    let mut rng = Synth::new(12);
    for round in 0..4 {
        let out = site.path(&format!("run{round}.jsonl"));
        let mut child = consume_child(&site, &args, &out);
        std::thread::sleep(Duration::from_millis(150 + rng.below(500)));
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        drop(child.0.take().map(|mut c| c.wait()));
    }
    let (code, lines, stderr) = consume(&site, "2s", &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        lines
            .iter()
            .filter_map(|l| l["status"].as_str())
            .all(|s| s == "new" || s == "duplicate")
    );
    let (keys, rows) = applied(&site);
    assert_eq!((keys.len(), rows), (1500, 1500));
    assert_eq!(rabbit.ready(), 0);
    // Every delivery was recorded in a committed batch at least once.
    assert!(site.count("SELECT count(*) FROM deliveries") >= 3000);
}

/// The NATS server killed (SIGKILL) and started again under a running consume: it reconnects,
/// and every delivery is applied once and acknowledged; SIGTERM then ends it with exit 0.
#[test]
fn consume_survives_a_nats_server_restart() {
    let site = Site::new();
    let Some(mut server) = OwnNats::start(&site.path("nats-store")) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    let bodies = synthetic(600, 9);
    let first: Vec<_> = bodies[..300].iter().map(|b| (b.clone(), None)).collect();
    jet.put(&first);
    let from = jet.from("c");
    let out = site.path("run.jsonl");
    let mut child = consume_child(
        &site,
        &["--from", &from, "--batch", "50", "--ack-wait", "2s"],
        &out,
    );
    let lines = || fs::read_to_string(&out).map_or(0, |t| t.lines().count());
    assert!(within(|| lines() >= 300), "the first 300 were not consumed");
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    server.up().unwrap();
    let rest: Vec<_> = bodies[300..].iter().map(|b| (b.clone(), None)).collect();
    jet.put(&rest);
    assert!(
        within(|| site.count("SELECT count(*) FROM interchanges") == 600),
        "not all consumed after the restart: {}",
        fs::read_to_string(out.with_extension("err")).unwrap_or_default()
    );
    assert!(
        within(|| jet.backlog("c") == Some((0, 0))),
        "{:?}",
        jet.backlog("c")
    );
    let pid = child.id() as i32;
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = child.0.take().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // (Whether consume saw the outage depends on timing: the client library reconnects on its
    // own, and a pull made meanwhile fails and is made again on a new connection.)
    let text = fs::read_to_string(&out).unwrap();
    let summary = crate::common::json_lines(text.as_bytes()).pop().unwrap();
    assert!(
        summary["summary"]["new"].as_u64().unwrap() == 600,
        "{summary}"
    );
}

/// RabbitMQ closing consume's connection (as a broker restart does): it reconnects, and what
/// comes after is consumed too; SIGTERM then ends it with exit 0, the password never shown.
#[test]
fn consume_reconnects_when_rabbitmq_drops_the_connection() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(200, 13);
    let put = |range: std::ops::Range<usize>| {
        let part: Vec<_> = range
            .map(|k| (bodies[k].clone(), Some(format!("m{k}")), None))
            .collect();
        rabbit.put(&part);
    };
    put(0..100);
    let out = site.path("run.jsonl");
    let from = rabbit.from();
    let mut child = consume_child(&site, &["--from", &from, "--batch", "20"], &out);
    let lines = || fs::read_to_string(&out).map_or(0, |t| t.lines().count());
    assert!(within(|| lines() >= 100), "the first 100 were not consumed");
    let count = || site.count("SELECT count(*) FROM interchanges");
    crate::common::brokers::close_rabbitmq_connection(&format!("edi-inbox consume {}", child.id()));
    put(100..200);
    assert!(
        within(|| count() == 200),
        "not all consumed after the connection was closed"
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.0.take().unwrap().wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let stderr = fs::read_to_string(out.with_extension("err")).unwrap();
    assert!(stderr.contains("reconnecting"), "{stderr}");
    assert!(!stderr.contains("guest:guest"), "{stderr}");
    assert_eq!(rabbit.ready(), 0);
}

/// A database error (the inbox locked by another process past --busy-timeout): exit 1, nothing
/// acknowledged, so the broker delivers the batch again, and the next run applies it.
#[test]
fn nothing_is_acknowledged_after_a_database_error() {
    let Some(jet) = Jet::create() else { return };
    let site = Site::new();
    let from = jet.from("c");
    // The inbox and the consumer (an ack wait of a second) made by a run with nothing to do.
    let (code, _, stderr) = consume(&site, "1s", &["--from", &from, "--ack-wait", "1s"]);
    assert_eq!(code, Some(0), "{stderr}");
    jet.put(
        &synthetic(2, 14)
            .into_iter()
            .map(|b| (b, None))
            .collect::<Vec<_>>(),
    );
    let lock = rusqlite::Connection::open(site.db()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = site
        .cmd()
        .args([
            "--busy-timeout",
            "300ms",
            "consume",
            "--until-idle",
            "2s",
            "--from",
            &from,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("nothing of the batch was committed or acknowledged"),
        "{stderr}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    let (code, lines, stderr) = consume(&site, "3s", &["--from", &from]);
    assert_eq!(code, Some(0), "{stderr}");
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["new"], 2, "{summary}");
    assert_eq!(summary["redelivered"], 2, "{summary}");
    assert_eq!(jet.backlog("c"), Some((0, 0)));
}

/// Three consume processes (as three hosts) on one JetStream consumer and on one RabbitMQ
/// queue, sharing one PostgreSQL inbox, one of them killed mid-run: the deliveries are spread
/// across them, and every interchange is applied exactly once.
#[test]
fn three_consumers_share_the_work_and_apply_each_interchange_once() {
    let Some(site) = Site::postgres() else { return };
    let (jet, rabbit) = (Jet::create(), Rabbit::create(Some("#")));
    let bodies = synthetic(3000, 10);
    let (nats_half, amqp_half) = bodies.split_at(1500);
    let mut sources = Vec::new();
    if let Some(jet) = &jet {
        let mut all: Vec<_> = nats_half.iter().map(|b| (b.clone(), None)).collect();
        all.extend(nats_half.iter().map(|b| (b.clone(), None)));
        jet.put(&all);
        sources.push((jet.from("shared"), 1500));
    }
    if let Some(rabbit) = &rabbit {
        let all: Vec<_> = amqp_half
            .iter()
            .enumerate()
            .map(|(k, b)| (b.clone(), Some(format!("m{k}")), None))
            .collect();
        rabbit.put(&all);
        sources.push((rabbit.from(), 1500));
    }
    let mut expected = 0;
    for (n, (from, count)) in sources.iter().enumerate() {
        expected += count;
        let outs: Vec<_> = (0..3)
            .map(|k| site.path(&format!("s{n}host{k}.jsonl")))
            .collect();
        let args = [
            "--from",
            from.as_str(),
            "--batch",
            "50",
            "--ack-wait",
            "2s",
            "--until-idle",
            "5s",
        ];
        let mut children: Vec<_> = outs
            .iter()
            .map(|o| consume_child(&site, &args, o))
            .collect();
        std::thread::sleep(Duration::from_millis(400));
        unsafe { libc::kill(children[0].id() as i32, libc::SIGKILL) };
        for (k, c) in children.iter_mut().enumerate() {
            let status = c.0.take().unwrap().wait().unwrap();
            // The one killed ended by its signal (or, had it finished first, with 0).
            let want: &[Option<i32>] = if k == 0 { &[None, Some(0)] } else { &[Some(0)] };
            assert!(want.contains(&status.code()), "host {k}: {status:?}");
        }
        let took: Vec<usize> = outs
            .iter()
            .map(|o| {
                let text = fs::read_to_string(o).unwrap_or_default();
                crate::common::json_lines(text.as_bytes())
                    .iter()
                    .filter(|l| l.get("status").is_some())
                    .count()
            })
            .collect();
        assert!(
            took[1] > 0 && took[2] > 0,
            "{from}: the deliveries were not spread: {took:?}"
        );
        let (keys, rows) = applied(&site);
        assert_eq!(
            (keys.len() as i64, rows),
            (expected as i64, expected as i64),
            "{from}"
        );
    }
    if let Some(jet) = &jet {
        assert_eq!(jet.backlog("shared"), Some((0, 0)));
    }
    if let Some(rabbit) = &rabbit {
        assert_eq!(rabbit.ready(), 0);
    }
}

/// End to end: files ingested into one inbox, published whole to JetStream, consumed into a
/// second inbox, which then holds the same keys and hashes.
#[test]
fn published_interchanges_consumed_into_a_second_inbox_are_the_same() {
    let Some(jet) = Jet::create() else { return };
    let first = Site::new();
    for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, first.drop().join(path.file_name().unwrap())).unwrap();
    }
    first.ingest_quietly(&[]).code(0);
    first
        .cmd()
        .args(["publish", "--payload", "interchange", "--to", &jet.to()])
        .assert()
        .code(0);
    let second = Site::new();
    let (code, lines, stderr) = consume(
        &second,
        "1s",
        &["--from", &jet.from("copy"), "--contrl", "always"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(lines.last().unwrap()["summary"]["new"], 7);
    // Each answered by a CONTRL, as ingest answers a file.
    assert_eq!(lines.iter().filter(|l| l["contrl"].is_string()).count(), 7);
    assert_eq!(second.count("SELECT count(*) FROM acknowledgements"), 7);
    let keys = "SELECT sender || '/' || recipient, control_ref, sha256 FROM interchanges";
    assert_eq!(first.triples(keys), second.triples(keys));
    assert_eq!(
        first.count("SELECT count(*) FROM messages"),
        second.count("SELECT count(*) FROM messages")
    );
}

/// A consumer whose acknowledgement would take other deliveries with it (ack policy `all`) is
/// refused before anything is fetched; a broker that goes away and stays away for --until-idle
/// ends the run with exit 1, not as if all were done.
#[test]
fn an_unsafe_consumer_and_a_broker_gone_for_good_are_failures() {
    let site = Site::new();
    let Some(mut server) = OwnNats::start(&site.path("nats-store")) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    jet.consumer_acking_all("all");
    jet.put(&[(synthetic(1, 15).remove(0), None)]);
    let (code, lines, stderr) = consume(&site, "1s", &["--from", &jet.from("all")]);
    assert_eq!(code, Some(1), "{stderr} {lines:?}");
    assert!(stderr.contains("not explicit"), "{stderr}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    let out = site.path("gone.jsonl");
    let mut child = consume_child(
        &site,
        &["--from", &jet.from("c"), "--until-idle", "3s"],
        &out,
    );
    assert!(
        within(|| site.count("SELECT count(*) FROM interchanges") == 1),
        "not consumed"
    );
    server.kill();
    let status = child.0.take().unwrap().wait().unwrap();
    let stderr = fs::read_to_string(out.with_extension("err")).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("did not answer for --until-idle"),
        "{stderr}"
    );
}

/// What the operator gets wrong is told before anything is fetched: a source or dead-letter
/// destination that is not one (exit 2, the password never shown), a stream that does not
/// exist (exit 1, named).
#[test]
fn bad_sources_are_refused_before_anything_is_fetched() {
    let site = Site::new();
    let out = site
        .cmd()
        .args(["consume", "--from", "amqp://edi:s3cret@h:5672"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("VHOST/QUEUE") && !err.contains("s3cret"),
        "{err}"
    );
    let out = site
        .cmd()
        .args([
            "consume",
            "--from",
            "nats://127.0.0.1:4222/S/C",
            "--dead-letter",
            "dir:x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    if Jet::create().is_some() {
        let out = site
            .cmd()
            .args([
                "consume",
                "--from",
                "nats://127.0.0.1:4222/NO_SUCH_STREAM_X/c",
                "--until-idle",
                "1s",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("NO_SUCH_STREAM_X"), "{err}");
    }
}

/// Issue 22, 3: a delivery whose metadata the client library refuses (a RabbitMQ `message_id`
/// that is not UTF-8, `b"\xff\xfe-1"`; an `edi-filename` header that is not UTF-8) made
/// `consume` reconnect forever, deciding nothing, not even the deliveries before it. Each is
/// decided on its bytes, its metadata shown escaped, the others around it too, and all are
/// acknowledged.
#[test]
fn rabbitmq_deliveries_with_metadata_that_is_not_utf8_are_decided() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(3, 41);
    rabbit.put(&[(bodies[0].clone(), Some("good-1".into()), None)]);
    crate::common::raw::amqp_publish(
        &rabbit.exchange,
        "edi.in",
        b"\xff\xfe-1",
        &[(b"edi-filename", b"inv\xe9.edi")],
        &bodies[1],
    );
    rabbit.put(&[(bodies[2].clone(), Some("good-3".into()), None)]);
    let (code, lines, stderr) = consume(&site, "3s", &["--from", &rabbit.from()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        lines.last().unwrap()["summary"]["new"],
        3,
        "{lines:?} {stderr}"
    );
    let queue = rabbit.queue.clone().unwrap();
    let sources: BTreeSet<String> = site
        .rows("SELECT source, filename FROM deliveries")
        .into_iter()
        .map(|r| {
            format!(
                "{} {}",
                r[0].clone().unwrap(),
                r[1].clone().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        sources.contains(&format!("amqp:{queue}/\\xFF\\xFE-1 inv\\xE9.edi")),
        "{sources:?}"
    );
    assert_eq!(rabbit.ready(), 0, "every delivery acknowledged");
}

/// Issue 22, 3: a JetStream message with a header value that is not UTF-8, or a header line
/// without a colon (sent with a raw `HPUB`), made `consume` reconnect forever. Each is decided
/// on its bytes with its headers kept, escaped; none blocks the others; all are acknowledged.
#[test]
fn jetstream_messages_with_headers_the_client_refuses_are_decided() {
    let Some(jet) = Jet::create() else { return };
    let site = Site::new();
    let bodies = synthetic(4, 43);
    jet.put(&[(bodies[0].clone(), Some("good-1.edi".into()))]);
    let subject = format!("{}.in", jet.prefix);
    let addr = NATS.trim_start_matches("nats://");
    crate::common::raw::nats_hpub(
        addr,
        subject.as_bytes(),
        b"NATS/1.0\r\nedi-filename: caf\xe9.edi\r\n\r\n",
        &bodies[1],
    );
    crate::common::raw::nats_hpub(
        addr,
        subject.as_bytes(),
        b"NATS/1.0\r\nno colon on this line\r\nedi-filename: third.edi\r\n\r\n",
        &bodies[2],
    );
    jet.put(&[(bodies[3].clone(), Some("good-4.edi".into()))]);
    let (code, lines, stderr) = consume(&site, "3s", &["--from", &jet.from("c")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        lines.last().unwrap()["summary"]["new"],
        4,
        "{lines:?} {stderr}"
    );
    let names: BTreeSet<String> = site
        .rows("SELECT filename FROM deliveries")
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect();
    for want in ["good-1.edi", "caf\\xE9.edi", "third.edi", "good-4.edi"] {
        assert!(names.contains(want), "{want} in {names:?}");
    }
    assert_eq!(
        jet.backlog("c"),
        Some((0, 0)),
        "every delivery acknowledged"
    );
}

/// Issue 22, 5: a RabbitMQ delivery without a `message_id` was named by its delivery tag,
/// which starts at 1 again on each connection: different deliveries of two runs shared one
/// name. Each connection's deliveries are named apart.
#[test]
fn rabbitmq_deliveries_without_a_message_id_are_named_apart() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(2, 47);
    for body in &bodies {
        rabbit.put(&[(body.clone(), None, None)]);
        let (code, _, stderr) = consume(&site, "1s", &["--from", &rabbit.from()]);
        assert_eq!(code, Some(0), "{stderr}");
    }
    let names: BTreeSet<String> = site
        .rows("SELECT source FROM deliveries")
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let queue = rabbit.queue.clone().unwrap();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with(&format!("amqp:{queue}/delivery-"))),
        "{names:?}"
    );
}

/// Issue 22, 3: a RabbitMQ queue deleted while `consume` ran: after the broker's cancel it
/// tried once, got NOT_FOUND, and never subscribed again, even once the queue was back with
/// messages, while its metrics stayed fresh. It tries again with its backoff, saying each try;
/// its metrics say it is not subscribed (`edi_inbox_consume_subscribed 0`, the last fetch
/// stale) until it is again, then it takes what the queue holds; SIGTERM exits 0.
#[test]
fn consume_subscribes_again_when_its_queue_comes_back() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(20, 53);
    let put = |range: std::ops::Range<usize>| {
        let part: Vec<_> = range
            .map(|k| (bodies[k].clone(), Some(format!("q{k}")), None))
            .collect();
        rabbit.put(&part);
    };
    put(0..10);
    let out = site.path("run.jsonl");
    let metrics = site.path("consume.prom");
    let mut child = consume_child(
        &site,
        &[
            "--from",
            &rabbit.from(),
            "--metrics-file",
            metrics.to_str().unwrap(),
        ],
        &out,
    );
    let lines = || fs::read_to_string(&out).map_or(0, |t| t.lines().count());
    assert!(within(|| lines() >= 10), "the first 10 were not consumed");
    let count = || site.count("SELECT count(*) FROM interchanges");
    rabbit.delete_queue();
    let prom = || fs::read_to_string(&metrics).unwrap_or_default();
    assert!(
        within(|| prom().contains("\nedi_inbox_consume_subscribed 0\n")),
        "the metrics never said it was not subscribed: {}",
        prom()
    );
    // Still not subscribed a while later: the tries go on.
    std::thread::sleep(Duration::from_secs(3));
    rabbit.restore_queue();
    put(10..20);
    assert!(
        within(|| count() == 20),
        "the queue came back, and what it held was not consumed"
    );
    assert!(
        within(|| prom().contains("\nedi_inbox_consume_subscribed 1\n")),
        "{}",
        prom()
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.0.take().unwrap().wait().unwrap();
    let stderr = fs::read_to_string(out.with_extension("err")).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.matches("trying again in").count() >= 2,
        "each try is said: {stderr}"
    );
    assert_eq!(rabbit.ready(), 0);
}

/// Issue 22, 5: a `--dead-letter` that fails named the server but not the exchange. It names
/// both (never the password), and nothing is acknowledged: the delivery comes again.
#[test]
fn a_dead_letter_that_fails_names_its_exchange() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let poison = b"UNB+UNOC:3+A+B+240101:1200+R1'UNH+1+X:D:96A:UN'UNT+9+1'UNZ+1+R1'".to_vec();
    rabbit.put(&[(poison, Some("m1".into()), None)]);
    let dl = "amqp://guest:guest@127.0.0.1:1/%2f/edi-dead-letters";
    let (code, _, stderr) = consume(
        &site,
        "2s",
        &["--from", &rabbit.from(), "--dead-letter", dl],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--dead-letter amqp://guest@127.0.0.1:1/%2f/edi-dead-letters"),
        "{stderr}"
    );
    assert!(!stderr.contains("guest:guest"), "{stderr}");
    assert_eq!(rabbit.ready(), 1, "not acknowledged: it comes again");
}
