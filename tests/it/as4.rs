//! `receive`, against the independent AS4 sender (PyPI `as4` 0.2.0, driven by
//! `tests/as4/send.py` in the Python named by `EDI_INBOX_AS4_PYTHON`, which `.ci/run` makes):
//! every sample decided as `ingest` decides its file, each receipt verified by the sender and by
//! xmlsec1; every broken sample rejected as `ingest` rejects it, its message still answered with a
//! receipt; the payloads of one message each decided; a message sent again answered with the
//! same receipt and not decided again; altered
//! messages refused with their ebMS errors and nothing applied; receivers killed with SIGKILL
//! under a retrying sender; several senders at once, and two receivers on one PostgreSQL inbox.
//! Where there is no such Python, each test says so and passes, unless
//! `EDI_INBOX_REQUIRE_AS4` is set (CI): then it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::site::Site;
use crate::common::synth::{Synth, interchange_files};
use crate::common::{Running, StartExt, free_port};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/as4");
const SEND: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/as4/send.py");

/// The Python with `as4` 0.2.0; `None` (with a notice) where none is named, unless required.
fn python() -> Option<String> {
    match std::env::var("EDI_INBOX_AS4_PYTHON") {
        Ok(p) if Path::new(&p).exists() => Some(p),
        _ => {
            crate::common::require(
                "EDI_INBOX_AS4_PYTHON names no Python with as4 0.2.0",
                "EDI_INBOX_REQUIRE_AS4",
            );
            None
        }
    }
}

/// The receiver's configuration in the site: the fixtures' receiver, and the sender a partner.
fn config(site: &Site) -> PathBuf {
    let path = site.path("as4.toml");
    fs::write(
        &path,
        format!(
            "[own]\nparty_id = \"PTE000002\"\nkey = \"{FIXTURES}/certs/receiver.key.pem\"\ncert = \"{FIXTURES}/certs/receiver.cert.pem\"\n\n[[partner]]\nparty_id = \"PTE000001\"\ncert = \"{FIXTURES}/certs/sender.cert.pem\"\n\n[[partner]]\nparty_id = \"PTE000003\"\ncert = \"{FIXTURES}/certs/receiver.cert.pem\"\n"
        ),
    )
    .unwrap();
    path
}

/// A `receive --json` of its own on `port`, its output in the site.
struct Receiver {
    running: Option<Running>,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    fn start(site: &Site, port: u16, name: &str, extra: &[&str]) -> Receiver {
        Receiver::start_with(site, port, name, extra, &[])
    }

    /// [`Receiver::start`] with more variables in its environment.
    fn start_with(
        site: &Site,
        port: u16,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Receiver {
        let out = site.path(&format!("{name}.jsonl"));
        // Ready once it says so (its inbox open, its listener served), not once its port takes
        // a connection: the port is bound before the inbox is made. The file gathers the
        // lines of each start under this name.
        let ready = "receiving AS4 messages";
        let said = || {
            fs::read_to_string(out.with_extension("err"))
                .unwrap_or_default()
                .matches(ready)
                .count()
        };
        let before = said();
        let running = site
            .command()
            .envs(env.iter().copied())
            .args(["receive", "--json", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--as4-config")
            .arg(config(site))
            .args(extra)
            .stdout(
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&out)
                    .unwrap(),
            )
            .stderr(
                fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(out.with_extension("err"))
                    .unwrap(),
            )
            .start();
        let until = Instant::now() + Duration::from_secs(30);
        while said() == before {
            assert!(
                Instant::now() < until,
                "the receiver did not say it listens on {port} within 30 s: {}",
                fs::read_to_string(out.with_extension("err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Receiver {
            running: Some(running),
            port,
            out,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/as4", self.port)
    }

    /// Waits for it to end by itself (a fail point's abort): the run.
    #[cfg(feature = "failpoints")]
    fn ended(mut self) -> crate::common::Run {
        let mut run = self.running.take().unwrap().wait();
        run.stdout = fs::read(&self.out).unwrap_or_default();
        run.stderr = fs::read(self.out.with_extension("err")).unwrap_or_default();
        run
    }

    fn kill(&mut self) {
        if let Some(r) = self.running.take() {
            r.signal(libc::SIGKILL);
            drop(r.wait());
        }
    }

    /// Stops it (SIGTERM): the run, with what it wrote.
    fn stop(mut self) -> crate::common::Run {
        let r = self.running.take().unwrap();
        r.signal(libc::SIGTERM);
        let mut run = r.wait();
        run.stdout = fs::read(&self.out).unwrap_or_default();
        run.stderr = fs::read(self.out.with_extension("err")).unwrap_or_default();
        run
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the sender with `args`: its answers, one JSON object each.
fn send(python: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(python)
        .arg(SEND)
        .arg("--certs")
        .arg(format!("{FIXTURES}/certs"))
        .args(args)
        .output()
        .unwrap();
    let lines = crate::common::json_lines(&out.stdout);
    assert!(
        !lines.is_empty(),
        "send.py {args:?} answered nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn valid_samples() -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = fs::read_dir(crate::common::samples().join("valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    all
}

per_backend! {
    /// Every valid sample sent by the independent sender (TextContent, or BinaryContent where
    /// XML cannot hold the text): each decided as ingest decides its file, each answered with a
    /// receipt the sender acknowledges and xmlsec1 verifies with our certificate.
    fn every_sample_sent_over_as4_is_decided_as_ingest_decides_its_file(site) {
        let Some(python) = python() else { return };
        let files = site.fresh();
        for path in valid_samples() {
            fs::copy(&path, files.drop().join(path.file_name().unwrap())).unwrap();
        }
        files.ingest_quietly(&[]).code(0);
        let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
        let saved = site.path("saved");
        let paths: Vec<String> = valid_samples().iter().map(|p| p.display().to_string()).collect();
        let mut args = vec!["--url".to_string(), receiver.url(), "--save".into(), saved.display().to_string()];
        args.extend(paths);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let answers = send(&python, &args);
        assert_eq!(answers.len(), valid_samples().len());
        for a in &answers {
            assert_eq!(a["state"], "acknowledged", "{a}");
        }
        let keys = "SELECT sender || '/' || recipient, control_ref, sha256 FROM interchanges";
        assert_eq!(site.triples(keys), files.triples(keys));
        assert_eq!(
            site.count("SELECT count(*) FROM deliveries WHERE source LIKE 'as4:%'"),
            answers.len() as i64,
            "one delivery per message"
        );
        assert_eq!(site.count("SELECT count(*) FROM transport_messages"), answers.len() as i64);
        for path in valid_samples() {
            let answer = saved.join(format!("{}.answer0.bin", path.file_name().unwrap().to_string_lossy()));
            xmlsec1_verifies(&answer);
        }
        receiver.stop().code(0);
    }
}

/// Every broken sample in an authentic message: its message answered with a receipt (the
/// transport worked), its interchanges rejected as `ingest` rejects the file, at the same byte
/// offsets, recorded as rejected and answered by CONTRL where asked.
#[test]
fn broken_samples_in_authentic_messages_are_rejected_as_ingest_rejects_them_and_get_receipts() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let mut broken: Vec<PathBuf> = fs::read_dir(crate::common::samples().join("broken"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    broken.sort();
    let files = site.fresh();
    for path in &broken {
        fs::copy(path, files.drop().join(path.file_name().unwrap())).unwrap();
    }
    let ingested = files.ingest_json(&["--contrl", "always"]).json();
    // By file: each outcome's status and byte offset, in order.
    let mut want: BTreeMap<String, Vec<(String, Option<i64>)>> = BTreeMap::new();
    // Each outcome (the summary has no file).
    for o in ingested.iter().filter(|o| o.get("file").is_some()) {
        let file = o["file"].as_str().unwrap();
        let name = Path::new(file)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        want.entry(name).or_default().push((
            o["status"].as_str().unwrap().to_string(),
            o["offset"].as_i64(),
        ));
    }
    assert_eq!(want.len(), broken.len(), "{ingested:?}");

    let receiver = Receiver::start(&site, free_port(), "receiver", &["--contrl", "always"]);
    let mut args = vec!["--url".to_string(), receiver.url()];
    args.extend(broken.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answers = send(&python, &args);
    assert_eq!(answers.len(), broken.len());
    let run = receiver.stop();
    let lines = run.json();
    for a in &answers {
        assert_eq!(a["state"], "acknowledged", "{a}\n{run}");
        let file = a["file"].as_str().unwrap();
        let name = format!("as4:{}", a["message_id"].as_str().unwrap());
        let got: Vec<(String, Option<i64>)> = lines
            .iter()
            .filter(|l| l["file"] == name.as_str())
            .map(|l| {
                (
                    l["status"].as_str().unwrap().to_string(),
                    l["offset"].as_i64(),
                )
            })
            .collect();
        assert_eq!(got, want[file], "{file} sent over AS4 as {name}\n{run}");
    }
    run.code(3);
    let rejected = want
        .values()
        .flatten()
        .filter(|(s, _)| s == "rejected")
        .count();
    assert!(rejected >= broken.len(), "{want:?}");
    assert_eq!(
        site.list(&["--status", "rejected"]).len(),
        files.list(&["--status", "rejected"]).len(),
        "recorded as rejected as the files are"
    );
    assert_eq!(
        site.count("SELECT count(*) FROM outbox WHERE event_type = 'edifact.CONTRL.outbound'"),
        files.count("SELECT count(*) FROM outbox WHERE event_type = 'edifact.CONTRL.outbound'"),
        "a CONTRL wherever ingest writes one"
    );
    assert_eq!(
        site.count("SELECT count(*) FROM transport_messages"),
        broken.len() as i64
    );
}

/// One message carrying several payloads (each signed, encrypted and compressed, each in its own
/// Peppol envelope): each payload decided, named `as4:ID`, `as4:ID#2`, ..., the broken one
/// rejected beside the others; one receipt naming every reference, and the same receipt for
/// the message sent again.
#[test]
fn each_payload_of_a_message_is_decided() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let samples = crate::common::samples();
    let payloads = [
        samples.join("valid/orders-d01b-no-una.edi"),
        samples.join("valid/two-interchanges.edi"),
        samples.join("valid/invrpt-level-b.edi"),
        samples.join("broken/blank-sender.edi"),
    ];
    for p in &payloads {
        assert!(p.exists(), "{}", p.display());
    }
    let saved = site.path("saved");
    let mut args = vec![
        "--url".to_string(),
        receiver.url(),
        "--together".into(),
        "--times".into(),
        "2".into(),
        "--save".into(),
        saved.display().to_string(),
    ];
    args.extend(payloads.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answers = send(&python, &args);
    assert_eq!(answers.len(), 2);
    assert!(
        answers.iter().all(|a| a["state"] == "acknowledged"),
        "{answers:?}"
    );
    assert_eq!(answers[0]["receipt_sha256"], answers[1]["receipt_sha256"]);
    let id = answers[0]["message_id"].as_str().unwrap();
    let run = receiver.stop();
    run.code(3);
    let lines = run.json();
    let got: Vec<(String, String)> = lines
        .iter()
        .filter(|l| l.get("file").is_some() && l["status"] != "resent")
        .map(|l| {
            (
                l["file"].as_str().unwrap().to_string(),
                l["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let name = |k: usize| {
        if k == 1 {
            format!("as4:{id}")
        } else {
            format!("as4:{id}#{k}")
        }
    };
    assert_eq!(
        got,
        [
            (name(1), "new".to_string()),
            (name(2), "new".to_string()),
            (name(2), "new".to_string()),
            (name(3), "new".to_string()),
            (name(4), "rejected".to_string()),
        ],
        "{run}"
    );
    assert_eq!(
        lines.iter().filter(|l| l["status"] == "resent").count(),
        1,
        "{run}"
    );
    // Each payload decided as its file alone is.
    let files = site.fresh();
    for p in &payloads {
        fs::copy(p, files.drop().join(p.file_name().unwrap())).unwrap();
    }
    files.ingest_quietly(&[]).code(3);
    let keys = "SELECT sender || '/' || recipient, control_ref, sha256 FROM interchanges";
    assert_eq!(site.triples(keys), files.triples(keys));
    assert_eq!(site.count("SELECT count(*) FROM deliveries"), 4);
    assert_eq!(site.count("SELECT sightings FROM transport_messages"), 2);
    let answer = fs::read_dir(&saved)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".answer0.bin"))
        .unwrap();
    let text = String::from_utf8_lossy(&fs::read(&answer).unwrap()).into_owned();
    assert_eq!(
        text.matches("MessagePartNRInformation>").count() / 2,
        payloads.len() + 2,
        "a reference for eb:Messaging, the Body and each payload: {text}"
    );
    xmlsec1_verifies(&answer);
}

/// xmlsec1 verifies a signal's signature with our certificate (where xmlsec1 is installed;
/// required with `EDI_INBOX_REQUIRE_AS4`).
fn xmlsec1_verifies(signal: &Path) {
    let out = Command::new("xmlsec1")
        .args(["--verify", "--pubkey-cert-pem"])
        .arg(format!("{FIXTURES}/certs/receiver.cert.pem"))
        .args(["--id-attr:Id", "Messaging", "--id-attr:Id", "Body"])
        .arg(signal)
        .output();
    match out {
        Ok(out) => assert!(
            out.status.success(),
            "xmlsec1 does not verify {}: {}",
            signal.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => crate::common::require(
            &format!("xmlsec1 cannot run ({e}) to check the receipt's signature"),
            "EDI_INBOX_REQUIRE_AS4",
        ),
    }
}

/// The same AS4 message sent three times (a sender's retries): the same receipt, byte for byte,
/// each time, the interchange decided once, the sightings counted. The same interchange in a new
/// message (another MessageId): a receipt, and the interchange a duplicate.
#[test]
fn a_message_sent_again_gets_its_receipt_again_and_is_not_decided_again() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = crate::common::samples().join("valid/orders-d01b-no-una.edi");
    let sample = sample.display().to_string();
    let answers = send(
        &python,
        &["--url", &receiver.url(), "--times", "3", &sample],
    );
    let receipts: BTreeSet<&str> = answers
        .iter()
        .map(|a| a["receipt_sha256"].as_str().unwrap())
        .collect();
    assert_eq!(answers.len(), 3);
    assert!(
        answers.iter().all(|a| a["state"] == "acknowledged"),
        "{answers:?}"
    );
    assert_eq!(receipts.len(), 1, "the same receipt bytes each time");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
    assert_eq!(site.count("SELECT count(*) FROM deliveries"), 1);
    assert_eq!(site.count("SELECT sightings FROM transport_messages"), 3);
    let again = send(&python, &["--url", &receiver.url(), &sample]);
    assert_eq!(again[0]["state"], "acknowledged");
    assert_ne!(again[0]["message_id"], answers[0]["message_id"]);
    let run = receiver.stop();
    run.code(0);
    let lines = run.json();
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(
        statuses,
        ["new", "resent", "resent", "duplicate"],
        "{lines:?}"
    );
}

per_backend! {
    /// A MessageId used again for other content, or by another party: refused with EBMS:0004, not
    /// answered with the first message's receipt (its sender would take it for delivered, and it
    /// would be lost unseen), nothing of it applied; the first message sent again (its payload the
    /// same, though encrypted afresh) still gets its stored receipt.
    fn a_message_id_used_again_for_another_message_is_refused(site) {
        let Some(python) = python() else { return };
        let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
        let url = receiver.url();
        let first = crate::common::samples().join("valid/orders-d01b-no-una.edi");
        let first = first.display().to_string();
        let other = crate::common::samples().join("valid/invoic-d96a-unoc-crlf.edi");
        let other = other.display().to_string();
        let id = "reused-0001@sender.example";
        let a = &send(&python, &["--url", &url, "--message-id", id, &first])[0];
        assert_eq!(a["state"], "acknowledged", "{a}");
        assert_eq!(a["message_id"], id, "{a}");
        let b = &send(&python, &["--url", &url, "--message-id", id, &other])[0];
        assert_eq!(
            (&b["state"], &b["error_code"]),
            (&"rejected".into(), &"EBMS:0004".into()),
            "other content under the id: {b}"
        );
        let party = format!("{FIXTURES}/certs/receiver");
        let c = &send(
            &python,
            &[
                "--url", &url, "--message-id", id, "--party", "PTE000003", "--sign-with", &party,
                &first,
            ],
        )[0];
        assert_eq!(
            (&c["state"], &c["error_code"]),
            (&"rejected".into(), &"EBMS:0004".into()),
            "another party's message under the id: {c}"
        );
        // The first message built again (the same payload, encrypted afresh, other wsu:Ids):
        // the same message, answered with its stored receipt, which names the first build's
        // references (so this sender's library, checking them, does not take it).
        let d = &send(&python, &["--url", &url, "--message-id", id, &first])[0];
        assert_eq!(d["http"], 200, "the first message sent again: {d}");
        assert_eq!(d["receipt_sha256"], a["receipt_sha256"], "the stored receipt: {d}");
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
        assert_eq!(site.count("SELECT count(*) FROM deliveries"), 1);
        assert_eq!(site.count("SELECT sightings FROM transport_messages"), 2);
        let run = receiver.stop();
        run.code(3);
        let lines = run.json();
        let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
        assert_eq!(statuses, ["new", "refused", "refused", "resent"], "{lines:?}");
        let reasons: Vec<&str> = lines
            .iter()
            .filter(|l| l["status"] == "refused")
            .map(|l| l["reason"].as_str().unwrap())
            .collect();
        assert!(reasons[0].contains("other content"), "{lines:?}");
        assert!(reasons[1].contains("another party's"), "{lines:?}");
        assert!(reasons.iter().all(|r| r.contains(id)), "{lines:?}");
    }

}

/// A request beyond `--max-concurrent` while the inbox is held by another run (the deciding
/// thread waits on its lock): answered HTTP 503 within `--request-timeout`, nothing of it kept;
/// the message in hand keeps its place until it is decided, then gets its receipt.
#[test]
fn requests_beyond_max_concurrent_are_turned_away_while_the_inbox_is_held() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(
        &site,
        free_port(),
        "receiver",
        &["--max-concurrent", "1", "--request-timeout", "1s"],
    );
    let url = receiver.url();
    // Another run holds the inbox's write lock (the receiver waits up to its --busy-timeout).
    let holder = rusqlite::Connection::open(site.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let spawn = |sample: &str| {
        let path = crate::common::samples().join(sample);
        Command::new(&python)
            .arg(SEND)
            .arg("--certs")
            .arg(format!("{FIXTURES}/certs"))
            .args(["--url", &url, "--timeout", "90"])
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut senders = vec![spawn("valid/orders-d01b-no-una.edi")];
    // The first in hand before the second comes (whichever gets the place, the other waits).
    std::thread::sleep(Duration::from_millis(1500));
    senders.push(spawn("valid/invoic-d96a-unoc-crlf.edi"));
    // One is turned away while the lock is held; only then is the lock let go.
    let until = Instant::now() + Duration::from_secs(60);
    let mut turned_away = None;
    while turned_away.is_none() {
        assert!(
            Instant::now() < until,
            "no sender was turned away within 60 s"
        );
        turned_away = (0..2).find(|&k| senders[k].try_wait().unwrap().is_some());
        std::thread::sleep(Duration::from_millis(50));
    }
    holder.execute_batch("ROLLBACK").unwrap();
    let answers: Vec<serde_json::Value> = senders
        .into_iter()
        .map(|s| {
            let out = s.wait_with_output().unwrap();
            let lines = crate::common::json_lines(&out.stdout);
            assert_eq!(lines.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
            lines.into_iter().next().unwrap()
        })
        .collect();
    let away = &answers[turned_away.unwrap()];
    let taken = &answers[1 - turned_away.unwrap()];
    assert_eq!(away["http"], 503, "{away}");
    assert_eq!(taken["state"], "acknowledged", "{taken}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 1);
    let run = receiver.stop();
    run.code(3);
    let lines = run.json();
    // The refusal is reported by the deciding thread once it is free again: after the decision.
    let statuses: Vec<&str> = lines.iter().filter_map(|l| l["status"].as_str()).collect();
    assert_eq!(statuses, ["new", "refused"], "{lines:?}");
}

/// The head of a POST to the receiver of `length` bytes (a multipart/related body, as an AS4
/// message's), without its body; `more` headers before its end.
fn post_head(length: usize, more: &str) -> String {
    format!(
        "POST /as4 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/related; type=\"application/soap+xml\"; boundary=\"b\"\r\nContent-Length: {length}\r\n{more}\r\n"
    )
}

/// What came back on `stream` until it closed or `wait` went by: the bytes, whether it closed,
/// and when the first byte came.
fn answer_on(stream: &mut std::net::TcpStream, wait: Duration) -> (String, bool, Option<Instant>) {
    use std::io::Read as _;
    let until = Instant::now() + wait;
    let mut got = Vec::new();
    let mut first = None;
    let mut buf = [0u8; 8192];
    let closed = loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => {
                first.get_or_insert_with(Instant::now);
                got.extend_from_slice(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false;
            }
            // Closed with a reset: what came before it is the answer.
            Err(_) => break true,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed, first)
}

/// A partner's message (a valid sample) sent to `receiver` by the independent sender, which
/// gives up after 30 s: its answer, and how long it took.
fn partners_message(python: &str, receiver: &Receiver) -> (serde_json::Value, Duration) {
    let sample = crate::common::samples().join("valid/orders-d01b-no-una.edi");
    let url = receiver.url();
    let sending = Instant::now();
    let answers = send(
        python,
        &["--url", &url, "--timeout", "30", sample.to_str().unwrap()],
    );
    (answers[0].clone(), sending.elapsed())
}

/// The reasons of the refusals among a run's `lines`.
fn refusals(lines: &[serde_json::Value]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l["status"] == "refused")
        .map(|l| l["reason"].as_str().unwrap())
        .collect()
}

/// A request whose Content-Length is above `--max-size` is answered 413 from its head, before
/// its body comes (a sender that never sends it holds nothing until `--request-timeout`), and
/// the connection closed: nothing more of it is kept. A chunked body (no length given) is cut
/// off with 413 as soon as it passes `--max-size`.
#[test]
fn a_request_declared_larger_than_max_size_is_answered_413_at_once() {
    use std::io::Write as _;
    if python().is_none() {
        return;
    }
    let site = Site::new();
    let timeout = Duration::from_secs(20);
    let receiver = Receiver::start(
        &site,
        free_port(),
        "receiver",
        &["--max-size", "1MiB", "--request-timeout", "20s"],
    );
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", receiver.port)).unwrap();
    stream
        .write_all(post_head(4_000_000, "").as_bytes())
        .unwrap();
    stream.write_all(b"--b\r\n").unwrap();
    // The rest of the body never comes; the answer must not wait for it.
    let (answer, closed, first) = answer_on(&mut stream, timeout + Duration::from_secs(10));
    let took = first.map(|t| t - started);
    assert!(
        answer.starts_with("HTTP/1.1 413") && took.is_some_and(|t| t < timeout),
        "a Content-Length of 4,000,000 bytes over --max-size 1MiB: not answered 413 before --request-timeout ({} s) went by; after {took:?}: {answer}",
        timeout.as_secs()
    );
    assert!(answer.contains("EBMS:0004"), "{answer}");
    assert!(
        closed,
        "the connection was not closed after the 413: {answer}"
    );
    // Chunked, without a length: 413 once it passes --max-size.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", receiver.port)).unwrap();
    stream
        .write_all(b"POST /as4 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/related; boundary=\"b\"\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..20 {
        if stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|()| stream.write_all(&chunk))
            .and_then(|()| stream.write_all(b"\r\n"))
            .is_err()
        {
            // Cut off: the answer is waiting.
            break;
        }
    }
    let (answer, ..) = answer_on(&mut stream, timeout);
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "a chunked body of 1.25 MiB: {answer}"
    );
    let run = receiver.stop();
    let lines = run.json();
    let refused = refusals(&lines);
    assert_eq!(refused.len(), 2, "{lines:?}");
    assert!(
        refused.iter().all(|r| r.contains("--max-size")),
        "{lines:?}"
    );
}

/// 20 uploads from someone who sends a few bytes now and then (more than `--max-concurrent`
/// 16), holding their bodies open: a partner's message sent meanwhile is answered with its
/// receipt while they are all still open, well before `--request-timeout`; each of them is
/// still read, and answered once it is whole.
#[test]
fn slow_uploads_do_not_hold_up_a_partners_message() {
    use std::io::Write as _;
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(
        &site,
        free_port(),
        "receiver",
        &["--max-concurrent", "16", "--request-timeout", "60s"],
    );
    let length = 100_000;
    let mut uploads: Vec<std::net::TcpStream> = (0..20)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", receiver.port)).unwrap();
            // Closed after its answer, which is then read whole.
            s.write_all(post_head(length, "Connection: close\r\n").as_bytes())
                .unwrap();
            s.write_all(b"--b\r\n").unwrap();
            s
        })
        .collect();
    let mut sent = 5;
    // A few bytes to each, now and then, while the partner sends.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = stop.clone();
        let mut streams: Vec<_> = uploads.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in &mut streams {
                    let _ = s.write_all(b"x");
                }
                rounds += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            rounds
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    // The sender gives up after 30 s, half the request timeout the slow uploads may take.
    let (answer, took) = partners_message(&python, &receiver);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sent += trickle.join().unwrap();
    assert_eq!(
        answer["state"], "acknowledged",
        "a partner's message behind 20 slow uploads, after {took:?}: {answer}"
    );
    for (k, s) in uploads.iter_mut().enumerate() {
        let (answer, closed, _) = answer_on(s, Duration::from_millis(100));
        assert!(
            answer.is_empty() && !closed,
            "slow upload {k} was answered or closed before its body was whole: {answer}"
        );
    }
    // Each still read: whole, each is answered (an ebMS error: its body is no message).
    for s in &mut uploads {
        s.write_all(&vec![b'x'; length - sent]).unwrap();
    }
    for (k, s) in uploads.iter_mut().enumerate() {
        let (answer, ..) = answer_on(s, Duration::from_secs(30));
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("EBMS:"),
            "slow upload {k}, whole (the partner's message answered after {took:?}): {answer}"
        );
    }
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 1);
    receiver.stop().code(3);
}

/// More connections than the receiver keeps open (512), each sending nothing, half a request
/// head, or a head and the start of a body: a partner's message is still answered with its
/// receipt, well before `--request-timeout` (the connections that went longest without a place
/// are closed to make room for it).
#[test]
fn idle_connections_do_not_hold_up_a_partners_message() {
    use std::io::Write as _;
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(
        &site,
        free_port(),
        "receiver",
        &["--request-timeout", "60s"],
    );
    let idle: Vec<std::net::TcpStream> = (0..530)
        .map(|k| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", receiver.port)).unwrap();
            match k % 3 {
                0 => {}
                1 => s
                    .write_all(b"POST /as4 HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    .unwrap(),
                _ => s
                    .write_all(format!("{}--b\r\n", post_head(100_000, "")).as_bytes())
                    .unwrap(),
            }
            s
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let (answer, took) = partners_message(&python, &receiver);
    assert_eq!(
        answer["state"], "acknowledged",
        "a partner's message behind 530 idle connections, after {took:?}: {answer}"
    );
    drop(idle);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 1);
    let run = receiver.stop();
    // The bodies begun and cut off by their senders are refused (400, unreadable).
    run.code(3);
    let lines = run.json();
    let refused = refusals(&lines);
    assert!(
        refused.len() < 530 / 3 + 1 && refused.iter().all(|r| r.contains("could not be read")),
        "{lines:?}"
    );
}

/// Altered and hostile messages: each refused with its ebMS error (a signal the sender reads as
/// its message's rejection, but for a request cut short, whose id cannot be read), nothing of
/// them recorded or applied.
#[test]
fn altered_messages_are_refused_with_their_errors_and_nothing_is_applied() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(
        &site,
        free_port(),
        "receiver",
        &["--max-inflated", "1000000", "--max-size", "2000000"],
    );
    let sample = crate::common::samples().join("valid/orders-d01b-no-una.edi");
    let sample = sample.display().to_string();
    let url = receiver.url();
    let cases: [(&[&str], Option<&str>); 5] = [
        (&["--tamper", "flip-attachment"], Some("EBMS:0102")),
        (&["--tamper", "flip-header"], Some("EBMS:0101")),
        (&["--tamper", "swap-payload"], Some("EBMS:0102")),
        (&["--tamper", "wrap"], Some("EBMS:0101")),
        (&["--tamper", "truncate"], None),
    ];
    for (args, code) in cases {
        let mut all = vec!["--url", url.as_str()];
        all.extend_from_slice(args);
        all.push(&sample);
        let a = &send(&python, &all)[0];
        match code {
            Some(code) => {
                assert_eq!(a["state"], "rejected", "{args:?}: {a}");
                assert_eq!(a["error_code"], code, "{args:?}: {a}");
            }
            // Its id unread, the error names no message: the sender cannot match it.
            None => assert!(a["state"].as_str().unwrap().starts_with("refused"), "{a}"),
        }
    }
    // Signed with a certificate that is not the one pinned for PTE000001.
    let other = format!("{FIXTURES}/certs/receiver");
    let a = &send(&python, &["--url", &url, "--sign-with", &other, &sample])[0];
    assert_eq!(
        (&a["state"], &a["error_code"]),
        (&"rejected".into(), &"EBMS:0101".into()),
        "{a}"
    );
    // A payload that inflates past --max-inflated: a decompression bomb.
    let bomb = site.path("bomb.edi");
    let mut text = b"UNB+UNOA:2+BOMB+HUB+260101:1200+B1'UNH+1+ORDERS:D:96A:UN'FTX+AAI+++".to_vec();
    text.extend(std::iter::repeat_n(b'A', 3_000_000));
    text.extend_from_slice(b"'UNT+3+1'UNZ+1+B1'");
    fs::write(&bomb, &text).unwrap();
    let a = &send(&python, &["--url", &url, bomb.to_str().unwrap()])[0];
    assert_eq!(a["error_code"], "EBMS:0303", "{a}");
    // Larger than --max-size (text that does not compress): 413 from its Content-Length.
    let large = site.path("large.edi");
    let mut rng = Synth::new(3);
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut big = b"UNB+UNOA:2+GW+HUB+260101:1200+L1'UNH+1+ORDERS:D:96A:UN'FTX+AAI+++".to_vec();
    big.extend((0..3_000_000).map(|_| alphabet[rng.below(62) as usize]));
    big.extend_from_slice(b"'UNT+3+1'UNZ+1+L1'");
    fs::write(&large, &big).unwrap();
    let a = &send(
        &python,
        &["--url", &url, "--form", "binary", large.to_str().unwrap()],
    )[0];
    assert_eq!(a["http"], 413, "{a}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 0);
    assert_eq!(site.count("SELECT count(*) FROM deliveries"), 0);
    let run = receiver.stop();
    let lines = run.json();
    let refused = lines.iter().filter(|l| l["status"] == "refused").count();
    assert_eq!(refused, 8, "{lines:?}");
}

/// The receiver killed with SIGKILL twice while a sender posts 60 messages and retries each until
/// it gets a receipt: every message is finally answered with a receipt, and each interchange
/// applied once.
#[test]
fn receivers_killed_under_a_retrying_sender_apply_each_interchange_once() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let port = free_port();
    let mut receiver = Receiver::start(&site, port, "receiver", &[]);
    let files = interchange_files(&site.path("in"), 60, 71, "K");
    let mut args = vec![
        SEND.to_string(),
        "--certs".into(),
        format!("{FIXTURES}/certs"),
        "--url".into(),
        receiver.url(),
        "--retry-for".into(),
        "60".into(),
    ];
    args.extend(files);
    let sender = Command::new(&python)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut rng = Synth::new(13);
    let mut killed_mid_work = 0;
    for round in 1..=2 {
        // Until the receiver has decided some of them (more with each round), then at a random
        // moment.
        let until = Instant::now() + Duration::from_secs(60);
        while site.count("SELECT count(*) FROM transport_messages") < 10 * round
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.below(200)));
        let before = site.count("SELECT count(*) FROM transport_messages");
        receiver.kill();
        if before > 0 && before < 60 {
            killed_mid_work += 1;
        }
        std::thread::sleep(Duration::from_millis(300));
        receiver = Receiver::start(&site, port, "receiver", &[]);
    }
    let out = sender.wait_with_output().unwrap();
    let answers = crate::common::json_lines(&out.stdout);
    assert_eq!(answers.len(), 60, "{answers:?}");
    assert!(
        answers.iter().all(|a| a["state"] == "acknowledged"),
        "every message answered with a receipt: {answers:?}"
    );
    assert!(
        killed_mid_work > 0,
        "no kill fell in the middle of the work"
    );
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 60);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 60);
    assert_eq!(
        site.count("SELECT count(*) FROM (SELECT source FROM deliveries GROUP BY source HAVING count(*) > 1)"),
        0,
        "no message decided twice"
    );
    receiver.stop();
}

per_backend! {
    /// Three senders at once, each message sent twice; on PostgreSQL to two receivers in turn
    /// (two processes, one inbox), so that each message's second sending reaches the other
    /// receiver: each message decided once, both its answers the same receipt.
    fn several_senders_at_once_each_message_once(site) {
        let Some(python) = python() else { return };
        let first = Receiver::start(&site, free_port(), "first", &[]);
        let second = site
            .is_postgres()
            .then(|| Receiver::start(&site, free_port(), "second", &[]));
        let urls = match &second {
            Some(s) => format!("{},{}", first.url(), s.url()),
            None => first.url(),
        };
        let senders: Vec<_> = (0..3u64)
            .map(|k| {
                let files = interchange_files(&site.path(&format!("in{k}")), 8, 80 + k, "K");
                let mut args = vec![SEND.to_string(), "--certs".into(), format!("{FIXTURES}/certs"), "--url".into(), urls.clone(), "--times".into(), "2".into()];
                args.extend(files);
                Command::new(&python)
                    .args(&args)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut by_message: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in senders {
            let out = s.wait_with_output().unwrap();
            for a in crate::common::json_lines(&out.stdout) {
                assert_eq!(a["state"], "acknowledged", "{a}");
                by_message
                    .entry(a["message_id"].as_str().unwrap().to_string())
                    .or_default()
                    .insert(a["receipt_sha256"].as_str().unwrap().to_string());
            }
        }
        assert_eq!(by_message.len(), 24);
        assert!(by_message.values().all(|r| r.len() == 1), "one receipt per message: {by_message:?}");
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 24);
        assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 24);
        assert_eq!(site.count("SELECT sum(sightings) FROM transport_messages"), 48);
        first.stop();
        if let Some(s) = second {
            s.stop();
        }
    }
}

/// Fail points at the commit: `cargo test --features failpoints --test it crash::`.
#[cfg(feature = "failpoints")]
mod crash {
    use super::*;

    /// The receiver stopped dead (abort) just before its commit, then in another run just after
    /// it, under a sender that retries: before, nothing of the message was kept, and the retry to
    /// the receiver started again decides it; after, the retry gets the stored receipt and
    /// nothing is decided again. Either way one receipt, each interchange once.
    #[test]
    fn a_receiver_stopped_dead_at_its_commit_decides_each_message_once() {
        let Some(python) = python() else { return };
        for (point, again) in [
            ("receive-before-commit", "new"),
            ("receive-after-commit", "resent"),
        ] {
            let site = Site::new();
            let port = free_port();
            let failpoint = format!("{point}=return");
            let crashing = Receiver::start_with(
                &site,
                port,
                "crashing",
                &[],
                &[("FAILPOINTS", failpoint.as_str())],
            );
            let sample = crate::common::samples().join("valid/two-interchanges.edi");
            let sender = Command::new(&python)
                .arg(SEND)
                .arg("--certs")
                .arg(format!("{FIXTURES}/certs"))
                .args(["--url", &crashing.url(), "--retry-for", "60"])
                .arg(&sample)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let crashed = crashing.ended();
            crashed.signalled();
            let committed = if again == "new" { 0 } else { 2 };
            assert_eq!(
                site.count("SELECT count(*) FROM interchanges"),
                committed,
                "{point}\n{crashed}"
            );
            let receiver = Receiver::start(&site, port, "receiver", &[]);
            let out = sender.wait_with_output().unwrap();
            let answers = crate::common::json_lines(&out.stdout);
            assert_eq!(answers.len(), 1, "{point}: {answers:?}");
            assert_eq!(answers[0]["state"], "acknowledged", "{point}: {answers:?}");
            let run = receiver.stop();
            run.code(0);
            let statuses: Vec<String> = run
                .json()
                .iter()
                .filter(|l| l.get("file").is_some())
                .map(|l| l["status"].as_str().unwrap().to_string())
                .collect();
            let want: &[&str] = if again == "new" {
                &["new", "new"]
            } else {
                &["resent"]
            };
            assert_eq!(statuses, want, "{point}\n{run}");
            assert_eq!(
                site.count("SELECT count(*) FROM interchanges"),
                2,
                "{point}"
            );
            assert_eq!(site.count("SELECT count(*) FROM deliveries"), 1, "{point}");
            assert_eq!(
                site.count("SELECT sightings FROM transport_messages"),
                if again == "new" { 1 } else { 2 },
                "{point}"
            );
        }
    }
}

per_backend! {
    /// A message whose interchange the side effects (`--effects`) refuse: answered with an ebMS
    /// error, never its receipt; nothing of it applied, the interchange kept, the MessageId left
    /// free; sent again under the same id once the mapping is fixed, it is decided as new and
    /// gets its receipt.
    fn a_message_the_side_effects_refuse_gets_an_error_then_its_receipt_after_the_fix(site) {
        let Some(python) = python() else { return };
        let file = site.path("refused.edi");
        fs::write(&file, crate::effects::invoices("B1", &["I1", ""])).unwrap();
        let file = file.display().to_string();
        let id = "refused-0001@sender.example";
        let fx = crate::effects::example(&site);
        let receiver = Receiver::start(
            &site,
            free_port(),
            "receiver",
            &["--effects", fx.to_str().unwrap()],
        );
        let a = &send(&python, &["--url", &receiver.url(), "--message-id", id, &file])[0];
        assert_eq!(
            (&a["state"], &a["error_code"]),
            (&"rejected".into(), &"EBMS:0004".into()),
            "refused by the side effects: {a}"
        );
        let run = receiver.stop();
        run.code(3);
        let lines = run.json();
        assert!(lines.iter().any(|l| l["status"] == "refused" && l["control_ref"] == "B1"), "{lines:?}");
        assert_eq!(site.count("SELECT count(*) FROM refusals"), 1);
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
        assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 0);
        let fixed = crate::effects::fixed_example(&site);
        let receiver = Receiver::start(
            &site,
            free_port(),
            "fixed",
            &["--effects", fixed.to_str().unwrap()],
        );
        let b = &send(&python, &["--url", &receiver.url(), "--message-id", id, &file])[0];
        assert_eq!(b["state"], "acknowledged", "after the fix: {b}");
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
        assert_eq!(site.count("SELECT count(*) FROM partner_invoices"), 2);
        receiver.stop().code(0);
    }
}
