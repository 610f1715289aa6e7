//! The X12 reader over real files nobody here wrote: `../shared/corpus/x12/` (its MANIFEST.tsv
//! and `x12_manifest.py`, which states the envelope rules the manifest was judged by).
//!
//! Every file is read as the manifest says: a valid file gives exactly its interchanges (ISA05,
//! ISA06, ISA07, ISA08, ISA13, the group and set counts and each set's ST01); an invalid one
//! gives the interchanges completed before its fault, then an error of the manifest's rule at a
//! byte inside the offending segment. Then the `edi` crate (0.4), an independent X12 reader,
//! reads the same files where it can, and must agree on the key and the counts.

use std::path::PathBuf;

use edi_inbox::x12::{self, Interchange, X12Error};
use serde_json::{Value, json};

use crate::corpus::{corpus, tsv};

/// The facts the manifest lists per interchange.
fn facts(i: &Interchange<'_>) -> Value {
    json!([
        i.isa.sender_qualifier.as_str(),
        i.isa.sender.as_str(),
        i.isa.receiver_qualifier.as_str(),
        i.isa.receiver.as_str(),
        i.isa.control_number.as_str(),
        i.groups.len(),
        i.sets.len(),
        i.sets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
    ])
}

/// The error code the reader gives the manifest's rule (worded by `x12_manifest.py`).
fn code_of(rule: &str) -> &'static str {
    let table = [
        ("bytes wide; the standard fixes", "isa-width"),
        ("IEA02", "iea-reference"),
        ("IEA01", "iea-count"),
        ("GE02", "ge-reference"),
        ("GE01", "ge-count"),
        ("SE02", "se-reference"),
        ("SE01", "se-count"),
        ("data after IEA", "data-after-iea"),
        ("separators are not all different", "same-separators"),
        ("the data ends before IEA", "missing-iea"),
        ("the data ends inside a segment", "unterminated"),
        ("is not a segment identifier", "bad-tag"),
    ];
    table
        .iter()
        .find(|(words, _)| rule.contains(words))
        .map_or("unknown", |(_, code)| code)
}

fn rows() -> Option<(PathBuf, Vec<std::collections::BTreeMap<String, String>>)> {
    let root = corpus()?;
    let manifest = root.join("x12/MANIFEST.tsv");
    assert!(
        manifest.is_file(),
        "{} is missing: the X12 corpus is not in the shared corpus",
        manifest.display()
    );
    Some((root.clone(), tsv(manifest)))
}

#[test]
fn the_x12_reader_agrees_with_the_manifest() {
    let Some((root, rows)) = rows() else {
        eprintln!("no corpus beside the checkout and EDI_INBOX_CORPUS unset: nothing to check");
        return;
    };
    let (mut valid, mut invalid, mut interchanges, mut contexts) = (0, 0, 0, 0);
    for row in &rows {
        let file = &row["file"];
        let data = std::fs::read(root.join(file)).unwrap();
        let mut read: Vec<Value> = Vec::new();
        let mut error: Option<X12Error> = None;
        for item in x12::interchanges(&data) {
            match item {
                Ok(i) => read.push(facts(&i)),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let want: Value =
            serde_json::from_str(&row[row.keys().find(|k| k.starts_with("interchanges")).unwrap()])
                .unwrap();
        assert_eq!(
            Value::Array(read.clone()),
            want,
            "{file}: the interchanges read before any error"
        );
        interchanges += read.len();
        match row["verdict"].as_str() {
            "valid" => {
                assert!(
                    error.is_none(),
                    "{file}: the manifest finds it valid, the reader says: {}",
                    error.unwrap()
                );
                valid += 1;
            }
            "invalid" => {
                let e = error.unwrap_or_else(|| {
                    panic!(
                        "{file}: the manifest finds `{}`, the reader no error",
                        row["rule"]
                    )
                });
                let (from, to): (usize, usize) = (
                    row["error_offset"].parse().unwrap(),
                    row["error_end"].parse().unwrap(),
                );
                assert!(
                    (from..=to).contains(&e.offset),
                    "{file}: the manifest puts `{}` at bytes {from}..{to}, the reader says: {e}",
                    row["rule"]
                );
                assert_eq!(
                    e.code(),
                    code_of(&row["rule"]),
                    "{file}: the manifest says `{}`, the reader: {e}",
                    row["rule"]
                );
                // What is kept to key and answer it: the ISA where it was read, and the
                // group and set the acknowledgement code speaks of.
                if let Some(c) = x12::rejected_contexts(&data).remove(&e.offset) {
                    assert_eq!(c.ack, e.ack_code(), "{file}");
                    match c.ack {
                        x12::AckCode::Set(_) => assert!(c.set.is_some(), "{file}: {c:?}"),
                        x12::AckCode::Group(_) => assert!(c.group.is_some(), "{file}: {c:?}"),
                        x12::AckCode::Interchange(_) => {}
                    }
                    contexts += 1;
                }
                invalid += 1;
            }
            other => panic!("{file}: verdict {other}"),
        }
    }
    eprintln!(
        "{valid} valid and {invalid} invalid X12 files read as the manifest says ({interchanges} interchanges; {contexts} rejected with their ISA read, to key and answer)"
    );
    assert!(contexts >= 10, "only {contexts} rejections kept their ISA");
    assert!(
        valid >= 100 && invalid >= 30,
        "the corpus shrank: {valid} valid, {invalid} invalid"
    );
}

/// What the `edi` crate reads of one interchange's bytes: per interchange ISA06, ISA08, ISA13
/// (trimmed), group and set counts; `None` where it cannot read them (it takes text, finds the
/// delimiters at fixed offsets 103..106, and knows no wrapped ISA), or panics.
fn read_by_edi(raw: &[u8]) -> Option<Vec<Value>> {
    let text = std::str::from_utf8(raw).ok()?;
    let read = std::panic::catch_unwind(|| {
        let doc = edi::parse(text).ok()?;
        Some(
            doc.interchanges
                .iter()
                .map(|i| {
                    json!([
                        i.sender_id.trim_end(),
                        i.receiver_id.trim_end(),
                        i.interchange_control_number.trim(),
                        i.functional_groups.len(),
                        i.functional_groups
                            .iter()
                            .map(|g| g.transactions.len())
                            .sum::<usize>(),
                    ])
                })
                .collect::<Vec<_>>(),
        )
    });
    read.ok().flatten()
}

#[test]
fn the_edi_crate_reads_the_same_keys_and_counts() {
    let Some((root, rows)) = rows() else {
        eprintln!("no corpus beside the checkout and EDI_INBOX_CORPUS unset: nothing to check");
        return;
    };
    // The edi crate panics on some input; its messages are not this test's.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut agreed, mut unread) = (0, Vec::new());
    let mut disagreements = Vec::new();
    for row in rows.iter().filter(|r| r["verdict"] == "valid") {
        let data = std::fs::read(root.join(&row["file"])).unwrap();
        for i in x12::interchanges(&data).flatten() {
            let ours = json!([
                i.isa.sender.as_str(),
                i.isa.receiver.as_str(),
                i.isa.control_number.as_str(),
                i.groups.len(),
                i.sets.len(),
            ]);
            match read_by_edi(&i.raw) {
                Some(theirs) if theirs == [ours.clone()] => agreed += 1,
                Some(theirs) => {
                    disagreements.push(format!("{}: ours {ours}, edi {theirs:?}", row["file"]))
                }
                None => unread.push(format!("{} at byte {}", row["file"], i.offset)),
            }
        }
    }
    std::panic::set_hook(hook);
    eprintln!(
        "the edi crate agrees on {agreed} interchanges, cannot read {} ({})",
        unread.len(),
        unread.join(", ")
    );
    assert!(
        disagreements.is_empty(),
        "the edi crate reads otherwise:\n{}",
        disagreements.join("\n")
    );
    assert!(
        agreed >= 60,
        "the edi crate read only {agreed} interchanges of the corpus: the cross-check proves too little"
    );
}
