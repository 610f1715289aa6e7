//! Amazon SQS's own, against the test server (moto; see `common/brokers/sqs.rs`), beside the
//! contracts every broker meets (`consume.rs`) and every destination (`sinks.rs`, on a FIFO and
//! a standard queue: kill -9 of publish, end to end into a second inbox, a refusal parked):
//! publishing to standard and FIFO queues (the attributes, the FIFO group and deduplication ids
//! and a republish dropped, a whole interchange too large parked at its one attempt), a FIFO
//! queue's order per message group kept by `consume`, the visibility of the messages held kept
//! from their receipt to their delete (a batch waiting on a locked inbox not taken by another
//! consumer; no message of an undisturbed run received twice on a 2-second timeout), what a
//! sender other than edi-inbox may send (a `Binary` file name, a body marked base64 that is
//! not), and a failed delete said without its receipt handle. moto slows down with every
//! message a queue holds, FIFO queues most: each test here keeps its queues small.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::brokers::sqs::{Attribute, Made, Sqs};
use crate::common::brokers::{Put, TestBroker as _};
use crate::common::site::Site;
use crate::common::synth::{Layout, Synth};
use crate::consume::{Consumer, consume, within};
use crate::publish::{publish, samples_ingested};

/// A queue whose visibility timeout is 2 seconds, the shortest the documents allow.
fn short_visibility() -> Option<Sqs> {
    Sqs::with(Made {
        visibility: 2,
        ..Made::default()
    })
}

/// `n` distinct interchanges as messages `m0`, `m1`, ...
fn synthetic_puts(n: usize, seed: u64) -> Vec<Put> {
    crate::consume::synthetic(n, seed)
        .iter()
        .enumerate()
        .map(|(k, body)| Put::new(body, format!("m{k}")))
        .collect()
}

/// `publish --to` a standard queue: every event a message, with its CloudEvents attributes
/// (`ce-id` the event's id, `ce-type`, the partners, `content-type`), a body SQS cannot carry
/// as text base64-encoded and marked so; a second run publishes nothing.
#[test]
fn publish_sends_each_event_with_its_attributes() {
    let Some(sqs) = Sqs::create() else { return };
    let site = Site::new();
    samples_ingested(&site);
    let lines = publish(&site, &["--json", "--to", &sqs.url]).code(0).json();
    let ids: BTreeSet<String> = lines
        .iter()
        .filter(|l| l["status"] == "published")
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 10, "{lines:?}");
    let held = sqs.drain();
    assert_eq!(held.len(), 10);
    let got: BTreeSet<String> = held.iter().map(|h| h.headers["ce-id"].clone()).collect();
    assert_eq!(got, ids);
    for h in &held {
        assert_eq!(h.headers["content-type"], "application/EDIFACT");
        assert!(h.headers["ce-type"].starts_with("edifact."), "{h:?}");
        assert!(h.headers.contains_key("ce-edisender"), "{h:?}");
        assert!(h.body.starts_with(b"UNH"), "the message's bytes: {h:?}");
    }
    // The level-B sample's separators are not XML characters: its events went as base64.
    let encoded = held
        .iter()
        .filter(|h| {
            h.headers
                .get("edi-body-encoding")
                .is_some_and(|e| e == "base64")
        })
        .count();
    assert!(encoded > 0, "no body went base64-encoded");
    let lines = publish(&site, &["--json", "--to", &sqs.url]).code(0).json();
    assert_eq!(lines.last().unwrap()["summary"]["published"], 0);
}

/// `publish --to` a FIFO queue: each partner's events in one message group (`SENDER/RECIPIENT`),
/// in the order they were decided, under the event's id as the deduplication id, so that a
/// republish (the marks lost, as after a crash between the delivery and the mark) is dropped
/// by SQS: each event once.
#[test]
fn publish_to_a_fifo_queue_groups_by_partner_and_a_republish_is_dropped() {
    let Some(sqs) = Sqs::fifo() else { return };
    let site = Site::new();
    let mut synth = Synth::new(41);
    for k in 0..24 {
        let sender = format!("P{}", k % 3);
        let body = synth.interchange(&sender, "HUB", &format!("F{k:03}"), 1, Layout::default());
        site.put(&format!("f{k:03}.edi"), &body);
    }
    site.ingest_quietly(&[]).code(0);
    publish(&site, &["-q", "--to", &sqs.url]).code(0);
    // Every mark lost: all of it goes again, with the same ids.
    site.sql("UPDATE outbox SET published_at = NULL");
    publish(&site, &["-q", "--to", &sqs.url]).code(0);
    let held = sqs.drain();
    assert_eq!(held.len(), 24, "each event once: the republish was dropped");
    let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in &held {
        assert_eq!(h.headers["MessageDeduplicationId"], h.headers["ce-id"]);
        by_group
            .entry(h.headers["MessageGroupId"].clone())
            .or_default()
            .push(h.headers["ce-edicontrolref"].clone());
    }
    assert_eq!(by_group.len(), 3, "{by_group:?}");
    for (group, refs) in by_group {
        let sender = group.strip_suffix("/HUB").unwrap();
        let k0: usize = sender[1..].parse().unwrap();
        let want: Vec<String> = (0..24)
            .filter(|k| k % 3 == k0)
            .map(|k| format!("F{k:03}"))
            .collect();
        assert_eq!(refs, want, "the order of {group}");
    }
}

/// An event larger than the queue takes (its `MaximumMessageSize`, 8,192 bytes here) is
/// refused for itself and, after `--max-attempts`, parked; the others go out.
#[test]
fn an_event_larger_than_the_queue_takes_is_parked() {
    let Some(sqs) = Sqs::with(Made {
        max_size: Some(8192),
        ..Made::default()
    }) else {
        return;
    };
    let site = Site::new();
    let mut synth = Synth::new(43);
    site.put(
        "small.edi",
        &synth.interchange("S", "HUB", "SMALL", 1, Layout::default()),
    );
    site.put(
        "large.edi",
        &synth.interchange("S", "HUB", "LARGE", 40, Layout::default()),
    );
    site.ingest_quietly(&[]).code(0);
    let run = publish(
        &site,
        &[
            "--json",
            "--payload",
            "interchange",
            "--max-attempts",
            "1",
            "--to",
            &sqs.url,
        ],
    );
    let lines = run.code(3).json();
    let refused: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["status"] == "parked").collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    assert_eq!(refused[0]["control_ref"], "LARGE");
    let error = refused[0]["error"].as_str().unwrap();
    assert!(error.contains("more than the queue takes: 8192"), "{error}");
    let held = sqs.drain();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].headers["ce-edicontrolref"], "SMALL");
    // Parked: not tried again.
    let lines = publish(
        &site,
        &["--json", "--payload", "interchange", "--to", &sqs.url],
    )
    .code(0)
    .json();
    assert_eq!(lines.last().unwrap()["summary"]["parked"], 0);
}

/// A FIFO queue's messages of three message groups, interleaved, consumed in small batches:
/// each group's interchanges are decided in the order they were sent.
#[test]
fn consume_keeps_the_order_of_each_message_group_of_a_fifo_queue() {
    let Some(sqs) = Sqs::fifo() else { return };
    let site = Site::new();
    let mut synth = Synth::new(53);
    let messages: Vec<Put> = (0..24)
        .map(|k| {
            let body = synth.interchange(
                "GW",
                "HUB",
                &format!("G{}N{k:03}", k % 3),
                1,
                Layout::default(),
            );
            Put::new(&body, format!("m{k}"))
        })
        .collect();
    sqs.send_grouped(&messages, |k| format!("g{}", k % 3));
    let lines = consume(&site, "2s", &["--from", &sqs.url, "--batch", "4"])
        .code(0)
        .json();
    let mut by_group: BTreeMap<char, Vec<String>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["status"] == "new") {
        let r = l["control_ref"].as_str().unwrap().to_string();
        by_group
            .entry(r.chars().nth(1).unwrap())
            .or_default()
            .push(r);
    }
    assert_eq!(by_group.len(), 3);
    for (g, refs) in by_group {
        let mut sorted = refs.clone();
        sorted.sort();
        assert_eq!(refs, sorted, "group {g} decided out of order");
        assert_eq!(refs.len(), 8);
    }
    assert_eq!(sqs.unacknowledged(), Some(0));
}

/// A batch that waits on the inbox (locked by another process) for three times the queue's
/// visibility timeout: its messages' visibility is extended meanwhile, so a second consumer on
/// the same queue takes none of them; once the inbox is free each is decided once, received
/// once.
#[test]
fn a_batch_waiting_on_a_locked_inbox_keeps_its_messages_from_another_consumer() {
    let Some(sqs) = short_visibility() else {
        return;
    };
    let site = Site::new();
    // The inbox made first, so that the consumer below opens it without writing.
    consume(&site, "1s", &["--from", &sqs.url]).code(0);
    let lock = rusqlite::Connection::open(site.db()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let bodies: Vec<Put> = (0..10)
        .map(|k| {
            let mut s = Synth::new(60 + k);
            Put::new(
                &s.interchange("GW", "HUB", &format!("V{k:02}"), 1, Layout::default()),
                format!("m{k}"),
            )
        })
        .collect();
    sqs.send(&bodies);
    let out = site.path("held.jsonl");
    let held = Consumer::start(&site, &["--from", &sqs.url, "--batch", "10"], &out);
    assert!(
        within(|| held
            .stderr()
            .contains("visibility of the messages held is extended")),
        "the consumer did not say it extended the visibility: {}",
        held.stderr()
    );
    // A second consumer, on an inbox of its own, for three visibility timeouts.
    let other = Site::new();
    let lines = consume(&other, "6s", &["--from", &sqs.url]).code(0).json();
    assert_eq!(
        lines.last().unwrap()["summary"]["deliveries"],
        0,
        "the other consumer took messages held by the first: {lines:?}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert!(
        within(|| held.lines() >= 10),
        "the batch was not decided once the inbox was free: {}",
        held.stderr()
    );
    held.signal(libc::SIGTERM);
    let run = held.wait();
    run.code(0);
    assert_eq!(
        site.count("SELECT count(*) FROM deliveries WHERE delivery_count = 1"),
        10,
        "each message received once"
    );
    assert_eq!(sqs.unacknowledged(), Some(0));
}

/// 200 messages on a queue whose visibility timeout is 2 s (the shortest the documents allow),
/// taken by one undisturbed run with the default `--batch`: every message held, while a batch
/// is gathered, while the next is read ahead and while one is decided, is kept invisible, so
/// that none is received twice, and none is counted as a duplicate or a redelivery (which
/// would report our own lateness as the partner's).
#[test]
fn an_undisturbed_run_receives_each_message_once_with_a_short_visibility_timeout() {
    let Some(sqs) = short_visibility() else {
        return;
    };
    let site = Site::new();
    sqs.send(&synthetic_puts(200, 83));
    let run = consume(&site, "3s", &["--from", &sqs.url]);
    let lines = run.code(0).json();
    let summary = &lines.last().unwrap()["summary"];
    let twice = site.count("SELECT count(*) FROM deliveries WHERE delivery_count > 1");
    assert_eq!(
        (
            twice,
            summary["redelivered"].as_u64(),
            summary["duplicate"].as_u64()
        ),
        (0, Some(0), Some(0)),
        "messages received twice in an undisturbed run: {summary}"
    );
    assert_eq!(summary["deliveries"], 200, "{summary}");
    assert_eq!(summary["new"], 200, "{summary}");
    assert_eq!(sqs.unacknowledged(), Some(0));
}

/// The longest run of receipt-handle characters (base64, letters) in `text`: a receipt handle
/// shown whole is 185 of them on moto, 200 and more on AWS.
fn longest_handle_like(text: &str) -> usize {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/=-_".contains(c)))
        .map(str::len)
        .max()
        .unwrap_or(0)
}

/// A batch's messages purged from the queue while the batch waits on a locked inbox: each
/// delete then fails (`ReceiptHandleIsInvalid`), and each failure is said naming the message,
/// with its receipt handle (a capability to delete the message or hide it) only in a short
/// form, never whole.
#[test]
fn a_delete_that_fails_names_the_message_and_shows_no_receipt_handle_whole() {
    let Some(sqs) = Sqs::create() else { return };
    let site = Site::new();
    consume(&site, "1s", &["--from", &sqs.url]).code(0);
    let lock = rusqlite::Connection::open(site.db()).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    sqs.send(&synthetic_puts(3, 89));
    let out = site.path("purged.jsonl");
    let held = Consumer::start(&site, &["--from", &sqs.url], &out);
    assert!(
        within(|| sqs.counts() == Some((0, 3))),
        "the consumer did not receive the three messages: {:?} {}",
        sqs.counts(),
        held.stderr()
    );
    sqs.purge();
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert!(
        within(|| held.stderr().matches("was not deleted").count() >= 3),
        "the failed deletes were not said: {}",
        held.stderr()
    );
    held.signal(libc::SIGTERM);
    let run = held.wait();
    run.code(0);
    let stderr = run.err();
    let failed: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("was not deleted"))
        .collect();
    assert_eq!(failed.len(), 3, "{stderr}");
    let prefix = format!("sqs:{}/", sqs.name);
    for line in failed {
        assert!(line.contains(&prefix), "the message is named: {line}");
        assert!(line.contains("(ReceiptHandleIsInvalid: "), "{line}");
        assert!(line.contains("(receipt handle "), "{line}");
    }
    assert!(
        longest_handle_like(&stderr) < 64,
        "a receipt handle shown whole: {stderr}"
    );
    assert_eq!(site.stats()["interchanges"], 3, "decided once all the same");
}

/// An `edi-filename` sent as a `Binary` message attribute (as some SDKs send every attribute)
/// is taken where its bytes are UTF-8; bytes that are not are said, naming the delivery and the
/// byte, and not taken; both messages are decided.
#[test]
fn a_binary_filename_attribute_is_taken_as_text_or_said() {
    let Some(sqs) = Sqs::create() else { return };
    let site = Site::new();
    let bodies: Vec<String> = crate::consume::synthetic(2, 97)
        .into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect();
    let named = sqs.send_with(
        &bodies[0],
        &[("edi-filename", Attribute::Binary(b"orders-1.edi"))],
    );
    let garbled = sqs.send_with(
        &bodies[1],
        &[("edi-filename", Attribute::Binary(&[b'o', 0xff, 0xfe]))],
    );
    let run = consume(&site, "1s", &["--from", &sqs.url]);
    let lines = run.code(0).json();
    let line = |id: &str| {
        lines
            .iter()
            .find(|l| l["file"] == format!("sqs:{}/{id}", sqs.name))
            .unwrap_or_else(|| panic!("no line for {id}: {lines:?}"))
            .clone()
    };
    assert_eq!(line(&named)["status"], "new");
    assert_eq!(line(&named)["filename"], "orders-1.edi", "{lines:?}");
    assert_eq!(line(&garbled)["status"], "new");
    assert!(line(&garbled).get("filename").is_none(), "{lines:?}");
    let stderr = run.err();
    let said = format!(
        "sqs:{}/{garbled}: its edi-filename attribute is 3 bytes of Binary that are not UTF-8 (at byte 1): not taken",
        sqs.name
    );
    assert!(stderr.contains(&said), "{said} in {stderr}");
}

/// A message marked `edi-body-encoding: base64` whose body is not base64 (here an interchange
/// as text, which would parse) is not taken for text: it is rejected with the reason and the
/// byte where the body stops being base64, its bytes recorded as they came, and deleted.
#[test]
fn a_body_marked_base64_that_is_not_is_rejected_for_it() {
    let Some(sqs) = Sqs::create() else { return };
    let site = Site::new();
    let text = String::from_utf8(crate::consume::synthetic(1, 101).remove(0)).unwrap();
    let id = sqs.send_with(
        &text,
        &[
            ("edi-body-encoding", Attribute::Text("base64")),
            ("edi-filename", Attribute::Text("marked.edi")),
        ],
    );
    let run = consume(&site, "1s", &["--from", &sqs.url]);
    let lines = run.code(3).json();
    let first = &lines[0];
    assert_eq!(first["file"], format!("sqs:{}/{id}", sqs.name), "{lines:?}");
    assert_eq!(first["status"], "rejected", "decided as text: {lines:?}");
    let error = first["error"].as_str().unwrap();
    assert!(
        error.starts_with("the body is marked edi-body-encoding: base64 but is not base64: "),
        "{error}"
    );
    // "UNB+UNOA:" : the colon is the first byte base64 has no place for.
    let at = text.find(':').unwrap();
    assert_eq!(first["offset"], at, "{first}");
    assert_eq!(first["filename"], "marked.edi");
    let stats = site.stats();
    assert_eq!(
        (stats["interchanges"].as_i64(), stats["rejected"].as_i64()),
        (Some(0), Some(1))
    );
    // Its bytes as they came, under its name.
    let kept = format!(
        "SELECT count(*) FROM rejected_files WHERE source_file = 'sqs:{}/{id}' AND file_size = {}",
        sqs.name,
        text.len()
    );
    assert_eq!(site.count(&kept), 1);
    assert_eq!(
        sqs.unacknowledged(),
        Some(0),
        "deleted: it does not come again"
    );
}
