//! The contracts every destination of `publish` keeps, each one body run per destination
//! (`per_destination!`, over [`TestDestination`](crate::common::sinks::TestDestination)): the
//! folder, JetStream, RabbitMQ, Kafka (a topic of three partitions) and SQS (a FIFO queue, and a
//! standard one, which keeps no order and drops no copy). Each
//! event goes out once and in order per partner (in the order written where the destination
//! keeps one order); `kill -9` of `publish` at random moments, then a run to the end, loses
//! nothing and doubles nothing where the destination drops what is sent again; what was
//! published whole, taken into a second inbox (consumed, or the folder ingested), holds the same
//! keys and hashes; an event the destination refuses is parked after `--max-attempts` while the
//! others go out. What is one destination's own (its attributes, subjects, a missing stream) is
//! in `publish.rs`, `kafka.rs` and `sqs.rs`.

use std::time::{Duration, Instant};

use crate::common::StartExt;
use crate::common::sinks::{Copies, Event, assert_held, events, publish_to};
use crate::common::site::Site;
use crate::common::synth::Synth;
use crate::publish::samples_ingested;

/// `n` interchanges of four partners (`P0/HUB` to `P3/HUB`), one to three messages each, in
/// layouts at random (UNA, CRLF, a group), ingested: their events interleave between partners.
fn of_four_partners(site: &Site, n: usize, seed: u64) {
    let mut g = Synth::new(seed);
    for k in 0..n {
        let layout = g.layout();
        let body = g.interchange(
            &format!("P{}", k % 4),
            "HUB",
            &format!("C{seed}N{k:05}"),
            1 + k % 3,
            layout,
        );
        site.put(&format!("f{k:05}.edi"), &body);
    }
    site.ingest_quietly(&[]).code(0);
}

/// The statuses of the lines that have one, in order.
fn statuses(lines: &[serde_json::Value]) -> Vec<&str> {
    lines.iter().filter_map(|l| l["status"].as_str()).collect()
}

per_destination! {
    /// Every event of the samples and of interchanges of four partners (their events
    /// interleaved), published in batches of 7 (so that one partner's events span batches, and
    /// on Kafka two batches are with the producer at once): each reported published, in the order written,
    /// under its id; the destination holds each once, under its id, its body its message, in
    /// the order the destination keeps; a second run has nothing to send.
    per_backend fn every_event_goes_out_once_in_order_per_partner(site, D) {
        let Some(destination) = D::destination() else { return };
        samples_ingested(&site);
        of_four_partners(&site, D::many(60), 51);
        let events = events(&site);
        let lines = publish_to(&site, &destination, &["--json", "--batch", "7"]).code(0).json();
        let (reported, summary) = lines.split_at(lines.len() - 1);
        assert!(statuses(reported).iter().all(|s| *s == "published"), "{reported:?}");
        let ids: Vec<&str> = reported.iter().map(|l| l["id"].as_str().unwrap_or_default()).collect();
        let wanted: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, wanted, "each event reported once, in the order written, under its id");
        assert_eq!(summary[0]["summary"]["published"], events.len());
        let again = publish_to(&site, &destination, &["--json"]).code(0).json();
        assert_eq!(again.len(), 1, "nothing left to send: {again:?}");
        assert_eq!(site.unpublished(), 0);
        assert_held(&events, &destination.taken(), Copies::Once, D::ORDER);
    }
}

per_destination! {
    /// `publish` killed with SIGKILL at random moments (batches of 3, so that it dies between a
    /// delivery and its mark too), then run to the end: every event there (each kill falls once
    /// the run has published something; at least two of the six must land mid-work: the run
    /// ended by the signal, events left), once where the destination drops what is sent again
    /// and else at least once under its one id, the first copies in the order it keeps.
    per_backend fn killed_at_random_then_run_to_the_end_loses_nothing(site, D) {
        let Some(destination) = D::destination() else { return };
        of_four_partners(&site, D::many(450), 52);
        let events = events(&site);
        let n = events.len() as i64;
        assert!(n > 60, "{n} events");
        let mut rng = Synth::new(53);
        let mut mid_work = 0;
        let mut kills = 0;
        for _ in 0..6 {
            let before = site.unpublished();
            if before == 0 {
                break;
            }
            let mut child = site
                .command()
                .args(["publish", "-q", "--batch", "3"])
                .args(destination.publish_args())
                .envs(destination.publish_env())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .start();
            // Once it has published something (a fixed sleep can fall before its first batch on
            // a loaded machine, or after its last on a fast one), then at a random moment.
            let started = Instant::now();
            while site.unpublished() == before
                && child.child().try_wait().ok().flatten().is_none()
                && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(rng.below(60)));
            child.signal(libc::SIGKILL);
            let run = child.wait();
            let killed =
                std::os::unix::process::ExitStatusExt::signal(&run.status) == Some(libc::SIGKILL);
            let left = site.unpublished();
            eprintln!("killed: {killed}, {left} of {n} events left");
            kills += 1;
            mid_work += usize::from(killed && left > 0 && left < n);
        }
        assert!(
            mid_work >= 2,
            "the kills must fall in the middle of the work: {mid_work} of {kills} did"
        );
        publish_to(&site, &destination, &["-q"]).code(0);
        assert_eq!(site.unpublished(), 0);
        let copies = if D::DUPLICATES { Copies::AtLeastOnce } else { Copies::Once };
        assert_held(&events, &destination.taken(), copies, D::ORDER);
    }
}

per_destination! {
    /// End to end: the samples ingested into one inbox, published whole (`--payload
    /// interchange`), and taken into a second inbox as the destination's operators would
    /// (consumed, or the folder ingested), each answered by a CONTRL: the second inbox holds the
    /// same keys (0004/0010/0020) with the same SHA-256 hashes, and as many messages.
    fn published_whole_and_taken_into_a_second_inbox_are_the_same(site, D) {
        let Some(destination) = D::destination() else { return };
        samples_ingested(&site);
        publish_to(&site, &destination, &["--payload", "interchange"]).code(0);
        let second = Site::new();
        let lines = destination.take_into(&second, &["--contrl", "always"]).code(0).json();
        assert_eq!(lines.last().unwrap()["summary"]["new"], 7, "{lines:?}");
        assert_eq!(lines.iter().filter(|l| l["contrl"].is_string()).count(), 7, "{lines:?}");
        assert_eq!(second.count("SELECT count(*) FROM acknowledgements"), 7);
        let keys = "SELECT sender || '/' || recipient, control_ref, sha256 FROM interchanges";
        assert_eq!(site.triples(keys), second.triples(keys));
        assert_eq!(site.stats()["messages"], second.stats()["messages"]);
    }
}

per_destination! {
    /// An event the destination refuses for itself (a 300 KB message, written first, and made
    /// refused as each destination can: see `refusing`) is reported, exit 3, and does not hold
    /// back the events behind it, which go out once each; tried again on the next run, it is
    /// parked after `--max-attempts` (2), shown by `list --status failed` and `stats`, no longer
    /// tried, and never held by the destination.
    per_backend fn a_refused_event_is_parked_after_max_attempts(site, D) {
        let huge = "A".repeat(300_000);
        site.put(
            "a-huge.edi",
            format!("UNB+UNOC:3+POISON+R+240101:1200+P1'UNH+1+ORDERS:D:96A:UN'FTX+AAI+++{huge}'UNT+3+1'UNZ+1+P1'")
                .as_bytes(),
        );
        samples_ingested(&site);
        let (poison, others): (Vec<Event>, Vec<Event>) =
            events(&site).into_iter().partition(|e| e.sender == "POISON");
        let [poison] = &poison[..] else { panic!("one poison event: {poison:?}") };
        assert_eq!(others.len(), 10);
        let Some(destination) = D::refusing(poison, &others) else { return };
        let args = ["--json", "--max-attempts", "2", "--retry-after", "0s"];
        let lines = publish_to(&site, &destination, &args).code(3).json();
        let (failed, went): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = lines
            [..lines.len() - 1]
            .iter()
            .partition(|l| l["status"] == "failed");
        assert_eq!(failed.len(), 1, "{lines:?}");
        assert_eq!(failed[0]["id"], poison.id.as_str());
        assert_eq!(failed[0]["sender"], "POISON");
        let error = failed[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(D::REFUSAL), "{error}");
        assert!(went.iter().all(|l| l["status"] == "published"), "{lines:?}");
        assert_eq!(went.len(), 10, "the others went out: {lines:?}");
        let lines = publish_to(&site, &destination, &args).code(3).json();
        assert_eq!(statuses(&lines[..lines.len() - 1]), ["parked"], "{lines:?}");
        assert_eq!(lines[0]["id"], poison.id.as_str());
        let lines = publish_to(&site, &destination, &args).code(0).json();
        assert_eq!(lines.len(), 1, "parked: no longer tried: {lines:?}");
        let listed = site.list(&["--status", "failed"]);
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["sender"], "POISON");
        assert_eq!(listed[0]["errors"], 2);
        let error = listed[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains("not published") && error.contains(D::REFUSAL), "{error}");
        let stats = site.stats();
        assert_eq!(stats["outbox_failed"], 1);
        assert_eq!(stats["outbox_unpublished"], 0);
        let held = destination.taken();
        assert!(
            held.iter().all(|g| g.body.len() < huge.len()),
            "the destination holds the refused event"
        );
        // What the folder was given to refuse it by stands under its name, untouched.
        let held: Vec<_> = held.into_iter().filter(|g| g.id != poison.id).collect();
        assert_held(&others, &held, Copies::Once, D::ORDER);
    }
}
