//! `consume`: interchanges from every broker, against real ones (the machine's NATS and
//! RabbitMQ, the test servers of Kafka and SQS). The contracts are each one body run per
//! broker (`per_broker!`, over [`TestBroker`](crate::common::brokers::TestBroker)), on both
//! inbox backends where they were:
//! each delivery decided as its file would be; the same payload twice is new then duplicate; a
//! poison delivery refused for good and dead-lettered, never redelivered; `kill -9` at random
//! moments, then a rerun: every interchange applied exactly once and every delivery
//! acknowledged; the connection dropped under a running consume (a NATS server restarted, a
//! RabbitMQ connection closed); three consumers on one inbox. Then what is one broker's own: a
//! consumer that acknowledges too much; metadata the client libraries refuse; a queue deleted
//! and restored. (The outbox of one inbox published and consumed into another is a contract of
//! every destination: `sinks.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::brokers::Put;
#[cfg(feature = "amqp")]
use crate::common::brokers::Rabbit;
#[cfg(feature = "nats")]
use crate::common::brokers::{Jet, NATS, OwnNats};
use crate::common::site::Site;
use crate::common::synth::{Layout, Synth};
use crate::common::{Run, RunExt, Running, StartExt};

/// `consume --json --until-idle IDLE` with `args`: the run (its JSON Lines in [`Run::json`]).
pub(crate) fn consume(site: &Site, idle: &str, args: &[&str]) -> Run {
    site.cmd()
        .args(["consume", "--json", "--until-idle", idle])
        .args(args)
        .run()
}

/// A `consume --json` child, its JSON Lines written to a file, its standard error beside it
/// (`.err`); killed and reaped however the test ends.
pub(crate) struct Consumer {
    running: Running,
    out: PathBuf,
}

impl Consumer {
    /// `consume --json` with `args`, its output to `out`.
    pub(crate) fn start(site: &Site, args: &[&str], out: &Path) -> Consumer {
        Consumer::start_with(site, args, out, &[])
    }

    /// The same with the variables `env` set.
    pub(crate) fn start_with(
        site: &Site,
        args: &[&str],
        out: &Path,
        env: &[(&str, &str)],
    ) -> Consumer {
        let running = Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
            .env_remove("FAILPOINTS")
            .env("EDI_INBOX_KAFKA_SESSION_TIMEOUT_MS", "6000")
            .envs(crate::common::AWS_TEST_ENV)
            .envs(env.iter().copied())
            .arg("--db")
            .arg(site.db_arg())
            .args(["consume", "--json"])
            .args(args)
            .stdout(fs::File::create(out).unwrap())
            .stderr(fs::File::create(out.with_extension("err")).unwrap())
            .start();
        Consumer {
            running,
            out: out.to_path_buf(),
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.running.id()
    }

    /// The lines it wrote so far.
    pub(crate) fn lines(&self) -> usize {
        fs::read_to_string(&self.out).map_or(0, |t| t.lines().count())
    }

    /// What it wrote on standard error so far.
    pub(crate) fn stderr(&self) -> String {
        fs::read_to_string(self.out.with_extension("err")).unwrap_or_default()
    }

    /// Kills it (SIGKILL) and reaps it: whether the signal is what ended it (it was still
    /// running, not ended on its own before).
    pub(crate) fn kill(self) -> bool {
        self.running.signal(libc::SIGKILL);
        let run = self.running.wait();
        std::os::unix::process::ExitStatusExt::signal(&run.status) == Some(libc::SIGKILL)
    }

    /// How it ended, where it has (not waited for).
    pub(crate) fn ended(&mut self) -> Option<std::process::ExitStatus> {
        self.running.child().try_wait().ok().flatten()
    }

    /// Sends it `signal`.
    pub(crate) fn signal(&self, signal: i32) {
        self.running.signal(signal);
    }

    /// Waits for its end: the run, with what it wrote.
    pub(crate) fn wait(self) -> Run {
        let mut run = self.running.wait();
        run.stdout = fs::read(&self.out).unwrap_or_default();
        run.stderr = fs::read(self.out.with_extension("err")).unwrap_or_default();
        run
    }
}

/// Every sample, valid and broken, by name, in name order.
pub(crate) fn all_samples() -> Vec<(String, Vec<u8>)> {
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
pub(crate) fn synthetic(n: usize, seed: u64) -> Vec<Vec<u8>> {
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
pub(crate) fn by(
    lines: &[serde_json::Value],
    field: &str,
) -> BTreeMap<String, Vec<(String, String, i64)>> {
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

/// The statuses of the lines that have one, in order.
pub(crate) fn statuses(lines: &[serde_json::Value]) -> Vec<&str> {
    lines.iter().filter_map(|l| l["status"].as_str()).collect()
}

/// The (sender, control reference, sha256) of every interchange applied, and how many the
/// inbox holds (`stats`).
pub(crate) fn applied(site: &Site) -> (BTreeSet<(String, String, String)>, i64) {
    (
        site.triples("SELECT sender, control_ref, sha256 FROM interchanges"),
        interchanges(site),
    )
}

/// How many interchanges the inbox holds, as `stats` says.
pub(crate) fn interchanges(site: &Site) -> i64 {
    site.stats()["interchanges"].as_i64().unwrap()
}

/// Waits until `f` holds (or 60 s went by); whether it does.
pub(crate) fn within(mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(60);
    while !f() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

per_broker! {
    /// Every sample as a delivery (with its name in edi-filename): each decided exactly as
    /// ingest decides it as a file, the rejected ones recorded with their bytes; every delivery
    /// acknowledged (the rejected ones refused for good), so a second run gets nothing.
    per_backend fn deliveries_are_decided_as_their_files(site, broker) {
        let samples = all_samples();
        let files = site.fresh();
        for (name, bytes) in &samples {
            fs::write(files.drop().join(name), bytes).unwrap();
        }
        let want = files.ingest_json(&[]).code(3).json();
        broker.send(
            &samples
                .iter()
                .map(|(n, b)| Put::new(b, n.clone()).named(n.clone()))
                .collect::<Vec<_>>(),
        );
        let metrics = site.path("consume.prom");
        let from = broker.source_url();
        let lines = consume(
            &site,
            "2s",
            &["--from", &from, "--metrics-file", metrics.to_str().unwrap()],
        )
        .code(3)
        .json();
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
        assert!(source.starts_with(&broker.source_prefix()), "{source}");
        assert_eq!(site.stats()["rejected"], files.stats()["rejected"]);
        assert_eq!(site.count("SELECT count(*) FROM rejected_files WHERE bytes IS NULL"), 0);
        let prom = fs::read_to_string(&metrics).unwrap();
        for want in [
            format!("edi_inbox_consume_deliveries_total {}\n", samples.len()),
            "edi_inbox_consume_redelivered_total 0\n".to_string(),
            "edi_inbox_consume_last_success_timestamp_seconds ".to_string(),
        ] {
            assert!(prom.contains(&want), "{want} in {prom}");
        }
        assert_eq!(broker.unacknowledged(), Some(0));
        let lines = consume(&site, "1s", &["--from", &from]).code(0).json();
        assert_eq!(lines.last().unwrap()["summary"]["deliveries"], 0);
    }
}

per_broker! {
    /// The same payload delivered twice under different broker ids (a gateway that sent it
    /// again): new, then duplicate, each under its own name.
    per_backend fn the_same_payload_twice_is_new_then_duplicate(site, broker) {
        let body = fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        broker.send(&[
            Put::new(&body, "first").named("a.edi"),
            Put::new(&body, "second").named("b.edi"),
        ]);
        let lines = consume(&site, "1s", &["--from", &broker.source_url()]).code(0).json();
        assert_eq!(statuses(&lines), ["new", "duplicate"]);
        assert_ne!(lines[0]["file"], lines[1]["file"]);
        assert_eq!(lines[0]["file"], broker.source(1, "first"));
        assert_eq!(lines[1]["file"], broker.source(2, "second"));
        assert_eq!(lines[1]["filename"], "b.edi");
        assert_eq!(broker.unacknowledged(), Some(0));
        assert_eq!(interchanges(&site), 1);
    }
}

per_broker! {
    /// A partner's copy of an interchange sent as a new message, whose first receive never
    /// committed (the inbox locked past --busy-timeout: nothing committed or acknowledged),
    /// comes again with a delivery count above 1 where the broker counts (JetStream, RabbitMQ,
    /// SQS): it is still the partner asking again, and gets the first answer, once. (Our own
    /// redelivery of a message already answered, which its name tells, is the unit test
    /// `intake::deliveries::tests::a_redelivery_is_told_by_its_name_where_the_broker_keeps_one`.)
    fn a_partners_copy_received_twice_is_answered(site, broker) {
        let body = fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        let from = broker.source_url();
        let args = ["--from", from.as_str(), "--contrl", "always", "--ack-wait", "2s"];
        broker.send(&[Put::new(&body, "first").named("a.edi")]);
        let lines = consume(&site, "1s", &args).code(0).json();
        assert_eq!(statuses(&lines), ["new"]);
        let first = lines[0]["contrl"].clone();
        assert!(first.is_string(), "a new interchange answered: {}", lines[0]);
        broker.send(&[Put::new(&body, "second").named("b.edi")]);
        fails_with_the_inbox_locked(&site, &args);
        // Longer than the ack wait: the copy held by the failed run comes again.
        let lines = consume(&site, "5s", &args).code(0).json();
        assert_eq!(statuses(&lines), ["duplicate"], "{lines:?}");
        assert_eq!(lines[0]["file"], broker.source(2, "second"));
        // Kafka keeps no count (1); every other broker says it delivered the copy before.
        let counted = !broker.source_prefix().starts_with("kafka:");
        assert_eq!(
            lines[0]["delivery_count"].as_u64().unwrap() > 1,
            counted,
            "{}",
            lines[0]
        );
        assert_eq!(
            lines[0]["contrl"], first,
            "the partner's copy received a second time is answered with the first answer: {}",
            lines[0]
        );
        assert_eq!(
            site.count("SELECT count(*) FROM contrl_outbox"),
            2,
            "the first answer, queued once for each of the two sendings"
        );
        assert_eq!(broker.unacknowledged(), Some(0));
    }
}

per_broker! {
    /// A delivery whose edi-filename is 60,000 bytes long (a sender may put any name there; the
    /// issue saw 100,000, more than JetStream's 64 KiB of headers): its human outcome line shows
    /// the name's first 200 characters and its length, not a 60 KB log line; the JSON line and
    /// the inbox's record of the delivery keep it whole.
    fn a_long_file_name_is_shortened_on_the_human_line_only(site, broker) {
        let body = fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap();
        let name = format!("{}.edi", "n".repeat(59_996));
        broker.send(&[Put::new(&body, "long1").named(name.clone())]);
        let from = broker.source_url();
        let run = site.cmd().args(["consume", "--until-idle", "1s", "--from", &from]).run();
        run.code(0);
        let out = run.out();
        let line = out.lines().find(|l| l.starts_with("new ")).unwrap_or_default();
        assert!(
            line.ends_with(&format!("  (edi-filename {}... (60000 bytes in all))", "n".repeat(200))),
            "the name shortened on the human line ({} bytes): {}",
            line.len(),
            &line[..line.len().min(300)]
        );
        assert!(out.len() < 2_000, "{} bytes of output", out.len());
        assert_eq!(
            site.rows("SELECT filename FROM deliveries")[0][0].as_deref(),
            Some(name.as_str()),
            "the inbox keeps the name whole"
        );
        // The partner sending it again: the JSON line has the name whole.
        broker.send(&[Put::new(&body, "long2").named(name.clone())]);
        let lines = consume(&site, "1s", &["--from", &from]).code(0).json();
        assert_eq!(statuses(&lines), ["duplicate"]);
        assert_eq!(lines[0]["filename"].as_str(), Some(name.as_str()));
    }
}

per_broker! {
    /// A poison delivery: recorded with its bytes, refused for good (JetStream terminates it,
    /// as the server's advisory says; RabbitMQ rejects it without requeue, so the queue's own
    /// dead-letter exchange gets it), never redelivered, and with --dead-letter published to
    /// a destination with the reason and its file name in headers; the good delivery in the
    /// same batch is applied and acknowledged.
    fn a_poison_delivery_is_refused_for_good_and_dead_lettered(site, broker) {
        let Some(dead) = <B as crate::common::brokers::TestBroker>::create() else {
            return;
        };
        let good = fs::read(crate::common::samples().join("valid/invrpt-level-b.edi")).unwrap();
        let poison = fs::read(crate::common::samples().join("broken/unz-count-wrong.edi")).unwrap();
        broker.send(&[Put::new(&poison, "m1").named("bad.edi"), Put::new(&good, "m2")]);
        let mut refused = broker.watch_refused();
        let run = consume(
            &site,
            "1s",
            &["--from", &broker.source_url(), "--dead-letter", &dead.dead_letter_to()],
        );
        // Refused for good, not merely acknowledged: the broker says so (Kafka is told
        // nothing of a refusal: its committed offset, after the inbox's position, passed it).
        if let Some(refused) = refused.as_mut() {
            let refused = refused();
            if B::DROPS_THE_ACKNOWLEDGED {
                // SQS: deleted for good, the poison as the good one beside it; Kafka: both
                // below the group's committed offset.
                assert_eq!(refused.len(), 2, "deleted for good, the poison and the good one");
            } else {
                assert_eq!(refused.len(), 1, "refused for good");
                assert!(refused.iter().flatten().all(|body| *body == poison));
            }
        }
        let lines = run.code(3).json();
        assert_eq!(statuses(&lines), ["rejected", "new"]);
        assert!(lines[0]["offset"].is_i64(), "{:?}", lines[0]);
        let held = dead.dead_lettered();
        assert_eq!(held.len(), 1, "--dead-letter");
        assert_eq!(held[0].body, poison);
        assert_eq!(held[0].subject, dead.dead_letter_subject());
        let reason = &held[0].headers["edi-inbox-reason"];
        assert!(reason.contains("UNZ"), "{reason}");
        assert_eq!(held[0].headers["edi-filename"], "bad.edi");
        assert_eq!(site.stats()["rejected"], 1);
        // Nothing pending, nothing comes again.
        assert_eq!(broker.unacknowledged(), Some(0));
        let lines = consume(&site, "2s", &["--from", &broker.source_url()]).code(0).json();
        assert_eq!(lines.last().unwrap()["summary"]["deliveries"], 0);
    }
}

per_broker! {
    /// Thousands of deliveries (each payload twice, under two ids), a consumer killed with
    /// SIGKILL at random moments, then a run to the end: every interchange applied exactly
    /// once, and every delivery acknowledged (nothing pending: what a killed one held came
    /// again, after JetStream's ack wait, at once on RabbitMQ). Each kill falls at a random
    /// point once the run has decided something, and counts as landing mid-work where the
    /// signal ended it and the broker still held deliveries not acknowledged: at least three
    /// of the four must.
    per_backend fn after_random_kills_each_interchange_is_applied_once(site, broker) {
        let n = B::many(1500);
        let bodies = synthetic(n, 7);
        let mut all: Vec<_> = bodies
            .iter()
            .enumerate()
            .map(|(k, b)| Put::new(b, format!("a{k}")))
            .collect();
        all.extend(
            bodies
                .iter()
                .enumerate()
                .rev()
                .map(|(k, b)| Put::new(b, format!("b{k}"))),
        );
        broker.send(&all);
        let from = broker.source_url();
        let args = ["--from", from.as_str(), "--batch", "100", "--ack-wait", "2s"];
        let mut rng = Synth::new(11);
        let mut killed_mid_work = 0;
        for round in 0..4 {
            let out = site.path(&format!("run{round}.jsonl"));
            let child = Consumer::start(&site, &args, &out);
            // At a random point of the work: once it decided a random number of deliveries (up
            // to a tenth of them), then a random few milliseconds on, so that each kill falls
            // at another moment of a batch and leaves work to the runs after it, however fast
            // the broker (Kafka's one partition takes a hundred a batch in milliseconds).
            let target = 1 + rng.below(2 * n as u64 / 10) as usize;
            let until = Instant::now() + Duration::from_secs(60);
            while child.lines() < target && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(rng.below(30)));
            let before = child.lines();
            let killed = child.kill();
            let left = broker.unacknowledged();
            eprintln!(
                "round {round}: killed by the signal: {killed}, {before} lines, {left:?} of {} deliveries unacknowledged",
                2 * n
            );
            if killed && before > 0 && left != Some(0) {
                killed_mid_work += 1;
            }
        }
        assert!(
            killed_mid_work >= 3,
            "the kills must fall in the middle of the work: {killed_mid_work} of 4 did"
        );
        // Longer than the ack wait: what the killed ones held comes again.
        let lines = consume(&site, "5s", &args).code(0).json();
        assert!(statuses(&lines).iter().all(|s| *s == "new" || *s == "duplicate"));
        let (keys, rows) = applied(&site);
        assert_eq!((keys.len(), rows), (n, n as i64));
        // One event per interchange, none published yet.
        assert_eq!(site.stats()["outbox_kinds"]["message"]["unpublished"], n);
        assert_eq!(broker.unacknowledged(), Some(0));
        // Every delivery was recorded in a committed batch at least once.
        assert!(site.count("SELECT count(*) FROM deliveries") >= 2 * n as i64);
    }
}

per_broker! {
    /// The connection dropped under a running consume (a NATS server of the test's own killed
    /// with SIGKILL and started again; RabbitMQ closing the connection, as a broker restart
    /// does): it reconnects, and every delivery, those sent after the drop too, is applied once
    /// and acknowledged; SIGTERM then ends it with exit 0, the password never shown. The cut
    /// is checked to have happened, whatever consume says of it: every connection consume held
    /// to the broker's port before it is closed after it (the kernel's tables); and on SQS,
    /// whose connections to moto last a request each (so that they come and go anyway), the
    /// relay in front of it must have cut one that was open.
    fn consume_survives_its_connection_dropped(site, broker) {
        let Some(mut broker) = broker.droppable(&site.path("nats-store")) else {
            return;
        };
        let n = B::many(600);
        let bodies = synthetic(n, 9);
        let part = |range: std::ops::Range<usize>| -> Vec<Put> {
            range.map(|k| Put::new(&bodies[k], format!("m{k}"))).collect()
        };
        broker.send(&part(0..n / 2));
        let from = broker.source_url();
        let out = site.path("run.jsonl");
        let child = Consumer::start(
            &site,
            &["--from", &from, "--batch", "50", "--ack-wait", "2s"],
            &out,
        );
        assert!(within(|| child.lines() >= n / 2), "the first half was not consumed");
        // The cut is seen to happen: the connections consume holds to the broker (or the
        // relay in front of it) before, from the kernel's tables, none of them open after.
        // (SQS's relay also fails the cut where it had no open connection to cut.)
        let port = crate::common::port_of(&from).expect("a port in the source URL");
        let mut held = Default::default();
        assert!(
            within(|| {
                held = crate::common::connections_to(child.id(), port);
                !held.is_empty()
            }),
            "consume holds no connection to port {port}"
        );
        broker.drop_connection_of(child.id());
        assert!(
            within(|| crate::common::connections_to(child.id(), port).is_disjoint(&held)),
            "the connection was not cut: consume still holds {:?} of {held:?} to port {port}",
            crate::common::connections_to(child.id(), port)
        );
        broker.send(&part(n / 2..n));
        assert!(
            within(|| site.count("SELECT count(*) FROM interchanges") == n as i64),
            "not all consumed after the connection was dropped: {}",
            child.stderr()
        );
        assert!(
            within(|| broker.unacknowledged() == Some(0)),
            "{:?}",
            broker.unacknowledged()
        );
        child.signal(libc::SIGTERM);
        let run = child.wait();
        run.code(0);
        let stderr = run.err();
        // (Whether consume saw a NATS outage depends on timing: the client library reconnects
        // on its own, and a pull made meanwhile fails and is made again on a new connection.)
        if B::SAYS_RECONNECTING {
            assert!(stderr.contains("reconnecting"), "{stderr}");
        }
        assert!(!stderr.contains("guest:guest"), "{stderr}");
        let summary = run.json().pop().unwrap();
        assert_eq!(summary["summary"]["new"], n, "{summary}");
        assert_eq!(interchanges(&site), n as i64);
    }
}

per_broker! {
    /// Three consume processes (as three hosts) on one source (a JetStream consumer, a
    /// RabbitMQ queue), sharing one PostgreSQL inbox, one of them killed mid-run: the
    /// deliveries are spread across them, and every interchange is applied exactly once. The
    /// kill is shown to land mid-work: once the first host has decided something, at a random
    /// moment after, the signal ending it while the broker still holds deliveries not
    /// acknowledged. (Kafka consumers share by partitions: their test is in kafka.rs.)
    shared fn three_consumers_share_the_work_and_apply_each_interchange_once(_site, broker) {
        let Some(site) = Site::postgres() else { return };
        let n = B::many(1500);
        let bodies = synthetic(n, 10);
        let mut all: Vec<_> = bodies
            .iter()
            .enumerate()
            .map(|(k, b)| Put::new(b, format!("a{k}")))
            .collect();
        all.extend(bodies.iter().enumerate().map(|(k, b)| Put::new(b, format!("b{k}"))));
        broker.send(&all);
        let from = broker.source_url();
        let outs: Vec<_> = (0..3).map(|k| site.path(&format!("host{k}.jsonl"))).collect();
        let args = [
            "--from", from.as_str(), "--batch", "50", "--ack-wait", "2s", "--until-idle", "5s",
        ];
        let mut children: Vec<_> = outs.iter().map(|o| Consumer::start(&site, &args, o)).collect();
        let first = children.remove(0);
        assert!(within(|| first.lines() > 0), "host 0 decided nothing: {}", first.stderr());
        std::thread::sleep(Duration::from_millis(Synth::new(3).below(200)));
        let before = first.lines();
        let killed = first.kill();
        let left = broker.unacknowledged();
        assert!(
            killed && left != Some(0),
            "the kill of host 0 did not land mid-work: ended by the signal: {killed}, after {before} lines, {left:?} deliveries unacknowledged"
        );
        for (k, c) in children.into_iter().enumerate() {
            c.wait().note(format!("host {}", k + 1)).code(0);
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
        assert!(took[1] > 0 && took[2] > 0, "the deliveries were not spread: {took:?}");
        let (keys, rows) = applied(&site);
        assert_eq!((keys.len(), rows), (n, n as i64));
        assert_eq!(broker.unacknowledged(), Some(0));
    }
}

/// A `consume` run with `args` whose batch cannot commit (the inbox locked by another
/// connection past --busy-timeout): exit 1, nothing of the batch committed or acknowledged.
pub(crate) fn fails_with_the_inbox_locked(site: &Site, args: &[&str]) {
    let lock = rusqlite::Connection::open(site.db()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = site
        .cmd()
        .args(["--busy-timeout", "300ms", "consume", "--until-idle", "2s"])
        .args(args)
        .run();
    let stderr = out.err();
    out.code(1);
    assert!(
        stderr.contains("nothing of the batch was committed or acknowledged"),
        "{stderr}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
}

/// A database error (the inbox locked by another process past --busy-timeout): exit 1, nothing
/// acknowledged, so the broker delivers the batch again, and the next run applies it.
#[cfg(feature = "nats")]
#[test]
fn nothing_is_acknowledged_after_a_database_error() {
    let Some(jet) = Jet::create() else { return };
    let site = Site::new();
    let from = jet.from("c");
    // The inbox and the consumer (an ack wait of a second) made by a run with nothing to do.
    consume(&site, "1s", &["--from", &from, "--ack-wait", "1s"]).code(0);
    jet.put(
        &synthetic(2, 14)
            .into_iter()
            .map(|b| (b, None))
            .collect::<Vec<_>>(),
    );
    fails_with_the_inbox_locked(&site, &["--from", &from]);
    assert_eq!(interchanges(&site), 0);
    let lines = consume(&site, "3s", &["--from", &from]).code(0).json();
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["new"], 2, "{summary}");
    assert_eq!(summary["redelivered"], 2, "{summary}");
    assert_eq!(jet.backlog("c"), Some((0, 0)));
}

/// A consumer whose acknowledgement would take other deliveries with it (ack policy `all`) is
/// refused before anything is fetched; a broker that goes away and stays away for --until-idle
/// ends the run with exit 1, not as if all were done.
#[cfg(feature = "nats")]
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
    let stderr = consume(&site, "1s", &["--from", &jet.from("all")])
        .code(1)
        .err();
    assert!(stderr.contains("not explicit"), "{stderr}");
    assert_eq!(interchanges(&site), 0);
    let out = site.path("gone.jsonl");
    let child = Consumer::start(
        &site,
        &["--from", &jet.from("c"), "--until-idle", "3s"],
        &out,
    );
    assert!(
        within(|| site.count("SELECT count(*) FROM interchanges") == 1),
        "not consumed"
    );
    server.kill();
    let run = child.wait();
    run.code(1);
    let stderr = run.err();
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
    #[cfg(feature = "amqp")]
    {
        let err = site
            .cmd()
            .args(["consume", "--from", "amqp://edi:s3cret@h:5672"])
            .run()
            .code(2)
            .err();
        assert!(
            err.contains("VHOST/QUEUE") && !err.contains("s3cret"),
            "{err}"
        );
    }
    #[cfg(feature = "nats")]
    site.cmd()
        .args([
            "consume",
            "--from",
            "nats://127.0.0.1:4222/S/C",
            "--dead-letter",
            "dir:x",
        ])
        .run()
        .code(2);
    #[cfg(feature = "nats")]
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
            .run();
        let err = out.code(1).err();
        assert!(err.contains("NO_SUCH_STREAM_X"), "{err}");
    }
}

/// Issue 22, 3: a delivery whose metadata the client library refuses (a RabbitMQ `message_id`
/// that is not UTF-8, `b"\xff\xfe-1"`; an `edi-filename` header that is not UTF-8) made
/// `consume` reconnect forever, deciding nothing, not even the deliveries before it. Each is
/// decided on its bytes, its metadata shown escaped, the others around it too, and all are
/// acknowledged.
#[cfg(feature = "amqp")]
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
    let run = consume(&site, "3s", &["--from", &rabbit.from()]);
    run.code(0);
    let lines = run.json();
    let stderr = run.err();
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
#[cfg(feature = "nats")]
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
    let run = consume(&site, "3s", &["--from", &jet.from("c")]);
    run.code(0);
    let lines = run.json();
    let stderr = run.err();
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
#[cfg(feature = "amqp")]
#[test]
fn rabbitmq_deliveries_without_a_message_id_are_named_apart() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let bodies = synthetic(2, 47);
    for body in &bodies {
        rabbit.put(&[(body.clone(), None, None)]);
        consume(&site, "1s", &["--from", &rabbit.from()]).code(0);
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
#[cfg(feature = "amqp")]
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
    let child = Consumer::start(
        &site,
        &[
            "--from",
            &rabbit.from(),
            "--metrics-file",
            metrics.to_str().unwrap(),
        ],
        &out,
    );
    assert!(
        within(|| child.lines() >= 10),
        "the first 10 were not consumed"
    );
    let count = || site.count("SELECT count(*) FROM interchanges");
    rabbit.delete_queue();
    let prom = || fs::read_to_string(&metrics).unwrap_or_default();
    assert!(
        within(|| prom().contains("\nedi_inbox_consume_subscribed 0\n")),
        "the metrics never said it was not subscribed: {}",
        prom()
    );
    // Still not subscribed a while later: once the metrics are written again (at most every
    // 10 s: a file merely not rewritten would say nothing), they still say so, the last fetch
    // as stale as it was, and the tries went on meanwhile (each said).
    let metric = |prom: &str, name: &str| -> Option<f64> {
        prom.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    let duration = "edi_inbox_consume_run_duration_seconds";
    let (gone, tries) = (prom(), child.stderr().matches("trying again in").count());
    assert!(
        within(|| metric(&prom(), duration) > metric(&gone, duration)),
        "the metrics were not written again: {gone} then {}",
        prom()
    );
    let (later, tries_later) = (prom(), child.stderr().matches("trying again in").count());
    assert!(
        later.contains("\nedi_inbox_consume_subscribed 0\n"),
        "still not subscribed, yet the metrics say it is: {later}"
    );
    let fetched = "edi_inbox_consume_last_batch_timestamp_seconds";
    assert_eq!(
        metric(&later, fetched),
        metric(&gone, fetched),
        "a fetch said to work while not subscribed: {gone} then {later}"
    );
    assert!(
        tries_later > tries,
        "no try while the metrics were written again ({tries} before): {}",
        child.stderr()
    );
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
    child.signal(libc::SIGTERM);
    let run = child.wait();
    run.code(0);
    let stderr = run.err();
    assert!(
        stderr.matches("trying again in").count() >= 2,
        "each try is said: {stderr}"
    );
    assert_eq!(rabbit.ready(), 0);
}

/// Issue 22, 5: a `--dead-letter` that fails named the server but not the exchange. It names
/// both (never the password), and nothing is acknowledged: the delivery comes again.
#[cfg(feature = "amqp")]
#[test]
fn a_dead_letter_that_fails_names_its_exchange() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    let poison = b"UNB+UNOC:3+A+B+240101:1200+R1'UNH+1+X:D:96A:UN'UNT+9+1'UNZ+1+R1'".to_vec();
    rabbit.put(&[(poison, Some("m1".into()), None)]);
    let dl = "amqp://guest:guest@127.0.0.1:1/%2f/edi-dead-letters";
    let stderr = consume(
        &site,
        "2s",
        &["--from", &rabbit.from(), "--dead-letter", dl],
    )
    .code(1)
    .err();
    assert!(
        stderr.contains("--dead-letter amqp://guest@127.0.0.1:1/%2f/edi-dead-letters"),
        "{stderr}"
    );
    assert!(!stderr.contains("guest:guest"), "{stderr}");
    assert_eq!(rabbit.ready(), 1, "not acknowledged: it comes again");
}
