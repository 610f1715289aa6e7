//! Kafka's own, against the test broker (tansu; see `common/brokers/kafka.rs`), beside the
//! contracts every broker meets (`consume.rs`, where Kafka's source takes its partitions by
//! hand): a consumer group that forms and is given partitions; positions kept in the inbox so
//! that, after kills with SIGKILL, no record is decided twice; three consumers of one group on
//! one PostgreSQL inbox with rebalances; and `publish --to kafka://` (`ce_` headers, a partner's
//! events under one key, the topic as a template, a producer setting refused). Kill -9 of
//! publish, a refusal parked and the round trip into a second inbox are the contracts of every
//! destination (`sinks.rs`, `::kafka`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::Duration;

use crate::common::RunExt;
use crate::common::brokers::{Kafka, Put, TestBroker as _};
use crate::common::site::Site;
use crate::common::synth::Synth;
use crate::consume::{Consumer, all_samples, applied, consume, interchanges, synthetic, within};
use crate::publish::{expected_order, order_held, publish, samples_ingested};

/// How many deliveries each source (`kafka:TOPIC/PARTITION/OFFSET`) has in the inbox: one
/// each, where no record was decided twice.
fn decided_per_record(site: &Site) -> BTreeMap<i64, i64> {
    let mut times = BTreeMap::new();
    for row in site.rows("SELECT source, count(*) FROM deliveries GROUP BY source") {
        let n: i64 = row[1].as_deref().unwrap().parse().unwrap();
        *times.entry(n).or_default() += 1;
    }
    times
}

/// The positions the inbox keeps for `group`: (topic/partition, next offset).
fn positions(site: &Site, group: &str) -> BTreeMap<String, i64> {
    site.rows(&format!(
        "SELECT topic || '/' || partition, next_offset FROM consumer_positions
         WHERE consumer_group = '{group}'"
    ))
    .into_iter()
    .map(|r| {
        (
            r[0].clone().unwrap(),
            r[1].as_deref().unwrap().parse().unwrap(),
        )
    })
    .collect()
}

/// A topic of three partitions holding `n` distinct interchanges, one record each, sent round
/// the partitions.
fn spread_over_three(n: usize, seed: u64) -> Option<Kafka> {
    let mut kafka = Kafka::with_partitions(3)?;
    kafka.spread = true;
    kafka.send(
        &synthetic(n, seed)
            .iter()
            .enumerate()
            .map(|(k, b)| Put::new(b, format!("k{k}")))
            .collect::<Vec<_>>(),
    );
    Some(kafka)
}

per_backend! {
    /// Every sample as a record, consumed by a group (which forms, and gives the consumer the
    /// partition): each decided as ingest decides its file; the record's key and time kept with
    /// its delivery; the position at the end of the partition, in the inbox and committed to
    /// Kafka after it; the metrics name it. A second run of the group decides nothing.
    fn a_group_decides_the_samples_as_ingest_does_and_keeps_its_positions(site) {
        let Some(kafka) = Kafka::create() else { return };
        let samples = all_samples();
        let files = site.fresh();
        for (name, bytes) in &samples {
            fs::write(files.drop().join(name), bytes).unwrap();
        }
        let want = files.ingest_json(&[]).code(3).json();
        kafka.send(
            &samples
                .iter()
                .map(|(n, b)| Put::new(b, n.clone()).named(n.clone()))
                .collect::<Vec<_>>(),
        );
        let metrics = site.path("consume.prom");
        let run = consume(
            &site,
            "3s",
            &["--from", &kafka.group_url(), "--metrics-file", metrics.to_str().unwrap()],
        );
        let stderr = run.err();
        let lines = run.code(3).json();
        assert!(stderr.contains("partitions given"), "{stderr}");
        assert_eq!(
            crate::consume::by(&lines, "filename"),
            crate::consume::by(&want, "file")
        );
        assert_eq!(applied(&site), applied(&files));
        assert_eq!(
            positions(&site, &kafka.group),
            [(format!("{}/0", kafka.topic), samples.len() as i64)].into()
        );
        assert_eq!(kafka.committed(), Some(vec![samples.len() as i64]));
        assert_eq!(decided_per_record(&site), [(1, samples.len() as i64)].into());
        assert_eq!(
            site.count("SELECT count(*) FROM deliveries WHERE record_key IS NOT NULL AND produced_at IS NOT NULL"),
            samples.len() as i64
        );
        let prom = fs::read_to_string(&metrics).unwrap();
        let want = format!(
            "edi_inbox_consume_position{{group=\"{}\",topic=\"{}\",partition=\"0\"}} {}\n",
            kafka.group,
            kafka.topic,
            samples.len()
        );
        assert!(prom.contains(&want), "{want} in {prom}");
        assert!(prom.contains("edi_inbox_consume_run_skipped 0\n"), "{prom}");
        assert!(
            prom.contains("edi_inbox_consume_run_offset_commit_failures 0\n"),
            "{prom}"
        );
        // The lag: the last fetch's high watermark minus the position.
        let lag = format!(
            "edi_inbox_consume_lag{{group=\"{}\",topic=\"{}\",partition=\"0\"}} 0\n",
            kafka.group, kafka.topic
        );
        assert!(prom.contains(&lag), "{lag} in {prom}");
        // A run that decides nothing still writes the position and the lag of each partition
        // it holds (issue 36, item 7: such a run sometimes wrote neither).
        let idle = site.path("idle.prom");
        let lines = consume(
            &site,
            "3s",
            &["--from", &kafka.group_url(), "--metrics-file", idle.to_str().unwrap()],
        )
        .code(0)
        .json();
        assert_eq!(lines.last().unwrap()["summary"]["deliveries"], 0);
        let prom = fs::read_to_string(&idle).unwrap();
        for family in ["position", "lag"] {
            let value = if family == "lag" { 0 } else { samples.len() };
            let want = format!(
                "edi_inbox_consume_{family}{{group=\"{}\",topic=\"{}\",partition=\"0\"}} {value}\n",
                kafka.group, kafka.topic
            );
            assert!(
                prom.contains(&want),
                "a run that decided nothing must still write {want} in {prom}"
            );
        }
    }
}

/// Partitions given by hand are said as such, with the group however it was given (`--group`
/// here, not `?group=`); a partition the topic lacks is refused at the start, named with the
/// partitions the topic has, before anything is decided (issue 36, item 7: `&partitions=0,7`
/// on a one-partition topic was taken without a word).
#[test]
fn partitions_given_by_hand_are_said_and_one_the_topic_lacks_is_refused() {
    let Some(kafka) = Kafka::create() else { return };
    kafka.send(&puts(&crate::consume::synthetic(3, 36), "k"));
    let site = Site::new();
    let url = format!("kafka://{}/{}?partitions=0", kafka.servers, kafka.topic);
    let run = consume(&site, "2s", &["--from", &url, "--group", &kafka.group]);
    run.code(0);
    let stderr = run.err();
    let want = format!(
        "kafka://{}/{} (group {}): partitions given (by hand): {}/0",
        kafka.servers, kafka.topic, kafka.group, kafka.topic
    );
    assert!(stderr.contains(&want), "wanted {want:?} in {stderr}");
    assert_eq!(decided_per_record(&site), [(1, 3)].into());

    let other = Site::new();
    let url = format!("{}&partitions=0,7", kafka.group_url());
    let run = consume(&other, "2s", &["--from", &url]);
    run.code(1);
    let stderr = run.err();
    let want = format!(
        "the topic {} has no partition 7 (it has 1 partition: 0)",
        kafka.topic
    );
    assert!(stderr.contains(&want), "wanted {want:?} in {stderr}");
    assert!(
        decided_per_record(&other).is_empty(),
        "nothing may be decided from a refused assignment"
    );
}

/// A run with its partitions given by hand commits its offsets as no member of the group,
/// which Kafka refuses while the group has a member (one still running, or one that died and
/// is not yet evicted): the run decides its records at the inbox's positions all the same and
/// says, once, why the group's offsets stay behind (issue 36, item 9: the refusal went
/// unsaid; the test broker answers the commits after each batch only once the run ends, so the
/// last commit, which the run waits for, is where it is seen).
#[test]
fn a_by_hand_run_says_why_kafka_refused_its_offsets() {
    let Some(kafka) = Kafka::create() else { return };
    kafka.send(&puts(&crate::consume::synthetic(6, 9), "k"));
    let member = kafka.member();
    let site = Site::new();
    let run = consume(
        &site,
        "3s",
        &["--from", &kafka.by_hand_url(), "--batch", "2"],
    );
    run.code(0);
    assert_eq!(decided_per_record(&site), [(1, 6)].into(), "{run}");
    let stderr = run.err();
    let said = format!(
        "Kafka refused the offsets committed for the group {}",
        kafka.group
    );
    assert_eq!(
        stderr.matches(&said).count(),
        1,
        "wanted {said:?} once in {stderr}"
    );
    assert!(
        stderr.contains("the group has members this consumer is not one of"),
        "the refusal's reason is not said: {stderr}"
    );
    assert_eq!(
        kafka.committed(),
        Some(vec![0]),
        "Kafka took the offsets of no member while the group had one"
    );
    // The member leaves: the group is empty, and the next by-hand run's offsets are taken,
    // nothing said.
    drop(member);
    kafka.send(&puts(&crate::consume::synthetic(2, 10), "m"));
    let again = consume(&site, "3s", &["--from", &kafka.by_hand_url()]);
    again.code(0);
    assert!(!again.err().contains(&said), "{again}");
    assert_eq!(decided_per_record(&site), [(1, 8)].into(), "{again}");
    assert_eq!(kafka.committed(), Some(vec![8]), "{again}");
}

/// The partitions a consumer said it was given (`partitions given: T/0 T/2`), in all.
fn partitions_given(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.split_once("partitions given: ").map(|(_, list)| list))
        .flat_map(|list| list.split_whitespace().map(str::to_string))
        .collect()
}

/// Each of `bodies` as a record keyed `{prefix}{k}`.
fn puts(bodies: &[Vec<u8>], prefix: &str) -> Vec<Put> {
    bodies
        .iter()
        .enumerate()
        .map(|(k, b)| Put::new(b, format!("{prefix}{k}")))
        .collect()
}

/// The topic id the inbox keeps with each of `group`'s positions.
fn topic_ids(site: &Site, group: &str) -> Vec<Option<String>> {
    site.rows(&format!(
        "SELECT topic_id FROM consumer_positions WHERE consumer_group = '{group}'"
    ))
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

per_backend! {
    /// Issue 36, items 1 and 2: the topic deleted under a running consumer, created again and
    /// given new records, whose offsets are below the old topic's position. They are decided
    /// (not skipped as decided before, the run saying "0 deliveries"), the consumer says the
    /// topic was created again, and the position is the new topic's, under its topic id. Where
    /// the broker answers as Kafka does the running consumer notices and goes on; the test
    /// broker answers a fetch of the deleted topic with a zero topic id and a CurrentLeader,
    /// and librdkafka 2.12.1 dies of it (SIGSEGV, see docs/brokers.md): that end, and only
    /// that one, is taken, and the run that takes its place (as systemd restarts it) decides.
    fn a_topic_deleted_and_created_again_is_decided_from_its_beginning(site) {
        let Some(kafka) = Kafka::create() else { return };
        kafka.send(&puts(&synthetic(5, 361), "old"));
        consume(&site, "3s", &["--from", &kafka.by_hand_url()]).code(0);
        let topic = format!("{}/0", kafka.topic);
        assert_eq!(positions(&site, &kafka.group), [(topic.clone(), 5)].into());
        // Every column: the topic id is the last (read so, this test says what went wrong on a
        // schema without it too).
        let before = site.rows("SELECT * FROM consumer_positions");
        let out = site.path("running.jsonl");
        let mut running = Consumer::start(&site, &["--from", &kafka.by_hand_url()], &out);
        assert!(
            within(|| running.stderr().contains("partitions given")),
            "the consumer did not start: {}",
            running.stderr()
        );
        kafka.recreate();
        kafka.send(&puts(&synthetic(3, 362), "new"));
        assert!(
            within(|| interchanges(&site) == 8 || running.ended().is_some()),
            "the running consumer neither decided the new topic's records nor ended: {}",
            running.stderr()
        );
        let said = match running.ended() {
            Some(status) => {
                use std::os::unix::process::ExitStatusExt as _;
                assert_eq!(
                    status.signal(),
                    Some(libc::SIGSEGV),
                    "the consumer ended otherwise than by the test broker's known fault: {status:?}: {}",
                    running.stderr()
                );
                eprintln!(
                    "note: librdkafka died of the test broker's answer for the deleted topic (SIGSEGV); the next run decides"
                );
                let run = consume(&site, "3s", &["--from", &kafka.by_hand_url()]);
                run.code(0);
                run.err()
            }
            None => {
                assert!(within(|| interchanges(&site) == 8));
                running.signal(libc::SIGTERM);
                let run = running.wait();
                run.code(0);
                run.err()
            }
        };
        assert_eq!(
            interchanges(&site),
            8,
            "the new topic's records not decided: {said}"
        );
        assert!(said.contains("was deleted"), "not said: {said}");
        assert_eq!(positions(&site, &kafka.group), [(topic, 3)].into());
        let old_id = before[0].last().cloned().flatten();
        let new_id = topic_ids(&site, &kafka.group);
        assert!(
            old_id.is_some() && new_id[0].is_some() && new_id[0] != old_id,
            "the topic ids kept: {old_id:?}, then {new_id:?}"
        );
        // The new topic's records are named as the old one's were (kafka:TOPIC/0/0 ...): each
        // record of either topic has its delivery, none decided twice.
        assert_eq!(site.count("SELECT count(*) FROM deliveries"), 8);
    }
}

per_backend! {
    /// Issue 36, item 2: a stored position past the partition's end (a topic emptied, or
    /// created again where the brokers keep no topic ids) is said, not taken for "nothing to
    /// do": with --on-position-lost fail (the default) the run ends with exit 1 naming the
    /// position and the log, decides nothing, and its metrics show the position lost and the
    /// lag below zero (never 0); with earliest the records are decided from the log's start,
    /// each interchange once, and the position is the log's end again.
    fn a_position_past_the_partitions_end_is_said_and_kept_to_its_rule(site) {
        let Some(kafka) = Kafka::create() else { return };
        kafka.send(&puts(&synthetic(4, 363), "k"));
        consume(&site, "3s", &["--from", &kafka.by_hand_url()]).code(0);
        assert_eq!(interchanges(&site), 4);
        site.sql(&format!(
            "UPDATE consumer_positions SET next_offset = 1004 WHERE consumer_group = '{}'",
            kafka.group
        ));
        let metrics = site.path("consume.prom");
        let m = metrics.to_str().unwrap();
        let run = consume(&site, "3s", &["--from", &kafka.by_hand_url(), "--metrics-file", m]);
        run.code(1);
        let err = run.err();
        assert!(
            err.contains(&format!("kafka:{}/0: the inbox's position 1004 is not in the partition's log", kafka.topic))
                && err.contains("--on-position-lost"),
            "{err}"
        );
        let prom = fs::read_to_string(&metrics).unwrap();
        assert!(prom.contains("edi_inbox_consume_run_positions_lost 1\n"), "{prom}");
        let lag = format!(
            "edi_inbox_consume_lag{{group=\"{}\",topic=\"{}\",partition=\"0\"}} -1000\n",
            kafka.group, kafka.topic
        );
        assert!(prom.contains(&lag), "{lag} in {prom}");
        assert_eq!(site.count("SELECT count(*) FROM deliveries"), 4, "decided something");
        let run = consume(
            &site,
            "3s",
            &["--from", &kafka.by_hand_url(), "--on-position-lost", "earliest"],
        );
        run.code(0);
        assert!(run.err().contains("decided from the log's start"), "{}", run.err());
        let lines = run.json();
        assert_eq!(crate::consume::statuses(&lines), ["duplicate"; 4]);
        assert_eq!(interchanges(&site), 4);
        assert_eq!(
            positions(&site, &kafka.group),
            [(format!("{}/0", kafka.topic), 4)].into()
        );
    }
}

per_backend! {
    /// Issue 36, item 3: a `--dead-letter kafka://` that fails. For Kafka the inbox's position
    /// is the acknowledgement, so the dead letters go out before the commit: where they cannot
    /// (a broker that refuses the connection, known at once, not after librdkafka's 30 s),
    /// nothing of the batch is committed and no position moves, and the run says so (it said
    /// the broker would deliver them again while the positions had moved past them, and the
    /// dead letters were lost for good). The next run, its dead-letter broker back, takes the
    /// records again: the poison one dead-lettered once, the position past all of them.
    fn a_dead_letter_that_fails_leaves_its_records_to_the_next_run(site) {
        let Some(kafka) = Kafka::create() else { return };
        let Some(dead) = Kafka::create() else { return };
        let poison = fs::read(crate::common::samples().join("broken/unz-count-wrong.edi")).unwrap();
        let good = synthetic(2, 364);
        kafka.send(&[
            Put::new(&good[0], "a".to_string()),
            Put::new(&poison, "b".to_string()).named("unz-count-wrong.edi".to_string()),
            Put::new(&good[1], "c".to_string()),
        ]);
        let refused = format!(
            "kafka://127.0.0.1:{}/edi-dead-letters",
            crate::common::free_port()
        );
        let started = std::time::Instant::now();
        let run = consume(
            &site,
            "3s",
            &["--from", &kafka.by_hand_url(), "--dead-letter", &refused],
        );
        let took = started.elapsed();
        run.code(1);
        let err = run.err();
        assert!(
            err.contains("nothing of the batch was committed and no position moved")
                && !err.contains("delivers them again"),
            "{err}"
        );
        // A bound on the wait, not a speed: librdkafka alone would have waited 30 s for the
        // metadata, and the run as long again for the group.
        assert!(took < Duration::from_secs(25), "the refused broker was waited on for {took:?}");
        assert!(positions(&site, &kafka.group).is_empty(), "a position moved");
        assert_eq!(site.count("SELECT count(*) FROM deliveries"), 0);
        let run = consume(
            &site,
            "3s",
            &["--from", &kafka.by_hand_url(), "--dead-letter", &dead.to()],
        );
        run.code(3);
        assert_eq!(
            positions(&site, &kafka.group),
            [(format!("{}/0", kafka.topic), 3)].into()
        );
        let held = dead.records();
        assert_eq!(held.len(), 1, "the dead letters: one, the poison record");
        assert_eq!(held[0].body, poison);
        assert!(
            held[0].headers.get("edi-inbox-reason").is_some_and(|r| !r.is_empty()),
            "{:?}",
            held[0].headers
        );
    }
}

per_backend! {
    /// A group's consumers killed with SIGKILL at random moments (each kill in the middle of the
    /// work), over three partitions, then a run to the end (taking the partitions by hand: the
    /// test broker may never evict a killed member): each interchange applied once, **no record
    /// decided twice** (each record's delivery recorded once: the positions moved with the
    /// decisions), and every position at the end of its partition.
    fn after_kills_no_record_is_decided_twice(site) {
        let Some(kafka) = spread_over_three(1200, 21) else { return };
        let group = kafka.group_url();
        let mut rng = Synth::new(5);
        let mut killed_mid_work = 0;
        // Each kill falls within the first quarter of what is left, counted in interchanges the
        // inbox holds (read straight from its database every few milliseconds): so it lands
        // mid-work however fast the machine is. A random sleep let a fast run finish before
        // the kill, and the consumer's output lines, written after each commit, came too late
        // to count by.
        let mut decided = 0;
        for round in 0..4 {
            let out = site.path(&format!("run{round}.jsonl"));
            // Every other run by hand, under the group's positions: the group may still count
            // a member killed before.
            let from = if round % 2 == 0 { group.clone() } else { kafka.by_hand_url() };
            let mut child = Consumer::start(&site, &["--from", &from, "--batch", "50"], &out);
            let target = decided + 1 + rng.below((1200 - decided) as u64 / 4) as i64;
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while decided_now(&site) < target && child.ended().is_none() {
                assert!(
                    std::time::Instant::now() < until,
                    "round {round}: the consumer did not reach {target} interchanges: {}",
                    child.stderr()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            // Then at a random moment of the next batch.
            std::thread::sleep(Duration::from_millis(rng.below(20)));
            // In the middle of the work: the child still running, records still undecided.
            let mid_work = child.ended().is_none() && decided_now(&site) < 1200;
            child.kill();
            killed_mid_work += usize::from(mid_work);
            decided = decided_now(&site);
        }
        assert!(
            killed_mid_work >= 3,
            "only {killed_mid_work} of 4 kills fell in the middle of the work"
        );
        let lines = consume(&site, "3s", &["--from", &kafka.by_hand_url()]).code(0).json();
        let summary = &lines.last().unwrap()["summary"];
        assert_eq!(summary["duplicate"], 0, "nothing decided again: {summary}");
        let (keys, rows) = applied(&site);
        assert_eq!((keys.len(), rows), (1200, 1200));
        assert_eq!(decided_per_record(&site), [(1, 1200)].into(), "each record decided once");
        let per_partition: Vec<i64> = (0..3).map(|p| (1200 + 2 - p) / 3).collect();
        let want: BTreeMap<String, i64> = (0..3)
            .map(|p| (format!("{}/{p}", kafka.topic), per_partition[p as usize]))
            .collect();
        assert_eq!(positions(&site, &kafka.group), want);
    }
}

/// How many interchanges the site's inbox holds, read from its database directly (a `stats`
/// run per look would take longer than a batch); 0 before it exists.
fn decided_now(site: &Site) -> i64 {
    #[cfg(feature = "postgres")]
    if let Some(pg) = site.pg() {
        let mut c = pg.client();
        return c
            .query_one("SELECT count(*) FROM interchanges", &[])
            .map_or(0, |r| r.get(0));
    }
    let Ok(conn) = rusqlite::Connection::open_with_flags(
        site.db(),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) else {
        return 0;
    };
    conn.query_row("SELECT count(*) FROM interchanges", [], |r| r.get(0))
        .unwrap_or(0)
}

/// A batch that waits on the inbox (locked by another process) longer than the consumer's
/// `max.poll.interval.ms` (7 s here): the consumer pauses its partitions and goes on polling,
/// so that it stays in its group. Without that, librdkafka would leave the group after 7 s,
/// and the partitions would be taken away and given again. Once the inbox is free, every
/// record is decided once.
#[test]
fn a_batch_waiting_on_a_locked_inbox_keeps_the_consumer_in_its_group() {
    let Some(kafka) = Kafka::create() else { return };
    let site = Site::new();
    let records: Vec<Put> = synthetic(40, 31)
        .iter()
        .enumerate()
        .map(|(k, b)| Put::new(b, format!("k{k}")))
        .collect();
    kafka.send(&records[..20]);
    let out = site.path("consumer.jsonl");
    let env = [("EDI_INBOX_KAFKA_MAX_POLL_INTERVAL_MS", "7000")];
    let child = Consumer::start_with(
        &site,
        &["--from", &kafka.group_url(), "--batch", "5"],
        &out,
        &env,
    );
    assert!(
        within(|| child.lines() >= 20),
        "the first records were not decided: {}",
        child.stderr()
    );
    let lock = rusqlite::Connection::open(site.db()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    kafka.send(&records[20..]);
    // Twice the poll interval, the next batch waiting on the lock all the while.
    std::thread::sleep(Duration::from_secs(14));
    let said = child.stderr();
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert!(
        said.contains("the partitions are paused while a batch waits on it"),
        "the consumer did not say it held its partitions: {said}"
    );
    assert!(
        within(|| child.lines() >= 40),
        "the records after the lock were not decided: {}",
        child.stderr()
    );
    child.signal(libc::SIGTERM);
    let run = child.wait();
    let err = run.err();
    run.code(0);
    assert_eq!(
        err.matches("partitions given").count(),
        1,
        "the consumer left its group and joined again: {err}"
    );
    assert!(!err.contains("partitions taken away"), "{err}");
    assert_eq!(decided_per_record(&site), [(1, 40)].into());
}

/// Once every record is decided, the lag the metrics show (the high watermark of the last fetch
/// minus the inbox's position; ListOffsets, which the test broker answers wrongly, is not asked)
/// is 0 in each partition.
#[test]
fn the_lag_is_zero_once_every_record_is_decided() {
    let Some(kafka) = spread_over_three(30, 24) else {
        return;
    };
    let site = Site::new();
    let metrics = site.path("consume.prom");
    consume(
        &site,
        "2s",
        &[
            "--from",
            &kafka.by_hand_url(),
            "--metrics-file",
            metrics.to_str().unwrap(),
        ],
    )
    .code(0);
    let prom = fs::read_to_string(&metrics).unwrap();
    for p in 0..3 {
        let want = format!(
            "edi_inbox_consume_lag{{group=\"{}\",topic=\"{}\",partition=\"{p}\"}} 0\n",
            kafka.group, kafka.topic
        );
        assert!(prom.contains(&want), "{want} in {prom}");
    }
}

/// Three consumers of one group (as three hosts) on one PostgreSQL inbox, over three
/// partitions: two start, a third joins late (a rebalance: partitions taken away from the
/// first two and given to it), one of the first is killed with SIGKILL; what is left is
/// taken by hand (the test broker may never evict the killed member). Each interchange applied
/// once, no record decided twice, nothing left behind.
#[cfg(feature = "postgres")]
#[test]
fn three_consumers_of_a_group_rebalance_and_decide_each_record_once() {
    three_consumers_of_a_group("range,roundrobin");
}

/// The same with the cooperative rebalance protocol (`cooperative-sticky`): partitions are given
/// and taken away one by one (incremental assignment), not all at once.
#[cfg(feature = "postgres")]
#[test]
fn three_cooperative_consumers_of_a_group_rebalance_and_decide_each_record_once() {
    three_consumers_of_a_group("cooperative-sticky");
}

#[cfg(feature = "postgres")]
fn three_consumers_of_a_group(strategy: &str) {
    let Some(site) = Site::postgres() else { return };
    // Work in small batches, and a second wave of it before the kill below.
    const N: i64 = 3000;
    const MORE: i64 = 1500;
    let Some(kafka) = spread_over_three(N as usize, 22) else {
        return;
    };
    let from = kafka.group_url();
    let args = ["--from", from.as_str(), "--batch", "10"];
    let outs: Vec<_> = (0..3)
        .map(|k| site.path(&format!("host{k}.jsonl")))
        .collect();
    let env = [("EDI_INBOX_KAFKA_PARTITION_ASSIGNMENT_STRATEGY", strategy)];
    let first = Consumer::start_with(&site, &args, &outs[0], &env);
    let second = Consumer::start_with(&site, &args, &outs[1], &env);
    assert!(
        within(|| first.lines() + second.lines() > 100),
        "the first two did not start: {} {}",
        first.stderr(),
        second.stderr()
    );
    // What the first two were given before the third came (each was given something).
    assert!(
        within(|| first.stderr().contains("partitions given")
            && second.stderr().contains("partitions given")),
        "the first two were not both given partitions: {} {}",
        first.stderr(),
        second.stderr()
    );
    let given_before: BTreeSet<String> = [first.stderr(), second.stderr()]
        .iter()
        .flat_map(|e| partitions_given(e))
        .collect();
    let third = Consumer::start_with(&site, &args, &outs[2], &env);
    // The late one is given partitions, taken from the others.
    assert!(
        within(|| third.stderr().contains("partitions given")),
        "the late consumer was given nothing: {}",
        third.stderr()
    );
    // A rebalance moves partitions: one of the first two says it had some taken away, at its
    // next fetch after the batch it is deciding (waited for, so that the kill below does not
    // come first). The one exception is the test broker's known fault: tansu 0.6.0 may leave a
    // partition unassigned in the cooperative protocol's first round (seen twice in CI), and
    // the late consumer is then given that one, nothing moving; it is taken only where the
    // first two were indeed given fewer than the three partitions.
    let cooperative_fault = strategy == "cooperative-sticky" && given_before.len() < 3;
    let taken_away = || {
        [first.stderr(), second.stderr()]
            .iter()
            .any(|e| e.contains("partitions taken away"))
    };
    assert!(
        within(taken_away) || cooperative_fault,
        "no partition moved when the third consumer came (the first two had {given_before:?}): {} {}",
        first.stderr(),
        second.stderr()
    );
    // More records, so that the kill below comes with work left whatever the rebalance took
    // (on a loaded machine the first wave was all decided by then).
    kafka.send(
        &synthetic(MORE as usize, 23)
            .iter()
            .enumerate()
            .map(|(k, b)| Put::new(b, format!("m{k}")))
            .collect::<Vec<_>>(),
    );
    let first_said = first.stderr();
    // Killed in the middle of the work: alive, with records still undecided.
    let mut first = first;
    assert!(
        first.ended().is_none(),
        "the first consumer ended before its kill: {first_said}"
    );
    assert!(
        interchanges(&site) < N + MORE,
        "the work was done before the kill"
    );
    first.kill();
    std::thread::sleep(Duration::from_secs(2));
    second.signal(libc::SIGTERM);
    third.signal(libc::SIGTERM);
    let (second, third) = (second.wait(), third.wait());
    second.code(0);
    third.code(0);
    let moved = [first_said.clone(), second.err(), third.err()]
        .iter()
        .any(|e| e.contains("partitions taken away"));
    assert!(
        moved || cooperative_fault,
        "no partitions moved: {first_said} {} {}",
        second.err(),
        third.err()
    );
    let lines = consume(&site, "3s", &["--from", &kafka.by_hand_url()])
        .code(0)
        .json();
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["duplicate"], 0, "{summary}");
    let (keys, rows) = applied(&site);
    assert_eq!((keys.len() as i64, rows), (N + MORE, N + MORE));
    assert_eq!(decided_per_record(&site), [(1, N + MORE)].into());
}

/// `publish --to kafka://`: every event once, in order, each a record with its CloudEvents
/// attributes as `ce_` headers and `content-type`, keyed by its sender and recipient; a second
/// run publishes nothing.
#[test]
fn publish_sends_each_event_with_ce_headers_keyed_by_partner() {
    let Some(kafka) = Kafka::create() else { return };
    let site = Site::new();
    samples_ingested(&site);
    let lines = publish(&site, &["--to", &kafka.to(), "--json"])
        .code(0)
        .json();
    assert_eq!(lines.last().unwrap()["summary"]["published"], 10);
    let held = kafka.records();
    assert_eq!(held.len(), 10);
    assert_eq!(order_held(&held, "ce_"), expected_order(&site));
    for h in &held {
        assert_eq!(h.headers["content-type"], "application/EDIFACT");
        assert_eq!(h.headers["ce_specversion"], "1.0");
        assert_eq!(
            h.headers["key"],
            format!(
                "{}/{}",
                h.headers["ce_edisender"], h.headers["ce_edirecipient"]
            )
        );
    }
    let ids: BTreeSet<_> = held.iter().map(|h| h.headers["ce_id"].clone()).collect();
    assert_eq!(ids.len(), 10, "one id per event");
    let lines = publish(&site, &["--to", &kafka.to(), "--json"])
        .code(0)
        .json();
    assert_eq!(lines.last().unwrap()["summary"]["published"], 0);
    assert_eq!(kafka.records().len(), 10, "nothing sent twice");
}

/// The topic is a template like `--subject`: each event goes to its type's topic (made by the
/// broker on the first record, as `auto.create.topics.enable` does; removed at the end).
#[test]
fn publish_renders_the_topic_template_per_event() {
    let Some(kafka) = Kafka::create() else { return };
    let site = Site::new();
    samples_ingested(&site);
    let to = format!("kafka://{}/{}.{{type}}", kafka.servers, kafka.topic);
    publish(&site, &["--to", &to, "--json"]).code(0);
    let types: Vec<String> = site
        .rows("SELECT DISTINCT message_type FROM messages ORDER BY 1")
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    assert!(types.len() > 1, "{types:?}");
    let mut all = 0;
    for t in &types {
        let topic = format!("{}.{t}", kafka.topic);
        let held = kafka.records_of(&topic);
        kafka.delete(&topic);
        assert!(!held.is_empty(), "nothing in {topic}");
        assert!(
            held.iter().all(|h| h.headers["ce_edimessagetype"] == *t),
            "{topic}"
        );
        all += held.len();
    }
    assert_eq!(all, 10, "every event in its type's topic");
}

/// A setting librdkafka does not know (in `--kafka-config`) is a usage error (exit 2) that names
/// it and never a secret's value. (A record too large for the producer's `message.max.bytes`,
/// parked after `--max-attempts`, is the refusal contract of `sinks.rs`, `::kafka`.)
#[test]
fn a_setting_librdkafka_does_not_know_is_refused_without_its_secrets() {
    let Some(kafka) = Kafka::create() else { return };
    let site = Site::new();
    samples_ingested(&site);
    let config = site.path("kafka.conf");
    fs::write(&config, "sasl.password=s3cret\nno.such.setting=1\n").unwrap();
    let run = site
        .cmd()
        .args(["publish", "--to", &kafka.to(), "--kafka-config"])
        .arg(&config)
        .run();
    let stderr = run.err();
    run.code(2);
    assert!(
        stderr.contains("no.such.setting") && !stderr.contains("s3cret"),
        "{stderr}"
    );
    assert_eq!(site.unpublished(), 10, "nothing marked");
}
