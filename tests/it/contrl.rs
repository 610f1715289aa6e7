//! CONTRL acknowledgements (issue 15, as far as it goes: built and stored in the decision's
//! transaction; their delivery through the outbox is still to come): each one read back by
//! `edi-inbox inspect` and by a second, independent reader of ISO 9735 written here, field by
//! field; a redelivery answered with the same CONTRL; drift rejected with 0085 26; control
//! references that never repeat; on both backends.

use std::fs;

use crate::common::site::Site;
use crate::common::synth::{Layout, Synth};
use crate::common::{Run, RunExt};

/// A second reader of ISO 9735 syntax, from the standard: the UNA (or the level A defaults),
/// then segments split at unreleased terminators, elements at `+`, components at `:`, the
/// release character taken out. Nothing of the crate's parser is used.
fn segments(bytes: &[u8]) -> Vec<Vec<Vec<String>>> {
    // Whatever precedes the service string advice or the header (a byte order mark) is not
    // EDIFACT.
    let start = bytes
        .windows(3)
        .position(|w| w == b"UNA" || w == b"UNB")
        .unwrap_or(0);
    let bytes = &bytes[start..];
    // Level A (`:+?'`), or level B (IS1, IS3, IS4, no release) where UNB is followed by IS3.
    let (mut seps, mut rest) = ((b':', b'+', Some(b'?'), b'\''), bytes);
    if bytes.get(3) == Some(&0x1D) {
        seps = (0x1F, 0x1D, None, 0x1C);
    }
    if let Some(una) = bytes.strip_prefix(b"UNA") {
        seps = (una[0], una[1], Some(una[3]).filter(|r| *r != b' '), una[5]);
        rest = &una[6..];
    }
    let (component, element, release, terminator) = seps;
    let mut out = Vec::new();
    let (mut seg, mut elem, mut comp) = (Vec::new(), Vec::new(), Vec::new());
    let mut released = false;
    for &b in rest {
        if released {
            comp.push(b);
            released = false;
        } else if Some(b) == release {
            released = true;
        } else if b == component {
            elem.push(latin1(std::mem::take(&mut comp)));
        } else if b == element {
            elem.push(latin1(std::mem::take(&mut comp)));
            seg.push(std::mem::take(&mut elem));
        } else if b == terminator {
            elem.push(latin1(std::mem::take(&mut comp)));
            seg.push(std::mem::take(&mut elem));
            out.push(std::mem::take(&mut seg));
        } else if b != b'\r' && b != b'\n' {
            comp.push(b);
        }
    }
    out
}

/// Bytes as ISO 8859-1 text (UNOC; the envelope's values are ASCII either way).
fn latin1(bytes: Vec<u8>) -> String {
    bytes.into_iter().map(char::from).collect()
}

/// Element `e`, component `c` of a segment ("" where absent).
fn at(seg: &[Vec<String>], e: usize, c: usize) -> &str {
    seg.get(e).and_then(|x| x.get(c)).map_or("", String::as_str)
}

/// `ingest -q --contrl always` of the drop folder: the run.
fn answer_all(site: &Site) -> Run {
    site.cmd()
        .args(["ingest", "-q", "--contrl", "always"])
        .arg(site.drop())
        .run()
}

/// The CONTRL stored for a key, as `show --contrl` prints it.
fn contrl_of(site: &Site, sender: &str, recipient: &str, control_ref: &str) -> Vec<u8> {
    let out = site
        .cmd()
        .args(["show", sender, recipient, control_ref, "--contrl"])
        .run();
    out.code(0);
    out.stdout
}

/// Checks a CONTRL against the interchange it answers, field by field: the UNB with the
/// parties swapped (each with its qualifier), the subject's syntax identifier, no 0031 of its
/// own; one message CONTRL of the subject's version; the UCI with the subject's 0020, S002 and
/// S003 unswapped and the action; UNT and UNZ counts and references. Returns the segments.
fn check(contrl: &[u8], subject: &[u8], action: &str) -> Vec<Vec<Vec<String>>> {
    check_one(contrl, subject, None, action)
}

/// The same against the subject's interchange with control reference `control_ref` (the
/// first where `None`).
fn check_one(
    contrl: &[u8],
    subject: &[u8],
    control_ref: Option<&str>,
    action: &str,
) -> Vec<Vec<Vec<String>>> {
    let s = segments(subject);
    let unb = s
        .iter()
        .find(|seg| seg[0][0] == "UNB" && control_ref.is_none_or(|r| at(seg, 5, 0) == r))
        .unwrap();
    let c = segments(contrl);
    let tags: Vec<&str> = c.iter().map(|seg| seg[0][0].as_str()).collect();
    assert_eq!(tags.first(), Some(&"UNB"), "{tags:?}");
    assert_eq!(tags.last(), Some(&"UNZ"), "{tags:?}");
    let cu = &c[0];
    assert_eq!(at(cu, 1, 0), at(unb, 1, 0), "syntax identifier");
    // A version ISO 9735 does not define is answered in version 3.
    let subject_version = match at(unb, 1, 1) {
        v @ ("1" | "2" | "3" | "4") => v,
        _ => "3",
    };
    assert_eq!(at(cu, 1, 1), subject_version, "syntax version");
    assert_eq!(
        cu[2], unb[3],
        "CONTRL sender = subject recipient (S003 whole)"
    );
    assert_eq!(
        cu[3], unb[2],
        "CONTRL recipient = subject sender (S002 whole)"
    );
    assert_eq!(at(cu, 9, 0), "", "no 0031 of its own: {cu:?}");
    assert_eq!(
        at(cu, 11, 0),
        at(unb, 11, 0),
        "the test indicator 0035 echoed"
    );
    let own_ref = at(cu, 5, 0).to_string();
    assert!(!own_ref.is_empty() && own_ref.len() <= 14, "{own_ref}");
    let date = at(cu, 4, 0);
    let v4 = at(unb, 1, 1) == "4";
    assert_eq!(date.len(), if v4 { 8 } else { 6 }, "{date}");
    let unh = &c[1];
    assert_eq!(at(unh, 0, 0), "UNH");
    let version = if v4 {
        ["CONTRL", "4", "1", "UN"]
    } else {
        ["CONTRL", "D", "3", "UN"]
    };
    assert_eq!(unh[2][..4], version.map(String::from));
    let uci = c.iter().find(|seg| seg[0][0] == "UCI").unwrap();
    assert_eq!(at(uci, 1, 0), at(unb, 5, 0), "UCI 0020");
    assert_eq!(uci[2], unb[2], "UCI S002 unswapped");
    assert_eq!(uci[3], unb[3], "UCI S003 unswapped");
    assert_eq!(at(uci, 4, 0), action, "UCI 0083");
    let unt = c.iter().find(|seg| seg[0][0] == "UNT").unwrap();
    assert_eq!(
        at(unt, 1, 0),
        (c.len() - 2).to_string(),
        "UNT counts UNH..UNT"
    );
    assert_eq!(at(unt, 2, 0), at(unh, 1, 0));
    let unz = c.last().unwrap();
    assert_eq!((at(unz, 1, 0), at(unz, 2, 0)), ("1", own_ref.as_str()));
    c
}

per_backend! {
    /// Every valid sample with --contrl always: one CONTRL each, valid for `inspect` (one
    /// CONTRL message) and for the reader above, field by field; a rerun of the same files
    /// (our own redelivery: a crash before their move) queues nothing; the partner sending
    /// them again under other names is answered with the same CONTRL once, nothing new stored,
    /// and what `publish` sends for that second sending is byte for byte what it sent first;
    /// with --contrl-duplicates reject, a copy under a new name with a CONTRL of its own
    /// rejecting it (4, 26), once, and the sendings answered before not at all.
    fn every_new_interchange_gets_one_contrl_and_a_redelivery_the_same(site) {
        for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
            let path = entry.unwrap().path();
            fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
        }
        let lines = site.ingest_json(&["--contrl", "always"]).code(0).json();
        let new: Vec<_> = lines.iter().filter(|l| l["status"] == "new").collect();
        assert_eq!(new.len(), 7);
        for l in &new {
            let (s, r, c) = (
                l["sender"].as_str().unwrap(),
                l["recipient"].as_str().unwrap(),
                l["control_ref"].as_str().unwrap(),
            );
            let bytes = contrl_of(&site, s, r, c);
            let file = site.path(&format!("contrl-{c}.edi"));
            fs::write(&file, &bytes).unwrap();
            let inspected = crate::common::inspect_json(&[&file])
                .note(format!("the CONTRL: {}", String::from_utf8_lossy(&bytes)))
                .code(0)
                .json();
            assert_eq!(inspected[0]["messages"][0]["type"], "CONTRL", "{inspected:?}");
            // The subject as stored, for its UNB.
            let raw = site.cmd().args(["show", s, r, c, "--raw"]).run().code(0).stdout.clone();
            let segs = check(&bytes, &raw, "7");
            assert_eq!(at(&segs[0], 5, 0), l["contrl"].as_str().unwrap());
        }
        let stored = site.count("SELECT count(*) FROM acknowledgements");
        assert_eq!(stored, 7);
        let before: Vec<Vec<u8>> = new
            .iter()
            .map(|l| {
                let v = |k: &str| l[k].as_str().unwrap().to_string();
                contrl_of(&site, &v("sender"), &v("recipient"), &v("control_ref"))
            })
            .collect();
        // What goes out to the partner: each sending's CONTRLs published to a folder of its
        // own, the files' bytes in order.
        let sent = |folder: &str| -> Vec<Vec<u8>> {
            let out = site.path(folder);
            site.cmd()
                .args(["publish", "-q", "--kind", "contrl", "--to"])
                .arg(format!("dir:{}", out.display()))
                .run()
                .code(0);
            let mut bodies: Vec<Vec<u8>> = site
                .files_in(folder)
                .iter()
                .map(|f| fs::read(out.join(f)).unwrap())
                .collect();
            bodies.sort();
            bodies
        };
        let first_sent = sent("sent-first");
        let mut want = before.clone();
        want.sort();
        assert_eq!(first_sent, want, "the CONTRLs sent are the ones stored");
        let again = site.ingest_json(&["--contrl", "always"]).json();
        let duplicates: Vec<_> = again.iter().filter(|l| l["status"] == "duplicate").collect();
        assert_eq!(duplicates.len(), 7);
        assert!(duplicates.iter().all(|l| l["contrl"].is_null()), "{duplicates:?}");
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), 7, "the same files: not again");
        // The partner sends them again, as new files.
        for name in site.files_in("drop") {
            fs::rename(site.drop().join(&name), site.drop().join(format!("resent-{name}"))).unwrap();
        }
        let again = site.ingest_json(&["--contrl", "always"]).json();
        let duplicates: Vec<_> = again.iter().filter(|l| l["status"] == "duplicate").collect();
        assert_eq!(duplicates.len(), 7);
        let by_key = |l: &serde_json::Value| (l["sender"].clone(), l["control_ref"].clone());
        for second in &duplicates {
            let first = new.iter().find(|f| by_key(f) == by_key(second)).unwrap();
            assert_eq!(first["contrl"], second["contrl"], "the same CONTRL again");
        }
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 7);
        // Queued again for delivery; once per sending.
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), 14);
        site.ingest_json(&["--contrl", "always"]);
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), 14, "once per sending");
        // Resent identically: what goes out for the second sending, byte for byte, is what
        // went out for the first (not merely what the inbox stored).
        let resent = sent("sent-again");
        assert_eq!(resent.len(), 7, "each answered again once");
        for (again, first) in resent.iter().zip(&first_sent) {
            assert!(
                again == first,
                "resent otherwise:\n{}\nfirst sent:\n{}",
                String::from_utf8_lossy(again),
                String::from_utf8_lossy(first)
            );
        }
        // Under --contrl-duplicates reject: the same files again are the sendings answered
        // already (ours, read again); the partner's copies under new names are rejected, once.
        let reject = ["--contrl", "always", "--contrl-duplicates", "reject"];
        let rejected = site.ingest_json(&reject).json();
        assert_eq!(rejected.iter().filter(|l| l["contrl"].is_string()).count(), 0, "{rejected:?}");
        for name in site.files_in("drop") {
            fs::rename(site.drop().join(&name), site.drop().join(format!("copy-{name}"))).unwrap();
        }
        let rejected = site.ingest_json(&reject).json();
        assert_eq!(rejected.iter().filter(|l| l["contrl"].is_string()).count(), 7);
        let rejected = site.ingest_json(&reject).json();
        assert_eq!(rejected.iter().filter(|l| l["contrl"].is_string()).count(), 0, "once");
        assert_eq!(
            site.count("SELECT count(*) FROM acknowledgements WHERE action = '4' AND error_code = '26'"),
            7
        );
    }
}

per_backend! {
    /// Asked for in UNB 0031 (the default --contrl requested): answered; not asked: not; an
    /// interchange of CONTRL messages: never, even with --contrl always. Drift is answered with
    /// a rejection, 0085 26. Syntax 4 with 0031 2 gets an indication of receipt (8).
    fn who_is_answered_and_how(site) {
        let asked = "UNA:+.? 'UNB+UNOC:3+PARTNER?+A:ZZ+HUB:14+240101:1200+ASK1++++1'UNH+1+ORDERS:D:96A:UN'BGM+220+1'UNT+3+1'UNZ+1+ASK1'";
        let unasked = "UNB+UNOC:3+PARTNER:ZZ+HUB:14+240101:1200+NOASK'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+NOASK'";
        let acks = "UNB+UNOC:3+PARTNER:ZZ+HUB:14+240101:1200+ACK1++++1'UNH+1+CONTRL:D:3:UN'UCI+X+A+B+7'UNT+3+1'UNZ+1+ACK1'";
        let receipt = "UNB+UNOC:4+P4:14+HUB:14+20240101:1200+RCPT++++2'UNH+1+ORDERS:D:01B:UN'UNT+2+1'UNZ+1+RCPT'";
        site.put("a.edi", asked.as_bytes());
        site.put("b.edi", unasked.as_bytes());
        site.put("c.edi", acks.as_bytes());
        site.put("d.edi", receipt.as_bytes());
        let lines = site.ingest_json(&[]).code(0).json();
        let answered: Vec<_> = lines
            .iter()
            .filter(|l| l["contrl"].is_string())
            .map(|l| l["control_ref"].as_str().unwrap())
            .collect();
        assert_eq!(answered, ["ASK1", "RCPT"]);
        check(&contrl_of(&site, "PARTNER+A", "HUB", "ASK1"), asked.as_bytes(), "7");
        check(&contrl_of(&site, "P4", "HUB", "RCPT"), receipt.as_bytes(), "8");
        // Drift: the same key, other content.
        site.put("e.edi", asked.replace("BGM+220+1", "BGM+220+2").as_bytes());
        let lines = site.ingest_json(&["--contrl", "always"]).code(3).json();
        let drift = lines.iter().find(|l| l["status"] == "drift").unwrap();
        assert!(drift["contrl"].is_string(), "{drift}");
        let acks = &site.show("PARTNER+A", "HUB", "ASK1")["acknowledgements"];
        let rejections = acks
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["action"] == "4" && a["error_code"] == "26")
            .count();
        assert_eq!(rejections, 1, "{acks}");
        let acks = &site.show("PARTNER", "HUB", "ACK1")["acknowledgements"];
        assert_eq!(acks.as_array().map(Vec::len), Some(0), "{acks}");
    }
}

per_backend! {
    /// An interchange of two groups that hold messages and one that holds none (`UNE+0`, as a
    /// real file of a public EDIFACT library's test suite has): applied (its three messages
    /// written, their events queued, the file archived, exit 0); its human line and its JSON
    /// name the empty group; its CONTRL acknowledges it (UCI 7) and rejects the empty group
    /// alone, on a UCF of its own with 0085 32 at its UNE (S006 and S007 as its UNG has them).
    /// An interchange whose only group is empty is still rejected, at that group's UNE.
    fn an_empty_group_is_reported_and_its_interchange_applied(site) {
        let subject = "UNA:+.? 'UNB+UNOC:3+GROUPSENDER:14+HUB:14+240101:1200+EG1++++1'\
UNG+ORDERS+APP1:ZZ+HUBAPP:14+240101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'\
UNH+2+ORDERS:D:96A:UN'BGM+220+PO2+9'UNT+3+2'UNE+2+G1'\
UNG+INVOIC+APP2:ZZ+HUBAPP:14+240101:1200+G2+UN+D:96A'UNE+0+G2'\
UNG+DESADV+APP3:ZZ+HUBAPP:14+240101:1200+G3+UN+D:96A'UNH+1+DESADV:D:96A:UN'BGM+351+D1+9'UNT+3+1'UNE+1+G3'\
UNZ+3+EG1'";
        site.put("grouped.edi", subject.as_bytes());
        let (archive, failed) = (site.path("archive"), site.path("failed"));
        let run = site
            .cmd()
            .arg("ingest")
            .arg("--archive")
            .arg(&archive)
            .arg("--quarantine")
            .arg(&failed)
            .arg(site.drop())
            .run();
        run.code(0);
        let line = run.out().lines().next().unwrap_or_default().to_string();
        assert!(line.starts_with("new "), "{line}");
        assert!(
            line.contains("ref EG1  3 messages  CONTRL 00000000000001  (empty group G2: lower level empty, 0085 32)"),
            "the outcome line names the empty group: {line}"
        );
        assert_eq!(site.files_in("archive"), ["grouped.edi"]);
        assert!(site.files_in("failed").is_empty(), "{:?}", site.files_in("failed"));
        assert_eq!(site.count("SELECT count(*) FROM messages"), 3);
        assert_eq!(site.count("SELECT count(*) FROM messages WHERE group_ref = 'G2'"), 0);
        assert_eq!(site.unpublished(), 3);
        // The CONTRL: UCI 7, one UCF, for G2.
        let bytes = contrl_of(&site, "GROUPSENDER", "HUB", "EG1");
        let c = check(&bytes, subject.as_bytes(), "7");
        let ucfs: Vec<_> = c.iter().filter(|seg| seg[0][0] == "UCF").collect();
        assert_eq!(ucfs.len(), 1, "{}", String::from_utf8_lossy(&bytes));
        let ucf = ucfs[0];
        assert_eq!(
            (at(ucf, 1, 0), at(ucf, 4, 0), at(ucf, 5, 0), at(ucf, 6, 0)),
            ("G2", "4", "32", "UNE"),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        let s = segments(subject.as_bytes());
        let ung = s.iter().find(|seg| seg[0][0] == "UNG" && at(seg, 5, 0) == "G2").unwrap();
        assert_eq!((&ucf[2], &ucf[3]), (&ung[2], &ung[3]));
        let file = site.path("contrl-eg1.edi");
        fs::write(&file, &bytes).unwrap();
        let inspected = crate::common::inspect_json(&[&file]).code(0).json();
        assert_eq!(inspected[0]["messages"][0]["type"], "CONTRL", "{inspected:?}");
        // Its JSON line names the group too (the partner sending it again: a duplicate).
        site.put("again.edi", subject.as_bytes());
        let lines = site.ingest_json(&[]).code(0).json();
        assert_eq!(lines[0]["status"], "duplicate", "{lines:?}");
        assert_eq!(lines[0]["empty_groups"], serde_json::json!(["G2"]), "{lines:?}");
        fs::remove_file(site.drop().join("again.edi")).unwrap();

        // No message in any group: rejected at the empty group's UNE, 0085 32 on its UCF.
        let empty = "UNB+UNOC:3+GROUPSENDER:14+HUB:14+240101:1200+EG2++++1'\
UNG+INVOIC+APP2:ZZ+HUBAPP:14+240101:1200+G2+UN+D:96A'UNE+0+G2'UNZ+1+EG2'";
        site.put("empty.edi", empty.as_bytes());
        let lines = site.ingest_json(&[]).code(3).json();
        let l = &lines[0];
        assert_eq!(
            (l["status"].as_str(), l["offset"].as_u64()),
            (Some("rejected"), Some(empty.find("UNE+0").unwrap() as u64)),
            "{l}"
        );
        let own_ref = l["contrl"].as_str().unwrap();
        let bytes_sql = if site.is_postgres() {
            "convert_from(bytes, 'LATIN1')"
        } else {
            "CAST(bytes AS TEXT)"
        };
        let rows = site.rows(&format!(
            "SELECT {bytes_sql} FROM acknowledgements WHERE own_ref = '{own_ref}'"
        ));
        let bytes = rows[0][0].clone().unwrap().into_bytes();
        let c = check(&bytes, empty.as_bytes(), "4");
        let ucf = c.iter().find(|seg| seg[0][0] == "UCF").unwrap();
        assert_eq!(
            (at(ucf, 1, 0), at(ucf, 4, 0), at(ucf, 5, 0), at(ucf, 6, 0)),
            ("G2", "4", "32", "UNE")
        );
    }
}

per_backend! {
    /// 10,000 acknowledgements to one partner (in 50 files of 200 interchanges): 10,000
    /// control references, none repeated, 1 to 10,000 in the order decided.
    fn control_references_never_repeat_for_a_partner(site) {
        let mut synth = Synth::new(3);
        for f in 0..50 {
            let mut file = Vec::new();
            for k in 0..200 {
                file.extend(synth.interchange("ONEPARTNER", "HUB", &format!("F{f}K{k}"), 1, Layout::default()));
            }
            site.put(&format!("f{f:02}.edi"), &file);
        }
        answer_all(&site).code(0);
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 10_000);
        assert_eq!(site.count("SELECT count(DISTINCT own_ref) FROM acknowledgements"), 10_000);
        assert_eq!(site.count("SELECT count(DISTINCT partner) FROM acknowledgements"), 1);
        assert_eq!(
            site.count("SELECT count(*) FROM acknowledgements WHERE own_ref = '00000000010000'"),
            1
        );
    }
}

per_backend! {
    /// Delivered through the outbox: `publish --kind contrl` writes only the CONTRLs, one file
    /// each holding the stored bytes; nothing twice on a rerun; a redelivery's answer goes out
    /// again under an id of its own with the same bytes; `--kind message` sends only the
    /// messages' events. A duplicate whose first copy was not answered is answered now.
    fn contrls_go_out_through_the_outbox(site) {
        for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
            let path = entry.unwrap().path();
            fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
        }
        // First without answers: the rerun's duplicates get theirs then.
        let quietly = |when: &str| {
            site.cmd()
                .args(["ingest", "-q", "--contrl", when])
                .arg(site.drop())
                .assert()
                .code(0);
        };
        quietly("never");
        let lines = site.ingest_json(&["--contrl", "always"]).json();
        assert_eq!(lines.iter().filter(|l| l["contrl"].is_string()).count(), 7, "{lines:?}");
        let out = site.path("contrl-out");
        let to = format!("dir:{}", out.display());
        let publish = |kind: &str, to: &str| {
            let out = site
                .cmd()
                .args(["publish", "--json", "--kind", kind, "--to", to])
                .run();
            out.code(0);
            crate::common::json_lines(&out.stdout)
        };
        let sent = publish("contrl", &to);
        let events: Vec<_> = sent.iter().filter(|l| l["status"] == "published").collect();
        assert_eq!(events.len(), 7);
        assert!(events.iter().all(|l| l["event_type"] == "edifact.CONTRL.outbound"));
        let mut files = site.files_in("contrl-out");
        assert_eq!(files.len(), 7);
        for l in &events {
            let body = fs::read(out.join(format!("{}.edi", l["id"].as_str().unwrap()))).unwrap();
            let c = segments(&body);
            assert_eq!(at(&c[1], 2, 0), "CONTRL");
            assert_eq!(at(&c[0], 5, 0), l["control_ref"].as_str().unwrap());
        }
        assert_eq!(publish("contrl", &to).iter().filter(|l| l["status"] == "published").count(), 0);
        // The same files again (our own redelivery): nothing goes out.
        quietly("always");
        assert_eq!(publish("contrl", &to).iter().filter(|l| l["status"] == "published").count(), 0);
        // The partner sends them again: the same answer goes out again.
        for name in site.files_in("drop") {
            fs::rename(site.drop().join(&name), site.drop().join(format!("again-{name}"))).unwrap();
        }
        quietly("always");
        assert_eq!(publish("contrl", &to).iter().filter(|l| l["status"] == "published").count(), 7);
        let again = site.files_in("contrl-out");
        assert_eq!(again.len(), 14);
        let bodies: std::collections::BTreeSet<Vec<u8>> =
            again.iter().map(|f| fs::read(out.join(f)).unwrap()).collect();
        assert_eq!(bodies.len(), 7, "the same bytes again");
        files.sort();
        // The messages' events alone elsewhere.
        let msgs = site.path("msg-out");
        let sent = publish("message", &format!("dir:{}", msgs.display()));
        assert_eq!(sent.iter().filter(|l| l["status"] == "published").count(), 10);
        assert!(sent.iter().all(|l| l["event_type"] != "edifact.CONTRL.outbound"));
    }
}

per_backend! {
    /// Every broken sample with --contrl always: the expected 0083, 0085, level and service
    /// segment tag of each answer (none where the UNB cannot be read, or has no key), each
    /// CONTRL read back by the reader above against the interchange it answers.
    fn rejected_interchanges_are_answered_with_their_error(site) {
        // (file, control reference, 0083, 0085, the segment that reports it, 0135/0013).
        let table: &[(&str, &str, &str, &str, &str, &str)] = &[
            ("dangling-release.edi", "B0001", "4", "21", "UCI", ""),
            ("duplicate-message-ref.edi", "B0010", "4", "26", "UCM", "UNH"),
            ("good-then-bad.edi", "B0012", "7", "", "", ""),
            ("good-then-bad.edi", "B0013", "4", "29", "UCI", "UNZ"),
            ("segment-outside-message.edi", "B0011", "4", "33", "UCI", ""),
            ("syntax-version-0.edi", "B0014", "4", "2", "UCI", "UNB"),
            ("no-messages.edi", "B0016", "4", "32", "UCI", "UNZ"),
            ("truncated-no-unz.edi", "B0001", "4", "13", "UCI", "UNZ"),
            ("une-count-wrong.edi", "B0009", "4", "29", "UCF", "UNE"),
            ("unt-count-wrong.edi", "B0001", "4", "29", "UCM", "UNT"),
            ("unt-count-wrong-in-group.edi", "B0017", "4", "29", "UCM", "UNT"),
            ("unt-reference-mismatch.edi", "B0001", "4", "28", "UCM", "UNT"),
            ("unz-count-wrong.edi", "B0001", "4", "29", "UCI", "UNZ"),
            ("unz-reference-mismatch.edi", "B0001", "4", "28", "UCI", "UNZ"),
        ];
        let unanswered = ["binary-garbage.bin", "empty.edi", "message-only.edi", "short-una.edi", "empty-control-ref.edi", "blank-sender.edi"];
        for entry in fs::read_dir(crate::common::samples().join("broken")).unwrap() {
            let path = entry.unwrap().path();
            fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
        }
        let lines = site.ingest_json(&["--contrl", "always"]).code(3).json();
        let bytes_sql = if site.is_postgres() {
            "convert_from(bytes, 'LATIN1')"
        } else {
            "CAST(bytes AS TEXT)"
        };
        let mut answered = 0;
        for l in lines.iter().filter(|l| l.get("status").is_some()) {
            let file = l["file"].as_str().unwrap().rsplit('/').next().unwrap();
            let Some(own_ref) = l["contrl"].as_str() else {
                assert!(unanswered.contains(&file), "{file} was not answered: {l}");
                continue;
            };
            answered += 1;
            let rows = site.rows(&format!(
                "SELECT control_ref, {bytes_sql} FROM acknowledgements WHERE own_ref = '{own_ref}'"
            ));
            assert_eq!(rows.len(), 1, "{own_ref}: one CONTRL of that reference");
            let control_ref = rows[0][0].clone().unwrap();
            let bytes = rows[0][1].clone().unwrap().into_bytes();
            let row = table
                .iter()
                .find(|r| r.0 == file && r.1 == control_ref)
                .unwrap_or_else(|| panic!("{file} {control_ref} not in the table"));
            let subject = fs::read(site.drop().join(file)).unwrap_or_else(|_| {
                fs::read(crate::common::samples().join("broken").join(file)).unwrap()
            });
            let c = check_one(&bytes, &subject, Some(&control_ref), row.2);
            let seg = |tag: &str| c.iter().find(|s| s[0][0] == tag).cloned();
            match row.4 {
                "" => assert!(seg("UCM").is_none() && seg("UCF").is_none()),
                "UCI" => {
                    let uci = seg("UCI").unwrap();
                    assert_eq!((at(&uci, 5, 0), at(&uci, 6, 0)), (row.3, row.5), "{file}");
                }
                "UCF" => {
                    let ucf = seg("UCF").unwrap();
                    assert_eq!((at(&ucf, 4, 0), at(&ucf, 5, 0), at(&ucf, 6, 0)), ("4", row.3, row.5), "{file}");
                    // S006 and S007 as the UNG stated them, whole.
                    let s = segments(&subject);
                    let ung = s.iter().find(|s| s[0][0] == "UNG").unwrap();
                    assert_eq!((&ucf[2], &ucf[3]), (&ung[2], &ung[3]), "{file}");
                }
                "UCM" => {
                    let ucm = seg("UCM").unwrap();
                    assert_eq!((at(&ucm, 3, 0), at(&ucm, 4, 0), at(&ucm, 5, 0)), ("4", row.3, row.5), "{file}");
                    // S009 whole, 0057 included, as the UNH stated it.
                    let s = segments(&subject);
                    let unh = s.iter().find(|s| s[0][0] == "UNH" && s[1] == ucm[1]).unwrap();
                    assert_eq!(ucm[2], unh[2], "{file}");
                    // In a grouped interchange, nested under its group's UCF: rejected with it,
                    // the error on the UCM alone.
                    let tags: Vec<&str> = c.iter().map(|s| s[0][0].as_str()).collect();
                    let at_ucm = tags.iter().position(|t| *t == "UCM").unwrap();
                    if let Some(ung) = s.iter().find(|s| s[0][0] == "UNG") {
                        assert_eq!(tags[at_ucm - 1], "UCF", "{file}: {tags:?}");
                        let ucf = &c[at_ucm - 1];
                        assert_eq!(at(ucf, 1, 0), at(ung, 5, 0), "{file}");
                        assert_eq!((&ucf[2], &ucf[3]), (&ung[2], &ung[3]), "{file}");
                        assert_eq!((at(ucf, 4, 0), at(ucf, 5, 0)), ("4", ""), "{file}");
                    } else {
                        assert_eq!(tags[at_ucm - 1], "UCI", "{file}: {tags:?}");
                    }
                }
                other => panic!("{other}"),
            }
        }
        assert_eq!(answered, table.len());
    }
}

/// Every file of the shared corpus (real files nobody here wrote) with --contrl always: every
/// CONTRL made, for what was accepted and what was rejected, is read back by `inspect` as one
/// valid interchange holding one CONTRL message, and by the reader above (UNT counting its
/// segments, the UCI present, UNZ naming the UNB's reference).
#[test]
fn every_contrl_made_for_the_corpus_reads_back() {
    let Some(root) = crate::corpus::corpus() else {
        eprintln!("no corpus beside the checkout and EDI_INBOX_CORPUS unset: nothing to check");
        return;
    };
    let site = Site::new();
    let manifest = crate::corpus::tsv(root.join("real/MANIFEST.tsv"));
    for (n, row) in manifest.iter().enumerate() {
        site.put(
            &format!("c{n:04}.edi"),
            &fs::read(root.join(&row["file"])).unwrap(),
        );
    }
    let lines = site
        .ingest_json(&["--contrl", "always"])
        .code_in(&[0, 3])
        .json();
    // The manifest's verdict against the answers: a file it calls valid has each interchange
    // answered (acknowledged, or, where another file of the corpus used its key, a drift
    // rejected with 26); any other has a rejection answered 4 with a code of the table, where
    // its UNB could be read.
    let codes = ["29", "28", "13", "12", "21", "33", "30", "26", "18"];
    for (n, row) in manifest.iter().enumerate() {
        let name = format!("c{n:04}.edi");
        let mine: Vec<_> = lines
            .iter()
            .filter(|l| l["file"].as_str().is_some_and(|f| f.ends_with(&name)))
            .collect();
        if crate::corpus::verdict(&row["notes"]) == "valid" {
            assert!(!mine.is_empty(), "{}", row["file"]);
            for l in &mine {
                assert!(
                    ["new", "duplicate", "drift"].contains(&l["status"].as_str().unwrap_or("")),
                    "{}: {l}",
                    row["file"]
                );
                if l["contrl"].is_null() {
                    // Only an interchange of acknowledgements goes unanswered.
                    let v = |k: &str| l[k].as_str().unwrap_or_default().replace('\'', "''");
                    let others = site.count(&format!(
                        "SELECT count(*) FROM messages m JOIN interchanges i ON i.id = m.interchange_id
                         WHERE i.sender = '{}' AND i.recipient = '{}' AND i.control_ref = '{}'
                           AND m.message_type NOT IN ('CONTRL', 'APERAK')",
                        v("sender"),
                        v("recipient"),
                        v("control_ref")
                    ));
                    assert_eq!(others, 0, "{}: {l}", row["file"]);
                }
            }
            continue;
        }
        for l in mine.iter().filter(|l| l["status"] == "rejected") {
            let Some(own_ref) = l["contrl"].as_str() else {
                continue;
            };
            let answered = site.rows(&format!(
                "SELECT action, error_code FROM acknowledgements WHERE own_ref = '{own_ref}' AND action = '4'"
            ));
            assert!(!answered.is_empty(), "{}: {l}", row["file"]);
            assert!(
                answered
                    .iter()
                    .any(|a| codes.contains(&a[1].as_deref().unwrap_or(""))),
                "{}: {answered:?}",
                row["file"]
            );
        }
    }
    let rows = site.rows("SELECT own_ref, partner, hex(bytes) FROM acknowledgements");
    assert!(rows.len() > 50, "{} CONTRLs", rows.len());
    let mut files = Vec::new();
    for (k, r) in rows.iter().enumerate() {
        let bytes = hex::decode(r[2].clone().unwrap()).unwrap();
        let c = segments(&bytes);
        let tags: Vec<&str> = c.iter().map(|s| s[0][0].as_str()).collect();
        assert_eq!(tags[..2], ["UNB", "UNH"], "{r:?}");
        assert!(tags.contains(&"UCI"), "{r:?}");
        let unt = c.iter().find(|s| s[0][0] == "UNT").unwrap();
        assert_eq!(at(unt, 1, 0), (c.len() - 2).to_string(), "{r:?}");
        assert_eq!(at(c.last().unwrap(), 2, 0), at(&c[0], 5, 0), "{r:?}");
        let path = site.path(&format!("contrl{k:04}.edi"));
        fs::write(&path, &bytes).unwrap();
        files.push(path);
    }
    let paths: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let inspected = crate::common::inspect_json(&paths).code(0).json();
    let interchanges: Vec<_> = inspected
        .iter()
        .filter(|l| l.get("messages").is_some())
        .collect();
    assert_eq!(interchanges.len(), rows.len());
    for i in interchanges {
        let messages = i["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1, "{i}");
        assert_eq!(messages[0]["type"], "CONTRL", "{i}");
    }
}

per_backend! {
    /// Exactly once under kill -9: ingest with --contrl always killed at random moments, then run
    /// to the end; then publish --kind contrl killed at random, then run to the end. Every
    /// interchange has one CONTRL, their control references are 1 to N with no gap and no
    /// repeat, and each CONTRL is one file. Each kill falls once the run has done something
    /// (a file archived, a CONTRL written), and counts as landing mid-work where the signal
    /// ended it and work was left (files in the drop folder, CONTRLs unpublished): at least
    /// three of the four kills of ingest and two of the three of publish must.
    fn contrls_survive_kill_9_once_each(site) {
        let mut synth = Synth::new(17);
        for f in 0..300 {
            let mut file = Vec::new();
            for k in 0..5 {
                file.extend(synth.interchange("KILLPARTNER", "HUB", &format!("F{f}K{k}"), 1, Layout::default()));
            }
            site.put(&format!("k{f:03}.edi"), &file);
        }
        // Started, killed `millis` after it has done something (`done` went up), reaped:
        // whether that landed mid-work (the signal ended it, and `left` is above zero after).
        let kill_after = |args: &[&str],
                          millis: u64,
                          done: &dyn Fn() -> usize,
                          left: &dyn Fn() -> i64| {
            use crate::common::StartExt;
            let before = done();
            let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("edi-inbox"))
                .arg("--db")
                .arg(site.db_arg())
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .start();
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while done() == before && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            std::thread::sleep(std::time::Duration::from_millis(millis));
            child.signal(libc::SIGKILL);
            let run = child.wait();
            let killed =
                std::os::unix::process::ExitStatusExt::signal(&run.status) == Some(libc::SIGKILL);
            let left = left();
            eprintln!("{}: killed by the signal: {killed}, {left} left", args[0]);
            killed && done() > before && left > 0
        };
        let drop = site.drop().to_string_lossy().into_owned();
        let archive = site.path("archive").to_string_lossy().into_owned();
        let ingest = [
            "ingest", "-q", "--batch", "10", "--contrl", "always", "--archive", &archive, &drop,
        ];
        let mut rng = Synth::new(5);
        let in_drop = || site.files_in("drop").len() as i64;
        let archived = || 300 - in_drop() as usize;
        let mut mid_work = 0;
        for _ in 0..4 {
            // Within a few batches of its first: a later kill found the work done on a loaded
            // machine (300 files in small batches still go by in well under a second).
            mid_work += usize::from(kill_after(&ingest, rng.below(40), &archived, &in_drop));
        }
        assert!(
            mid_work >= 3,
            "the kills of ingest must fall in the middle of the work: {mid_work} of 4 did"
        );
        site.cmd().args(ingest).assert().code(0);
        let n = site.stat("interchanges");
        assert_eq!(n, 1500);
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), n);
        assert_eq!(site.count("SELECT count(DISTINCT own_ref) FROM acknowledgements"), n);
        assert_eq!(
            site.count("SELECT max(CAST(own_ref AS BIGINT)) FROM acknowledgements"),
            n,
            "no reference skipped or reused"
        );
        // Once each: a file killed between its commit and its move, read again, is our own
        // redelivery, not the partner's, and is not answered again.
        let queued = site.count("SELECT count(*) FROM contrl_outbox");
        assert_eq!(queued, n, "one sending each");
        assert_eq!(
            site.count("SELECT count(*) FROM contrl_outbox WHERE send = 1"),
            n
        );
        let out = site.path("contrl-out");
        let to = format!("dir:{}", out.display());
        let publish = ["publish", "-q", "--kind", "contrl", "--batch", "20", "--to", to.as_str()];
        // Its files, not the hidden temporary ones being written.
        let written = || {
            site.files_in("contrl-out")
                .iter()
                .filter(|f| !f.starts_with('.'))
                .count()
        };
        let unpublished =
            || site.count("SELECT count(*) FROM contrl_outbox WHERE published_at IS NULL");
        let mut mid_work = 0;
        for _ in 0..3 {
            mid_work += usize::from(kill_after(&publish, rng.below(200), &written, &unpublished));
        }
        assert!(
            mid_work >= 2,
            "the kills of publish must fall in the middle of the work: {mid_work} of 3 did"
        );
        site.cmd().args(publish).assert().code(0);
        // A publisher killed mid-write left its hidden temporary file; the next run removed it.
        let files: Vec<String> = site.files_in("contrl-out");
        assert!(files.iter().all(|f| !f.starts_with('.')), "{files:?}");
        assert_eq!(files.len() as i64, queued, "one file per sending");
        let bodies: std::collections::BTreeSet<Vec<u8>> =
            files.iter().map(|f| fs::read(out.join(f)).unwrap()).collect();
        assert_eq!(bodies.len() as i64, n, "one CONTRL per interchange");
        assert_eq!(
            site.count("SELECT count(*) FROM contrl_outbox WHERE published_at IS NULL"),
            0
        );
    }
}

per_backend! {
    /// Issue 22, 4: a CONTRL answering an interchange in an 8-bit repertoire was written in
    /// UTF-8 (partner `MÜLLER` addressed as `MÃ\x9CLLER`). It is in the repertoire the subject
    /// declares, byte for byte as the partner sent its identification and reference, for each
    /// repertoire the parser decodes, as stored and as published.
    fn a_contrl_is_written_in_the_subjects_repertoire(site) {
        let cases: &[(&str, &[u8])] = &[
            ("UNOA", b"MUELLER"),
            ("UNOB", b"m\xfcller"),
            ("UNOC", b"M\xdcLLER"),
            ("UNOD", b"\xa3\xf3d\xbc"),
            ("UNOE", b"\xbc\xd0\xdb\xdb\xd5\xe0"),
            ("UNOF", b"\xe1\xe5\xf9"),
            ("UNOG", b"\xa6\xb6"),
            ("UNOH", b"\xa3\xb3"),
            ("UNOI", b"\xc7\xc8"),
            ("UNOJ", b"\xe0\xe1"),
            ("UNOK", b"\xd0\xdd\xfe"),
            ("UNOW", "Łódź".as_bytes()),
            ("UNOY", "MÜLLER 東京".as_bytes()),
            ("IATA", b"\xe9t\xe9"),
        ];
        for (n, (id, name)) in cases.iter().enumerate() {
            let mut data = format!("UNB+{id}:3+").into_bytes();
            data.extend_from_slice(name);
            data.extend_from_slice(format!(":ZZ+HUB+240101:1200+R{n}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+R{n}'").as_bytes());
            site.put(&format!("{id}.edi"), &data);
        }
        answer_all(&site).code(0);
        let out = site.path("contrl-out");
        let sent = site
            .cmd()
            .args(["publish", "--json", "--kind", "contrl", "--to"])
            .arg(format!("dir:{}", out.display()))
            .run();
        sent.code(0);
        let bodies: Vec<Vec<u8>> =
            site.files_in("contrl-out").iter().map(|f| fs::read(out.join(f)).unwrap()).collect();
        assert_eq!(bodies.len(), cases.len());
        for (n, (id, name)) in cases.iter().enumerate() {
            let mut unb = format!("UNB+{id}:3+HUB+").into_bytes();
            unb.extend_from_slice(name);
            unb.extend_from_slice(b":ZZ+");
            let mut uci = format!("UCI+R{n}+").into_bytes();
            uci.extend_from_slice(name);
            uci.extend_from_slice(b":ZZ+HUB+7'");
            let found = bodies.iter().find(|b| b.windows(uci.len()).any(|w| w == uci.as_slice()));
            let Some(body) = found else {
                panic!(
                    "{id}: no CONTRL holds {:?}; they are {:?}",
                    String::from_utf8_lossy(&uci),
                    bodies.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>()
                );
            };
            assert!(body.starts_with(&unb), "{id}: {}", String::from_utf8_lossy(body));
        }
    }
}

per_backend! {
    /// Issue 22, 4: CONTRL events did not count in `stats`, `list --status failed` or the
    /// `edi_inbox_outbox_*` metrics (11,000 waiting or 7 parked showed as 0, and the alerts
    /// could not fire for them). They count, by kind: waiting, then parked (a destination
    /// whose names are taken by folders refuses every one), in `stats`, `list` and the metrics.
    fn contrl_events_count_in_stats_list_and_metrics_by_kind(site) {
        for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
            let path = entry.unwrap().path();
            fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
        }
        answer_all(&site).code(0);
        let publish = |args: &[&str]| site.run(&["publish"].iter().chain(args).copied().collect::<Vec<_>>());
        let msgs = site.path("msg-out");
        publish(&["--kind", "message", "--to", &format!("dir:{}", msgs.display())]).code(0);
        let stats = site.json(&["stats", "--json"]).json();
        let s = &stats[0];
        assert_eq!(s["outbox_unpublished"], 7, "{s}");
        assert_eq!(s["outbox_kinds"]["contrl"]["unpublished"], 7, "{s}");
        assert_eq!(s["outbox_kinds"]["message"]["unpublished"], 0, "{s}");
        assert!(s["outbox_oldest_unpublished_age_seconds"].is_i64(), "{s}");
        let human = site.cmd().arg("stats").run().code(0).out();
        assert!(human.contains("outbox unpublished   7 (0 of messages, 7 CONTRLs)"), "{human}");

        // The ids of the CONTRL events, from a folder that takes them; then a folder whose
        // every such name is a folder already: each event refused, and parked at once.
        let probe = site.path("probe");
        let sent = publish(&["--kind", "contrl", "--json", "--to", &format!("dir:{}", probe.display())]).json();
        let ids: Vec<String> = sent
            .iter()
            .filter_map(|l| l["id"].as_str().map(String::from))
            .collect();
        assert_eq!(ids.len(), 7, "{sent:?}");
        site.sql("UPDATE contrl_outbox SET published_at = NULL");
        let blocked = site.path("blocked");
        for id in &ids {
            fs::create_dir_all(blocked.join(format!("{id}.edi"))).unwrap();
        }
        let metrics = site.path("publish.prom");
        publish(&[
            "--kind", "contrl", "--max-attempts", "1", "--to", &format!("dir:{}", blocked.display()),
            "--metrics-file", metrics.to_str().unwrap(),
        ]).code(3);
        let stats = site.json(&["stats", "--json"]).json();
        let s = &stats[0];
        assert_eq!((s["outbox_failed"].as_i64(), s["outbox_unpublished"].as_i64()), (Some(7), Some(0)), "{s}");
        assert_eq!(s["outbox_kinds"]["contrl"]["failed"], 7, "{s}");
        assert_eq!(s["outbox_kinds"]["message"]["failed"], 0, "{s}");
        let listed = site.json(&["list", "--status", "failed", "--json"]).json();
        assert_eq!(listed.len(), 7, "{listed:?}");
        for l in &listed {
            let error = l["error"].as_str().unwrap();
            assert!(error.starts_with("CONTRL ") && error.contains("not published"), "{l}");
            assert!(error.contains("is not a regular file (a folder)"), "{l}");
            assert!(l["sender"].is_string() && l["control_ref"].is_string(), "{l}");
        }
        let prom = fs::read_to_string(&metrics).unwrap();
        for want in [
            "edi_inbox_outbox_failed{kind=\"contrl\"} 7\n",
            "edi_inbox_outbox_failed{kind=\"message\"} 0\n",
            "edi_inbox_outbox_unpublished{kind=\"contrl\"} 0\n",
            "edi_inbox_outbox_unpublished{kind=\"message\"} 0\n",
            "edi_inbox_outbox_oldest_unpublished_age_seconds{kind=\"contrl\"} 0\n",
        ] {
            assert!(prom.contains(want), "{want} in {prom}");
        }
    }
}

/// Issue 22, 5: the human `published` line of a CONTRL event ended in an empty message
/// reference (`message   id ...`). It names the interchange the CONTRL answers and which
/// sending of it this is.
#[test]
fn a_contrl_events_line_names_what_it_answers() {
    let site = Site::new();
    site.put_sample("valid/two-interchanges.edi", "a.edi");
    answer_all(&site).code(0);
    let out = site
        .cmd()
        .args(["publish", "--kind", "contrl", "--to"])
        .arg(format!("dir:{}", site.path("out").display()))
        .run();
    let text = String::from_utf8_lossy(&out.stdout);
    out.code(0);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("published"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (line, answered) in lines.iter().zip(["A1", "A2"]) {
        assert!(
            line.contains(&format!("CONTRL answering ref {answered} (sending 1)  id ")),
            "{line}"
        );
        assert!(!line.contains("message "), "{line}");
    }
}

per_backend! {
    /// Issue 23: a CONTRL's syntax version (its UNB 0002) is stored with it: what publishes it
    /// says CONTRL:4:1 or CONTRL:D:3 from it, no longer from a look at its bytes. It is the
    /// subject's: 4 for the answer to a syntax 4 interchange, 1 to 3 for the others. The CONTRLs
    /// stored before migration 11 (SQLite) or 7 (PostgreSQL) are read once, whatever their
    /// separators: 4 where they are CONTRL:4:1, 3 (CONTRL:D:3) otherwise.
    fn a_contrls_syntax_version_is_stored_with_it(site) {
        for entry in fs::read_dir(crate::common::samples().join("valid")).unwrap() {
            let path = entry.unwrap().path();
            fs::copy(&path, site.drop().join(path.file_name().unwrap())).unwrap();
        }
        answer_all(&site).code(0);
        let versions = || {
            site.rows("SELECT control_ref, syntax_version FROM acknowledgements ORDER BY control_ref")
                .into_iter()
                .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
                .collect::<Vec<_>>()
        };
        let stored = versions();
        assert_eq!(stored.len(), 7);
        for (control_ref, version) in &stored {
            if control_ref == "DES0007" {
                assert_eq!(version, "4");
            } else {
                assert!(["1", "2", "3"].contains(&version.as_str()), "{control_ref}: {version}");
            }
        }
        assert!(stored.iter().any(|(_, v)| v == "1"), "{stored:?}");
        // As an older inbox had them: no column, then brought up to date by the next run.
        if site.is_postgres() {
            site.sql(
                "ALTER TABLE acknowledgements DROP COLUMN syntax_version;
                 ALTER TABLE inbox DROP CONSTRAINT inbox_key, DROP COLUMN standard,
                     ADD CONSTRAINT inbox_key PRIMARY KEY (sender, recipient, control_ref);
                 ALTER TABLE interchanges DROP COLUMN standard;
                 CREATE INDEX interchanges_key ON interchanges (sender, recipient, control_ref);
                 ALTER TABLE sightings DROP COLUMN standard;
                 CREATE INDEX sightings_key ON sightings (sender, recipient, control_ref);
                 ALTER TABLE acknowledgements DROP COLUMN standard;
                 CREATE INDEX acknowledgements_key ON acknowledgements
                     (sender, recipient, control_ref);
                 ALTER TABLE rejections DROP COLUMN standard;
                 CREATE INDEX rejections_key ON rejections (sender, recipient, control_ref);
                 ALTER TABLE rejected_files DROP COLUMN sending;
                 DROP TABLE message_effects; DROP TABLE refusals; DROP TABLE effect_migrations;
                 DROP FUNCTION message_segments(jsonb);
                 DROP TABLE refusal_outbox; DROP TABLE answer_outbox; DROP TABLE consumer_positions;
                 DROP TABLE transport_messages;
                 ALTER TABLE deliveries DROP COLUMN record_key;
                 ALTER TABLE deliveries DROP COLUMN produced_at;
                 ALTER TABLE interchanges DROP COLUMN source_path, DROP COLUMN host,
                     DROP COLUMN moved_to;
                 ALTER TABLE sightings DROP COLUMN source_path, DROP COLUMN host,
                     DROP COLUMN moved_to;
                 DELETE FROM schema_migrations WHERE version >= 7",
            );
        } else {
            site.sql(&format!(
                "ALTER TABLE acknowledgements DROP COLUMN syntax_version; {}
                 PRAGMA user_version = 11",
                crate::common::UNDO_POSITIONS
            ));
        }
        answer_all(&site).code(0);
        // Brought up to date, every key it held is EDIFACT's (migration 16, 19 on SQLite).
        assert!(site.count("SELECT count(*) FROM inbox") > 0);
        assert_eq!(
            site.count("SELECT count(*) FROM inbox WHERE standard <> 'edifact'")
                + site.count("SELECT count(*) FROM acknowledgements WHERE standard <> 'edifact'"),
            0
        );
        let v4 = |all: Vec<(String, String)>| -> Vec<(String, bool)> {
            all.into_iter().map(|(r, v)| (r, v == "4")).collect()
        };
        assert_eq!(v4(versions()), v4(stored));
        assert!(versions().iter().all(|(r, v)| v == if r == "DES0007" { "4" } else { "3" }));
    }
}

per_backend! {
    /// Issue 41: the answers held are counted by kind in `stats` and the ingest metrics: a
    /// CONTRL, and X12's TA1, 997 and 999, each positive or negative. An X12 answer counts under
    /// each document it holds (a TA1 rejecting an interchange and the 997 rejecting its group
    /// are one answer, counted as a negative TA1 and a negative 997).
    fn answers_count_by_kind_in_stats_and_the_ingest_metrics(site) {
        site.put_sample("valid/invoic-d96a-unoc-crlf.edi", "invoic.edi");
        // 00401, ISA14 0: a 997 accepting it.
        site.put_sample("x12/850-purchase-order-00401.x12", "po.x12");
        // 00501, ISA14 1: a TA1 accepting it and a 999.
        site.put_sample("x12/810-856-00501-wrapped-80-bom.x12", "asn.x12");
        // 00401, SE01 wrong: a TA1 rejecting it and a 997 rejecting its group.
        site.put_sample("x12/broken-se-count-wrong.x12", "bad.x12");
        let metrics = site.path("ingest.prom");
        site.cmd()
            .args(["ingest", "-q", "--contrl", "always", "--metrics-file"])
            .arg(&metrics)
            .arg(site.drop())
            .run()
            .code(3);
        let stats = site.json(&["stats", "--json"]).json();
        let held: Vec<(String, String, i64, i64)> = stats[0]["acknowledgements"]
            .as_array()
            .unwrap_or_else(|| panic!("no acknowledgements in {}", stats[0]))
            .iter()
            .map(|a| {
                (
                    a["standard"].as_str().unwrap().to_string(),
                    a["kind"].as_str().unwrap().to_string(),
                    a["positive"].as_i64().unwrap(),
                    a["negative"].as_i64().unwrap(),
                )
            })
            .collect();
        let want = |s: &str, k: &str, p: i64, n: i64| (s.to_string(), k.to_string(), p, n);
        assert_eq!(
            held,
            [
                want("edifact", "CONTRL", 1, 0),
                want("x12", "TA1", 1, 1),
                want("x12", "997", 1, 1),
                want("x12", "999", 1, 0),
            ],
            "{}",
            stats[0]
        );
        let human = site.cmd().arg("stats").run().code(0).out();
        assert!(
            human.contains("answers held         CONTRL 1, TA1 2 (1 negative), 997 2 (1 negative), 999 1\n"),
            "{human}"
        );
        let prom = fs::read_to_string(&metrics).unwrap();
        for want in [
            "edi_inbox_acknowledgements{answer=\"positive\",kind=\"CONTRL\",standard=\"edifact\"} 1\n",
            "edi_inbox_acknowledgements{answer=\"negative\",kind=\"CONTRL\",standard=\"edifact\"} 0\n",
            "edi_inbox_acknowledgements{answer=\"negative\",kind=\"TA1\",standard=\"x12\"} 1\n",
            "edi_inbox_acknowledgements{answer=\"positive\",kind=\"997\",standard=\"x12\"} 1\n",
            "edi_inbox_acknowledgements{answer=\"positive\",kind=\"999\",standard=\"x12\"} 1\n",
            "edi_inbox_acknowledgements{answer=\"negative\",kind=\"999\",standard=\"x12\"} 0\n",
        ] {
            assert!(prom.contains(want), "{want} in {prom}");
        }
    }
}

per_backend! {
    /// A rejected interchange is answered once per sending, as a duplicate is: the same file
    /// read again (no move between the runs, or a crash before it), or by its name from another
    /// folder, is our own redelivery and gets no second, differently numbered rejection; the
    /// same bytes sent again under another name are the partner sending again, and are
    /// answered. Both standards: a CONTRL (UCI 4) and a TA1 (TA104 `R`).
    fn a_rejected_input_read_again_is_not_answered_again(site) {
        site.put_sample("broken/unt-count-wrong.edi", "bad.edi");
        site.put_sample("x12/broken-se-count-wrong.x12", "bad.x12");
        let answers = |lines: &[serde_json::Value]| -> Vec<(String, Option<String>)> {
            let mut a: Vec<_> = lines
                .iter()
                .filter(|l| l["status"] == "rejected")
                .map(|l| {
                    let file = l["file"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
                    (file, l["contrl"].as_str().map(str::to_string))
                })
                .collect();
            a.sort();
            a
        };
        let first = answers(&site.ingest_json(&["--contrl", "always"]).code(3).json());
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(first.iter().all(|(_, own)| own.is_some()), "each rejection answered: {first:?}");
        let held = site.count("SELECT count(*) FROM acknowledgements");
        assert_eq!(held, 2, "one answer each");

        let again = answers(&site.ingest_json(&["--contrl", "always"]).code(3).json());
        assert_eq!(again.len(), 2, "still rejected: {again:?}");
        assert!(
            again.iter().all(|(_, own)| own.is_none()),
            "the same files read again are answered again: {again:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), held, "no answer added");
        assert_eq!(
            site.count("SELECT max(times_seen) FROM rejected_files"),
            2,
            "each file counted as seen twice"
        );

        // The same files in another folder (reprocessed from the quarantine unchanged, another
        // host's mount of the drop): the same sending, not answered.
        let other = site.path("other");
        fs::create_dir_all(&other).unwrap();
        for name in ["bad.edi", "bad.x12"] {
            fs::copy(site.drop().join(name), other.join(name)).unwrap();
        }
        let run = site
            .cmd()
            .args(["ingest", "--json", "--contrl", "always"])
            .arg(&other)
            .run();
        let elsewhere = answers(&run.code(3).json());
        assert_eq!(elsewhere.len(), 2, "{elsewhere:?}");
        assert!(
            elsewhere.iter().all(|(_, own)| own.is_none()),
            "the same sending from another folder is answered again: {elsewhere:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), held, "no answer added");

        // The partner sends the same broken bytes again, in a file of another name.
        fs::remove_file(site.drop().join("bad.edi")).unwrap();
        fs::remove_file(site.drop().join("bad.x12")).unwrap();
        site.put_sample("broken/unt-count-wrong.edi", "bad-again.edi");
        site.put_sample("x12/broken-se-count-wrong.x12", "bad-again.x12");
        let resent = answers(&site.ingest_json(&["--contrl", "always"]).code(3).json());
        assert!(
            resent.iter().all(|(_, own)| own.is_some()),
            "the partner's resend is answered: {resent:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), held + 2);
        let own: Vec<&String> = first.iter().chain(&resent).filter_map(|(_, o)| o.as_ref()).collect();
        let mut distinct = own.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "each answer its own reference: {own:?}");
    }
}

per_backend! {
    /// The answer that rejects an interchange as a duplicate (a drift; a duplicate under
    /// `--contrl-duplicates reject`) goes out once per sending, as every other answer does: the
    /// same file read again queues no second rejection under a new control reference of ours.
    /// Both standards: UCI 4/26 and TA1 `R`/`025`.
    fn a_rejection_as_a_duplicate_is_answered_once_per_sending(site) {
        let sample = |name: &str| fs::read(crate::common::samples().join(name)).unwrap();
        let orders = sample("valid/orders-d01b-no-una.edi");
        let po = sample("x12/850-purchase-order-00401.x12");
        site.put("orders.edi", &orders);
        site.put("po.x12", &po);
        site.ingest_json(&["--contrl", "always"]).code(0);
        let held = site.count("SELECT count(*) FROM acknowledgements");
        assert_eq!(held, 2);
        // The same keys with other content, in files of their own.
        let drifted = |bytes: &[u8], from: &str, to: &str| {
            String::from_utf8(bytes.to_vec()).unwrap().replace(from, to).into_bytes()
        };
        site.put("orders-changed.edi", &drifted(&orders, "PO-4712", "PO-4713"));
        site.put("po-changed.x12", &drifted(&po, "PO-77120", "PO-77121"));
        let contrls = |lines: &[serde_json::Value], status: &str| -> Vec<Option<String>> {
            lines
                .iter()
                .filter(|l| l["status"] == status)
                .map(|l| l["contrl"].as_str().map(str::to_string))
                .collect()
        };
        let first = site.ingest_json(&["--contrl", "always"]).code(3).json();
        let drift = contrls(&first, "drift");
        assert_eq!(drift.len(), 2, "{first:?}");
        assert!(drift.iter().all(Option::is_some), "each drift rejected: {first:?}");
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), held + 2);

        let again = site.ingest_json(&["--contrl", "always"]).code(3).json();
        let drift = contrls(&again, "drift");
        assert_eq!(drift.len(), 2, "{again:?}");
        assert!(
            drift.iter().all(Option::is_none),
            "a drift read again is rejected again: {again:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), held + 2);

        // Under --contrl-duplicates reject: a copy under another name is rejected once, and
        // not again when read again.
        for name in ["orders-changed.edi", "po-changed.x12"] {
            fs::remove_file(site.drop().join(name)).unwrap();
        }
        site.put("orders-copy.edi", &orders);
        site.put("po-copy.x12", &po);
        let args = ["--contrl", "always", "--contrl-duplicates", "reject"];
        let lines = site.ingest_json(&args).json();
        let copies: Vec<_> = lines
            .iter()
            .filter(|l| l["file"].as_str().is_some_and(|f| f.contains("-copy.")))
            .map(|l| l["contrl"].as_str().map(str::to_string))
            .collect();
        assert_eq!(copies.len(), 2, "{lines:?}");
        assert!(copies.iter().all(Option::is_some), "each copy rejected: {lines:?}");
        let rejected = site.count("SELECT count(*) FROM acknowledgements");
        assert_eq!(rejected, held + 4);
        let lines = site.ingest_json(&args).json();
        assert!(
            lines.iter().all(|l| l["contrl"].is_null()),
            "copies read again are rejected again: {lines:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), rejected);
    }
}

per_backend! {
    /// A broken copy rejected (UCI 4, TA1 `R`), then the corrected one applied under the same
    /// key: a duplicate of it gets the applied copy's answer again, never the broken copy's
    /// rejection. The corrected file read again (our own redelivery) queues nothing; the
    /// partner's copy under another name gets the applied copy's answer. Both standards.
    fn a_duplicate_gets_the_applied_copys_answer_not_a_rejection(site) {
        let sample = |name: &str| fs::read(crate::common::samples().join(name)).unwrap();
        let orders = sample("valid/orders-d01b-no-una.edi");
        let po = sample("x12/850-purchase-order-00401.x12");
        let broken = |bytes: &[u8], from: &str, to: &str| {
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            assert!(text.contains(from), "{from}");
            text.replace(from, to).into_bytes()
        };
        // A wrong segment count (UNT 0074, SE01): the envelope is read, the key is known.
        site.put("orders-broken.edi", &broken(&orders, "UNT+10+", "UNT+9+"));
        site.put("po-broken.x12", &broken(&po, "SE*10*", "SE*9*"));
        let args = ["--contrl", "always"];
        let lines = site.ingest_json(&args).code(3).json();
        let statuses = |lines: &[serde_json::Value]| -> Vec<String> {
            lines.iter().filter_map(|l| l["status"].as_str().map(str::to_string)).collect()
        };
        let answers = |lines: &[serde_json::Value], part: &str| -> Vec<Option<String>> {
            lines
                .iter()
                .filter(|l| l["file"].as_str().is_some_and(|f| f.contains(part)))
                .map(|l| l["contrl"].as_str().map(str::to_string))
                .collect()
        };
        let rejections = answers(&lines, "-broken.");
        assert_eq!(rejections.len(), 2, "{lines:?}");
        assert!(rejections.iter().all(Option::is_some), "each broken copy answered: {lines:?}");
        for name in ["orders-broken.edi", "po-broken.x12"] {
            fs::remove_file(site.drop().join(name)).unwrap();
        }
        site.put("orders.edi", &orders);
        site.put("po.x12", &po);
        let lines = site.ingest_json(&args).code(0).json();
        assert_eq!(statuses(&lines), ["new", "new"], "{lines:?}");
        let applied: Vec<Option<String>> = lines
            .iter()
            .filter(|l| l["status"] == "new")
            .map(|l| l["contrl"].as_str().map(str::to_string))
            .collect();
        assert!(applied.iter().all(Option::is_some), "{lines:?}");
        let queued = site.count("SELECT count(*) FROM contrl_outbox");
        assert_eq!(queued, 4);

        // The same files read again: our own redelivery, nothing queued (the broken copy's
        // rejection was queued again for them).
        let lines = site.ingest_json(&args).code(0).json();
        assert_eq!(statuses(&lines), ["duplicate", "duplicate"], "{lines:?}");
        assert!(
            lines.iter().all(|l| l["contrl"].is_null()),
            "the applied file read again is answered again: {lines:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), queued);

        // The partner's copies under other names: the applied copy's answer again, not the
        // rejection of the broken one.
        site.put("orders-again.edi", &orders);
        site.put("po-again.x12", &po);
        let lines = site.ingest_json(&args).code(0).json();
        let mut again = answers(&lines, "-again.");
        again.sort();
        let mut want = applied.clone();
        want.sort();
        assert_eq!(
            again, want,
            "a duplicate gets the applied copy's answer ({applied:?}), not the broken copy's \
             rejection ({rejections:?}): {lines:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), queued + 2);
    }
}

per_backend! {
    /// A key purged and applied again from another file gets an answer of its own; a duplicate
    /// of it then gets that answer again, not the one of the copy applied before the purge: the
    /// applied file read again queues nothing, nor does the file answered before the purge,
    /// and the partner's copy under another name gets the new copy's answer. Both standards.
    fn after_a_purge_a_duplicate_gets_the_new_copys_answer(site) {
        let sample = |name: &str| fs::read(crate::common::samples().join(name)).unwrap();
        let files = [
            ("orders", ".edi", sample("valid/orders-d01b-no-una.edi")),
            ("po", ".x12", sample("x12/850-purchase-order-00401.x12")),
        ];
        let args = ["--contrl", "always"];
        let answers = |lines: &[serde_json::Value], part: &str| -> Vec<String> {
            let mut a: Vec<String> = lines
                .iter()
                .filter(|l| l["file"].as_str().is_some_and(|f| f.contains(part)))
                .filter_map(|l| l["contrl"].as_str().map(str::to_string))
                .collect();
            a.sort();
            a
        };
        for (name, ext, bytes) in &files {
            site.put(&format!("{name}-1{ext}"), bytes);
        }
        let old = answers(&site.ingest_json(&args).code(0).json(), "-1.");
        assert_eq!(old.len(), 2);
        site.sql("UPDATE inbox SET received_at = '2000-01-01T00:00:00.000Z'");
        site.json(&["purge", "--days", "30", "--json"]).code(0);
        for (name, ext, bytes) in &files {
            fs::remove_file(site.drop().join(format!("{name}-1{ext}"))).unwrap();
            site.put(&format!("{name}-2{ext}"), bytes);
        }
        let lines = site.ingest_json(&args).code(0).json();
        let new = answers(&lines, "-2.");
        assert_eq!(new.len(), 2, "each copy applied again is answered: {lines:?}");
        assert!(new.iter().all(|a| !old.contains(a)), "{old:?} {new:?}");
        let queued = site.count("SELECT count(*) FROM contrl_outbox");

        let lines = site.ingest_json(&args).code(0).json();
        assert_eq!(
            answers(&lines, "-2."),
            Vec::<String>::new(),
            "the applied files read again are answered again (with the answer of before the \
             purge?): old {old:?}, new {new:?}: {lines:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), queued);

        // The files of before the purge again: those sendings were answered (with the answer
        // of before), and are not answered a second time.
        for (name, ext, bytes) in &files {
            site.put(&format!("{name}-1{ext}"), bytes);
        }
        let lines = site.ingest_json(&args).code(0).json();
        assert_eq!(
            answers(&lines, "-1."),
            Vec::<String>::new(),
            "a sending answered before the purge is answered again: {lines:?}"
        );
        assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), queued);
        for (name, ext, _) in &files {
            fs::remove_file(site.drop().join(format!("{name}-1{ext}"))).unwrap();
        }

        for (name, ext, bytes) in &files {
            site.put(&format!("{name}-3{ext}"), bytes);
        }
        let lines = site.ingest_json(&args).code(0).json();
        assert_eq!(
            answers(&lines, "-3."),
            new,
            "the partner's copy gets the new copy's answer, not the one of before the purge \
             ({old:?}): {lines:?}"
        );
    }
}
