//! `publish`: the outbox delivered to a folder, NATS JetStream and RabbitMQ, on both inbox
//! backends, against the machine's real brokers: what is each destination's own (its
//! CloudEvents attributes, subjects and ids; a republish after lost marks; `mandatory`; a missing
//! stream; a folder others may write to, links planted in it, a publisher killed mid-write);
//! one publisher at a time; `--follow` until SIGTERM, across a broker that goes away. What every
//! destination keeps (each event once and in order, kill -9 and a rerun, a refused event parked)
//! is in `sinks.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
use crate::common::brokers::Held;
#[cfg(feature = "amqp")]
use crate::common::brokers::Rabbit;
#[cfg(feature = "nats")]
use crate::common::brokers::{Jet, OwnNats};
#[cfg(feature = "nats")]
use crate::common::sinks::token;
use crate::common::site::Site;
use crate::common::synth::Synth;
use crate::common::{Run, RunExt, Running, StartExt};

/// Every valid sample in the drop folder, ingested: 7 interchanges, 10 messages.
pub(crate) fn samples_ingested(site: &Site) {
    for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
    }
    site.ingest_quietly(&[]).code(0);
}

/// `publish` with `args`: the run (with `--json`, its JSON Lines in [`Run::json`]).
pub(crate) fn publish(site: &Site, args: &[&str]) -> Run {
    site.cmd().arg("publish").args(args).run()
}

/// (sender, control reference, message reference) of every event, in the order the events
/// were written: the order they must go out in.
#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
pub(crate) fn expected_order(site: &Site) -> Vec<(String, String, String)> {
    site.rows(
        "SELECT i.sender, i.control_ref, m.reference FROM outbox o
         JOIN messages m ON m.id = o.message_id JOIN interchanges i ON i.id = m.interchange_id
         ORDER BY o.id",
    )
    .into_iter()
    .map(|r| {
        let v = |n: usize| r[n].clone().unwrap_or_default();
        (v(0), v(1), v(2))
    })
    .collect()
}

/// The same triple from what a broker holds (NATS `ce-` headers, AMQP `cloudEvents:`).
#[cfg(any(feature = "nats", feature = "amqp", feature = "kafka", feature = "sqs"))]
pub(crate) fn order_held(held: &[Held], prefix: &str) -> Vec<(String, String, String)> {
    held.iter()
        .map(|h| {
            let v = |k: &str| {
                h.headers
                    .get(&format!("{prefix}{k}"))
                    .cloned()
                    .unwrap_or_default()
            };
            (v("edisender"), v("edicontrolref"), v("edimessageref"))
        })
        .collect()
}

fn status_of(lines: &[serde_json::Value]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l["status"].as_str().map(str::to_string))
        .collect()
}

per_backend! {
    /// A parked event is retried by a command, not by SQL (issue 40, item 5): `list --status
    /// failed` names each with its outbox and id; `publish --retry-parked --kind message --id N`
    /// makes that one due again and publishes it, `--retry-parked` alone the rest; with none
    /// parked it says so and exits 3; `--id` without one outbox is a usage error.
    fn parked_events_are_retried_by_a_command(site) {
        samples_ingested(&site);
        let probe = site.path("probe");
        let sent = publish(&site, &["--json", "--to", &format!("dir:{}", probe.display())]).code(0).json();
        let names: Vec<String> = sent
            .iter()
            .filter_map(|l| l["id"].as_str().map(|id| format!("{id}.edi")))
            .collect();
        assert_eq!(names.len(), 10, "{sent:?}");
        site.sql("UPDATE outbox SET published_at = NULL");
        // A folder where every event's name is a folder already: each refused, parked at once.
        let blocked = site.path("blocked");
        for name in &names {
            fs::create_dir_all(blocked.join(name)).unwrap();
        }
        let to = format!("dir:{}", blocked.display());
        publish(&site, &["-q", "--max-attempts", "1", "--to", &to]).code(3);
        assert_eq!(site.stat("outbox_failed"), 10);
        let parked = site.json(&["list", "--status", "failed", "--json"]).success().json();
        assert_eq!(parked.len(), 10, "{parked:?}");
        assert!(parked.iter().all(|l| l["event_kind"] == "message" && l["event_id"].is_i64()), "{parked:?}");
        let human = site.cmd().args(["list", "--status", "failed"]).run().code(0).out();
        let first = parked[0]["event_id"].as_i64().unwrap();
        assert!(human.contains(&format!("message event {first}: ")), "{human}");
        for name in &names {
            fs::remove_dir(blocked.join(name)).unwrap();
        }

        // --id without one outbox: refused, nothing changed.
        let out = publish(&site, &["--to", &to, "--retry-parked", "--id", &first.to_string()]);
        out.code(2);
        assert!(out.err().contains("--kind message or --kind contrl"), "{}", out.err());
        assert_eq!(site.stat("outbox_failed"), 10);

        let id = first.to_string();
        let lines = publish(&site, &["--json", "--to", &to, "--retry-parked", "--kind", "message", "--id", &id]).code(0).json();
        assert_eq!(lines[0]["status"], "retried", "{lines:?}");
        assert_eq!(lines[0]["kind"], "message", "{lines:?}");
        assert_eq!(lines[0]["event_id"], first, "{lines:?}");
        assert_eq!(lines.last().unwrap()["summary"]["published"], 1, "{lines:?}");
        assert_eq!(site.stat("outbox_failed"), 9);

        let out = publish(&site, &["--to", &to, "--retry-parked"]);
        out.code(0);
        assert_eq!(out.out().lines().filter(|l| l.starts_with("retried  message event ")).count(), 9, "{}", out.out());
        assert_eq!((site.stat("outbox_failed"), site.stat("outbox_unpublished")), (0, 0));
        assert_eq!(fs::read_dir(&blocked).unwrap().count(), 10);

        let out = publish(&site, &["--to", &to, "--retry-parked"]);
        out.code(3);
        assert!(out.err().contains("--retry-parked: no parked event"), "{}", out.err());
    }
}

per_backend! {
    /// The folder: one file per event, named by its id, holding the message (UNH..UNT); a
    /// rerun sends nothing; events marked unpublished again (a crash between the write and
    /// the mark) find their files there and are not written twice.
    fn a_folder_gets_one_file_per_event(site) {
        samples_ingested(&site);
        let out = site.path("out");
        let to = format!("dir:{}", out.display());
        let metrics = site.path("publish.prom");
        let lines = publish(
            &site,
            &["--to", &to, "--json", "--metrics-file", metrics.to_str().unwrap()],
        ).code(0).json();
        let events = &lines[..lines.len() - 1];
        assert_eq!(events.len(), 10);
        let prom = fs::read_to_string(&metrics).unwrap();
        for want in [
            "edi_inbox_publish_events_total{outcome=\"published\"} 10\n",
            "edi_inbox_publish_last_run_events{outcome=\"published\"} 10\n",
            "edi_inbox_outbox_unpublished{kind=\"message\"} 0\n",
            "edi_inbox_outbox_unpublished{kind=\"contrl\"} 0\n",
            "edi_inbox_outbox_failed{kind=\"message\"} 0\n",
            "edi_inbox_outbox_failed{kind=\"contrl\"} 0\n",
            "edi_inbox_outbox_oldest_unpublished_age_seconds{kind=\"message\"} 0\n",
            "edi_inbox_publish_last_success_timestamp_seconds ",
        ] {
            assert!(prom.contains(want), "{want} in {prom}");
        }
        assert!(status_of(events).iter().all(|s| s == "published"), "{events:?}");
        let mut names: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut ids: Vec<String> = events
            .iter()
            .map(|l| format!("{}.edi", l["id"].as_str().unwrap()))
            .collect();
        ids.sort();
        assert_eq!(names, ids);
        for name in &names {
            let body = fs::read(out.join(name)).unwrap();
            assert!(body.starts_with(b"UNH"), "{name}: {}", String::from_utf8_lossy(&body));
            assert!(
                String::from_utf8_lossy(&body).contains("UNT"),
                "{name}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        assert_eq!(lines[10]["summary"]["published"], 10);
        assert_eq!(lines[10]["unpublished"], 0);
        let lines = publish(&site, &["--to", &to, "--json"]).code(0).json();
        assert_eq!(lines.len(), 1, "nothing left: {lines:?}");
        site.sql("UPDATE outbox SET published_at = NULL");
        let lines = publish(&site, &["--to", &to, "--json"]).code(0).json();
        assert!(status_of(&lines).iter().all(|s| s == "duplicate"), "{lines:?}");
        assert_eq!(fs::read_dir(&out).unwrap().count(), 10, "no file twice, no temporary left");
        let stats = site.json(&["stats", "--json"]).json();
        assert_eq!(stats[0]["outbox_unpublished"], 0);
        assert_eq!(stats[0]["outbox_failed"], 0);
    }
}

per_backend! {
    /// `--payload interchange`: each interchange once, whole (UNA/UNB..UNZ), its messages'
    /// events all marked; the ids differ from the messages' ones.
    fn whole_interchanges_go_out_once_each(site) {
        samples_ingested(&site);
        let out = site.path("out");
        let to = format!("dir:{}", out.display());
        let lines = publish(&site, &["--to", &to, "--json", "--payload", "interchange", "--batch", "3"]).code(0).json();
        assert_eq!(lines.len() - 1, 7, "{lines:?}");
        assert_eq!(fs::read_dir(&out).unwrap().count(), 7);
        for entry in fs::read_dir(&out).unwrap() {
            let body = fs::read(entry.unwrap().path()).unwrap();
            let text = String::from_utf8_lossy(&body);
            // Whatever the separators (one sample has its own in UNA).
            assert!(text.contains("UNB") && text.contains("UNZ"), "{text}");
        }
        assert_eq!(site.unpublished(), 0);
    }
}

per_backend! {
    /// JetStream: every event once, in the order written, with `Nats-Msg-Id` = the id, the
    /// CloudEvents attributes as `ce-` headers, the subject `PREFIX.edifact.TYPE.SENDER`, and
    /// the message as the body. Published again (marks lost), JetStream drops every one as a
    /// duplicate and the publisher counts them as published.
    #[cfg(feature = "nats")]
    fn jetstream_gets_every_event_once_in_order(site) {
        let Some(jet) = Jet::create() else { return };
        samples_ingested(&site);
        let lines = publish(&site, &["--to", &jet.to(), "--json"]).code(0).json();
        let held = jet.messages();
        assert_eq!(held.len(), 10);
        assert_eq!(order_held(&held, "ce-"), expected_order(&site));
        for (h, line) in held.iter().zip(&lines) {
            assert_eq!(h.headers["Nats-Msg-Id"], line["id"].as_str().unwrap());
            assert_eq!(h.headers["ce-id"], h.headers["Nats-Msg-Id"]);
            assert_eq!(h.headers["ce-specversion"], "1.0");
            assert_eq!(h.headers["content-type"], "application/EDIFACT");
            let kind = &h.headers["ce-type"];
            assert!(kind.starts_with("edifact.") && kind.ends_with(".received"), "{kind}");
            assert!(h.headers.contains_key("ce-time") && h.headers.contains_key("ce-source"));
            assert!(h.headers.contains_key("ce-edisyntax"));
            assert_eq!(
                h.subject,
                format!(
                    "{}.edifact.{}.{}",
                    jet.prefix,
                    h.headers["ce-edimessagetype"],
                    token(&h.headers["ce-edisender"])
                )
            );
            assert!(h.body.starts_with(b"UNH"));
        }
        site.sql("UPDATE outbox SET published_at = NULL");
        let lines = publish(&site, &["--to", &jet.to(), "--json"]).code(0).json();
        assert!(status_of(&lines).iter().all(|s| s == "duplicate"), "{lines:?}");
        assert_eq!(jet.messages().len(), 10, "JetStream dropped the republished events");
    }
}

/// `--subject '{standard}.{type}'`: an EDIFACT and an ANSI X12 interchange's events, and the
/// 997 answering the X12 one, each on the subject of its standard (the default subject names
/// EDIFACT for all of them).
#[cfg(feature = "nats")]
#[test]
fn the_standard_placeholder_puts_each_standard_on_its_own_subjects() {
    let Some(jet) = Jet::create() else { return };
    let site = Site::new();
    let samples = crate::common::samples();
    for (from, to) in [
        ("valid/orders-d01b-no-una.edi", "orders.edi"),
        ("x12/850-purchase-order-00401.x12", "po.x12"),
    ] {
        fs::copy(samples.join(from), site.drop().join(to)).unwrap();
    }
    site.ingest_json(&["--contrl", "always"]).code(0);
    publish(
        &site,
        &["--to", &jet.to(), "--subject", "{standard}.{type}"],
    )
    .code(0);
    let subjects: BTreeSet<String> = jet
        .messages()
        .iter()
        .map(|h| {
            h.subject
                .trim_start_matches(&format!("{}.", jet.prefix))
                .to_string()
        })
        .collect();
    let want: BTreeSet<String> = ["edifact.ORDERS", "x12.850", "edifact.CONTRL", "x12.997"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(subjects, want);
}

/// No stream captures the subjects: exit 1, saying which subject and how to make a stream,
/// nothing marked; `--create-stream NAME` makes one (file storage, a duplicate window) and
/// the events go out.
#[cfg(feature = "nats")]
#[test]
fn a_missing_stream_is_named_or_created() {
    let Some(jet) = Jet::with_stream(false, None) else {
        return;
    };
    let site = Site::new();
    samples_ingested(&site);
    let run = publish(&site, &["--to", &jet.to()]);
    run.code(1);
    let stderr = run.err();
    assert!(
        stderr.contains(&format!(
            "no JetStream stream captures subject {}.edifact.",
            jet.prefix
        )) && stderr.contains("--create-stream"),
        "{stderr}"
    );
    assert_eq!(site.unpublished(), 10);
    publish(&site, &["--to", &jet.to(), "--create-stream", &jet.stream]).code(0);
    assert_eq!(jet.messages().len(), 10);
}

per_backend! {
    /// RabbitMQ: every event reaches a queue bound to the topic exchange, persistent, with its
    /// id as `message_id` and the CloudEvents attributes as `cloudEvents:` properties, in
    /// order; published again, each comes again with the same `message_id` (at least once:
    /// the consumer drops duplicates by id).
    #[cfg(feature = "amqp")]
    fn rabbitmq_gets_every_event_with_its_id(site) {
        let Some(rabbit) = Rabbit::create(Some("#")) else { return };
        samples_ingested(&site);
        let to = crate::common::brokers::AMQP;
        let run = publish(&site, &["--to", to, "--exchange", &rabbit.exchange, "--json"]);
        run.code(0);
        let lines = run.json();
        let stderr = run.err();
        assert!(!stderr.contains("guest:guest"));
        let held = rabbit.take();
        assert_eq!(held.len(), 10);
        assert_eq!(order_held(&held, "cloudEvents:"), expected_order(&site));
        for (h, line) in held.iter().zip(&lines) {
            assert_eq!(h.headers["message_id"], line["id"].as_str().unwrap());
            assert_eq!(h.headers["delivery_mode"], "2");
            assert_eq!(h.headers["content_type"], "application/EDIFACT");
            assert_eq!(h.headers["cloudEvents:specversion"], "1.0");
            assert_eq!(h.subject, line["subject"].as_str().unwrap());
            assert!(h.body.starts_with(b"UNH"));
        }
        let first: Vec<String> = held.iter().map(|h| h.headers["message_id"].clone()).collect();
        site.sql("UPDATE outbox SET published_at = NULL");
        publish(&site, &["--to", to, "--exchange", &rabbit.exchange]).code(0);
        let again: Vec<String> = rabbit.take().iter().map(|h| h.headers["message_id"].clone()).collect();
        assert_eq!(again, first, "the same ids again");
    }
}

per_backend! {
    /// `mandatory`: an exchange no queue is bound to returns every message; none is marked
    /// published, each is recorded as failed (attempt 1), exit 3.
    #[cfg(feature = "amqp")]
    fn an_unroutable_message_is_not_marked_published(site) {
        let Some(rabbit) = Rabbit::create(None) else { return };
        samples_ingested(&site);
        let to = crate::common::brokers::AMQP;
        let lines = publish(&site, &["--to", to, "--exchange", &rabbit.exchange, "--json"]).code(3).json();
        assert!(status_of(&lines).iter().all(|s| s == "failed"), "{lines:?}");
        assert!(lines[0]["error"].as_str().unwrap().contains("no queue takes"), "{lines:?}");
        assert_eq!(site.unpublished(), 10);
        assert_eq!(site.count("SELECT count(*) FROM outbox WHERE attempts = 1"), 10);
    }
}

/// `mandatory` in a mixed batch: a queue takes only INVOIC; the other events come back and are
/// refused, each for itself (RabbitMQ hands a returned message to whichever confirmation comes
/// first, so they are told by id), and only the INVOIC events are marked published.
#[cfg(feature = "amqp")]
#[test]
fn returned_messages_are_told_apart_in_a_mixed_batch() {
    let Some(rabbit) = Rabbit::create(Some("edifact.INVOIC.#")) else {
        return;
    };
    let site = Site::new();
    samples_ingested(&site);
    let to = crate::common::brokers::AMQP;
    let lines = publish(
        &site,
        &["--to", to, "--exchange", &rabbit.exchange, "--json"],
    )
    .code(3)
    .json();
    let invoic =
        site.count("SELECT count(*) FROM outbox WHERE event_type = 'edifact.INVOIC.received'");
    assert!(invoic > 0);
    for line in &lines[..lines.len() - 1] {
        let is_invoic = line["event_type"] == "edifact.INVOIC.received";
        let want = if is_invoic { "published" } else { "failed" };
        assert_eq!(line["status"], want, "{line}");
    }
    assert_eq!(rabbit.take().len() as i64, invoic);
    assert_eq!(
        site.count("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL"),
        invoic
    );
}

per_backend! {
    /// `--follow`: events committed while it runs go out within the poll interval; a second
    /// publisher meanwhile exits 0 saying one is running, a second one with --follow waits and
    /// takes over when the first stops; SIGTERM ends each with exit 0.
    fn follow_publishes_new_events_until_sigterm(site) {
        site.put_sample("valid/two-interchanges.edi", "a.edi");
        site.ingest_quietly(&[]).code(0);
        let out = site.path("out");
        let to = format!("dir:{}", out.display());
        let child = follow(&site, &["--to", &to]);
        let files = || fs::read_dir(&out).map_or(0, |d| d.count());
        let wait_for = |n: usize| {
            let until = Instant::now() + Duration::from_secs(30);
            while files() < n && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            files()
        };
        assert_eq!(wait_for(2), 2);
        let first = publish(&site, &["--to", &to]);
        let second = site.cmd().args(["publish", "--to", &to]).run();
        first.code(0);
        assert!(
            String::from_utf8_lossy(&second.stdout).contains("another edi-inbox publish is running"),
            "{second:?}"
        );
        site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "b.edi");
        site.ingest_quietly(&[]).code(0);
        let messages = site.stat("messages") as usize;
        assert_eq!(wait_for(messages), messages);
        // A second publisher with --follow (a second host's service) is a standby: it waits
        // without publishing, and takes over once the first one stops.
        let mut standby = follow(&site, &["--to", &to]);
        std::thread::sleep(Duration::from_millis(500));
        assert!(standby.child().try_wait().unwrap().is_none(), "the standby ended");
        child.signal(libc::SIGTERM);
        child.wait().code(0);
        assert_eq!(site.unpublished(), 0);
        site.put_sample("valid/orders-d01b-no-una.edi", "c.edi");
        site.ingest_quietly(&[]).code(0);
        let messages = site.stat("messages") as usize;
        assert_eq!(wait_for(messages), messages, "the standby took over");
        standby.signal(libc::SIGTERM);
        let standby = standby.wait();
        standby.code(0);
        assert!(
            String::from_utf8_lossy(&standby.stderr).contains("this one takes over then"),
            "{standby:?}"
        );
    }
}

/// `--follow` when the broker drops the connection (RabbitMQ closing it, as on a restart): the
/// publisher says so, reconnects with a backoff, and every event, those committed after the
/// drop too, reaches the queue (at least once, each with its id); SIGTERM then exits 0.
#[cfg(feature = "amqp")]
#[test]
fn follow_reconnects_when_the_broker_drops_the_connection() {
    let Some(rabbit) = Rabbit::create(Some("#")) else {
        return;
    };
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    let child = follow(
        &site,
        &[
            "--exchange",
            &rabbit.exchange,
            "--to",
            crate::common::brokers::AMQP,
        ],
    );
    let unpublished = || site.unpublished();
    let wait = |what: &dyn Fn() -> bool| within(Duration::from_secs(60), what);
    assert!(wait(&|| unpublished() == 0), "the first events went out");
    crate::common::brokers::close_rabbitmq_connection(&format!("edi-inbox publish {}", child.id()));
    site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "b.edi");
    site.put_sample("valid/desadv-d07a-groups-v4.edi", "c.edi");
    site.ingest_quietly(&[]).code(0);
    assert!(
        wait(&|| unpublished() == 0),
        "the later events went out too"
    );
    child.signal(libc::SIGTERM);
    let out = child.wait();
    let stderr = out.err();
    out.code(0);
    assert!(stderr.contains("reconnecting"), "{stderr}");
    assert!(!stderr.contains("guest:guest"), "{stderr}");
    let ids: BTreeSet<String> = rabbit
        .take()
        .iter()
        .map(|h| h.headers["message_id"].clone())
        .collect();
    assert_eq!(ids.len() as i64, site.count("SELECT count(*) FROM outbox"));
}

/// `--follow` when the NATS server itself dies (`kill -9`) and comes back (a server of the
/// test's own, file storage): the publisher reconnects, events committed while the server was
/// down go out, and the stream holds every event exactly once (what was sent but not confirmed
/// before the crash is sent again and dropped as a duplicate); SIGTERM then exits 0.
#[cfg(feature = "nats")]
#[test]
fn follow_survives_a_nats_server_restart() {
    let site = Site::new();
    let Some(mut server) = OwnNats::start(&site.path("nats-store")) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    site.ingest_quietly(&[]).code(0);
    let child = follow(&site, &["--to", &jet.to()]);
    let unpublished = || site.unpublished();
    let wait = |what: &dyn Fn() -> bool| within(Duration::from_secs(90), what);
    assert!(wait(&|| unpublished() == 0), "the first events went out");
    server.kill();
    for sample in ["invoic-d96a-unoc-crlf.edi", "desadv-d07a-groups-v4.edi"] {
        site.put_sample(&format!("valid/{sample}"), sample);
    }
    site.ingest_quietly(&[]).code(0);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        unpublished() > 0,
        "nothing can go out while the server is down"
    );
    server.up().unwrap();
    assert!(
        wait(&|| unpublished() == 0),
        "the later events went out after the restart"
    );
    child.signal(libc::SIGTERM);
    child.wait().code(0);
    let held = jet.messages();
    let ids: BTreeSet<&String> = held.iter().map(|h| &h.headers["Nats-Msg-Id"]).collect();
    assert_eq!(ids.len(), held.len(), "no event twice");
    assert_eq!(held.len() as i64, site.count("SELECT count(*) FROM outbox"));
    assert_eq!(
        order_held(&held, "ce-"),
        expected_order(&site),
        "order kept"
    );
}

/// Waits until `what` holds, at most `limit`; whether it holds.
#[cfg(any(feature = "nats", feature = "amqp"))]
fn within(limit: Duration, what: &dyn Fn() -> bool) -> bool {
    let until = Instant::now() + limit;
    while !what() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    what()
}

per_backend! {
    /// `--payload interchange` when interchanges' events interleave (hosts drawing ids from one
    /// sequence): even with a batch of one, each interchange goes out once, whole, with all its
    /// message references.
    fn whole_interchanges_go_out_whole_when_their_events_interleave(site) {
        site.put_sample("valid/desadv-d07a-groups-v4.edi", "a.edi");
        site.put_sample("valid/two-interchanges.edi", "b.edi");
        site.ingest_quietly(&[]).code(0);
        // Every other event id given to the other interchanges' events.
        let ids: Vec<i64> = site
            .rows("SELECT id FROM outbox ORDER BY id")
            .iter()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap())
            .collect();
        assert!(ids.len() >= 4, "{ids:?}");
        let n = ids.len() as i64;
        site.sql(&format!(
            "UPDATE outbox SET id = id + 1000;
             UPDATE outbox SET id = CASE WHEN (id - 1000) <= {half}
                 THEN 2 * (id - 1000) - 1 ELSE 2 * (id - 1000 - {half}) END;",
            half = (n + 1) / 2
        ));
        let out = site.path("out");
        let to = format!("dir:{}", out.display());
        let lines = publish(
            &site,
            &["--to", &to, "--json", "--payload", "interchange", "--batch", "1"],
        ).code(0).json();
        let units = &lines[..lines.len() - 1];
        let interchanges = site.stat("interchanges");
        assert_eq!(units.len() as i64, interchanges, "{units:?}");
        let refs: usize = units.iter().map(|u| u["message_refs"].as_array().unwrap().len()).sum();
        assert_eq!(refs as i64, n, "every message in its interchange's one unit");
        assert_eq!(fs::read_dir(&out).unwrap().count() as i64, interchanges);
        assert_eq!(site.unpublished(), 0);
    }
}

/// `publish --follow` with `args`, polling every 100 ms, quiet, its standard error kept.
fn follow(site: &Site, args: &[&str]) -> Running {
    Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
        .arg("--db")
        .arg(site.db_arg())
        .args(["publish", "--follow", "--poll", "100ms", "-q"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start()
}

/// Every name in `dir`, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Issue 22, 1: whoever may write in the folder (the pick-up side must) plants symbolic links
/// at the temporary names a publisher would pick (`.ID.edi.PID.tmp` before: the id is the same
/// in every inbox, the process id lies in a small range) and at one event's own name, each
/// pointing at a file the publisher may write (here, as on a real host, standing for the inbox
/// database). After `publish` that file is unchanged, every other event's `ID.edi` is a regular
/// file with the event's bytes, and the event whose name holds a link is refused for it, never
/// marked published without its file.
#[test]
fn links_planted_in_the_folder_are_never_written_through() {
    use std::os::unix::fs::symlink;
    let site = Site::new();
    samples_ingested(&site);
    // The ids and bodies, from a folder nobody else may write to.
    let clean = site.path("clean");
    publish(&site, &["--to", &format!("dir:{}", clean.display())]).code(0);
    let published = names_in(&clean);
    assert_eq!(published.len(), 10);
    site.sql("UPDATE outbox SET published_at = NULL");

    let victim = site.path("victim.db");
    fs::write(&victim, b"the inbox database").unwrap();
    let out = site.path("out");
    fs::create_dir(&out).unwrap();
    // The next process ids: a process started now has the last one.
    let next = Command::new("true").spawn().unwrap();
    let first = next.id();
    let mut next = next;
    next.wait().unwrap();
    let mut planted = BTreeSet::new();
    for name in &published {
        for pid in first..first + 3000 {
            let tmp = format!(".{name}.{pid}.tmp");
            symlink(&victim, out.join(&tmp)).unwrap();
            planted.insert(tmp);
        }
    }
    let taken = &published[0];
    symlink(&victim, out.join(taken)).unwrap();
    planted.insert(taken.clone());

    let lines = publish(
        &site,
        &["--to", &format!("dir:{}", out.display()), "--json"],
    )
    .code(3)
    .json();
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"the inbox database",
        "written through a link"
    );
    let refused: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["status"] == "failed").collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    let reason = refused[0]["error"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not a regular file (a symbolic link)"),
        "{reason}"
    );
    assert_eq!(
        format!("{}.edi", refused[0]["id"].as_str().unwrap()),
        *taken
    );
    for name in &published[1..] {
        let meta = fs::symlink_metadata(out.join(name)).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{name} is {:?}",
            meta.file_type()
        );
        assert_eq!(
            fs::read(out.join(name)).unwrap(),
            fs::read(clean.join(name)).unwrap()
        );
    }
    // Nothing else was left in the folder: no temporary file, no link followed.
    let left: Vec<String> = names_in(&out)
        .into_iter()
        .filter(|n| !planted.contains(n) && !published[1..].contains(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(site.unpublished(), 1, "the refused event stays unpublished");
}

/// Issue 22, 1: a folder any user may write to without the sticky bit (anyone could swap a
/// published file before it is picked up) is refused, exit 1, naming it; with the sticky bit,
/// as /tmp has, or without write for others, it is used.
#[test]
fn a_folder_others_may_write_to_without_the_sticky_bit_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new();
    samples_ingested(&site);
    let out = site.path("out");
    fs::create_dir(&out).unwrap();
    let to = format!("dir:{}", out.display());
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).unwrap();
    let run = publish(&site, &["--to", &to]);
    run.code(1);
    let stderr = run.err();
    assert!(
        stderr.contains(&format!(
            "{} may be written by any user and has no sticky bit",
            out.display()
        )),
        "{stderr}"
    );
    assert!(names_in(&out).is_empty());
    assert_eq!(site.unpublished(), 10);
    fs::set_permissions(&out, fs::Permissions::from_mode(0o1777)).unwrap();
    publish(&site, &["--to", &to]).code(0);
    assert_eq!(names_in(&out).len(), 10);
}

/// Issue 22, 1: a `dir:` publisher killed (`kill -9`) while it writes leaves its temporary
/// file; the next run removes it (this host's, its process gone), and keeps another host's.
/// In the end the folder holds exactly one file per event and no temporary file.
#[test]
fn a_publisher_killed_mid_write_leaves_no_temporary_file_for_good() {
    let site = Site::new();
    site.fill(400, 21);
    site.ingest(1000);
    // Every event, none published yet.
    let events = site.unpublished() as usize;
    assert!(events > 300, "{events}");
    let out = site.path("out");
    let to = format!("dir:{}", out.display());
    let temporaries = |dir: &std::path::Path| -> Vec<String> {
        names_in(dir)
            .into_iter()
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    };
    let mut g = Synth::new(8);
    let mut seen_left = 0;
    for _ in 0..40 {
        let mut child = site
            .command()
            .args(["publish", "-q", "--batch", "20", "--to", &to])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(15 + g.below(60)));
        let _ = child.kill();
        let _ = child.wait();
        seen_left += usize::from(!temporaries(&out).is_empty());
        if seen_left >= 2 {
            break;
        }
    }
    assert!(
        seen_left >= 2,
        "no kill fell between a temporary file's creation and its link"
    );
    // Another host's temporary in a shared folder: only that host can tell it stale.
    let other = ".edi-inbox.another-host.1.0123456789abcdef.tmp";
    fs::write(out.join(other), b"partial").unwrap();
    publish(&site, &["--to", &to, "-q"]).code(0);
    assert_eq!(temporaries(&out), vec![other.to_string()]);
    assert_eq!(names_in(&out).len(), events + 1);
}

/// Issue 22, 3: `publish --follow` with a batch of 2,000 waiting for its confirmations when
/// the NATS server dies (`kill -9`) and comes back: it sat on the new connection forever
/// (each confirmation waited 10 s in turn, and each such wait was counted as the event's
/// refusal), printed nothing and ignored SIGTERM. Confirmations have 10 s from the last sign
/// of progress; past that the connection is rebuilt (a line says so), what was not confirmed
/// goes out again (JetStream's duplicate window keeps it once), no event is charged for it,
/// and SIGTERM ends the run with 0 at once.
#[cfg(feature = "nats")]
#[test]
fn follow_recovers_when_the_server_dies_under_a_batch_waiting_for_confirmations() {
    let site = Site::new();
    let Some(mut server) = OwnNats::start(&site.path("nats-store")) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    // Enough events that the publisher is still at it when the server is killed (at about
    // 20,000 events a second, a few thousand went out between two looks of a loaded machine).
    site.fill(6000, 31);
    site.ingest(1000);
    // Every event, none published yet.
    let events = site.unpublished();
    assert!(events > 9000, "{events}");
    let mut child = follow(&site, &["--to", &jet.to(), "--batch", "2000"]);
    let stderr = child.child().stderr.take().unwrap();
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr }, &mut text);
        text
    });
    // The first batch is going out, unconfirmed for the most part: the server dies under it.
    // Looked at often: a look every 100 ms let the publisher finish first on a fast machine.
    let until = Instant::now() + Duration::from_secs(60);
    let mut stored = jet.stored();
    while stored == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        stored = jet.stored();
    }
    assert!(stored > 0, "nothing reached the stream");
    server.kill();
    assert!(
        (stored as i64) < events,
        "every event was out before the server was killed ({stored}): nothing tested the reconnect"
    );
    std::thread::sleep(Duration::from_secs(2));
    server.up().unwrap();
    let unpublished = || site.unpublished();
    assert!(
        within(Duration::from_secs(120), &|| unpublished() == 0),
        "{} of {events} events still unpublished two minutes after the restart",
        unpublished()
    );
    let asked = Instant::now();
    child.signal(libc::SIGTERM);
    let status = child.wait();
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?} to stop",
        asked.elapsed()
    );
    let said = said.join().unwrap();
    status.note(format!("its standard error: {said}")).code(0);
    assert!(
        said.contains("reconnecting"),
        "no line said what happened: {said}"
    );
    let held = jet.messages();
    let ids: BTreeSet<&String> = held.iter().map(|h| &h.headers["Nats-Msg-Id"]).collect();
    assert_eq!(ids.len(), held.len(), "no event twice");
    assert_eq!(held.len() as i64, events, "every event once");
    // The stall was the destination's: no event has a refusal counted against it (after
    // --max-attempts of those, an event JetStream did store was parked).
    assert_eq!(
        site.count("SELECT count(*) FROM outbox WHERE attempts > 0 OR failed_at IS NOT NULL"),
        0
    );
}

/// Issue 22, 3: a publish the server does not permit is answered with an `-ERR` that no
/// confirmation sees. That server's word refuses the event (exit 3, the others stored); a
/// confirmation that does not come for any other reason is a stall of the destination, never
/// an event's refusal (see the test above).
#[cfg(feature = "nats")]
#[test]
fn a_publish_the_server_does_not_permit_is_refused_alone() {
    let site = Site::new();
    // A client without credentials is this user (credentials are another issue's).
    let config = r#"
no_auth_user: edi
authorization {
  users = [
    { user: "edi", password: "pw", permissions: { publish: { deny: ["*.edifact.INVOIC.>"] } } }
  ]
}
"#;
    let Some(server) = OwnNats::start_with(&site.path("nats-store"), config) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    samples_ingested(&site);
    let started = Instant::now();
    let lines = publish(&site, &["--to", &jet.to(), "--json"])
        .code(3)
        .json();
    let invoic =
        site.count("SELECT count(*) FROM outbox WHERE event_type = 'edifact.INVOIC.received'");
    assert!(invoic > 0);
    for line in &lines[..lines.len() - 1] {
        let is_invoic = line["event_type"] == "edifact.INVOIC.received";
        let want = if is_invoic { "failed" } else { "published" };
        assert_eq!(line["status"], want, "{line}");
        if is_invoic {
            let error = line["error"].as_str().unwrap();
            assert!(error.contains("does not permit publishing"), "{error}");
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(jet.messages().len() as i64, 10 - invoic);
}

/// Issue 22, 3: SIGTERM works at every moment. A publisher whose server hangs (SIGSTOP: the
/// connection open, nothing answered) under a batch waiting for its confirmations ends at
/// once on SIGTERM with exit 0, marking nothing unconfirmed; a later run, the server back,
/// sends every event once, none charged with a refusal.
#[cfg(feature = "nats")]
#[test]
fn sigterm_ends_a_publisher_waiting_on_a_hung_server() {
    let site = Site::new();
    let Some(server) = OwnNats::start(&site.path("nats-store")) else {
        return;
    };
    let Some(jet) = Jet::on(&server.url(), true, None) else {
        return;
    };
    site.fill(2500, 33);
    site.ingest(1000);
    // Every event, none published yet.
    let events = site.unpublished();
    let child = follow(&site, &["--to", &jet.to(), "--batch", "2000"]);
    assert!(
        within(Duration::from_secs(60), &|| jet.stored() > 0),
        "nothing reached the stream"
    );
    server.pause();
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    child.signal(libc::SIGTERM);
    let out = child.wait();
    let took = asked.elapsed();
    server.resume();
    let stderr = out.err();
    out.code(0);
    // At once: not after waiting out the confirmations (10 s from the last one, then "no
    // confirmation within 10 s ... stalled" and a reconnect), which is what a publisher deaf
    // to SIGTERM under a hung server does. The time is bounded generously (a loaded two-core
    // machine may take seconds to stop and reap a process); the line is what tells the two
    // apart.
    assert!(
        !stderr.contains("no confirmation"),
        "it waited for the confirmations instead of stopping: {stderr}"
    );
    assert!(took < Duration::from_secs(30), "{took:?} to stop: {stderr}");
    publish(&site, &["--to", &jet.to(), "-q"]).code(0);
    let held = jet.messages();
    let ids: BTreeSet<&String> = held.iter().map(|h| &h.headers["Nats-Msg-Id"]).collect();
    assert_eq!(ids.len(), held.len(), "no event twice");
    assert_eq!(held.len() as i64, events, "every event once");
    assert_eq!(
        site.count("SELECT count(*) FROM outbox WHERE attempts > 0 OR failed_at IS NOT NULL"),
        0
    );
}

/// Issue 22, 5: `--create-stream NAME` was ignored without a word where another stream
/// already captured the subjects. The events go to that stream, and a warning names it.
#[cfg(feature = "nats")]
#[test]
fn create_stream_names_the_stream_that_already_captures_the_subjects() {
    let Some(jet) = Jet::create() else { return };
    let site = Site::new();
    samples_ingested(&site);
    let wanted = format!("{}_OTHER", jet.stream);
    let run = publish(&site, &["--to", &jet.to(), "--create-stream", &wanted]);
    run.code(0);
    let stderr = run.err();
    assert!(
        stderr.contains(&format!(
            "stream {} already captures subject {}.edifact.",
            jet.stream, jet.prefix
        )) && stderr.contains(&format!("--create-stream {wanted} made no stream")),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("already captures").count(),
        1,
        "said once: {stderr}"
    );
    assert_eq!(jet.messages().len(), 10);
}
