//! ANSI X12 through the real binary (issue 41): an X12 interchange is decided as an EDIFACT one
//! is (new, then a duplicate, a drift never applied, a rejection naming its byte), keyed by
//! ISA06, ISA08 and ISA13 under its own standard, and a file of both standards is read by each
//! reader in turn.

use crate::common::RunExt;
use crate::common::site::Site;

const PO: &str = "x12/850-purchase-order-00401.x12";
const MIXED: &str = "x12/mixed-edifact-then-x12.edi";

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(crate::common::samples().join(name)).unwrap()
}

/// The outcome lines of an `ingest --json` run (its summary left out).
fn outcomes(run: &crate::common::Run) -> Vec<serde_json::Value> {
    run.json()
        .into_iter()
        .filter(|l| l.get("summary").is_none())
        .collect()
}

#[test]
fn an_x12_interchange_is_new_once_then_a_duplicate_and_its_drift_is_never_applied() {
    let site = Site::new();
    site.put("po.x12", &sample(PO));
    let first = site.ingest_json(&[]);
    first.code(0);
    let lines = outcomes(&first);
    assert_eq!(lines.len(), 1, "{first}");
    let o = &lines[0];
    assert_eq!(o["status"], "new", "{o}");
    assert_eq!(o["standard"], "x12", "{o}");
    assert_eq!(
        (&o["sender"], &o["recipient"], &o["control_ref"]),
        (
            &serde_json::json!("ACMERETAIL"),
            &serde_json::json!("5551234567"),
            &serde_json::json!("000001001")
        ),
        "ISA06, ISA08 and ISA13 are the key: {o}"
    );
    assert_eq!(
        site.count("SELECT count(*) FROM interchanges WHERE standard = 'x12'"),
        1
    );
    assert_eq!(
        site.count(
            "SELECT count(*) FROM messages WHERE message_type = '850' AND reference = '0001' AND version = '004010' AND group_ref = '1001'"
        ),
        1,
        "each transaction set is a row: ST01 its type, ST02 its reference, GS08 its version, GS06 its group"
    );

    // The same bytes again, and again rewrapped at 80 columns by a transport: a duplicate,
    // nothing written.
    let po = sample(PO);
    let flat: Vec<u8> = po.iter().copied().filter(|b| *b != b'\n').collect();
    let wrapped: Vec<u8> = flat.chunks(80).collect::<Vec<_>>().join(&b"\r\n"[..]);
    site.put("po.x12", &po);
    site.put("po-wrapped.x12", &wrapped);
    let again = site.ingest_json(&[]);
    again.code(0);
    let lines = outcomes(&again);
    assert_eq!(lines.len(), 2, "{again}");
    for o in &lines {
        assert_eq!(o["status"], "duplicate", "{o}");
        assert_eq!(o["standard"], "x12", "{o}");
    }
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);

    // The same key with other content: drift, kept, never applied.
    let drifted = String::from_utf8(po)
        .unwrap()
        .replace("PO-77120", "PO-99999");
    std::fs::remove_file(site.drop().join("po.x12")).unwrap();
    std::fs::remove_file(site.drop().join("po-wrapped.x12")).unwrap();
    site.put("po-changed.x12", drifted.as_bytes());
    let drift = site.ingest_json(&[]);
    drift.code(3);
    let lines = outcomes(&drift);
    assert_eq!(lines[0]["status"], "drift", "{drift}");
    assert_eq!(lines[0]["standard"], "x12", "{drift}");
    assert_eq!(site.count("SELECT count(*) FROM interchanges"), 1);
    assert_eq!(
        site.count("SELECT count(*) FROM messages WHERE message_type = '850'"),
        1
    );

    // Its drifted copy beside the applied one, segment by segment at X12's own terminator:
    // the BEG alone changed (segment 4: ISA, GS, ST, BEG).
    let diff = site.run(&[
        "show",
        "ACMERETAIL",
        "5551234567",
        "000001001",
        "--diff",
        "--json",
    ]);
    diff.code(0);
    let copy = &diff.json()[0];
    assert_eq!(copy["changed_segments"], 1, "{diff}");
    let marked: Vec<(String, i64, String)> = copy["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["mark"] == "-" || l["mark"] == "+")
        .map(|l| {
            (
                l["mark"].as_str().unwrap().to_string(),
                l["segment_number"].as_i64().unwrap(),
                l["segment"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        marked,
        [
            (
                "-".to_string(),
                4,
                "BEG*00*SA*PO-77120**20261201~".to_string()
            ),
            (
                "+".to_string(),
                4,
                "BEG*00*SA*PO-99999**20261201~".to_string()
            ),
        ],
        "{diff}"
    );

    // list and show name the standard.
    let list = site.json(&["list", "--json"]);
    list.code(0);
    assert!(list.json().iter().all(|l| l["standard"] == "x12"), "{list}");
    let show = site.run(&["show", "ACMERETAIL", "5551234567", "000001001"]);
    show.code(0);
    assert!(show.out().contains("standard     x12"), "{show}");
}

#[test]
fn a_broken_x12_interchange_is_rejected_at_its_byte_with_its_segment_quoted() {
    let site = Site::new();
    site.put("bad.x12", &sample("x12/broken-good-then-iea-reference.x12"));
    let run = site.ingest_json(&[]);
    run.code(3);
    let lines = outcomes(&run);
    assert_eq!(lines.len(), 2, "{run}");
    assert_eq!(lines[0]["status"], "new", "the good one before is read");
    let r = &lines[1];
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["offset"], 467, "{r}");
    let error = r["error"].as_str().unwrap();
    assert!(
        error.contains("IEA at byte 467") && error.contains("IEA02 `000006070`"),
        "{error}"
    );
    // The human line quotes the segment by X12's own delimiters.
    let site = Site::new();
    site.put("bad.x12", &sample("x12/broken-se-count-wrong.x12"));
    let human = site.run(&["ingest", site.drop().to_str().unwrap()]);
    human.code(3);
    let out = human.out();
    assert!(out.contains("SE at byte 236 (segment 6)"), "{out}");
    assert!(out.contains("\n           SE*5*0001~\n"), "{out}");
}

#[test]
fn a_file_of_both_standards_decides_each_interchange_under_its_own() {
    let site = Site::new();
    site.put("mixed.edi", &sample(MIXED));
    let run = site.ingest_json(&[]);
    run.code(0);
    let got: Vec<(String, String, u64)> = outcomes(&run)
        .iter()
        .map(|o| {
            (
                o["standard"].as_str().unwrap().to_string(),
                o["control_ref"].as_str().unwrap().to_string(),
                o["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("edifact".to_string(), "MIX0001".to_string(), 1),
            ("x12".to_string(), "000003003".to_string(), 1),
        ],
        "{run}"
    );
    // An X12 interchange and an EDIFACT one share a sender and recipient: two keys.
    assert_eq!(
        site.count("SELECT count(DISTINCT standard) FROM interchanges WHERE sender = 'HUBSENDER'"),
        2
    );
}

const WRAPPED: &str = "x12/810-856-00501-wrapped-80-bom.x12";

/// The answer stored for a key, as `show --contrl` prints it (the bytes alone).
fn answer_of(site: &Site, sender: &str, recipient: &str, control_ref: &str) -> String {
    let run = site.run(&["show", sender, recipient, control_ref, "--contrl"]);
    run.code(0);
    String::from_utf8(run.stdout.clone()).unwrap()
}

/// The segments of an answer, each split at `*`.
fn segments_of(answer: &str) -> Vec<Vec<&str>> {
    answer
        .split('~')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.split('*').collect())
        .collect()
}

/// The Python with pyx12; `None` (with a notice) where none is named, unless required
/// (`EDI_INBOX_REQUIRE_PYX12`, which `.ci/run` sets).
fn pyx12_python() -> Option<String> {
    match std::env::var("EDI_INBOX_PYX12_PYTHON") {
        Ok(p) if std::path::Path::new(&p).exists() => Some(p),
        _ => {
            crate::common::require(
                "EDI_INBOX_PYX12_PYTHON names no Python with pyx12",
                "EDI_INBOX_REQUIRE_PYX12",
            );
            None
        }
    }
}

/// `answer` read back by pyx12 (`tests/x12/pyx12_read.py`), an independent reader that takes a
/// TA1 outside any group and checks the envelope's control numbers and counts as it reads: no
/// error of its own, and each segment and element as [`segments_of`] reads them here.
fn pyx12_reads(answer: &str) {
    let Some(python) = pyx12_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("answer.x12");
    std::fs::write(&path, answer).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/x12/pyx12_read.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyx12 could not read the answer: {}\n{answer}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        read["errors"],
        serde_json::json!([]),
        "pyx12 finds the envelope wrong: {answer}"
    );
    let theirs: Vec<Vec<String>> = serde_json::from_value(read["segments"].clone()).unwrap();
    let ours: Vec<Vec<String>> = segments_of(answer)
        .iter()
        .map(|s| s.iter().map(|e| e.to_string()).collect())
        .collect();
    assert_eq!(theirs, ours, "pyx12 reads the answer otherwise: {answer}");
}

#[test]
fn isa14_asks_for_a_ta1_which_answers_in_the_partners_version_and_delimiters() {
    let site = Site::new();
    // ISA14 `1`, 00501, ISA15 `T`, `:` components, `^` repetitions, the lines wrapped at 80
    // columns: answered under the default --contrl requested by a TA1 alone.
    site.put("inv.x12", &sample(WRAPPED));
    let run = site.ingest_json(&[]);
    run.code(0);
    let o = &outcomes(&run)[0];
    assert_eq!(o["status"], "new", "{o}");
    assert_eq!(
        o["contrl"], "000000001",
        "our first ISA13 to this partner: {o}"
    );
    let human = site.run(&["list", "--contrl"]);
    assert!(human.out().contains("positive (A accepted)"), "{human}");
    let answer = answer_of(&site, "123456789", "HUBRECEIVER", "000002002");
    let segs = segments_of(&answer);
    let tags: Vec<&str> = segs.iter().map(|s| s[0]).collect();
    assert_eq!(tags, ["ISA", "TA1", "IEA"], "{answer}");
    let isa = &segs[0];
    assert_eq!(isa.len(), 17, "{answer}");
    assert_eq!(
        (isa[5], isa[6], isa[7], isa[8]),
        ("ZZ", "HUBRECEIVER    ", "01", "123456789      "),
        "ISA05..ISA08 swapped, at their widths: {answer}"
    );
    assert_eq!(isa[11], "^", "ISA11 the partner's repetition separator");
    assert_eq!(isa[12], "00501", "ISA12 the partner's version");
    assert_eq!(isa[13], "000000001");
    assert_eq!((isa[14], isa[15], isa[16]), ("0", "T", ":"), "{answer}");
    assert_eq!(
        answer.find('~'),
        Some(105),
        "the ISA is 106 bytes: {answer}"
    );
    assert_eq!(
        segs[1],
        ["TA1", "000002002", "261202", "1415", "A", "000"],
        "{answer}"
    );
    assert_eq!(segs[2], ["IEA", "0", "000000001"]);
    pyx12_reads(&answer);
    // Our own reader takes it, the TA1 outside any group.
    let read: Vec<_> = edi_inbox::x12::interchanges(answer.as_bytes()).collect();
    let read = read[0].as_ref().unwrap();
    assert_eq!(read.outside, ["TA1"]);

    // The 00401 purchase order does not ask (ISA14 `0`): no answer under requested.
    site.put("po.x12", &sample(PO));
    let run = site.ingest_json(&[]);
    let po = outcomes(&run)
        .into_iter()
        .find(|o| o["control_ref"] == "000001001")
        .unwrap();
    assert!(po["contrl"].is_null(), "{po}");
    assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 1);
}

#[test]
fn contrl_always_answers_each_group_with_a_997_or_999_that_another_reader_takes() {
    let site = Site::new();
    site.put("po.x12", &sample(PO));
    site.put("inv.x12", &sample(WRAPPED));
    let run = site.ingest_json(&["--contrl", "always"]);
    run.code(0);
    assert_eq!(
        outcomes(&run)
            .iter()
            .filter(|o| o["contrl"].is_string())
            .count(),
        2,
        "{run}"
    );

    // 00401: a 997, no TA1 (ISA14 `0`).
    let po = answer_of(&site, "ACMERETAIL", "5551234567", "000001001");
    let segs = segments_of(&po);
    let tags: Vec<&str> = segs.iter().map(|s| s[0]).collect();
    assert_eq!(
        tags,
        [
            "ISA", "GS", "ST", "AK1", "AK2", "AK5", "AK9", "SE", "GE", "IEA"
        ],
        "{po}"
    );
    assert_eq!(
        segs[1][..4],
        ["GS", "FA", "5551234567", "ACMERETAIL"],
        "GS02/GS03 swapped: {po}"
    );
    assert_eq!(segs[1][8], "004010", "{po}");
    assert_eq!(segs[2], ["ST", "997", "0001"]);
    assert_eq!(
        segs[3],
        ["AK1", "PO", "1001"],
        "AK1: GS01 and GS06 answered"
    );
    assert_eq!(
        segs[4],
        ["AK2", "850", "0001"],
        "AK2: ST01 and ST02 answered"
    );
    assert_eq!(segs[5], ["AK5", "A"]);
    assert_eq!(segs[6], ["AK9", "A", "1", "1", "1"]);
    assert_eq!(segs[7], ["SE", "6", "0001"], "SE01 counts ST..SE");
    assert_eq!(segs[8][..2], ["GE", "1"]);
    assert_eq!(segs[9], ["IEA", "1", segs[0][13]]);
    pyx12_reads(&po);
    // The edi crate, an independent reader, takes it as one 997 from the receiver.
    let doc = edi::parse(&po).expect("the edi crate reads our 997");
    let i = &doc.interchanges[0];
    assert_eq!(
        (i.sender_id.trim(), i.receiver_id.trim()),
        ("5551234567", "ACMERETAIL")
    );
    let g = &i.functional_groups[0];
    assert_eq!(g.functional_identifier_code, "FA");
    let t = &g.transactions[0];
    assert_eq!(t.transaction_code, "997");
    let ak9 = t
        .segments
        .iter()
        .find(|s| s.segment_abbreviation == "AK9")
        .unwrap();
    assert_eq!(
        ak9.elements.iter().map(|e| e.as_ref()).collect::<Vec<_>>(),
        ["A", "1", "1", "1"]
    );

    // 00501 with ISA14 `1`: the TA1, then a 999 per group (an 810's, two 856s', in one FA
    // group).
    let inv = answer_of(&site, "123456789", "HUBRECEIVER", "000002002");
    pyx12_reads(&inv);
    let segs = segments_of(&inv);
    let tags: Vec<&str> = segs.iter().map(|s| s[0]).collect();
    assert_eq!(
        tags,
        [
            "ISA", "TA1", "GS", "ST", "AK1", "AK2", "IK5", "AK9", "SE", "ST", "AK1", "AK2", "IK5",
            "AK2", "IK5", "AK9", "SE", "GE", "IEA"
        ],
        "{inv}"
    );
    assert_eq!(segs[2][8], "005010X231A1", "{inv}");
    assert_eq!(segs[3], ["ST", "999", "0001", "005010X231A1"]);
    assert_eq!(segs[4], ["AK1", "IN", "21", "005010"]);
    assert_eq!(segs[9], ["ST", "999", "0002", "005010X231A1"]);
    assert_eq!(segs[10], ["AK1", "SH", "22", "005010"]);
    assert_eq!(
        segs[15],
        ["AK9", "A", "2", "2", "2"],
        "the 856 group's two sets"
    );
    assert_eq!(segs[16], ["SE", "8", "0002"]);
    assert_eq!(segs[17][..2], ["GE", "2"]);
    let read: Vec<_> = edi_inbox::x12::interchanges(inv.as_bytes()).collect();
    let read = read[0]
        .as_ref()
        .expect("our reader checks every count and number");
    assert_eq!(read.sets.len(), 2);

    // Published as the partner's X12, not as EDIFACT.
    let out = site.path("sent");
    site.cmd()
        .args(["publish", "-q", "--kind", "contrl", "--to"])
        .arg(format!("dir:{}", out.display()))
        .assert()
        .code(0);
    let mut sent: Vec<String> = site
        .files_in("sent")
        .iter()
        .map(|f| std::fs::read_to_string(out.join(f)).unwrap())
        .collect();
    sent.sort();
    let mut want = vec![po.clone(), inv.clone()];
    want.sort();
    assert_eq!(sent, want, "the answers sent are the ones stored");
}

#[test]
fn an_x12_resend_gets_the_first_answer_again_and_a_drift_a_ta1_rejecting_it() {
    let site = Site::new();
    site.put("po.x12", &sample(PO));
    site.ingest_json(&["--contrl", "always"]).code(0);
    let first = answer_of(&site, "ACMERETAIL", "5551234567", "000001001");
    // The same file again (our own rerun): nothing queued. Under a new name (the partner
    // sent it again): the same answer, same ISA13, queued once more.
    site.ingest_json(&["--contrl", "always"]).code(0);
    assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), 1);
    std::fs::rename(site.drop().join("po.x12"), site.drop().join("po-again.x12")).unwrap();
    let again = site.ingest_json(&["--contrl", "always"]);
    let o = &outcomes(&again)[0];
    assert_eq!(o["status"], "duplicate");
    assert_eq!(o["contrl"], "000000001", "the first answer's ISA13: {o}");
    assert_eq!(site.count("SELECT count(*) FROM contrl_outbox"), 2);
    assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 1);
    assert_eq!(
        answer_of(&site, "ACMERETAIL", "5551234567", "000001001"),
        first
    );

    // Other content under the same ISA13: a TA1 rejecting it, 025, under our next ISA13.
    let drifted = String::from_utf8(sample(PO))
        .unwrap()
        .replace("PO-77120", "PO-1");
    std::fs::remove_file(site.drop().join("po-again.x12")).unwrap();
    site.put("po-changed.x12", drifted.as_bytes());
    let drift = site.ingest_json(&["--contrl", "always"]);
    drift.code(3);
    let o = &outcomes(&drift)[0];
    assert_eq!(o["status"], "drift");
    assert_eq!(o["contrl"], "000000002", "{o}");
    // What goes out: the first answer twice (two sendings), then the TA1 rejecting the drift.
    let out = site.path("sent");
    site.cmd()
        .args(["publish", "-q", "--kind", "contrl", "--to"])
        .arg(format!("dir:{}", out.display()))
        .assert()
        .code(0);
    let sent: Vec<String> = site
        .files_in("sent")
        .iter()
        .map(|f| std::fs::read_to_string(out.join(f)).unwrap())
        .collect();
    assert_eq!(sent.iter().filter(|b| **b == first).count(), 2, "{sent:?}");
    let rejecting: Vec<&String> = sent.iter().filter(|b| **b != first).collect();
    assert_eq!(rejecting.len(), 1, "{sent:?}");
    let segs = segments_of(rejecting[0]);
    assert_eq!(segs[0][13], "000000002");
    assert_eq!(
        segs[1],
        ["TA1", "000001001", "261201", "0930", "R", "025"],
        "{sent:?}"
    );
    // --contrl never: nothing for an X12 interchange either.
    let site = Site::new();
    site.put("inv.x12", &sample(WRAPPED));
    let o = &outcomes(&site.ingest_json(&["--contrl", "never"]))[0];
    assert!(o["contrl"].is_null(), "{o}");
}

/// The one answer stored, as its bytes.
fn only_answer(site: &Site) -> String {
    let rows =
        site.rows("SELECT standard, action, error_code, CAST(bytes AS TEXT) FROM acknowledgements");
    assert_eq!(rows.len(), 1, "one answer: {rows:?}");
    let r = &rows[0];
    assert_eq!(
        (r[0].as_deref(), r[1].as_deref()),
        (Some("x12"), Some("R")),
        "{rows:?}"
    );
    r[3].clone().unwrap()
}

#[test]
fn a_rejected_x12_interchange_is_kept_under_its_key_and_answered_by_a_ta1_and_a_997() {
    // SE01 counts 5, the set has 4: rejected at the SE. Its ISA was read, so its rejection is
    // kept under its X12 key, and a TA1 rejects it though ISA14 is `0` (rejected at its
    // envelope), TA105 `024` (invalid content: the error is in a set).
    let bad = sample("x12/broken-se-count-wrong.x12");
    let site = Site::new();
    site.put("bad.x12", &bad);
    let run = site.ingest_json(&[]);
    run.code(3);
    let r = &outcomes(&run)[0];
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(
        r["contrl"], "000000001",
        "our first ISA13 to this partner: {r}"
    );
    assert_eq!(
        site.rows("SELECT standard, sender, recipient, control_ref FROM rejections"),
        vec![vec![
            Some("x12".to_string()),
            Some("ACMERETAIL".to_string()),
            Some("5551234567".to_string()),
            Some("000004004".to_string()),
        ]],
        "the rejection under the X12 key"
    );
    let list = site.run(&["list", "--sender", "ACMERETAIL", "--json"]);
    list.code(0);
    assert!(
        list.out().contains("000004004"),
        "list --sender finds it: {list}"
    );
    let ta1 = only_answer(&site);
    let segs = segments_of(&ta1);
    let tags: Vec<&str> = segs.iter().map(|s| s[0]).collect();
    assert_eq!(tags, ["ISA", "TA1", "IEA"], "{ta1}");
    assert_eq!(
        segs[0][5..9],
        ["12", "5551234567     ", "ZZ", "ACMERETAIL     "],
        "the envelope swapped: {ta1}"
    );
    assert_eq!(segs[0][12], "00401", "the partner's version");
    assert_eq!(
        segs[1],
        ["TA1", "000004004", "261204", "1100", "R", "024"],
        "{ta1}"
    );
    // `list --contrl` says it is a negative answer, with its TA105.
    let listed = site.run(&["list", "--contrl", "--json"]);
    listed.code(0);
    let l = &listed.json()[0];
    assert_eq!(
        (&l["action"], &l["answer"]),
        (&"R".into(), &"negative".into()),
        "{l}"
    );
    pyx12_reads(&ta1);
    let human = site.run(&["list", "--contrl"]);
    assert!(
        human.out().contains("negative (R rejected, TA105 024)"),
        "{human}"
    );
    // Counted in `stats` (and its metrics) with the CONTRLs, as an event of the kind contrl.
    let stats = site.json(&["stats", "--json"]).json();
    assert_eq!(
        stats[0]["outbox_kinds"]["contrl"]["unpublished"], 1,
        "{:?}",
        stats[0]
    );

    // --contrl always: the group with the set in error rejected in a 997 (00401), the set
    // named with AK502 `4` (number of included segments does not match actual count).
    let site = Site::new();
    site.put("bad.x12", &bad);
    let run = site.ingest_json(&["--contrl", "always"]);
    run.code(3);
    let answer = only_answer(&site);
    let segs = segments_of(&answer);
    let body: Vec<Vec<&str>> = segs[1..segs.len() - 1].to_vec();
    assert_eq!(
        body,
        vec![
            vec!["TA1", "000004004", "261204", "1100", "R", "024"],
            vec![
                "GS",
                "FA",
                "5551234567",
                "ACMERETAIL",
                &segs[2][4],
                &segs[2][5],
                "1",
                "X",
                "004010"
            ],
            vec!["ST", "997", "0001"],
            vec!["AK1", "PO", "41"],
            vec!["AK2", "850", "0001"],
            vec!["AK5", "R", "4"],
            vec!["AK9", "R", "1", "1", "0"],
            vec!["SE", "6", "0001"],
            vec!["GE", "1", "1"],
        ],
        "{answer}"
    );
    // pyx12 reads it whole, the TA1 with the 997.
    pyx12_reads(&answer);
    // The edi crate, an independent reader, takes it: a 997 rejecting group 41. (edi 0.4
    // refuses any segment outside a group, so the TA1, checked above, is taken out first.)
    let ta1_at = answer.find("TA1*").expect("the TA1");
    let ta1_end = ta1_at + answer[ta1_at..].find('~').expect("its terminator") + 1;
    let without_ta1 = format!("{}{}", &answer[..ta1_at], &answer[ta1_end..]);
    let doc = edi::parse(&without_ta1).expect("the edi crate reads our 997");
    let t = &doc.interchanges[0].functional_groups[0].transactions[0];
    assert_eq!(t.transaction_code, "997");
    let ak5 = t
        .segments
        .iter()
        .find(|s| s.segment_abbreviation == "AK5")
        .unwrap();
    assert_eq!(
        ak5.elements.iter().map(|e| e.as_ref()).collect::<Vec<_>>(),
        ["R", "4"]
    );

    // An error of the interchange's own envelope (IEA02): its TA105, 001; no 997.
    let site = Site::new();
    site.put("bad.x12", &sample("x12/broken-good-then-iea-reference.x12"));
    site.ingest_json(&["--contrl", "always"]).code(3);
    let rows = site.rows("SELECT control_ref, error_code, CAST(bytes AS TEXT) FROM acknowledgements WHERE action = 'R'");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][1].as_deref(), Some("001"), "{rows:?}");
    let tags: Vec<String> = segments_of(rows[0][2].as_deref().unwrap())
        .iter()
        .map(|s| s[0].to_string())
        .collect();
    assert_eq!(tags, ["ISA", "TA1", "IEA"], "{rows:?}");
    pyx12_reads(rows[0][2].as_deref().unwrap());

    // Under --contrl never, and where the ISA itself is unreadable, nothing answers.
    let site = Site::new();
    site.put("bad.x12", &bad);
    site.put("short.x12", &sample("x12/broken-isa06-short.x12"));
    site.ingest_json(&["--contrl", "never"]).code(3);
    assert_eq!(site.count("SELECT count(*) FROM acknowledgements"), 0);
    let site = Site::new();
    site.put("short.x12", &sample("x12/broken-isa06-short.x12"));
    let o = &outcomes(&site.ingest_json(&["--contrl", "always"]))[0];
    assert!(o["contrl"].is_null(), "no ISA read, no one to answer: {o}");
}

/// An ISA read whole whose ISA13 is not nine digits, or whose ISA15 is neither `P` nor `T`:
/// the interchange is rejected, but its sender and receiver were read, so its rejection is
/// kept under its key and a TA1 rejects it with the element's note code (TA105 `018`, `020`),
/// as docs/design.md says, under the default `--contrl requested` though ISA14 is `0`.
#[test]
fn a_wrong_isa13_or_isa15_is_answered_by_a_ta1_naming_it() {
    let good = String::from_utf8(sample("x12/850-purchase-order-00401.x12")).unwrap();
    let isa = segments_of(&good)[0].clone();
    let (control, usage) = (isa[13].to_string(), format!("*{}*{}*", isa[14], isa[15]));
    assert_eq!(isa[15], "P", "the sample is a production interchange");
    for (bad, control_ref, note) in [
        (
            good.replacen(&control, "00000001A", 1)
                .replace(&format!("IEA*1*{control}"), "IEA*1*00000001A"),
            "00000001A",
            "018",
        ),
        (
            good.replacen(&usage, &usage.replace("*P*", "*X*"), 1),
            control.as_str(),
            "020",
        ),
    ] {
        let site = Site::new();
        site.put("bad.x12", bad.as_bytes());
        let run = site.ingest_json(&[]);
        run.code(3);
        let r = &outcomes(&run)[0];
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(
            (&r["standard"], &r["control_ref"]),
            (&"x12".into(), &control_ref.into()),
            "the outcome names the key its ISA gave: {r}"
        );
        assert_eq!(r["contrl"], "000000001", "answered: {r}");
        assert_eq!(
            site.rows("SELECT standard, sender, control_ref FROM rejections"),
            vec![vec![
                Some("x12".to_string()),
                Some(isa[6].trim_end().to_string()),
                Some(control_ref.to_string()),
            ]],
            "the rejection under the X12 key"
        );
        let ta1 = only_answer(&site);
        let segs = segments_of(&ta1);
        let tags: Vec<&str> = segs.iter().map(|s| s[0]).collect();
        assert_eq!(tags, ["ISA", "TA1", "IEA"], "{ta1}");
        assert_eq!(
            segs[1],
            ["TA1", control_ref, isa[9], isa[10], "R", note],
            "{ta1}"
        );
        assert_eq!(
            segs[0][15], "P",
            "our own answer is a production one: {ta1}"
        );
        let show = site.run(&["show", isa[6].trim_end(), isa[8].trim_end(), control_ref]);
        assert!(
            show.out().contains(&format!(
                "answered by X12 000000001  R rejected, TA105 {note}  at "
            )),
            "show names the answer in X12's terms: {show}"
        );
    }
}

#[test]
fn inspect_and_show_read_an_x12_set_segment_by_segment() {
    let path = crate::common::samples().join(WRAPPED);
    let run = crate::common::inspect_json(&[path.as_path(), "--segments".as_ref()]);
    run.code(0);
    let sets = run.json();
    let sets: Vec<&serde_json::Value> = sets
        .iter()
        .filter(|l| l.get("segments").is_some())
        .collect();
    assert_eq!(sets.len(), 3, "an 810 and two 856s: {run}");
    let s = sets[0];
    assert_eq!(
        (
            s["standard"].as_str(),
            s["type"].as_str(),
            s["ref"].as_str()
        ),
        (Some("x12"), Some("810"), Some("0001")),
        "{s}"
    );
    assert_eq!(s["group"], "21", "GS06: {s}");
    assert_eq!(
        s["segments"][0],
        serde_json::json!(["ST", ["810"], ["0001"]]),
        "{s}"
    );
    // ISA11 `^` repeats N104; the transport's line breaks are not in the values.
    assert_eq!(
        s["segments"][2],
        serde_json::json!(["N1", ["RE"], ["ACME RETAIL"], ["92"], [["0042"], ["0043"]]]),
        "{s}"
    );
    assert_eq!(
        s["segments"][5],
        serde_json::json!(["SE", ["6"], ["0001"]]),
        "{s}"
    );

    // show --segments reads the stored copy the same way.
    let site = Site::new();
    site.put("inv.x12", &sample(WRAPPED));
    site.ingest_json(&[]).code(0);
    let show = site.json(&[
        "show",
        "123456789",
        "HUBRECEIVER",
        "000002002",
        "--segments",
        "--json",
    ]);
    show.code(0);
    let shown = show.json();
    assert_eq!(shown.len(), 3, "{show}");
    assert_eq!(shown[0]["segments"], s["segments"]);
}

per_backend! {
    /// `list --standard`: the events of one standard's interchanges; an X12 file broken after
    /// its first interchange is listed under X12 (its error's key was read), the EDIFACT ones
    /// not; together they are the whole list.
    fn list_takes_one_standard(site) {
        site.put("po.x12", &sample("x12/850-purchase-order-00401.x12"));
        site.put("bad.x12", &sample("x12/broken-good-then-iea-reference.x12"));
        site.put("orders.edi", &sample("valid/orders-d01b-no-una.edi"));
        site.ingest_json(&[]).code(3);
        let listed = |extra: &[&str]| -> Vec<serde_json::Value> {
            let mut args = vec!["list", "--json"];
            args.extend_from_slice(extra);
            let run = site.json(&args);
            run.code(0);
            run.json()
        };
        let all = listed(&[]);
        let x12 = listed(&["--standard", "x12"]);
        let edifact = listed(&["--standard", "edifact"]);
        assert!(x12.iter().all(|l| l["standard"] == "x12"), "{x12:?}");
        assert!(edifact.iter().all(|l| l["standard"] == "edifact"), "{edifact:?}");
        assert_eq!(edifact.len(), 1, "the ORDERS interchange: {edifact:?}");
        assert!(
            x12.iter().any(|l| l["status"] == "rejected"),
            "the broken X12 file, its key read: {x12:?}"
        );
        assert_eq!(x12.len() + edifact.len(), all.len(), "{all:?}");
    }
}

/// A repeated ST02 within a group is tolerated (partners' translators number so): both sets
/// applied, and under `--contrl always` the 997 says it: the second set `E` with AK502 `23`
/// (transaction set control number not unique within the functional group), the group `E`
/// with both sets counted accepted; pyx12 reads the answer back.
#[test]
fn a_repeated_st02_is_applied_and_answered_accepted_with_errors() {
    let po = String::from_utf8(sample(PO)).unwrap();
    let again = po.replace(
        "SE*10*0001~\nGE*1*1001~",
        "SE*10*0001~\nST*850*0001~\nBEG*00*SA*PO-77121**20261201~\nSE*3*0001~\nGE*2*1001~",
    );
    assert_ne!(again, po, "the sample changed shape: {po}");
    let site = Site::new();
    site.put("po.x12", again.as_bytes());
    let run = site.ingest_json(&["--contrl", "always"]);
    run.code(0);
    let o = &outcomes(&run)[0];
    assert_eq!(
        (&o["status"], &o["messages"]),
        (&"new".into(), &2.into()),
        "{o}"
    );
    let answer = answer_of(&site, "ACMERETAIL", "5551234567", "000001001");
    let segs = segments_of(&answer);
    let body: Vec<Vec<&str>> = segs[2..segs.len() - 2].to_vec();
    assert_eq!(
        body,
        vec![
            vec!["ST", "997", "0001"],
            vec!["AK1", "PO", "1001"],
            vec!["AK2", "850", "0001"],
            vec!["AK5", "A"],
            vec!["AK2", "850", "0001"],
            vec!["AK5", "E", "23"],
            vec!["AK9", "E", "2", "2", "2"],
            vec!["SE", "8", "0001"],
        ],
        "{answer}"
    );
    pyx12_reads(&answer);
}

/// The human lines name an X12 answer as X12 does: the ingest line by our ISA13 (`answer ISA13
/// N`), `publish` by the document it carries (`997 answering ref ...`, `TA1 answering ...`),
/// `list --contrl` counts answers; a CONTRL is named only where it is one.
#[test]
fn the_human_lines_call_an_x12_answer_by_its_own_name() {
    let site = Site::new();
    site.put("po.x12", &sample(PO));
    site.put_sample("x12/broken-se-count-wrong.x12", "bad.x12");
    let run = site
        .cmd()
        .args(["ingest", "--contrl", "always"])
        .arg(site.drop())
        .run();
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    run.code(3);
    let new = text
        .lines()
        .find(|l| l.starts_with("new"))
        .unwrap_or_else(|| panic!("no new line: {text}"));
    // Ours to the partner: bad.x12 (read first) took 000000001, so 000000002.
    assert!(new.ends_with("  answer ISA13 000000002"), "{new}");
    assert!(
        !text.contains("CONTRL"),
        "an X12 run names no CONTRL: {text}"
    );

    let listed = site.run(&["list", "--contrl"]);
    let listing = String::from_utf8_lossy(&listed.stdout).into_owned();
    listed.code(0);
    assert!(
        listing.lines().last() == Some("2 answers"),
        "the footer counts answers: {listing}"
    );

    let out = site
        .cmd()
        .args(["publish", "--kind", "contrl", "--to"])
        .arg(format!("dir:{}", site.path("out").display()))
        .run();
    let published = String::from_utf8_lossy(&out.stdout).into_owned();
    out.code(0);
    let lines: Vec<&str> = published
        .lines()
        .filter(|l| l.starts_with("published"))
        .collect();
    assert_eq!(lines.len(), 2, "{published}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("997 answering ref 000001001 (sending 1)  id ")),
        "{published}"
    );
    assert!(
        lines.iter().any(
            |l| l.contains("TA1 answering ref 000004004 (sending 1)  id ")
                || l.contains("997 answering ref 000004004 (sending 1)  id ")
        ),
        "{published}"
    );
    assert!(!published.contains("CONTRL"), "{published}");
}
