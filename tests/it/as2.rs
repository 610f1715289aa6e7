//! `receive` over AS2, against the independent AS2 implementation pyas2lib 1.4.4 (driven by
//! `tests/as2/send.py` in the Python named by `EDI_INBOX_AS2_PYTHON`, which `.ci/run` makes):
//! every valid sample sent signed, encrypted and compressed, signed only, and plain, each
//! decided as `ingest` decides its file, each MDN verified by pyas2lib and by `openssl cms`
//! with our certificate, its MIC checked against what was signed; a message sent three times
//! answered with the same MDN bytes and decided once; altered and unauthorised messages
//! answered with the negative MDN RFC 4130 names and nothing applied; the receiver killed with
//! SIGKILL under a retrying sender; two receivers on one PostgreSQL inbox sent the same message.
//! Where there is no such Python, each test says so and passes, unless `EDI_INBOX_REQUIRE_AS2`
//! is set (CI): then it fails.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::site::Site;
use crate::common::synth::{Synth, interchange_files};
use crate::common::{Running, StartExt, free_port};

const CERTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/as4/certs");
const SEND: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/as2/send.py");

/// The Python with pyas2lib 1.4.4; `None` (with a notice) where none is named, unless required.
fn python() -> Option<String> {
    match std::env::var("EDI_INBOX_AS2_PYTHON") {
        Ok(p) if Path::new(&p).exists() => Some(p),
        _ => {
            crate::common::require(
                "EDI_INBOX_AS2_PYTHON names no Python with pyas2lib 1.4.4",
                "EDI_INBOX_REQUIRE_AS2",
            );
            None
        }
    }
}

/// The receiver's configuration: us EDIINBOX (the fixtures' receiver key), PARTNER (signed
/// required, the default), PLAIN (nothing required), STRICT (its asynchronous MDNs only to
/// `http://127.0.0.1:9/mdn/`), all signing with the fixtures' sender key.
fn config(site: &Site) -> PathBuf {
    let path = site.path("as2.toml");
    fs::write(
        &path,
        format!(
            "[own]\nas2_id = \"EDIINBOX\"\nkey = \"{CERTS}/receiver.key.pem\"\ncert = \"{CERTS}/receiver.cert.pem\"\n\n[[partner]]\nas2_id = \"PARTNER\"\ncert = \"{CERTS}/sender.cert.pem\"\n\n[[partner]]\nas2_id = \"PLAIN\"\ncert = \"{CERTS}/sender.cert.pem\"\nrequire_signed = false\n\n[[partner]]\nas2_id = \"STRICT\"\ncert = \"{CERTS}/sender.cert.pem\"\nmdn_urls = [\"http://127.0.0.1:9/mdn/\"]\n"
        ),
    )
    .unwrap();
    path
}

/// A `receive --json --as2-config` of its own on `port`, its output in the site.
struct Receiver {
    running: Option<Running>,
    port: u16,
    out: PathBuf,
}

impl Receiver {
    fn start(site: &Site, port: u16, name: &str, extra: &[&str]) -> Receiver {
        let out = site.path(&format!("{name}.jsonl"));
        let ready = "receiving AS2 messages";
        let said = || {
            fs::read_to_string(out.with_extension("err"))
                .unwrap_or_default()
                .matches(ready)
                .count()
        };
        let before = said();
        let append = |p: &Path| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap()
        };
        let running = site
            .command()
            .args(["receive", "--json", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--as2-config")
            .arg(config(site))
            .args(extra)
            .stdout(append(&out))
            .stderr(append(&out.with_extension("err")))
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
        format!("http://127.0.0.1:{}/as2", self.port)
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
fn send(python: &str, args: &[String]) -> Vec<serde_json::Value> {
    let out = Command::new(python)
        .arg(SEND)
        .arg("--certs")
        .arg(CERTS)
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

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The valid samples of both standards.
fn valid_samples() -> Vec<PathBuf> {
    let samples = crate::common::samples();
    let mut all: Vec<PathBuf> = fs::read_dir(samples.join("valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.extend(
        [
            "810-856-00501-wrapped-80-bom.x12",
            "850-purchase-order-00401.x12",
        ]
        .iter()
        .map(|n| samples.join("x12").join(n)),
    );
    all.sort();
    all
}

/// The path of `samples/valid/NAME`, as the sender takes it.
fn valid_sample(name: &str) -> String {
    crate::common::samples()
        .join("valid")
        .join(name)
        .display()
        .to_string()
}

/// The error codes of a run's `refused` lines, in their order.
fn refusals(run: &crate::common::Run) -> Vec<String> {
    run.json()
        .iter()
        .filter(|l| l["status"] == "refused")
        .map(|l| l["error"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `openssl cms -verify` takes a saved MDN (headers, an empty line, the body) as S/MIME signed
/// by our certificate alone, and refuses it for any other.
fn openssl_verifies(mdn: &Path) {
    let verify = |cert: &str| {
        Command::new("openssl")
            .args([
                "cms",
                "-verify",
                "-inform",
                "SMIME",
                "-noverify",
                "-nointern",
            ])
            .arg("-in")
            .arg(mdn)
            .arg("-certfile")
            .arg(format!("{CERTS}/{cert}"))
            .args(["-out", "/dev/null"])
            .output()
            .unwrap()
    };
    let ours = verify("receiver.cert.pem");
    assert!(
        ours.status.success(),
        "openssl cms does not verify {} with our certificate: {}",
        mdn.display(),
        String::from_utf8_lossy(&ours.stderr)
    );
    assert!(
        !verify("sender.cert.pem").status.success(),
        "openssl cms verifies {} with another certificate",
        mdn.display()
    );
}

/// An answer that says the message was processed, by a signed MDN whose MIC is the one the
/// sender's signed (or sent) content has.
fn processed(a: &serde_json::Value) {
    assert_eq!(a["http"], 200, "{a}");
    assert_eq!(a["status"], "processed", "{a}");
    assert_eq!(a["signed"], true, "{a}");
    assert_eq!(a["original"], a["message_id"], "{a}");
    assert!(a["mic_expected"].is_string(), "{a}");
    assert_eq!(a["mic_returned"], a["mic_expected"], "the MIC: {a}");
}

per_backend! {
    /// Every valid sample (EDIFACT and X12) sent signed, encrypted and compressed, signed only,
    /// and plain: each answered with a signed `processed` MDN pyas2lib accepts and openssl
    /// verifies, its MIC the sender's; each interchange decided as ingest decides its file, once
    /// (the second and third sendings of the same interchange are duplicates).
    fn every_sample_sent_three_ways_is_decided_once_and_its_mdn_verified(site) {
        let Some(python) = python() else { return };
        let files = site.fresh();
        for path in valid_samples() {
            fs::copy(&path, files.drop().join(path.file_name().unwrap())).unwrap();
        }
        files.ingest_quietly(&[]).code(0);
        let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
        let samples: Vec<String> = valid_samples().iter().map(|p| p.display().to_string()).collect();
        let mut all = Vec::new();
        for (mode, from) in [("secure", "PARTNER"), ("signed", "PARTNER"), ("plain", "PLAIN")] {
            let saved = site.path(&format!("saved-{mode}"));
            let mut a = args(&["--url", &receiver.url(), "--mode", mode, "--as2-from", from, "--save", &saved.display().to_string()]);
            a.extend(samples.iter().cloned());
            let answers = send(&python, &a);
            assert_eq!(answers.len(), samples.len(), "{mode}: {answers:?}");
            for answer in &answers {
                processed(answer);
            }
            for mdn in fs::read_dir(&saved).unwrap() {
                openssl_verifies(&mdn.unwrap().path());
            }
            all.extend(answers);
        }
        let run = receiver.stop();
        run.code(0);
        let keys = "SELECT sender || '/' || recipient, control_ref, sha256 FROM interchanges";
        assert_eq!(site.triples(keys), files.triples(keys));
        let statuses: Vec<String> = run
            .json()
            .iter()
            .filter(|l| l.get("file").is_some())
            .map(|l| l["status"].as_str().unwrap().to_string())
            .collect();
        let interchanges = files.count("SELECT count(*) FROM interchanges") as usize;
        assert_eq!(
            statuses.iter().filter(|s| *s == "new").count(),
            interchanges,
            "{run}"
        );
        assert_eq!(
            statuses.iter().filter(|s| *s == "duplicate").count(),
            2 * interchanges,
            "{run}"
        );
        assert_eq!(site.count("SELECT count(*) FROM transport_messages WHERE transport = 'as2'"), all.len() as i64);
        assert_eq!(
            site.count("SELECT count(*) FROM deliveries WHERE source LIKE 'as2:%'"),
            all.len() as i64,
            "one delivery per message"
        );
    }
}

per_backend! {
    /// An asynchronous MDN (Receipt-Delivery-Option) to a partner's MDN server that is down for
    /// a while: the HTTP answer is an empty 200 after the commit, the MDN is tried, fails, and is
    /// delivered once the server is back, once, for a message sent twice meanwhile; pyas2lib
    /// takes it (signed, its MIC the sender's); the run's lines and metrics say what happened.
    fn an_asynchronous_mdn_is_delivered_after_the_commit_once_its_server_is_back(site) {
        let Some(python) = python() else { return };
        let metrics = site.path("receive.prom");
        let receiver = Receiver::start(
            &site,
            free_port(),
            "receiver",
            &["--metrics-file", metrics.to_str().unwrap()],
        );
        let sample = crate::common::samples().join("valid/two-interchanges.edi");
        let mdn_port = free_port().to_string();
        let answers = send(
            &python,
            &args(&[
                "--url", &receiver.url(), "--times", "2", "--async-mdn", &mdn_port,
                "--mdn-down", "3", "--mdn-wait", "60", "--mdn-linger", "2",
                &sample.display().to_string(),
            ]),
        );
        let (requests, mdns): (Vec<_>, Vec<_>) =
            answers.iter().partition(|a| a.get("async").is_none());
        assert_eq!(requests.len(), 2, "{answers:?}");
        for r in &requests {
            assert_eq!(r["http"], 200, "an empty 200, the MDN goes apart: {r}");
            assert_eq!(r["status"], "no-mdn", "nothing in the response: {r}");
        }
        assert_eq!(mdns.len(), 1, "one MDN, delivered once the server was back: {answers:?}");
        processed(mdns[0]);
        assert_eq!(mdns[0]["message_id"], requests[0]["message_id"]);
        let run = receiver.stop();
        run.code(0);
        let lines = run.json();
        let status = |s: &str| lines.iter().filter(|l| l["status"] == s).count();
        assert_eq!(status("new"), 2, "{run}");
        assert_eq!(status("resent"), 1, "{run}");
        assert_eq!(status("mdn-delivered"), 1, "{run}");
        assert!(status("mdn-failed") >= 1, "the server was down at first: {run}");
        let failed = lines.iter().find(|l| l["status"] == "mdn-failed").unwrap();
        assert!(
            failed["error"].as_str().unwrap().contains("cannot connect"),
            "the reason is said: {failed}"
        );
        assert!(failed["retry_in_seconds"].as_u64().unwrap() <= 30, "{failed}");
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 2);
        assert_eq!(
            site.count("SELECT count(*) FROM answer_outbox WHERE delivered_at IS NOT NULL"),
            1
        );
        let prom = fs::read_to_string(&metrics).unwrap();
        assert!(
            prom.contains("edi_inbox_receive_run_mdn_deliveries{outcome=\"delivered\"} 1"),
            "{prom}"
        );
        assert!(prom.contains("edi_inbox_receive_mdns_undelivered 0"), "{prom}");
    }
}

/// A partner whose `mdn_urls` do not hold the URL its message asks its asynchronous MDN at:
/// refused with HTTP 403 before anything is applied (no POST anywhere), and said.
#[test]
fn an_asynchronous_mdn_url_outside_the_partners_mdn_urls_is_refused() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = crate::common::samples().join("valid/two-interchanges.edi");
    let port = free_port().to_string();
    let answers = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--as2-from",
            "STRICT",
            "--async-mdn",
            &port,
            "--mdn-wait",
            "3",
            "--mdn-linger",
            "0",
            &sample.display().to_string(),
        ]),
    );
    assert_eq!(
        answers.len(),
        1,
        "the refusal, and no MDN POSTed: {answers:?}"
    );
    assert_eq!(answers[0]["http"], 403, "{answers:?}");
    assert!(
        answers[0]["detail"].as_str().unwrap().contains("mdn_urls"),
        "{answers:?}"
    );
    let run = receiver.stop();
    run.code(3);
    let refused = run.json();
    assert!(
        refused
            .iter()
            .any(|l| l["status"] == "refused" && l["error"] == "unsupported-receipt-delivery"),
        "{run}"
    );
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 0);
}

per_backend! {
    /// A message the side effects refuse, whose sender asked for its MDN asynchronously: an
    /// empty 200, and its negative MDN (`unexpected-processing-error`, signed) POSTed to the URL
    /// it named (RFC 4130 7.3), read by pyas2lib as the failure it is; nothing applied. Sent
    /// again once the mapping is fixed: decided, and its `processed` MDN POSTed. A message
    /// refused by a check (a flipped byte), or sent under another message's Message-ID, gets
    /// its negative MDN in the HTTP response, nothing POSTed: its request's headers prove
    /// nothing of who sent it, and an MDN POSTed about that id could be about the partner's own
    /// message.
    fn a_refused_messages_negative_mdn_goes_asynchronously_only_where_it_is_safe(site) {
        let Some(python) = python() else { return };
        let refused = site.path("refused.edi");
        fs::write(&refused, crate::effects::invoices("B1", &["I1", ""])).unwrap();
        let refused = refused.display().to_string();
        let fx = crate::effects::example(&site);
        let receiver =
            Receiver::start(&site, free_port(), "receiver", &["--effects", fx.to_str().unwrap()]);
        let sample = valid_sample("invoic-d96a-unoc-crlf.edi");
        let other = valid_sample("orders-d01b-no-una.edi");
        let asynchronously = |receiver: &Receiver, extra: &[&str], file: &str| {
            let mut a = args(&[
                "--url", &receiver.url(), "--async-mdn", &free_port().to_string(),
                "--mdn-wait", "30", "--mdn-linger", "1",
            ]);
            a.extend(args(extra));
            a.push(file.to_string());
            let answers = send(&python, &a);
            let (requests, mdns): (Vec<_>, Vec<_>) =
                answers.into_iter().partition(|a| a.get("async").is_none());
            assert_eq!(requests.len(), 1, "{requests:?}");
            (requests.into_iter().next().unwrap(), mdns)
        };
        // Refused by the side effects.
        let (request, mdns) = asynchronously(&receiver, &["--message-id", "refused-0002"], &refused);
        assert_eq!(request["http"], 200, "an empty 200: {request}");
        assert_eq!(request["status"], "no-mdn", "the MDN goes apart: {request}");
        assert_eq!(mdns.len(), 1, "the negative MDN, POSTed once: {mdns:?}");
        assert_eq!(mdns[0]["status"], "processed/error", "{mdns:?}");
        assert_eq!(mdns[0]["detail"], "unexpected-processing-error", "{mdns:?}");
        assert_eq!(mdns[0]["signed"], true, "{mdns:?}");
        assert!(mdns[0]["mic_returned"].is_null(), "no MIC for what was refused: {mdns:?}");
        // A flipped byte: in the HTTP response, nothing POSTed.
        let (request, mdns) = asynchronously(
            &receiver, &["--mode", "signed", "--tamper", "flip", "--mdn-wait", "3"], &sample,
        );
        assert_eq!(
            (&request["http"], &request["status"], &request["detail"]),
            (&200.into(), &"processed/error".into(), &"integrity-check-failed".into()),
            "in the response: {request}"
        );
        assert!(mdns.is_empty(), "nothing POSTed for a check failed: {mdns:?}");
        // Another message under an accepted one's Message-ID: in the HTTP response too.
        let (_, mdns) = asynchronously(&receiver, &["--message-id", "taken-0001"], &sample);
        assert_eq!(mdns.len(), 1, "{mdns:?}");
        processed(&mdns[0]);
        let (request, mdns) = asynchronously(
            &receiver, &["--message-id", "taken-0001", "--mdn-wait", "3"], &other,
        );
        assert_eq!(
            (&request["status"], &request["detail"]),
            (&"processed/error".into(), &"unexpected-processing-error".into()),
            "in the response: {request}"
        );
        assert!(mdns.is_empty(), "nothing POSTed about another message's id: {mdns:?}");
        let run = receiver.stop();
        run.code(3);
        let lines = run.json();
        let delivered = |refused: bool| {
            lines
                .iter()
                .filter(|l| l["status"] == "mdn-delivered" && (l["refused"] == true) == refused)
                .count()
        };
        assert_eq!((delivered(true), delivered(false)), (1, 1), "said as a negative MDN: {run}");
        // The interchange the side effects refused (its line names the statement), then the two
        // messages refused.
        let said = refusals(&run);
        assert_eq!(said.len(), 3, "{run}");
        assert!(said[0].contains("INVOIC.sql"), "{run}");
        assert_eq!(said[1..], ["integrity-check-failed", "unexpected-processing-error"], "{run}");
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1, "the accepted message's");
        assert_eq!(
            site.count("SELECT count(*) FROM refusal_outbox WHERE delivered_at IS NOT NULL"),
            1
        );
        // Sent again once the mapping is fixed: decided, its processed MDN POSTed.
        let fixed = crate::effects::fixed_example(&site);
        let receiver =
            Receiver::start(&site, free_port(), "fixed", &["--effects", fixed.to_str().unwrap()]);
        let (request, mdns) = asynchronously(&receiver, &["--message-id", "refused-0002"], &refused);
        assert_eq!(request["status"], "no-mdn", "{request}");
        assert_eq!(mdns.len(), 1, "{mdns:?}");
        processed(&mdns[0]);
        receiver.stop().code(0);
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 2);
    }
}

/// A partner's MDN server that takes the connection and never answers does not hold another
/// partner's asynchronous MDN behind it: MDNs are tried several at a time, so the second
/// message's MDN is delivered while the first's try still waits, and that try's failure ("no
/// answer within 20 s") is said after it. One at a time, the second would wait for the first.
#[test]
fn a_hung_mdn_server_does_not_hold_other_mdns_behind_it() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    // The hung server: it accepts, holds each connection, and answers nothing.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    hung.set_nonblocking(true).unwrap();
    let hung_url = format!("http://127.0.0.1:{}/mdn", hung.local_addr().unwrap().port());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tried, try_seen) = std::sync::mpsc::channel();
    let holder = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match hung.accept() {
                    Ok((c, _)) => {
                        held.push(c);
                        let _ = tried.send(());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        })
    };
    let samples = valid_samples();
    let first = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--async-mdn-url",
            &hung_url,
            &samples[0].display().to_string(),
        ]),
    );
    assert_eq!(first[0]["http"], 200, "{first:?}");
    try_seen
        .recv_timeout(Duration::from_secs(30))
        .expect("the first message's MDN was not tried at its server within 30 s");
    let port = free_port().to_string();
    let second = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--async-mdn",
            &port,
            "--mdn-wait",
            "60",
            "--mdn-linger",
            "0",
            &samples[1].display().to_string(),
        ]),
    );
    let mdns: Vec<_> = second.iter().filter(|a| a.get("async").is_some()).collect();
    assert_eq!(mdns.len(), 1, "the second message's MDN: {second:?}");
    processed(mdns[0]);
    // Stopped: the first's try, still waiting, ends (failed) before the run does.
    let run = receiver.stop();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    holder.join().unwrap();
    run.code(0);
    let lines = run.json();
    // A line names its message as `as2:ID` (the Message-ID without its angle brackets).
    let at = |status: &str, id: &serde_json::Value| {
        let id = id.as_str().unwrap_or_default().trim_matches(['<', '>']);
        lines.iter().position(|l| {
            l["status"] == status && l["file"].as_str().is_some_and(|f| f.ends_with(id))
        })
    };
    let delivered = at("mdn-delivered", &mdns[0]["message_id"])
        .unwrap_or_else(|| panic!("the second MDN's delivery is not said: {run}"));
    let failed = at("mdn-failed", &first[0]["message_id"])
        .unwrap_or_else(|| panic!("the first MDN's failed try is not said: {run}"));
    assert!(
        delivered < failed,
        "the second MDN waited for the first's try to fail: {run}"
    );
    assert!(
        lines[failed]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer within")),
        "{}",
        lines[failed]
    );
}

/// A message sent three times (a sender's retries, the same bytes): the same MDN, byte for byte,
/// each time; its interchanges decided once, the Message-ID seen three times.
#[test]
fn a_message_sent_three_times_gets_the_same_mdn_and_is_decided_once() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = crate::common::samples().join("valid/two-interchanges.edi");
    let answers = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--times",
            "3",
            &sample.display().to_string(),
        ]),
    );
    assert_eq!(answers.len(), 3);
    for a in &answers {
        processed(a);
    }
    let mdns: BTreeSet<&str> = answers
        .iter()
        .map(|a| a["mdn_sha256"].as_str().unwrap())
        .collect();
    assert_eq!(mdns.len(), 1, "the same MDN bytes: {answers:?}");
    let run = receiver.stop();
    run.code(0);
    let statuses: Vec<String> = run
        .json()
        .iter()
        .filter(|l| l.get("file").is_some())
        .map(|l| l["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["new", "new", "resent", "resent"], "{run}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 2);
    assert_eq!(site.count("SELECT sightings FROM transport_messages"), 3);
}

/// The algorithms partners use: RSAES-OAEP with 3DES, SHA-512 signatures with a SHA-1 MDN
/// (the MIC by the digest signed-receipt-micalg names, as RFC 4130 7.3.1 says), AES-128 with
/// SHA-1, RSASSA-PSS (made by openssl), and an unsigned MDN where the sender asked for none.
#[test]
fn the_algorithms_partners_use_are_read_and_the_mdn_follows_what_was_asked() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let samples = crate::common::samples();
    let sample = |n: &str| samples.join("valid").join(n).display().to_string();
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--key-enc",
                "rsaes_oaep",
                "--enc-alg",
                "tripledes_192_cbc",
                "--digest",
                "sha512",
                "--mdn-digest",
                "sha1",
            ],
            "invoic-d96a-unoc-crlf.edi",
        ),
        (
            &[
                "--enc-alg",
                "aes_128_cbc",
                "--digest",
                "sha1",
                "--mdn-digest",
                "sha384",
            ],
            "orders-d01b-no-una.edi",
        ),
        (
            &[
                "--mode",
                "signed",
                "--sign-alg",
                "openssl-pss",
                "--digest",
                "sha256",
            ],
            "invrpt-level-b.edi",
        ),
        (
            &[
                "--enc-alg",
                "aes_192_cbc",
                "--digest",
                "sha384",
                "--mdn-digest",
                "sha384",
            ],
            "desadv-d07a-groups-v4.edi",
        ),
    ];
    for (extra, file) in cases {
        let mut a = args(&["--url", &receiver.url()]);
        a.extend(args(extra));
        a.push(sample(file));
        let answers = send(&python, &a);
        let answer = &answers[0];
        assert_eq!(answer["http"], 200, "{extra:?}: {answer}");
        assert_eq!(
            answer["mic_returned"], answer["mic_expected"],
            "{extra:?}: {answer}"
        );
        assert_eq!(answer["signed"], true, "{extra:?}: {answer}");
        // pyas2lib computes its own MIC with the signature's digest, not the one it asked for.
        let differs = extra
            .windows(2)
            .any(|w| w == ["--mdn-digest", "sha1"] || w == ["--mdn-digest", "sha384"])
            && !extra.windows(2).any(|w| w == ["--digest", "sha384"]);
        let want = if differs {
            "processed/warning"
        } else {
            "processed"
        };
        assert_eq!(answer["status"], want, "{extra:?}: {answer}");
    }
    let unsigned = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--mdn-digest",
            "none",
            &sample("two-interchanges.edi"),
        ]),
    );
    assert_eq!(unsigned[0]["status"], "processed", "{:?}", unsigned[0]);
    assert_eq!(unsigned[0]["signed"], false, "{:?}", unsigned[0]);
    let run = receiver.stop();
    run.code(0);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 5);
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 6);
}

/// Messages that fail a check, each answered with the negative MDN RFC 4130 7.4.3 names for it,
/// signed; nothing of any of them stored (no key, no Message-ID), each refusal reported.
#[test]
fn altered_and_unauthorised_messages_get_negative_mdns_and_nothing_is_applied() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = valid_sample("invoic-d96a-unoc-crlf.edi");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--mode", "signed", "--tamper", "flip"],
            "integrity-check-failed",
        ),
        (
            &["--mode", "signed", "--sign-with", "receiver"],
            "authentication-failed",
        ),
        (&["--as2-to", "SOMEONE"], "unknown-trading-partner"),
        (&["--as2-from", "STRANGER"], "unknown-trading-partner"),
        (&["--encrypt-to", "sender.cert.pem"], "decryption-failed"),
    ];
    let mut cases: Vec<(&[&str], &str)> = cases.to_vec();
    cases.push((&["--mode", "plain"], "insufficient-message-security"));
    for (extra, modifier) in &cases {
        let mut a = args(&[
            "--url",
            &receiver.url(),
            "--save",
            &site.path("saved").display().to_string(),
        ]);
        a.extend(args(extra));
        a.push(sample.clone());
        let answers = send(&python, &a);
        let answer = &answers[0];
        assert_eq!(answer["http"], 200, "{extra:?}: {answer}");
        assert_eq!(answer["status"], "processed/error", "{extra:?}: {answer}");
        assert_eq!(answer["detail"], *modifier, "{extra:?}: {answer}");
        assert_eq!(answer["signed"], true, "{extra:?}: {answer}");
        assert!(
            answer["mic_returned"].is_null(),
            "no MIC for what was not processed: {answer}"
        );
    }
    for mdn in fs::read_dir(site.path("saved")).unwrap() {
        openssl_verifies(&mdn.unwrap().path());
    }
    let run = receiver.stop();
    run.code(3);
    let refused = refusals(&run);
    let want: Vec<String> = cases.iter().map(|(_, m)| m.to_string()).collect();
    assert_eq!(refused, want, "{run}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 0);
}

/// What a partner marks `required` in `Disposition-Notification-Options` and this receiver cannot
/// do (only an MD5 MIC; a signature other than PKCS #7): the `failed/Failure` MDN RFC 4130 7.4.3
/// words (signed, read by pyas2lib, verified by `openssl cms`), nothing applied; the same
/// digest marked `optional` gets a processed MDN with a digest this receiver knows.
#[test]
fn a_required_mic_algorithm_or_protocol_not_supported_gets_a_failed_mdn() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = valid_sample("orders-d01b-no-una.edi");
    // pgp-signature: no PKCS #7 signature was asked for, so the MDN is unsigned (pyas2lib is
    // told to expect that: --mdn-digest none).
    let cases = [
        (
            "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=required, md5",
            "sha256",
            "unsupported MIC-algorithms",
            "unsupported-mic-algorithms",
        ),
        (
            "signed-receipt-protocol=required, pgp-signature; signed-receipt-micalg=optional, sha-256",
            "none",
            "unsupported format",
            "unsupported-format",
        ),
    ];
    for (options, digest, text, code) in cases {
        // Each case's MDN kept apart (the sender numbers them from 1 each run).
        let saved = site.path(code).display().to_string();
        let answers = send(
            &python,
            &args(&[
                "--url",
                &receiver.url(),
                "--mdn-options",
                options,
                "--mdn-digest",
                digest,
                "--save",
                &saved,
                &sample,
            ]),
        );
        let answer = &answers[0];
        assert_eq!(answer["http"], 200, "{options}: {answer}");
        assert_eq!(answer["status"], "failed/Failure", "{options}: {answer}");
        assert_eq!(answer["detail"], text, "{options}: {answer}");
        assert!(answer["mic_returned"].is_null(), "{answer}");
        assert_eq!(answer["signed"], digest != "none", "{options}: {answer}");
    }
    // The MD5 case's MDN is signed (with SHA-256) and verifies.
    openssl_verifies(&site.path("unsupported-mic-algorithms").join("1.mdn"));
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
    // Optional: answered with a digest this receiver knows, and applied.
    let answers = send(
        &python,
        &args(&[
            "--url",
            &receiver.url(),
            "--mdn-options",
            "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, md5",
            &sample,
        ]),
    );
    assert_eq!(answers[0]["signed"], true, "{}", answers[0]);
    assert!(
        answers[0]["status"]
            .as_str()
            .is_some_and(|s| s.starts_with("processed")),
        "{}",
        answers[0]
    );
    let run = receiver.stop();
    run.code(3);
    let refused = refusals(&run);
    let want: Vec<String> = cases.iter().map(|c| c.3.to_string()).collect();
    assert_eq!(refused, want, "{run}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
}

/// The receiver killed with SIGKILL twice while a sender posts 40 messages and retries each
/// until it gets an answer: every message finally answered with a `processed` MDN, and each
/// interchange applied once.
#[test]
fn receivers_killed_under_a_retrying_as2_sender_apply_each_interchange_once() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let port = free_port();
    let mut receiver = Receiver::start(&site, port, "receiver", &[]);
    let files = interchange_files(&site.path("in"), 40, 91, "A");
    let mut a = vec![
        SEND.to_string(),
        "--certs".into(),
        CERTS.into(),
        "--url".into(),
        receiver.url(),
        "--retry-for".into(),
        "60".into(),
    ];
    a.extend(files);
    let sender = Command::new(&python)
        .args(&a)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut rng = Synth::new(17);
    let mut killed_mid_work = 0;
    for round in 1..=2 {
        let until = Instant::now() + Duration::from_secs(60);
        while site.count("SELECT count(*) FROM transport_messages") < 8 * round
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.below(200)));
        let before = site.count("SELECT count(*) FROM transport_messages");
        receiver.kill();
        if before > 0 && before < 40 {
            killed_mid_work += 1;
        }
        std::thread::sleep(Duration::from_millis(300));
        receiver = Receiver::start(&site, port, "receiver", &[]);
    }
    let out = sender.wait_with_output().unwrap();
    let answers = crate::common::json_lines(&out.stdout);
    assert_eq!(
        answers.len(),
        40,
        "{answers:?}\nthe sender said: {}\nthe receiver said: {}",
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(site.path("receiver.err")).unwrap_or_default()
    );
    for answer in &answers {
        processed(answer);
    }
    assert!(
        killed_mid_work > 0,
        "no kill fell in the middle of the work"
    );
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 40);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 40);
    assert_eq!(
        site.count(
            "SELECT count(*) FROM (SELECT source FROM deliveries GROUP BY source HAVING count(*) > 1)"
        ),
        0,
        "no message decided twice"
    );
    receiver.stop();
}

/// Two receivers on one PostgreSQL inbox, the same message (the same Message-ID and content)
/// sent to both at once, as a sender behind a load balancer retries: applied once, and both
/// answered with the one MDN stored with the decision.
#[cfg(feature = "postgres")]
#[test]
fn two_receivers_on_postgres_sent_the_same_message_apply_it_once_with_one_mdn() {
    let Some(python) = python() else { return };
    let Some(site) = Site::postgres() else { return };
    let first = Receiver::start(&site, free_port(), "first", &[]);
    let second = Receiver::start(&site, free_port(), "second", &[]);
    let files = interchange_files(&site.path("in"), 12, 93, "A");
    let mut by_message: std::collections::BTreeMap<String, BTreeSet<String>> =
        std::collections::BTreeMap::new();
    for file in &files {
        let id = format!(
            "same-{}",
            Path::new(file).file_stem().unwrap().to_string_lossy()
        );
        let senders: Vec<_> = [first.url(), second.url()]
            .into_iter()
            .map(|url| {
                Command::new(&python)
                    .arg(SEND)
                    .args(["--certs", CERTS, "--url", &url, "--message-id", &id, file])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for s in senders {
            let out = s.wait_with_output().unwrap();
            for a in crate::common::json_lines(&out.stdout) {
                processed(&a);
                by_message
                    .entry(a["message_id"].as_str().unwrap().to_string())
                    .or_default()
                    .insert(a["mdn_sha256"].as_str().unwrap().to_string());
            }
        }
    }
    assert_eq!(by_message.len(), 12);
    assert!(
        by_message.values().all(|m| m.len() == 1),
        "one MDN per message: {by_message:?}"
    );
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 12);
    assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 12);
    assert_eq!(
        site.count("SELECT sum(sightings) FROM transport_messages"),
        24
    );
    first.stop();
    second.stop();
}

/// Every broken sample (EDIFACT and X12) in an authentic AS2 message: answered `processed` (the
/// transport worked: a retry could not mend the content), its interchanges rejected as `ingest`
/// rejects the file, at the same byte offsets, and answered by CONTRL, TA1 or 999 where asked.
#[test]
fn broken_samples_in_authentic_as2_messages_are_rejected_as_ingest_rejects_them() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let samples = crate::common::samples();
    let mut broken: Vec<PathBuf> = fs::read_dir(samples.join("broken"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    broken.extend(
        ["broken-isa06-short.x12", "broken-se-count-wrong.x12"]
            .iter()
            .map(|n| samples.join("x12").join(n)),
    );
    broken.sort();
    let files = site.fresh();
    for path in &broken {
        fs::copy(path, files.drop().join(path.file_name().unwrap())).unwrap();
    }
    let ingested = files.ingest_json(&["--contrl", "always"]).json();
    let mut want: std::collections::BTreeMap<String, Vec<(String, Option<i64>)>> =
        std::collections::BTreeMap::new();
    for o in ingested.iter().filter(|o| o.get("file").is_some()) {
        let name = Path::new(o["file"].as_str().unwrap())
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
    let mut a = args(&["--url", &receiver.url()]);
    a.extend(broken.iter().map(|p| p.display().to_string()));
    let answers = send(&python, &a);
    assert_eq!(answers.len(), broken.len());
    let run = receiver.stop();
    run.code(3);
    let lines = run.json();
    for answer in &answers {
        processed(answer);
        let file = answer["file"].as_str().unwrap();
        let name = format!("as2:{}", answer["message_id"].as_str().unwrap());
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
        assert_eq!(got, want[file], "{file} sent over AS2 as {name}\n{run}");
    }
    assert_eq!(
        site.list(&["--status", "rejected"]).len(),
        files.list(&["--status", "rejected"]).len(),
        "recorded as rejected as the files are"
    );
    let answers_sql = "SELECT count(*) FROM outbox WHERE event_type LIKE '%.outbound'";
    assert_eq!(
        site.count(answers_sql),
        files.count(answers_sql),
        "a CONTRL, TA1 or 999 wherever ingest writes one"
    );
    assert_eq!(
        site.count("SELECT count(*) FROM transport_messages"),
        broken.len() as i64
    );
}

per_backend! {
    /// A message whose interchange the side effects (`--effects`) refuse: answered with a
    /// negative MDN (`unexpected-processing-error`), never `processed`; nothing of it applied,
    /// the interchange kept, the Message-ID left free; sent again under the same id once the
    /// mapping is fixed, it is decided as new and gets its `processed` MDN.
    fn a_message_the_side_effects_refuse_gets_a_negative_mdn_then_processed_after_the_fix(site) {
        let Some(python) = python() else { return };
        let file = site.path("refused.edi");
        fs::write(&file, crate::effects::invoices("B1", &["I1", ""])).unwrap();
        let file = file.display().to_string();
        let fx = crate::effects::example(&site);
        let receiver = Receiver::start(&site, free_port(), "receiver", &["--effects", fx.to_str().unwrap()]);
        let a = &send(&python, &args(&["--url", &receiver.url(), "--message-id", "refused-0001", &file]))[0];
        assert_eq!(a["status"], "processed/error", "refused by the side effects: {a}");
        assert_eq!(a["detail"], "unexpected-processing-error", "{a}");
        let run = receiver.stop();
        run.code(3);
        let lines = run.json();
        assert!(lines.iter().any(|l| l["status"] == "refused" && l["control_ref"] == "B1"), "{lines:?}");
        assert_eq!(site.count("SELECT count(*) FROM refusals"), 1);
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 0);
        assert_eq!(site.count("SELECT count(*) FROM transport_messages"), 0);
        let fixed = crate::effects::fixed_example(&site);
        let receiver = Receiver::start(&site, free_port(), "fixed", &["--effects", fixed.to_str().unwrap()]);
        let b = &send(&python, &args(&["--url", &receiver.url(), "--message-id", "refused-0001", &file]))[0];
        processed(b);
        assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
        assert_eq!(site.count("SELECT count(*) FROM partner_invoices"), 2);
        receiver.stop().code(0);
    }
}

/// A message sent first asking for no MDN (an empty 200), then again under the same
/// Message-ID asking for one: the second sending gets the `processed` MDN stored with the
/// first's decision, signed, its MIC the sender's; the interchange decided once.
#[test]
fn a_message_first_sent_without_an_mdn_gets_one_when_sent_again_asking() {
    let Some(python) = python() else { return };
    let site = Site::new();
    let receiver = Receiver::start(&site, free_port(), "receiver", &[]);
    let sample = valid_sample("orders-d01b-no-una.edi");
    let id = ["--message-id", "asked-later"];
    let mut first = args(&["--url", &receiver.url(), "--no-mdn"]);
    first.extend(args(&id));
    first.push(sample.clone());
    let a = &send(&python, &first)[0];
    assert_eq!(
        (&a["http"], &a["status"]),
        (&200.into(), &"no-mdn".into()),
        "{a}"
    );
    let mut again = args(&["--url", &receiver.url()]);
    again.extend(args(&id));
    again.push(sample);
    let b = &send(&python, &again)[0];
    processed(b);
    let run = receiver.stop();
    run.code(0);
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
    assert_eq!(site.count("SELECT sightings FROM transport_messages"), 2);
}

/// Certificates that expired, or expire within 30 days, are said at start-up (and still used),
/// and the notAfter of each is in the metrics, ours too; made by `openssl x509 -days`.
#[test]
fn expired_and_expiring_certificates_are_said_and_in_the_metrics() {
    let site = Site::new();
    let make = |name: &str, days: &str| -> PathBuf {
        let (csr, pem) = (
            site.path(&format!("{name}.csr")),
            site.path(&format!("{name}.pem")),
        );
        let key = format!("{CERTS}/sender.key.pem");
        for args in [
            vec!["req", "-new", "-key", &key, "-subj", "/CN=partner", "-out"],
            vec!["x509", "-req", "-signkey", &key, "-days", days, "-in"],
        ] {
            let mut c = Command::new("openssl");
            c.args(&args).arg(&csr);
            if args[0] == "x509" {
                c.arg("-out").arg(&pem);
            }
            let out = c.output().unwrap();
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        pem
    };
    let (expired, soon) = (make("expired", "-1"), make("soon", "10"));
    let config = site.path("expiring.toml");
    fs::write(
        &config,
        format!(
            "[own]\nas2_id = \"EDIINBOX\"\nkey = \"{CERTS}/receiver.key.pem\"\ncert = \"{CERTS}/receiver.cert.pem\"\n\n[[partner]]\nas2_id = \"OLD\"\ncert = \"{}\"\n\n[[partner]]\nas2_id = \"SOON\"\ncert = \"{}\"\n",
            expired.display(),
            soon.display()
        ),
    )
    .unwrap();
    let metrics = site.path("receive.prom");
    let err = site.path("receive.err");
    let running = site
        .command()
        .args(["receive", "--listen"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--as2-config")
        .arg(&config)
        .arg("--metrics-file")
        .arg(&metrics)
        .stderr(fs::File::create(&err).unwrap())
        .start();
    let until = Instant::now() + Duration::from_secs(30);
    while !fs::read_to_string(&err)
        .unwrap_or_default()
        .contains("receiving AS2 messages")
    {
        assert!(
            Instant::now() < until,
            "receive did not start: {}",
            fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running.signal(libc::SIGTERM);
    running.wait().code(0);
    let said = fs::read_to_string(&err).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as f64;
    assert!(
        said.contains("--as2-config: the certificate of partner OLD expired on "),
        "{said}"
    );
    assert!(
        said.contains("--as2-config: the certificate of partner SOON expires on ")
            && said.contains(", in 10 days"),
        "{said}"
    );
    assert!(
        !said.contains("own.cert"),
        "ours is valid until 2045: {said}"
    );
    let prom = fs::read_to_string(&metrics).unwrap();
    let value = |certificate: &str| -> f64 {
        let label = format!(
            "edi_inbox_receive_certificate_expiry_timestamp_seconds{{certificate=\"{certificate}\",transport=\"as2\"}} "
        );
        prom.lines()
            .find_map(|l| l.strip_prefix(&label))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {label}in {prom}"))
    };
    assert!(value("partner OLD") < now, "{prom}");
    let left = value("partner SOON") - now;
    assert!(
        (9.5 * 86_400.0..=10.5 * 86_400.0).contains(&left),
        "{left} s: {prom}"
    );
    // 2045-01-01T00:00:00Z.
    assert_eq!(value("own.cert"), 2_366_841_600.0, "{prom}");
}
