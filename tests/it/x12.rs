//! ANSI X12 through the real binary (issue 41): an X12 interchange is decided as an EDIFACT one
//! is (new, then a duplicate, a drift never applied, a rejection naming its byte), keyed by
//! ISA06, ISA08 and ISA13 under its own standard, and a file of both standards is read by each
//! reader in turn.

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
